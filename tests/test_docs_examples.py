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

#: every example file, with the test that runs it
EXECUTED = {
    "tutorial/app.py": "test_tutorial (imported by its workers and producers)",
    "tutorial/steps.sh": "test_tutorial",
    "tutorial/install.sh": "tests/test_wheel.py (against the built wheel)",
    "workflows/example.py": "tests/test_workflows.py::test_the_docs_example_runs",
    "workflows/batch.py": "tests/test_batches.py::test_the_docs_example_runs",
}
#: shell lines a page may show that no test can run as written (they name a
#: reader's own database host); the PostgreSQL run of test_tutorial covers them
NOT_RUN = {"export TETHER_DATABASE_URL=postgresql://user@db-host/mydb"}

_FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)
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


def test_every_code_block_is_an_executed_example() -> None:
    code = {"python", "py", "bash", "sh", "shell", "console", "pycon"}
    included: set[str] = set()
    blocks = 0
    for page, lang, body in _code_blocks():
        if lang not in code:
            continue
        blocks += 1
        for line in body.strip().splitlines():
            m = _INCLUDE.match(line.strip())
            if m is None:
                assert line.strip() in NOT_RUN, f"{page.relative_to(ROOT)}: a {lang} block's line is not an " \
                                                f"included, executed example: {line!r}"
                continue
            name, section = m[1], m[2]
            assert name in EXECUTED, f"{page.relative_to(ROOT)} includes {name}, which no test runs"
            text = (EXAMPLES / name).read_text()
            if section:
                assert f"--8<-- [start:{section}]" in text and f"--8<-- [end:{section}]" in text, (name, section)
            included.add(name)
    assert blocks > 0
    assert included == set(EXECUTED), f"examples no page shows: {set(EXECUTED) - included}"
    assert {str(p.relative_to(EXAMPLES)) for p in EXAMPLES.rglob("*") if p.is_file()} == set(EXECUTED)


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
