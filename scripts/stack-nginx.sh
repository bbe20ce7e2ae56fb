# shellcheck shell=bash
# The stack's nginx on 127.0.0.1:8080: its workers' user, its prefix (staged
# outside the clone when run as root), the instances' sockets it reaches
# them through, its configuration, and its start, reload and stop. Sourced
# by scripts/stack, whose settings (INSTANCES, NGINX_PREFIX, NGINX_PORT,
# ...) it uses.

# Run as root, nginx's workers run as an unprivileged user (a worker
# compromise must not be root), who cannot enter a clone kept in a home only
# its owner may enter (mode 0700, Debian 12's default): the sale page would
# answer 403 and a request body too large for memory would fail. So nginx's
# prefix (the static pages, temp files, pid and logs) is staged outside the
# clone, readable by that user, and `.stack/nginx` links to it. Run as
# anyone else, the workers are that user and the prefix stays in `.stack/`.
nginx_worker_user() {
    local user
    for user in www-data nobody; do
        if id "$user" >/dev/null 2>&1; then echo "$user"; return 0; fi
    done
    die "no unprivileged user (www-data or nobody) to run nginx's workers as"
}

# What this clone's stack keeps outside the clone when run as root.
STAGE="/var/lib/hmdp-stack/$(printf '%s' "$ROOT" | sha256sum | cut -c1-12)"

# The instances' sockets, where nginx's workers and the instances may go and
# nobody else: run as root, a directory of the workers' group (setgid, so
# each socket, mode 0660, is the group's too) outside the clone, which the
# workers may not enter; run as anyone else, one of this user's own, short
# enough for a socket's path (108 bytes), since the workers are this user.
SOCKET_DIR=""
prepare_sockets() {
    if [ "$(id -u)" -eq 0 ]; then
        local worker
        worker=$(nginx_worker_user)
        SOCKET_DIR="$STAGE/sockets"
        mkdir -p "$SOCKET_DIR"
        chown "root:$(id -gn "$worker")" "$SOCKET_DIR"
        chmod 2750 "$SOCKET_DIR"
        chmod 0755 /var/lib/hmdp-stack "$STAGE"
    else
        SOCKET_DIR="${XDG_RUNTIME_DIR:-/tmp}/hmdp-stack-$(id -u)-$(printf '%s' "$ROOT" | sha256sum | cut -c1-12)"
        mkdir -p -m 0700 "$SOCKET_DIR"
        [ -O "$SOCKET_DIR" ] || die "$SOCKET_DIR belongs to someone else"
        chmod 0700 "$SOCKET_DIR"
    fi
}
socket_of() { echo "$SOCKET_DIR/app$1.sock"; }

stage_nginx_prefix() { # stage_nginx_prefix WORKER_USER -> prints the real prefix
    local worker=$1 stage
    stage="$STAGE/nginx"
    # A prefix left inside the clone by an older stack: its nginx stops first.
    if [ -d "$NGINX_PREFIX" ] && [ ! -L "$NGINX_PREFIX" ]; then
        if running "$NGINX_PREFIX/nginx.pid" nginx; then
            log "restarting nginx with its prefix outside the clone"
            kill -QUIT "$(cat "$NGINX_PREFIX/nginx.pid")" 2>/dev/null || true
            for _ in $(seq 1 100); do running "$NGINX_PREFIX/nginx.pid" nginx || break; sleep 0.1; done
        fi
        rm -rf "$NGINX_PREFIX"
    fi
    (umask 022 && mkdir -p "$stage/tmp")
    chmod 0755 /var/lib/hmdp-stack "$STAGE" "$stage"
    chown "$worker" "$stage/tmp"
    # The pages as they are in this clone now, world-readable.
    rm -rf "$stage/html.next"
    cp -R "$ROOT/nginx/html" "$stage/html.next"
    chmod -R a+rX,go-w "$stage/html.next"
    rm -rf "$stage/html"
    mv "$stage/html.next" "$stage/html"
    ln -sfn "$stage" "$NGINX_PREFIX"
    echo "$stage"
}

# nginx's workers: enough for a crowd of NGINX_CROWD (20,000) connections
# held at once, one a core at least (nginx_workers_for,
# scripts/lib-processes.sh), unless NGINX_WORKERS says otherwise.
NGINX_WORKERS=${NGINX_WORKERS:-$(nginx_workers_for "${NGINX_CROWD:-20000}")}

# nginx's configuration as it runs: this clone's nginx/ files, with the
# instances' sockets where this stack put them.
stage_nginx_conf() { # stage_nginx_conf PREFIX
    local conf="$1/conf" i
    rm -rf "$conf.next"
    mkdir -p "$conf.next"
    cp "$ROOT"/nginx/*.conf "$conf.next/"
    {
        echo "# Written by scripts/stack: the instances' sockets (PROXY_SOCKET)."
        for i in "${INSTANCES[@]}"; do
            echo "server unix:$(socket_of "$i") max_fails=1 fail_timeout=1s;"
        done
    } >"$conf.next/hmdp-instances.conf"
    chmod -R a+rX,go-w "$conf.next"
    rm -rf "$conf"
    mv "$conf.next" "$conf"
}

start_nginx() {
    ensure_command nginx nginx
    local nginx_bin prefix globals="worker_processes $NGINX_WORKERS;" worker=""
    nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
    if [ "$(id -u)" -eq 0 ]; then
        worker=$(nginx_worker_user)
        prefix=$(stage_nginx_prefix "$worker")
        globals="$globals user $worker $(id -gn "$worker");"
    else
        # `root html` in the server config resolves inside the prefix, which
        # links to the clone's nginx/html: the workers are this user.
        prefix="$NGINX_PREFIX"
        mkdir -p "$prefix/tmp"
        ln -sfn "$ROOT/nginx/html" "$prefix/html"
    fi
    stage_nginx_conf "$prefix"
    local conf="$prefix/conf/nginx.conf" as_user=(-g "$globals")
    "$nginx_bin" -t -q -p "$prefix/" -c "$conf" -g "${globals}error_log stderr;" \
        || die "nginx rejected $conf"
    # The command line's globals are read only at start: other workers
    # need a new master.
    if running "$NGINX_PREFIX/nginx.pid" nginx \
        && [ "$(cat "$STATE_DIR/nginx.workers" 2>/dev/null || echo unknown)" != "$NGINX_WORKERS" ]; then
        log "nginx runs other workers; restarting it with worker_processes $NGINX_WORKERS"
        stop_nginx
    fi
    echo "$NGINX_WORKERS" >"$STATE_DIR/nginx.workers"
    if running "$NGINX_PREFIX/nginx.pid" nginx; then
        log "nginx already running; reloading its config"
        local master old_workers
        master=$(cat "$NGINX_PREFIX/nginx.pid")
        old_workers=$(pgrep -P "$master" || true)
        "$nginx_bin" -p "$prefix/" -c "$conf" "${as_user[@]}" -s reload
        # The reload is done when the old workers are gone. Until then they
        # may still accept a connection and close it as idle on their way
        # out, under a keep-alive client that just reused it.
        local pid _
        for _ in $(seq 1 100); do
            local alive=0
            for pid in $old_workers; do kill -0 "$pid" 2>/dev/null && alive=1; done
            [ "$alive" = 0 ] && break
            sleep 0.1
        done
    else
        log "starting nginx on 127.0.0.1:$NGINX_PORT ($NGINX_WORKERS workers${worker:+, as $worker})"
        "$nginx_bin" -p "$prefix/" -c "$conf" "${as_user[@]}"
    fi
}

stop_nginx() {
    STOP_SIGNAL=QUIT stop_pid "$NGINX_PREFIX/nginx.pid" nginx nginx
    rm -f "$STATE_DIR/nginx.workers"
}
