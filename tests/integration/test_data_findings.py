"""Data findings of issue 11 through a real mount, with real shell tools and threads:
a save that returned 0 survives a remount, concurrent rewrites give only saved states,
`cp -r`/`tar x`/`rm -r` of node directories, exports read to their true size."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

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


def _node_with_history(mount) -> Path:
    node = mount.path / TYPE_DIR / "editor"
    node.mkdir()
    (node / "L2.md").write_text("I use vim.\n")
    (node / "L2.md").write_text("I use vim daily.\n")
    (node / "notes.txt").write_text("an attachment\n")
    return node


def _refused_only_derived(stderr: str) -> None:
    """Only derived files were refused: meta.yaml, .history, and L0.md/L1.md when the
    copy wrote L2.md first (they are derived from it at once)."""
    lines = [line for line in stderr.splitlines() if line.strip() and "Exiting" not in line]
    derived = ("meta.yaml", ".history", "L0.md", "L1.md")
    assert all(any(d in line for d in derived) for line in lines), repr(stderr)


def test_cp_r_of_a_copied_node_creates_its_tiers(mount):
    """mkdir makes a node whose tiers do not exist until written, so `cp -r` (O_EXCL)
    creates them, and its meta.yaml and .history too: the copy keeps both versions
    (docs/reference.md, copying nodes). `cp` copies by inode number: the copy kept
    outside is on tmpfs, which numbers files and folders in the order `cp` made them
    (the mount's order); ext4 may number `.history` after L2.md (what reference.md says)."""
    node = _node_with_history(mount)
    outside = Path(tempfile.mkdtemp(dir="/dev/shm"))
    try:
        subprocess.run(["cp", "-r", str(node), str(outside / "copy")], check=True)
        dest = mount.path / TYPE_DIR / "editor2"
        cp = subprocess.run(["cp", "-r", str(outside / "copy"), str(dest)], capture_output=True)
    finally:
        shutil.rmtree(outside)
    _refused_only_derived(cp.stderr.decode())
    assert (dest / "L2.md").read_text() == "I use vim daily.\n"
    assert (dest / "notes.txt").read_text() == "an attachment\n"
    assert cp.returncode == 0, cp.stderr
    assert sorted(os.listdir(dest / ".history")) == ["v1.md", "v2.md"]
    mount.remount()
    assert (dest / "L2.md").read_text() == "I use vim daily.\n"
    assert (dest / "notes.txt").read_text() == "an attachment\n"


def test_tar_x_over_a_node_and_rm_r_history_hide_nothing(mount, tmp_path):
    node = _node_with_history(mount)
    subprocess.run(["tar", "cf", str(tmp_path / "e.tar"), "-C", str(node.parent), "editor"])
    (node / "L2.md").write_text("changed since the export\n")
    tar = subprocess.run(
        ["tar", "xf", str(tmp_path / "e.tar"), "-C", str(node.parent)], capture_output=True
    )
    _refused_only_derived(tar.stderr.decode())
    assert (node / "L2.md").read_text() == "I use vim daily.\n", "the exported text is back"
    assert "meta.yaml" in os.listdir(node), "meta.yaml was not hidden"
    assert sorted(os.listdir(node / ".history")) == ["v1.md", "v2.md", "v3.md", "v4.md"]
    rm = subprocess.run(["rm", "-r", str(node / ".history")], capture_output=True)
    assert rm.returncode != 0 and b"Permission denied" in rm.stderr
    assert len(os.listdir(node / ".history")) == 4, "the history was not hidden"
    assert subprocess.run(["rm", str(node / "meta.yaml")], capture_output=True).returncode
    assert "meta.yaml" in os.listdir(node)
    # the whole node still goes with rm -r (soft delete)
    subprocess.run(["rm", "-r", str(node)], check=True)
    assert not node.exists()
    assert "editor" in os.listdir(mount.path / "user/default/.trash/preferences")


def test_rsync_exports_files_whole(mount, tmp_path):
    """rsync copies st_size bytes: a session's context.md reports its true size, and
    reading a node (rsync, grep -r) does not change its meta.yaml while it is copied."""
    (mount.path / ".sessions/s1").mkdir()
    with open(mount.path / ".sessions/s1/transcript.jsonl", "a") as f:
        f.write('{"role": "user", "content": "I moved to Paris last spring."}\n')
    for i in range(12):
        node = mount.path / TYPE_DIR / f"topic-{i}"
        node.mkdir()
        (node / "L2.md").write_text(f"Preference number {i}.\n" * 3)
    out = tmp_path / "out"
    out.mkdir()
    subprocess.run(["rsync", "-a", f"{mount.path}/user/default/", f"{out}/user/"], check=True)
    subprocess.run(["rsync", "-a", f"{mount.path}/.sessions/s1/", f"{out}/s1/"], check=True)
    context = (out / "s1/context.md").read_bytes()
    assert context and context == (mount.path / ".sessions/s1/context.md").read_bytes()
    subprocess.run(["grep", "-r", "Preference", str(mount.path / TYPE_DIR)], capture_output=True)
    for i in range(12):
        rel = f"{TYPE_DIR}/topic-{i}"
        copied = out / "user" / rel.removeprefix("user/default/")
        for name in ("L2.md", "L0.md", "meta.yaml"):
            assert (copied / name).read_bytes() == (mount.path / rel / name).read_bytes(), name
        assert "access_count: 0" in (copied / "meta.yaml").read_text()


def test_drops_by_name_merge_into_a_node_whose_l2_says_another_key(mount):
    """The node's name is its key: an L2 edited by hand to say another (`topic: vim` in
    preferences/ked) is kept as written, and a file dropped under the node's name still
    merges into it (every such drop was refused: "field 'topic' is immutable: it is
    'vim', refusing 'ked'"). So for a copy under a new name, which keeps the source's
    key (docs/context-types.md, "Templates and node names")."""
    p = mount.path / TYPE_DIR
    (p / "ked.md").write_text("Uses vim.\n")
    assert "topic: ked\n" in (p / "ked/L2.md").read_text()
    (p / "ked/L2.md").write_text("---\ntopic: vim\n---\nUses vim.\n")
    assert (p / "ked/L2.md").read_text() == "---\ntopic: vim\n---\nUses vim.\n"
    (p / "ked.md").write_text("Now uses helix.\n")  # close() was EINVAL
    assert (p / "ked/L2.md").read_text() == "---\ntopic: vim\n---\nNow uses helix.\n"
    (p / "note.md").write_text("---\ntopic: Ked\n---\nWith a dark theme.\n")  # by its key
    assert (p / "ked/L2.md").read_text() == "---\ntopic: vim\n---\nWith a dark theme.\n"
    r = subprocess.run(["cp", "-r", p / "ked", p / "ked-copy"], capture_output=True, text=True)
    assert (r.returncode, r.stderr) == (0, "")
    (p / "ked-copy.md").write_text("Tries kakoune.\n")
    assert (p / "ked-copy/L2.md").read_text() == "---\ntopic: vim\n---\nTries kakoune.\n"
    assert sorted(os.listdir(p)) == ["ked", "ked-copy"]
    assert "EINVAL" not in mount.status()
