# shellcheck shell=bash
# Machines lost with their disks and fresh ones in their place, on the
# hosts' Redis Cluster stack that scripts/check-hosts leaves up: what
# cannot be survived is refused and changes nothing; after a lost host
# rejoins, the stack loses another of its kind and still sells (audited);
# the MariaDB primary's acknowledged commits outlive its host on a standby
# that was itself a fresh machine, which Pacemaker promotes; the order
# stream's leader lost, then the new one once the first is back, every
# order's events audited. Sourced by
# scripts/check-hosts (its helpers: refused, ready_status).

# A sale of 500 buyers for 100 units through the hosts' nginx, audited
# (with the order events, too, when the hosts run them).
sale_after_loss() { # sale_after_loss WHAT PHONE
    local audit=()
    [ -n "${NATS_URL:-}" ] && audit=(--events-audit)
    "$BIN_DIR/seckill-load" --base-url "$HMDP_BASE_URL" --users 500 --stock 100 \
        --concurrency 100 --first-phone "$2" "${audit[@]}" >"$STATE_DIR/hosts-sale-lost-$1.log" 2>&1 \
        || { tail -30 "$STATE_DIR/hosts-sale-lost-$1.log" >&2; die "the sale with $1 lost failed its audit"; }
    log "a sale with $1 lost, audited"
}
primary_is() { [ "$(hosts db-primary --at-address 2>/dev/null)" = "$1" ]; }
# The host of the master serving KEY's slot, as ASKED sees it.
master_host_of() { hosts master-of "$1" "$2" 2>/dev/null; }
# HOST, the master of {TAG}, lost as chaos loses a sale's voucher's master:
# over once its replica is promoted.
lose_master() { # lose_master HOST TAG
    SALE_VOUCHER_ID=$2 bash "$ROOT/scripts/chaos-cuts" lost-redis-master-host >&2 \
        || die "losing $1's host, the master of {$2}, failed"
}

log "a host lost with its disk, and a fresh one in its place: what cannot be done is refused"
refused "losing a host there is not" "no host" hosts lose db2
refused "losing nginx, the only one" "only one" hosts lose nginx
refused "a rejoin of a host there is not" "no host" hosts rejoin db2
refused "a rejoin of a host that is not lost" "not lost" hosts rejoin app1
[ "$(ready_status 10.231.0.10:8080)" = 200 ] || die "a refused loss of nginx changed it"

log "an instance's host lost, a fresh one in its place, then the other's lost"
hosts lose app1
hosts rejoin app1
[ "$(ready_status 10.231.0.11:8081)" = 200 ] || die "the rejoined app1 is not ready"
hosts lose app2
sale_after_loss app2 16630000000
hosts rejoin app2

log "a Redis master's host lost, a fresh one in its place, then another master's host lost"
first=$(master_host_of "{lost-1}" redis1) || die "no master of {lost-1}"
lose_master "$first" lost-1
hosts rejoin "$first"
took_over=$(master_host_of "{lost-1}" "$first")
second=""
for tag in $(seq 2 40); do
    second=$(master_host_of "{lost-$tag}" "$first") && [ "$second" != "$took_over" ] && break
    second=""
done
[ -n "$second" ] || die "no key found on a master other than $took_over"
lose_master "$second" "lost-$tag"
sale_after_loss "$second" 16640000000
hosts rejoin "$second"

log "the standby's host lost and a fresh one cloned from the primary; then the primary's host lost, the standby promoted"
[ "$(hosts db-primary --at-address)" = db ] || die "db is not the primary after up"
hosts lose db-replica
refused "losing a second database host" "cannot survive" hosts lose db-witness
[ "$(hosts db-primary --at-address)" = db ] || die "a refused loss of db-witness changed the primary"
hosts rejoin db-replica
python3 scripts/check-durability --lose-primary || die "an acknowledged commit was lost with the primary's host"
poll_for 60 primary_is db-replica || die "db-replica was not promoted within 60 s of the primary's loss"
sale_after_loss db 16650000000
hosts rejoin db
log "the witness's host lost and put back: the pair goes on"
hosts lose db-witness
[ "$(hosts db-primary --at-address)" = db-replica ] || die "the witness's loss moved the primary"
sale_after_loss db-witness 16660000000
hosts rejoin db-witness

log "the order stream's leader's host lost, a fresh one in its place (caught up), then the new leader's host lost"
first=$(hosts nats-leader)
hosts lose "$first"
other=$(printf '%s\n' nats1 nats2 nats3 | grep -vx "$first" | head -1)
refused "losing a second NATS host" "cannot survive" hosts lose "$other"
hosts rejoin "$first"
second=$(hosts nats-leader)
hosts lose "$second"
sale_after_loss "$second" 16670000000
hosts rejoin "$second"
