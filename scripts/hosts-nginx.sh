# shellcheck shell=bash
# nginx on the nginx host: this clone's nginx/ files with the hosts'
# addresses, HTTPS (HTTP/2) on :8443 beside HTTP when the hosts run TLS,
# and the instances as its upstream. Sourced by scripts/hosts, whose
# helpers (host_ip, in_host, tls_on, ...) it uses.

# --- nginx --------------------------------------------------------------

nginx_ready() { curl -fsS "http://$(host_ip nginx):8080/ready" >/dev/null 2>&1; }

# This clone's nginx/ files with the hosts' addresses: nginx listens on its
# host's address and reaches the instances over TCP.
stage_nginx() {
    local worker=$1 conf="$HOSTS_STAGE/conf" app
    rm -rf "$HOSTS_STAGE/conf" "$HOSTS_STAGE/html"
    mkdir -p "$conf" "$HOSTS_STAGE/tmp"
    cp "$ROOT"/nginx/*.conf "$conf/"
    cp -R "$ROOT/nginx/html" "$HOSTS_STAGE/html"
    sed -i "s/listen 127\.0\.0\.1:8080 /listen $(host_ip nginx):8080 /" "$conf/nginx.conf"
    grep -q "listen $(host_ip nginx):8080 " "$conf/nginx.conf" || die "nginx/nginx.conf no longer listens on 127.0.0.1:8080"
    # HTTPS and HTTP/2 on a port of its own, the same server otherwise.
    if tls_on; then
        sed -i "/listen $(host_ip nginx):8080 /a\\
        listen $(host_ip nginx):8443 ssl http2 reuseport backlog=65535;\\
        ssl_certificate $TLS_DIR/nginx.pem;\\
        ssl_certificate_key $TLS_DIR/nginx.key;\\
        ssl_protocols TLSv1.2 TLSv1.3;\\
        ssl_session_cache shared:hmdp_tls:10m;" "$conf/nginx.conf"
        grep -q "listen $(host_ip nginx):8443 ssl http2" "$conf/nginx.conf" || die "could not add HTTPS to nginx.conf"
    fi
    {
        echo "# Written by scripts/hosts: the instances on their hosts."
        # An instance named in NGINX_OUT is `down`: an upgrade takes it
        # out before stopping it, so that nginx sends it nothing more.
        for app in app1 app2; do
            echo "server $(host_ip "$app"):8081 max_fails=1 fail_timeout=1s$([[ " ${NGINX_OUT:-} " == *" $app "* ]] && echo " down");"
        done
    } >"$conf/hmdp-instances.conf"
    chmod 0755 "$(dirname "$(dirname "$HOSTS_STAGE")")" "$(dirname "$HOSTS_STAGE")" "$HOSTS_STAGE"
    chmod -R a+rX,go-w "$conf" "$HOSTS_STAGE/html"
    chown "$worker" "$HOSTS_STAGE/tmp"
}

nginx_up() {
    ensure_command nginx nginx
    local worker="" user
    for user in www-data nobody; do id "$user" >/dev/null 2>&1 && { worker=$user; break; }; done
    [ -n "$worker" ] || die "no unprivileged user (www-data or nobody) to run nginx's workers as"
    mkdir -p "$HOSTS_STAGE"
    stage_nginx "$worker"
    local globals="worker_processes ${NGINX_WORKERS:-$(nginx_workers_for "${NGINX_CROWD:-20000}")}; user $worker $(id -gn "$worker");"
    in_host nginx nginx -t -q -p "$HOSTS_STAGE/" -c "$HOSTS_STAGE/conf/nginx.conf" -g "${globals}error_log stderr;" \
        || die "nginx rejected the hosts' configuration"
    if running "$HOSTS_STAGE/nginx.pid" nginx; then
        log "nginx already running on the nginx host; reloading its config"
        nginx -p "$HOSTS_STAGE/" -c "$HOSTS_STAGE/conf/nginx.conf" -g "$globals" -s reload
    else
        log "starting nginx on the nginx host ($(host_ip nginx):8080)"
        in_host nginx nginx -p "$HOSTS_STAGE/" -c "$HOSTS_STAGE/conf/nginx.conf" -g "$globals"
    fi
    ln -sfn "$HOSTS_STAGE" "$HOSTS_DIR/nginx"
}

nginx_down() { STOP_SIGNAL=QUIT stop_pid "$HOSTS_STAGE/nginx.pid" nginx "nginx on the nginx host"; }
