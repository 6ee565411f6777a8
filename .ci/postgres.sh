# A throwaway PostgreSQL server for the tests, sourced by .ci/run.
#
# pg_start: installs Debian's postgresql if no server binaries are found,
# initdb's a temporary data directory, starts the server on a free loopback
# port as an unprivileged user (PostgreSQL refuses root), creates the
# database `routerd_test`, and exports ROUTERD_POSTGRES_URL for the tests
# and ROUTERD_PG_BIN for the tests that start servers of their own.
# pg_stop: stops the server and removes its directory (run it from a trap).

PG_BIN=""
PG_ROOT=""
PG_RUN_AS=()

pg_has_bin() {
    [ -n "$1" ] && [ -x "$1/initdb" ] && [ -x "$1/pg_ctl" ] && [ -x "$1/psql" ]
}

pg_find_bin() {
    local dir
    if pg_has_bin "${ROUTERD_PG_BIN:-}"; then
        echo "$ROUTERD_PG_BIN"
        return 0
    fi
    # Debian installs the server outside PATH, one directory a version.
    for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        if pg_has_bin "$dir"; then
            echo "$dir"
            return 0
        fi
    done
    if command -v initdb >/dev/null 2>&1; then
        dir=$(dirname "$(command -v initdb)")
        if pg_has_bin "$dir"; then
            echo "$dir"
            return 0
        fi
    fi
    return 1
}

pg_install() {
    echo "== installing PostgreSQL (Debian's postgresql package)"
    if [ "$(id -u)" != 0 ]; then
        echo "PostgreSQL is not installed and installing it needs root" >&2
        return 1
    fi
    # The tests start their own servers: no default cluster on port 5432.
    if [ ! -e /etc/postgresql-common/createcluster.conf ]; then
        mkdir -p /etc/postgresql-common
        echo "create_main_cluster = false" >/etc/postgresql-common/createcluster.conf
    fi
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
        postgresql >/dev/null
}

pg_start() {
    if ! PG_BIN=$(pg_find_bin); then
        pg_install
        PG_BIN=$(pg_find_bin) || {
            echo "PostgreSQL binaries not found after installing" >&2
            return 1
        }
    fi
    export ROUTERD_PG_BIN="$PG_BIN"
    PG_ROOT=$(mktemp -d "${TMPDIR:-/tmp}/routerd-ci-pg.XXXXXX")
    if [ "$(id -u)" = 0 ]; then
        id postgres >/dev/null 2>&1 ||
            useradd --system --no-create-home --shell /usr/sbin/nologin postgres
        chown postgres: "$PG_ROOT"
        PG_RUN_AS=(runuser -u postgres --)
    fi
    # --no-sync: the directory is thrown away (the server still fsyncs
    # every commit: synchronous_commit stays on).
    if ! "${PG_RUN_AS[@]}" "$PG_BIN/initdb" -D "$PG_ROOT/data" -U postgres -A trust \
        -E UTF8 --no-locale --no-sync >"$PG_ROOT/initdb.log" 2>&1; then
        cat "$PG_ROOT/initdb.log" >&2
        return 1
    fi
    # A random port is tried, and another if something already listens there.
    local attempt port=""
    for attempt in 1 2 3 4 5 6 7 8; do
        port=$((20000 + RANDOM % 30000))
        if "${PG_RUN_AS[@]}" "$PG_BIN/pg_ctl" -D "$PG_ROOT/data" -w -t 60 \
            -l "$PG_ROOT/server.log" \
            -o "-p $port -c listen_addresses=127.0.0.1 -k $PG_ROOT/data -c max_connections=200" \
            start >/dev/null; then
            break
        fi
        port=""
    done
    if [ -z "$port" ]; then
        echo "PostgreSQL did not start:" >&2
        cat "$PG_ROOT/server.log" >&2
        return 1
    fi
    "$PG_BIN/psql" -X -q -h 127.0.0.1 -p "$port" -U postgres -d postgres \
        -c "CREATE DATABASE routerd_test"
    export ROUTERD_POSTGRES_URL="postgresql://postgres@127.0.0.1:$port/routerd_test"
    echo "== PostgreSQL $("$PG_BIN/pg_ctl" --version | awk '{print $3}') on 127.0.0.1:$port"
}

pg_stop() {
    if [ -n "$PG_ROOT" ] && [ -d "$PG_ROOT" ]; then
        "${PG_RUN_AS[@]}" "$PG_BIN/pg_ctl" -D "$PG_ROOT/data" -m immediate -w -t 30 stop \
            >/dev/null 2>&1 || true
        rm -rf "$PG_ROOT"
    fi
}
