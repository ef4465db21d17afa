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

from .display import visible
from .model import ClaimedJob

__all__ = ["DRIVER_LOGGER", "FIELDS", "LOG_FORMAT", "POOL_LOGGER", "FieldsAdapter", "JsonFormatter",
           "NotWrittenOnTheWay", "TextFormatter", "configure_worker_logging", "job_fields"]

#: a worker's log line, as `tether worker` writes it
LOG_FORMAT = "%(asctime)s %(levelname)-7s %(name)s[%(process)d]: %(message)s"
DRIVER_LOGGER = "psycopg"
POOL_LOGGER = "psycopg.pool"

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


class TextFormatter(logging.Formatter):
    """``LOG_FORMAT``'s lines, with tether's own records made safe for a
    terminal and a log file: their messages carry database text (task names,
    errors a handler raised, often with its input in them), and a control
    character in one is shown as its escape (``visible``). An ESC could
    recolour, retitle or clear the reader's terminal, and a newline forge a
    line of the log ("job 7 succeeded") that no worker wrote. A traceback
    keeps its newlines. Records of other loggers (the app's own) are written
    as they come: their text is their author's to shape."""

    def __init__(self, fmt: str = LOG_FORMAT) -> None:
        super().__init__(fmt)

    def formatMessage(self, record: logging.LogRecord) -> str:
        text = super().formatMessage(record)
        return visible(text) if _ours(record) else text

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)  # formatMessage's line, then any traceback
        if _ours(record) and (record.exc_text or record.stack_info):  # the traceback, its newlines kept
            return visible(text, lines=True)
        return text


def _ours(record: logging.LogRecord) -> bool:
    return record.name == "tether" or record.name.startswith("tether.")


class FieldsAdapter(logging.LoggerAdapter[logging.Logger]):
    """Adds fixed fields (e.g. ``worker``) to every record, merged with the
    call's own ``extra=`` (the call's win)."""

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        kwargs["extra"] = {**(self.extra or {}), **kwargs.get("extra", {})}
        return msg, kwargs


class NotWrittenOnTheWay(logging.Filter):
    """For a handler on the root logger: passes a record unless a stream
    handler of a logger it went through on its way up (a framework's own
    console handler, as Django's on its 'django' logger under DEBUG) has
    already written it, so that it is written once."""

    def filter(self, record: logging.LogRecord) -> bool:
        logger: logging.Logger | None = logging.getLogger(record.name)
        root = logging.getLogger()
        while logger is not None and logger is not root:
            for handler in logger.handlers:
                if (isinstance(handler, logging.StreamHandler) and record.levelno >= handler.level
                        and handler.filter(record)):
                    return False
            if not logger.propagate:
                break
            logger = logger.parent
        return True


def configure_worker_logging(level: str = "info", fmt: str = "text", *, once: bool = False) -> None:
    """The log a worker writes to stderr: `tether worker`'s, and
    ``app.run_worker()``'s when the process has configured no logging.
    ``once``: not the records a stream handler of another logger has
    already written (``NotWrittenOnTheWay``), for a framework that configured
    some (``manage.py tether_worker``)."""
    import sys

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    if once:
        handler.addFilter(NotWrittenOnTheWay())
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    logging.getLogger(DRIVER_LOGGER).setLevel(logging.NOTSET)  # a worker's log should say why it cannot connect
    # ...but not every connection the pool lends and takes back: psycopg_pool
    # logs each at INFO, two lines per store call (a quarter of a database
    # thread's CPU at INFO). Its connection failures are warnings and still show.
    logging.getLogger(POOL_LOGGER).setLevel(logging.NOTSET if level.upper() == "DEBUG" else logging.WARNING)
