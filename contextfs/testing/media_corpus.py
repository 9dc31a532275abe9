"""Real media for the tests and `scripts/bench_media.py`: images drawn with Pillow (slides,
shapes, noise, near-duplicates), speech spoken by espeak-ng, silence and noise made by
sox, and bad media (truncated, mislabelled, a header claiming a huge image, a long silent
WAV). Nothing here is a stand-in: every file is what a user could drop into an inbox.
"""

from __future__ import annotations

import io
import shutil
import struct
import subprocess
import tempfile
import wave
import zlib
from pathlib import Path

import numpy as np


def _encode(img, fmt: str = "PNG", **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def slide(text: str, fmt: str = "PNG", size: tuple[int, int] = (640, 480)) -> bytes:
    """A presentation slide: a title bar and a line of text."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", size, "white")
    d = ImageDraw.Draw(img)
    d.rectangle([20, 20, size[0] - 20, 80], fill="navy")
    d.text((40, 40), text, fill="white", font_size=28)
    d.text((40, 150), text + " in detail", fill="black", font_size=24)
    return _encode(img, fmt)


def shape(kind: str, color: str, fmt: str = "PNG") -> bytes:
    """A filled circle or square on white."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (320, 240), "white")
    d = ImageDraw.Draw(img)
    (d.ellipse if kind == "circle" else d.rectangle)([80, 40, 240, 200], fill=color)
    return _encode(img, fmt)


def noise_image(seed: int, fmt: str = "PNG") -> bytes:
    from PIL import Image

    rng = np.random.default_rng(seed)
    return _encode(Image.fromarray(rng.integers(0, 255, (240, 320, 3), dtype=np.uint8)), fmt)


def near_duplicate(data: bytes, seed: int = 0) -> bytes:
    """The same picture, re-encoded as JPEG (quality 75) with mild sensor noise."""
    from PIL import Image

    img = np.asarray(Image.open(io.BytesIO(data)).convert("RGB")).astype(np.int16)
    rng = np.random.default_rng(seed)
    img = np.clip(img + rng.integers(-12, 12, img.shape), 0, 255).astype(np.uint8)
    return _encode(Image.fromarray(img), "JPEG", quality=75)


def with_exif_time(data: bytes, when: str = "2024:05:17 09:30:00") -> bytes:
    """A JPEG of the image carrying EXIF DateTimeOriginal."""
    from PIL import Image

    img = Image.open(io.BytesIO(data)).convert("RGB")
    exif = Image.Exif()
    exif.get_ifd(0x8769)[0x9003] = when
    return _encode(img, "JPEG", quality=90, exif=exif)


def huge_png_header(width: int = 10_000, height: int = 10_000) -> bytes:
    """A PNG whose header claims width x height pixels (a decompression bomb's shape)."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body))
            + kind
            + body
            + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)
        )

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(b"\x00" * 64))
        + chunk(b"IEND", b"")
    )


# ---- audio -------------------------------------------------------------------------------


def have_tools() -> str | None:
    """What is missing to make real audio here (espeak-ng, sox), or None."""
    missing = [t for t in ("espeak-ng", "sox") if shutil.which(t) is None]
    return f"{', '.join(missing)} not installed (scripts/setup.sh)" if missing else None


def speech(text: str, rate: int = 16000) -> bytes:
    """text spoken by espeak-ng, as a mono 16-bit WAV at `rate` (resampled by sox)."""
    with tempfile.TemporaryDirectory() as d:
        raw, out = Path(d) / "raw.wav", Path(d) / "out.wav"
        subprocess.run(["espeak-ng", "-w", str(raw), text], check=True, capture_output=True)
        subprocess.run(
            ["sox", str(raw), "-r", str(rate), "-c", "1", "-b", "16", str(out)],
            check=True,
            capture_output=True,
        )
        return out.read_bytes()


def sox_make(seconds: float, what: str = "silence", rate: int = 16000, vol: float = 0.5) -> bytes:
    """silence, or white/pink/brown noise, made by sox."""
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "out.wav"
        cmd = ["sox", "-n", "-r", str(rate), "-b", "16", "-c", "1", str(out)]
        if what == "silence":
            cmd += ["trim", "0", str(seconds)]
        else:
            cmd += ["synth", str(seconds), f"{what}noise", "vol", str(vol)]
        subprocess.run(cmd, check=True, capture_output=True)
        return out.read_bytes()


def pcm_of(wav: bytes) -> tuple[np.ndarray, int]:
    with wave.open(io.BytesIO(wav)) as w:
        return np.frombuffer(w.readframes(w.getnframes()), "<i2"), w.getframerate()


def wav_of(samples: np.ndarray, rate: int = 16000) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(samples.astype("<i2").tobytes())
    return buf.getvalue()


def concat(*wavs: bytes) -> bytes:
    """WAVs of one rate, one after the other."""
    parts = [pcm_of(w) for w in wavs]
    return wav_of(np.concatenate([p for p, _ in parts]), parts[0][1])


def long_silent_wav(seconds: float, rate: int = 8000) -> bytes:
    """A silent 8-bit mono WAV (2 hours at 8 kHz is 57.6 MB)."""
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(1)
        w.setframerate(rate)
        w.writeframes(b"\x80" * int(seconds * rate))
    return buf.getvalue()


# ---- video -------------------------------------------------------------------------------

VIDEO_CODECS = {  # container -> (PyAV format, video codec, audio codec)
    ".mp4": ("mp4", "libx264", "aac"),
    ".webm": ("webm", "libvpx-vp9", "libopus"),
    ".mkv": ("matroska", "libx264", "libopus"),
}


def video(
    slides: list[bytes],
    *,
    seconds_each: float = 1.0,
    fps: int = 10,
    wav: bytes | None = None,
    suffix: str = ".mp4",
    size: tuple[int, int] = (320, 240),
) -> bytes:
    """A video made by PyAV's encoders (the `av` wheel): each of `slides` (image bytes)
    shown for `seconds_each`, with `wav` (mono 16-bit) as its sound track when given."""
    import av
    from PIL import Image

    fmt, vcodec, acodec = VIDEO_CODECS[suffix]
    buf = io.BytesIO()
    with av.open(buf, mode="w", format=fmt) as c:
        v = c.add_stream(vcodec, rate=fps)
        assert isinstance(v, av.VideoStream)  # a codec name typed str: any kind of stream
        v.width, v.height, v.pix_fmt = size[0], size[1], "yuv420p"
        a: av.AudioStream | None = None
        if wav is not None:
            samples, rate = pcm_of(wav)
            added = c.add_stream(acodec, rate=rate)
            assert isinstance(added, av.AudioStream)
            a = added
            a.layout = "mono"
        n = 0
        for data in slides:
            img = Image.open(io.BytesIO(data)).convert("RGB").resize(size)
            for _ in range(max(1, round(seconds_each * fps))):
                frame = av.VideoFrame.from_image(img)
                frame.pts = n
                n += 1
                for packet in v.encode(frame):
                    c.mux(packet)
        for packet in v.encode():
            c.mux(packet)
        if a is not None:
            step = 1024
            for k in range(0, len(samples), step):
                chunk = av.AudioFrame.from_ndarray(
                    samples[None, k : k + step].copy(), format="s16", layout="mono"
                )
                chunk.sample_rate = rate
                chunk.pts = k
                for packet in a.encode(chunk):
                    c.mux(packet)
            for packet in a.encode():
                c.mux(packet)
    return buf.getvalue()
