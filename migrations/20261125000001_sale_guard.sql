-- A seckill voucher's guard against bots and its admission rate.
-- sale_guard: 'none' (the order route as it always was), 'path' (an order
-- needs a signed, single-use path asked for first) or 'challenge' (the
-- path is given only for a solved proof-of-work challenge).
-- admit_per_second: buyers a guarded voucher admits per second before the
-- others wait in line; NULL takes the stack's default
-- (SALE_ADMIT_PER_SECOND).
ALTER TABLE tb_seckill_voucher
    ADD COLUMN IF NOT EXISTS sale_guard VARCHAR(16) NOT NULL DEFAULT 'none'
        COMMENT 'none, path or challenge',
    ADD COLUMN IF NOT EXISTS admit_per_second INT UNSIGNED NULL
        COMMENT 'buyers admitted per second; NULL: the stack default',
    ADD CONSTRAINT IF NOT EXISTS ck_seckill_guard CHECK (sale_guard IN ('none', 'path', 'challenge'));

-- Sale paths spent by the synchronous mode's orders: the path's id is
-- inserted in the order's own transaction, so a path places one order at
-- most. Rows past their expiry are deleted by the after-sale rounds.
CREATE TABLE IF NOT EXISTS tb_seckill_path_use (
    path_id BIGINT UNSIGNED NOT NULL,
    expires_at DATETIME(3) NOT NULL,
    PRIMARY KEY (path_id),
    KEY idx_path_use_expires (expires_at)
) ENGINE = InnoDB;
