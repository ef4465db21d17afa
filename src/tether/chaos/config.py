"""What a chaos run is asked to do (``ChaosConfig``), checked before anything starts."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from ..config import Timers, parse_database_url
from ..errors import ConfigError
from ..transport import open_transport
from ..worker.failpoints import NAMES as FAILPOINTS

__all__ = ["FAILPOINT_ODDS", "FAULTS", "LIBFAKETIME", "PG_ONLY", "QUEUE", "REPLICATION", "ChaosConfig", "config_dict",
           "with_schema"]

FAULTS = ("kill", "stop", "partition", "restart", "skew", "failover")
PG_ONLY = {"partition", "restart", "skew"}
#: the failover fault's standby: acknowledged once it holds a commit, or not waited for
REPLICATION = ("sync", "async")
#: the run's main queue (workerproc.py serves it; flows.py puts its workflows and batches there)
QUEUE = "tether_chaos"
LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
#: when kills are on, each worker also SIGKILLs itself at these places now and then
FAILPOINT_ODDS = {"after_claim": 0.01, "mid_handler": 0.01, "after_side_effect": 0.01, "during_heartbeat": 0.005}


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
    #: the failover fault's replication (REPLICATION)
    replication: str = "sync"

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
        if "failover" in self.faults and not self.scratch_postgres:
            raise ConfigError("the failover fault kills the primary and promotes a standby the harness made "
                              "itself: add --scratch-postgres")
        if {"failover", "partition"} <= self.faults:
            raise ConfigError("the partition fault's proxy stands before one server; with failover the workers "
                              "reach two (a multi-host URL): choose one of them")
        if self.replication not in REPLICATION:
            raise ConfigError(f"replication must be one of {', '.join(REPLICATION)}, got {self.replication!r}")
        if "skew" in self.faults and not os.path.exists(LIBFAKETIME):
            raise ConfigError(f"the skew fault needs libfaketime ({LIBFAKETIME}): apt-get install libfaketime")
        open_transport(self.transport_spec()).check(Timers(self.lease_ttl, self.heartbeat_interval,
                                                           self.reaper_interval))
        if self.workers < 1 or self.jobs < 1 or self.duration <= 0:
            raise ConfigError("workers, jobs and duration must be positive")


def with_schema(url: str, schema: str) -> str:
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "schema"] + [("schema", schema)]
    return parts._replace(query=urlencode(query)).geturl()


def config_dict(cfg: ChaosConfig, url: str) -> dict[str, Any]:
    backend = parse_database_url(url).backend
    return {"backend": backend, "scratch_postgres": cfg.scratch_postgres, "workers": cfg.workers,
            "jobs": cfg.jobs, "duration_s": cfg.duration, "faults": sorted(cfg.faults), "seed": cfg.seed,
            "lease_ttl": cfg.lease_ttl, "heartbeat_interval": cfg.heartbeat_interval,
            "reaper_interval": cfg.reaper_interval, "concurrency": cfg.concurrency,
            "transport": open_transport(cfg.transport_spec()).name,
            "failpoints": sorted(FAILPOINT_ODDS) if "kill" in cfg.faults else [], "known_failpoints": list(FAILPOINTS),
            **({"replication": cfg.replication} if "failover" in cfg.faults else {})}
