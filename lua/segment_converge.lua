-- Sets one segment of a voucher sold in segments from MariaDB's row
-- (stock_from_row.lua is prepended): its share of the row, less the orders
-- it accepted that MariaDB does not hold yet. The segment gets a new epoch
-- (crates/segments/lua/segment_credit.lua, segment_settle.lua): a borrow lent before this is
-- neither credited after it nor returned into the stock set here, which
-- counts its units already. The lend counter moves too, so that no reading
-- taken across this call passes for one instant's.
-- KEYS[1] stock, KEYS[2] buyers set, KEYS[3] pending hash, KEYS[4] lent
-- hash; all under the segment's hash tag.
-- ARGV[1] the segment's share of the row (its orders waiting included),
-- ARGV[2] the new epoch, ARGV[3..] ids of pending orders that have a row.
-- Returns {stock before, stock after, units short}, {-1, -1, 0} when the
-- segment is not loaded.
local stock = stock_from_row(KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[1]), ARGV, 3)
if stock[2] < 0 then
    return stock
end
redis.call('HSET', KEYS[4], 'epoch', ARGV[2])
redis.call('HINCRBY', KEYS[4], 'moves', 1)
return stock
