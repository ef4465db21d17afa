"""tether's pytest plugin, registered through the ``pytest11`` entry point
(under this module's name, so ``pytest_plugins = ["tether.testing.pytest_plugin"]``
or ``-p tether.testing.pytest_plugin`` also work, once, without the entry point).

Fixtures:

- ``tether_app``: a ``Tether`` on a fresh, migrated SQLite file in the test's
  temporary directory. With the ini option ``tether_app = "myproject.tasks:app"``
  it is *your* app, its tasks registered, pointed at that fresh database for
  the test and back afterwards; without it, a new app to register tasks on.

The assertions (``assert_enqueued``, ``assert_not_enqueued``, ``enqueued``) and
``context()`` are plain functions in ``tether.testing``.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..app import Tether
from . import temporary_database

__all__ = ["load_app", "pytest_addoption", "tether_app"]

INI_NAME = "tether_app"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(INI_NAME, "module:attribute of your Tether app; the tether_app fixture then gives it, on a fresh "
                            "SQLite database for each test", default="")


def load_app(spec: str) -> Tether:
    """``"package.module:attribute"`` -> that Tether object."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise pytest.UsageError(f"{INI_NAME} = {spec!r}: write it as package.module:attribute")
    module = importlib.import_module(module_name)
    if not hasattr(module, attribute):
        apps = [name for name, value in vars(module).items() if isinstance(value, Tether)]
        hint = f"; it has {', '.join(f'{module_name}:{a}' for a in apps)}" if apps else ""
        raise pytest.UsageError(f"{INI_NAME} = {spec!r}: module {module_name!r} has no attribute {attribute!r}{hint}")
    app = getattr(module, attribute)
    if not isinstance(app, Tether):
        raise pytest.UsageError(f"{INI_NAME} = {spec!r} is {type(app).__name__}, not a Tether app")
    return app


@pytest.fixture
def tether_app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Tether]:
    """A Tether app on a fresh, migrated SQLite database (see the module's docstring)."""
    url = f"sqlite:///{tmp_path / 'tether-test.db'}"
    spec = str(request.config.getini(INI_NAME) or "")
    if spec:
        with temporary_database(load_app(spec), url) as app:
            yield app
        return
    app = Tether(url)
    app.migrate()
    try:
        yield app
    finally:
        app.close()
