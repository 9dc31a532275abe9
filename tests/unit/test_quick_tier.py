"""The quick tier (`pytest -m quick`, chosen in tests/conftest.py) covers every room.

A room is a folder of `contextfs/` (a package: fs, memory, search, ...) or a module at
its root (cli, daemon, config, ...). A room is covered when a quick test's module imports
it (`from contextfs.memory.service import ...`, `from contextfs import cli`), or, for a
room a real mount reaches only through the command line, when `THROUGH_THE_CLI` names a
quick test module for it. The lists of tests/conftest.py must also name tests that exist,
so a renamed test does not drop out of (or slip into) the quick tier unnoticed.

The check reads what the session collected; run alone (or on part of the suite) it runs
itself again over the whole suite, collecting every test without running them.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from tests.conftest import NOT_QUICK, QUICK_IDS, QUICK_MOUNTS

REPO = Path(__file__).resolve().parents[2]
PKG = REPO / "contextfs"

# rooms whose quick test drives them through `contextfs ...` in a subprocess, not an import
THROUGH_THE_CLI = {
    "daemon": "tests/integration/test_daemon.py",  # `contextfs mount`, `contextfs umount`
}


def rooms() -> set[str]:
    dirs = {p.parent.name for p in PKG.glob("*/__init__.py")}
    mods = {p.stem for p in PKG.glob("*.py")} - {"__init__", "__main__"}
    return dirs | mods


@cache
def imported_rooms(test_file: str) -> frozenset[str]:
    found = set()
    for node in ast.walk(ast.parse((REPO / test_file).read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "contextfs":
                found.update(a.name for a in node.names)
            names = [node.module]
        else:
            continue
        found.update(n.split(".")[1] for n in names if n.startswith("contextfs."))
    return frozenset(found)


@pytest.fixture(scope="module")
def suite(request: pytest.FixtureRequest) -> tuple[list[str], list[str]]:
    """(every node id, the quick ones) of the whole suite."""
    whole, every, quick = request.config.stash[QUICK_IDS]
    if not whole:
        r = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"]
            + ["-k", Path(__file__).stem],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
        pytest.skip("checked over the whole suite in a subprocess, which passed")
    return every, quick


def test_every_room_has_a_quick_test(suite: tuple[list[str], list[str]]) -> None:
    _, quick = suite
    files = {nodeid.split("::")[0] for nodeid in quick}
    covered = {room for f in files for room in imported_rooms(f)}
    covered |= {room for room, f in THROUGH_THE_CLI.items() if f in files}
    missing = sorted(rooms() - covered)
    assert not missing, (
        f"no quick test covers {missing}: take one of its tests out of NOT_QUICK or name "
        "one in QUICK_MOUNTS (tests/conftest.py)"
    )


def test_the_lists_of_the_quick_tier_name_tests_that_exist(
    suite: tuple[list[str], list[str]],
) -> None:
    every, _ = suite
    stale = [
        p
        for p in NOT_QUICK + QUICK_MOUNTS
        if not any(n == p or n.startswith((p + "::", p + "[")) for n in every)
    ]
    assert not stale, f"tests/conftest.py names tests that are not collected: {stale}"
