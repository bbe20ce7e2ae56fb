-- Records as FAILED an order answered 202 that Redis no longer holds: it
-- was accepted by a master that was cut off and then demoted, and the
-- replica promoted in its place never saw it. The caller holds the
-- voucher's row lock and found no row for it, so no consumer can be
-- persisting it. Its unit needs no giving back: neither this master nor
-- MariaDB ever took it.
-- KEYS[1] pending hash, KEYS[2] failed hash.
-- ARGV[1] order id, ARGV[2] `<userId>:<ts ms>` (what the failed hash holds).
-- Returns 1 recorded now, 0 when it is pending after all (nothing
-- changed), 2 when it was FAILED already.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
    return 0
end
if redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2]) == 0 then
    return 2
end
return 1
