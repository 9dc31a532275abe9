"""Data findings of issue 11 through a real mount, with real shell tools and threads:
a save that returned 0 survives a remount, concurrent rewrites give only saved states,
`cp -r`/`tar x`/`rm -r` of node directories, exports read to their true size."""

from __future__ import annotations

import os
import threading

TYPE_DIR = "user/default/preferences"


def test_plausible_names_in_a_type_dir_survive_a_remount(mount, tmp_path):
    """`2024`, `notes.tmp`, `.draft.md`, `draft~` are not memories (a writer may rename
    them to one), but a save that returned 0 is still there after a remount."""
    d = mount.path / TYPE_DIR
    names = ["2024", "123", "notes.tmp", ".draft.md", "draft~"]
    for name in names:
        (d / name).write_text(f"kept {name}\n")
    assert set(names) <= set(os.listdir(d))
    mount.remount()
    assert set(names) <= set(os.listdir(d))
    for name in names:
        assert (d / name).read_text() == f"kept {name}\n"
    os.rename(d / "notes.tmp", d / "notes.md")  # an atomic writer's rename: a memory now
    (d / "123").unlink()
    mount.remount()
    listing = set(os.listdir(d))
    assert "notes" in listing and "notes.tmp" not in listing and "123" not in listing
    assert "kept notes.tmp" in (d / "notes" / "L2.md").read_text()


def test_concurrent_rewrites_make_only_saved_versions(mount):
    """Three threads each rewrite L2.md (open('w'), write, close) 30 times: every version
    is the whole text one of them wrote, never an empty truncation of another open."""
    node = mount.path / TYPE_DIR / "editor"
    node.mkdir()
    (node / "L2.md").write_text("start\n")
    saved = {"start\n"}
    for t in range(3):
        saved |= {f"thread {t} round {i}\n" * 20 for i in range(30)}

    def writer(t: int) -> None:
        for i in range(30):
            with open(node / "L2.md", "w") as f:
                f.write(f"thread {t} round {i}\n" * 20)

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    versions = [(node / ".history" / v).read_text() for v in os.listdir(node / ".history")]
    bad = [v[:40] for v in versions if v not in saved]
    assert not bad, f"{len(bad)} of {len(versions)} versions nobody saved: {bad[:5]}"
    assert (node / "L2.md").read_text() in saved
