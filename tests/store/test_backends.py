"""The same store behaviour on DuckDB and on PostgreSQL: nodes, versions, attachments in
chunks, sessions, fsck — each test runs once per backend, through the real Memory and the
FS handlers (no kernel), and reopens the store as a remount would."""

from __future__ import annotations

import contextlib
import os

import pytest

from contextfs.errors import Exists
from contextfs.fs.build import build_tree
from contextfs.fs.ops import Operations
from contextfs.memory.consolidate import consolidate, plan
from contextfs.memory.service import Memory
from contextfs.model import Access
from contextfs.store.fsck import check_store
from contextfs.store.repair import repair_store
from contextfs.store.schema import CHUNK_SIZE, SCHEMA_VERSION, drop_live_name_indexes
from tests.fs.conftest import FS


def _memory(opener, types, tmp_path):
    store = opener()
    m = Memory(store, types, data_dir=tmp_path)
    if ("user", "default") not in m.owners:
        m.create_owner("user", "default")
    return m


def _fs(memory: Memory) -> FS:
    return FS(Operations(build_tree(memory, status=lambda: "status\n")))


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
    assert m.store.sessions() == [("user", "default", "s1", 1.0, "a\nb\n", 1, "sum", 0)]
    m.store.close()


def test_a_sessions_appends_follow_its_transcript_and_go_with_a_rewrite(opener, types, tmp_path):
    """(v13) An append is a row of its own after the stored transcript; the progress is
    stored without the transcript; a whole transcript stored again (a compact) replaces
    the appends, and an ended session leaves none behind."""
    m = _memory(opener, types, tmp_path)
    owner = ("user", "default")
    m.put_session(owner, "s1", 1.0, "a\n", 0, "")
    m.append_session(owner, "s1", 0, "b\n")
    m.append_session(owner, "s1", 1, "c\n")
    m.set_session_state(owner, "s1", 2, "sum")
    m.store.close()
    m = _memory(opener, types, tmp_path)
    assert m.store.sessions() == [("user", "default", "s1", 1.0, "a\nb\nc\n", 2, "sum", 2)]
    assert check_store(m.store) == []
    m.put_session(owner, "s1", 1.0, "d\n", 0, "sum")
    m.append_session(owner, "s1", 0, "e\n")
    assert m.store.sessions() == [("user", "default", "s1", 1.0, "d\ne\n", 0, "sum", 1)]
    m.delete_session(owner, "s1")
    assert m.store.sessions() == [] and check_store(m.store) == []
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


@pytest.mark.allow_warnings  # each refusal is logged
async def test_a_second_live_name_is_refused_and_repair_mends_old_duplicates(
    opener, types, tmp_path
):
    """The store's unique indexes refuse a second live node at a path and a second live
    file of one name in a folder: the change is refused (EEXIST), rolled back, and the
    mount stays writable. A store that holds such duplicates from before (the indexes
    dropped, rows renamed by hand the way a bug would leave them) fails fsck, and
    `repair_store` renames them beside each other, keeps every byte, and brings the
    indexes back."""
    m = _memory(opener, types, tmp_path)
    fs = _fs(m)
    node = "user/default/preferences/files"
    await fs.mkdir(node)
    await fs.write(f"{node}/L2.md", b"Files.\n")
    await fs.write(f"{node}/a.txt", b"first\n")
    await fs.write(f"{node}/b.txt", b"second\n")
    await fs.mkdir("user/default/preferences/tea")
    await fs.write("user/default/preferences/tea/L2.md", b"Green tea.\n")
    await fs.mkdir("user/default/preferences/tea2")
    await fs.write("user/default/preferences/tea2/L2.md", b"Black tea.\n")
    a = next(x for x in m.attachments.values() if x.name == "a.txt")
    b = next(x for x in m.attachments.values() if x.name == "b.txt")
    b.name = "a.txt"
    with pytest.raises(Exists):
        m.attachment_store.update_attachment(b)
    assert (b.name, m.failsafe) == ("b.txt", None)  # rolled back, still writable
    await fs.write(f"{node}/c.txt", b"third\n")
    tea1 = next(x for x in m.nodes.values() if x.name == "tea")
    tea2 = next(x for x in m.nodes.values() if x.name == "tea2")
    with pytest.raises(Exists), m.transaction():
        m.store.con.execute("UPDATE nodes SET name = 'tea' WHERE id = ?", [tea2.id])
    assert check_store(m.store) == []
    # refused inside a nested use whose caller takes the refusal and goes on (the inbox
    # routes candidate after candidate in one transaction): the store has aborted all of
    # it, so all of it rolls back with the refusal, and nothing is taken for damage
    for then_more in (False, True):
        with pytest.raises(Exists), m.transaction():
            m.save_l2(tea1, "Green tea, hot.\n")
            with contextlib.suppress(Exists), m.transaction():
                m.store.con.execute("UPDATE nodes SET name = 'tea' WHERE id = ?", [tea2.id])
            if then_more:
                m.save_l2(tea2, "Black tea, strong.\n")
        assert m.failsafe is None
        assert (tea1.l2, tea2.l2) == ("Green tea.\n", "Black tea.\n")
    assert check_store(m.store) == []

    # what an older version could leave behind: the duplicates, without the indexes
    drop_live_name_indexes(m.store.con)
    m.store.con.execute("UPDATE attachments SET name = 'a.txt' WHERE id = ?", [b.id])
    m.store.con.execute("UPDATE nodes SET name = 'tea' WHERE id = ?", [tea2.id])
    found = {p.split(":")[0] for p in check_store(m.store)}
    assert found == {"live_name_constraints", "unique_live_nodes", "attachments_consistent"}
    done = repair_store(m.store)
    assert len(done) == 2, done
    assert check_store(m.store) == []
    m.store.close()

    again = _memory(opener, types, tmp_path)
    fs = _fs(again)
    names = set(await fs.listdir(node))
    assert {"a.txt", f"a.duplicate-{a.id}.txt", "c.txt"} <= names, names
    # the one written last keeps the name; the other is beside it, bytes and all
    assert await fs.read(f"{node}/a.txt") == b"second\n"
    assert await fs.read(f"{node}/a.duplicate-{a.id}.txt") == b"first\n"
    prefs = "user/default/preferences"
    assert {"tea", f"tea-duplicate-{tea1.id}"} <= set(await fs.listdir(prefs))
    assert await fs.text(f"{prefs}/tea/L2.md") == "Black tea.\n"
    assert await fs.text(f"{prefs}/tea-duplicate-{tea1.id}/L2.md") == "Green tea.\n"
    with pytest.raises(Exists), again.transaction():  # the constraint is back
        again.store.con.execute("UPDATE nodes SET name = 'tea' WHERE name LIKE 'tea-duplicate-%'")
    again.store.close()


async def test_repair_removes_a_deleted_link_left_naming_a_file_of_another_node(
    opener, types, tmp_path
):
    """What a move of a hard-linked file to another node left behind before moves took
    the deleted names along: the deleted link in the first node, its file in the second
    (fsck: `links_consistent`, the store mounted read-only). `repair_store` removes that
    name; the file and its bytes stay."""
    m = _memory(opener, types, tmp_path)
    fs = _fs(m)
    prefs = "user/default/preferences"
    for name in ("one", "two"):
        await fs.mkdir(f"{prefs}/{name}")
        await fs.write(f"{prefs}/{name}/L2.md", f"Node {name}.\n".encode())
    await fs.write(f"{prefs}/one/f", b"the file\n")
    await fs.ops.link(await fs.ino(f"{prefs}/one/f"), await fs.ino(f"{prefs}/one"), b"g", fs.ctx)
    await fs.unlink(f"{prefs}/one/g")
    f = next(x for x in m.attachments.values() if x.name == "f")
    two = next(x for x in m.nodes.values() if x.name == "two")
    m.store.con.execute("UPDATE attachments SET node_id = ? WHERE id = ?", [two.id, f.id])
    assert [p.split(":")[0] for p in check_store(m.store)] == ["links_consistent"]
    done = repair_store(m.store)
    assert len(done) == 1 and done[0].startswith("deleted_links_elsewhere:"), done
    assert check_store(m.store) == []
    m.store.close()
    again = _memory(opener, types, tmp_path)
    assert await _fs(again).read(f"{prefs}/two/f") == b"the file\n"
    again.store.close()


async def test_unlinking_the_first_name_of_a_hard_linked_file_on_either_store(
    opener, types, tmp_path
):
    """The holder's row takes the name that stays, through a temporary name no file can
    have: it held a NUL, which PostgreSQL's text refuses (`rm` of the first name, and `rm
    -r` of a node holding a hard link, were EINVAL there)."""
    m = _memory(opener, types, tmp_path)
    fs = _fs(m)
    node = "user/default/preferences/links"
    await fs.mkdir(node)
    await fs.write(f"{node}/L2.md", b"Links.\n")
    await fs.write(f"{node}/f", b"the file\n")
    for other in (b"g", b"h"):
        await fs.ops.link(await fs.ino(f"{node}/f"), await fs.ino(node), other, fs.ctx)
    await fs.unlink(f"{node}/f")
    assert {"g", "h"} <= set(await fs.listdir(node)) and not await fs.exists(f"{node}/f")
    await fs.rename(f"{node}/g", f"{node}/g2")
    assert await fs.read(f"{node}/g2") == b"the file\n" == await fs.read(f"{node}/h")
    assert m.failsafe is None and check_store(m.store) == []
    m.store.close()
    again = _memory(opener, types, tmp_path)
    assert await _fs(again).read(f"{node}/h") == b"the file\n"
    again.store.close()


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


def test_a_versions_time_and_a_nodes_access_survive_a_reopen(opener, types, tmp_path):
    """What a copy or an import gives back besides text: an earlier version's time (a
    copier's `.history` file time, `Memory.set_version_time`) and a node's owner, group and
    modes (an export's `access` fact), stored on either store."""
    m = _memory(opener, types, tmp_path)
    n = m.create_node(("user", "default"), types["preference"], "tea")
    m.save_l2(n, "one\n")
    m.save_l2(n, "two\n")
    m.set_version_time(n, 1, 1609495200.0)
    m.set_version_time(n, 2, 1.0)  # the current version's time is the node's last change
    m.set_access("node", str(n.id), Access(4321, 4321, 0o700, 0o600))
    m.store.close()
    again = _memory(opener, types, tmp_path)
    (node,) = [x for x in again.nodes.values() if x.name == "tea"]
    times = {v: c for v, c, _s in again.store.node_history(node.id)[0]}
    assert times[1] == 1609495200.0 and times[2] > 1.0
    assert again.access[("node", str(node.id))] == Access(4321, 4321, 0o700, 0o600)
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


@pytest.mark.allow_warnings
async def test_an_inbox_item_with_a_memory_the_store_refuses_keeps_the_others(
    pg_dsn, types, tmp_path
):
    """PostgreSQL's text takes no NUL: a turn holding one gives a memory (and an archive)
    the store refuses. That refusal aborted the item's whole filing, retried every 30 s,
    the item pending for ever and every item behind it stuck; now the item is filed again
    memory by memory: the refused one is in its report, the others are kept."""
    import json

    from contextfs.conversations.inbox import Intake, IntakeService
    from contextfs.store.backend import open_store

    m = _memory(lambda: open_store(pg_dsn), types, tmp_path)
    intake = Intake(m)
    lines = [
        {"role": "user", "content": "I prefer vim.", "id": "a"},
        {"role": "user", "content": "My favourite tea is gen\u0000maicha.", "id": "b"},
    ]
    data = "".join(json.dumps(x) + "\n" for x in lines).encode()
    item = intake.submit(("user", "default"), "chat.jsonl", data)
    after = intake.submit(
        ("user", "default"), "next.jsonl", b'{"role":"user","content":"I prefer zsh."}\n'
    )
    service = IntakeService(intake)
    while await service.step():
        pass
    assert item.state == "done" and after.state == "done", (item.report, after.report)
    assert "not archived" in item.report and "NUL" in item.report, item.report
    paths = {m.node_path(n) for n in m.walk()}
    assert {"user/default/preferences/editor", "user/default/preferences/shell"} <= paths, paths
    assert m.failsafe is None and check_store(m.store) == []
    m.store.close()


async def test_an_inbox_filing_cut_short_goes_on_and_its_stray_steps_are_repaired(
    opener, types, tmp_path, monkeypatch
):
    """On both engines: a conversation's memories filed a step a transaction, each step
    stored (`inbox_steps`); cut short after a few, the next open goes on with the others,
    each routed once. Steps left behind by a filing that is over (as a bug would leave
    them) fail fsck, and the repair removes them."""
    from contextfs.conversations import inbox
    from contextfs.conversations.inbox import Intake, IntakeService, conversation_key
    from tests.fs.test_inbox_steps import notes

    monkeypatch.setattr(inbox, "FILING_STEP_SECONDS", 0.0)  # one memory a step
    m = _memory(opener, types, tmp_path)
    intake = Intake(m)
    item = intake.submit(("user", "default"), "notes.md", notes(5))
    parsed = intake.parse(item)
    key = conversation_key(parsed.conversations[0].turns)
    ready = intake.prepare(item, parsed, 0, {}, intake.owner_names(("user", "default")), key)
    steps = intake.finish_item(item, parsed.without_turns(), ready)
    for _ in range(3):
        next(steps)
    del steps  # the mount dies here
    m.store.close()

    again = _memory(opener, types, tmp_path)
    intake = Intake(again)
    assert await IntakeService(intake).step() is True
    done = intake.items[item.id]
    assert done.state == "done" and done.report.count("- created ") == 10, done.report
    events = [n.name for n in again.walk(types=("event",))]
    assert len(events) == 5 and not [e for e in events if e.endswith("-2")], events
    assert check_store(again.store) == []
    with again.transaction():
        again.add_inbox_step(item.id, 0, 0, "{}")
    assert [p.split(":")[0] for p in check_store(again.store)] == ["inbox_steps_of_pending"]
    assert repair_store(again.store) == [
        f"stray_inbox_steps: inbox item {item.id}: the steps of its finished filing removed"
    ]
    assert check_store(again.store) == []
    again.store.close()
