"""A full disk under the data dir, on a real mount: writes are refused with ENOSPC and
`.status` says why, reads and `.status` go on, nothing acknowledged is lost, and writes
are taken again once there is room, without a restart; a nearly full disk postpones the
store's checkpoint instead of losing the database to a failed one."""

from __future__ import annotations

import errno
import json
import os
import shutil
import time
from pathlib import Path

import pytest

from contextfs.testing import Mount
from contextfs.testing.mount import (
    BENIGN_LOG,
    fill_disk,
    log_problems,
    mount_tmpfs,
    unmount_tmpfs,
    wait_index_ready,
)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs (root)")


def _write(path: Path, data: bytes) -> int:
    """Write and close a file through the mount; the errno it fails with, 0 when it does
    not (a write is stored at close)."""
    try:
        with open(path, "wb") as f:
            f.write(data)
    except OSError as exc:
        return exc.errno
    return 0


def test_a_full_disk_refuses_writes_and_keeps_the_mount(tmp_path: Path):
    disk = mount_tmpfs(tmp_path / "disk", "160m")
    (tmp_path / "mnt").mkdir()
    (disk / "data").mkdir()
    # the log is moved into the file at 16 MiB here (64 by default): the tmpfs is small.
    # Search off: what is checked is the store's; the model and the index would take
    # half a GiB and the tmpfs's room from a test that fills the disk on purpose
    (disk / "data/config.yaml").write_text("search: false\nstore_checkpoint_mb: 16\n")
    m = Mount(tmp_path / "mnt", disk / "data")
    try:
        m.start()
        node = m.path / "user/default/preferences/files"
        node.mkdir()
        (node / "L2.md").write_text("Files kept before the disk filled.\n")
        before = os.urandom(1 << 20)
        assert _write(node / "before.bin", before) == 0
        filler = fill_disk(disk)

        assert _write(node / "during.bin", os.urandom(2 << 20)) == errno.ENOSPC
        assert _write(node / "L2.md", b"A new version that does not fit.\n" * 20000) in (
            errno.ENOSPC,
            0,  # a small change may still fit in what DuckDB's log has room for
        )
        # reads and .status go on
        assert (node / "before.bin").read_bytes() == before
        assert (node / "L2.md").read_text().startswith(("Files kept", "A new version"))
        status = m.status()
        assert "state: read-write (disk full since" in status, status
        assert "ENOSPC" in status
        assert "before.bin" in os.listdir(node)

        filler.unlink()  # room again: the next write is taken, no restart
        after = os.urandom(2 << 20)
        assert _write(node / "after.bin", after) == 0
        assert "disk full" not in m.status()

        # nearly full: the store's log outgrows its checkpoint size (16 MiB here)
        # with no room to move it into the database file. DuckDB's own checkpoint would
        # fail there and invalidate the database (every read EIO until a restart); the
        # store's waits for room, and the writes stay in the log meanwhile.
        bulk = [os.urandom(10 << 20), os.urandom(8 << 20)]
        assert _write(node / "bulk0.bin", bulk[0]) == 0
        filler = fill_disk(disk)
        os.truncate(filler, filler.stat().st_size - (14 << 20))
        assert _write(node / "bulk1.bin", bulk[1]) == 0
        wal = disk / "data/contextfs.duckdb.wal"
        assert wal.stat().st_size > 16 << 20
        assert _write(node / "small0.txt", b"one more\n") == 0  # DuckDB's would checkpoint
        assert wal.stat().st_size > 16 << 20  # not moved: no room
        for i, data in enumerate(bulk):
            assert (node / f"bulk{i}.bin").read_bytes() == data
        assert (node / "before.bin").read_bytes() == before
        filler.unlink()
        assert _write(node / "small.txt", b"room again\n") == 0
        # moved into the file at that commit (DuckDB removes the emptied log; the next
        # commit makes it again)
        assert not wal.exists() or wal.stat().st_size < 1 << 20
        m.stop()

        m.start()  # nothing acknowledged is lost
        assert (node / "before.bin").read_bytes() == before
        assert (node / "after.bin").read_bytes() == after
        for i, data in enumerate(bulk):
            assert (node / f"bulk{i}.bin").read_bytes() == data
        m.stop()
        assert m.fsck() == []
    finally:
        if m.proc is not None:
            m.stop()
        if m.log.exists():  # kept beside, for a failure to be read
            shutil.copy(m.log, tmp_path / "contextfs.log")
        unmount_tmpfs(disk)
    log = log_problems(tmp_path / "contextfs.log")
    # said once when it fills; a refused tier write's trace file has no room either
    expected = (
        "disk full: writes are refused",
        "no trace of the refused write",
        "disk nearly full",
        *BENIGN_LOG,
    )
    problems = [p for p in log if not any(e in p for e in expected)]
    assert problems == [], problems
    assert any("disk full: writes are refused until there is room" in p for p in log), log


def test_a_change_refused_for_a_full_disk_is_not_shown(tmp_path: Path):
    """What the mount shows under a full disk is what it stored: a refused chmod leaves
    the old mode, a refused rewrite the old bytes, a refused O_TRUNC fails its open (it
    was lost at the release, silently), before and after a remount (found by the
    differential campaign's disk-full step)."""
    disk = mount_tmpfs(tmp_path / "disk", "160m")
    (tmp_path / "mnt").mkdir()
    m = Mount(tmp_path / "mnt", disk / "data")
    try:
        m.start()
        node = m.path / "user/default/preferences/kept"
        node.mkdir()
        (node / "L2.md").write_text("A node whose files stay as stored.\n")
        (node / "notes.txt").write_bytes(b"stored\n")
        os.chmod(node / "notes.txt", 0o644)
        filler = fill_disk(disk)

        fd = os.open(node / "notes.txt", os.O_WRONLY)  # overwritten in place, then closed
        os.write(fd, os.urandom(256 << 10))
        with pytest.raises(OSError) as rewrite:
            os.close(fd)
        assert rewrite.value.errno == errno.ENOSPC
        assert (node / "notes.txt").read_bytes() == b"stored\n"
        # small changes fit in what the store's log has room for, until they do not
        mode, refused = 0o644, None
        for i in range(500):
            try:
                os.chmod(node / "notes.txt", (0o600, 0o640)[i % 2])
            except OSError as exc:
                refused = exc.errno
                break
            mode = (0o600, 0o640)[i % 2]
        assert refused == errno.ENOSPC
        listed = {e.name: e.stat().st_mode for e in os.scandir(node)}  # fresh from the mount
        assert oct(listed["notes.txt"] & 0o777) == oct(mode)
        assert oct(os.stat(node / "notes.txt").st_mode & 0o777) == oct(mode)
        assert (node / "notes.txt").read_bytes() == b"stored\n"
        # `: > notes.txt`: the cut is refused by open, not lost at a release
        with pytest.raises(OSError) as cut:
            os.close(os.open(node / "notes.txt", os.O_WRONLY | os.O_TRUNC))
        assert cut.value.errno == errno.ENOSPC
        assert (node / "notes.txt").read_bytes() == b"stored\n"

        filler.unlink()
        m.remount()
        assert oct(os.stat(node / "notes.txt").st_mode & 0o777) == oct(mode)
        assert (node / "notes.txt").read_bytes() == b"stored\n"
        m.stop()
        assert m.fsck() == []
    finally:
        if m.proc is not None:
            m.stop()
        unmount_tmpfs(disk)


def test_search_goes_on_after_a_checkpoint_failed_on_a_full_disk(tmp_path: Path):
    """Search on (the default): the index's checkpoint (every 20 s after a change) finds
    the disk full. It is tried again later; the mount goes on answering questions, and
    once there is room a note saved then is found, with no error left in `.status`."""
    disk = mount_tmpfs(tmp_path / "disk", "160m")
    (tmp_path / "mnt").mkdir()
    (disk / "data").mkdir()
    (disk / "data/config.yaml").write_text("store_checkpoint_mb: 16\n")
    m = Mount(tmp_path / "mnt", disk / "data", search=True)
    try:
        m.start()
        node = m.path / "user/default/preferences/tea"
        node.mkdir(parents=True)
        with open(node / "L2.md", "w") as f:
            f.write("She drinks genmaicha every morning.\n")
            f.flush()
            os.fsync(f.fileno())
        wait_index_ready(m.path, 120)  # the first vectors, saved with their rebuild
        coffee = m.path / "user/default/preferences/coffee"
        coffee.mkdir()
        with open(coffee / "L2.md", "w") as f:
            f.write("He takes his coffee black.\n")
            f.flush()
            os.fsync(f.fileno())
        wait_index_ready(m.path, 120)  # its vectors are in, not yet in a checkpoint
        time.sleep(3)  # and BM25 has committed it (within a second of the fsync)
        filler = fill_disk(disk)
        deadline = time.monotonic() + 60  # the checkpoint comes within 20 s (the log
        while "index_error: checkpoint failed" not in m.status():  # has no room either)
            assert time.monotonic() < deadline, m.status()
            time.sleep(0.5)
        assert hits(m.path, "genmaicha")[:1] == ["user/default/preferences/tea"]
        assert hits(m.path, "coffee black")[:1] == ["user/default/preferences/coffee"]
        filler.unlink()
        later = m.path / "user/default/preferences/lamps"
        later.mkdir()
        with open(later / "L2.md", "w") as f:
            f.write("He collects vintage grobblewick lamps.\n")
            f.flush()
            os.fsync(f.fileno())  # findable by its words when this returns
        assert hits(m.path, "grobblewick")[:1] == ["user/default/preferences/lamps"]
        wait_index_ready(m.path, 120)
        deadline = time.monotonic() + 120  # BM25's retry waits up to a minute
        while "index_error" in m.status():
            assert time.monotonic() < deadline, m.status()
            time.sleep(0.5)
        assert hits(m.path, "coffee black")[:1] == ["user/default/preferences/coffee"]
        assert not m.died(), m.post_mortem()
    finally:
        if m.proc is not None and not m.died():
            m.stop()
        if m.log.exists():
            shutil.copy(m.log, tmp_path / "contextfs.log")
        unmount_tmpfs(disk)


def hits(root: Path, question: str) -> list[str]:
    """The paths `_results.json` ranks for a question asked at the mount's root."""
    text = (root / ".query" / question / "_results.json").read_text()
    return [h["path"] for h in json.loads(text)["hits"]]


def test_a_compact_refused_for_a_full_disk_loses_no_turn(tmp_path: Path):
    """`compact` archives the turns so far and empties the live transcript in one
    transaction; refused (ENOSPC), the session stays as stored: the transcript still
    shows its turns, and ending it later archives every one of them."""
    disk = mount_tmpfs(tmp_path / "disk", "160m")
    (tmp_path / "mnt").mkdir()
    (disk / "data").mkdir()
    (disk / "data/config.yaml").write_text("search: false\nstore_checkpoint_mb: 16\n")
    m = Mount(tmp_path / "mnt", disk / "data")
    try:
        m.start()
        s = m.path / ".sessions/s1"
        s.mkdir()
        turns = [{"role": "user", "content": f"Note {i}: the kiln runs on Tuesdays.", "id": f"t{i}"}
                 for i in range(3)]  # fmt: skip
        with open(s / "transcript.jsonl", "a") as f:
            f.write("".join(json.dumps(t) + "\n" for t in turns))
        filler = fill_disk(disk)
        assert _write(s / "control", b"compact\n") == errno.ENOSPC
        assert (s / "transcript.jsonl").read_text().count("kiln") == 3
        filler.unlink()
        os.rmdir(s)
        archived = [p for p in (m.path / "user/default/sessions").iterdir() if "-s1" in p.name]
        text = "".join((p / "L2.md").read_text() for p in archived)
        assert [f"id t{i}\n" in text for i in range(3)] == [True] * 3, text
        m.stop()
        assert m.fsck() == []
    finally:
        if m.proc is not None:
            m.stop()
        if m.log.exists():
            shutil.copy(m.log, tmp_path / "contextfs.log")
        unmount_tmpfs(disk)


def test_a_mount_started_on_a_full_disk_refuses_new_things_with_enospc(tmp_path: Path):
    """Mounted on a full disk, the first new node or inbox item needs ids from the store,
    taken outside the change's transaction: ENOSPC with the reason, never EIO "internal
    error"; a refused inbox file is not listed as handed in; and once there is room, the
    same works without a restart."""
    disk = mount_tmpfs(tmp_path / "disk", "40m")
    (tmp_path / "mnt").mkdir()
    m = Mount(tmp_path / "mnt", disk / "data")
    try:
        m.start()
        m.stop()
        filler = fill_disk(disk)
        m.start()
        prefs = m.path / "user/default/preferences"
        with pytest.raises(OSError) as made:
            (prefs / "x").mkdir()
        assert made.value.errno == errno.ENOSPC
        with pytest.raises(OSError) as handed:
            (m.path / ".inbox/t.md").write_text("I prefer green tea.\n" * 2000)
        assert handed.value.errno == errno.ENOSPC
        assert "t.md" not in os.listdir(m.path / ".inbox")
        status = (m.path / ".status").read_text()
        assert "internal error" not in status and "the disk is full" in status
        filler.unlink()
        (prefs / "x").mkdir()
        (prefs / "x/L2.md").write_text("Room again.\n")
        assert (prefs / "x/L2.md").read_text() == "Room again.\n"
        m.stop()
        assert m.fsck() == []
    finally:
        if m.proc is not None:
            m.stop()
        unmount_tmpfs(disk)
