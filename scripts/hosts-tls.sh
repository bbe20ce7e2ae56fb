# shellcheck shell=bash
# The hosts' certificates: the stack's own authority and a certificate for
# nginx and each store's host, what TLS a store was started with, and
# `scripts/hosts renew HOST`. Sourced by scripts/hosts, whose helpers
# (host_ip, tls_on, host_exists, ...) it uses.

# --- certificates -------------------------------------------------------

# The stack's own certificate authority, made once; a host's certificate
# is made again when the authority changed or it has less than a month to
# run (`up` renews it; a restart of what uses it picks it up).
tls_up() {
    tls_on || return 0
    ensure_command openssl openssl
    mkdir -p "$TLS_DIR"
    chmod 0700 "$TLS_DIR"
    if ! openssl x509 -checkend 2592000 -noout -in "$TLS_DIR/ca.pem" >/dev/null 2>&1; then
        log "making the hosts' certificate authority ($TLS_DIR/ca.pem)"
        (umask 077 && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 825             -subj "/CN=hmdp hosts CA" -addext "basicConstraints=critical,CA:TRUE"             -addext "keyUsage=critical,keyCertSign,cRLSign" -keyout "$TLS_DIR/ca.key" -out "$TLS_DIR/ca.pem")             >"$TLS_DIR/openssl.log" 2>&1 || { cat "$TLS_DIR/openssl.log" >&2; die "openssl could not make the CA"; }
    fi
    local host
    # shellcheck disable=SC2046
    for host in nginx db db-replica $(redis_hosts) $(nats_hosts); do host_cert "$host"; done
}

host_cert() { # host_cert HOST: HOST.pem and HOST.key, naming the host and its addresses
    local host=$1 names
    # A db host serves at the primary's address too, whenever it is the primary.
    names="DNS:$host,IP:$(host_ip "$host")"
    case $host in db | db-replica) names="$names,IP:$DB_ADDRESS,IP:$DB_READ_ADDRESS" ;; esac
    if openssl verify -CAfile "$TLS_DIR/ca.pem" "$TLS_DIR/$host.pem" >/dev/null 2>&1 \
        && openssl x509 -checkend 2592000 -noout -in "$TLS_DIR/$host.pem" >/dev/null 2>&1 \
        && [ "$(openssl x509 -noout -ext subjectAltName -in "$TLS_DIR/$host.pem" | tail -n +2 | tr -d ' ')" \
            = "$(sed 's/IP:/IPAddress:/g' <<<"$names")" ]; then
        return 0
    fi
    log "making the $host host's certificate ($names)"
    (umask 077 && openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=$host" \
        -keyout "$TLS_DIR/$host.key" -out "$TLS_DIR/$host.csr") >"$TLS_DIR/openssl.log" 2>&1 \
        && openssl x509 -req -in "$TLS_DIR/$host.csr" -CA "$TLS_DIR/ca.pem" -CAkey "$TLS_DIR/ca.key" \
            -CAcreateserial -days 397 -out "$TLS_DIR/$host.pem" -extfile <(printf '%s\n' \
            "subjectAltName=$names" "basicConstraints=critical,CA:FALSE" \
            "keyUsage=critical,digitalSignature" "extendedKeyUsage=serverAuth,clientAuth") \
            >>"$TLS_DIR/openssl.log" 2>&1 \
        || { cat "$TLS_DIR/openssl.log" >&2; die "openssl could not make the $host host's certificate"; }
    rm -f "$TLS_DIR/$host.csr"
}

# What a store in DIR was started with (1: TLS), or HOSTS_TLS when it
# never was.
store_tls() { cat "$1/tls" 2>/dev/null || echo "$HOSTS_TLS"; }

# The stores were started with or without TLS; `up` does not turn it on or
# off under them.
stores_tls_match() { # stores_tls_match DIR WHAT
    local was
    was=$(store_tls "$1")
    [ "$was" = "$HOSTS_TLS" ] || die "$2 runs with HOSTS_TLS=$was; scripts/hosts down first"
}

# What docs/deploy.md says to do after a new certificate, done: HOST's is
# made again and its server reads it while it runs. Redis on CONFIG SET
# of the same paths, MariaDB on FLUSH SSL, nginx on a reload; none drops
# a connection, and the instances, which hold only the authority's
# certificate, go on as they were.
renew() { # renew HOST
    local host=$1
    HOSTS_TLS=$(store_tls "$HOSTS_DIR/db")
    tls_on || die "the hosts run without TLS: there is no certificate to renew"
    host_exists "$host" || die "no host $host is up"
    ensure_hosts_secrets
    rm -f "$TLS_DIR/$host.pem"
    host_cert "$host"
    case $host in
        nginx) nginx_up ;;
        db | db-replica) db_sql "$host" -e "FLUSH SSL" || die "MariaDB on the $host host did not read its new certificate" ;;
        redis*)
            [ "$(redis_ops_at "$host" config set tls-cert-file "$TLS_DIR/$host.pem" tls-key-file "$TLS_DIR/$host.key")" = OK ] \
                || die "Redis on the $host host did not read its new certificate"
            ;;
        *) die "the $host host serves no certificate" ;;
    esac
    log "the $host host serves its new certificate ($(openssl x509 -noout -serial -in "$TLS_DIR/$host.pem"))"
}
