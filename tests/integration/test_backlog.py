"""A big import never stalls the mount (SPEC §3, §9): through a real mount with the real
MiniLM model, a transcript of a few thousand turns in `.inbox/` makes a vector backlog;
meanwhile a node saved and fsynced is found by BM25 when fsync returns and gets its
vectors ahead of the backlog, `.status` shows the backlog and never says ready, an unmount
mid-backlog exits cleanly, and the next mount resumes from where the indexer stopped.
A second mount of a data dir in use exits 4 naming the holder.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from contextfs.testing.mount import Mount, contextfs_cmd, unmount, wait_for

# the backlog test waits up to 10 minutes for the index to drain after its remount
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

WORDS = [
    "garden",
    "river",
    "window",
    "market",
    "yellow",
    "engine",
    "pocket",
    "violin",
    "harbour",
    "candle",
    "winter",
    "ladder",
    "meadow",
    "copper",
    "thunder",
    "basket",
    "silver",
    "lantern",
    "orchard",
    "compass",
    "pepper",
    "marble",
]


def _transcript(turns: int) -> bytes:
    lines = []
    for i in range(turns):
        words = " ".join(WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(18))
        role = "user" if i % 2 == 0 else "assistant"
        lines.append(json.dumps({"role": role, "content": f"Turn {i}: {words}.", "id": f"t{i}"}))
    return ("\n".join(lines) + "\n").encode()


def _facts(mnt: Path) -> dict:
    return json.loads((mnt / ".status.json").read_text())


def _hits(mnt: Path, question: str) -> list[str]:
    return [
        h["path"]
        for h in json.loads((mnt / ".query" / question / "_results.json").read_text())["hits"]
    ]


def _meta(mnt: Path, node: str) -> dict[str, str]:
    text = (mnt / node / "meta.yaml").read_text()
    return dict(re.findall(r"^(\w+): (.*)$", text, re.M))


@pytest.fixture
def searching(tmp_path: Path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    m = Mount(mnt, tmp_path / "data", search=True)
    m.start()
    try:
        yield m
    finally:
        if m.proc is not None and m.proc.poll() is None:
            m.stop()
        else:
            unmount(mnt)
    assert m.fsck() == []


def test_fsync_and_search_during_a_backlog_then_stop_and_resume(searching: Mount) -> None:
    mnt = searching.path
    assert wait_for(lambda: _facts(mnt)["index"]["state"] == "ready", 120, 0.2)
    (mnt / ".inbox/big.jsonl").write_bytes(_transcript(3000))
    # the archive is stored and its vectors are queued: a backlog of thousands of units
    assert wait_for(lambda: _facts(mnt)["index"]["backlog"]["units_in_progress"] > 500, 120)
    facts = _facts(mnt)
    assert facts["index"]["state"] != "ready"
    assert "index_backlog:" in searching.status()

    # a node saved now: fsync returns, BM25 finds it at once, its vectors come first
    node = mnt / "user/default/preferences/kite"
    node.mkdir()
    t0 = time.monotonic()
    fd = os.open(node / "L2.md", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, b"She flies a red zephyrkite on windy Sundays.\n")
    os.fsync(fd)
    os.close(fd)
    fsync_done = time.monotonic() - t0
    assert _hits(mnt, "zephyrkite")[0] == "user/default/preferences/kite"
    assert wait_for(
        lambda: _meta(mnt, "user/default/preferences/kite")["indexed_version"] == "1", 60
    )
    during = _facts(mnt)["index"]
    assert during["backlog"]["units_in_progress"] > 0 or during["backlog"]["vector_changes"] > 0, (
        "the saved node's vectors were in before the backlog drained"
    )
    assert fsync_done < 30, "fsync did not wait for the backlog"
    embedded = during["indexed_units"]

    # an unmount mid-backlog: clean exit; the next mount resumes, nothing lost
    r = subprocess.run(
        contextfs_cmd("umount", str(mnt)), capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert searching.proc is not None
    assert searching.proc.wait(timeout=60) == 0
    searching.start()
    again = wait_for(
        lambda: _facts(mnt)["index"]["embedding_model"] and _facts(mnt)["index"]["dimensions"], 120
    )
    assert again
    resumed = _facts(mnt)["index"]
    assert resumed["indexed_units"] >= embedded, "the units embedded before the stop were kept"
    assert wait_for(lambda: _facts(mnt)["index"]["state"] == "ready", 600, 0.5)
    settled = _facts(mnt)["index"]
    assert settled["queue"] == 0 and settled["backlog"]["text_changes"] == 0
    assert settled["indexed_units"] > 3000
    assert _hits(mnt, "zephyrkite")[0] == "user/default/preferences/kite"
    report = (mnt / ".inbox/big.jsonl.report.md").read_text()
    assert "state: done" in report
    # the turns are searchable: the last one by a word only it has
    assert any("sessions" in p for p in _hits(mnt, "Turn 2999"))


def test_a_second_mount_of_a_data_dir_in_use_exits_4(mount: Mount, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    r = subprocess.run(
        contextfs_cmd("mount", str(other), "--data-dir", str(mount.data_dir)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 4, r.stderr
    assert mount.proc is not None
    assert f"store in use by PID {mount.proc.pid}" in r.stderr
    assert not os.path.ismount(other)
    # the offline commands see it too
    for command in ("reindex", "fsck"):  # none breaks or misreads a live store
        r = subprocess.run(
            contextfs_cmd(command, str(mount.data_dir)), capture_output=True, text=True, timeout=120
        )
        assert r.returncode == 4 and "store in use by PID" in r.stderr, (command, r.stderr)
    # status of the data dir answers from its mount, found by the mount record
    r = subprocess.run(
        contextfs_cmd("status", str(mount.data_dir)), capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert f"mountpoint: {mount.path}\n" in r.stdout and "state: read-write" in r.stdout
