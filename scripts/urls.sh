# The stores' URLs carry their passwords: what the scripts may show of one,
# and redis-cli given one without the password on its command line (any
# local user reads a process's arguments in /proc/PID/cmdline, and `ps`
# shows them). Sourced by lib.sh.
# shellcheck shell=bash

# A URL as a log may show it, as the service shows one: `user:<redacted>@`,
# or `<redacted>@` for a lone credential (a user to MariaDB and Redis, the
# token itself in NATS's `nats://TOKEN@host`). A comma-separated list of
# URLs (REDIS_CLUSTER_NODES) is shown URL by URL.
url_shown() { # url_shown URL[,URL...]
    local url creds shown=()
    local IFS=,
    for url in $1; do
        if [[ $url == *://*@* ]]; then
            creds=${url#*://}
            creds=${creds%@*}
            if [[ $creds == *:* ]]; then creds="${creds%%:*}:<redacted>"; else creds="<redacted>"; fi
            url="${url%%://*}://$creds@${url##*@}"
        fi
        shown+=("$url")
    done
    echo "${shown[*]}"
}

url_decode() { printf '%b' "${1//%/\\x}"; } # url_decode PERCENT-ENCODED

# redis-cli for the Redis of URL (as redis-rs reads it: `user:password@`,
# a lone `user@` has no password), its user given as --user and its
# password in the environment (REDISCLI_AUTH), not in -u's URL or --pass.
redis_cli_url() { # redis_cli_url URL ARGS...
    local url=$1 rest creds user="" pass=""
    shift
    rest=${url#*://}
    if [[ $rest == *@* ]]; then
        creds=${rest%@*}
        rest=${rest##*@}
        user=${creds%%:*}
        [[ $creds == *:* ]] && pass=${creds#*:}
    fi
    local args=(-u "${url%%://*}://$rest")
    [ -n "$user" ] && args+=(--user "$(url_decode "$user")")
    if [ -n "$pass" ]; then
        REDISCLI_AUTH=$(url_decode "$pass") redis-cli "${args[@]}" "$@"
    else
        redis-cli "${args[@]}" "$@"
    fi
}

# Deletes the keys of the Redis of URL that match PATTERN, 500 at a time.
redis_del_matching() { # redis_del_matching URL PATTERN
    local keys
    redis_cli_url "$1" --scan --pattern "$2" | while mapfile -t -n 500 keys && [ "${#keys[@]}" -gt 0 ]; do
        redis_cli_url "$1" del "${keys[@]}" >/dev/null
    done
}
