"""The JSON form of a search's filter on the HTTP API (issue 43): the names of
``app.jobs()``' keywords (search.FILTER_NAMES), each optional; the operations
that take it are in ``wire.py`` beside the others."""

from __future__ import annotations

from typing import Any

from ...model import JobState
from ...search import MAX_IDS, MAX_PAGE, MAX_TAG_CHARS, MAX_TAGS, TAG_PATTERN, JobFilter
from .schema import DATETIME, INT53_MAX, array, integer, obj, string

__all__ = ["FILTER", "MAX_PAGE_WIRE", "TAGS", "decode_filter"]

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


def decode_filter(d: dict[str, Any]) -> JobFilter:
    """A request's filter (schema-checked: FILTER) as a JobFilter; ConfigError names what is wrong."""
    return JobFilter.of(d, "filter")
