"""Start-up reconciliation: recover the jobs of this host's dead predecessors
at once, instead of waiting for their leases to lapse.

A predecessor counts as dead only when its process is provably gone: no
process with its pid, or a process with that pid but another start time (the
pid was reused). A live sibling on the same host is never touched.
"""

from __future__ import annotations

import logging

from ..model import Reaped
from ..store import Store
from .identity import process_is
from .reaper import Reaper

__all__ = ["Reconciler"]

log = logging.getLogger("tether.reconcile")


class Reconciler:
    def __init__(self, store: Store, *, worker_id: str, host: str, reaper: Reaper) -> None:
        self.store = store
        self.worker_id = worker_id
        self.host = host
        self.reaper = reaper

    def dead_predecessors(self) -> list[str]:
        return [
            w.id
            for w in self.store.list_workers(host=self.host, live_only=True)
            if w.id != self.worker_id and not process_is(w.pid, w.proc_start)
        ]

    def run_once(self) -> list[Reaped]:
        dead = self.dead_predecessors()
        if not dead:
            return []
        expired = self.store.lapse_leases(dead)
        for worker_id in dead:
            self.store.stop_worker(worker_id)
        recovered = [r for r in self.reaper.run_until_clear() if r.worker in dead]
        log.warning(
            "start-up: %d dead predecessor(s) on %s (%s); %d lease(s) ended, %d job(s) recovered",
            len(dead), self.host, ", ".join(dead), expired, len(recovered),
        )
        return recovered
