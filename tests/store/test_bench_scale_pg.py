"""scripts/bench_scale.py --store both runs end to end: the same synthetic store, built in
DuckDB, copied into a real PostgreSQL database, and each mounted and read through FUSE.
The figures are what the benchmark measures; that the PostgreSQL mount holds every node
copied (each `cat` of a random node's L0.md must return text), accepts new nodes and logs
no problem is what this asserts."""

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


def test_bench_scale_measures_the_same_store_on_duckdb_and_postgresql(tmp_path):
    out = tmp_path / "bench_scale.json"
    n = 300
    p = run_script(
        "bench_scale.py", "--store", "both", "--sizes", str(n), "--no-search",
        "--cats", "50", "--creates", "3", "--json", str(out),
        timeout=580,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    rep = json.loads(out.read_text())
    assert rep["stores"] == ["duckdb", "postgresql"]
    (pg,) = rep["results"]["postgresql"]
    (duck,) = rep["results"]["duckdb"]
    assert pg["build"]["rows"] == {"owners": 1, "nodes": n, "versions": n, "outbox": n}
    assert pg["build"]["pg_bytes"] > 0
    for r in (duck, pg):
        assert r["fs"]["log_problems"] == [], r["fs"]["log_problems"]
        assert r["fs"]["create_fsync"]["count"] == 3
    assert "PostgreSQL / DuckDB, same store, same run" in p.stdout
