"""Media through the inbox handlers and the real IntakeService, without a kernel: images
and recordings become `image`/`audio` nodes with their bytes as attachments, redundant
ones are dropped, bad ones refused, each decision with its score in the report."""

from __future__ import annotations

import re

import pytest

from contextfs.memory.service import Memory
from contextfs.testing import media_corpus as mc
from tests.fs.test_robustness import _cp
from tests.fs.test_virtual_dirs import Mount


@pytest.fixture
def plain(memory: Memory, tmp_path) -> Mount:
    return Mount(memory, tmp_path, search=False)


async def _drop(m: Mount, path: str, data: bytes) -> str:
    """cp into an inbox (close answers 0), process, return the report."""
    assert await _cp(m.fs, path, data) == 0
    while await m.service.step():
        pass
    return await m.fs.text(path + ".report.md")


def _nodes(memory: Memory, kind: str) -> list:
    return [n for n in memory.nodes.values() if n.type == kind and memory.is_live(n)]


async def test_images_are_kept_once_and_near_duplicates_dropped(
    plain: Mount, memory: Memory
) -> None:
    fs = plain.fs
    s1 = mc.slide("Quarterly review")
    report = await _drop(plain, ".inbox/slide1.png", s1)
    assert "state: done (image kept: user/default/images/" in report, report
    assert "first of its stream" in report
    [node] = _nodes(memory, "image")
    path = memory.node_path(node)
    assert sorted(await fs.listdir(path)) == [
        ".history",
        "L0.md",
        "L1.md",
        "L2.md",
        "meta.yaml",
        "original.png",
    ]
    assert await fs.read(f"{path}/original.png") == s1
    l2 = await fs.text(f"{path}/L2.md")
    assert "PNG 640x480" in l2 and "width: 640" in l2 and "original.png" in l2

    report = await _drop(plain, ".inbox/slide1-again.jpg", mc.near_duplicate(s1))
    assert "state: dropped (near-duplicate of " + path in report, report
    score = float(re.search(r"similarity (\d\.\d+)\)", report).group(1))
    assert score >= 0.9

    report = await _drop(plain, ".inbox/slide2.png", mc.slide("Hiring plan"))
    assert "state: done" in report and ("changed, similarity" in report or "new," in report)
    # the very same bytes again: no new node, the report names the one that has them
    report = await _drop(plain, ".inbox/copy.png", s1)
    assert f"duplicate: these bytes are already stored as {path}" in report, report
    assert len(_nodes(memory, "image")) == 2
    # EXIF capture time dates the node
    report = await _drop(plain, ".inbox/cat.jpg", mc.with_exif_time(mc.shape("circle", "red")))
    assert "taken 2024-05-17T09:30:00" in report
    assert any(n.name.startswith("2024-05-17-cat") for n in _nodes(memory, "image"))


async def test_speech_is_kept_as_segments_and_silence_dropped(plain: Mount, memory: Memory) -> None:
    fs = plain.fs
    assert mc.have_tools() is None, mc.have_tools()
    speech = mc.speech("Remember to call the plumber about the kitchen sink on Monday.")
    mix = mc.concat(mc.sox_make(2), speech, mc.sox_make(2), speech, mc.sox_make(2))
    report = await _drop(plain, "user/default/.inbox/memo.wav", mix)
    assert "state: done (recording kept: user/default/audio/" in report, report
    assert re.search(r"speech share 0\.\d{3}", report)
    [node] = _nodes(memory, "audio")
    path = memory.node_path(node)
    assert "original.wav" in await fs.listdir(path)
    assert await fs.listdir(f"{path}/speech") == ["0001.wav", "0002.wav"]
    assert await fs.read(f"{path}/original.wav") == mix
    seg = await fs.read(f"{path}/speech/0001.wav")
    assert seg[:4] == b"RIFF" and len(seg) < len(mix) / 2
    l2 = await fs.text(f"{path}/L2.md")
    assert "segments: 2" in l2 and "speech/0002.wav" in l2

    report = await _drop(plain, ".inbox/quiet.wav", mc.sox_make(3))
    assert "state: dropped (no speech" in report and "speech share 0.000" in report
    report = await _drop(plain, ".inbox/hiss.wav", mc.sox_make(3, "white"))
    assert "state: dropped (no speech" in report
    assert len(_nodes(memory, "audio")) == 1


async def test_bad_media_is_refused_in_the_report_and_nothing_else_is_lost(
    plain: Mount, memory: Memory
) -> None:
    fs = plain.fs
    png = mc.slide("Roadmap")
    await _drop(plain, ".inbox/good.png", png)
    cases = {
        "trunc.png": (png[: len(png) // 2], "truncated"),
        "notes.png": (b"these are notes, not a picture\n", "extension wrong"),
        "bomb.png": (mc.huge_png_header(10_000, 10_000), "100 megapixels"),
        "cut.wav": (mc.speech("one two three")[:3000], "truncated"),
        "text.wav": (b"hello", "no RIFF header"),
        "empty.png": (b"", "the file is empty (0 bytes)"),
    }
    for name, (data, words) in cases.items():
        report = await _drop(plain, f".inbox/{name}", data)
        assert report.startswith(f"# {name}\n\nstate: refused:"), (name, report)
        assert words in report, (name, report)
        assert await fs.read(f".inbox/{name}") == data  # kept as it arrived
    assert len(_nodes(memory, "image")) == 1
    assert await fs.read(memory.node_path(_nodes(memory, "image")[0]) + "/original.png") == png
    status = "\n".join(plain.intake.status_lines())
    assert "visual gate: perceptual hash (no CLIP checkpoint configured)" in status
    assert "refused=6" in status


async def test_a_stream_starts_over_after_a_quiet_gap_and_agents_media_go_to_the_user(
    plain: Mount, memory: Memory
) -> None:
    now = [1_000_000.0]
    plain.intake.clock = lambda: now[0]
    s1 = mc.slide("Standup")
    await _drop(plain, ".inbox/a.png", s1)
    now[0] += 60
    assert "state: dropped" in await _drop(plain, ".inbox/b.jpg", mc.near_duplicate(s1))
    now[0] += 601  # media_stream_gap (600 s) without an accepted image: a new stream
    report = await _drop(plain, ".inbox/c.jpg", mc.near_duplicate(s1, seed=5))
    assert "first of its stream" in report and "image kept" in report, report
    # an agent's inbox: the image is kept under the default user, like its conversations
    await plain.fs.mkdir("agent/helper")
    report = await _drop(plain, "agent/helper/.inbox/shot.png", mc.shape("square", "green"))
    assert "image kept: user/default/images/" in report, report


async def test_an_atomic_writers_rename_hands_media_in(plain: Mount, memory: Memory) -> None:
    fs = plain.fs
    await fs.write(".inbox/.photo.png.tmp1234", mc.shape("circle", "orange"))
    await fs.rename(".inbox/.photo.png.tmp1234", ".inbox/photo.png")
    while await plain.service.step():
        pass
    assert "image kept" in await fs.text(".inbox/photo.png.report.md")
    assert len(_nodes(memory, "image")) == 1
