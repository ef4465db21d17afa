"""The row helpers both backends share (no database needed)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from tether.store.rows import claimed_from_rows, epoch_to_dt

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def row(job_id: int, args: str, priority: int = 0, meta: str | None = None) -> tuple[Any, ...]:
    return (job_id, 1, "t", args, "default", priority, 3, 30.0, None, NOW, meta, NOW, None, None)


def test_claimed_rows_come_out_by_priority_then_id_with_their_own_args() -> None:
    rows = [row(5, '{"a": 5}'), row(2, '{"a": 2}', priority=1), row(9, '{"a": 9}', priority=1), row(1, '{"a": 1}')]
    jobs = claimed_from_rows(rows)
    assert [(j.id, j.args["a"]) for j in jobs] == [(2, 2), (9, 9), (1, 1), (5, 5)]
    assert all(j.claimed_at == NOW and j.run_at == NOW and j.meta is None for j in jobs)


def test_a_row_whose_args_text_holds_two_values_cannot_shift_the_others() -> None:
    # Never written by tether (its args are one JSON object), but a hand-edited
    # row must not hand the next job's args to this one: decoded row by row,
    # it fails on its own instead.
    rows = [row(1, '{"a": 1}, {"a": "stolen"}'), row(2, '{"a": 2}')]
    with pytest.raises(json.JSONDecodeError, match="Extra data"):
        claimed_from_rows(rows)


def test_meta_and_trace_are_decoded_where_present_and_times_converted_when_asked() -> None:
    epoch = NOW.timestamp()
    rows = [(1, 1, "t", "{}", "q", 0, 3, 30.0, 5.0, epoch, '{"owner": 1}', epoch, epoch, '{"traceparent": "x"}'),
            (2, 1, "t", "[]", "q", 0, 3, 30.0, None, epoch, None, None, None, None)]
    first, second = claimed_from_rows(rows, epoch_to_dt)
    assert (first.meta, first.claimed_at, first.run_at, first.timeout) == ({"owner": 1}, NOW, NOW, 5.0)
    assert first.trace == {"traceparent": "x"} and second.trace is None
    assert first.scheduled_for == NOW  # a schedule's job: its tick, converted
    assert (second.args, second.meta, second.run_at, second.scheduled_for) == ([], None, None, None)
