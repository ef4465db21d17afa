"""Worker identity over ``tether server``: a worker token acts only for the
workers it registered (issue 17, point 5).

Worker ids are not secret (``locked_by``, attempts and the worker list show
them), so before the binding any worker token could heartbeat, complete, fail
or release the jobs another worker held by naming its id and attempt. Each
test runs a real server over a real database, on both backends.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from tether.errors import NotYourWorker
from tether.model import JobState, NewJob, WorkerInfo
from tether.store import Store, open_store
from tether.store.http import wire

from .conftest import HTTP_BACKENDS, backend_param, served
from .test_server import Client

A, B, PRODUCER, ADMIN = (secrets.token_urlsafe(20) for _ in range(4))
TOKENS = f"{A} worker\n{B} worker\n{PRODUCER} producer\n{ADMIN} admin"


@pytest.fixture(params=HTTP_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return backend_param(request)


@pytest.fixture
def server_url(db_url: str) -> Iterator[str]:
    with served(db_url, client_clock=False, tokens=TOKENS) as url:
        yield url


@pytest.fixture
def client(server_url: str) -> Client:
    return Client(server_url)


def register(client: Client, worker: str, token: str, host: str = "h") -> tuple[int, dict[str, Any]]:
    body = {"id": worker, "host": host, "pid": 1, "proc_start": None, "queues": ["default"], "concurrency": 1}
    return client.request("POST", "/v1/workers", body, token=token)


def enqueue(client: Client, n: int = 1) -> list[int]:
    status, body = client.request("POST", "/v1/jobs", {"jobs": [{"task": "t", "args": {}}] * n}, token=PRODUCER)
    assert status == 200, body
    return list(body["ids"])


def claim(client: Client, worker: str, token: str) -> dict[str, Any]:
    status, body = client.request("POST", "/v1/claim", {"worker": worker, "queues": ["default"], "limit": 1,
                                                        "lease_ttl": 30}, token=token)
    assert status == 200 and len(body["jobs"]) == 1, body
    job: dict[str, Any] = body["jobs"][0]
    return job


def requests_for(worker: str, job_id: int, attempt: int, other_id: int) -> dict[str, dict[str, Any]]:
    """A well-formed request body, acting for ``worker``, for each worker operation."""
    done = [{"id": job_id, "attempt": attempt, "result": "forged"}]
    return {
        "claim": {"worker": worker, "queues": ["default"], "limit": 1, "lease_ttl": 30},
        "claim_ids": {"worker": worker, "ids": [other_id], "queues": ["default"], "lease_ttl": 30},
        "heartbeat": {"worker": worker, "held": [{"id": job_id, "attempt": attempt}], "lease_ttl": 999},
        "progress": {"worker": worker, "job_id": job_id, "attempt": attempt, "fraction": 0.5, "message": "forged",
                     "lease_ttl": 999},
        "complete": {"worker": worker, "done": done},
        "complete_and_claim": {"worker": worker, "done": done, "queues": ["default"], "limit": 1,
                               "lease_ttl": 30},
        "fail": {"worker": worker, "job_id": job_id, "attempt": attempt, "outcome": "failed", "error": "forged",
                 "retry": False},
        "release": {"worker": worker, "job_id": job_id, "attempt": attempt},
        "expire_leases": {"workers": [worker]},
        "stop_worker": {"worker": worker},
        "register_worker": {"id": worker, "host": "elsewhere", "pid": 2, "proc_start": None,
                            "queues": ["default"], "concurrency": 1},
    }


def test_every_operation_naming_a_worker_is_bound() -> None:
    # A new worker operation must say which field names its worker, or this
    # fails: the server checks exactly the operations that declare it.
    naming = {op.name for op in wire.OPS if op.body is not None
              and ({"worker", "workers"} & set(op.body["properties"]) or op.name == "register_worker")}
    assert {op.name for op in wire.OPS if op.acts_for is not None} == naming
    assert naming == set(requests_for("w", 1, 1, 2))


def test_another_worker_token_cannot_act_for_a_worker(client: Client, server_url: str, db_url: str) -> None:
    job_id, other_id = enqueue(client, 2)
    assert register(client, "wa", A) == (200, {})
    assert register(client, "wb", B) == (200, {})
    job = claim(client, "wa", A)
    assert job["id"] == job_id
    local = open_store(db_url)
    before = local.get_job(job_id)
    assert before is not None and before.locked_by == "wa"

    for op in wire.OPS:
        if op.acts_for is None:
            continue
        body = requests_for("wa", job_id, job["attempt"], other_id)[op.name]
        status, answer = client.request(op.method, op.path, body, token=B)
        assert (status, answer["error"]) == (403, "not_your_worker"), (op.name, answer)
        assert answer["workers"] == ["wa"]
        assert "worker 'wa' is registered by another token" in answer["message"]

    # Nothing moved: the job is still wa's attempt with its lease and no
    # progress; the other job is still queued; wa's row is as A registered it.
    after = local.get_job(job_id)
    assert after is not None
    assert (after.state, after.attempt, after.locked_by, after.lease_until, after.progress) == (
        JobState.RUNNING, before.attempt, "wa", before.lease_until, None)
    other = local.get_job(other_id)
    assert other is not None and other.state is JobState.QUEUED
    (wa,) = [w for w in local.list_workers() if w.id == "wa"]
    assert (wa.host, wa.pid, wa.stopped_at) == ("h", 1, None)
    assert local.worker_owners(["wa", "wb"])["wa"] != local.worker_owners(["wa", "wb"])["wb"]

    # B still acts for its own worker, A for its own; admin for anyone.
    status, body = client.request("POST", "/v1/heartbeat", {"worker": "wb", "held": [], "lease_ttl": 30}, token=B)
    assert (status, body) == (200, {"beats": []})
    beat = {"worker": "wa", "held": [{"id": job_id, "attempt": job["attempt"]}], "lease_ttl": 30}
    assert client.request("POST", "/v1/heartbeat", beat, token=ADMIN) == (200, {"beats": [
        {"id": job_id, "beat": "renewed"}]})
    done = {"worker": "wa", "done": [{"id": job_id, "attempt": job["attempt"], "result": "ok"}]}
    assert client.request("POST", "/v1/complete", done, token=A) == (200, {"accepted": [job_id]})
    finished = local.get_job(job_id)
    assert finished is not None and (finished.state, finished.result) == (JobState.SUCCEEDED, "ok")
    local.close()


def test_an_unregistered_id_or_one_registered_without_a_token_is_refused(client: Client, db_url: str) -> None:
    (job_id,) = enqueue(client)
    claim_body = {"worker": "nobody", "queues": ["default"], "limit": 1, "lease_ttl": 30}
    status, body = client.request("POST", "/v1/claim", claim_body, token=A)
    assert (status, body["error"]) == (403, "not_your_worker")
    assert "worker 'nobody' is not registered" in body["message"] and "POST /v1/workers" in body["message"]
    # Registered by an admin token, or by a worker straight on the database:
    # no worker token may act for it; admin still may.
    assert register(client, "by-admin", ADMIN) == (200, {})
    local = open_store(db_url)
    local.register_worker(WorkerInfo(id="local", host="h", pid=1, proc_start=None, started_at=None,  # type: ignore[arg-type]
                                     last_seen=None, queues=["default"], concurrency=1))  # type: ignore[arg-type]
    for worker in ("by-admin", "local"):
        for token in (A, B):
            assert register(client, worker, token)[0] == 403
            status, body = client.request("POST", "/v1/claim", {**claim_body, "worker": worker}, token=token)
            assert (status, body["error"]) == (403, "not_your_worker")
    assert local.worker_owners(["by-admin", "local", "nobody"]) == {"by-admin": None, "local": None}
    status, body = client.request("POST", "/v1/claim", {**claim_body, "worker": "by-admin"}, token=ADMIN)
    assert status == 200 and [j["id"] for j in body["jobs"]] == [job_id]
    local.close()


def test_the_binding_holds_across_server_processes_and_restarts(db_url: str, client: Client) -> None:
    # The binding is in the database: a second server (behind the same load
    # balancer), with nothing cached, and a restarted one both know it.
    assert register(client, "wa", A) == (200, {})
    beat = {"worker": "wa", "held": [], "lease_ttl": 30}
    for _ in range(2):
        with served(db_url, client_clock=False, tokens=TOKENS) as other_url:
            other = Client(other_url)
            assert other.request("POST", "/v1/heartbeat", beat, token=B)[0] == 403
            assert register(other, "wa", B)[0] == 403
            assert other.request("POST", "/v1/heartbeat", beat, token=A)[0] == 200
            assert register(other, "wa", A) == (200, {})  # a re-registration by its owner is fine


def test_http_store_raises_not_your_worker_and_reconciles_only_its_own(
    client: Client, server_url: str, db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    job_a, job_b = enqueue(client, 2)
    register(client, "wa", A, host="box")
    register(client, "wb", B, host="box")
    a_job = claim(client, "wa", A)
    b_job = claim(client, "wb", B)
    assert (a_job["id"], b_job["id"]) == (job_a, job_b)
    b = open_store(server_url, token=B)
    with pytest.raises(NotYourWorker, match="worker 'wa' is registered by another token") as info:
        b.heartbeat("wa", [(job_a, a_job["attempt"])], 30.0)
    assert info.value.workers == ["wa"]
    with pytest.raises(NotYourWorker):
        b.complete("wa", [(job_a, a_job["attempt"], None)])
    # Start-up reconciliation on host "box" names every dead predecessor there,
    # whichever token registered it: B ends its own worker's leases, leaves
    # A's to the reaper, and does not fail.
    with caplog.at_level(logging.WARNING, logger="tether.store.http"):
        assert b.lapse_leases(["wa", "wb"]) == 1
        b.stop_worker("wa")
        b.stop_worker("wb")
    assert "not ending the leases of wa" in caplog.text and "not marking worker wa stopped" in caplog.text
    local = open_store(db_url)
    ja, jb = local.get_job(job_a), local.get_job(job_b)
    assert ja is not None and jb is not None
    assert ja.lease_until is not None and jb.lease_until is not None
    assert ja.lease_until > local.db_now() > jb.lease_until  # only B's own lease was ended
    assert {w.id for w in local.list_workers(live_only=True)} == {"wa"}
    b.close()
    local.close()


def test_database_stores_bind_an_owner_once(db_url: str) -> None:
    # The store half of the binding, on the database behind the server.
    local: Store = open_store(db_url)
    local.migrate()
    info = WorkerInfo(id="w", host="h", pid=1, proc_start=None, started_at=None,  # type: ignore[arg-type]
                      last_seen=None, queues=["default"], concurrency=1)  # type: ignore[arg-type]
    local.register_worker(info, owner="sha256:aaa")
    local.stop_worker("w")
    local.register_worker(info, owner="sha256:bbb")  # another owner: nothing changes
    assert local.worker_owners(["w", "x"]) == {"w": "sha256:aaa"}
    assert [w.stopped_at is not None for w in local.list_workers() if w.id == "w"] == [True]
    local.register_worker(info, owner="sha256:aaa")  # its owner: refreshed
    assert [w.stopped_at for w in local.list_workers() if w.id == "w"] == [None]
    local.stop_worker("w")
    local.register_worker(info)  # a trusted caller (no owner): refreshed, owner kept
    assert [w.stopped_at for w in local.list_workers() if w.id == "w"] == [None]
    assert local.worker_owners(["w"]) == {"w": "sha256:aaa"}
    assert local.worker_owners([]) == {}
    local.enqueue([NewJob(task="t", args_json="{}")])  # the store still works as ever
    local.close()
