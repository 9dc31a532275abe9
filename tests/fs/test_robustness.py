"""Robustness and POSIX findings (issue 11), at the handler level over a real store:
names over 255 bytes on every lookup-based call, st_nlink of a file unlinked while open,
undecodable question names, bounded query state, statfs, symlinks renamed where memory
is made, refusals that must reach the shell, many files in one node."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pyfuse3
import pytest
import trio

from contextfs.memory.service import Memory
from tests.fs.conftest import FS
from tests.fs.test_virtual_dirs import Mount

LONG = b"n" * 256


@pytest.fixture
async def searching(memory: Memory, tmp_path: Path, nursery: trio.Nursery) -> Mount:
    m = Mount(memory, tmp_path, search=True)
    assert m.indexer is not None
    nursery.start_soon(m.indexer.run)
    return m


async def _node(fs: FS) -> int:
    await fs.mkdir("user/default/preferences/editor")
    await fs.write("user/default/preferences/editor/L2.md", b"vim\n")
    return await fs.ino("user/default/preferences/editor")


async def test_names_over_255_bytes_are_enametoolong_on_lookup(fs: FS):
    node = await _node(fs)
    for parent in (node, pyfuse3.ROOT_INODE, await fs.ino("user/default/preferences")):
        assert await fs.errno_of(fs.ops.lookup(parent, LONG, fs.ctx)) == errno.ENAMETOOLONG
    # the calls the kernel sends without a lookup check the name before anything else
    ino = await fs.ino("user/default/preferences/editor/L2.md")
    assert await fs.errno_of(fs.ops.link(ino, node, LONG, fs.ctx)) == errno.ENAMETOOLONG
    fifo = 0o010644
    assert await fs.errno_of(fs.ops.mknod(node, LONG, fifo, 0, fs.ctx)) == errno.ENAMETOOLONG
    # 255 bytes is still a name
    assert await fs.errno_of(fs.ops.lookup(node, b"n" * 255, fs.ctx)) == errno.ENOENT


async def test_an_open_file_unlinked_has_nlink_0(fs: FS):
    node = await _node(fs)
    fi, entry = await fs.ops.create(node, b"notes.txt", 0o644, os.O_WRONLY | os.O_CREAT, fs.ctx)
    assert (await fs.ops.getattr(entry.st_ino, fs.ctx)).st_nlink == 1
    await fs.ops.write(fi.fh, 0, b"abc")
    await fs.unlink("user/default/preferences/editor/notes.txt")
    assert (await fs.ops.getattr(entry.st_ino, fs.ctx)).st_nlink == 0  # fstat after unlink
    await fs.ops.flush(fi.fh)
    await fs.ops.release(fi.fh)
    # a removed directory someone still stands in
    await fs.mkdir("user/default/preferences/editor/sub")
    sub = await fs.ino("user/default/preferences/editor/sub")
    await fs.rmdir("user/default/preferences/editor/sub")
    assert (await fs.ops.getattr(sub, fs.ctx)).st_nlink == 0
    assert (await fs.ops.getattr(node, fs.ctx)).st_nlink == 3  # ., its name, .history


async def test_a_question_that_is_not_utf8_is_einval_with_a_status_line(searching: Mount):
    fs = searching.fs
    await _node(fs)
    qroot = await fs.ino(".query")
    for name in (b"caf\xe9 au lait", b"@k=2\xff"):
        assert await fs.errno_of(fs.ops.lookup(qroot, name, fs.ctx)) == errno.EINVAL
    scoped = await fs.ino("user/default/.query")
    assert await fs.errno_of(fs.ops.lookup(scoped, b"\xff\xfe", fs.ctx)) == errno.EINVAL
    last = fs.ops.tree.memory.refusals[-1]
    assert last.errno == errno.EINVAL
    assert "must be UTF-8" in last.reason and "\\xff" in last.reason
    last.path.encode("utf-8")  # .status can show it
    # the same question percent-encoded is asked
    assert await fs.exists(".query/caf%E9 au lait/_context.md")


async def test_distinct_questions_keep_a_bounded_tree(searching: Mount):
    fs = searching.fs
    tree = fs.ops.tree
    await _node(fs)
    tree.query.kept = 8
    qroot = await fs.ino(".query")
    opened = None
    before = len(tree.table.inodes)
    for i in range(60):
        parent = qroot if i % 3 else await fs.ino(f".query/@k={1 + i % 5}")
        q = await fs.ops.lookup(parent, f"which editor {i}".encode(), fs.ctx)
        ctx = await fs.ops.lookup(q.st_ino, b"_context.md", fs.ctx)
        if i == 0:
            opened = await fs.ops.open(ctx.st_ino, os.O_RDONLY, fs.ctx)
            first = await fs.ops.read(opened.fh, 0, 1 << 20)
        # the kernel forgets what it no longer caches
        await fs.ops.forget([(q.st_ino, 1), (ctx.st_ino, 1)])
    assert len(tree.query._recent) <= 8
    # what is left beyond the start: the kept directories with their entries, and the open
    # file of the first question (its directory went, its bytes stay while it is open)
    assert len(tree.table.inodes) - before < 8 * 16
    assert opened is not None
    assert await fs.ops.read(opened.fh, 0, 1 << 20) == first
    held = tree.table.inodes[fs.ops.tree.table.handles[opened.fh].inode.ino]
    assert held.parent is None and (await fs.ops.getattr(held.ino, fs.ctx)).st_nlink == 0
    await fs.ops.release(opened.fh)
    assert held.ino not in tree.table.inodes
    # a question that went is asked again
    assert b"which editor 0" in await fs.read(".query/which editor 0/_context.md")
    # without forget (the kernel holds every inode), the answers' bytes still go
    tree.query.kept = 2
    held, questions = [], []
    for i in range(10):
        q = await fs.ops.lookup(qroot, f"held {i}".encode(), fs.ctx)
        questions.append(q.st_ino)
        held.append((await fs.ops.lookup(q.st_ino, b"_results.json", fs.ctx)).st_ino)
    assert [tree.table.inodes[ino].data is None for ino in held] == [True] * 8 + [False] * 2
    # a lookup in a question's directory that went answers ENOENT, as in a removed one
    lookup = fs.ops.lookup(questions[0], b"_results.json", fs.ctx)
    assert await fs.errno_of(lookup) == errno.ENOENT


async def test_statfs_is_the_data_dirs_filesystem(fs: FS, tmp_path: Path):
    s = await fs.ops.statfs(fs.ctx)
    v = os.statvfs(tmp_path)  # the memory fixture's data dir
    assert (s.f_bsize, s.f_frsize, s.f_blocks, s.f_files) == (
        v.f_bsize,
        v.f_frsize,
        v.f_blocks,
        v.f_files,
    )
    assert abs(s.f_bavail - v.f_bavail) < v.f_blocks // 100 + 1024
    assert abs(s.f_bfree - v.f_bfree) < v.f_blocks // 100 + 1024
    assert s.f_namemax == 255


@pytest.fixture
def plain(memory: Memory, tmp_path: Path) -> Mount:
    return Mount(memory, tmp_path, search=False)


async def test_a_symlink_never_becomes_an_empty_memory(plain: Mount, memory: Memory):
    fs = plain.fs
    node = await _node(fs)
    await fs.ops.symlink(node, b"link.md", b"L2.md", fs.ctx)
    nodes, items = len(memory.nodes), len(plain.intake.items)
    src = "user/default/preferences/editor/link.md"
    for dst in (
        ".inbox/link.md",
        "user/default/.inbox/notes.md",
        "user/default/preferences/vim.md",
        "user/default/profile/about.md",
        "user/default/profile/L2.md",
        "user/default/preferences/editor/L2.md",
    ):
        assert await fs.errno_of(fs.rename(src, dst)) == errno.EPERM, dst
        assert memory.refusals[-1].errno == errno.EPERM
        assert "cannot become a memory" in memory.refusals[-1].reason
    assert (len(memory.nodes), len(plain.intake.items)) == (nodes, items)
    assert await fs.ops.readlink(await fs.ino(src), fs.ctx) == b"L2.md"  # still there
    # elsewhere in a node it moves as any attachment
    await fs.rename(src, "user/default/preferences/editor/link2.md")
    assert await fs.ino("user/default/preferences/editor/link2.md")


async def _cp(fs: FS, path: str, data: bytes) -> int:
    """What cp does: create, write, close; the errno close() answers (0 if none)."""
    p, name = await fs.parent(path)
    fi, _ = await fs.ops.create(p, name, 0o644, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, fs.ctx)
    try:
        await fs.ops.write(fi.fh, 0, data)
        return await fs.errno_of(fs.ops.flush(fi.fh))
    finally:
        await fs.ops.release(fi.fh)


async def test_inbox_refusals_reach_close(plain: Mount, memory: Memory):
    fs = plain.fs
    secret = b"OPENAI_API_KEY=sk-proj-0123456789abcdefghijklmnopqrstuvwxyzAB\n"
    assert await _cp(fs, ".inbox/.env", secret) == errno.EACCES
    assert await _cp(fs, ".inbox/memo.m4a", b"\x00\x00\x00 ftypM4A ") == errno.EOPNOTSUPP
    # media the gates take close with 0, even damaged: the report says what was decided
    assert await _cp(fs, ".inbox/photo.png", b"\x89PNG....") == 0
    assert await _cp(fs, "user/default/.inbox/paper.pdf", b"%PDF-1.4") == errno.EOPNOTSUPP
    assert await _cp(fs, ".inbox/notes.md", b"I like green tea.\n") == 0
    reasons = [(r.errno, r.path, r.reason) for r in memory.refusals]
    assert reasons[0][:2] == (errno.EACCES, ".inbox/.env")
    assert "see .env.report.md" in reasons[0][2]
    assert [r[0] for r in reasons] == [errno.EACCES, errno.EOPNOTSUPP, errno.EOPNOTSUPP]
    # what was refused is still shown with its report; a secret store without its bytes
    names = await fs.listdir(".inbox")
    assert {".env", ".env.report.md", "memo.m4a", "memo.m4a.report.md"} <= set(names)
    assert await fs.read(".inbox/.env") == b""
    assert await fs.read(".inbox/memo.m4a") == b"\x00\x00\x00 ftypM4A "
    assert await fs.read(".inbox/photo.png") == b"\x89PNG...."


async def test_refused_renames_answer_errnos_mv_reports_truly(plain: Mount, memory: Memory):
    fs = plain.fs
    node = "user/default/preferences/editor"
    await _node(fs)
    await fs.write(f"{node}/tmp.txt", b"---\nnope: 1\n---\nbody\n")
    await fs.write(f"{node}/key.env", b"X=1\n")
    await fs.write(f"{node}/memo.m4a", b"\x00\x00")
    cases = [
        # invalid content or names: EPERM, never EINVAL ("cannot move … into itself")
        (f"{node}/tmp.txt", f"{node}/L2.md", errno.EPERM),
        (f"{node}/tmp.txt", "user/default/preferences/tea.md", errno.EPERM),
        (node, "user/default/preferences/Bad Name", errno.EPERM),
        (node, "user/default/events/editor", errno.EPERM),  # not a dated name
        # the inbox refuses by name before anything moves
        (f"{node}/key.env", ".inbox/.env", errno.EACCES),
        (f"{node}/memo.m4a", ".inbox/memo.m4a", errno.EOPNOTSUPP),
    ]
    for src, dst, expected in cases:
        n = len(memory.refusals)
        assert await fs.errno_of(fs.rename(src, dst)) == expected, (src, dst)
        assert await fs.exists(src), ("the source stays where it was", src, dst)
        assert memory.refusals[-1].errno == expected and len(memory.refusals) == n + 1
    assert "unknown field 'nope'" in memory.refusals[0].reason
    assert await fs.text(f"{node}/L2.md") == "vim\n"
    # the rename(2) EINVAL that is true stays EINVAL
    await fs.mkdir(f"{node}/dir")
    await fs.mkdir(f"{node}/dir/sub")
    assert await fs.errno_of(fs.rename(f"{node}/dir", f"{node}/dir/sub/x")) == errno.EINVAL


async def test_fifos_and_sockets_are_attachments_devices_are_refused(fs: FS, memory: Memory):
    node = await _node(fs)
    ifo, sock, chr_ = 0o010640, 0o140755, 0o020600
    e = await fs.ops.mknod(node, b"pipe", ifo, 0, fs.ctx)
    assert stat.S_ISFIFO(e.st_mode) and stat.S_IMODE(e.st_mode) == 0o640 and e.st_size == 0
    s = await fs.ops.mknod(node, b"sock", sock, 0, fs.ctx)
    assert stat.S_ISSOCK(s.st_mode)
    assert await fs.errno_of(fs.ops.mknod(node, b"pipe", ifo, 0, fs.ctx)) == errno.EEXIST
    assert await fs.errno_of(fs.ops.mknod(node, b"null", chr_, 0, fs.ctx)) == errno.EPERM
    assert "device nodes" in memory.refusals[-1].reason
    # not outside a node, and never a memory
    prefs = await fs.ino("user/default/preferences")
    assert await fs.errno_of(fs.ops.mknod(prefs, b"p", ifo, 0, fs.ctx)) == errno.EPERM
    p = "user/default/preferences/editor/pipe"
    assert await fs.errno_of(fs.rename(p, "user/default/preferences/x.md")) == errno.EPERM
    # renamed, listed, removed like any attachment; kept in the store
    await fs.rename(p, "user/default/preferences/editor/fifo")
    assert {"fifo", "sock"} <= set(await fs.listdir("user/default/preferences/editor"))
    kinds = sorted(a.kind for a in memory.attachments.values() if a.deleted_at is None)
    assert kinds == ["fifo", "socket"]
    await fs.unlink("user/default/preferences/editor/sock")
    kinds = sorted(a.kind for a in memory.attachments.values() if a.deleted_at is None)
    assert kinds == ["fifo"]
