"""Concurrent writers on overlapping nodes lose nothing (scripts/concurrency.py, CI size).

8 writer threads x 50 writes: aggregate drops into 4 shared pattern topics, `>>` appends to
4 shared L2.md files, event drops (one node per write), while 2 readers run `ls -R` and
`cat`. Every item, line and event must be there, live and after a remount; the daemon log
must be clean and fsck must find nothing.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import pytest

from tests.conftest import REPO

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def _script(name: str) -> ModuleType:
    """scripts/<name>.py as a module (scripts/ is not a package, nor on sys.path)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


concurrency = _script("concurrency")


def test_concurrent_writers_lose_nothing():
    res = concurrency.run(writers=8, writes=50, readers=2)
    report = concurrency.table(res)
    assert sum(res.writes.values()) == 8 * 50, (res.write_errors[:5], report)
    assert res.write_errors == [], report
    assert res.read_errors == [], report
    assert {k: v for k, v in res.lost.items() if v} == {}, report
    assert res.event_nodes == res.writes["event"], report
    assert res.daemon_errors == [], report
    assert res.fsck == [], report
