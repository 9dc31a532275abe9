"""scripts/bench_fs.py --quick runs end to end: 200 nodes built through a mount and
mirrored to the local disk, the same shell traffic on both, and on libfuse's C example
passthrough_ll over the native tree (built from libfuse3-dev's examples, as shipped and
with cache=always), then 100 create+fsync on every tree.

What it asserts is what the table must hold to mean anything: every tree returned the
same output (the script exits 1 otherwise), the C passthrough was built and measured in
every row of steps 2 and 3, and nothing was left mounted. Times are reported, not asserted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_script

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_bench_fs_quick_beside_the_c_passthrough(tmp_path: Path) -> None:
    out = tmp_path / "bench_fs.json"
    p = run_script("bench_fs.py", "--quick", "--json", str(out), timeout=580)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["error"] is None and doc["mismatches"] == []
    (r,) = doc["results"]
    rows = {row["operation"]: row for row in r["rows"]}
    for op in ("find DIR | wc -l", "ls -lR DIR", "cat every L0.md", "cat every L2.md"):
        assert set(rows[op]["others"]) == {"passthrough", "passthrough-cached"}, rows[op]
        assert all(t > 0 for t in rows[op]["others"].values()), rows[op]
    p50 = rows["create+fsync per node, p50"]
    assert set(p50["others"]) == {"passthrough", "passthrough-cached"}, p50
    assert "2x C passthrough" in p50["target"]
    assert "| C passthrough, cache=always / native |" in p.stdout
    assert r["log_problems"] == []
    mounts = Path("/proc/mounts").read_text()
    assert r["tmp"] not in mounts, "a mount of the benchmark was left behind"
