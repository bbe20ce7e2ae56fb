-- A seckill voucher may be sold in segments (asynchronous mode): its stock
-- split over several Redis hash tags, so that on a Redis Cluster one hot
-- voucher is served by several masters. The tags are chosen at creation
-- from the cluster's slot map and recorded here, so that every instance
-- and every consumer agrees on them even after the cluster is resharded.
-- segment_tags lists the tags of segments 1..segments-1, comma-separated;
-- segment 0's tag is the voucher id itself (the keys a voucher of one
-- segment always had), so a voucher of one segment has '' here.
ALTER TABLE tb_seckill_voucher
    ADD COLUMN IF NOT EXISTS segments TINYINT UNSIGNED NOT NULL DEFAULT 1
        COMMENT 'how many segments the stock is sold in (asynchronous mode), 1 to 16',
    ADD COLUMN IF NOT EXISTS segment_tags VARCHAR(512) NOT NULL DEFAULT ''
        COMMENT 'Redis hash tags of segments 1.., comma-separated',
    ADD CONSTRAINT IF NOT EXISTS ck_seckill_segments CHECK (segments BETWEEN 1 AND 16);
