"""JSON Schema, the small subset the HTTP API uses, and a validator for it.

The server validates every request body and query against the same schema
dicts it publishes in ``/openapi.json``, so the document cannot drift from
what the server accepts. Supported keywords: ``type`` (one or a list),
``properties``, ``required``, ``additionalProperties`` (false or a schema),
``items``, ``minItems``/``maxItems``, ``minimum``/``maximum``/``exclusiveMinimum``,
``minLength``/``maxLength``, ``pattern``, ``enum`` and ``format: date-time``.
An integral number (``60.0``) is an integer, as JSON Schema says; ``validate``
returns the value with such numbers turned into ``int``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from datetime import datetime
from typing import Any

__all__ = [
    "ANY_JSON",
    "DATETIME",
    "SchemaViolation",
    "array",
    "boolean",
    "compile_schema",
    "integer",
    "nullable",
    "number",
    "obj",
    "parse_datetime",
    "string",
    "validate",
]

Schema = dict[str, Any]

INT32_MAX = 2**31 - 1
INT53_MAX = 2**53 - 1  # ids: exact in every JSON parser

ANY_JSON: Schema = {}  # any JSON value
DATETIME: Schema = {"type": "string", "format": "date-time", "maxLength": 64}
#: no NUL characters: PostgreSQL cannot store them
NO_NUL = "^[^\\u0000]*$"


class SchemaViolation(ValueError):
    """A request that does not fit its schema; the message names the field."""


def obj(props: dict[str, Schema], optional: tuple[str, ...] = ()) -> Schema:
    """A closed object: every property required unless named in ``optional``."""
    return {"type": "object", "properties": props, "required": [k for k in props if k not in optional],
            "additionalProperties": False}


def nullable(schema: Schema) -> Schema:
    t = schema["type"]
    return {**schema, "type": [*(t if isinstance(t, list) else [t]), "null"]}


def string(max_length: int = 1000, min_length: int = 0, pattern: str = NO_NUL) -> Schema:
    return {"type": "string", "minLength": min_length, "maxLength": max_length, "pattern": pattern}


def integer(minimum: int = 0, maximum: int = INT32_MAX) -> Schema:
    return {"type": "integer", "minimum": minimum, "maximum": maximum}


def number(minimum: float = 0, maximum: float = 1e6, *, exclusive_min: bool = False) -> Schema:
    if exclusive_min:
        return {"type": "number", "exclusiveMinimum": minimum, "maximum": maximum}
    return {"type": "number", "minimum": minimum, "maximum": maximum}


def boolean() -> Schema:
    return {"type": "boolean"}


def array(items: Schema, max_items: int = 1000, min_items: int = 0) -> Schema:
    return {"type": "array", "items": items, "minItems": min_items, "maxItems": max_items}


def parse_datetime(text: str) -> datetime:
    """An RFC 3339 time with an offset (``Z`` or ``+hh:mm``)."""
    try:
        value = datetime.fromisoformat(text)
        if value.tzinfo is None:
            raise ValueError("no timezone offset")
        value.timestamp()  # an offset that pushes it out of range fails here, not later
    except (ValueError, OverflowError) as exc:
        raise SchemaViolation(f"{text!r} is not an RFC 3339 date-time with an offset: {exc}") from None
    return value


def _type_ok(value: Any, t: str) -> bool:
    if t == "null":
        return value is None
    if t == "boolean":
        return isinstance(value, bool)
    if t == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and math.isfinite(value) and value.is_integer())
    if t == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if t == "string":
        return isinstance(value, str)
    if t == "array":
        return isinstance(value, list)
    if t == "object":
        return isinstance(value, dict)
    raise AssertionError(f"unsupported schema type {t}")


def validate(value: Any, schema: Schema, where: str = "body") -> Any:
    """``value`` with integral numbers of integer fields as ``int``; raise
    SchemaViolation naming the first place it leaves ``schema``."""
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_type_ok(value, t) for t in types):
            raise SchemaViolation(f"{where} must be {' or '.join(types)}, got {_kind(value)}")
        if isinstance(value, float) and "integer" in types:
            value = int(value)
    if value is None:
        return value
    if "enum" in schema and value not in schema["enum"]:
        raise SchemaViolation(f"{where} must be one of {', '.join(map(str, schema['enum']))}, got {value!r}")
    if isinstance(value, str):
        _check_string(value, schema, where)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        _check_number(value, schema, where)
    elif isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            raise SchemaViolation(f"{where} needs at least {schema['minItems']} item(s)")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            raise SchemaViolation(f"{where} has {len(value)} items, more than the {schema['maxItems']} allowed")
        if "items" in schema:
            value = [validate(item, schema["items"], f"{where}[{i}]") for i, item in enumerate(value)]
    elif isinstance(value, dict):
        value = _check_object(value, schema, where)
    return value


def _check_string(value: str, schema: Schema, where: str) -> None:
    if len(value) < schema.get("minLength", 0):
        raise SchemaViolation(f"{where} must not be empty" if schema["minLength"] == 1 else
                              f"{where} must be at least {schema['minLength']} characters")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        raise SchemaViolation(f"{where} is {len(value)} characters, more than the {schema['maxLength']} allowed")
    if "pattern" in schema and not _regex(schema["pattern"]).search(value):
        raise SchemaViolation(f"{where} {value!r} does not match {schema['pattern']}" if schema["pattern"] != NO_NUL
                              else f"{where} contains a NUL (\\u0000) character, which cannot be stored")
    if schema.get("format") == "date-time":
        try:
            parse_datetime(value)
        except SchemaViolation as exc:
            raise SchemaViolation(f"{where}: {exc}") from None


def _check_number(value: float, schema: Schema, where: str) -> None:
    if "minimum" in schema and value < schema["minimum"]:
        raise SchemaViolation(f"{where} must be >= {schema['minimum']}, got {value!r}")
    if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
        raise SchemaViolation(f"{where} must be > {schema['exclusiveMinimum']}, got {value!r}")
    if "maximum" in schema and value > schema["maximum"]:
        raise SchemaViolation(f"{where} must be <= {schema['maximum']}, got {value!r}")


def _check_object(value: dict[str, Any], schema: Schema, where: str) -> dict[str, Any]:
    props: dict[str, Schema] = schema.get("properties", {})
    for key in schema.get("required", []):
        if key not in value:
            raise SchemaViolation(f"{where}.{key} is required")
    extra = schema.get("additionalProperties", True)
    names: Schema | None = schema.get("propertyNames")
    out: dict[str, Any] = {}
    for key, item in value.items():
        if names is not None:
            validate(key, names, f"{where} key {key!r}:")
        if key in props:
            out[key] = validate(item, props[key], f"{where}.{key}")
        elif extra is False:
            raise SchemaViolation(f"{where} has an unknown field {key!r} (known: {', '.join(props) or 'none'})")
        elif isinstance(extra, dict):
            out[key] = validate(item, extra, f"{where}.{key}")
        else:
            out[key] = item
    return out


# -- compiled: the server's hot path ---------------------------------------------------
class _Slow(Exception):
    """Not a value the compiled check passes as is: ``validate`` decides."""


Check = Callable[[Any], Any]
#: integers past this go through validate (no float can stand for them)
_BIG = 2**1000
_KNOWN = frozenset({"type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
                    "minimum", "maximum", "exclusiveMinimum", "minLength", "maxLength", "pattern", "enum"})


def compile_schema(schema: Schema) -> Callable[[Any, str], Any]:
    """``validate`` for one schema, compiled once: a request that fits is
    checked without walking the schema's dicts or naming every field it
    passes; anything else (a refusal, an integral float to turn into an int)
    goes through ``validate`` itself, which gives the same answer and error."""
    check = _compile(schema)

    def run(value: Any, where: str = "body") -> Any:
        try:
            return check(value)
        except _Slow:
            return validate(value, schema, where)

    return run


def _compile(schema: Schema) -> Check:
    if not schema.keys() <= _KNOWN or schema.get("format") is not None:
        return _generic(schema)
    types = schema.get("type")
    types = frozenset(types if isinstance(types, list) else [types] if types is not None else [])
    nullable = "null" in types
    kinds = types - {"null"}
    if len(kinds) > 1:
        return _generic(schema)
    kind = next(iter(kinds), None)
    enum = None if "enum" not in schema else frozenset(schema["enum"])
    if kind == "integer" or kind == "number":
        lo, hi = schema.get("minimum", -math.inf), schema.get("maximum", math.inf)
        xlo = schema.get("exclusiveMinimum", -math.inf)
        floats = kind == "number"  # an integer's integral float becomes an int: validate does that

        def number(v: Any) -> Any:
            t = type(v)
            if ((t is int and -_BIG < v < _BIG) or (floats and t is float and math.isfinite(v))) and (
                    lo <= v <= hi and v > xlo and (enum is None or v in enum)):
                return v
            if v is None and nullable:
                return None
            raise _Slow
        return number
    if kind == "string":
        lo_len, hi_len = schema.get("minLength", 0), schema.get("maxLength", math.inf)
        rx = None if "pattern" not in schema else _regex(schema["pattern"])

        def string(v: Any) -> Any:
            if type(v) is str and lo_len <= len(v) <= hi_len and (rx is None or rx.search(v)) and (
                    enum is None or v in enum):
                return v
            if v is None and nullable:
                return None
            raise _Slow
        return string
    if kind == "boolean" and enum is None:
        def boolean(v: Any) -> Any:
            if type(v) is bool or (v is None and nullable):
                return v
            raise _Slow
        return boolean
    if kind == "array" and enum is None:
        lo_n, hi_n = schema.get("minItems", 0), schema.get("maxItems", math.inf)
        item = None if "items" not in schema else _compile(schema["items"])

        def array(v: Any) -> Any:
            if type(v) is list and lo_n <= len(v) <= hi_n:
                return v if item is None else [item(x) for x in v]
            if v is None and nullable:
                return None
            raise _Slow
        return array
    if kind == "object" and enum is None:
        return _object(schema, nullable)
    if kind is None and not nullable and enum is None and len(schema) == 0:  # any JSON value
        return lambda v: dict(v) if type(v) is dict else v
    return _generic(schema)


def _object(schema: Schema, nullable: bool) -> Check:
    props = {k: _compile(v) for k, v in schema.get("properties", {}).items()}
    required = tuple(schema.get("required", ()))
    extra = schema.get("additionalProperties", True)
    extra_check = _compile(extra) if isinstance(extra, dict) else None

    def obj(v: Any) -> Any:
        if type(v) is not dict:
            if v is None and nullable:
                return None
            raise _Slow
        for key in required:
            if key not in v:
                raise _Slow
        out: dict[str, Any] = {}
        for key, item in v.items():
            check = props.get(key)
            if check is not None:
                out[key] = check(item)
            elif extra is False:
                raise _Slow
            elif extra_check is not None:
                out[key] = extra_check(item)
            else:
                out[key] = item
        return out
    return obj


def _generic(schema: Schema) -> Check:
    def check(v: Any) -> Any:
        try:
            return validate(v, schema)
        except SchemaViolation:
            raise _Slow from None
    return check


_REGEX_CACHE: dict[str, re.Pattern[str]] = {}


def _regex(pattern: str) -> re.Pattern[str]:
    """A schema's pattern as JSON Schema reads it (ECMA-262): a final ``$`` is
    the end of the string. Python's ``$`` also matches before a final newline,
    which let "default\\n" through as a queue name."""
    if pattern not in _REGEX_CACHE:
        ecma = pattern[:-1] + r"\Z" if pattern.endswith("$") and not pattern.endswith(r"\$") else pattern
        _REGEX_CACHE[pattern] = re.compile(ecma)
    return _REGEX_CACHE[pattern]


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, float) and not math.isfinite(value):
        return "a non-finite number"
    return {int: "integer", float: "number", str: "string", list: "array", dict: "object"}.get(type(value), "?")
