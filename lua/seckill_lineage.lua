-- The replication history (master_replid) of the master serving a voucher's
-- slot, and the one its keys were last learnt under (the window hash's
-- `lineage`, which replicates with the keys: a promoted replica holds its
-- old master's). Keys loaded by a version that kept no lineage adopt the
-- current one; ARGV[1], when it is the current one, records that the keys
-- were learnt again under it. Keys not loaded are left alone (their load
-- reads MariaDB).
-- KEYS[1] the window hash. ARGV[1] the history relearnt under, or ''.
-- Returns {master_replid, the lineage recorded before ('' if none)}.
local replid = string.match(redis.call('INFO', 'replication'), 'master_replid:(%x+)')
if not replid then
    return redis.error_reply('ERR INFO replication names no master_replid')
end
if redis.call('EXISTS', KEYS[1]) == 0 then
    return {replid, ''}
end
local recorded = redis.call('HGET', KEYS[1], 'lineage')
if not recorded or recorded == '' or ARGV[1] == replid then
    redis.call('HSET', KEYS[1], 'lineage', replid)
end
return {replid, recorded or ''}
