"""The dashboard's jobs page for many jobs (issue 43), over both backends
through Starlette's test client: the filter bar (meta and args expressions,
a malformed one refused with a clear error), keyset paging older and newer,
bulk actions on ticked rows or on everything a filter matches (a
confirmation first, behind login and CSRF), the attempts chart and rerun.
Meta, tags and args carry ``<script>``: they must show escaped."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import pytest
from starlette.testclient import TestClient

from tether import JobContext, JobState, Tether
from tether.dashboard.filters import BadFilter, parse_expression, parse_filter_bar

from .dashboard_seed import XSS, Seeded, seed
from .test_dashboard import ORIGIN, _client, csrf_of, login

ESCAPED = "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"


def test_expressions_parse_to_containment_objects_and_malformed_ones_say_why() -> None:
    assert parse_expression("customer:42", "meta") == {"customer": 42}
    assert parse_expression(' source:api  code:"42" vip:true name:"Ada Lovelace" ids:[1, 2]', "meta") == {
        "source": "api", "code": "42", "vip": True, "name": "Ada Lovelace", "ids": [1, 2]}
    assert parse_expression("plan.tier:gold plan.seats:3 x:42abc n:NaN", "meta") == {
        "plan": {"tier": "gold", "seats": 3}, "x": "42abc", "n": "NaN"}
    assert parse_expression("url:http://a.example/x:1", "args") == {"url": "http://a.example/x:1"}
    assert parse_expression("customer=42 a.b=x=y", "meta") == {"customer": 42, "a": {"b": "x=y"}}  # as the CLI's
    assert parse_expression("   ", "meta") is None
    for bad, why in [("customer", "is not key:value"), ("customer:", "has no value"), (":42", "empty key"),
                     ("a..b:1", "empty key"), ('name:"Ada', "not JSON"), ("ids:[1,2", "not JSON"),
                     ("a:1 a:2", "given twice"), ("a:1 a.b:2", "already has a value"), ("a 42", "not key:value")]:
        with pytest.raises(BadFilter, match=why):
            parse_expression(bad, "meta")
    bar = parse_filter_bar({"state": "dead", "queue": "q", "tag": "eu, billing", "meta": "customer:42",
                            "args": "invoice:7"})
    assert bar.error is None and bar.filters == {"state": "dead", "queue": "q", "tags": ["eu", "billing"],
                                                 "meta": {"customer": 42}, "args": {"invoice": 7}}
    assert "is not a state" in (parse_filter_bar({"state": "zombie"}).error or "")
    assert "tag" in (parse_filter_bar({"tag": "x" * 65}).error or "")


@pytest.fixture
def app(make_app: Callable[..., Tether]) -> Tether:
    return make_app()


@pytest.fixture
def client(app: Tether) -> Iterator[TestClient]:
    with _client(app) as c:
        login(c)
        yield c


def _labelled(app: Tether) -> tuple[list[int], int]:
    @app.task(name="billing.sync", queue="billing", tags=["billing"])
    def sync(ctx: JobContext, **kwargs: object) -> None: ...

    ids = [sync.using(meta={"customer": c, "note": XSS}, tags=["eu", XSS]).enqueue(invoice=i, title=XSS)
           for i, c in enumerate([42, 42, 7])]
    other = sync.using(meta={"customer": "42"}).enqueue(invoice=9)
    return ids, other


def _rows(html: str) -> list[int]:
    return [int(i) for i in re.findall(r'<td><a href="/jobs/(\d+)">', html)]


def test_the_filter_bar_finds_by_meta_tags_and_args_and_escapes_them(app: Tether, client: TestClient) -> None:
    ids, other = _labelled(app)
    page = client.get("/jobs", params={"meta": "customer:42"})
    assert page.status_code == 200 and _rows(page.text) == [ids[1], ids[0]]  # 42, not "42"
    assert '<b id="match-count">2</b>' in page.text
    assert _rows(client.get("/jobs", params={"meta": 'customer:"42"'}).text) == [other]
    s = seed(app)  # jobs in every state: the counts read from the stats (state and queue only) are count_jobs'
    for params in ({}, {"state": "cancelled"}, {"queue": "mail"}, {"state": "succeeded", "queue": "mail"},
                   {"state": "dead", "queue": "nowhere"}):
        expected = app.count_jobs(**params)
        assert f'<b id="match-count">{expected}</b>' in client.get("/jobs", params=params).text, params
    assert s.dead in _rows(client.get("/jobs", params={"state": "dead"}).text)
    assert _rows(client.get("/jobs", params={"tag": f"eu,{XSS}", "args": "invoice:2"}).text) == [ids[2]]
    assert _rows(client.get("/jobs", params={"task": "billing.sync", "queue": "billing", "state": "queued",
                                             "tag": "billing"}).text) == [other, *reversed(ids)]
    shown = client.get("/jobs", params={"tag": XSS, "meta": f'note:"{XSS}"'}).text
    assert _rows(shown) == list(reversed(ids))
    assert "<script>alert" not in shown and ESCAPED in shown  # the tags in the rows and the bar's own fields
    job = client.get(f"/jobs/{ids[0]}").text
    assert "<script>alert" not in job and job.count(ESCAPED) >= 3  # meta, tags, args
    # a malformed expression: a clear error, the text typed shown back escaped, no rows
    bad = client.get("/jobs", params={"meta": f"customer {XSS}"})
    assert bad.status_code == 400 and "Filter not applied: meta:" in bad.text and "is not key:value" in bad.text
    assert "<script>alert" not in bad.text and _rows(bad.text) == []
    assert "not JSON" in client.get("/jobs", params={"args": 'name:"Ada'}).text


def test_older_and_newer_walk_every_job_once(app: Tether, client: TestClient) -> None:
    @app.task(name="walk.step", queue="walk")
    def step(ctx: JobContext, **kwargs: object) -> None: ...

    made = [step.enqueue(n=i) for i in range(230)]
    step.using(queue="other").enqueue(n=-1)
    url, pages = "/jobs?queue=walk", []
    while True:
        html = client.get(url).text
        pages.append(_rows(html))
        assert f'<b id="match-count">{230 + len(pages) - 1}</b>' in html
        m = re.search(r'<a href="([^"]+)" id="older"', html)
        if m is None:
            break
        url = m.group(1).replace("&amp;", "&")
        step.enqueue(n=999)  # newer jobs arrive during the walk: it neither repeats nor skips
    assert [len(p) for p in pages] == [100, 100, 30]
    assert [i for p in pages for i in p] == sorted(made, reverse=True)
    # newer goes back the way it came, then "newest" is the top of the list
    newer = re.search(r'<a href="([^"]+)" id="newer"', html)
    assert newer is not None and _rows(client.get(newer.group(1).replace("&amp;", "&")).text) == pages[1]
    first = client.get(url.split("&before=")[0]).text
    assert 'id="newer"' not in first and 'id="older"' in first
    # a mangled cursor is no page: the newest one
    assert _rows(client.get("/jobs", params={"queue": "walk", "before": "x²", "trail": "0,1"}).text)[:1] == \
        _rows(first)[:1]


def _post(client: TestClient, url: str, **fields: str) -> tuple[int, str, str]:
    token = csrf_of(client.get("/jobs").text)
    r = client.post(url, data={"csrf": token, **fields}, headers=ORIGIN)
    return r.status_code, r.text, r.headers.get("location", "")


def test_bulk_actions_confirm_with_the_count_then_act(app: Tether, client: TestClient) -> None:
    ids, other = _labelled(app)
    # everything the filter matches: a confirmation that changes nothing, with the count
    status, html, _ = _post(client, "/jobs/bulk", do="cancel:matching", meta="customer:42")
    assert status == 200 and '<b id="confirm-count">2</b>' in html and "<script>alert" not in html
    assert all(app.get_job(i).state is JobState.QUEUED for i in ids)  # type: ignore[union-attr]
    status, _, location = _post(client, "/jobs/bulk/run", do="cancel:matching", meta="customer:42")
    assert status == 303 and "meta=customer%3A42" in location
    assert "2 job(s) cancelled" in client.get(location).text
    assert [app.get_job(i).state for i in (*ids, other)] == [  # type: ignore[union-attr]
        JobState.CANCELLED, JobState.CANCELLED, JobState.QUEUED, JobState.QUEUED]
    # ticked rows: retry two, one of them not retryable (left as it is)
    status, html, _ = _post(client, "/jobs/bulk", do="retry:selected", ids=f"{ids[0]},{other}")
    assert status == 200 and '<b id="confirm-count">1</b>' in html
    token = csrf_of(client.get("/jobs").text)
    r = client.post("/jobs/bulk/run", content=f"csrf={token}&do=retry%3Aselected&ids={ids[0]}&ids={other}",
                    headers={**ORIGIN, "Content-Type": "application/x-www-form-urlencoded"})
    assert "1 job(s) queued again" in client.get(r.headers["location"]).text
    assert app.get_job(ids[0]).state is JobState.QUEUED  # type: ignore[union-attr]
    # delete: refused while live jobs match, nothing deleted; then the finished ones
    status, html, _ = _post(client, "/jobs/bulk", do="delete:matching", queue="billing")
    assert status == 400 and "not finished" in html and 'id="confirm"' not in html
    status, _, location = _post(client, "/jobs/bulk/run", do="delete:matching", queue="billing")
    assert "nothing was deleted" in client.get(location).text.replace("\n", " ")
    assert app.count_jobs(queue="billing") == 4
    _post(client, "/jobs/bulk/run", do="delete:matching", queue="billing", state="cancelled")
    assert app.get_job(ids[1]) is None and app.count_jobs(queue="billing") == 3
    # refused outright: an empty filter, no ticked rows, a malformed filter, an unknown action
    for fields, why in [({"do": "cancel:matching"}, "the filter is empty"), ({"do": "cancel:selected"}, "no rows"),
                        ({"do": "cancel:matching", "meta": "oops"}, "is not key:value"),
                        ({"do": "explode:matching", "queue": "billing"}, "unknown bulk action")]:
        status, html, _ = _post(client, "/jobs/bulk", **fields)
        assert status == 400 and why in html, fields
        _, _, location = _post(client, "/jobs/bulk/run", **fields)
        assert why in client.get(location).text
    assert app.count_jobs(queue="billing", state="queued") == 3


def test_bulk_actions_need_the_login_and_the_csrf_token(app: Tether, client: TestClient) -> None:
    _labelled(app)
    token = csrf_of(client.get("/jobs").text)
    fields = {"do": "cancel:matching", "queue": "billing"}
    for url in ("/jobs/bulk", "/jobs/bulk/run"):
        assert client.post(url, data=fields, headers=ORIGIN).status_code == 403
        assert client.post(url, data={**fields, "csrf": "0" * 64}, headers=ORIGIN).status_code == 403
        assert client.post(url, data={**fields, "csrf": token},
                           headers={"Origin": "http://evil.example"}).status_code == 403
        with _client(app) as stranger:
            assert stranger.post(url, data={**fields, "csrf": token}, headers=ORIGIN).status_code == 401
    assert app.count_jobs(queue="billing", state="queued") == 4


def test_the_job_page_charts_its_attempts_and_reruns_a_finished_job(app: Tether, client: TestClient) -> None:
    s: Seeded = seed(app)
    html = client.get(f"/jobs/{s.dead}").text
    lanes = re.findall(r'<g class="at-lane o-(\w+)" data-attempt="(\d)" data-outcome="(\w+)">', html)
    assert [(n, o) for _, n, o in lanes] == [("1", "failed"), ("2", "lease_expired"), ("3", "failed")]
    assert "on worker-b@gone" in html and "<script>alert" not in html and ESCAPED in html  # errors, in the titles
    bars = [float(w) for w in re.findall(r'<rect class="at-bar" x="[\d.]+" y="\d+" width="([\d.]+)"', html)]
    assert len(bars) == 3 and all(2 <= w <= 510 for w in bars)
    running = client.get(f"/jobs/{s.running}").text
    assert 'data-outcome="running"' in running and 'id="rerun"' not in running
    # the dead jobs on screen again: one set-based retry_many, what it left said
    _, _, location = _post(client, "/jobs/retry-dead", ids=f"{s.dead},{s.retryable},{s.succeeded}")
    assert "2 dead job(s) queued again; 1 left as they are" in client.get(location).text
    assert app.get_job(s.retryable).state is JobState.QUEUED  # type: ignore[union-attr]
    status, _, location = _post(client, f"/jobs/{s.succeeded}/rerun")
    new_id = int(location.split("?")[0].rsplit("/", 1)[1])
    assert status == 303 and new_id != s.succeeded and app.get_job(new_id).rerun_of == s.succeeded  # type: ignore[union-attr]
    assert f'href="/jobs/{s.succeeded}"' in client.get(location).text
    _, _, location = _post(client, f"/jobs/{s.queued}/rerun")
    assert "only a finished job can be rerun" in client.get(location).text
