-- Owner-checked lease renewal (the watchdog's step).
-- KEYS[1]  the lock hash
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner
-- Returns 1 when renewed, 0 when the owner no longer holds the lock.
if redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then
    redis.call('PEXPIRE', KEYS[1], ARGV[1])
    return 1
end
return 0
