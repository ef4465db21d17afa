"""Running the API with uvicorn: in the foreground (``tether server``) or on a
background thread (tests, embedding)."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import uvicorn
from starlette.applications import Starlette

from .connections import HeaderLimits, Limits, uvicorn_options

__all__ = ["Limits", "ServerThread", "serve"]

def _config(app: Starlette, limits: Limits | None = None, http: str = "auto", **kwargs: Any) -> uvicorn.Config:
    limits = limits or Limits()
    return uvicorn.Config(HeaderLimits(app, limits), lifespan="on", access_log=False,
                          timeout_graceful_shutdown=5, **uvicorn_options(limits, http), **kwargs)


def serve(app: Starlette, host: str, port: int, *, log_level: str = "info", limits: Limits | None = None) -> None:
    """Run until SIGTERM/SIGINT, within ``limits`` (``connections``; default: its defaults)."""
    uvicorn.Server(_config(app, limits, host=host, port=port, log_level=log_level)).run()


class ServerThread:
    """The API on a free loopback port, on a daemon thread; ``url`` once started."""

    def __init__(self, app: Starlette, host: str = "127.0.0.1", *, limits: Limits | None = None,
                 http: str = "auto") -> None:
        # IPPROTO_TCP, not the default 0: asyncio sets TCP_NODELAY on accepted
        # connections only when the socket says it is TCP (base_events._set_nodelay
        # checks sock.proto, which accepted sockets inherit from this one). Without
        # it, uvicorn's two writes per response (headers, then body) meet Nagle's
        # algorithm: the body waits for the client's delayed ACK of the headers,
        # about 40 ms on Linux, for every request. (`serve` binds by host and port,
        # and asyncio's getaddrinfo sockets already carry IPPROTO_TCP.)
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, 0))
        self.port: int = self._sock.getsockname()[1]
        self.url = f"http://{host}:{self.port}"
        self._server = uvicorn.Server(_config(app, limits, http, log_level="warning"))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]},
                                        name="tether-server", daemon=True)

    def start(self, timeout: float = 10.0) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the tether server thread did not start")
            time.sleep(0.01)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout)
        self._sock.close()

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
