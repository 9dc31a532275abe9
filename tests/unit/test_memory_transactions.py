"""Memory.transaction as the one transaction boundary: rollback undoes the in-memory
mirrors, commit writes everything the transaction logged, and the change feed tells
subscribers what committed (nothing on rollback). A real Store in tmp_path throughout."""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from contextfs.fs.build import build_tree
from contextfs.fs.ops import Operations
from contextfs.memory.redact import Redactor
from contextfs.memory.service import Memory
from contextfs.model import Change
from contextfs.store import Store
from contextfs.store.fsck import check_store
from tests.fs.conftest import FS

OWNER = ("user", "default")
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "contextfs.duckdb"


@pytest.fixture
def mem(tmp_path: Path, db: Path, types) -> Iterator[Memory]:
    """A Memory with the secret redactor on (the shared `memory` fixture has none)."""
    store = Store(db)
    m = Memory(store, types, data_dir=tmp_path, redactor=Redactor())
    m.create_owner(*OWNER)
    yield m
    store.close()  # again, for tests that closed it already: harmless
    check = Store(db, read_only=True)
    try:
        assert check_store(check) == []
    finally:
        check.close()


def _rows(store: Store) -> dict[str, list]:
    return {
        table: store.con.execute(f"SELECT * FROM {table} ORDER BY ALL").fetchall()
        for table in (
            "nodes",
            "versions",
            "outbox",
            "owners",
            "attachments",
            "attachment_chunks",
            "redactions",
        )
    }


_NOT_JOURNALED = {"indexed_version", "access_count"}


def _state(m: Memory) -> dict:
    """Everything the in-memory mirrors hold, as plain values."""
    return {
        # every field but the two a rollback leaves alone: indexer progress and reads
        "nodes": {
            nid: {k: v for k, v in dataclasses.asdict(n).items() if k not in _NOT_JOURNALED}
            for nid, n in ((n.id, n) for n in m.nodes.values())
        },
        "live": dict(m.live.items()),
        "by_owner": {o: set(m.live.ids(o)) for o in m.owners if m.live.ids(o)},
        "owners": set(m.owners),
        "attachments": {
            aid: (a.node_id, a.parent_id, a.name, a.mode, a.mtime, a.deleted_at, a.size)
            for aid, a in m.attachments.items()
        },
        "generation": m.generation,
        "pending_redactions": list(m.transactions.pending_redactions),
    }


def _read_only(db: Path) -> Store:
    return Store(db, read_only=True)


# ---- (a) a rollback leaves memory and the store as they were --------------------------------


def test_rollback_undoes_every_mirror_and_the_store(mem: Memory) -> None:
    entity = mem.types["entity"]
    n = mem.create_node(OWNER, entity, "alpha")
    mem.save_l2(n, "first text\n")
    gone = mem.create_node(OWNER, entity, "gone")
    mem.save_l2(gone, "to be deleted\n")
    att = mem.attachment_store.add_attachment(n, None, "a.bin", "file", 0o644, data=b"abc")
    moved = mem.attachment_store.add_attachment(n, None, "m.bin", "file", 0o644, data=b"m")
    mkdir_node = mem.create_node(OWNER, entity, "empty", persist=False)
    mem.record_access(n)
    before, rows = _state(mem), _rows(mem.store)

    with pytest.raises(RuntimeError, match="the caller's own code"), mem.transaction():
        assert mem.save_l2(n, f"second text {AWS_KEY}\n")
        new = mem.create_node(OWNER, entity, "beta")
        mem.save_l2(new, "a new node\n")
        mem.save_l2(mkdir_node, "first commit of a mkdir node\n")
        mem.create_owner("agent", "helper")
        mem.delete_node(gone)
        mem.rename_node(n, OWNER, entity, "renamed")
        mem.attachment_store.remove_attachment(att)
        moved.name, moved.mode = "renamed.bin", 0o600  # the tree's way: change, then store
        mem.attachment_store.update_attachment(moved)
        mem.attachment_store.add_attachment(n, None, "b.txt", "file", 0o644, data=b"x")
        mem.routing.route(OWNER, mem.types["preference"], "tea.md", b"Green tea.\n")
        raise RuntimeError("the caller's own code fails after the saves returned")

    assert _state(mem) == before
    assert _rows(mem.store) == rows
    assert mem.store.generation() == mem.generation
    # the mirrors still agree with the store: the next writes work and number on
    assert mem.save_l2(n, "third text\n")
    assert n.version == 2 and n.history[-1][0] == 2
    assert mem.store.generation() == mem.generation == before["generation"] + 1


def test_a_failing_save_inside_a_transaction_rolls_back_the_earlier_saves(mem: Memory) -> None:
    entity = mem.types["entity"]
    n = mem.create_node(OWNER, entity, "alpha")
    mem.save_l2(n, "kept\n")
    before, rows = _state(mem), _rows(mem.store)
    with pytest.raises(Exception) as info, mem.transaction():
        mem.save_l2(n, "would be lost\n")
        mem.save_l2(n, "---\nbad: [unclosed\n---\nbody\n")  # refused: front matter
    assert info.value.errno  # an InvalidInput, errno EINVAL
    assert _state(mem) == before and _rows(mem.store) == rows


# ---- (b) the redaction log commits with the outer transaction --------------------------------


def test_redaction_log_row_commits_with_the_outer_transaction(mem: Memory, db: Path) -> None:
    n = mem.create_node(OWNER, mem.types["entity"], "keys")
    with mem.transaction():
        mem.save_l2(n, f"the key is {AWS_KEY}\n")
    assert AWS_KEY not in n.l2
    assert mem.transactions.pending_redactions == []
    mem.store.close()  # nothing else runs: what a kill -9 right now would keep
    check = _read_only(db)
    try:
        rows = check.con.execute("SELECT path, kind, count FROM redactions").fetchall()
    finally:
        check.close()
    assert rows == [("user/default/entities/keys/L2.md", "aws_access_key", 1)]


def test_a_rolled_back_write_leaves_no_redaction_log_row(mem: Memory) -> None:
    n = mem.create_node(OWNER, mem.types["entity"], "keys")
    with pytest.raises(RuntimeError), mem.transaction():
        mem.save_l2(n, f"the key is {AWS_KEY}\n")
        raise RuntimeError("abandon")
    assert mem.transactions.pending_redactions == []
    mem.save_l2(n, "no secret here\n")
    assert mem.store.redaction_total() == 0


# ---- (c) a node created and saved in one transaction is persisted once ----------------------


def _outbox_rows(store: Store, node_id: int, version: int) -> int:
    return store.con.execute(
        "SELECT count(*) FROM outbox WHERE node_id = ? AND version = ?", [node_id, version]
    ).fetchone()[0]


@pytest.mark.parametrize("persist", [True, False])
def test_create_and_save_in_one_transaction_is_persisted(mem: Memory, persist: bool) -> None:
    with mem.transaction():
        n = mem.create_node(OWNER, mem.types["entity"], "fresh", persist=persist)
        mem.save_l2(n, "hello\n")
    assert n.persisted
    assert mem.persist_pending() == 0
    assert _outbox_rows(mem.store, n.id, n.version) == 1


# ---- (b) and (c) through the tree's own transactions (rename over L2.md) ---------------------


@pytest.fixture
def fs(mem: Memory) -> FS:
    return FS(Operations(build_tree(mem, status=lambda: "status\n")))


async def _rename_open_drop_over_l2(fs: FS, node_dir: str, data: bytes) -> None:
    """An editor's pattern: a temporary file, still open and never closed, renamed over
    L2.md. The tree saves it in a transaction of its own around save_l2."""
    ops = fs.ops
    p, name = await fs.parent("user/default/preferences/tmp.md")
    fi, _ = await ops.create(p, name, 0o644, os.O_WRONLY | os.O_CREAT, fs.ctx)
    try:
        await ops.write(fi.fh, 0, data)
        await fs.rename("user/default/preferences/tmp.md", f"{node_dir}/L2.md")
        await ops.flush(fi.fh)
    finally:
        await ops.release(fi.fh)


async def test_rename_over_l2_commits_its_redaction_log_row(fs: FS, mem: Memory, db: Path) -> None:
    await fs.mkdir("user/default/entities/keys")
    await _rename_open_drop_over_l2(fs, "user/default/entities/keys", f"key {AWS_KEY}\n".encode())
    assert AWS_KEY not in await fs.text("user/default/entities/keys/L2.md")
    mem.store.close()  # a kill -9 now
    check = _read_only(db)
    try:
        rows = check.con.execute("SELECT path, kind FROM redactions").fetchall()
    finally:
        check.close()
    assert rows == [("user/default/entities/keys/L2.md", "aws_access_key")]


async def test_rename_over_l2_of_a_new_node_persists_it_once(fs: FS, mem: Memory) -> None:
    await fs.mkdir("user/default/entities/fresh")
    await _rename_open_drop_over_l2(fs, "user/default/entities/fresh", b"hello\n")
    n = mem.nodes[mem.live[("user", "default", "entity", "fresh")]]
    assert n.l2 == "hello\n"
    assert n.persisted
    assert mem.persist_pending() == 0
    assert _outbox_rows(mem.store, n.id, n.version) == 1


# ---- (d) the change feed ----------------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.batches: list[tuple[Change, ...]] = []

    def __call__(self, changes: Sequence[Change]) -> None:
        assert isinstance(changes, tuple)
        self.batches.append(changes)


def test_one_batch_per_outer_commit_with_what_committed(mem: Memory) -> None:
    rec = Recorder()
    mem.transactions.subscribe(rec)
    entity = mem.types["entity"]
    with mem.transaction():
        a = mem.create_node(OWNER, entity, "a")
        mem.save_l2(a, "one\n")
        b = mem.create_node(OWNER, entity, "b", persist=False)
        mem.save_l2(b, "two\n")
        assert rec.batches == []  # nothing before the commit
    assert len(rec.batches) == 1
    changes = {c.node_id: c for c in rec.batches[0]}
    assert set(changes) == {a.id, b.id}
    # each change carries the generation its transaction committed at: the newest seq
    assert changes[a.id] == Change(
        "node",
        "created",
        "user/default/entities/a",
        mem.store.con.execute("SELECT max(seq) FROM outbox").fetchone()[0],
        node_id=a.id,
    )
    assert changes[b.id].generation == mem.generation

    mem.save_l2(a, "one, changed\n")
    mem.rename_node(a, OWNER, entity, "a2")
    mem.delete_node(b)
    ops = [(c.kind, c.op, c.path, c.old_path) for batch in rec.batches[1:] for c in batch]
    assert ops == [
        ("node", "updated", "user/default/entities/a", None),
        ("node", "moved", "user/default/entities/a2", "user/default/entities/a"),
        ("node", "deleted", "user/default/entities/b", None),
    ]
    mem.create_owner("agent", "bot")
    att = mem.attachment_store.add_attachment(a, None, "f.txt", "file", 0o644, data=b"x")
    assert [(c.kind, c.op, c.path) for c in rec.batches[-2] + rec.batches[-1]] == [
        ("owner", "created", "agent/bot"),
        ("attachment", "created", "user/default/entities/a2/f.txt"),
    ]
    assert rec.batches[-1][0].id == att.id and rec.batches[-1][0].node_id == a.id


def test_nothing_is_published_on_rollback_and_unsubscribe_stops(mem: Memory) -> None:
    rec = Recorder()
    unsubscribe = mem.transactions.subscribe(rec)
    n = mem.create_node(OWNER, mem.types["entity"], "x")
    assert len(rec.batches) == 1
    with pytest.raises(RuntimeError), mem.transaction():
        mem.save_l2(n, "text\n")
        raise RuntimeError("no")
    assert len(rec.batches) == 1
    unsubscribe()
    mem.save_l2(n, "text\n")
    assert len(rec.batches) == 1
    unsubscribe()  # twice is harmless


@pytest.mark.allow_warnings
def test_a_raising_subscriber_does_not_fail_the_write(
    mem: Memory, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(changes: Sequence[Change]) -> None:
        raise ValueError("subscriber bug")

    rec = Recorder()
    mem.transactions.subscribe(broken)
    mem.transactions.subscribe(rec)
    n = mem.create_node(OWNER, mem.types["entity"], "x")
    assert mem.save_l2(n, "stored\n")
    assert mem.store.version_text(n.id, 1) == "stored\n"
    assert len(rec.batches) == 2  # the later subscriber still hears of both commits
    assert any(
        "subscriber failed" in r.getMessage() and r.levelno == logging.ERROR for r in caplog.records
    )


def test_inbox_and_session_rows_reach_the_feed(mem: Memory) -> None:
    from contextfs.conversations.inbox import Intake

    intake = Intake(mem)
    rec = Recorder()
    mem.transactions.subscribe(rec)
    item = intake.submit(OWNER, "chat.md", b"# notes\n\nhello\n")
    s = intake.start_session(OWNER, "s1")
    intake.record(s, b'{"role": "user", "content": "hi"}\n')
    intake.end_session(s)
    seen = [(c.kind, c.op, c.path) for batch in rec.batches for c in batch]
    assert seen[:3] == [
        ("inbox", "created", "user/default/.inbox/chat.md"),
        ("session", "created", "user/default/.sessions/s1"),
        ("session", "updated", "user/default/.sessions/s1"),
    ]
    assert ("session", "deleted", "user/default/.sessions/s1") in seen
    assert any(k == "node" and op == "created" and "/sessions/" in p for k, op, p in seen)
    assert rec.batches[0][0].id == item.id
