# The stack's NATS server with JetStream, for order events
# (ORDER_EVENTS=nats scripts/stack up): nats-server 2.15 (installed when
# missing, scripts/lib-install.sh) on 127.0.0.1:4223, its JetStream store in
# .stack/nats, each message on disk before it is acknowledged. Port
# 4222 is left to a NATS server the machine may run already. Sourced by
# scripts/stack (after lib.sh).
#
# NATS_NODES=3: three servers clustered instead (4223-4225, their routes on
# 6223-6225, stores in .stack/nats/n1..n3), the order stream on all three
# (NATS_STREAM_REPLICAS=3): an event is acknowledged once two hold it, so
# the loss of one server, its store with it, loses no acknowledged event.
# shellcheck shell=bash

NATS_PORT=${NATS_PORT:-4223}
NATS_DIR="$STATE_DIR/nats"
NATS_NODES=${NATS_NODES:-1}
case $NATS_NODES in 1) ;; 3) export NATS_STREAM_REPLICAS=3 ;; *) die "NATS_NODES must be 1 or 3" ;; esac

# Node i's store (one server: .stack/nats itself, as before clusters).
nats_node_dir() { if [ "$NATS_NODES" = 1 ]; then echo "$NATS_DIR"; else echo "$NATS_DIR/n$1"; fi; }
nats_node_port() { echo $((NATS_PORT + $1 - 1)); }
# NATS_URL for the stack's servers.
nats_urls() {
    local i urls=()
    for i in $(seq 1 "$NATS_NODES"); do urls+=("nats://127.0.0.1:$(nats_node_port "$i")"); done
    (IFS=,; echo "${urls[*]}")
}
nats_node_running() { running "$(nats_node_dir "$1")/nats-server.pid" "nats-server.*$(nats_node_dir "$1") "; }
nats_ready() { (exec 3<>"/dev/tcp/127.0.0.1/$(nats_node_port "${1:-1}")") 2>/dev/null; }

nats_up() {
    ensure_nats
    mkdir -p "$NATS_DIR"
    # A store of the other shape (one server, or a cluster) is another
    # broker: stopped and started afresh.
    if [ "$(nats_started_nodes)" != "$NATS_NODES" ]; then
        nats_down
        rm -rf "${NATS_DIR:?}"/*
    fi
    echo "$NATS_NODES" >"$NATS_DIR/nodes"
    local i dir cluster=()
    for i in $(seq 1 "$NATS_NODES"); do
        dir=$(nats_node_dir "$i")
        nats_node_running "$i" && continue
        mkdir -p "$dir"
        if [ "$NATS_NODES" = 3 ]; then
            local route=$((NATS_PORT + 1999 + i)) routes
            routes=$(seq $((NATS_PORT + 2000)) $((NATS_PORT + 2002)) | grep -vx "$route" | sed 's|^|nats://127.0.0.1:|' | paste -sd,)
            cluster=(--server_name "hmdp-n$i" --cluster_name hmdp --cluster "nats://127.0.0.1:$route" --routes "$routes")
        fi
        # Each message on disk before the server acknowledges it (the store
        # is the command line's: named in both, the server refuses to start).
        echo 'jetstream { sync_interval: always }' >"$dir/nats.conf"
        log "starting NATS (JetStream) on 127.0.0.1:$(nats_node_port "$i"), store $dir"
        nohup "$(nats_server_bin)" -c "$dir/nats.conf" -js -a 127.0.0.1 -p "$(nats_node_port "$i")" -sd "$dir" "${cluster[@]}" \
            >>"$dir/nats-server.log" 2>&1 &
        echo $! >"$dir/nats-server.pid"
    done
    for i in $(seq 1 "$NATS_NODES"); do
        wait_for 15 "NATS on 127.0.0.1:$(nats_node_port "$i") (see $(nats_node_dir "$i")/nats-server.log)" nats_ready "$i"
    done
}

# The shape the stack's broker was started in, whatever NATS_NODES is now.
nats_started_nodes() { cat "$NATS_DIR/nodes" 2>/dev/null || echo "$NATS_NODES"; }

nats_down() {
    # Read before the local below hides the caller's NATS_NODES.
    local i started
    started=$(nats_started_nodes)
    local NATS_NODES=$started
    local stopping=()
    for i in $(seq 1 "$NATS_NODES"); do
        stop_pid "$(nats_node_dir "$i")/nats-server.pid" "nats-server.*$(nats_node_dir "$i") " "NATS" &
        stopping+=($!)
    done
    wait_for_jobs "${stopping[@]}"
}

nats_status() {
    local i up=1 started
    started=$(nats_started_nodes)
    local NATS_NODES=$started
    for i in $(seq 1 "$NATS_NODES"); do
        nats_node_running "$i" || { up=0; continue; }
        printf 'nats   pid %-7s nats://127.0.0.1:%s  ready=%s\n' "$(cat "$(nats_node_dir "$i")/nats-server.pid")" \
            "$(nats_node_port "$i")" "$(nats_ready "$i" && echo yes || echo no)"
    done
    [ "$up" = 1 ]
}
