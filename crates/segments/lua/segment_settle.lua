-- Ends a borrow on the lender's slot: the in-flight record goes, and a
-- void borrow's units go back into the lender's stock, unless the stock
-- was set anew from MariaDB since the lend (another epoch), which counted
-- them already. A borrow already settled changes nothing, so a settle may
-- be repeated.
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
local units, epoch = string.match(entry, '^[^:]*:(%d+):%d+:?(.*)$')
if (epoch == '' and '0' or epoch) ~= (redis.call('HGET', KEYS[2], 'epoch') or '0') then
    return 0
end
redis.call('INCRBY', KEYS[1], units)
return tonumber(units)
