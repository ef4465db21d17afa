"""The connection limits that ``tether server`` and ``tether dashboard`` share
(``server.connections``), as command-line options."""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable
from typing import Any

import click

from ..config import (
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
    DEFAULT_MAX_HEADER_BYTES,
    DEFAULT_MAX_HEADERS,
    DEFAULT_REQUEST_TIMEOUT,
)
from .common import BadUsage, Seconds

__all__ = ["configure_logging", "limit_options"]

_OPTIONS = [
    click.option("--max-header-bytes", type=click.IntRange(min=1024), default=DEFAULT_MAX_HEADER_BYTES,
                 show_default=True, help="Largest request line plus headers, in bytes (larger: 431, as it arrives)."),
    click.option("--max-headers", type=click.IntRange(min=1), default=DEFAULT_MAX_HEADERS, show_default=True,
                 help="Most header lines in one request (more: 431)."),
    click.option("--request-timeout", type=Seconds(), default=DEFAULT_REQUEST_TIMEOUT, show_default=True,
                 help="Seconds a request may take to arrive whole (line, headers, body) from its first byte "
                      "or its connection's opening; then 408 and the connection is closed."),
    click.option("--max-connections", type=click.IntRange(min=1), default=DEFAULT_MAX_CONNECTIONS,
                 show_default=True, help="Open connections at most (more: 503 and closed at once); keep it "
                                         "under the file limit (ulimit -n)."),
    click.option("--max-connections-per-client", type=click.IntRange(min=1),
                 default=DEFAULT_MAX_CONNECTIONS_PER_CLIENT, show_default=True,
                 help="Open connections from one address at most (behind a reverse proxy: the proxy's)."),
    click.option("--forwarded-allow-ips", default=None, metavar="ADDRESSES",
                 help="Reverse proxies (comma-separated addresses, or '*') whose X-Forwarded-For header names "
                      "the client (for the login throttle and logs). Default: none; a client is its "
                      "connection's address."),
]


def limit_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Adds the options; the command gets them as one ``limits`` argument (a ``Limits``)."""

    @functools.wraps(command)
    def wrapper(*args: Any, max_header_bytes: int, max_headers: int, request_timeout: float, max_connections: int,
                max_connections_per_client: int, forwarded_allow_ips: str | None, **kwargs: Any) -> Any:
        try:
            from ..server.connections import Limits
        except ImportError as exc:
            raise BadUsage(f"tether {command.__name__} needs its extra: pip install 'tether[{command.__name__}]' "
                           f"({exc})") from None
        kwargs["limits"] = Limits(max_header_bytes=max_header_bytes, max_headers=max_headers,
                                  request_timeout=request_timeout, max_connections=max_connections,
                                  max_connections_per_client=max_connections_per_client,
                                  forwarded_allow_ips=forwarded_allow_ips)
        return command(*args, **kwargs)

    decorated: Callable[..., Any] = wrapper
    for option in reversed(_OPTIONS):
        decorated = option(decorated)
    return decorated


def configure_logging(level: str) -> None:
    """The served faces' log on stderr: one line a record, with time, level and logger."""
    logging.basicConfig(level=level.upper(), stream=sys.stderr, force=True,
                        format="%(asctime)s %(levelname)-7s %(name)s[%(process)d]: %(message)s")
