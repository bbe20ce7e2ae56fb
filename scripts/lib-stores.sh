# shellcheck shell=bash
# The machine's MariaDB and Redis, started (or installed) and checked, the
# DATABASE_URL that reaches MariaDB over TCP and its database, the MariaDB
# clients for it, and prepare_machine, which does it all. Sourced by
# scripts/lib.sh (log, die, SUDO, wait_for, STATE_DIR, ...).

# The root account through the unix socket: how a fresh Debian MariaDB
# lets root in (unix_socket auth), and what works when we are root.
mariadb_socket() { $SUDO mariadb --protocol=socket -uroot "$@"; }
mariadb_alive() { mariadb-admin --protocol=tcp -h127.0.0.1 -P3306 ping 2>/dev/null | grep -q alive || $SUDO mariadb-admin --protocol=socket ping 2>/dev/null | grep -q alive; }

ensure_mariadb() {
    if ! command -v mariadb >/dev/null 2>&1 || [ ! -x /usr/sbin/mariadbd ]; then
        apt_install mariadb-server mariadb-client
    fi
    if mariadb_alive; then return 0; fi
    log "starting MariaDB"
    $SUDO mkdir -p /run/mysqld
    $SUDO chown mysql:mysql /run/mysqld 2>/dev/null || true
    # A primary that feeds the stack's replica (scripts/mariadb-replica.sh)
    # must come back writing its binary log.
    local extra=()
    if [ -f "$STATE_DIR/mariadb-primary.args" ]; then read -ra extra <"$STATE_DIR/mariadb-primary.args"; fi
    if [ "${#extra[@]}" -gt 0 ] || ! { command -v service >/dev/null && $SUDO service mariadb start >/dev/null 2>&1; }; then
        # By its pid file: the stack's replica is a mariadbd too.
        $SUDO start-stop-daemon --start --oknodo --background --pidfile /run/mysqld/mysqld.pid \
            --exec /usr/sbin/mariadbd -- --user=mysql "${extra[@]}"
    fi
    wait_for 60 "MariaDB" mariadb_alive
}

redis_alive() { redis_cli_url "$REDIS_URL" ping 2>/dev/null | grep -q PONG; }

ensure_redis() {
    export REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379}"
    ensure_command redis-cli redis-tools
    if redis_alive; then return 0; fi
    ensure_command redis-server redis-server
    log "starting Redis"
    # Debian's service runs Redis as user redis; a data directory it cannot
    # write makes the first background save fail, and from then on Redis
    # refuses every write (MISCONF). Some images ship it owned by root.
    if id redis >/dev/null 2>&1; then
        $SUDO mkdir -p /var/lib/redis /var/log/redis
        $SUDO chown redis:redis /var/lib/redis
        $SUDO chown redis /var/log/redis
    fi
    if ! { command -v service >/dev/null && $SUDO service redis-server start >/dev/null 2>&1 && wait_for 5 "Redis" redis_alive; } 2>/dev/null; then
        $SUDO mkdir -p /var/lib/redis /var/log/redis
        $SUDO redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 \
            --dir /var/lib/redis --logfile /var/log/redis/hmdp.log
    fi
    wait_for 20 "Redis" redis_alive
}

# A Redis that answers PING may still refuse writes (a failed background
# save with stop-writes-on-bgsave-error): say so now, not mid-test.
check_redis_writes() {
    local reply
    reply=$(redis_cli_url "$REDIS_URL" set hmdp:write-probe 1 EX 5 2>&1)
    [ "$reply" = "OK" ] || die "Redis at $(url_shown "$REDIS_URL") refuses writes: $reply"
}

# Exports a DATABASE_URL that works over TCP. Prefers the contract's default
# (root without password on 127.0.0.1); when root may only use the socket
# (fresh Debian), creates a loopback-only account `hmdp` with a random
# password kept in the git-ignored .stack/db.env.
ensure_database_url() {
    if [ -n "${DATABASE_URL:-}" ]; then return 0; fi
    if [ -f "$STATE_DIR/db.env" ]; then
        # shellcheck disable=SC1091
        . "$STATE_DIR/db.env"
        if MYSQL_PWD="$HMDP_DB_PASSWORD" mariadb --protocol=tcp -h127.0.0.1 -P3306 -uhmdp -e 'SELECT 1' >/dev/null 2>&1; then
            export DATABASE_URL="mysql://hmdp:$HMDP_DB_PASSWORD@127.0.0.1:3306/hmdp"
            return 0
        fi
    fi
    if mariadb --protocol=tcp -h127.0.0.1 -P3306 -uroot --skip-password -e 'SELECT 1' >/dev/null 2>&1; then
        export DATABASE_URL="mysql://root@127.0.0.1:3306/hmdp"
        return 0
    fi
    log "root cannot log in over TCP without a password; creating account hmdp@127.0.0.1"
    local password
    password="$(random_secret 18)"
    # On standard input: an argument's password would be in the process table.
    mariadb_socket <<<"
        CREATE USER IF NOT EXISTS 'hmdp'@'127.0.0.1' IDENTIFIED BY '$password';
        CREATE USER IF NOT EXISTS 'hmdp'@'localhost' IDENTIFIED BY '$password';
        ALTER USER 'hmdp'@'127.0.0.1' IDENTIFIED BY '$password';
        ALTER USER 'hmdp'@'localhost' IDENTIFIED BY '$password';
        GRANT ALL PRIVILEGES ON *.* TO 'hmdp'@'127.0.0.1';
        GRANT ALL PRIVILEGES ON *.* TO 'hmdp'@'localhost';" \
        || die "cannot reach MariaDB as root through its socket; set DATABASE_URL by hand"
    printf 'HMDP_DB_PASSWORD=%s\n' "$password" >"$STATE_DIR/db.env"
    chmod 600 "$STATE_DIR/db.env"
    export DATABASE_URL="mysql://hmdp:$password@127.0.0.1:3306/hmdp"
}

# A MariaDB client (mariadb, mariadb-slap, ...) for the account in DATABASE_URL.
client_url() {
    local client=$1
    shift
    local rest=${DATABASE_URL#*://}
    local creds=${rest%%@*} hostport=${rest#*@}
    hostport=${hostport%%/*}
    local user=${creds%%:*} pass=""
    [ "$creds" != "$user" ] && pass=${creds#*:}
    local host=${hostport%%:*} port=3306
    [ "$hostport" != "$host" ] && port=${hostport#*:}
    if [ -n "$pass" ]; then
        MYSQL_PWD="$pass" "$client" --protocol=tcp -h"$host" -P"$port" -u"$user" "$@"
    else
        "$client" --protocol=tcp -h"$host" -P"$port" -u"$user" --skip-password "$@"
    fi
}
mariadb_url() { client_url mariadb "$@"; }
slap_url() { client_url mariadb-slap "$@"; }

# The database DATABASE_URL names, created when missing. The service creates
# it at start-up too, but `#[sqlx::test]` connects to DATABASE_URL before it
# makes its own test databases, so the tests need it first.
ensure_database() {
    local name=${DATABASE_URL##*/}
    name=${name%%\?*}
    [[ "$name" =~ ^[A-Za-z0-9_]{1,64}$ ]] || die "DATABASE_URL must name a database of [A-Za-z0-9_], got '$name'"
    mariadb_url -e "CREATE DATABASE IF NOT EXISTS \`$name\` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci" \
        || die "cannot create database $name as $(url_shown "$DATABASE_URL")"
}

prepare_machine() {
    ensure_command curl curl
    ensure_rust
    ensure_mariadb
    ensure_redis
    ensure_nats
    # The tests' own brokers are this server too (tests/support's nats.rs).
    NATS_SERVER=$(nats_server_bin)
    export NATS_SERVER
    check_redis_writes
    ensure_database_url
    ensure_database
    log "MariaDB and Redis ready (REDIS_URL=$(url_shown "$REDIS_URL"))"
}
