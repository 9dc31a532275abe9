"""Every way of saving L2.md through a real mount makes exactly one new version (SPEC §3).

Each case starts from a node at version 1, saves with a real tool (python, truncate, the
shell, cp, mv, sed -i, vim with its backup settings, an atomic writer), then checks what a
user sees: the exact bytes of L2.md, one more entry in .history, `version: 2` in meta.yaml,
L0/L1 regenerated from the new text, no leftover temporary or scratch file — and the same
again after a remount.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

# Two paragraphs: L0 is the first sentence, L1 the first sentence of every paragraph.
OLD = "Alice drinks tea every morning.\n\nShe dislikes loud alarms.\n"
NODE_ENTRIES = {".history", "L0.md", "L1.md", "L2.md", "meta.yaml"}
SCRATCH = re.compile(r"(\.sw[a-p]$|~$|^4913$|^\.#)")


def words(text: str) -> set[str]:
    return {w.lower() for w in re.findall(r"[A-Za-z]+", text)}


def make_node(mount, name: str = "drinks", text: str = OLD) -> Path:
    node = mount.path / "user/default/preferences" / name
    node.mkdir()
    (node / "L2.md").write_text(text)
    assert meta_version(node) == 1
    assert os.listdir(node / ".history") == ["v1.md"]
    return node


def meta_version(node: Path) -> int:
    m = re.search(r"^version: (\d+)$", (node / "meta.yaml").read_text(), re.M)
    assert m, f"no version line in {node}/meta.yaml"
    return int(m.group(1))


def vim(tmp_path: Path, path: Path, *commands: str) -> None:
    """Run vim without a terminal, without any user vimrc, executing `commands`."""
    args = ["vim", "-Es", "-u", "NONE", "-i", "NONE"]
    for c in commands:
        args += ["-c", c]
    env = {"HOME": str(tmp_path), "PATH": os.environ["PATH"], "TERM": "dumb"}
    subprocess.run(
        [*args, str(path)], check=True, env=env, cwd=tmp_path, timeout=30, stdin=subprocess.DEVNULL
    )


def history_of(node: Path) -> str:
    """The versions and their text, for assertion messages."""
    names = sorted(os.listdir(node / ".history"), key=lambda n: int(n[1:-3]))
    return "versions: " + ", ".join(f"{n}={(node / '.history' / n).read_text()!r}" for n in names)


def check_saved(
    node: Path, expected: str, versions: int, *, new_words: set[str], gone_words: set[str]
) -> None:
    """What a user sees after `versions - 1` saves, the last one leaving `expected`."""
    assert (node / "L2.md").read_bytes() == expected.encode()
    history = sorted(os.listdir(node / ".history"), key=lambda n: int(n[1:-3]))
    assert history == [f"v{i}.md" for i in range(1, versions + 1)], history_of(node)
    assert (node / ".history" / f"v{versions}.md").read_bytes() == expected.encode()
    assert (node / ".history/v1.md").read_bytes() == OLD.encode()
    assert meta_version(node) == versions
    assert (node / "L0.md").read_text().strip() == expected.splitlines()[0]
    derived = words((node / "L1.md").read_text())
    assert new_words <= derived, f"L1.md was not regenerated: {derived}"
    assert not (gone_words & derived), f"L1.md still shows the old text: {derived}"
    # No temporary file, backup, swap file or probe (4913) stays behind as an attachment.
    assert set(os.listdir(node)) == NODE_ENTRIES
    meta = (node / "meta.yaml").read_text()
    for leftover in (".swp", "~", "4913"):
        assert leftover not in meta, f"meta.yaml mentions {leftover!r}:\n{meta}"


# ---- the ways of saving ---------------------------------------------------------------------


def save_in_place(node: Path, tmp_path: Path) -> str:
    with open(node / "L2.md", "r+b") as f:
        f.seek(OLD.index("tea"))
        f.write(b"gin")
    return OLD.replace("tea", "gin")


def save_truncate(node: Path, tmp_path: Path) -> str:
    first = OLD.split("\n\n")[0] + "\n"
    subprocess.run(["truncate", "-s", str(len(first)), str(node / "L2.md")], check=True)
    return first


NEW = "Alice now drinks coffee at noon.\n"


def save_shell_overwrite(node: Path, tmp_path: Path) -> str:
    subprocess.run(
        ["sh", "-c", 'printf "%s" "$1" > "$2"', "sh", NEW, str(node / "L2.md")], check=True
    )
    return NEW


def save_shell_append(node: Path, tmp_path: Path) -> str:
    extra = "\nBob brings marmalade.\n"
    subprocess.run(
        ["sh", "-c", 'printf "%s" "$1" >> "$2"', "sh", extra, str(node / "L2.md")], check=True
    )
    return OLD + extra


def save_cp_from_outside(node: Path, tmp_path: Path) -> str:
    src = tmp_path / "outside.md"
    src.write_text(NEW)
    subprocess.run(["cp", str(src), str(node / "L2.md")], check=True)
    assert src.read_text() == NEW
    return NEW


def save_mv_from_outside(node: Path, tmp_path: Path) -> str:
    src = tmp_path / "outside.md"
    src.write_text(NEW)
    subprocess.run(["mv", str(src), str(node / "L2.md")], check=True)
    assert not src.exists()
    return NEW


def save_mv_inside_node(node: Path, tmp_path: Path) -> str:
    (node / "draft.md").write_text(NEW)
    subprocess.run(["mv", str(node / "draft.md"), str(node / "L2.md")], check=True)
    return NEW


def save_sed_i(node: Path, tmp_path: Path) -> str:
    subprocess.run(["sed", "-i", "s/tea/lemonade/", str(node / "L2.md")], check=True)
    return OLD.replace("tea", "lemonade")


def save_tempfile_replace(node: Path, tmp_path: Path) -> str:
    with tempfile.NamedTemporaryFile("w", dir=node, delete=False, suffix="") as f:
        f.write(NEW)
        f.flush()
        os.fsync(f.fileno())
    os.replace(f.name, node / "L2.md")
    return NEW


def vim_save(*settings: str) -> Callable[[Path, Path], str]:
    def save(node: Path, tmp_path: Path) -> str:
        vim(tmp_path, node / "L2.md", *settings, "%s/tea/cocoa/", "wq")
        return OLD.replace("tea", "cocoa")

    return save


SAVES = {
    "python-r+-seek-write": save_in_place,
    "truncate-s": save_truncate,
    "shell-overwrite": save_shell_overwrite,
    "shell-append": save_shell_append,
    "cp-from-outside": save_cp_from_outside,
    "mv-from-outside": save_mv_from_outside,
    "mv-inside-node": save_mv_inside_node,
    "sed-i": save_sed_i,
    "python-tempfile-os-replace": save_tempfile_replace,
    "vim-defaults": vim_save(),
    "vim-backup-writebackup": vim_save("set backup writebackup"),
    "vim-backupcopy-yes": vim_save("set backupcopy=yes"),
    "vim-backupcopy-no": vim_save("set backupcopy=no"),
    "vim-backupcopy-no-backup": vim_save("set backupcopy=no backup writebackup"),
    "vim-nocompatible-backupcopy-auto": vim_save("set nocompatible backupcopy=auto"),
}


@pytest.mark.parametrize("save", SAVES.values(), ids=SAVES.keys())
def test_one_save_is_one_version(mount, tools, tmp_path, save):
    node = make_node(mount)
    expected = save(node, tmp_path)
    new_words = words(expected) - words(OLD)
    gone_words = words(OLD) - words(expected)
    assert new_words or gone_words
    check_saved(node, expected, 2, new_words=new_words, gone_words=gone_words)
    mount.remount()
    check_saved(node, expected, 2, new_words=new_words, gone_words=gone_words)
    assert "attachments=0" in mount.status()


def test_two_vim_sessions_are_two_versions(mount, tools, tmp_path):
    node = make_node(mount)
    vim(tmp_path, node / "L2.md", "%s/tea/cocoa/", "wq")
    vim(tmp_path, node / "L2.md", "set backupcopy=no", "%s/loud/gentle/", "wq")
    expected = OLD.replace("tea", "cocoa").replace("loud", "gentle")
    check_saved(node, expected, 3, new_words={"cocoa", "gentle"}, gone_words={"tea", "loud"})
    mount.remount()
    check_saved(node, expected, 3, new_words={"cocoa", "gentle"}, gone_words={"tea", "loud"})


# ---- saving the same bytes is not a new version --------------------------------------------


def same_python(node: Path, tmp_path: Path) -> None:
    (node / "L2.md").write_bytes(OLD.encode())


def same_cp(node: Path, tmp_path: Path) -> None:
    src = tmp_path / "same.md"
    src.write_text(OLD)
    subprocess.run(["cp", str(src), str(node / "L2.md")], check=True)


def same_shell(node: Path, tmp_path: Path) -> None:
    subprocess.run(
        ["sh", "-c", 'printf "%s" "$1" > "$2"', "sh", OLD, str(node / "L2.md")], check=True
    )


def same_sed(node: Path, tmp_path: Path) -> None:
    subprocess.run(["sed", "-i", "s/nothing-matches-this/x/", str(node / "L2.md")], check=True)


def same_vim(node: Path, tmp_path: Path) -> None:
    vim(tmp_path, node / "L2.md", "wq")


def same_vim_backupcopy_no(node: Path, tmp_path: Path) -> None:
    vim(tmp_path, node / "L2.md", "set backupcopy=no", "wq")


UNCHANGED = {
    "python-write": same_python,
    "cp": same_cp,
    "shell-overwrite": same_shell,
    "sed-i-no-match": same_sed,
    "vim-wq": same_vim,
    "vim-backupcopy-no-wq": same_vim_backupcopy_no,
}


@pytest.mark.parametrize("save", UNCHANGED.values(), ids=UNCHANGED.keys())
def test_unchanged_save_makes_no_version(mount, tools, tmp_path, save):
    node = make_node(mount)
    save(node, tmp_path)

    def check() -> None:
        assert (node / "L2.md").read_bytes() == OLD.encode()
        assert os.listdir(node / ".history") == ["v1.md"], history_of(node)
        assert meta_version(node) == 1
        assert set(os.listdir(node)) == NODE_ENTRIES

    check()
    mount.remount()
    check()


# ---- editor scratch files are accepted and never memory -------------------------------------


def test_vim_leaves_nothing_behind(mount, tools, tmp_path):
    """vim's swap file, backup and 4913 probe never reach .history, meta.yaml or attachments."""
    node = make_node(mount)
    for settings in (
        "set backup writebackup",
        "set nocompatible backupcopy=auto backup",
        "set backupcopy=no backup",
    ):
        vim(tmp_path, node / "L2.md", settings, "%s/$/ x/", "wq")
        # With 'backup' set, vim keeps L2.md~ on purpose: it is a scratch file, not memory.
        leftovers = set(os.listdir(node)) - NODE_ENTRIES
        assert all(SCRATCH.search(n) for n in leftovers), leftovers
    assert meta_version(node) == 4
    history = sorted(os.listdir(node / ".history"))
    assert history == ["v1.md", "v2.md", "v3.md", "v4.md"]
    mount.remount()
    assert set(os.listdir(node)) == NODE_ENTRIES
    assert sorted(os.listdir(node / ".history")) == history
    meta = (node / "meta.yaml").read_text()
    assert not any(s in meta for s in (".swp", "L2.md~", "4913")), meta
    assert "attachments=0" in mount.status()


SCRATCH_NAMES = [".L2.md.swp", "notes.md~", "4913", ".#lock"]


def test_scratch_files_vanish_on_remount_attachments_stay(mount, tmp_path):
    node = make_node(mount)
    for name in SCRATCH_NAMES:
        (node / name).write_text(f"scratch {name}\n")
    (node / "notes.txt").write_text("real notes\n")
    # Accepted while mounted: an editor can read back what it wrote.
    for name in SCRATCH_NAMES:
        assert (node / name).read_text() == f"scratch {name}\n"
    assert set(os.listdir(node)) == NODE_ENTRIES | set(SCRATCH_NAMES) | {"notes.txt"}
    mount.remount()
    assert set(os.listdir(node)) == NODE_ENTRIES | {"notes.txt"}
    assert (node / "notes.txt").read_text() == "real notes\n"
    assert meta_version(node) == 1
    assert os.listdir(node / ".history") == ["v1.md"]
    assert "attachments=1" in mount.status()


def test_an_appender_open_across_an_editors_save_adds_after_that_save(mount, tools):
    """A logger holds L2.md open with `>>` while `sed -i` renames a new file over it: its
    next line goes after the saved text, which is not undone (docs/reference.md,
    "Node files": O_APPEND)."""
    node = make_node(mount, "log", "alpha\nbeta\n")
    l2 = node / "L2.md"
    with open(l2, "a") as log:
        log.write("app0\n")
        log.flush()
        subprocess.run(["sed", "-i", "s/alpha/ALPHA/", str(l2)], check=True)
        log.write("app1\n")
    assert l2.read_text() == "ALPHA\nbeta\napp0\napp1\n", history_of(node)
