#!/bin/sh
# Entry point of localhost/openshell-postgres:15 (busybox sh, runs as user postgres).
#
# First start: initdb a throwaway cluster in $PGDATA (superuser $POSTGRES_USER, default
# "postgres"; trust authentication for every address: test use only). Then run postgres
# with the container's arguments appended, e.g. `-c fsync=off -c max_connections=500`.
#
# OPENSHELL_PG_EXIT_WHEN_IDLE=N (seconds) makes the container stop itself once no TCP client
# has been connected for N seconds (after a first one came, or after
# OPENSHELL_PG_START_GRACE seconds, default 120, if none ever did). The test kit holds one
# connection open for its process's lifetime, so the container ends shortly after the test
# process does, even though the process never gets to stop it.
set -eu
umask 077
: "${PGDATA:=/tmp/pgdata}"
user=${POSTGRES_USER:-postgres}

if [ ! -s "$PGDATA/PG_VERSION" ]; then
    if ! initdb -D "$PGDATA" -U "$user" --auth=trust --encoding=UTF8 --locale=C \
        --no-sync --no-instructions >/tmp/initdb.log 2>&1; then
        cat /tmp/initdb.log >&2
        exit 1
    fi
    cat >>"$PGDATA/postgresql.conf" <<CONF
listen_addresses = '*'
unix_socket_directories = '/tmp'
CONF
    echo "host all all all trust" >>"$PGDATA/pg_hba.conf"
fi

idle_limit=${OPENSHELL_PG_EXIT_WHEN_IDLE:-}
if [ -z "$idle_limit" ] || [ "$idle_limit" = 0 ]; then
    exec postgres -D "$PGDATA" "$@"
fi

postgres -D "$PGDATA" "$@" &
pg=$!
trap 'kill -INT "$pg" 2>/dev/null || true' INT TERM

# Is any TCP connection to port 5432 established (state 01) in this network namespace?
connected() {
    awk '$4 == "01" && $2 ~ /:1538$/ { found = 1 } END { exit !found }' \
        /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# Has any TCP connection ever been accepted in this network namespace (PassiveOpens)?
# Counted by the kernel, so a client that came and went between two looks still counts.
ever_connected() {
    awk '/^Tcp:/ { if (values) { exit !($7 > 0) } values = 1 }' /proc/net/snmp 2>/dev/null
}

(
    grace=${OPENSHELL_PG_START_GRACE:-120}
    seen=0 idle=0 waited=0
    while kill -0 "$pg" 2>/dev/null; do
        sleep 1
        waited=$((waited + 1))
        if connected; then
            seen=1 idle=0
        else
            idle=$((idle + 1))
            [ "$seen" = 1 ] || ! ever_connected || seen=1
        fi
        if { [ "$seen" = 1 ] && [ "$idle" -ge "$idle_limit" ]; } ||
            { [ "$seen" = 0 ] && [ "$waited" -ge "$grace" ]; }; then
            echo "openshell-postgres: no client for ${idle}s: stopping" >&2
            kill -INT "$pg" 2>/dev/null || true
            exit 0
        fi
    done
) &

status=0
while :; do
    if wait "$pg"; then status=0; else status=$?; fi
    kill -0 "$pg" 2>/dev/null || break
done
exit "$status"
