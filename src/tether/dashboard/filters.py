"""The jobs page's filter bar (issue 43): the query string's ``state``,
``queue``, ``task``, ``tag``, ``meta`` and ``args`` fields turned into the
keywords of ``app.jobs()`` (and of the bulk actions), with a clear error for
a malformed one.

``meta`` and ``args`` are expressions: terms ``key:value`` separated by
spaces, all of which the job's JSON must contain. The value is JSON when it
reads as JSON (``customer:42`` is the number, ``vip:true`` the boolean,
``code:"42"`` the text, ``name:"Ada Lovelace"`` text with a space,
``ids:[1,2]`` a list), else the bare word up to the next space
(``source:api``). A dotted key nests: ``plan.tier:gold`` is
``{"plan": {"tier": "gold"}}``. ``key=value``, as the CLI's ``--meta``
takes, is the same term. ``tag`` is a comma-separated list of tags
(jobs holding all of them).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from ..errors import TetherError
from ..model import JobState
from ..search import JobFilter

__all__ = ["FIELDS", "MAX_EXPRESSION", "BadFilter", "FilterBar", "parse_expression", "parse_filter_bar"]

#: the filter bar's fields, in the query string and in the bulk forms
FIELDS = ("state", "queue", "task", "tag", "meta", "args")
#: the longest expression (or field) the bar reads
MAX_EXPRESSION = 2000


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # NaN, Infinity: read as text


_DECODER = json.JSONDecoder(parse_constant=_no_constant)


class BadFilter(TetherError):
    """A filter bar field that does not parse (its message says which and why)."""


def parse_expression(text: str, name: str) -> dict[str, Any] | None:
    """``key:value key2:value2 ...`` as a JSON object for containment (see the
    module's docstring); None for a blank one; BadFilter when malformed."""
    out: dict[str, Any] = {}
    i, n = 0, len(text)
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            return out or None
        start = i
        space = next((j for j in range(i, n) if text[j].isspace()), n)
        colon = min((j for j in (text.find(":", i, space), text.find("=", i, space)) if j >= 0), default=-1)
        if colon < 0:
            raise BadFilter(f"{name}: {text[start:space]!r:.80} is not key:value (such as customer:42, "
                            'source:api, plan.tier:gold or name:"Ada Lovelace")')
        key = text[i:colon]
        if not key or any(not part for part in key.split(".")):
            raise BadFilter(f"{name}: {text[start:space]!r:.80} has an empty key (expected key:value)")
        i = colon + 1
        value: Any
        try:
            value, end = _DECODER.raw_decode(text, i)
            if end < n and not text[end].isspace():
                raise ValueError("more after the JSON value")
        except ValueError:
            if i < n and text[i] in "\"[{":
                raise BadFilter(f"{name}: the value of {key!r:.80} starts as JSON but is not JSON "
                                f"({text[i:i + 40]!r}); close its quotes or brackets") from None
            end = next((j for j in range(i, n) if text[j].isspace()), n)
            value = text[i:end]
            if not value:
                raise BadFilter(f"{name}: {key!r:.80} has no value (expected {key}:VALUE)") from None
        i = end
        _put(out, key.split("."), value, name, key)


def _put(into: dict[str, Any], path: list[str], value: Any, name: str, key: str) -> None:
    for part in path[:-1]:
        into = into.setdefault(part, {})
        if not isinstance(into, dict):
            raise BadFilter(f"{name}: {key!r:.80} nests under a key that already has a value")
    if path[-1] in into:
        raise BadFilter(f"{name}: {key!r:.80} is given twice")
    into[path[-1]] = value


@dataclass(frozen=True, slots=True)
class FilterBar:
    """The bar's fields as typed (shown back in the form) and, when they all
    parse, the filters for ``app.jobs()``; ``error`` says what does not."""

    fields: dict[str, str]
    filters: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    @property
    def query(self) -> str:
        """The non-empty fields as a query string (the page links keep them)."""
        return urlencode({k: v for k, v in self.fields.items() if v})

    @property
    def empty(self) -> bool:
        return not self.filters


def parse_filter_bar(params: Mapping[str, str]) -> FilterBar:
    """The filter bar from a query string or a form (the same field names)."""
    fields = {name: (params.get(name) or "").strip()[:MAX_EXPRESSION] for name in FIELDS}
    filters: dict[str, Any] = {}
    try:
        if fields["state"]:
            if fields["state"] not in {str(s) for s in JobState}:
                raise BadFilter(f"state: {fields['state']!r:.80} is not a state "
                                f"({', '.join(str(s) for s in JobState)})")
            filters["state"] = fields["state"]
        for name in ("queue", "task"):
            if fields[name]:
                filters[name] = fields[name]
        if fields["tag"]:
            tags = [t.strip() for t in fields["tag"].split(",") if t.strip()]
            if tags:
                filters["tags"] = tags
        for name in ("meta", "args"):
            expression = parse_expression(fields[name], name)
            if expression is not None:
                filters[name] = expression
        JobFilter.of(filters, "the filter")  # its own checks (tags' lengths, sizes) with their messages
    except TetherError as exc:
        return FilterBar(fields=fields, error=str(exc))
    return FilterBar(fields=fields, filters=filters)
