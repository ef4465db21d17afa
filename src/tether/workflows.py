"""Workflows (issue 42): steps with dependencies, enqueued in one transaction.

``app.workflow(name)`` builds a run; ``wf.add(spec, after=[...])`` adds a step
(a ``JobSpec``: ``task.spec(**args)``); ``wf.enqueue()`` writes the run and all
its steps at once, or nothing. A step with dependencies waits (state
``waiting``) until the ending of its last dependency releases it, in the
statement that ends that dependency (I9; store/flows.py). ``app.chain(...)``
is a workflow whose every step waits for the one before.

The ``Tether`` app takes these methods from ``WorkflowsMixin``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .errors import ConfigError, UnknownTask
from .events import Event, Events
from .payload import check_job_id
from .spec import SpecTask
from .store import Store
from .store.caller import after_commit, driver_connection, driver_connection_async
from .store.flows import ON_FAILURE, FlowsEnded, NewWorkflow, WorkflowInfo
from .task import JobSpec, Task
from .transport import Transport, announce, due_now

__all__ = ["FlowHost", "Step", "Workflow", "WorkflowRun", "WorkflowsMixin", "registered"]


class FlowHost(Protocol):
    """What of the app (``Tether``) a workflow needs."""

    tasks: dict[str, Task[Any, Any]]
    transport: Transport
    _store: Store | None

    @property
    def store(self) -> Store: ...

#: the longest workflow name stored
MAX_NAME = 200


@dataclass(frozen=True, slots=True)
class Step:
    """A step of one workflow (``wf.add``'s answer), for the ``after=`` of later steps."""

    workflow: Workflow
    index: int
    name: str


@dataclass(frozen=True, slots=True)
class WorkflowRun:
    """An enqueued workflow: its id (the database's) and ``jobs``, {step name: job id}."""

    id: int
    name: str
    jobs: dict[str, int]


class Workflow:
    """A workflow being built (``app.workflow(name)``); nothing is written before ``enqueue``."""

    def __init__(self, app: FlowHost, name: str) -> None:
        if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME:
            raise ConfigError(f"a workflow's name must be a non-empty string of at most {MAX_NAME} characters, "
                              f"got {name!r}")
        self.app = app
        self.name = name
        self._specs: list[JobSpec] = []
        self._names: list[str] = []
        self._after: list[list[Step | str]] = []
        self._on_failure: list[str] = []
        self._enqueued: WorkflowRun | None = None

    def __repr__(self) -> str:
        return f"<Workflow {self.name!r} steps={len(self._specs)}>"

    def add(self, spec: JobSpec, *, after: Iterable[Step | str] = (), name: str | None = None,
            on_failure: str = "cancel") -> Step:
        """A step running ``spec`` once every step in ``after`` has succeeded
        (``on_failure="run"``: once each has ended, whatever its state); with
        the default ``on_failure="cancel"``, a dependency that ends dead or
        cancelled cancels this step and the steps after it. ``name`` defaults
        to the task's short name; it must be unique in the workflow."""
        if self._enqueued is not None:
            raise ConfigError(f"workflow {self.name!r} was enqueued already (run {self._enqueued.id}); "
                              "build a new one with app.workflow(...)")
        if not isinstance(spec, JobSpec):
            raise ConfigError(f"workflow {self.name!r}: add() takes a job spec, task.spec(**args), "
                              f"not a {type(spec).__name__}")
        registered(self.app, spec.task)
        if spec.job.dedup_key is not None:
            raise ConfigError(f"workflow {self.name!r}: a step cannot have a dedup_key (its job could be "
                              "another run's); leave it out of the spec")
        step_name = spec.name if name is None else name
        if not isinstance(step_name, str) or not step_name or len(step_name) > MAX_NAME:
            raise ConfigError(f"workflow {self.name!r}: a step's name must be a non-empty string, got {step_name!r}")
        if step_name in self._names:
            raise ConfigError(f"workflow {self.name!r}: a step named {step_name!r} exists already; "
                              "give this one another name (name=...)")
        if on_failure not in ON_FAILURE:
            raise ConfigError(f"workflow {self.name!r}, step {step_name!r}: on_failure must be 'cancel' or 'run', "
                              f"got {on_failure!r}")
        if isinstance(after, (str, Step)):
            after = [after]
        deps = list(after)
        for dep in deps:
            if isinstance(dep, Step):
                if dep.workflow is not self:
                    raise ConfigError(f"workflow {self.name!r}, step {step_name!r}: after= names step "
                                      f"{dep.name!r} of another workflow ({dep.workflow.name!r})")
            elif not isinstance(dep, str):
                raise ConfigError(f"workflow {self.name!r}, step {step_name!r}: after= takes steps (wf.add's "
                                  f"answers) or step names, not a {type(dep).__name__}")
        self._specs.append(spec)
        self._names.append(step_name)
        self._after.append(deps)
        self._on_failure.append(on_failure)
        return Step(self, len(self._specs) - 1, step_name)

    def _plan(self) -> NewWorkflow:
        """The run as the store takes it; a clear error, and nothing written, for a bad one."""
        if not self._specs:
            raise ConfigError(f"workflow {self.name!r} has no steps: add some with wf.add(task.spec(...))")
        index = {n: i for i, n in enumerate(self._names)}
        after: list[list[int]] = []
        for name, deps in zip(self._names, self._after, strict=True):
            ups: list[int] = []
            for dep in deps:
                key = dep.name if isinstance(dep, Step) else dep
                if key not in index:
                    raise ConfigError(f"workflow {self.name!r}, step {name!r}: after= names {key!r}, "
                                      "which is no step of this workflow")
                if index[key] == index[name]:
                    raise ConfigError(f"workflow {self.name!r}: step {name!r} waits for itself (a cycle)")
                if index[key] not in ups:
                    ups.append(index[key])
            after.append(ups)
        _refuse_cycle(self.name, self._names, after)
        return NewWorkflow(self.name, [s.job for s in self._specs], list(self._names), after, list(self._on_failure))

    def enqueue(self, *, connection: object = None) -> WorkflowRun:
        """Write the run and all its steps in one transaction (with ``connection``:
        the caller's, committed by the caller); its ``id`` and ``jobs``."""
        flow = self._plan()
        store = self.app.store
        if connection is None:
            run_id, ids = store.enqueue_workflow(flow)
        else:
            run_id, ids = store.enqueue_workflow(flow, conn=driver_connection(connection))
        return self._done(flow, run_id, ids, connection)

    async def enqueue_async(self, *, connection: object = None) -> WorkflowRun:
        """``enqueue`` for a coroutine."""
        import asyncio

        flow = self._plan()
        store = self.app._store
        if store is None:  # opening it connects and waits: not on the event loop
            store = await asyncio.to_thread(lambda: self.app.store)
        conn = None if connection is None else await driver_connection_async(connection)
        run_id, ids = await store.enqueue_workflow_async(flow, conn=conn)
        return self._done(flow, run_id, ids, connection)

    def _done(self, flow: NewWorkflow, run_id: int, ids: list[int], connection: object) -> WorkflowRun:
        self._enqueued = run = WorkflowRun(run_id, self.name, dict(zip(flow.names, ids, strict=True)))
        app = self.app
        if app.transport.delivers:  # the steps with nothing to wait for are due now
            free = [(j, i) for j, i, ups in zip(flow.jobs, ids, flow.after, strict=True) if not ups]
            due = due_now([j for j, _ in free], [i for _, i in free])
            if connection is None:
                announce(app.transport, due)
            elif due:
                after_commit(connection, lambda: announce(app.transport, due))
        return run


def registered(app: FlowHost, task: SpecTask) -> None:
    if app.tasks.get(task.name) is not task:
        raise UnknownTask(f"task {task.name!r} of this spec is not registered on this app; register it with "
                          "@app.task on the app whose workflow or batch runs it")


def _refuse_cycle(workflow: str, names: Sequence[str], after: Sequence[Sequence[int]]) -> None:
    """Kahn's order over the steps; the steps left over lie on a cycle."""
    left = {i: set(ups) for i, ups in enumerate(after)}
    done: set[int] = set()
    while True:
        ready = [i for i, ups in left.items() if ups <= done]
        if not ready:
            break
        for i in ready:
            done.add(i)
            del left[i]
    if left:
        cycle = ", ".join(repr(names[i]) for i in sorted(left))
        raise ConfigError(f"workflow {workflow!r} has a cycle: steps {cycle} wait for each other")


class WorkflowsMixin:
    """``app.workflow``, ``app.chain`` and ``app.get_workflow``, for ``Tether``."""

    def workflow(self: FlowHost, name: str) -> Workflow:
        """A new workflow run to build: ``wf.add(spec, after=[...])``, then ``wf.enqueue()``."""
        return Workflow(self, name)

    def chain(self: FlowHost, *specs: JobSpec, name: str = "chain", connection: object = None) -> WorkflowRun:
        """Enqueue ``specs`` as a workflow whose every step waits for the one
        before (steps named by their task, then ``-2``, ``-3``... when repeated)."""
        wf = Workflow(self, name)
        prev: Step | None = None
        seen: dict[str, int] = {}
        for spec in specs:
            if not isinstance(spec, JobSpec):
                raise ConfigError(f"chain() takes job specs, task.spec(**args), not a {type(spec).__name__}")
            seen[spec.name] = seen.get(spec.name, 0) + 1
            step_name = spec.name if seen[spec.name] == 1 else f"{spec.name}-{seen[spec.name]}"
            prev = wf.add(spec, after=[] if prev is None else [prev], name=step_name)
        return wf.enqueue(connection=connection)

    def get_workflow(self: FlowHost, run_id: int) -> WorkflowInfo | None:
        """A workflow run's steps, edges, and each step's job and state; None if there is none."""
        return self.store.get_workflow(check_job_id(run_id))


def flows_listener(events: Events, transport: Transport) -> Callable[[FlowsEnded], None]:
    """What an app does with what an ending of its store's did for workflows
    and batches (``Store.add_flow_listener``), once that ending has committed,
    in the process that ran it: ``workflow.finished`` and ``batch.finished``,
    each emitted by the one statement that finished its run or batch, and the
    steps and callbacks it queued published on a delivering transport (NATS),
    as enqueue publishes what it inserts, rather than left to the sweep."""

    def ended(done: FlowsEnded) -> None:
        if done.released and transport.delivers:
            announce(transport, list(done.released))
        if events.active:
            for run_id in done.workflows:
                events.emit(Event("workflow.finished", workflow_id=run_id))
            for batch_id in done.batches:
                events.emit(Event("batch.finished", batch_id=batch_id))

    return ended
