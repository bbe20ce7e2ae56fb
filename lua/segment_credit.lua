-- The second half of a borrow, on the borrower's slot: the units join its
-- stock, once. A borrow that recovery voided first (segment_void.lua) is
-- not credited: the lender takes those units back instead.
-- KEYS[1] the borrower's stock, KEYS[2] its received hash (borrow id -> 1
-- credited, 0 void).
-- ARGV[1] borrow id, ARGV[2] units.
-- Returns 1 credited (now or before), 0 void.
local seen = redis.call('HGET', KEYS[2], ARGV[1])
if seen then
    return tonumber(seen)
end
redis.call('HSET', KEYS[2], ARGV[1], 1)
redis.call('INCRBY', KEYS[1], ARGV[2])
return 1
