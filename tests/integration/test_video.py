"""Video through a real mount: `cp` of an MP4 made here (Pillow frames, an espeak-ng sound
track, PyAV's encoders) into an inbox closes with 0 and becomes one node that `ls` and
`cat` show with its kept frames and speech segments; a bad video is refused in its report
and nothing else is lost."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from contextfs.testing import Mount
from contextfs.testing import media_corpus as mc
from tests.integration.test_media import _cp, media, report  # noqa: F401 - fixture


def test_a_recorded_talk_becomes_one_node_a_user_can_list(media: Mount, tmp_path: Path) -> None:  # noqa: F811
    assert mc.have_tools() is None, mc.have_tools()
    said = mc.speech("Welcome to the roadmap review. We ship the search feature in May.")
    length = len(mc.pcm_of(said)[0]) / 16000
    wav = mc.concat(mc.sox_make(3), said, mc.sox_make(12 - 3 - length))
    slides = [mc.slide("Roadmap review"), mc.shape("circle", "red"), mc.shape("square", "blue")]
    talk = tmp_path / "talk.mp4"
    talk.write_bytes(mc.video(slides, seconds_each=4, wav=wav))
    inbox = media.path / ".inbox"
    _cp(talk, inbox / "talk.mp4")
    text = report(inbox, "talk.mp4")
    assert "state: done (video kept: user/default/videos/" in text, text
    [node] = list((media.path / "user" / "default" / "videos").iterdir())
    listing = subprocess.run(["ls", node], capture_output=True, text=True, check=True).stdout
    assert listing.split() == [
        "L0.md",
        "L1.md",
        "L2.md",
        "frames",
        "meta.yaml",
        "original.mp4",
        "speech",
    ]
    assert (node / "original.mp4").read_bytes() == talk.read_bytes()
    assert sorted(p.name for p in (node / "frames").iterdir()) == [
        "0001.jpg",
        "0002.jpg",
        "0003.jpg",
    ]
    assert [p.name for p in (node / "speech").iterdir()] == ["0001.wav"]
    l2 = (node / "L2.md").read_text()
    assert "Frames: 3 kept of 12 sampled every 1 s (75% dropped" in l2, l2
    start = float(re.search(r"speech/0001.wav: 0:(\d\d\.\d+)", l2).group(1))
    assert 2.6 <= start <= 3.2, l2
    # the segment is itself speech the audio gate keeps
    seg = tmp_path / "seg.wav"
    seg.write_bytes((node / "speech" / "0001.wav").read_bytes())
    _cp(seg, inbox / "seg.wav")
    assert "recording kept" in report(inbox, "seg.wav")

    (tmp_path / "notes.mkv").write_bytes(b"not a video at all\n")
    _cp(tmp_path / "notes.mkv", inbox / "notes.mkv")
    assert "refused: the bytes are not an MP4, WebM or MKV video" in report(inbox, "notes.mkv")
    assert (inbox / "notes.mkv").read_bytes() == b"not a video at all\n"
    assert len(list((media.path / "user" / "default" / "videos").iterdir())) == 1
