"""The SQLite store's schema: migrations (numbered files, recorded in
``tether_migrations``, applied in one write transaction), the check that a
database is current, and what it holds (for the migrations test)."""

from __future__ import annotations

import sqlite3
from contextlib import AbstractContextManager

from ...errors import SchemaMissing

__all__ = ["MISSING", "SQLiteSchema"]

MISSING = (
    "tether's tables are missing from {path}: run `tether migrate` "
    "(or app.migrate()) before starting workers or enqueueing"
)


class SQLiteSchema:
    """Schema methods of ``SQLiteStore``; the store supplies the hooks below."""

    path: str
    _migrations: list[tuple[int, str, str]]

    def _use(self) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError

    def _write(self) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError

    def migrate(self) -> list[str]:
        applied: list[str] = []
        with self._write() as conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS tether_migrations ("
                "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
            )
            done = {r[0] for r in conn.execute("SELECT version FROM tether_migrations")}
            for version, name, sql in self._migrations:
                if version in done:
                    continue
                for statement in _split(sql):
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO tether_migrations (version, name, applied_at) "
                    "VALUES (?, ?, (julianday('now') - 2440587.5) * 86400.0)",
                    (version, name),
                )
                applied.append(f"{version:04d}_{name}")
        return applied

    def destroy(self) -> None:
        with self._write() as conn:
            tables = [r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'tether\\_%' ESCAPE '\\'")]
            for table in tables:
                conn.execute(f'DROP TABLE "{table}"')

    def integrity_check(self) -> list[str]:
        """PRAGMA integrity_check: after kills in the middle of writes, the file
        must still be a consistent database."""
        with self._use() as conn:
            rows = [r[0] for r in conn.execute("PRAGMA integrity_check").fetchall()]
        return [] if rows == ["ok"] else rows

    def check_schema(self) -> None:
        try:
            with self._use() as conn:
                rows = conn.execute("SELECT version FROM tether_migrations").fetchall()
        except sqlite3.OperationalError:
            raise SchemaMissing(MISSING.format(path=self.path)) from None
        have = {r[0] for r in rows}
        missing = [f"{v:04d}_{n}" for v, n, _ in self._migrations if v not in have]
        if missing:
            raise SchemaMissing(f"tether schema in {self.path} is behind ({', '.join(missing)}): run `tether migrate`")

    def schema_objects(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        with self._use() as conn:
            names = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'tether_%' "
                                 "ORDER BY name").fetchall()
            for (table,) in names:
                out[f"table:{table.removeprefix('tether_')}"] = [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]
            out["indexes"] = [
                r[0].removeprefix("tether_")
                for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE 'tether_%' "
                                      "AND sql IS NOT NULL ORDER BY name")
            ]
        return out


def _split(script: str) -> list[str]:
    """Split a migration into statements (our migrations hold no ';' in
    literals). A CREATE TRIGGER's body holds statements of its own: it ends at
    its ``END;`` line."""
    out, buf = [], []
    for line in script.splitlines():
        if line.strip().startswith("--"):
            continue
        buf.append(line)
        in_trigger = "\n".join(buf).lstrip().upper().startswith("CREATE TRIGGER")
        if (line.strip().upper() == "END;") if in_trigger else line.rstrip().endswith(";"):
            out.append("\n".join(buf))
            buf = []
    tail = "\n".join(buf).strip()
    if tail:
        out.append(tail)
    return [s for s in out if s.strip()]
