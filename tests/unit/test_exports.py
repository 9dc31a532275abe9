"""Chat exports and OpenAI `messages` lists as conversations (conversations.exports), and
how the inbox tells them from transcripts (inbox.parse_item)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contextfs.conversations.episodes import started
from contextfs.conversations.exports import read_conversations
from contextfs.conversations.inbox import LIST_ARCHIVED, Progress, parse_item
from contextfs.errors import InvalidInput

EXPORTS = Path(__file__).resolve().parents[1] / "corpus" / "exports"


def read(name: str):
    found = read_conversations((EXPORTS / name).read_text())
    assert found is not None, name
    return found


def test_chatgpt_export_takes_the_branch_the_user_saw_last():
    export = read("chatgpt-conversations.json")
    assert export.kind == "chatgpt" and export.notes == ()
    lisbon, rex, pypi = export.conversations
    assert [c.title for c in export.conversations] == [
        "Moving to Lisbon",
        "Rex at the park",
        "Publishing a package",
    ]
    assert lisbon.id == "conv-lisbon" and lisbon.started == 1678788000.25
    # the null root and the hidden system message are left out; current_node picks the
    # edited branch ("tea over coffee"), not the one it replaced
    assert [t.id for t in lisbon.turns] == ["u1", "a1", "u2-new", "a2-new"]
    assert [t.role for t in lisbon.turns] == ["user", "assistant", "user", "assistant"]
    text = " ".join(t.content for t in lisbon.turns)
    assert "tea over coffee" in text and "coffee over tea" not in text
    assert lisbon.turns[0].timestamp == "2023-03-14T10:00:00Z"
    assert started(lisbon.turns).date().isoformat() == "2023-03-14"
    # an uploaded image stands in the text as a placeholder; a tool's result is a tool turn
    assert rex.turns[0].content.startswith("[image_asset_pointer]\nMy dog Rex")
    tool = next(t for t in rex.turns if t.role == "tool")
    assert tool.name == "browser" and "Monsanto Forest Park" in tool.content
    # the custom instructions (hidden) and an empty message are not turns
    assert [t.id for t in pypi.turns] == ["q2", "q3"]


def test_chatgpt_without_current_node_follows_the_newest_children():
    conv = json.loads((EXPORTS / "chatgpt-conversations.json").read_text())[0]
    del conv["current_node"]
    export = read_conversations(json.dumps(conv))  # one conversation on its own
    assert export is not None and export.kind == "chatgpt"
    assert [t.id for t in export.conversations[0].turns] == ["u1", "a1", "u2-new", "a2-new"]


def test_claude_export():
    export = read("claude-conversations.json")
    assert export.kind == "claude"
    garden, untitled = export.conversations
    assert garden.title == "Balcony garden" and untitled.title == ""
    assert garden.id.endswith("1c01")
    assert [t.role for t in garden.turns] == ["user", "assistant", "user"]
    assert garden.turns[0].timestamp == "2024-05-02T09:15:00.123456Z"
    assert started(garden.turns).date().isoformat() == "2024-05-02"
    assert "The user mentions" not in garden.turns[1].content  # hidden reasoning
    seeds = garden.turns[2].content
    assert "Emma gave me the seeds" in seeds and "Water the basil daily." in seeds
    assert "[file: balcony.jpg]" in seeds
    # `text` alone (older exports), `content` alone
    assert untitled.turns[0].content == "I work as a data engineer at a bakery chain."
    assert untitled.turns[1].content == "Bread and pipelines: a good mix."
    assert untitled.started is not None


def test_openai_messages_list_and_object():
    export = read("openai-messages.json")
    assert export.kind == "openai-messages"
    [conv] = export.conversations
    assert [t.role for t in conv.turns] == ["system", "user", "assistant", "user", "assistant"]
    assert conv.turns[3].content == "I prefer green tea over coffee."
    assert conv.turns[1].ref == "L2"  # cited by position
    export = read("openai-messages-object.json")
    [conv] = export.conversations
    assert conv.title == "Weekend plans" and conv.started == 1717243200
    assert conv.turns[1].content == 'called get_weather with {"city": "Porto"}'
    assert conv.turns[2].role == "tool" and conv.turns[2].name == "get_weather"


def test_openai_messages_one_conversation_a_line():
    lines = [
        {"messages": [{"role": "user", "content": f"My colleague Sam{i} is great."}]}
        for i in range(3)
    ]
    text = "".join(json.dumps(x) + "\n" for x in lines) + "not json\n"
    export = read_conversations(text)
    assert export is not None and export.kind == "openai-messages-lines"
    assert len(export.conversations) == 3
    assert export.notes and export.notes[0].startswith("line 4: not JSON")


def test_not_a_json_document_is_left_to_the_transcript_parser():
    assert read_conversations('{"role": "user", "content": "hi"}\n') is None
    jsonl = '{"role": "user", "content": "hi"}\n{"role": "assistant", "content": "yo"}\n'
    assert read_conversations(jsonl) is None
    assert read_conversations("[link](https://example.com) and prose\n") is None
    assert read_conversations("User: hi\nAI: hello\n") is None


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"foo": 1, "bar": [1, 2]}', "an object with keys 'foo', 'bar'"),
        ("[1, 2, 3]", "a JSON list of numbers"),
        ('[{"name": "x"}]', "first element is an object with keys 'name'"),
        ("[]", "an empty JSON list"),
    ],
)
def test_an_unknown_json_shape_is_refused_with_what_is_expected(text, said):
    with pytest.raises(InvalidInput) as refused:
        read_conversations(text)
    assert said in refused.value.reason
    assert "ChatGPT or Claude data export" in refused.value.reason


def test_a_cut_export_keeps_the_conversations_before_the_cut():
    text = (EXPORTS / "claude-conversations.json").read_text()
    cut = text[: text.index('"uuid": "5b1f6d8e-0c1a-4a8e-9a53-3f0e2d7b1c02"') + 20]
    export = read_conversations(cut)
    assert export is not None and [c.title for c in export.conversations] == ["Balcony garden"]
    assert export.notes and "cut or damaged after 1 conversations" in export.notes[0]


def test_parse_item_routes_json_documents_and_keeps_transcripts():
    parsed = parse_item((EXPORTS / "chatgpt-conversations.json").read_bytes(), "c.json")
    assert parsed.export and parsed.kind == "chatgpt" and len(parsed.conversations) == 3
    parsed = parse_item((EXPORTS / "openai-messages.json").read_bytes(), "m.json")
    assert not parsed.export and parsed.label == "OpenAI messages" and parsed.turns == 5
    jsonl = b'{"role": "user", "content": "hi"}\nnot json\n'
    parsed = parse_item(jsonl, "t.jsonl")
    assert parsed.kind == "jsonl" and parsed.turns == 1 and parsed.notes[0].startswith("line 2")
    # markdown and text are never read as JSON
    parsed = parse_item(b'{"foo": 1}', "note.md")
    assert parsed.kind == "markdown" and parsed.turns == 1
    with pytest.raises(InvalidInput, match="is not a conversation"):
        parse_item(b'{"foo": 1}', "data.json")
    with pytest.raises(InvalidInput, match="no conversation with text"):
        parse_item(b'[{"role": "user", "content": ""}]', "empty.json")


def test_progress_counts_everything_lists_the_first_and_survives_a_round_trip():
    p = Progress(30)
    for i in range(30):
        changed = [f"created user/default/entities/e{i}", "unchanged user/default/profile"]
        if i == 3:
            changed.append("changed user/default/profile")
        p.filed(4, [f"user/default/sessions/s{i}"], None, changed, [], [], "RuleExtractor")
    assert (p.done, p.turns, p.sessions, p.archived_n) == (30, 120, 30, 30)
    assert len(p.archived) == LIST_ARCHIVED
    assert p.memories["user/default/profile"] == "changed"  # the strongest of what it saw
    assert p.writes == {"created": 30, "unchanged": 30, "changed": 1}
    back = Progress.load(p.dumps(), 30)
    assert back == p and back is not p
    assert Progress.load(p.dumps(), 31) is None  # the file reads otherwise now
    assert Progress.load("", 5) == Progress(5)
