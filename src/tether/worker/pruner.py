"""The pruner: a periodic service that deletes finished jobs (with their
attempts rows) once they are older than their state's retention. It runs where
the database's credentials are: on every worker connected to the database, and
on every ``tether server`` (for the workers that reach the database through it,
whose tokens may not prune: those run no pruner, and say so once at start).

A worker's retention is its app's (``Tether(retention=...)``); a server's is its
``--retention`` (``retention_from_text``). Either way it is an age per finished
state, ``RETENTION_DEFAULTS`` unless told otherwise, ``None`` to keep a state
(or, for the whole setting, everything) forever. Each statement deletes at most
``limit`` jobs, oldest finished first, and a tick repeats it while it comes
back full, at most ``max_rounds`` times: a backlog drains over a few ticks in
short transactions instead of one long one. Running it on every worker and
server at once is safe: on PostgreSQL each statement skips rows another pruner
has locked, on SQLite each holds the write lock for one batch, and a job is
deleted, and counted, once. Queued and running jobs are never read (the
statements' WHERE, ``store/*/queries.sql``).

Each tick then prunes the schedules' ticks table the same way: the rows of
ticks decided more than an hour ago (``TICK_KEEP``), which no fire can
propose again (``store/schedules.py`` says why), in statements of ``limit``.
Without it the table grew by a row for every tick of every schedule.

And the workers' rows (issue 41): those of workers stopped, or never stopped
and silent (killed), for ``worker_age`` (``DEFAULT_WORKER_RETENTION``, a
week; ``tether server --worker-retention``), in statements of ``limit``.
Without it every worker that ever started kept its row, and every list of
workers grew without end."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import timedelta
from typing import ClassVar

from ..errors import ConfigError
from ..model import FINISHED_STATES, TERMINAL_STATES, JobState
from ..numbers import UNITS as _UNITS
from ..numbers import parse_age
from ..store import Store
from ..store.schedules import TICK_KEEP
from ..store.worker_rows import DEFAULT_WORKER_RETENTION
from .service import PeriodicService

__all__ = [
    "DEFAULT_PRUNE_INTERVAL", "DEFAULT_PRUNE_LIMIT", "RETENTION_DEFAULTS", "Pruner", "describe_retention",
    "parse_age", "parse_retention", "retention_from_text",
]

#: how long finished jobs are kept, by state, unless the app says otherwise
RETENTION_DEFAULTS: dict[str, str | None] = {str(s): s.retention for s in FINISHED_STATES}
#: seconds between ticks: retention is measured in days, so once a minute is plenty
DEFAULT_PRUNE_INTERVAL = 60.0
#: jobs per statement: each is one short transaction
DEFAULT_PRUNE_LIMIT = 1000
#: statements per tick at most, while each comes back full
MAX_ROUNDS = 20


RetentionSpec = Mapping[str, "str | float | timedelta | None"]


def parse_retention(retention: RetentionSpec | None) -> dict[JobState, float]:
    """``Tether(retention=...)`` checked: {finished state: age in seconds} for the
    states that are pruned. States left out keep their default; ``None`` for a
    state keeps it forever, and ``retention=None`` keeps everything."""
    if retention is None:
        return {}
    if not isinstance(retention, Mapping):
        raise ConfigError(f"retention must be a dict of state to age, such as {RETENTION_DEFAULTS}, or None; "
                          f"got {retention!r}")
    finished = {str(s) for s in TERMINAL_STATES}
    unknown = sorted(str(k) for k in retention if k not in finished)
    if unknown:
        raise ConfigError(f"retention applies to finished states only ({', '.join(RETENTION_DEFAULTS)}), "
                          f"not {', '.join(repr(k) for k in unknown)}")
    merged = {**RETENTION_DEFAULTS, **retention}
    return {JobState(state): parse_age(age, f"retention[{state!r}]")
            for state, age in merged.items() if age is not None}


def retention_from_text(text: str) -> dict[str, str | None] | None:
    """A retention written as an option (``tether server --retention``):
    ``"succeeded=12h,dead=none"`` (states left out keep their default, ``none``
    keeps one forever) or ``"none"`` (keep everything, no pruner), ready for
    ``parse_retention``; ConfigError naming what is wrong."""
    if text.strip().lower() == "none":
        return None
    out: dict[str, str | None] = {}
    for item in text.split(","):
        state, eq, age = (part.strip() for part in item.partition("="))
        if not state or not eq or not age:
            raise ConfigError(f"retention is 'STATE=AGE[,STATE=AGE]' (e.g. 'succeeded=7d,dead=none') or 'none'; "
                              f"got {text!r}")
        if state in out:
            raise ConfigError(f"retention names {state!r} twice: {text!r}")
        out[state] = None if age.lower() == "none" else age
    return out


def _age_text(seconds: float) -> str:
    for unit in ("d", "h", "m"):
        n = seconds / _UNITS[unit]
        if seconds and n.is_integer():
            return f"{int(n)}{unit}"
    return f"{seconds:g}s"


def describe_retention(ages: Mapping[JobState, float]) -> str:
    """``succeeded after 7d, cancelled after 30d; dead kept forever``: what a pruner
    with these ages deletes, for a log line."""
    if not ages:
        return "none (finished jobs are kept forever)"
    order = FINISHED_STATES
    pruned = [f"{st} after {_age_text(ages[st])}" for st in order if st in ages]
    kept = [str(st) for st in order if st not in ages]
    return ", ".join(pruned) + (f"; {', '.join(kept)} kept forever" if kept else "")


class Pruner(PeriodicService):
    name: ClassVar[str] = "pruner"

    def __init__(
        self, store: Store, ages: Mapping[JobState, float], *, limit: int = DEFAULT_PRUNE_LIMIT,
        interval: float = DEFAULT_PRUNE_INTERVAL, max_rounds: int = MAX_ROUNDS,
        worker_age: float | None = DEFAULT_WORKER_RETENTION,
    ) -> None:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ConfigError(f"prune limit must be an int >= 1, got {limit!r}")
        if not isinstance(max_rounds, int) or isinstance(max_rounds, bool) or max_rounds < 1:
            raise ConfigError(f"pruner max_rounds must be an int >= 1, got {max_rounds!r}")
        if worker_age is not None:
            worker_age = parse_age(worker_age, "worker retention")
        super().__init__(interval)
        self.store = store
        self.ages = dict(ages)
        #: seconds a stopped or silent worker's row is kept (None: forever)
        self.worker_age = worker_age
        #: workers' rows pruned, over every tick
        self.workers_pruned = 0
        self.limit = limit
        self.max_rounds = max_rounds
        self.total = 0
        #: schedule ticks pruned, over every tick
        self.ticks_pruned = 0

    @classmethod
    def for_app(cls, store: Store, app: object) -> list[PeriodicService]:
        """The pruner a worker runs for an app's retention (``app.retention``,
        as ``parse_retention`` returns it): none when nothing is pruned, when
        the app (another registry) says nothing about retention, or when the
        store is a tether server's, which prunes its database itself (said
        once, here: the app's retention does not apply there)."""
        if store.backend == "http":  # the database is the server's: a worker token may not prune it
            logging.getLogger(f"tether.{cls.name}").info(
                "finished jobs are pruned by the tether server, at its own retention (tether server "
                "--retention), not by this worker: the app's retention setting does not apply here")
            return []
        ages: Mapping[JobState, float] = getattr(app, "retention", None) or {}
        return [cls(store, ages)] if ages else []

    def run_once(self) -> dict[JobState, int]:
        """One statement: up to ``limit`` jobs, oldest finished first."""
        gone = self.store.prune(self.ages, self.limit)
        n = sum(gone.values())
        self.total += n
        if n:
            self.log.info("pruned %d finished job(s): %s", n, ", ".join(f"{k} {v}" for k, v in sorted(gone.items())))
        return gone

    def tick(self) -> dict[JobState, int]:
        """Statements while each comes back full, at most ``max_rounds``; the
        same for the schedule ticks. Returns the jobs pruned, by state."""
        out: dict[JobState, int] = {}
        for _ in range(self.max_rounds):
            gone = self.run_once()
            for k, v in gone.items():
                out[k] = out.get(k, 0) + v
            if sum(gone.values()) < self.limit:
                break
        ticks = 0
        for _ in range(self.max_rounds):
            n = self.store.prune_ticks(self.limit)
            ticks += n
            if n < self.limit:
                break
        self.ticks_pruned += ticks
        if ticks:
            self.log.debug("pruned %d schedule tick(s) decided over %s ago", ticks, _age_text(TICK_KEEP))
        self._prune_workers()
        return out

    def _prune_workers(self) -> None:
        if self.worker_age is None:
            return
        gone = 0
        for _ in range(self.max_rounds):
            n = len(self.store.prune_workers(self.worker_age, self.limit))
            gone += n
            if n < self.limit:
                break
        self.workers_pruned += gone
        if gone:
            self.log.info("pruned %d worker row(s) stopped or silent for over %s", gone, _age_text(self.worker_age))
