"""The JSON form of a search's filter on the HTTP API (issue 43): the names of
``app.jobs()``' keywords (search.FILTER_NAMES), each optional; the operations
that take it are in ``wire.py`` beside the others."""

from __future__ import annotations

from typing import Any

from ...model import JobState
from ...search import MAX_IDS, MAX_PAGE, MAX_TAG_CHARS, MAX_TAGS, TAG_PATTERN, JobFilter
from .schema import DATETIME, INT53_MAX, Schema, array, boolean, integer, nullable, obj, string

__all__ = ["CANCEL_ANSWER", "CANCEL_BODY", "FILTER", "MAX_PAGE_WIRE", "SEARCH_BODY", "TAGS", "decode_filter", "search_answer"]

MAX_PAGE_WIRE = MAX_PAGE + 1  # a page and the one job that says another follows
TAGS = array(string(MAX_TAG_CHARS, 1, TAG_PATTERN), MAX_TAGS)
_STATES = array({"type": "string", "enum": [str(s) for s in JobState]}, len(JobState), 1)
FILTER = obj({
    "state": _STATES, "queue": string(1000, 1), "task": string(1000, 1), "tags": TAGS,
    "meta": {"type": "object"}, "args": {"type": "object"},  # their size: JobFilter.of (MAX_META_BYTES)
    "ids": array(integer(1, INT53_MAX), MAX_IDS, 1), "created_after": DATETIME, "created_before": DATETIME,
    "finished_after": DATETIME, "finished_before": DATETIME,
}, optional=("state", "queue", "task", "tags", "meta", "args", "created_after", "created_before", "finished_after",
             "finished_before", "ids"))

_JOB_ID = integer(1, INT53_MAX)
#: search_jobs: `before` (a job id: the jobs below it; tether's client sends
#: it, null for the first page, and pages itself) or, leaving `before` out,
#: `after`: a page's `next` cursor, which the server refuses (400) unless the
#: same filter made it; then the answer has `next` (null: the last page)
SEARCH_BODY = obj({"filter": FILTER, "limit": integer(1, MAX_PAGE_WIRE), "before": nullable(_JOB_ID),
                   "after": nullable(string(200, 1))}, optional=("before", "after"))


def search_answer(job_record: Schema) -> Schema:
    return obj({"jobs": array(job_record, MAX_PAGE_WIRE), "next": nullable(string(200, 1))}, optional=("next",))


#: cancel_many's batch: ``ended`` (optional; an older client sends none) asks
#: for the jobs the batch cancelled at once, for the client app's
#: job.cancelled events; the answer has them only then
CANCEL_BODY = obj({"filter": FILTER, "after": integer(0, INT53_MAX), "limit": integer(1, 10_000),
                   "ended": boolean()}, optional=("ended",))
CANCEL_ANSWER = obj({"count": integer(0, 2**63 - 1), "last": nullable(_JOB_ID),
                     "ended": array(obj({"id": _JOB_ID, "task": string(1000), "queue": string(1000)}), 10_000)},
                    optional=("ended",))


def decode_filter(d: dict[str, Any]) -> JobFilter:
    """A request's filter (schema-checked: FILTER) as a JobFilter; ConfigError names what is wrong."""
    return JobFilter.of(d, "filter")
