"""The mount comes up with the SPEC §1 tree and survives a remount."""

from __future__ import annotations


def test_tree_and_remount(mount):
    root = mount.path
    assert sorted(p.name for p in root.iterdir()) == [
        ".inbox",
        ".restore",
        ".schemas",
        ".sessions",
        ".status",
        ".status.json",
        "agent",
        "user",
    ]  # .query: search off
    assert sorted(p.name for p in (root / "user/default").iterdir()) == [
        ".archive",
        ".inbox",
        ".sessions",
        ".trash",
        "audio",
        "entities",
        "events",
        "images",
        "preferences",
        "profile",
        "sessions",
        "videos",
    ]
    node = root / "user/default/preferences/editor"
    node.mkdir()
    (node / "L2.md").write_text("# Editor\n\nShe prefers vim.\n")
    assert (node / "L0.md").read_text() == "Editor\n" or "vim" in (node / "L0.md").read_text()
    mount.remount()
    assert (node / "L2.md").read_text() == "# Editor\n\nShe prefers vim.\n"
    assert "version: 1" in (node / "meta.yaml").read_text()
