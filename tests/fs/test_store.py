"""The canonical store: versioned migrations and fsck as an oracle that can fail."""

from __future__ import annotations

import hashlib
import os

import duckdb
import xxhash

from contextfs.store import Store
from contextfs.store.fsck import check_store, garbage_blobs
from contextfs.store.schema import CHUNK_SIZE, SCHEMA_VERSION, drop_live_name_indexes

# The attachments table of schema v2, as v2 created it: a file's bytes in one BLOB.
V2_ATTACHMENTS = """
CREATE TABLE attachments (
    id         BIGINT PRIMARY KEY,
    node_id    BIGINT NOT NULL,
    parent_id  BIGINT,
    name       TEXT   NOT NULL,
    kind       TEXT   NOT NULL,
    mode       INTEGER NOT NULL,
    mtime      DOUBLE NOT NULL,
    data       BLOB,
    target     BLOB,
    deleted_at DOUBLE
)"""


def make_v9(con: duckdb.DuckDBPyConnection) -> None:
    """Turn a current store into what v9 wrote: no unique indexes on the live names."""
    drop_live_name_indexes(con)
    con.execute("UPDATE store_meta SET value = '9' WHERE key = 'schema_version'")


def make_v7(con: duckdb.DuckDBPyConnection) -> None:
    """Turn a current store into what v7 wrote: no l1_size/l2_size columns."""
    make_v9(con)
    con.execute("DROP INDEX IF EXISTS nodes_owner_type_name")
    con.execute("ALTER TABLE nodes DROP COLUMN l1_size")
    con.execute("ALTER TABLE nodes DROP COLUMN l2_size")
    con.execute("CREATE INDEX nodes_owner_type_name ON nodes (owner_kind, owner_id, type, name)")
    con.execute("UPDATE store_meta SET value = '7' WHERE key = 'schema_version'")


def make_v5(con: duckdb.DuckDBPyConnection) -> None:
    """Turn a current store into what v5 wrote: each chunk's bytes in attachment_chunks,
    an inbox item's bytes in inbox_items.data, no blobs (and no v7 index, no v8 sizes)."""
    make_v7(con)
    con.execute("DROP INDEX IF EXISTS nodes_owner_type_name")
    con.execute("ALTER TABLE attachment_chunks RENAME TO attachment_chunks_v6")
    con.execute(
        "CREATE TABLE attachment_chunks (att_id BIGINT NOT NULL, idx INTEGER NOT NULL, "
        "data BLOB NOT NULL, PRIMARY KEY (att_id, idx))"
    )
    con.execute(
        "INSERT INTO attachment_chunks SELECT c.att_id, c.idx, b.data FROM attachment_chunks_v6 c "
        "JOIN blobs b ON b.hash = c.hash"
    )
    con.execute("DROP TABLE attachment_chunks_v6")
    con.execute("ALTER TABLE inbox_items RENAME TO inbox_items_v6")
    con.execute(
        "CREATE TABLE inbox_items (id BIGINT PRIMARY KEY, owner_kind TEXT NOT NULL, "
        "owner_id TEXT NOT NULL, filename TEXT NOT NULL, data BLOB NOT NULL, "
        "created DOUBLE NOT NULL, state TEXT NOT NULL, report TEXT NOT NULL)"
    )
    con.execute(
        "INSERT INTO inbox_items SELECT id, owner_kind, owner_id, filename, ''::BLOB, "
        "created, state, report FROM inbox_items_v6"
    )
    for (i,) in con.execute("SELECT id FROM inbox_items").fetchall():
        data = b"".join(
            bytes(d)
            for (d,) in con.execute(
                "SELECT b.data FROM inbox_chunks c JOIN blobs b ON b.hash = c.hash "
                "WHERE c.item_id = ? ORDER BY c.idx",
                [i],
            ).fetchall()
        )
        con.execute("UPDATE inbox_items SET data = ? WHERE id = ?", [data, i])
    con.execute("DROP TABLE inbox_items_v6")
    con.execute("DROP TABLE inbox_chunks")
    con.execute("DROP TABLE blobs")
    con.execute("UPDATE store_meta SET value = '5' WHERE key = 'schema_version'")


def make_v2(con: duckdb.DuckDBPyConnection) -> None:
    """Turn a current store into what v2 wrote: file bytes back in attachments.data."""
    make_v5(con)
    files = {
        i: b"".join(
            bytes(d)
            for (d,) in con.execute(
                "SELECT data FROM attachment_chunks WHERE att_id = ? ORDER BY idx", [i]
            ).fetchall()
        )
        for (i,) in con.execute("SELECT id FROM attachments WHERE kind = 'file'").fetchall()
    }
    con.execute("ALTER TABLE attachments RENAME TO attachments_v3")
    con.execute(V2_ATTACHMENTS)
    con.execute(
        "INSERT INTO attachments SELECT id, node_id, parent_id, name, kind, mode, "
        "mtime, NULL, target, deleted_at FROM attachments_v3"
    )
    for i, data in files.items():
        con.execute("UPDATE attachments SET data = ? WHERE id = ?", [data, i])
    con.execute("DROP TABLE attachments_v3")
    con.execute("DROP TABLE attachment_chunks")
    con.execute("UPDATE store_meta SET value = '2' WHERE key = 'schema_version'")


def test_a_version_1_store_is_migrated_on_open(tmp_path, types):
    from contextfs.memory.service import Memory

    db = tmp_path / "v1" / "contextfs.duckdb"
    db.parent.mkdir()
    memory = Memory(Store(db), types, data_dir=db.parent)
    memory.create_owner("user", "default")
    n = memory.create_node(("user", "default"), types["preference"], "tea")
    memory.save_l2(n, "Green tea.\n")
    memory.store.close()
    con = duckdb.connect(str(db))  # make it look like a v1 store
    make_v2(con)
    con.execute("ALTER TABLE nodes DROP COLUMN archived_at")
    con.execute("DROP TABLE inbox_items")
    con.execute("UPDATE store_meta SET value = '1' WHERE key = 'schema_version'")
    con.close()
    store = Store(db)
    try:
        assert store.con.execute(
            "SELECT value FROM store_meta WHERE key = 'schema_version'"
        ).fetchone()[0] == str(SCHEMA_VERSION)
        [node] = store.nodes()
        assert node.l2 == "Green tea.\n" and node.archived_at is None
        assert store.con.execute("SELECT count(*) FROM inbox_items").fetchone()[0] == 0
        assert check_store(store) == []
    finally:
        store.close()


def test_a_version_7_store_gets_the_sizes_of_its_texts(tmp_path, types):
    """v8 keeps each node's L1/L2 sizes in columns (what `stat` shows without reading the
    texts); a v7 store gets them from its texts at open, and fsck holds them to it."""
    from contextfs.memory.service import Memory

    db = tmp_path / "v7" / "contextfs.duckdb"
    db.parent.mkdir()
    memory = Memory(Store(db), types, data_dir=db.parent)
    memory.create_owner("user", "default")
    texts = {"tea": "Green tea, no sugar.\n", "cafe": "Un café crème, s’il vous plaît ☕\n"}
    for name, text in texts.items():
        memory.save_l2(memory.create_node(("user", "default"), types["preference"], name), text)
    memory.store.close()
    con = duckdb.connect(str(db))
    make_v7(con)
    con.close()
    store = Store(db)
    try:
        rows = store.con.execute(
            "SELECT name, l1, l2, l1_size, l2_size FROM nodes ORDER BY name"
        ).fetchall()
        for name, l1, l2, s1, s2 in rows:
            assert l2 == texts[name] and s2 == len(l2.encode()) and s1 == len(l1.encode())
        assert rows[0][4] > len(rows[0][2])  # bytes, not characters
        heads = {h[0].name: h[1:] for h in store.node_heads()}
        assert heads == {r[0]: (r[3], r[4]) for r in rows}
        assert check_store(store) == []
        store.con.execute("UPDATE nodes SET l2_size = l2_size + 1 WHERE name = 'tea'")
        assert any("sizes stored for L1/L2" in p for p in check_store(store))
    finally:
        store.close()


def test_a_version_10_store_lets_a_live_node_take_an_archived_ones_name(tmp_path, types):
    """v11: an archived node holds no name (as a deleted one); a v10 store's index, which
    counted it as live, is made again at open."""
    from contextfs.memory.service import Memory

    db = tmp_path / "v10" / "contextfs.duckdb"
    db.parent.mkdir()
    memory = Memory(Store(db), types, data_dir=db.parent)
    memory.create_owner("user", "default")
    old = memory.create_node(("user", "default"), types["preference"], "tea")
    memory.save_l2(old, "Green tea.\n")
    memory.archive_node(old)
    memory.store.close()
    con = duckdb.connect(str(db))  # the v10 index
    con.execute("DROP INDEX nodes_live_path")
    con.execute(
        "CREATE UNIQUE INDEX nodes_live_path ON nodes (owner_kind, owner_id, type, name, "
        "(CASE WHEN deleted_at IS NULL THEN 0 ELSE id END))"
    )
    con.execute("UPDATE store_meta SET value = '10' WHERE key = 'schema_version'")
    con.close()
    memory = Memory(Store(db), types, data_dir=db.parent)
    try:
        new = memory.create_node(("user", "default"), types["preference"], "tea")
        memory.save_l2(new, "Black tea.\n")
        rows = memory.store.con.execute(
            "SELECT l2, archived_at IS NULL FROM nodes WHERE name = 'tea' ORDER BY id"
        ).fetchall()
        assert rows == [("Green tea.\n", False), ("Black tea.\n", True)]
        assert check_store(memory.store) == []
    finally:
        memory.store.close()


def test_a_version_8_store_gets_the_progress_column_of_its_inbox_items(tmp_path, types):
    """v9 keeps how far an export's processing got (inbox_items.progress); a v8 store's
    items get the column, empty, and keep their state and report."""
    db = tmp_path / "v8" / "contextfs.duckdb"
    db.parent.mkdir()
    store = Store(db)
    store.add_inbox_item(7, ("user", "default"), "a.jsonl", b"{}", 1.0, "done", "ok\n")
    store.close()
    con = duckdb.connect(str(db))
    con.execute("ALTER TABLE inbox_items DROP COLUMN progress")
    con.execute("UPDATE store_meta SET value = '8' WHERE key = 'schema_version'")
    con.close()
    store = Store(db)  # migrates
    try:
        [row] = store.inbox_items()
        assert row[5:] == ("done", "ok\n", 2, "")
        store.set_inbox_state(7, "pending", "state: processing\n", '{"done": 1}')
        assert store.inbox_items()[0][8] == '{"done": 1}'
        assert check_store(store) == []
    finally:
        store.close()


def test_fsck_finds_a_broken_invariant(tmp_path, memory, types):
    n = memory.create_node(("user", "default"), types["preference"], "tea")
    memory.save_l2(n, "one\n")
    memory.save_l2(n, "two\n")
    memory.store.con.execute("DELETE FROM versions WHERE version = 1")
    problems = check_store(memory.store)
    assert any("versions_complete" in p for p in problems)
    memory.store.con.execute(
        "INSERT INTO versions SELECT node_id, 1, 'one\n', ?, created, 'write' FROM versions",
        ["52d4d1cd0d2e2b8f"],
    )
    assert any("content_hashes" in p for p in check_store(memory.store))
    memory.store.con.execute("DELETE FROM versions WHERE version = 1")
    memory.store.con.execute(
        "INSERT INTO versions SELECT node_id, 1, 'one\n', "
        "(SELECT content_hash FROM versions WHERE version = 2), created, 'write' FROM versions"
    )
    memory.store.con.execute(
        "UPDATE versions SET content_hash = ? WHERE version = 1",
        [__import__("xxhash").xxh64_hexdigest(b"one\n")],
    )
    assert check_store(memory.store) == []


async def test_a_version_2_store_with_attachments_opens_with_the_same_bytes(tmp_path, types):
    """v2 kept a file in one BLOB; v3 keeps 64 KiB chunks. Every file, folder, symlink and
    soft-deleted file comes back as it was, and the migrated file takes offset writes."""
    from contextfs.fs.build import build_tree
    from contextfs.fs.ops import Operations
    from contextfs.memory.service import Memory
    from tests.fs.conftest import FS

    db = tmp_path / "contextfs.duckdb"
    node = "user/default/preferences/files"
    files = {
        "big.bin": os.urandom(3 * CHUNK_SIZE + 17),
        "chunk.bin": os.urandom(CHUNK_SIZE),
        "small.txt": b"a small note\n",
        "empty": b"",
        "sub/inner.bin": os.urandom(5000),
    }

    def fs_over(memory: Memory) -> FS:
        return FS(Operations(build_tree(memory, status=lambda: "")))

    memory = Memory(Store(db), types, data_dir=tmp_path)
    memory.create_owner("user", "default")
    fs = fs_over(memory)
    await fs.mkdir(node)
    await fs.write(f"{node}/L2.md", b"Files next to a memory.\n")
    await fs.mkdir(f"{node}/sub")
    for name, data in files.items():
        await fs.write(f"{node}/{name}", data)
    await fs.write(f"{node}/gone.bin", b"removed before the upgrade")
    await fs.unlink(f"{node}/gone.bin")
    p, _ = await fs.parent(f"{node}/link")
    await fs.ops.symlink(p, b"link", b"sub/inner.bin", fs.ctx)
    memory.store.close()
    con = duckdb.connect(str(db))
    make_v2(con)
    assert (
        con.execute("SELECT octet_length(data) FROM attachments WHERE name = 'big.bin'").fetchone()[
            0
        ]
        == 3 * CHUNK_SIZE + 17
    )
    con.close()

    store = Store(db)  # migrates
    assert (
        store.con.execute("SELECT value FROM store_meta WHERE key = 'schema_version'").fetchone()[0]
        == str(SCHEMA_VERSION)
        == "14"
    )
    # v13: a live transcript's appends have their table (none yet)
    assert store.con.execute("SELECT count(*) FROM session_appends").fetchone()[0] == 0
    # v7: the live node at a path has its index (memory.heads asks for it by path)
    assert (
        store.con.execute(
            "SELECT count(*) FROM duckdb_indexes() WHERE index_name = 'nodes_owner_type_name'"
        ).fetchone()[0]
        == 1
    )
    assert check_store(store) == []
    columns = [
        r[0]
        for r in store.con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'attachments' "
            "ORDER BY ordinal_position"
        ).fetchall()
    ]
    assert "data" not in columns and "size" in columns
    assert not store.con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'attachments_v2'"
    ).fetchone()[0]
    sizes = dict(store.con.execute("SELECT name, size FROM attachments").fetchall())
    assert sizes["big.bin"] == 3 * CHUNK_SIZE + 17 and sizes["link"] == 0
    assert sizes["sub"] == 0 and sizes["gone.bin"] == 26
    memory = Memory(store, types, data_dir=tmp_path)
    fs = fs_over(memory)
    for name, data in files.items():
        got = await fs.read(f"{node}/{name}")
        assert hashlib.sha256(got).hexdigest() == hashlib.sha256(data).hexdigest(), name
    assert await fs.ops.readlink(await fs.ino(f"{node}/link"), fs.ctx) == b"sub/inner.bin"
    assert not await fs.exists(f"{node}/gone.bin")
    gone = next(a for a in memory.attachments.values() if a.name == "gone.bin")
    assert (
        memory.attachment_store.attachment_data(gone) == b"removed before the upgrade"
    )  # restorable

    ino = await fs.ino(f"{node}/big.bin")
    fi = await fs.ops.open(ino, os.O_RDWR, fs.ctx)
    await fs.ops.write(fi.fh, CHUNK_SIZE + 10, b"PATCH")
    await fs.ops.flush(fi.fh)
    await fs.ops.release(fi.fh)
    expected = files["big.bin"]
    expected = expected[: CHUNK_SIZE + 10] + b"PATCH" + expected[CHUNK_SIZE + 15 :]
    assert await fs.read(f"{node}/big.bin") == expected
    assert check_store(store) == []
    store.close()


def test_fsck_finds_broken_chunks(tmp_path, memory, types):
    """Each chunk invariant is its own check, and each one can fail."""
    n = memory.create_node(("user", "default"), types["preference"], "tea")
    f = memory.attachment_store.add_attachment(
        n, None, "f.bin", "file", 0o644, data=os.urandom(3 * CHUNK_SIZE)
    )
    d = memory.attachment_store.add_attachment(n, None, "d", "dir", 0o755)
    con = memory.store.con
    assert check_store(memory.store) == []

    def problems() -> list[str]:
        return sorted({p.split(":")[0] for p in check_store(memory.store)})

    old = con.execute(
        "SELECT hash FROM attachment_chunks WHERE att_id = ? AND idx = 1", [f.id]
    ).fetchone()[0]
    short = os.urandom(100)
    con.execute(
        "INSERT INTO blobs VALUES (?, ?, ?)", [xxhash.xxh3_128_hexdigest(short), short, 100]
    )
    con.execute(
        "UPDATE attachment_chunks SET hash = ? WHERE att_id = ? AND idx = 1",
        [xxhash.xxh3_128_hexdigest(short), f.id],
    )
    assert problems() == ["chunk_sizes"]  # a short chunk that is not the last
    assert garbage_blobs(memory.store) == (1, CHUNK_SIZE)  # the blob it held: garbage
    con.execute("DELETE FROM attachment_chunks WHERE att_id = ? AND idx = 1", [f.id])
    con.execute("DELETE FROM blobs WHERE hash = ?", [xxhash.xxh3_128_hexdigest(short)])
    assert problems() == ["chunk_sizes", "chunks_contiguous"]  # a gap
    con.execute("INSERT INTO attachment_chunks VALUES (?, 1, ?)", [f.id, old])
    assert problems() == []
    con.execute("UPDATE attachments SET size = size + 1 WHERE id = ?", [f.id])
    assert problems() == ["chunk_sizes"]
    con.execute("UPDATE attachments SET size = size - 1 WHERE id = ?", [f.id])
    con.execute("INSERT INTO attachment_chunks VALUES (?, 0, ?)", [d.id, old])
    assert problems() == ["chunks_belong_to_files"]  # a folder has no bytes
    con.execute("DELETE FROM attachment_chunks WHERE att_id = ?", [d.id])
    con.execute("INSERT INTO attachment_chunks VALUES (?, 0, ?)", [12345678, old])
    assert problems() == ["chunks_belong_to_files"]  # a purged attachment left its bytes
    con.execute("DELETE FROM attachment_chunks WHERE att_id = ?", [12345678])
    # (v6) the bytes of a blob that do not hash to its key; a chunk whose blob is gone
    kept = con.execute("SELECT data FROM blobs WHERE hash = ?", [old]).fetchone()[0]
    con.execute("UPDATE blobs SET data = ? WHERE hash = ?", [os.urandom(CHUNK_SIZE), old])
    assert problems() == ["blobs_consistent"]
    con.execute("DELETE FROM blobs WHERE hash = ?", [old])
    assert problems() == ["blobs_consistent", "chunk_sizes"]
    con.execute("INSERT INTO blobs VALUES (?, ?, ?)", [old, kept, CHUNK_SIZE])
    assert problems() == []
    # (v12) a blob whose bytes are not as long as its row says: the chunk checks (and a
    # mount) add up the sizes; only fsck's reading of the bytes finds it
    con.execute("UPDATE blobs SET data = ? WHERE hash = ?", [kept[:100], old])
    assert problems() == ["blobs_consistent"]
    con.execute("UPDATE blobs SET size = 100 WHERE hash = ?", [old])
    assert problems() == ["blobs_consistent", "chunk_sizes"]
    con.execute("UPDATE blobs SET data = ?, size = ? WHERE hash = ?", [kept, CHUNK_SIZE, old])
    assert problems() == []
    memory.store.purge_attachment(f.id)
    assert problems() == []
