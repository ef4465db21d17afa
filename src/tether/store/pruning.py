"""``prune``'s and ``prune_ticks``' arguments, checked alike by every backend."""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import ConfigError
from ..model import TERMINAL_STATES, JobState

__all__ = ["check_limit", "check_prune"]


#: the finished states, as the error below lists them
_FINISHED = ", ".join(s for s in JobState if s.terminal)


def check_prune(ages: Mapping[JobState, float], limit: int | None = None) -> dict[JobState, float]:
    """``prune``'s arguments checked (ConfigError naming the bad one), as
    {finished state: age in seconds}."""
    out: dict[JobState, float] = {}
    for state, age in ages.items():
        try:
            st = JobState(state)
        except ValueError:
            st = None
        if st is None or st not in TERMINAL_STATES:
            raise ConfigError(f"only finished jobs are pruned ({_FINISHED}), not {state!r}")
        if isinstance(age, bool) or not isinstance(age, int | float) or not 0 <= age < float("inf"):
            raise ConfigError(f"the age to prune {st} jobs at must be a finite number of seconds >= 0, got {age!r}")
        out[st] = float(age)
    if limit is not None:
        check_limit(limit)
    return out


def check_limit(limit: int) -> int:
    """A prune's ``limit`` checked: an int >= 1 (ConfigError otherwise)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ConfigError(f"prune limit must be an int >= 1, got {limit!r}")
    return limit
