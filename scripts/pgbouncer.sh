# ensure_pgbouncer: make sure a PgBouncer in *transaction* pooling mode answers
# in front of the test PostgreSQL, and export TETHER_TEST_PGBOUNCER_URL.
# Sourced by scripts/test; call it after ensure_postgres (it points the pooler
# at TETHER_TEST_PG_URL).
#
# Most hosted PostgreSQL set-ups put PgBouncer in transaction mode in front of
# the database, and tether's `?pgbouncer=transaction` URL option exists for
# them; the tests prove it against the real thing, not a stand-in.
#
# 1. TETHER_TEST_PGBOUNCER_URL already set, or our private PgBouncer on
#    127.0.0.1:64329: use it, once its admin console says pool_mode=transaction.
# 2. Otherwise start a private one from Debian's pgbouncer package (installed
#    when the binary is missing and we are root), configuration and log in a
#    scratch directory, listening on 127.0.0.1 only. It keeps running for later
#    runs, like the private PostgreSQL. PgBouncer refuses to run as root, so as
#    root it runs as the `postgres` user.
#
# The configuration leaves ignore_startup_parameters empty on purpose: like a
# hosted pooler, it refuses a client that sends startup options.

PGB_PRIVATE_PORT="${TETHER_PGBOUNCER_PORT:-64329}"
PGB_PRIVATE_DIR="${TETHER_PGBOUNCER_DIR:-/tmp/tether-pgbouncer-$(id -u)}"

_pgb_transaction_mode() {  # _pgb_transaction_mode URL: its admin console says pool_mode=transaction
    "$VENV/bin/python" - "$1" <<'PY' >/dev/null 2>&1
import sys, psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
# The admin console is the pseudo-database "pgbouncer" and speaks only the
# simple query protocol: send the command through libpq directly.
params = conninfo_to_dict(sys.argv[1])
params["dbname"] = "pgbouncer"
with psycopg.connect(make_conninfo(**params), connect_timeout=3, autocommit=True) as c:
    res = c.pgconn.exec_(b"SHOW CONFIG")
    rows = {res.get_value(i, 0): res.get_value(i, 1) for i in range(res.ntuples)}
    sys.exit(0 if rows.get(b"pool_mode") == b"transaction" else 1)
PY
}

_pgb_install() {
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
        echo "no pgbouncer binary; install Debian's pgbouncer package (needs root)" >&2; return 1
    fi
    echo "==> installing pgbouncer (the tests run tether through it in transaction mode)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >/dev/null 2>&1 \
        || { DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null \
             && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >/dev/null; }
}

ensure_pgbouncer() {
    if [ -n "${TETHER_TEST_PGBOUNCER_URL:-}" ]; then
        _pgb_transaction_mode "$TETHER_TEST_PGBOUNCER_URL" \
            && { echo "==> PgBouncer: $TETHER_TEST_PGBOUNCER_URL"; return 0; }
        echo "TETHER_TEST_PGBOUNCER_URL=$TETHER_TEST_PGBOUNCER_URL does not answer as a PgBouncer" \
             "in transaction mode (its admin console, database pgbouncer, is asked)" >&2
        return 1
    fi
    [ -n "${TETHER_TEST_PG_URL:-}" ] || { echo "ensure_pgbouncer: run ensure_postgres first" >&2; return 1; }
    # The server's host, port, database, user and password, from the test URL.
    local host port db user password
    read -r host port db user password < <("$VENV/bin/python" - "$TETHER_TEST_PG_URL" <<'PY'
import sys
from psycopg.conninfo import conninfo_to_dict
p = conninfo_to_dict(sys.argv[1])
print(p.get("host", "127.0.0.1"), p.get("port", "5432"), p.get("dbname", "test"),
      p.get("user", "postgres"), p.get("password", "") or "-")
PY
)
    [ "$password" = "-" ] && password=""
    local url="postgresql://$user@127.0.0.1:$PGB_PRIVATE_PORT/$db"
    [ -n "$password" ] && url="postgresql://$user:$password@127.0.0.1:$PGB_PRIVATE_PORT/$db"
    if _pgb_transaction_mode "$url"; then
        export TETHER_TEST_PGBOUNCER_URL="$url"; echo "==> PgBouncer: private pooler at 127.0.0.1:$PGB_PRIVATE_PORT"
        return 0
    fi
    local bin
    bin="$(command -v pgbouncer || ls /usr/sbin/pgbouncer 2>/dev/null || true)"
    if [ -z "$bin" ]; then
        if ! _pgb_install; then
            # CI must prove the pooled path; a developer without root still gets the rest
            [ "${CI:-}" = true ] && return 1
            echo "==> PgBouncer: none; the postgresql-pgbouncer tests will be skipped" >&2
            return 0
        fi
        bin="$(command -v pgbouncer || ls /usr/sbin/pgbouncer)"
    fi
    echo "==> PgBouncer: starting a private pooler (transaction mode) on port $PGB_PRIVATE_PORT" \
         "in front of $host:$port ($PGB_PRIVATE_DIR)"
    mkdir -p "$PGB_PRIVATE_DIR"
    # trust: PgBouncer asks no password of its clients (it listens on loopback
    # only); the auth file still lists the user, and gives the server's password.
    printf '"%s" "%s"\n' "$user" "$password" >"$PGB_PRIVATE_DIR/userlist.txt"
    cat >"$PGB_PRIVATE_DIR/pgbouncer.ini" <<EOF
[databases]
* = host=$host port=$port

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $PGB_PRIVATE_PORT
unix_socket_dir =
auth_type = trust
auth_file = $PGB_PRIVATE_DIR/userlist.txt
admin_users = $user
pool_mode = transaction
; the test suite opens a store (a few client connections) per test, and worker
; processes their own; the server side stays small
max_client_conn = 1000
default_pool_size = 20
logfile = $PGB_PRIVATE_DIR/pgbouncer.log
; every test opens and closes connections: keep the log to what goes wrong
log_connections = 0
log_disconnections = 0
pidfile = $PGB_PRIVATE_DIR/pgbouncer.pid
EOF
    if [ "$(id -u)" = 0 ]; then
        chown -R postgres "$PGB_PRIVATE_DIR"
        runuser -u postgres -- "$bin" -d "$PGB_PRIVATE_DIR/pgbouncer.ini"
    else
        "$bin" -d "$PGB_PRIVATE_DIR/pgbouncer.ini"
    fi
    local i
    for i in $(seq 1 50); do
        _pgb_transaction_mode "$url" && { export TETHER_TEST_PGBOUNCER_URL="$url"; return 0; }
        sleep 0.2
    done
    echo "private pgbouncer did not come up; see $PGB_PRIVATE_DIR/pgbouncer.log" >&2; return 1
}
