"""scripts/bench_vault.py --quick runs end to end: a generated vault of 200 notes imported
into a mount, exported through it and offline, imported into a second mount and exported
again, restored into a new data dir, and copied into the second mount with rsync -a and
tar x. The script exits 1 unless both round trips give the first export byte for byte
(facts and ids too), the offline export is the mount's, no file was refused and both tools
exit 0 with every node's L2 as imported. Times are reported, not asserted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_script

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_bench_vault_quick_round_trips(tmp_path: Path) -> None:
    out = tmp_path / "bench_vault.json"
    p = run_script("bench_vault.py", "--quick", "--json", str(out), timeout=580)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["round_trip_same"] and doc["offline_export_same"] and doc["restore_same_bytes"]
    assert doc["tools_copy_same"]
    assert doc["notes"] == 200 and len(doc["rows"]) == 12
