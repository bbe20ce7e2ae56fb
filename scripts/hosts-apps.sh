# shellcheck shell=bash
# The hosts' instances, app1 and app2 (`hmdp serve` with the hosts' stores
# and settings), and `scripts/hosts upgrade BIN`, docs/deploy.md's rolling
# upgrade. Sourced by scripts/hosts, whose helpers (host_ip, host_ns,
# nginx_up, hosts_database_url, ...) it uses.

# --- the instances ------------------------------------------------------

app_ready() { curl -fsS "http://$(host_ip "$1"):8081/ready" >/dev/null 2>&1; }

# What an instance runs with: a change restarts it.
app_settings() {
    echo "mode=$MODE,redis=$REDIS_KIND,events=$HOSTS_EVENTS,tls=$HOSTS_TLS,bin=$APP_BIN,pay_timeout=${ORDER_PAY_TIMEOUT_S:-default},replica_acks=${ORDER_REPLICA_ACKS:-default}"
}

app_up() {
    local app=$1 dir="$HOSTS_DIR/$1"
    mkdir -p "$dir"
    if running "$dir/hmdp.pid" "hmdp[-a-z0-9]* serve"; then
        if [ "$(cat "$dir/settings" 2>/dev/null)" = "$(app_settings)" ] && [ ! "$APP_BIN" -nt "$dir/hmdp.pid" ]; then
            log "$app already running ($MODE mode)"
            return 0
        fi
        log "$app runs another mode, Redis or build; restarting it"
        stop_pid "$dir/hmdp.pid" "hmdp[-a-z0-9]* serve" "$app"
    fi
    log "starting $app on the $app host ($(host_ip "$app"):8081, $MODE mode, $REDIS_KIND Redis)"
    # Not through in_host: a function run in the background is a subshell,
    # and its pid, not the instance's, would be the one recorded; the
    # subshell execs the instance, whose pid it keeps. Its settings in the
    # environment: as `env`'s arguments the URLs' passwords would be on a
    # command line.
    (
        unset PROXY_SOCKET
        export SECKILL_MODE="$MODE" BIND_ADDR="$(host_ip "$app"):8081" INSTANCE_ID="$app" \
            TRUSTED_PROXIES="$(host_ip nginx)" DATABASE_URL="$(hosts_database_url primary)" \
            DATABASE_READ_URL="$(hosts_database_url reads)" REDIS_URL="$(hosts_redis_url)" \
            REDIS_CLUSTER_NODES="$(hosts_cluster_nodes)" REDIS_CA_FILE="$(hosts_redis_ca)" RUST_LOG="${RUST_LOG:-info}"
        # shellcheck disable=SC2046
        export $(hosts_events_env)
        exec ip netns exec "$(host_ns "$app")" nohup "$APP_BIN" serve
    ) >>"$dir/hmdp.log" 2>&1 &
    echo $! >"$dir/hmdp.pid"
    app_settings >"$dir/settings"
}

# docs/deploy.md's rolling upgrade, one instance at a time: nginx is told
# to send it nothing more (`down`, and a reload) and holds no connection to
# it before it is stopped as systemd stops it (SIGTERM: it answers what it
# holds, then exits); it starts again on BIN with the settings it ran
# with, is ready, and is given back to nginx before the next is touched.
# Stopping an instance nginx still sends to is a failure nginx must find
# for itself: it answers 502 for the requests it had sent there, and for a
# second (fail_timeout) for every request once the other instance fails
# once too.
upgrade() { # upgrade BIN
    local bin=$1 app dir pid
    case $bin in /*) ;; *) bin="$PWD/$bin" ;; esac
    [ -x "$bin" ] || die "no binary at $bin"
    ensure_secrets
    ensure_hosts_secrets
    for app in app1 app2; do
        dir="$HOSTS_DIR/$app"
        running "$dir/hmdp.pid" "hmdp[-a-z0-9]* serve" || die "$app is not running: scripts/hosts up first"
        ran_as "$dir"
        NGINX_OUT=$app nginx_up
        wait_for 30 "nginx to close its connections to $app" nginx_holds_none_to "$app"
        APP_BIN=$bin app_up "$app"
        wait_for 60 "$app on $bin (see $dir/hmdp.log)" app_ready "$app"
        nginx_up
        pid=$(cat "$dir/hmdp.pid")
        log "$app upgraded: pid $pid runs $(readlink "/proc/$pid/exe")"
    done
}
nginx_holds_none_to() { # nginx_holds_none_to APP: no connection of nginx's is open to APP
    [ -z "$(in_host nginx ss -Htn state established dst "$(host_ip "$1"):8081")" ]
}
ran_as() { # ran_as DIR: the settings the instance in DIR runs with, whatever this shell's
    MODE=$(app_setting "$1" mode)
    REDIS_KIND=$(app_setting "$1" redis)
    HOSTS_EVENTS=$(app_setting "$1" events)
    HOSTS_EVENTS=${HOSTS_EVENTS:-off}
    HOSTS_TLS=$(app_setting "$1" tls)
    ran_with "$1" pay_timeout ORDER_PAY_TIMEOUT_S
    ran_with "$1" replica_acks ORDER_REPLICA_ACKS
}
app_setting() { sed -n "s/.*\b$2=\([^,]*\).*/\1/p" "$1/settings"; } # app_setting DIR NAME
ran_with() { # ran_with DIR NAME VARIABLE: VARIABLE exported as the instance ran with it, or unset
    local value
    value=$(app_setting "$1" "$2")
    if [ -z "$value" ] || [ "$value" = default ]; then unset "$3"; else export "$3=$value"; fi
}
