"""The documentation's code examples, executed: every code block of a page in
docs/ is an include of an example file (pymdownx.snippets), and every such
file is run here, so no page can drift from the code. Also the generated
Reference pages' coverage, and the link checker scripts/test runs over the
built site."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests.tutorial_run import check_tutorial, run_tutorial, tutorial_url

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
EXAMPLES = DOCS / "examples"

#: every example file, with the test that runs it: a name under docs/examples/,
#: or a path from the repository's root for a file the suite runs where it stands
EXECUTED = {
    "tutorial/app.py": "test_tutorial (imported by its workers and producers)",
    "tutorial/steps.sh": "test_tutorial",
    "tutorial/install.sh": "tests/test_wheel.py (against the built wheel)",
    "guides/tasks.py": "tests/test_docs_guides.py",
    "guides/retries.py": "tests/test_docs_guides.py",
    "guides/job_control.py": "tests/test_docs_guides.py",
    "guides/schedules.py": "tests/test_docs_guides.py",
    "guides/transactions.py": "tests/test_docs_guides.py",
    "guides/monitoring.py": "tests/test_docs_guides.py",
    "guides/remote.sh": "tests/test_docs_guides.py::test_remote_workers_through_a_tether_server",
    "guides/remote.py": "tests/test_docs_guides.py::test_remote_workers_through_a_tether_server",
    "guides/typed.py": "tests/test_docs_guides.py, tests/test_typed_args.py",
    "migrating/shop.py": "tests/test_docs_migrating.py (run)",
    "migrating/celery_shop.py": "tests/test_docs_migrating.py (compiled only: Celery is not installed)",
    "migrating/rq_shop.py": "tests/test_docs_migrating.py (compiled only: RQ is not installed)",
    "migrating/procrastinate_shop.py": "tests/test_docs_migrating.py (compiled only: procrastinate is not installed)",
    "migrating/django_tasks_settings.py": "tests/test_docs_migrating.py (compiled; the backend is tests/django's)",
    "tests/examples/testing/tasks.py": "tests/test_testing.py::test_the_pytest_plugin_in_a_real_pytest_run",
    "tests/examples/testing/pytest.ini": "tests/test_testing.py::test_the_pytest_plugin_in_a_real_pytest_run",
    "tests/examples/testing/test_tasks.py": "tests/test_testing.py::test_the_pytest_plugin_in_a_real_pytest_run",
    "tests/asgi_app.py": "tests/test_asgi.py (served by a real uvicorn, both backends)",
    "tests/django/project/readme/tasks.py": "tests/django/test_readme.py (Python 3.12+, .venv-django)",
    "tests/django/project/readme/views.py": "tests/django/test_readme.py (Python 3.12+, .venv-django)",
    "schedules/runtime.py": "tests/test_dynamic_schedules.py::test_the_docs_example_runs",
    "many-jobs/example.py": "tests/test_docs_many.py",
    "many-jobs/cli.sh": "tests/test_docs_many.py (after example.py, on its database)",
    "uniqueness-and-expiry/example.py": "tests/test_dedup_window.py::test_the_docs_example",
    "key-limits/example.py": "tests/test_key_limits_app.py::test_the_docs_example",
    "nats/app.py": "tests/test_nats.py::test_the_docs_nats_example_runs (against the test NATS)",
    "handlers/enqueue_middleware.py": "tests/test_enqueue_middleware.py::test_the_docs_example_runs",
    "handlers/middleware.py": "tests/test_handler_events.py (with sentry_sdk and an in-memory transport)",
    "handlers/isolation.py": "tests/test_isolation_cli.py (run as a script: its worker runs render in a child)",
    "workflows/example.py": "tests/test_workflows.py::test_the_docs_example_runs",
    "workflows/batch.py": "tests/test_batches.py::test_the_docs_example_runs",
    "workflows/events.py": "tests/test_flow_events.py::test_the_docs_example_runs",
}
#: shell lines a page may show that no test can run as written (they name a
#: reader's own database host); the PostgreSQL run of test_tutorial covers them
NOT_RUN = {"export TETHER_DATABASE_URL=postgresql://user@db-host/mydb"}

#: a fenced block, indented (inside a list item) or not
_FENCE = re.compile(r"^[ \t]*```(\w*)[^\n]*\n(.*?)^[ \t]*```", re.S | re.M)
_INCLUDE = re.compile(r'^--8<-- "([^":]+)(?::([\w-]+))?"$')


def _pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if not p.relative_to(DOCS).parts[0].startswith(("_", "examples")))


def _code_blocks() -> list[tuple[Path, str, str]]:
    return [(page, m[1], m[2]) for page in _pages() for m in _FENCE.finditer(page.read_text())]


@pytest.mark.processes
def test_tutorial(backend: str, db_url: str, tmp_path: Path) -> None:
    """docs/tutorial: its app and its commands, from this source tree's venv,
    on SQLite (the default URL) and PostgreSQL."""
    url = tutorial_url(backend, db_url)
    output = run_tutorial(Path(sys.executable).parent, tmp_path / "tutorial", url)
    assert "succeeded" in output
    check_tutorial(tmp_path / "tutorial", url)


def _example(name: str) -> Path:
    """Where pymdownx.snippets finds an include (its base_path: docs/examples, then the root)."""
    return EXAMPLES / name if (EXAMPLES / name).is_file() else ROOT / name


def test_every_code_block_is_an_executed_example() -> None:
    """Every python/bash block of a page is made of includes of executed
    examples (a config block, toml or ini, may include one too, or be inline);
    every executed example is shown by some page."""
    code = {"python", "py", "bash", "sh", "shell", "console", "pycon"}
    included: set[str] = set()
    blocks = 0
    for page, lang, body in _code_blocks():
        blocks += lang in code
        for line in body.strip().splitlines():
            m = _INCLUDE.match(line.strip())
            if m is None:
                if lang in code:
                    assert line.strip() in NOT_RUN, f"{page.relative_to(ROOT)}: a {lang} block's line is not an " \
                                                    f"included, executed example: {line!r}"
                continue
            name, section = m[1], m[2]
            assert name in EXECUTED, f"{page.relative_to(ROOT)} includes {name}, which no test runs"
            text = _example(name).read_text()
            if section:
                assert f"--8<-- [start:{section}]" in text and f"--8<-- [end:{section}]" in text, (name, section)
            included.add(name)
    assert blocks > 0
    assert included == set(EXECUTED), f"examples no page shows: {set(EXECUTED) - included}"
    assert all(_example(name).is_file() for name in EXECUTED)
    under_examples = {str(p.relative_to(EXAMPLES)) for p in EXAMPLES.rglob("*") if p.is_file() and
                      "__pycache__" not in p.parts}
    assert under_examples == {name for name in EXECUTED if (EXAMPLES / name).is_file()}


def _reference() -> object:
    sys.path.insert(0, str(DOCS / "_hooks"))
    try:
        import reference
    finally:
        sys.path.remove(str(DOCS / "_hooks"))
    return reference


def test_reference_pages_cover_the_code() -> None:
    import click

    import tether
    from tether.cli.main import cli
    from tether.events import EVENT_NAMES
    from tether.store.http import wire

    ref = _reference()
    pages = ref.pages()  # type: ignore[attr-defined]
    for name in tether.__all__:
        if not name.startswith("_"):
            assert f"::: tether.{name}\n" in pages["reference/python.md"], name
    ctx = click.Context(cli, info_name="tether")
    assert isinstance(cli, click.Group)
    for command in cli.list_commands(ctx):
        assert f"## `tether {command}`" in pages["reference/cli.md"], command
    for op in wire.OPS:
        assert f"Operation `{op.name}`." in pages["reference/http.md"], op.name
    for event in EVENT_NAMES:
        assert f"| `{event}` |" in pages["reference/events.md"], event
    for migration in (ROOT / "src" / "tether" / "store").glob("*/migrations/*.sql"):
        assert f"### `{migration.name}`" in pages["reference/schema.md"], migration
    from tether.task import JobOptions
    assert set(ref.TASK_BOUNDS) == set(JobOptions.__dataclass_fields__)  # type: ignore[attr-defined]
    for option in JobOptions.__dataclass_fields__:
        assert f"| `{option}` |" in pages["reference/settings.md"], option
    for timer in ("lease_ttl", "heartbeat_interval", "reaper_interval", "max_payload_bytes", "retention"):
        assert f"| `{timer}` |" in pages["reference/settings.md"], timer


def test_link_checker_finds_broken_links(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from check_links import check
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    (tmp_path / "guide").mkdir()
    (tmp_path / "index.html").write_text(
        '<h1 id="top">x</h1><a href="guide/">ok</a><a href="guide/#here">ok</a><a href="#top">ok</a>'
        '<a href="https://example.org/">external</a><a href="missing/">bad</a><a href="guide/#nowhere">bad</a>'
        '<img src="pic.png">')
    (tmp_path / "guide" / "index.html").write_text('<p id="here">y</p><a href="../index.html#top">ok</a>')
    checked, broken = check(tmp_path)
    assert checked == 7
    assert sorted(broken) == ["index.html: guide/#nowhere: no #nowhere in guide/index.html",
                              "index.html: missing/: no such file", "index.html: pic.png: no such file"]


def test_the_readmes_quickstart_is_the_tutorials_first_steps() -> None:
    """The README's quickstart is the tutorial's app and first commands, which
    test_tutorial runs; its two commands are the ones CI runs."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 200
    blocks = {lang: body for lang, body in ((m[1], m[2]) for m in _FENCE.finditer(readme)) if lang == "python"}
    app = (EXAMPLES / "tutorial" / "app.py").read_text()
    assert blocks["python"] == app[app.index("[start:app]\n") + 12:app.index("# --8<-- [end:app]")]
    steps = (EXAMPLES / "tutorial" / "steps.sh").read_text().splitlines()
    quickstart = readme[readme.index("## Quickstart"):readme.index("## Documentation")]
    [commands] = [m[2] for m in _FENCE.finditer(quickstart) if m[1] == "bash"]
    assert all(line in steps for line in commands.strip().splitlines()), commands
    two = readme[readme.index("## Two commands"):readme.index("## Quickstart")]
    assert "bash scripts/demo" in two and "bash scripts/test" in two
    assert "exec bash scripts/test" in (ROOT / ".ci" / "run").read_text()
    assert (ROOT / "scripts" / "demo").is_file()
