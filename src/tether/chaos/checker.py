"""The history checker: did the contract (I1-I5) hold over a run?

Inputs are the events the workers and the driver recorded (see
``tether.worker.history``) and the database's final state (every job row and
every attempt row). The checker trusts neither side alone: the database says
what was decided, the history says what each process believed and sent.

Times: events carry the system-wide monotonic clock ``m``; the driver maps it
to the wall clock with one offset it measured itself, so skewed workers
(libfaketime) cannot distort the ordering. Database times are the database's
own clock, on the same machine as the driver.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

__all__ = ["AttemptRow", "CheckReport", "JobRow", "check"]

TERMINAL = {"succeeded", "dead", "cancelled"}
FAIL_OUTCOMES = {"failed", "timed_out", "cancelled"}
REAPED = {"lease_expired", "timed_out"}
#: after the database comes back, how long workers may take to reconnect
RECONNECT_GRACE = 2.0


@dataclass(frozen=True, slots=True)
class JobRow:
    id: int
    state: str
    attempt: int
    result: Any


@dataclass(frozen=True, slots=True)
class AttemptRow:
    job_id: int
    attempt: int
    worker: str
    claimed_at: float  # epoch seconds, database clock
    finished_at: float
    outcome: str


@dataclass
class Invariant:
    name: str
    title: str
    checked: int = 0
    violations: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations


@dataclass
class CheckReport:
    invariants: dict[str, Invariant]
    recovery: dict[str, float | int | None]
    counts: dict[str, int]
    bound: float

    @property
    def ok(self) -> bool:
        return all(i.ok for i in self.invariants.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "bound_s": self.bound,
            "counts": self.counts,
            "recovery_s": self.recovery,
            "invariants": {
                k: {"title": v.title, "ok": v.ok, "checked": v.checked, "violations": v.violations[:50],
                    "violation_count": len(v.violations)}
                for k, v in self.invariants.items()
            },
        }


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def check(
    events: Iterable[Mapping[str, Any]],
    jobs: Mapping[int, JobRow],
    attempts: Iterable[AttemptRow],
    *,
    enqueued: Iterable[int],
    lease_ttl: float,
    reaper_interval: float,
    mono_to_wall: float,
    slack: float = 1.0,
    outages: Iterable[tuple[float, float]] = (),
) -> CheckReport:
    """``mono_to_wall``: add to an event's ``m`` to get wall-clock epoch seconds.

    ``outages``: (start, end) wall-clock windows when the database itself was
    down (a server restart). Nothing can be claimed or reaped then, so a
    recovery whose window overlaps one is allowed that overlap plus
    ``RECONNECT_GRACE`` for the workers' connections to come back.
    """
    outage_list = sorted(outages)
    inv = {
        "I1": Invariant("I1", "no loss: every acknowledged enqueue ended terminal"),
        "I2": Invariant("I2", "one live owner: no two attempts' leases overlap"),
        "I3": Invariant("I3", "fencing: attempts rise by one; stale writes were refused and changed nothing"),
        "I4": Invariant("I4", "terminal is final: nothing finished twice or ran after finishing"),
        "I5": Invariant("I5", "bounded recovery: lapsed leases claimable within lease_ttl + reaper_interval"),
    }
    bound = lease_ttl + reaper_interval

    rows: dict[int, dict[int, AttemptRow]] = defaultdict(dict)
    for a in attempts:
        rows[a.job_id][a.attempt] = a
    claims: dict[tuple[int, int], list[Mapping[str, Any]]] = defaultdict(list)
    accepts: dict[tuple[int, int], list[Mapping[str, Any]]] = defaultdict(list)
    renewals: dict[tuple[int, int], list[float]] = defaultdict(list)
    reports: list[Mapping[str, Any]] = []
    ticks: list[tuple[float, float, bool]] = []  # reaper ticks, wall clock: (started, ended, ok)
    lapsed_at: dict[tuple[int, int], float] = {}
    prefetch: Counter[str] = Counter()  # jobs claimed ahead into a worker's buffer, and buffers handed back  # lease_until of the leases reapers took, database clock
    for e in events:
        kind = e.get("e")
        if kind == "claimed":
            claims[(e["job"], e["attempt"])].append(e)
        elif kind == "hb" and e.get("beat") in ("renewed", "cancel_requested"):
            accepts[(e["job"], e["attempt"])].append(e)
            renewals[(e["job"], e["attempt"])].append(float(e["m"]))
        elif kind == "reap":
            ticks.append((float(e["started"]) + mono_to_wall, float(e["m"]) + mono_to_wall, bool(e.get("ok"))))
            for job_id, attempt, *rest in e.get("jobs", []):
                if rest and rest[0] is not None:
                    lapsed_at[(job_id, attempt)] = float(rest[0])
        elif kind == "report":
            reports.append(e)
            if e.get("accepted"):
                accepts[(e["job"], e["attempt"])].append(e)
        elif kind in ("buffered", "handed_back"):
            prefetch[kind] += 1

    # I1: every acknowledged enqueue ends terminal.
    for job_id in enqueued:
        inv["I1"].checked += 1
        job = jobs.get(job_id)
        if job is None:
            inv["I1"].violations.append(f"job {job_id}: acknowledged at enqueue but missing from the database")
        elif job.state not in TERMINAL:
            inv["I1"].violations.append(f"job {job_id}: ended {job.state} at attempt {job.attempt}, not terminal")

    for job_id, job in jobs.items():
        by_attempt = rows.get(job_id, {})
        ordered = [by_attempt[k] for k in sorted(by_attempt)]
        # I3a: one audit row per claim, numbered 1..attempt without gaps.
        inv["I3"].checked += 1
        expected = set(range(1, job.attempt + 1)) if job.state in TERMINAL else set(range(1, job.attempt))
        if set(by_attempt) != expected and not (job.state == "running" and set(by_attempt) <= expected):
            inv["I3"].violations.append(
                f"job {job_id}: attempt rows {sorted(by_attempt)} do not match claims 1..{job.attempt}")
        # I3b: no attempt number was handed out twice.
        for k in range(1, job.attempt + 1):
            owners = {c["w"] for c in claims.get((job_id, k), [])}
            if len(owners) > 1:
                inv["I3"].violations.append(f"job {job_id}: attempt {k} was claimed by {len(owners)} workers: "
                                            f"{sorted(owners)}")
        # I2a: the database's own windows never overlap.
        inv["I2"].checked += 1
        for prev, nxt in pairwise(ordered):
            if nxt.claimed_at + 1e-6 < prev.finished_at:
                inv["I2"].violations.append(
                    f"job {job_id}: attempt {nxt.attempt} claimed at {nxt.claimed_at:.3f} before attempt "
                    f"{prev.attempt} ended at {prev.finished_at:.3f}")
        # I2b: no write of attempt k was accepted after attempt k+1 had been granted.
        for k in range(1, job.attempt):
            nxt_claims = claims.get((job_id, k + 1))
            if not nxt_claims:
                continue
            granted = min(float(c["m"]) for c in nxt_claims)
            for acc in accepts.get((job_id, k), []):
                if float(acc.get("sent", acc["m"])) > granted:
                    what = acc["e"] + (f"/{acc['op']}" if "op" in acc else "")
                    inv["I2"].violations.append(
                        f"job {job_id}: attempt {k}'s {what} by {acc['w']} "
                        f"was sent after attempt {k + 1} was granted, and accepted")
        # I4: finished once, and nothing ran after.
        inv["I4"].checked += 1
        succeeded = [r.attempt for r in ordered if r.outcome == "succeeded"]
        if len(succeeded) > 1:
            inv["I4"].violations.append(f"job {job_id}: succeeded {len(succeeded)} times (attempts {succeeded})")
        if job.state in TERMINAL and ordered:
            last = ordered[-1].attempt
            later = sorted({k for (j, k) in claims if j == job_id and k > last})
            if later:
                inv["I4"].violations.append(f"job {job_id}: claimed again (attempts {later}) after it finished "
                                            f"at attempt {last}")
            if succeeded and succeeded[-1] != last:
                inv["I4"].violations.append(f"job {job_id}: attempt {last} ran after attempt {succeeded[-1]} "
                                            "succeeded")
        if job.state == "succeeded":
            got = job.result.get("attempt") if isinstance(job.result, dict) else None
            if succeeded and got is not None and got != succeeded[-1]:
                inv["I3"].violations.append(f"job {job_id}: result written by attempt {got}, but attempt "
                                            f"{succeeded[-1]} is the one that succeeded")

    # I3c: every accepted report matches what the database recorded; refused ones changed nothing.
    for rep in reports:
        inv["I3"].checked += 1
        op, job_id, k = rep.get("op"), rep["job"], rep["attempt"]
        found = rows.get(job_id, {}).get(k)
        if rep.get("accepted"):
            want = {"complete": {"succeeded"}, "fail": FAIL_OUTCOMES, "release": {"released"}}.get(op or "", set())
            if found is None or found.outcome not in want:
                inv["I3"].violations.append(
                    f"job {job_id}: {op} of attempt {k} by {rep['w']} was accepted but the database recorded "
                    f"{found.outcome if found else 'no attempt row'}")
        elif found is not None and found.worker == rep["w"] and (
            (op == "complete" and found.outcome == "succeeded") or (op == "release" and found.outcome == "released")
        ):
            inv["I3"].violations.append(f"job {job_id}: {op} of attempt {k} was refused but took effect")

    # I5: recovery of lapsed leases.
    reap_lag: list[float] = []
    unheard = 0  # recoveries whose last renewal the worker applied but never recorded
    clear_lag: list[float] = []  # recoveries with no database outage in their window
    to_claim: list[float] = []
    for job_id, by_attempt in rows.items():
        for k, row in by_attempt.items():
            if row.outcome not in REAPED:
                continue
            inv["I5"].checked += 1
            beats = renewals.get((job_id, k), [])
            claim_ev = claims.get((job_id, k), [])
            if beats or claim_ev:
                last_alive = max(beats + [float(c["m"]) for c in claim_ev]) + mono_to_wall
            else:
                last_alive = row.claimed_at  # killed before it could record anything
            # The database's own last renewal, lease_until - ttl, counts even when
            # the worker never heard back (an answer lost to a partition, a kill
            # or stop between the write and its record).
            lapse = lapsed_at.get((job_id, k))
            if lapse is not None and lapse - lease_ttl > last_alive:
                last_alive = lapse - lease_ttl
                unheard += 1
            lag = row.finished_at - last_alive
            reap_lag.append(lag)
            excused = sum(min(e, row.finished_at) - max(b, last_alive) + RECONNECT_GRACE
                          for b, e in outage_list if b < row.finished_at and e > last_alive)
            if not excused:
                clear_lag.append(lag)
            following = by_attempt.get(k + 1)
            if following is not None:
                to_claim.append(following.claimed_at - last_alive)
            if lag > bound + slack + excused:
                inv["I5"].violations.append(
                    f"job {job_id}: attempt {k}'s lease was recovered {lag:.2f}s after its last renewal "
                    f"(bound {bound:g}s + {slack:g}s slack" + (f" + {excused:.2f}s of database outage)"
                                                              if excused else ")")
                    + _reaper_activity(ticks, last_alive + lease_ttl, row.finished_at))

    states: dict[str, int] = defaultdict(int)
    for job in jobs.values():
        states[job.state] += 1
    n_attempts = sum(len(v) for v in rows.values())
    return CheckReport(
        invariants=inv,
        recovery={
            "recoveries": len(reap_lag),
            "p50": _pct(reap_lag, 50), "p99": _pct(reap_lag, 99), "max": max(reap_lag, default=None),
            "no_outage_recoveries": len(clear_lag), "no_outage_p50": _pct(clear_lag, 50),
            "no_outage_p99": _pct(clear_lag, 99), "no_outage_max": max(clear_lag, default=None),
            "outages": len(outage_list), "outage_s": round(sum(e - b for b, e in outage_list), 2),
            "to_next_claim_p50": _pct(to_claim, 50), "to_next_claim_p99": _pct(to_claim, 99),
            "to_next_claim_max": max(to_claim, default=None),
            "renewals_unheard": unheard,
        },
        counts={"jobs": len(jobs), "attempts": n_attempts, **{f"state_{k}": v for k, v in sorted(states.items())},
                "reports": len(reports), "prefetched": prefetch["buffered"],
                "prefetch_handed_back": prefetch["handed_back"]},
        bound=bound,
    )


def _reaper_activity(ticks: list[tuple[float, float, bool]], due: float, reaped_at: float) -> str:
    """What the reapers did between a lease's lapse and its recovery, so an I5
    violation says whether the reapers were not running (starved, stopped,
    cut off) or ran and missed the row (a bug in the reap statement)."""
    if not ticks:
        return ""
    # A tick that started after the lapse and ended before the recovery ran its
    # statement when the row was reapable: it should have taken it.
    missed = sum(1 for b, e, ok in ticks if ok and b > due and e < reaped_at)
    failed = sum(1 for b, e, ok in ticks if not ok and e > due and b < reaped_at)
    starts = sorted(b for b, _, _ in ticks if due < b < reaped_at)
    edges = [due, *starts, reaped_at]
    gap = max(nxt - prev for prev, nxt in pairwise(edges))
    return (f"; reaper ticks after the lapse: {missed} ran and missed it, {failed} failed; "
            f"longest wait for a tick {gap:.2f}s")
