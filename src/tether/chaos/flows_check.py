"""The I9 check for a chaos run: dependencies released once, by the ending.

Pure: the driver hands in what it asked for (each job that waits, ``Waiter``:
a workflow step and the steps it runs after, or a batch callback and the
batch's members, with its policy) and what really happened:

- ``ended``: each job's final row (state, finished_at: the database's clock);
- ``starts``: every time a waiter began to run, from two sources: the record
  its handler wrote on its own connection as its first act (with the
  dependencies' states it read, ``ctx.upstream_states``), and every claim of it
  in the attempts table (a claim is a start even if the handler never got to
  write);
- ``moves``: every change of a job's state out of ``waiting``, recorded by a
  trigger on the jobs table in the transaction that made it (the release, or
  the cancellation a failed dependency causes), with that moment's clock.

Three clauses, all in one invariant (each violation names its job, ``job N:``):

1. no waiter started before all its dependencies had ended (its start at or
   after the last one's finished_at), and one whose policy needs success
   (``cancel``, ``on_success``) only if every dependency succeeded;
2. every waiter whose dependencies all ended left ``waiting`` exactly once,
   the way its policy asks (queued; or cancelled: ``cancel`` with a failed
   dependency, at the first failure, ``on_success`` with one failed member),
   within ``bound`` (the reaper interval) + ``slack`` of the ending that
   decided it, not counting time in ``excused`` (no healthy worker, a database
   outage: the same windows I5 uses); one whose dependencies did not all end
   never left it;
3. for a batch callback these say: it fired exactly once, after its last
   member ended (its violations say "batch").

Times: epoch seconds, the database's clock (SQLite: the machine's, in
milliseconds: ``EPS`` allows that rounding).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .checker import Invariant, _measure

__all__ = ["POLICIES", "Ended", "Move", "Start", "Waiter", "check_dependencies"]

TITLE = ("dependencies: no step or batch callback started before its dependencies ended as its policy requires; "
         "each released exactly once, within one reaper interval of the ending that decided it while a healthy "
         "worker existed; every batch callback fired exactly once, after its last member ended")
TERMINAL = {"succeeded", "dead", "cancelled"}
#: a workflow step's on_failure, or a batch callback's role
POLICIES = ("cancel", "run", "on_complete", "on_success")
#: the rounding of SQLite's clock (milliseconds) between two of its timestamps
EPS = 0.002


@dataclass(frozen=True, slots=True)
class Waiter:
    """A job that waits: ``after`` the jobs it waits for, ``label`` for people."""

    job_id: int
    after: tuple[int, ...]
    policy: str
    label: str


@dataclass(frozen=True, slots=True)
class Ended:
    """A job's final row."""

    state: str
    finished_at: float | None


@dataclass(frozen=True, slots=True)
class Start:
    """A waiter began to run: its handler's record (``seen``: the states it read
    for its dependencies) or a claim in the attempts table (``source="claim"``)."""

    job_id: int
    attempt: int
    at: float
    source: str = "handler"
    seen: Mapping[str, str] | None = None


@dataclass(frozen=True, slots=True)
class Move:
    """A change of a job's state into or out of ``waiting``, as the database recorded it."""

    job_id: int
    old: str
    new: str
    at: float


def check_dependencies(
    waiters: Iterable[Waiter], ended: Mapping[int, Ended], starts: Iterable[Start], moves: Iterable[Move], *,
    bound: float, excused: Sequence[tuple[float, float]] = (), slack: float = 0.5,
) -> tuple[Invariant, dict[str, Any]]:
    """I9 over a run (the module docstring); the invariant and its counts."""
    inv = Invariant("I9", TITLE)
    by_start: dict[int, list[Start]] = defaultdict(list)
    for s in starts:
        by_start[s.job_id].append(s)
    out_of: dict[int, list[Move]] = defaultdict(list)
    for m in sorted(moves, key=lambda m: m.at):
        if m.old == "waiting":
            out_of[m.job_id].append(m)
    lags: list[float] = []
    counts = {"i9_waiters": 0, "i9_not_judged": 0, "i9_starts": 0, "i9_released": 0, "i9_cancelled": 0,
              "i9_callbacks_fired": 0}
    for w in waiters:
        if w.policy not in POLICIES:
            raise ValueError(f"job {w.job_id}: unknown policy {w.policy!r}")
        deps = [ended.get(d) for d in w.after]
        if ended.get(w.job_id) is None or any(d is None for d in deps):
            counts["i9_not_judged"] += 1  # a job missing from the database: I1's (or a failover's loss)
            continue
        got = [d for d in deps if d is not None]
        counts["i9_waiters"] += 1
        inv.checked += 1
        who = f"job {w.job_id}: {w.label}"
        done = [d.finished_at for d in got if d.state in TERMINAL and d.finished_at is not None]
        all_ended = len(done) == len(got)
        failed = [d.finished_at for d in got if d.state in ("dead", "cancelled") and d.finished_at is not None]
        strict = w.policy in ("cancel", "on_success")
        # 1. starts
        for s in by_start.get(w.job_id, []):
            counts["i9_starts"] += 1
            what = f"attempt {s.attempt} started ({'its handler' if s.source == 'handler' else 'claimed'})"
            if not all_ended:
                inv.violations.append(f"{who}: {what} while {len(got) - len(done)} of its {len(got)} "
                                      "dependencies had not ended")
            elif strict and failed:
                inv.violations.append(f"{who}: {what} though {len(failed)} of its dependencies did not succeed "
                                      f"(policy {w.policy})")
            elif s.at < max(done, default=-math.inf) - EPS:
                inv.violations.append(f"{who}: {what} {max(done) - s.at:.3f}s before its last dependency ended")
            if s.seen is not None:
                bad = {k: v for k, v in s.seen.items()
                       if v not in (("succeeded",) if strict else tuple(TERMINAL))}
                if bad:
                    inv.violations.append(f"{who}: attempt {s.attempt}'s handler read dependencies not "
                                          f"{'succeeded' if strict else 'ended'}: {bad}")
        # 2. (and 3.) the release: once, as the policy asks, in time
        moved = out_of.get(w.job_id, [])
        if w.policy == "cancel" and failed:
            expect, due = "cancelled", min(failed)
        elif all_ended:
            expect = "cancelled" if w.policy == "on_success" and failed else "queued"
            due = max(done, default=0.0)
        else:
            if moved:
                inv.violations.append(f"{who}: left waiting ({moved[0].new}) though {len(got) - len(done)} of "
                                      "its dependencies never ended")
            continue
        fired = "fired" if w.policy.startswith("on_") else "was released"
        if not moved:
            inv.violations.append(f"{who}: never {fired}: its dependencies ended by {due:.3f} and it is still "
                                  f"{ended[w.job_id].state}")
            continue
        if len(moved) > 1:
            inv.violations.append(f"{who}: {fired} {len(moved)} times ("
                                  + ", ".join(f"{m.new} at {m.at:.3f}" for m in moved) + ")")
        first = moved[0]
        counts["i9_cancelled" if first.new == "cancelled" else "i9_released"] += 1
        if w.policy.startswith("on_") and first.new == "queued":
            counts["i9_callbacks_fired"] += 1
        if first.new != expect:
            inv.violations.append(f"{who}: left waiting {first.new}, but its policy ({w.policy}) and its "
                                  f"dependencies' endings ask for {expect}")
        lag = first.at - due
        if lag < -EPS:
            inv.violations.append(f"{who}: {fired} ({first.new}) {-lag:.3f}s before the ending that decided it")
            continue
        lags.append(lag)
        allowed = _measure((max(b, due), min(e, first.at)) for b, e in excused if b < first.at and e > due)
        if lag > bound + slack + allowed:
            inv.violations.append(f"{who}: {fired} {lag:.2f}s after the ending that decided it (bound {bound:g}s + "
                                  f"{slack:g}s slack" + (f" + {allowed:.2f}s with no healthy worker or the "
                                                          "database down" if allowed else "") + ")")
    counts["i9_release_lag_max_ms"] = round(max(lags, default=0.0) * 1000)
    return inv, counts
