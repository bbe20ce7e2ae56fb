-- Prepended to the scripts that set a voucher's Redis stock from MariaDB's
-- row (seckill_converge, seckill_compensate): what MariaDB has left, less
-- the orders Redis accepted that MariaDB does not hold yet (every pending
-- order but those the caller found with their row). The caller holds the
-- voucher's row lock, so no order is persisted meanwhile.
-- argv[first..] are the ids of pending orders that have a row.
-- Returns {stock before, stock after, units short: how far the orders
-- waiting exceed db_stock, which the stock cannot go below 0 for}, or
-- {-1, -1, 0} when the keys are not loaded (the load reads MariaDB itself).
local function stock_from_row(stock_key, buyers_key, pending_key, db_stock, argv, first)
    if redis.call('EXISTS', stock_key) == 0 or redis.call('SISMEMBER', buyers_key, '0') == 0 then
        return {-1, -1, 0}
    end
    local unpersisted = redis.call('HLEN', pending_key)
    for i = first, #argv do
        if redis.call('HEXISTS', pending_key, argv[i]) == 1 then
            unpersisted = unpersisted - 1
        end
    end
    local before = tonumber(redis.call('GET', stock_key))
    local stock = db_stock - unpersisted
    local short = 0
    if stock < 0 then
        short = -stock
        stock = 0
    end
    redis.call('SET', stock_key, stock)
    return {before, stock, short}
end
