"""What the demo knows, as plain data: its worker processes, the jobs it
followed after the kill, and its timers. The summary (``demo_summary``) reads
only this, so it never imports the demo that drives the run."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO

from rich.console import Console

from ..config import Timers
from ..model import JobState, Outcome

__all__ = ["DEMO_TIMERS", "SLACK", "DemoFacts", "Proc", "Recovery"]

#: short timers so recovery takes seconds; the defaults are 30 s / 10 s / 10 s
DEMO_TIMERS = Timers(lease_ttl=3.0, heartbeat_interval=1.0, reaper_interval=1.0)
SLACK = 0.5  # seconds of scheduling slack on top of the recovery bound


@dataclass
class Proc:
    """One worker process the demo started."""

    number: int
    popen: subprocess.Popen[bytes]
    log_path: Path
    log_file: IO[bytes]
    worker_id: str | None = None
    killed_at: datetime | None = None  # database clock
    announced_exit: bool = False

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    @property
    def label(self) -> str:
        return f"worker {self.number} (pid {self.pid})"


@dataclass
class Recovery:
    """A job the killed worker held, followed until it finishes elsewhere."""

    job_id: int
    lost_attempt: int
    lease_until: datetime | None
    progress: float | None
    outcome: Outcome | None = None
    reaped_at: datetime | None = None
    reclaimed_at: datetime | None = None
    reclaimed_by: str | None = None
    state: JobState = JobState.RUNNING


@dataclass
class DemoFacts:
    """What the summary is computed from, besides the database."""

    console: Console
    procs: list[Proc]
    runs_path: Path
    job_ids: list[int]
    problems: list[str]
    victim: Proc | None = None
    recoveries: list[Recovery] = field(default_factory=list)
