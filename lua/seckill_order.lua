-- One asynchronous seckill order, decided atomically in Redis.
-- KEYS[1] stock, KEYS[2] window hash, KEYS[3] buyers set, KEYS[4] orders
-- stream, KEYS[5] pending hash, KEYS[6] holders hash (user -> pending
-- order); all share the voucher's hash tag. Guarded vouchers only: KEYS[7]
-- the sale path's use (same tag), ARGV[6] how long to keep it (ms).
-- ARGV[1] user id, ARGV[2] order id, ARGV[3] voucher id, ARGV[4] the
-- instant (Unix ms) past which the call places nothing: its caller has
-- answered by then, and a call held in a cut link's queue and delivered
-- when the link heals must not place an order nobody was told of.
-- ARGV[5] how many segments the caller sells the voucher in: a voucher
-- found hot is split while it sells, and a caller that chose the buyer's
-- segment by another count than the segment's `layout` could let one user
-- buy in two segments.
-- Returns 0 accepted, 1 not loaded, 2 not started, 3 ended, 4 already
-- bought, 5 sold out, 6 off the shelf, 7 the path placed another order,
-- 8 arrived too late, 9 the caller's layout is older than the segment's
-- (it reads the voucher's segments again), 10 the segment is not open at
-- the caller's layout yet (a split under way: ask again in a moment).
local window = redis.call('HMGET', KEYS[2], 'begin', 'end', 'shelf', 'layout')
local stock = tonumber(redis.call('GET', KEYS[1]))
-- Never tonumber(nil) arithmetic: a voucher whose keys are missing (never
-- loaded, evicted, Redis restarted empty) is reported, and rebuilt by the
-- caller from MariaDB. The buyers set counts as loaded by its member 0.
if stock == nil or not window[1] or not window[2] or redis.call('SISMEMBER', KEYS[3], '0') == 0 then
    return 1
end
-- Keys loaded before layouts were recorded serve any caller.
local layout = tonumber(window[4])
if layout and layout ~= tonumber(ARGV[5]) then
    if layout > tonumber(ARGV[5]) then return 9 end
    return 10
end
-- A path places one order. Before the buyer check, so a path replayed
-- after its order is refused as used, not answered as a duplicate; its
-- own order id passes, so a retry after a lost answer finds its order.
local spent = KEYS[7] and redis.call('GET', KEYS[7])
if spent and spent ~= ARGV[2] then return 7 end
-- One clock for every instance: Redis's.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[4] and now > tonumber(ARGV[4]) then return 8 end
-- A buyer first: a retry of an order whose first answer was lost must
-- find the order it placed, even once the window has ended, the stock run
-- out or the voucher gone off the shelf (the caller then answers with the
-- order, not with ENDED).
if redis.call('SISMEMBER', KEYS[3], ARGV[1]) == 1 then return 4 end
-- The voucher's tb_voucher.status, kept by the load and by the admin route.
if window[3] and window[3] ~= '1' then return 6 end
if now < tonumber(window[1]) then return 2 end
if now >= tonumber(window[2]) then return 3 end
if stock <= 0 then return 5 end
redis.call('DECR', KEYS[1])
redis.call('SADD', KEYS[3], ARGV[1])
redis.call('XADD', KEYS[4], '*', 'id', ARGV[2], 'userId', ARGV[1], 'voucherId', ARGV[3], 'ts', now)
redis.call('HSET', KEYS[5], ARGV[2], ARGV[1] .. ':' .. now)
redis.call('HSET', KEYS[6], ARGV[1], ARGV[2])
if KEYS[7] then redis.call('SET', KEYS[7], ARGV[2], 'PX', ARGV[6]) end
return 0
