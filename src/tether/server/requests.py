"""Reading a request: its body (capped, JSON only, text the databases can
store), its path and query parameters, each validated against the schema the
server publishes, and the refusal of a client clock the server was not told to
trust. Every problem is an ``ApiError`` with its HTTP status and code."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from typing import Any

from starlette.requests import Request

from ..numbers import INT64_MIN, BadNumber, parse_int
from ..payload import unique_keys
from ..store.http import wire
from ..store.http.schema import SchemaViolation, compile_schema, parse_datetime, validate

__all__ = ["ApiError", "Args", "arguments", "client_gone", "read_body", "read_capped", "too_large"]

Args = dict[str, Any]


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None,
                 **extra: Any) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers, self.extra = status, code, message, headers, extra



def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    """A JSON number too large for a float (1e400) is refused as NaN is: it
    would read as infinity, which no store keeps (it was a 422 payload error,
    where the README promises a 400 for the body)."""
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"the number {text[:40]} is out of range for a float")
    return value


def check_text(value: Any) -> None:
    """Strings the databases cannot store: NUL characters and lone surrogates."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if "\x00" in v:
                raise SchemaViolation("strings may not contain NUL (\\u0000) characters")
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                raise SchemaViolation("strings must be valid Unicode (a lone surrogate escape was sent)") from None
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)


async def read_capped(request: Request, max_body: int) -> bytes:
    """The request's body, refused (413) as soon as it is known to be over
    ``max_body`` bytes: by its Content-Length before a byte is read, else
    while it streams in, so no more than ``max_body`` bytes (and one chunk) are
    ever held. The dashboard reads its forms with it too. A client that goes
    away mid-body raises Starlette's ``ClientDisconnect`` (see ``client_gone``)."""
    length = request.headers.get("content-length")
    if length is not None:
        try:
            declared = parse_int(length, "Content-Length")
        except BadNumber:
            raise ApiError(400, "bad_request", "Content-Length is not a number") from None
        if declared > max_body:
            raise too_large(max_body, declared)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > max_body:
            raise too_large(max_body, len(body))
    return bytes(body)


def client_gone(log: logging.Logger, request: Request, what: str) -> None:
    """One line for a client that disconnected before its request was read
    (mid-upload): nothing failed on this side, so no ERROR and no traceback."""
    client = request.client.host if request.client is not None else "unknown"
    log.info("%s: the client at %s disconnected before its request was read", what, client)


async def read_body(request: Request, max_body: int) -> Any:
    body = await read_capped(request, max_body)
    if not body.strip():
        return {}  # no body: the operation's defaults (a JSON null is another matter: refused below)
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype != "application/json":
        raise ApiError(415, "unsupported_media_type",
                       f"the body must be JSON with Content-Type: application/json (got {ctype or 'none'})")
    try:
        value = json.loads(body.decode("utf-8"), parse_constant=_reject_constant, parse_float=_finite,
                           object_pairs_hook=unique_keys)
        if b"\\" in body:  # a NUL or a lone surrogate can only come as an escape (\u0000, \ud800)
            check_text(value)
    except UnicodeDecodeError as exc:
        raise ApiError(400, "bad_request", f"the body is not UTF-8: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ApiError(400, "bad_request", f"the body is not valid JSON: {exc}") from None
    except RecursionError:
        raise ApiError(400, "bad_request", "the body nests JSON too deeply") from None
    except (ValueError, SchemaViolation) as exc:
        raise ApiError(400, "bad_request", f"the body is not acceptable JSON: {exc}") from None
    return value


def too_large(max_body: int, size: int) -> ApiError:
    return ApiError(413, "too_large", f"the request body is {size} bytes or more, over this server's limit of "
                                      f"{max_body} bytes: send fewer jobs per request or smaller payloads")


def _query_value(raw: str, schema: dict[str, Any], name: str) -> Any:
    if schema.get("type") == "integer":
        try:  # ASCII digits only: "²" or "--5" is a 400, "٣" is not 3
            return parse_int(raw, f"{name}", lo=INT64_MIN)
        except BadNumber as exc:
            raise SchemaViolation(str(exc)) from None
    if schema.get("type") == "boolean":
        if raw not in ("true", "false"):
            raise SchemaViolation(f"query parameter {name} must be true or false, got {raw!r}")
        return raw == "true"
    return raw


async def arguments(request: Request, op: wire.Op, *, client_clock: bool, max_body: int,
                    max_wait: float) -> Args:
    args: Args = {}
    try:
        for name in op.path_params:
            args[name] = validate(_query_value(request.path_params[name], wire.JOB_ID, name), wire.JOB_ID, name)
        query = wire.request_query(op, client_clock=client_clock)
        for key in request.query_params:
            if key == "now" and op.takes_now:
                refuse_client_clock(op, client_clock)
            if key not in query:
                raise SchemaViolation(f"unknown query parameter {key!r} (known: {', '.join(query) or 'none'})")
        for name, schema in query.items():
            values = request.query_params.getlist(name)
            if len(values) > 1:
                raise SchemaViolation(f"query parameter {name} given {len(values)} times")
            if values:
                args[name] = validate(_query_value(values[0], schema, name), schema, name)
        body = await read_body(request, max_body) if op.body is not None else {}
        if isinstance(body, dict) and "now" in body:
            refuse_client_clock(op, client_clock)
        check = _body_check(op, client_clock, max_wait)
        if check is not None:
            body = check(body, "body")
    except SchemaViolation as exc:
        raise ApiError(400, "bad_request", str(exc)) from None
    args.update(body)
    args["now"] = parse_datetime(args["now"]) if "now" in args else None
    return args


_CHECKS: dict[tuple[str, bool, float], Callable[[Any, str], Any] | None] = {}


def _body_check(op: wire.Op, client_clock: bool, max_wait: float) -> Callable[[Any, str], Any] | None:
    """The operation's body schema (as ``/openapi.json`` shows it), compiled once."""
    key = (op.name, client_clock, max_wait)
    if key not in _CHECKS:
        schema = wire.request_schema(op, client_clock=client_clock, max_wait=max_wait)
        _CHECKS[key] = None if schema is None else compile_schema(schema)
    return _CHECKS[key]


def refuse_client_clock(op: wire.Op, client_clock: bool) -> None:
    if not (op.takes_now and client_clock):
        raise ApiError(400, "client_clock_refused",
                       "this server does not accept a client-supplied 'now' (only a server started with "
                       "--unsafe-client-clock, for tests, does); leave it out")
