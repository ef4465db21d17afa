"""Structured logging: tether's records about a job carry ``job_id``,
``attempt``, ``task``, ``queue`` and ``worker`` as attributes of the
``LogRecord`` (passed with ``extra=``), so a handler can filter or index on
them; ``JsonFormatter`` writes one JSON object per record with those fields.
Records from a worker that are not about one job carry ``worker``."""

from __future__ import annotations

import json
import logging
from collections.abc import MutableMapping
from datetime import UTC, datetime
from typing import Any

from .model import ClaimedJob

__all__ = ["FIELDS", "FieldsAdapter", "JsonFormatter", "job_fields"]

#: the structured fields, in the order JsonFormatter writes them
FIELDS = ("job_id", "attempt", "task", "queue", "worker")


def job_fields(job: ClaimedJob, worker: str) -> dict[str, Any]:
    """``extra=`` for a record about one attempt of a job."""
    return {"job_id": job.id, "attempt": job.attempt, "task": job.task, "queue": job.queue, "worker": worker}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the structured
    fields present on the record, and the traceback if any."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        for name in FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                out[name] = value
        if record.exc_info:
            out["traceback"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class FieldsAdapter(logging.LoggerAdapter[logging.Logger]):
    """Adds fixed fields (e.g. ``worker``) to every record, merged with the
    call's own ``extra=`` (the call's win)."""

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        kwargs["extra"] = {**(self.extra or {}), **kwargs.get("extra", {})}
        return msg, kwargs
