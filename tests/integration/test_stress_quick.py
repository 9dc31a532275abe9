"""fio, stress-ng and dbench against a real mount (scripts/stress.py --quick), strictly checked.

The script mounts its own store, runs every load on native disk and on ContextFS, and
verifies: fio's crc32c/pattern verification, stress-ng `--verify`, dbench's errors, the
attachment bytes again after a remount, no ERROR/Traceback from the daemon, fsck clean.
A stressor excluded for a documented refusal (fallocate) is not a failure; hard links
are made (the link stressor verifies them).
"""

from __future__ import annotations

import json
import shutil

import pytest

from tests.conftest import run_script

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_third_party_stress_quick(tmp_path):
    for tool in ("fio", "stress-ng", "dbench"):
        assert shutil.which(tool), f"{tool} is not installed (see .ci/run)"
    out = tmp_path / "stress.json"
    p = run_script("stress.py", "--quick", "--json", str(out), timeout=580)
    assert out.exists(), p.stdout + p.stderr
    rep = json.loads(out.read_text())
    table = p.stdout
    assert rep["summary"]["verify_errors"] == 0, table
    assert rep["daemon_errors"] == [], table
    assert rep["fsck"] == [], table
    assert rep["summary"]["failed"] == [], table
    assert p.returncode == 0, table
