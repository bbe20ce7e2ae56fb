# shellcheck shell=bash
# Processes the scripts start and stop (pid files, background jobs), the
# stack's secrets and the random ones they are made of, the hosts of
# scripts/hosts as the other scripts reach them, and nginx's workers for a
# crowd. Sourced by scripts/lib.sh (log, running, STATE_DIR, ROOT).

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

# Stops a pid file's process (TERM, or STOP_SIGNAL: nginx's QUIT lets its
# workers finish what they hold; then KILL after 10 s) if it is ours.
stop_pid() { # [STOP_SIGNAL=QUIT] stop_pid PIDFILE PATTERN [WHAT]
    local pid
    if running "$1" "$2"; then
        pid=$(cat "$1")
        kill -"${STOP_SIGNAL:-TERM}" "$pid" 2>/dev/null || true
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
