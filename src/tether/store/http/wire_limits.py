"""The HTTP API's per-key limit operations (issue 44: ``app.configure_limit``
and the key patterns of ``app.limits()``), as ``wire.Op`` keyword arguments;
``wire.py`` lists them beside the queue limits."""

from __future__ import annotations

from typing import Any

from ...naming import C0_CONTROLS
from ...payload import MAX_KEY_BYTES
from .schema import array, integer, nullable, number, obj, string

__all__ = ["KEY_LIMITS_RECORD", "key_limit_ops"]

_COUNT = integer(1, 2**31 - 1)
#: a limit-key pattern as key_patterns.check_pattern takes it: no control character, not blank
_PATTERN = f"^[^{C0_CONTROLS}\\x7f]*[^\\s{C0_CONTROLS}\\x7f][^{C0_CONTROLS}\\x7f]*$"
_USE = integer(0, 2**63 - 1)
#: a limit-key pattern's limits and use (model.KeyLimits), as key_limits answers
KEY_LIMITS_RECORD = obj({
    "pattern": string(MAX_KEY_BYTES, 1), "concurrency": nullable(_COUNT), "rate_limit": nullable(_COUNT),
    "rate_period": nullable({"type": "number"}), "keys": _USE, "running": _USE, "busiest": _USE, "started": _USE,
})


def key_limit_ops() -> list[dict[str, Any]]:
    """set_key_limits (admin, as set_limits) and key_limits (any token)."""
    body = obj({"pattern": string(MAX_KEY_BYTES, 1, _PATTERN), "concurrency": nullable(_COUNT),
                "rate": nullable(obj({"count": _COUNT, "period": number(0, 1e8, exclusive_min=True)}))})
    return [
        dict(name="set_key_limits", method="POST", path="/v1/limits/keys", scopes=("admin",),
             summary="Set a limit-key pattern's limits whole (both null: the pattern goes): each key it matches "
                     "(`*`: any characters) may have at most `concurrency` jobs running and `rate.count` started "
                     "in any `rate.period` seconds; a key takes its most specific matching pattern's limits",
             response=obj({}), body=body, takes_now=True, errors=(422,)),
        dict(name="key_limits", method="POST", path="/v1/limits/keys/read", scopes=("worker", "producer"),
             summary="Every limit-key pattern, with the keys in use under it, their running jobs and starts "
                     "in the window",
             response=obj({"limits": array(KEY_LIMITS_RECORD, 100_000)}),
             body=obj({}), takes_now=True),
    ]
