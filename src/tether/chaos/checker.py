"""The history checker: did the contract (I1-I5) hold over a run?

Inputs are the events the workers and the driver recorded (see
``tether.worker.history``) and the database's final state (every job row and
every attempt row). The checker trusts neither side alone: the database says
what was decided, the history says what each process believed and sent.

Times: events carry the system-wide monotonic clock ``m``; the driver maps it
to the wall clock with one offset it measured itself, so skewed workers
(libfaketime) cannot distort the ordering. Database times are the database's
own clock, on the same machine as the driver.

I5 promises recovery by a *healthy* worker, and a fault schedule may leave
none for a while (a failpoint kills the last one while the others are stopped
or cut off). The checker rebuilds, from the driver's fault events and each
worker's own records, the windows in which no worker was healthy, and does not
count them against a recovery (see ``_unhealthy``).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

__all__ = ["AttemptRow", "CheckReport", "JobRow", "answered_since", "check", "healthy_spans", "stopped_windows"]

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
    #: what I5 did not judge: "no healthy worker from +a to +b s" (seconds into the run)
    not_judged: list[str] = field(default_factory=list)
    expected_loss: dict[str, Any] = field(default_factory=dict)  # a failover's, chaos/failover_check.py

    @property
    def ok(self) -> bool:
        return all(i.ok for i in self.invariants.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "bound_s": self.bound,
            "counts": self.counts,
            "recovery_s": self.recovery,
            "i5_not_judged": self.not_judged, "expected_loss": self.expected_loss,
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
    sqlite: bool = False,
) -> CheckReport:
    """``mono_to_wall``: add to an event's ``m`` to get wall-clock epoch seconds.

    ``outages``: (start, end) wall-clock windows when the database itself was
    down (a server restart). Nothing can be claimed or reaped then, so a
    recovery whose window overlaps one is allowed that overlap plus
    ``RECONNECT_GRACE`` for the workers' connections to come back.

    ``sqlite``: on SQLite a worker stopped inside a write transaction holds
    the database's one write lock, and no other worker's reaper can write
    until it is continued; every window in which such a worker was stopped
    (``stopped_windows``) counts as one with no healthy worker.
    """
    outage_list = sorted(outages)
    events = list(events)
    sick = _union([(b + mono_to_wall, e + mono_to_wall)
                   for b, e in _unhealthy(events) + (stopped_windows(events) if sqlite else [])])
    inv = {
        "I1": Invariant("I1", "no loss: every acknowledged enqueue ended terminal"),
        "I2": Invariant("I2", "one live owner: no two attempts' leases overlap"),
        "I3": Invariant("I3", "fencing: attempts rise by one; stale writes were refused and changed nothing"),
        "I4": Invariant("I4", "terminal is final: nothing finished twice or ran after finishing"),
        "I5": Invariant("I5", "bounded recovery: lapsed leases claimable within lease_ttl + reaper_interval "
                                "(time with no healthy worker not counted)"),
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
    waited: list[float] = []  # recoveries that waited on no healthy worker: how long each did
    used: set[tuple[float, float]] = set()  # the no-healthy windows that mattered to a recovery
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
            # Time after the lapse with no healthy worker to reap it is not the
            # reapers' to answer for (but a database outage in it is counted once).
            due = last_alive + lease_ttl
            hit = [(max(b, due), min(e, row.finished_at)) for b, e in sick if b < row.finished_at and e > due]
            down = [(max(b, due), min(e, row.finished_at)) for b, e in outage_list
                    if b < row.finished_at and e > due]
            no_healthy = _measure(hit + down) - _measure(down)
            if no_healthy > 0:
                waited.append(no_healthy)
                used.update((b, e) for b, e in sick if b < row.finished_at and e > due)
            if lag > bound + slack + excused + no_healthy:
                extra = (f" + {excused:.2f}s of database outage" if excused else "") + (
                    f" + {no_healthy:.2f}s with no healthy worker" if no_healthy else "")
                inv["I5"].violations.append(
                    f"job {job_id}: attempt {k}'s lease was recovered {lag:.2f}s after its last renewal "
                    f"(bound {bound:g}s + {slack:g}s slack{extra})"
                    + _reaper_activity(ticks, due, row.finished_at))

    origin = _origin(events) + mono_to_wall
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
            "no_healthy_windows": len(sick), "no_healthy_s": round(_measure(sick), 2),
            "waited_on_no_healthy": len(waited), "waited_on_no_healthy_max": max(waited, default=None),
        },
        counts={"jobs": len(jobs), "attempts": n_attempts, **{f"state_{k}": v for k, v in sorted(states.items())},
                "reports": len(reports), "prefetched": prefetch["buffered"],
                "prefetch_handed_back": prefetch["handed_back"]},
        bound=bound,
        not_judged=[f"no healthy worker from +{b - origin:.2f}s to +{e - origin:.2f}s" for b, e in sorted(used)],
    )


def _measure(intervals: Iterable[tuple[float, float]]) -> float:
    """Length of the union of (start, end) intervals."""
    total, reach = 0.0, -math.inf
    for b, e in sorted(intervals):
        if e > reach:
            total += e - max(b, reach)
            reach = e
    return total


def _union(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """(start, end) intervals merged where they overlap or touch, in order."""
    out: list[tuple[float, float]] = []
    for b, e in sorted(intervals):
        if out and b <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((b, e))
    return out


def stopped_windows(events: Iterable[Mapping[str, Any]]) -> list[tuple[float, float]]:
    """Monotonic windows in which the driver held some worker stopped (SIGSTOP
    until its SIGCONT, or its death) while it held SQLite's write lock: the
    driver probes the lock right after each stop (``stop_lock``); a stop
    without a probe counts, as one that may hold it."""
    out: list[tuple[float, float]] = []
    since: dict[int, float] = {}
    last = 0.0
    for e in sorted(events, key=lambda e: float(e["m"])):
        m = last = float(e["m"])
        if e.get("w") != "driver":
            continue
        kind = e.get("e")
        if kind == "fault" and e.get("kind") == "stop":
            since.setdefault(int(e["pid"]), m)
        elif kind == "stop_lock" and not e.get("holds", True):
            since.pop(int(e["pid"]), None)  # stopped outside a write transaction: the others can write
        elif kind in ("resume", "died") or (kind == "fault" and e.get("kind") == "kill"):
            b = since.pop(int(e["pid"]), None)
            if b is not None:
                out.append((b, m))
    out.extend((b, last) for b in since.values())
    return out


def _origin(events: list[Mapping[str, Any]]) -> float:
    """The run's start on the monotonic clock: its first event."""
    return min((float(e["m"]) for e in events), default=0.0)


def _unhealthy(events: list[Mapping[str, Any]]) -> list[tuple[float, float]]:
    """The (start, end) windows, monotonic clock, in which no worker was
    healthy (see ``healthy_spans``), from the first worker's start on."""
    spans = sorted(span for per in healthy_spans(events).values() for span in per)
    if not spans:
        return []
    out: list[tuple[float, float]] = []
    reach = spans[0][0]
    for b, e in spans:
        if b > reach:
            out.append((reach, b))
        reach = max(reach, e)
    # A run ends with no healthy worker (the drain stops them all): that last
    # window is open, and nothing after it needs judging.
    return out


def answered_since(e: Mapping[str, Any], since: float) -> bool:
    """Whether a worker's record is the database's answer to a request the
    worker sent at or after ``since`` (monotonic): proof its link works."""
    kind = e.get("e")
    if kind == "reap":
        sent = float(e["started"]) if e.get("ok") else -math.inf
    elif kind in ("claimed", "hb", "report"):
        sent = float(e.get("sent", e["m"]))
    else:
        return False
    return sent >= since


def healthy_spans(events: Iterable[Mapping[str, Any]]) -> dict[int, list[tuple[float, float]]]:
    """Each worker process's healthy (start, end) spans, monotonic clock, by pid.

    A worker process is healthy once it has recorded ``started`` (it reached
    the database and registered) until the driver kills it, sees it die or
    stops it (and again from its SIGCONT), or it stops itself. A blackhole
    partition cuts it off; after the heal it counts as healthy again only from
    the first answer it gets from the database to a request sent after the
    heal: a request caught in the blackhole waits on a connection whose bytes
    were dropped, and the worker cannot know before the server gives up on it.
    A reset partition closes connections without cutting the link, and a
    database restart is an outage (``outages``), so neither makes a worker
    unhealthy here. Histories without ``started`` records (no lifecycle known)
    have no spans.
    """
    events = sorted(events, key=lambda e: float(e["m"]))
    spans: dict[int, list[tuple[float, float]]] = defaultdict(list)
    if not any(e.get("e") == "started" for e in events):
        return spans
    slot_pid: dict[int, int] = {}
    started: set[int] = set()
    gone: set[int] = set()
    stopped: set[int] = set()
    cut: set[int] = set()
    healed_at: dict[int, float] = {}  # pid -> heal time, while it waits for its first answer since
    since: dict[int, float] = {}  # pid -> healthy since

    for e in events:
        kind, m, pid = e.get("e"), float(e["m"]), e.get("pid")
        driver = e.get("w") == "driver"
        if driver and kind == "spawn":
            # A new process; its pid may be an earlier, dead one's (pids are reused)
            new = int(e["pid"])
            slot_pid[int(e["slot"])] = new
            for states in (started, gone, stopped, cut):
                states.discard(new)
            healed_at.pop(new, None)
        elif driver and kind == "fault" and e.get("kind") in ("kill", "stop"):
            (gone if e["kind"] == "kill" else stopped).add(int(e["pid"]))
        elif driver and kind == "died":
            gone.add(int(e["pid"]))
        elif driver and kind == "resume":
            stopped.discard(int(e["pid"]))
        elif driver and kind == "fault" and e.get("kind") == "partition" and e.get("mode") == "blackhole":
            target = slot_pid.get(int(e["slot"]))
            if target is not None:
                cut.add(target)
                healed_at.pop(target, None)
        elif driver and kind == "heal":
            target = slot_pid.get(int(e["slot"]))
            if target is not None and target in cut:
                healed_at[target] = m
        elif not driver and kind == "started":
            started.add(int(e["pid"]))
        elif not driver and kind == "stopped":
            gone.add(int(e["pid"]))
        elif not driver and pid in healed_at and answered_since(e, healed_at[int(pid)]):
            cut.discard(int(pid))
            del healed_at[int(pid)]
        healthy = started - gone - stopped - cut
        for p in healthy - since.keys():
            since[p] = m
        for p in since.keys() - healthy:
            spans[p].append((since.pop(p), m))
    last = float(events[-1]["m"])
    for p, b in since.items():
        spans[p].append((b, last))
    return spans


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
