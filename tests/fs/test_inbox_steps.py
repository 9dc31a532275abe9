"""A conversation with many memories is filed in steps (`Intake._file`): its archive and
the first memories in one transaction, then the rest a batch a transaction, each step
storing what it did (`inbox_steps`). A daemon that dies between two steps leaves the
archive and the memories routed so far; the next open goes on with the others, none
routed twice (an event routed again would be a second node), none lost, the report
naming each once."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from contextfs.conversations import inbox
from contextfs.conversations.inbox import Intake, IntakeService, conversation_key
from contextfs.memory.service import Memory
from contextfs.store import Store
from contextfs.store.fsck import check_store

OWNER = ("user", "default")


def notes(n: int) -> bytes:
    """Markdown notes of `n` lines, each a preference and a dated event (2n memories)."""
    day = dt.date(2020, 1, 1)
    lines = []
    for i in range(n):
        d = day + dt.timedelta(days=i)
        lines.append(
            f"I prefer wq {i} for wqz {i}. I have a meeting with Sara on {d.day} {d:%B %Y}."
        )
    return ("\n".join(lines) + "\n").encode()


def _open(tmp_path: Path, types) -> tuple[Store, Memory, Intake]:
    store = Store(tmp_path / "c.duckdb")
    memory = Memory(store, types, data_dir=tmp_path)
    if OWNER not in memory.owners:
        memory.create_owner(*OWNER)
    return store, memory, Intake(memory)


async def test_a_filing_cut_short_goes_on_with_each_memory_once(
    tmp_path: Path, types, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(inbox, "FILING_STEP_SECONDS", 0.0)  # one memory a step
    n = 20
    store, memory, intake = _open(tmp_path, types)
    item = intake.submit(OWNER, "notes.md", notes(n))
    parsed = intake.parse(item)
    turns = parsed.conversations[0].turns
    ready = intake.prepare(item, parsed, 0, {}, intake.owner_names(OWNER), conversation_key(turns))
    assert len(ready.candidates) == 2 * n
    steps = intake.finish_item(item, parsed.without_turns(), ready)
    for _ in range(7):  # seven steps committed: the archive and seven memories
        next(steps)
    assert item.state == "pending"
    assert "state: processing (7 of 40 memories routed)" in item.report, item.report
    del steps  # the daemon dies here: nothing more is stored
    store.close()

    store, memory, intake = _open(tmp_path, types)
    assert len(list(memory.walk(types=("preference", "event")))) == 7
    assert len(list(memory.walk(types=("session",)))) == 1
    [again] = intake.pending()
    assert await IntakeService(intake).step() is True
    assert again.state == "done", again.report
    prefs = sorted(x.name for x in memory.walk(types=("preference",)))
    events = sorted(x.name for x in memory.walk(types=("event",)))
    assert prefs == sorted(f"wqz-{i}" for i in range(n)), prefs
    assert len(events) == n and not [e for e in events if e.endswith("-2")], events
    assert len(list(memory.walk(types=("session",)))) == 1, "archived once"
    report = again.report
    assert report.count("- created user/default/preferences/wqz-") == n, report
    assert report.count("- created user/default/events/") == n, report
    assert "## Archived\n- user/default/sessions/" in report, report
    assert store.con.execute("SELECT count(*) FROM inbox_steps").fetchone() == (0,)
    assert check_store(store) == []
    store.close()


def _export(texts: list[str]) -> bytes:
    """A ChatGPT export: one conversation a text (its user turn), titled `Chat <i>`."""
    out = []
    for c, text in enumerate(texts):
        mapping: dict = {"root": {"message": None, "parent": None, "children": ["q"]}}
        mapping["q"] = {
            "message": {
                "id": f"{c}q",
                "author": {"role": "user"},
                "create_time": 1_700_000_000 + c * 86_400,
                "content": {"content_type": "text", "parts": [text]},
            },
            "parent": "root",
            "children": [],
        }
        out.append({"title": f"Chat {c}", "mapping": mapping, "current_node": "q"})
    return json.dumps(out).encode()


async def test_an_export_cut_short_in_a_conversation_goes_on_inside_it(
    tmp_path: Path, types, monkeypatch: pytest.MonkeyPatch
):
    """An export's conversation of many memories is filed in steps too; cut short inside
    it, the next open finishes it (none of its memories twice) and the conversations
    after it, each archived once."""
    monkeypatch.setattr(inbox, "FILING_STEP_SECONDS", 0.0)
    n = 10
    store, memory, intake = _open(tmp_path, types)
    texts = ["I prefer tea.", notes(n).decode(), "I prefer zsh."]
    item = intake.submit(OWNER, "conversations.json", _export(texts))
    parsed = intake.parse(item)
    assert parsed.export and len(parsed.conversations) == 3
    progress = intake.export_progress(item, parsed)
    names = intake.owner_names(OWNER)

    def ready(i: int) -> inbox.Prepared:
        key = conversation_key(parsed.conversations[i].turns)
        return intake.prepare(item, parsed, i, {}, names, key)

    for _ in intake.file_conversation(item, parsed, progress, ready(0)):
        pass
    progress = intake.export_progress(item, parsed)  # as the item stores it now
    assert progress.done == 1
    steps = intake.file_conversation(item, parsed, progress, ready(1))
    for _ in range(4):
        next(steps)
    del steps  # the daemon dies inside the second conversation
    store.close()

    store, memory, intake = _open(tmp_path, types)
    [again] = intake.pending()
    assert await IntakeService(intake).step() is True
    assert again.state == "done", again.report
    assert "3 of 3 conversations archived" in again.report, again.report
    events = [x.name for x in memory.walk(types=("event",))]
    assert len(events) == n and not [e for e in events if e.endswith("-2")], events
    prefs = {x.name for x in memory.walk(types=("preference",))}
    assert {f"wqz-{i}" for i in range(n)} <= prefs, prefs
    assert len(list(memory.walk(types=("session",)))) == 3, "each archived once"
    assert store.con.execute("SELECT count(*) FROM inbox_steps").fetchone() == (0,)
    assert check_store(store) == []
    store.close()
