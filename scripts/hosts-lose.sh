# shellcheck shell=bash
# A machine lost and a fresh one in its place: `scripts/hosts lose HOST`
# and `scripts/hosts rejoin HOST`. Sourced by scripts/hosts, whose helpers
# (host_ip, in_host, app_up, redis_host_up, ha_node_up, ...) it uses.

# A host lost as a machine is lost with its disk: every process SIGKILLed,
# its directory deleted, its namespace (and so its address) gone. One of a
# kind at a time, and never the one of its kind: what is refused changes
# nothing.
LOST="$HOSTS_DIR/lost"
lost_hosts() { cat "$LOST" 2>/dev/null || true; }
lose() { # lose HOST
    local host=$1 twin other pid
    host_ip "$host" >/dev/null
    ! grep -qx "$host" <<<"$(lost_hosts)" || die "the $host host is lost already"
    host_exists "$host" || die "no host $host is up"
    case $host in
        nginx | redis) die "the $host host is the stack's only one: its loss cannot be survived" ;;
        db | db-replica | db-witness) twin="db db-replica db-witness" ;;
        app1 | app2) twin="app1 app2" ;;
        redis[1-6]) twin="${REDIS_NODES[*]}" ;;
        nats[1-3]) twin="${NATS_HOSTS[*]}" ;;
    esac
    for other in $twin; do
        ! grep -qx "$other" <<<"$(lost_hosts)" \
            || die "the $other host is lost already: the stack cannot survive losing the $host host too"
    done
    for pid in $(ip netns pids "$(host_ns "$host")" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
    ip netns del "$(host_ns "$host")"
    ip link del "$(host_veth "$host")" 2>/dev/null || true
    rm -rf "${HOSTS_DIR:?}/$host"
    echo "$host" >>"$LOST"
    log "lost: the $host host ($(host_ip "$host")), its processes killed, its disk deleted, its address dead"
}

# A fresh machine at a lost host's address, with a key and certificate of
# its own, given its part as a standby of what took over: an instance
# again, a Redis Cluster node as the replica of the master that has none,
# a MariaDB standby cloned from the primary (mariadb-backup) that
# replicates from where the copy ends, a cluster node again on the
# witness. Then the stack can lose one host of that kind again.
rejoin() { # rejoin HOST
    local host=$1 app other
    host_ip "$host" >/dev/null
    grep -qx "$host" <<<"$(lost_hosts)" || die "the $host host is not lost: only a lost host rejoins"
    case $host in db | db-replica)
        [ "$HOSTS_DB_STANDBY" = 1 ] || [ "$host" = db-replica ] \
            || die "the db host was the primary and, with HOSTS_DB_STANDBY=0, nothing took its place: a new machine has no primary to follow; scripts/hosts down, then up"
        db_primary >/dev/null || die "no MariaDB of the db hosts is the primary: there is nothing to copy" ;;
    esac
    ensure_secrets
    ensure_hosts_secrets
    # What the stack runs with, whatever this shell's settings: as the
    # instance that is left ran.
    for app in app1 app2; do
        [ -f "$HOSTS_DIR/$app/settings" ] || continue
        ran_as "$HOSTS_DIR/$app"
        APP_BIN=$(app_setting "$HOSTS_DIR/$app" bin)
        break
    done
    host_net_up "$host"
    host_firewall_up "$host"
    # The new machine's interface is not the old one's: the others forget
    # the old one's hardware address, as its gratuitous ARP would tell them,
    # instead of sending to it until their entry goes stale.
    ip neigh del "$(host_ip "$host")" dev "$HOSTS_BRIDGE" 2>/dev/null || true
    for other in "${HOST_NAMES[@]}"; do
        host_exists "$other" && [ "$other" != "$host" ] || continue
        in_host "$other" ip neigh del "$(host_ip "$host")" dev eth0 2>/dev/null || true
    done
    if tls_on && [ "$host" != app1 ] && [ "$host" != app2 ] && [ "$host" != db-witness ]; then
        rm -f "$TLS_DIR/$host.pem"
        host_cert "$host"
    fi
    case $host in
        app1 | app2)
            app_up "$host"
            wait_for 60 "$host (see $HOSTS_DIR/$host/hmdp.log)" app_ready "$host"
            ;;
        redis[1-6]) rejoin_cluster_node "$host" ;;
        db | db-replica) rejoin_standby "$host" ;;
        db-witness) ha_node_up db-witness ;;
        # An empty server under the lost one's name: the cluster's leaders
        # send it what it held; healthy once it has it all.
        nats[1-3])
            nats_host_up "$host"
            wait_for 120 "NATS on the $host host, caught up (see $HOSTS_DIR/$host/nats-server.log)" nats_host_healthy "$host"
            ;;
    esac
    sed -i "/^$host\$/d" "$LOST"
    log "rejoined: a fresh $host host at $(host_ip "$host"); the stack can lose one of its kind again"
}

# The lost node is forgotten by every node left (within CLUSTER FORGET's
# minute, or it comes back by gossip), and the fresh one made the replica
# of the master without one.
rejoin_cluster_node() { # rejoin_cluster_node HOST
    local host=$1 asked="" node ip lost_id master_id
    ip=$(host_ip "$host")
    for node in "${REDIS_NODES[@]}"; do
        [ "$node" != "$host" ] && redis_host_alive "$node" && { asked=$node; break; }
    done
    [ -n "$asked" ] || die "no node of the cluster answers"
    lost_id=$(redis_ops_at "$asked" cluster nodes | awk -v addr="$ip:6379" 'index($2, addr "@") == 1 { print $1 }')
    for node in "${REDIS_NODES[@]}"; do
        [ "$node" != "$host" ] && [ -n "$lost_id" ] || continue
        redis_ops_at "$node" cluster forget "$lost_id" >/dev/null
    done
    redis_host_up "$host"
    master_id=$(redis_ops_at "$asked" cluster nodes | awk '
        $3 ~ /master/ && $3 !~ /fail/ && NF >= 9 { masters[$1] = 1 }
        $3 ~ /slave/ && $3 !~ /fail/ { replicas[$4]++ }
        END { for (id in masters) if (!replicas[id]) { print id; exit } }')
    [ -n "$master_id" ] || die "every master of the cluster has a replica: no place for the $host host"
    # shellcheck disable=SC2046
    REDISCLI_AUTH="$HOSTS_REDIS_OPS_PASSWORD" redis-cli $(redis_cli_tls) --user hmdp-ops \
        --cluster add-node "$ip:6379" "$(host_ip "$asked"):6379" --cluster-slave --cluster-master-id "$master_id" \
        >"$HOSTS_DIR/$host/add-node.log" 2>&1 \
        || { cat "$HOSTS_DIR/$host/add-node.log" >&2; die "redis-cli --cluster add-node failed for the $host host"; }
    wait_for 60 "the Redis Cluster with the $host host (cluster_state:ok, every replica online)" cluster_ok
}

# The standby as a new machine gets it: the primary copied live
# (mariadb-backup takes no lock that stops the sale's commits), the copy
# prepared and seeded to replicate by GTID from its last transaction; the
# cluster node started, the agent points it at the primary. The accounts
# came with the copy.
rejoin_standby() { # rejoin_standby HOST
    local host=$1 primary dir copy gtid
    ensure_command mariadb-backup mariadb-backup
    primary=$(db_primary)
    dir=$(db_dir "$host")
    copy="$dir/copy"
    mkdir -p "$dir"
    # The primary must have dropped the lost standby's connection first
    # (db_config: a dead peer's socket fails within seconds); a new standby
    # meeting it there would hang the primary.
    poll_for 60 lost_standby_dropped "$primary" "$host" \
        || die "the $primary host still holds the lost standby's connection after 60 s"
    # In the primary's node, whose server names its directory as the node sees it.
    ha_or_host "$primary" mariadb-backup --backup --socket="$(db_dir "$primary")/mysqld.sock" --user=root \
        --target-dir="$copy" >"$dir/backup.log" 2>&1 \
        || { tail -20 "$dir/backup.log" >&2; die "mariadb-backup --backup of the $primary host failed"; }
    mariadb-backup --prepare --target-dir="$copy" >>"$dir/backup.log" 2>&1 \
        || { tail -20 "$dir/backup.log" >&2; die "mariadb-backup --prepare failed"; }
    gtid=$(awk '{ print $3 }' "$copy/mariadb_backup_binlog_info" 2>/dev/null || awk '{ print $3 }' "$copy/xtrabackup_binlog_info")
    [ -n "$gtid" ] || die "the copy of the $primary host names no GTID position ($copy)"
    rm -rf "$dir/data"
    mv "$copy" "$dir/data"
    log "the $primary host copied to the $host host (mariadb-backup), up to GTID $gtid"
    db_host_marked "$host"
    db_standby_seed "$host" "$gtid"
    db_password_file "$host"
    if [ "$HOSTS_DB_STANDBY" = 1 ]; then
        ha_node_up "$host"
        db_pair_wait
    else
        db_async_up
    fi
}
ha_or_host() { # ha_or_host HOST COMMAND...: in HOST's cluster node if it runs one, else on the host
    local host=$1
    shift
    if ha_running "$host"; then ha_at "$host" "$@"; else in_host "$host" "$@"; fi
}

lost_standby_dropped() { # lost_standby_dropped PRIMARY LOST
    [ "$(db_sql "$1" -N -e "SELECT COUNT(*) FROM information_schema.PROCESSLIST
        WHERE COMMAND LIKE 'Binlog Dump%' AND HOST LIKE '$(host_ip "$2"):%'")" = 0 ]
}
