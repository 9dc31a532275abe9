"""Hard links of attachment files on a real mount (issue 11, item 5), with the shell's own
`ln`, `cp`, `rm`, `mv` and `stat`: one inode for every name, kept across a remount, a soft
delete and a restore; links to a memory's tiers or derived files, or into another node,
refused with an errno `ln` reports truly and a `.status` line.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.integration.test_attachments import attachments, make_node


def sh(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=60)


def ino_links(cwd: Path, *names: str) -> list[tuple[int, int]]:
    """(st_ino, st_nlink) of each name, as `stat` prints them."""
    out = sh(cwd, "stat", "-c", "%i %h", *names)
    assert out.returncode == 0, out.stderr
    return [tuple(int(x) for x in line.split()) for line in out.stdout.splitlines()]


def test_ln_gives_one_file_several_names_kept_across_remounts(mount):
    node = make_node(mount)
    (node / "a.txt").write_text("first\n")
    (node / "sub").mkdir()
    assert sh(node, "ln", "a.txt", "b.txt").returncode == 0
    assert sh(node, "ln", "b.txt", "sub/c.txt").returncode == 0
    [(ia, na), (ib, nb), (ic, nc)] = ino_links(node, "a.txt", "b.txt", "sub/c.txt")
    assert ia == ib == ic and na == nb == nc == 3
    # a write through one name is read through the others
    with open(node / "sub/c.txt", "a") as f:
        f.write("second\n")
    assert (node / "a.txt").read_text() == "first\nsecond\n"
    # chmod and touch through one name show on the others
    assert sh(node, "chmod", "600", "b.txt").returncode == 0
    assert sh(node, "touch", "-d", "2001-02-03 04:05:06", "sub/c.txt").returncode == 0
    st = os.stat(node / "a.txt")
    assert (st.st_mode & 0o777, st.st_mtime) == (0o600, os.stat(node / "b.txt").st_mtime)
    # rm of one name leaves the others; mv keeps the link
    assert sh(node, "rm", "a.txt").returncode == 0
    assert sh(node, "mv", "b.txt", "sub/d.txt").returncode == 0
    [(ic, nc), (id_, nd)] = ino_links(node, "sub/c.txt", "sub/d.txt")
    assert ic == id_ and nc == nd == 2
    # cp makes another file
    assert sh(node, "cp", "sub/d.txt", "copy.txt").returncode == 0
    [(icopy, ncopy)] = ino_links(node, "copy.txt")
    assert icopy != ic and ncopy == 1
    mtime = os.stat(node / "sub/c.txt").st_mtime
    mount.remount()
    [(ic, nc), (id_, nd)] = ino_links(node, "sub/c.txt", "sub/d.txt")
    assert ic == id_ and nc == nd == 2
    assert (node / "sub/d.txt").read_text() == "first\nsecond\n"
    st = os.stat(node / "sub/d.txt")
    assert (st.st_mode & 0o777, st.st_mtime) == (0o600, mtime)
    assert attachments(node) == {"sub", "copy.txt"}
    # after a remount the names still share their bytes
    (node / "sub/d.txt").write_text("third\n")
    assert (node / "sub/c.txt").read_text() == "third\n"
    assert sh(node, "rm", "sub/d.txt").returncode == 0
    assert ino_links(node, "sub/c.txt")[0][1] == 1
    mount.remount()
    assert (node / "sub/c.txt").read_text() == "third\n"
    assert ino_links(node, "sub/c.txt")[0][1] == 1


def test_ln_of_a_symlink_links_the_symlink_and_ln_L_its_target(mount):
    node = make_node(mount)
    (node / "f").write_text("F\n")
    os.symlink("f", node / "s")
    os.mkfifo(node / "fifo")
    assert sh(node, "ln", "s", "s2").returncode == 0
    assert sh(node, "ln", "-L", "s", "f2").returncode == 0
    assert sh(node, "ln", "fifo", "fifo2").returncode == 0
    for _ in range(2):
        [(i1, n1), (i2, n2)] = ino_links(node, "s", "s2")
        assert i1 == i2 and n1 == 2 and os.readlink(node / "s2") == "f"
        [(i1, n1), (i2, n2)] = ino_links(node, "f", "f2")
        assert i1 == i2 and n1 == 2 and (node / "f2").read_text() == "F\n"
        [(i1, n1), (i2, n2)] = ino_links(node, "fifo", "fifo2")
        assert i1 == i2 and n1 == 2
        mount.remount()


def test_rm_r_and_restore_keep_the_links(mount):
    node = make_node(mount)
    (node / "a").write_text("kept\n")
    (node / "sub").mkdir()
    assert sh(node, "ln", "a", "sub/b").returncode == 0
    types = node.parent
    assert sh(types, "rm", "-r", node.name).returncode == 0
    trashed = mount.path / "user/default/.trash/preferences" / node.name
    [(ia, na), (ib, nb)] = ino_links(trashed, "a", "sub/b")
    assert ia == ib and na == nb == 2
    mount.remount()
    assert sh(types, "mv", str(trashed), node.name).returncode == 0
    [(ia, na), (ib, nb)] = ino_links(node, "a", "sub/b")
    assert ia == ib and na == nb == 2
    assert (node / "sub/b").read_text() == "kept\n"


def test_links_to_tiers_derived_files_and_other_nodes_are_refused(mount):
    node = make_node(mount)
    other = make_node(mount, "other")
    (node / "a").write_text("A\n")
    for src, dst, says in [
        ("L2.md", "tier", "Operation not permitted"),
        ("meta.yaml", "meta", "Operation not permitted"),
        (".history/v1.md", "v1", "Operation not permitted"),
        ("a", "../other/a", "Invalid cross-device link"),
        ("a", "../a.md", "Invalid cross-device link"),
    ]:
        out = sh(node, "ln", src, dst)
        assert out.returncode == 1 and says in out.stderr, (src, out.stderr)
    status = mount.status()
    for code, path in [
        ("EPERM", "L2.md"),
        ("EPERM", "meta.yaml"),
        ("EXDEV", "a"),
    ]:
        assert f"{code} link user/default/preferences/tools/{path}" in status, status
    assert "hard links are made only of files kept inside a node" in status
    assert "hard links stay inside the node" in status
    assert attachments(node) == {"a"} and attachments(other) == set()
    # a linked file moved to another node is copied there by mv (EXDEV), as between two
    # filesystems: the name left behind keeps the original
    assert sh(node, "ln", "a", "b").returncode == 0
    out = sh(node, "mv", "a", "../other/a")
    assert out.returncode == 0, out.stderr
    assert (other / "a").read_text() == "A\n" and ino_links(other, "a")[0][1] == 1
    assert ino_links(node, "b")[0][1] == 1 and attachments(node) == {"b"}


def test_cp_a_and_tar_keep_hard_links_inside_the_copy(mount):
    """`cp -a` and `tar` recreate a copied tree's hard links with link(); within the node
    they land in (another node, for tar), so the copy has them too."""
    node = make_node(mount)
    other = make_node(mount, "other")
    (node / "src").mkdir()
    (node / "src/a").write_text("A\n")
    assert sh(node, "ln", "src/a", "src/b").returncode == 0
    out = sh(node, "cp", "-a", "src", "copy")
    assert out.returncode == 0, out.stderr
    [(ia, na), (ib, nb)] = ino_links(node, "copy/a", "copy/b")
    assert ia == ib and na == 2 and ia != ino_links(node, "src/a")[0][0]
    tar = subprocess.run(
        f"tar -C {node} -cf - src | tar -C {other} -xf -", shell=True, capture_output=True
    )
    assert tar.returncode == 0, tar.stderr
    [(ia, na), (ib, nb)] = ino_links(other, "src/a", "src/b")
    assert ia == ib and na == 2 and (other / "src/b").read_text() == "A\n"
