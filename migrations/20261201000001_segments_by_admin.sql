-- A voucher found hot during its sale is split into segments by the
-- service (asynchronous mode), unless its admin chose its segments: the
-- detection never fights a setting. Vouchers made before this column
-- count as not set by hand; a voucher of several segments is never split
-- again either way.
ALTER TABLE tb_seckill_voucher
    ADD COLUMN IF NOT EXISTS segments_by_admin BOOLEAN NOT NULL DEFAULT FALSE
        COMMENT 'the admin chose the segments (POST /voucher/seckill with segments): never split on its own';
