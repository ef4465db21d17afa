"""Failpoints: named places where a chaos run may SIGKILL its own worker.

They exist only when chaos asks for them: ``TETHER_FAILPOINTS`` holds
``name:probability`` pairs (``after_claim:0.02,during_heartbeat:0.01``) and a
seed in ``TETHER_FAILPOINT_SEED``. Without it, ``ARMED`` is empty and the
runtime's ``if failpoints.ARMED`` guard skips the call entirely.
"""

from __future__ import annotations

import os
import random
import signal

__all__ = ["ARMED", "NAMES", "hit", "parse"]

NAMES = ("after_claim", "mid_handler", "after_side_effect", "during_heartbeat")
ENV = "TETHER_FAILPOINTS"


def parse(spec: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, _, prob = part.partition(":")
        if name not in NAMES:
            raise ValueError(f"unknown failpoint {name!r}; known: {', '.join(NAMES)}")
        p = float(prob or "1")
        if not 0 <= p <= 1:
            raise ValueError(f"failpoint {name}: probability must be in [0, 1], got {p}")
        out[name] = p
    return out


ARMED: dict[str, float] = parse(os.environ.get(ENV, ""))
_rng = random.Random(int(os.environ.get("TETHER_FAILPOINT_SEED", "0")) ^ os.getpid())


def hit(name: str) -> None:
    """SIGKILL this process with the armed probability (no cleanup, no flush)."""
    p = ARMED.get(name)
    if p and _rng.random() < p:
        os.kill(os.getpid(), signal.SIGKILL)
