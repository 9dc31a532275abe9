"""Media through a real mount (SPEC §5): `cp` of images and recordings into an inbox
closes with 0; the gates' decisions, with their scores, are in the reports; kept media
are nodes whose original bytes (and speech segments) are files in the node directory."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from contextfs.testing import Mount
from contextfs.testing import media_corpus as mc
from tests.fake_openai import FakeOpenAI


def report(inbox: Path, name: str, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    path = inbox / f"{name}.report.md"
    while True:
        text = path.read_text() if path.exists() else ""
        if ("state:" in text or text.startswith("refused:")) and "waiting to be" not in text:
            return text
        assert time.monotonic() < deadline, f"no decision for {name}: {text!r}"
        time.sleep(0.1)


@pytest.fixture
def media(tmp_path: Path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "config.yaml").write_text("search: false\nmedia_drop_above: 0.9\nvad_frame_ms: 20\n")
    (tmp_path / "mnt").mkdir()
    m = Mount(tmp_path / "mnt", data)
    m.start()
    yield m
    if m.proc is not None:
        m.stop()
    assert m.fsck() == []


def _cp(src: Path, dst: Path) -> None:
    """Real cp: it exits 0 only when close() did."""
    subprocess.run(["cp", str(src), str(dst)], check=True, capture_output=True)


def test_a_slideshow_and_a_voice_memo_through_the_mount(media: Mount, tmp_path: Path) -> None:
    assert mc.have_tools() is None, mc.have_tools()
    src = tmp_path / "src"
    src.mkdir()
    inbox = media.path / ".inbox"
    slides = {
        "01-title.png": mc.slide("Quarterly review"),
        "02-title-again.jpg": mc.near_duplicate(mc.slide("Quarterly review")),
        "03-hiring.png": mc.slide("Hiring plan"),
        "04-hiring-again.png": mc.near_duplicate(mc.slide("Hiring plan"), seed=3),
    }
    for name, data in slides.items():
        (src / name).write_bytes(data)
        _cp(src / name, inbox / name)
    reports = {name: report(inbox, name) for name in slides}
    assert "image kept" in reports["01-title.png"]
    assert "state: dropped (near-duplicate" in reports["02-title-again.jpg"]
    assert "image kept" in reports["03-hiring.png"]
    assert "state: dropped (near-duplicate" in reports["04-hiring-again.png"]
    for text in reports.values():  # every decision with its score
        assert re.search(r"similarity (\d\.\d+|none)", text), text
    images = media.path / "user" / "default" / "images"
    kept = sorted(p.name for p in images.iterdir())
    assert len(kept) == 2 and all(k.endswith(("01-title", "03-hiring")) for k in kept)
    title = images / kept[0]
    assert (title / "original.png").read_bytes() == slides["01-title.png"]
    assert "PNG 640x480" in (title / "L2.md").read_text()
    # the same bytes again: reported as the node that has them, no new node
    _cp(src / "01-title.png", inbox / "again.png")
    assert f"already stored as user/default/images/{kept[0]}" in report(inbox, "again.png")
    assert len(list(images.iterdir())) == 2

    memo = mc.concat(mc.sox_make(2), mc.speech("Buy milk and call Sam at five."), mc.sox_make(3))
    (src / "memo.wav").write_bytes(memo)
    _cp(src / "memo.wav", media.path / "user" / "default" / ".inbox" / "memo.wav")
    text = report(media.path / "user" / "default" / ".inbox", "memo.wav")
    assert "recording kept" in text and "speech share" in text, text
    [node] = list((media.path / "user" / "default" / "audio").iterdir())
    assert (node / "original.wav").read_bytes() == memo
    assert [p.name for p in (node / "speech").iterdir()] == ["0001.wav"]
    assert "speech/0001.wav: 0:01.9" in (node / "L2.md").read_text()  # its start time
    (src / "hush.wav").write_bytes(mc.sox_make(4))
    _cp(src / "hush.wav", inbox / "hush.wav")
    assert "state: dropped (no speech" in report(inbox, "hush.wav")

    status = media.status()
    assert "visual gate: perceptual hash (no CLIP checkpoint configured)" in status
    assert "dropped=3" in status


@pytest.mark.timeout(300)
def test_bad_media_is_refused_in_the_report(media: Mount, tmp_path: Path) -> None:
    inbox = media.path / ".inbox"
    png = mc.slide("Budget")
    bad = {
        "empty.png": b"",
        "truncated.png": png[: len(png) // 3],
        "wrong.jpg": b"plain text with a picture's name\n",
        "huge.png": mc.huge_png_header(10_000, 10_000),
        "silent.wav": mc.long_silent_wav(2 * 3600),  # 57.6 MB of silence, 8 kHz 8-bit
    }
    for name, data in bad.items():
        (tmp_path / name).write_bytes(data)
        _cp(tmp_path / name, inbox / name)
    (tmp_path / "fine.png").write_bytes(png)
    _cp(tmp_path / "fine.png", inbox / "fine.png")
    expect = {
        "empty.png": "empty",
        "truncated.png": "truncated",
        "wrong.jpg": "extension wrong",
        "huge.png": "100 megapixels",
        "silent.wav": "no speech",
    }
    for name, words in expect.items():
        text = report(inbox, name, timeout=120)
        assert words in text and ("refused" in text or "dropped" in text), (name, text)
    assert "image kept" in report(inbox, "fine.png")
    [node] = list((media.path / "user" / "default" / "images").iterdir())
    assert (node / "original.png").read_bytes() == png
    assert shutil.disk_usage(media.path) is not None


def test_ingest_waits_for_the_gates_and_counts_what_they_dropped(
    media: Mount, tmp_path: Path
) -> None:
    first = tmp_path / "a.png"
    first.write_bytes(mc.shape("circle", "red"))
    again = tmp_path / "b.jpg"
    again.write_bytes(mc.near_duplicate(first.read_bytes()))
    cmd = [sys.executable, "-m", "contextfs", "ingest", str(media.path)]
    r = subprocess.run(
        [*cmd, str(first), str(again), "--wait"], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert "ingested 1 file(s), dropped 1 by the media gates, refused 0" in r.stdout


def _endpoint() -> FakeOpenAI:
    """A chat endpoint that captions pictures (and summarises, as the mount also asks it
    for L0/L1) and a transcriptions endpoint that hears the words of a WAV."""

    def chat(body: dict) -> dict:
        content = body["messages"][-1]["content"]
        if isinstance(content, list):  # a picture as an image_url part
            url = next(p["image_url"]["url"] for p in content if p["type"] == "image_url")
            assert url.startswith("data:image/png;base64,")
            text = "A red circle on a white background, drawn in thick strokes."
        else:
            text = json.dumps({"l0": "Summary.", "l1": "Summary."})
        return {
            "id": "c1",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [
                {"index": 0, "finish_reason": "stop",
                 "message": {"role": "assistant", "content": text}}
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }  # fmt: skip

    def transcribe(body: dict) -> dict:
        assert b"RIFF" in body["_raw"] and b'name="model"' in body["_raw"]
        return {"text": "Remember to water the ferns on Thursday."}

    return FakeOpenAI("/v1/chat/completions", chat, more={"/v1/audio/transcriptions": transcribe})


@pytest.mark.allow_warnings
def test_with_an_endpoint_pictures_get_captions_and_speech_a_transcript(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """L2 of a kept picture is a caption by the chat model (the image sent as a content
    part), L2 of kept speech (a recording's, a video's) says its words; a dropped repeat
    costs no call; when the endpoint is gone the node keeps its derived text and the
    report says why."""
    assert mc.have_tools() is None, mc.have_tools()
    llm = _endpoint()
    monkeypatch.setenv("FAKE_LLM_KEY", "sk-test")
    data = tmp_path / "data"
    data.mkdir()
    (data / "config.yaml").write_text(
        f"search: false\nllm_base_url: {llm.url}\nllm_model: eyes\n"
        "llm_api_key_env: FAKE_LLM_KEY\nllm_transcribe_model: ears\nvad_frame_ms: 20\n"
    )
    (tmp_path / "mnt").mkdir()
    m = Mount(tmp_path / "mnt", data)
    m.start()
    try:
        src = tmp_path / "src"
        src.mkdir()
        inbox = m.path / ".inbox"
        (src / "circle.png").write_bytes(mc.shape("circle", "red"))
        (src / "circle-again.png").write_bytes(mc.near_duplicate(mc.shape("circle", "red")))
        memo = mc.concat(mc.sox_make(0.5), mc.speech("Remember to water the ferns."))
        (src / "memo.wav").write_bytes(memo)
        _cp(src / "circle.png", inbox / "circle.png")
        rep = report(inbox, "circle.png")
        assert "- caption: by eyes" in rep, rep
        node = re.search(r"image kept: (\S+)\)", rep).group(1)
        assert "A red circle on a white background" in (m.path / node / "L2.md").read_text()
        captions = [b for p, _a, b in llm.requests if p == "/v1/chat/completions"
                    and isinstance(b["messages"][-1]["content"], list)]  # fmt: skip
        assert len(captions) == 1
        _cp(src / "circle-again.png", inbox / "circle-again.png")
        assert "state: dropped" in report(inbox, "circle-again.png")
        assert sum(isinstance(b["messages"][-1]["content"], list)
                   for p, _a, b in llm.requests if p == "/v1/chat/completions") == 1  # fmt: skip
        _cp(src / "memo.wav", inbox / "memo.wav")
        rep = report(inbox, "memo.wav")
        assert "- transcript: by ears" in rep, rep
        node = re.search(r"recording kept: (\S+)\)", rep).group(1)
        l2 = (m.path / node / "L2.md").read_text()
        assert "Transcribed by ears." in l2 and "water the ferns on Thursday" in l2, l2
        said = mc.speech("Welcome to the review.")
        length = len(mc.pcm_of(said)[0]) / 16000
        wav = mc.concat(mc.sox_make(1), said, mc.sox_make(max(0.2, 4 - 1 - length)))
        (src / "talk.mp4").write_bytes(mc.video([mc.slide("Review")], seconds_each=4, wav=wav))
        _cp(src / "talk.mp4", inbox / "talk.mp4")
        rep = report(inbox, "talk.mp4")
        assert "- transcript: by ears" in rep, rep
        node = re.search(r"video kept: (\S+)\)", rep).group(1)
        assert "0001.wav" in (l2 := (m.path / node / "L2.md").read_text()), l2
        assert "Transcribed by ears." in l2 and "water the ferns on Thursday" in l2, l2
        llm.close()  # the endpoint goes away: derived text, and the reason
        (src / "square.png").write_bytes(mc.shape("square", "blue"))
        _cp(src / "square.png", inbox / "square.png")
        rep = report(inbox, "square.png")
        assert "state: done" in rep and "- caption: none (" in rep, rep
        node = re.search(r"image kept: (\S+)\)", rep).group(1)
        assert "# Image square.png\n\nA PNG " in (m.path / node / "L2.md").read_text()
    finally:
        m.stop()
    assert m.fsck() == []
