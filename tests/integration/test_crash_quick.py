"""A bounded run of scripts/crash_trials.py: five SIGKILLs of the daemon under three
writers; every acknowledged write survives, derived state catches up, fsck is clean.

The full campaign (100 trials, and the power-cut variant) is the script itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_script

pytestmark = pytest.mark.slow


@pytest.mark.timeout(300)
def test_five_crash_trials_lose_nothing(tmp_path: Path) -> None:
    out = tmp_path / "crash.json"
    r = run_script(
        "crash_trials.py", "--trials", "5", "--writers", "3", "--seed", "7",
        "--max-delay", "1.5", "--out", str(out), "--tmp", str(tmp_path),
        timeout=280,
    )  # fmt: skip
    assert out.exists(), r.stdout + r.stderr
    res = json.loads(out.read_text())
    assert res["trials"] == 5 and res["writers"] == 3
    assert res["acknowledged"] > 0, r.stdout
    assert res["lost"] == 0, "\n".join(res["defects"])
    assert res["fsck_errors"] == 0, "\n".join(res["defects"])
    assert res["derived_mismatches"] == 0, "\n".join(res["defects"])
    assert res["hangs"] == 0 and res["daemon_log_errors"] == 0, "\n".join(res["defects"])
    assert res["errors_before_kill"] == 0, "\n".join(res["defects"])
    assert r.returncode == 0, r.stdout + r.stderr
