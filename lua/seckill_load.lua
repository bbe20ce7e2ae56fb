-- Loads (or reloads) one voucher's keys from a MariaDB snapshot, once: when
-- another instance has loaded them meanwhile, nothing is changed. Keys made
-- for another voucher under the same id (a Redis that outlived its
-- database) are wiped and loaded again. stock_from_row.lua is prepended.
-- KEYS[1..8] the voucher's keys in the order of SeckillKeys::all (stock,
-- window hash, buyers set, orders stream, pending hash, holders hash,
-- failed hash, dead stream), KEYS[9] staged buyers (a set the caller
-- filled, or absent).
-- ARGV[1] MariaDB's stock, ARGV[2] begin ms, ARGV[3] end ms, ARGV[4]
-- tb_voucher.status, ARGV[5] the voucher's stamp (what it was made as),
-- ARGV[6] the layout the keys serve (how many segments the voucher is sold
-- in; 0 for a segment a split made and has not opened yet), ARGV[7..] ids
-- of pending orders that have a row.
-- Returns {1 loaded now, 0 already loaded, 2 wiped (made for another) and
-- loaded now; the stock set}.
local made = redis.call('HGET', KEYS[2], 'made')
local loaded = redis.call('EXISTS', KEYS[1]) == 1
    and redis.call('HEXISTS', KEYS[2], 'end') == 1
    and redis.call('SISMEMBER', KEYS[3], '0') == 1
if loaded and (not made or made == ARGV[5]) then
    redis.call('DEL', KEYS[9])
    if not made then
        redis.call('HSET', KEYS[2], 'made', ARGV[5])
    end
    return {0, tonumber(redis.call('GET', KEYS[1]))}
end
local outcome = 1
if made and made ~= ARGV[5] then
    -- Another voucher's keys: its buyers, pending orders and dead letters
    -- are not this voucher's.
    for i = 1, 8 do
        if i ~= 2 then
            redis.call('DEL', KEYS[i])
        end
    end
    outcome = 2
end
-- The replication history the keys are learnt under (seckill_lineage.lua):
-- a replica promoted in this master's place holds it, and learns again.
local lineage = string.match(redis.call('INFO', 'replication'), 'master_replid:(%x+)') or ''
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], 'begin', ARGV[2], 'end', ARGV[3], 'shelf', ARGV[4], 'made', ARGV[5], 'lineage', lineage,
    'layout', ARGV[6])
if redis.call('EXISTS', KEYS[9]) == 1 then
    redis.call('RENAME', KEYS[9], KEYS[3])
else
    redis.call('DEL', KEYS[3])
end
redis.call('SADD', KEYS[3], '0')
-- The stock counted here, atomically, from MariaDB's and the pending hash
-- as it is now: an order dead-lettered since the caller read the pending
-- hash is not counted as waiting for a unit.
redis.call('SET', KEYS[1], 0)
local stock = stock_from_row(KEYS[1], KEYS[3], KEYS[5], tonumber(ARGV[1]), ARGV, 7)
-- The group exists before any order is accepted: never a NOGROUP.
local created = redis.pcall('XGROUP', 'CREATE', KEYS[4], 'orders', '0', 'MKSTREAM')
if type(created) == 'table' and created.err and not string.find(created.err, 'BUSYGROUP') then
    return redis.error_reply(created.err)
end
return {outcome, stock[2]}
