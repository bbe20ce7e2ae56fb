# The stack's NATS server with JetStream, for order events
# (ORDER_EVENTS=nats scripts/stack up): Debian's nats-server (installed when
# missing) on 127.0.0.1:4223, its JetStream store in .stack/nats. Port
# 4222 is left to a NATS server the machine may run already. Sourced by
# scripts/stack (after lib.sh).
# shellcheck shell=bash

NATS_PORT=${NATS_PORT:-4223}
NATS_DIR="$STATE_DIR/nats"
NATS_PIDFILE="$NATS_DIR/nats-server.pid"

nats_ready() { (exec 3<>"/dev/tcp/127.0.0.1/$NATS_PORT") 2>/dev/null; }

nats_up() {
    ensure_nats
    mkdir -p "$NATS_DIR"
    if running "$NATS_PIDFILE" "nats-server.*$NATS_DIR"; then
        return 0
    fi
    log "starting NATS (JetStream) on 127.0.0.1:$NATS_PORT, store $NATS_DIR"
    nohup "$(nats_server_bin)" -js -a 127.0.0.1 -p "$NATS_PORT" -sd "$NATS_DIR" \
        >>"$NATS_DIR/nats-server.log" 2>&1 &
    echo $! >"$NATS_PIDFILE"
    wait_for 15 "NATS on 127.0.0.1:$NATS_PORT (see $NATS_DIR/nats-server.log)" nats_ready
}

nats_down() {
    stop_pid "$NATS_PIDFILE" "nats-server.*$NATS_DIR" "NATS"
}

nats_status() {
    running "$NATS_PIDFILE" "nats-server.*$NATS_DIR" || return 1
    printf 'nats   pid %-7s nats://127.0.0.1:%s  ready=%s\n' "$(cat "$NATS_PIDFILE")" "$NATS_PORT" \
        "$(nats_ready && echo yes || echo no)"
}
