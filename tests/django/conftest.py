"""A real Django project (tests/django/project) on both of tether's
databases: a SQLite file and a fresh PostgreSQL database made for the
session (on TETHER_TEST_PG_URL's server, else 127.0.0.1:5432 as postgres)
and dropped after. ``manage.py migrate`` creates the tables of both;
``backend`` runs each test on the TASKS entry of each ("default": SQLite,
"pg": PostgreSQL). Needs Django 6 (Python 3.12+): scripts/test runs these
in .venv-django."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urlsplit

import psycopg
import pytest

PROJECT = Path(__file__).parent / "project"
PG_URL = os.environ.get("TETHER_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


def _pg_env(name: str) -> dict[str, str]:
    parts = urlsplit(PG_URL)
    return {"TETHER_DJANGO_PG_NAME": name, "TETHER_DJANGO_PG_HOST": parts.hostname or "127.0.0.1",
            "TETHER_DJANGO_PG_PORT": str(parts.port or 5432),
            "TETHER_DJANGO_PG_USER": unquote(parts.username or "postgres"),
            "TETHER_DJANGO_PG_PASSWORD": unquote(parts.password or "")}


def manage(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=PROJECT, capture_output=True, text=True,
                          timeout=timeout, check=check)


def start_worker(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "manage.py", "tether_worker", *args], cwd=PROJECT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM) -> str:
    if proc.poll() is None:
        proc.send_signal(sig)
    out, _ = proc.communicate(timeout=60)
    return out


def pytest_configure(config: pytest.Config) -> None:
    """The databases, before Django is set up in this process."""
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"tether-django-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)
    name = f"tether_django_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    config._tether_pg_name = name  # type: ignore[attr-defined]
    os.environ.update({"TETHER_DJANGO_SQLITE": str(tmp / "db.sqlite3"), **_pg_env(name),
                       "DJANGO_SETTINGS_MODULE": "testproject.settings"})
    sys.path.insert(0, str(PROJECT))
    for alias in ("default", "pg"):
        done = manage("migrate", "--database", alias, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
    import django

    django.setup()


def pytest_unconfigure(config: pytest.Config) -> None:
    name = getattr(config, "_tether_pg_name", None)
    if name is None:
        return
    from django.db import connections
    from django.tasks import task_backends

    for backend in task_backends.all():
        backend.close()
    connections.close_all()
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["default", "pg"], ids=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    """The TASKS alias a test runs on."""
    return str(request.param)


@pytest.fixture
def burst() -> Iterator[object]:
    """``burst(alias, *queues)``: a burst worker process on those queues, to its end."""
    def run(alias: str, *queues: str, extra: tuple[str, ...] = ()) -> str:
        done = manage("tether_worker", "--backend", alias, "--burst", "-q", ",".join(queues), "--no-prefetch",
                      *extra, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout + done.stderr

    yield run


def wait_for(predicate: object, timeout: float = 30.0, every: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(every)
    raise AssertionError("timed out waiting")
