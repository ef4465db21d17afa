"""The server's workflow and batch operations (issue 42): a remote app's
``wf.enqueue()`` and ``app.batch()`` enqueue through here, in one transaction
of the server's store. As the server's enqueue does, the jobs due now (the
steps with nothing to wait for, the members) are announced on a delivering
transport once the store has committed them; what the endings of their
dependencies release later is announced by the server's flow listener
(server/app.py), after each ending's commit."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from functools import partial

from ..store.flows import FlowsEnded
from ..store.http import wire
from ..store.http.wire_flows import FLOW_REPORTS, decode_batch, decode_workflow
from ..transport import announce, due_now
from .context import Args, Server

__all__ = ["FLOWS", "Heard", "released_listener"]

#: what the endings a request ran finished (the server's flow listener appends,
#: on whichever thread ran the statement: the request's context goes with it)
_heard: ContextVar[list[FlowsEnded] | None] = ContextVar("tether_flows_heard", default=None)


def _enqueue_workflow(s: Server, a: Args) -> Args:
    flow = decode_workflow(a, partial(wire.decode_new_job, cap=s.max_payload))
    run_id, ids = s.store.enqueue_workflow(flow)
    if s.transport is not None and s.transport.delivers:  # committed: announce the steps due now
        free = [(j, i) for j, i, ups in zip(flow.jobs, ids, flow.after, strict=True) if not ups]
        announce(s.transport, due_now([j for j, _ in free], [i for _, i in free]))
    return {"id": run_id, "ids": ids}


def _enqueue_batch(s: Server, a: Args) -> Args:
    batch = decode_batch(a, partial(wire.decode_new_job, cap=s.max_payload))
    batch_id, members, callbacks = s.store.enqueue_batch(batch)
    if s.transport is not None and s.transport.delivers:
        announce(s.transport, due_now(list(batch.members), members))
    return {"id": batch_id, "members": members, "callbacks": callbacks}


FLOWS: dict[str, Callable[[Server, Args], Args]] = {
    "enqueue_workflow": _enqueue_workflow,
    "enqueue_batch": _enqueue_batch,
}


def released_listener(s: Server) -> Callable[[FlowsEnded], None]:
    """The server's store's flow listener: the steps and callbacks an ending of
    a remote worker's (run here) released, once it has committed, are
    announced on a delivering transport and wake the long-polling claims."""

    def released(done: FlowsEnded) -> None:
        heard = _heard.get()
        if heard is not None:
            heard.append(done)
        if not done.released:
            return
        if s.transport is not None and s.transport.delivers:
            announce(s.transport, list(done.released))
        s.wakeups.notify_threadsafe()

    return released


class Heard:
    """``with Heard(name)``: around an operation of
    FLOW_REPORTS, collect what its endings finished, for its answer's ``flows``
    (``said``); other operations collect nothing."""

    def __init__(self, name: str) -> None:
        self.on = name in FLOW_REPORTS
        self.heard: list[FlowsEnded] = []

    def __enter__(self) -> Heard:
        if self.on:
            self._token = _heard.set(self.heard)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.on:
            _heard.reset(self._token)

    def said(self, result: Args) -> Args:
        runs = [r for d in self.heard for r in d.workflows]
        batches = [b for d in self.heard for b in d.batches]
        return {**result, "flows": {"workflows": runs, "batches": batches}} if runs or batches else result
