"""The history recorder: one JSON line per event a worker sees, for the chaos
checker. Off unless ``TETHER_HISTORY_DIR`` is set; when off, the runtime holds
``None`` and each hook costs one ``is not None`` test.

Every record carries the wall clock (``t``), the system-wide monotonic clock
(``m``: not faked by libfaketime with FAKETIME_DONT_FAKE_MONOTONIC=1, so it
orders events across processes on one machine even under clock skew), the pid
and the worker id. Lines are written with one ``os.write`` on an O_APPEND file,
so a SIGKILL can cut the history short but never leave half a line.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

__all__ = ["HistoryRecorder", "recorder_from_env"]

ENV = "TETHER_HISTORY_DIR"


class HistoryRecorder:
    def __init__(self, directory: str, worker_id: str) -> None:
        self.worker_id = worker_id
        self.pid = os.getpid()
        path = os.path.join(directory, f"worker-{self.pid}-{worker_id[-8:]}.jsonl")
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def record(self, event: str, **fields: Any) -> None:
        line = json.dumps({"e": event, "t": time.time(), "m": time.monotonic(), "pid": self.pid,
                           "w": self.worker_id, **fields}, default=str)
        os.write(self._fd, (line + "\n").encode())

    def close(self) -> None:
        os.close(self._fd)


def recorder_from_env(worker_id: str) -> HistoryRecorder | None:
    directory = os.environ.get(ENV)
    return HistoryRecorder(directory, worker_id) if directory else None
