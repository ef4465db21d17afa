"""Finding many jobs (issue 43): a job's meta and tags, checked; the filters
that ``app.jobs()``, ``app.count_jobs()`` and the bulk actions share, as one
``JobFilter``; the keyset cursor of a page of jobs; and JSON containment
(PostgreSQL's ``jsonb @>``) for a store without it (SQLite).

Filters combine with AND. ``meta`` and ``args`` match by containment (the
job's holds the given JSON object: a subset, nested objects too); ``tags``
matches jobs holding all the given tags; the times are half-open:
``created_after`` <= created_at < ``created_before``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .errors import ConfigError, PayloadError
from .model import Job, JobState
from .naming import C0_CONTROLS, OTHER_CONTROLS
from .payload import dump_json

__all__ = [
    "FILTER_NAMES", "MAX_IDS", "MAX_META_BYTES", "MAX_PAGE", "MAX_TAGS", "MAX_TAG_CHARS", "TAG_PATTERN", "JobFilter", "JobPage",
    "check_meta", "check_tags", "contains", "contains_json", "merge_expressions", "merge_tags", "parse_expression",
    "tags_json",
]

#: at most this many tags on a job, each at most MAX_TAG_CHARS characters
MAX_TAGS = 32
MAX_TAG_CHARS = 64
#: a job's meta, in bytes of JSON (args have max_payload_bytes; meta is for labels, not data)
MAX_META_BYTES = 8192
#: the largest page app.jobs() returns
MAX_PAGE = 1000
_NOT_SHOWN = C0_CONTROLS + OTHER_CONTROLS
#: a tag: printable text (as a task name), not starting or ending with a space;
#: the HTTP API's schema holds tags to the same pattern (wire_many.TAGS)
TAG_PATTERN = f"^[^\\s{_NOT_SHOWN}](?:[^{_NOT_SHOWN}]*[^\\s{_NOT_SHOWN}])?$"
_TAG = re.compile(TAG_PATTERN[:-1] + r"\Z")


def check_tags(where: str, tags: object) -> tuple[str, ...]:
    """``tags`` as a tuple without repeats (first kept), or a ConfigError that
    says what is wrong: a list (or tuple) of up to MAX_TAGS short strings."""
    if isinstance(tags, str | bytes) or not isinstance(tags, Iterable):
        raise ConfigError(f"{where}: tags must be a list of strings, got {type(tags).__name__} {tags!r:.80}")
    out: list[str] = []
    for tag in tags:
        if not isinstance(tag, str):
            raise ConfigError(f"{where}: each tag must be a string, got {type(tag).__name__} {tag!r:.80}")
        if not 1 <= len(tag) <= MAX_TAG_CHARS or not _TAG.match(tag):
            raise ConfigError(f"{where}: tag {tag!r:.80} must be 1 to {MAX_TAG_CHARS} characters, without control "
                              "characters or surrounding spaces")
        if tag not in out:
            out.append(tag)
    if len(out) > MAX_TAGS:
        raise ConfigError(f"{where}: at most {MAX_TAGS} tags on a job, got {len(out)}")
    return tuple(out)


def merge_tags(where: str, first: tuple[str, ...], more: object) -> tuple[str, ...]:
    """A task's tags with a call's (checked), the task's first, without repeats."""
    return check_tags(where, (*first, *check_tags(where, more)))


def tags_json(tags: tuple[str, ...]) -> str | None:
    """The tags column's JSON (None for no tags: the partial index leaves the row out)."""
    return json.dumps(list(tags), ensure_ascii=False, separators=(",", ":")) if tags else None


def parse_expression(text: str, where: str) -> dict[str, Any]:
    """``key=value`` (or ``key:value``) as a JSON object to match by
    containment: the value is JSON when it parses (``customer=42``: the
    number), else the text; a dotted key nests (``plan.tier=gold``:
    ``{"plan": {"tier": "gold"}}``). ConfigError for a malformed one."""
    cut = min((i for i in (text.find("="), text.find(":")) if i >= 0), default=-1)
    key, raw = (text[:cut], text[cut + 1:]) if cut >= 0 else (text, "")
    if cut < 0 or not key or any(not part for part in key.split(".")):
        raise ConfigError(f"{where} {text!r:.80}: expected KEY=VALUE or KEY:VALUE (such as customer=42 or "
                          "plan.tier=gold)")
    try:
        value: Any = json.loads(raw)
    except ValueError:
        value = raw
    for part in reversed(key.split(".")):
        value = {part: value}
    return value  # type: ignore[no-any-return]


def merge_expressions(texts: Iterable[str], where: str) -> dict[str, Any] | None:
    """Several ``parse_expression`` objects as one (None for none)."""
    merged: dict[str, Any] = {}
    for text in texts:
        _merge(merged, parse_expression(text, where))
    return merged or None


def _merge(into: dict[str, Any], more: dict[str, Any]) -> None:
    for k, v in more.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = v


def check_meta(where: str, meta: object, cap: int = MAX_META_BYTES) -> str:
    """A job's meta as JSON text: a JSON object of at most ``cap`` bytes, or a PayloadError."""
    if not isinstance(meta, Mapping):
        raise PayloadError(f"{where}: meta must be a JSON object (a dict), got {type(meta).__name__} {meta!r:.80}")
    return dump_json(dict(meta), f"meta of {where}", min(cap, MAX_META_BYTES))


#: the keywords every filter takes (app.jobs, count_jobs, the bulk actions, the HTTP API)
FILTER_NAMES = ("state", "queue", "task", "tags", "meta", "args", "created_after", "created_before",
                "finished_after", "finished_before", "ids")
#: the most job ids one ``ids=`` filter names
MAX_IDS = 10_000
_TIMES = ("created_after", "created_before", "finished_after", "finished_before")
_STATES = frozenset(s.value for s in JobState)


@dataclass(frozen=True, slots=True)
class JobFilter:
    """The filters of a search or a bulk action, checked (``JobFilter.of``)."""

    states: tuple[str, ...] | None = None
    queue: str | None = None
    task: str | None = None
    tags: tuple[str, ...] = ()
    meta: dict[str, Any] | None = None
    args: dict[str, Any] | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    finished_after: datetime | None = None
    finished_before: datetime | None = None
    #: only these jobs (``tether delete ID...``)
    ids: tuple[int, ...] | None = None

    @classmethod
    def of(cls, filters: Mapping[str, Any], where: str = "filter") -> JobFilter:
        """The filters given as keywords (None: not filtered on); ConfigError
        for an unknown one or a value of the wrong shape."""
        unknown = sorted(set(filters) - set(FILTER_NAMES))
        if unknown:
            raise ConfigError(f"{where}: unknown filter(s) {unknown}; the filters are {', '.join(FILTER_NAMES)}")
        f = {k: v for k, v in filters.items() if v is not None}
        states = f.get("state")
        if states is not None:
            states = (states,) if isinstance(states, str) else states
            if not isinstance(states, Iterable) or not states:
                raise ConfigError(f"{where}: state must be a state name or a list of them, got {states!r:.80}")
            states = tuple(str(s.value if isinstance(s, JobState) else s) for s in states)
            bad = sorted(set(states) - _STATES)
            if bad:
                raise ConfigError(f"{where}: unknown state(s) {bad}; the states are {', '.join(sorted(_STATES))}")
        for name in ("queue", "task"):
            if name in f and (not isinstance(f[name], str) or not f[name]):
                raise ConfigError(f"{where}: {name} must be a non-empty string, got {f[name]!r:.80}")
        tags = check_tags(where, f["tags"]) if "tags" in f else ()
        json_filters: dict[str, dict[str, Any]] = {}
        for name in ("meta", "args"):
            if name in f:
                if not isinstance(f[name], Mapping):
                    raise ConfigError(f"{where}: {name} must be a JSON object to match by containment, "
                                      f"got {type(f[name]).__name__} {f[name]!r:.80}")
                json_filters[name] = json.loads(dump_json(dict(f[name]), f"{where}: {name}", MAX_META_BYTES))
        times: dict[str, datetime] = {}
        for name in _TIMES:
            if name in f:
                value = f[name]
                if isinstance(value, str):
                    try:
                        value = datetime.fromisoformat(value)
                    except ValueError:
                        raise ConfigError(f"{where}: {name} is not an ISO 8601 time: {value!r:.80}") from None
                if not isinstance(value, datetime) or value.tzinfo is None:
                    raise ConfigError(f"{where}: {name} must be a timezone-aware datetime, got {value!r:.80}")
                times[name] = value
        ids = f.get("ids")
        if ids is not None:
            if (isinstance(ids, str | bytes) or not isinstance(ids, Iterable)
                    or not all(isinstance(i, int) and not isinstance(i, bool) and 1 <= i < 2**63 for i in ids)):
                raise ConfigError(f"{where}: ids must be a list of job ids, got {ids!r:.80}")
            ids = tuple(int(i) for i in ids)  # plain ints: a JobId beside an int is a mixed list to psycopg
            if not 1 <= len(ids) <= MAX_IDS:
                raise ConfigError(f"{where}: ids must name 1 to {MAX_IDS} jobs, got {len(ids)}")
        return cls(ids=ids, states=states, queue=f.get("queue"), task=f.get("task"), tags=tags, meta=json_filters.get("meta"),
                   args=json_filters.get("args"), created_after=times.get("created_after"),
                   created_before=times.get("created_before"), finished_after=times.get("finished_after"),
                   finished_before=times.get("finished_before"))

    def is_empty(self) -> bool:
        return self == JobFilter()

    def restricted(self, states: Iterable[str]) -> JobFilter:
        """This filter with its states narrowed to ``states`` (an empty
        ``states`` tuple matches nothing)."""
        allowed = tuple(s for s in (self.states if self.states is not None else states) if s in set(states))
        return JobFilter(**{**self.to_dict(), "states": allowed})

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}

    def to_wire(self) -> dict[str, Any]:
        """The filters as JSON (the HTTP API's names): only those given."""
        out: dict[str, Any] = {}
        if self.states is not None:
            out["state"] = list(self.states)
        for name in ("queue", "task", "meta", "args"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if self.ids is not None:
            out["ids"] = list(self.ids)
        if self.tags:
            out["tags"] = list(self.tags)
        for name in _TIMES:
            if getattr(self, name) is not None:
                out[name] = getattr(self, name).isoformat()
        return out

    def fingerprint(self) -> str:
        wire = self.to_wire()
        if "state" in wire:
            wire["state"] = sorted(wire["state"])
        text = json.dumps(wire, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def cursor(self, last_id: int) -> str:
        """The ``after=`` of the page after one that ended at job ``last_id``."""
        raw = json.dumps({"id": last_id, "f": self.fingerprint()}, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    def read_cursor(self, cursor: object) -> int:
        """The job id a cursor of this filter continues below; ConfigError for a
        malformed cursor or one another filter's page gave."""
        if not isinstance(cursor, str) or not cursor or len(cursor) > 200:
            raise ConfigError(f"after= must be a cursor a page gave (page.next), got {cursor!r:.80}")
        try:
            d = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
            last_id, fp = d["id"], d["f"]
        except (binascii.Error, ValueError, TypeError, KeyError, UnicodeDecodeError):
            raise ConfigError(f"after= {cursor!r:.80} is not a cursor a page gave (page.next)") from None
        if not isinstance(last_id, int) or isinstance(last_id, bool) or last_id < 1:
            raise ConfigError(f"after= {cursor!r:.80} is not a cursor a page gave (page.next)")
        if fp != self.fingerprint():
            raise ConfigError("after= is a cursor from a search with other filters; pass the same filters as the "
                              "page that gave it, or start again without after=")
        return last_id

    def page(self, found: list[Job], limit: int) -> tuple[list[Job], str | None]:
        """A page of ``limit`` jobs from a search that asked for ``limit + 1``
        (the one more says another page follows), and that page's cursor."""
        return found[:limit], self.cursor(found[limit - 1].id) if len(found) > limit else None


@dataclass(frozen=True, slots=True)
class JobPage:
    """One page of ``app.jobs()``: its jobs, newest first, and ``next``: the
    ``after=`` of the next page (None: this is the last)."""

    jobs: list[Job] = field(default_factory=list)
    next: str | None = None


def contains(doc: Any, pattern: Any, top: bool = True) -> bool:
    """PostgreSQL's ``doc @> pattern`` for JSON values: an object holds each of
    the pattern's keys with a value that contains the pattern's; an array
    holds, for each of the pattern's elements, an element that contains it
    (a top-level array also contains a scalar it holds); scalars are equal
    (a number is not a boolean)."""
    if isinstance(pattern, dict):
        return isinstance(doc, dict) and all(k in doc and contains(doc[k], v, False) for k, v in pattern.items())
    if isinstance(pattern, list):
        return isinstance(doc, list) and all(any(contains(d, p, False) for d in doc) for p in pattern)
    if isinstance(doc, list):
        return top and any(not isinstance(d, dict | list) and _same_scalar(d, pattern) for d in doc)
    return not isinstance(doc, dict) and _same_scalar(doc, pattern)


def _same_scalar(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return type(a) is type(b) and a == b


def contains_json(doc: str | None, pattern: str | None) -> int | None:
    """``contains`` over JSON text, as SQLite calls it (``tether_contains``):
    NULL when either is NULL, as ``@>`` is."""
    if doc is None or pattern is None:
        return None
    try:
        return int(contains(json.loads(doc), json.loads(pattern)))
    except ValueError:
        return 0
