"""Data findings of issue 11 through a real mount, with real shell tools and threads:
a save that returned 0 survives a remount, concurrent rewrites give only saved states,
`cp -r`/`tar x`/`rm -r` of node directories, exports read to their true size."""

from __future__ import annotations

import os

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
