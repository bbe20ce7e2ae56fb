-- Dead-letters one order that could not be persisted and gives back what
-- it took, once: the pending entry is the proof that nothing was given back
-- yet (a second call, from another consumer, changes nothing).
-- KEYS[1] stock, KEYS[2] buyers set, KEYS[3] orders stream, KEYS[4] dead
-- stream, KEYS[5] pending hash, KEYS[6] failed hash.
-- ARGV[1] stream entry id, ARGV[2] order id, ARGV[3] user id, ARGV[4]
-- voucher id, ARGV[5] reason, ARGV[6] 1 when the user holds another order
-- (the buyer slot stays taken).
-- Returns 1 compensated now, 0 already done.
local accepted = redis.call('HGET', KEYS[5], ARGV[2])
redis.call('XACK', KEYS[3], 'orders', ARGV[1])
redis.call('XDEL', KEYS[3], ARGV[1])
if not accepted then return 0 end
redis.call('HDEL', KEYS[5], ARGV[2])
redis.call('HSET', KEYS[6], ARGV[2], accepted)
redis.call('XADD', KEYS[4], '*', 'id', ARGV[2], 'userId', ARGV[3], 'voucherId', ARGV[4],
    'accepted', accepted, 'reason', ARGV[5])
-- Only into loaded keys: a stock key created here by INCR would look
-- loaded, and a reload from MariaDB counts this order as given back anyway.
if redis.call('SISMEMBER', KEYS[2], '0') == 1 and redis.call('EXISTS', KEYS[1]) == 1 then
    if ARGV[6] == '1' then
        redis.call('INCR', KEYS[1])
    elseif redis.call('SREM', KEYS[2], ARGV[3]) == 1 then
        redis.call('INCR', KEYS[1])
    end
end
return 1
