"""Finding many jobs (issue 43) on every store (sqlite, postgresql, pgbouncer,
and both through ``tether server``): meta and tags on jobs, every filter of
``app.jobs()`` and ``app.count_jobs()``, keyset paging while jobs are
inserted and finished during the walk, and bad input refused."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from tether import JobContext, JobState, Tether
from tether.errors import ConfigError, PayloadError
from tether.search import MAX_TAGS, JobFilter, contains

from .conftest import STORE_BACKENDS, TEST_TOKEN, backend_param, served
from .test_worker import FAST


@pytest.fixture(name="backend", params=STORE_BACKENDS)
def backend_fixture(request: pytest.FixtureRequest) -> str:
    return backend_param(request)


@pytest.fixture(name="app")
def app_fixture(backend: str, db_url: str) -> Iterator[Tether]:
    """An app on this backend (short timers: test_worker.FAST); for ``http-*``, a client of a tether server over it."""
    if backend.startswith("http-"):
        with served(db_url) as url:
            a = Tether(url, token=TEST_TOKEN, **FAST)
            yield a
            a.close()
        return
    a = Tether(db_url, **FAST)
    a.migrate()
    yield a
    a.close()


def register(app: Tether) -> tuple[object, object]:
    @app.task(name="sync", tags=["billing"])
    def sync(ctx: JobContext, invoice: int, region: str = "eu") -> list[str]:
        return ctx.tags

    @app.task(name="mail")
    def mail(ctx: JobContext, to: str) -> dict[str, object] | None:
        return ctx.meta

    return sync, mail


def ids(page_or_jobs: object) -> list[int]:
    jobs = getattr(page_or_jobs, "jobs", page_or_jobs)
    return [j.id for j in jobs]  # type: ignore[attr-defined]


def test_meta_and_tags_are_stored_merged_and_reach_the_handler(app: Tether) -> None:
    sync, mail = register(app)
    a = sync.using(meta={"customer": 42, "source": "api"}, tags=["eu", "billing"]).enqueue(invoice=7)  # type: ignore[attr-defined]
    b = sync.enqueue(invoice=8)  # type: ignore[attr-defined]
    c = mail.using(meta={"customer": 42}).enqueue(to="x@example.com")  # type: ignore[attr-defined]
    d = mail.enqueue(to="y@example.com")  # type: ignore[attr-defined]
    job = app.get_job(a)
    assert job is not None and job.meta == {"customer": 42, "source": "api"}
    assert job.tags == ["billing", "eu"]  # the task's first, no repeats
    assert app.get_job(b).tags == ["billing"]  # type: ignore[union-attr]
    assert app.get_job(d).tags is None and app.get_job(d).meta is None  # type: ignore[union-attr]
    drained = {x.job_id: x.result for x in app.drain()}
    assert drained == {a: ["billing", "eu"], b: ["billing"], c: {"customer": 42}, d: None}


def test_every_filter_alone_and_combined(app: Tether) -> None:
    sync, mail = register(app)
    t0 = app.store.db_now()
    a = sync.using(meta={"customer": 42, "plan": {"tier": "gold", "seats": 5}}, tags=["eu"]).enqueue(invoice=7)  # type: ignore[attr-defined]
    b = sync.using(meta={"customer": 43}, tags=["us"], queue="billing").enqueue(invoice=7, region="us")  # type: ignore[attr-defined]
    c = mail.using(meta={"customer": 42}, tags=["eu", "vip"]).enqueue(to="x@example.com")  # type: ignore[attr-defined]
    d = mail.enqueue(to="y@example.com")  # type: ignore[attr-defined]
    app.cancel(d)
    everything = {a, b, c, d}

    def found(**filters: object) -> set[int]:
        got = set(ids(app.jobs(**filters)))
        assert app.count_jobs(**filters) == len(got), filters
        return got

    assert found() == everything
    assert found(state="queued") == {a, b, c}
    assert found(state=["cancelled", "succeeded"]) == {d}
    assert found(state=JobState.CANCELLED) == {d}
    assert found(queue="billing") == {b}
    assert found(task="mail") == {c, d}
    assert found(tags=["eu"]) == {a, c}
    assert found(tags=["eu", "vip"]) == {c}  # holds all
    assert found(tags=["billing"]) == {a, b}  # the task's tags count
    assert found(tags=["nope"]) == set()
    assert found(meta={"customer": 42}) == {a, c}
    assert found(meta={"plan": {"tier": "gold"}}) == {a}  # nested containment
    assert found(meta={"customer": 42, "plan": {"seats": 6}}) == set()
    assert found(meta={"customer": "42"}) == set()  # a string is not a number
    assert found(args={"invoice": 7}) == {a, b}
    assert found(args={"invoice": 7, "region": "us"}) == {b}
    assert found(created_after=t0 - timedelta(minutes=5)) == everything
    assert found(created_before=t0 - timedelta(minutes=5)) == set()
    assert found(finished_after=t0 - timedelta(minutes=5)) == {d}
    assert found(finished_before=t0 + timedelta(minutes=5)) == {d}
    assert found(finished_after=t0 + timedelta(minutes=5)) == set()
    assert found(ids=[a, c, 10**9]) == {a, c}
    # AND
    assert found(task="sync", tags=["eu"], meta={"customer": 42}, args={"invoice": 7}, state="queued") == {a}
    assert found(task="mail", meta={"customer": 43}) == set()


def test_a_page_walk_skips_and_repeats_nothing_while_jobs_are_inserted_and_finished(app: Tether) -> None:
    sync, _ = register(app)
    first = [sync.using(tags=["walk"]).enqueue(invoice=i) for i in range(25)]  # type: ignore[attr-defined]
    seen: list[int] = []
    page = app.jobs(tags=["walk"], limit=4)
    n = 0
    while True:
        seen += ids(page)
        # meanwhile: new jobs arrive (newer than the walk: not in it), and some finish
        sync.using(tags=["walk"]).enqueue(invoice=1000 + n)  # type: ignore[attr-defined]
        app.cancel(first[n])
        n += 1
        if page.next is None:
            break
        page = app.jobs(tags=["walk"], limit=4, after=page.next)
    assert seen == sorted(first, reverse=True)  # each once, newest first, none skipped
    assert n == 7  # 25 jobs, 4 a page
    # a state filter's walk: jobs leaving the state are not shown again, the others are not skipped
    queued_then = set(ids(app.jobs(state="queued", tags=["walk"], limit=1000)))
    walked: list[int] = []
    page = app.jobs(state="queued", tags=["walk"], limit=3)
    while True:
        walked += ids(page)
        if page.jobs:
            app.cancel(page.jobs[-1].id)  # leaves the filter after it was shown
        if page.next is None:
            break
        page = app.jobs(state="queued", tags=["walk"], limit=3, after=page.next)
    assert len(walked) == len(set(walked)) and set(walked) == queued_then


def test_the_last_page_has_no_next_and_limit_is_bounded(app: Tether) -> None:
    sync, _ = register(app)
    made = [sync.enqueue(invoice=i) for i in range(3)]  # type: ignore[attr-defined]
    page = app.jobs(limit=3)
    assert ids(page) == made[::-1] and page.next is None
    page = app.jobs(limit=2)
    assert page.next is not None and ids(app.jobs(limit=2, after=page.next)) == [made[0]]
    for bad in (0, 1001, True, "5"):
        with pytest.raises(ConfigError, match="limit"):
            app.jobs(limit=bad)  # type: ignore[arg-type]


def test_bad_input_is_refused_with_a_clear_error(app: Tether) -> None:
    sync, _ = register(app)
    sync.enqueue(invoice=1)  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="unknown filter"):
        app.jobs(customer=42)
    with pytest.raises(ConfigError, match="unknown state"):
        app.count_jobs(state="finished")
    with pytest.raises(ConfigError, match="meta must be a JSON object"):
        app.jobs(meta="customer:42")
    with pytest.raises(ConfigError, match="tags must be a list"):
        app.jobs(tags="eu")
    with pytest.raises(ConfigError, match="timezone-aware"):
        app.jobs(created_after=app.store.db_now().replace(tzinfo=None))
    page = app.jobs(limit=1, task="sync")
    sync.enqueue(invoice=2)  # type: ignore[attr-defined]
    page = app.jobs(limit=1, task="sync")
    assert page.next is not None
    with pytest.raises(ConfigError, match="other filters"):
        app.jobs(limit=1, task="mail", after=page.next)
    with pytest.raises(ConfigError, match="not a cursor"):
        app.jobs(after="bm9wZQ")


def test_bad_meta_and_tags_are_refused_and_nothing_is_enqueued(app: Tether) -> None:
    sync, _ = register(app)
    bad_tags: list[object] = ["eu", ["x" * 65], [""], [" eu"], [1], ["a\nb"], [f"t{i}" for i in range(MAX_TAGS + 1)]]
    for tags in bad_tags:
        with pytest.raises(ConfigError, match="tag"):
            sync.using(tags=tags).enqueue(invoice=1)  # type: ignore[attr-defined]
    for meta in (["customer"], "customer:42", {"k": "x" * 9000}, {1: "a"}):
        with pytest.raises((PayloadError, ConfigError), match="meta"):
            sync.using(meta=meta).enqueue(invoice=1)  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="tags"):
        app.task(name="bad", tags="billing")(lambda ctx: None)  # type: ignore[arg-type]
    assert app.count_jobs() == 0


def test_contains_is_postgresql_containment() -> None:
    # the SQLite store's containment (tether_contains) against the rules of jsonb @>
    assert contains({"a": 1, "b": {"c": [1, 2]}}, {"b": {"c": [2]}})
    assert contains(["a", "b"], ["b"]) and contains(["a", "b"], "a")
    assert not contains([["a"]], ["a"]) and contains([["a"]], [["a"]])
    assert not contains({"a": 1}, {"a": True}) and not contains({"a": 0}, {"a": False})
    assert contains({"a": 1.0}, {"a": 1}) and not contains({"a": None}, {"a": 0})
    assert not contains({"a": [1]}, {"a": 1}) and contains({}, {})
    assert JobFilter.of({}).is_empty() and not JobFilter.of({"tags": ["x"]}).is_empty()


def test_a_unit_tests_context_gives_meta_and_tags() -> None:
    from tether.testing import context

    ctx = context(meta={"customer": 42}, tags=["eu"])
    assert (ctx.meta, ctx.tags) == ({"customer": 42}, ["eu"])
    assert context().tags == []


def test_the_server_pages_by_cursor_and_refuses_one_another_filter_made(backend: str, db_url: str) -> None:
    """A raw HTTP client pages with the server's own cursors; the server, not
    only tether's client, refuses a cursor of another filter (400), and tether's
    client, which pages by job id (before), still works beside it."""
    if not backend.startswith("http-"):
        pytest.skip("a test of tether server's HTTP API")
    from .test_server import Client

    with served(db_url) as url:
        app = Tether(url, token=TEST_TOKEN)
        sync, mail = register(app)
        made = [sync.enqueue(invoice=i) for i in range(3)]  # type: ignore[attr-defined]
        mail.enqueue(to="x")  # type: ignore[attr-defined]
        client = Client(url)

        def search(body: dict[str, object]) -> tuple[int, dict[str, object]]:
            return client.request("POST", "/v1/jobs/search", body, token=TEST_TOKEN)

        status, first = search({"filter": {"task": "sync"}, "limit": 2})
        assert status == 200 and ids_of(first) == made[:0:-1] and isinstance(first["next"], str), first
        status, last = search({"filter": {"task": "sync"}, "limit": 2, "after": first["next"]})
        assert status == 200 and ids_of(last) == [made[0]] and last["next"] is None, last
        for body, why in (({"filter": {"task": "mail"}, "limit": 2, "after": first["next"]}, "other filters"),
                          ({"filter": {"task": "sync", "state": ["queued"]}, "limit": 2, "after": first["next"]},
                           "other filters"),
                          ({"filter": {"task": "sync"}, "limit": 2, "after": "bm9wZQ"}, "not a cursor"),
                          ({"filter": {"task": "sync"}, "limit": 2, "after": first["next"], "before": made[2]},
                           "either before")):
            status, answer = search(body)
            assert status == 400 and answer["error"] == "bad_request" and why in str(answer["message"]), answer
        status, old = search({"filter": {"task": "sync"}, "limit": 2, "before": made[2]})  # tether's client's form
        assert status == 200 and ids_of(old) == made[1::-1] and "next" not in old, old
        page = app.jobs(task="sync", limit=2)
        assert ids(page) == made[:0:-1] and ids(app.jobs(task="sync", limit=2, after=page.next)) == [made[0]]
        app.close()


def ids_of(answer: dict[str, object]) -> list[int]:
    return [j["id"] for j in answer["jobs"]]  # type: ignore[attr-defined, index]
