"""Video in, kept frames and speech segments out: decoding (PyAV) and both gates.

A video (MP4, WebM, MKV) is decoded once by PyAV (the `av` wheel bundles the ffmpeg
libraries: no system ffmpeg). Frames are sampled every `interval` seconds (the first frame
at or after each multiple of it) and go through the visual gate as one stream: each
sampled frame is compared with the last frame kept from this video, and `visual.decide`
drops the near-duplicates. The sampled frames are JPEG-encoded before the gate sees them,
so any `VisualGate` (the perceptual hash, a CLIP gate) takes them as it takes an image.
Only kept frames are held in memory. The audio track, mixed to mono 16-bit at 16 kHz by
PyAV's resampler, goes through the voice-activity gate (`audio.gate_audio`).

Bad bytes are `BadMedia` with a reason: not a video (no container signature, or ffmpeg
cannot open it), damaged or truncated (the signature is right but the container cannot be
read, decoding fails, or the decoded streams end well before the duration the container
declares), too large (frame size over `max_pixels`, duration over `max_seconds`, both read
from the header before anything is decoded).
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass

import numpy as np

from contextfs.media import BadMedia
from contextfs.media.audio import Pcm
from contextfs.media.visual import VisualGate, decide

log = logging.getLogger(__name__)

FORMATS = {".mp4": "MP4", ".webm": "WebM", ".mkv": "MKV"}
ANALYSIS_RATE = 16000  # the audio track is gated at this rate (a webrtcvad rate)


@dataclass(frozen=True, slots=True)
class VideoInfo:
    format: str  # what the bytes are: MP4 | WebM | MKV (Matroska)
    width: int
    height: int
    duration: float  # seconds (the longer of the decoded streams)
    fps: float  # the video stream's average frame rate, 0.0 when unknown
    video_codec: str
    audio_codec: str  # '' when the video has no audio track
    audio_rate: int
    channels: int


@dataclass(frozen=True, slots=True)
class FrameDecision:
    time: float  # seconds from the start
    kept: bool
    similarity: float | None  # to the last kept frame of this video; None for the first
    reason: str  # visual.decide's: 'first of its stream' | 'new' | 'changed' | 'near-duplicate'
    jpeg: bytes  # the frame as JPEG: only for a kept frame (b'' for a dropped one)


@dataclass(frozen=True, slots=True)
class VideoResult:
    info: VideoInfo
    frames: tuple[FrameDecision, ...]  # every sampled frame, in time order
    pcm: Pcm | None  # the audio track at ANALYSIS_RATE, None without one

    @property
    def kept_frames(self) -> tuple[FrameDecision, ...]:
        return tuple(f for f in self.frames if f.kept)


def container_format(data: bytes) -> str | None:
    """What the first bytes say the container is: 'MP4' (an ISO BMFF `ftyp` box), 'MKV'
    (an EBML header: WebM and Matroska; told apart by the decoder), or None."""
    if len(data) >= 12 and data[4:8] == b"ftyp":
        return "MP4"
    if data[:4] == b"\x1a\x45\xdf\xa3":
        return "MKV"
    return None


def _jpeg(frame, quality: int) -> bytes:
    buf = io.BytesIO()
    frame.to_image().save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def analyse_video(
    data: bytes,
    suffix: str,
    gate: VisualGate,
    *,
    interval: float = 1.0,
    drop_above: float = 0.90,
    new_below: float = 0.60,
    max_pixels: int = 40_000_000,
    max_seconds: float = 4 * 3600.0,
    jpeg_quality: int = 85,
) -> VideoResult:
    """Decode a video, sample and gate its frames, and decode its audio track to PCM for
    the audio gate (run by the caller: it needs the VAD settings). BadMedia for bytes that
    are not a readable video."""
    import av  # here: only videos need the ffmpeg libraries

    if not data:
        raise BadMedia("the file is empty (0 bytes)")
    kind = container_format(data)
    name = FORMATS.get(suffix, suffix[1:].upper())
    if kind is None:
        raise BadMedia(
            f"the bytes are not an MP4, WebM or MKV video (is the extension wrong?); "
            f"the name says {name}"
        )
    try:
        container = av.open(io.BytesIO(data), mode="r")
    except (av.error.FFmpegError, ValueError, OSError) as exc:
        raise BadMedia(f"the {name} video is damaged or truncated: {exc}") from None
    with container:
        # the EBML header's DocType tells WebM from other Matroska
        fmt = "MP4" if kind == "MP4" else ("WebM" if b"webm" in data[:64] else "MKV")
        declared = container.duration / 1e6 if container.duration else 0.0
        if declared > max_seconds:
            raise BadMedia(
                f"the video is {declared:.0f} s long; the gates take at most "
                f"{max_seconds:.0f} s (media_max_audio_seconds)"
            )
        vstream = container.streams.video[0] if container.streams.video else None
        astream = container.streams.audio[0] if container.streams.audio else None
        if vstream is None and astream is None:
            raise BadMedia(f"the {fmt} file has neither a video nor an audio track")
        width = height = 0
        if vstream is not None:
            width, height = vstream.codec_context.width, vstream.codec_context.height
            if width * height > max_pixels:
                raise BadMedia(
                    f"the video's frames are {width}x{height} ({width * height / 1e6:.0f} "
                    f"megapixels); the visual gate takes at most {max_pixels / 1e6:.0f} "
                    "megapixels (media_max_pixels)"
                )
        frames: list[FrameDecision] = []
        chunks: list[np.ndarray] = []
        last_sig: object = None
        next_at = 0.0
        end = 0.0
        resampler = (
            av.AudioResampler(format="s16", layout="mono", rate=ANALYSIS_RATE)
            if astream is not None
            else None
        )
        streams = [s for s in (vstream, astream) if s is not None]
        try:
            for packet in container.demux(*streams):
                for frame in packet.decode():
                    # only the video and audio streams are demuxed: no subtitle frames
                    assert isinstance(frame, av.VideoFrame | av.AudioFrame)
                    t = float(frame.time or 0.0)
                    if packet.stream is vstream:
                        end = max(end, t)
                        if t + 1e-6 < next_at:
                            continue
                        next_at = (int(t / interval + 1e-6) + 1) * interval
                        jpeg = _jpeg(frame, jpeg_quality)
                        sig = gate.signature(jpeg)
                        sim = gate.similarity(sig, last_sig) if last_sig is not None else None
                        verdict = decide(sim, drop_above, new_below)
                        if verdict.kept:
                            last_sig = sig
                        frames.append(
                            FrameDecision(
                                round(t, 3),
                                verdict.kept,
                                sim,
                                verdict.reason,
                                jpeg if verdict.kept else b"",
                            )
                        )
                    else:
                        assert resampler is not None and isinstance(frame, av.AudioFrame)
                        end = max(end, t + frame.samples / (frame.sample_rate or 1))
                        for out in resampler.resample(frame):
                            chunks.append(out.to_ndarray().reshape(-1).copy())
            if resampler is not None:
                for out in resampler.resample(None):
                    chunks.append(out.to_ndarray().reshape(-1).copy())
        except av.error.FFmpegError as exc:
            raise BadMedia(f"the {fmt} video is damaged or truncated: {exc}") from None
        if not frames and not chunks:
            raise BadMedia(f"the {fmt} video is damaged or truncated: no frame could be decoded")
        # a container cut short often still opens (Matroska writes its duration at the
        # start): its streams then end long before the duration it declares
        if declared and end < declared * 0.9 - 1.0:
            raise BadMedia(
                f"the {fmt} video is truncated: it declares {declared:.2f} s, its streams end "
                f"at {end:.2f} s"
            )
        fps = float(vstream.average_rate or 0.0) if vstream is not None else 0.0
        info = VideoInfo(
            fmt,
            width,
            height,
            round(max(end, declared if declared else 0.0), 3),
            round(fps, 3),
            vstream.codec_context.name if vstream is not None else "",
            astream.codec_context.name if astream is not None else "",
            int(astream.codec_context.sample_rate or 0) if astream is not None else 0,
            int(astream.codec_context.channels or 0) if astream is not None else 0,
        )
    pcm = None
    if chunks:
        samples = np.concatenate(chunks).astype(np.int16, copy=False)
        pcm = Pcm(samples, ANALYSIS_RATE, info.audio_rate or ANALYSIS_RATE, info.channels or 1)
    return VideoResult(info, tuple(frames), pcm)
