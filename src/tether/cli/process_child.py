"""One worker process of ``tether worker --processes N``, run by its
supervisor (``tether.cli.processes``) as ``python -m tether.cli.process_child``.

It is a normal tether worker with its own worker id: it registers, recovers
its dead predecessors' jobs (a sibling that died is one: its pid is gone),
heartbeats, and stops on SIGTERM (graceful) and on a second (now), as a
worker started by hand does. What it gets from its supervisor, in the
environment variable ``CHILD_ENV`` (JSON):

- the app reference, the database given on the command line, and the
  worker's options (``--metrics-port`` becomes a loopback port of its own,
  behind a token, that the supervisor scrapes);
- ``parent_fd``: the read end of a pipe whose only write end the supervisor
  holds. End of file on it means the supervisor is gone (even by SIGKILL):
  the worker then stops as on SIGTERM, so no orphan outlives its jobs' leases;
- ``status_fd``: where it writes one JSON line once it serves, with its
  worker id and metrics port; a child that exits before writing it failed to
  start (an import error in the app, a bad option), which its supervisor
  does not retry for ever.

Its log lines carry its index (``tether.worker[PID process 2]: ...``; in JSON,
``"process": 2``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
import threading
import time
from typing import Any

import click

from ..logs import LOG_FORMAT, JsonFormatter, TextFormatter, configure_worker_logging
from ..worker.runtime import RELEASE_GRACE
from .common import EXIT_FAILURE, load_app, one_line_errors
from .worker_cmd import run_worker

__all__ = ["CHILD_ENV", "ORPHAN_GRACE", "main"]

#: the environment variable that carries a child's instructions
CHILD_ENV = "TETHER_WORKER_PROCESS"
#: seconds past --shutdown-timeout an orphaned child waits for its releases
#: to be written (the worker's own RELEASE_GRACE) before it exits regardless
ORPHAN_GRACE = RELEASE_GRACE + 2.0


class _ChildJson(JsonFormatter):
    def __init__(self, index: int) -> None:
        super().__init__()
        self.index = index

    def format(self, record: logging.LogRecord) -> str:
        out = json.loads(super().format(record))
        out["process"] = self.index
        return json.dumps(out, default=str)


def _logging(index: int) -> Any:
    def configure(level: str, fmt: str) -> None:
        configure_worker_logging(level, fmt)
        formatter = _ChildJson(index) if fmt == "json" else \
            TextFormatter(LOG_FORMAT.replace("[%(process)d]", f"[%(process)d process {index}]"))
        for handler in logging.getLogger().handlers:
            handler.setFormatter(formatter)
    return configure


def _watch_parent(fd: int, shutdown_timeout: float) -> None:
    """Block on the supervisor's pipe; at its end (the supervisor died), stop
    as on SIGTERM; should anything still hold the process well past its
    shutdown timeout (its releases are bounded, handler threads are daemons:
    a backstop), exit anyway: an orphan runs nothing for long. A daemon
    thread: it never keeps the process alive."""
    def watch() -> None:
        try:
            while os.read(fd, 1):
                pass
        except OSError:
            pass
        log = logging.getLogger("tether.processes")
        log.warning("the supervisor is gone: stopping as on SIGTERM")
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(shutdown_timeout + ORPHAN_GRACE)
        log.error("still running %gs after the supervisor died: exiting now", shutdown_timeout + ORPHAN_GRACE)
        logging.shutdown()
        os._exit(EXIT_FAILURE)

    threading.Thread(target=watch, name="tether-parent-watch", daemon=True).start()


def main() -> None:
    spec: dict[str, Any] = json.loads(os.environ.pop(CHILD_ENV))
    index = int(spec["index"])
    _watch_parent(int(spec["parent_fd"]), float(spec["options"]["shutdown_timeout"]))
    status = os.fdopen(int(spec["status_fd"]), "w")

    def started(worker_id: str, metrics_port: int | None) -> None:
        with contextlib.suppress(OSError):  # the supervisor is gone: the parent watch stops this worker
            status.write(json.dumps({"worker": worker_id, "metrics_port": metrics_port}) + "\n")
            status.flush()

    try:
        with one_line_errors(lambda: bool(spec["debug"]), "tether --debug worker ..."):
            if spec.get("django") is not None:  # manage.py tether_worker --processes N
                from ..contrib.django.child import backend_app

                app = backend_app(spec["django"])
            else:
                app = load_app(spec["app"])
            run_worker(app, spec["app"], database=spec["database"], **spec["options"],
                       configure_logging=_logging(index), on_started=started)
    except click.ClickException as exc:
        click.echo(f"tether worker (process {index}): {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
