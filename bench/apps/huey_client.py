"""huey's benchmark client: creates the SQLite storage and enqueues.

Run inside huey's bench venv: ``python huey_client.py setup|enqueue ...``;
prints one ``BENCH-RESULT {json}`` line. huey has no bulk enqueue: ``bulk``
calls the task once per job (each call one SQLite transaction), and only the
workers' drain is measured.
"""

from __future__ import annotations

import time

from _benchkit import client_parser, emit
from huey_app import huey, noop


def main() -> None:
    p, _ = client_parser()
    args = p.parse_args()
    if args.cmd == "setup":
        huey.storage.flush_queue()
        emit({"storage": type(huey.storage).__name__})
    elif args.cmd == "enqueue":
        t0 = time.perf_counter()
        for k in range(args.n):
            noop(k)
        emit({"mode": args.mode, "n": args.n, "seconds": time.perf_counter() - t0})
    else:
        raise SystemExit(f"{args.cmd}: not offered for huey")


if __name__ == "__main__":
    main()
