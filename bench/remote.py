"""Remote workers against local ones: the same no-op jobs drained by one
worker process on SQLite directly, then by one worker process through a
`tether server` process over the same kind of database. A benchmark, not a
test: it prints jobs/s and the ratio, and asserts nothing.

    .venv/bin/python bench/remote.py --n 2000 --concurrency 10
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tether import Tether
from tether.model import NewJob
from tether.store import open_store

APP = '''
from tether import Tether
app = Tether()
@app.task(name="noop")
def noop(ctx) -> None:
    return None
'''


def drain(db: str, worker_url: str, n: int, concurrency: int, env: dict[str, str], workdir: Path) -> float:
    store = open_store(db)
    store.enqueue([NewJob(task="noop", args_json="{}") for _ in range(n)])
    start = time.monotonic()
    w = subprocess.Popen([sys.executable, "-m", "tether", "worker", "--app", "bench_noop:app", "-c", str(concurrency),
                          "--log-level", "warning"],
                         cwd=workdir, env={**env, "TETHER_DATABASE_URL": worker_url}, stderr=subprocess.DEVNULL)
    try:
        while store.stats().counts.get(("default", "succeeded"), 0) < n:
            time.sleep(0.02)
        return n / (time.monotonic() - start)
    finally:
        w.terminate()
        w.wait(timeout=30)
        store.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=10)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tether-remote-bench-"))
    (work / "bench_noop.py").write_text(APP)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    local_db = f"sqlite:///{work / 'local.db'}"
    Tether(local_db).migrate()
    local = drain(local_db, local_db, a.n, a.concurrency, env, work)

    remote_db = f"sqlite:///{work / 'remote.db'}"
    Tether(remote_db).migrate()
    token = secrets.token_urlsafe(24)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "tether", "-d", remote_db, "server", "--port", str(port),
                               "--log-level", "warning"], env={**env, "TETHER_SERVER_TOKENS": f"{token} worker"},
                              stderr=subprocess.DEVNULL)
    try:
        time.sleep(2)
        remote = drain(remote_db, f"http://127.0.0.1:{port}", a.n, a.concurrency, {**env, "TETHER_TOKEN": token},
                       work)
    finally:
        server.terminate()
        server.wait(timeout=30)
    print(json.dumps({"n": a.n, "concurrency": a.concurrency, "local_jobs_per_s": round(local, 1),
                      "remote_jobs_per_s": round(remote, 1), "remote_over_local": round(remote / local, 3)}))


if __name__ == "__main__":
    main()
