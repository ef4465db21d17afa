"""``tether dashboard``: a web view of a tether database (the optional
``dashboard`` extra: Starlette, uvicorn, Jinja2)."""

from __future__ import annotations

from .server import create_app

__all__ = ["create_app"]
