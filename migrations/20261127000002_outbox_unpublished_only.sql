-- The outbox holds only events not yet published: the relay deletes what
-- the broker acknowledged, so the table is its backlog, read in seq order
-- on the primary key alone. Each index an event row carries is paid on
-- every order twice (insert, delete), and the two the first outbox had
-- made an order measurably dearer: the event's identity, (order_id,
-- type), is enforced downstream instead (the broker's duplicate window and
-- the consumer's inbox, both keyed by it), and published events kept for
-- a replay from MariaDB (OUTBOX_RETENTION_S above 0) move to a table of
-- their own, which only that setting pays for.
ALTER TABLE tb_order_outbox
    DROP INDEX IF EXISTS uk_outbox_event,
    DROP INDEX IF EXISTS idx_outbox_published,
    DROP COLUMN IF EXISTS published_at;

CREATE TABLE IF NOT EXISTS tb_order_outbox_published (
    seq          BIGINT UNSIGNED NOT NULL,
    order_id     BIGINT          NOT NULL,
    user_id      BIGINT UNSIGNED NOT NULL,
    voucher_id   BIGINT UNSIGNED NOT NULL,
    type         VARCHAR(16)     NOT NULL,
    state        VARCHAR(16)     NOT NULL,
    occurred_at  DATETIME(6)     NOT NULL,
    published_at DATETIME(6)     NOT NULL,
    PRIMARY KEY (seq),
    KEY idx_outbox_published_at (published_at),
    KEY idx_outbox_published_voucher (voucher_id)
) ENGINE = InnoDB;
