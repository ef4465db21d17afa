"""Stores: the seam to a database. ``open_store`` is the one place that names a
concrete backend; everything above talks to ``Store``."""

from __future__ import annotations

from ..config import DatabaseURL, parse_database_url
from .base import Listener, Store

__all__ = ["Listener", "Store", "open_store"]


def open_store(url: str | DatabaseURL | None = None, *, token: str | None = None) -> Store:
    """A store for a database URL; ``token`` is for a tether server (http/https)."""
    dsn = url if isinstance(url, DatabaseURL) else parse_database_url(url)
    if dsn.backend == "http":
        from .http.store import HttpStore

        return HttpStore(dsn, token=token)
    if dsn.backend == "sqlite":
        from .sqlite.store import SQLiteStore

        return SQLiteStore(dsn)
    from .postgres.store import PostgresStore

    return PostgresStore(dsn)
