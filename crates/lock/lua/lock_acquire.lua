-- Acquire or re-enter a reentrant lock (Redisson's RLock data model).
-- KEYS[1]  the lock hash: owner field -> hold count
-- KEYS[2]  the lock's fencing counter (same hash tag as KEYS[1])
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner: "<instance uuid>:<holder id>"
-- Returns {1, fence}         first acquisition; fence from INCR KEYS[2]
--         {2, fence, holds}  re-entry by the same owner; fence of this hold
--         {0, pttl}          held by another owner; pttl in milliseconds
if redis.call('EXISTS', KEYS[1]) == 0 then
    redis.call('HSET', KEYS[1], ARGV[2], 1)
    redis.call('PEXPIRE', KEYS[1], ARGV[1])
    local fence = redis.call('INCR', KEYS[2])
    -- A user who stops ordering leaves no key behind for good: the counter
    -- goes a week after its last use. Fences are compared only among
    -- holders whose leases (seconds) overlap, so a counter that starts
    -- again after a week of silence fences nothing wrongly.
    redis.call('PEXPIRE', KEYS[2], 604800000)
    return {1, fence}
end
if redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then
    local holds = redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
    redis.call('PEXPIRE', KEYS[1], ARGV[1])
    -- Nobody else can INCR while we hold the lock: the counter is our fence.
    return {2, tonumber(redis.call('GET', KEYS[2]) or '0'), holds}
end
return {0, redis.call('PTTL', KEYS[1])}
