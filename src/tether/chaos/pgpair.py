"""A scratch primary with a streaming standby, for the ``failover`` fault: the
primary is killed (SIGKILL, every process of it, as a machine dies), the
standby promoted (``pg_ctl promote``), and a fresh standby made from the new
primary with ``pg_basebackup`` on the dead one's port, so that a long run can
fail over again and again while its clients keep one multi-host URL
(``host1:p1,host2:p2`` with ``target_session_attrs=read-write``: libpq tries
each host and keeps the one that takes writes).

Replication is synchronous (``synchronous_standby_names='*'`` with
``synchronous_commit=on``, the default: a commit is acknowledged once the
standby has flushed its WAL; from the promotion until the rebuilt standby
streams the new primary has none and commits alone, as Patroni's
``synchronous_mode`` does, and the harness never kills it then) or
asynchronous (acknowledged at once; the standby follows as it can). To make the asynchronous window measurable on a
loopback link, where the standby is never more than a few milliseconds
behind, the asynchronous failover first stops the primary's WAL sender for
a moment (``lag``), as a slow or congested link would: what the primary
commits meanwhile never reaches the standby.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from dataclasses import dataclass
from datetime import datetime

import psycopg

from .pgserver import ScratchPostgres, _free_port

__all__ = ["Failover", "ScratchPair"]

#: how long a rebuilt standby may take to stream (and, synchronous, to be the sync one)
READY_TIMEOUT = 60.0


@dataclass(frozen=True, slots=True)
class Failover:
    """One failover, wall clock (epoch seconds, this machine's, as the database's)."""

    killed_at: float  # the old primary SIGKILLed and gone
    promoted_at: float  # the standby took writes
    ready_at: float  # a new standby streams again (synchronous: is the synchronous one: commits protected again)
    #: the commit time of the last transaction the promoted standby replayed: a
    #: commit acknowledged after it (and before killed_at) may be lost. None: it
    #: replayed none (every acknowledged commit since it started may be lost)
    last_replayed: float | None
    lag: float  # how long the WAL receiver was held back before the kill
    standby_since: float  # when the promoted standby began streaming


class ScratchPair(ScratchPostgres):
    """Two nodes on two ports; ``data``/``port`` name the current primary."""

    def __init__(self, *, synchronous: bool) -> None:
        self.synchronous = synchronous
        super().__init__(["wal_level=replica", "max_wal_senders=8", "hot_standby=on",
                          "wal_receiver_status_interval=1", "wal_sender_timeout=5s"])
        self.nodes = [(self.data, self.port), (os.path.join(self.dir, "data-b"), _free_port())]
        self.standby_since = self._make_standby(*self.nodes[1])

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{port}" for _, port in self.nodes)
        return f"postgresql://postgres@{hosts}/chaos?target_session_attrs=read-write"

    def _standby(self) -> tuple[str, int]:
        return next(n for n in self.nodes if n[0] != self.data)

    def _make_standby(self, data: str, port: int) -> float:
        """A fresh standby of the current primary in ``data`` on ``port``,
        streaming when this returns (synchronous: the primary's synchronous
        one, its commits waiting for it again); returns when."""
        shutil.rmtree(data, ignore_errors=True)
        self._run("pg_basebackup", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-D", data,
                  "-R", "-X", "stream", "-c", "fast")
        self.start(data, port)
        streaming = self._wait_streaming(port, "async")
        if not self.synchronous:
            return streaming
        self._set_sync(self.port, "*")
        return self._wait_streaming(port, "sync")

    def _set_sync(self, port: int, names: str) -> None:
        """synchronous_standby_names of the server on ``port``, in force. ''
        while a primary has no standby: its commits would otherwise wait
        until one streams (Patroni's synchronous_mode; the strict mode waits,
        and in the harness that stopped writes for 4-6 s a failover and held
        transactions open for seconds after their start)."""
        with self._connect(port) as conn:
            conn.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{names}'")
            conn.execute("SELECT pg_reload_conf()")

    def _wait_streaming(self, port: int, want: str, timeout: float | None = None) -> float:
        """When a standby streams to the primary as ``want`` ("sync" or
        "async"); RuntimeError after READY_TIMEOUT, or 0.0 after ``timeout``."""
        deadline = time.monotonic() + (timeout or READY_TIMEOUT)
        while time.monotonic() < deadline:
            with contextlib.suppress(psycopg.Error), self._connect(self.port) as conn:
                row = conn.execute("SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' "
                                   "AND sync_state = %s", (want,)).fetchone()
                if row and row[0]:
                    return time.time()
            time.sleep(0.1)
        if timeout:
            return 0.0
        raise RuntimeError(f"the standby on port {port} did not stream ({want}) within {READY_TIMEOUT:g}s")

    @staticmethod
    def _connect(port: int) -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(f"postgresql://postgres@127.0.0.1:{port}/chaos", autocommit=True, connect_timeout=5)

    def failover(self, lag: float = 0.0) -> Failover:
        """Kill the primary, promote the standby, rebuild a standby in the old
        primary's place. ``lag``: hold the standby's WAL receiver back this many
        seconds first: its WAL sender stopped (asynchronous replication's window made visible)."""
        old_data, old_port = self.data, self.port
        new_data, new_port = self._standby()
        if not self._wait_streaming(new_port, "sync" if self.synchronous else "async", timeout=1.0):
            # (a rebuild that failed) a kill now would leave nothing to promote
            raise RuntimeError(f"no standby streams from the primary on port {old_port}: not failing over")
        if lag:
            # The sender, not the standby's receiver: a stopped receiver still
            # gets what the kernel's socket buffers took in meanwhile (all of it, on loopback).
            with self._connect(old_port) as conn:
                senders = [int(str(r[0])) for r in conn.execute("SELECT pid FROM pg_stat_replication")]
            for pid in senders:
                os.kill(pid, signal.SIGSTOP)
            time.sleep(lag)
        _kill_server(old_data)
        killed_at = time.time()  # dead by then: nothing it committed after this was acknowledged
        # Its socket's lock file names its pid, which may linger as a zombie
        # nobody reaps (PID 1 of a container): a server started on the port
        # then refuses ("lock file ... already exists"). It is dead: drop them.
        for stale in (f".s.PGSQL.{old_port}.lock", f".s.PGSQL.{old_port}"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(self.dir, stale))
        if self.synchronous:  # (before the promotion: no commit on the new primary waits for a standby)
            self._set_sync(new_port, "")
        self._run("pg_ctl", "-D", new_data, "-w", "-t", "60", "promote")
        self.data, self.port = new_data, new_port
        promoted_at = time.time()
        with self._connect(new_port) as conn:
            replayed = conn.execute("SELECT pg_last_xact_replay_timestamp()").fetchone()
        last = replayed[0] if replayed else None
        since = self.standby_since
        self.standby_since = self._make_standby(old_data, old_port)
        return Failover(killed_at=killed_at, promoted_at=promoted_at, ready_at=self.standby_since,
                        last_replayed=last.timestamp() if isinstance(last, datetime) else None, lag=lag,
                        standby_since=since)

    def close(self) -> None:
        for data, _ in self.nodes:
            with contextlib.suppress(Exception):
                self._ctl("-m", "immediate", "stop", data=data)
        shutil.rmtree(self.dir, ignore_errors=True)


def _kill_server(data: str) -> None:
    """SIGKILL a server's postmaster and every process it started, at once:
    nothing of it gets to flush, send or say goodbye."""
    with open(os.path.join(data, "postmaster.pid")) as f:
        postmaster = int(f.readline())
    children = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError), open(f"/proc/{entry}/stat") as f:
                # the parent pid is the field after the command's closing parenthesis
                if int(f.read().rpartition(")")[2].split()[1]) == postmaster:
                    children.append(int(entry))
    for pid in (postmaster, *children):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(p) for p in (postmaster, *children)):
        time.sleep(0.02)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError), open(f"/proc/{pid}/stat") as f:
        return f.read().rpartition(")")[2].split()[0] != "Z"
    return False
