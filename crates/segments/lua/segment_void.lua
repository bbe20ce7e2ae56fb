-- Recovery's question to the borrower's slot about a borrow still in
-- flight: was it credited? If not, it never will be (it is marked void
-- here, atomically with the answer), so the lender may take it back.
-- KEYS[1] the borrower's received hash. ARGV[1] borrow id.
-- Returns 1 credited, 0 void.
redis.call('HSETNX', KEYS[1], ARGV[1], 0)
return tonumber(redis.call('HGET', KEYS[1], ARGV[1]))
