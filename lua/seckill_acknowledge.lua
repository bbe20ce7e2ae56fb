-- Takes persisted orders off their voucher's stream and out of its pending
-- and holders hashes, in one step.
-- The stream is trimmed instead of each entry deleted: XDEL looks every id
-- up inside its node (a batch of 150 cost Redis about a millisecond, more
-- than the order scripts that queued it), while XTRIM MINID drops whole
-- nodes from the head. Everything older than the oldest entry still
-- pending (delivered, not acknowledged) goes; with none pending,
-- everything the group was delivered. Entries not yet delivered are newer
-- than both, so they stay.
-- KEYS[1] orders stream, KEYS[2] pending hash, KEYS[3] holders hash.
-- ARGV[1] the group, ARGV[2] n, then n stream ids, n order ids, n user ids.
-- A holder entry goes only if it names the order acknowledged: the user
-- may hold a newer order by now (theirs was taken along by a demoted
-- master, and they bought again).
-- Returns how many entries the trim took off.
local n = tonumber(ARGV[2])
local function slice(from)
    local items = {}
    for i = 1, n do items[i] = ARGV[from + i - 1] end
    return items
end
if n > 0 then
    redis.call('XACK', KEYS[1], ARGV[1], unpack(slice(3)))
    redis.call('HDEL', KEYS[2], unpack(slice(3 + n)))
    for i = 1, n do
        local user = ARGV[2 + 2 * n + i]
        if redis.call('HGET', KEYS[3], user) == ARGV[2 + n + i] then
            redis.call('HDEL', KEYS[3], user)
        end
    end
end
local pending = redis.call('XPENDING', KEYS[1], ARGV[1])
local keep
if pending[1] > 0 then
    keep = pending[2]
else
    local delivered
    for _, group in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
        local fields = {}
        for i = 1, #group, 2 do fields[group[i]] = group[i + 1] end
        if fields['name'] == ARGV[1] then delivered = fields['last-delivered-id'] end
    end
    if not delivered then return 0 end
    local ms, seq = string.match(delivered, '^(%d+)-(%d+)$')
    keep = ms .. '-' .. string.format('%d', tonumber(seq) + 1)
end
return redis.call('XTRIM', KEYS[1], 'MINID', keep)
