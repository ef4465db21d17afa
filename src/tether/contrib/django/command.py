"""``manage.py tether_worker``: ``tether worker``'s command line (its options,
shared through ``tether.cli.worker_cmd``) for the project's TetherBackend,
whose tasks it registers instead of loading ``--app``."""

from __future__ import annotations

import logging
from typing import Any

import click
from django.db import connections
from django.tasks import task_backends

from ...cli.common import BadUsage, one_line_errors
from ...cli.worker_cmd import run_worker, worker_options
from ...logs import configure_worker_logging
from .backend import TetherBackend

__all__ = ["tether_worker"]


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--backend", "alias", default="default", show_default=True, metavar="ALIAS",
              help="The TASKS entry (a TetherBackend) whose tasks to run.")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@worker_options
@click.option("--processes", type=click.IntRange(min=1), default=1, show_default=True,
              help="Worker processes, each with --concurrency slots, under one supervisor that restarts them.")
def tether_worker(alias: str, debug: bool, processes: int, **options: Any) -> None:
    """Run a tether worker for this project's tasks until SIGTERM/SIGINT (first: finish running jobs;
    second: stop now), or with --burst until no job is due. It imports each installed app's tasks
    module and runs every task defined there with this backend; its queues default to the
    backend's QUEUES."""
    with one_line_errors(lambda: debug, "manage.py tether_worker --debug ..."):
        backend = task_backends[alias]
        if not isinstance(backend, TetherBackend):
            raise BadUsage(f"TASKS[{alias!r}] is {type(backend).__module__}.{type(backend).__name__}, "
                           "not tether.contrib.django.TetherBackend")
        _refuse_open_transaction(alias, backend)
        app = backend.worker_app()
        if not options["queues"] and backend.queues:
            options["queues"] = (",".join(sorted(backend.queues)),)
        _refuse_unknown_queues(alias, backend, options["queues"])
        if processes > 1:  # each child runs this backend's app (child.backend_app), in its own process
            from ...cli.processes import run_processes

            backend.close()
            code = run_processes(processes, app_ref=f"django TASKS[{alias!r}]", database=None, debug=debug,
                                 options=options, django=alias)
            if code:
                raise click.exceptions.Exit(code)
            return
        run_worker(app, f"django TASKS[{alias!r}]", database=None, configure_logging=_configure_logging, **options)
        backend.close()


def _configure_logging(level: str, fmt: str) -> None:
    """The worker's log under Django's ``LOGGING``: a project whose LOGGING
    gives the root logger handlers keeps its log as it is (its handlers, its
    format); else, ``tether worker``'s log on the root logger, less the records
    a stream handler of Django's has already written (the 'django' loggers'
    console handler, under DEBUG), so that each line is written once."""
    if logging.getLogger().handlers:
        return
    configure_worker_logging(level, fmt, once=True)


def _refuse_unknown_queues(alias: str, backend: TetherBackend, queues: tuple[str, ...]) -> None:
    """``-q`` may name only the backend's QUEUES (when it has any): a task is
    never enqueued on another, so a worker there would never run one."""
    asked = {q.strip() for item in queues for q in item.split(",") if q.strip()}
    unknown = sorted(asked - backend.queues) if backend.queues else []
    if unknown:
        raise BadUsage(f"{', '.join(map(repr, unknown))}: not a queue of TASKS[{alias!r}], whose QUEUES are "
                       f"{', '.join(sorted(backend.queues))}")


def _refuse_open_transaction(alias: str, backend: TetherBackend) -> None:
    """A worker in this process (``call_command``) inside a transaction on the
    jobs' database would never see the tasks enqueued in it: it claims on
    tether's own connection, which sees committed jobs only (and on SQLite it
    would wait for the transaction's write lock, then fail). Django's
    ``TestCase`` runs each test in such a transaction."""
    if connections[backend.database].in_atomic_block:
        raise BadUsage(
            f"tether_worker cannot run inside a transaction on the database {backend.database!r} (where "
            f"TASKS[{alias!r}] keeps its jobs): its worker reads committed jobs on its own connection, so the "
            "tasks enqueued in the transaction are not there yet. In tests, use django.test.TransactionTestCase, "
            "not TestCase (whose tests run in a transaction that never commits); elsewhere, commit first")
