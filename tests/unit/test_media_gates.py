"""The media gates on real files: Pillow-drawn images, espeak-ng speech, sox silence and
noise (`contextfs.testing.media_corpus`)."""

from __future__ import annotations

import pytest

from contextfs.media import BadMedia
from contextfs.media.audio import VadSettings, decode_audio, gate_audio, wav_bytes
from contextfs.media.visual import HashGate, decide, probe_image
from contextfs.testing import media_corpus as mc

MAX_PIXELS = 40_000_000
SENTENCE = "The quarterly review moved to Thursday at three. Bring the budget numbers."


@pytest.fixture(scope="module")
def spoken() -> bytes:
    assert mc.have_tools() is None, mc.have_tools()
    return mc.speech(SENTENCE)


# ---- audio -------------------------------------------------------------------------------


def test_speech_is_kept_with_its_times(spoken: bytes) -> None:
    pcm = decode_audio(spoken, ".wav")
    d = gate_audio(pcm)
    assert d.kept and d.speech_share > 0.8, d
    assert d.segments[0].start < 0.3 and d.segments[-1].end > pcm.duration - 0.5


@pytest.mark.parametrize("what", ["silence", "white", "pink", "brown"])
def test_silence_and_steady_noise_are_dropped(what: str) -> None:
    d = gate_audio(decode_audio(mc.sox_make(3, what), ".wav"))
    assert not d.kept and d.speech_share == 0.0, d
    if what == "white":  # webrtcvad alone calls loud noise speech: the energy test does not
        assert d.vad_frames > d.frames // 2


def test_a_mix_keeps_the_speech_in_its_place(spoken: bytes) -> None:
    speech_len = len(mc.pcm_of(spoken)[0]) / 16000
    mix = mc.concat(mc.sox_make(2), spoken, mc.sox_make(1, "white", vol=0.3), mc.sox_make(2))
    d = gate_audio(decode_audio(mix, ".wav"))
    assert len(d.segments) == 1, d.segments
    seg = d.segments[0]
    assert 1.7 <= seg.start <= 2.2 and 2 + speech_len - 0.5 <= seg.end <= 2 + speech_len + 0.4
    assert 0.3 < d.speech_share < 0.7
    # the kept segment is itself a WAV of speech
    again = gate_audio(decode_audio(wav_bytes(decode_audio(mix, ".wav"), seg), ".wav"))
    assert again.speech_share > 0.8


@pytest.mark.parametrize("frame_ms", [10, 20, 30])
@pytest.mark.parametrize("aggressiveness", [0, 3])
def test_frame_lengths_and_aggressiveness(spoken: bytes, frame_ms: int, aggressiveness: int):
    s = VadSettings(frame_ms=frame_ms, aggressiveness=aggressiveness)
    pcm = decode_audio(spoken, ".wav")
    assert gate_audio(pcm, s).speech_share > 0.7
    assert not gate_audio(decode_audio(mc.sox_make(2, "white"), ".wav"), s).kept


def test_other_rates_and_formats_decode(spoken: bytes) -> None:
    raw = mc.speech("Hello there, this is a short note.", rate=22050)
    pcm = decode_audio(raw, ".wav")
    assert pcm.rate == 16000 and pcm.source_rate == 22050
    assert gate_audio(pcm).kept
    import io

    import soundfile

    buf = io.BytesIO()
    samples, rate = mc.pcm_of(spoken)
    soundfile.write(buf, samples, rate, format="FLAC")
    assert gate_audio(decode_audio(buf.getvalue(), ".flac")).speech_share > 0.8


def test_bad_audio_is_refused_with_a_reason(spoken: bytes) -> None:
    for data, words in [
        (b"", "empty"),
        (b"just some text", "no RIFF header"),
        (spoken[: len(spoken) // 2], "truncated"),
        (b"fLaC\x00\x00", "not a readable FLAC"),
    ]:
        suffix = ".flac" if data.startswith(b"fLaC") else ".wav"
        with pytest.raises(BadMedia, match=words):
            decode_audio(data, suffix)
    with pytest.raises(BadMedia, match="at most"):
        gate_audio(decode_audio(mc.long_silent_wav(30), ".wav"), VadSettings(max_seconds=10))


def test_a_long_silent_recording_is_dropped_quickly() -> None:
    d = gate_audio(decode_audio(mc.long_silent_wav(1800), ".wav"))
    assert not d.kept and d.duration == 1800


# ---- images ------------------------------------------------------------------------------


def test_near_duplicates_score_high_and_different_pictures_low() -> None:
    g = HashGate()
    s1 = mc.slide("Quarterly review")
    sig = g.signature
    same = [mc.near_duplicate(s1), mc.slide("Quarterly review", fmt="JPEG")]
    for other in same:
        assert g.similarity(sig(s1), sig(other)) >= 0.9
    different = [
        mc.slide("Hiring plan"),
        mc.shape("circle", "red"),
        mc.noise_image(1),
    ]
    for other in different:
        assert g.similarity(sig(s1), sig(other)) < 0.9
    red, blue = mc.shape("circle", "red"), mc.shape("circle", "blue")
    assert g.similarity(sig(red), sig(blue)) < 0.6  # the same shape in another colour
    n1, n2 = mc.noise_image(1), mc.noise_image(2)
    # pure noise is the hash's worst case (its grey cells are all alike, so re-encoding
    # flips gradients): a noisy JPEG copy scores 0.875, kept as a "change", not as new
    assert g.similarity(sig(n1), sig(mc.near_duplicate(n1))) >= 0.8
    assert g.similarity(sig(n1), sig(n2)) < 0.6


def test_the_policy_between_the_thresholds() -> None:
    assert decide(None, 0.9, 0.6).reason == "first of its stream"
    assert not decide(0.95, 0.9, 0.6).kept
    assert decide(0.7, 0.9, 0.6).reason == "changed"
    assert decide(0.2, 0.9, 0.6).reason == "new"


def test_probe_reads_what_is_known_and_refuses_bad_images() -> None:
    info = probe_image(mc.with_exif_time(mc.shape("square", "green")), ".jpg", MAX_PIXELS)
    assert (info.format, info.width, info.height) == ("JPEG", 320, 240)
    assert info.taken == "2024-05-17T09:30:00"
    assert probe_image(mc.shape("circle", "red", fmt="WEBP"), ".webp", MAX_PIXELS).format == "WEBP"
    assert probe_image(mc.shape("circle", "red", fmt="GIF"), ".gif", MAX_PIXELS).format == "GIF"
    png = mc.slide("x")
    for data, words in [
        (b"", "empty"),
        (b"hello, not a picture", "extension wrong"),
        (png[: len(png) // 2], "truncated"),
        (mc.huge_png_header(10_000, 10_000), "100 megapixels"),
    ]:
        with pytest.raises(BadMedia, match=words):
            probe_image(data, ".png", MAX_PIXELS)
