"""The dashboard in a real browser: headless Chromium (Debian's package) driven
by Playwright, against uvicorn serving a live database with jobs in every
state. Logs in, reads a job's attempts timeline, cancels and retries from the
page and checks the database; a cross-site form post is refused. Screenshots
of the main pages go to the test's tmp dir (and to ``TETHER_SCREENSHOTS`` when
set, which is how docs/screenshots/ is made)."""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import uvicorn

from tether import JobState, Tether
from tether.dashboard import create_app
from tether.model import NewJob

from .dashboard_seed import XSS, Seeded, seed, seed_history

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
TOKEN = "browser-token-1234"

playwright_sync = pytest.importorskip("playwright.sync_api")


def _require_chromium() -> None:
    if not os.path.exists(CHROMIUM):
        if os.environ.get("CI") == "true":
            pytest.fail(f"{CHROMIUM} is required under CI=true (apt-get install chromium; scripts/test does)")
        pytest.skip(f"no {CHROMIUM} (apt-get install chromium)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Served:
    def __init__(self, app: Tether) -> None:
        self.port = _free_port()
        config = uvicorn.Config(create_app(app, token=TOKEN), host="127.0.0.1", port=self.port,
                                log_level="warning", lifespan="off", ws="none")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="dashboard", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Served:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture
def browser_page(tmp_path: Path) -> Iterator[object]:
    _require_chromium()
    with playwright_sync.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 860})
            yield context.new_page()
        finally:
            browser.close()


def test_dashboard_in_chromium(make_app: Callable[..., Tether], browser_page: object, tmp_path: Path,
                               backend: str) -> None:
    from playwright.sync_api import Page, expect

    page: Page = browser_page  # type: ignore[assignment]
    app = make_app()
    s: Seeded = seed(app)
    shots = tmp_path / "screenshots"
    shots.mkdir()
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))

    def shot(name: str) -> None:
        page.screenshot(path=str(shots / f"{name}.png"), full_page=True)

    with Served(app) as srv:
        # Not logged in: every page leads to the login form; a wrong token is refused.
        page.goto(f"{srv.url}/jobs/{s.dead}")
        expect(page).to_have_url(f"{srv.url}/login?next=%2Fjobs%2F{s.dead}")
        page.fill("input[name=token]", "not-the-token")
        page.click("form button:has-text('Log in')")
        expect(page.locator("p.error")).to_contain_text("not the right one")
        shot("login")
        page.fill("input[name=token]", TOKEN)
        page.click("form button:has-text('Log in')")

        # The job with three attempts: failed, recovered from a dead worker, failed.
        expect(page).to_have_url(f"{srv.url}/jobs/{s.dead}")
        items = page.locator("ol.timeline > li")
        expect(items).to_have_count(3)
        expect(items.nth(0)).to_contain_text("attempt 1")
        expect(items.nth(0)).to_contain_text("failed")
        expect(items.nth(1)).to_contain_text("lease_expired")
        expect(items.nth(1)).to_contain_text("worker-b@gone")
        expect(items.nth(2)).to_contain_text("RuntimeError: still broken")
        # User data shows as text: the <script> in args and errors is visible and never ran.
        expect(page.locator("pre.json").first).to_contain_text(XSS)
        expect(items.nth(0).locator(".err")).to_contain_text(XSS)
        items.nth(0).locator("summary").click()
        expect(items.nth(0).locator("details pre")).to_contain_text(f"ValueError: {XSS}")
        assert page.locator("main script").count() == 0
        shot("job")

        # Retry the dead job from its page.
        page.click("#retry")
        expect(page.locator(".notice")).to_contain_text("queued again")
        assert app.get_job(s.dead).state is JobState.QUEUED  # type: ignore[union-attr]

        # Cancel a queued job and a running one from their pages.
        page.goto(f"{srv.url}/jobs/{s.queued}")
        page.click("#cancel")
        expect(page.locator(".notice")).to_contain_text("cancelled")
        assert app.get_job(s.queued).state is JobState.CANCELLED  # type: ignore[union-attr]
        page.goto(f"{srv.url}/jobs/{s.running}")
        expect(page.locator("progress")).to_have_attribute("value", "0.4")
        expect(page.locator(".facts")).to_contain_text("page 16 of 40")
        shot("job-running")
        page.click("#cancel")
        expect(page.locator(".notice")).to_contain_text("cancel requested")
        running = app.get_job(s.running)
        assert running is not None and running.state is JobState.RUNNING and running.cancel_requested

        # The other pages, with filters and id search.
        page.goto(f"{srv.url}/")
        expect(page.locator("table.depth")).to_contain_text("reports")
        expect(page.locator("main")).to_contain_text("worker-b@gone")
        # throughput: a bar a minute for the last hour; the seed's attempts are in it
        expect(page.locator("svg.tp g.tp-bar")).to_have_count(60)
        expect(page.locator("#tp-summary")).to_contain_text("Last hour: 1 succeeded, 4 failed")
        assert page.locator("svg.tp rect.tp-ok").count() >= 1 and page.locator("svg.tp rect.tp-bad").count() >= 1
        page.goto(f"{srv.url}/jobs")
        page.select_option("select[name=state]", "dead")
        page.click("text=Filter")
        expect(page.locator("table.jobs tbody tr")).to_have_count(1)  # the retryable one; the other was retried
        expect(page.locator("table.jobs")).to_contain_text(f"#{s.retryable}")
        page.click("text=Re-enqueue these 1 dead job(s)")
        expect(page.locator(".notice")).to_contain_text("1 dead job(s) queued again")
        assert app.get_job(s.retryable).state is JobState.QUEUED  # type: ignore[union-attr]
        page.goto(f"{srv.url}/jobs")
        shot("jobs")
        page.fill("header input[name=id]", str(s.succeeded))
        page.press("header input[name=id]", "Enter")
        expect(page).to_have_url(f"{srv.url}/jobs/{s.succeeded}")
        expect(page.locator("pre.json").nth(1)).to_contain_text('"sent": true')
        page.goto(f"{srv.url}/workers")
        expect(page.locator("main table")).to_contain_text("worker-a@host")
        shot("workers")
        page.goto(f"{srv.url}/recoveries")
        expect(page.locator("main table")).to_contain_text("worker lease expired (worker worker-b@gone)")
        shot("recoveries")

        # Fifty minutes of finished jobs: the chart draws them, and the overview's picture is taken.
        ok, bad = seed_history(app.store)
        page.goto(f"{srv.url}/")
        expect(page.locator("#tp-summary")).to_contain_text(f"Last hour: {1 + ok} succeeded, {4 + bad} failed")
        assert page.locator("svg.tp rect.tp-ok").count() >= 50
        shot("overview")

        # A cross-site page that auto-submits a form to the dashboard, in the
        # same logged-in browser: refused, and the job is untouched.
        target = s.cancelled
        app.retry(target)  # queued again, so a cancel would change it
        evil = page.context.new_page()
        with evil.expect_response(f"{srv.url}/jobs/{target}/cancel") as answer:
            evil.set_content(f'<form id="f" method="post" action="{srv.url}/jobs/{target}/cancel">'
                             '<input name="csrf" value="guess"></form><script>document.getElementById("f").submit()'
                             "</script>")
        assert answer.value.status in (401, 403)
        assert app.get_job(target).state is JobState.QUEUED  # type: ignore[union-attr]

    assert dialogs == []  # no script from the data ever ran
    wanted = os.environ.get("TETHER_SCREENSHOTS")
    if wanted and backend == "sqlite":
        Path(wanted).mkdir(parents=True, exist_ok=True)
        for png in shots.glob("*.png"):
            shutil.copy(png, Path(wanted) / png.name)
    assert sorted(p.name for p in shots.glob("*.png")) == [
        "job-running.png", "job.png", "jobs.png", "login.png", "overview.png", "recoveries.png", "workers.png"]


def test_many_jobs_in_chromium(make_app: Callable[..., Tether], browser_page: object, backend: str) -> None:
    """Issue 43 in the browser: page older and newer, filter by a meta
    expression (a malformed one says why), tick a row and cancel it, cancel
    everything a filter matches, each through its confirmation page, and
    read a job's attempts chart. Meta and tags hold <script>: shown as text."""
    from playwright.sync_api import Page, expect

    from .test_dashboard_jobs import _labelled

    page: Page = browser_page  # type: ignore[assignment]
    app = make_app()
    s: Seeded = seed(app)
    ids, _ = _labelled(app)
    app.store.enqueue([NewJob(task="fill.step", args_json="{}", queue="fill") for _ in range(105)])
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    with Served(app) as srv:
        page.goto(f"{srv.url}/login?next=%2Fjobs%3Fqueue%3Dfill")
        page.fill("input[name=token]", TOKEN)
        page.click("form button:has-text('Log in')")
        rows = page.locator("table.jobs tbody tr")
        expect(rows).to_have_count(100)
        expect(page.locator("#match-count")).to_have_text("105")
        page.click("#older")
        expect(rows).to_have_count(5)
        page.click("#newer")
        expect(rows).to_have_count(100)
        page.check("#tick-all")  # the page's one script ticks every row
        expect(page.locator("form.bulk input[name=ids]:checked")).to_have_count(100)

        page.goto(f"{srv.url}/jobs")
        page.fill("form.filters input[name=meta]", "customer:42")
        page.click("#filter")
        expect(rows).to_have_count(2)
        expect(page.locator("table.jobs .tag").filter(has_text=XSS)).to_have_count(2)
        page.fill("form.filters input[name=meta]", "customer 42")
        page.click("#filter")
        expect(page.locator(".filter-error")).to_contain_text("is not key:value")
        expect(rows).to_have_count(0)

        # one ticked row, then everything the filter still matches
        page.fill("form.filters input[name=meta]", "customer:42")
        page.click("#filter")
        page.check(f"input[name=ids][value='{ids[0]}']")
        page.click("#cancel-selected")
        expect(page.locator("#confirm-count")).to_have_text("1")
        page.click("#confirm")
        expect(page.locator(".notice")).to_contain_text("1 job(s) cancelled")
        assert app.get_job(ids[0]).state is JobState.CANCELLED  # type: ignore[union-attr]
        expect(page.locator("form.filters input[name=meta]")).to_have_value("customer:42")  # back on the same filter
        page.click("#cancel-matching")
        expect(page.locator("#confirm-count")).to_have_text("1")  # the other one; the first is finished
        page.click("#confirm")
        expect(page.locator(".notice")).to_contain_text("1 job(s) cancelled")
        assert app.get_job(ids[1]).state is JobState.CANCELLED  # type: ignore[union-attr]

        page.goto(f"{srv.url}/jobs/{s.dead}")
        expect(page.locator("svg.attempts-chart g.at-lane")).to_have_count(3)
        expect(page.locator("svg.attempts-chart g.o-lease_expired")).to_have_count(1)
    assert dialogs == []


def test_a_workflow_dag_in_chromium(make_app: Callable[..., Tether], browser_page: object, backend: str) -> None:
    """Issue 42: the workflow page's SVG boxes are drawn (visible, linked), a
    ``<script>`` step name shows as text and never runs, a box leads to its job."""
    from playwright.sync_api import Page, expect

    from .test_dashboard_flows import diamond

    page: Page = browser_page  # type: ignore[assignment]
    app = make_app()
    with ThreadPoolExecutor(1) as pool:  # drain() blocks: not on Playwright's event loop
        run = pool.submit(diamond, app).result()
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    with Served(app) as srv:
        page.goto(f"{srv.url}/login?next=%2Fworkflows%2F{run.id}")
        page.fill("input[name=token]", TOKEN)
        page.click("form button:has-text('Log in')")
        expect(page).to_have_url(f"{srv.url}/workflows/{run.id}")
        boxes = page.locator("svg.dag a.dag-step")
        expect(boxes).to_have_count(4)
        for i in range(4):
            expect(boxes.nth(i).locator("rect")).to_be_visible()
        expect(page.locator("svg.dag a.s-succeeded")).to_contain_text("fetch")
        expect(page.locator("svg.dag a.s-waiting")).to_contain_text("report")
        expect(page.locator("#wf-name")).to_have_text(f"import {XSS}")
        fill = page.locator("svg.dag a.s-succeeded rect").evaluate("r => getComputedStyle(r).fill")
        assert fill == "rgb(220, 252, 231)", fill  # the stylesheet loaded under the CSP
        assert page.locator("main script").count() == 0
        page.locator("svg.dag a.s-waiting rect").click()
        expect(page).to_have_url(f"{srv.url}/jobs/{run.jobs['report']}")
        expect(page.locator("#job-workflow")).to_have_attribute("href", f"/workflows/{run.id}")
    assert dialogs == []
