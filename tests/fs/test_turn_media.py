"""Media in conversations, through the inbox and session handlers and the real
IntakeService: a JSONL transcript's image parts (data URLs), audio parts and paths to files
of the same inbox go through the same gates, in the conversation's own stream, and become
media nodes linked to their turn; paths outside the inbox are refused, never read."""

from __future__ import annotations

import base64
import json

import pytest

from contextfs.memory.service import Memory
from contextfs.testing import media_corpus as mc
from tests.fs.test_media import _drop, _nodes
from tests.fs.test_virtual_dirs import Mount


@pytest.fixture
def plain(memory: Memory, tmp_path) -> Mount:
    return Mount(memory, tmp_path, search=False)


def _data_url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64," + base64.b64encode(data).decode()


def _image_part(url: str) -> dict:
    return {"type": "image_url", "image_url": {"url": url}}


def _jsonl(*turns: dict) -> bytes:
    return "".join(json.dumps(t) + "\n" for t in turns).encode()


async def test_a_transcripts_media_become_nodes_linked_to_their_turns(
    plain: Mount, memory: Memory
) -> None:
    fs = plain.fs
    assert mc.have_tools() is None, mc.have_tools()
    board = mc.shape("square", "green", fmt="JPEG")
    assert "image kept" in await _drop(plain, ".inbox/whiteboard.jpg", board)
    chart = mc.slide("Revenue by quarter")
    voice = mc.concat(mc.sox_make(1), mc.speech("Ship it on Friday."), mc.sox_make(1))
    chat = _jsonl(
        {
            "role": "user",
            "id": "m1",
            "timestamp": "2026-11-30T10:00:00Z",
            "content": [
                {"type": "text", "text": "Here is the chart."},
                _image_part(_data_url(chart)),
            ],
        },
        {"role": "assistant", "id": "m2", "content": "Revenue grew in Q3."},
        {  # the same chart re-encoded: the conversation's stream drops it
            "role": "user",
            "id": "m3",
            "content": [_image_part(_data_url(mc.near_duplicate(chart), "image/jpeg"))],
        },
        {"role": "user", "id": "m4", "content": [{"type": "image", "path": "whiteboard.jpg"}]},
        {
            "role": "user",
            "id": "m5",
            "content": [
                {"type": "text", "text": "And my voice note."},
                {
                    "type": "input_audio",
                    "input_audio": {"data": base64.b64encode(voice).decode(), "format": "wav"},
                },
            ],
        },
        {
            "role": "user",
            "id": "m6",
            "content": [
                _image_part("/etc/passwd"),
                _image_part("../../secret.png"),
                _image_part("https://example.com/cat.png"),
                {"type": "image", "path": "missing.png"},
            ],
        },
    )
    report = await _drop(plain, ".inbox/chat.jsonl", chat)
    assert "state: done (jsonl, 6 turns" in report and "## Media in the turns" in report, report

    # the chart: a node of its own, naming the conversation and the turn
    [chart_node] = [n for n in _nodes(memory, "image") if "chat-m1-1" in n.name]
    chart_path = memory.node_path(chart_node)
    assert await fs.read(f"{chart_path}/original.png") == chart
    l2 = await fs.text(f"{chart_path}/L2.md")
    assert "source: inbox:chat.jsonl#m1" in l2
    assert "Carried by turn m1 (user, 2026-11-30T10:00:00Z) of the conversation" in l2
    # the near-duplicate in turn m3 is dropped with its score
    assert (
        "turn m3 [image_url #1]" in report and "dropped (near-duplicate of " + chart_path in report
    )
    # the path names the inbox's own file: the node that has those bytes is named
    [board_node] = [n for n in _nodes(memory, "image") if "whiteboard" in n.name]
    assert f"already stored as {memory.node_path(board_node)}" in report
    # the voice note: a recording node with its speech segment
    [memo] = _nodes(memory, "audio")
    assert memo.name.endswith("chat-m5-1")
    assert await fs.listdir(memory.node_path(memo) + "/speech") == ["0001.wav"]
    # outside the inbox, or on the web: refused with the reason, never read
    assert "absolute path is not read" in report and "no folders, no .." in report
    assert "not fetched (nothing is downloaded): https://example.com/cat.png" in report
    assert "no file missing.png in this inbox" in report
    assert len(_nodes(memory, "image")) == 2

    # the archived conversation says, in each turn, what became of its media
    [session] = _nodes(memory, "session")
    text = session.l2
    assert f"[image_url #1: image kept as {chart_path}]" in text, text
    assert f"[image #1: already stored as {memory.node_path(board_node)}]" in text
    assert f"[input_audio #1: recording kept as {memory.node_path(memo)}]" in text
    assert "[image_url #1: dropped (near-duplicate of" in text
    assert "[image_url #1: not taken: an absolute path is not read" in text


async def test_a_sessions_image_parts_become_nodes_named_in_its_archive(
    plain: Mount, memory: Memory
) -> None:
    fs = plain.fs
    await fs.mkdir(".sessions/design")
    shot = mc.shape("circle", "orange")
    await fs.write(
        ".sessions/design/transcript.jsonl",
        _jsonl(
            {
                "role": "user",
                "id": "q1",
                "content": [
                    {"type": "text", "text": "What do you think of this logo?"},
                    _image_part(_data_url(shot)),
                ],
            },  # fmt: skip
            {"role": "assistant", "id": "a1", "content": "The orange works."},
            {"role": "user", "id": "q2", "content": [_image_part("/home/me/logo.png")]},
        ),
        append=True,
    )
    await fs.write(".sessions/design/control", b"end\n")
    [image] = _nodes(memory, "image")
    path = memory.node_path(image)
    assert await fs.read(f"{path}/original.png") == shot
    assert "source: session:design#q1" in image.l2
    [session] = _nodes(memory, "session")
    assert f"[image_url #1: image kept as {path}]" in session.l2, session.l2
    assert "[image_url #1: not taken: a session reads no path" in session.l2
