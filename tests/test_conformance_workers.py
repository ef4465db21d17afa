"""The conformance suite for workers' rows (issue 41), on every backend (the
``store`` fixture as in test_conformance.py): identities that display as
themselves (item 8)."""

from __future__ import annotations

import pytest

from tether.errors import ConfigError
from tether.model import WorkerInfo
from tether.store import Store

from .conftest import STORE_BACKENDS, backend_param


@pytest.fixture(params=STORE_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return backend_param(request)


def worker(wid: str, host: str = "host-a", queues: list[str] | None = None) -> WorkerInfo:
    return WorkerInfo(id=wid, host=host, pid=1, proc_start=None, started_at=None, last_seen=None,  # type: ignore[arg-type]
                      queues=queues or ["default"], concurrency=1)


LOOKALIKES = {
    "zero-width space": "worker\u200b-1",
    "zero-width joiner": "worker\u200d-1",
    "bidi override": "worker-\u202e1-",
    "bidi isolate": "worker-\u20661",
    "terminal escape": "worker-\x1b[2J1",
    "C1 CSI": "worker-\x9b1",
    "newline": "worker-\n1",
    "line separator": "worker-\u20281",
    "soft hyphen": "wor\u00adker-1",
    "BOM": "\ufeffworker-1",
    "full-width letter": "\uff57orker-1",
    "no-break space": "worker\u00a01",
    "Cyrillic o among Latin": "w\u043erker-1",
    "Greek omicron among Latin": "w\u03bfrker-1",
    "private use": "worker-\ue0001",
    "leading space": " worker-1",
    "empty": "",
    "too long": "w" * 201,
}


@pytest.mark.parametrize("wid", LOOKALIKES.values(), ids=LOOKALIKES.keys())
def test_a_worker_id_that_would_display_as_another_is_refused(store: Store, wid: str) -> None:
    with pytest.raises(ConfigError):
        store.register_worker(worker(wid))
    assert store.list_workers() == []


@pytest.mark.parametrize("host", ["host\u200b-a", "host-\u202ea", "h\u043est", "host\x1b]0;x\x07", "\uff48ost"])
def test_a_worker_host_that_would_display_as_another_is_refused(store: Store, host: str) -> None:
    with pytest.raises(ConfigError):
        store.register_worker(worker("worker-1", host))
    assert store.list_workers() == []


def test_ordinary_identities_register(store: Store) -> None:
    for wid, host in [("web-1.example.com:4242:a1b2c3", "web-1.example.com"), ("работник-1", "хост"),
                      ("déjà vu 7", "hôte"), ("工作者-3", "主机")]:
        store.register_worker(worker(wid, host))
    assert len(store.list_workers()) == 4
