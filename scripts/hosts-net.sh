# shellcheck shell=bash
# The hosts' network: the bridge, each host's namespace and veth at its
# address, the firewall each host's role needs (nftables, policy drop),
# what `down` finds left of them, and a link cut and healed (`scripts/hosts
# cut HOST PEER`, `heal HOST`). Sourced by scripts/hosts, whose helpers
# (host_ip, host_ns, in_host, host_exists, ...) it uses.

# --- the network --------------------------------------------------------

network_up() {
    [ "$(id -u)" -eq 0 ] || die "the hosts need root: namespaces, veths and a bridge"
    ensure_command ip iproute2
    if ! ip link show "$HOSTS_BRIDGE" >/dev/null 2>&1; then
        # Someone else's 10.231.0.0/24 would take our traffic, or we theirs.
        if ip -4 route show to match "$HOSTS_NET.1" | grep -qv default; then
            die "$HOSTS_NET.0/24 is already routed here: $(ip -4 route show to match "$HOSTS_NET.1" | grep -v default)"
        fi
        ip link add "$HOSTS_BRIDGE" type bridge
        ip addr add "$HOSTS_NET.1/24" dev "$HOSTS_BRIDGE"
        ip link set "$HOSTS_BRIDGE" up
    fi
    local host
    # shellcheck disable=SC2046
    for host in nginx app1 app2 $(db_hosts) $(redis_hosts) $(nats_hosts); do host_net_up "$host"; done
    # A bridge's frames pass the host's firewall when br_netfilter is
    # loaded (Docker loads it and drops what it does not know): let the
    # hosts' own subnet through, and say so.
    # iptables makes its `filter` table when first asked: one this made is
    # removed by down once empty.
    if [ "$(cat /proc/sys/net/bridge/bridge-nf-call-iptables 2>/dev/null || echo 0)" = 1 ] \
        && command -v iptables >/dev/null 2>&1; then
        nft list table ip filter >/dev/null 2>&1 || touch "$HOSTS_DIR/made-ip-filter"
        if ! iptables -C FORWARD -i "$HOSTS_BRIDGE" -o "$HOSTS_BRIDGE" -j ACCEPT 2>/dev/null; then
            iptables -I FORWARD -i "$HOSTS_BRIDGE" -o "$HOSTS_BRIDGE" -j ACCEPT
            log "the firewall sees bridged frames: let $HOSTS_BRIDGE's own traffic through (removed by down)"
        fi
    fi
}

host_net_up() { # host_net_up HOST: its namespace, on the bridge at its address
    local host=$1
    host_exists "$host" || ip netns add "$(host_ns "$host")"
    if ! ip link show "$(host_veth "$host")" >/dev/null 2>&1; then
        ip link add "$(host_veth "$host")" type veth peer name eth0 netns "$(host_ns "$host")"
        ip link set "$(host_veth "$host")" master "$HOSTS_BRIDGE" up
        in_host "$host" ip addr add "$(host_ip "$host")/24" dev eth0
        in_host "$host" ip link set eth0 up
        in_host "$host" ip link set lo up
    fi
    # A namespace starts with the kernel's default queues (4,096
    # accepted, 2,048 half-open), not the machine's raised ones
    # (scripts/stack): a crowd of 20,000 overflowed them on nginx's
    # host, and buyers found no connection or lost theirs.
    in_host "$host" sysctl -qw net.core.somaxconn=65535 net.ipv4.tcp_max_syn_backlog=65535 >/dev/null 2>&1 \
        || log "warning: the $host host's accept queues stay at the kernel's default"
    # A peer that vanished (its machine lost) sends no reset: what was sent
    # to it is given up after five retransmissions, about 12 s, not the
    # kernel's fifteen, about 15 minutes. An instance's group commit held
    # a connection to a lost primary that long, and every later order of
    # its vouchers waited on it (docs/deploy.md).
    in_host "$host" sysctl -qw net.ipv4.tcp_retries2=5 >/dev/null
}

# The `filter` table's rules, without its tables' and chains' own lines.
ip_filter_rules() { nft list table ip filter 2>/dev/null | grep -vE '^\s*(table |chain |type |\}|$)' || true; }

network_down() {
    local host pid
    for host in "${HOST_NAMES[@]}"; do
        host_exists "$host" || continue
        # A process left in a namespace would keep it alive.
        for pid in $(ip netns pids "$(host_ns "$host")" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
        ip netns del "$(host_ns "$host")"
    done
    for host in "${HOST_NAMES[@]}"; do
        ip link del "$(host_veth "$host")" 2>/dev/null || true
    done
    ip link del "$HOSTS_BRIDGE" 2>/dev/null || true
    # Asked only where the rule is: iptables would make the table to answer.
    if command -v iptables >/dev/null 2>&1 && grep -q "$HOSTS_BRIDGE" <<<"$(ip_filter_rules)"; then
        while iptables -D FORWARD -i "$HOSTS_BRIDGE" -o "$HOSTS_BRIDGE" -j ACCEPT 2>/dev/null; do :; done
    fi
    if [ -f "$HOSTS_DIR/made-ip-filter" ] && [ -z "$(ip_filter_rules)" ]; then
        nft delete table ip filter 2>/dev/null || true
    fi
    rm -f "$HOSTS_DIR/made-ip-filter"
}

# What of ours is left: namespaces, links, processes. Empty when none.
leftovers() {
    local host
    for host in "${HOST_NAMES[@]}"; do
        host_exists "$host" && echo "namespace $(host_ns "$host")"
        ip link show "$(host_veth "$host")" >/dev/null 2>&1 && echo "link $(host_veth "$host")"
    done
    ip link show "$HOSTS_BRIDGE" >/dev/null 2>&1 && echo "bridge $HOSTS_BRIDGE"
    pgrep -af -- "$HOSTS_DIR|$HOSTS_STAGE|redis-server $HOSTS_NET\\." | sed 's/^/process /'
    return 0
}

# --- the firewall -------------------------------------------------------

# What each host lets in (docs/deploy.md, "Ports and firewall"): clients
# reach nginx alone; nginx the instances; the instances the stores; the
# replica its primary; a cluster's nodes each other, on the data port and
# the bus (6379 + 10000). This machine's end of the bridge (10.231.0.1)
# stands for the operators' machine: the tools, the tests and the audits
# reach every port. The db hosts replicate from each other (either may be
# the primary) and, with the witness, speak Corosync (UDP 5405). Everything
# else is dropped.
firewall_rules() { # firewall_rules HOST: the nftables rules of what HOST lets in
    local apps ops="$HOSTS_NET.1" dbs
    apps="$(host_ip app1), $(host_ip app2)"
    dbs="$(host_ip db), $(host_ip db-replica)"
    case $1 in
        nginx) echo "tcp dport { 8080, 8443 } accept" ;;
        app1 | app2) echo "ip saddr { $(host_ip nginx), $ops } tcp dport 8081 accept" ;;
        db | db-replica) echo "ip saddr { $apps, $dbs, $ops } tcp dport 3306 accept
            ip saddr { $dbs, $(host_ip db-witness) } udp dport 5405 accept" ;;
        db-witness) echo "ip saddr { $dbs } udp dport 5405 accept" ;;
        redis) echo "ip saddr { $apps, $ops } tcp dport 6379 accept" ;;
        redis[1-6]) echo "ip saddr { $apps, $ops, $(host_ip redis1)-$(host_ip redis6) } tcp dport { 6379, 16379 } accept" ;;
        nats[1-3]) echo "ip saddr { $apps, $ops } tcp dport 4222 accept
            ip saddr { $(host_ip nats1)-$(host_ip nats3) } tcp dport 6222 accept" ;;
    esac
}

firewall_up() {
    ensure_command nft nftables
    local host
    # shellcheck disable=SC2046
    for host in nginx app1 app2 $(db_hosts) $(redis_hosts) $(nats_hosts); do host_firewall_up "$host"; done
}
host_firewall_up() { # host_firewall_up HOST
    local host=$1
    in_host "$host" nft -f - <<NFT || die "nftables refused the $host host's firewall"
table inet hmdp_firewall
delete table inet hmdp_firewall
table inet hmdp_firewall {
    chain input {
        type filter hook input priority 0; policy drop;
        ct state established,related accept
        iif lo accept
        icmp type echo-request accept
        $(firewall_rules "$host")
    }
}
NFT
}

# --- cutting a link -----------------------------------------------------

# One table of HOST's own, so that healing removes exactly what cutting
# added; dropped, not refused, as a cut wire gives no answer.
CUT_TABLE=hmdp_cut

cut() { # cut HOST PEER
    local host=$1 peer=$2
    host_exists "$host" || die "no host $host (scripts/hosts up first)"
    host_ip "$peer" >/dev/null
    ensure_command nft nftables
    in_host "$host" nft list table inet "$CUT_TABLE" >/dev/null 2>&1 || in_host "$host" nft -f - <<NFT
table inet $CUT_TABLE {
    chain input { type filter hook input priority 0; policy accept; }
    chain output { type filter hook output priority 0; policy accept; }
}
NFT
    local address
    # The wire to a db host carries the floating addresses it holds too.
    for address in "$(host_ip "$peer")" $(db_addresses_of "$peer"); do
        in_host "$host" nft add rule inet "$CUT_TABLE" input ip saddr "$address" drop
        in_host "$host" nft add rule inet "$CUT_TABLE" output ip daddr "$address" drop
    done
    log "cut: $host and $peer no longer reach each other"
}

holds_db_address() { # holds_db_address HOST: the primary's address is on HOST
    db_addresses_of "$1" | grep -qx "$DB_ADDRESS"
}
db_addresses_of() { # db_addresses_of HOST: the floating addresses on HOST
    [[ "$1" == db* ]] && host_exists "$1" || return 0
    in_host "$1" ip -o -4 addr show dev eth0 | awk '{ sub("/.*", "", $4); print $4 }' | grep -xE "$DB_ADDRESS|$DB_READ_ADDRESS" || true
}

heal() { # heal HOST
    local host=$1
    host_exists "$host" || die "no host $host"
    if in_host "$host" nft list table inet "$CUT_TABLE" >/dev/null 2>&1; then
        in_host "$host" nft delete table inet "$CUT_TABLE"
        log "healed: $host reaches every host again"
    fi
}
