#!/usr/bin/env bash
# The how-to "Remote workers": a tether server in front of a SQLite file, a
# producer and a worker that reach it over HTTP with tokens. Run by
# tests/test_docs_guides.py in an empty directory holding remote.py, with
# tether on PATH; PORT is a free port.
set -euo pipefail
PORT=${PORT:-8000}

# --8<-- [start:server]
cat > tokens.txt <<'TOKENS'
worker-token-for-the-docs-0001 worker
producer-token-for-the-docs-01 producer
TOKENS
tether -d sqlite:///queue.db migrate
tether -d sqlite:///queue.db server --port "$PORT" --token-file tokens.txt &
# --8<-- [end:server]
server=$!
trap 'kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true' EXIT
until python -c "import urllib.request as u; u.urlopen(u.Request('http://127.0.0.1:$PORT/openapi.json', headers={'Authorization': 'Bearer producer-token-for-the-docs-01'}))" 2>/dev/null; do
    sleep 0.2
done

# --8<-- [start:producer]
export TETHER_DATABASE_URL=http://127.0.0.1:$PORT TETHER_TOKEN=producer-token-for-the-docs-01
python -c 'import remote; print(remote.resize.enqueue(path="a.png"))'
# --8<-- [end:producer]
# --8<-- [start:worker]
tether worker --app remote:app --server "http://127.0.0.1:$PORT" --token worker-token-for-the-docs-0001 --burst
# --8<-- [end:worker]
tether -d sqlite:///queue.db job 1 --json | grep -q '"state": "succeeded"'
tether -d sqlite:///queue.db job 1 --json | grep -q '"result": "resized a.png"'
echo ok
