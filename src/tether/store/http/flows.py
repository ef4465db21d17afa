"""Workflows and batches through a tether server (issue 42): a mixin of
``HttpStore``. A run or a batch is one request, inserted by the server in one
transaction of its store (server/flows.py); the releases are the endings'
own, on the server, as for every remote worker's report."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

from ...errors import ConfigError
from ..flows import NewBatch, NewWorkflow
from . import wire
from .wire_flows import encode_batch, encode_workflow

__all__ = ["HttpFlows"]

_NO_CONN = ("a tether server enqueues a {what} in a transaction of its own; connection= needs a direct database URL "
            "(postgresql:// or sqlite:///)")


class HttpFlows:
    """The enqueues of ``Workflows`` and ``Batches`` for ``HttpStore`` (which provides ``_call``)."""

    def _call(self, name: str, body: dict[str, Any] | None = None, *, path: dict[str, Any] | None = None,
              query: dict[str, Any] | None = None, timeout: float | None = None,
              now: datetime | None = None) -> dict[str, Any]:
        raise NotImplementedError

    def enqueue_workflow(self, flow: NewWorkflow, *, conn: object = None) -> tuple[int, list[int]]:
        if conn is not None:
            raise ConfigError(_NO_CONN.format(what="workflow"))
        found = self._call("enqueue_workflow", encode_workflow(flow, wire.encode_new_job))
        return int(found["id"]), [int(i) for i in found["ids"]]

    async def enqueue_workflow_async(self, flow: NewWorkflow, *, conn: object = None) -> tuple[int, list[int]]:
        if conn is not None:
            raise ConfigError(_NO_CONN.format(what="workflow"))
        return await asyncio.to_thread(self.enqueue_workflow, flow)

    def enqueue_batch(self, batch: NewBatch, *, conn: object = None) -> tuple[int, list[int], list[int]]:
        if conn is not None:
            raise ConfigError(_NO_CONN.format(what="batch"))
        found = self._call("enqueue_batch", encode_batch(batch, wire.encode_new_job))
        return int(found["id"]), [int(i) for i in found["members"]], [int(i) for i in found["callbacks"]]
