-- Retires a voucher whose sale has ended and drained: its working keys get
-- a TTL instead of staying for ever, its failed orders and dead letters a
-- longer one, so a buyer can still read FAILED for a week.
-- KEYS[1..8] the voucher's keys in the order of SeckillKeys::all (stock,
-- window hash, buyers, orders stream, pending hash, holders hash: the
-- working keys; failed hash, dead stream: kept longer), KEYS[9..] more
-- working keys (a segment's lent and received hashes).
-- ARGV[1] the sale's end, epoch ms (MariaDB's: the window hash may be gone),
-- ARGV[2] how long after the end a sale is retired, ms, ARGV[3] how long
-- the working keys stay after that, ms, ARGV[4] how long failed orders and
-- dead letters stay, ms, ARGV[5] the least the orders stream stays, ms: a
-- consumer's round that chose the stream before it left seckill:active
-- still reads it (a read of a stream gone fails the whole round, and
-- making its group again would bring the key back with no TTL).
-- Returns 1 retired (the caller drops it from seckill:active), 0 not yet.
if redis.call('HLEN', KEYS[5]) > 0 then
    return 0
end
if redis.call('EXISTS', KEYS[4]) == 1 and redis.call('XLEN', KEYS[4]) > 0 then
    return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now < tonumber(ARGV[1]) + tonumber(ARGV[2]) then
    return 0
end
for i = 1, #KEYS do
    if (i <= 6 or i > 8) and redis.call('PTTL', KEYS[i]) == -1 then
        local kept = tonumber(ARGV[3])
        if i == 4 then kept = math.max(kept, tonumber(ARGV[5])) end
        redis.call('PEXPIRE', KEYS[i], kept)
    end
end
for i = 7, 8 do
    if redis.call('PTTL', KEYS[i]) == -1 then
        redis.call('PEXPIRE', KEYS[i], ARGV[4])
    end
end
return 1
