-- Loads (or reloads) one voucher's keys from a MariaDB snapshot, once: when
-- another instance has loaded them meanwhile, nothing is changed.
-- KEYS[1] stock, KEYS[2] window hash, KEYS[3] buyers set, KEYS[4] orders
-- stream, KEYS[5] staged buyers (a set the caller filled, or absent).
-- ARGV[1] stock, ARGV[2] begin ms, ARGV[3] end ms, ARGV[4] tb_voucher.status.
-- Returns 1 loaded now, 0 already loaded.
local loaded = redis.call('EXISTS', KEYS[1]) == 1
    and redis.call('HEXISTS', KEYS[2], 'end') == 1
    and redis.call('SISMEMBER', KEYS[3], '0') == 1
if loaded then
    redis.call('DEL', KEYS[5])
    return 0
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], 'begin', ARGV[2], 'end', ARGV[3], 'shelf', ARGV[4])
if redis.call('EXISTS', KEYS[5]) == 1 then
    redis.call('RENAME', KEYS[5], KEYS[3])
else
    redis.call('DEL', KEYS[3])
end
redis.call('SADD', KEYS[3], '0')
-- The group exists before any order is accepted: never a NOGROUP.
local created = redis.pcall('XGROUP', 'CREATE', KEYS[4], 'orders', '0', 'MKSTREAM')
if type(created) == 'table' and created.err and not string.find(created.err, 'BUSYGROUP') then
    return redis.error_reply(created.err)
end
return 1
