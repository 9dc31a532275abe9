"""Videos through the inbox handlers and the real IntakeService, without a kernel: a video
made here by PyAV's encoders (Pillow frames, an espeak-ng sound track) becomes ONE `video`
node whose kept frames and speech segments are its parts, with their times; a video of
repeated frames keeps few of them; bad videos are refused in the report."""

from __future__ import annotations

import re

import pytest

from contextfs.memory.service import Memory
from contextfs.testing import media_corpus as mc
from tests.fs.test_media import _drop, _nodes
from tests.fs.test_virtual_dirs import Mount


@pytest.fixture
def plain(memory: Memory, tmp_path) -> Mount:
    return Mount(memory, tmp_path, search=False)


@pytest.fixture(scope="module")
def talk() -> tuple[bytes, float]:
    """Three distinct slides, 3 s each, over 2 s silence + a spoken sentence + silence."""
    assert mc.have_tools() is None, mc.have_tools()
    said = mc.speech("The budget review moved to Thursday at three.")
    wav = mc.concat(mc.sox_make(2), said, mc.sox_make(9 - 2 - len(mc.pcm_of(said)[0]) / 16000))
    slides = [mc.shape("circle", "red"), mc.slide("Hiring plan"), mc.shape("square", "blue")]
    return mc.video(slides, seconds_each=3, wav=wav), len(mc.pcm_of(said)[0]) / 16000


async def test_a_video_becomes_one_node_with_its_frames_and_speech(
    plain: Mount, memory: Memory, talk: tuple[bytes, float]
) -> None:
    fs = plain.fs
    data, said = talk
    report = await _drop(plain, ".inbox/standup.mp4", data)
    assert "state: done (video kept: user/default/videos/" in report, report
    [node] = _nodes(memory, "video")
    assert not _nodes(memory, "image") and not _nodes(memory, "audio")  # one node, no more
    path = memory.node_path(node)
    assert sorted(await fs.listdir(path)) == [
        ".history",
        "L0.md",
        "L1.md",
        "L2.md",
        "frames",
        "meta.yaml",
        "original.mp4",
        "speech",
    ]
    assert await fs.read(f"{path}/original.mp4") == data
    # 9 frames sampled (one a second), the three slides kept at their times
    assert await fs.listdir(f"{path}/frames") == ["0001.jpg", "0002.jpg", "0003.jpg"]
    assert (await fs.read(f"{path}/frames/0002.jpg"))[:2] == b"\xff\xd8"  # a JPEG
    l2 = await fs.text(f"{path}/L2.md")
    assert "Frames: 3 kept of 9 sampled every 1 s" in l2, l2
    assert "frames/0001.jpg: 0:00.000" in l2 and "frames/0002.jpg: 0:03.000" in l2
    assert "frames/0003.jpg: 0:06.000" in l2
    # the sentence: one speech segment where it was said (from 2 s on)
    assert await fs.listdir(f"{path}/speech") == ["0001.wav"]
    seg = re.search(r"speech/0001.wav: 0:(\d\d\.\d+) – 0:(\d\d\.\d+)", l2)
    assert seg, l2
    start, end = float(seg.group(1)), float(seg.group(2))
    assert 1.6 <= start <= 2.2 and 2 + said - 0.6 <= end <= 2 + said + 0.5, (start, end)
    assert "frames_kept: 3" in l2 and "segments: 1" in l2 and "format: MP4" in l2
    # every sampled frame's decision with its score is in the report
    assert report.count("kept as frames/") == 3
    assert re.search(r"frame\(s\) dropped \(near-duplicate, similarity", report), report
    assert "audio gate (webrtcvad" in report


async def test_a_video_of_repeated_frames_drops_most_of_them(plain: Mount, memory: Memory) -> None:
    fs = plain.fs
    # one slide for 20 s, then another for 4 s (WebM: VP9 + Opus), no speech
    data = mc.video(
        [mc.slide("Agenda"), mc.shape("circle", "green")],
        seconds_each=12,
        fps=5,
        suffix=".webm",
    )
    report = await _drop(plain, ".inbox/screen.webm", data)
    assert "state: done (video kept:" in report, report
    [node] = _nodes(memory, "video")
    path = memory.node_path(node)
    assert await fs.listdir(f"{path}/frames") == ["0001.jpg", "0002.jpg"]
    l2 = await fs.text(f"{path}/L2.md")
    assert "Frames: 2 kept of 24 sampled" in l2 and "(92% dropped" in l2, l2
    assert "original.webm" in await fs.listdir(path)
    assert "No audio track." in l2


async def test_bad_videos_are_refused_and_nothing_else_is_lost(
    plain: Mount, memory: Memory
) -> None:
    fs = plain.fs
    good = mc.video([mc.shape("circle", "red")], seconds_each=2, suffix=".mkv")
    webm = mc.video([mc.shape("circle", "red"), mc.slide("x")], seconds_each=3, suffix=".webm")
    mp4 = mc.video([mc.shape("square", "red")], seconds_each=2)
    talk = mc.video(
        [mc.shape("circle", "red"), mc.slide("x"), mc.noise_image(3)],
        seconds_each=4,
        suffix=".mkv",
        wav=mc.sox_make(12),
    )
    cases = {
        # Matroska declares its duration up front: cut short it still opens and decodes
        "cut-talk.mkv": (talk[: len(talk) // 2], "truncated: it declares 12.01 s"),
        "cut.mp4": (mp4[: len(mp4) // 3], "damaged or truncated"),
        "cut.webm": (webm[: len(webm) // 3], "truncated"),
        "notes.mp4": (b"meeting notes, not a video\n", "extension wrong"),
        "photo.mkv": (mc.slide("not a video"), "extension wrong"),
        "empty.webm": (b"", "empty (0 bytes)"),
    }
    for name, (data, words) in cases.items():
        report = await _drop(plain, f".inbox/{name}", data)
        assert "refused" in report and words in report, (name, report)
        assert await fs.read(f".inbox/{name}") == data  # kept as it arrived
    report = await _drop(plain, ".inbox/fine.mkv", good)
    assert "video kept" in report and "- MKV 320x240, 2.0" in report, report
    [node] = _nodes(memory, "video")
    assert await fs.read(memory.node_path(node) + "/original.mkv") == good
    assert "refused=6" in "\n".join(plain.intake.status_lines())
