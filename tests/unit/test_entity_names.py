"""The entity names a search keeps (`search.names.EntityNames`), over a real store: the
questions that name an entity find it, and the table follows creates, renames, deletes and
type changes through the outbox, reading the whole table again only when much changed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from contextfs.ctxtypes import builtin_schema_dir, load_types
from contextfs.memory.service import Memory
from contextfs.search.names import EntityNames
from contextfs.store import Store

ALICE = ("user", "alice")


@pytest.fixture
def mem(tmp_path: Path) -> Iterator[Memory]:
    store = Store(tmp_path / "contextfs.duckdb")
    m = Memory(store, load_types([builtin_schema_dir()]), data_dir=tmp_path)
    m.create_owner(*ALICE)
    yield m
    store.close()


def node(m: Memory, type_name: str, name: str):
    n = m.create_node(ALICE, m.types[type_name], name)
    m.save_l2(n, f"notes on {name}\n")
    return n


def test_a_question_names_an_entity_by_word_or_as_written(mem: Memory):
    maya = node(mem, "entity", "maya-lopez")
    max_ = node(mem, "entity", "max")
    node(mem, "preference", "dark-mode")  # not an entity: never a name
    node(mem, "entity", "al")  # too short to be told from a word
    names = EntityNames(mem)
    assert names.named("What did Maya Lopez's cousin say?") == ["maya lopez"]
    assert names.ids("maya lopez") == [maya.id]
    assert names.named("is MAX coming, and maya lopez?") == ["maya lopez", "max"]
    assert names.ids("max") == [max_.id]
    assert names.named("maximal dark mode, al") == []  # words, not parts of words


def test_the_table_follows_renames_deletes_and_new_nodes_without_reading_it_again(
    mem: Memory,
):
    maya = node(mem, "entity", "maya-lopez")
    max_ = node(mem, "entity", "max")
    names = EntityNames(mem, refresh_max=10)
    assert names.named("max and maya lopez") == ["maya lopez", "max"]
    mem.rename_node(max_, ALICE, mem.types["entity"], "maxine")
    mem.delete_node(maya)
    luca = node(mem, "entity", "luca")
    twin = node(mem, "entity", "max")  # the old name, now another node's
    assert names.named("max and maya lopez") == ["max"]
    assert names.ids("max") == [twin.id]
    assert names.named("maxine met luca") == ["maxine", "luca"]
    assert names.ids("luca") == [luca.id]
    assert names.full_reads == 1  # everything since came from the outbox's changed nodes
    for i in range(11):  # more changes than refresh_max: the table is read whole again
        node(mem, "entity", f"guest-{i:02d}")
    assert names.named("guest 07 and luca") == ["luca", "guest 07"]
    assert names.full_reads == 2


def test_after_many_changes_the_table_answers_as_the_store_does(mem: Memory):
    """Random creates, renames and deletes, looked at after each few: every name the
    store's live entities have is found with exactly their ids, oldest first."""
    import random

    rng = random.Random(7)
    pool = ["ana", "bob-stone", "cleo", "dan-the-man", "eve", "finn", "gus-lee", "hal"]
    names = EntityNames(mem, refresh_max=1000)
    live: list = []
    for step in range(120):
        op = rng.random()
        if op < 0.5 or not live:
            name = f"{rng.choice(pool)}-{rng.randrange(3)}" if rng.random() < 0.3 else None
            name = name or rng.choice(pool)
            if any(n.name == name for n in live):
                continue
            live.append(node(mem, "entity", name))
        elif op < 0.75:
            n = rng.choice(live)
            new = rng.choice(pool)
            if any(m.name == new for m in live):
                continue
            mem.rename_node(n, ALICE, mem.types["entity"], new)
        else:
            n = live.pop(rng.randrange(len(live)))
            mem.delete_node(n)
        if step % 7 == 0:
            want: dict[str, list[int]] = {}
            for nid, name in (row for rows in mem.store.all_live_names("entity") for row in rows):
                want.setdefault(name.replace("-", " "), []).append(nid)
            for name, ids in want.items():
                # (named() brings the table up to date; ids() answers from it as it is)
                assert name in names.named(f"Was {name.title()}'s day good?"), (step, name)
                assert names.ids(name) == sorted(ids), (step, name)
            gone = {name.replace("-", " ") for name in pool} - set(want)
            assert not any(names.ids(name) for name in gone), step
    assert names.full_reads == 1


def test_a_name_followed_by_a_possessive_is_named(mem: Memory):
    max_ = node(mem, "entity", "max")
    names = EntityNames(mem)
    assert names.named("Where does Max's dog sleep?") == ["max"]
    assert names.ids("max") == [max_.id]


def test_a_question_asked_while_the_table_is_first_read_is_answered_from_the_store(
    mem: Memory,
):
    """The warm-up after a mount reads the whole table (about a second at a million
    nodes); a question asked meanwhile gets the same answer from the store, at once."""
    import threading

    maya = node(mem, "entity", "maya-lopez")
    max_ = node(mem, "entity", "max")
    node(mem, "preference", "dark-mode")
    names = EntityNames(mem)
    asked = "Is Max's sister Maya Lopez in dark mode?"
    with names._lock:  # the first whole read, under way in another thread
        answers: list = []
        t = threading.Thread(target=lambda: answers.append((names.named(asked), names.ids("max"))))
        t.start()
        t.join(timeout=10)
        assert not t.is_alive(), "the question waited for the table"
        assert names.full_reads == 0
    assert answers == [(["maya lopez", "max"], [max_.id])]
    assert names.named(asked) == ["maya lopez", "max"] and names.full_reads == 1
    assert names.ids("maya lopez") == [maya.id]
