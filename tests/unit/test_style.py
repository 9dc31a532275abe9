"""The code stays as `ruff` formats and checks it (pyproject.toml: E, F, UP, B, SIM, I; line
length 100), so a change that skips the formatter fails the suite CI runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PATHS = ["contextfs", "tests", "scripts"]


@pytest.mark.parametrize("args", [["check"], ["format", "--check"]], ids=["lint", "format"])
def test_ruff(args: list[str]) -> None:
    p = subprocess.run(
        [sys.executable, "-m", "ruff", *args, *PATHS],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
