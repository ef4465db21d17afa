"""``/openapi.json``: the OpenAPI 3.1 document, generated from ``wire.OPS``,
the same table the server routes and validates with."""

from __future__ import annotations

from typing import Any

from .._version import __version__
from ..store.http import wire

__all__ = ["build_document"]

_ERRORS = {
    400: "Malformed JSON, a body or parameter outside the schema, or a refused client clock",
    401: "No bearer token, or one this server does not know",
    403: ("The token's scopes do not cover this operation, or (not_your_worker) a worker token names a worker "
          "id it did not register, or (too_many_workers) a registration over the token's or the queue's cap"),
    404: "No such job",
    409: "Refused by the job's state: a stale attempt (fence failed), an invalid transition, or a missing schema",
    413: "The request body is over the server's limit",
    415: "The body is not application/json",
    422: "A value the store refuses: bad queue name, payload not JSON or too large, misordered options",
    429: ("Too many failed authentications from this address (or from everywhere): wait Retry-After seconds; "
          "the token was not checked"),
    500: "An unexpected server error (details only in the server's log)",
    503: "The database did not answer",
}
_COMMON = (400, 401, 403, 429, 500, 503)


def _error_response(status: int) -> dict[str, Any]:
    return {"description": _ERRORS[status],
            "content": {"application/json": {"schema": wire.ERROR_RECORD}}}


def build_document(*, client_clock: bool, max_body: int, max_wait: float) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for op in wire.OPS:
        statuses = sorted({*_COMMON, *op.errors, *((413, 415) if op.body is not None else ())})
        operation: dict[str, Any] = {
            "operationId": op.name,
            "summary": op.summary,
            "description": f"Scopes: {' or '.join(op.scopes)} (admin may call everything).",
            "security": [{"bearer": []}],
            "responses": {"200": {"description": "OK",
                                  "content": {"application/json": {"schema": op.response}}},
                          **{str(st): _error_response(st) for st in statuses}},
        }
        params = [{"name": name, "in": "path", "required": True, "schema": wire.JOB_ID} for name in op.path_params]
        params += [{"name": name, "in": "query", "required": False, "schema": schema}
                   for name, schema in wire.request_query(op, client_clock=client_clock).items()]
        if params:
            operation["parameters"] = params
        body = wire.request_schema(op, client_clock=client_clock, max_wait=max_wait)
        if body is not None:
            operation["requestBody"] = {"required": bool(body.get("required")),
                                        "content": {"application/json": {"schema": body}}}
        paths.setdefault(op.path, {})[op.method.lower()] = operation
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "tether server",
            "version": __version__,
            "description": (
                "Remote workers and producers for a tether job queue: the server holds the database; workers "
                "claim, heartbeat and report over this API under the same lease and fencing rules as local "
                f"workers. Request bodies are at most {max_body} bytes. "
                + ("This server honours a client-supplied 'now' (testing only)." if client_clock else
                   "A client-supplied 'now' is refused.")
            ),
        },
        "paths": paths,
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }
