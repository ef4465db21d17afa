"""The I8 checker (queue limits and exclusive keys) on synthetic attempt spans:
a clean history must pass, and every way of exceeding a limit must be flagged."""

from __future__ import annotations

from tether.chaos.limits_check import LIMITED_QUEUE, Span, check_limits

Q = LIMITED_QUEUE


def span(job: int, start: float, end: float | None, *, key: str | None = None, queue: str = Q,
         attempt: int = 1, limit_key: str | None = None) -> Span:
    return Span(job, attempt, queue, key, 1_000.0 + start, None if end is None else 1_000.0 + end, limit_key)


def test_a_history_within_the_limits_passes() -> None:
    spans = [
        span(1, 0, 1), span(2, 0.5, 2),
        span(3, 1, 3),  # starts exactly when job 1 ends: half-open, no overlap
        span(4, 2, 2.5, key="a"), span(5, 2.5, 4, key="a"),  # one key, back to back
        span(6, 3, None),  # still running at the end, beside job 5
        span(7, 0, 10, queue="other"), span(8, 0, 10, queue="other"),  # another queue has no limit
        span(9, 5, 6, key="b", queue="other"),
    ]
    inv, details = check_limits(spans, concurrency=2)
    assert inv.ok, inv.violations
    assert inv.checked == 6 + 3
    assert details["limited_peak"] == 2 and details["key_peak"] == 1 and details["raw_overlaps"] == 0


def test_three_open_attempts_with_a_limit_of_two_are_flagged() -> None:
    inv, details = check_limits([span(1, 0, 2), span(2, 0.5, 2), span(3, 1, 1.5)], concurrency=2)
    assert not inv.ok and len(inv.violations) == 1
    assert "3 attempts open" in inv.violations[0] and "job 3 attempt 1" in inv.violations[0]
    assert details["limited_peak"] == 3


def test_a_reaped_attempt_counts_until_its_reap() -> None:
    """A dead worker's attempt (lease_expired, finished at the reap) holds its
    room until the reaper ends it: two claims before that overrun the limit."""
    dead = span(1, 0, 5)  # the worker died at 0.3; the reaper ended the attempt at 5
    inv, _ = check_limits([dead, span(2, 1, 3), span(3, 2, 4), span(1, 5, 6, attempt=2)], concurrency=2)
    assert not inv.ok and "job 1 attempt 1" in inv.violations[0]


def test_a_running_job_counts_to_the_end() -> None:
    inv, _ = check_limits([span(1, 0, None), span(2, 1, 2), span(3, 3, 4), span(4, 3.5, 5)], concurrency=2)
    assert not inv.ok and "running" in inv.violations[0]


def test_two_open_attempts_of_one_key_are_flagged_whatever_their_queues() -> None:
    inv, details = check_limits([span(1, 0, 2, key="k"), span(2, 1, 3, key="k", queue="other")], concurrency=5)
    assert not inv.ok and inv.violations[0].startswith("key 'k'")
    assert details["key_peak"] == 2


def test_a_second_attempt_of_one_job_may_not_overlap_another_of_its_key() -> None:
    inv, _ = check_limits([span(1, 0, 2, key="k"), span(2, 2, 4, key="k"), span(1, 3, 5, key="k", attempt=2)])
    assert not inv.ok and len(inv.violations) == 1


def test_skew_excuses_only_overlaps_shorter_than_it_and_counts_them() -> None:
    """PostgreSQL: a claim's claimed_at (its transaction start) may precede
    the finished_at of a completion it counted as committed. Within ``skew``
    that is tolerated, and reported; a longer overlap is a violation."""
    short = [span(1, 0, 1.1), span(2, 0, 2), span(3, 1.0, 3)]  # 0.1 s over the limit
    inv, details = check_limits(short, concurrency=2, skew=0.25)
    assert inv.ok, inv.violations
    assert details["raw_overlaps"] == 1 and details["raw_longest_ms"] == 100
    assert not check_limits(short, concurrency=2)[0].ok  # with no tolerance (SQLite) it is one

    long = [span(1, 0, 1.5), span(2, 0, 2), span(3, 1.0, 3)]  # 0.5 s over
    inv, _ = check_limits(long, concurrency=2, skew=0.25)
    assert not inv.ok

    keyed = [span(1, 0, 1.1, key="k"), span(2, 1.0, 2, key="k")]
    assert check_limits(keyed, skew=0.25)[0].ok
    assert not check_limits([span(1, 0, 1.6, key="k"), span(2, 1.0, 2, key="k")], skew=0.25)[0].ok


def test_each_episode_over_the_limit_is_reported_once() -> None:
    spans = [span(1, 0, 1), span(2, 0, 1), span(3, 0.5, 1), span(4, 2, 3), span(5, 2, 3), span(6, 2.5, 3)]
    inv, _ = check_limits(spans, concurrency=2)
    assert len(inv.violations) == 2


def test_under_skew_an_attempt_shorter_than_the_skew_is_not_left_open() -> None:
    """Its end, taken skew early, falls before its start: it must close, not stay open for ever."""
    spans = [span(1, 0, 0.2), span(2, 1, 2), span(3, 1.5, 3)]
    inv, details = check_limits(spans, concurrency=2, skew=0.25)
    assert inv.ok, inv.violations
    assert details["limited_peak"] == 2


def test_a_limit_key_may_have_its_concurrency_open_and_no_more_whatever_the_queue() -> None:
    """Per-key limits (issue 44): each limit key is judged on its own, across queues."""
    fine = [span(1, 0, 2, queue="a", limit_key="t:0"), span(2, 1, 3, queue="b", limit_key="t:0"),
            span(3, 0, 3, queue="a", limit_key="t:1"), span(4, 0.5, 1, queue="a", limit_key="t:1"),
            span(5, 2, 4, queue="b", limit_key="t:0")]  # starts as job 1 ends: two open at most
    inv, details = check_limits(fine, key_concurrency=2)
    assert inv.ok, inv.violations
    assert details["limit_keyed_attempts"] == 5 and details["limit_key_peak"] == 2
    over = [*fine, span(6, 2.5, 2.8, queue="c", limit_key="t:0")]
    inv, details = check_limits(over, key_concurrency=2)
    assert not inv.ok and len(inv.violations) == 1 and details["limit_key_peak"] == 3
    assert "limit key 't:0': 3 attempts open" in inv.violations[0] and "job 6 attempt 1" in inv.violations[0]
