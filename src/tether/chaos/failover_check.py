"""What a PostgreSQL failover cost a chaos run (the ``failover`` fault).

With synchronous replication a commit is acknowledged only once the standby
holds it, so a failover loses nothing acknowledged: the run is judged as any
other, and this module adds one check, that no acknowledged job id now names
another job (an identity sequence rolled back by a failover hands a lost
job's id to the next enqueue, and I1 would find that id terminal and pass).

With asynchronous replication whatever the old primary committed after the
last transaction the standby replayed (``Failover.last_replayed``) up to its
death is gone: that stretch is the failover's *loss window*. This module
measures what the run had been told in those windows and lost:

- acknowledged enqueues: the job is missing, or its id names a job created
  after the acknowledgement (the id was handed out again);
- acknowledged completions (and failures, releases): the attempt ended
  otherwise (reaped, run again);
- attempt numbers handed out twice: a claim lost with the window, the same
  attempt number granted again to another worker on the new primary;
- fencing of those twice-handed attempts: every write the losing owner sent
  after the promotion must be refused (the fence is ``id AND attempt AND
  locked_by``: the attempt number matches, the worker does not). One accepted
  is a broken fence, reported under I3 and never excused.

The invariants' violations about jobs an acknowledged write of which fell in
a loss window are the window's expected cost: they move from the verdict to
``CheckReport.expected_loss``, listed, with the counts above. Anything else
still breaks the contract. (The excuse is per job: a bug on such a job would
hide behind the loss. The counts say how many jobs that covers.)
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .checker import AttemptRow, CheckReport, JobRow
from .pgpair import Failover

__all__ = ["judge_failovers", "loss_windows"]

_JOB = re.compile(r"job (\d+):")
#: what an accepted report should have left as the attempt's outcome
_OUTCOMES = {"complete": {"succeeded"}, "fail": {"failed", "timed_out", "cancelled"}, "release": {"released"}}


def loss_windows(failovers: Iterable[Failover]) -> list[tuple[float, float]]:
    """(start, end) wall-clock windows whose acknowledged commits may be gone:
    from the last replayed commit (or the standby's start, if it replayed
    none) to the kill."""
    return [(f.last_replayed if f.last_replayed is not None else f.standby_since, f.killed_at) for f in failovers]


def _acks(events: Iterable[Mapping[str, Any]], mono_to_wall: float) -> dict[int, list[tuple[float, float]]]:
    """Each job's acknowledged writes, as (sent, answered) wall-clock spans
    (the commit fell somewhere in one): its enqueue, claims, accepted
    renewals and reports, and the reaps that took it."""
    out: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for e in events:
        kind = e.get("e")
        if kind == "enqueued" and e.get("w") == "driver":
            for job_id in e["jobs"]:
                out[int(job_id)].append((float(e.get("sent", e["t"])), float(e["t"])))
        elif kind == "claimed" or (kind == "hb" and e.get("beat") in ("renewed", "cancel_requested")) or (
                kind == "report" and e.get("accepted")):
            out[int(e["job"])].append((float(e.get("sent", e["m"])) + mono_to_wall, float(e["m"]) + mono_to_wall))
        elif kind == "reap":
            for job_id, *_ in e.get("jobs", []):
                out[int(job_id)].append((float(e.get("started", e["m"])) + mono_to_wall, float(e["m"]) + mono_to_wall))
    return out


def judge_failovers(
    report: CheckReport, events: Sequence[Mapping[str, Any]], jobs: Mapping[int, JobRow],
    attempts: Iterable[AttemptRow], *, failovers: Sequence[Failover], created: Mapping[int, float],
    mono_to_wall: float, synchronous: bool,
) -> CheckReport:
    """Amend ``report`` (see the module's docstring). ``created``: each job's
    created_at (database clock, epoch seconds)."""
    windows = [] if synchronous else loss_windows(failovers)

    def lost(sent: float, answered: float) -> bool:
        return any(sent <= e and answered >= b for b, e in windows)

    rows = {(a.job_id, a.attempt): a for a in attempts}
    # Enqueues: an id acknowledged twice, or naming a job made after its acknowledgement.
    aliased = [(int(j), float(e["t"])) for e in events if e.get("e") == "enqueued" and e.get("w") == "driver"
               for j in e["jobs"] if int(j) in created and created[int(j)] > float(e["t"])]
    missing = [j for j in dict.fromkeys(int(e) for e in _enqueued(events)) if j not in jobs]
    for job_id, at in aliased:
        report.invariants["I1"].violations.append(
            f"job {job_id}: acknowledged at enqueue, but the row with its id was created "
            f"{created[job_id] - at:.3f}s after that: another job got the id, the acknowledged one is gone")
    # Reports the database does not show.
    unrecorded: dict[str, int] = defaultdict(int)
    for e in events:
        if e.get("e") == "report" and e.get("accepted") and e.get("op") in _OUTCOMES:
            row = rows.get((int(e["job"]), int(e["attempt"])))
            if row is None or row.outcome not in _OUTCOMES[e["op"]] or row.worker != e["w"]:
                unrecorded[str(e["op"])] += 1
    # Attempt numbers granted to two workers, and whether the loser's later writes were refused.
    claims: dict[tuple[int, int], dict[str, float]] = defaultdict(dict)  # (job, attempt) -> worker -> when
    for e in events:
        if e.get("e") == "claimed":
            claims[(int(e["job"]), int(e["attempt"]))].setdefault(str(e["w"]), float(e["m"]) + mono_to_wall)
    twice = {key: who for key, who in claims.items() if len(who) > 1}
    fenced = refused_stale = 0
    for e in events:
        key = (int(e.get("job", 0)), int(e.get("attempt", 0)))
        if key not in twice or e.get("e") not in ("hb", "report") or key not in rows:
            continue
        owner, writer = rows[key].worker, str(e["w"])
        if writer == owner or writer not in twice[key]:
            continue
        # the failover that took the writer's claim: the first after it
        after = min((f.promoted_at for f in failovers if f.killed_at >= twice[key][writer]), default=None)
        if after is None or float(e.get("sent", e["m"])) + mono_to_wall < after:
            continue  # its own attempt's writes, before the failover
        fenced += 1
        if e.get("accepted") or e.get("beat") in ("renewed", "cancel_requested"):
            report.invariants["I3"].violations.append(
                f"fence broken: job {key[0]} attempt {key[1]} belongs to {owner}, but {writer}'s "
                f"{e['e']} (sent after the failover that lost its claim) was accepted")
        else:
            refused_stale += 1

    touched = {j for j, times in _acks(events, mono_to_wall).items() if any(lost(*span) for span in times)}
    excused: list[str] = []
    if windows:
        for name, inv in report.invariants.items():
            keep = []
            for v in inv.violations:
                m = _JOB.match(v)
                if m and int(m[1]) in touched:
                    excused.append(f"{name} {v}")
                else:
                    keep.append(v)
            inv.violations = keep
    report.expected_loss = {
        "replication": "synchronous" if synchronous else "asynchronous",
        "failovers": len(failovers),
        "write_outage_s": round(sum(f.promoted_at - f.killed_at for f in failovers), 2),
        "no_standby_s": round(sum(f.ready_at - f.promoted_at for f in failovers), 2),
        "loss_window_s": round(sum(e - b for b, e in windows), 3),
        "jobs_touched_by_loss": len(touched),
        "enqueues_lost": len(aliased) + len(missing),
        "enqueues_lost_id_reused": len(aliased),
        "completions_lost": unrecorded["complete"],
        "failures_lost": unrecorded["fail"],
        "releases_lost": unrecorded["release"],
        "attempts_granted_twice": len(twice),
        "stale_writes_after_failover": fenced,
        "stale_writes_refused": refused_stale,
        "violations_excused": len(excused),
        "excused": excused[:50],
    }
    return report


def _enqueued(events: Iterable[Mapping[str, Any]]) -> list[int]:
    return [int(j) for e in events if e.get("e") == "enqueued" and e.get("w") == "driver" for j in e["jobs"]]
