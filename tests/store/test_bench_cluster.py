"""scripts/bench_cluster.py --quick runs end to end on a real PostgreSQL server with real
mounts: no acknowledged write lost in any phase, no EIO once a mount is back after a
restart, no read of what a mount holds waiting for a frozen server or returning other
bytes, and the other mounts writing while one mount's daemon is frozen. The figures are
what the benchmark measures; these are what it asserts."""

from __future__ import annotations

import json

import pytest

from contextfs.testing import postgres
from tests.conftest import run_script

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(600),
    pytest.mark.skipif(not postgres.available(), reason="PostgreSQL is not installed"),
]


def test_bench_cluster_quick_loses_nothing_and_reads_through_a_frozen_server(tmp_path):
    out = tmp_path / "bench_cluster.json"
    p = run_script("bench_cluster.py", "--quick", "--json", str(out), timeout=580)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "| lost updates | 0 | 0 |" in p.stdout
    rep = json.loads(out.read_text())
    assert rep["latency"]["lost_updates"] == 0 and rep["latency"]["writes"] > 0
    restart = rep["restart"]
    assert restart["lost"] == restart["lost_after_remount"] == 0
    assert restart["acknowledged_while_down"] == 0 and restart["refused_eio"] > 0
    assert restart["refused_eio_after_recovery"] == restart["cold_reads_eio"] == 0
    frozen = rep["frozen"]
    assert not frozen["reads_blocked"] and frozen["wrong_reads"] == 0
    assert frozen["read_ms"]["max"] < 1000, frozen["read_ms"]
    # each mount's own write waited for the server all through those reads, then was stored
    assert frozen["writes_waiting_through_the_reads"] == 3, frozen
    assert frozen["waiting_writes"] == ["stored"] * 3, frozen
    mount = rep["frozen_mount"]
    assert mount["lost"] == 0 and mount["others_writes_acknowledged"] > 0
    link = rep["slow_link"]
    assert link["30ms_1_mounts_writes_per_s"] < link["0ms_1_mounts_writes_per_s"]
