-- One unit of one segment for one user, without borrowing: the whole
-- order of the lab's segmented strategy and of the tests of borrowing (the
-- service's order script does the same in a segment, with the window, the
-- stream and the pending order besides).
-- KEYS[1] the segment's stock, KEYS[2] its buyers set. ARGV[1] user id.
-- Returns 1 taken, 2 already bought, 0 this segment is dry.
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then
    return 2
end
local stock = tonumber(redis.call('GET', KEYS[1]) or '0')
if stock == nil or stock <= 0 then
    return 0
end
redis.call('DECR', KEYS[1])
redis.call('SADD', KEYS[2], ARGV[1])
return 1
