"""Loading the named queries: comments stay in the .sql files, not in what is sent."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from psycopg._queries import MAX_CACHED_STATEMENT_LENGTH

from tether.store.columns import pg_macros, sqlite_macros
from tether.store.postgres.store import NOW as PG_NOW
from tether.store.sqlfile import included as sqlfile_included
from tether.store.sqlfile import load_queries, strip_comments
from tether.store.sqlite.control import finished_states_sql
from tether.store.sqlite.store import NOW as SQLITE_NOW

BACKENDS = {
    "tether.store.postgres": {"schema": '"tether"', "now": PG_NOW, "channel": "'tether_tether'",
                              "done_channel": "'tether_done_tether'"} | pg_macros(),
    "tether.store.sqlite": {"now": SQLITE_NOW, "finished_states": finished_states_sql()} | sqlite_macros(),
}


def test_comments_go_and_literals_stay() -> None:
    sql = (
        "-- why the WHERE is shaped so\n"
        "SELECT 'a -- not a comment', 'it''s /* kept */' -- the tail goes\n"
        "     , \"odd--name\", $fn$ -- kept $fn$ /* a block\n"
        "   comment */ FROM t\n"
        "\n"
        "    WHERE x = 'two\n"
        "    lines' AND $b$\n"
        "  kept\n"
        "$b$ = y"
    )
    assert strip_comments(sql) == (
        "SELECT 'a -- not a comment', 'it''s /* kept */'\n"
        ", \"odd--name\", $fn$ -- kept $fn$  FROM t\n"
        "WHERE x = 'two\n"
        "    lines' AND $b$\n"
        "  kept\n"
        "$b$ = y"
    )


@pytest.mark.parametrize("package", sorted(BACKENDS))
def test_loaded_queries_are_tagged_bare_and_short_enough_to_cache(package: str) -> None:
    queries = load_queries(package, "queries.sql", BACKENDS[package])
    assert "claim" in queries and "heartbeat" in queries
    for name, sql in queries.items():
        head, _, body = sql.partition("\n")
        assert head == f"/* tether:{name} */"
        assert "--" not in body, name
        # Longer statements are parsed by the driver again on every execution.
        assert len(sql) <= MAX_CACHED_STATEMENT_LENGTH, (name, len(sql))


def test_fragments_include_fragments_and_a_cycle_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "fragpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "ok.sql").write_text(
        "-- name: _inner\nx = {n}\n"
        "-- name: _outer\n-- why\nWHERE {_inner} AND y\n"
        "-- name: q\nSELECT 1 FROM t {_outer}\n"
        "-- name: r\nSELECT {_inner}\n")
    (pkg / "loop.sql").write_text(
        "-- name: _a\n{_b}\n"
        "-- name: _b\n{_a}\n"
        "-- name: q\nSELECT {_a}\n")
    (pkg / "unknown.sql").write_text("-- name: q\nSELECT {_nowhere}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    queries = load_queries("fragpkg", "ok.sql", {"n": "1"})
    assert queries == {"q": "/* tether:q */\nSELECT 1 FROM t\nWHERE x = 1 AND y", "r": "/* tether:r */\nSELECT x = 1"}
    with pytest.raises(RuntimeError, match=r"fragment '_a' includes itself \(q -> _a -> _b -> _a\)"):
        load_queries("fragpkg", "loop.sql", {})
    with pytest.raises(RuntimeError, match=r"unfilled macro \{_nowhere\}"):
        load_queries("fragpkg", "unknown.sql", {})


@pytest.mark.parametrize("package", sorted(BACKENDS))
def test_every_claim_and_the_sweep_share_one_claimable_condition(package: str) -> None:
    """Issue 48, item 4: "queued, due, queue not paused" is one fragment
    (_open_queues) that every claim and the transport sweep read their jobs
    through, and the claims' limits one CTE (_limits on PostgreSQL, _rooms on
    SQLite), not copies that could drift apart."""
    from importlib import resources

    from tether.store.sqlfile import split_queries

    raw = split_queries(resources.files(package).joinpath("queries.sql").read_text(encoding="utf-8"), "queries.sql")

    def included(name: str) -> set[str]:
        return sqlfile_included(raw, name)

    claims = {n for n in raw if not n.startswith("_") and "_grant_lease" in included(n)}
    assert {"claim", "claim_known", "claim_ids"} <= claims
    limits = "_limits" if package.endswith("postgres") else "_rooms"
    for name in claims | {"due_unclaimed"}:
        assert "_open_queues" in included(name), name
    for name in claims:
        assert limits in included(name), name
    # the condition and the limits are written once, in their fragments
    readers = claims | {"due_unclaimed"}
    for name in readers | set().union(*(included(n) for n in readers)) - {"_open_queues", limits}:
        assert "WHERE paused" not in raw[name], name
        assert "claim_room(" not in raw[name], name


def test_sqlite_queries_bind_no_numbered_placeholders() -> None:
    """``?4`` is a named placeholder to Python 3.12's sqlite3: binding it from a
    sequence is deprecated there (an error from 3.14), and under the Django
    tests' Python 3.12 every failure's attempts row failed to be written, its
    report retried for ever. Plain ``?`` or ``:name`` only."""
    queries = load_queries("tether.store.sqlite", "queries.sql", BACKENDS["tether.store.sqlite"])
    numbered = {name: re.findall(r"\?\d+", sql) for name, sql in queries.items()}
    assert {name: found for name, found in numbered.items() if found} == {}
