"""Shared fixtures: a real store in tmp_path, the tree over it, and a real mount.

The mount fixture runs the daemon in a subprocess (`--foreground`), never inside the
test's own trio loop: a kernel request from the loop that serves it would deadlock.
Every fixture ends with `fsck` of the store as an oracle.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from contextfs.ctxtypes import builtin_schema_dir, load_types
from contextfs.fs.tree import Tree
from contextfs.memory.service import Memory
from contextfs.store import Store
from contextfs.testing import BENIGN_LOG, Mount, fsck_store, unmount

REPO = Path(__file__).resolve().parent.parent


# ---- fail a test that logs a warning it did not expect (S3QL's pytest_checklogs) ---------


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "allow_warnings: the test expects logged warnings")


@pytest.fixture(autouse=True)
def _no_unexpected_warnings(request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO)
    yield
    if request.node.get_closest_marker("allow_warnings"):
        return
    bad = [r for r in caplog.get_records("call") if r.levelno >= logging.WARNING]
    if bad:
        pytest.fail("unexpected log records: " + "; ".join(r.getMessage() for r in bad))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A failed test whose daemon died shows why: exit code, output, log tail."""
    rep = yield
    if rep.failed:
        for m in list(Mount.started):
            if m.died():
                rep.sections.append((f"daemon post-mortem: {m.path}", m.post_mortem()))
    return rep


# ---- in-process store, memory and tree ---------------------------------------------------


@pytest.fixture
def types():
    return load_types([builtin_schema_dir()])


@pytest.fixture
def memory(tmp_path: Path, types) -> Iterator[Memory]:
    store = Store(tmp_path / "contextfs.duckdb")
    m = Memory(store, types, data_dir=tmp_path)
    m.create_owner("user", "default")
    yield m
    store.close()
    assert fsck_store(tmp_path / "contextfs.duckdb") == []


@pytest.fixture
def tree(memory: Memory) -> Tree:
    return Tree(memory, status=lambda: "status\n")


# ---- a real mount (contextfs.testing.Mount: the daemon in a subprocess) -----------------


@pytest.fixture
def mount(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Mount]:
    """A real ContextFS mount on the embedded defaults (data dir in tmp_path)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    m = Mount(mnt, tmp_path / "data")
    m.start()
    try:
        yield m
    finally:
        if m.proc is not None:
            m.stop()
        else:
            unmount(mnt)
    log = m.log.read_text(errors="replace") if m.log.exists() else ""
    bad = [
        line
        for line in log.splitlines()
        if (" ERROR " in line or " WARNING " in line or "Traceback" in line)
        and not any(p in line for p in m.expect_log + BENIGN_LOG)
    ]
    if not request.node.get_closest_marker("allow_warnings"):
        assert not bad, "daemon logged problems:\n" + "\n".join(bad)
    assert m.fsck() == []


@pytest.fixture
def tools() -> None:
    """Skip nothing: the tools are installed by .ci/run; fail loudly if one is missing."""
    for tool in ("vim", "sed", "cp", "mv", "find", "rsync", "fusermount3"):
        assert shutil.which(tool), f"{tool} is not installed (see .ci/run)"


# ---- a CLIP model that means something (docs/media.md) ------------------------------------


@pytest.fixture(scope="session")
def tiny_clip(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(config JSON, weights) of a tiny CLIP model (media.clipnet) trained here on
    generated coloured shapes with their captions (no registry package ships CLIP
    weights); about 30 s of one core, once per session."""
    from contextfs.testing.tiny_clip import train

    return train(tmp_path_factory.mktemp("tiny-clip"))
