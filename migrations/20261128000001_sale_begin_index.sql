-- Each instance of the synchronous mode reads, once a second, the sales
-- opening within the next ten minutes (their windows and stock), so that
-- the opening of many sales at the same second finds every voucher
-- already known and no buyer's order waits on a first read. This index
-- keeps that read to those sales, however many have ended or are
-- scheduled further ahead.
ALTER TABLE tb_seckill_voucher ADD INDEX IF NOT EXISTS idx_sale_begin (begin_time);
