"""The I6 chaos check flags each kind of violation, and passes a clean run."""

from __future__ import annotations

from pathlib import Path

from tether.chaos.schedule_check import TickRow, check_schedule, expected_ticks

T = 2_000_000_000.0  # a whole second
BOUND = 10.0


def fired(*ticks: float, late: float = 0.3) -> list[TickRow]:
    return [TickRow(tick=t, job_id=i + 1, created_at=t + late) for i, t in enumerate(ticks)]


def test_a_clean_run_passes() -> None:
    ticks = expected_ticks("* * * * * *", "UTC", T, T + 30)
    assert ticks[0] == T + 1 and ticks[-1] == T + 30 and len(ticks) == 30
    inv = check_schedule("s", ticks, fired(*ticks), healthy=[(T - 5, T + 60)], bound=BOUND)
    assert inv.ok and inv.checked == 60


def test_a_tick_fired_twice_is_flagged_even_when_not_owed() -> None:
    rows = [*fired(T + 1), TickRow(tick=T + 1, job_id=99, created_at=T + 1.2)]
    inv = check_schedule("s", [T + 1], rows, healthy=[], bound=BOUND)
    assert not inv.ok and "fired 2 times" in inv.violations[0]


def test_a_tick_missed_while_a_worker_was_healthy_is_flagged() -> None:
    inv = check_schedule("s", [T + 1, T + 2, T + 3], fired(T + 1, T + 3), healthy=[(T, T + 30)], bound=BOUND)
    assert not inv.ok and len(inv.violations) == 1 and "missed while a healthy worker existed" in inv.violations[0]


def test_a_tick_missed_while_no_worker_was_healthy_is_not_owed() -> None:
    # workers healthy until T+1.5 and again from T+20: tick T+2 had nobody to fire it within the bound
    inv = check_schedule("s", [T + 1, T + 2], fired(T + 1), healthy=[(T, T + 1.5), (T + 20, T + 60)], bound=BOUND)
    assert inv.ok


def test_overlapping_health_windows_cover_a_tick() -> None:
    inv = check_schedule("s", [T + 1], [], healthy=[(T, T + 5), (T + 4, T + 30)], bound=BOUND)
    assert not inv.ok  # covered by the two windows together, so owed, and missed


def test_a_tick_fired_later_than_the_bound_is_flagged() -> None:
    inv = check_schedule("s", [T + 1], fired(T + 1, late=BOUND + 2), healthy=[(T, T + 60)], bound=BOUND)
    assert not inv.ok and "late" in inv.violations[0]


def test_a_skipped_tick_counts_as_decided() -> None:
    inv = check_schedule("s", [T + 1], [TickRow(tick=T + 1, job_id=None, created_at=None)],
                         healthy=[(T, T + 60)], bound=BOUND)
    assert inv.ok


def test_healthy_windows_lose_outages_and_on_sqlite_every_stop() -> None:
    """What a chaos run's I6 counts as healthy (tether.chaos.collect): the
    workers' healthy spans less the database's outages (plus the reconnect
    grace), and on SQLite less every window in which a worker was stopped."""
    from tether.chaos.checker import stopped_windows as _stopped
    from tether.chaos.collect import _minus

    assert _minus([(0.0, 10.0)], [(2.0, 3.0), (5.0, 6.0)]) == [(0.0, 2.0), (3.0, 5.0), (6.0, 10.0)]
    assert _minus([(0.0, 4.0), (8.0, 9.0)], [(3.0, 8.5)]) == [(0.0, 3.0), (8.5, 9.0)]
    assert _minus([(1.0, 2.0)], [(0.0, 5.0)]) == []
    events = [
        {"w": "driver", "e": "fault", "kind": "stop", "pid": 7, "m": 1.0},
        {"w": "driver", "e": "fault", "kind": "stop", "pid": 8, "m": 2.0},
        {"w": "driver", "e": "resume", "pid": 7, "m": 3.0},
        {"w": "driver", "e": "fault", "kind": "kill", "pid": 8, "m": 4.0},
        {"w": "driver", "e": "fault", "kind": "stop", "pid": 9, "m": 5.0},
        {"w": "w1", "e": "claimed", "m": 6.0},
    ]
    assert sorted(_stopped(events)) == [(1.0, 3.0), (2.0, 4.0), (5.0, 6.0)]


def test_a_run_owes_no_tick_from_before_its_schedule_existed(tmp_path: Path) -> None:
    """tether chaos judges I6 from the run's start, but the schedule exists
    only once the first worker's scheduler has synced it: a tick between the
    two is owed by nobody (a 10-minute soak was called broken for one)."""
    from datetime import timedelta

    from tether.chaos.collect import TICK_CRON, TICK_QUEUE, TICK_TASK, schedule_invariant
    from tether.model import ScheduleSpec
    from tether.store import open_store

    store = open_store(f"sqlite:///{tmp_path / 'x.db'}")
    try:
        store.migrate()
        synced = store.db_now().replace(microsecond=500_000)
        spec = ScheduleSpec(name=TICK_TASK, cron=TICK_CRON, timezone="UTC", args_json="{}", queue=TICK_QUEUE,
                            catch_up=1, overlap=True)
        store.sync_schedules([spec], now=synced)
        start = synced.timestamp() - 3  # the run began 3 s before the first sync
        healthy = [{"e": "started", "w": "w1", "pid": 1, "m": 0.0}, {"e": "claimed", "w": "w1", "pid": 1, "m": 10.0}]
        fired = store.fire_schedules([TICK_TASK], grace=1.0, now=synced + timedelta(seconds=0.6))
        assert fired, "the first tick after the sync fires"
        inv = schedule_invariant(store, healthy, mono_to_wall=start, start=start, end=synced.timestamp() + 0.6,
                                 bound=1.0)
        assert inv.ok, inv.violations
    finally:
        store.close()


def test_a_schedule_added_at_run_time_is_judged_beside_the_code_one(tmp_path: Path) -> None:
    """tether chaos adds a schedule at run time (collect.dynamic_spec) and judges its ticks as I6 too: a tick
    fired once passes, one missed while a worker was healthy is a violation named after that schedule."""
    from datetime import timedelta

    from tether.chaos.collect import DYNAMIC_SCHEDULE, DYNAMIC_TASK, dynamic_spec, schedule_invariant
    from tether.store import open_store

    store = open_store(f"sqlite:///{tmp_path / 'x.db'}")
    try:
        store.migrate()
        added = store.db_now().replace(microsecond=500_000)
        store.add_schedule(dynamic_spec(), now=added)
        start = added.timestamp()
        healthy = [{"e": "started", "w": "w1", "pid": 1, "m": 0.0}, {"e": "claimed", "w": "w1", "pid": 1, "m": 10.0}]
        fired = store.fire_schedules([], grace=1.0, now=added + timedelta(seconds=0.6), tasks=[DYNAMIC_TASK])
        assert [t.schedule for t in fired] == [DYNAMIC_SCHEDULE]
        inv = schedule_invariant(store, healthy, mono_to_wall=start, start=start, end=start + 0.6, bound=1.0)
        assert inv.ok and inv.checked == 2, inv.violations  # the tick fired once, and it was owed
        missed = schedule_invariant(store, healthy, mono_to_wall=start, start=start, end=start + 2.6, bound=1.0)
        assert missed.violations and {v.split(":")[0] for v in missed.violations} == {DYNAMIC_SCHEDULE}
    finally:
        store.close()
