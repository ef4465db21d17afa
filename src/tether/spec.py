"""A job spec: a task call not yet enqueued (``task.spec(**args)``), and the
enqueue middleware that sees each one before it is written.

``@app.enqueue_middleware`` functions take a ``JobSpec`` and return one (the
same, or a changed copy: ``spec.with_meta(tenant=...)``), in registration
order, for every job the app makes: ``task.enqueue``, ``enqueue_many``,
``app.enqueue``, a spec made for a workflow or a batch (when it is made, in
the caller's context), the Django backend's enqueue. What a middleware raises
reaches the caller and nothing is written. A job copied by ``app.rerun`` or
fired by a schedule is made by the database, not by a caller: no middleware
sees it."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from .errors import ConfigError
from .model import NewJob
from .search import check_meta

__all__ = ["JobSpec", "SpecTask", "stamped"]


class SpecHost(Protocol):
    """What a spec needs of its task's app."""

    max_payload_bytes: int
    enqueue_middlewares: list[Callable[[JobSpec], JobSpec]]


class SpecTask(Protocol):
    """What a spec needs of its task (a ``tether.Task``; named so that this
    module does not import task.py, which imports it)."""

    @property
    def name(self) -> str: ...

    @property
    def app(self) -> SpecHost: ...


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A task call not yet enqueued (``task.spec(**args)``, ``task.using(...).spec(**args)``):
    a workflow's step or a batch's member, and what an enqueue middleware
    sees. Its args were checked and stored as JSON when it was made, so a spec
    that does not fit its task fails there."""

    task: SpecTask
    job: NewJob

    @property
    def name(self) -> str:
        """The task's short name: a workflow step's default name."""
        return self.task.name.rsplit(".", 1)[-1].rsplit(":", 1)[-1]

    @property
    def args(self) -> dict[str, Any]:
        """The job's arguments, as stored (JSON values)."""
        value: dict[str, Any] = json.loads(self.job.args_json)
        return value

    @property
    def meta(self) -> dict[str, Any]:
        """The job's meta so far (``.using(meta=...)`` and earlier middleware)."""
        value: dict[str, Any] = json.loads(self.job.meta_json) if self.job.meta_json else {}
        return value

    def with_meta(self, meta: Mapping[str, Any] | None = None, /, **more: Any) -> JobSpec:
        """A copy whose meta has these keys added (replacing ones of the same
        name); checked as ``.using(meta=...)`` is (a JSON object within the
        size limit), else a PayloadError."""
        merged = {**self.meta, **(meta or {}), **more}
        where = f"task {self.task.name!r}"
        return replace(self, job=replace(self.job, meta_json=check_meta(where, merged, self.task.app.max_payload_bytes)))


def stamped(task: SpecTask, job: NewJob) -> NewJob:
    """``job`` as the app's enqueue middleware leave it, in registration order."""
    spec = JobSpec(task, job)
    for hook in task.app.enqueue_middlewares:
        spec = hook(spec)
        if not isinstance(spec, JobSpec) or spec.task is not task:
            raise ConfigError(f"enqueue middleware {getattr(hook, '__qualname__', hook)!r} must return a JobSpec of "
                              f"the same task (the one it was given, or spec.with_meta(...)), got {spec!r:.80}")
    return spec.job
