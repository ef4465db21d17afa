"""``tether server``: an HTTP API over a store, for workers and producers that
hold no database credentials (needs the ``server`` extra: Starlette, uvicorn)."""

from __future__ import annotations

from .app import DEFAULT_MAX_BODY, create_app
from .auth import TokenTable, parse_tokens
from .workers import WorkerPolicy

__all__ = ["DEFAULT_MAX_BODY", "TokenTable", "WorkerPolicy", "create_app", "parse_tokens"]
