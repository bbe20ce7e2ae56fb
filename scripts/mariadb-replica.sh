# A MariaDB replica of the local MariaDB (the primary, 127.0.0.1:3306) on
# 127.0.0.1:3307, read-only, replicating by GTID, without Docker. Sourced
# by scripts/stack and scripts/test (after lib.sh). Its data, socket and log
# live in .stack/mariadb-replica; the replication account's password in
# .stack/replica.env (git-ignored).
#
# The primary must write a binary log. When it does not, it is restarted
# once with --log-bin --server-id=1 (its own configuration otherwise), and
# .stack/mariadb-primary.args remembers those flags so that lib-stores.sh
# (ensure_mariadb) starts it the same way after a restart (a chaos run's
# db-restart).
# shellcheck shell=bash

REPLICA_PORT=3307
REPLICA_DIR="$STATE_DIR/mariadb-replica"
REPLICA_SOCKET="$REPLICA_DIR/mysqld.sock"
REPLICA_PIDFILE="$REPLICA_DIR/mysqld.pid"

replica_sql() { mariadb --protocol=socket -S "$REPLICA_SOCKET" -uroot "$@"; }
replica_alive() { mariadb-admin --protocol=socket -S "$REPLICA_SOCKET" -uroot ping 2>/dev/null | grep -q alive; }

replica_running() {
    local pid
    [ -f "$REPLICA_PIDFILE" ] || return 1
    pid=$(cat "$REPLICA_PIDFILE")
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "mariadbd.*$REPLICA_DIR"
}

# The replica's URL for DATABASE_READ_URL: the primary's account and
# database, on the replica's port.
replica_url() {
    local rest=${DATABASE_URL#*://}
    local creds=${rest%%@*} path=${rest#*/}
    echo "mysql://$creds@127.0.0.1:$REPLICA_PORT/$path"
}

primary_binlog_on() {
    [ "$(mariadb_url -N -e 'SELECT @@log_bin')" = 1 ]
}

ensure_primary_binlog() {
    primary_binlog_on && return 0
    log "MariaDB (the primary) writes no binary log; restarting it with --log-bin --server-id=1"
    printf '%s\n' "--log-bin=hmdp-primary-bin --server-id=1 --binlog-format=ROW --expire-logs-days=1" \
        >"$STATE_DIR/mariadb-primary.args"
    local pid
    pid=$(cat /run/mysqld/mysqld.pid 2>/dev/null || true)
    mariadb_url -e "SHUTDOWN" 2>/dev/null || $SUDO mariadb-admin --protocol=socket shutdown
    while mariadb_alive; do sleep 0.1; done
    # Gone, not only silent: a start meanwhile would find it still running.
    if [ -n "$pid" ]; then while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done; fi
    ensure_mariadb
    primary_binlog_on || die "MariaDB still writes no binary log after a restart with $(cat "$STATE_DIR/mariadb-primary.args")"
}

# The replication account on the primary, made through the root socket
# (the app's account may lack GRANT OPTION), its password kept in
# .stack/replica.env.
ensure_replication_account() {
    if [ ! -f "$STATE_DIR/replica.env" ]; then
        (umask 077 && printf 'HMDP_REPL_PASSWORD=%s\n' "$(random_secret 18)" \
            >"$STATE_DIR/replica.env")
    fi
    # shellcheck disable=SC1091
    . "$STATE_DIR/replica.env"
    local sql="CREATE USER IF NOT EXISTS 'hmdp_repl'@'127.0.0.1' IDENTIFIED BY '$HMDP_REPL_PASSWORD';
        ALTER USER 'hmdp_repl'@'127.0.0.1' IDENTIFIED BY '$HMDP_REPL_PASSWORD';
        GRANT REPLICATION SLAVE ON *.* TO 'hmdp_repl'@'127.0.0.1';"
    # On standard input: an argument's password would be in the process table.
    mariadb_socket <<<"$sql" 2>/dev/null || mariadb_url <<<"$sql" \
        || die "cannot create the replication account hmdp_repl on the primary"
}

replica_start_server() {
    local owner
    owner=$(id -un)
    if mariadb-admin --protocol=tcp -h127.0.0.1 -P"$REPLICA_PORT" --connect-timeout=2 ping >/dev/null 2>&1; then
        die "something else answers on 127.0.0.1:$REPLICA_PORT (another clone's replica? its scripts/stack down stops it); the replica needs that port"
    fi
    mkdir -p "$REPLICA_DIR"
    "$(command -v mariadbd || echo /usr/sbin/mariadbd)" --no-defaults --user="$owner" \
        --datadir="$REPLICA_DIR/data" --socket="$REPLICA_SOCKET" --pid-file="$REPLICA_PIDFILE" \
        --port="$REPLICA_PORT" --bind-address=127.0.0.1 --skip-name-resolve \
        --server-id=2 --read-only=1 --skip-log-bin --relay-log="$REPLICA_DIR/data/relay-bin" \
        --character-set-server=utf8mb4 --collation-server=utf8mb4_general_ci \
        --replicate-wild-ignore-table='mysql.%' \
        --log-error="$REPLICA_DIR/error.log" >/dev/null 2>&1 &
    wait_for 60 "the MariaDB replica (see $REPLICA_DIR/error.log)" replica_alive
}

replica_threads_running() {
    local status
    status=$(replica_sql -e 'SHOW SLAVE STATUS\G' 2>/dev/null)
    grep -q 'Slave_IO_Running: Yes' <<<"$status" && grep -q 'Slave_SQL_Running: Yes' <<<"$status"
}

# Starts the replica: made the first time from a consistent dump of the
# primary's databases (mysql and the other system schemas aside: the
# replica has its own accounts), then replicating from the dump's GTID.
replica_up() {
    ensure_primary_binlog
    ensure_replication_account
    if replica_running; then
        log "MariaDB replica already running on 127.0.0.1:$REPLICA_PORT"
    elif [ -d "$REPLICA_DIR/data/mysql" ]; then
        log "starting the MariaDB replica on 127.0.0.1:$REPLICA_PORT"
        replica_start_server
    else
        log "making a MariaDB replica of the primary on 127.0.0.1:$REPLICA_PORT"
        rm -rf "$REPLICA_DIR/data"
        mkdir -p "$REPLICA_DIR/data"
        mariadb-install-db --no-defaults --user="$(id -un)" --datadir="$REPLICA_DIR/data" \
            --auth-root-authentication-method=socket --auth-root-socket-user="$(id -un)" --skip-test-db \
            >"$REPLICA_DIR/install.log" 2>&1 || { cat "$REPLICA_DIR/install.log" >&2; die "mariadb-install-db failed"; }
        replica_start_server
        local databases
        databases=$(mariadb_url -N -e "SELECT schema_name FROM information_schema.schemata
            WHERE schema_name NOT IN ('mysql','information_schema','performance_schema','sys')")
        if [ -n "$databases" ]; then
            # shellcheck disable=SC2086
            client_url mariadb-dump --single-transaction --master-data=1 --gtid --routines --triggers \
                --databases $databases | replica_sql || die "loading the primary's dump into the replica failed"
        else
            replica_sql -e "SET GLOBAL gtid_slave_pos = '$(mariadb_url -N -e 'SELECT @@gtid_binlog_pos')'"
        fi
    fi
    # The app's account, allowed to read and (tests) to pause replication.
    local rest=${DATABASE_URL#*://} user pass
    rest=${rest%%@*}
    user=${rest%%:*}
    pass=""
    [ "$rest" != "$user" ] && pass=${rest#*:}
    replica_sql <<<"CREATE USER IF NOT EXISTS '$user'@'127.0.0.1' IDENTIFIED BY '$pass';
        ALTER USER '$user'@'127.0.0.1' IDENTIFIED BY '$pass';
        GRANT SELECT, SLAVE MONITOR, REPLICATION SLAVE ADMIN ON *.* TO '$user'@'127.0.0.1';" \
        || die "cannot create the account $user on the replica"
    if ! replica_threads_running; then
        replica_sql <<<"STOP SLAVE; CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=3306,
            MASTER_USER='hmdp_repl', MASTER_PASSWORD='$HMDP_REPL_PASSWORD', MASTER_USE_GTID=slave_pos,
            MASTER_CONNECT_RETRY=1; START SLAVE;" || die "cannot start replication on the replica"
    fi
    wait_for 30 "replication on 127.0.0.1:$REPLICA_PORT (see $REPLICA_DIR/error.log)" replica_threads_running
    log "MariaDB replica ok on 127.0.0.1:$REPLICA_PORT, replicating the primary"
}

replica_down() {
    replica_running || { rm -f "$REPLICA_PIDFILE"; return 0; }
    local pid
    pid=$(cat "$REPLICA_PIDFILE")
    replica_sql -e "SHUTDOWN" >/dev/null 2>&1 || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
    log "stopped the MariaDB replica (pid $pid)"
    rm -f "$REPLICA_PIDFILE"
}

replica_status() {
    replica_running || return 1
    local status
    status=$(replica_sql -e 'SHOW SLAVE STATUS\G' 2>/dev/null)
    printf 'mariadb replica pid %-7s 127.0.0.1:%s  io=%s sql=%s behind=%ss\n' "$(cat "$REPLICA_PIDFILE")" "$REPLICA_PORT" \
        "$(sed -n 's/^ *Slave_IO_Running: //p' <<<"$status")" "$(sed -n 's/^ *Slave_SQL_Running: //p' <<<"$status")" \
        "$(sed -n 's/^ *Seconds_Behind_Master: //p' <<<"$status")"
}
