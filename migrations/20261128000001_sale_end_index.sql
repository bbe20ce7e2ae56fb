-- Each instance of the synchronous mode reads, once a second, the sales
-- about to open or still on sale (their windows and stock), so that the
-- opening instant of many sales finds every voucher already known and no
-- buyer's order waits on a first read. The vouchers that have not ended
-- are a handful of the table's rows after a year of sales: this index
-- keeps that read to them.
ALTER TABLE tb_seckill_voucher ADD INDEX IF NOT EXISTS idx_sale_end (end_time);
