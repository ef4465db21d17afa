"""The JSON form of the records about jobs no worker knows the task of
(``Store.unknown_tasks``, ``Store.bury_unknown``, ``Stats.unknown``) on the
HTTP API; their operations are in ``wire.py`` beside the others."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ...model import Buried, UnknownTaskJobs
from ...naming import MAX_TASK_NAME, TASK_NAME_PATTERN
from .schema import DATETIME, array, integer, obj, string

__all__ = ["BURIED_RECORD", "TASKS", "TASK_NAME", "UNKNOWN_RECORD", "decode_buried", "decode_unknown", "encode_buried",
           "encode_unknown"]

#: the tasks a worker knows: a claim with them takes only their jobs (absent: any task)
#: a task name, as naming.validate_task_name has it
TASK_NAME = string(MAX_TASK_NAME, 1, TASK_NAME_PATTERN)
TASKS = array(TASK_NAME, 10**5)
UNKNOWN_RECORD = obj({"queue": string(1000), "task": string(1000), "jobs": integer(0, 2**63 - 1),
                      "oldest": DATETIME})
BURIED_RECORD = obj({"id": integer(1), "queue": string(1000), "task": string(1000), "error": string(10**5)})


def encode_unknown(u: UnknownTaskJobs) -> dict[str, Any]:
    return {"queue": u.queue, "task": u.task, "jobs": u.jobs, "oldest": u.oldest.isoformat()}


def decode_unknown(d: dict[str, Any]) -> UnknownTaskJobs:
    return UnknownTaskJobs(queue=d["queue"], task=d["task"], jobs=d["jobs"], oldest=datetime.fromisoformat(d["oldest"]))


def encode_buried(b: Buried) -> dict[str, Any]:
    return {"id": b.id, "queue": b.queue, "task": b.task, "error": b.error}


def decode_buried(d: dict[str, Any]) -> Buried:
    return Buried(id=d["id"], queue=d["queue"], task=d["task"], error=d["error"])
