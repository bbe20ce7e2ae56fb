# shellcheck shell=bash
# The stack's two instances: the settings an `up` gives them (every setting
# `hmdp settings` lists, hashed), and each started, or restarted when it
# runs another mode, Redis, MariaDB, setting or build. Sourced by
# scripts/stack, whose settings (MODE, REDIS_KIND, DB_KIND, SETTINGS,
# app_bin, socket_of, ...) it uses.

# Every setting `serve` reads (`hmdp settings` lists them) as this `up`
# gives it, one line each, its value hashed (secrets are among them and
# are not written down): an instance started with other lines is
# restarted, so that `ORDER_BATCH_MAX=1 scripts/stack up` on a running
# stack does not keep the running 64. What the stack sets per instance
# (its address and socket, the mode, the Redis, the replica) is compared
# on its own. A binary without `settings` (an older tree's, HMDP_BIN) is
# compared by SETTINGS alone.
settings_of() {
    local name value
    echo "stack=$SETTINGS"
    for name in $("$(app_bin)" settings 2>/dev/null | sed -n 's/^| `\([A-Z0-9_]*\)` |.*/\1/p'); do
        case $name in
            SECKILL_MODE | BIND_ADDR | INSTANCE_ID | REDIS_CLUSTER_NODES | DATABASE_READ_URL | PROXY_SOCKET | ORDER_EVENTS) continue ;;
            NATS_URL) value=${NATS_URL:-$(nats_urls)} ;;
            RUST_LOG) value=${RUST_LOG:-info} ;;
            *) value=${!name-(unset)} ;;
        esac
        printf '%s=%s\n' "$name" "$(printf '%s' "$value" | sha256sum | cut -c1-16)"
    done
}

# The names of the settings whose lines differ between two files of
# settings_of.
changed_settings() { # changed_settings HAVE WANT
    { diff "$1" "$2" || true; } | sed -n 's/^[<>] \([^=]*\)=.*/\1/p' | sort -u | paste -sd' ' -
}

start_instance() {
    local i=$1 port
    port=$(port_of "$i")
    if running "$STATE_DIR/app$i.pid" "hmdp[-a-z0-9]* serve"; then
        local pid
        pid=$(cat "$STATE_DIR/app$i.pid")
        if [ "$(cat "$STATE_DIR/app$i.mode" 2>/dev/null || echo sync)" != "$MODE" ]; then
            log "app$i runs in another mode; restarting it in $MODE mode"
        elif [ "$(cat "$STATE_DIR/app$i.redis" 2>/dev/null || echo single)" != "$REDIS_KIND" ]; then
            log "app$i runs on another Redis; restarting it on the $REDIS_KIND Redis"
        elif [ "$(cat "$STATE_DIR/app$i.db" 2>/dev/null || echo primary)" != "$DB_KIND" ]; then
            log "app$i reads from another MariaDB; restarting it (reads: $DB_KIND)"
        elif ! cmp -s "$STATE_DIR/app$i.settings" "$STATE_DIR/settings.want"; then
            log "app$i runs with other settings; restarting it (changed: $(changed_settings \
                "$STATE_DIR/app$i.settings" "$STATE_DIR/settings.want" 2>/dev/null))"
        elif [ "$(app_bin)" -nt "/proc/$pid" ]; then
            # A build since it started: the tests must meet this binary.
            log "app$i runs an older build; restarting it"
        else
            log "app$i already running (pid $pid, $MODE mode)"
            return 0
        fi
        stop_pid "$STATE_DIR/app$i.pid" "hmdp[-a-z0-9]* serve"
    fi
    log "starting app$i on 127.0.0.1:$port ($MODE mode, $REDIS_KIND Redis)"
    local cluster_nodes=""
    # shellcheck disable=SC2153 # CLUSTER_NODES: scripts/redis-cluster.sh, sourced by scripts/stack
    [ "${REDIS_KIND%%,*}" = cluster ] && cluster_nodes=$CLUSTER_NODES
    local read_url=""
    [ "$DB_KIND" = replica ] && read_url=$(replica_url)
    ORDER_EVENTS="$EVENTS" NATS_URL="${NATS_URL:-$(nats_urls)}" \
        SECKILL_MODE="$MODE" BIND_ADDR="127.0.0.1:$port" INSTANCE_ID="app$i" RUST_LOG="${RUST_LOG:-info}" \
        REDIS_CLUSTER_NODES="$cluster_nodes" DATABASE_READ_URL="$read_url" PROXY_SOCKET="$(socket_of "$i")" \
        nohup "$(app_bin)" serve >>"$STATE_DIR/app$i.log" 2>&1 &
    echo $! >"$STATE_DIR/app$i.pid"
    echo "$MODE" >"$STATE_DIR/app$i.mode"
    echo "$REDIS_KIND" >"$STATE_DIR/app$i.redis"
    echo "$DB_KIND" >"$STATE_DIR/app$i.db"
    cp "$STATE_DIR/settings.want" "$STATE_DIR/app$i.settings"
}
