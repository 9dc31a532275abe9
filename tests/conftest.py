"""Shared fixtures: a real store in tmp_path, the tree over it, and a real mount.

The mount fixture runs the daemon in a subprocess (`--foreground`), never inside the
test's own trio loop: a kernel request from the loop that serves it would deadlock.
Every fixture ends with `fsck` of the store as an oracle.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from contextfs.ctxtypes import builtin_schema_dir, load_types
from contextfs.fs.tree import Tree
from contextfs.memory.service import Memory
from contextfs.store import Store
from contextfs.store.fsck import check_store

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


# ---- in-process store, memory and tree ---------------------------------------------------

@pytest.fixture
def types():
    return load_types([builtin_schema_dir()])


def _fsck(db: Path) -> list[str]:
    store = Store(db, read_only=True)
    try:
        return check_store(store)
    finally:
        store.close()


@pytest.fixture
def memory(tmp_path: Path, types) -> Iterator[Memory]:
    store = Store(tmp_path / "contextfs.duckdb")
    m = Memory(store, types, data_dir=tmp_path)
    m.create_owner("user", "default")
    yield m
    store.close()
    assert _fsck(tmp_path / "contextfs.duckdb") == []


@pytest.fixture
def tree(memory: Memory) -> Tree:
    return Tree(memory, status=lambda: "status\n")


# ---- a real mount --------------------------------------------------------------------------

def _unmount(mnt: Path) -> None:
    if os.path.ismount(mnt):
        r = subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True)
        if r.returncode != 0:
            subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True)


class Mount:
    """A running daemon on `path` over `data_dir`; remount() and kill() for crash tests."""

    def __init__(self, path: Path, data_dir: Path, *, search: bool = False) -> None:
        self.path = path
        self.data_dir = data_dir
        # Search loads the embedding model (5-13 s, 0.5 GB): only the search tests turn it
        # on; everything else runs the same daemon with `search: false` in config.yaml.
        data_dir.mkdir(parents=True, exist_ok=True)
        cfg = data_dir / "config.yaml"
        if not cfg.exists():
            cfg.write_text(f"search: {'true' if search else 'false'}\n")
        self.proc: subprocess.Popen | None = None
        self.log_offset = 0
        self.expect_log: list[str] = []

    @property
    def log(self) -> Path:
        return self.data_dir / "contextfs.log"

    def start(self, *extra: str, expect_fail: bool = False) -> subprocess.Popen:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "contextfs", "mount", str(self.path), "--foreground",
             "--data-dir", str(self.data_dir), *extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
        )
        if expect_fail:
            self.proc.wait(timeout=60)
            return self.proc
        deadline = time.monotonic() + 60
        # a dead mount left by kill -9 also looks like a mount point: wait for an answer
        while not (os.path.ismount(self.path) and os.path.exists(self.path / ".status")):
            if self.proc.poll() is not None:
                out = self.proc.stdout.read().decode(errors="replace")
                raise AssertionError(f"daemon exited {self.proc.returncode}:\n{out}")
            if time.monotonic() > deadline:
                raise AssertionError("mount not ready after 60 s")
            time.sleep(0.02)
        return self.proc

    def stop(self) -> str:
        """Unmount cleanly; assert the daemon exited 0; return its output."""
        _unmount(self.path)
        assert self.proc is not None
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("daemon did not exit after unmount") from None
        out = self.proc.stdout.read().decode(errors="replace")
        assert self.proc.returncode == 0, f"daemon exit {self.proc.returncode}:\n{out}"
        self.proc = None
        return out

    def kill(self) -> None:
        """SIGKILL the daemon, like a crash; leaves the kernel mount to clean up."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.proc = None
        subprocess.run(["fusermount3", "-u", "-z", str(self.path)], capture_output=True)

    def remount(self, *extra: str) -> None:
        if self.proc is not None:
            self.stop()
        self.start(*extra)

    def fsck(self) -> list[str]:
        return _fsck(self.data_dir / "contextfs.duckdb")

    def status(self) -> str:
        return (self.path / ".status").read_text()

    def new_log(self) -> str:
        """Log lines written since the last call."""
        if not self.log.exists():
            return ""
        text = self.log.read_text(errors="replace")
        new, self.log_offset = text[self.log_offset:], len(text)
        return new


# pyfuse3 logs this when the kernel no longer waits for a RELEASE reply (the file was
# closed as the mount went away): nothing was lost, the close had already committed.
BENIGN_LOG = ["fuse_release(): fuse_reply_* failed with No such file or directory"]


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
            _unmount(mnt)
    log = m.log.read_text(errors="replace") if m.log.exists() else ""
    bad = [line for line in log.splitlines()
           if (" ERROR " in line or " WARNING " in line or "Traceback" in line)
           and not any(p in line for p in m.expect_log + BENIGN_LOG)]
    if not request.node.get_closest_marker("allow_warnings"):
        assert not bad, "daemon logged problems:\n" + "\n".join(bad)
    assert m.fsck() == []


@pytest.fixture
def tools() -> None:
    """Skip nothing: the tools are installed by .ci/run; fail loudly if one is missing."""
    for tool in ("vim", "sed", "cp", "mv", "find", "rsync", "fusermount3"):
        assert shutil.which(tool), f"{tool} is not installed (see .ci/run)"
