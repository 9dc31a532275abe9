"""Bytes stored once by content hash (schema v6): the same photo dropped twice, a video
frame that is also an image, a file copied into another node cost no new bytes in the
store; writing one holder of shared bytes never changes another; the last holder gone,
the bytes go too; a v5 store is migrated to it. Measured on the real store (DuckDB), with
fsck as the oracle."""

from __future__ import annotations

import os

import duckdb
import pytest

from contextfs.memory.service import Memory
from contextfs.model import Attachment
from contextfs.store import Store
from contextfs.store.fsck import blobs_consistent, check_store, garbage_blobs
from contextfs.store.schema import CHUNK_SIZE, SCHEMA_VERSION
from contextfs.testing import media_corpus as mc
from tests.fs.test_media import _drop, _nodes
from tests.fs.test_store import make_v5
from tests.fs.test_virtual_dirs import Mount


@pytest.fixture
def plain(memory: Memory, tmp_path) -> Mount:
    return Mount(memory, tmp_path, search=False)


def _stored(memory: Memory) -> int:
    """Bytes the store keeps for files and inbox items (every blob once)."""
    return memory.store.stored_bytes()[1]


async def test_the_same_photo_dropped_twice_costs_nothing(plain: Mount, memory: Memory) -> None:
    photo = mc.noise_image(7)  # 230 KB of PNG that does not compress
    before = _stored(memory)
    report = await _drop(plain, ".inbox/beach.png", photo)
    assert "image kept" in report, report
    once = _stored(memory)
    # the inbox item and the node's original.png are one copy of the bytes
    assert len(photo) <= once - before < len(photo) + 4096, (once - before, len(photo))
    report = await _drop(plain, ".inbox/beach-again.png", photo)
    assert "already stored as" in report, report
    assert _stored(memory) == once  # not one byte more
    held, stored = memory.store.stored_bytes()
    assert held >= 3 * len(photo) and stored < held / 2.5  # 3 holders, 1 copy
    assert await plain.fs.read(".inbox/beach-again.png") == photo
    assert check_store(memory.store) == []


async def test_a_video_frame_dropped_as_an_image_costs_nothing(plain: Mount, memory: Memory):
    fs = plain.fs
    data = mc.video([mc.shape("circle", "red"), mc.slide("Roadmap")], seconds_each=2)
    assert "video kept" in await _drop(plain, ".inbox/talk.mp4", data)
    [video] = _nodes(memory, "video")
    frame = await fs.read(memory.node_path(video) + "/frames/0002.jpg")
    before = _stored(memory)
    report = await _drop(plain, ".inbox/roadmap.jpg", frame)
    assert "image kept" in report, report  # another kind of node, the same bytes
    [image] = _nodes(memory, "image")
    assert await fs.read(memory.node_path(image) + "/original.jpg") == frame
    assert _stored(memory) == before
    assert check_store(memory.store) == []


async def test_shared_bytes_are_copied_on_write_and_freed_with_their_last_holder(
    memory: Memory, fs, types
) -> None:
    data = os.urandom(3 * CHUNK_SIZE + 100)
    for node in ("a", "b"):
        await fs.mkdir(f"user/default/preferences/{node}")
        await fs.write(f"user/default/preferences/{node}/L2.md", b"Files.\n")
        await fs.write(f"user/default/preferences/{node}/copy.bin", data)
    assert _stored(memory) == len(data)  # two files, one copy
    # a write into one holder changes its chunk, never the other's
    ino = await fs.ino("user/default/preferences/a/copy.bin")
    fi = await fs.ops.open(ino, os.O_RDWR, fs.ctx)
    await fs.ops.write(fi.fh, CHUNK_SIZE + 5, b"PATCH")
    await fs.ops.flush(fi.fh)
    await fs.ops.release(fi.fh)
    patched = data[: CHUNK_SIZE + 5] + b"PATCH" + data[CHUNK_SIZE + 10 :]
    assert await fs.read("user/default/preferences/a/copy.bin") == patched
    assert await fs.read("user/default/preferences/b/copy.bin") == data
    assert _stored(memory) == len(data) + CHUNK_SIZE  # only the changed chunk is new
    assert check_store(memory.store) == []
    # both holders purged: their bytes are garbage, reclaimed by the next sweep (64 let-go
    # blobs, or the store's close)
    for a in list(memory.attachments.values()):
        if a.name == "copy.bin":
            memory.store.purge_attachment(a.id)
    assert garbage_blobs(memory.store) == (5, 4 * CHUNK_SIZE + 100)  # 4 + the patched one
    assert check_store(memory.store) == []
    with memory.transaction():
        memory.store.sweep()
    assert _stored(memory) == 0 and garbage_blobs(memory.store) == (0, 0)


async def test_garbage_is_reclaimed_in_batches_at_close_and_after_a_crash(tmp_path, types) -> None:
    db = tmp_path / "contextfs.duckdb"
    store = Store(db)
    blobs = [os.urandom(CHUNK_SIZE) for _ in range(70)]
    with store.atomic():
        for i, data in enumerate(blobs):
            store.insert_attachment(
                Attachment(5000 + i, 1, None, f"f{i}", "file", 0o644, 0.0, None), data
            )
    for i in range(63):
        with store.atomic():
            store.purge_attachment(5000 + i)
    assert garbage_blobs(store) == (63, 63 * CHUNK_SIZE)
    with store.atomic():
        store.purge_attachment(5063)  # the 64th: one batch reclaims them all
    assert garbage_blobs(store) == (0, 0) and store.stored_bytes()[1] == 6 * CHUNK_SIZE
    with store.atomic():
        store.purge_attachment(5064)
    store.con.close()  # a daemon that dies: its garbage stays in the file
    store = Store(db, read_only=True)
    # garbage is not a problem (the attachments here have no node: only the blob check)
    assert garbage_blobs(store) == (1, CHUNK_SIZE)
    assert check_store(store, [blobs_consistent]) == []
    store.close()
    store = Store(db)  # opening writes nothing (a store failing fsck is not written to)
    assert garbage_blobs(store) == (1, CHUNK_SIZE)
    with store.atomic():
        store.purge_attachment(5065)
    store.close()  # the first sweep of its life takes the dead daemon's garbage too
    store = Store(db, read_only=True)
    assert garbage_blobs(store) == (0, 0) and check_store(store, [blobs_consistent]) == []
    store.close()


async def test_a_version_5_store_gets_its_bytes_stored_once(tmp_path, types) -> None:
    from contextfs.fs.build import build_tree
    from contextfs.fs.ops import Operations
    from tests.fs.conftest import FS

    db = tmp_path / "contextfs.duckdb"
    memory = Memory(Store(db), types, data_dir=tmp_path)
    memory.create_owner("user", "default")
    fs = FS(Operations(build_tree(memory, status=lambda: "")))
    photo = os.urandom(2 * CHUNK_SIZE + 3)
    for node in ("a", "b"):
        await fs.mkdir(f"user/default/preferences/{node}")
        await fs.write(f"user/default/preferences/{node}/L2.md", b"Files.\n")
        await fs.write(f"user/default/preferences/{node}/photo.bin", photo)
    memory.store.add_inbox_item(1, ("user", "default"), "photo.bin", photo, 0.0, "done", "")
    memory.store.add_inbox_item(2, ("user", "default"), "empty.md", b"", 0.0, "done", "")
    memory.store.close()
    con = duckdb.connect(str(db))
    make_v5(con)
    v5 = con.execute("SELECT sum(octet_length(data)) FROM attachment_chunks").fetchone()[0]
    assert v5 == 2 * len(photo)
    con.close()

    store = Store(db)  # migrates
    try:
        assert (
            store.con.execute(
                "SELECT value FROM store_meta WHERE key = 'schema_version'"
            ).fetchone()[0]
            == str(SCHEMA_VERSION)  # and on past 6 (v7: an index; v8: the text sizes)
        )
        assert check_store(store) == []
        assert store.stored_bytes() == (3 * len(photo), len(photo))
        assert store.inbox_data(1) == photo and store.inbox_data(2) == b""
        [(size,)] = store.con.execute("SELECT size FROM inbox_items WHERE id = 1").fetchall()
        assert size == len(photo)
        for a in store.attachments():
            if a.name == "photo.bin":
                assert bytes(store.attachment_data(a.id)) == photo
    finally:
        store.close()


def test_blobs_staged_for_a_big_write_wait_for_it_and_go_if_it_fails(memory: Memory) -> None:
    """A big file's blobs are stored ahead of the transaction that writes its chunks
    (`Store.stage_blobs`): no sweep takes them meanwhile, not even the first one (which
    takes every blob no chunk holds); if that transaction fails they are let go."""
    store = memory.store
    store.STAGE_BYTES = 4 * CHUNK_SIZE  # staged in transactions of 4 chunks
    data = os.urandom(10 * CHUNK_SIZE)
    assert store.stage_blobs(data, [0, 1, 2]) == []  # small: written with its chunks
    staged = store.stage_blobs(data, list(range(10)))
    assert len(set(staged)) == 10
    assert garbage_blobs(store)[0] == 10  # stored, held by no chunk yet
    store.garbage.add("0" * 32)  # something to sweep: the first sweep takes every unheld blob
    with store.atomic():
        store.sweep()
    assert garbage_blobs(store)[0] == 10  # the staged ones stay
    store.unstage(staged, held=False)  # their write failed
    with store.atomic():
        store.sweep()
    assert garbage_blobs(store) == (0, 0)
    assert check_store(store) == []


def test_a_version_11_store_gets_its_blob_sizes(tmp_path, types) -> None:
    """(v12) blobs.size is read from the bytes once, by the migration; the checks after
    it (a mount's, which reads no byte, and fsck's) agree with it."""
    from contextfs.store.fsck import full_check, mount_check, record_passed

    db = tmp_path / "contextfs.duckdb"
    memory = Memory(Store(db), types, data_dir=tmp_path)
    memory.create_owner("user", "default")
    n = memory.create_node(("user", "default"), types["preference"], "files")
    photo = os.urandom(2 * CHUNK_SIZE + 3)
    memory.attachment_store.add_attachment(n, None, "photo.bin", "file", 0o644, data=photo)
    memory.store.add_inbox_item(1, ("user", "default"), "notes.md", b"tea\n", 0.0, "done", "")
    memory.store.close()
    con = duckdb.connect(str(db))  # as a version 11 store is: no size column
    con.execute("ALTER TABLE blobs DROP COLUMN size")
    con.execute("UPDATE store_meta SET value = '11' WHERE key = 'schema_version'")
    con.close()

    store = Store(db)  # migrates
    try:
        assert store.meta("schema_version") == str(SCHEMA_VERSION)
        sizes = sorted(r[0] for r in store.con.execute("SELECT size FROM blobs").fetchall())
        assert sizes == [3, 4, CHUNK_SIZE, CHUNK_SIZE]
        run = full_check(store)
        assert run.problems == ()
        record_passed(store, run)
        assert mount_check(store).problems == ()
        assert store.stored_bytes() == (len(photo) + 4, len(photo) + 4)
    finally:
        store.close()
