"""scripts/bench_vault.py --quick runs end to end: a generated vault of 200 notes imported
into a mount, exported through it and offline, imported into a second mount and exported
again, and restored into a new data dir. The script exits 1 unless the round trip through
the mounts gives the same tree (the facts a mount import does not carry aside), the
offline export is the mount's, the restore's export is the first byte for byte and no file
was refused. Times are reported, not asserted."""

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
    assert doc["notes"] == 200 and len(doc["rows"]) == 8
