"""The package type-checks: mypy over `contextfs/` with the configuration in
pyproject.toml ([tool.mypy]) reports no error. A type error found here is a bug found
before it runs; the check takes about 30-60 s from an empty cache."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(600)
def test_mypy_finds_no_error_in_the_package(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache")],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "Success: no issues found" in done.stdout, done.stdout
