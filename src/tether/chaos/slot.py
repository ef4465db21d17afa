"""One worker position of a chaos run, restarted by the driver whenever its process dies."""

from __future__ import annotations

import subprocess
from pathlib import Path

from .proxy import TCPProxy

__all__ = ["Slot"]


class Slot:
    """One worker position: restarted by the driver whenever its process dies."""

    def __init__(self, index: int, url: str, proxy: TCPProxy | None, skew: float) -> None:
        self.index = index
        self.url = url
        self.proxy = proxy
        self.skew = skew
        self.proc: subprocess.Popen[bytes] | None = None
        self.stopped_until: float | None = None
        self.restart_at: float | None = None
        self.killed = False  # by the driver, as opposed to by one of its own failpoints
        #: the worker has reached the database (its history holds its first record, 'started')
        self.started = False
        #: when its partition healed, until the database answers a request it sent since
        self.healed_at: float | None = None
        #: how far each of its history files has been read
        self.read: dict[Path, int] = {}
        #: history files of earlier processes that had this process's pid (pids are reused)
        self.stale: set[Path] = set()
