# shellcheck shell=bash
# The hosts' MariaDB: a primary and its standby on the db and db-replica
# hosts, which take either part (scripts/hosts-ha.sh: Pacemaker promotes
# one and moves the primary's address, DB_ADDRESS, with it). Sourced by
# scripts/hosts, whose helpers (host_ip, in_host, tls_on, ...) it uses.
#
# What makes an acknowledged commit a kept one (docs/deploy.md, "What each
# store promises"): the commit is on the primary's disk (redo log and
# binary log flushed at each commit) and in the standby's relay log before
# the client hears of it (semi-synchronous replication, AFTER_SYNC: the
# primary waits for the standby after writing its binary log and before
# committing in InnoDB, so no other client sees a row the standby lacks).
# The standby keeps a binary log of what it applies, in the primary's GTIDs,
# so that it can be promoted and the other follow it. When the standby does
# not answer within DB_STANDBY_WAIT_MS the primary goes on alone
# (Rpl_semi_sync_master_status OFF) until it is back: a sale is not stopped
# by the loss of its standby, and in that window the primary's disk is the
# only copy.
# HOSTS_DB_STANDBY=0 runs them as they ran before, for measuring what this
# costs: db the primary at its own address, db-replica an asynchronous
# replica, the binary log flushed by the OS, nothing to take over.
DB_STANDBY_WAIT_MS=${DB_STANDBY_WAIT_MS:-1000}
HOSTS_DB_STANDBY=${HOSTS_DB_STANDBY:-1}
# Every command but `up` acts on the stack as it was started.
[ "${1:-}" = up ] || [ ! -f "$HOSTS_DIR/db-standby" ] || HOSTS_DB_STANDBY=$(cat "$HOSTS_DIR/db-standby")
db_hosts() { if [ "$HOSTS_DB_STANDBY" = 1 ]; then echo db db-replica db-witness; else echo db db-replica; fi; }

db_dir() { echo "$HOSTS_DIR/$1"; }
db_sql() { # db_sql HOST SQL...: as root, through the server's socket
    local host=$1
    shift
    mariadb --protocol=socket -S "$(db_dir "$host")/mysqld.sock" -uroot "$@"
}
db_alive() { mariadb-admin --protocol=socket -S "$(db_dir "$1")/mysqld.sock" -uroot ping 2>/dev/null | grep -q alive; }
db_network_client() { # the client over the network, verifying the server's certificate
    if tls_on; then
        mariadb --ssl --ssl-ca="$TLS_DIR/ca.pem" --ssl-verify-server-cert --connect-timeout=2 "$@"
    else
        mariadb --skip-ssl --connect-timeout=2 "$@"
    fi
}

# HOST's server settings, the same on both but for its id and certificate.
db_config() { # db_config HOST
    local id=1
    [ "$1" = db ] || id=2
    cat <<CNF
[mysqld]
user=root
server-id=$id
port=3306
# Its own address and, while it is the primary, the floating one.
bind-address=0.0.0.0
skip-name-resolve
character-set-server=utf8mb4
collation-server=utf8mb4_general_ci
log-bin=mariadb-bin
relay-log=relay-bin
log-slave-updates=1
binlog-format=ROW
gtid-strict-mode=1
innodb-flush-log-at-trx-commit=1
expire-logs-days=1
# Writable only once promoted.
read-only=1
# A peer whose machine is gone sends no FIN: its socket must fail soon,
# idle (keep-alive, 5 s) or with data unacknowledged (five retransmissions,
# about 12 s: the host's net.ipv4.tcp_retries2), not in the kernel's 2
# hours or 15 minutes. MariaDB 10.11's semi-synchronous primary hangs
# otherwise: the thread that reads the standbys' acks waits in poll() on
# the lost standby's socket alone, a new standby of the same server id
# must first remove the old one, which waits for that thread while holding
# the lock every new connection needs, and the primary takes no connection
# at all (seen: a rejoin 5 s after the standby's loss, mid-sale).
tcp-keepalive-time=2
tcp-keepalive-interval=1
tcp-keepalive-probes=3
CNF
    if [ "$HOSTS_DB_STANDBY" = 1 ]; then
        cat <<CNF
sync-binlog=1
rpl-semi-sync-master-enabled=1
rpl-semi-sync-slave-enabled=1
rpl-semi-sync-master-wait-point=AFTER_SYNC
rpl-semi-sync-master-timeout=$DB_STANDBY_WAIT_MS
CNF
    fi
    # No connection over TCP without TLS (the socket, on the host itself,
    # stays for root and the cluster's agent).
    tls_on && printf 'ssl-ca=%s\nssl-cert=%s\nssl-key=%s\nrequire-secure-transport=ON\n' \
        "$TLS_DIR/ca.pem" "$TLS_DIR/$1.pem" "$TLS_DIR/$1.key"
    return 0
}

# What the service's account may do, on its own database and nowhere else:
# read and write its rows, and the DDL its migrations need, which it runs
# at start-up (CREATE for the database and its tables, ALTER and INDEX
# for the later migrations' columns and indexes). No DROP, no global right
# (SUPER, FILE, PROCESS, ...), no GRANT OPTION, no other database. On the
# standby, read_only keeps it from writing.
DB_SERVICE_RIGHTS="SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER, INDEX, REFERENCES, LOCK TABLES, CREATE TEMPORARY TABLES"
# The cluster's agent, through the socket alone ('localhost'), under the
# replication account's name (the agent uses one account for both): it
# sets read_only and the durability settings, stops, points and starts
# replication (RESET SLAVE needs RELOAD), and ends a demoted primary's sessions.
DB_AGENT_RIGHTS="SUPER, RELOAD, READ_ONLY ADMIN, REPLICATION SLAVE ADMIN, REPLICATION MASTER ADMIN, SLAVE MONITOR, BINLOG ADMIN, CONNECTION ADMIN, PROCESS"
db_require() { tls_on && echo "REQUIRE SSL" || echo "REQUIRE NONE"; }
# The accounts, made on the primary and replicated. The SQL on standard
# input: on the command line its passwords would be in the process table.
db_accounts_sql() {
    local host
    echo "CREATE USER IF NOT EXISTS 'hmdp'@'$HOSTS_NET.%' IDENTIFIED BY '$HOSTS_DB_PASSWORD';
        ALTER USER 'hmdp'@'$HOSTS_NET.%' IDENTIFIED BY '$HOSTS_DB_PASSWORD' $(db_require);
        REVOKE ALL PRIVILEGES, GRANT OPTION FROM 'hmdp'@'$HOSTS_NET.%';
        GRANT $DB_SERVICE_RIGHTS ON \`hmdp\`.* TO 'hmdp'@'$HOSTS_NET.%';
        CREATE USER IF NOT EXISTS 'hmdp_repl'@'localhost' IDENTIFIED BY '$HOSTS_REPL_PASSWORD';
        ALTER USER 'hmdp_repl'@'localhost' IDENTIFIED BY '$HOSTS_REPL_PASSWORD';
        GRANT $DB_AGENT_RIGHTS ON *.* TO 'hmdp_repl'@'localhost';"
    for host in db db-replica; do
        echo "CREATE USER IF NOT EXISTS 'hmdp_repl'@'$(host_ip "$host")' IDENTIFIED BY '$HOSTS_REPL_PASSWORD';
            ALTER USER 'hmdp_repl'@'$(host_ip "$host")' IDENTIFIED BY '$HOSTS_REPL_PASSWORD' $(db_require);
            GRANT REPLICATION SLAVE ON *.* TO 'hmdp_repl'@'$(host_ip "$host")';"
    done
}

db_hosts_up() {
    ensure_command mariadbd mariadb-server
    ensure_command mariadb mariadb-client
    ensure_hosts_secrets
    local host
    for host in db db-replica; do
        if db_alive "$host"; then
            stores_tls_match "$(db_dir "$host")" "MariaDB on the $host host"
            [ "$(db_config "$host")" = "$(cat "$(db_dir "$host")/my.cnf")" ] \
                || die "MariaDB on the $host host runs with other settings than these scripts give it; scripts/hosts down first"
        fi
        mkdir -p "$(db_dir "$host")"
        db_alive "$host" || db_config "$host" >"$(db_dir "$host")/my.cnf"
        db_host_marked "$host"
    done
    echo "$HOSTS_DB_STANDBY" >"$HOSTS_DIR/db-standby"
    if [ "$HOSTS_DB_STANDBY" = 1 ]; then db_pair_up; else db_async_up; fi
}

db_host_marked() { # db_host_marked HOST: its TLS recorded (its kernel's retries for a dead peer: host_net_up)
    echo "$HOSTS_TLS" >"$(db_dir "$1")/tls"
}

# HOSTS_DB_STANDBY=0: started by these scripts, nothing watching them.
db_async_up() {
    [ -d "$(db_dir db)/data/mysql" ] || db_pair_bootstrap
    local host
    for host in db db-replica; do
        db_alive "$host" && continue
        db_config "$host" >"$(db_dir "$host")/my.cnf"
        log "starting MariaDB on the $host host ($(host_ip "$host"):3306)"
        # shellcheck disable=SC2046
        db_server "$host" --skip-slave-start $([ "$host" = db ] && echo --read-only=0) >/dev/null 2>&1 &
        wait_for 60 "MariaDB on the $host host (see $(db_dir "$host")/error.log)" db_alive "$host"
    done
    db_sql db <<<"$(db_accounts_sql)" || die "cannot make the accounts on the db host"
    if ! replication_running; then
        local ssl="MASTER_SSL=0"
        tls_on && ssl="MASTER_SSL=1, MASTER_SSL_CA='$TLS_DIR/ca.pem', MASTER_SSL_VERIFY_SERVER_CERT=1"
        db_sql db-replica <<<"STOP SLAVE; CHANGE MASTER TO MASTER_HOST='$(host_ip db)', MASTER_PORT=3306,
            MASTER_USER='hmdp_repl', MASTER_PASSWORD='$HOSTS_REPL_PASSWORD', MASTER_USE_GTID=current_pos,
            MASTER_CONNECT_RETRY=1, MASTER_HEARTBEAT_PERIOD=1, $ssl; START SLAVE;" \
            || die "cannot start replication on the db-replica host"
    fi
    wait_for 30 "replication from the db host (see $(db_dir db-replica)/error.log)" replication_running
}
db_server() { # db_server HOST FLAGS...: HOST's mariadbd, in the foreground
    local dir
    dir=$(db_dir "$1")
    in_host "$1" "$(command -v mariadbd || echo /usr/sbin/mariadbd)" --defaults-file="$dir/my.cnf" \
        --datadir="$dir/data" --socket="$dir/mysqld.sock" --pid-file="$dir/mysqld.pid" --log-error="$dir/error.log" \
        "${@:2}" >/dev/null 2>&1
}

replication_running() {
    local status standby
    standby=$(db_standby) || return 1
    status=$(db_sql "$standby" -e 'SHOW SLAVE STATUS\G' 2>/dev/null)
    grep -q 'Slave_IO_Running: Yes' <<<"$status" && grep -q 'Slave_SQL_Running: Yes' <<<"$status"
}
# (No `cut` here: scripts/hosts has a command of that name.)
standby_acknowledges() {
    local said primary
    primary=$(db_primary) || return 1
    said=$(db_sql "$primary" -N -e "SHOW GLOBAL STATUS WHERE Variable_name IN
        ('Rpl_semi_sync_master_status', 'Rpl_semi_sync_master_clients')" 2>/dev/null | sort | xargs)
    [ "$said" != "Rpl_semi_sync_master_clients 1 Rpl_semi_sync_master_status ON" ] || return 0
    # A primary that went on alone waits for its standby again only once
    # the standby has acknowledged a commit: one is made when none comes
    # (a rejoin after the sale).
    [ "$said" != "Rpl_semi_sync_master_clients 1 Rpl_semi_sync_master_status OFF" ] || db_sql "$primary" <<<"
        CREATE DATABASE IF NOT EXISTS hmdp_heartbeat;
        CREATE TABLE IF NOT EXISTS hmdp_heartbeat.beat (id TINYINT PRIMARY KEY, at DATETIME(6) NOT NULL);
        REPLACE INTO hmdp_heartbeat.beat VALUES (1, NOW(6));" >/dev/null 2>&1
    return 1
}

# The server that takes writes (read_only off) and the one that does not.
db_primary() { db_with_read_only 0; }
db_standby() { db_with_read_only 1; }
db_with_read_only() {
    local host
    for host in db db-replica; do
        db_alive "$host" && [ "$(db_sql "$host" -N -e "SELECT @@read_only" 2>/dev/null)" = "$1" ] \
            && { echo "$host"; return 0; }
    done
    return 1
}

hosts_database_url() { # hosts_database_url primary|reads
    local tls="" address
    tls_on && tls="?ssl-mode=VERIFY_IDENTITY&ssl-ca=$TLS_DIR/ca.pem"
    case $1 in
        primary) address=$(host_ip db) ;;
        reads) address=$(host_ip db-replica) ;;
    esac
    if [ "$HOSTS_DB_STANDBY" = 1 ]; then
        case $1 in primary) address=$DB_ADDRESS ;; reads) address=$DB_READ_ADDRESS ;; esac
    fi
    echo "mysql://hmdp:$HOSTS_DB_PASSWORD@$address:3306/hmdp$tls"
}

db_hosts_down() {
    local host dir pid
    db_pair_down
    for host in db-replica db; do
        dir=$(db_dir "$host")
        if running "$dir/mysqld.pid" "mariadbd"; then
            pid=$(cat "$dir/mysqld.pid")
            db_sql "$host" -e "SHUTDOWN" >/dev/null 2>&1 || kill -TERM "$pid" 2>/dev/null || true
            for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
            log "stopped MariaDB on the $host host (pid $pid)"
        fi
        rm -f "$dir/mysqld.pid"
    done
}

. "$(dirname "$0")/hosts-ha.sh"
