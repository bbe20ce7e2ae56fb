-- Owner-checked unlock of a reentrant lock.
-- KEYS[1]  the lock hash
-- ARGV[1]  owner
-- ARGV[2]  lease in milliseconds, re-armed while holds remain
-- ARGV[3]  the channel that wakes waiters (a channel, not a key)
-- Returns -1 when ARGV[1] holds nothing (never was, already released, or
-- the lease ran out), else the holds left; at 0 the lock is gone and
-- waiters have been told.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
    return -1
end
local holds = redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
if holds > 0 then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return holds
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[3], 'released')
return 0
