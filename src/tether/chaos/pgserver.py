"""A scratch PostgreSQL server the chaos harness starts itself, so that it may
restart it (``-m immediate`` or ``-m fast``) without touching anyone's data."""

from __future__ import annotations

import contextlib
import glob
import os
import random
import shlex
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence

__all__ = ["ScratchPostgres"]


def _bindir() -> str:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: [int(x) for x in p.split("/")[-2].split(".")
                                                                           if x.isdigit()])
    if found:
        return found[-1]
    initdb = shutil.which("initdb")
    if initdb:
        return os.path.dirname(initdb)
    raise RuntimeError("no PostgreSQL binaries found (install Debian's postgresql package)")


def _free_port() -> int:
    """A loopback port free now and below the kernel's ephemeral range: a
    server stopped or killed on it must be able to bind it again, and a port
    from that range (what binding port 0 gives) may meanwhile become any
    outgoing connection's local end."""
    low = 32768
    with contextlib.suppress(OSError, ValueError), open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low = int(f.read().split()[0])
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(max(1024, low - 12000), low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port below {low}")


class ScratchPostgres:
    def __init__(self, settings: Sequence[str] = ()) -> None:
        #: server settings (``name=value``) of every start, beside the ones below
        self.settings = tuple(settings)
        self.bin = _bindir()
        self.dir = tempfile.mkdtemp(prefix="tether-chaos-pg-")
        self.data = os.path.join(self.dir, "data")
        self.port = _free_port()
        self.as_root = os.geteuid() == 0
        if self.as_root:
            shutil.chown(self.dir, "postgres")
        self._run("initdb", "-D", self.data, "-U", "postgres", "--auth=trust", "-E", "UTF8")
        self.start()
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "chaos")

    @staticmethod
    def probe() -> str:
        """The binaries' folder, or RuntimeError saying why a scratch server cannot start."""
        return _bindir()

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/chaos"

    def _run(self, tool: str, *args: str) -> None:
        cmd = [os.path.join(self.bin, tool), *args]
        if self.as_root:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
        if done.returncode:
            said = done.stderr.decode(errors="replace").strip().splitlines()
            raise RuntimeError(f"{tool} {' '.join(args)} failed (exit {done.returncode}): "
                               f"{' / '.join(said[-3:]) or 'no message'}")

    def _ctl(self, *args: str, data: str | None = None) -> None:
        data = data or self.data
        self._run("pg_ctl", "-D", data, "-l", data + ".log", "-w", "-t", "60", *args)

    def start(self, data: str | None = None, port: int | None = None) -> None:
        """Start the server of ``data`` (default: this one's) on ``port``."""
        # (pg_ctl hands -o to a shell: each setting is quoted)
        extra = "".join(f" -c {shlex.quote(s)}" for s in self.settings)
        try:
            self._ctl("-o", f"-p {port or self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off{extra}",
                      "start", data=data)
        except RuntimeError as exc:  # pg_ctl says only "examine the log output": quote it
            with contextlib.suppress(OSError), open((data or self.data) + ".log", errors="replace") as f:
                exc.args = (f"{exc.args[0]}; server log: {' / '.join(f.read().strip().splitlines()[-3:])}",)
            raise

    def restart(self, mode: str) -> float:
        """Restart with ``immediate`` (a crash: no checkpoint, recovery on start)
        or ``fast``; returns how long the server was away."""
        t0 = time.monotonic()
        self._ctl("-m", mode, "stop")
        self.start()
        return time.monotonic() - t0

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._ctl("-m", "immediate", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)
