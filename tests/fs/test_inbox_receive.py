"""A big file handed to an inbox is stored in steps (`Intake.receive`): each step its own
transaction, the item invisible to the intake until the last. A daemon that dies in the
middle leaves a `receiving` item that fsck accepts and the next mount drops with its
chunks and blobs: its close never returned, so nothing acknowledged is lost. A
conversation handed in again is archived once (its content key)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from contextfs.conversations.inbox import Intake, IntakeService
from contextfs.memory.service import Memory
from contextfs.store import Store
from contextfs.store.fsck import check_store

OWNER = ("user", "default")


def _export(n: int) -> bytes:
    """A JSONL transcript of `n` turns, about 1 KiB each."""
    pad = "x" * 1000
    return "\n".join(
        f'{{"role": "user", "content": "turn {i}: the lighthouse keeper logs the tide. {pad}"}}'
        for i in range(n)
    ).encode()


async def test_a_big_item_arrives_in_steps_and_is_processed_whole(tmp_path: Path, types):
    store = Store(tmp_path / "c.duckdb")
    memory = Memory(store, types, data_dir=tmp_path)
    memory.create_owner(*OWNER)
    memory.INBOX_STEP_BYTES = 256 * 1024
    intake = Intake(memory)
    data = _export(2000)  # ~2 MB: eight steps
    steps = 0
    item = None
    for step in intake.receive(OWNER, "log.jsonl", data):
        if step is None:
            steps += 1
            assert intake.pending() == []  # not handed in before its last step
        item = step
    assert item is not None and steps >= 8
    assert [i.id for i in intake.pending()] == [item.id]
    assert intake.item_data(item) == data
    assert await IntakeService(intake).step() is True
    assert "state: done" in item.report and "2000 turns" in item.report, item.report
    store.close()
    check = Store(tmp_path / "c.duckdb", read_only=True)
    try:
        assert check_store(check) == []
    finally:
        check.close()


CUT_SHORT = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from contextfs.ctxtypes import builtin_schema_dir, load_types
    from contextfs.conversations.inbox import Intake
    from contextfs.memory.service import Memory
    from contextfs.store import Store

    d = Path(sys.argv[1])
    memory = Memory(Store(d / "c.duckdb"), load_types([builtin_schema_dir()]), data_dir=d)
    memory.create_owner("user", "default")
    memory.INBOX_STEP_BYTES = 256 * 1024
    intake = Intake(memory)
    intake.submit(("user", "default"), "small.md", b"I keep bees.")
    data = bytes(sys.argv[2], "ascii") * (2 * 1024 * 1024 // len(sys.argv[2]))
    steps = intake.receive(("user", "default"), "big.jsonl", data)
    for _ in range(4):  # the row and three steps of chunks, committed
        next(steps)
    os._exit(9)  # the daemon dies: no rollback, no cleanup
    """
)


def test_a_receive_cut_short_by_a_crash_is_dropped_by_the_next_mount(tmp_path: Path, types):
    line = '{"role": "user", "content": "the tide tables for March"}\n'
    r = subprocess.run(
        [sys.executable, "-c", CUT_SHORT, str(tmp_path), line],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert r.returncode == 9, r.stderr
    check = Store(tmp_path / "c.duckdb", read_only=True)
    try:
        assert check_store(check) == []  # a `receiving` item may be incomplete
        states = [row[5] for row in check.inbox_items()]
        assert sorted(states) == ["pending", "receiving"]
    finally:
        check.close()

    store = Store(tmp_path / "c.duckdb")
    memory = Memory(store, types, data_dir=tmp_path)
    intake = Intake(memory)  # what a mount does first
    assert [i.filename for i in intake.items.values()] == ["small.md"]
    assert [row[3] for row in memory.inbox_items()] == ["small.md"]
    with store.atomic():
        store.sweep()
    chunks = store.con.execute("SELECT count(*) FROM inbox_chunks").fetchone()[0]
    blobs = store.con.execute("SELECT count(*) FROM blobs").fetchone()[0]
    assert chunks == 1 and blobs == 1  # only small.md's
    store.close()
    check = Store(tmp_path / "c.duckdb", read_only=True)
    try:
        assert check_store(check) == []
    finally:
        check.close()


def _chatgpt(titles: list[str]) -> bytes:
    """A ChatGPT export: one two-turn conversation a title."""
    out = []
    for c, title in enumerate(titles):
        mapping: dict = {"root": {"message": None, "parent": None, "children": ["q"]}}
        for mid, role, parent in (("q", "user", "root"), ("a", "assistant", "q")):
            text = f"{title}: {'a question' if role == 'user' else 'an answer'} about tides."
            mapping[mid] = {
                "message": {
                    "id": f"{c}{mid}",
                    "author": {"role": role},
                    "create_time": 1_700_000_000 + c * 86_400,
                    "content": {"content_type": "text", "parts": [text]},
                },
                "parent": parent,
                "children": ["a"] if mid == "q" else [],
            }
        out.append({"title": title, "mapping": mapping, "current_node": "a"})
    return json.dumps(out).encode()


async def test_a_conversation_handed_in_again_is_archived_once(tmp_path: Path, types):
    """The same turns handed in again (another name, after a crash or by mistake) are not
    archived or extracted again, also after a restart; the report names the archive. An
    export handed in again files only its new conversations; an archive deleted since is
    archived again."""
    store = Store(tmp_path / "c.duckdb")
    memory = Memory(store, types, data_dir=tmp_path)
    memory.create_owner(*OWNER)
    intake = Intake(memory)
    service = IntakeService(intake)
    transcript = _export(3)
    first = intake.submit(OWNER, "tides.jsonl", transcript)
    assert await service.step() is True
    archives = list(memory.walk(types=("session",)))
    assert len(archives) == 1 and "state: done" in first.report

    again = intake.submit(OWNER, "tides-2.jsonl", transcript)
    assert await service.step() is True
    assert "archived before with the same turns, not filed again" in again.report
    assert memory.node_path(archives[0]) in again.report
    assert len(list(memory.walk(types=("session",)))) == 1

    older = intake.submit(OWNER, "chats.json", _chatgpt(["Tide tables", "Harbour lights"]))
    assert await service.step() is True
    assert "2 of 2 conversations archived" in older.report, older.report
    store.close()

    # a restart: the keys are read back from the archives' provenance
    store = Store(tmp_path / "c.duckdb")
    memory = Memory(store, types, data_dir=tmp_path)
    intake = Intake(memory)
    service = IntakeService(intake)
    newer = _chatgpt(["Tide tables", "Harbour lights", "Night ferry"])
    later = intake.submit(OWNER, "chats-2.json", newer)
    assert await service.step() is True
    assert "1 of 3 conversations archived" in later.report, later.report
    assert "2 of 3 conversations archived before with the same turns" in later.report
    assert "- user/default/sessions/2023-11-16-night-ferry" in later.report, later.report
    titles = sorted(n.name for n in memory.walk(types=("session",)))
    assert len(titles) == 4, titles

    # an archive deleted since: the same turns are archived again
    [tides] = [n for n in memory.walk(types=("session",)) if "tides" in n.name]
    memory.delete_node(tides)
    third = intake.submit(OWNER, "tides-3.jsonl", transcript)
    assert await service.step() is True
    assert "extraction: RuleExtractor" in third.report, third.report
    assert len(list(memory.walk(types=("session",)))) == 4
    store.close()


async def test_an_agents_transcript_gives_its_user_their_memories(tmp_path: Path, types):
    """An agent hands its conversation with its user to its own inbox: what the user said
    of themselves is the user's (the default user's preference, profile, entity), what
    the agent learnt is the agent's; it was all dropped but the agent's."""
    store = Store(tmp_path / "c.duckdb")
    memory = Memory(store, types, data_dir=tmp_path)
    memory.create_owner(*OWNER)
    memory.create_owner("agent", "helper")
    intake = Intake(memory)
    lines = [
        {"role": "user", "content": "I prefer vim. My sister Emma lives in Porto.", "id": "a"},
        {"role": "assistant", "content": "Noted.", "id": "b"},
        {"role": "tool", "name": "bash", "input": {"cmd": "ls"}, "output": "ok", "id": "c"},
    ]
    data = "".join(json.dumps(x) + "\n" for x in lines).encode()
    item = intake.submit(("agent", "helper"), "chat.jsonl", data)
    assert await IntakeService(intake).step() is True
    assert "state: done" in item.report, item.report
    paths = {memory.node_path(n) for n in memory.walk()}
    assert {"user/default/preferences/editor", "user/default/entities/emma"} <= paths, paths
    assert "agent/helper/tools/bash" in paths, paths
    assert "created user/default/preferences/editor" in item.report
    store.close()
