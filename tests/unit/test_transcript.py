"""Transcript parsing (JSONL, markdown, plain text) and the archived rendering."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from contextfs.conversations.transcript import Turn, parse_transcript, render_turns

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "transcripts"


def _jsonl(*objs: object) -> str:
    return "\n".join(o if isinstance(o, str) else json.dumps(o) for o in objs) + "\n"


def test_jsonl_good_lines_keep_every_field():
    text = _jsonl(
        {"role": "user", "content": "hi", "name": "dana", "timestamp": "2026-05-01T10:00:00Z",
         "id": "m1"},
        {"role": "Assistant", "content": "hello"},
    )  # fmt: skip
    t = parse_transcript(text, "s.jsonl")
    assert t.kind == "jsonl"
    assert t.errors == ()
    assert t.turns[0] == Turn(line=1, role="user", content="hi", name="dana",
                              timestamp="2026-05-01T10:00:00Z", id="m1")  # fmt: skip
    assert t.turns[1].role == "assistant"  # known roles are case-folded
    assert t.turns[1].line == 2
    assert [x.ref for x in t.turns] == ["m1", "L2"]


def test_jsonl_malformed_lines_are_reported_by_number_and_skipped():
    text = _jsonl(
        {"role": "user", "content": "one"},
        "not json",
        "[1, 2]",
        {"content": "no role"},
        {"role": "user"},
        {"role": "user", "content": {"nested": True}},
        "",
        {"role": "assistant", "content": "two"},
    )
    t = parse_transcript(text, "x.jsonl")
    assert [x.content for x in t.turns] == ["one", "two"]
    assert [x.line for x in t.turns] == [1, 8]
    assert [line for line, _ in t.errors] == [2, 3, 4, 5, 6]
    reasons = dict(t.errors)
    assert "not JSON" in reasons[2]
    assert "not a JSON object" in reasons[3]
    assert "role" in reasons[4]
    assert "content" in reasons[5]
    assert "content" in reasons[6]


def test_jsonl_content_parts_are_joined():
    text = _jsonl({"role": "user", "content": [
        {"type": "text", "text": "first"}, {"type": "image_url", "image_url": {"url": "x"}},
        {"type": "text", "text": "second"}]})  # fmt: skip
    (turn,) = parse_transcript(text, "p.jsonl").turns
    assert turn.content == "first\n[image_url #1]\nsecond"
    assert [(m.source, m.value) for m in turn.media] == [("path", "x")]


def test_jsonl_tool_events_without_content_are_rendered_from_name_input_output():
    text = _jsonl(
        {"role": "tool", "name": "bash", "input": {"cmd": "ls"}, "output": {"exit_code": 0},
         "id": "t1"},
        {"role": "tool", "name": "push", "input": {"x": 1}, "output": "denied", "status": "error"},
        {"role": "tool", "name": "grep", "content": "3 matches", "input": "foo"},
        {"role": "tool"},
    )  # fmt: skip
    t = parse_transcript(text, "t.jsonl")
    first, second, third = t.turns
    assert first.tool_input == {"cmd": "ls"} and first.tool_output == {"exit_code": 0}
    assert first.name == "bash" and "bash" in first.content and "ls" in first.content
    assert first.ok is True  # exit_code 0
    assert second.ok is False  # status: error
    assert third.content == "3 matches" and third.tool_input == "foo" and third.ok is None
    assert [line for line, _ in t.errors] == [4]


def test_jsonl_is_recognised_without_the_extension():
    text = _jsonl({"role": "user", "content": "a"}, {"role": "assistant", "content": "b"})
    assert parse_transcript(text).kind == "jsonl"
    assert parse_transcript(text, "notes.md").kind != "jsonl"  # the extension wins


def test_markdown_bold_dialogue_maps_the_lone_person_to_user():
    text = "# Trip\n\n**Sam:** I like trains.\n\n**Assistant:** Noted.\n\n**Sam:** Thanks\n"
    t = parse_transcript(text, "trip.md")
    assert t.kind == "markdown"
    assert [(x.role, x.name, x.content) for x in t.turns] == [
        ("user", "Sam", "I like trains."), ("assistant", None, "Noted."),
        ("user", "Sam", "Thanks"),
    ]  # fmt: skip
    # each turn cites the line it starts on: "L3", never one "L0" for every turn
    assert [x.line for x in t.turns] == [3, 5, 7]
    assert [x.ref for x in t.turns] == ["L3", "L5", "L7"]


def test_markdown_role_headings_split_multi_paragraph_turns():
    text = "## User\n\nFirst para.\n\nSecond para.\n\n## Assistant\n\nAnswer.\n"
    t = parse_transcript(text, "c.md")
    assert [(x.role, x.content) for x in t.turns] == [
        ("user", "First para.\n\nSecond para."), ("assistant", "Answer."),
    ]  # fmt: skip


def test_plain_speaker_lines_are_a_dialogue():
    t = parse_transcript("User: hi there\nAI: hello\nUser: bye\n", "c.txt")
    assert [(x.role, x.content) for x in t.turns] == [
        ("user", "hi there"), ("assistant", "hello"), ("user", "bye"),
    ]  # fmt: skip


def test_text_that_is_not_clearly_a_dialogue_is_one_user_turn():
    for text in (
        "Note: buy milk\nTODO: call Ana\n",
        "Meeting went fine. Ana: happy with it.\nBob: not so much.",
        "## Groceries\n\n- milk\n\n## Chores\n\n- laundry\n",
        "Just a thought about the weekend.",
    ):
        t = parse_transcript(text, "n.md")
        assert len(t.turns) == 1, text
        assert t.turns[0].role == "user"
        assert t.turns[0].content == text.strip()
    assert parse_transcript("   \n", "e.txt").turns == ()


def test_render_turns_keeps_every_turns_text_timestamp_and_id():
    turns = parse_transcript(_jsonl(
        {"role": "user", "content": "hello\n\nsecond line", "timestamp": "2026-05-01T10:00:00Z",
         "id": "m1"},
        {"role": "assistant", "content": "hi", "name": "planner", "id": "m2"},
        {"role": "tool", "name": "bash", "input": {"cmd": "ls -la"},
         "output": "a\nb\n```fence```", "timestamp": "2026-05-01T10:00:05Z", "id": "t1"},
    ), "s.jsonl").turns  # fmt: skip
    md = render_turns(turns)
    assert md.startswith("**user** · 2026-05-01T10:00:00Z · id m1\n\nhello\n\nsecond line\n")
    assert "**assistant** (planner) · id m2\n\nhi\n" in md
    assert "**tool** (bash) · 2026-05-01T10:00:05Z · id t1" in md
    assert '```json\n{\n  "cmd": "ls -la"\n}\n```' in md
    assert "````text\na\nb\n```fence```\n````" in md  # a longer fence around a fence
    assert "called bash" not in md  # synthesised tool content is not repeated
    # read back: roles, names, timestamps, ids and text survive for message turns
    back = parse_transcript(md, "L2.md").turns
    assert [(x.role, x.name, x.timestamp, x.id) for x in back] == [
        (x.role, x.name, x.timestamp, x.id) for x in turns
    ]
    assert [x.content for x in back[:2]] == ["hello\n\nsecond line", "hi"]


def test_render_turns_keeps_explicit_tool_content_and_failures():
    turn = Turn(line=3, role="tool", content="pushed nothing", name="push",
                tool_input={"ref": "main"}, tool_output={"error": "denied"}, ok=False)  # fmt: skip
    md = render_turns([turn])
    assert md.startswith("**tool** (push) · failed\n\npushed nothing\n")
    assert '"error": "denied"' in md


def test_corpus_transcripts_parse_with_the_malformed_lines_reported():
    expected_errors = {"onboarding_profile.jsonl": [7], "release_pypi.jsonl": [5, 9, 11]}
    for path in sorted(CORPUS.iterdir()):
        if path.name.endswith(".expected.yaml"):
            continue
        t = parse_transcript(path.read_text(), path.name)
        assert t.turns, path.name
        assert [line for line, _ in t.errors] == expected_errors.get(path.name, []), path.name


def test_a_dialogue_between_named_people_is_their_user_turns():
    """Two people talking ("Dana: …", "Sam: …"): each turn is a user turn under its
    speaker's name, as JSONL with `name` gives it, so their facts are extracted (with the
    speaker's role as their name, nothing was)."""
    t = parse_transcript("Dana: I moved to Lisbon.\nSam: I live in Porto.\nDana: Nice!\n", "c.txt")
    assert [(x.role, x.name) for x in t.turns] == [
        ("user", "Dana"), ("user", "Sam"), ("user", "Dana"),
    ]  # fmt: skip


@pytest.mark.parametrize(("role", "want"), [
    ("human", "user"), ("Human", "user"), ("ai", "assistant"), ("model", "assistant"),
    ("user", "user"), ("narrator", "narrator"),
])  # fmt: skip
def test_jsonl_roles_other_tools_write_are_ours(role, want):
    t = parse_transcript(_jsonl({"role": role, "content": "I love hiking."}), "c.jsonl")
    assert t.turns[0].role == want


def test_content_parts_that_run_on_are_one_sentence():
    """Parts of a `content` list: one that ends in a space runs on into the next (a
    sentence streamed in pieces), others are blocks of their own."""
    t = parse_transcript(_jsonl(
        {"role": "user", "content": ["I prefer ", {"type": "text", "text": "aisle seats."}]},
        {"role": "user", "content": [{"type": "text", "text": "First."}, "Second."]},
    ), "c.jsonl")  # fmt: skip
    assert [x.content for x in t.turns] == ["I prefer aisle seats.", "First.\nSecond."]


# --- chat apps' text exports --------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # WhatsApp on an iPhone
        ("[07/09/2026, 18:03] Jonas: How's Oslo??\n[07/09/2026, 18:04] Kari: Lovely!",
         [("Jonas", "2026-09-07T18:03:00", "How's Oslo??"),
          ("Kari", "2026-09-07T18:04:00", "Lovely!")]),
        # WhatsApp on Android, a message of two lines, the app's notice a system turn
        ("07/09/2026, 18:00 - Messages and calls are end-to-end encrypted.\n"
         "07/09/2026, 18:03 - Jonas: How's Oslo??\nAnd the flat?\n"
         "07/09/2026, 18:04 - Kari: Lovely!",
         [(None, "2026-09-07T18:00:00", "Messages and calls are end-to-end encrypted."),
          ("Jonas", "2026-09-07T18:03:00", "How's Oslo??\nAnd the flat?"),
          ("Kari", "2026-09-07T18:04:00", "Lovely!")]),
        # ISO dates in brackets
        ("[2026-09-07 18:03] Jonas: Hi\n[2026-09-07 18:04:30] Kari: Hey",
         [("Jonas", "2026-09-07T18:03:00", "Hi"), ("Kari", "2026-09-07T18:04:30", "Hey")]),
        # times under a heading that is a date
        ("# Chat with Kari\n\n## 7 September 2026\n[18:03] Jonas: Hi\n[18:04] Kari: Hey\n\n"
         "--- 8 September 2026 ---\n[09:00] Jonas: Morning",
         [("Jonas", "2026-09-07T18:03:00", "Hi"), ("Kari", "2026-09-07T18:04:00", "Hey"),
          ("Jonas", "2026-09-08T09:00:00", "Morning")]),
        # month-first, shown by a number above 12 anywhere in the file; 12-hour times
        ("[9/7/26, 6:03:12\u202fPM] Jonas: Hi\n[9/13/26, 9:04:00\u202fAM] Kari: Hey",
         [("Jonas", "2026-09-07T18:03:12", "Hi"), ("Kari", "2026-09-13T09:04:00", "Hey")]),
        # nothing shows the order: day-first
        ("[03/04/2026, 10:00] Ana: x\n[03/04/2026, 10:01] Ben: y",
         [("Ana", "2026-04-03T10:00:00", "x"), ("Ben", "2026-04-03T10:01:00", "y")]),
    ],
)  # fmt: skip
def test_a_chat_app_s_text_export_is_a_turn_a_message_with_its_speaker_and_time(text, expected):
    t = parse_transcript(text, "WhatsApp Chat with Jonas.txt")
    assert t.kind == "chat"
    assert [(x.name, x.timestamp, x.content) for x in t.turns] == expected
    assert {x.role for x in t.turns if x.name} == {"user"}
    assert all(x.role == "system" for x in t.turns if x.name is None)
    lines = text.splitlines()
    for x in t.turns:  # each cited by the line it starts on
        assert x.content.splitlines()[0] in lines[x.line - 1]


@pytest.mark.parametrize("text", [
    "[18:03] Jonas: Hi",  # one message
    "Meeting notes\n[07/09/2026, 18:03] Jonas: Hi\n[07/09/2026, 18:04] Kari: Hey",  # prose first
    "10:30 - Standup: daily\n11:00 - Review: weekly",  # no date, no brackets
])  # fmt: skip
def test_text_that_only_looks_like_an_export_is_not_read_as_one(text):
    assert parse_transcript(text, "notes.txt").kind != "chat"


@pytest.mark.parametrize(
    ("text", "started"),
    [
        ("# Chat with Priya — 14 May 2026\n\n**Priya:** Coming?\n**Me:** I'll book it.",
         datetime(2026, 5, 14)),
        ("## 2026-05-14\n\nUser: hi\nAssistant: hello", datetime(2026, 5, 14)),
        ("# Chat with Priya\n\n**Priya:** Coming?\n**Me:** I'll book it.", None),
        ("# Plans for May\n\nUser: hi\nAssistant: hello", None),  # a month is no day
        ("Chat on 14 May 2026\nUser: hi\nAssistant: hello", None),  # not a heading
    ],
)  # fmt: skip
def test_the_day_a_title_names_dates_a_dialogue_without_times(text, started):
    assert parse_transcript(text, "chat.md").started == started
