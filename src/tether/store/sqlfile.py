"""Load named queries from the ``.sql`` file beside a backend.

A file holds several queries, each introduced by a ``-- name: NAME`` line; the
comments between belong to the query and say why its WHERE clause is shaped as
it is. Macros in braces (``{schema}``, ``{now}``) are filled once, at load time,
with values the backend has validated or derived (the job's column lists:
store/columns.py); parameters stay driver placeholders.
A query whose name starts with ``_`` is a fragment: other queries include it
as ``{_name}`` (two statements that must grant a lease the same way share it),
and so may other fragments (a fragment that includes itself, directly or not,
is an error at load).

The comments are for readers of the file, not for the server: a loaded query
is its SQL without them, opened by a one-line ``/* tether:NAME */`` tag that
names it in ``pg_stat_activity`` and ``pg_prepared_statements``. Besides the
bytes on the wire, this keeps every statement under psycopg's 4,096-character
limit for caching its parsed form; complete_and_claim with its comments was
longer, and its placeholders were parsed again on every round.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from importlib import resources
from typing import Any

__all__ = ["Queries", "included", "load_migrations", "load_queries", "migration_names", "parse_queries",
           "split_queries"]

_NAME = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
_INCLUDE = re.compile(r"\{(_[a-z0-9_]+)\}")


def load_queries(package: str, filename: str, macros: dict[str, str], *, lazy: bool = False) -> dict[str, str]:
    """Every query of the file, ready to send; ``lazy``: a ``Queries`` that
    prepares each one on its first use (a store's)."""
    text = resources.files(package).joinpath(filename).read_text(encoding="utf-8")
    if lazy:
        return Queries(text, filename, macros)
    return parse_queries(text, filename, macros)


class Queries(dict[str, str]):
    """The queries of a file, each filled, included and stripped on its first
    lookup and kept (then looked up at dict speed): a worker starts using a
    handful of the file's seventy, and preparing them all took 10-20 ms of its
    start (issue 47). ``in``, ``len`` and iteration see every name; the tests
    load the files eagerly (``load_queries``), so a broken query still fails
    there, not at its first use."""

    def __init__(self, text: str, filename: str, macros: dict[str, str]) -> None:
        super().__init__()
        self._filename = filename
        self._macros = macros
        self._raw = {name: _fill(body, macros, check=False) for name, body in split_queries(text, filename).items()}
        self._fragments = {name: body for name, body in self._raw.items() if name.startswith("_")}
        self._names = [name for name in self._raw if not name.startswith("_")]
        self._filled: dict[str, str] = {}

    def __missing__(self, name: str) -> str:
        if name.startswith("_") or name not in self._raw:
            raise KeyError(name)
        sql = _prepare(self._raw[name], name, self._fragments, self._filled, self._filename, self._macros)
        self[name] = sql
        return sql

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def __len__(self) -> int:
        return len(self._names)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def keys(self) -> Any:
        return dict.fromkeys(self._names).keys()

    def values(self) -> Any:
        return [self[name] for name in self._names]

    def items(self) -> Any:
        return [(name, self[name]) for name in self._names]

    def get(self, name: str, default: Any = None) -> Any:
        return self[name] if name in self._names else default


def split_queries(text: str, filename: str) -> dict[str, str]:
    """Each ``-- name:`` section of ``text`` as written: its comments, its
    fragments not yet included, its macros not yet filled."""
    parts = _NAME.split(text)
    raw: dict[str, str] = {}
    # parts = [preamble, name1, body1, name2, body2, ...]
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in raw:
            raise RuntimeError(f"{filename}: query {name!r} defined twice")
        raw[name] = body.strip()
    return raw


def included(raw: dict[str, str], name: str) -> set[str]:
    """The fragments query ``name`` of ``split_queries``'s ``raw`` includes,
    directly or not (tests check that the queries that must share a fragment do)."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        for fragment in _INCLUDE.findall(raw[todo.pop()]):
            if fragment not in seen:
                seen.add(fragment)
                todo.append(fragment)
    return seen


def parse_queries(text: str, filename: str, macros: dict[str, str]) -> dict[str, str]:
    """``load_queries`` of a file's text."""
    # macros first (without the check: fragments are still to come), so
    # that a macro's value may name a fragment ({job_select}: {_live_owner})
    raw = {name: _fill(body, macros, check=False) for name, body in split_queries(text, filename).items()}
    fragments = {name: body for name, body in raw.items() if name.startswith("_")}
    filled: dict[str, str] = {}
    return {name: _prepare(body, name, fragments, filled, filename, macros)
            for name, body in raw.items() if not name.startswith("_")}


def _prepare(body: str, name: str, fragments: dict[str, str], filled: dict[str, str], filename: str,
             macros: dict[str, str]) -> str:
    """Query ``name`` as sent: its fragments included (``filled`` keeps the
    ones already done), its macros filled, its comments gone, its tag on."""

    def include(body: str, within: tuple[str, ...]) -> str:
        def one(m: re.Match[str]) -> str:
            name = m.group(1)
            if name not in fragments:
                return m.group(0)  # left for _fill to report
            if name in within:
                raise RuntimeError(f"{filename}: fragment {name!r} includes itself ({' -> '.join((*within, name))})")
            if name not in filled:
                filled[name] = include(fragments[name], (*within, name))
            return filled[name]
        return _INCLUDE.sub(one, body)

    return f"/* tether:{name} */\n" + strip_comments(_fill(include(body, (name,)), macros))


# A string literal ('it''s'), a quoted identifier ("a""b"), a dollar-quoted
# body ($fn$ ... $fn$), a line comment, a block comment, or anything else.
_TOKEN = re.compile(
    r"""(?P<keep>'(?:[^']|'')*'|"(?:[^"]|"")*"|(?P<dollar>\$[A-Za-z_]*\$).*?(?P=dollar))"""
    r"""|(?P<comment>--[^\n]*|/\*.*?\*/)""",
    re.DOTALL,
)


#: a line's indentation (outside literals: see strip_comments)
_INDENT = re.compile(r"\n[ \t]+")


def strip_comments(sql: str) -> str:
    """``sql`` without its comments, the lines they leave blank and the lines'
    indentation; literals, quoted identifiers and dollar-quoted bodies are kept
    as they are. The indentation goes because psycopg caches a statement's
    parse only up to 4,096 characters (``MAX_CACHED_STATEMENT_LENGTH``): a
    longer one is parsed again on every execution, and the round statements'
    indentation was about a fifth of their length."""
    parts: list[str] = []
    pos = 0
    for m in _TOKEN.finditer(sql):
        parts += [_INDENT.sub("\n", sql[pos:m.start()]), "" if m.group("comment") else m.group(0)]
        pos = m.end()
    parts.append(_INDENT.sub("\n", sql[pos:]))
    return "\n".join(line.rstrip() for line in "".join(parts).splitlines() if line.strip())


def load_migrations(package: str, macros: dict[str, str]) -> list[tuple[int, str, str]]:
    """``(version, name, sql)`` for every ``NNNN_name.sql`` in ``package``, in order."""
    return [(version, name, _fill(entry.read_text(encoding="utf-8"), macros))
            for version, name, entry in _migration_files(package)]


def migration_names(package: str) -> list[tuple[int, str]]:
    """``(version, name)`` of ``load_migrations``, without reading the files
    (all a check of the schema needs)."""
    return [(version, name) for version, name, _ in _migration_files(package)]


def _migration_files(package: str) -> list[tuple[int, str, Any]]:
    found = []
    for entry in resources.files(package).iterdir():
        m = _MIGRATION.match(entry.name)
        if m:
            found.append((int(m.group(1)), m.group(2), entry))
    found.sort(key=lambda f: f[0])
    versions = [v for v, _, _ in found]
    if versions != list(range(1, len(versions) + 1)):
        raise RuntimeError(f"{package}: migrations must be numbered 0001, 0002, ... without gaps")
    return found


_MIGRATION = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


def _fill(sql: str, macros: dict[str, str], *, check: bool = True) -> str:
    for key, value in macros.items():
        sql = sql.replace("{" + key + "}", value)
    if not check:
        return sql
    leftover = re.search(r"\{[a-z_]+\}", sql)
    if leftover:
        raise RuntimeError(f"unfilled macro {leftover.group(0)} in SQL")
    return sql
