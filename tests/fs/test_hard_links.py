"""Hard links of attachment files (issue 11, item 5), at the handler level over a real
store: one inode for every name, link counts, writes and attributes seen through every
name, unlink, rename, remount, soft delete and restore, and the refusals (tiers,
meta.yaml, .history, other nodes, other kinds). Every test ends with fsck."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from types import SimpleNamespace

import duckdb
import pyfuse3
import pytest

from contextfs.store import Store
from contextfs.store.fsck import check_store
from contextfs.store.schema import SCHEMA_VERSION, drop_live_name_indexes
from tests.fs.conftest import FS
from tests.fs.test_attachment_chunks import Mounted

NODE = "user/default/preferences/files"
OTHER = "user/default/preferences/other"


@pytest.fixture
async def m(tmp_path: Path, types):
    (tmp_path / "store").mkdir()
    mounted = Mounted(tmp_path / "store", types)
    await mounted.fs.mkdir(NODE)
    await mounted.fs.write(f"{NODE}/L2.md", b"Files with several names.\n")
    yield mounted
    mounted.close()
    assert mounted.fsck() == []


async def ln(fs: FS, src: str, dst: str) -> pyfuse3.EntryAttributes:
    p, name = await fs.parent(dst)
    return await fs.ops.link(await fs.ino(src), p, name, fs.ctx)


async def st(fs: FS, path: str) -> pyfuse3.EntryAttributes:
    return await fs.ops.getattr(await fs.ino(path), fs.ctx)


async def test_two_names_share_one_inode_data_and_attributes(m: Mounted):
    fs = m.fs
    await fs.mkdir(f"{NODE}/sub")
    await fs.write(f"{NODE}/a.txt", b"first\n")
    entry = await ln(fs, f"{NODE}/a.txt", f"{NODE}/b.txt")
    await ln(fs, f"{NODE}/b.txt", f"{NODE}/sub/c.txt")
    a, b, c = [await st(fs, f"{NODE}/{n}") for n in ("a.txt", "b.txt", "sub/c.txt")]
    assert a.st_ino == b.st_ino == c.st_ino == entry.st_ino
    assert a.st_nlink == 3
    assert {"a.txt", "b.txt", "sub"} <= set(await fs.listdir(NODE))
    # a write through one name is read through the others
    await fs.write(f"{NODE}/sub/c.txt", b"second\n", append=True)
    assert await fs.read(f"{NODE}/a.txt") == b"first\nsecond\n"
    # chmod, chown and utimens through one name show on the others
    attr = pyfuse3.EntryAttributes()
    attr.st_mode = 0o600
    attr.st_mtime_ns = 1_500_000_000 * 10**9
    fields = SimpleNamespace(  # what the kernel's request carries (pyfuse3 builds it in C)
        update_size=False,
        update_mode=True,
        update_uid=False,
        update_gid=False,
        update_atime=False,
        update_mtime=True,
    )
    await fs.ops.setattr(await fs.ino(f"{NODE}/b.txt"), attr, fields, None, fs.ctx)
    attr.st_uid, attr.st_gid = 1234, 5678
    fields.update_mode = fields.update_mtime = False
    fields.update_uid = fields.update_gid = True
    await fs.ops.setattr(await fs.ino(f"{NODE}/sub/c.txt"), attr, fields, None, fs.ctx)
    for n in ("a.txt", "b.txt", "sub/c.txt"):
        s = await st(fs, f"{NODE}/{n}")
        assert (s.st_mode & 0o7777, s.st_mtime_ns) == (0o600, 1_500_000_000 * 10**9)
        assert (s.st_uid, s.st_gid) == (1234, 5678)
    # unlink of one name leaves the others, with one name fewer
    await fs.unlink(f"{NODE}/a.txt")  # the name whose row held the bytes
    assert (await st(fs, f"{NODE}/b.txt")).st_nlink == 2
    assert await fs.read(f"{NODE}/sub/c.txt") == b"first\nsecond\n"
    m.remount()
    fs = m.fs
    b, c = await st(fs, f"{NODE}/b.txt"), await st(fs, f"{NODE}/sub/c.txt")
    assert b.st_ino == c.st_ino and b.st_nlink == 2
    assert (b.st_mode & 0o7777, b.st_mtime_ns) == (0o600, 1_500_000_000 * 10**9)
    assert (c.st_uid, c.st_gid) == (1234, 5678)  # the access row of the file, not a name
    assert await fs.read(f"{NODE}/b.txt") == b"first\nsecond\n"
    assert not await fs.exists(f"{NODE}/a.txt")
    await fs.unlink(f"{NODE}/b.txt")
    assert (await st(fs, f"{NODE}/sub/c.txt")).st_nlink == 1
    m.remount()
    assert await m.fs.read(f"{NODE}/sub/c.txt") == b"first\nsecond\n"


async def test_a_link_in_a_folder_listed_before_its_holder_is_built(m: Mounted):
    """After a remount the folders are built lazily: a name in one folder finds the file
    whose row holds the bytes in a folder not built yet."""
    fs = m.fs
    await fs.mkdir(f"{NODE}/x")
    await fs.mkdir(f"{NODE}/x/y")
    await fs.write(f"{NODE}/x/y/deep.txt", b"deep\n")
    await ln(fs, f"{NODE}/x/y/deep.txt", f"{NODE}/top.txt")
    await ln(fs, f"{NODE}/x/y/deep.txt", f"{NODE}/x/y/again.txt")
    await fs.write(f"{NODE}/first", b"1")  # a file made before the folder of its link
    await fs.mkdir(f"{NODE}/later")
    await ln(fs, f"{NODE}/first", f"{NODE}/later/second")
    await ln(fs, f"{NODE}/first", f"{NODE}/x/third")
    m.remount()
    fs = m.fs
    assert (await st(fs, f"{NODE}/first")).st_nlink == 3  # no folder listed yet
    top = await st(fs, f"{NODE}/top.txt")
    assert top.st_nlink == 3
    assert top.st_ino == (await st(fs, f"{NODE}/x/y/again.txt")).st_ino
    assert await fs.read(f"{NODE}/top.txt") == b"deep\n"
    # two names of one file in one folder list as two entries with distinct offsets
    offsets = [o for _n, _c, o in fs.ops.tree.listdir(await fs.ino(f"{NODE}/x/y"), 0)]
    assert len(offsets) == len(set(offsets)) == 2


async def test_rename_keeps_the_link(m: Mounted):
    fs = m.fs
    await fs.mkdir(f"{NODE}/sub")
    await fs.write(f"{NODE}/a", b"A")
    await ln(fs, f"{NODE}/a", f"{NODE}/b")
    await fs.rename(f"{NODE}/b", f"{NODE}/sub/b2")  # a link name
    await fs.rename(f"{NODE}/a", f"{NODE}/sub/a2")  # the holder's name
    await fs.rename(f"{NODE}/sub", f"{NODE}/dir")  # their folder
    assert sorted(await fs.listdir(f"{NODE}/dir")) == ["a2", "b2"]
    a2, b2 = await st(fs, f"{NODE}/dir/a2"), await st(fs, f"{NODE}/dir/b2")
    assert a2.st_ino == b2.st_ino and a2.st_nlink == 2
    # mv over another name of the same file changes nothing (POSIX)
    await fs.rename(f"{NODE}/dir/a2", f"{NODE}/dir/b2")
    assert sorted(await fs.listdir(f"{NODE}/dir")) == ["a2", "b2"]
    # a file renamed over one name replaces that name only
    await fs.write(f"{NODE}/new", b"N")
    await fs.rename(f"{NODE}/new", f"{NODE}/dir/a2")
    assert await fs.read(f"{NODE}/dir/a2") == b"N"
    assert (await st(fs, f"{NODE}/dir/b2")).st_nlink == 1
    assert await fs.read(f"{NODE}/dir/b2") == b"A"
    m.remount()
    assert await m.fs.read(f"{NODE}/dir/b2") == b"A"
    assert (await st(m.fs, f"{NODE}/dir/b2")).st_nlink == 1


async def test_soft_delete_and_restore_keep_the_links(m: Mounted):
    fs = m.fs
    await fs.mkdir(f"{NODE}/sub")
    await fs.write(f"{NODE}/a", b"kept\n")
    await ln(fs, f"{NODE}/a", f"{NODE}/sub/b")
    await fs.rm_r(NODE)
    trashed = "user/default/.trash/preferences/files"
    assert (await st(fs, f"{trashed}/a")).st_nlink == 2
    assert await fs.read(f"{trashed}/sub/b") == b"kept\n"
    m.remount()
    fs = m.fs
    await fs.rename(trashed, NODE)
    a, b = await st(fs, f"{NODE}/a"), await st(fs, f"{NODE}/sub/b")
    assert a.st_ino == b.st_ino and a.st_nlink == 2
    await fs.write(f"{NODE}/sub/b", b"changed\n")
    assert await fs.read(f"{NODE}/a") == b"changed\n"
    m.remount()
    assert await m.fs.read(f"{NODE}/a") == b"changed\n"
    assert (await st(m.fs, f"{NODE}/a")).st_nlink == 2


async def test_a_move_to_another_node_leaves_no_deleted_row_across_nodes(m: Mounted):
    """What was deleted under a folder or beside a file that moves to another node: a
    deleted file goes along with its folder, and a deleted hard link that would name a
    file of the other node goes. Before, the rows stayed with the first node (under a
    folder of the second, or linking to its file): fsck found the store damaged and every
    later mount was read-only."""
    fs = m.fs
    await fs.mkdir(OTHER)
    await fs.write(f"{OTHER}/L2.md", b"Another node.\n")
    await fs.mkdir(f"{NODE}/d")
    await fs.write(f"{NODE}/d/gone", b"deleted in the folder\n")
    await fs.unlink(f"{NODE}/d/gone")
    await fs.write(f"{NODE}/d/kept", b"kept\n")
    await fs.write(f"{NODE}/out", b"linked from the folder\n")
    await ln(fs, f"{NODE}/out", f"{NODE}/d/link-out")
    await fs.unlink(f"{NODE}/d/link-out")  # a deleted link in the folder to a file outside
    await fs.rename(f"{NODE}/d", f"{OTHER}/d")
    await fs.write(f"{NODE}/f", b"a file with a deleted second name\n")
    await ln(fs, f"{NODE}/f", f"{NODE}/g")
    await fs.unlink(f"{NODE}/g")
    await fs.rename(f"{NODE}/f", f"{OTHER}/f")
    assert check_store(m.memory.store) == []
    assert sorted(await fs.listdir(f"{OTHER}/d")) == ["kept"]
    assert await fs.read(f"{OTHER}/f") == b"a file with a deleted second name\n"
    assert await fs.read(f"{NODE}/out") == b"linked from the folder\n"
    # the folder's deleted file is the other node's now: it comes back with it
    await fs.rm_r(OTHER)
    await fs.rename("user/default/.trash/preferences/other", OTHER)
    assert sorted(await fs.listdir(f"{OTHER}/d")) == ["gone", "kept"]
    m.remount()
    assert await m.fs.read(f"{OTHER}/d/gone") == b"deleted in the folder\n"


async def test_links_to_what_is_not_an_attachment_file_are_refused(m: Mounted):
    fs = m.fs
    await fs.mkdir(OTHER)
    await fs.write(f"{OTHER}/L2.md", b"Another node.\n")
    await fs.write(f"{NODE}/a", b"A")
    await fs.mkdir(f"{NODE}/dir")
    p, _ = await fs.parent(f"{NODE}/sym")
    await fs.ops.symlink(p, b"sym", b"a", fs.ctx)
    await fs.unlink(f"{NODE}/L1.md")
    cases = [
        (f"{NODE}/L2.md", f"{NODE}/tier", errno.EPERM),
        (f"{NODE}/meta.yaml", f"{NODE}/meta", errno.EPERM),
        (f"{NODE}/.history/v1.md", f"{NODE}/v1", errno.EPERM),
        (f"{NODE}/a", f"{NODE}/L1.md", errno.EPERM),  # a tier's name (hidden by rm)
        (f"{NODE}/a", f"{NODE}/L2.md", errno.EEXIST),
        (f"{NODE}/a", f"{OTHER}/a", errno.EXDEV),
        (f"{NODE}/a", "user/default/preferences/a.md", errno.EXDEV),
        (f"{NODE}/a", f"{NODE}/.history/a", errno.EXDEV),
    ]
    for src, dst, code in cases:
        assert await fs.errno_of(ln(fs, src, dst)) == code, (src, dst)
        if code != errno.EEXIST:  # every refusal has a .status line saying why
            last = m.memory.refusals[-1]
            assert (last.errno, last.path) == (code, f"link {src}"), (last, src, dst)
    reasons = [r.reason for r in m.memory.refusals]
    assert "hard links are made only of files kept inside a node" in reasons[0]
    assert "hard links stay inside the node" in reasons[5]
    # a name of a hard-linked file moves only within its node: mv copies it elsewhere
    await ln(fs, f"{NODE}/a", f"{NODE}/dir/b")
    assert await fs.errno_of(fs.rename(f"{NODE}/a", f"{OTHER}/a")) == errno.EXDEV
    assert await fs.errno_of(fs.rename(f"{NODE}/dir", f"{OTHER}/dir")) == errno.EXDEV
    assert await fs.errno_of(fs.rename(f"{NODE}/a", f"{NODE}/L1.md")) == errno.EXDEV
    assert await fs.errno_of(fs.rename(f"{NODE}/a", f"{NODE}/a~")) == errno.EXDEV
    assert (await st(fs, f"{NODE}/dir/b")).st_nlink == 2
    assert not await fs.exists(f"{OTHER}/a")


async def test_symlinks_fifos_and_sockets_take_hard_links_too(m: Mounted):
    """`ln` links a symlink itself (-P, the default on Linux), as any filesystem does."""
    fs = m.fs
    node = await fs.ino(NODE)
    await fs.ops.symlink(node, b"sym", b"L2.md", fs.ctx)
    await fs.ops.mknod(node, b"fifo", stat.S_IFIFO | 0o640, 0, fs.ctx)
    await fs.mkdir(f"{NODE}/sub")
    await ln(fs, f"{NODE}/sym", f"{NODE}/sub/sym2")
    await ln(fs, f"{NODE}/fifo", f"{NODE}/fifo2")
    for _ in range(2):
        s1, s2 = await st(fs, f"{NODE}/sym"), await st(fs, f"{NODE}/sub/sym2")
        assert s1.st_ino == s2.st_ino and s1.st_nlink == 2 and stat.S_ISLNK(s2.st_mode)
        assert await m.fs.ops.readlink(await fs.ino(f"{NODE}/sub/sym2"), fs.ctx) == b"L2.md"
        f1, f2 = await st(fs, f"{NODE}/fifo"), await st(fs, f"{NODE}/fifo2")
        assert f1.st_ino == f2.st_ino and f2.st_nlink == 2 and stat.S_ISFIFO(f2.st_mode)
        assert f2.st_mode & 0o777 == 0o640
        m.remount()
        fs = m.fs
    await fs.unlink(f"{NODE}/sym")
    assert (await st(fs, f"{NODE}/sub/sym2")).st_nlink == 1


async def test_an_open_file_keeps_its_bytes_for_every_name(m: Mounted):
    fs = m.fs
    fi, entry = await fs.ops.create(
        await fs.ino(NODE), b"open.txt", 0o644, os.O_RDWR | os.O_CREAT, fs.ctx
    )
    await fs.ops.write(fi.fh, 0, b"not yet closed")
    await ln(fs, f"{NODE}/open.txt", f"{NODE}/other.txt")
    await fs.unlink(f"{NODE}/open.txt")
    assert (await fs.ops.getattr(entry.st_ino, fs.ctx)).st_nlink == 1
    await fs.ops.flush(fi.fh)
    await fs.ops.release(fi.fh)
    m.remount()
    assert await m.fs.read(f"{NODE}/other.txt") == b"not yet closed"


def test_a_version_4_store_gets_link_of(tmp_path: Path):
    db = tmp_path / "contextfs.duckdb"
    Store(db).close()
    con = duckdb.connect(str(db))
    drop_live_name_indexes(con)  # DuckDB alters no table an index depends on
    con.execute("ALTER TABLE attachments DROP COLUMN link_of")
    con.execute("UPDATE store_meta SET value = '4' WHERE key = 'schema_version'")
    con.close()
    store = Store(db)
    try:
        assert SCHEMA_VERSION >= 5  # later steps leave link_of as it is
        cols = [
            r[0]
            for r in store.con.execute(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_name = 'attachments'"
            ).fetchall()
        ]
        assert cols[-1] == "link_of"
        assert check_store(store) == []
    finally:
        store.close()


async def test_fsck_finds_a_broken_link(m: Mounted):
    fs = m.fs
    await fs.write(f"{NODE}/a", b"A")
    await ln(fs, f"{NODE}/a", f"{NODE}/b")
    con = m.memory.store.con
    con.execute("UPDATE attachments SET deleted_at = 1 WHERE name = 'a'")
    assert any("links_consistent" in p for p in check_store(m.memory.store))
    con.execute("UPDATE attachments SET deleted_at = NULL WHERE name = 'a'")
    assert check_store(m.memory.store) == []
