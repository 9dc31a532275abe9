"""Durability: a write acknowledged by close() or fsync() survives kill -9 of the daemon."""

from __future__ import annotations

import os
import threading

import pytest

from contextfs.testing import close_after_kill

pytestmark = pytest.mark.slow


def _write(path, data: bytes, *, fsync: bool) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


@pytest.mark.allow_warnings
def test_kill_9_keeps_every_acknowledged_write(mount):
    u = mount.path / "user/default"
    for i in range(20):
        node = u / f"preferences/n{i:02d}"
        node.mkdir()
        _write(node / "L2.md", f"note {i}\n".encode(), fsync=(i % 2 == 0))
        _write(node / f"att{i}.bin", bytes([i]) * 1000, fsync=False)
    (u / "preferences/n00/L0.md").write_text("pinned abstract\n")
    # a routed file that was fsync()ed but is still open when the daemon dies
    fd = os.open(u / "preferences/pending.md", os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"---\nvalue: fsynced\n---\nWritten, synced, never closed.\n")
    os.fsync(fd)
    mount.kill()
    close_after_kill(fd)
    mount.start()
    for i in range(20):
        node = u / f"preferences/n{i:02d}"
        assert (node / "L2.md").read_text() == f"note {i}\n"
        assert (node / f"att{i}.bin").read_bytes() == bytes([i]) * 1000
    assert (u / "preferences/n00/L0.md").read_text() == "pinned abstract\n"
    assert "Written, synced, never closed." in (u / "preferences/pending/L2.md").read_text()


@pytest.mark.allow_warnings
def test_kill_9_during_concurrent_writers(mount):
    """Writers record what close() acknowledged; after a SIGKILL all of it is there."""
    u = mount.path / "user/default/preferences"
    acked: dict[str, bytes] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def writer(w: int) -> None:
        i = 0
        while not stop.is_set():
            node = u / f"w{w}-{i:04d}"
            data = f"writer {w} item {i}\n".encode() * 3
            try:
                node.mkdir()
                _write(node / "L2.md", data, fsync=(i % 3 == 0))
            except OSError:
                return  # the daemon is gone: this write was not acknowledged
            with lock:
                acked[node.name] = data
            i += 1

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
    for t in threads:
        t.start()
    while len(acked) < 60:
        threading.Event().wait(0.01)
    mount.kill()
    stop.set()
    for t in threads:
        t.join(timeout=30)
    mount.start()
    lost = [name for name, data in acked.items() if (u / name / "L2.md").read_bytes() != data]
    assert lost == [], f"{len(lost)} acknowledged writes lost"


def test_remount_shows_everything(mount):
    u = mount.path / "user/default"
    (u / "preferences/a").mkdir()
    (u / "preferences/a/L2.md").write_text("alpha\n")
    (u / "preferences/a/L2.md").write_text("alpha two\n")
    (u / "preferences/a/sub").mkdir()
    (u / "preferences/a/sub/f.txt").write_text("attached\n")
    os.symlink("sub/f.txt", u / "preferences/a/link")
    (u / "profile/L2.md").write_text("---\nname: Ada\n---\nMe.\n")
    (mount.path / "agent/bot").mkdir()
    (u / "events/2026-01-02-empty").mkdir()  # never written: stored at unmount
    before = sorted(
        str(p.relative_to(mount.path)) for p in mount.path.rglob("*") if ".status" not in str(p)
    )
    mount.remount()
    after = sorted(
        str(p.relative_to(mount.path)) for p in mount.path.rglob("*") if ".status" not in str(p)
    )
    assert after == before
    assert os.readlink(u / "preferences/a/link") == "sub/f.txt"
    assert (u / "preferences/a/.history/v1.md").read_text() == "alpha\n"


@pytest.mark.allow_warnings
def test_kill_9_keeps_new_files_from_their_first_commit_point(mount):
    """A new file is stored by its close (written or not), its fsync, or an fsync of its
    folder (reference.md, commit points), not when create returns: each survives a
    kill -9 of the daemon."""
    node = mount.path / "user/default/preferences/files"
    node.mkdir()
    (node / "L2.md").write_text("Files kept next to this memory.\n")
    (node / "touched").touch()
    _write(node / "closed.txt", b"written and closed\n", fsync=False)
    synced = os.open(node / "synced.txt", os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(synced, b"written and fsynced, still open\n")
    os.fsync(synced)
    in_synced_folder = os.open(node / "in-synced-folder.txt", os.O_WRONLY | os.O_CREAT, 0o644)
    folder = os.open(node, os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(folder)
    os.close(folder)
    mount.kill()
    close_after_kill(synced, in_synced_folder)
    mount.start()
    assert (node / "touched").read_bytes() == b""
    assert (node / "closed.txt").read_bytes() == b"written and closed\n"
    assert (node / "synced.txt").read_bytes() == b"written and fsynced, still open\n"
    assert (node / "in-synced-folder.txt").read_bytes() == b""


@pytest.mark.allow_warnings
def test_kill_9_keeps_an_empty_new_file_once_close_returned(mount):
    """close() is a new file's commit point even with nothing written and another
    descriptor still open (a `dup`, a forked child: the kernel sends no RELEASE until the
    last one closes). It was committed at RELEASE only, and a kill -9 between the two lost
    it (scripts/crash_trials.py, an attachment made empty and closed)."""
    node = mount.path / "user/default/preferences/files"
    node.mkdir()
    (node / "L2.md").write_text("Files kept next to this memory.\n")
    fd = os.open(node / "empty.bin", os.O_WRONLY | os.O_CREAT, 0o644)
    kept = os.dup(fd)
    os.close(fd)  # acknowledged: the file exists from here on
    mount.kill()
    close_after_kill(kept)
    mount.start()
    assert (node / "empty.bin").read_bytes() == b""
