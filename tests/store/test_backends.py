"""The same store behaviour on DuckDB and on PostgreSQL: nodes, versions, attachments in
chunks, sessions, fsck — each test runs once per backend, through the real Memory and the
FS handlers (no kernel), and reopens the store as a remount would."""

from __future__ import annotations

import os

import pytest

from contextfs.fs.ops import Operations
from contextfs.fs.tree import Tree
from contextfs.memory.consolidate import consolidate, plan
from contextfs.memory.service import Memory
from contextfs.store.fsck import check_store
from contextfs.store.schema import CHUNK_SIZE, SCHEMA_VERSION
from tests.fs.conftest import FS


def _memory(opener, types, tmp_path):
    store = opener()
    m = Memory(store, types, data_dir=tmp_path)
    if ("user", "default") not in m.owners:
        m.create_owner("user", "default")
    return m


def _fs(memory: Memory) -> FS:
    return FS(Operations(Tree(memory, status=lambda: "status\n")))


async def test_a_memory_written_comes_back_after_reopening(opener, types, tmp_path):
    m = _memory(opener, types, tmp_path)
    fs = _fs(m)
    await fs.write("user/default/preferences/tea.md", b"Green tea, no sugar.\n")
    await fs.write("user/default/preferences/tea/L2.md", b"Green tea, no sugar. Oolong too.\n")
    assert await fs.text("user/default/preferences/tea/L2.md") == (
        "Green tea, no sugar. Oolong too.\n"
    )
    gen = m.generation
    m.store.close()

    again = _memory(opener, types, tmp_path)
    fs = _fs(again)
    assert await fs.text("user/default/preferences/tea/L2.md") == (
        "Green tea, no sugar. Oolong too.\n"
    )
    (node,) = [n for n in again.nodes.values() if n.name == "tea"]
    assert [v for v, _c, _s in node.history] == [1, 2]
    assert again.store.version_text(node.id, 1).endswith("Green tea, no sugar.\n")
    assert again.generation == gen
    assert check_store(again.store) == []
    again.store.close()


async def test_version_lists_read_together_match_one_by_one(opener, types, tmp_path):
    """`find` after a remount lists every `.history`: read a directory's version lists in
    one query, each is what the node's own query gives (versions, sizes, who wrote)."""
    m = _memory(opener, types, tmp_path)
    fs = _fs(m)
    for i in range(5):
        await fs.mkdir(f"user/default/preferences/p{i}")
        await fs.write(f"user/default/preferences/p{i}/L2.md", f"pref {i}\n".encode())
    await fs.write("user/default/preferences/p2/L2.md", b"pref two, longer now\n")
    m.store.close()

    again = _memory(opener, types, tmp_path)
    fs = _fs(again)
    assert len(await fs.listdir("user/default/preferences")) == 5
    assert await fs.listdir("user/default/preferences/p2/.history") == ["v1.md", "v2.md"]
    assert await fs.listdir("user/default/preferences/p4/.history") == ["v1.md"]
    ids = [n.id for n in again.nodes.values() if n.name.startswith("p")]
    together = again.store.node_histories([*ids, 10**12])  # an id without versions too
    assert together == {**{nid: again.store.node_history(nid) for nid in ids}, 10**12: ([], False)}
    assert sorted(len(h) for h, _person in together.values()) == [0, 1, 1, 1, 1, 2]
    again.store.close()


async def test_attachment_bytes_in_chunks_survive_rewrites(opener, types, tmp_path):
    m = _memory(opener, types, tmp_path)
    fs = _fs(m)
    await fs.write("user/default/preferences/tea.md", b"tea\n")
    data = os.urandom(2 * CHUNK_SIZE + 100)
    await fs.write("user/default/preferences/tea/photo.bin", data, fsync=True)
    await fs.write("user/default/preferences/tea/copy.bin", data)  # the same bytes: one blob
    await fs.write("user/default/preferences/tea/photo.bin", data[:CHUNK_SIZE])  # shrinks
    held, stored = m.store.stored_bytes()
    assert held == len(data) + CHUNK_SIZE
    assert stored == len(data)  # the shrunk file's chunk is the copy's first chunk
    m.store.close()
    again = _memory(opener, types, tmp_path)
    fs = _fs(again)
    assert await fs.read("user/default/preferences/tea/photo.bin") == data[:CHUNK_SIZE]
    assert await fs.read("user/default/preferences/tea/copy.bin") == data
    assert check_store(again.store) == []
    again.store.close()


def test_sessions_are_replaced_in_place(opener, types, tmp_path):
    m = _memory(opener, types, tmp_path)
    with m.transaction():
        m.store.put_session(("user", "default"), "s1", 1.0, "a\n", 0, "")
    with m.transaction():
        m.store.put_session(("user", "default"), "s1", 1.0, "a\nb\n", 1, "sum")
    assert m.store.sessions() == [("user", "default", "s1", 1.0, "a\nb\n", 1, "sum")]
    m.store.close()


def test_an_inbox_items_progress_survives_a_remount_and_an_upgrade(opener, types, tmp_path):
    """inbox_items.progress (v9: how far an export got) is stored with the item's state, in
    its transaction; a v8 store gets the column, empty."""
    m = _memory(opener, types, tmp_path)
    m.add_inbox_item(7, ("user", "default"), "c.json", b"[]", 1.0, "pending", "")
    report = "state: processing (1 of 2 conversations)\n"
    m.set_inbox_state(7, ("user", "default"), "c.json", "pending", report, '{"done": 1}')
    m.store.close()
    m = _memory(opener, types, tmp_path)
    assert m.inbox_items() == [
        (7, "user", "default", "c.json", 1.0, "pending", report, 2, '{"done": 1}')
    ]
    m.store.con.execute("ALTER TABLE inbox_items DROP COLUMN progress")
    m.store.con.execute("UPDATE store_meta SET value = '8' WHERE key = 'schema_version'")
    m.store.close()
    m = _memory(opener, types, tmp_path)  # migrates
    assert m.inbox_items()[0][5:] == ("pending", report, 2, "")
    assert check_store(m.store) == []
    m.store.close()


def test_fsck_finds_a_broken_invariant_on_either_store(opener, types, tmp_path):
    m = _memory(opener, types, tmp_path)
    n = m.create_node(("user", "default"), types["preference"], "tea")
    m.save_l2(n, "one\n")
    m.save_l2(n, "two\n")
    assert check_store(m.store) == []
    m.store.con.execute("DELETE FROM versions WHERE version = 1")
    m.store.con.execute("UPDATE store_meta SET value = '1' WHERE key = 'schema_version'")
    problems = {p.split(":")[0] for p in check_store(m.store)}
    assert problems == {"versions_complete", "schema_version"}
    m.store.con.execute(
        "UPDATE store_meta SET value = ? WHERE key = 'schema_version'", [str(SCHEMA_VERSION)]
    )
    m.store.close()


def test_a_rolled_back_write_leaves_store_and_memory_as_they_were(opener, types, tmp_path):
    m = _memory(opener, types, tmp_path)
    n = m.create_node(("user", "default"), types["preference"], "tea")
    m.save_l2(n, "one\n")
    with pytest.raises(RuntimeError), m.transaction():
        m.save_l2(n, "two\n")
        raise RuntimeError("the caller fails after the write")
    assert n.l2 == "one\n" and n.version == 1
    m.store.close()
    again = _memory(opener, types, tmp_path)
    (node,) = [x for x in again.nodes.values() if x.name == "tea"]
    assert node.l2 == "one\n" and node.version == 1
    assert check_store(again.store) == []
    again.store.close()


def test_an_id_is_restored_only_if_it_was_never_handed_out(opener):
    """An import restoring an export asks for its nodes' ids: one beyond what the store
    handed out is taken (and never handed out again); one it may have handed out is not."""
    store = opener()
    given = [store.new_id() for _ in range(3)]
    assert store.claim_id(given[1]) is False  # handed out: may be a node or an inode
    wanted = given[-1] + 600  # beyond the block of 256 taken in advance
    assert store.claim_id(wanted) is True
    later = [store.new_id() for _ in range(1000)]
    assert wanted not in later and not set(later) & set(given)
    assert len(set(later)) == 1000  # the ids skipped to reach `wanted` are not lost twice
    store.close()
    reopened = opener()
    assert reopened.claim_id(wanted) is False and reopened.new_id() > max(later)
    reopened.close()


def test_consolidation_reweighs_and_counts_reads_in_bulk_on_either_store(opener, types, tmp_path):
    """A run's importance values and the reads counted since the last flush are stored in
    one statement a column; a remount sees them, and what the run compared."""
    m = _memory(opener, types, tmp_path)
    prefs = [m.create_node(("user", "default"), types["preference"], f"p{i}") for i in range(30)]
    for i, n in enumerate(prefs):
        m.save_l2(n, f"Preference number {i}: {'tea ' * (i + 1)}\n")
    for _ in range(3):
        m.record_access(prefs[0])
    half_life = types["preference"].half_life_days * 86400
    report = consolidate(m, now=prefs[-1].updated + half_life)
    assert report.decayed == 30 and report.merged == 0
    held = {n.id: n.importance for n in prefs}
    m.store.close()
    again = _memory(opener, types, tmp_path)
    stored = {n.id: (n.importance, n.access_count) for n in again.walk(types=("preference",))}
    assert {nid: imp for nid, (imp, _) in stored.items()} == held
    assert stored[prefs[0].id][1] == 3 and stored[prefs[1].id][1] == 0
    assert 0.25 <= held[prefs[1].id] < 0.2501 and held[prefs[0].id] > 0.4  # 3 reads
    assert plan(again).groups == 0  # nothing changed since the run compared the group
    assert check_store(again.store) == []
    again.store.close()
