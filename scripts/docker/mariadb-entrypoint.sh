#!/bin/sh
# Stands in for the registry image's entrypoint in the offline mariadb image
# (offline.Dockerfile): on an empty data folder it makes the database, the
# user with every right on that database alone, and root's password, from
# the same MARIADB_* variables; then it runs the server on the network.
set -eu

quote() { printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e "s/'/''/g"; }

if [ "${1:-}" = mariadbd ]; then
    if [ ! -d /var/lib/mysql/mysql ]; then
        : "${MARIADB_DATABASE:?}" "${MARIADB_USER:?}" "${MARIADB_PASSWORD:?}" "${MARIADB_ROOT_PASSWORD:?}"
        case $MARIADB_DATABASE in *[!A-Za-z0-9_]*) echo "MARIADB_DATABASE must be a plain name" >&2; exit 1 ;; esac
        mariadb-install-db --user=mysql --datadir=/var/lib/mysql --skip-test-db \
            --auth-root-authentication-method=normal >/dev/null
        mariadbd --user=mysql --skip-networking --socket=/run/mysqld/init.sock &
        server=$!
        tries=0
        until mariadb-admin --socket=/run/mysqld/init.sock ping >/dev/null 2>&1; do
            tries=$((tries + 1))
            [ "$tries" -lt 60 ] || { echo "the server did not start to be set up" >&2; exit 1; }
            sleep 1
        done
        mariadb --socket=/run/mysqld/init.sock <<SQL
CREATE DATABASE IF NOT EXISTS \`$MARIADB_DATABASE\`;
CREATE USER '$(quote "$MARIADB_USER")'@'%' IDENTIFIED BY '$(quote "$MARIADB_PASSWORD")';
GRANT ALL ON \`$MARIADB_DATABASE\`.* TO '$(quote "$MARIADB_USER")'@'%';
ALTER USER 'root'@'localhost' IDENTIFIED BY '$(quote "$MARIADB_ROOT_PASSWORD")';
SQL
        kill "$server"
        wait "$server" || true
    fi
    # Debian's configuration binds to loopback; the stack reaches the
    # server over the compose network. The registry's image resolves no
    # client's name either: a client outside the compose network (the
    # check's audit, from the bridge's address) would wait on a reverse
    # lookup nobody can answer.
    shift
    exec mariadbd --user=mysql --bind-address=0.0.0.0 --skip-name-resolve "$@"
fi
exec "$@"
