-- One live order per user and voucher, instead of one order for ever: a
-- user whose order was cancelled (by them or by the unpaid timeout) or
-- refunded may buy the voucher again. The database keeps the last word:
-- live_voucher is the voucher while the order lives and NULL once it is
-- cancelled (4) or refunded (6), and a UNIQUE index allows any number of
-- NULLs. The index keeps its name, which the service maps to
-- DUPLICATE_ORDER. A course database that lacked the index gets it here
-- (or, holding two orders of one user for one voucher, fails to start).
ALTER TABLE tb_voucher_order
    ADD COLUMN IF NOT EXISTS live_voucher BIGINT UNSIGNED AS (IF(status IN (4, 6), NULL, voucher_id)) PERSISTENT
        COMMENT 'voucher_id while the order is live, NULL once cancelled or refunded',
    DROP INDEX IF EXISTS uk_user_voucher,
    ADD UNIQUE KEY uk_user_voucher (user_id, live_voucher),
    -- The unpaid-timeout sweep finds the vouchers with expired unpaid
    -- orders, then locks one voucher's: only those rows (and the gap after
    -- them), not every order of the voucher nor every unpaid order.
    ADD KEY IF NOT EXISTS idx_unpaid (status, create_time),
    DROP INDEX IF EXISTS idx_voucher,
    ADD KEY IF NOT EXISTS idx_voucher_unpaid (voucher_id, status, create_time);
