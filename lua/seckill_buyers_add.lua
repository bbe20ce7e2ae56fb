-- Adds users whose orders MariaDB holds to a voucher's buyers set, when
-- the set is loaded (it carries member 0): a set not loaded is left to
-- the load, which reads MariaDB itself.
-- KEYS[1] buyers set. ARGV the user ids.
-- Returns how many were missing, or -1 when the set is not loaded.
if redis.call('SISMEMBER', KEYS[1], '0') == 0 then
    return -1
end
return redis.call('SADD', KEYS[1], unpack(ARGV))
