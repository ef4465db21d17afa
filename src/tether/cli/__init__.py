"""The ``tether`` command line: migrate, run workers, enqueue, inspect and the demo.

The CLI is a face: it talks to a :class:`tether.Tether` and its store interface,
never to a concrete backend. ``main`` is the console entry point.
"""

from __future__ import annotations

from .main import cli, main

__all__ = ["cli", "main"]
