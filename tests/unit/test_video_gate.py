"""The video gate on videos made here by PyAV's encoders: limits read from the header
before decoding, and the sampling interval."""

from __future__ import annotations

import pytest

from contextfs.media import BadMedia
from contextfs.media.video import analyse_video
from contextfs.media.visual import HashGate
from contextfs.testing import media_corpus as mc


@pytest.fixture(scope="module")
def clip() -> bytes:
    return mc.video([mc.shape("circle", "red"), mc.shape("square", "blue")], seconds_each=2)


def test_oversized_frames_and_long_videos_are_refused_from_the_header(clip: bytes) -> None:
    with pytest.raises(BadMedia, match=r"frames are 320x240 .* at most 0 megapixels"):
        analyse_video(clip, ".mp4", HashGate(), max_pixels=320 * 240 - 1)
    with pytest.raises(BadMedia, match=r"the video is 4 s long; the gates take at most 1 s"):
        analyse_video(clip, ".mp4", HashGate(), max_seconds=1.0)


def test_the_interval_sets_how_many_frames_the_gate_sees(clip: bytes) -> None:
    every_second = analyse_video(clip, ".mp4", HashGate(), interval=1.0)
    twice = analyse_video(clip, ".mp4", HashGate(), interval=0.5)
    assert [f.time for f in every_second.frames] == [0.0, 1.0, 2.0, 3.0]
    assert len(twice.frames) == 8
    # the same two pictures are kept, at the same times, whatever the interval
    assert [f.time for f in every_second.kept_frames] == [f.time for f in twice.kept_frames]
    assert [f.time for f in twice.kept_frames] == [0.0, 2.0]
    assert all(f.jpeg[:2] == b"\xff\xd8" for f in twice.kept_frames)
    assert all(f.jpeg == b"" for f in twice.frames if not f.kept)  # dropped: not held
    assert every_second.pcm is None and every_second.info.audio_codec == ""
