-- Dead-letters one order that could not be persisted, frees its buyer slot
-- and sets the stock from MariaDB's row (stock_from_row.lua is prepended),
-- in one step: no reader sees the order gone and its unit not yet back.
-- Once: the pending entry is the proof that nothing was given back yet (a
-- second call, from another consumer, only sets the stock again).
-- KEYS[1] stock, KEYS[2] buyers set, KEYS[3] orders stream, KEYS[4] dead
-- stream, KEYS[5] pending hash, KEYS[6] failed hash, KEYS[7] holders hash.
-- ARGV[1] stream entry id, ARGV[2] order id, ARGV[3] user id, ARGV[4]
-- voucher id, ARGV[5] reason, ARGV[6] 1 when the user holds another order
-- (the buyer slot stays taken), ARGV[7] MariaDB's stock ('' when the row is
-- gone: the stock is left alone), ARGV[8..] ids of pending orders that have
-- a row.
-- Returns {1 compensated now or 0 already done, stock before, stock after}.
local accepted = redis.call('HGET', KEYS[5], ARGV[2])
redis.call('XACK', KEYS[3], 'orders', ARGV[1])
redis.call('XDEL', KEYS[3], ARGV[1])
local compensated = 0
if accepted then
    compensated = 1
    redis.call('HDEL', KEYS[5], ARGV[2])
    if redis.call('HGET', KEYS[7], ARGV[3]) == ARGV[2] then
        redis.call('HDEL', KEYS[7], ARGV[3])
    end
    redis.call('HSET', KEYS[6], ARGV[2], accepted)
    redis.call('XADD', KEYS[4], '*', 'id', ARGV[2], 'userId', ARGV[3], 'voucherId', ARGV[4],
        'accepted', accepted, 'reason', ARGV[5])
    if redis.call('SISMEMBER', KEYS[2], '0') == 1 and ARGV[6] ~= '1' then
        redis.call('SREM', KEYS[2], ARGV[3])
    end
end
-- Not counted up blindly: the unit may be one MariaDB never had.
if ARGV[7] == '' then
    return {compensated, -1, -1}
end
local stock = stock_from_row(KEYS[1], KEYS[2], KEYS[5], tonumber(ARGV[7]), ARGV, 8)
return {compensated, stock[1], stock[2]}
