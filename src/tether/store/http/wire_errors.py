"""The HTTP API's error codes: each of tether's own errors a server answers
with, its status, and the exception the client raises for it (split from
wire.py, which re-exports them)."""

from __future__ import annotations

from ...errors import (
    ConfigError,
    InvalidDSN,
    InvalidTransition,
    JobNotFound,
    PayloadError,
    ScheduleNotFound,
    SchemaMissing,
    StaleAttempt,
    TetherError,
    UnknownTask,
)

__all__ = ["ERRORS", "error_code"]


# -- errors -------------------------------------------------------------------------------
#: error code -> (HTTP status, the exception the client raises)
ERRORS: dict[str, tuple[int, type[TetherError]]] = {
    "stale_attempt": (409, StaleAttempt),
    "invalid_transition": (409, InvalidTransition),
    "schema_missing": (409, SchemaMissing),
    "job_not_found": (404, JobNotFound),
    "schedule_not_found": (404, ScheduleNotFound),
    "payload_error": (422, PayloadError),
    "unknown_task": (422, UnknownTask),
    "invalid_dsn": (422, InvalidDSN),
    "config_error": (422, ConfigError),
}


def error_code(exc: TetherError) -> str:
    """The wire code of one of tether's own errors (the most specific class wins)."""
    for cls in type(exc).__mro__:
        for code, (_, known) in ERRORS.items():
            if cls is known:
                return code
    return "config_error"
