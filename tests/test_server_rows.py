"""A claim's jobs on the wire: as rows when the client asks (``wire.ROWS_HEADER``),
as records otherwise.

A remote worker's rounds pass every claimed job through the server's JSON
encoder and its own parser; written as records, each job repeats its thirteen
keys. Workers now ask for rows (``fields`` once, then a list per job), and a
server answers records to a client that does not ask, as an older worker
does; a worker reads records from an older server all the same.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from tether.model import ClaimedJob
from tether.store import open_store
from tether.store.http import wire

from .conftest import served
from .test_server import PRODUCER, TOKENS, WORKER, Client, register

ROWS = {wire.ROWS_HEADER: "rows"}
CLAIM = {"worker": "w1", "queues": ["default"], "limit": 2, "lease_ttl": 30}


def _enqueue(client: Client, n: int) -> None:
    jobs = [{"task": "t", "args": {"k": k, "text": "é\u2028"}, "meta": {"m": k}, "max_attempts": 4}
            for k in range(n)]
    status, body = client.request("POST", "/v1/jobs", {"jobs": jobs}, token=PRODUCER)
    assert status == 200 and len(body["ids"]) == n


def _same_but_id(a: ClaimedJob, b: ClaimedJob) -> bool:
    return a._replace(id=0, args={}, meta=None) == b._replace(id=0, args={}, meta=None)


def test_a_claim_answers_rows_when_asked_and_records_otherwise(db_url: str) -> None:
    with served(db_url, client_clock=False, tokens=TOKENS) as url:
        client = Client(url)
        _enqueue(client, 6)
        assert register(client, "w1")[0] == 200
        status, rows = client.request("POST", "/v1/claim", CLAIM, token=WORKER, headers=ROWS)
        assert status == 200 and "jobs" not in rows
        assert rows["fields"] == list(wire.CLAIMED_FIELDS) and len(rows["rows"]) == 2
        status, records = client.request("POST", "/v1/claim", CLAIM, token=WORKER)  # an older worker's request
        assert status == 200 and set(records) == {"jobs"} and len(records["jobs"]) == 2

        by_rows, by_records = wire.decode_claimed_answer(rows), wire.decode_claimed_answer(records)
        assert by_rows == [wire.decode_claimed(dict(zip(rows["fields"], r, strict=True))) for r in rows["rows"]]
        assert [j.args for j in by_rows + by_records] == [{"k": k, "text": "é\u2028"} for k in range(4)]
        assert [j.meta for j in by_rows + by_records] == [{"m": k} for k in range(4)]
        # the same jobs in either form, but for their ids and claim times
        assert all(_same_but_id(a._replace(claimed_at=b.claimed_at), b) for a, b in zip(by_rows, by_records,
                                                                                          strict=True))
        assert all(j.claimed_at.tzinfo is not None and j.run_at is not None for j in by_rows)

        # a worker's round: its successes, then a claim whose jobs come as asked
        done = [{"id": j.id, "attempt": j.attempt} for j in by_rows]
        status, body = client.request("POST", "/v1/complete-and-claim", {**CLAIM, "done": done}, token=WORKER,
                                      headers=ROWS)
        assert status == 200 and body["accepted"] == sorted(j.id for j in by_rows)
        assert len(wire.decode_claimed_answer(body)) == 2 and "jobs" not in body
        # and ids a transport delivered: none left to claim, an empty answer in the form asked
        status, body = client.request("POST", "/v1/claim-ids", {"worker": "w1", "queues": ["default"], "lease_ttl": 30, "ids": [by_rows[0].id]}, token=WORKER,
                                      headers=ROWS)
        assert status == 200 and body == {"fields": list(wire.CLAIMED_FIELDS), "rows": []}


def test_a_remote_store_claims_through_rows(db_url: str) -> None:
    """The HTTP store asks for rows on every claiming call, sync and async."""
    with served(db_url, client_clock=False, tokens=TOKENS) as url:
        client = Client(url)
        _enqueue(client, 3)
        assert register(client, "w1")[0] == 200
        store = open_store(url, token=WORKER)
        try:
            first = store.claim("w1", ["default"], 2, 30.0)
            accepted, second = store.complete_and_claim("w1", [(j.id, j.attempt, None) for j in first],
                                                        ["default"], 2, 30.0)
        finally:
            store.close()
        assert accepted == {j.id for j in first} and len(second) == 1
        assert [j.args["k"] for j in first + second] == [0, 1, 2]


def _claimed(k: int, at: datetime) -> ClaimedJob:
    return ClaimedJob(id=k, attempt=1, task="t", args={"k": k}, queue="default", priority=k - 1, max_attempts=3,
                      lease_ttl=30.0, timeout=None if k % 2 else 1.5, claimed_at=at, meta=None if k % 2 else {"m": k},
                      run_at=at - timedelta(seconds=k), scheduled_for=None if k % 2 else at)


def test_rows_are_read_by_their_field_names() -> None:
    """A server that writes other fields or another order is still read by
    name; an older server's records read the same."""
    at = datetime(2026, 11, 27, 9, 30, tzinfo=UTC)
    jobs = [_claimed(k, at) for k in range(1, 5)]
    answer = wire.encode_claimed_rows(jobs)
    assert wire.decode_claimed_answer(answer) == jobs
    assert wire.decode_claimed_answer({"jobs": wire.encode_claimed_all(jobs)}) == jobs
    fields: list[Any] = [*reversed(answer["fields"]), "later_field"]
    moved = {"fields": fields, "rows": [[*reversed(r), "ignored"] for r in answer["rows"]]}
    assert wire.decode_claimed_answer(moved) == jobs


def test_times_in_a_repeated_hour_keep_their_offsets() -> None:
    """Each distinct time is written once, the one just written looked at
    first: 01:30 before and after a clock goes back compare equal in their
    zone, yet are an hour apart."""
    zone = ZoneInfo("America/New_York")
    first = datetime(2026, 11, 1, 1, 30, tzinfo=zone)
    again = first.replace(fold=1)
    at = datetime(2026, 11, 27, 9, 30, tzinfo=UTC)
    jobs = [_claimed(k, at)._replace(run_at=t, scheduled_for=t) for k, t in enumerate([first, again, again, first])]
    answer = wire.encode_claimed_rows(jobs)
    assert [r[11] for r in answer["rows"]] == ["2026-11-01T01:30:00-04:00", "2026-11-01T01:30:00-05:00",
                                               "2026-11-01T01:30:00-05:00", "2026-11-01T01:30:00-04:00"]
    # (as instants: an ambiguous time never equals one in another zone, PEP 495)
    decoded = wire.decode_claimed_answer(answer)
    assert [j.run_at.timestamp() for j in decoded if j.run_at] == [t.timestamp() for t in (first, again, again, first)]
    assert [r["run_at"] for r in wire.encode_claimed_all(jobs)] == [r[11] for r in answer["rows"]]


def test_a_result_over_the_servers_cap_ends_the_job_dead_at_once(db_url: str) -> None:
    """A remote worker's result over the server's payload cap is refused the
    same way every time. It was retried as a failed attempt, so the handler
    ran once per attempt left (a new user's walkthrough: three runs, then
    dead); a local worker over its own cap ends the job dead at once."""
    from tether import JobContext, JobState, Tether

    from .test_worker import is_final, running, wait_job

    runs: list[int] = []
    with served(db_url, client_clock=False, tokens=TOKENS, max_payload_bytes=1000) as url:
        app = Tether(url, token=WORKER)

        @app.task(name="big", max_attempts=3)
        def big(ctx: JobContext) -> str:
            runs.append(ctx.attempt)
            return "x" * 5000

        producer = Tether(url, token=PRODUCER)
        producer.task(name="big")(lambda ctx: None)
        job_id = producer.enqueue("big")
        with running(app):
            job = wait_job(producer, job_id, is_final)
        assert job.state is JobState.DEAD, job
        assert runs == [1], runs
        assert job.last_error is not None and "its success could not be written" in job.last_error, job
        app.close()
        producer.close()
