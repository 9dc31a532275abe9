"""Audio in, speech segments out: decoding and the voice-activity gate.

Decoding: WAV (PCM 8/16/24/32-bit) through the standard library's `wave`; FLAC, OGG
(Vorbis, Opus) and MP3 through `soundfile` (its wheel bundles libsndfile, no system
package needed). Everything is mixed down to mono 16-bit and brought to the nearest rate
webrtcvad takes (8, 16, 32 or 48 kHz; other rates are resampled to 16 kHz by linear
interpolation, which is enough for a speech/non-speech decision).

The gate: each frame (10, 20 or 30 ms) is speech when webrtcvad says so at the configured
aggressiveness AND its energy is above the floor (webrtcvad alone flags the quiet tail
after speech) AND its loudness moves: the spread (standard deviation) of the energies of
the frames above the floor in the 600 ms around it is at least `min_modulation_db`.
webrtcvad alone calls loud steady noise speech; measured on sox's white, pink and brown
noise the spread was 0.2-2.1 dB, on espeak-ng speech 7-18 dB (syllables come and go about
four times a second), so 4 dB tells them apart with room on both sides. Speech frames are
joined into segments (gaps shorter than `join_ms` closed, segments shorter than
`min_speech_ms` dropped, `pad_ms` kept on both sides).
"""

from __future__ import annotations

import io
import wave
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from contextfs.media import BadMedia

VAD_RATES = (8000, 16000, 32000, 48000)


@dataclass(frozen=True, slots=True)
class Pcm:
    samples: np.ndarray  # int16, mono
    rate: int
    source_rate: int
    channels: int

    @property
    def duration(self) -> float:
        return len(self.samples) / self.rate if self.rate else 0.0

    def blocks(self) -> Iterator[np.ndarray]:
        yield self.samples

    def segment(self, seg: Segment) -> np.ndarray:
        return self.samples[int(seg.start * self.rate) : int(seg.end * self.rate)]


BLOCK_SECONDS = 60  # a streamed WAV is read, mixed and gated a minute at a time


@dataclass(frozen=True, slots=True)
class WavStream:
    """A PCM WAV file read a block at a time (`open_wav`): a two-hour recording is never
    one array. Blocks and segments come mono 16-bit at `rate` (a webrtcvad rate)."""

    data: bytes
    rate: int  # the analysis rate
    source_rate: int
    channels: int
    width: int  # bytes per sample
    frames: int  # frames (samples per channel) the header declares and the file holds

    @property
    def duration(self) -> float:
        return self.frames / self.source_rate

    def _read_raw(self, start: int, count: int) -> bytes:
        with wave.open(io.BytesIO(self.data), "rb") as w:
            w.setpos(start)
            return w.readframes(count)

    def _read(self, start: int, count: int) -> np.ndarray:
        x = _mono16(self._read_raw(start, count), self.width, self.channels)
        if self.rate != self.source_rate:
            x = _resample(x, self.source_rate, self.rate)
        return x

    def blocks(self) -> Iterator[np.ndarray]:
        step = self.source_rate * BLOCK_SECONDS
        for start in range(0, self.frames, step):
            yield self._read(start, min(step, self.frames - start))

    def segment(self, seg: Segment) -> np.ndarray:
        a = int(seg.start * self.source_rate)
        b = min(self.frames, int(seg.end * self.source_rate))
        return self._read(a, max(0, b - a))


@dataclass(frozen=True, slots=True)
class VadSettings:
    frame_ms: int = 30  # 10, 20 or 30 (webrtcvad's frame lengths)
    aggressiveness: int = 2  # 0 (keeps most) .. 3 (drops most)
    energy_floor_db: float = -45.0  # dBFS of a frame's RMS below which it is silence
    min_modulation_db: float = 4.0  # energy spread over a second below which it is noise
    modulation_ms: int = 600  # the window of that spread
    min_speech_ms: int = 200  # shorter segments are dropped
    join_ms: int = 300  # shorter gaps between speech are closed
    pad_ms: int = 100  # kept on both sides of a segment
    max_seconds: float = 4 * 3600.0  # longer recordings are refused

    def check(self) -> None:
        if self.frame_ms not in (10, 20, 30):
            raise BadMedia("vad_frame_ms must be 10, 20 or 30")
        if self.aggressiveness not in (0, 1, 2, 3):
            raise BadMedia("vad_aggressiveness must be 0, 1, 2 or 3")


@dataclass(frozen=True, slots=True)
class Segment:
    start: float  # seconds
    end: float

    @property
    def length(self) -> float:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class AudioDecision:
    duration: float  # seconds of audio
    frames: int
    speech_frames: int  # frames the gate called speech (before joining)
    vad_frames: int  # frames webrtcvad alone called speech
    segments: tuple[Segment, ...]

    @property
    def kept_seconds(self) -> float:
        return sum(s.length for s in self.segments)

    @property
    def speech_share(self) -> float:
        """The score: the share of the recording kept as speech (0 .. 1)."""
        return self.kept_seconds / self.duration if self.duration else 0.0

    @property
    def kept(self) -> bool:
        return bool(self.segments)


def decode_audio(data: bytes, suffix: str) -> Pcm:
    """Bytes of a .wav/.flac/.ogg/.mp3 file as mono 16-bit PCM at a webrtcvad rate."""
    if not data:
        raise BadMedia("the file is empty (0 bytes)")
    if suffix == ".wav":
        w = open_wav(data)
        if isinstance(w, Pcm):
            return w
        samples = _mono16(w._read_raw(0, w.frames), w.width, w.channels)
        rate, channels = w.source_rate, w.channels
    else:
        samples, rate, channels = _read_soundfile(data, suffix)
    return _pcm(samples, rate, channels)


def _pcm(samples: np.ndarray, rate: int, channels: int) -> Pcm:
    if not len(samples):
        raise BadMedia("the recording has no samples")
    source_rate = rate
    if rate not in VAD_RATES:
        samples = _resample(samples, rate, 16000)
        rate = 16000
    return Pcm(samples, rate, source_rate, channels)


def _mono16(raw: bytes, width: int, channels: int) -> np.ndarray:
    """PCM frames (8/16/24/32-bit, interleaved channels) as mono int16."""
    # 8- and 16-bit (most files) never go through a wider type: a long recording is big
    if width == 1:
        x = np.frombuffer(raw, np.uint8).astype(np.int16)
        x -= 128
        x <<= 8
    elif width == 2:
        x = np.frombuffer(raw, "<i2")
    elif width == 3:
        b = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(np.int32)
        x = ((b[:, 0] << 8) | (b[:, 1] << 16) | (b[:, 2] << 24)) >> 16
    else:
        x = np.frombuffer(raw, "<i4").astype(np.int64) >> 16
    if channels > 1:
        x = x.reshape(-1, channels).mean(axis=1)
    if x.dtype != np.int16:
        x = np.clip(x, -32768, 32767).astype(np.int16)
    return x


def _data_start(data: bytes) -> int:
    """Where a RIFF/WAVE file's samples begin (after the `data` chunk's header)."""
    pos = 12
    while pos + 8 <= len(data):
        size = int.from_bytes(data[pos + 4 : pos + 8], "little")
        if data[pos : pos + 4] == b"data":
            return pos + 8
        pos += 8 + size + (size & 1)  # chunks are padded to an even length
    return len(data)


def open_wav(data: bytes) -> WavStream | Pcm:
    """A PCM WAV to be read a block at a time: the header is checked and the file's length
    against it (a truncated file is refused here, before any decoding). A WAV Python's
    `wave` cannot read (WAVE_FORMAT_EXTENSIBLE, which sox writes past 16 bits and for
    more than two channels; IEEE float) is decoded whole by libsndfile instead."""
    if not data:
        raise BadMedia("the file is empty (0 bytes)")
    try:
        with wave.open(io.BytesIO(data), "rb") as w:
            channels, width, rate = w.getnchannels(), w.getsampwidth(), w.getframerate()
            declared = w.getnframes()
    except (wave.Error, EOFError) as exc:
        if data[:4] != b"RIFF":
            raise BadMedia("not a WAV file (no RIFF header): is the extension wrong?") from None
        if str(exc).startswith("unknown format"):
            return _pcm(*_read_soundfile(data, ".wav"))
        raise BadMedia(f"not a readable WAV file: {exc}") from None
    if width not in (1, 2, 3, 4) or rate <= 0 or channels <= 0:
        raise BadMedia(f"unsupported WAV format ({width * 8}-bit, {rate} Hz)")
    held = max(0, len(data) - _data_start(data)) // (width * channels)
    if held < declared:
        raise BadMedia(
            f"the WAV file is truncated: its header says {declared} frames, it holds {held}"
        )
    if declared == 0:
        raise BadMedia("the recording has no samples")
    return WavStream(data, rate if rate in VAD_RATES else 16000, rate, channels, width, declared)


def _read_soundfile(data: bytes, suffix: str) -> tuple[np.ndarray, int, int]:
    import soundfile  # here: only non-WAV audio needs libsndfile

    try:
        # as floats in [-1, 1]: libsndfile reads a float file as int16 unscaled (all 0)
        x, rate = soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)
    except (soundfile.LibsndfileError, RuntimeError, TypeError, ValueError) as exc:
        raise BadMedia(f"not a readable {suffix[1:].upper()} file: {exc}") from None
    channels = x.shape[1]
    mono = x.mean(axis=1) if channels > 1 else x[:, 0]
    return np.clip(mono * 32768.0, -32768, 32767).astype(np.int16), int(rate), channels


def _resample(x: np.ndarray, rate: int, to: int) -> np.ndarray:
    n = int(len(x) * to / rate)
    t = np.arange(n) * (rate / to)
    return np.interp(t, np.arange(len(x)), x.astype(np.float32)).astype(np.int16)


def _frame_db(samples: np.ndarray, n: int) -> np.ndarray:
    count = len(samples) // n
    frames = samples[: count * n].reshape(count, n)
    power = np.empty(count, np.float64)
    step = 4096  # frames at a time: never a whole recording as floats
    for i in range(0, count, step):
        f = frames[i : i + step].astype(np.float32) / 32768.0
        power[i : i + step] = np.mean(f * f, axis=1)
    return 10 * np.log10(power + 1e-12)


def _spread(db: np.ndarray, w: int, floor_db: float) -> np.ndarray:
    """The std of the dBFS of the frames at or above the floor within w frames around each
    frame, by running sums (memory linear in the frames, whatever w)."""
    if not len(db):
        return db.copy()
    mask = (db >= floor_db).astype(np.float64)
    x = np.where(mask > 0, db, 0.0)
    box = np.ones(w)
    k = np.convolve(mask, box, "same")
    s1 = np.convolve(x, box, "same")
    s2 = np.convolve(x * x, box, "same")
    k1 = np.maximum(k, 1)
    mean = s1 / k1
    return np.sqrt(np.maximum(s2 / k1 - mean * mean, 0.0))


def gate_audio(pcm: Pcm | WavStream, settings: VadSettings | None = None) -> AudioDecision:
    """The voice-activity gate: which stretches of the recording are speech. A WavStream
    is gated a block at a time: only per-frame numbers are kept for the whole file."""
    import webrtcvad  # the `webrtcvad-wheels` distribution

    s = settings or VadSettings()
    s.check()
    if pcm.duration > s.max_seconds:
        raise BadMedia(
            f"the recording is {pcm.duration:.0f} s long; the audio gate takes at most "
            f"{s.max_seconds:.0f} s (media_max_audio_seconds)"
        )
    n = pcm.rate * s.frame_ms // 1000
    vad = webrtcvad.Vad(s.aggressiveness)
    dbs, voices = [], []
    for block in pcm.blocks():
        samples = block.astype("<i2", copy=False)
        db = _frame_db(samples, n)
        voiced = np.zeros(len(db), bool)
        for i in np.flatnonzero(db >= s.energy_floor_db):  # silence costs no webrtcvad call
            voiced[i] = vad.is_speech(samples[i * n : (i + 1) * n].tobytes(), pcm.rate)
        dbs.append(db)
        voices.append(voiced)
    db = np.concatenate(dbs) if dbs else np.empty(0)
    voiced = np.concatenate(voices) if voices else np.zeros(0, bool)
    spread = _spread(db, max(1, s.modulation_ms // s.frame_ms) | 1, s.energy_floor_db)
    audible = db >= s.energy_floor_db
    speech = voiced & audible & (spread >= s.min_modulation_db)
    segments = _segments(speech, s, pcm.duration)
    return AudioDecision(
        round(pcm.duration, 3), len(db), int(speech.sum()), int(voiced.sum()), segments
    )


def _segments(speech: np.ndarray, s: VadSettings, duration: float) -> tuple[Segment, ...]:
    f = s.frame_ms / 1000
    runs: list[list[int]] = []
    for i in np.flatnonzero(speech):
        if runs and (i - runs[-1][1]) * s.frame_ms <= s.join_ms:
            runs[-1][1] = int(i) + 1
        else:
            runs.append([int(i), int(i) + 1])
    out: list[Segment] = []
    pad = s.pad_ms / 1000
    for a, b in runs:
        if (b - a) * s.frame_ms < s.min_speech_ms:
            continue
        start, end = max(0.0, a * f - pad), min(duration, b * f + pad)
        if out and start <= out[-1].end:
            out[-1] = Segment(out[-1].start, end)
        else:
            out.append(Segment(start, end))
    return tuple(Segment(round(float(x.start), 3), round(float(x.end), 3)) for x in out)


def wav_bytes(pcm: Pcm | WavStream, seg: Segment | None = None) -> bytes:
    """A 16-bit mono WAV of the recording (a Pcm), or of one segment of it."""
    if seg is not None:
        x = pcm.segment(seg)
    else:
        assert isinstance(pcm, Pcm)
        x = pcm.samples
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(pcm.rate)
        w.writeframes(x.astype("<i2").tobytes())
    return buf.getvalue()
