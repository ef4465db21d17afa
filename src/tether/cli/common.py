"""What every command shares: clean errors, the console, and loading ``module:app``."""

from __future__ import annotations

import importlib
import logging
import math
import os
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from ..app import Tether
from ..config import Timers, parse_database_url
from ..errors import ConfigError, PayloadError, SchemaMissing, TetherError, UnknownTask
from ..logs import DRIVER_LOGGER
from ..numbers import BadNumber, parse_job_id
from ..transport import open_transport

__all__ = [
    "EXIT_FAILURE",
    "EXIT_USAGE",
    "PUBLISH_OPTION",
    "BadUsage",
    "CLIError",
    "CLIState",
    "JobId",
    "Seconds",
    "configure_app",
    "exit_code_for",
    "load_app",
    "make_console",
    "opened",
    "publish_through",
    "quiet_driver_logs",
    "require_database",
]

#: something went wrong with a request that was well-formed (no such job, a
#: finished job cannot be cancelled, the demo found a problem)
EXIT_FAILURE = 1
#: the request itself is wrong: bad flags, bad settings, bad --app, no schema
EXIT_USAGE = 2

#: width for tables when stdout is not a terminal (CI logs, pipes), unless COLUMNS says otherwise
PIPE_WIDTH = 120


class CLIError(click.ClickException):
    """A clear one-line message on stderr and exit code 1; never a traceback."""

    exit_code = EXIT_FAILURE


class BadUsage(CLIError):
    """Like CLIError, for requests that are wrong as given: exit code 2."""

    exit_code = EXIT_USAGE


def exit_code_for(exc: TetherError) -> int:
    """Settings, names and schema problems are the caller's to fix (2); a job in
    the wrong state or missing is a failed request (1)."""
    if isinstance(exc, (ConfigError, UnknownTask, PayloadError, SchemaMissing)):
        return EXIT_USAGE
    return EXIT_FAILURE


@contextmanager
def one_line_errors(debug: Callable[[], bool], rerun: str) -> Iterator[None]:
    """tether's own errors, and anything unexpected, as one clean line (a click
    error) unless ``debug()``; ``rerun`` is the command line that shows the
    traceback."""
    try:
        yield
    except (click.ClickException, click.exceptions.Exit, click.Abort):
        raise
    except TetherError as exc:
        if debug():
            raise
        error = BadUsage if exit_code_for(exc) == EXIT_USAGE else CLIError
        raise error(str(exc)) from None
    except Exception as exc:
        if debug():
            raise
        raise CLIError(f"{type(exc).__name__}: {exc} (run with `{rerun}` to see the traceback)") from None


@dataclass(frozen=True, slots=True)
class CLIState:
    database: str
    debug: bool


def make_console(*, stderr: bool = False) -> Console:
    """A rich console that stays readable when stdout is not a terminal: no
    colour codes, and a fixed generous width instead of rich's 80 columns.
    (rich is imported here, by the commands that print with it: a worker's
    start and ``tether --help`` never load its fifty modules.)"""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = None
    if not (hasattr(stream, "isatty") and stream.isatty()) and not os.environ.get("COLUMNS"):
        width = PIPE_WIDTH
    # emoji=False: a ":name:" in a task, a queue or an error stays as written (and rich's
    # table of emoji codes is never imported by `tether jobs`: issue 47)
    return Console(stderr=stderr, width=width, highlight=False, soft_wrap=False, emoji=False)


#: ``--transport`` for the commands that make jobs queued and due outside a
#: worker (enqueue, retry, dashboard, server): the worker's own setting and
#: variable, so that, with NATS, what they commit is published at once
PUBLISH_OPTION = click.option(
    "--transport", metavar="notify|poll|nats://HOST:PORT", envvar="TETHER_TRANSPORT",
    help="The transport your workers take job ids from (env TETHER_TRANSPORT, as for `tether worker`): with "
         "NATS, the jobs this command queues are published there once committed, so a worker takes them at "
         "once rather than at its next sweep.",
)


def publish_through(app: Tether, spec: str | None) -> None:
    """Give a command that only *publishes* (enqueue, retry, dashboard, server)
    the workers' transport; None keeps the app's own. No ack_wait check here:
    that setting concerns consumers, which this process never creates, and each
    worker checks it against its own timers."""
    if spec is None:
        return
    app.transport.close()
    app.transport = open_transport(spec)


@contextmanager
def opened(state: CLIState, *, create: bool = False, transport: str | None = None) -> Iterator[Tether]:
    """An app on ``--database`` for the admin commands, closed afterwards;
    ``transport`` is where it announces the jobs it queues (``publish_through``).

    Without ``create``, a SQLite file that does not exist is an error rather
    than a new empty file left behind in the working directory.
    """
    app = Tether(state.database)
    try:
        if not create:
            require_database(app)
        publish_through(app, transport)
        yield app
    finally:
        app.close()


def require_database(app: Tether) -> None:
    """SchemaMissing for a SQLite file that does not exist, before opening it
    would leave an empty file behind."""
    if app.dsn.backend == "sqlite" and not os.path.exists(app.dsn.url):
        raise SchemaMissing(
            f"no tether database at {os.path.abspath(app.dsn.url)}: run `tether migrate` to create one "
            "(or point --database / TETHER_DATABASE_URL at an existing one)"
        )




@contextmanager
def quiet_driver_logs() -> Iterator[None]:
    """The PostgreSQL pool logs every failed connection attempt; a one-shot
    command reports the failure itself, once. (Workers turn those logs back on.)"""
    logger = logging.getLogger(DRIVER_LOGGER)
    saved = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(saved)


# -- module:app -----------------------------------------------------------------------
def load_app(ref: str) -> Tether:
    """Import the Tether named by ``module:attribute`` (attribute defaults to ``app``).

    Like uvicorn, the working directory goes on ``sys.path`` first so that a
    project's own modules import without installing the project.
    """
    module_name, _, attr = ref.partition(":")
    attr = attr or "app"
    if not module_name or not all(part.isidentifier() for part in [*module_name.split("."), *attr.split(".")]):
        raise BadUsage(f"--app {ref!r} is not of the form module:attribute (e.g. myproject.jobs:app)")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise BadUsage(
                f"--app {ref!r}: no module named {exc.name!r} (looked in {cwd} and on sys.path)") from None
        raise BadUsage(f"--app {ref!r}: importing {module_name!r} failed: {exc}{_where(exc)}") from None
    except (Exception, SystemExit) as exc:
        if _debug():
            raise
        raise BadUsage(
            f"--app {ref!r}: importing {module_name!r} raised {type(exc).__name__}: {exc}{_where(exc)}") from None
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            found = sorted(k for k, v in vars(module).items() if isinstance(v, Tether))
            hint = f"; it has {', '.join(f'{module_name}:{k}' for k in found)}" if found else ""
            raise BadUsage(
                f"--app {ref!r}: module {module_name!r} has no attribute {attr!r}{hint}") from None
    if not isinstance(obj, Tether):
        raise BadUsage(f"--app {ref!r} is of type {type(obj).__name__}, not a tether.Tether")
    return obj


def configure_app(
    app: Tether,
    *,
    url: str | None = None,
    lease_ttl: float | None = None,
    heartbeat_interval: float | None = None,
    reaper_interval: float | None = None,
    transport: str | None = None,
) -> None:
    """Point the app at another database and/or override its timers or its
    transport, before anything opens the store or builds a worker.

    Tasks stay registered on the user's app; new timers are validated (misordered
    ones raise ConfigError) and so is every task's own ``lease_ttl`` against them.
    """
    if any(v is not None for v in (lease_ttl, heartbeat_interval, reaper_interval)):
        old = app.timers
        try:
            timers = Timers(
                lease_ttl=old.lease_ttl if lease_ttl is None else lease_ttl,
                heartbeat_interval=old.heartbeat_interval if heartbeat_interval is None else heartbeat_interval,
                reaper_interval=old.reaper_interval if reaper_interval is None else reaper_interval,
            )
        except ConfigError as exc:
            raise ConfigError(f"invalid timers: {exc}") from None
        for task in app.tasks.values():
            task.options.checked(timers, f"task {task.name!r}")
        app.timers = timers
    if transport is not None:
        app.transport.close()
        app.transport = open_transport(transport)
    app.transport.check(app.timers)  # the timers may have changed under it
    if url is not None:
        dsn = parse_database_url(url)
        app.close()  # in case the app's module already opened its own database
        app.dsn = dsn


if TYPE_CHECKING:
    from rich.console import Console

    _FloatParam = click.ParamType[float, Any]
    _IntParam = click.ParamType[int, Any]
else:  # click < 8.2 has no generic ParamType
    _FloatParam = _IntParam = click.ParamType


class Seconds(_FloatParam):
    """A finite, positive number of seconds (click's FLOAT lets nan and inf through)."""

    name = "seconds"

    def __init__(self, *, allow_zero: bool = False) -> None:
        self.allow_zero = allow_zero

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not self.allow_zero):
            self.fail(f"{value!r} must be a {'non-negative' if self.allow_zero else 'positive'} "
                      "finite number of seconds", param, ctx)
        return seconds


class Size(_IntParam):
    """A size in bytes: a number, or with a unit (``500MB``, ``2GB``, ``200MiB``; units of 1024)."""

    name = "size"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        from ..worker.isolation import parse_size

        try:
            size = parse_size(str(value), param.name if param is not None and param.name else "size")
        except ConfigError as exc:
            self.fail(str(exc), param, ctx)
        assert size is not None
        return size


class JobId(_IntParam):
    """A job id: ASCII digits, 1 to 2**63-1 (``numbers.parse_job_id``; click's
    INT would read "٣" as 3 and hand 2**70 to the database)."""

    name = "job_id"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        try:
            return parse_job_id(value if isinstance(value, str) else repr(value))
        except BadNumber as exc:
            self.fail(str(exc), param, ctx)


def _where(exc: BaseException) -> str:
    """`` (at file:line)`` of where an import blew up, for the one-line message."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f" (at {exc.filename}:{exc.lineno})"
    # The innermost frame of the user's code: not importlib's, not tether's own.
    ours = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        path = os.path.abspath(frame.filename)
        if "importlib" not in path and not path.startswith(ours + os.sep):
            return f" (at {frame.filename}:{frame.lineno})"
    return ""


def _debug() -> bool:
    ctx = click.get_current_context(silent=True)
    state = ctx.find_object(CLIState) if ctx is not None else None
    return bool(state and state.debug)

