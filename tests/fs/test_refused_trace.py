"""A write refused at close leaves `NAME.refused` beside where it was written: the reason,
then the bytes, until it is removed (issue 23, item 6). The errno and the `.status` line
stay as they were; the trace is never memory and survives a remount."""

from __future__ import annotations

import errno
import os
import stat

import pytest

from contextfs.errors import InvalidInput
from contextfs.fs.build import build_tree
from contextfs.fs.ops import Operations
from contextfs.memory.service import Memory
from tests.fs.conftest import FS

U = "user/default"
T = f"{U}/preferences"
BAD = b"---\nbogus_field: 1\n---\nhello\n"


def remount(memory: Memory) -> tuple[Memory, FS]:
    again = Memory(memory.store, memory.types, data_dir=memory.data_dir)
    assert again.routing.recover_drops() == [], "a trace is never routed"
    return again, FS(Operations(build_tree(again, status=lambda: "status\n")))


async def test_a_refused_drop_leaves_its_trace_until_removed(fs: FS, memory: Memory):
    code = await fs.errno_of(fs.write(f"{T}/colour.md", BAD))
    assert code == errno.EINVAL, "close() still answers the errno"
    r = memory.refusals[-1]
    assert r.path == f"{T}/colour.md" and "bogus_field" in r.reason and r.kept_at
    assert await fs.listdir(T) == ["colour.md.refused"]
    trace = await fs.read(f"{T}/colour.md.refused")
    head, _, rest = trace.partition(b" -->\n")
    assert b"bogus_field" in head and b"colour.md" in head
    assert rest == BAD, "the bytes as written follow the note"
    assert not list(memory.walk(types=("preference",))), "not a memory"

    memory, fs = remount(memory)
    assert await fs.listdir(T) == ["colour.md.refused"], "kept across a remount"
    assert await fs.read(f"{T}/colour.md.refused") == trace

    # fixed and renamed back: routed without the note
    fixed = trace.replace(b"bogus_field: 1", b"value: blue")
    await fs.write(f"{T}/colour.md.refused", fixed)
    await fs.rename(f"{T}/colour.md.refused", f"{T}/colour.md")
    assert await fs.listdir(T) == ["colour"]
    l2 = await fs.text(f"{T}/colour/L2.md")
    assert "hello" in l2 and "contextfs refused" not in l2
    memory, fs = remount(memory)
    assert await fs.listdir(T) == ["colour"], "the trace left with the rename"


async def test_rm_removes_a_trace_for_good(fs: FS, memory: Memory):
    await fs.errno_of(fs.write(f"{T}/colour.md", BAD))
    await fs.unlink(f"{T}/colour.md.refused")
    assert await fs.listdir(T) == []
    memory, fs = remount(memory)
    assert await fs.listdir(T) == []
    assert not [k for k in memory.access if k[0] == "parked"], "its access row went too"


async def test_a_trace_keeps_the_writers_owner_and_mode(fs: FS, memory: Memory):
    # another user's file (the tree is called as the adapter calls it for that caller)
    tree = fs.ops.tree
    h = await tree.create(await fs.ino(T), "private.md", 0o600, os.O_WRONLY, 4242, 4343)
    tree.write(h.fh, 0, BAD)
    with pytest.raises(InvalidInput):
        await tree.flush(h.fh)
    tree.release(h.fh)
    for _ in range(2):
        a = await fs.ops.getattr(await fs.ino(f"{T}/private.md.refused"), fs.ctx)
        assert (stat.S_IMODE(a.st_mode), a.st_uid, a.st_gid) == (0o600, 4242, 4343)
        memory, fs = remount(memory)


async def test_a_later_refusal_replaces_the_trace_and_a_valid_write_leaves_none(fs: FS, memory):
    await fs.errno_of(fs.write(f"{T}/colour.md", BAD))
    await fs.errno_of(fs.write(f"{T}/colour.md", b"---\nother_bad: 2\n---\nagain\n"))
    assert await fs.listdir(T) == ["colour.md.refused"]
    assert b"other_bad" in await fs.read(f"{T}/colour.md.refused")
    await fs.write(f"{T}/editor.md", b"---\nvalue: vim\n---\nvim please\n")
    assert await fs.listdir(T) == ["colour.md.refused", "editor"]
    assert "editor.md.refused" not in await fs.listdir(f"{T}/editor")


async def test_a_refused_tier_write_leaves_a_trace_in_its_node(fs: FS, memory: Memory):
    await fs.write(f"{T}/editor.md", b"vim please\n")
    code = await fs.errno_of(fs.write(f"{T}/editor/L2.md", BAD))
    assert code == errno.EINVAL
    assert "vim please" in await fs.text(f"{T}/editor/L2.md"), "the stored text shows"
    assert "L2.md.refused" in await fs.listdir(f"{T}/editor")
    trace = await fs.read(f"{T}/editor/L2.md.refused")
    assert b"bogus_field" in trace.partition(b" -->\n")[0]
    assert trace.endswith(BAD)
    memory, fs = remount(memory)
    assert await fs.read(f"{T}/editor/L2.md.refused") == trace
    n = memory.live_node(("user", "default"), memory.types["preference"], "editor")
    assert n is not None and n.version == 1, "no version was made of it"
    # fixed and renamed over L2.md: a save without the note
    fixed = trace.replace(b"bogus_field: 1\n", b"")
    await fs.write(f"{T}/editor/L2.md.refused", fixed)
    await fs.rename(f"{T}/editor/L2.md.refused", f"{T}/editor/L2.md")
    l2 = await fs.text(f"{T}/editor/L2.md")
    assert "hello" in l2 and "contextfs refused" not in l2
    assert "L2.md.refused" not in await fs.listdir(f"{T}/editor")


async def test_a_refused_drop_into_a_singleton_leaves_its_trace(fs: FS, memory: Memory):
    code = await fs.errno_of(fs.write(f"{U}/profile/me.md", BAD))
    assert code == errno.EINVAL
    assert "me.md.refused" in await fs.listdir(f"{U}/profile")
    memory, fs = remount(memory)
    assert (await fs.read(f"{U}/profile/me.md.refused")).endswith(BAD)
