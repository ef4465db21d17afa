"""What a chaos run is asked to do (``ChaosConfig``), checked before anything starts."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..config import Timers, parse_database_url
from ..errors import ConfigError
from ..transport import open_transport

__all__ = ["FAULTS", "LIBFAKETIME", "PG_ONLY", "ChaosConfig"]

FAULTS = ("kill", "stop", "partition", "restart", "skew")
PG_ONLY = {"partition", "restart", "skew"}
LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


@dataclass
class ChaosConfig:
    database: str | None = None  # None: a scratch SQLite file
    scratch_postgres: bool = False  # start a private PostgreSQL (needed for the restart fault)
    workers: int = 3
    jobs: int = 300
    duration: float = 60.0
    faults: frozenset[str] = frozenset({"kill", "stop"})
    seed: int = 0
    lease_ttl: float = 2.0
    heartbeat_interval: float = 0.5
    reaper_interval: float = 1.0
    concurrency: int = 4
    drain_timeout: float = 120.0
    keep: bool = False
    out_dir: Path | None = None
    #: how job ids reach the workers: None (the database), "poll", or a NATS URL;
    #: a NATS URL without ?prefix= gets a stream of the run's own, tether_chaos_<seed>
    transport: str | None = None

    def transport_spec(self) -> str | None:
        t = self.transport
        if t is None or "://" not in t or "prefix=" in t:
            return t
        return t + ("&" if "?" in t else "?") + f"prefix=tether_chaos_{self.seed}"

    def validate(self) -> None:
        unknown = set(self.faults) - set(FAULTS)
        if unknown:
            raise ConfigError(f"unknown fault(s) {sorted(unknown)}; choose from {', '.join(FAULTS)}")
        pg = self.scratch_postgres or (self.database is not None and
                                       parse_database_url(self.database).backend == "postgresql")
        if not pg and self.faults & PG_ONLY:
            raise ConfigError(f"fault(s) {sorted(self.faults & PG_ONLY)} need PostgreSQL: partitions cut a "
                              "network link, and a skewed clock only matters where leases use the database's")
        if "restart" in self.faults and not self.scratch_postgres:
            raise ConfigError("the restart fault restarts the server, so it needs one the harness started "
                              "itself: add --scratch-postgres")
        if "skew" in self.faults and not os.path.exists(LIBFAKETIME):
            raise ConfigError(f"the skew fault needs libfaketime ({LIBFAKETIME}): apt-get install libfaketime")
        open_transport(self.transport_spec()).check(Timers(self.lease_ttl, self.heartbeat_interval,
                                                           self.reaper_interval))
        if self.workers < 1 or self.jobs < 1 or self.duration <= 0:
            raise ConfigError("workers, jobs and duration must be positive")
