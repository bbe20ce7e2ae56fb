-- Heima-Dianping tables with the safety constraints the seckill relies on:
-- the database has the last word on overselling (CHECK stock >= 0) and on
-- one order per user (UNIQUE user_id, voucher_id).

CREATE TABLE IF NOT EXISTS tb_user (
    id          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    phone       VARCHAR(11)     NOT NULL,
    password    VARCHAR(128)    NOT NULL DEFAULT '',
    nick_name   VARCHAR(32)     NOT NULL DEFAULT '',
    icon        VARCHAR(255)    NOT NULL DEFAULT '',
    create_time DATETIME        NOT NULL DEFAULT CURRENT_TIMESTAMP,
    update_time DATETIME        NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
    PRIMARY KEY (id),
    UNIQUE KEY uk_phone (phone)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;

CREATE TABLE IF NOT EXISTS tb_voucher (
    id           BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    shop_id      BIGINT UNSIGNED NOT NULL,
    title        VARCHAR(255)    NOT NULL,
    sub_title    VARCHAR(255)    NOT NULL DEFAULT '',
    rules        VARCHAR(1024)   NOT NULL DEFAULT '',
    pay_value    BIGINT UNSIGNED NOT NULL,
    actual_value BIGINT          NOT NULL,
    type         TINYINT UNSIGNED NOT NULL DEFAULT 0 COMMENT '0 ordinary, 1 seckill',
    status       TINYINT UNSIGNED NOT NULL DEFAULT 1 COMMENT '1 on shelf, 2 off shelf, 3 expired',
    create_time  DATETIME        NOT NULL DEFAULT CURRENT_TIMESTAMP,
    update_time  DATETIME        NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
    PRIMARY KEY (id),
    KEY idx_shop_status (shop_id, status),
    CONSTRAINT ck_voucher_actual_value CHECK (actual_value >= 0)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;

CREATE TABLE IF NOT EXISTS tb_seckill_voucher (
    voucher_id  BIGINT UNSIGNED NOT NULL,
    stock       INT             NOT NULL,
    create_time DATETIME        NOT NULL DEFAULT CURRENT_TIMESTAMP,
    begin_time  DATETIME        NOT NULL,
    end_time    DATETIME        NOT NULL,
    update_time DATETIME        NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
    PRIMARY KEY (voucher_id),
    CONSTRAINT ck_seckill_stock CHECK (stock >= 0),
    CONSTRAINT ck_seckill_window CHECK (begin_time < end_time)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;

CREATE TABLE IF NOT EXISTS tb_voucher_order (
    id          BIGINT          NOT NULL COMMENT 'from the Redis id generator, never auto-increment',
    user_id     BIGINT UNSIGNED NOT NULL,
    voucher_id  BIGINT UNSIGNED NOT NULL,
    pay_type    TINYINT UNSIGNED NOT NULL DEFAULT 1 COMMENT '1 balance, 2 alipay, 3 wechat',
    status      TINYINT UNSIGNED NOT NULL DEFAULT 1 COMMENT '1 unpaid, 2 paid, 3 used, 4 cancelled, 5 refunding, 6 refunded',
    create_time DATETIME        NOT NULL DEFAULT CURRENT_TIMESTAMP,
    pay_time    DATETIME        NULL,
    use_time    DATETIME        NULL,
    refund_time DATETIME        NULL,
    update_time DATETIME        NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
    PRIMARY KEY (id),
    UNIQUE KEY uk_user_voucher (user_id, voucher_id),
    KEY idx_voucher (voucher_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;
