#!/bin/sh
# Stands in for the registry image's healthcheck.sh (whatever it is asked):
# healthy once the server answers on the network, which it does only after
# the entrypoint's set-up is over (that runs without networking).
exec mariadb-admin --protocol=tcp --host=127.0.0.1 ping >/dev/null 2>&1
