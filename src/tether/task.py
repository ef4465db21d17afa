"""A registered task: the options of the jobs it enqueues (``JobOptions``),
the handler it runs, and the typed enqueue API (``Task``, and ``TaskCall``:
the task with per-call job options, from ``task.using(...)``).

The job options were named ``TaskOptions`` (the record) and ``TaskKeywords``
(``@app.task``'s keywords) before issue 48; both old names stay as aliases.

A task enqueues through the app that registered it, which it sees only as a
``TaskHost`` (the app's enqueue and its limits): the app imports this module,
not the reverse."""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, NoReturn, ParamSpec, Protocol, TypedDict, TypeVar

from . import convert
from .config import DEFAULT_BACKOFF_BASE, DEFAULT_MAX_ATTEMPTS, DEFAULT_QUEUE, Timers, check_when, validate_queue
from .context import JobContext
from .errors import ArgsMisfit, ArgumentsError, ConfigError, PayloadError
from .key_patterns import check_limit_key, key_of_args
from .model import JobId, NewJob
from .numbers import parse_age
from .payload import check_key, dump_json
from .search import check_meta, check_tags, merge_tags, tags_json
from .spec import JobSpec, stamped
from .store import Store

__all__ = ["JobDefaults", "JobOptions", "JobSpec", "Task", "TaskCall", "TaskHost", "TaskKeywords", "TaskOptions"]

P = ParamSpec("P")
R = TypeVar("R")


class TaskHost(Protocol):
    """What a task needs of the app that registered it."""

    timers: Timers
    max_payload_bytes: int

    @property
    def store(self) -> Store: ...

    def _enqueue(self, jobs: list[NewJob], connection: object = None) -> list[JobId]: ...

    def _enqueue_async(self, jobs: list[NewJob], connection: object = None) -> Awaitable[list[JobId]]: ...

    enqueue_middlewares: list[Callable[[JobSpec], JobSpec]]


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


#: the longest dedup window or expiry: the 100 years a delay may take
_MAX_WINDOW = 100 * 365 * 86400.0


def _duration(value: object, what: str) -> float:
    """Seconds from a duration (parse_age: "10m", "1h", seconds, a timedelta),
    at most a century; ConfigError naming ``what`` otherwise."""
    seconds = parse_age(value, what)
    if seconds > _MAX_WINDOW:
        raise ConfigError(f"{what} must be at most 100 years, got {value!r}")
    return seconds



class JobDefaults(TypedDict, total=False):
    """The job options ``@app.task`` takes as keywords (the defaults of its
    jobs), which ``@app.periodic`` passes on to it: the ones a caller gave,
    and only those."""

    queue: str
    priority: int
    max_attempts: int
    lease_ttl: float | None
    timeout: float | None
    retry_backoff: float | Callable[[int], float]
    retry_on: type[BaseException] | tuple[type[BaseException], ...] | None
    #: the tags of every job of the task; a call's tags (``.using(tags=...)``) add to them
    tags: Sequence[str]
    #: "thread" (default) or "process": where a def handler runs (``tether.handlers``)
    isolation: str
    #: the key per-key limits count a job under: a string, or a callable of the job's args
    limit_key: str | Callable[..., str] | None


@dataclass(frozen=True, slots=True)
class JobOptions:
    """The options of a task's jobs: a task's defaults (``@app.task(...)``),
    overridden per call by ``task.using(...)``."""

    queue: str = DEFAULT_QUEUE
    priority: int = 0  # higher runs first
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    lease_ttl: float | None = None  # None: the worker's lease_ttl
    timeout: float | None = None  # per attempt; None: no limit
    #: seconds before the first retry, doubling; or a callable (attempt) -> seconds
    retry_backoff: float | Callable[[int], float] = DEFAULT_BACKOFF_BASE
    delay: float = 0.0
    run_at: datetime | None = None
    dedup_key: str | None = None
    #: exceptions worth another attempt; any other ends the job dead at once (None: all)
    retry_on: tuple[type[BaseException], ...] | None = None
    #: at most one job with this key runs at a time, across every worker (the others wait queued)
    exclusive_key: str | None = None
    #: the job's meta: a JSON object of the caller's (``.using(meta=...)``; ``ctx.meta``)
    meta: Mapping[str, Any] | None = None
    #: the job's tags: the task's (``@app.task(tags=...)``) and the call's (``ctx.tags``)
    tags: tuple[str, ...] = ()
    #: the dedup_key stays taken this long after the job ended ("1h", seconds or a timedelta)
    dedup_for: float | str | timedelta | None = None
    #: a job not started within this long of its enqueue never starts (ends cancelled, outcome expired)
    expires: float | str | timedelta | None = None
    #: a job not started by then never starts (timezone-aware)
    expires_at: datetime | None = None
    #: the key ``app.configure_limit``'s per-key limits count the job under: a
    #: string, or a callable the producer calls with the job's args at enqueue
    limit_key: str | Callable[..., str] | None = None

    @property
    def backoff_base(self) -> float:
        """The backoff base a job or schedule row stores: a callable
        ``retry_backoff`` stays with the task on the worker (worker/policy.py),
        so the row holds the default."""
        return DEFAULT_BACKOFF_BASE if callable(self.retry_backoff) else self.retry_backoff

    def checked(self, timers: Timers, where: str) -> JobOptions:
        validate_queue(self.queue)
        if (not isinstance(self.priority, int) or isinstance(self.priority, bool)
                or not -(2**31) <= self.priority <= 2**31 - 1):  # a 32-bit int, as the column and the server take
            raise ConfigError(f"{where}: priority must be an int from -2147483648 to 2147483647, got {self.priority!r}")
        if not isinstance(self.max_attempts, int) or isinstance(self.max_attempts, bool) or self.max_attempts < 1:
            raise ConfigError(f"{where}: max_attempts must be an int >= 1, got {self.max_attempts!r}")
        timers.check_job_ttl(self.lease_ttl, where)
        if self.timeout is not None and not (_finite(self.timeout) and self.timeout > 0):
            raise ConfigError(f"{where}: timeout must be a positive number of seconds, got {self.timeout!r}")
        if not callable(self.retry_backoff) and not (_finite(self.retry_backoff) and self.retry_backoff >= 0):
            raise ConfigError(f"{where}: retry_backoff must be >= 0 seconds or a callable (attempt) -> seconds, "
                              f"got {self.retry_backoff!r}")
        if self.retry_on is not None and not (
                isinstance(self.retry_on, tuple)
                and all(isinstance(t, type) and issubclass(t, BaseException) for t in self.retry_on)):
            raise ConfigError(f"{where}: retry_on must be an exception class or a tuple of them, "
                              f"got {self.retry_on!r}")
        check_when(where, self.delay, self.run_at)
        for name in ("dedup_key", "exclusive_key"):
            check_key(where, name, getattr(self, name))
        check_limit_key(where, self.limit_key)
        if self.meta is not None:
            check_meta(where, self.meta)
        check_tags(where, self.tags)
        return self._windows_checked(where)

    def _windows_checked(self, where: str) -> JobOptions:
        """dedup_for and expires as seconds (parse_age's durations), expires_at
        checked; each ConfigError names the option. Whether an expiry lies
        ahead of now and of the run time is judged per job (``expiry``)."""
        changes: dict[str, Any] = {}
        if self.dedup_for is not None and not isinstance(self.dedup_for, float):
            changes["dedup_for"] = _duration(self.dedup_for, f"{where}: dedup_for")
        if self.expires is not None:
            if self.expires_at is not None:
                raise ConfigError(f"{where}: give either expires or expires_at, not both")
            if not isinstance(self.expires, float):
                changes["expires"] = _duration(self.expires, f"{where}: expires")
            if not changes.get("expires", self.expires):
                raise ConfigError(f"{where}: expires must be more than 0 seconds, got {self.expires!r}")
        if self.expires_at is not None and (not isinstance(self.expires_at, datetime)
                                            or self.expires_at.tzinfo is None):
            raise ConfigError(f"{where}: expires_at must be a timezone-aware datetime "
                              f"(e.g. datetime.now(timezone.utc) + timedelta(minutes=10)), got {self.expires_at!r}")
        return replace(self, **changes) if changes else self

    def expiry(self, where: str) -> datetime | None:
        """When a job enqueued now with these options expires (None: never).
        ConfigError when that is not ahead of now, or not after the job's run
        time (it could never start). Judged on this machine's clock, as
        ``run_at`` is; the claim then judges the stored time on the database's."""
        if self.expires is None and self.expires_at is None:
            return None
        now = datetime.now(UTC)
        at = (self.expires_at if self.expires_at is not None
              else now + timedelta(seconds=_duration(self.expires, f"{where}: expires")))
        if at <= now:
            raise ConfigError(f"{where}: expires_at {at.isoformat()} is not in the future (nothing was enqueued)")
        starts = self.run_at if self.run_at is not None else now + timedelta(seconds=self.delay)
        if at <= starts:
            raise ConfigError(f"{where}: the job would expire ({at.isoformat()}) before it is due to run "
                              f"({starts.isoformat()}); expiry must come after run_at/delay (nothing was enqueued)")
        return at


_OPTION_NAMES = frozenset(JobOptions.__dataclass_fields__)
#: per-call options ``using`` checks on their own (the rest of a task's were checked at its registration)
_KEYS_AND_WINDOWS = frozenset({"dedup_key", "dedup_for", "expires", "expires_at", "limit_key"})


#: the names before issue 48, kept for code that imports them
TaskOptions = JobOptions
TaskKeywords = JobDefaults


class TaskCall(Generic[P]):
    """A task with per-call job options (``JobOptions``), from ``task.using(...)``; with
    ``connection=``, its enqueues join that connection's transaction."""

    def __init__(self, task: Task[P, Any], options: JobOptions, connection: object = None) -> None:
        self.task = task
        self.options = options
        #: the caller's connection whose transaction enqueues join; None: tether's own
        self.connection = connection

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> JobId:
        """The job's id; ``.duplicate`` is True when a job holding its
        ``dedup_key`` was there already (that job's id, and nothing added)."""
        if args:
            _positional(self.task, args)
        return self.task.app._enqueue([self.task._new_job(kwargs, self.options)], self.connection)[0]

    async def enqueue_async(self, *args: P.args, **kwargs: P.kwargs) -> JobId:
        if args:
            _positional(self.task, args)
        return (await self.task.app._enqueue_async([self.task._new_job(kwargs, self.options)], self.connection))[0]

    def spec(self, *args: P.args, **kwargs: P.kwargs) -> JobSpec:
        """This call as a job spec, not yet enqueued (a workflow step, a batch member)."""
        if args:
            _positional(self.task, args)
        if self.connection is not None:
            raise ConfigError(f"task {self.task.name!r}: a spec is enqueued by its workflow or batch; give "
                              "connection= to wf.enqueue(connection=...), not to using()")
        return JobSpec(self.task, self.task._new_job(kwargs, self.options))

    def enqueue_many(self, many: Iterable[Mapping[str, Any]]) -> list[JobId]:
        return self.task.app._enqueue(self._many(many), self.connection)

    async def enqueue_many_async(self, many: Iterable[Mapping[str, Any]]) -> list[JobId]:
        return await self.task.app._enqueue_async(self._many(many), self.connection)

    def _many(self, many: Iterable[Mapping[str, Any]]) -> list[NewJob]:
        if isinstance(many, Mapping | str | bytes):
            raise PayloadError(f"enqueue_many takes a list of args mappings, one per job, not a {type(many).__name__}")
        jobs = []
        for i, kw in enumerate(many):
            if not isinstance(kw, Mapping):
                raise PayloadError(f"enqueue_many: job {i}'s args are a {type(kw).__name__}, not a mapping of "
                                   "argument names to values (nothing was enqueued)")
            jobs.append(self.task._new_job(dict(kw), self.options))
        if self.options.dedup_key is not None and len(jobs) > 1:
            raise ConfigError("one dedup_key for many jobs would collapse them into one; give each job its own")
        return jobs


#: annotations that name a job arg's type, never the JobContext
_PLAIN_TYPES = (int, str, float, bool, bytes, list, dict, tuple, set)


def _names_a_plain_type(annotation: object) -> bool:
    if isinstance(annotation, str):  # from __future__ import annotations
        return annotation.split("[", 1)[0].strip() in {t.__name__ for t in _PLAIN_TYPES}
    return annotation in _PLAIN_TYPES or getattr(annotation, "__origin__", None) in _PLAIN_TYPES


def _positional(task: Task[Any, Any], args: tuple[Any, ...]) -> NoReturn:
    raise TypeError(f"task {task.name!r}: pass the job's args by name (they are stored as JSON by name), "
                    f"got {len(args)} positional")


class Task(Generic[P, R]):
    """A registered handler. Call ``.enqueue(**args)`` to run it in a worker;
    ``P`` (its parameters after ``ctx``) types those args, ``R`` its result."""

    def __init__(self, app: TaskHost, fn: Callable[..., Any], name: str, options: JobOptions,
                 isolation: str = "thread") -> None:
        self.app = app
        self.fn = fn
        self.name = name
        self.options = options
        self.is_async = inspect.iscoroutinefunction(fn)
        if isolation not in ("thread", "process"):
            raise ConfigError(f"task {name!r}: isolation must be 'thread' or 'process', got {isolation!r}")
        if isolation == "process" and self.is_async:
            raise ConfigError(f"task {name!r}: isolation='process' runs def handlers in a child process; an async "
                              "def handler runs on the worker's event loop (make it a def handler)")
        #: where its def handler runs: "thread" (the worker's handler threads) or "process" (a child it can kill)
        self.isolation = isolation
        self._signature = inspect.signature(fn)
        params = list(self._signature.parameters.values())
        if not params or params[0].kind not in (params[0].POSITIONAL_ONLY, params[0].POSITIONAL_OR_KEYWORD):
            raise ConfigError(f"task {name!r}: the handler's first parameter must take the JobContext")
        first = params[0]
        if _names_a_plain_type(first.annotation):  # def work(x: int): the ctx forgotten
            shown = first.annotation if isinstance(first.annotation, str) else inspect.formatannotation(first.annotation)
            raise ConfigError(f"task {name!r}: the handler's first parameter ({first.name}: {shown}) takes the "
                              f"JobContext, not a job arg: def {getattr(fn, '__name__', 'handler')}(ctx: JobContext, ...)")
        # What check_args accepts without Signature.bind (a tenth of its cost,
        # on every enqueue): the names args may use, and those they must.
        by_name = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        rest = params[1:]
        self._takes_any = any(p.kind is p.VAR_KEYWORD for p in rest)
        self._arg_names = frozenset(p.name for p in rest if p.kind in by_name)
        self._required = frozenset(p.name for p in rest if p.kind in by_name and p.default is p.empty)
        self._ctx_name = params[0].name
        # a required positional-only parameter can never be given by name: bind says so
        self._fast = not any(p.kind is p.POSITIONAL_ONLY and p.default is p.empty for p in rest)
        # typed args and result (convert.py): converted at enqueue, rebuilt in the worker
        hints = convert.type_hints(fn)
        self._typed = {n: t for n, t in hints.items() if n in self._arg_names and convert.is_typed(t)}
        returns = hints.get("return")
        self._returns = returns if returns is not None and convert.is_typed(returns) else None
        #: what a worker calls with ``(ctx, **args)``: ``fn``, or ``fn`` between
        #: rebuilding typed args and turning a typed result into JSON
        self.run: Callable[..., Any] = fn if not (self._typed or self._returns) else self._typed_runner()

    def __call__(self, ctx: JobContext, /, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call the handler directly, in-process (in a unit test, with
        ``tether.testing.context()`` as ``ctx``)."""
        result: R = self.fn(ctx, *args, **kwargs)
        return result

    def __repr__(self) -> str:
        return f"<Task {self.name} queue={self.options.queue}>"

    def using(self, *, connection: object = None, **options: Any) -> TaskCall[P]:
        """Per-call options (any of ``JobOptions``'), and ``connection``: the
        caller's own database connection (psycopg 3, sqlite3, or a SQLAlchemy
        Connection or Session) whose transaction the enqueue joins: the job
        exists once that transaction commits, and never if it rolls back."""
        unknown = options.keys() - _OPTION_NAMES
        if unknown:
            raise ConfigError(f"unknown option(s) {sorted(unknown)} for task {self.name!r}")
        if "retry_backoff" in options and options["retry_backoff"] is None:
            options.pop("retry_backoff")
        if "retry_on" in options or callable(options.get("retry_backoff")):
            # the worker runs the task's policy, not one a producer passed along
            raise ConfigError(f"task {self.name!r}: retry_on and a callable retry_backoff are set where the "
                              "task is registered (@app.task(...)), not per call")
        where = f"task {self.name!r}"
        if "tags" in options:  # added to the task's own
            options["tags"] = merge_tags(where, self.options.tags, options["tags"])
        for name in ("dedup_for", "expires"):  # parsed before the one replace, not in a second (checked's)
            if options.get(name) is not None and not isinstance(options[name], float):
                options[name] = _duration(options[name], f"{where}: {name}")
        merged = replace(self.options, **options)
        if options.keys() <= _KEYS_AND_WINDOWS:
            # the task's own options were checked where it was registered:
            # check only what this call gives (the usual per-call options)
            check_key(where, "dedup_key", merged.dedup_key)
            check_limit_key(where, merged.limit_key)
            merged = merged._windows_checked(where)
        else:
            merged = merged.checked(self.app.timers, where)
        return TaskCall(self, merged, connection)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> JobId:
        return TaskCall(self, self.options).enqueue(*args, **kwargs)

    async def enqueue_async(self, *args: P.args, **kwargs: P.kwargs) -> JobId:
        return await TaskCall(self, self.options).enqueue_async(*args, **kwargs)

    def spec(self, *args: P.args, **kwargs: P.kwargs) -> JobSpec:
        """A call of this task as a job spec, not yet enqueued: a workflow's
        step (``wf.add(spec)``) or a batch's member (``batch.add(spec)``)."""
        return TaskCall(self, self.options).spec(*args, **kwargs)

    def enqueue_many(self, many: Iterable[Mapping[str, Any]]) -> list[JobId]:
        return TaskCall(self, self.options).enqueue_many(many)

    async def enqueue_many_async(self, many: Iterable[Mapping[str, Any]]) -> list[JobId]:
        return await TaskCall(self, self.options).enqueue_many_async(many)

    def check_args(self, kwargs: Mapping[str, Any]) -> None:
        if (self._fast and self._required.issubset(kwargs) and self._ctx_name not in kwargs
                and (self._takes_any or self._arg_names.issuperset(kwargs))):
            return
        try:
            self._signature.bind(None, **kwargs)
        except TypeError as exc:
            # bind() names the first problem only: a misspelt name is reported
            # as the right one missing. Name the strays too.
            stray = [] if self._takes_any else sorted(set(kwargs) - self._arg_names)
            also = (f" (not parameters of it: {', '.join(map(repr, stray))})"
                    if stray and not all(repr(s) in str(exc) for s in stray) else "")
            raise ArgumentsError(f"args do not fit task {self.name!r}{self._signature}: {exc}{also}") from None

    def misfit(self, args: Mapping[str, Any], exc: TypeError) -> BaseException:
        """What calling the handler with a job's ``args`` raised: ``exc``, or,
        when the args do not fit the handler's parameters, an ArgsMisfit that
        says so (a TypeError too). A worker asks only once the call raised
        TypeError, so a job that fits pays nothing."""
        try:
            self.check_args(args)
        except PayloadError as perr:
            misfit = ArgsMisfit(f"{perr} (the call raised TypeError: {exc}); did a deploy change the task's "
                                "parameters after the job was enqueued? (add new ones with defaults, or use a "
                                "new task name)")
            misfit.__cause__ = exc
            return misfit.with_traceback(exc.__traceback__)
        return exc

    def _typed_runner(self) -> Callable[..., Any]:
        fn, load_args, dump_result = self.fn, self.load_args, self.dump_result
        if self.is_async:
            @functools.wraps(fn)
            async def run_async(ctx: JobContext, /, **args: Any) -> Any:
                return dump_result(await fn(ctx, **load_args(args)))
            return run_async

        @functools.wraps(fn)
        def run(ctx: JobContext, /, **args: Any) -> Any:
            return dump_result(fn(ctx, **load_args(args)))
        return run

    def dump_args(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """``kwargs`` with each typed arg as JSON-ready data; an ArgumentsError
        names the field that does not fit its annotation."""
        if not self._typed:
            return kwargs
        try:
            return {k: convert.dump(v, self._typed[k], k) if k in self._typed else v for k, v in kwargs.items()}
        except convert.Misfit as exc:
            raise ArgumentsError(f"args do not fit task {self.name!r}: {exc}") from None
        except RecursionError:  # a cycle, or nesting far past what dump_json would take
            raise ArgumentsError(f"args of task {self.name!r} nest too deep (or hold a cycle) to store") from None

    def load_args(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """A job's stored args with each typed one rebuilt; an ArgsMisfit names
        the field a changed class no longer takes."""
        try:
            return self._load_args(args)
        except convert.Misfit as exc:
            raise ArgsMisfit(f"stored args do not fit task {self.name!r}: {exc}; did a deploy change the "
                             "type after the job was enqueued? (add new fields with defaults)") from None

    def parse_args(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Args given as JSON (``tether enqueue --args``) with each typed one
        rebuilt, to enqueue as a Python caller would; an ArgumentsError names
        the field that does not fit."""
        try:
            return self._load_args(args)
        except convert.Misfit as exc:
            raise ArgumentsError(f"args do not fit task {self.name!r}: {exc}") from None

    def _load_args(self, args: Mapping[str, Any]) -> dict[str, Any]:
        return {k: convert.load(v, self._typed[k], k) if k in self._typed else v for k, v in args.items()}

    def dump_result(self, result: Any) -> Any:
        """The handler's result as JSON-ready data (a typed return annotation's value converted)."""
        if self._returns is None:
            return result
        try:
            return convert.dump(result, self._returns, "result")
        except convert.Misfit as exc:
            raise PayloadError(f"the result of task {self.name!r} does not fit its annotation: {exc}") from None

    def load_result(self, result: Any) -> Any:
        """A stored result as the handler's annotated return type (as stored, untyped)."""
        if self._returns is None or result is None:
            return result
        try:
            return convert.load(result, self._returns, "result")
        except convert.Misfit as exc:
            raise PayloadError(f"the stored result of task {self.name!r} does not fit its annotation "
                               f"(was the type changed since?): {exc}") from None

    def _new_job(self, kwargs: dict[str, Any], o: JobOptions) -> NewJob:
        self.check_args(kwargs)
        limit_key = key_of_args(f"task {self.name!r}", o.limit_key, kwargs) if callable(o.limit_key) else o.limit_key
        kwargs = self.dump_args(kwargs)
        args = dump_json(kwargs, f"args of task {self.name!r}", self.app.max_payload_bytes)
        dedup_for = expires_at = None
        if o.dedup_for is not None or o.expires is not None or o.expires_at is not None:
            dedup_for, expires_at = self._windows(o)
        job = NewJob(
            task=self.name, args_json=args, queue=o.queue, priority=o.priority, run_at=o.run_at,
            delay=o.delay, max_attempts=o.max_attempts, lease_ttl=o.lease_ttl, timeout=o.timeout,
            backoff_base=o.backoff_base,
            dedup_key=o.dedup_key, exclusive_key=o.exclusive_key, dedup_for=dedup_for, expires_at=expires_at,
            meta_json=None if o.meta is None else check_meta(f"task {self.name!r}", o.meta, self.app.max_payload_bytes),
            tags_json=tags_json(o.tags) if o.tags else None, limit_key=limit_key,
        )
        return stamped(self, job) if self.app.enqueue_middlewares else job

    def _windows(self, o: JobOptions) -> tuple[float | None, datetime | None]:
        """A job's dedup window (seconds; None for 0: freed at its end, as
        without one) and expiry time, from options ``checked`` already parsed."""
        where = f"task {self.name!r}"
        if o.dedup_for is not None and o.dedup_key is None:
            raise ConfigError(f"{where}: dedup_for needs a dedup_key (the key it keeps taken)")
        window = None if o.dedup_for is None else _duration(o.dedup_for, f"{where}: dedup_for")
        return window or None, o.expiry(where)
