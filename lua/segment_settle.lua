-- Ends a borrow on the lender's slot: the in-flight record goes, and a
-- void borrow's units go back into the lender's stock. A borrow already
-- settled changes nothing, so a settle may be repeated.
-- KEYS[1] the lender's stock, KEYS[2] its lent hash.
-- ARGV[1] borrow id, ARGV[2] 1 credited, 0 void.
-- Returns the units returned to the lender's stock.
local entry = redis.call('HGET', KEYS[2], ARGV[1])
if not entry then
    return 0
end
redis.call('HDEL', KEYS[2], ARGV[1])
if ARGV[2] == '1' then
    return 0
end
local units = tonumber(string.match(entry, '^[^:]*:(%d+):'))
redis.call('INCRBY', KEYS[1], units)
return units
