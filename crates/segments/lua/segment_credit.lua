-- The second half of a borrow, on the borrower's slot: the units join its
-- stock, once. A borrow that recovery voided first (segment_void.lua) is
-- not credited: the lender takes those units back instead. Nor is one
-- lent before the borrower's stock was set anew from MariaDB (another
-- epoch): that setting counted the units already.
-- KEYS[1] the borrower's stock, KEYS[2] its received hash (borrow id -> 1
-- credited, 0 void), KEYS[3] its lent hash (for its `epoch`).
-- ARGV[1] borrow id, ARGV[2] units, ARGV[3] the lender's epoch at the lend.
-- Returns 1 credited (now or before), 0 void.
local seen = redis.call('HGET', KEYS[2], ARGV[1])
if seen then
    return tonumber(seen)
end
if (redis.call('HGET', KEYS[3], 'epoch') or '0') ~= ARGV[3] then
    redis.call('HSET', KEYS[2], ARGV[1], 0)
    return 0
end
redis.call('HSET', KEYS[2], ARGV[1], 1)
redis.call('INCRBY', KEYS[1], ARGV[2])
return 1
