"""Files read through the kernel's page cache are never served stale (docs/architecture.md,
"Reading a file: one request").

A tier opened read-only is kept in the kernel's page cache (`keep_cache`) and its close()
sends no FLUSH; whatever changes its bytes must drop that copy before the change is
visible elsewhere. Each test reads with the real `cat` first, so the kernel holds the old
bytes, then changes the file through one writer and reads again at once. (Another mount on
the same PostgreSQL store: tests/store/test_cluster_mounts.py.)
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from contextfs.testing import Mount

U = "user/default"


def cat(path: Path) -> str:
    return subprocess.run(["cat", str(path)], capture_output=True, text=True, check=True).stdout


def write(path: Path, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def test_derived_tiers_follow_a_rewrite_of_l2(mount: Mount):
    node = mount.path / U / "entities/harbour"
    node.mkdir()
    write(node / "L2.md", "The harbour office opens at nine.\n")
    before = {t: cat(node / t) for t in ("L0.md", "L1.md", "L2.md")}
    assert "nine" in before["L0.md"] and "nine" in before["L1.md"]
    for _ in range(3):  # warm: answered from the page cache, the same bytes
        assert {t: cat(node / t) for t in before} == before
    # an editor's save (sed -i: a new file renamed over L2.md), then an in-place rewrite
    subprocess.run(["sed", "-i", "s/nine/ten/", str(node / "L2.md")], check=True)
    assert cat(node / "L2.md") == "The harbour office opens at ten.\n"
    assert "ten" in cat(node / "L0.md") and "ten" in cat(node / "L1.md")
    write(node / "L2.md", "The harbour office moved to the pier.\n")
    assert cat(node / "L2.md") == "The harbour office moved to the pier.\n"
    assert "pier" in cat(node / "L0.md") and "pier" in cat(node / "L1.md")
    assert "version: 3" in cat(node / "meta.yaml")


def test_a_merged_drop_changes_the_cached_node(mount: Mount):
    prefs = mount.path / U / "preferences"
    write(prefs / "tea.md", "---\ntopic: tea\n---\nGreen tea, no sugar.\n")
    l2 = prefs / "tea/L2.md"
    first = cat(l2)
    assert "Green tea" in first and cat(l2) == first
    # routed into the same node by its key: the daemon changes L2 on its own
    write(prefs / "tea.md", "---\ntopic: tea\n---\nOolong in the afternoon.\n")
    assert "Oolong" in cat(l2)
    assert "Oolong" in cat(prefs / "tea/L1.md")


def test_a_hand_written_l0_and_its_release(mount: Mount):
    node = mount.path / U / "entities/ferry"
    node.mkdir()
    write(node / "L2.md", "The ferry leaves at six.\n")
    derived = cat(node / "L0.md")
    write(node / "L0.md", "Ferry timetable (my summary)\n")  # pinned by hand
    assert cat(node / "L0.md") == "Ferry timetable (my summary)\n"
    write(node / "L2.md", "The ferry leaves at seven.\n")  # L2 changed: derived again
    again = cat(node / "L0.md")
    assert again != "Ferry timetable (my summary)\n" and again != derived and "seven" in again


def test_inbox_extraction_changes_a_node_someone_read(mount: Mount):
    rex = mount.path / U / "entities/rex"
    rex.mkdir()
    write(rex / "L2.md", "Rex is a dog.\n")
    assert cat(rex / "L2.md") == "Rex is a dog.\n"
    turns = [
        {
            "role": "user",
            "content": "My dog Rex is a golden retriever.",
            "timestamp": "2026-11-20T10:00:00Z",
            "id": "m1",
        }
    ]
    (mount.path / ".inbox/chat.jsonl").write_text("".join(json.dumps(t) + "\n" for t in turns))
    deadline = time.monotonic() + 60
    while "golden retriever" not in cat(rex / "L2.md"):  # each cat through the page cache
        assert time.monotonic() < deadline, cat(rex / "L2.md")
        time.sleep(0.2)
    assert "golden retriever" in cat(rex / "L1.md")
    assert os.stat(rex / "L2.md").st_size == len(cat(rex / "L2.md").encode())
