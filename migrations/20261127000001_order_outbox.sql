-- Order events (ORDER_EVENTS=nats, docs/events.md). Each change of an
-- order writes its event here in the change's own transaction, so an
-- event exists exactly when its change committed. A relay publishes them
-- in seq order, marks them published, and deletes them once
-- OUTBOX_RETENTION_S has passed.
-- seq orders one order's events as they committed: an order's next event
-- is written by a statement that waits for the row its last one changed.
-- (order_id, type) is the event's identity and its Nats-Msg-Id: an order
-- changes to each state once at most.
CREATE TABLE IF NOT EXISTS tb_order_outbox (
    seq          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    order_id     BIGINT          NOT NULL,
    user_id      BIGINT UNSIGNED NOT NULL,
    voucher_id   BIGINT UNSIGNED NOT NULL,
    type         VARCHAR(16)     NOT NULL COMMENT 'created, paid, used, cancelled, expired, refunded, failed',
    state        VARCHAR(16)     NOT NULL COMMENT 'the order after it: UNPAID, PAID, USED, CANCELLED, REFUNDED, FAILED',
    occurred_at  DATETIME(6)     NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    published_at DATETIME(6)     NULL,
    PRIMARY KEY (seq),
    UNIQUE KEY uk_outbox_event (order_id, type),
    KEY idx_outbox_published (published_at)
) ENGINE = InnoDB;

-- Who relays: one instance at a time holds the lease and renews it; once
-- it has expired (its holder died, or lost MariaDB) another takes it.
-- until is MariaDB's clock, so the instances' clocks do not matter.
CREATE TABLE IF NOT EXISTS tb_outbox_lease (
    name   VARCHAR(32)  NOT NULL,
    holder VARCHAR(128) NOT NULL,
    until  DATETIME(3)  NOT NULL,
    PRIMARY KEY (name)
) ENGINE = InnoDB;
