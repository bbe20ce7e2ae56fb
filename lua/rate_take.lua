-- Takes one of a fixed window's places, or refuses: the check and the count
-- are one step, so N callers at once never count past the limit (a check
-- followed by a separate increment let a burst through before any of its
-- counts landed).
-- KEYS[1] rate:<what>:<subject>   ARGV[1] the limit   ARGV[2] the window, s
-- Returns {1 taken or 0 refused, seconds the window has left}.
local held = tonumber(redis.call('GET', KEYS[1]) or '0')
if held >= tonumber(ARGV[1]) then
    return {0, redis.call('TTL', KEYS[1])}
end
redis.call('INCR', KEYS[1])
redis.call('EXPIRE', KEYS[1], ARGV[2], 'NX')
return {1, redis.call('TTL', KEYS[1])}
