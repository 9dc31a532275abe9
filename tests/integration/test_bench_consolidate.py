"""scripts/bench_consolidate.py --quick runs end to end: a 4k store, planted
near-duplicates, two offline runs and one by a mounted daemon.

What it asserts is what the benchmark must show to mean anything: every planted copy
that is a near-duplicate of its original planned as a merge and nothing else, the second
run compared only what changed (far fewer pairs than the first), the old and the new
comparison agreed on the sampled pairs (the script refuses otherwise), and the daemon's
run ended with the mount answering and no warning in its log. Times are reported, not asserted.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_script

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_bench_consolidate_quick(tmp_path):
    out = tmp_path / "bench_consolidate.json"
    p = run_script("bench_consolidate.py", "--quick", "--json", str(out), timeout=880)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    (r,) = json.loads(out.read_text())["results"]
    first, second = r["first"], r["second"]
    # every planted copy that is a near-duplicate by the definition is planned as a merge,
    # and nothing else is; nearly all of them are (a copy stops being one if its original
    # is edited or merged with another copy first)
    assert first["found_all_planted"] and first["extra_merges"] == 0, first
    assert second["found_all_planted"], second
    assert first["true_duplicates"] >= 0.9 * first["planted"] and first["merged"] > 0, first
    assert second["merged"] > 0, second
    assert second["pairs_checked"] * 20 < first["pairs_checked"], (first, second)
    mount = r["mount"]
    assert mount["log_problems"] == [], mount["log_problems"]
    assert "merged" in mount["status_line"] and mount["during"]["count"] > 0, mount
    assert "| 4,000 |" in p.stdout
