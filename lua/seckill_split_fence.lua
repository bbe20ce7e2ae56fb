-- Segment 0 of a voucher being split takes the new layout: from this call
-- on it refuses every order routed by the old one (seckill_order.lua), so
-- its buyers set stops taking users who now belong to another segment.
-- The first call also records when the split took effect and the units
-- left then (every unit was in segment 0 until now), for the operator and
-- the bench; a split finished by another instance keeps them.
-- KEYS[1] segment 0's window hash, KEYS[2] its stock. ARGV[1] the layout.
-- Returns {the Unix ms the split took effect, the units left then}.
redis.call('HSET', KEYS[1], 'layout', ARGV[1])
if redis.call('HEXISTS', KEYS[1], 'split_at') == 0 then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    redis.call('HSET', KEYS[1], 'split_at', now, 'split_units_left', tonumber(redis.call('GET', KEYS[2]) or '0'))
end
local recorded = redis.call('HMGET', KEYS[1], 'split_at', 'split_units_left')
return {tonumber(recorded[1]), tonumber(recorded[2])}
