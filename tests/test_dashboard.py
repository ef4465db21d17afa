"""The dashboard over both backends through Starlette's test client: every
page renders, user data is escaped, unauthenticated and cross-site requests
are refused, and the actions change the database."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest
from starlette.testclient import TestClient

from tether import JobState, Tether
from tether.dashboard import create_app
from tether.dashboard.chart import chart
from tether.metrics import Metrics
from tether.model import NewJob, Outcome, Throughput

from .dashboard_seed import XSS, Seeded, seed

TOKEN = "test-token-1234567"
ORIGIN = {"Origin": "http://testserver"}
#: the Host a TestClient sends: the name the dashboards under test answer to,
#: as a deployment names its domain with --allowed-host
HOSTS = ["testserver"]


@pytest.fixture
def seeded(make_app: Callable[..., Tether]) -> tuple[Tether, Seeded]:
    app = make_app()
    return app, seed(app)


def _client(app: Tether, token: str | None = TOKEN) -> TestClient:
    metrics = Metrics(depth_cache=0).attach(app).watch_store(app.store)
    return TestClient(create_app(app, token=token, metrics=metrics, allowed_hosts=HOSTS), follow_redirects=False)


@pytest.fixture
def client(seeded: tuple[Tether, Seeded]) -> Iterator[TestClient]:
    with _client(seeded[0]) as c:
        yield c


def login(c: TestClient, token: str = TOKEN) -> None:
    page = c.get("/login")
    r = c.post("/login", data={"token": token, "csrf": csrf_of(page.text), "next": "/"}, headers=ORIGIN)
    assert r.status_code == 303, r.text


def csrf_of(html: str) -> str:
    m = re.search(r'name="csrf" value="([^"]+)"', html)
    assert m, "no CSRF field on the page"
    return m.group(1)


def test_unauthenticated_requests_are_refused(client: TestClient, seeded: tuple[Tether, Seeded]) -> None:
    app, s = seeded
    for path in ("/", "/jobs", f"/jobs/{s.dead}", "/workers", "/recoveries"):
        r = client.get(path)
        assert r.status_code == 303 and r.headers["location"].startswith("/login?next="), path
        assert XSS not in r.text and "reports" not in r.text
    assert client.post(f"/jobs/{s.queued}/cancel", headers=ORIGIN).status_code == 401
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Bearer wrong-token"}).status_code == 401
    page = client.get("/login")
    r = client.post("/login", data={"token": "wrong-token", "csrf": csrf_of(page.text)}, headers=ORIGIN)
    assert r.status_code == 401 and "not the right one" in r.text
    assert client.get("/").status_code == 303  # still out
    assert app.get_job(s.queued).state is JobState.QUEUED  # type: ignore[union-attr]


def test_bearer_token_reads_metrics(client: TestClient, seeded: tuple[Tether, Seeded]) -> None:
    r = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 200
    assert 'tether_queue_depth{queue="reports",state="dead"} 1.0' in r.text
    assert 'tether_queue_depth{queue="mail",state="cancelled"} 1.0' in r.text


def test_pages_render_and_escape_user_data(client: TestClient, seeded: tuple[Tether, Seeded]) -> None:
    _, s = seeded
    login(client)
    overview = client.get("/")
    assert overview.status_code == 200
    assert "reports" in overview.text and "worker-b@gone" in overview.text  # depth table and the recovery
    assert "default-src 'none'" in overview.headers["content-security-policy"]
    jobs = client.get("/jobs", params={"state": "dead"})
    assert f"/jobs/{s.dead}" in jobs.text and f"/jobs/{s.succeeded}" not in jobs.text
    job = client.get(f"/jobs/{s.dead}")
    assert job.status_code == 200
    for text in (job.text, jobs.text):
        assert "<script>alert" not in text
    escaped = "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"
    assert escaped in job.text  # in the args, the error and the traceback
    assert job.text.count(escaped) >= 3
    # the attempts timeline: three attempts, who ran each and how it ended
    assert [m for m in re.findall(r"attempt (\d)</b>", job.text)] == ["1", "2", "3"]
    assert "lease_expired" in job.text and "worker-b@gone" in job.text and "RuntimeError: still broken" in job.text
    running = client.get(f"/jobs/{s.running}")
    assert "page 16 of 40" in running.text and 'value="0.4"' in running.text
    assert "limit key</dt><dd><code>tenant:&lt;b&gt;7</code>" in running.text  # issue 44, escaped
    assert "worker-a@host" in client.get("/workers").text
    assert "worker lease expired (worker worker-b@gone)" in client.get("/recoveries").text
    assert client.get("/jobs", params={"id": str(s.dead)}).headers["location"] == f"/jobs/{s.dead}"
    assert "no job with id" in client.get("/jobs", params={"id": "99999"}).headers["location"].replace("+", " ")
    assert client.get("/jobs/99999").status_code == 404


def test_cross_site_posts_are_refused(client: TestClient, seeded: tuple[Tether, Seeded]) -> None:
    app, s = seeded
    login(client)
    token = csrf_of(client.get(f"/jobs/{s.queued}").text)
    url = f"/jobs/{s.queued}/cancel"
    refused = [
        client.post(url, headers=ORIGIN),  # no CSRF token
        client.post(url, data={"csrf": "0" * 64}, headers=ORIGIN),  # a wrong one
        client.post(url, data={"csrf": token}, headers={"Origin": "http://evil.example"}),  # foreign origin
        client.post(url, data={"csrf": token}, headers={"Origin": "null"}),
        client.post(url, data={"csrf": token}, headers={"Referer": "http://evil.example/page"}),
        client.post(url, data={"csrf": token}),  # neither Origin nor Referer
    ]
    assert [r.status_code for r in refused] == [403] * len(refused)
    assert app.get_job(s.queued).state is JobState.QUEUED  # type: ignore[union-attr]
    # another session's token is not this one's
    with _client(app) as other:
        login(other)
        assert other.post(url, data={"csrf": token}, headers=ORIGIN).status_code == 403
    ok = client.post(url, data={"csrf": token}, headers=ORIGIN)
    assert ok.status_code == 303
    assert app.get_job(s.queued).state is JobState.CANCELLED  # type: ignore[union-attr]


def test_actions_change_the_database(client: TestClient, seeded: tuple[Tether, Seeded]) -> None:
    app, s = seeded
    login(client)
    token = csrf_of(client.get("/").text)
    r = client.post(f"/jobs/{s.running}/cancel", data={"csrf": token}, headers=ORIGIN)
    assert "cancel requested" in client.get(r.headers["location"]).text
    assert app.get_job(s.running).cancel_requested  # type: ignore[union-attr]
    client.post(f"/jobs/{s.retryable}/retry", data={"csrf": token}, headers=ORIGIN)
    assert app.get_job(s.retryable).state is JobState.QUEUED  # type: ignore[union-attr]
    r = client.post(f"/jobs/{s.succeeded}/retry", data={"csrf": token}, headers=ORIGIN)
    assert "only dead or cancelled" in client.get(r.headers["location"]).text
    r = client.post("/jobs/retry-dead", data={"csrf": token, "ids": f"{s.dead}"}, headers=ORIGIN)
    assert r.status_code == 303
    assert app.get_job(s.dead).state is JobState.QUEUED  # type: ignore[union-attr]
    # logging out ends the session
    client.post("/logout", data={"csrf": token}, headers=ORIGIN)
    assert client.get("/").status_code == 303


def test_a_logged_out_or_expired_session_is_refused_and_a_notice_must_be_the_dashboards(
    client: TestClient, seeded: tuple[Tether, Seeded], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Logout only cleared the browser's cookie: the same cookie replayed
    afterwards still opened every page, for ever. And `/?notice=<any text>`
    put a link's own words on the dashboard (escaped: spoofing, not XSS)."""
    from tether.dashboard import security

    login(client)
    kept = client.cookies.get(security.COOKIE)
    assert kept is not None and client.get("/").status_code == 200
    client.post("/logout", data={"csrf": csrf_of(client.get("/").text)}, headers=ORIGIN)
    client.cookies.set(security.COOKIE, kept)  # the old cookie, replayed
    assert client.get("/").status_code == 303 and client.get("/metrics").status_code == 401
    client.cookies.clear()

    login(client)
    assert client.get("/").status_code == 200
    later = security.time.time() + security.SESSION_TTL + 1
    monkeypatch.setattr(security.time, "time", lambda: later)
    assert client.get("/").status_code == 303  # a login lasts SESSION_TTL
    monkeypatch.undo()
    client.cookies.clear()

    login(client)
    forged = client.get("/", params={"notice": "Your session expired: log in at evil.example"}).text
    assert "evil.example" not in forged
    r = client.post("/queues/default/pause", data={"csrf": csrf_of(client.get("/").text)}, headers=ORIGIN)
    assert "queue default: paused" in client.get(r.headers["location"]).text  # the dashboard's own still shows


def test_no_auth_serves_pages_but_still_checks_csrf(seeded: tuple[Tether, Seeded]) -> None:
    app, s = seeded
    with _client(app, token=None) as c:
        page = c.get(f"/jobs/{s.queued}")
        assert page.status_code == 200
        assert c.post(f"/jobs/{s.queued}/cancel", headers={"Origin": "http://evil.example"}).status_code == 403
        assert c.post(f"/jobs/{s.queued}/cancel", data={"csrf": csrf_of(page.text)},
                      headers=ORIGIN).status_code == 303
    assert app.get_job(s.queued).state is JobState.CANCELLED  # type: ignore[union-attr]


def test_a_foreign_host_name_is_refused_against_dns_rebinding(seeded: tuple[Tether, Seeded]) -> None:
    """A page on rebind.evil.example whose name has been rebound to 127.0.0.1
    is, to the browser, same-origin with itself: Host and Origin both say
    rebind.evil.example. Only the Host allow-list tells it from the dashboard."""
    app, s = seeded
    evil = "http://rebind.evil.example:18512"
    with TestClient(create_app(app, token=None), base_url=evil, follow_redirects=False) as c:
        for path in ("/", f"/jobs/{s.dead}", "/jobs", "/metrics", "/login", "/static/dashboard.css"):
            r = c.get(path)
            assert r.status_code == 400, path
            assert "rebind.evil.example" in r.text and "--allowed-host" in r.text and XSS not in r.text
        r = c.post("/queues/default/pause", data={"csrf": "x"}, headers={"Origin": evil})
        assert r.status_code == 400
    assert app.store.paused_queues() == []
    # the names it answers to by default: the loopback ones, with any port
    for base in ("http://127.0.0.1:18512", "http://localhost:8080", "http://[::1]:18512", "http://LOCALHOST."):
        with TestClient(create_app(app, token=None), base_url=base, follow_redirects=False) as c:
            page = c.get("/")
            assert page.status_code == 200, base
            r = c.post("/queues/default/pause", data={"csrf": csrf_of(page.text)}, headers={"Origin": base})
            assert r.status_code == 303, base
    # a deployment behind a proxy names its domain (or a wildcard), and only that
    for allowed in (["dash.example.com"], ["*.example.com"]):
        web = create_app(app, token=None, allowed_hosts=allowed)
        with TestClient(web, base_url="https://dash.example.com", follow_redirects=False) as c:
            assert c.get("/").status_code == 200
        with TestClient(web, base_url="http://127.0.0.1:18512", follow_redirects=False) as c:
            assert c.get("/").status_code == 400
        with TestClient(web, base_url="http://dash.example.com.evil.example", follow_redirects=False) as c:
            assert c.get("/").status_code == 400
    with TestClient(create_app(app, token=None, allowed_hosts=["*"]), base_url=evil) as c:
        assert c.get("/").status_code == 200
    for bad in ([], "localhost"):
        with pytest.raises((ValueError, TypeError)):
            create_app(app, token=None, allowed_hosts=bad)


def test_the_cli_picks_the_host_names_from_the_bind_address() -> None:
    from tether.cli.common import BadUsage
    from tether.cli.dashboard_cmd import host_allow_list

    assert set(host_allow_list("127.0.0.1", (), auth=False)) == {"127.0.0.1", "localhost", "[::1]"}
    assert "dash.example.com" in host_allow_list("127.0.0.1", ("dash.example.com",), auth=False)
    assert host_allow_list("10.1.2.3", (), auth=False) == ["10.1.2.3"]
    assert host_allow_list("0.0.0.0", (), auth=True) == ["*"]  # a rebinding page has no session to act with
    assert "dash.example.com" in host_allow_list("0.0.0.0", ("dash.example.com",), auth=False)
    with pytest.raises(BadUsage, match="--allowed-host"):  # every address, no login: name them
        host_allow_list("0.0.0.0", (), auth=False)


def test_login_redirects_only_to_local_paths(client: TestClient) -> None:
    page = client.get("/login")
    r = client.post("/login", data={"token": TOKEN, "csrf": csrf_of(page.text), "next": "//evil.example/x"},
                    headers=ORIGIN)
    assert r.status_code == 303 and r.headers["location"] == "/"


def test_overview_shows_queue_limits_and_changes_them_through_csrf_checked_posts(
    client: TestClient, seeded: tuple[Tether, Seeded]
) -> None:
    app, _ = seeded
    app.configure_queue("reports", concurrency=2, rate=(10, "1m"))
    app.configure_queue("idle", rate=(5, 90.5))  # a limited queue without jobs gets a row too
    login(client)
    page = client.get("/").text
    reports = next(q for q in app.queue_limits() if q.queue == "reports")
    assert reports.running == 1  # the seed's running job
    assert "concurrency 1/2 running" in page and f"rate {reports.started}/10 per 60s" in page
    assert "rate 0/5 per 90.5s" in page and 'value="5/90.5"' in page
    assert 'action="/queues/reports/limits"' in page and 'value="10/60"' in page and 'value="2"' in page
    token = csrf_of(page)
    before = app.queue_limits()
    url = "/queues/mail/limits"
    assert client.post(url, data={"csrf": "0" * 64, "concurrency": "1"}, headers=ORIGIN).status_code == 403
    assert client.post(url, data={"csrf": token, "concurrency": "1"},
                       headers={"Origin": "http://evil.example"}).status_code == 403
    with _client(app) as stranger:  # not logged in
        assert stranger.post(url, data={"concurrency": "1"}, headers=ORIGIN).status_code == 401
    assert app.queue_limits() == before

    def post(**fields: str) -> str:
        r = client.post(url, data={"csrf": token, **fields}, headers=ORIGIN)
        assert r.status_code == 303 and r.headers["location"].startswith("/?notice=")
        return client.get(r.headers["location"]).text

    assert "queue mail: concurrency 0/3 running, rate 0/100 per 3600s" in post(concurrency="3", rate="100/1h")
    # what the user typed comes back in the notice, escaped
    escaped = "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"
    for fields, needle in [({"concurrency": XSS}, "concurrency must be a whole number"),
                           ({"rate": XSS}, "the rate must be COUNT/PERIOD"),
                           ({"rate": f"5/{XSS}"}, "the rate&#39;s period must be a duration")]:
        shown = post(**fields)
        assert needle in shown and escaped in shown and "<script>alert" not in shown, fields
    assert next(q for q in app.queue_limits() if q.queue == "mail").concurrency == 3  # refusals changed nothing
    assert "queue mail: limits lifted" in post(concurrency="", rate="")
    assert "mail" not in {q.queue for q in app.queue_limits()}
    assert "is not a plain identifier" in client.get(client.post(
        "/queues/bad queue/limits", data={"csrf": token, "concurrency": "1"}, headers=ORIGIN).headers["location"]).text


def chart_bars(html: str) -> list[tuple[int, int]]:
    """(succeeded, failed) of each bar of the overview's throughput chart."""
    return [(int(ok), int(bad)) for ok, bad in
            re.findall(r'<g class="tp-bar" data-start="[^"]+" data-succeeded="(\d+)" data-failed="(\d+)">', html)]


def test_overview_charts_the_attempts_finished_in_the_last_hour(client: TestClient,
                                                                seeded: tuple[Tether, Seeded]) -> None:
    app, _ = seeded
    login(client)
    page = client.get("/").text
    bars = chart_bars(page)
    assert len(bars) == 60
    # the seed ended one attempt succeeded, three failed and one by a lapsed lease
    assert (sum(ok for ok, _ in bars), sum(bad for _, bad in bars)) == (1, 4)
    assert "Last hour: <b>1</b> succeeded, <b>4</b> failed (0 timed out, 1 lost with their worker)" in page
    assert 'role="img" aria-labelledby="tp-title tp-summary"' in page
    # three more succeed and one fails: the next render counts them
    store = app.store
    ids = store.enqueue([NewJob(task="mail.send", args_json="{}", queue="chart") for _ in range(4)])
    claimed = store.claim("worker-a@host", ["chart"], 4, 30)
    assert sorted(c.id for c in claimed) == sorted(ids)
    store.complete("worker-a@host", [(c.id, c.attempt, None) for c in claimed[:3]])
    store.fail("worker-a@host", claimed[3].id, claimed[3].attempt, outcome=Outcome.FAILED, error="no")
    bars = chart_bars(client.get("/").text)
    assert (sum(ok for ok, _ in bars), sum(bad for _, bad in bars)) == (4, 5)


def test_chart_stacks_failed_on_succeeded_scaled_to_the_tallest_bar() -> None:
    t0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)

    def bucket(minute: int, **counts: int) -> Throughput:
        return Throughput(start=t0 + timedelta(minutes=minute), seconds=60,
                          counts={**dict.fromkeys(Outcome, 0), **{Outcome(k): n for k, n in counts.items()}})

    c = chart([bucket(0, succeeded=3, failed=1), bucket(1, succeeded=1, timed_out=1, lease_expired=1, cancelled=5),
               bucket(2)])
    first, second, empty = c.bars
    assert c.peak == 4 and c.height == 100
    assert (first.ok_y, first.ok_h, first.bad_y, first.bad_h) == (25, 75, 0, 25)
    assert (second.succeeded, second.failed, second.ok_h, second.bad_h) == (1, 2, 25, 50)
    assert (empty.ok_h, empty.bad_h) == (0, 0)
    assert c.last == second  # the newest bar is the minute still running
    assert c.failed_total == 3 and c.totals[Outcome.CANCELLED] == 5
    assert [b.x for b in c.bars] == [0, 10, 20]


def test_the_jobs_page_filters_by_tag_and_meta_and_pages_by_keyset(make_app: Callable[..., Tether]) -> None:
    # issue 43: a filter bar (tag, meta expressions such as customer:42) and
    # older pages instead of a cut at the newest 100
    app = make_app()
    task = app.task(name="paged")(lambda ctx, n: None)
    made = task.using(tags=["eu"], meta={"customer": 42}).enqueue_many([{"n": n} for n in range(130)])
    other = task.using(meta={"customer": 7}).enqueue(n=-1)
    with _client(app) as c:
        login(c)
        first = c.get("/jobs", params={"tag": "eu", "meta": "customer:42"})
        assert first.status_code == 200
        shown = {int(i) for i in re.findall(r'href="/jobs/(\d+)"', first.text)}
        assert len(shown) == 100 and other not in shown and shown <= set(made)
        older = re.search(r'href="(/jobs\?[^"]*before=[^"]+)" id="older"', first.text)
        assert older, "no link to the older page"
        second = c.get(older.group(1).replace("&amp;", "&"))
        rest = {int(i) for i in re.findall(r'href="/jobs/(\d+)"', second.text)}
        assert shown | rest == set(made) and not shown & rest
        assert 'id="older"' not in second.text and "newest" in second.text
        assert c.get("/jobs", params={"meta": "customer"}).status_code == 400  # a malformed expression
        # the page is a job id with the filters of the query: a mangled one is the newest page
        assert c.get("/jobs", params={"tag": "eu", "before": "nonsense"}).text.count('href="/jobs/') == 100


def test_a_bulk_action_on_everything_the_filter_matches_shows_the_count_and_asks_first(
        make_app: Callable[..., Tether]) -> None:
    app = make_app()
    task = app.task(name="bulky")(lambda ctx, n: None)
    made = task.using(tags=["bad-deploy"]).enqueue_many([{"n": n} for n in range(120)])
    other = task.enqueue(n=-1)
    with _client(app) as c:
        login(c)
        page = c.get("/jobs", params={"tag": "bad-deploy"})
        assert 'action="/jobs/bulk"' in page.text
        token = csrf_of(page.text)
        form = {"csrf": token, "tag": "bad-deploy", "do": "cancel:matching"}
        assert c.post("/jobs/bulk", data=form).status_code == 403  # no Origin: refused (CSRF checks)
        ask = c.post("/jobs/bulk", data=form, headers=ORIGIN)
        assert ask.status_code == 200 and "Cancel 120 job(s)?" in ask.text
        assert app.count_jobs(state="cancelled") == 0  # asked, nothing done yet
        done = c.post("/jobs/bulk/run", data=form, headers=ORIGIN)
        assert done.status_code == 303 and "120+job%28s%29+cancelled" in done.headers["location"]
        assert app.count_jobs(state="cancelled", tags=["bad-deploy"]) == len(made)
        assert app.get_job(other).state is JobState.QUEUED  # type: ignore[union-attr]
        # delete refuses a filter that matches live jobs, with its reason as the notice
        refused = c.post("/jobs/bulk/run", data={"csrf": token, "do": "delete:matching", "task": "bulky"},
                         headers=ORIGIN)
        assert refused.status_code == 303 and "not+finished" in refused.headers["location"]
        assert app.count_jobs(task="bulky") == len(made) + 1
        # no filter: refused
        bare = c.post("/jobs/bulk/run", data={"csrf": token, "do": "cancel:matching"}, headers=ORIGIN)
        assert "the+filter+is+empty" in bare.headers["location"] and app.get_job(other).state is JobState.QUEUED  # type: ignore[union-attr]
