"""Media in conversations through a real mount: `cp` of a JSONL transcript whose turns
carry a picture (a data URL) and name a file of the same inbox; a session whose
transcript.jsonl gets an image part appended with `>>`. `cat` shows the archived turns
naming the media nodes, and the media nodes naming their turn."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

from contextfs.testing import Mount
from contextfs.testing import media_corpus as mc
from tests.integration.test_media import _cp, media, report  # noqa: F401 - fixture


def _line(turn: dict) -> str:
    return json.dumps(turn) + "\n"


def test_a_chat_with_pictures_through_the_mount(media: Mount, tmp_path: Path) -> None:  # noqa: F811
    inbox = media.path / ".inbox"
    board = tmp_path / "board.jpg"
    board.write_bytes(mc.shape("square", "green", fmt="JPEG"))
    _cp(board, inbox / "board.jpg")
    assert "image kept" in report(inbox, "board.jpg")
    chart = mc.slide("Revenue by quarter")
    url = "data:image/png;base64," + base64.b64encode(chart).decode()
    chat = tmp_path / "chat.jsonl"
    chat.write_text(
        _line(
            {
                "role": "user",
                "id": "m1",
                "content": [
                    {"type": "text", "text": "The chart and the board."},
                    {"type": "image_url", "image_url": {"url": url}},
                    {"type": "image", "path": "board.jpg"},
                    {"type": "image", "path": "/etc/hostname"},
                ],
            }
        )  # fmt: skip
        + _line({"role": "assistant", "id": "m2", "content": "Thanks."})
    )
    _cp(chat, inbox / "chat.jsonl")
    text = report(inbox, "chat.jsonl")
    assert "## Media in the turns" in text and "absolute path is not read" in text, text
    [node] = [p for p in (media.path / "user/default/images").iterdir() if "chat-m1-1" in p.name]
    assert (node / "original.png").read_bytes() == chart
    assert 'sources: ["inbox:chat.jsonl#m1"]' in (node / "meta.yaml").read_text()
    assert "source: inbox:chat.jsonl#m1" in (node / "L2.md").read_text()
    [session] = list((media.path / "user/default/sessions").iterdir())
    l2 = (session / "L2.md").read_text()
    assert f"[image_url #1: image kept as user/default/images/{node.name}]" in l2, l2
    assert "[image #2: already stored as user/default/images/" in l2

    # a session: a turn with a picture appended by the shell, then ended
    sessions = media.path / ".sessions"
    (sessions / "review").mkdir()
    logo = mc.shape("circle", "orange")
    turn = _line({"role": "user", "id": "q1", "content": [
        {"type": "text", "text": "Our new logo."},
        {"type": "image_url", "image_url": {
            "url": "data:image/png;base64," + base64.b64encode(logo).decode()}},
    ]})  # fmt: skip
    subprocess.run(
        ["sh", "-c", f"cat >> {sessions / 'review' / 'transcript.jsonl'}"],
        input=turn.encode(),
        check=True,
    )
    (sessions / "review" / "control").write_text("end\n")
    kept = [p for p in (media.path / "user/default/images").iterdir() if "review-q1-1" in p.name]
    assert len(kept) == 1 and (kept[0] / "original.png").read_bytes() == logo
    [archived] = [p for p in (media.path / "user/default/sessions").iterdir() if "review" in p.name]
    assert (
        f"[image_url #1: image kept as user/default/images/{kept[0].name}]"
        in (archived / "L2.md").read_text()
    )
