# A local Redis Cluster without Docker: six redis-server nodes on
# 127.0.0.1:7001-7006 (cluster bus 17001-17006), three masters and three
# replicas, AOF on, node timeout 2 s. Sourced by scripts/stack (after
# lib.sh); the nodes keep their data and nodes.conf in .stack/redis-cluster
# so a restart rejoins the same cluster.
# shellcheck shell=bash

CLUSTER_PORTS=(7001 7002 7003 7004 7005 7006)
CLUSTER_DIR="$STATE_DIR/redis-cluster"
CLUSTER_NODE_TIMEOUT_MS=${CLUSTER_NODE_TIMEOUT_MS:-2000}
CLUSTER_NODES=$(printf '127.0.0.1:%s,' "${CLUSTER_PORTS[@]}")
CLUSTER_NODES=${CLUSTER_NODES%,}

cluster_node_alive() { redis-cli -p "$1" ping 2>/dev/null | grep -q PONG; }

cluster_node_running() { # ours: the pid in its pid file still runs redis-server on that port
    local pidfile="$CLUSTER_DIR/$1/redis.pid" pid
    [ -f "$pidfile" ] || return 1
    pid=$(cat "$pidfile")
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "redis-server.*:$1"
}

cluster_start_node() {
    local port=$1 dir="$CLUSTER_DIR/$1"
    if cluster_node_running "$port"; then return 0; fi
    if cluster_node_alive "$port"; then
        die "something else answers on 127.0.0.1:$port; the local cluster needs ports 7001-7006"
    fi
    mkdir -p "$dir"
    # Debian's redis-server refuses a relative dir under some setups: give it ours.
    redis-server --port "$port" --bind 127.0.0.1 --daemonize yes \
        --dir "$dir" --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" \
        --cluster-enabled yes --cluster-config-file nodes.conf \
        --cluster-node-timeout "$CLUSTER_NODE_TIMEOUT_MS" \
        --appendonly yes --appendfsync "${REDIS_APPENDFSYNC:-everysec}" --save ""
}

cluster_ok() { # every node says cluster_state:ok and sees six nodes
    local port
    for port in "${CLUSTER_PORTS[@]}"; do
        redis-cli -p "$port" cluster info 2>/dev/null | grep -q '^cluster_state:ok' || return 1
        redis-cli -p "$port" cluster info 2>/dev/null | grep -q "^cluster_known_nodes:${#CLUSTER_PORTS[@]}" || return 1
    done
}

cluster_up() {
    ensure_command redis-server redis-server
    ensure_command redis-cli redis-tools
    local port
    for port in "${CLUSTER_PORTS[@]}"; do cluster_start_node "$port"; done
    for port in "${CLUSTER_PORTS[@]}"; do wait_for 20 "Redis Cluster node $port" cluster_node_alive "$port"; done
    if ! redis-cli -p "${CLUSTER_PORTS[0]}" cluster info | grep -q '^cluster_slots_assigned:16384'; then
        log "creating the Redis Cluster: three masters, three replicas"
        local addrs=()
        for port in "${CLUSTER_PORTS[@]}"; do addrs+=("127.0.0.1:$port"); done
        redis-cli --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes >"$CLUSTER_DIR/create.log" 2>&1 \
            || { cat "$CLUSTER_DIR/create.log" >&2; die "redis-cli --cluster create failed"; }
    fi
    wait_for 30 "Redis Cluster (cluster_state:ok on every node)" cluster_ok
    # A replica must have finished its first sync before WAIT can count it.
    wait_for 30 "every master's replica" cluster_replicas_synced
    log "Redis Cluster ok on $CLUSTER_NODES"
}

cluster_replicas_synced() {
    local port
    for port in "${CLUSTER_PORTS[@]}"; do
        if redis-cli -p "$port" role 2>/dev/null | head -1 | grep -q master; then
            redis-cli -p "$port" info replication | grep -q '^slave0:.*state=online' || return 1
        fi
    done
}

# The six side by side: a node takes about 2 s to shut down.
cluster_down() {
    local port stopping=()
    for port in "${CLUSTER_PORTS[@]}"; do
        (
            local pid
            if cluster_node_running "$port"; then
                pid=$(cat "$CLUSTER_DIR/$port/redis.pid")
                redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || kill -TERM "$pid" 2>/dev/null || true
                for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
                kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
                log "stopped Redis Cluster node $port (pid $pid)"
            fi
            rm -f "$CLUSTER_DIR/$port/redis.pid"
        ) &
        stopping+=($!)
    done
    wait_for_jobs "${stopping[@]}"
}

cluster_status() {
    local port any=0
    for port in "${CLUSTER_PORTS[@]}"; do
        if cluster_node_running "$port"; then
            any=1
            printf 'redis  pid %-7s 127.0.0.1:%s  %s  %s\n' "$(cat "$CLUSTER_DIR/$port/redis.pid")" "$port" \
                "$(redis-cli -p "$port" role 2>/dev/null | head -1)" \
                "$(redis-cli -p "$port" cluster info 2>/dev/null | grep '^cluster_state' | tr -d '\r')"
        fi
    done
    [ "$any" = 1 ]
}

# The first node that answers, as a port.
cluster_any_node() {
    local port
    for port in "${CLUSTER_PORTS[@]}"; do
        if cluster_node_alive "$port"; then echo "$port"; return 0; fi
    done
    return 1
}

# The master that holds KEY's slot now, as a port (as a live node sees it).
cluster_master_of() {
    local slot node
    node=$(cluster_any_node) || return 1
    slot=$(redis-cli -p "$node" cluster keyslot "$1")
    redis-cli -p "$node" cluster nodes | awk -v slot="$slot" '
        $3 ~ /master/ && $3 !~ /fail/ {
            for (i = 9; i <= NF; i++) {
                split($i, r, "-"); lo = r[1]; hi = (r[2] == "" ? r[1] : r[2])
                if (slot + 0 >= lo + 0 && slot + 0 <= hi + 0) { split($2, a, "[:@]"); print a[2]; exit }
            }
        }'
}
