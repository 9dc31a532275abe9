"""The canonical store: versioned migrations and fsck as an oracle that can fail."""

from __future__ import annotations

import duckdb

from contextfs.store import Store
from contextfs.store.fsck import check_store
from contextfs.store.schema import SCHEMA_VERSION


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
    con.execute("ALTER TABLE nodes DROP COLUMN archived_at")
    con.execute("DROP TABLE inbox_items")
    con.execute("UPDATE store_meta SET value = '1' WHERE key = 'schema_version'")
    con.close()
    store = Store(db)
    try:
        assert store.con.execute(
            "SELECT value FROM store_meta WHERE key = 'schema_version'").fetchone()[0] \
            == str(SCHEMA_VERSION)
        [node] = store.nodes()
        assert node.l2 == "Green tea.\n" and node.archived_at is None
        assert store.con.execute("SELECT count(*) FROM inbox_items").fetchone()[0] == 0
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
        ["52d4d1cd0d2e2b8f"])
    assert any("content_hashes" in p for p in check_store(memory.store))
    memory.store.con.execute("DELETE FROM versions WHERE version = 1")
    memory.store.con.execute(
        "INSERT INTO versions SELECT node_id, 1, 'one\n', "
        "(SELECT content_hash FROM versions WHERE version = 2), created, 'write' FROM versions")
    memory.store.con.execute("UPDATE versions SET content_hash = ? WHERE version = 1",
                             [__import__("xxhash").xxh64_hexdigest(b"one\n")])
    assert check_store(memory.store) == []
