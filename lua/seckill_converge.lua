-- Sets a voucher's Redis stock from MariaDB's row (stock_from_row.lua is
-- prepended).
-- KEYS[1] stock, KEYS[2] buyers set, KEYS[3] pending hash.
-- ARGV[1] MariaDB's stock, ARGV[2..] ids of pending orders that have a row.
-- Returns {stock before, stock after}, {-1, -1} when not loaded.
local stock = stock_from_row(KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[1]), ARGV, 2)
return {stock[1], stock[2]}
