"""Concurrent writers of one tier: every version is a state one of them saved (the whole
content a handle held when it was closed), never another open's truncation."""

from __future__ import annotations

import os

N = "user/default/preferences/editor"


async def _open(fs, path: str, flags: int) -> int:
    return (await fs.ops.open(await fs.ino(path), flags, fs.ctx)).fh


async def _close(fs, fh: int) -> None:
    await fs.ops.flush(fh)
    await fs.ops.release(fh)


async def test_an_o_trunc_open_does_not_empty_another_handles_save(fs, memory):
    await fs.mkdir(N)
    await fs.write(f"{N}/L2.md", b"first\n")
    w = os.O_WRONLY | os.O_TRUNC
    a = await _open(fs, f"{N}/L2.md", w)
    await fs.ops.write(a, 0, b"from a\n")
    b = await _open(fs, f"{N}/L2.md", w)  # truncates, before a's close
    await _close(fs, a)
    assert await fs.text(f"{N}/L2.md") == "from a\n", "a saved its own content"
    await fs.ops.write(b, 0, b"from b\n")
    await _close(fs, b)
    assert await fs.text(f"{N}/L2.md") == "from b\n"
    texts = [await fs.text(f"{N}/.history/{v}") for v in await fs.listdir(f"{N}/.history")]
    assert texts == ["first\n", "from a\n", "from b\n"], texts


async def test_a_reader_sees_the_stored_text_while_a_writer_is_open(fs, memory):
    await fs.mkdir(N)
    await fs.write(f"{N}/L2.md", b"stored\n")
    a = await _open(fs, f"{N}/L2.md", os.O_RDWR | os.O_TRUNC)
    await fs.ops.write(a, 0, b"half")
    assert await fs.text(f"{N}/L2.md") == "stored\n", "no one saved 'half' yet"
    assert await fs.ops.read(a, 0, 100) == b"half", "the writer reads its own bytes"
    await fs.ops.write(a, 4, b" done\n")
    await _close(fs, a)
    assert await fs.text(f"{N}/L2.md") == "half done\n"


async def test_truncate_only_open_is_a_save_of_empty(fs, memory):
    """`: > L2.md` while a reader holds the file open: the empty file was saved."""
    await fs.mkdir(N)
    await fs.write(f"{N}/L2.md", b"stored\n")
    r = await _open(fs, f"{N}/L2.md", os.O_RDONLY)
    t = await _open(fs, f"{N}/L2.md", os.O_WRONLY | os.O_TRUNC)
    await _close(fs, t)
    assert await fs.text(f"{N}/L2.md") == ""
    await _close(fs, r)
    assert await fs.listdir(f"{N}/.history") == ["v1.md", "v2.md"]


async def test_concurrent_appends_lose_nothing(fs, memory):
    await fs.mkdir(N)
    await fs.write(f"{N}/L2.md", b"start\n")
    a = await _open(fs, f"{N}/L2.md", os.O_WRONLY | os.O_APPEND)
    b = await _open(fs, f"{N}/L2.md", os.O_WRONLY | os.O_APPEND)
    await fs.ops.write(a, 0, b"a1\n")
    await fs.ops.write(b, 0, b"b1\n")
    await _close(fs, a)
    await fs.ops.write(b, 0, b"b2\n")
    await _close(fs, b)
    assert await fs.text(f"{N}/L2.md") == "start\na1\nb1\nb2\n"
