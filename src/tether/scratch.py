"""A private, throwaway database for one app object: what
``Tether("sqlite:///:memory:")`` gives, for tests.

Each connection to a real SQLite ``:memory:`` database is a database of its
own, and a worker uses several (its loop's, its database threads', its
heartbeat's), so the memory URL stands for a SQLite file in a new temporary
directory instead: every connection of that app (its workers, ``drain()``)
sees the same database; no other process does. The directory is removed when
the app object is collected, or at exit.
"""

from __future__ import annotations

import weakref

__all__ = ["MEMORY_URL", "scratch_database"]

MEMORY_URL = "sqlite:///:memory:"


def scratch_database(owner: object, url: str | None) -> tuple[str | None, str | None]:
    """``(url to open, temporary directory)``: for MEMORY_URL a file in a new
    directory that lives as long as ``owner``; any other URL as it is, and None."""
    if url is None or url.strip() != MEMORY_URL:
        return url, None
    import shutil  # (here: every other app, a worker's included, is spared their imports)
    import tempfile

    folder = tempfile.mkdtemp(prefix="tether-memory-")
    weakref.finalize(owner, shutil.rmtree, folder, True)
    return f"sqlite:///{folder}/tether.db", folder
