"""The write-strategy table: one entry per mode, used by routing and consolidation alike."""

from __future__ import annotations

from dataclasses import replace

import pytest

from contextfs import ctxtypes
from contextfs.ctxtypes import ContextType
from contextfs.errors import InvalidInput
from contextfs.memory import strategies
from contextfs.memory.consolidate import consolidate
from contextfs.memory.document import Document, merge_documents
from contextfs.memory.service import Memory
from contextfs.memory.strategies import STRATEGIES, Strategy, strategy_for
from contextfs.store import Store

OWNER = ("user", "default")


def test_every_mode_has_exactly_one_strategy() -> None:
    assert set(STRATEGIES) == set(ctxtypes.MODES)
    assert all(s.mode == mode for mode, s in STRATEGIES.items())


def test_a_type_whose_mode_has_no_strategy_is_refused(tmp_path, types) -> None:
    odd = {**types, "entity": replace(types["entity"], mode="shuffle")}
    store = Store(tmp_path / "db")
    try:
        with pytest.raises(InvalidInput, match="no write strategy for mode 'shuffle'"):
            Memory(store, odd, data_dir=tmp_path)
    finally:
        store.close()


@pytest.fixture
def last_wins(memory: Memory, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A mode registered for this test only, on the entity type: a new write replaces the
    node's document. Records who combined documents through it."""
    calls: list[str] = []

    def combine(ctype: ContextType, old: Document, new: Document) -> tuple[Document, int]:
        calls.append(ctype.mode)
        return Document({**old.fields, **new.fields}, new.body or old.body), 0

    monkeypatch.setitem(
        STRATEGIES,
        "last-wins",
        Strategy(
            "last-wins",
            new_node_each_write=False,
            match_similar=False,
            start=lambda ctype, doc: (doc, 0),
            combine=combine,
            consolidate=True,
        ),
    )
    monkeypatch.setitem(memory.types, "entity", replace(memory.types["entity"], mode="last-wins"))
    return calls


def test_a_new_mode_routes_through_its_entry(memory: Memory, last_wins: list[str]) -> None:
    entity = memory.types["entity"]
    first = memory.routing.route(OWNER, entity, "coffee.md", b"Likes espresso.\n")
    second = memory.routing.route(OWNER, entity, "coffee.md", b"Switched to tea.\n")
    assert second.node is first.node and not second.created
    assert first.node.l2.endswith("---\nSwitched to tea.\n")
    assert "espresso" not in first.node.l2  # the entity type's own body merge appends
    assert last_wins == ["last-wins"]


def test_a_new_mode_consolidates_through_the_same_entry(
    memory: Memory, last_wins: list[str]
) -> None:
    entity = memory.types["entity"]
    keep = memory.routing.route(
        OWNER, entity, "a.md", b"The office coffee machine is broken.\n"
    ).node
    other = memory.routing.route(
        OWNER, entity, "b.md", b"The office coffee machine is broken!\n"
    ).node
    assert last_wins == []
    report = consolidate(memory, now=memory.clock())
    assert report.merged == 1
    assert last_wins == ["last-wins"]
    assert other.deleted_at is not None and keep.deleted_at is None


def test_builtin_modes_route_and_consolidate_by_the_table(
    memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Routing and consolidation both look STRATEGIES up: a spy on the merge entry's
    combine sees both."""
    calls: list[str] = []

    def combine(ctype: ContextType, old: Document, new: Document) -> tuple[Document, int]:
        calls.append(ctype.name)
        return merge_documents(ctype, old, new), 0

    monkeypatch.setitem(STRATEGIES, "merge", replace(STRATEGIES["merge"], combine=combine))
    pref = memory.types["preference"]
    memory.routing.route(OWNER, pref, "tea.md", b"Green tea in the morning, every day.\n")
    memory.routing.route(OWNER, pref, "tea.md", b"Green tea in the morning, every day.\n")
    memory.routing.route(OWNER, pref, "tea-again.md", b"Green tea in the morning, every day!\n")
    assert calls == ["preference"]
    consolidate(memory, now=memory.clock())
    assert calls == ["preference", "preference"]
    assert strategy_for(pref) is STRATEGIES["merge"]
    assert strategies.STRATEGIES is STRATEGIES
