# ensure_postgres: make sure a PostgreSQL server answers for the tests, and
# export TETHER_TEST_PG_URL. Sourced by scripts/test.
#
# 1. TETHER_TEST_PG_URL already set, or a server on 127.0.0.1:5432: use it.
# 2. Otherwise start a private server from the PostgreSQL binaries (installing
#    Debian's package if there are none) in a scratch directory on port 54329.
#    initdb refuses to run as root, so as root it runs as the `postgres` user.

PG_PRIVATE_PORT="${TETHER_PG_PORT:-54329}"
PG_PRIVATE_DIR="${TETHER_PG_DIR:-/tmp/tether-pg-$(id -u)}"

_pg_answers() {  # _pg_answers URL
    "$VENV/bin/python" - "$1" <<'PY' >/dev/null 2>&1
import sys, psycopg
with psycopg.connect(sys.argv[1], connect_timeout=3) as c:
    c.execute("SELECT 1")
PY
}

_pg_bindir() {
    ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1
}

_as_pg() {  # run a command as the postgres user when we are root
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

ensure_postgres() {
    if [ -n "${TETHER_TEST_PG_URL:-}" ]; then
        _pg_answers "$TETHER_TEST_PG_URL" && { echo "==> PostgreSQL: $TETHER_TEST_PG_URL"; return 0; }
        echo "TETHER_TEST_PG_URL=$TETHER_TEST_PG_URL does not answer" >&2; return 1
    fi
    local url="postgresql://postgres@127.0.0.1:5432/test"
    if _pg_answers "$url"; then
        export TETHER_TEST_PG_URL="$url"; echo "==> PostgreSQL: running at $url"; return 0
    fi
    url="postgresql://postgres@127.0.0.1:$PG_PRIVATE_PORT/test"
    if _pg_answers "$url"; then
        export TETHER_TEST_PG_URL="$url"; echo "==> PostgreSQL: private server at $url"; return 0
    fi
    local bin; bin="$(_pg_bindir)"
    if [ -z "$bin" ]; then
        echo "==> PostgreSQL: no server and no binaries; installing Debian's postgresql package"
        if [ "$(id -u)" != 0 ]; then echo "need root to apt-get install postgresql" >&2; return 1; fi
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
        bin="$(_pg_bindir)"
    fi
    echo "==> PostgreSQL: starting a private server from $bin on port $PG_PRIVATE_PORT ($PG_PRIVATE_DIR)"
    if [ "$(id -u)" = 0 ]; then
        mkdir -p "$PG_PRIVATE_DIR"; chown postgres "$PG_PRIVATE_DIR"
    else
        mkdir -p "$PG_PRIVATE_DIR"
    fi
    if [ ! -f "$PG_PRIVATE_DIR/data/PG_VERSION" ]; then
        _as_pg "$bin/initdb" -D "$PG_PRIVATE_DIR/data" -U postgres --auth=trust -E UTF8 >/dev/null
    fi
    _as_pg "$bin/pg_ctl" -D "$PG_PRIVATE_DIR/data" -l "$PG_PRIVATE_DIR/server.log" -w -t 60 \
        -o "-p $PG_PRIVATE_PORT -k $PG_PRIVATE_DIR -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null
    _as_pg "$bin/psql" -h 127.0.0.1 -p "$PG_PRIVATE_PORT" -U postgres -d postgres -qtc \
        "SELECT 1 FROM pg_database WHERE datname = 'test'" | grep -q 1 \
        || _as_pg "$bin/createdb" -h 127.0.0.1 -p "$PG_PRIVATE_PORT" -U postgres test
    _pg_answers "$url" || { echo "private PostgreSQL did not come up; see $PG_PRIVATE_DIR/server.log" >&2; return 1; }
    export TETHER_TEST_PG_URL="$url"
}
