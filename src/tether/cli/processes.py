"""``tether worker --processes N``: one supervisor and N worker processes.

Each child (``tether.cli.process_child``) is a normal tether worker with its
own worker id, so the database's leases, heartbeats, reaper and start-up
reconcile work unchanged: a live sibling is never reconciled (its pid is alive
with the start time it registered), and a child that died is reaped by the
supervisor before its replacement starts, so the replacement finds its pid
gone and recovers its jobs at once. The supervisor imports no user code and
opens no database connection.

- SIGTERM/SIGINT: forwarded to every child as SIGTERM (children run in a
  session of their own, so a terminal's Ctrl-C reaches them only through
  here, once): they stop claiming, wait ``--shutdown-timeout`` and release
  the rest without spending their budget; a second signal is forwarded again,
  and children stop now.
- A child that dies is restarted after a back-off that doubles while its
  replacements keep dying (``PoolConfig``); one that exits 0 (``--burst``)
  is done. A child that dies before it serves failed to start: the first
  child starts alone, and until one has served, a start failure that is a
  usage error (exit code 2: an import error in the app, a bad option) ends
  the supervisor at once, the child's error shown once; other start failures
  (the database unreachable) are retried, and ``start_failures`` in a row end
  it. It exits non-zero then. Once a child has served, children that die are
  restarted for as long as the supervisor runs (the back-off capped): a
  database outage that kills one must not end its live siblings.
- The supervisor's death (even SIGKILL) closes the pipe every child watches:
  they stop as on SIGTERM (``process_child``).
- ``--metrics-port``: the supervisor serves one scrape for all of them,
  gathered from each child's own loopback endpoint (``process_metrics``).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from ..errors import ConfigError
from ..logs import configure_worker_logging
from .common import EXIT_FAILURE, EXIT_USAGE
from .process_child import CHILD_ENV

__all__ = ["DEFAULT_PROCESSES", "MAX_START_FAILURES", "RESTART_BACKOFF", "RESTART_BACKOFF_MAX",
           "STABLE_AFTER", "PoolConfig", "Supervisor", "run_processes"]

log = logging.getLogger("tether.processes")

DEFAULT_PROCESSES = 1
#: seconds before the first restart of a child that died
RESTART_BACKOFF = 1.0
#: the back-off doubles while replacements keep dying, up to this
RESTART_BACKOFF_MAX = 30.0
#: a child that served this long resets its slot's back-off
STABLE_AFTER = 60.0
#: start failures in a row (children dead before they served) that end the supervisor
MAX_START_FAILURES = 3
#: how often the supervisor looks at its children when nothing happens
TICK = 0.2


@dataclass(frozen=True, slots=True)
class PoolConfig:
    """How the supervisor runs its children; checked when built."""

    processes: int = DEFAULT_PROCESSES
    restart_backoff: float = RESTART_BACKOFF
    restart_backoff_max: float = RESTART_BACKOFF_MAX
    stable_after: float = STABLE_AFTER
    start_failures: int = MAX_START_FAILURES

    def __post_init__(self) -> None:
        for name in ("processes", "start_failures"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name} must be a whole number >= 1, got {value!r}")
        for name in ("restart_backoff", "restart_backoff_max", "stable_after"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value < float("inf"):
                raise ConfigError(f"{name} must be a positive, finite number of seconds, got {value!r}")
        if self.restart_backoff_max < self.restart_backoff:
            raise ConfigError(f"restart_backoff_max ({self.restart_backoff_max!r}) is less than "
                              f"restart_backoff ({self.restart_backoff!r})")


@dataclass(slots=True)
class _Slot:
    """One child's place: the process in it now, and its restart state."""

    index: int
    backoff: float
    proc: subprocess.Popen[bytes] | None = None
    status: Any = None  # the read end of the child's status pipe (a binary file)
    started_at: float = 0.0
    worker: str | None = None  # its worker id, once it serves
    metrics_port: int | None = None
    restart_at: float | None = 0.0  # None: not to start (done, or stopping)
    buffer: bytes = field(default=b"")

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None


class Supervisor:
    """Runs ``config.processes`` children of one app until they stop; ``run()``
    returns the exit code. ``spec``: what each child is told (the app, the
    database, the worker's options; see ``process_child``)."""

    def __init__(self, config: PoolConfig, spec: dict[str, Any], *, log_level: str = "info",
                 log_format: str = "text", metrics: dict[str, Any] | None = None) -> None:
        self.config = config
        self.spec = spec
        self.log_level = log_level
        self.log_format = log_format
        #: the public metrics endpoint's options (port, host, token, no_auth), or None
        self.metrics = metrics
        #: children's own endpoints answer only to this
        self.metrics_token = secrets.token_urlsafe(24)
        self.slots = [_Slot(i, config.restart_backoff) for i in range(1, config.processes + 1)]
        self.signals: list[int] = []
        self.forwarded = 0
        self.stopping = False
        self.ever_served = False
        self.start_failures = 0
        self.exit_code = 0
        self.selector = selectors.DefaultSelector()
        # The pipe every child watches: the supervisor holds the only write end
        # (not inheritable), so its death, however it comes, is EOF for them.
        self.parent_read, self.parent_write = os.pipe()

    # -- children ------------------------------------------------------------------------
    def _start(self, slot: _Slot) -> None:
        status_read, status_write = os.pipe()
        options = dict(self.spec["options"])
        if self.metrics is not None:  # each child on a loopback port of its own, behind our token
            options.update(metrics_port=0, metrics_host="127.0.0.1", metrics_token=self.metrics_token,
                           metrics_no_auth=False)
        env = dict(os.environ)
        env[CHILD_ENV] = json.dumps({**self.spec, "options": options, "index": slot.index,
                                     "parent_fd": self.parent_read, "status_fd": status_write})
        try:
            slot.proc = subprocess.Popen([sys.executable, "-m", "tether.cli.process_child"], env=env,
                                         pass_fds=(self.parent_read, status_write), start_new_session=True)
        finally:
            os.close(status_write)
        slot.status = os.fdopen(status_read, "rb", buffering=0)
        os.set_blocking(status_read, False)
        self.selector.register(slot.status, selectors.EVENT_READ, slot)
        slot.started_at = time.monotonic()
        slot.worker = slot.metrics_port = None
        slot.restart_at = None
        log.info("worker process %d started (pid %d)", slot.index, slot.proc.pid)

    def _read_status(self, slot: _Slot) -> None:
        try:
            data = slot.status.read() if slot.status is not None else b""
        except BlockingIOError:
            return
        if data is None:  # nothing to read yet
            return
        if not data:
            self._close_status(slot)
            return
        slot.buffer += data
        while b"\n" in slot.buffer:
            line, slot.buffer = slot.buffer.split(b"\n", 1)
            message = json.loads(line)
            slot.worker, slot.metrics_port = message["worker"], message["metrics_port"]
            self.ever_served = True
            self.start_failures = 0
            log.info("worker process %d (pid %d) serves as worker %s", slot.index,
                     slot.proc.pid if slot.proc else 0, slot.worker)

    def _close_status(self, slot: _Slot) -> None:
        if slot.status is not None:
            self.selector.unregister(slot.status)
            slot.status.close()
            slot.status = None

    def _ended(self, slot: _Slot, code: int) -> None:
        """``slot``'s child exited with ``code`` (negative: killed by that signal)."""
        if slot.status is not None:
            self._read_status(slot)  # a last line it wrote before dying
            self._close_status(slot)
        how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
        pid = slot.proc.pid if slot.proc else 0
        if self.stopping:
            log.info("worker process %d (pid %d) %s", slot.index, pid, how)
            return
        if code == 0:
            log.info("worker process %d (pid %d) finished", slot.index, pid)
            return
        now = time.monotonic()
        if slot.worker is None and not self.ever_served:  # no child has served yet: a start failure
            self.start_failures += 1
            if code == EXIT_USAGE or self.start_failures >= self.config.start_failures:
                times = "" if self.start_failures == 1 else f", {self.start_failures} times in a row"
                log.error("worker process %d (pid %d) %s before it started%s (its error is above): giving up",
                          slot.index, pid, how, times)
                self.exit_code = code if code > 0 else EXIT_FAILURE
                self.stop()
                return
        elif now - slot.started_at >= self.config.stable_after:
            slot.backoff = self.config.restart_backoff
        slot.restart_at = now + slot.backoff
        log.warning("worker process %d (pid %d) %s; restarting it in %gs", slot.index, pid, how, slot.backoff)
        slot.backoff = min(slot.backoff * 2, self.config.restart_backoff_max)

    # -- signals -------------------------------------------------------------------------
    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signals.append(signum)  # handled by the loop, not in the handler

    def _forward_signals(self) -> None:
        while self.forwarded < len(self.signals):
            signum = self.signals[self.forwarded]
            self.forwarded += 1
            name = signal.Signals(signum).name
            live = [s for s in self.slots if s.alive]
            if self.forwarded == 1 and not self.stopping:
                log.warning("%s: stopping %d worker process(es): no new claims, running jobs get up to %gs "
                            "(send again to stop now)", name, len(live), self.spec["options"]["shutdown_timeout"])
            else:
                log.warning("%s again: worker processes stop now, releasing their jobs", name)
            self.stopping = True
            self._signal_children()

    def _signal_children(self) -> None:
        for slot in self.slots:
            slot.restart_at = None
            if slot.alive and slot.proc is not None:
                slot.proc.send_signal(signal.SIGTERM)  # (a zombie not yet polled takes it harmlessly)

    def stop(self) -> None:
        """Stop every child gracefully (as one SIGTERM)."""
        if not self.stopping:
            self.stopping = True
            self._signal_children()

    # -- the loop ------------------------------------------------------------------------
    def _due(self, now: float) -> list[_Slot]:
        if self.stopping:
            return []
        first = self.slots[0]
        if not self.ever_served:  # the first child starts alone: a broken app says so once
            return [first] if first.restart_at is not None and first.restart_at <= now and not first.alive else []
        return [s for s in self.slots if s.restart_at is not None and s.restart_at <= now and not s.alive]

    def run(self) -> int:
        configure_worker_logging(self.log_level, self.log_format)
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        server = None
        try:
            if self.metrics is not None:
                from .process_metrics import serve_children_metrics

                server = serve_children_metrics(self.targets, self.metrics_token, **self.metrics)
            log.info("supervisor (pid %d): %d worker processes of %s", os.getpid(), len(self.slots),
                     self.spec["app"])
            self._loop()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if server is not None:
                server.close()
            for slot in self.slots:  # only if the loop itself failed: no child is left behind
                if slot.alive and slot.proc is not None:
                    slot.proc.kill()
                    slot.proc.wait()
                self._close_status(slot)
            os.close(self.parent_write)
            os.close(self.parent_read)
            self.selector.close()
        log.info("supervisor stopped%s", "" if self.exit_code == 0 else f" (exit code {self.exit_code})")
        return self.exit_code

    def _loop(self) -> None:
        while True:
            self._forward_signals()
            now = time.monotonic()
            for slot in self._due(now):
                self._start(slot)
            for key, _ in self.selector.select(TICK):
                self._read_status(key.data)
            for slot in self.slots:
                if slot.proc is not None and slot.proc.returncode is None:
                    code = slot.proc.poll()
                    if code is not None:
                        self._ended(slot, code)
            if not any(s.alive for s in self.slots) and (
                    self.stopping or all(s.restart_at is None for s in self.slots)):
                return

    def targets(self) -> list[tuple[int, int]]:
        """(index, metrics port) of every child that serves now."""
        return [(s.index, s.metrics_port) for s in self.slots if s.alive and s.metrics_port is not None]


def run_processes(processes: int, *, app_ref: str, database: str | None, debug: bool, options: dict[str, Any],
                  django: str | None = None) -> int:
    """``tether worker --processes N`` with the worker's other options (as
    ``worker_options`` gives them); returns the exit code. ``django``: the
    TASKS alias whose TetherBackend each child runs (``manage.py tether_worker
    --processes N``), instead of importing ``app_ref``."""
    metrics = None if options["metrics_port"] is None else {
        "port": options["metrics_port"], "host": options["metrics_host"], "token": options["metrics_token"],
        "no_auth": options["metrics_no_auth"]}
    spec = {"app": app_ref, "django": django, "database": database, "debug": debug,
            "options": {**options, "queues": list(options["queues"])}}
    return Supervisor(PoolConfig(processes=processes), spec, log_level=options["log_level"],
                      log_format=options["log_format"], metrics=metrics).run()
