"""One ``--metrics-port`` scrape for all of ``--processes``' children.

The supervisor aggregates: each child serves its own ``tether.metrics``
registry on a loopback port, behind a token only the supervisor knows, and a
scrape of the supervisor's endpoint reads every serving child's and gives
each of its series a ``process`` label (the child's index, stable across
restarts: a restarted child's counters start again from zero, which
Prometheus reads as a counter reset). The series read from the database
(``tether_queue_depth``, ``tether_unknown_task_jobs``) are the same in every
child and are taken once.

Why not prometheus_client's multiprocess mode: it needs
``PROMETHEUS_MULTIPROC_DIR`` set before any metric exists and a directory to
clean as children die, its gauges need a mode each, and custom collectors
(the queue depth read from the database on scrape) do not work in it. Here
every child runs exactly the metrics a single worker runs.
"""

from __future__ import annotations

import logging
import urllib.request
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from ..metrics import MetricsServer, serve_registry

__all__ = ["DATABASE_WIDE", "SCRAPE_TIMEOUT", "ChildrenCollector", "serve_children_metrics"]

log = logging.getLogger("tether.processes")

#: seconds to wait for one child's metrics; a child that does not answer is left out of that scrape
SCRAPE_TIMEOUT = 5.0
#: families every child reads from the database: taken from one child only
DATABASE_WIDE = frozenset({"tether_queue_depth", "tether_unknown_task_jobs"})
#: the label that tells the children's series apart
LABEL = "process"


class ChildrenCollector(Collector):
    """Reads the children's endpoints (``targets()``: (index, port) pairs) on each collect."""

    def __init__(self, targets: Callable[[], list[tuple[int, int]]], token: str) -> None:
        self.targets = targets
        self.token = token

    def _read(self, port: int) -> str:
        request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics",
                                         headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(request, timeout=SCRAPE_TIMEOUT) as response:
            return str(response.read().decode())

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        for index, port in self.targets():
            try:
                text = self._read(port)
            except OSError as exc:
                log.warning("metrics of worker process %d left out of this scrape: %s", index, exc)
                continue
            for family in text_string_to_metric_families(text):
                if family.name in DATABASE_WIDE:
                    families.setdefault(family.name, family)
                    continue
                merged = families.setdefault(
                    family.name, Metric(family.name, family.documentation, family.type, family.unit))
                merged.samples += [Sample(s.name, {**s.labels, LABEL: str(index)}, s.value, s.timestamp, s.exemplar)
                                   for s in family.samples]
        yield from families.values()


def serve_children_metrics(targets: Callable[[], list[tuple[int, int]]], children_token: str, *, port: int,
                           host: str, token: str | None, no_auth: bool) -> MetricsServer:
    """The supervisor's endpoint (the same token rules as a worker's), over
    the children ``targets()`` names, read with ``children_token``."""
    registry = CollectorRegistry()
    registry.register(ChildrenCollector(targets, children_token))
    return serve_registry(registry, port=port, host=host, token=token, no_auth=no_auth)
