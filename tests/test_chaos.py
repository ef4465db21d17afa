"""`tether chaos` in short mode: real workers, real faults, and the checker's
clean verdict, on SQLite (kill, stop) and on a scratch PostgreSQL the harness
starts itself (kill, stop, partition, restart, and clock skew where libfaketime
is installed). The checker itself is tested in test_checker.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tether.chaos.driver import LIBFAKETIME, ChaosConfig, run
from tether.chaos.pgserver import ScratchPostgres

pytestmark = pytest.mark.processes


def test_chaos_sqlite_kill_and_stop(tmp_path: Path) -> None:
    cfg = ChaosConfig(workers=3, jobs=100, duration=12, faults=frozenset({"kill", "stop"}), seed=20261122,
                      out_dir=tmp_path)
    result = run(cfg, say=lambda _: None)
    assert result.ok, result.to_dict()
    assert result.faults["kill"] + result.faults["failpoint"] > 0 and result.faults["stop"] > 0
    assert result.report.recovery["recoveries"], "no lease was ever recovered: the run proved nothing"
    assert result.integrity_checks > 1
    assert result.report.invariants["I7"].checked > 0, "no transactional job: I7 was not tested"


def test_chaos_postgres_every_fault(tmp_path: Path) -> None:
    try:
        ScratchPostgres.probe()
    except RuntimeError as exc:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(str(exc))
    faults = {"kill", "stop", "partition", "restart"}
    if os.path.exists(LIBFAKETIME):
        faults.add("skew")
    elif os.environ.get("CI") == "true":
        pytest.fail(f"CI must run the skew fault: {LIBFAKETIME} is missing (apt-get install libfaketime)")
    cfg = ChaosConfig(scratch_postgres=True, workers=3, jobs=150, duration=20, faults=frozenset(faults),
                      seed=20261123, out_dir=tmp_path)
    result = run(cfg, say=lambda _: None)
    assert result.ok, result.to_dict()
    assert result.report.invariants["I7"].checked > 0, "no transactional job: I7 was not tested"
    for kind in ("stop", "partition", "restart"):
        assert result.faults[kind] > 0, f"no {kind} fault was injected"
    assert result.report.recovery["recoveries"], "no lease was ever recovered: the run proved nothing"
