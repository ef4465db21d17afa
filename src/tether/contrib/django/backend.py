"""``TetherBackend``: Django's Tasks backend whose jobs are tether's, in the
project's own database.

An enqueue goes through Django's connection to that database: inside
``transaction.atomic()`` it joins the transaction (the job exists once it
commits, never after a rollback); outside one, it is its own small
transaction. Results are read through tether's own connections (committed
jobs), or, inside ``atomic()``, through Django's: the transaction's own
uncommitted jobs included, as Django's database backend would show them. The tether app (``backend.app``) points at the same
database (``dsn.database_url``); each task is registered on it under its
``module_path`` when first enqueued, and a worker registers every task of
the backend that importing the apps' ``tasks`` modules defined.
"""

from __future__ import annotations

import inspect
import json
import secrets
import threading
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime
from importlib import import_module
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.tasks import TaskResult, TaskResultStatus, task_backends
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.exceptions import TaskResultDoesNotExist
from django.tasks.signals import task_enqueued
from django.utils import timezone
from django.utils.json import normalize_json
from django.utils.module_loading import autodiscover_modules

from ...app import Tether
from ...errors import ArgumentsError, ConfigError, PayloadError
from ...model import Job
from ...task import Task as TetherHandlerTask
from .dsn import database_url
from .handler import make_handler
from .results import STATUS, TOKEN, parse_result_id, payload, task_result
from .task import TETHER_OPTIONS, TetherTask, tether_options

__all__ = ["TetherBackend", "migrate_database", "tether_backends"]

#: every Task defined with a TetherBackend in this process, by path (the first
#: seen): any TetherBackend's worker runs them, since ``using(backend=...)``
#: may send a task to another backend than the one it was defined with
_DEFINED: dict[str, Any] = {}
_DEFINED_LOCK = threading.Lock()


class TetherBackend(BaseTaskBackend):
    task_class = TetherTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        options = dict(self.options)
        #: the DATABASES alias the jobs live in
        self.database: str = options.pop("database", DEFAULT_DB_ALIAS)
        self._schema: str | None = options.pop("schema", None)
        #: tether options by task path: {"myapp.tasks.send": {"max_attempts": 5}}
        self.task_options: dict[str, dict[str, Any]] = _task_options(alias, options.pop("task_options", {}))
        #: modules a worker imports besides the apps' ``tasks`` modules
        self.task_modules: list[str] = _task_modules(alias, options.pop("task_modules", []))
        self.tether_options = options
        self._lock = threading.RLock()
        self._app: Tether | None = None
        self._url = ""

    # -- the tether app ---------------------------------------------------------------
    @property
    def url(self) -> str:
        """tether's URL of the database the jobs live in (Django's settings for it, now)."""
        return database_url(self.database, connections[self.database].settings_dict, self._schema)

    @property
    def app(self) -> Tether:
        """The tether app on the jobs' database (a new one should its settings change,
        as when Django's test runner switches to a test database)."""
        url = self.url
        with self._lock:
            if self._app is None or self._url != url:
                if self._app is not None:
                    self._app.close()
                self._app, self._url = Tether(url, **self.tether_options), url
            return self._app

    def close(self) -> None:
        with self._lock:
            if self._app is not None:
                self._app.close()
                self._app = None

    # -- tasks ------------------------------------------------------------------------------
    def validate_task(self, task: Any) -> None:
        super().validate_task(task)
        with _DEFINED_LOCK:
            _DEFINED.setdefault(task.module_path, task)

    def registered(self, path: str) -> Any:
        """The Task of this backend named ``path``, or None: one this process has
        defined, after importing the apps' ``tasks`` modules if need be (a job's
        name is never imported as given)."""
        found = _DEFINED.get(path)
        if found is None:
            self.discover()
            found = _DEFINED.get(path)
        return found

    def discover(self) -> list[Any]:
        """Import every installed app's ``tasks`` module (and ``task_modules``):
        the tasks they define with this backend, by path."""
        autodiscover_modules("tasks")
        for module in self.task_modules:
            import_module(module)
        with _DEFINED_LOCK:
            return [_DEFINED[p] for p in sorted(_DEFINED)]

    def handler_task(self, task: Any) -> TetherHandlerTask[Any, Any]:
        """The tether task that runs ``task``, registered on the app under its path."""
        app = self.app
        name = task.module_path
        with self._lock:
            found = app.tasks.get(name)
            if found is None:
                with _DEFINED_LOCK:
                    first = _DEFINED.setdefault(name, task)
                options = tether_options(first, self.task_options.get(name, {}))
                handler = make_handler(self, first, options.get("retry_on"), app.max_payload_bytes)
                found = app.task(name=name, queue=first.queue_name, priority=first.priority, **options)(handler)
            return found

    def unknown_task_options(self) -> list[str]:
        """The paths in ``OPTIONS["task_options"]`` that name no task (a typo, or
        a task that is gone), once the apps' ``tasks`` modules are imported."""
        known = {task.module_path for task in self.discover()}
        return sorted(set(self.task_options) - known)

    def worker_app(self) -> Tether:
        """The app with every task of this backend registered, for a worker
        (ConfigError if ``task_options`` names a task that is not defined)."""
        unknown = self.unknown_task_options()
        if unknown:
            raise ConfigError(f"TASKS[{self.alias!r}]['OPTIONS']['task_options'] names no task: "
                              f"{', '.join(map(repr, unknown))} (a task is named by its module path, as "
                              "myapp.tasks.send_welcome, and defined in an installed app's tasks module or in "
                              "OPTIONS['task_modules'])")
        for task in self.discover():
            self.handler_task(task)
        return self.app

    def read_job(self, job_id: int, token: str | None = None, result_id: str | None = None) -> Job:
        """The job ``job_id``, or TaskResultDoesNotExist; with ``result_id``,
        only if it is the job that result id was given for (its ``token``)."""
        conn = connections[self.database]
        if conn.in_atomic_block:  # through the transaction: a job it enqueued is there before the commit
            conn.ensure_connection()
            job = self.app.get_job(job_id, connection=conn.connection)
        else:
            job = self.app.get_job(job_id)
        if job is None:
            raise TaskResultDoesNotExist(f"no task result {result_id!r}" if result_id else f"no job {job_id}")
        if result_id is not None:
            kept = (job.meta or {}).get(TOKEN)
            # another job's id, given again after a rollback (SQLite's AUTOINCREMENT rolls back with it)
            if (kept is None) != (token is None) or not secrets.compare_digest(str(kept), token or ""):
                raise TaskResultDoesNotExist(f"no task result {result_id!r} (job {job_id} is another task's)")
        return job

    def job_id(self, result_id: str) -> int:
        """tether's job id of the result ``result_id`` (as ``tether job ID`` and
        the dashboard show it), or TaskResultDoesNotExist."""
        return parse_result_id(result_id)[0]

    # -- producing ----------------------------------------------------------------------------
    def enqueue(self, task: Any, args: Iterable[Any], kwargs: dict[str, Any]) -> TaskResult:
        self.validate_task(task)
        try:  # as Django's TaskResult checks them: its TypeError("Unsupported type: ..."), a tuple made a list
            positional: list[Any] = normalize_json(list(args))
            kwargs = normalize_json(dict(kwargs))
        except (TypeError, ValueError) as exc:
            raise TaskArgumentsError(f"{exc} (the arguments of task {task.module_path!r} must be "
                                     "JSON: dicts, lists, str, int, float, bool, None)") from None
        _check_signature(task, positional, kwargs)
        run_after = _aware(task.run_after)
        options: dict[str, Any] = {"queue": task.queue_name, "priority": task.priority, "run_at": run_after}
        for name in ("dedup_key", "dedup_for", "expires", "max_attempts", "timeout"):
            value = getattr(task, name, None)
            if value is not None:
                options[name] = value
        handler = self.handler_task(task)
        conn = connections[self.database]
        try:
            with transaction.atomic(using=self.database):
                conn.ensure_connection()
                call = handler.using(connection=conn.connection, **options)
                # the result id's token, kept in the job's meta: a job id can be given again (SQLite's
                # AUTOINCREMENT rolls back with a rolled-back enqueue), a token never is
                new = replace(call.task._new_job(payload(positional, kwargs, run_after), call.options),
                              meta_json=json.dumps({TOKEN: secrets.token_hex(8)}))
                job_id = self.app._enqueue([new], call.connection)[0]
                # the row as get_result() will read it (its created_at, the database's clock)
                job = self.read_job(job_id)
        except PayloadError as exc:  # Django's contract: arguments that are not JSON raise TypeError
            raise TaskArgumentsError(str(exc)) from exc
        result = task_result(task, job, self.alias, duplicate=getattr(job_id, "duplicate", False))
        task_enqueued.send(type(self), task_result=result)
        return result

    # -- results ----------------------------------------------------------------------------------
    def get_result(self, result_id: str) -> TaskResult:
        job_id, token = parse_result_id(result_id)
        job = self.read_job(job_id, token, result_id)
        task = self.registered(job.task)
        if task is None:
            raise TaskResultDoesNotExist(f"job {job_id} is not a task of the backend {self.alias!r} "
                                         f"(its task is {job.task!r})")
        return task_result(task, job, self.alias)

    def cancel(self, result_id: str) -> TaskResultStatus:
        """Cancel a task: a READY one fails at once, a RUNNING one is told at its
        worker's next heartbeat (an ``async def`` task is cancelled, a ``def``
        one sees ``context.job.cancelled``). Returns the status now;
        TaskResultDoesNotExist for an id that names no result here."""
        job_id, token = parse_result_id(result_id)
        self.read_job(job_id, token, result_id)  # this result's job, not another's given its id again
        return STATUS[self.app.cancel(job_id)]


class TaskArgumentsError(PayloadError, TypeError):
    """A task's arguments are not JSON (or too large): a ``TypeError``, as
    Django's Tasks documentation says, and tether's ``PayloadError``.
    (Arguments that do not fit the task's signature: ``tether.ArgumentsError``,
    a ``PayloadError`` and a ``TypeError`` too.)"""


def _task_options(alias: str, given: Any) -> dict[str, dict[str, Any]]:
    """``OPTIONS["task_options"]``, checked: task paths to dicts of tether's options."""
    where = f"TASKS[{alias!r}]['OPTIONS']['task_options']"
    if not isinstance(given, dict):
        raise ImproperlyConfigured(f"{where} must be a dict of task paths to options, got {given!r}")
    for path, options in given.items():
        if not isinstance(options, dict):
            raise ImproperlyConfigured(f"{where}[{path!r}] must be a dict of options, got {options!r}")
        wrong = sorted(set(options) - set(TETHER_OPTIONS))
        if wrong:
            raise ImproperlyConfigured(f"{where}[{path!r}]: unknown option {', '.join(map(repr, wrong))} "
                                       f"(tether's task options: {', '.join(TETHER_OPTIONS)})")
    return {path: dict(options) for path, options in given.items()}


def _task_modules(alias: str, given: Any) -> list[str]:
    """``OPTIONS["task_modules"]``, checked: a list of module paths to import."""
    where = f"TASKS[{alias!r}]['OPTIONS']['task_modules']"
    if isinstance(given, str) or not isinstance(given, list | tuple):
        raise ImproperlyConfigured(f"{where} must be a list of module paths, got {given!r}")
    for module in given:
        if not isinstance(module, str) or not all(part.isidentifier() for part in module.split(".")):
            raise ImproperlyConfigured(f"{where}: {module!r} is not a module path (as myapp.jobs): a worker "
                                       "imports each module, and registers the tasks it defines")
    return list(given)


def _check_signature(task: Any, args: list[Any], kwargs: dict[str, Any]) -> None:
    leading = [None] if task.takes_context else []
    try:
        inspect.signature(task.func).bind(*leading, *args, **kwargs)
    except TypeError as exc:
        raise ArgumentsError(f"arguments do not fit task {task.module_path!r}: {exc}") from None


def _aware(moment: datetime | None) -> datetime | None:
    if moment is None or timezone.is_aware(moment):
        return moment
    aware: datetime = timezone.make_aware(moment)
    return aware


def tether_backends() -> list[TetherBackend]:
    """The project's TetherBackends (TASKS entries of this class)."""
    return [b for b in (task_backends[alias] for alias in getattr(settings, "TASKS", {}))
            if isinstance(b, TetherBackend)]


def migrate_database(alias: str) -> list[str]:
    """tether's migrations on the database ``alias``, once for each tether
    database (URL) whose backend keeps its jobs there."""
    applied: list[str] = []
    done: set[str] = set()
    for backend in tether_backends():
        if backend.database == alias and backend.url not in done:
            done.add(backend.url)
            applied += backend.app.migrate()
    return applied
