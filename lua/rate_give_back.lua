-- Gives back a place taken for a failure that did not happen (the right
-- code, a code that could not be sent). The window keeps its TTL; a window
-- that ended meanwhile is left alone.
-- KEYS[1] rate:<what>:<subject>
local held = tonumber(redis.call('GET', KEYS[1]) or '0')
if held > 0 then
    return redis.call('DECR', KEYS[1])
end
return 0
