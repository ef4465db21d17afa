"""Transports: how job ids reach workers (the database owns the jobs either way).

``open_transport`` turns a setting into a transport:

- ``None`` or ``"notify"``: the database, LISTEN/NOTIFY on PostgreSQL (polling on SQLite);
- ``"poll"``: the database, polling only;
- ``"nats://host:4222"`` (``?prefix=NAME&ack_wait=SECONDS``): NATS JetStream.
"""

from __future__ import annotations

from ..config import redact_url
from ..errors import ConfigError
from .base import DatabaseTransport, Delivery, Transport, announce, due_now

__all__ = ["DatabaseTransport", "Delivery", "Transport", "announce", "due_now", "open_transport"]


def open_transport(spec: str | Transport | None) -> Transport:
    if isinstance(spec, Transport):
        return spec
    if spec is None or spec == "notify":
        return DatabaseTransport(listen=True)
    if spec == "poll":
        return DatabaseTransport(listen=False)
    if isinstance(spec, str) and spec.split("://", 1)[0].lower() in ("nats", "tls"):
        try:
            from .nats import NatsTransport
        except ModuleNotFoundError as exc:
            if exc.name != "nats" and not (exc.name or "").startswith("nats."):
                raise
            raise ConfigError("the NATS transport needs its extra: pip install 'tether[nats]' "
                              f"(importing nats-py failed: {exc})") from None
        return NatsTransport.from_url(spec)
    shown = redact_url(spec) if isinstance(spec, str) else spec  # nats://user:password@... mistyped
    raise ConfigError(
        f"unknown transport {shown!r}: use 'notify' (the default), 'poll', or a NATS URL such as "
        "nats://127.0.0.1:4222"
    )
