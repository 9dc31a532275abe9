"""`contextfs export` and `contextfs import` on real mounts, through the real CLI.

- A store with every kind of thing a person makes (fields, versions, hand-written L0/L1,
  nested attachments with modes and a symlink, a singleton, another user's dated event,
  an agent's skill, unicode) is exported, imported into an empty mount and exported
  again: the two trees are the same file for file and byte for byte, the store's own
  facts too (ids, times, provenance, importance, reads, tags: the import hands each node
  to the mount's `.restore`), and `.restore` refuses what is not an exported node.
- The export of the unmounted data dir is the mount's export byte for byte (facts too),
  and a data dir that is mounted is exported through its mount (found by its record).
- A generated Obsidian/Basic Memory vault of a few hundred notes is routed in with
  progress on stderr: wikilinks and tags kept, undeclared properties kept as text, a
  real-looking key redacted, and the notes the mount refuses listed with their reason.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from contextfs.testing import Mount, contextfs_cmd

# the store's own bookkeeping, not restored by an import (docs/agents.md)
NOT_PRESERVED = {"id", "created", "updated", "sources", "access_count", "importance", "tags"}
OTHER_UID = 4321  # a user a node is given to (chown: when the tests run as root)
GITHUB = "ghp" + "_" + "Lm3Nq5Rs7Tu9Vw1Xy3Za5Bc7De9Fg1Hi3Jk5"  # assembled: not a real leak


def cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    return subprocess.run(contextfs_cmd(*args), capture_output=True, text=True, env=env)


def snapshot(root: Path, *, strip_facts: bool) -> dict[str, object]:
    """Every path under root: a file's mode and bytes, a symlink's target, a folder's mode.
    With strip_facts, a node file's `facts:` (the last part of its front matter) is cut
    from its bytes and kept parsed, without the facts that are not preserved."""
    out: dict[str, object] = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        st = p.lstat()
        if p.is_symlink():
            out[rel] = ("symlink", os.readlink(p))
        elif p.is_dir():
            out[rel] = ("dir", oct(st.st_mode & 0o777))
        elif strip_facts and p.suffix == ".md" and ".history" not in p.parts:
            lines = p.read_text().split("\n")
            start = lines.index("  facts:")
            end = lines.index("---", start)
            facts = yaml.safe_load("\n".join(ln[4:] for ln in lines[start + 1 : end]))
            kept = {k: v for k, v in facts.items() if k not in NOT_PRESERVED}
            out[rel] = ("node", oct(st.st_mode & 0o777), lines[:start] + lines[end:], kept)
        else:
            out[rel] = ("file", oct(st.st_mode & 0o777), p.read_bytes())
    return out


def version_times(root: Path) -> dict[str, float]:
    """When each version under root was saved: the mtime of its `.history/vN.md`."""
    return {str(p.relative_to(root)): p.stat().st_mtime for p in sorted(root.rglob("v*.md"))}


def same_times(a: dict[str, float], b: dict[str, float]) -> bool:
    return a.keys() == b.keys() and all(abs(a[k] - b[k]) < 1e-3 for k in a)


def fill(root: Path) -> None:
    """What a person makes through the mount."""
    pref = root / "user/default/preferences/editor"
    pref.mkdir()
    (pref / "L2.md").write_text("---\ntopic: editor\nvalue: vim\n---\nShe uses vim.\n")
    (pref / "L2.md").write_text(
        "---\ntopic: editor\nvalue: neovim\nreason: |\n  Lua plugins.\n  Faster.\n---\n"
        "She moved to **neovim** in 2024 — see [[Lua]].\n"
    )
    (pref / "L0.md").write_text("Editor: neovim (written by hand)\n")
    (pref / "L1.md").write_text("# Editor\n\n- neovim, since 2024\n- was vim\n")
    (pref / "scripts").mkdir()
    (pref / "scripts/setup.sh").write_text("#!/bin/sh\nnvim --headless +PlugInstall\n")
    os.chmod(pref / "scripts/setup.sh", 0o755)
    (pref / "scripts/deep").mkdir()
    (pref / "scripts/deep/keymap.lua").write_text("vim.g.mapleader = ' '\n")
    (pref / "photo.bin").write_bytes(bytes(range(256)) * 300)
    os.chmod(pref / "photo.bin", 0o600)
    os.symlink("scripts/setup.sh", pref / "setup")
    (root / "user/default/profile/L2.md").write_text("Name: Zoë Ngata. Lives in Wellington.\n")
    (root / "user/alice").mkdir()
    ev = root / "user/alice/events/2024-05-01-trip-to-lyon"
    ev.mkdir()
    (ev / "L2.md").write_text("Went to Lyon by train; rain all week.\n")
    # who may read what: a private trip, a folder of her people only she opens
    os.chmod(ev / "L2.md", 0o600)
    os.chmod(ev, 0o700)
    if os.geteuid() == 0:  # given to another user, as root may
        os.chown(ev, OTHER_UID, OTHER_UID)
    os.chmod(root / "user/alice/entities", 0o700)
    os.chmod(root / "user/alice", 0o750)
    (root / "user/alice/preferences/tea.md").write_text("Green tea, no sugar.\n")  # routed
    (root / "agent/coder").mkdir()
    skill = root / "agent/coder/skills/release"
    skill.mkdir()
    (skill / "L2.md").write_text("1. bump the version\n2. tag\n3. push\n")
    (root / "agent/empty").mkdir()  # an owner with nothing yet


def assert_private_trip(out: Path, mount: Path) -> None:
    """What `fill` made private shows so in the mount and in its export: the owner
    directory's and a type folder's modes on the exported folders, the node's owner,
    group and modes in its front matter and on its exported file and folder."""
    uid = OTHER_UID if os.geteuid() == 0 else os.getuid()
    trip = "user/alice/events/2024-05-01-trip-to-lyon"
    for root in (mount, out):
        assert oct((root / "user/alice").stat().st_mode & 0o777) == "0o750"
        assert oct((root / "user/alice/entities").stat().st_mode & 0o777) == "0o700"
    st = (mount / trip).stat()
    assert (oct(st.st_mode & 0o777), st.st_uid) == ("0o700", uid)
    assert oct((mount / trip / "L2.md").stat().st_mode & 0o777) == "0o600"
    text = (out / f"{trip}.md").read_text()
    access = yaml.safe_load(text[4:].partition("\n---\n")[0])["contextfs"]["facts"]["access"]
    assert access == {
        "uid": uid,
        "gid": uid if os.geteuid() == 0 else os.getgid(),
        "dir_mode": "0700",
        "file_mode": "0600",
    }
    st = (out / f"{trip}.md").stat()
    assert oct(st.st_mode & 0o777) == "0o600" and (st.st_uid == uid or os.geteuid() != 0)


@contextlib.contextmanager
def two_mounts(tmp_path: Path) -> Iterator[tuple[Mount, Mount]]:
    """Two empty mounts, `a` and `b`, with data dirs `data-a` and `data-b`."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = Mount(tmp_path / "a", tmp_path / "data-a")
    b = Mount(tmp_path / "b", tmp_path / "data-b")
    a.start()
    b.start()
    try:
        yield a, b
    finally:
        a.stop()
        b.stop()


def test_export_import_export_is_the_same_tree(tmp_path: Path) -> None:
    with two_mounts(tmp_path) as (a, b):
        fill(a.path)
        out1, out2 = tmp_path / "out1", tmp_path / "out2"
        r = cli("export", str(a.path), str(out1), "--history")
        assert r.returncode == 0, r.stderr
        assert "exported 5 node(s)" in r.stdout and "export [" in r.stderr
        # a folder any markdown tool opens: one file per node, attachments beside it
        editor = (out1 / "user/default/preferences/editor.md").read_text()
        assert editor.startswith("---\ntopic: editor\nvalue: neovim\n")
        fm = yaml.safe_load(editor[4:].partition("\n---\n")[0])
        assert fm["contextfs"]["type"] == "preference"
        assert fm["contextfs"]["l0"] == "Editor: neovim (written by hand)\n"
        assert fm["contextfs"]["facts"]["version"] == 2
        assert (out1 / "user/default/preferences/editor/scripts/deep/keymap.lua").exists()
        assert (out1 / "user/default/preferences/editor/.history/v1.md").read_text().count("vim")
        assert (out1 / "user/default/profile.md").exists()
        assert (out1 / "agent/empty").is_dir()
        assert_private_trip(out1, a.path)
        exported = snapshot(out1, strip_facts=False)
        # each version file carries the time its version was saved
        saved_a = version_times(a.path / "user")
        assert len(saved_a) == 5 and same_times(version_times(out1 / "user"), saved_a)
        assert len(set(saved_a.values())) == 5
        # reads and importance as a store that lived longer would have them
        text = editor.replace("importance: 0.5\n", "importance: 0.875\n", 1)
        text = text.replace("access_count: 0\n", "access_count: 7\n", 1)
        assert text.count("0.875") == 1 and text.count("access_count: 7") == 1
        (out1 / "user/default/preferences/editor.md").write_text(text)

        r = cli("import", str(out1), str(b.path), "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        report = json.loads(r.stdout)
        assert (report["created"], report["refused"], report["skipped"]) == (5, [], [])
        assert report["nodes_after"] == 5 and report["owners_created"] == 3
        # the hand-written tier is kept as written (pinned), not derived again
        assert (
            (b.path / "user/default/preferences/editor/L0.md")
            .read_text()
            .startswith("Editor: neovim (written by hand)")
        )
        r = cli("export", str(b.path), str(out2), "--history")
        assert r.returncode == 0, r.stderr
        assert_private_trip(out2, b.path)
        first, second = snapshot(out1, strip_facts=False), snapshot(out2, strip_facts=False)
        assert first.keys() == second.keys()
        assert [k for k in first if first[k] != second[k]] == []
        assert b"    version: 2\n" in first["user/default/preferences/editor.md"][2]  # replayed
        assert same_times(version_times(b.path / "user"), saved_a)  # restored, not "now"
        assert same_times(version_times(out2 / "user"), saved_a)
        meta = yaml.safe_load((b.path / "user/default/preferences/editor/meta.yaml").read_text())
        facts = yaml.safe_load(text[4:].partition("\n---\n")[0])["contextfs"]["facts"]
        assert (meta["id"], meta["importance"], meta["access_count"]) == (facts["id"], 0.875, 7)
        assert meta["created"] == yaml.safe_load(f"t: {facts['created']}")["t"]
    # the data dir, unmounted: the same export, facts and all
    out3 = tmp_path / "out3"
    r = cli("export", str(tmp_path / "data-a"), str(out3), "--history")
    assert r.returncode == 0, r.stderr
    assert snapshot(out3, strip_facts=False) == exported
    assert a.fsck() == [] and b.fsck() == []


def test_restore_file_takes_exported_nodes_and_refuses_anything_else(mount: Mount) -> None:
    """`.restore` at the root: write-only for the mount's user (0200), not a memory; one
    exported node per close, made with its facts; what is not one is refused with an
    errno and a reason in `.status`, and nothing is made."""
    ctl = mount.path / ".restore"
    st = ctl.stat()
    assert (oct(st.st_mode & 0o777), st.st_uid, st.st_size) == ("0o200", os.getuid(), 0)
    doc = {
        "node": "user/default/preferences/tea",
        "versions": [
            {
                "text": "---\ntopic: tea\nvalue: sencha\n---\nSencha.\n",
                "at": "2024-01-02T03:04:05Z",
            },
            "---\ntopic: tea\nvalue: genmaicha\n---\nGenmaicha now.\n",  # saved now
        ],
        "pins": {"L0": "Tea: genmaicha (by hand)\n"},
        "facts": {
            "id": 4242,
            "created": "2024-01-02T03:04:05+00:00",
            "updated": "2024-05-06T07:08:09+00:00",
            "sources": ["chat.jsonl#t3"],
            "tags": ["drinks"],
            "importance": 0.75,
            "access_count": 3,
        },
    }
    ctl.write_text(json.dumps(doc))
    node = mount.path / "user/default/preferences/tea"
    assert sorted(os.listdir(node.parent)) == ["tea"]
    assert "Genmaicha now." in (node / "L2.md").read_text()
    assert (node / "L0.md").read_text().startswith("Tea: genmaicha (by hand)")
    assert sorted(os.listdir(node / ".history")) == ["v1.md", "v2.md"]
    assert (node / ".history/v1.md").stat().st_mtime == 1704164645.0  # 2024-01-02T03:04:05Z
    assert abs((node / ".history/v2.md").stat().st_mtime - time.time()) < 60
    meta = yaml.safe_load((node / "meta.yaml").read_text())
    assert (meta["id"], meta["version"], meta["importance"], meta["access_count"]) == (
        4242,
        2,
        0.75,
        3,
    )
    assert meta["sources"] == ["chat.jsonl#t3"] and meta["tags"] == ["drinks"]
    assert yaml.safe_load(f"t: {meta['created']}")["t"].year == 2024
    assert ctl.stat().st_size == 0 and (node / "meta.yaml").exists()

    def refused(text: str) -> tuple[str, str]:
        with pytest.raises(OSError) as info:
            ctl.write_text(text)
        status = (mount.path / ".status").read_text()
        return errno.errorcode[info.value.errno or 0], status

    code, status = refused("not json")
    assert code == "EINVAL" and "EINVAL .restore: .restore takes one JSON document" in status
    assert refused(json.dumps(doc))[0] == "EEXIST"  # made already
    assert refused(json.dumps(doc | {"node": "user/nobody/preferences/tea"}))[0] == "ENOENT"
    late = doc | {
        "node": "user/default/preferences/coffee",
        "versions": [{"text": "x", "at": "soon"}],
    }
    code, status = refused(json.dumps(late))
    assert code == "EINVAL" and "\"at\" of a version is a time, not 'soon'" in status
    code, status = refused(json.dumps(doc | {"node": "user/default/nowhere/x"}))
    assert code == "EINVAL" and "no context type keeps its nodes in nowhere/" in status
    bad = doc | {"node": "user/default/preferences/Bad_Name", "facts": {"id": 4343}}
    assert refused(json.dumps(bad))[0] == "EINVAL"  # the type's own check of a name
    odd = doc | {"node": "user/default/preferences/odd", "facts": {"access": {"uid": 1}}}
    code, status = refused(json.dumps(odd))
    assert code == "EINVAL" and "access is {uid, gid, dir_mode, file_mode}" in status
    assert sorted(os.listdir(node.parent)) == ["tea"]  # nothing half made (fsck: the fixture)
    # a private node: its owner, group and modes as chmod would give them
    private = doc | {
        "node": "user/default/preferences/diary",
        "facts": {
            "access": {
                "uid": os.getuid(),
                "gid": os.getgid(),
                "dir_mode": "0700",
                "file_mode": "0600",
            }
        },
    }
    ctl.write_text(json.dumps(private))
    diary = mount.path / "user/default/preferences/diary"
    assert oct(diary.stat().st_mode & 0o777) == "0o700"
    assert oct((diary / "L2.md").stat().st_mode & 0o777) == "0o600"
    assert oct((diary / "meta.yaml").stat().st_mode & 0o777) == "0o400"


def test_restore_into_a_data_dir_is_lossless_facts_and_all(tmp_path: Path) -> None:
    """Imported into a data dir that is not mounted, an export is restored with the
    facts a mount import cannot set (ids, times, provenance, importance, reads): the
    export of the restored store is the first export byte for byte; it mounts and
    passes fsck; and secrets are still redacted on the way in."""
    (tmp_path / "a").mkdir()
    a = Mount(tmp_path / "a", tmp_path / "data-a")
    a.start()
    try:
        fill(a.path)
        out1 = tmp_path / "out1"
        assert cli("export", str(a.path), str(out1), "--history").returncode == 0
    finally:
        a.stop()
    # reads and importance as a store that lived longer would have them (search is off
    # here, and reads of `.query` answers are what count)
    editor = out1 / "user/default/preferences/editor.md"
    text = editor.read_text()
    assert "    importance: 0.5\n    access_count: 0\n" in text
    editor.write_text(
        text.replace("importance: 0.5\n", "importance: 0.875\n").replace(
            "access_count: 0\n", "access_count: 7\n"
        )
    )
    facts = yaml.safe_load(editor.read_text()[4:].partition("\n---\n")[0])["contextfs"]["facts"]
    assert facts["sources"] == [] and facts["access_count"] == 7
    tea = (out1 / "user/alice/preferences/tea.md").read_text()
    assert "sources:\n    - tea.md\n" in tea  # provenance of the routed write

    data_b = tmp_path / "data-b"  # new: made by the import
    r = cli("import", str(out1), str(data_b), "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(r.stdout)
    assert (report["created"], report["refused"], report["skipped"]) == (5, [], [])
    assert report["nodes_after"] == 5 and report["dest"] == str(data_b)
    out2 = tmp_path / "out2"
    r = cli("export", str(data_b), str(out2), "--history")
    assert r.returncode == 0, r.stderr
    first, second = snapshot(out1, strip_facts=False), snapshot(out2, strip_facts=False)
    assert first.keys() == second.keys()
    assert [k for k in first if first[k] != second[k]] == []

    (tmp_path / "b").mkdir()
    b = Mount(tmp_path / "b", data_b)
    b.start()
    try:
        assert_private_trip(out2, b.path)  # restored offline, exported offline: the same
        meta = yaml.safe_load((b.path / "user/default/preferences/editor/meta.yaml").read_text())
        assert meta["id"] == facts["id"] and meta["version"] == 2
        assert (meta["importance"], meta["access_count"]) == (0.875, 7)
        assert meta["created"] == yaml.safe_load(f"t: {facts['created']}")["t"]
        assert (b.path / "user/default/preferences/editor/scripts/deep/keymap.lua").exists()
        new = b.path / "user/default/preferences/pager"
        new.mkdir()  # the restored store goes on handing out ids: no clash
        (new / "L2.md").write_text("---\ntopic: pager\nvalue: less\n---\nless -R\n")
        ids = {
            yaml.safe_load((d / "meta.yaml").read_text())["id"]
            for d in (b.path / "user/default/preferences").iterdir()
        }
        assert len(ids) == 2
    finally:
        b.stop()
    assert b.fsck() == []

    # into a store that has nodes: facts restored, a wanted id that was handed out is not
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "deploy.md").write_text(f"Deploy notes.\nexport GITHUB_TOKEN={GITHUB}\n")
    r = cli("import", str(vault), str(data_b), "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["redactions"] >= 1
    out3 = tmp_path / "out3"
    assert cli("export", str(data_b), str(out3)).returncode == 0
    deploy = (out3 / "user/default/entities/deploy.md").read_text()
    assert GITHUB not in deploy and "[REDACTED:" in deploy
    refused = cli("import", str(out1), str(tmp_path / "out3"))  # neither mount nor data dir
    assert refused.returncode == 2 and "neither inside a live ContextFS mount" in refused.stderr


def test_export_of_a_mounted_data_dir_reads_through_its_mount(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    m = Mount(tmp_path / "m", tmp_path / "data")
    m.start()
    try:
        fill(m.path)
        r = cli("export", str(tmp_path / "data"), str(tmp_path / "out"))
        assert r.returncode == 0, r.stderr
        assert (tmp_path / "out/user/alice/events/2024-05-01-trip-to-lyon.md").exists()
        assert not (tmp_path / "out/user/default/preferences/editor/.history").exists()
        refused = cli("export", str(m.path), str(tmp_path / "out"))  # not empty: refused
        assert refused.returncode == 2 and "not an empty directory" in refused.stderr
    finally:
        m.stop()


def make_vault(root: Path, n: int) -> None:
    """An Obsidian vault with Basic Memory notes in it: nested folders, front matter with
    tags and aliases, wikilinks, inline #tags, an image, the app's own folder."""
    (root / ".obsidian").mkdir(parents=True)
    (root / ".obsidian/app.json").write_text("{}")
    for i in range(n):
        folder = root / ("people" if i % 3 == 0 else f"projects/area-{i % 4}")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"Note {i:03d}.md").write_text(
            f"---\ntags: [vault, n{i}]\naliases: [N{i}]\n---\n"
            f"# Note {i}\n\nLinks to [[Note {(i + 1) % n:03d}]] and #topic{i % 5}.\n"
        )
    (root / "basic").mkdir()
    (root / "basic/coffee.md").write_text(
        "---\ntitle: Coffee Habits\ntype: note\npermalink: coffee-habits\n---\n"
        "- [preference] Drinks flat whites #coffee\n- relates_to [[Morning Routine]]\n"
    )
    (root / "basic/editor.md").write_text(
        "---\ntype: preference\nvalue: helix\n---\nTrying helix this month.\n"
    )
    (root / "secrets.md").write_text(f"Deploy notes.\nexport GITHUB_TOKEN={GITHUB}\n")
    (root / "bad-field.md").write_text("---\naliases: {a: 1}\n---\nA map where a list goes.\n")
    (root / "bad-yaml.md").write_text("---\ntags: [unclosed\n---\nBroken front matter.\n")
    (root / "latin1.md").write_bytes("Caf\xe9 notes.\n".encode("latin-1"))
    (root / "diagram.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 64)


def test_import_a_vault_routes_redacts_and_reports(tmp_path: Path, mount: Mount) -> None:
    vault = tmp_path / "vault"
    make_vault(vault, 300)
    r = cli("import", str(vault), str(mount.path), "--json")
    assert r.returncode == 1, r.stdout + r.stderr  # some notes were refused
    assert "import [" in r.stderr and "/305 files" in r.stderr  # progress on a terminal
    report = json.loads(r.stdout)
    assert report["notes"] == 306 and report["routed"] == 303
    refused = {x["file"]: x for x in report["refused"]}
    assert refused.keys() == {"bad-field.md", "bad-yaml.md", "latin1.md"}
    assert "UTF-8" in refused["latin1.md"]["reason"]
    assert refused["bad-field.md"]["errno"] == "EINVAL"
    assert "aliases" in refused["bad-field.md"]["reason"]  # the mount's reason, not a guess
    assert "front matter" in refused["bad-yaml.md"]["reason"]
    assert report["skipped"] == [{"file": "diagram.png", "why": "not markdown"}]
    assert report["redactions"] >= 1 and report["nodes_after"] == 303

    ents = mount.path / "user/default/entities"
    note = (ents / "note-007/L2.md").read_text()
    assert "[[Note 008]]" in note and "#topic2" in note  # links and inline tags as written
    assert note.startswith("---\nname: Note 007\naliases:\n- N7\n---\n# Note 7\n")
    meta = yaml.safe_load((ents / "note-007/meta.yaml").read_text())
    assert meta["tags"] == ["vault", "n7"]  # the note's tags are the node's
    coffee = (ents / "coffee-habits/L2.md").read_text()  # Basic Memory: title names it
    assert "name: Coffee Habits" in coffee and "permalink: coffee-habits" in coffee
    assert "helix" in (mount.path / "user/default/preferences/editor/L2.md").read_text()
    secret = (ents / "secrets/L2.md").read_text()
    assert GITHUB not in secret and "[REDACTED:" in secret


def test_export_reports_a_path_too_long_and_keeps_the_rest_of_its_node(
    tmp_path: Path, mount: Mount
) -> None:
    """An attachment deeper than the system's longest path cannot be read by its path:
    the export names it as not exported and writes the node and its other files."""
    node = mount.path / "user/default/entities/deep"
    node.mkdir()
    (node / "L2.md").write_text("A node with a very deep folder.\n")
    (node / "ok.txt").write_text("beside the deep folder\n")
    fd = os.open(node, os.O_RDONLY)
    try:
        for _ in range(22):  # 22 x 201 bytes: past PATH_MAX (4096)
            os.mkdir("d" * 200, dir_fd=fd)
            inner = os.open("d" * 200, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
        leaf = os.open("leaf.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(leaf, b"at the bottom\n")
        os.close(leaf)
    finally:
        os.close(fd)
    out = tmp_path / "out"
    r = cli("export", str(mount.path), str(out))
    assert r.returncode == 1, r.stdout + r.stderr  # something was not exported
    assert "not exported user/default/entities/deep/" in r.stdout + r.stderr
    assert "File name too long" in r.stdout + r.stderr
    assert (out / "user/default/entities/deep.md").read_text().count("A node with a very deep")
    assert (out / "user/default/entities/deep/ok.txt").read_text() == "beside the deep folder\n"


def test_import_follows_no_symbolic_link(tmp_path: Path, mount: Mount) -> None:
    """A note that is a link to a file outside the vault (or anywhere) is not read: its
    target could be another user's secret, which would become a memory others can read."""
    outside = tmp_path / "outside.md"
    outside.write_text("root:$6$saltsalt$hashhashhash:19000:0:99999:7:::\n")
    vault = tmp_path / "vault"
    (vault / "people").mkdir(parents=True)
    (vault / "people/ana.md").write_text("Ana teaches chemistry.\n")
    (vault / "people/shadow.md").symlink_to(outside)
    (vault / "people/inside.md").symlink_to(vault / "people/ana.md")
    r = cli("import", str(vault), str(mount.path), "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(r.stdout)
    assert report["routed"] == 1
    assert sorted(x["file"] for x in report["skipped"]) == [
        "people/inside.md",
        "people/shadow.md",
    ]
    assert all(x["why"] == "a symbolic link (not followed)" for x in report["skipped"])
    found = subprocess.run(
        ["grep", "-r", "saltsalt", str(mount.path / "user")], capture_output=True, text=True
    )
    assert found.returncode == 1 and found.stdout == ""  # nowhere in the memory


def test_import_into_an_owner_rehomes_an_export(tmp_path: Path, mount: Mount) -> None:
    """An export imported into another owner directory lands there; a node of the same
    name already there is merged by its type's strategy, its attachments added beside."""
    root = mount.path
    fill(root)
    out = tmp_path / "out"
    assert cli("export", str(root), str(out)).returncode == 0
    (root / "user/bob").mkdir()
    bob_pref = root / "user/bob/preferences/editor"
    bob_pref.mkdir()
    (bob_pref / "L2.md").write_text("---\ntopic: editor\nvalue: emacs\n---\nBob uses emacs.\n")
    shutil.rmtree(out / "agent")  # an agent's nodes cannot live under a user
    prefs = out / "user/default/preferences"
    shutil.copy(prefs / "editor.md", prefs / "Bad Name.md")  # renamed by hand: no slug
    r = cli("import", str(out / "user/default"), str(root / "user/bob"), "--json")
    assert r.returncode == 1, r.stdout + r.stderr
    report = json.loads(r.stdout)
    assert report["routed"] == 1 and report["created"] == 1  # editor merged; profile made
    [bad] = report["refused"]
    assert bad["file"] == "preferences/Bad Name.md" and bad["errno"] == "EINVAL"
    assert "does not fit the preference template" in bad["reason"]
    merged = (bob_pref / "L2.md").read_text()
    assert "value: neovim" in merged  # merge: the field's op (replace) decided
    assert (bob_pref / "scripts/deep/keymap.lua").read_text() == "vim.g.mapleader = ' '\n"
    assert (root / "user/bob/profile/L2.md").read_text().startswith("Name: Zoë Ngata")


VAULTS = Path(__file__).resolve().parents[1] / "corpus" / "vaults"


def test_import_a_vault_keeps_its_shape(mount: Mount) -> None:
    """Folders say what a plain note is (People/ → entity, Journal/ and Meetings/ →
    event, `--map Recipes=preference`), a daily note's name and a `created:` property
    date the event (not the day of the import), and a note's own `type:` still wins. The
    files a note embeds or links to (a picture found by name in another folder, a file
    linked the markdown way) are its node's attachments, byte for byte; a file no note
    mentions is listed as skipped."""
    r = cli(
        "import", str(VAULTS / "obsidian"), str(mount.path), "--map", "Recipes=preference", "--json"
    )
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(r.stdout)
    assert report["attachments"] == 2
    assert report["skipped"] == [
        {"file": "Projects/attachments/old-sketch.png", "why": "not markdown"}
    ]
    r = cli("import", str(VAULTS / "logseq"), str(mount.path))
    assert r.returncode == 0, r.stdout + r.stderr
    home = mount.path / "user/default"
    assert sorted(os.listdir(home / "entities")) == [
        "ana-souza",
        "harbor-migration",
        "ola",
        "readme",
    ]
    assert sorted(os.listdir(home / "events")) == [
        "2024-01-09-standup-moved",  # type: event, created: 2024-01-09, in Notes/
        "2024-02-14-kickoff-with-ana",  # Meetings/, created: 2024-02-14T09:30
        "2024-03-02-journal",  # Obsidian's Journal/2024-03-02.md
        "2024-03-05-journal",  # Logseq's journals/2024_03_05.md
    ]
    assert os.listdir(home / "preferences") == ["genmaicha"]
    kickoff = (home / "events/2024-02-14-kickoff-with-ana/L2.md").read_text()
    assert kickoff.startswith("---\ndate: '2024-02-14'\ntitle: Kickoff with Ana\n---\n")
    assert "[[Ana Souza]]" in kickoff and "created:" in kickoff  # nothing dropped
    day = (home / "events/2024-03-05-journal/L2.md").read_text()
    assert "Harbor cutover part two" in day
    ana = home / "entities/ana-souza"
    assert yaml.safe_load((ana / "meta.yaml").read_text())["tags"] == ["person", "harbor"]
    picture = VAULTS / "obsidian/Projects/attachments/harbor-diagram.png"
    harbor = home / "entities/harbor-migration"
    assert (harbor / "harbor-diagram.png").read_bytes() == picture.read_bytes()
    assert "![[harbor-diagram.png]]" in (harbor / "L2.md").read_text()
    assert (ana / "ana-cv.txt").read_bytes() == (VAULTS / "obsidian/People/ana-cv.txt").read_bytes()
    assert "tags" not in (ana / "L2.md").read_text()  # the node's tags, not text
    bad = cli("import", str(VAULTS / "obsidian"), str(mount.path), "--map", "Recipes=recipe")
    assert bad.returncode == 2 and "unknown context type 'recipe'" in bad.stderr


def test_import_a_basic_memory_project_keeps_its_shape(mount: Mount) -> None:
    """Basic Memory's notes are named by their `title:` and all say `type: note`, which
    names no type: the folder decides (`people/` an entity, `meetings/` an event dated by
    its `created:`, `coffee/` none, so an entity), the `#` tags are the node's tags, and
    what the type does not declare (`permalink`) stays as text, with the observations and
    relations as written."""
    r = cli("import", str(VAULTS / "basic-memory"), str(mount.path), "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["routed"] == 4
    home = mount.path / "user/default"
    assert sorted(os.listdir(home / "entities")) == [
        "coffee-bean-origins",
        "coffee-brewing-methods",
        "maya-lindqvist",
    ]
    assert os.listdir(home / "events") == ["2024-04-18-roastery-visit"]
    maya = home / "entities/maya-lindqvist"
    assert yaml.safe_load((maya / "meta.yaml").read_text())["tags"] == ["person", "coffee"]
    text = (maya / "L2.md").read_text()
    assert text.startswith("---\nname: Maya Lindqvist\n---\n# Maya Lindqvist\n")
    assert "- [role] Runs the roastery on Södermalm #work" in text
    assert "- met_at [[Roastery visit]]" in text
    assert "permalink: people/maya-lindqvist" in text and "type: note" in text
    visit = (home / "events/2024-04-18-roastery-visit/L2.md").read_text()
    assert visit.startswith("---\ndate: '2024-04-18'\ntitle: Roastery visit\n---\n")
    assert "created: '2024-04-18T10:00:00'" in visit and "!!timestamp" not in visit


def test_tags_in_a_dropped_file_are_the_nodes_tags(mount: Mount) -> None:
    """`tags:` in the front matter of a file written into a type directory become the
    node's tags in meta.yaml (each once, a leading # dropped), added to by later drops;
    tags that are not words are refused with EINVAL and the node is left as it was."""
    prefs = mount.path / "user/default/preferences"
    (prefs / "tea.md").write_text("---\ntags: [drink, '#daily']\n---\nGenmaicha after lunch.\n")
    meta = prefs / "tea/meta.yaml"
    assert yaml.safe_load(meta.read_text())["tags"] == ["drink", "daily"]
    (prefs / "tea.md").write_text("---\ntags: morning, drink\n---\nSencha in the morning.\n")
    assert yaml.safe_load(meta.read_text())["tags"] == ["drink", "daily", "morning"]
    with pytest.raises(OSError) as err:
        (prefs / "tea.md").write_text("---\ntags: {a: 1}\n---\nOolong.\n")
    assert err.value.errno == errno.EINVAL
    assert "Oolong" not in (prefs / "tea/L2.md").read_text()
    assert yaml.safe_load(meta.read_text())["tags"] == ["drink", "daily", "morning"]


def test_an_exported_vault_links_resolve_and_come_back_as_written(tmp_path: Path) -> None:
    """Exported, a note's `[[Ana Souza]]` is `[[ana-souza|Ana Souza]]`: the file is
    `ana-souza.md`, so every wikilink to a node resolves when the export is opened as an
    Obsidian vault (a link to an event, named by its day and title, too: `[[Roastery
    visit]]` is `[[2024-04-18-roastery-visit|Roastery visit]]`); imported again it is
    `[[Ana Souza]]` as the person wrote it, and the second export is the first, byte for
    byte but the store's own facts."""
    with two_mounts(tmp_path) as (a, b):
        for vault in ("obsidian", "logseq", "basic-memory"):
            assert cli("import", str(VAULTS / vault), str(a.path)).returncode == 0
        out1, out2 = tmp_path / "out1", tmp_path / "out2"
        assert cli("export", str(a.path), str(out1)).returncode == 0
        files = {p.stem for p in out1.rglob("*.md")}
        links = [
            (p.name, target)
            for p in out1.rglob("*.md")
            for target in re.findall(r"(?<!!)\[\[([^\]|#]+)", p.read_text())
        ]
        assert ("ana-souza.md", "harbor-migration") in links
        assert ("harbor-migration.md", "ana-souza") in links
        assert ("maya-lindqvist.md", "2024-04-18-roastery-visit") in links
        assert [(f, t) for f, t in links if t not in files] == []  # every link resolves
        # an embed names its file, which Obsidian finds anywhere in the vault: the
        # picture is exported with its node
        embeds = {
            e for p in out1.rglob("*.md") for e in re.findall(r"!\[\[([^\]|]+)", p.read_text())
        }
        assert embeds == {"harbor-diagram.png"}
        assert [p.name for p in out1.rglob("harbor-diagram.png")] == ["harbor-diagram.png"]
        # a markdown link to a node's own file points into the folder beside the node's
        # file, where the export writes it: it resolves, relative to the note
        md_links = [
            (p, target)
            for p in out1.rglob("*.md")
            for target in re.findall(r"\]\(([^)\s]+)\)", p.read_text())
        ]
        assert [t for _p, t in md_links] == ["ana-souza/ana-cv.txt"]
        assert all((p.parent / t).is_file() for p, t in md_links)
        assert cli("import", str(out1), str(b.path)).returncode == 0
        stored = (b.path / "user/default/entities/harbor-migration/L2.md").read_text()
        assert "Owner: [[Ana Souza]]." in stored  # as written, not as exported
        ana = (b.path / "user/default/entities/ana-souza/L2.md").read_text()
        assert "Her CV: [Ana's CV](ana-cv.txt)." in ana  # as written, not as exported
        maya = (b.path / "user/default/entities/maya-lindqvist/L2.md").read_text()
        assert "- met_at [[Roastery visit]]" in maya
        picture = b.path / "user/default/entities/harbor-migration/harbor-diagram.png"
        assert (
            picture.read_bytes()
            == (VAULTS / "obsidian/Projects/attachments/harbor-diagram.png").read_bytes()
        )
        assert cli("export", str(b.path), str(out2)).returncode == 0
        first, second = snapshot(out1, strip_facts=False), snapshot(out2, strip_facts=False)
        assert first == second


def test_an_export_into_the_mount_it_reads_is_refused(mount: Mount) -> None:
    """`contextfs export MNT MNT/...`: the tree it writes would be read again as it is
    written (its copy held copies of itself); refused, nothing written."""
    node = mount.path / "user/default/entities/zz"
    node.mkdir()
    (node / "L2.md").write_text("Zz is a test node.\n")
    r = cli("export", str(mount.path), str(node / "exp"))
    assert r.returncode == 2 and "inside the mount" in r.stderr, r.stderr
    assert sorted(os.listdir(node)) == [".history", "L0.md", "L1.md", "L2.md", "meta.yaml"]


def test_facts_no_file_can_have_are_refused_or_left_and_the_directory_stays_listable(
    mount: Mount,
) -> None:
    """A hand-edited export: an owner id the kernel cannot take (uid -5, 99999999999) is
    refused with EINVAL, a time out of a file's range (1e20, -1) or an importance out of
    0..1 (NaN, 5) leaves the node's own, setuid bits on the tiers are dropped; the type
    directory stays listable (it answered EIO on every `ls` after such an import)."""
    ctl = mount.path / ".restore"
    prefs = mount.path / "user/default/preferences"

    def doc(name: str, **facts: object) -> str:
        return json.dumps(
            {"node": f"user/default/preferences/{name}", "versions": ["Tea.\n"], "facts": facts}
        )

    for uid in (-5, 99999999999):
        access = {"uid": uid, "gid": 0, "dir_mode": "0755", "file_mode": "0644"}
        with pytest.raises(OSError) as info:
            ctl.write_text(doc(f"u{uid}".replace("-", "m"), access=access))
        assert info.value.errno == errno.EINVAL
    with pytest.raises(OSError) as info:
        ctl.write_text(
            json.dumps(
                {"node": "user/default/preferences/late", "versions": [{"text": "x", "at": 1e20}]}
            )  # fmt: skip
        )
    assert info.value.errno == errno.EINVAL
    ctl.write_text(doc("odd", updated=1e20, created=-1, importance=float("nan")))
    ctl.write_text(doc("five", importance=5))
    suid = {"uid": os.getuid(), "gid": os.getgid(), "dir_mode": "0755", "file_mode": "06777"}
    ctl.write_text(doc("suid", access=suid))
    assert sorted(os.listdir(prefs)) == ["five", "odd", "suid"]
    for name in ("odd", "five"):
        meta = yaml.safe_load((prefs / name / "meta.yaml").read_text())
        assert meta["importance"] == 0.5, meta
        assert abs(os.stat(prefs / name / "L2.md").st_mtime - time.time()) < 120
    assert oct((prefs / "suid/L2.md").stat().st_mode & 0o7777) == "0o777"


def test_an_export_drops_setuid_and_keeps_a_private_node_private(
    tmp_path: Path, mount: Mount
) -> None:
    """An attachment's setuid/setgid bits are not exported (the file is the exporter's
    now: as root, another user's setuid program became a setuid-root one); a node made
    private with `chmod 700` is exported with its `<name>.md` beside the folder private
    too (it was -rw-r--r--)."""
    node = mount.path / "user/default/entities/tool"
    node.mkdir()
    (node / "L2.md").write_text("A tool.\n")
    prog = node / "prog"
    shutil.copy("/bin/true", prog)
    os.chmod(prog, 0o4755)
    assert prog.stat().st_mode & 0o4000
    diary = mount.path / "user/default/entities/diary"
    diary.mkdir()
    (diary / "L2.md").write_text("Private.\n")
    os.chmod(diary, 0o700)
    out = tmp_path / "out"
    r = cli("export", str(mount.path), str(out))
    assert r.returncode == 0, r.stderr
    assert oct((out / "user/default/entities/tool/prog").stat().st_mode & 0o7777) == "0o755"
    assert (out / "user/default/entities/diary.md").stat().st_mode & 0o077 == 0


def test_a_node_never_written_is_exported_with_its_attachments(tmp_path: Path) -> None:
    """A node made by `mkdir` and never written (no L2 version, so no meta.yaml shown)
    that holds only attachments is exported as an empty `<name>.md` with its folder, made
    again by an import, and export -> import -> export is the same tree; the unmounted
    data dir exports it the same way."""
    with two_mounts(tmp_path) as (a, b):
        bare = a.path / "user/default/entities/bare"
        bare.mkdir()
        (bare / "docs").mkdir()
        (bare / "docs/notes.txt").write_text("kept beside no text\n")
        (a.path / "user/default/preferences/empty").mkdir()  # nothing at all
        # private ones: no file shows the mode of their files, the folder's says it
        os.mkdir(a.path / "user/default/entities/kept", 0o700)
        (a.path / "user/default/entities/kept/k.txt").write_text("private\n")
        (a.path / "user/default/entities/shut").mkdir()
        os.chmod(a.path / "user/default/entities/shut", 0o700)
        # a singleton never written, holding a picture: its folder shows no meta.yaml
        (a.path / "user/default/profile/avatar.png").write_bytes(b"\x89PNG\r\n\x1a\n" * 8)
        out1, out2 = tmp_path / "out1", tmp_path / "out2"
        r = cli("export", str(a.path), str(out1), "--history")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "exported 5 node(s)" in r.stdout and "4 attachment(s)" in r.stdout
        assert (out1 / "user/default/profile/avatar.png").exists()
        assert (out1 / "user/default/profile.md").exists()
        for name in ("kept", "shut"):
            text = (out1 / f"user/default/entities/{name}.md").read_text()
            assert "dir_mode: '0700'\n      file_mode: '0600'" in text, text
        assert (out1 / "user/default/entities/bare/docs/notes.txt").read_text() == (
            "kept beside no text\n"
        )
        fm = yaml.safe_load((out1 / "user/default/entities/bare.md").read_text().split("---")[1])
        assert fm == {
            "contextfs": {"type": "entity", "front_matter": False, "facts": {"version": 0}}
        }
        assert (out1 / "user/default/preferences/empty.md").exists()
        r = cli("import", str(out1), str(b.path), "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        report = json.loads(r.stdout)
        assert (report["created"], report["attachments"], report["refused"]) == (5, 4, [])
        assert sorted(os.listdir(b.path / "user/default/profile")) == ["avatar.png"]
        assert (b.path / "user/default/entities/bare/docs/notes.txt").exists()
        assert not (b.path / "user/default/entities/bare/L2.md").exists()  # still unwritten
        r = cli("export", str(b.path), str(out2), "--history")
        assert r.returncode == 0, r.stdout + r.stderr
        first, second = snapshot(out1, strip_facts=False), snapshot(out2, strip_facts=False)
        assert [k for k in first.keys() | second.keys() if first.get(k) != second.get(k)] == []
        # imported again: the node is there, its attachment too; nothing refused
        r = cli("import", str(out1), str(b.path), "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        assert json.loads(r.stdout)["refused"] == []
    out3 = tmp_path / "out3"
    r = cli("export", str(tmp_path / "data-a"), str(out3), "--history")
    assert r.returncode == 0, r.stderr
    assert snapshot(out3, strip_facts=False) == first
    assert a.fsck() == [] and b.fsck() == []


def test_nodes_get_their_ids_back_beside_nodes_that_ask_for_none(tmp_path: Path) -> None:
    """A node imported without an id (a node exported never written, a plain note in the
    tree) takes the lowest free id; made before a node that asks for that id back, it took
    it, and the other node came back under a new id. Every exported node keeps its id,
    into a mount and into a data dir."""
    with two_mounts(tmp_path) as (a, b):
        (a.path / "user/default/preferences/tea.md").write_text("Green tea, no sugar.\n")
        bare = a.path / "user/default/entities/bare"  # sorted before preferences/
        bare.mkdir()
        (bare / "a.txt").write_text("A\n")
        out1 = tmp_path / "out1"
        r = cli("export", str(a.path), str(out1))
        assert r.returncode == 0, r.stdout + r.stderr
        (out1 / "user/default/entities/aaa-note.md").write_text("A plain note.\n")  # no id

        def ids(out: Path) -> dict[str, int]:
            found = {}
            for f in sorted(out.rglob("*.md")):
                m = re.search(r"^    id: (\d+)$", f.read_text(), re.M)
                if m:
                    found[str(f.relative_to(out))] = int(m.group(1))
            return found

        tea = "user/default/preferences/tea.md"
        exported = ids(out1)
        assert list(exported) == [tea]
        r = cli("import", str(out1), str(b.path), "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        assert json.loads(r.stdout)["refused"] == []
        out2 = tmp_path / "out2"
        assert cli("export", str(b.path), str(out2)).returncode == 0
        assert ids(out2)[tea] == exported[tea]
    r = cli("import", str(out1), str(tmp_path / "data-c"), "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    out3 = tmp_path / "out3"
    assert cli("export", str(tmp_path / "data-c"), str(out3)).returncode == 0
    assert ids(out3)[tea] == exported[tea]


def test_line_endings_survive_the_round_trip(tmp_path: Path) -> None:
    """Text saved with `\\r\\n` (a Windows editor) or a lone `\\r` is exported and made
    again byte for byte, its history and a hand-written L0 too: reading the mount's files
    as text made every `\\r\\n` a `\\n`, and the node came back with other text."""
    texts = {
        "crlf": b"Line one\r\nLine two\r\n",
        "crlf-fm": b"---\r\nname: crlf-fm\r\n---\r\nBody\r\n",
        "lone-cr": b"a\rb\r",
    }
    with two_mounts(tmp_path) as (a, b):
        ents = a.path / "user/default/entities"
        for name, data in texts.items():
            (ents / name).mkdir()
            (ents / name / "L2.md").write_bytes(data)
        (ents / "crlf/L0.md").write_bytes(b"Two lines, by hand\r\n")
        out1, out2 = tmp_path / "out1", tmp_path / "out2"
        r = cli("export", str(a.path), str(out1), "--history")
        assert r.returncode == 0, r.stdout + r.stderr
        assert (out1 / "user/default/entities/crlf/.history/v1.md").read_bytes() == texts["crlf"]
        assert (out1 / "user/default/entities/crlf.md").read_bytes().endswith(texts["crlf"])
        r = cli("import", str(out1), str(b.path), "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        for name, data in texts.items():
            assert (b.path / "user/default/entities" / name / "L2.md").read_bytes() == data
        got = (b.path / "user/default/entities/crlf/L0.md").read_bytes()
        assert got == b"Two lines, by hand\r\n"
        assert cli("export", str(b.path), str(out2), "--history").returncode == 0
        first, second = snapshot(out1, strip_facts=False), snapshot(out2, strip_facts=False)
        assert [k for k in first.keys() | second.keys() if first.get(k) != second.get(k)] == []
    out3 = tmp_path / "out3"
    assert cli("export", str(tmp_path / "data-a"), str(out3), "--history").returncode == 0
    assert snapshot(out3, strip_facts=False) == first  # the store's text: the mount's


def test_attachment_folder_and_link_times_survive_the_round_trip(tmp_path: Path) -> None:
    """The mount keeps the mtime of an attachment folder and of a symlink (`touch -h`);
    the export gives them to what it writes and an import back to the node, into a mount
    and into a data dir (they were the time of the export, then of the import)."""
    old_dir, old_link = 1009843200.0, 978307200.0  # 2002-01-01, 2001-01-01
    with two_mounts(tmp_path) as (a, b):
        node = a.path / "user/default/entities/kit"
        node.mkdir()
        (node / "L2.md").write_text("A kit.\n")
        (node / "parts/inner").mkdir(parents=True)
        (node / "parts/inner/bolt.txt").write_text("M6\n")
        os.symlink("parts/inner/bolt.txt", node / "bolt")
        os.utime(node / "parts", (old_dir, old_dir))
        os.utime(node / "parts/inner", (old_dir + 1, old_dir + 1))
        os.utime(node / "bolt", (old_link, old_link), follow_symlinks=False)

        def times(root: Path) -> dict[str, float]:
            kit = root / "user/default/entities/kit"
            return {n: (kit / n).lstat().st_mtime for n in ("parts", "parts/inner", "bolt")}

        want = {"parts": old_dir, "parts/inner": old_dir + 1, "bolt": old_link}
        out1, out2, out3 = tmp_path / "out1", tmp_path / "out2", tmp_path / "out3"
        assert cli("export", str(a.path), str(out1)).returncode == 0
        assert times(out1) == want
        r = cli("import", str(out1), str(b.path))
        assert r.returncode == 0, r.stdout + r.stderr
        assert times(b.path) == want
        assert cli("export", str(b.path), str(out2)).returncode == 0
        assert times(out2) == want
    r = cli("import", str(out1), str(tmp_path / "data-c"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert cli("export", str(tmp_path / "data-c"), str(out3)).returncode == 0
    assert times(out3) == want


def test_an_import_run_again_changes_nothing(tmp_path: Path) -> None:
    """The same export imported twice (an import run again after it stopped): a node
    there with the exported text is that node, so no new version is saved into it and no
    second event is appended beside it; an attachment it lacks is added. It routed each
    file again: every merged node got a version more, and every event a copy."""
    with two_mounts(tmp_path) as (a, b):
        fill(a.path)
        out1, out2 = tmp_path / "out1", tmp_path / "out2"
        assert cli("export", str(a.path), str(out1), "--history").returncode == 0
        r = cli("import", str(out1), str(b.path), "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        os.remove(b.path / "user/default/preferences/editor/photo.bin")  # stopped before it
        r = cli("import", str(out1), str(b.path), "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        report = json.loads(r.stdout)
        assert (report["created"], report["routed"], report["refused"]) == (0, 0, [])
        assert report["nodes_before"] == report["nodes_after"] == 5
        assert report["attachments"] == 1  # photo.bin, again
        assert cli("export", str(b.path), str(out2), "--history").returncode == 0
        first, second = snapshot(out1, strip_facts=False), snapshot(out2, strip_facts=False)
        assert [k for k in first.keys() | second.keys() if first.get(k) != second.get(k)] == []
    data = tmp_path / "data-c"
    for _ in range(2):
        r = cli("import", str(out1), str(data), "--json")
        assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(r.stdout)
    assert (report["created"], report["routed"], report["nodes_after"]) == (0, 0, 5)
    out3 = tmp_path / "out3"
    assert cli("export", str(data), str(out3), "--history").returncode == 0
    assert snapshot(out3, strip_facts=False) == first


def test_hard_links_in_a_node_survive_the_round_trip(tmp_path: Path) -> None:
    """Two names of one attachment (`ln`) are exported as two names of one file and made
    one file again by an import, into a mount and into a data dir: a write through one
    name shows through the other (they came back as two copies)."""

    def inodes(root: Path) -> tuple[int, int, int]:
        kit = root / "user/default/entities/kit"
        a, b = (kit / "a.txt").stat(), (kit / "sub/b.txt").stat()
        return a.st_nlink, b.st_nlink, int(a.st_ino == b.st_ino)

    with two_mounts(tmp_path) as (a, b):
        kit = a.path / "user/default/entities/kit"
        kit.mkdir()
        (kit / "L2.md").write_text("A kit.\n")
        (kit / "sub").mkdir()
        (kit / "a.txt").write_text("shared\n")
        os.link(kit / "a.txt", kit / "sub/b.txt")
        out1, out2, out3 = tmp_path / "out1", tmp_path / "out2", tmp_path / "out3"
        r = cli("export", str(a.path), str(out1))
        assert r.returncode == 0, r.stdout + r.stderr
        assert "3 attachment(s)" in r.stdout  # sub/, a.txt and its second name
        assert inodes(out1) == (2, 2, 1)
        r = cli("import", str(out1), str(b.path))
        assert r.returncode == 0, r.stdout + r.stderr
        assert inodes(b.path) == (2, 2, 1)
        copied = b.path / "user/default/entities/kit"
        with open(copied / "sub/b.txt", "a") as f:
            f.write("changed\n")
        assert (copied / "a.txt").read_text() == "shared\nchanged\n"
        assert cli("export", str(b.path), str(out2)).returncode == 0
        assert inodes(out2) == (2, 2, 1)
    r = cli("import", str(out1), str(tmp_path / "data-c"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert cli("export", str(tmp_path / "data-c"), str(out3)).returncode == 0
    assert inodes(out3) == (2, 2, 1)
    out4 = tmp_path / "out4"  # the first store, unmounted: the same
    assert cli("export", str(tmp_path / "data-a"), str(out4)).returncode == 0
    assert inodes(out4) == (2, 2, 1)
