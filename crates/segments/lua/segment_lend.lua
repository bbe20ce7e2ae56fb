-- The first half of a borrow, on the lender's slot: units leave its stock
-- and are recorded as in flight under the borrow's id, so that a crash
-- before the borrower is credited returns them (segment_settle.lua).
-- KEYS[1] the lender's stock, KEYS[2] its lent hash (borrow id ->
-- "<borrower>:<units>:<ms>:<epoch>", plus the fields `moves`, a count of
-- lends, and `epoch`, set whenever the stock is set anew from MariaDB).
-- ARGV[1] borrow id, ARGV[2] the borrower's segment, ARGV[3] units wanted.
-- Returns {units lent (0 when the lender has none left), the lender's
-- epoch}: the credit lands only in a borrower of the same epoch.
local stock = tonumber(redis.call('GET', KEYS[1]) or '0')
local epoch = redis.call('HGET', KEYS[2], 'epoch') or '0'
if stock == nil or stock <= 0 then
    return {0, epoch}
end
local units = math.min(stock, tonumber(ARGV[3]))
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('DECRBY', KEYS[1], units)
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2] .. ':' .. units .. ':' .. now .. ':' .. epoch)
redis.call('HINCRBY', KEYS[2], 'moves', 1)
return {units, epoch}
