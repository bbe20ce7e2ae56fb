# shellcheck shell=bash
# The hosts' Redis: one server on the redis host, or a Redis Cluster on
# redis1-6 (REDIS_CLUSTER=1), with the service's user and the operators';
# the URLs the instances are given; the hosts' passwords (ensure_hosts_secrets);
# and `scripts/hosts master-of KEY` (which reads CLUSTER NODES with
# scripts/hmdptools/cluster_nodes.py). Sourced by scripts/hosts, whose
# helpers (host_ip, in_host, tls_on, ...) it uses.

# --- Redis --------------------------------------------------------------

# The operators' Redis user: every command, every key (scripts, audits by
# hand). The service's is below. The password in the environment
# (REDISCLI_AUTH): on the command line any local user could read it.
redis_ops_at() { # redis_ops_at HOST COMMAND...
    local host=$1
    shift
    # shellcheck disable=SC2046
    REDISCLI_AUTH="$HOSTS_REDIS_OPS_PASSWORD" redis-cli $(redis_cli_tls) -h "$(host_ip "$host")" -p 6379 \
        --user hmdp-ops "$@"
}
redis_cli_tls() { tls_on && echo "--tls --cacert $TLS_DIR/ca.pem"; }
redis_host_alive() { redis_ops_at "$1" ping 2>/dev/null | grep -q PONG; }

# What the service may do in Redis: its own keys (the contract's and
# docs/api.md's), the lock's release channels, and every command but the
# dangerous ones (FLUSHALL, FLUSHDB, CONFIG, DEBUG, KEYS, SHUTDOWN, ACL,
# MONITOR, ...), less INFO (its readiness reads the server's version and
# its replicas) and the CLUSTER subcommands a cluster client reads.
#
# The default user is shut out, not off: a password made at each start and
# kept nowhere, so that a client without one gets nothing but NOAUTH. Not
# `user default off`: Redis replays its AOF as the default user and checks
# each MULTI/EXEC of it against that user's rights (redis/redis#14541), and
# Redis 7 writes every script's effects to the AOF as a MULTI/EXEC, so with
# the default user off or without rights a restarted Redis silently lost
# every script's writes: the sale's stock, its orders' stream, the logins.
REDIS_SERVICE_RULES=(on resetkeys "~login:*" "~{login:code:*" "~icr:*" "~{icr:*" "~rate:*" "~idempotency:*" "~lock:*"
    "~seckill:*" resetchannels "&lock-released:*" "&seckill:news:*" "+@all" "-@dangerous" "+info" "+cluster|info" "+cluster|nodes"
    "+cluster|slots" "+cluster|shards")

redis_host_up() { # redis_host_up HOST
    local host=$1 dir="$HOSTS_DIR/$1" cluster="" listen
    if running "$dir/redis.pid" "redis-server"; then
        stores_tls_match "$dir" "Redis on the $host host"
        return 0
    fi
    mkdir -p "$dir"
    listen="port 6379"
    # Clients, replicas and the cluster bus (6379 + 10000) all over TLS;
    # the servers' certificates are verified, the clients say who they are
    # with their passwords.
    tls_on && listen="port 0
tls-port 6379
tls-cert-file $TLS_DIR/$host.pem
tls-key-file $TLS_DIR/$host.key
tls-ca-cert-file $TLS_DIR/ca.pem
tls-auth-clients no
tls-replication yes
tls-cluster yes"
    echo "$HOSTS_TLS" >"$dir/tls"
    log "starting Redis on the $host host ($(host_ip "$host"):6379; users hmdp and hmdp-ops, the default user shut out)"
    # A cluster node's replica authenticates to its master as the operators.
    [ "$host" != redis ] && cluster="cluster-enabled yes
cluster-config-file nodes.conf
cluster-node-timeout ${CLUSTER_NODE_TIMEOUT_MS:-2000}
masteruser hmdp-ops
masterauth $HOSTS_REDIS_OPS_PASSWORD"
    # The passwords go in as the configuration file on standard input, not
    # on the command line, where any local user could read them.
    in_host "$host" redis-server - >/dev/null <<CONF
bind $(host_ip "$host")
$listen
daemonize yes
dir $dir
pidfile $dir/redis.pid
logfile $dir/redis.log
appendonly yes
appendfsync ${REDIS_APPENDFSYNC:-everysec}
save ""
user default on >$(random_secret 32) ~* &* +@all
user hmdp ${REDIS_SERVICE_RULES[*]} >$HOSTS_REDIS_PASSWORD
user hmdp-ops on ~* &* +@all >$HOSTS_REDIS_OPS_PASSWORD
$cluster
CONF
    wait_for 20 "Redis on the $host host (see $dir/redis.log)" redis_host_alive "$host"
}

cluster_ok() { # every node says cluster_state:ok, sees six nodes, and every master has its replica online
    local node
    for node in "${REDIS_NODES[@]}"; do
        redis_ops_at "$node" cluster info 2>/dev/null | grep -q '^cluster_state:ok' || return 1
        redis_ops_at "$node" cluster info 2>/dev/null | grep -q "^cluster_known_nodes:${#REDIS_NODES[@]}" || return 1
        if redis_ops_at "$node" role 2>/dev/null | head -1 | grep -q master; then
            redis_ops_at "$node" info replication | grep -q '^slave0:.*state=online' || return 1
        fi
    done
}

redis_hosts_up() {
    ensure_command redis-server redis-server
    ensure_command redis-cli redis-tools
    ensure_hosts_secrets
    local host
    for host in $(redis_hosts); do redis_host_up "$host"; done
    [ "$REDIS_KIND" = cluster ] || return 0
    if ! redis_ops_at redis1 cluster info | grep -q '^cluster_slots_assigned:16384'; then
        log "making the Redis Cluster on redis1-redis6: three masters, three replicas"
        local addrs=()
        for host in "${REDIS_NODES[@]}"; do addrs+=("$(host_ip "$host"):6379"); done
        # shellcheck disable=SC2046
        REDISCLI_AUTH="$HOSTS_REDIS_OPS_PASSWORD" redis-cli $(redis_cli_tls) --user hmdp-ops \
            --cluster create "${addrs[@]}" \
            --cluster-replicas 1 --cluster-yes >"$HOSTS_DIR/cluster-create.log" 2>&1 \
            || { cat "$HOSTS_DIR/cluster-create.log" >&2; die "redis-cli --cluster create failed"; }
    fi
    wait_for 60 "the Redis Cluster on the hosts (cluster_state:ok, every replica online)" cluster_ok
}

# Where the service finds Redis, as its own user: REDIS_URL, or the
# cluster's nodes (REDIS_CLUSTER_NODES, the credentials in each URL).
hosts_redis_url() { echo "$(tls_on && echo rediss || echo redis)://hmdp:$HOSTS_REDIS_PASSWORD@$(host_ip "${1:-redis}"):6379"; }
# REDIS_CA_FILE: the authority the servers' certificates must chain to.
hosts_redis_ca() { tls_on && echo "$TLS_DIR/ca.pem"; }
hosts_cluster_nodes() {
    [ "$REDIS_KIND" = cluster ] || return 0
    local host nodes=()
    for host in "${REDIS_NODES[@]}"; do nodes+=("$(hosts_redis_url "$host")"); done
    (IFS=,; echo "${nodes[*]}")
}

# The hosts' own passwords, each made once (git-ignored with the rest of
# .stack): the service's MariaDB account, replication's, the service's
# Redis user and the operators' Redis user.
HOSTS_SECRETS=(HOSTS_DB_PASSWORD HOSTS_REPL_PASSWORD HOSTS_REDIS_PASSWORD HOSTS_REDIS_OPS_PASSWORD HOSTS_NATS_PASSWORD
    HOSTS_NATS_OPS_PASSWORD)
ensure_hosts_secrets() {
    mkdir -p "$HOSTS_DIR"
    local name
    rm -f "$HOSTS_DIR/db.env" # an earlier layout's
    (umask 077 && touch "$HOSTS_DIR/secrets.env")
    for name in "${HOSTS_SECRETS[@]}"; do
        grep -q "^$name=" "$HOSTS_DIR/secrets.env" \
            || printf '%s=%s\n' "$name" "$(random_secret 18)" >>"$HOSTS_DIR/secrets.env"
    done
    # shellcheck disable=SC1091
    . "$HOSTS_DIR/secrets.env"
}

# --- the cluster, as an operator sees it ---------------------------------

# The host of the master that serves KEY's slot, as ASKED (a node; redis1
# by default) sees the cluster: after a partition, each side may name its
# own.
master_of() { # master_of KEY [ASKED]
    local key=$1 asked=${2:-redis1} slot ip host
    [ "$REDIS_KIND" = cluster ] || die "master-of needs the hosts' Redis Cluster (REDIS_CLUSTER=1)"
    slot=$(redis_ops_at "$asked" cluster keyslot "$key") && [[ "$slot" =~ ^[0-9]+$ ]] \
        || die "$asked did not answer CLUSTER KEYSLOT: $slot"
    # The reply read by scripts/hmdptools/cluster_nodes.py (its tests hold
    # it to replies after a failover, a partition and a slot being moved).
    ip=$(redis_ops_at "$asked" cluster nodes \
        | PYTHONPATH="$ROOT/scripts${PYTHONPATH:+:$PYTHONPATH}" python3 -B -m hmdptools.cluster_nodes master-ip "$slot")
    for host in "${REDIS_NODES[@]}"; do
        [ -n "$ip" ] && [ "$(host_ip "$host")" = "$ip" ] && { echo "$host"; return 0; }
    done
    die "$asked names no live master for slot $slot"
}
