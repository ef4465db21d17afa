"""What each job state and attempt outcome means is kept on the enums
(model.STATE_FACTS, OUTCOME_FACTS), and the faces fill from it; an HTTP
record naming an outcome this release does not know (a newer server's) still
decodes."""

from __future__ import annotations

from datetime import UTC, datetime

from tether.cli.render import OUTCOME_STYLE, STATE_STYLE, outcome_text
from tether.dashboard.chart import FAILED
from tether.display import STATE_ORDER
from tether.events import where_it_went
from tether.model import (
    ACTIVE_STATES,
    FINISHED_STATES,
    OUTCOME_FACTS,
    STATE_FACTS,
    TERMINAL_STATES,
    JobState,
    Outcome,
)
from tether.store.http import wire
from tether.worker.pruner import RETENTION_DEFAULTS

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_every_state_and_outcome_has_its_facts() -> None:
    assert set(STATE_FACTS) == set(JobState)
    assert set(OUTCOME_FACTS) == set(Outcome)
    assert TERMINAL_STATES == {s for s in JobState if s.terminal} == set(FINISHED_STATES)
    assert set(JobState) - TERMINAL_STATES == ACTIVE_STATES
    # every finished state has a default retention (a pruner's) and is announced by an event
    assert all(s.retention and s.event for s in FINISHED_STATES)
    assert [s for s in JobState if not s.terminal and s.retention] == []


def test_the_faces_fill_from_the_facts() -> None:
    assert list(JobState) == STATE_ORDER
    assert {s: STATE_FACTS[s].style for s in JobState} == STATE_STYLE
    assert {o: OUTCOME_FACTS[o].style for o in Outcome} == OUTCOME_STYLE
    assert set(FAILED) == {Outcome.FAILED, Outcome.TIMED_OUT, Outcome.LEASE_EXPIRED, Outcome.DISCARDED}
    assert list(RETENTION_DEFAULTS.items()) == [("succeeded", "7d"), ("cancelled", "30d"), ("dead", "30d")]
    # where a failed attempt left its job (a success is no failure), and where an ending left it
    assert [where_it_went(s, Outcome.FAILED) for s in JobState if s is not JobState.SUCCEEDED] == [
        None, "job.retried", None, "job.dead", "job.cancelled"]
    assert [where_it_went(s) for s in JobState] == [None, None, None, "job.succeeded", "job.dead", "job.cancelled"]
    assert {o for o in Outcome if not o.counts} == {Outcome.RELEASED, Outcome.SNOOZED, Outcome.EXPIRED}
    # an expiry ended the job without running it: an error its result shows, not a failed attempt
    assert {o for o in Outcome if o.error} == set(FAILED) | {Outcome.CANCELLED, Outcome.EXPIRED}


def test_an_outcome_this_release_does_not_know_is_read_and_shown_plainly() -> None:
    new = Outcome.read("vanished")
    assert str(new) == "vanished" and new == "vanished" and new not in list(Outcome)
    assert Outcome.read("vanished") is new and Outcome.read("failed") is Outcome.FAILED
    assert not new.failure and not new.error and new.counts and new.style == ""
    assert outcome_text(new).plain == "vanished"


def test_records_with_an_unknown_outcome_decode() -> None:
    attempt = {"job_id": 1, "attempt": 1, "worker": "w", "claimed_at": T0.isoformat(),
               "finished_at": T0.isoformat(), "outcome": "vanished", "error": None, "traceback": None}
    assert wire.decode_attempt(attempt).outcome == "vanished"
    reaped = wire.decode_reaped({"id": 1, "attempt": 1, "worker": "w", "outcome": "vanished", "state": "dead",
                                 "queue": "q", "lease_until": None})
    assert reaped.outcome == "vanished" and reaped.state is JobState.DEAD
    # a newer server's count of a new outcome, and an older server's lack of one this release knows
    counts = {str(o): 1 for o in Outcome if o is not Outcome.SNOOZED} | {"vanished": 4}
    t = wire.decode_throughput({"start": T0.isoformat(), "seconds": 60, "counts": counts})
    assert t.counts[Outcome.SNOOZED] == 0 and t.counts[Outcome.FAILED] == 1 and t.counts[Outcome.read("vanished")] == 4
    # and the job record that carries such an attempt
    job = wire.decode_job({**_job_record(), "attempts": [attempt]})
    assert [a.outcome for a in job.attempts] == ["vanished"]


def _job_record() -> dict[str, object]:
    return {"id": 1, "queue": "q", "task": "t", "args": {}, "state": "dead", "priority": 0, "run_at": T0.isoformat(),
            "attempt": 1, "released": 0, "max_attempts": 1, "lease_ttl": None, "timeout": None, "dedup_key": None,
            "locked_by": None, "claimed_at": T0.isoformat(), "lease_until": None, "cancel_requested": False,
            "progress": None, "progress_message": None, "result": None, "last_error": None,
            "created_at": T0.isoformat(), "finished_at": T0.isoformat(), "meta": None}
