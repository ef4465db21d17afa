"""tether's database URL from a Django database's settings, so that the
backend's app and Django's connection name the same database."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from django.core.exceptions import ImproperlyConfigured

__all__ = ["database_url"]


def database_url(alias: str, settings: Mapping[str, Any], schema: str | None = None) -> str:
    """``sqlite:////abs/path.db`` for ``django.db.backends.sqlite3`` (NAME, made
    absolute), ``postgresql://user:password@host:port/name`` for
    ``django.db.backends.postgresql``; ``schema``: the PostgreSQL schema of
    tether's tables (tether's default, ``tether``, when None)."""
    engine = str(settings.get("ENGINE", ""))
    name = str(settings.get("NAME") or "")
    if engine.endswith("sqlite3"):
        if not name or name == ":memory:" or "mode=memory" in name:
            raise ImproperlyConfigured(
                f"DATABASES[{alias!r}] is an in-memory SQLite database, which tether's workers (other "
                "processes) cannot reach: use a file (in tests, set DATABASES[...]['TEST']['NAME'] to a file)")
        if name.startswith("file:"):
            raise ImproperlyConfigured(f"DATABASES[{alias!r}]: tether needs a plain file path as NAME, got {name!r}")
        return "sqlite:///" + os.path.abspath(name)
    if "postgresql" in engine or "postgis" in engine:
        user = quote(str(settings.get("USER") or ""), safe="")
        password = quote(str(settings.get("PASSWORD") or ""), safe="")
        host = str(settings.get("HOST") or "")
        port = str(settings.get("PORT") or "")
        auth = f"{user}:{password}@" if password else f"{user}@" if user else ""
        query: list[str] = []
        if host.startswith("/"):  # a Unix socket directory
            query.append(f"host={quote(host, safe='/')}")
            host = ""
        netloc = auth + host + (f":{port}" if port else "")
        if schema is not None:
            query.append(f"schema={quote(schema, safe='')}")
        return f"postgresql://{netloc}/{quote(name, safe='')}" + (f"?{'&'.join(query)}" if query else "")
    raise ImproperlyConfigured(
        f"DATABASES[{alias!r}] uses {engine!r}: tether's Django backend runs on SQLite "
        "(django.db.backends.sqlite3) and PostgreSQL (django.db.backends.postgresql)")
