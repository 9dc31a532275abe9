"""Attachments stored in 64 KiB chunks: offset writes, truncation, holes, renames and
remounts through the Operations handlers, each compared with a native file that went
through the same calls; and secrets written by offset writes into big files.

The store is real (DuckDB in tmp_path) and so is the redactor; a remount closes the store
and builds the memory, the tree and the handlers again from it.
"""

from __future__ import annotations

import errno
import hashlib
import os
import random
from pathlib import Path
from types import SimpleNamespace

import pyfuse3
import pytest

from contextfs.fs.build import build_tree
from contextfs.fs.ops import Operations
from contextfs.memory.redact import Redactor
from contextfs.memory.service import Memory
from contextfs.store import Store
from contextfs.store.fsck import check_store
from contextfs.store.schema import CHUNK_SIZE
from tests.fs.conftest import FS

NODE = "user/default/preferences/files"
CHUNK = CHUNK_SIZE
AWS_KEY = b"AKIAIOSFODNN7EXAMPLE"
OPENAI_KEY = b"sk-proj4Tq9ZmX2vLw8RkP1nYb6HdJc3SfGa7Ue5Vt0"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def text_blob(size: int, seed: int = 1) -> bytes:
    """Lower-case prose: no secret, and no run a key could grow out of."""
    rnd = random.Random(seed)
    words = b"the of river stone quiet lamp north table under seven".split()
    out = bytearray()
    while len(out) < size:
        out += rnd.choice(words) + (b"\n" if rnd.random() < 0.1 else b" ")
    return bytes(out[:size])


class Mounted:
    """A store in tmp_path seen through the handlers; remount() starts them again."""

    def __init__(self, tmp_path: Path, types) -> None:
        self.tmp_path = tmp_path
        self.db = tmp_path / "contextfs.duckdb"
        self.types = types
        self.fs: FS
        self._open()

    def _open(self) -> None:
        memory = Memory(Store(self.db), self.types, data_dir=self.tmp_path, redactor=Redactor())
        if ("user", "default") not in memory.owners:
            memory.create_owner("user", "default")
        self.memory = memory
        self.fs = FS(Operations(build_tree(memory, status=lambda: "status\n")))

    def remount(self) -> None:
        self.memory.attachment_store.flush_touched()
        self.memory.persist_pending()
        self.memory.store.close()
        assert self.fsck() == []
        self._open()

    def fsck(self) -> list[str]:
        store = Store(self.db, read_only=True)
        try:
            return check_store(store)
        finally:
            store.close()

    def close(self) -> None:
        self.memory.store.close()

    def chunks(self, name: str) -> list[tuple[int, int, int]]:
        """(idx, length, rowid) of a stored file's chunks: rowid changes when rewritten."""
        att = next(
            a for a in self.memory.attachments.values() if a.name == name and a.deleted_at is None
        )
        return [
            tuple(r)
            for r in self.memory.store.con.execute(
                "SELECT c.idx, octet_length(b.data), c.rowid FROM attachment_chunks c "
                "JOIN blobs b ON b.hash = c.hash WHERE c.att_id = ? ORDER BY c.idx",
                [att.id],
            ).fetchall()
        ]


@pytest.fixture
def m(tmp_path: Path, types):
    (tmp_path / "store").mkdir()
    mounted = Mounted(tmp_path / "store", types)
    yield mounted
    mounted.close()
    assert mounted.fsck() == []


class Twin:
    """One file on ContextFS (through the handlers) and one on the local disk, driven by
    the same calls, so the native file is the expected result of every step."""

    def __init__(self, m: Mounted, native_dir: Path, path: str) -> None:
        self.m = m
        self.path = path
        self.native = native_dir / path.rsplit("/", 1)[-1]
        self.fd: int | None = None
        self.fh: int | None = None

    @property
    def fs(self) -> FS:
        return self.m.fs

    async def open(self, flags: int = os.O_RDWR) -> None:
        self.fd = os.open(self.native, flags | os.O_CREAT, 0o644)
        p, name = await self.fs.parent(self.path)
        try:
            ino = (await self.fs.ops.lookup(p, name, self.fs.ctx)).st_ino
            self.fh = (await self.fs.ops.open(ino, flags, self.fs.ctx)).fh
        except pyfuse3.FUSEError as exc:
            assert exc.errno == errno.ENOENT
            fi, _ = await self.fs.ops.create(p, name, 0o644, flags | os.O_CREAT, self.fs.ctx)
            self.fh = fi.fh

    async def pwrite(self, off: int, data: bytes) -> None:
        assert os.pwrite(self.fd, data, off) == len(data)
        assert await self.fs.ops.write(self.fh, off, data) == len(data)

    async def append(self, data: bytes) -> None:
        """A write on an O_APPEND descriptor: the offset is ignored, the end is used."""
        assert os.write(self.fd, data) == len(data)
        assert await self.fs.ops.write(self.fh, 0, data) == len(data)

    async def truncate(self, size: int) -> None:
        """ftruncate on the open descriptor, or `truncate -s` of the closed file."""
        if self.fd is not None:
            os.ftruncate(self.fd, size)
        else:
            os.truncate(self.native, size)
        attr = pyfuse3.EntryAttributes()
        attr.st_size = size
        # what the kernel's setattr request carries (pyfuse3 builds it only from C)
        fields = SimpleNamespace(
            update_size=True,
            update_mode=False,
            update_uid=False,
            update_gid=False,
            update_atime=False,
            update_mtime=False,
        )
        ino = await self.fs.ino(self.path)
        await self.fs.ops.setattr(ino, attr, fields, self.fh, self.fs.ctx)

    async def fsync(self) -> None:
        os.fsync(self.fd)
        await self.fs.ops.fsync(self.fh, False)

    async def close(self) -> None:
        os.close(self.fd)
        try:
            await self.fs.ops.flush(self.fh)
        finally:
            await self.fs.ops.release(self.fh)
        self.fd = self.fh = None

    async def contents(self) -> tuple[bytes, bytes]:
        """(native, contextfs), read through a fresh descriptor."""
        ino = await self.fs.ino(self.path)
        fi = await self.fs.ops.open(ino, os.O_RDONLY, self.fs.ctx)
        out = bytearray()
        try:
            while True:
                part = await self.fs.ops.read(fi.fh, len(out), 1 << 20)
                if not part:
                    break
                out += part
        finally:
            await self.fs.ops.release(fi.fh)
        return self.native.read_bytes(), bytes(out)

    async def same(self) -> None:
        native, ours = await self.contents()
        assert len(ours) == len(native)
        assert sha(ours) == sha(native)
        attr = await self.fs.ops.getattr(await self.fs.ino(self.path))
        assert attr.st_size == len(native)


@pytest.fixture
def twin(m: Mounted, tmp_path: Path):
    async def make(name: str) -> Twin:
        if not await m.fs.exists(NODE):
            await m.fs.mkdir(NODE)
            await m.fs.write(f"{NODE}/L2.md", b"Files kept next to this memory.\n")
        native = tmp_path / "native"
        native.mkdir(exist_ok=True)
        return Twin(m, native, f"{NODE}/{name}")

    return make


# ---- storage: only what changed, identical bytes after a remount ---------------------------


async def test_an_fsync_after_an_offset_write_rewrites_only_its_chunk(m, twin):
    t = await twin("big.bin")
    await t.open()
    await t.pwrite(0, os.urandom(1 << 20))
    await t.close()
    before = m.chunks("big.bin")
    assert [(i, n) for i, n, _r in before] == [(i, CHUNK) for i in range(16)]

    await t.open()
    await t.pwrite(500_000, os.urandom(4096))  # inside chunk 7
    await t.fsync()
    after = m.chunks("big.bin")
    rewritten = [i for (i, _n, r0), (_j, _k, r1) in zip(before, after, strict=True) if r0 != r1]
    assert rewritten == [500_000 // CHUNK]
    await t.pwrite(CHUNK * 3 - 10, os.urandom(20))  # across the 2/3 boundary
    await t.fsync()
    again = m.chunks("big.bin")
    assert [i for (i, _n, r0), (_j, _k, r1) in zip(after, again, strict=True) if r0 != r1] == [2, 3]
    await t.close()
    await t.same()
    m.remount()
    await t.same()


async def test_holes_truncation_and_appends_match_a_native_file(m, twin):
    t = await twin("sparse.bin")
    await t.open()
    await t.pwrite(0, b"head")
    await t.pwrite(3 * CHUNK + 5, b"tail")  # a hole over chunks 0..3 reads as zeros
    await t.fsync()
    native, ours = await t.contents()
    assert ours[4 : 3 * CHUNK + 5] == bytes(3 * CHUNK + 1)
    await t.truncate(CHUNK + 100)  # shrink inside chunk 1: chunks 2 and 3 go
    await t.fsync()
    assert [(i, n) for i, n, _r in m.chunks("sparse.bin")] == [(0, CHUNK), (1, 100)]
    await t.truncate(5 * CHUNK)  # grow: zeros, exactly five full chunks
    await t.close()
    await t.same()
    assert [(i, n) for i, n, _r in m.chunks("sparse.bin")] == [(i, CHUNK) for i in range(5)]

    await t.open(os.O_WRONLY | os.O_APPEND)
    await t.append(b"x" * (CHUNK + 7))
    await t.append(b"more")
    await t.close()
    await t.same()
    await t.open(os.O_WRONLY | os.O_TRUNC)  # `> file`: everything goes
    await t.pwrite(0, b"short")
    await t.close()
    assert [(i, n) for i, n, _r in m.chunks("sparse.bin")] == [(0, 5)]
    await t.open(os.O_WRONLY | os.O_TRUNC)
    await t.close()
    assert m.chunks("sparse.bin") == []
    await t.same()
    m.remount()
    await t.same()


async def test_truncating_a_closed_file_commits_at_once(m, twin):
    t = await twin("closed.bin")
    await t.open()
    await t.pwrite(0, os.urandom(3 * CHUNK + 1))
    await t.close()
    m.remount()  # nothing of it in memory
    await t.truncate(2 * CHUNK + 9)
    assert [(i, n) for i, n, _r in m.chunks("closed.bin")] == [(0, CHUNK), (1, CHUNK), (2, 9)]
    m.remount()
    await t.same()
    await t.truncate(0)
    assert m.chunks("closed.bin") == []
    m.remount()
    await t.same()


async def test_overwrite_in_place_across_chunk_boundaries_survives_remount(m, twin):
    t = await twin("patch.bin")
    await t.open()
    await t.pwrite(0, os.urandom(4 * CHUNK + 123))
    await t.close()
    m.remount()
    await t.open()
    for off in (CHUNK - 1, 2 * CHUNK - 2000, 3 * CHUNK, 4 * CHUNK + 100):
        await t.pwrite(off, os.urandom(4000))  # the last one also extends the file
        await t.fsync()
    await t.close()
    await t.same()
    m.remount()
    await t.same()


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_random_operations_match_a_native_file(m, twin, seed):
    """pwrite anywhere (also past the end), ftruncate both ways, O_APPEND, O_TRUNC, fsync
    and close at random; after every close and every remount the bytes are identical."""
    rnd = random.Random(seed)
    t = await twin(f"random-{seed}.bin")
    for _round in range(6):
        flags = rnd.choice(
            [os.O_RDWR, os.O_RDWR, os.O_WRONLY | os.O_APPEND, os.O_RDWR | os.O_TRUNC]
        )
        await t.open(flags)
        for _op in range(rnd.randint(1, 12)):
            r = rnd.random()
            size = t.native.stat().st_size
            if r < 0.55:
                n = rnd.choice([1, 100, 4096, CHUNK, CHUNK + 1, 3 * CHUNK])
                if flags & os.O_APPEND:
                    await t.append(rnd.randbytes(n))
                else:
                    await t.pwrite(rnd.randint(0, size + 2 * CHUNK), rnd.randbytes(n))
            elif r < 0.75:
                await t.truncate(rnd.randint(0, size + 2 * CHUNK))
            else:
                await t.fsync()
        await t.close()
        await t.same()
        if rnd.random() < 0.5:
            m.remount()
            await t.same()
    m.remount()
    await t.same()


async def test_renamed_attachment_keeps_its_bytes_and_takes_offset_writes(m, twin):
    t = await twin("a.bin")
    await t.open()
    await t.pwrite(0, os.urandom(2 * CHUNK + 10))
    await t.close()
    await m.fs.mkdir(f"{NODE}/sub")
    await m.fs.rename(f"{NODE}/a.bin", f"{NODE}/sub/b.bin")
    os.rename(t.native, t.native.with_name("b.bin"))
    t.path, t.native = f"{NODE}/sub/b.bin", t.native.with_name("b.bin")
    await t.same()
    await t.open()
    await t.pwrite(CHUNK + 5, b"after the rename")
    await t.fsync()
    await t.close()
    m.remount()
    assert not await m.fs.exists(f"{NODE}/a.bin")
    await t.same()


# ---- secrets written by offset writes ---------------------------------------------------------


@pytest.mark.parametrize("kind", ["text", "binary"])
async def test_a_secret_written_into_the_middle_of_a_big_attachment_is_redacted(m, twin, kind):
    t = await twin(f"big-{kind}.dat")
    base = text_blob(1 << 20) if kind == "text" else random.Random(7).randbytes(1 << 20)
    await t.open()
    await t.pwrite(0, base)
    await t.close()
    patch = bytearray(text_blob(4096, seed=2))
    secrets = b" key " + AWS_KEY + b" openai " + OPENAI_KEY + b" "
    patch[1000 : 1000 + len(secrets)] = secrets
    await t.open()
    await t.pwrite(500_000, bytes(patch))
    await t.fsync()
    _native, shown = await t.contents()  # still open: the writer sees what is stored
    await t.close()
    m.remount()
    _native, stored = await t.contents()
    for data in (shown, stored):
        assert AWS_KEY not in data and OPENAI_KEY not in data
        assert data[:500_000] == base[:500_000]
        assert data.endswith(base[500_000 + 4096 :])  # the tail moved, unchanged
        if kind == "text":
            assert b"[REDACTED:aws_access_key]" in data and b"[REDACTED:openai_key]" in data
        else:  # bytes that are not text keep their length: each secret gives way to as many
            assert len(data) == len(base)
            assert b"[REDACTED]" + b"*" * (len(AWS_KEY) - 10) in data
            assert b"[REDACTED:openai_key]" + b"*" * (len(OPENAI_KEY) - 21) in data
    assert shown == stored
    path = f"{NODE}/big-{kind}.dat"
    kinds = {
        k
        for p, k in m.memory.store.con.execute("SELECT path, kind FROM redactions").fetchall()
        if p == path
    }
    assert kinds == {"aws_access_key", "openai_key"}


@pytest.mark.parametrize("secret,kind", [(AWS_KEY, "aws_access_key"), (OPENAI_KEY, "openai_key")])
async def test_a_secret_split_across_a_chunk_boundary_is_redacted(m, twin, secret, kind):
    """Two writes on either side of the 64 KiB boundary, each fsynced on its own: the
    first half alone is no secret; the second completes it in the next chunk."""
    t = await twin("split.txt")
    base = text_blob(3 * CHUNK)
    await t.open()
    await t.pwrite(0, base)
    await t.close()
    head, rest = secret[:9], secret[9:]
    await t.open()
    await t.pwrite(CHUNK - len(head) - 1, b" " + head)
    await t.fsync()
    _n, first = await t.contents()
    assert b" " + head in first  # harmless on its own: kept as written
    await t.pwrite(CHUNK, rest + b" ")
    await t.fsync()
    await t.close()
    m.remount()
    _n, stored = await t.contents()
    assert secret not in stored
    assert stored[: CHUNK - len(head) - 1] == base[: CHUNK - len(head) - 1]
    assert stored[CHUNK - len(head) - 1 :].startswith(f" [REDACTED:{kind}] ".encode())
    assert stored.endswith(base[CHUNK + len(rest) + 1 :])
    assert m.memory.store.redaction_total() == 1


async def test_only_the_changed_bytes_and_a_margin_are_scanned(m, twin):
    """Bytes stored before are not scanned again, so a harmless offset write into a big
    file costs no whole-file scan: a pattern added to the redactor later applies to what
    is written from then on, and to stored bytes once a write comes near them."""
    t = await twin("old.txt")
    await t.open()
    await t.pwrite(0, text_blob(1 << 20))
    await t.pwrite(100, b" acme=424242 ")
    await t.close()
    later = Redactor({"acme_pin": r"acme=(?P<secret>\d{6})"})
    m.memory.redactor = m.memory.attachment_store.redactor = later  # each part holds its own
    await t.open()
    await t.pwrite(900_000, b" an unrelated edit ")
    await t.fsync()
    _n, stored = await t.contents()
    assert b" acme=424242 " in stored
    await t.pwrite(5000, b" acme=777777 ")  # near the old one: the whole file is redacted
    await t.close()
    _n, stored = await t.contents()
    assert b"acme=777777" not in stored and b"acme=424242" not in stored
    assert stored.count(b"acme=[REDACTED:acme_pin]") == 2


async def test_a_file_unlinked_while_open_keeps_what_it_held_when_removed(m, twin):
    """Its descriptor still reads what it writes, but those bytes are never stored: no
    name can show them again. Restoring the node brings the file back as removed."""
    t = await twin("scratch.bin")
    await t.open()
    await t.pwrite(0, b"as it was when removed")
    await t.close()
    await t.open()
    await m.fs.unlink(t.path)
    before = m.memory.store.con.execute("SELECT count(*) FROM attachment_chunks").fetchone()
    await m.fs.ops.write(t.fh, 0, b"written after the unlink" * 5000)
    await m.fs.ops.fsync(t.fh, False)
    assert (await m.fs.ops.read(t.fh, 0, 24)) == b"written after the unlink"
    await m.fs.ops.flush(t.fh)
    await m.fs.ops.release(t.fh)
    os.close(t.fd)
    assert m.memory.store.con.execute("SELECT count(*) FROM attachment_chunks").fetchone() == before
    await m.fs.rm_r(NODE)
    await m.fs.rename("user/default/.trash/preferences/files", NODE)
    m.remount()
    assert await m.fs.read(t.path) == b"as it was when removed"


# ---- a new file: row and bytes stored by one commit ------------------------------------------


def _commits(m: Mounted) -> list[list[tuple[str, str, str]]]:
    """What each transaction that commits from now on changed, as (kind, op, path)."""
    seen: list[list[tuple[str, str, str]]] = []
    m.memory.transactions.subscribe(lambda cs: seen.append([(c.kind, c.op, c.path) for c in cs]))
    return seen


def _stored(m: Mounted, name: str) -> tuple[int, int] | None:
    """(size, chunks) of the live row of an attachment named `name`, as stored now."""
    row = m.memory.store.con.execute(
        "SELECT a.size, (SELECT count(*) FROM attachment_chunks c WHERE c.att_id = a.id) "
        "FROM attachments a WHERE a.name = ? AND a.deleted_at IS NULL",
        [name],
    ).fetchone()
    return None if row is None else (row[0], row[1])


async def test_a_new_file_written_and_closed_is_stored_by_one_commit(m, twin):
    """cp of a small file: create, write, close. The row and its bytes are one
    transaction, published once as the file's creation with its bytes, and durable when
    close returns (a remount reads them)."""
    t = await twin("note.txt")
    commits = _commits(m)
    await t.open(os.O_WRONLY)
    assert _stored(m, "note.txt") is None  # not stored yet: nothing but create happened
    await t.pwrite(0, b"one small note\n")
    await t.close()
    assert [c for c in commits if any(kind == "attachment" for kind, _o, _p in c)] == [
        [("attachment", "created", f"{NODE}/note.txt")]
    ]
    assert _stored(m, "note.txt") == (15, 1)
    m.remount()
    await t.same()


async def test_an_empty_file_is_stored_when_it_is_closed(m, twin):
    """touch: nothing written, the close stores it all the same."""
    t = await twin("empty")
    await t.open(os.O_WRONLY)
    assert _stored(m, "empty") is None
    await t.close()
    assert _stored(m, "empty") == (0, 0)
    m.remount()
    await t.same()


async def test_a_new_file_still_open_is_stored_by_the_next_commit_of_anything(m, twin):
    """A file created and held open is stored first thing in the next transaction,
    whatever it changes, so what that changes later (a rename, a link, an unlink) always
    finds its row; fsync of its folder stores it too."""
    a, b = await twin("open-a.txt"), await twin("other.txt")
    await a.open(os.O_WRONLY)
    await b.open(os.O_WRONLY)
    await b.pwrite(0, b"closed first\n")
    await b.close()
    assert _stored(m, "open-a.txt") == (0, 0)
    await a.pwrite(0, b"written after the other file's commit\n")
    await a.close()
    assert _stored(m, "open-a.txt") == (38, 1)

    c = await twin("renamed-while-open.txt")
    await c.open(os.O_WRONLY)
    await m.fs.rename(c.path, f"{NODE}/new-name.txt")
    os.rename(c.native, c.native.with_name("new-name.txt"))
    c.path, c.native = f"{NODE}/new-name.txt", c.native.with_name("new-name.txt")
    assert _stored(m, "new-name.txt") == (0, 0)
    await c.pwrite(0, b"bytes after the rename\n")
    await c.close()

    d = await twin("synced-folder.txt")
    await d.open(os.O_WRONLY)
    await m.fs.ops.fsyncdir(await m.fs.ino(NODE), False)  # a directory's handle is its inode
    assert _stored(m, "synced-folder.txt") == (0, 0)

    e = await twin("gone-while-open.txt")
    await e.open(os.O_WRONLY)
    await m.fs.unlink(e.path)
    await m.fs.ops.write(e.fh, 0, b"never stored")
    await m.fs.ops.flush(e.fh)
    await m.fs.ops.release(e.fh)
    os.close(e.fd)
    assert _stored(m, "gone-while-open.txt") is None
    await d.close()

    m.remount()
    for t in (a, b, c, d):
        await t.same()
    assert not await m.fs.exists(e.path)
