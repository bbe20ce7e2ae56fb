# shellcheck shell=bash
# The order events' broker on the hosts, with `ORDER_EVENTS=nats
# scripts/hosts up`: three NATS servers, nats1-3 (10.231.0.41-.43), one
# cluster, the ORDERS stream on all three (NATS_STREAM_REPLICAS=3). A
# publish is acknowledged once two servers hold it, each on its disk
# before it answers (`sync_interval: always`, NATS 2.10 and later: the
# server scripts/lib-install.sh's ensure_nats installs), so the relay deletes an
# outbox row only when neither one machine lost with its disk nor a power
# cut of all three can lose its event (docs/events.md).
# Clients over TLS (the hosts' CA) as `hmdp`, the service, which may
# publish to its stream and nothing else, or `hmdp-ops`, the operators'
# tools (the audit's consumer); the routes over mutual TLS. Each server's
# monitoring answers on 127.0.0.1:8222 inside its host only
# (scripts/check-durability reads it there). Sourced by scripts/hosts.

NATS_HOSTS=(nats1 nats2 nats3)
HOSTS_EVENTS=${ORDER_EVENTS:-off}
# What the hosts were brought up with, for every command but `up`.
[ "${1:-}" = up ] || [ ! -f "$HOSTS_DIR/events" ] || HOSTS_EVENTS=$(cat "$HOSTS_DIR/events")
nats_hosts() { if [ "$HOSTS_EVENTS" = nats ]; then echo "${NATS_HOSTS[@]}"; fi; }

# What the service may ask of the broker: its stream made sure of (found,
# made, its replicas raised) and its events published; the answers come
# to its inbox.
NATS_SERVICE_PERMISSIONS='publish: ["orders.>", "$JS.API.STREAM.INFO.ORDERS", "$JS.API.STREAM.CREATE.ORDERS",
        "$JS.API.STREAM.UPDATE.ORDERS"], subscribe: ["_INBOX.>"]'

nats_host_up() { # nats_host_up HOST
    local host=$1 dir="$HOSTS_DIR/$1" ip peer routes=() client_tls="" route_tls=""
    if running "$dir/nats-server.pid" "nats-server"; then
        stores_tls_match "$dir" "NATS on the $host host"
        return 0
    fi
    ip=$(host_ip "$host")
    mkdir -p "$dir/store"
    for peer in "${NATS_HOSTS[@]}"; do
        [ "$peer" = "$host" ] || routes+=("\"nats-route://$(host_ip "$peer"):6222\"")
    done
    if tls_on; then
        client_tls="tls { cert_file: \"$TLS_DIR/$host.pem\", key_file: \"$TLS_DIR/$host.key\", timeout: 2 }"
        route_tls="tls { cert_file: \"$TLS_DIR/$host.pem\", key_file: \"$TLS_DIR/$host.key\", ca_file: \"$TLS_DIR/ca.pem\", verify: true, timeout: 2 }"
    fi
    echo "$HOSTS_TLS" >"$dir/tls"
    # The passwords in a file only root reads, not on a command line.
    (umask 077 && cat >"$dir/nats.conf") <<CONF
server_name: $host
listen: "$ip:4222"
http: "127.0.0.1:8222"
$client_tls
authorization {
    users: [
        { user: hmdp, password: "$HOSTS_NATS_PASSWORD", permissions: { $NATS_SERVICE_PERMISSIONS } }
        { user: hmdp-ops, password: "$HOSTS_NATS_OPS_PASSWORD" }
    ]
}
jetstream { store_dir: "$dir/store", sync_interval: always }
cluster {
    name: hmdp-events
    listen: "$ip:6222"
    routes: [ $(IFS=,; echo "${routes[*]}") ]
    $route_tls
}
CONF
    log "starting NATS on the $host host ($ip:4222, JetStream writing each message to disk before it answers)"
    (exec ip netns exec "$(host_ns "$host")" nohup "$(nats_server_bin)" -c "$dir/nats.conf") >>"$dir/nats-server.log" 2>&1 &
    echo $! >"$dir/nats-server.pid"
}

# Ready, its JetStream current: /healthz answers 200 only once the server
# knows the cluster's leader and holds what its streams' leaders have (a
# rejoined, empty server: once it has caught up).
nats_host_healthy() { in_host "$1" curl -fsS "http://127.0.0.1:8222/healthz" >/dev/null 2>&1; }

nats_hosts_up() {
    [ "$HOSTS_EVENTS" = nats ] || return 0
    ensure_nats
    ensure_hosts_secrets
    local host
    for host in "${NATS_HOSTS[@]}"; do nats_host_up "$host"; done
    for host in "${NATS_HOSTS[@]}"; do
        wait_for 60 "NATS on the $host host (see $HOSTS_DIR/$host/nats-server.log)" nats_host_healthy "$host"
    done
}

nats_hosts_down() {
    local host stopping=()
    for host in "${NATS_HOSTS[@]}"; do
        stop_pid "$HOSTS_DIR/$host/nats-server.pid" "nats-server" "NATS on the $host host" &
        stopping+=($!)
    done
    wait_for_jobs "${stopping[@]}"
}

# NATS_URL for USER (hmdp, the service; hmdp-ops, the operators): every
# server, the credentials in each.
hosts_nats_url() { # hosts_nats_url USER
    local host urls=() password=$HOSTS_NATS_PASSWORD
    [ "$1" = hmdp ] || password=$HOSTS_NATS_OPS_PASSWORD
    for host in "${NATS_HOSTS[@]}"; do
        urls+=("$(tls_on && echo tls || echo nats)://$1:$password@$(host_ip "$host"):4222")
    done
    (IFS=,; echo "${urls[*]}")
}

# The service's settings for its events, as `export` arguments.
hosts_events_env() {
    if [ "$HOSTS_EVENTS" = nats ]; then
        echo "ORDER_EVENTS=nats NATS_STREAM_REPLICAS=3 NATS_URL=$(hosts_nats_url hmdp) NATS_CA_FILE=$(tls_on && echo "$TLS_DIR/ca.pem")"
    else
        echo "ORDER_EVENTS=off"
    fi
}

# The host whose server leads the ORDERS stream, as the first server that
# answers sees it (`scripts/hosts nats-leader`).
nats_stream_leader() {
    ensure_command jq jq
    local host leader
    for host in "${NATS_HOSTS[@]}"; do
        host_exists "$host" || continue
        leader=$(in_host "$host" curl -fsS "http://127.0.0.1:8222/jsz?accounts=true&streams=true" 2>/dev/null \
            | jq -r '[.account_details[]?.stream_detail[]? | select(.name == "ORDERS") | .cluster.leader // empty] | first // empty')
        [ -n "$leader" ] && { echo "$leader"; return 0; }
    done
    die "no server of nats1-3 names a leader of the ORDERS stream"
}
