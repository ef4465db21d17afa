"""What the worker sees of an application: a narrow, read-only view.

The runtime never imports ``tether.app``: ``Tether`` satisfies ``AppView``
structurally, and ``Tether.worker()`` hands itself in. So the imports run one
way, app -> runtime, and a worker could as well be given any other registry
(the chaos harness's, a framework's) that offers these few names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from ..config import Timers
from ..events import Events
from ..model import ScheduleSpec
from ..store import Store
from ..tracing import AttemptTracer
from ..transport import Transport

__all__ = ["AppView", "TaskView"]


class JobOptionsView(Protocol):
    @property
    def queue(self) -> str: ...

    @property
    def tags(self) -> Sequence[str]:
        """The task's tags, which the jobs its schedules fire carry."""
        ...


class TaskView(Protocol):
    """A registered handler: ``fn(ctx, **args)``, a coroutine function or not."""

    @property
    def fn(self) -> Callable[..., Any]: ...

    @property
    def run(self) -> Callable[..., Any]:
        """What a worker calls, ``run(ctx, **args)``: ``fn``, or ``fn`` between
        rebuilding typed args and turning a typed result into JSON (convert.py)."""
        ...

    @property
    def is_async(self) -> bool: ...

    @property
    def options(self) -> JobOptionsView: ...

    def misfit(self, args: Mapping[str, Any], exc: TypeError) -> BaseException:
        """``exc``, or an ArgsMisfit when ``args`` do not fit the handler."""

    def load_result(self, result: Any) -> Any:
        """A stored result as the handler's annotated return type (untyped: as stored)."""


class AppView(Protocol):
    """The task registry and the options a worker runs by."""

    @property
    def store(self) -> Store: ...

    @property
    def timers(self) -> Timers: ...

    @property
    def tasks(self) -> Mapping[str, TaskView]: ...

    @property
    def events(self) -> Events: ...

    @property
    def transport(self) -> Transport: ...

    @property
    def tracing(self) -> AttemptTracer | None: ...

    @property
    def max_payload_bytes(self) -> int: ...

    @property
    def middlewares(self) -> Sequence[Callable[..., Any]]:
        """``@app.middleware``, in registration order (``worker.middleware``)."""
        ...

    @property
    def schedule_specs(self) -> Mapping[str, ScheduleSpec]:
        """The app's periodic schedules (``@app.periodic``), by name."""
        ...
