"""Conversations as episodes: speakers apart, facts on their subject, dates from each turn,
session archives split into passages by turn (issue: context that holds the evidence)."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from contextfs.conversations import episodes
from contextfs.conversations.extract import RuleExtractor
from contextfs.conversations.transcript import Turn, render_turns, turn_blocks
from contextfs.ctxtypes import builtin_schema_dir, load_types
from contextfs.model import Node
from contextfs.search.passages import node_passages


@pytest.fixture(scope="module")
def types():
    return load_types([builtin_schema_dir()])


def _extract(types, text: str, when: str = "2023-05-08T13:56:00"):
    turn = Turn(1, "user", text, name="Cy", timestamp=when, id="D1:1")
    return [(c.type, c.fields) for c in RuleExtractor().extract([turn], types)]


def test_a_self_description_fills_the_profile(types):
    got = _extract(types, "I'm Cy, a data engineer living in Oslo.")
    assert ("profile", {"name": "Cy"}) in got
    assert ("profile", {"role": "data engineer"}) in got
    assert ("profile", {"location": "Oslo"}) in got
    assert ("profile", {"role": "nurse"}) in _extract(types, "I've been working as a nurse.")


def test_a_possessive_relation_is_not_inverted(types):
    got = _extract(types, "Max is my mother's cat.")
    assert got == [
        ("entity", {"name": "Max", "kind": "animal", "attributes": {"relation": "mother's cat"}})
    ]
    got = _extract(types, "We looked after my sister's dog Biscuit all week.")
    assert (
        "entity",
        {"name": "Biscuit", "kind": "animal", "attributes": {"relation": "sister's dog"}},
    ) in got
    assert not any(f.get("attributes", {}).get("relation") == "sister" for _t, f in got)


def test_children_become_entities(types):
    names = {f["name"] for t, f in _extract(types, "My kids are Elsie and Sam.") if t == "entity"}
    assert names == {"Elsie", "Sam"}


def test_relative_dates_count_from_the_turns_own_time(types):
    got = _extract(types, "I won a chess tournament yesterday.", when="2022-08-20T09:00:00")
    assert ("event", {"date": "2022-08-19", "title": "won chess tournament"}) in got
    got = _extract(types, "I ran a half marathon yesterday.", when="1:56 pm on 8 May, 2023")
    assert any(t == "event" and f["date"] == "2023-05-07" for t, f in got)


def _turns() -> list[Turn]:
    return [
        Turn(
            0,
            "user",
            "Guess what, I adopted a cat called Miso from the Leeds shelter!",
            name="Efua",
            timestamp="2023-03-14T18:05:00",
            id="S1:1",
        ),
        Turn(
            0,
            "user",
            "Miso! Perfect. Ruth will want photos.",
            name="Theo",
            timestamp="2023-03-14T18:06:00",
            id="S1:2",
        ),
        Turn(
            0,
            "user",
            "We picked her up last Saturday.",
            name="Efua",
            timestamp="2023-03-14T18:07:00",
            id="S1:3",
        ),
    ]


def test_an_episode_says_who_when_and_what():
    turns = _turns()
    head = episodes.heading(turns)
    assert head.startswith("Efua and Theo · 14 March 2023 · ")
    assert "Miso" in head and "Leeds" in head
    summary = episodes.summary(turns)
    assert "last Saturday → 11 March 2023" in summary
    assert episodes.started(turns).isoformat() == "2023-03-14T18:05:00"


def test_an_archive_splits_into_turn_passages_with_speaker_date_and_id():
    l2 = "---\ndate: '2023-03-14'\n---\n# Efua and Theo\n\n" + render_turns(_turns())
    blocks = turn_blocks(l2)
    assert [b.id for b in blocks] == ["S1:1", "S1:2", "S1:3"]
    assert l2[blocks[1].start : blocks[1].end].endswith("Ruth will want photos.")
    n = Node(
        id=7,
        owner_kind="user",
        owner_id="x",
        type="session",
        name="2023-03-14-s1",
        version=1,
        l0="",
        l1="",
        l2=l2,
        l0_pinned=False,
        l1_pinned=False,
        content_hash="",
    )
    ps = node_passages(n)
    assert [(p.turn_ids, p.speaker, p.date) for p in ps] == [
        (("S1:1",), "Efua", "14 March 2023"),
        (("S1:2",), "Theo", "14 March 2023"),
        (("S1:3",), "Efua", "14 March 2023"),
    ]
    assert ps[2].index_text() == "We picked her up last Saturday."  # speaker shown, not indexed
    other = Node(
        id=8,
        owner_kind="user",
        owner_id="x",
        type="preference",
        name="tea",
        version=1,
        l0="",
        l1="",
        l2="Green tea, no sugar.",
        l0_pinned=False,
        l1_pinned=False,
        content_hash="",
    )
    assert [p.text for p in node_passages(other)] == ["Green tea, no sugar."]


def test_facts_land_on_their_speaker(memory):
    """Between two named people, the owner is the one named like the owner (its directory
    or its profile's name); what the other says about themself goes to their entity node.
    When no speaker is named like the owner, each one's facts go to their own entity: none
    lands in the owner's profile, where two people's facts would mix."""
    from contextfs.conversations.inbox import Intake

    lines = [
        {"role": "user", "name": "Efua", "content": "I live in Leeds now.", "id": "S1:1"},
        {
            "role": "user",
            "name": "Theo",
            "content": "I work as a teacher at Hillside School.",
            "id": "S1:2",
        },
        {"role": "user", "name": "Theo", "content": "I love trail running.", "id": "S1:3"},
        {"role": "user", "name": "Theo", "content": "I ran the Leeds 10k yesterday.", "id": "S1:4"},
    ]
    text = "\n".join(json.dumps({**x, "timestamp": "2023-03-14T18:05:00"}) for x in lines)
    intake = Intake(memory)
    _t, cands, _how = intake.analyse(text, "s1.jsonl", "2026-12-01", ("user", "default"))
    got = [(c.type, c.fields) for c in cands]
    assert not any(t in ("profile", "preference") for t, _f in got), got
    people: dict[str, dict] = {}
    for t, f in got:
        if t == "entity" and f.get("kind") == "person":
            people.setdefault(f["name"], {}).update(f.get("attributes", {}))
    # (and every speaker's node says who they talk with: `people.speaker_hubs`)
    assert people["Efua"] == {"location": "Leeds", "talks with": "Theo"}, people
    assert {"role": "teacher", "trail running": "loves"}.items() <= people["Theo"].items()
    memory.create_owner("user", "efua")
    _t, cands, _how = intake.analyse(text, "s1.jsonl", "2026-12-01", ("user", "efua"))
    got = [(c.type, c.fields) for c in cands]
    assert ("profile", {"location": "Leeds"}) in got
    assert not any(t == "profile" and "role" in f for t, f in got), got
    theo = [f for t, f in got if t == "entity" and f.get("name") == "Theo"]
    assert {"role": "teacher"}.items() <= theo[0]["attributes"].items(), theo
    assert any(f["attributes"].get("trail running") == "loves" for f in theo), theo
    assert not any(t == "preference" for t, _f in got), got
    # an event another speaker tells of names them: whose it is stays known
    [run] = [f for t, f in got if t == "event"]
    assert str(run["date"]) == "2023-03-13" and run["participants"] == ["Theo"], run


def test_an_episode_naming_nothing_is_headed_by_its_first_words_and_its_day():
    """A live session's turns often carry no time and name nothing: its archive's L0 (the
    heading) says when it was archived and what it began with, not only "user"."""
    turns = [
        Turn(0, "user", "i always indent with tabs. and never with spaces", id="a"),
        Turn(1, "assistant", "noted.", id="b"),
    ]
    head = episodes.heading(turns, dt.date(2026, 12, 7))
    assert head == "user and assistant · 7 December 2026 · i always indent with tabs."
    long = [Turn(0, "user", "so " * 40 + "done", id="a")]
    gist = episodes.heading(long).split(" · ")[1]
    assert gist.endswith("so…") and len(gist) <= episodes.GIST_CHARS + 1
    assert episodes.heading([]) == "conversation"


def test_named_things_are_names_not_shouting_or_clause_starts():
    """A session's heading names what came up: "Idris's" is Idris, "Poor Bramble" is
    Bramble; shouting ("UNDER TWO HOURS"), a capital that starts a step ("1. Rinse") and
    "Last Tuesday" are not names; an acronym is."""
    said = [
        "UNDER TWO HOURS, DADDY GO, TOO FAST! Poor Bramble ate a sock.",
        "1. Rinse the rice. Keep stirring.",
        "Last Tuesday I met Idris's sister at the BBC with Idris.",
    ]
    turns = [Turn(line=i + 1, role="user", content=c) for i, c in enumerate(said)]
    assert episodes.named_things(turns) == ["Idris", "Bramble", "BBC"]


def test_the_owners_relations_and_a_speakers_facts_land_in_their_own_node(memory):
    """Every speaker's own node: the people the owner names as theirs, of a relation one
    has one of at a time, are named in the owner's profile (`manager: Sandra`), as a hub
    names another speaker's; a dog or a cousin, of which there may be several, is not;
    another speaker's standing facts are attributes of their hub, one each, and their
    relations never reach the owner's profile."""
    from contextfs.conversations.inbox import Intake

    intake = Intake(memory)
    plain = [
        {"role": "user", "content": "My manager Sandra will be disappointed.", "id": "S1:1"},
        {"role": "assistant", "content": "That's kind of you to think of her.", "id": "S1:2"},
        {"role": "user", "content": "Biscuit, our beagle, stares at me. I'm vegan.", "id": "S1:3"},
        {"role": "user", "content": "My cousin Dev rang. So did my cousin Ewan.", "id": "S1:4"},
    ]
    text = "\n".join(json.dumps({**x, "timestamp": "2023-03-14T18:05:00"}) for x in plain)
    _t, cands, _how = intake.analyse(text, "s1.jsonl", "2026-12-01", ("user", "default"))
    facts: dict = {}
    for c in cands:
        if c.type == "profile":
            facts.update(c.fields.get("facts", {}))
    assert facts == {"manager": "Sandra", "diet": "vegan"}, facts
    assert {"Biscuit", "Dev", "Ewan"} <= {c.fields["name"] for c in cands if c.type == "entity"}
    two = [
        {"role": "user", "name": "Efua", "content": "My partner Idris is visiting.", "id": "S1:1"},
        {"role": "user", "name": "Theo", "content": "My sister Ana is too.", "id": "S1:2"},
        {"role": "user", "name": "Theo", "content": "I'm allergic to sesame.", "id": "S1:3"},
    ]
    text = "\n".join(json.dumps({**x, "timestamp": "2023-03-14T18:05:00"}) for x in two)
    memory.create_owner("user", "efua")
    _t, cands, _how = intake.analyse(text, "s1.jsonl", "2026-12-01", ("user", "efua"))
    profile = [c.fields for c in cands if c.type == "profile"]
    assert profile == [{"facts": {"partner": "Idris"}}], profile
    theo: dict = {}
    for c in cands:
        if c.type == "entity" and c.fields["name"] == "Theo":
            theo.update(c.fields.get("attributes", {}))
    assert theo["allergy"] == "sesame" and theo["sister"] == "Ana", theo
    _t, cands, _how = intake.analyse(text, "s1.jsonl", "2026-12-01", ("user", "default"))
    assert not any(c.type == "profile" for c in cands), "no owner among them: no profile"


def test_named_things_keep_accented_names_and_leave_common_words_out():
    turns = [
        Turn(
            1,
            "user",
            "How's Bergen treating you? How's Mango? We went to Kraków and Malmö, then Ålesund.",
        ),  # fmt: skip
        Turn(
            2,
            "user",
            "I was in Tromsø on Sundays… Barely slept. Started reading The Mirror "
            "and the Light. Coffee first, more coffee later. Mum says hi.",
        ),  # fmt: skip
    ]
    named = episodes.named_things(turns)
    assert set(named) == {"Bergen", "Mango", "Kraków", "Malmö", "Ålesund", "Tromsø",
                          "Mirror and the Light"}, named  # fmt: skip
