"""pjdfstest's quick subset inside a ContextFS node (scripts/pjdfstest.py --quick), beside a
native directory: every failing assertion is a documented refusal (device nodes, the
attachment size limit) or fails natively too, none is a bug; the daemon stays clean and
fsck finds nothing. The whole suite: `scripts/pjdfstest.py` (docs/reliability.md).
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from tests.conftest import REPO, run_script

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(480),
    pytest.mark.skipif(os.geteuid() != 0, reason="pjdfstest needs root: its tests switch uids"),
]

SOURCE = REPO / "tests/third_party/pjdfstest"


def test_pjdfstest_quick_has_no_unexplained_failure(tmp_path):
    assert SOURCE.is_dir(), f"pjdfstest's source is not at {SOURCE}"
    for tool in ("autoreconf", "cc", "make", "prove"):
        assert shutil.which(tool), f"{tool} is not installed (scripts/setup.sh installs it)"
    out = tmp_path / "pjdfstest.json"
    p = run_script("pjdfstest.py", "--quick", "--json", str(out), timeout=460)
    assert out.exists(), p.stdout + p.stderr[-4000:]
    rep = json.loads(out.read_text())
    table = p.stdout
    assert [f for f in rep["failures"] if f["cause"] == "other"] == [], table
    # both emulations recognised what they are for: the subset makes devices and a 2 GiB file
    assert rep["causes"]["device node"] > 0, table
    assert rep["causes"]["size limit"] > 0, table
    assert rep["contextfs"]["files"] == rep["native"]["files"] > 30, table
    assert rep["daemon_errors"] == [], table
    assert rep["fsck"] == [], table
    assert p.returncode == 0, table
