-- Reserves the next ARGV[1] values of a day's order id sequence and returns
-- the last of them. The counter only grows within one replication history
-- (one master and the replicas it fed); a failover starts another (a
-- promoted replica's master_replid is new), whose counter lacks what the
-- old master answered and never passed on. So the counter keeps beside it
-- the history its last reservation was made under, and the first
-- reservation under another first raises the counter by ARGV[2], more than
-- an old master can hand out unreplicated: in this same step, so that no
-- reservation of the new history lands below the gap. A day's first
-- reservation (no marker yet) takes the gap too: the day's counter may
-- have begun on a master that is gone.
-- KEYS[1] icr:order:<day>, KEYS[2] {icr:order:<day>}:lineage (same slot).
-- ARGV[1] the block, ARGV[2] the gap, ARGV[3] the keys' time to live (s).
local replid = string.match(redis.call('INFO', 'replication'), 'master_replid:(%x+)')
if not replid then
    return redis.error_reply('ERR INFO replication names no master_replid')
end
if redis.call('GET', KEYS[2]) ~= replid then
    redis.call('INCRBY', KEYS[1], ARGV[2])
    redis.call('SET', KEYS[2], replid)
end
local last = redis.call('INCRBY', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('EXPIRE', KEYS[2], ARGV[3])
return last
