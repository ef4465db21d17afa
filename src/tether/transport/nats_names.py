"""Names and settings of the NATS transport: the stream prefix, each queue's
subject and durable consumer, the sweep's message ids, and the timer options
(no nats-py needed)."""

from __future__ import annotations

import math
import re
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ..config import Timers, redact_url, validate_queue
from ..errors import ConfigError
from ..model import DueJob

__all__ = ["ACK_WAIT_FACTOR", "ack_wait_for", "consumer_name", "server_of", "split_options", "subject_for",
           "sweep_msg_id", "validate_prefix"]

#: default ack_wait, as a multiple of the database's recovery bound
ACK_WAIT_FACTOR = 2.0
#: the options a transport URL may carry (``NatsTransport.from_url``)
URL_OPTIONS = ("prefix", "ack_wait", "fallback_interval", "sweep_interval", "sweep_grace")

_PREFIX = re.compile(r"[A-Za-z0-9_-]{1,48}")


def validate_prefix(prefix: str) -> str:
    if not isinstance(prefix, str) or not _PREFIX.fullmatch(prefix):
        raise ConfigError(
            f"NATS prefix {prefix!r} is not usable as a stream name and subject token: use letters, "
            "digits, '_' and '-', at most 48 characters"
        )
    return prefix


def server_of(url: str) -> str:
    """``host[:port]`` of a NATS URL without options; ConfigError otherwise."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("nats", "tls") or not parts.hostname:
        raise ConfigError(f"NATS URL {redact_url(url)!r} must look like nats://host:4222")
    try:
        port = parts.port
    except ValueError:
        raise ConfigError(f"NATS URL {redact_url(url)!r}: the port is not a number from 0 to 65535") from None
    if parts.query:
        raise ConfigError(f"NATS URL {redact_url(url)!r}: options go to NatsTransport(...), or use NatsTransport.from_url")
    return parts.hostname + (f":{port}" if port else "")


def split_options(spec: str) -> tuple[str, dict[str, Any]]:
    """A URL with options (``?prefix=NAME&ack_wait=S...``): the URL without them, and the options."""
    parts = urlsplit(spec)
    query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    unknown = sorted(set(query) - set(URL_OPTIONS))
    if unknown:
        raise ConfigError(f"NATS URL {redact_url(spec)!r}: unknown option(s) {', '.join(unknown)} "
                          f"(known: {', '.join(sorted(URL_OPTIONS))})")
    options: dict[str, Any] = {k: _seconds(v, k) for k, v in query.items() if k != "prefix"}
    if "prefix" in query:
        options["prefix"] = query["prefix"]
    return parts._replace(query="").geturl(), options


def ack_wait_for(setting: float | None, timers: Timers) -> float:
    """ack_wait against the timers: the database recovers first, JetStream
    redelivers last, so it must outlast a dead worker's recovery."""
    bound = timers.recovery_bound
    if setting is None:
        return ACK_WAIT_FACTOR * bound
    if setting <= bound:
        raise ConfigError(
            f"NATS ack_wait ({setting:g}s) must be longer than lease_ttl + reaper_interval "
            f"({timers.lease_ttl:g}s + {timers.reaper_interval:g}s = {bound:g}s), so that the database "
            f"recovers a dead worker's job before JetStream redelivers its message: raise ack_wait to "
            f"{ACK_WAIT_FACTOR * bound:g}s or more (or leave it unset), or shorten the lease timers"
        )
    return setting


def subject_for(prefix: str, queue: str) -> str:
    """The subject of one queue: ``.`` separates subject tokens, so it becomes ``~``
    (which queue names cannot contain, so the mapping is one to one)."""
    return f"{prefix}.jobs.{validate_queue(queue).replace('.', '~')}"


def consumer_name(prefix: str, queue: str) -> str:
    return f"{prefix}_{validate_queue(queue).replace('.', '~')}"


def _seconds(value: object, what: str) -> float:
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ConfigError(f"{what} must be a number of seconds, got {value!r}") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigError(f"{what} must be a positive, finite number of seconds, got {value!r}")
    return seconds


def sweep_msg_id(prefix: str, due: DueJob, period: float) -> str:
    """The sweep's message id for a due job: one per (job, attempt, run_at) and
    ``period`` (sweep_grace) of the wall clock. Every worker's sweep finds the
    same due job, and JetStream keeps only the first copy within its duplicate
    window; so a job nothing carries is published once a period, however many
    workers sweep. The period is in the id because a job may need a message
    again after its last one was delivered: a claim that held it back for its
    queue's room or its exclusive key acked that message, and the job stays
    queued. Without it the duplicate window (2 minutes) dropped every
    republish after the first (issue 22: chaos over NATS left such jobs
    queued at its drain's end)."""
    slot = int(time.time() // period)
    return f"{prefix}.{due.id}.{due.attempt}.{round(due.run_at.timestamp() * 1e6)}.{slot}"
