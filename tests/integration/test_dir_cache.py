"""Directory listings kept by the kernel stay true (docs/architecture.md, "Directory
listings").

The daemon answers OPENDIR with ENOSYS (pyfuse3 from scripts/build_pyfuse3.py), so Linux
keeps every listing it read in its readdir cache. Changes made through the kernel drop that
cache by themselves; changes the daemon makes on its own (routing a drop, a new version in
`.history`, a deleted node moving to the trash, inbox extraction) must drop it too. Each test
lists a directory first, so the kernel holds the old listing, then checks that the next
`ls` shows the change at once.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from contextfs.testing import Mount

U = "user/default"


def ls(path: Path) -> list[str]:
    """What a user sees: the real `ls -A`."""
    out = subprocess.run(["ls", "-A", str(path)], capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_status_says_listings_are_kept_by_the_kernel(mount: Mount):
    # scripts/setup.sh builds the pyfuse3 that allows it; a stock pyfuse3 shows why not
    status = (mount.path / ".status").read_text()
    assert "directory listings: kept by the kernel" in status, status


def test_a_routed_drop_shows_as_its_node_in_a_listed_type_dir(mount: Mount):
    prefs = mount.path / U / "preferences"
    assert ls(prefs) == []
    (prefs / "drinks.md").write_text("---\ntopic: drinks\n---\nTea, never coffee.\n")
    assert ls(prefs) == ["drinks"]  # the drop became a node; the file is gone
    (prefs / "drinks.md").write_text("---\ntopic: drinks\n---\nGreen tea in the morning.\n")
    assert ls(prefs) == ["drinks"]
    assert "Green tea" in (prefs / "drinks/L2.md").read_text()


def test_history_lists_a_new_version_at_once(mount: Mount):
    node = mount.path / U / "entities/rex"
    node.mkdir()
    (node / "L2.md").write_text("Rex is a dog.\n")
    assert ls(node / ".history") == ["v1.md"]
    with open(node / "L2.md", "a") as f:
        f.write("He is a golden retriever.\n")
    assert ls(node / ".history") == ["v1.md", "v2.md"]
    subprocess.run(["sed", "-i", "s/dog/good dog/", str(node / "L2.md")], check=True)
    assert ls(node / ".history") == ["v1.md", "v2.md", "v3.md"]


def test_rm_r_and_restore_show_in_listed_trash_and_type_dir(mount: Mount):
    owner = mount.path / U
    node = owner / "entities/ada"
    node.mkdir()
    (node / "L2.md").write_text("Ada Lovelace wrote the first program.\n")
    (node / "notes.txt").write_text("attachment\n")
    assert ls(owner / "entities") == ["ada"]
    assert ls(owner / ".trash") == []
    subprocess.run(["rm", "-r", str(node)], check=True)
    assert ls(owner / "entities") == []
    assert ls(owner / ".trash") == ["entities"]
    assert ls(owner / ".trash/entities") == ["ada"]
    os.rename(owner / ".trash/entities/ada", node)
    assert ls(owner / ".trash/entities") == []
    assert ls(owner / "entities") == ["ada"]
    assert {"L2.md", "notes.txt"} <= set(ls(node))
    assert (node / "notes.txt").read_text() == "attachment\n"


def test_background_extraction_shows_in_listed_directories(mount: Mount):
    owner = mount.path / U
    inbox = mount.path / ".inbox"
    assert ls(owner / "entities") == []
    assert ls(inbox) == []
    turns = [
        {
            "role": "user",
            "content": "My dog Rex is a golden retriever.",
            "timestamp": "2026-11-20T10:00:00Z",
            "id": "m1",
        }
    ]
    (inbox / "chat.jsonl").write_text("".join(json.dumps(t) + "\n" for t in turns))
    deadline = time.monotonic() + 60
    while "rex" not in ls(owner / "entities"):  # each ls answered from the kernel's cache
        assert time.monotonic() < deadline, "extracted node never listed"  # until it changes
        time.sleep(0.1)
    assert "golden retriever" in (owner / "entities/rex/L2.md").read_text()
    assert "chat.jsonl" in ls(inbox)


def test_reads_leave_meta_yaml_as_it_is(mount: Mount):
    """A plain read is not an access (only reading a .query answer is): `cat`, `grep -r`
    and rsync change nothing, so meta.yaml keeps its size while it is copied."""
    node = mount.path / U / "entities/rex"
    node.mkdir()
    (node / "L2.md").write_text("Rex is a dog.\n")
    meta = node / "meta.yaml"

    def count() -> int:
        text = meta.read_text()
        assert os.stat(meta).st_size == len(text.encode())  # size and content agree
        return int(text.split("access_count: ")[1].split()[0])

    before, text = count(), meta.read_text()
    for _ in range(12):
        (node / "L2.md").read_text()
    assert count() == before and meta.read_text() == text


@pytest.mark.parametrize("off", ["dir_cache: false"])
def test_dir_cache_can_be_turned_off(tmp_path: Path, off: str):
    data = tmp_path / "data"
    data.mkdir()
    (data / "config.yaml").write_text(f"search: false\n{off}\n")
    (tmp_path / "mnt").mkdir()
    m = Mount(tmp_path / "mnt", data)
    m.start()
    try:
        assert (
            "directory listings: asked on every read (dir_cache: false"
            in (m.path / ".status").read_text()
        )
        prefs = m.path / U / "preferences"
        (prefs / "drinks.md").write_text("---\ntopic: drinks\n---\nTea.\n")
        assert ls(prefs) == ["drinks"]
    finally:
        m.stop()
    assert m.fsck() == []


def test_every_queued_invalidation_reaches_the_kernel(mount: Mount):
    """A burst of daemon-side changes to one file (the same aggregate node over and over)
    queues several invalidations of it; once they are sent, opens use the page cache
    again (an unsettled file is read past it), and .status shows nothing pending."""
    prefs = mount.path / U / "preferences"
    (prefs / "drinks.md").write_text("---\ntopic: drinks\n---\nTea.\n")

    def writer(w: int) -> None:
        for i in range(15):
            (prefs / f"drinks-{w}.md").write_text(f"---\ntopic: drinks\n---\nTea number {w}.{i}.\n")
            (prefs / "drinks/L2.md").read_text()
            (prefs / "drinks/meta.yaml").read_text()

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert ls(prefs) == ["drinks"]
    deadline = time.monotonic() + 10
    while "kernel cache invalidations pending: 0" not in (mount.path / ".status").read_text():
        assert time.monotonic() < deadline, (mount.path / ".status").read_text()
        time.sleep(0.05)
