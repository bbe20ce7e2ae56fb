# shellcheck shell=bash
# The hosts' MariaDB pair that fails over by itself: Pacemaker and Corosync
# (Debian's packages) run on the db, db-replica and db-witness hosts, and
# the resource-agents `mariadb` agent, patched (scripts/hosts-mariadb-agent.patch),
# keeps one server promoted and the other its semi-synchronous standby. The
# service reaches the primary at a floating address (DB_ADDRESS, an
# IPaddr2 resource placed with the promoted server), so no instance
# restarts when the other server takes over, and its reads that may lag
# at another (DB_READ_ADDRESS), on the standby while there is one, else
# on the primary. The witness holds no data:
# with it, the two that remain after any one host is lost are a majority,
# and a lone server never promotes itself (no-quorum-policy=stop).
# Sourced by scripts/hosts-db.sh; docs/deploy.md says why these settings.
DB_ADDRESS="$HOSTS_NET.25"
DB_READ_ADDRESS="$HOSTS_NET.26"
HA_AGENTS="$HOSTS_DIR/ha-agents"

ha_dir() { echo "$HOSTS_DIR/$1/ha"; }
ha_running() { running "$(ha_dir "$1")/pacemakerd.pid" pacemakerd; }
ha_at() { # ha_at HOST COMMAND...: COMMAND in HOST's cluster node (its mounts and network)
    local host=$1
    shift
    # Not `die`: polled while the node starts.
    ha_running "$host" || { log "no cluster node runs on the $host host"; return 1; }
    nsenter -t "$(cat "$(ha_dir "$host")/pacemakerd.pid")" -m -n -u "$@"
}
ha_any() { # ha_any COMMAND...: COMMAND on a cluster node that runs
    local host
    for host in db db-replica db-witness; do
        ha_running "$host" && { ha_at "$host" "$@"; return; }
    done
    die "no cluster node runs"
}

ensure_ha_packages() {
    local missing=()
    command -v pacemakerd >/dev/null 2>&1 || missing+=(pacemaker)
    command -v corosync >/dev/null 2>&1 || missing+=(corosync)
    command -v crm >/dev/null 2>&1 || missing+=(crmsh)
    command -v bc >/dev/null 2>&1 || missing+=(bc)
    command -v patch >/dev/null 2>&1 || missing+=(patch)
    [ -f /usr/lib/ocf/resource.d/heartbeat/mariadb ] || missing+=(resource-agents)
    [ ${#missing[@]} = 0 ] || apt_install "${missing[@]}"
}

# The upstream agent with this project's patch, under the provider `hmdp`:
# the patch says what it changes and why.
# Made where the nodes do not see it, and put in place only when no node
# runs: a node reads it through its overlay, which must not change under it.
ha_agents_up() {
    local made="$HOSTS_DIR/ha-agent.new" host
    cp /usr/lib/ocf/resource.d/heartbeat/mariadb "$made"
    patch -s "$made" "$ROOT/scripts/hosts-mariadb-agent.patch" \
        || die "this resource-agents' mariadb agent ($(dpkg-query -W -f '${Version}' resource-agents 2>/dev/null)) does not take scripts/hosts-mariadb-agent.patch, made for 1:4.12.0-2"
    rm -f "$made.orig"
    chmod 0755 "$made"
    if cmp -s "$made" "$HA_AGENTS/hmdp/mariadb"; then
        rm -f "$made"
        return 0
    fi
    for host in db db-replica db-witness; do
        ! ha_running "$host" || die "the cluster runs another MariaDB agent than scripts/hosts-mariadb-agent.patch makes; scripts/hosts down first"
    done
    mkdir -p "$HA_AGENTS/hmdp"
    mv "$made" "$HA_AGENTS/hmdp/mariadb"
}

# The replication password where the agent reads it (replication_passwd_file),
# on each db host: not in the cluster's configuration, which Pacemaker logs.
db_password_file() { # db_password_file HOST
    (umask 077 && printf '%s' "$HOSTS_REPL_PASSWORD" >"$(db_dir "$1")/replication-password")
}

ha_corosync_conf() {
    local host id=0
    cat <<CONF
totem {
    version: 2
    cluster_name: hmdp-db
    transport: knet
    # A node silent for 1 s is gone: the default 3 s would add 2 s to
    # every failover.
    token: 1000
    crypto_cipher: aes256
    crypto_hash: sha256
}
logging {
    to_logfile: yes
    logfile: /var/log/corosync/corosync.log
    to_syslog: no
    to_stderr: no
    timestamp: on
}
quorum {
    provider: corosync_votequorum
}
nodelist {
CONF
    for host in db db-replica db-witness; do
        id=$((id + 1))
        printf '    node {\n        name: %s\n        nodeid: %s\n        ring0_addr: %s\n    }\n' "$host" "$id" "$(host_ip "$host")"
    done
    echo "}"
}

# What Pacemaker keeps: the agent's parameters are the same on both
# servers (each sees its own directory at /run/hmdp-db); the floating
# address goes where the primary is, after it is promoted; nothing of the
# pair runs on the witness. No fencing: these hosts are namespaces of one
# machine, with no power switch to pull (docs/deploy.md says what a real
# deployment must add). The monitors are as rare as a failover allows:
# each starts some thirty programs, three MariaDB clients among them, on
# the sale's cores (the pair's agents take 0.05 of a core at rest, 0.1
# before the patch's clients without TLS on the socket and its one-pass
# parse of the standby's status); the standby's, every 3 s, is the one a
# promotion waits for (every 10 s, a lost primary's host stopped a sale
# 16.0 s, past the 15 s allowed); the primary's only finds a dead server.
ha_cib() {
    local ssl=""
    tls_on && ssl="replication_master_ssl_ca=$TLS_DIR/ca.pem"
    cat <<CIB
property stonith-enabled=false no-quorum-policy=stop dc-deadtime=2s
rsc_defaults resource-stickiness=100
node db attributes mariadb_mysql_master_IP=$(host_ip db)
node db-replica attributes mariadb_mysql_master_IP=$(host_ip db-replica)
node db-witness
primitive mariadb ocf:hmdp:mariadb \\
    params binary=$(command -v mariadbd || echo /usr/sbin/mariadbd) config=/run/hmdp-db/my.cnf datadir=/run/hmdp-db/data \\
        socket=/run/hmdp-db/mysqld.sock pid=/run/hmdp-db/mysqld.pid log=/run/hmdp-db/error.log user=root group=root \\
        replication_user=hmdp_repl replication_passwd_file=/run/hmdp-db/replication-password node_list="db db-replica" $ssl \\
    op start timeout=120s interval=0 op stop timeout=120s interval=0 \\
    op promote timeout=120s interval=0 op demote timeout=120s interval=0 \\
    op monitor interval=10s role=Promoted timeout=30s \\
    op monitor interval=3s role=Unpromoted timeout=30s
clone mariadb-pair mariadb meta promotable=true notify=true clone-max=2 promoted-max=1 interleave=true
primitive primary-address IPaddr2 params ip=$DB_ADDRESS cidr_netmask=24 nic=eth0 op monitor interval=30s
colocation address-with-primary inf: primary-address mariadb-pair:Promoted
order primary-before-address Mandatory: mariadb-pair:promote primary-address:start
primitive read-address IPaddr2 params ip=$DB_READ_ADDRESS cidr_netmask=24 nic=eth0 op monitor interval=30s
colocation reads-with-standby 200: read-address mariadb-pair:Unpromoted
location pair-not-on-witness mariadb-pair -inf: db-witness
location address-not-on-witness primary-address -inf: db-witness
location reads-not-on-witness read-address -inf: db-witness
CIB
}

ha_node_up() { ha_node_start "$1" && ha_node_wait "$1"; } # ha_node_up HOST
ha_node_wait() { wait_for 30 "the cluster node on the $1 host (see $(ha_dir "$1")/var-log-pacemaker/pacemaker.log)" ha_at "$1" crm_node -n; }
# HOST's Corosync and Pacemaker started, in namespaces of their own. Its
# first configuration waits 2 s, not Pacemaker's 20, for a coordinator
# before electing one (dc-deadtime): 18 s of every `up`, all three nodes
# being there after a second. Its version is the lowest there is, so a node
# that joins a running cluster takes the cluster's.
ha_node_start() { # ha_node_start HOST
    local host=$1 dir db=""
    ha_running "$host" && return 0
    dir=$(ha_dir "$host")
    rm -rf "$dir"
    mkdir -p "$dir"/{etc-corosync,var-lib-corosync,var-log-corosync,var-log-pacemaker,var-lib-pacemaker}
    cp -a /var/lib/pacemaker/. "$dir/var-lib-pacemaker/"
    cibadmin --empty >"$dir/var-lib-pacemaker/cib/cib.xml"
    CIB_file="$dir/var-lib-pacemaker/cib/cib.xml" crm_attribute --type crm_config --name dc-deadtime --update 2s \
        || die "cannot write the $host host's first cluster configuration"
    sed -i '1s/ epoch="[0-9]*"/ epoch="0"/' "$dir/var-lib-pacemaker/cib/cib.xml"
    chown -R hacluster:haclient "$dir/var-lib-pacemaker/cib"
    chmod 0600 "$dir/var-lib-pacemaker/cib/cib.xml"
    chown hacluster:haclient "$dir/var-log-pacemaker"
    chmod 0770 "$dir/var-log-pacemaker"
    [ -s "$HOSTS_DIR/ha-authkey" ] || (umask 077 && head -c 256 /dev/urandom >"$HOSTS_DIR/ha-authkey")
    install -m 0400 "$HOSTS_DIR/ha-authkey" "$dir/etc-corosync/authkey"
    ha_corosync_conf >"$dir/etc-corosync/corosync.conf"
    [ "$host" = db-witness ] || db=$(db_dir "$host")
    log "starting Corosync and Pacemaker on the $host host"
    in_host "$host" unshare --mount --uts --propagation private "$ROOT/scripts/hosts-ha-node" \
        "$host" "$dir" "$HA_AGENTS" $db || die "the cluster node on the $host host did not start (see $dir/corosync.out)"
}

ha_quorate() { ha_any crm_mon -1 2>/dev/null | grep -q "partition with quorum"; }

# The pair as `up` leaves it: a primary at DB_ADDRESS, the standby
# replicating from it and acknowledging its commits.
db_pair_up() {
    ensure_ha_packages
    ha_agents_up
    local host
    for host in db db-replica; do db_password_file "$host"; done
    [ -d "$(db_dir db)/data/mysql" ] || db_pair_bootstrap
    for host in db db-replica db-witness; do ha_node_start "$host"; done
    for host in db db-replica db-witness; do ha_node_wait "$host"; done
    wait_for 60 "the cluster of the db hosts to be quorate" ha_quorate
    (umask 077 && ha_cib >"$HOSTS_DIR/ha-cib.crm")
    ha_any crm configure load replace "$HOSTS_DIR/ha-cib.crm" >"$HOSTS_DIR/ha-cib.log" 2>&1 \
        || { cat "$HOSTS_DIR/ha-cib.log" >&2; die "Pacemaker refused the db hosts' configuration"; }
    wait_for 120 "a promoted MariaDB at $DB_ADDRESS (see $(db_dir db)/error.log)" primary_at_address
    db_sql "$(db_primary)" <<<"$(db_accounts_sql)" || die "cannot make the accounts on the primary"
    db_pair_wait
}
db_pair_wait() {
    wait_for 60 "replication to the standby (see its error.log)" replication_running
    wait_for 30 "the primary's commits to wait for the standby (semi-synchronous)" standby_acknowledges
    wait_for 30 "the reads' address ($DB_READ_ADDRESS) on the standby" reads_on_standby
}
reads_on_standby() { db_addresses_of "$(db_standby)" | grep -qx "$DB_READ_ADDRESS"; }
db_primary_now() { # db_primary_now [--at-address]
    local primary
    primary=$(db_primary) || die "no MariaDB of the db hosts is the primary"
    [ "$1" != --at-address ] || { holds_db_address "$primary" && primary_at_address; } \
        || die "the $primary host's MariaDB is the primary but does not answer at $DB_ADDRESS yet"
    echo "$primary"
}
primary_at_address() { MYSQL_PWD="$HOSTS_DB_PASSWORD" db_network_client -h "$DB_ADDRESS" -u hmdp -e "SELECT 1" >/dev/null 2>&1; }

# The first start: the primary made, its accounts in its binary log, the
# standby a copy of it. The agent then promotes the one whose history is
# longest (equal here: db, the first it names).
db_pair_bootstrap() {
    local dir gtid
    dir=$(db_dir db)
    log "making the db hosts' first data: the primary's, copied to the standby"
    rm -rf "$dir/data" "$(db_dir db-replica)/data"
    mkdir -p "$dir" "$(db_dir db-replica)"
    db_config db >"$dir/my.cnf"
    mariadb-install-db --no-defaults --user=root --datadir="$dir/data" --auth-root-authentication-method=socket \
        --auth-root-socket-user=root --skip-test-db >"$dir/install.log" 2>&1 \
        || { cat "$dir/install.log" >&2; die "mariadb-install-db failed for the db host"; }
    db_offline db start
    db_sql db <<<"$(db_accounts_sql)" || die "cannot make the accounts on the db host"
    gtid=$(db_sql db -N -e "SELECT @@gtid_binlog_pos")
    db_offline db stop
    cp -a "$dir/data" "$(db_dir db-replica)/data"
    db_standby_seed db-replica "$gtid"
}

# A standby's data as a copy leaves it: without the source's binary logs,
# and replicating from after the copy's last transaction.
db_standby_seed() { # db_standby_seed HOST GTID
    local dir
    dir=$(db_dir "$1")
    rm -f "$dir/data"/mariadb-bin.* "$dir/data"/relay-bin.* "$dir/data"/master.info "$dir/data"/relay-log.info
    db_config "$1" >"$dir/my.cnf"
    db_offline "$1" start
    db_sql "$1" -e "SET GLOBAL gtid_slave_pos = '$2'" || die "cannot set the $1 host's replication position"
    db_offline "$1" stop
}

# HOST's server alone, on its socket only, for what must be done before
# the cluster runs it.
db_offline() { # db_offline HOST start|stop
    local dir
    dir=$(db_dir "$1")
    if [ "$2" = start ]; then
        db_server "$1" --skip-networking --skip-slave-start --read-only=0 --rpl-semi-sync-master-enabled=0 >/dev/null 2>&1 &
        wait_for 60 "MariaDB on the $1 host (see $dir/error.log)" db_alive "$1"
    else
        db_sql "$1" -e "SHUTDOWN" || die "cannot stop MariaDB on the $1 host"
        wait_for 60 "MariaDB on the $1 host to stop" test ! -e "$dir/mysqld.pid"
    fi
}

# Stopped under Pacemaker, which is told first to leave them alone.
db_pair_down() {
    local host
    for host in db db-replica db-witness; do
        ha_running "$host" || continue
        ha_at "$host" crm_attribute --type crm_config --name maintenance-mode --update true >/dev/null 2>&1 || true
        break
    done
}
