"""Ordinary copy tools through a real mount (docs/reference.md, "Copying nodes with cp,
rsync and tar"): `cp -r`, `cp -a` and `rsync -a` of a node into a new one, of an owner into
a new one, and `rsync` back of an `rsync` copy exit 0 with nothing lost; the copy keeps the
text, the versions, a hand-written L0 and the attachments; the derived files a copier
writes back with the bytes they show change nothing; other bytes into meta.yaml or a
version are refused with an errno the tool prints and the reason in `.status`.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from contextfs.testing import contextfs_cmd

V1 = "Ana drinks green tea.\n"
V2 = "Ana drinks green tea, no sugar, after lunch.\n"
PINNED = "Tea: green, no sugar.\n"
P1 = "---\nname: Ola\n---\nOla teaches chemistry.\n"
P2 = "---\nname: Ola\n---\nOla teaches chemistry in Bergen.\n"


def run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=120, cwd=cwd
    )


def copy_in(tool: str, export: Path, dest: Path, tmp_path: Path) -> None:
    """An export's owner folder copied into a new folder `dest` of the mount with `tool`
    (rsync -a, tar c | tar x, or cp -r); the tool must succeed with nothing on stderr."""
    dest.mkdir()
    if tool == "rsync":
        r = run("rsync", "-a", f"{export}/", f"{dest}/")
    elif tool == "tar":
        r = run("tar", "-C", export, "-cf", tmp_path / "export.tar", ".")
        assert (r.returncode, r.stderr) == (0, ""), r.stderr
        r = run("tar", "-C", dest, "-xf", tmp_path / "export.tar")
    else:
        r = run("cp", "-r", f"{export}/.", f"{dest}/")
    assert (r.returncode, r.stderr) == (0, ""), r.stderr


def meta(node: Path) -> dict[str, str]:
    text = (node / "meta.yaml").read_text()
    return dict(re.findall(r"^(\w+): (.*)$", text, re.M))


def history(node: Path) -> dict[str, str]:
    d = node / ".history"
    return {n: (d / n).read_text() for n in sorted(os.listdir(d))}


def make_tea(prefs: Path, name: str = "tea") -> Path:
    """A node with two versions, a hand-written L0 and an attachment."""
    node = prefs / name
    node.mkdir()
    (node / "L2.md").write_text(V1)
    (node / "L2.md").write_text(V2)
    (node / "L0.md").write_text(PINNED)
    (node / "notes.txt").write_text("brew 3 minutes\n")
    return node


def assert_same_node(copy: Path, src: Path) -> None:
    """What a user compares after a copy: text, versions, abstract, attachments."""
    assert (copy / "L2.md").read_text() == V2
    assert history(copy) == {"v1.md": V1, "v2.md": V2}, history(copy)
    assert (copy / "L0.md").read_text() == PINNED
    assert (copy / "L1.md").read_text() == (src / "L1.md").read_text()
    assert (copy / "notes.txt").read_text() == "brew 3 minutes\n"
    m, s = meta(copy), meta(src)
    assert m["version"] == "2" and m["l0_pinned"] == "true" and m["l1_pinned"] == "false"
    assert m["id"] != s["id"] and m["path"].endswith(f'/{copy.name}"')


def assert_source_intact(src: Path, before: dict[str, str]) -> None:
    assert (src / "L2.md").read_text() == V2
    assert history(src) == {"v1.md": V1, "v2.md": V2}
    assert (src / "L0.md").read_text() == PINNED
    assert meta(src) == before


@pytest.mark.parametrize(
    "tool",
    [["cp", "-r"], ["cp", "-a"], ["rsync", "-a"], ["tar"]],
    ids=["cp-r", "cp-a", "rsync-a", "tar-x"],
)
def test_a_node_copied_into_a_new_one_keeps_its_text_history_and_pins(mount, tools, tool, tmp_path):
    prefs = mount.path / "user/default/preferences"
    src = make_tea(prefs)
    before = meta(src)
    if tool[0] == "rsync":  # rsync copies into a folder it makes: the trailing slashes
        r = run(*tool, f"{src}/", f"{prefs / 'tea-copy'}/")
    elif tool[0] == "tar":  # an archive of the node, extracted under a new name
        r = run("tar", "-C", prefs, "-cf", tmp_path / "tea.tar", "tea")
        assert (r.returncode, r.stderr) == (0, ""), r.stderr
        r = run("tar", "-C", prefs, "-xf", tmp_path / "tea.tar", "--transform=s/^tea/tea-copy/")
    else:
        r = run(*tool, src, prefs / "tea-copy")
    assert (r.returncode, r.stderr) == (0, ""), r.stderr
    assert_same_node(prefs / "tea-copy", src)
    assert_source_intact(src, before)
    if tool[0] == "tar":  # and over the node it came from, which has versions of its own:
        # tar unlinks what exists first, and its meta.yaml and versions cannot be unlinked
        # (`rm -r .history` must not look as if it took the history): those are refused,
        # and nothing changes (docs/reference.md, not covered)
        r = run("tar", "-C", prefs, "-xf", tmp_path / "tea.tar")
        refused = [ln for ln in r.stderr.splitlines() if ln.startswith("tar: tea/")]
        assert r.returncode == 2 and refused, r.stderr
        assert all("meta.yaml" in ln or ".history" in ln for ln in refused), r.stderr
        assert_source_intact(src, before)
    # the copy is a node like any other: searchable text, a new save is version 3
    (prefs / "tea-copy/L2.md").write_text("Ana switched to coffee.\n")
    assert meta(prefs / "tea-copy")["version"] == "3"
    assert (prefs / "tea-copy/L0.md").read_text() != PINNED  # L2 changed: the pin goes
    mount.remount()
    assert history(prefs / "tea-copy") == {
        "v1.md": V1,
        "v2.md": V2,
        "v3.md": "Ana switched to coffee.\n",
    }
    assert_source_intact(prefs / "tea", before)
    # after a remount the files are numbered again, in the same order: a copy of the copy
    r = run("cp", "-a", prefs / "tea", prefs / "tea-again")
    assert (r.returncode, r.stderr) == (0, ""), r.stderr
    assert_same_node(prefs / "tea-again", prefs / "tea")


def test_an_owner_copied_into_a_new_one(mount, tools):
    user = mount.path / "user"
    src = make_tea(user / "default/preferences")
    (user / "default/entities/ana").mkdir()
    (user / "default/entities/ana/L2.md").write_text("Ana Souza, a colleague.\n")
    # `cp -r OWNER NEW` cannot work: a new owner shows its type directories at once
    # (documented); into an owner made first, `cp -r OWNER/. NEW/` and rsync do
    (user / "you").mkdir()
    r = run("cp", "-r", f"{user / 'default'}/.", f"{user / 'you'}/")
    assert (r.returncode, r.stderr) == (0, ""), r.stderr
    r = run("rsync", "-a", f"{user / 'default'}/", f"{user / 'them'}/")
    assert (r.returncode, r.stderr) == (0, ""), r.stderr
    for owner in ("you", "them"):
        assert_same_node(user / owner / "preferences/tea", src)
        ana = user / owner / "entities/ana"
        assert (ana / "L2.md").read_text() == "Ana Souza, a colleague.\n"
        assert meta(ana)["owner"] == f"user/{owner}"
        assert history(ana) == {"v1.md": "Ana Souza, a colleague.\n"}


@pytest.mark.parametrize("tool", ["rsync", "tar", "cp"])
def test_an_export_copied_in_makes_its_nodes_again(mount, tools, tool, tmp_path):
    """`rsync -a`, `tar x` or `cp -r` of a `contextfs export --history` tree into an owner
    exit 0: each `<name>.md` (its L2 with a `contextfs:` mapping) is its node, with the
    hand-written L0, every version of its `.history` and its attachments."""
    user = mount.path / "user"
    src = make_tea(user / "default/preferences")
    (user / "default/entities/ana").mkdir()
    (user / "default/entities/ana/L2.md").write_text("Ana Souza, a colleague.\n")
    profile = user / "default/profile"  # a singleton: exported as profile.md beside
    (profile / "L2.md").write_text(P1)
    (profile / "L2.md").write_text(P2)
    (profile / "L0.md").write_text("Ola, by hand.\n")
    out = tmp_path / "out"
    r = run(*contextfs_cmd("export", str(mount.path), str(out), "--history"))
    assert r.returncode == 0, r.stderr
    export = out / "user/default"
    assert (export / "preferences/tea.md").read_text().count("contextfs:") == 1
    # an old export: its first versions were saved years ago (their files' times say so)
    saved = {"preferences/tea": 1609495200.0, "profile": 1612173600.0}  # 2021-01-01, 02-01
    for rel, when in saved.items():
        os.utime(export / rel / ".history/v1.md", (when, when))
    copy_in(tool, export, user / "x", tmp_path)
    assert_same_node(user / "x/preferences/tea", src)
    ana = user / "x/entities/ana"
    assert (ana / "L2.md").read_text() == "Ana Souza, a colleague.\n"
    assert history(ana) == {"v1.md": "Ana Souza, a colleague.\n"}
    assert sorted(os.listdir(user / "x/preferences")) == ["tea"]  # no .md file stays
    copied = user / "x/profile"
    assert (copied / "L2.md").read_text() == P2
    assert (copied / "L0.md").read_text() == "Ola, by hand.\n"
    assert history(copied) == {"v1.md": P1, "v2.md": P2}
    assert "profile.md" not in os.listdir(user / "x")
    if tool != "cp":  # rsync -a and tar x give each file its source's time; cp -r does not
        for rel, when in saved.items():
            assert (user / "x" / rel / ".history/v1.md").stat().st_mtime == when, rel
    # a node's file copied into the folder of another type is refused, with the reason
    wrong = user / "x/entities/tea.md"
    with pytest.raises(OSError) as info:
        wrong.write_bytes((export / "preferences/tea.md").read_bytes())
    assert info.value.errno == errno.EINVAL
    status = (mount.path / ".status").read_text()
    assert "tea.md was exported as a node of type preference; this folder keeps type entity" in (
        status
    )
    assert not (user / "x/entities/tea").exists()
    if tool != "cp":  # kept by the store, not only shown
        mount.remount()
        for rel, when in saved.items():
            assert (user / "x" / rel / ".history/v1.md").stat().st_mtime == when, rel


@pytest.mark.parametrize("tool", ["rsync", "tar", "cp"])
def test_an_export_copied_in_keeps_its_modes_and_its_unwritten_nodes(mount, tools, tool, tmp_path):
    """A copier makes a node's folder before the file beside it (`rsync -a` makes it 0700
    and chmods it at once): the node's files take the mode of its exported file (0644), not
    the folder's first one (they were 0600, unreadable by anyone else). A node exported
    never written (`<name>.md` with no text, its attachments beside) is made again
    unwritten, with its attachments: no empty version."""
    user = mount.path / "user"
    make_tea(user / "default/preferences")
    bare = user / "default/entities/bare"
    bare.mkdir()
    (bare / "docs").mkdir()
    (bare / "docs/a.txt").write_text("kept\n")
    out = tmp_path / "out"
    r = run(*contextfs_cmd("export", str(mount.path), str(out), "--history"))
    assert r.returncode == 0, r.stderr
    export = out / "user/default"
    assert oct((export / "preferences/tea.md").stat().st_mode & 0o777) == "0o644"
    copy_in(tool, export, user / "x", tmp_path)
    tea = user / "x/preferences/tea"
    modes = {f: oct((tea / f).stat().st_mode & 0o777) for f in ("L2.md", "L0.md", "meta.yaml")}
    assert modes == {"L2.md": "0o644", "L0.md": "0o644", "meta.yaml": "0o444"}, modes
    assert oct(tea.stat().st_mode & 0o777) == "0o755"
    copied = user / "x/entities/bare"
    assert sorted(os.listdir(copied)) == ["docs"], os.listdir(copied)
    assert (copied / "docs/a.txt").read_text() == "kept\n"
    assert sorted(os.listdir(user / "x/entities")) == ["bare"]  # no .md file stays
    mount.remount()
    assert oct((tea / "L2.md").stat().st_mode & 0o777) == "0o644"
    assert sorted(os.listdir(copied)) == ["docs"]


def test_rsync_back_of_an_rsync_copy_changes_nothing(mount, tools, tmp_path):
    prefs = mount.path / "user/default/preferences"
    src = make_tea(prefs)
    derived = prefs / "derived"
    derived.mkdir()
    (derived / "L2.md").write_text("Ana likes long walks.\n\nShe walks every evening.\n")
    backup = tmp_path / "backup"
    r = run("rsync", "-a", f"{prefs}/", f"{backup}/")
    assert (r.returncode, r.stderr) == (0, ""), r.stderr
    before = {n.name: (meta(n), history(n)) for n in (src, derived)}
    l0 = (derived / "L0.md").read_text()
    # back as it is (times equal: rsync skips), then every file rewritten (-I: each is
    # written to a temporary name and renamed over the one in the mount)
    for extra in ([], ["-I"], ["-I", "--inplace"]):
        r = run("rsync", "-a", *extra, f"{backup}/", f"{prefs}/")
        assert (r.returncode, r.stderr) == (0, ""), (extra, r.stderr)
        for n in (src, derived):
            assert (meta(n), history(n)) == before[n.name], extra
        # a derived L0 written back as it shows is not a hand-written one
        assert meta(derived)["l0_pinned"] == "false" and (derived / "L0.md").read_text() == l0
    assert sorted(os.listdir(prefs)) == ["derived", "tea"]
    assert "refusals: 0" in (mount.path / ".status").read_text()


def test_other_bytes_into_derived_files_are_refused_with_the_reason(mount, tools, tmp_path):
    prefs = mount.path / "user/default/preferences"
    tea = make_tea(prefs)
    # a node made by routing a dropped file, not by mkdir
    (prefs / "coffee.md").write_text("Ana drinks her coffee black.\n")
    coffee = prefs / "coffee"
    before = meta(coffee)
    # the bytes they show go back in, by any tool: no change, exit 0
    saved = tmp_path / "saved"
    shutil.copytree(coffee, saved)
    for name in ("meta.yaml", ".history/v1.md"):
        r = run("cp", saved / name, coffee / name)
        assert (r.returncode, r.stderr) == (0, ""), r.stderr
    assert meta(coffee) == before
    # other bytes: an errno the tool prints, the reason in .status, nothing changed
    edited = tmp_path / "meta.yaml"
    edited.write_text((coffee / "meta.yaml").read_text().replace("version: 1", "version: 7"))
    r = run("cp", edited, coffee / "meta.yaml")
    assert r.returncode == 1 and "Permission denied" in r.stderr, r.stderr
    r = run("sed", "-i", "s/version: 1/version: 7/", coffee / "meta.yaml")
    assert r.returncode != 0 and "Permission denied" in r.stderr, r.stderr
    (tmp_path / "v1.md").write_text("Ana drinks tea.\n")
    r = run("cp", tmp_path / "v1.md", coffee / ".history/v1.md")
    assert r.returncode == 1 and "Permission denied" in r.stderr, r.stderr
    r = run("cp", tmp_path / "v1.md", coffee / ".history/v5.md")
    assert r.returncode == 1 and "Permission denied" in r.stderr, r.stderr
    # another node rsync-ed over this one: its meta.yaml and versions are not this one's
    r = run("rsync", "-a", f"{tea}/", f"{coffee}/")
    assert r.returncode == 23, r.stderr
    assert re.search(
        r'rename ".*/coffee/\.meta\.yaml\.\w+" -> "meta\.yaml": Permission denied', r.stderr
    )
    assert "v1.md" in r.stderr
    status = (mount.path / ".status").read_text()
    assert (
        "EACCES user/default/preferences/coffee/meta.yaml: meta.yaml is derived and read-only"
        in status
    )
    assert "v1.md is derived and read-only: what was written differs from version 1" in status
    after = meta(coffee)
    assert after["id"] == before["id"] and after["path"] == before["path"]
    assert history(coffee)["v1.md"] == (saved / ".history/v1.md").read_text()


def test_copiers_that_set_the_mode_after_close_copy_into_a_type_dir(mount, tools, tmp_path):
    """`shutil.copy`, `install -m` and `mv` of a temporary file set the mode by name after
    the file was routed into memory (docs/reference.md, "Writing into a type directory")."""
    prefs = mount.path / "user/default/preferences"
    src = tmp_path / "tea.md"
    src.write_text("Green tea, no sugar.\n")
    shutil.copy(src, prefs / "tea.md")  # copyfile, then chmod by name
    r = run("install", "-m", "600", src, prefs / "coffee.md")
    assert r.returncode == 0, r.stderr
    (prefs / ".juice.md.tmp1").write_text("Orange juice at breakfast.\n")
    os.rename(prefs / ".juice.md.tmp1", prefs / "juice.md")
    os.chmod(prefs / "juice.md", 0o640)
    assert sorted(os.listdir(prefs)) == ["coffee", "juice", "tea"]  # routed: not listed
    assert "Green tea, no sugar." in (prefs / "tea/L2.md").read_text()
    # the name is written again: routed again
    (prefs / "tea.md").write_text("Green tea with mint.\n")
    assert "Green tea with mint." in (prefs / "tea/L2.md").read_text()
    # the name finds an empty file: what it held is memory (no secret shown again), and
    # an append through it is routed alone, not with the text before it again
    assert (prefs / "juice.md").read_text() == ""
    with open(prefs / "juice.md", "a") as f:
        f.write("Apple juice too.\n")
    juice = (prefs / "juice/L2.md").read_text()
    assert juice.count("Orange juice") <= 1 and "Apple juice too." in juice
    people = mount.path / "user/default/entities"
    (people / "alice.md").write_text("Alice likes green tea.\n")
    with open(people / "alice.md", "a") as f:  # `>>` right after: only the new line
        f.write("Alice also likes coffee.\n")
    alice = (people / "alice/L2.md").read_text()
    assert alice.count("Alice likes green tea.") == 1 and "also likes coffee" in alice
    # a file's setuid and execute bits are not a memory's
    src.chmod(0o4755)
    shutil.copy2(src, prefs / "suid.md")
    assert oct((prefs / "suid/L2.md").stat().st_mode & 0o7777) == oct(0o644)
    assert oct((prefs / "suid").stat().st_mode & 0o7777) == oct(0o755)
    os.unlink(prefs / "coffee.md")  # `rm` of what was just copied: nothing left to remove
    assert (prefs / "coffee/L2.md").read_text().endswith("Green tea, no sugar.\n")
    with pytest.raises(FileNotFoundError):
        os.stat(prefs / "coffee.md")
