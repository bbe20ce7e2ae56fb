-- The borrows a lender has had in flight for at least ARGV[1] ms, by
-- Redis's clock: a live borrow settles within milliseconds, so these are
-- the ones whose borrower died between the two halves.
-- KEYS[1] the lender's lent hash.
-- Returns a flat list: borrow id, "<borrower>:<units>:<ms>:<epoch>", ...
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local overdue = {}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
    local at = tonumber(string.match(all[i + 1], '^[^:]*:[^:]*:(%d+)'))
    if all[i] ~= 'moves' and all[i] ~= 'epoch' and at and now - at >= tonumber(ARGV[1]) then
        table.insert(overdue, all[i])
        table.insert(overdue, all[i + 1])
    end
end
return overdue
