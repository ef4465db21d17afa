"""The HTTP API's workflow and batch operations (issue 42): enqueue a
workflow run or a batch through a tether server, each in one transaction of
the server's store, as a direct store does. The operations' table entries
(``wire.OPS``) come from ``flow_ops``, given the new-job schema ``wire.py``
declares; the encoding of a run or batch is here, shared by the client
(store.py) and the server (server/flows.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...errors import PayloadError
from ...model import NewJob
from ..flows import ON_FAILURE, FlowsEnded, NewBatch, NewWorkflow
from .schema import INT53_MAX, Schema, array, integer, nullable, obj, string

__all__ = ["FLOW_REPORTS", "MAX_MEMBERS", "MAX_STEPS", "decode_batch", "decode_flows", "decode_workflow",
           "encode_batch", "encode_workflow", "flow_ops", "with_flows"]

#: the operations whose statements end jobs: the answer of one that finished a
#: workflow run or a batch names them (``flows``), so that the remote app that
#: asked emits workflow.finished and batch.finished, once, as the process that
#: ran the ending does on a direct store
FLOW_REPORTS = frozenset({"complete", "complete_and_claim", "fail", "release", "reap", "cancel", "cancel_many",
                          "bury_unknown"})
FLOWS_DONE = obj({"workflows": array(integer(1, INT53_MAX), 100_000), "batches": array(integer(1, INT53_MAX), 100_000)})


def with_flows(name: str, response: Schema) -> Schema:
    """An operation's answer, with the optional ``flows`` for FLOW_REPORTS."""
    if name not in FLOW_REPORTS:
        return response
    return {**response, "properties": {**response["properties"], "flows": FLOWS_DONE}}


def decode_flows(answer: dict[str, Any]) -> FlowsEnded | None:
    """The ``flows`` of an answer (taken out of it), or None."""
    said = answer.pop("flows", None)
    if not said:
        return None
    return FlowsEnded(tuple(int(i) for i in said["workflows"]), tuple(int(i) for i in said["batches"])) or None

#: the most steps a workflow, and members a batch, one request may carry
MAX_STEPS = 10_000
MAX_MEMBERS = 100_000


def flow_ops(new_job: Schema, job_id: Schema) -> list[dict[str, Any]]:
    """The operations, as ``wire.Op`` keyword arguments. Producer scope, as an enqueue's."""
    step = obj({"job": new_job, "name": string(1000, 1), "after": array(integer(0, MAX_STEPS - 1), MAX_STEPS),
                "on_failure": {"type": "string", "enum": list(ON_FAILURE)}})
    return [
        dict(name="enqueue_workflow", method="POST", path="/v1/workflows", scopes=("producer",),
             summary="Enqueue a workflow run: its steps (each a job, a name, the indexes of earlier steps it waits "
                     "for, its on_failure) in one transaction; the run's id and the steps' job ids in order (422, "
                     "nothing written, for a step that waits for itself or a later one, or a duplicate name)",
             response=obj({"id": job_id, "ids": array(job_id, MAX_STEPS)}),
             body=obj({"name": string(1000), "steps": array(step, MAX_STEPS, 1)}), errors=(422,)),
        dict(name="enqueue_batch", method="POST", path="/v1/batches", scopes=("producer",),
             summary="Enqueue a batch: its members and its callbacks (on_complete: released once when the last "
                     "member ends; on_success: only if every member succeeded) in one transaction; the batch's id, "
                     "the members' job ids in order, the callbacks' (422, nothing written, for an empty batch)",
             response=obj({"id": job_id, "members": array(job_id, MAX_MEMBERS), "callbacks": array(job_id, 2)}),
             body=obj({"members": array(new_job, MAX_MEMBERS, 1), "on_complete": nullable(new_job),
                       "on_success": nullable(new_job)}, optional=("on_complete", "on_success")),
             errors=(422,)),
    ]


Encode = Callable[[NewJob], dict[str, Any]]
Decode = Callable[[dict[str, Any]], NewJob]


def encode_workflow(flow: NewWorkflow, encode: Encode) -> dict[str, Any]:
    return {"name": flow.name, "steps": [
        {"job": encode(j), "name": n, "after": list(a), "on_failure": o}
        for j, n, a, o in zip(flow.jobs, flow.names, flow.after, flow.on_failure, strict=True)]}


def decode_workflow(body: dict[str, Any], decode: Decode) -> NewWorkflow:
    """A request's run (schema-checked), checked as the app checks one it
    builds: each step waits only for earlier ones (so no cycle), names unique."""
    steps = body["steps"]
    names = [s["name"] for s in steps]
    if len(set(names)) != len(names):
        raise PayloadError(f"steps: a duplicate step name ({sorted(n for n in set(names) if names.count(n) > 1)})")
    for i, s in enumerate(steps):
        bad = [u for u in s["after"] if u >= i]
        if bad:
            raise PayloadError(f"steps[{i}].after: {bad} is not an earlier step (a step waits only for steps "
                               "added before it, so no cycle)")
    return NewWorkflow(body["name"], [decode(s["job"]) for s in steps], names, [list(s["after"]) for s in steps],
                       [s["on_failure"] for s in steps])


def encode_batch(batch: NewBatch, encode: Encode) -> dict[str, Any]:
    return {"members": [encode(j) for j in batch.members],
            "on_complete": None if batch.on_complete is None else encode(batch.on_complete),
            "on_success": None if batch.on_success is None else encode(batch.on_success)}


def decode_batch(body: dict[str, Any], decode: Decode) -> NewBatch:
    def callback(key: str) -> NewJob | None:
        return None if body.get(key) is None else decode(body[key])

    return NewBatch([decode(m) for m in body["members"]], callback("on_complete"), callback("on_success"))
