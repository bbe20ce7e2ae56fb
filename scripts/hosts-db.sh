# The hosts' MariaDB: the primary on the db host and its standby on the
# db-replica host. Sourced by scripts/hosts, whose helpers (host_ip,
# in_host, tls_on, ...) it uses.
#
# What makes an acknowledged commit a kept one (docs/deploy.md, "What each
# store promises"): the commit is on the primary's disk (redo log and
# binary log flushed at each commit) and in the standby's relay log before
# the client hears of it (semi-synchronous replication, AFTER_SYNC: the
# primary waits for the standby after writing its binary log and before
# committing in InnoDB, so no other client sees a row the standby lacks).
# The standby keeps a binary log of what it applies, in the primary's GTIDs,
# so that it can be promoted and others follow it. When the standby does
# not answer within DB_STANDBY_WAIT_MS the primary goes on alone
# (Rpl_semi_sync_master_status OFF) until it is back: a sale is not stopped
# by the loss of its standby, and in that window the primary's disk is the
# only copy.
# HOSTS_DB_STANDBY=0 runs the primary as it ran before, for measuring what
# this costs: its replica asynchronous, its binary log flushed by the OS.
DB_STANDBY_WAIT_MS=${DB_STANDBY_WAIT_MS:-1000}
HOSTS_DB_STANDBY=${HOSTS_DB_STANDBY:-1}
DB_KEEPS=(--innodb-flush-log-at-trx-commit=1 --binlog-format=ROW --expire-logs-days=1 --gtid-strict-mode=1
    --log-slave-updates=1)
DB_PRIMARY_WAITS=()
DB_STANDBY_ACKS=()
if [ "$HOSTS_DB_STANDBY" = 1 ]; then
    DB_KEEPS+=(--sync-binlog=1)
    DB_PRIMARY_WAITS=(--rpl-semi-sync-master-enabled=1 --rpl-semi-sync-master-wait-point=AFTER_SYNC
        --rpl-semi-sync-master-timeout="$DB_STANDBY_WAIT_MS")
    DB_STANDBY_ACKS=(--rpl-semi-sync-slave-enabled=1)
fi

db_dir() { echo "$HOSTS_DIR/$1"; }
db_sql() { # db_sql HOST SQL...: as root, through the server's socket
    local host=$1
    shift
    mariadb --protocol=socket -S "$(db_dir "$host")/mysqld.sock" -uroot "$@"
}
db_alive() { mariadb-admin --protocol=socket -S "$(db_dir "$1")/mysqld.sock" -uroot ping 2>/dev/null | grep -q alive; }

db_start() { # db_start HOST SERVER-ID FLAGS...
    local host=$1 id=$2 dir
    shift 2
    dir=$(db_dir "$host")
    if running "$dir/mysqld.pid" "mariadbd.*$dir"; then
        stores_tls_match "$dir" "MariaDB on the $host host"
        [ "$(cat "$dir/flags" 2>/dev/null)" = "$*" ] \
            || die "MariaDB on the $host host runs with other settings than these scripts give it; scripts/hosts down first"
        return 0
    fi
    mkdir -p "$dir"
    echo "$*" >"$dir/flags"
    # No connection over TCP without TLS (the socket, on the host itself,
    # stays for root).
    tls_on && set -- --ssl-ca="$TLS_DIR/ca.pem" --ssl-cert="$TLS_DIR/$host.pem" --ssl-key="$TLS_DIR/$host.key" \
        --require-secure-transport=ON "$@"
    echo "$HOSTS_TLS" >"$dir/tls"
    if [ ! -d "$dir/data/mysql" ]; then
        rm -rf "$dir/data"
        mariadb-install-db --no-defaults --user=root --datadir="$dir/data" --auth-root-authentication-method=socket \
            --auth-root-socket-user=root --skip-test-db >"$dir/install.log" 2>&1 \
            || { cat "$dir/install.log" >&2; die "mariadb-install-db failed for the $host host"; }
    fi
    # A peer whose machine is gone sends no FIN: its socket must fail
    # soon, idle (keep-alive, 5 s) or with data unacknowledged (five
    # retransmissions, about 12 s), not in the kernel's 2 hours or 15
    # minutes. MariaDB 10.11's semi-synchronous primary hangs otherwise:
    # the thread that reads the standbys' acks waits in poll() on the lost
    # standby's socket alone, a new standby of the same server id must
    # first remove the old one, which waits for that thread while holding
    # the lock every new connection needs, and the primary takes no
    # connection at all (seen: `scripts/hosts rejoin db-replica` 5 s
    # after its loss, mid-sale).
    in_host "$host" sysctl -qw net.ipv4.tcp_retries2=5 >/dev/null
    log "starting MariaDB on the $host host ($(host_ip "$host"):3306)"
    in_host "$host" "$(command -v mariadbd || echo /usr/sbin/mariadbd)" --no-defaults --user=root \
        --tcp-keepalive-time=2 --tcp-keepalive-interval=1 --tcp-keepalive-probes=3 \
        --datadir="$dir/data" --socket="$dir/mysqld.sock" --pid-file="$dir/mysqld.pid" \
        --port=3306 --bind-address="$(host_ip "$host")" --skip-name-resolve --server-id="$id" \
        --character-set-server=utf8mb4 --collation-server=utf8mb4_general_ci \
        --log-error="$dir/error.log" "$@" >/dev/null 2>&1 &
    wait_for 60 "MariaDB on the $host host (see $dir/error.log)" db_alive "$host"
}

# What the service's account may do, on its own database and nowhere else:
# read and write its rows, and the DDL its migrations need, which it runs
# at start-up (CREATE for the database and its tables, ALTER and INDEX
# for the later migrations' columns and indexes). No DROP, no global right
# (SUPER, FILE, PROCESS, ...), no GRANT OPTION, no other database.
DB_SERVICE_RIGHTS="SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER, INDEX, REFERENCES, LOCK TABLES, CREATE TEMPORARY TABLES"
db_require() { tls_on && echo "REQUIRE SSL" || echo "REQUIRE NONE"; }

db_hosts_up() {
    ensure_command mariadbd mariadb-server
    ensure_command mariadb mariadb-client
    ensure_hosts_secrets
    db_start db 1 --log-bin="$(db_dir db)/data/primary-bin" "${DB_KEEPS[@]}" "${DB_PRIMARY_WAITS[@]}"
    # Accounts are each server's own: made outside the binary log. The SQL
    # on standard input: on the command line its passwords would be in the
    # process table.
    db_sql db <<<"SET sql_log_bin = 0;
        CREATE USER IF NOT EXISTS 'hmdp'@'$HOSTS_NET.%' IDENTIFIED BY '$HOSTS_DB_PASSWORD';
        ALTER USER 'hmdp'@'$HOSTS_NET.%' IDENTIFIED BY '$HOSTS_DB_PASSWORD' $(db_require);
        REVOKE ALL PRIVILEGES, GRANT OPTION FROM 'hmdp'@'$HOSTS_NET.%';
        GRANT $DB_SERVICE_RIGHTS ON \`hmdp\`.* TO 'hmdp'@'$HOSTS_NET.%';
        CREATE USER IF NOT EXISTS 'hmdp_repl'@'$(host_ip db-replica)' IDENTIFIED BY '$HOSTS_REPL_PASSWORD';
        ALTER USER 'hmdp_repl'@'$(host_ip db-replica)' IDENTIFIED BY '$HOSTS_REPL_PASSWORD' $(db_require);
        GRANT REPLICATION SLAVE ON *.* TO 'hmdp_repl'@'$(host_ip db-replica)';" \
        || die "cannot make the accounts on the db host"
    db_start db-replica 2 --log-bin="$(db_dir db-replica)/data/standby-bin" "${DB_KEEPS[@]}" --read-only=1 \
        --relay-log="$(db_dir db-replica)/data/relay-bin" --replicate-wild-ignore-table='mysql.%' \
        "${DB_STANDBY_ACKS[@]}"
    # Outside the binary log too: a transaction of the standby's own would
    # be a GTID the primary never had, which strict mode refuses once the
    # standby is promoted and the old primary follows it.
    db_sql db-replica <<<"SET sql_log_bin = 0;
        CREATE USER IF NOT EXISTS 'hmdp'@'$HOSTS_NET.%' IDENTIFIED BY '$HOSTS_DB_PASSWORD';
        ALTER USER 'hmdp'@'$HOSTS_NET.%' IDENTIFIED BY '$HOSTS_DB_PASSWORD' $(db_require);
        REVOKE ALL PRIVILEGES, GRANT OPTION FROM 'hmdp'@'$HOSTS_NET.%';
        GRANT SELECT ON \`hmdp\`.* TO 'hmdp'@'$HOSTS_NET.%';" \
        || die "cannot make the account on the db-replica host"
    if ! replication_running; then
        # A fresh primary logs everything from its first database on: the
        # replica starts from the beginning of its binary log. Over TLS the
        # replica verifies that the primary's certificate names its address.
        # A standby made from a copy of the primary (rejoin) starts after
        # the copy's last transaction. The primary sends a heartbeat each
        # second when it has nothing else to send: a standby gone is found
        # by the write that fails (db_start), not after 30 s of silence.
        local ssl="MASTER_SSL=0" from="" copied="$(db_dir db-replica)/gtid-of-copy"
        [ -s "$copied" ] && from="SET GLOBAL gtid_slave_pos = '$(cat "$copied")';"
        tls_on && ssl="MASTER_SSL=1, MASTER_SSL_CA='$TLS_DIR/ca.pem', MASTER_SSL_VERIFY_SERVER_CERT=1"
        db_sql db-replica <<<"STOP SLAVE; $from CHANGE MASTER TO MASTER_HOST='$(host_ip db)', MASTER_PORT=3306,
            MASTER_USER='hmdp_repl', MASTER_PASSWORD='$HOSTS_REPL_PASSWORD', MASTER_USE_GTID=slave_pos,
            MASTER_CONNECT_RETRY=1, MASTER_HEARTBEAT_PERIOD=1, $ssl; START SLAVE;" || die "cannot start replication on the db-replica host"
        rm -f "$copied"
    fi
    wait_for 30 "replication from the db host (see $(db_dir db-replica)/error.log)" replication_running
    # Until the standby has said it waits, the primary's first commits
    # would be acknowledged by its disk alone.
    [ "$HOSTS_DB_STANDBY" = 0 ] \
        || wait_for 30 "the db host's commits to wait for the standby (semi-synchronous)" standby_acknowledges
}

replication_running() {
    local status
    status=$(db_sql db-replica -e 'SHOW SLAVE STATUS\G' 2>/dev/null)
    grep -q 'Slave_IO_Running: Yes' <<<"$status" && grep -q 'Slave_SQL_Running: Yes' <<<"$status"
}
# (No `cut` here: scripts/hosts has a command of that name.)
standby_acknowledges() {
    local said
    said=$(db_sql db -N -e "SHOW GLOBAL STATUS WHERE Variable_name IN
        ('Rpl_semi_sync_master_status', 'Rpl_semi_sync_master_clients')" 2>/dev/null | sort | xargs)
    [ "$said" != "Rpl_semi_sync_master_clients 1 Rpl_semi_sync_master_status ON" ] || return 0
    # A primary that went on alone waits for its standby again only once
    # the standby has acknowledged a commit: one is made when none comes
    # (a rejoin after the sale).
    [ "$said" != "Rpl_semi_sync_master_clients 1 Rpl_semi_sync_master_status OFF" ] || db_sql db <<<"
        CREATE DATABASE IF NOT EXISTS hmdp_heartbeat;
        CREATE TABLE IF NOT EXISTS hmdp_heartbeat.beat (id TINYINT PRIMARY KEY, at DATETIME(6) NOT NULL);
        REPLACE INTO hmdp_heartbeat.beat VALUES (1, NOW(6));" >/dev/null 2>&1
    return 1
}

hosts_database_url() {
    local tls=""
    tls_on && tls="?ssl-mode=VERIFY_IDENTITY&ssl-ca=$TLS_DIR/ca.pem"
    echo "mysql://hmdp:$HOSTS_DB_PASSWORD@$(host_ip "${1:-db}"):3306/hmdp$tls"
}

db_hosts_down() {
    local host dir pid
    for host in db-replica db; do
        dir=$(db_dir "$host")
        if running "$dir/mysqld.pid" "mariadbd.*$dir"; then
            pid=$(cat "$dir/mysqld.pid")
            db_sql "$host" -e "SHUTDOWN" >/dev/null 2>&1 || kill -TERM "$pid" 2>/dev/null || true
            for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
            log "stopped MariaDB on the $host host (pid $pid)"
        fi
        rm -f "$dir/mysqld.pid"
    done
}
