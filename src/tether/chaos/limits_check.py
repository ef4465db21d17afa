"""I8, queue and key limits: a chaos run's limited queue never had more
attempts open at once than its concurrency, no exclusive key ever had two,
and no limit key (issue 44: ``limit_key``, the ``LIMIT_PATTERN`` configured
with ``LIMIT_KEY_CONCURRENCY``) more than its concurrency.

Judged from the database's own audit, not from the workers' logs: every
finished attempt is a row of the attempts table, open over
[claimed_at, finished_at) (a reaped one, ``lease_expired`` or ``timed_out``,
ends at the reap: its finished_at is the reap statement's now()), and a job
still running has one more, open from its row's claimed_at on. A dead or
stopped worker's attempt therefore counts until the reaper ends it, exactly as
the claim statement counts it (for a limit key as for a queue). A sweep over the interval ends in time order
(a finish at t before a start at t: half-open, they do not overlap) finds the
most attempts open at once, for the queue and for each key.

Timestamps, and the rule chosen (``skew``): the claim statements count
against the limits in commit order, the timestamps do not record it.
- SQLite: every write statement runs under the one write lock, and its now()
  is read inside the statement, so timestamp order is commit order: no
  tolerance (``skew=0``).
- PostgreSQL: claimed_at and finished_at are now(), the *start* of each
  statement's transaction. A claim of a limited queue takes the queue's lock
  and counts the running jobs with a fresh snapshot (``claim_room``), so it
  may count a completion (or reap, or fail) that began after the claim did,
  but committed before the claim's count: the claim is legal, yet its
  claimed_at is earlier than that attempt's finished_at. Such an apparent
  overlap is at most the claim statement's time from its start to its count
  (a lock wait included); there is no commit time in the audit to do better.
  So on PostgreSQL each attempt's end is taken ``skew`` earlier (default
  ``PG_SKEW``): an overlap longer than that is a violation; shorter ones are
  counted and the longest is reported (``raw_overlaps``, ``raw_longest_ms``),
  never silently dropped. The blind spot, stated: a real overrun shorter than
  ``skew`` is not caught (nor one shorter than the statement that ended it:
  its finished_at is that transaction's start, not its commit). The
  chaos workload keeps the limited queue's jobs well longer than ``skew``,
  so a limit a claim got wrong shows as an overlap of a whole job.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from ..model import KeyLimits, QueueLimits
from ..store import Store
from .checker import Invariant

__all__ = ["LIMITED_CONCURRENCY", "LIMITED_KEYS", "LIMITED_QUEUE", "LIMIT_KEYS", "LIMIT_KEY_CONCURRENCY",
           "LIMIT_PATTERN", "PG_SKEW", "Span", "check_limits", "configure_limits", "limits_invariant", "place",
           "read_spans"]

#: the run's limited queue (every chaos worker serves it) and its limit, set by the driver at setup
LIMITED_QUEUE = "tether_chaos_limited"
LIMITED_CONCURRENCY = 2
#: the exclusive keys some of its jobs carry
LIMITED_KEYS = ("k0", "k1", "k2")
#: the share of the producer's jobs on the limited queue, and of those, the share with a key
LIMITED_SHARE = 0.2
KEYED_SHARE = 0.5
#: per-key limits (issue 44): the limit keys some of the other queue's jobs carry, the pattern that limits
#: each of them to LIMIT_KEY_CONCURRENCY running at once, and the share of the producer's jobs with one
LIMIT_KEYS = ("tenant:0", "tenant:1", "tenant:2")
LIMIT_PATTERN = "tenant:*"
LIMIT_KEY_CONCURRENCY = 2
LIMIT_KEY_SHARE = 0.15
#: PostgreSQL's tolerance for the statement-start timestamps (module docstring)
PG_SKEW = 0.25
TITLE = ("queue and key limits: never more attempts of the limited queue open at once than its concurrency, "
         "never two of one exclusive key, never more of one limit key than its pattern's concurrency (from the "
         "attempts table; a dead worker's count until reaped)")


@dataclass(frozen=True, slots=True)
class Span:
    """One attempt, open over [start, end); end None: still running."""

    job_id: int
    attempt: int
    queue: str
    key: str | None
    start: float  # epoch seconds, database clock
    end: float | None
    #: its limit key (issue 44), counted against LIMIT_KEY_CONCURRENCY
    limit_key: str | None = None


def configure_limits(store: Store) -> None:
    """The run's limits, set by the driver at setup: the limited queue's and the limit keys' pattern."""
    store.set_limits(QueueLimits(LIMITED_QUEUE, concurrency=LIMITED_CONCURRENCY))
    store.set_key_limits(KeyLimits(LIMIT_PATTERN, concurrency=LIMIT_KEY_CONCURRENCY))


def place(rng: random.Random, short: bool, default: str) -> tuple[str, str | None, str | None, int]:
    """Where the producer puts one job: (queue, exclusive key, limit key, ms
    it runs). The limited queue's jobs and the limit keys' run 300-900 ms,
    well longer than ``PG_SKEW``."""
    if rng.random() < LIMITED_SHARE:
        key = rng.choice(LIMITED_KEYS) if rng.random() < KEYED_SHARE else None
        return LIMITED_QUEUE, key, None, rng.randint(300, 900)
    if rng.random() < LIMIT_KEY_SHARE:
        return default, None, rng.choice(LIMIT_KEYS), rng.randint(300, 900)
    return default, None, None, rng.randint(1, 5) if short else rng.randint(20, 600)


def read_spans(store: Store, job_ids: Iterable[int]) -> list[Span]:
    """Every attempt of the limited queue's jobs and of jobs with a key."""
    out: list[Span] = []
    for job_id in job_ids:
        job = store.get_job(job_id)
        if job is None or (job.queue != LIMITED_QUEUE and job.exclusive_key is None and job.limit_key is None):
            continue
        out.extend(Span(job.id, a.attempt, job.queue, job.exclusive_key, a.claimed_at.timestamp(),
                        None if a.finished_at is None else a.finished_at.timestamp(), job.limit_key)
                   for a in job.attempts)
    return out


def _excess(spans: Sequence[Span], limit: int, skew: float) -> tuple[list[tuple[float, float, list[Span]]], int]:
    """The episodes in which more than ``limit`` spans were open, as (from,
    until, the spans open when it began), and the most open at once."""
    edges: list[tuple[float, int, int]] = []  # (time, 0 end / 1 start, index): ends first at a tie
    for i, s in enumerate(spans):
        if s.end is None:
            edges.append((s.start, 1, i))
        elif s.end - skew > s.start:  # one no longer than skew is open at no instant under this rule
            edges += [(s.start, 1, i), (s.end - skew, 0, i)]
    edges.sort()
    open_: set[int] = set()
    peak, out = 0, []
    began: tuple[float, list[Span]] | None = None
    for t, kind, i in edges:
        if kind == 0:
            open_.discard(i)
        else:
            open_.add(i)
        peak = max(peak, len(open_))
        if len(open_) > limit and began is None:
            began = (t, [spans[j] for j in sorted(open_)])
        elif len(open_) <= limit and began is not None:
            out.append((began[0], t, began[1]))
            began = None
    if began is not None:
        out.append((began[0], float("inf"), began[1]))
    return out, peak


def check_limits(spans: Iterable[Span], *, queue: str = LIMITED_QUEUE, concurrency: int = LIMITED_CONCURRENCY,
                 skew: float = 0.0, key_concurrency: int = LIMIT_KEY_CONCURRENCY) -> tuple[Invariant, dict[str, int]]:
    """I8 over the attempts' spans: at no instant more than ``concurrency``
    attempts of ``queue`` open, nor two of one exclusive key (any queue), nor
    more than ``key_concurrency`` of one limit key (any queue). Each end is
    taken ``skew`` seconds earlier (the module docstring says why). The
    details say what the raw timestamps show too (``raw_overlaps``, the
    longest in ``raw_longest_ms``): with no violation, all of them were
    within ``skew``."""
    inv = Invariant("I8", TITLE)
    spans = list(spans)
    limited = [s for s in spans if s.queue == queue]
    by_key: dict[str, list[Span]] = defaultdict(list)
    by_limit_key: dict[str, list[Span]] = defaultdict(list)
    for s in spans:
        if s.key is not None:
            by_key[s.key].append(s)
        if s.limit_key is not None:
            by_limit_key[s.limit_key].append(s)
    keyed, limit_keyed = sum(len(v) for v in by_key.values()), sum(len(v) for v in by_limit_key.values())
    inv.checked = len(limited) + keyed + limit_keyed
    details = {"concurrency": concurrency, "skew_ms": round(skew * 1000), "limited_attempts": len(limited),
               "keyed_attempts": keyed, "limited_peak": 0, "key_peak": 0, "key_concurrency": key_concurrency,
               "limit_keyed_attempts": limit_keyed, "limit_key_peak": 0, "raw_overlaps": 0, "raw_longest_ms": 0}
    groups = ([(f"queue {queue}", limited, concurrency, "limited_peak")]
              + [(f"key {k!r}", v, 1, "key_peak") for k, v in sorted(by_key.items())]
              + [(f"limit key {k!r}", v, key_concurrency, "limit_key_peak") for k, v in sorted(by_limit_key.items())])
    for what, group, limit, name in groups:
        excess, peak = _excess(group, limit, skew)
        details[name] = max(details[name], peak)
        for t, until, open_ in excess:
            inv.violations.append(
                f"{what}: {len(open_)} attempts open at {_iso(t)} for {until - t:.3f} s (limit {limit}"
                f"{f', ends taken {skew:g} s early' if skew else ''}): "
                + ", ".join(f"job {s.job_id} attempt {s.attempt} [{_iso(s.start)}, "
                            f"{_iso(s.end) if s.end is not None else 'running'})" for s in open_))
        raw = excess if skew == 0 else _excess(group, limit, 0.0)[0]
        details["raw_overlaps"] += len(raw)
        longest = max((until - t for t, until, _ in raw), default=0.0)
        details["raw_longest_ms"] = max(details["raw_longest_ms"], round(min(longest, 1e9) * 1000))
    return inv, details


def limits_invariant(store: Store, job_ids: Iterable[int], *, postgres: bool) -> tuple[Invariant, dict[str, int]]:
    """I8 over a chaos run's jobs, as the database recorded them."""
    return check_limits(read_spans(store, job_ids), skew=PG_SKEW if postgres else 0.0)


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="microseconds")
