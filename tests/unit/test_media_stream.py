"""A long WAV is gated a minute at a time (`audio.open_wav`): a 2-hour silent recording
is never one array, and streaming decides exactly as decoding the whole file does."""

from __future__ import annotations

import tracemalloc

import pytest

from contextfs.media import BadMedia
from contextfs.media.audio import decode_audio, gate_audio, open_wav, wav_bytes
from contextfs.testing import media_corpus as mc


def test_a_two_hour_silent_wav_is_gated_without_reading_it_whole() -> None:
    data = mc.long_silent_wav(2 * 3600)  # 57.6 MB of 8-bit 8 kHz silence
    tracemalloc.start()
    try:
        d = gate_audio(open_wav(data))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert d.duration == 7200.0 and not d.kept and d.speech_share == 0.0
    # decoded whole it is 115 MB of 16-bit samples (and ~170 MB at the peak, measured)
    assert peak < 40_000_000, peak


def test_streaming_decides_as_decoding_the_whole_file_does() -> None:
    assert mc.have_tools() is None, mc.have_tools()
    said = mc.speech("The streaming gate keeps the same speech in the same place.", rate=22050)
    # 22.05 kHz: resampled to 16 kHz a block (a minute) at a time
    mix = mc.concat(mc.sox_make(58.5, rate=22050), said, mc.sox_make(5, rate=22050))
    whole = gate_audio(decode_audio(mix, ".wav"))
    stream = open_wav(mix)
    streamed = gate_audio(stream)
    assert streamed.kept and len(streamed.segments) == len(whole.segments) == 1
    a, b = streamed.segments[0], whole.segments[0]
    assert abs(a.start - b.start) <= 0.06 and abs(a.end - b.end) <= 0.06, (a, b)
    assert 58 < a.start < 59 and a.end > 60.5  # across the first block's end
    seg = wav_bytes(stream, a)
    assert gate_audio(open_wav(seg)).speech_share > 0.7


def test_a_truncated_wav_is_refused_before_decoding() -> None:
    data = mc.long_silent_wav(10)
    with pytest.raises(BadMedia, match="truncated: its header says 80000 frames, it holds"):
        open_wav(data[: len(data) // 2])
    with pytest.raises(BadMedia, match="no RIFF header"):
        open_wav(b"not a wav at all")
    with pytest.raises(BadMedia, match="empty"):
        open_wav(b"")


@pytest.mark.parametrize(
    "encoding", [["-b", "24"], ["-b", "32"], ["-b", "32", "-e", "floating-point"]]
)
def test_a_wav_of_24_32_bits_or_floats_is_heard(tmp_path, encoding) -> None:
    """Past 16 bits sox writes WAVE_FORMAT_EXTENSIBLE, and floats are format 3: Python's
    `wave` reads neither (refused as 'unknown format: 65534'); libsndfile reads both."""
    import subprocess

    assert mc.have_tools() is None, mc.have_tools()
    said = tmp_path / "said.wav"
    said.write_bytes(mc.speech("Twenty four bits of the same sentence."))
    wide = tmp_path / "wide.wav"
    subprocess.run(["sox", str(said), *encoding, str(wide)], check=True, capture_output=True)
    silent = tmp_path / "silent.wav"
    subprocess.run(["sox", "-n", "-r", "16000", *encoding, str(silent), "trim", "0", "3"],
                   check=True, capture_output=True)  # fmt: skip
    assert gate_audio(open_wav(wide.read_bytes())).kept
    assert not gate_audio(open_wav(silent.read_bytes())).kept
    assert gate_audio(decode_audio(wide.read_bytes(), ".wav")).kept
