"""Media from the inbox: the gates' decisions become `image` and `audio` nodes (SPEC §5).

An image or a recording closed in an `.inbox/` is stored as an inbox item like any file,
then processed by `IntakeService`: `MediaIntake.analyse` (a worker thread: decoding, the
content hash, the gate) and `MediaIntake.finish` (the trio thread: the stream's last
accepted image, the duplicate check, the node and its attachments, the report).

- Images: probed (format, size, EXIF capture time; damaged, truncated and oversized
  images are refused), then compared with the last image accepted in their stream (the
  owner's inbox; a stream ends after `stream_gap` seconds without an accepted image) by the
  visual gate (`media.visual`): a near-duplicate is dropped, with its score.
- Audio: decoded, then the voice-activity gate (`media.audio`) keeps the speech segments;
  a recording without speech is dropped.
- Kept: a node (`images/<date>-<name>` or `audio/<date>-<name>` of the owner, user scope)
  with `original.<ext>` and, for audio, `speech/0001.wav`, … as attachments; L2 is what
  is known of it (no captioning endpoint is used yet). Bytes already stored for the owner
  (the same xxh3-128) make no new node: the report names the node that has them.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import xxhash

from contextfs.memory.document import Document
from contextfs.memory.service import Memory
from contextfs.model import Node

if TYPE_CHECKING:
    from contextfs.media.audio import AudioDecision, Pcm, WavStream
    from contextfs.media.video import VideoResult
    from contextfs.media.visual import ImageInfo, VisualGate

log = logging.getLogger(__name__)

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".webp")
AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".mp3")
VIDEO_SUFFIXES = (".mp4", ".webm", ".mkv")


def media_missing() -> str | None:
    """Why media cannot be taken on this install (a package missing), or None. Found
    without importing them: a mount that is never handed media never loads them."""
    import importlib.util

    for name in ("PIL", "soundfile", "webrtcvad"):
        if importlib.util.find_spec(name) is None:
            return f"the media packages are not installed ({name}); see scripts/setup.sh"
    return None


def video_missing() -> str | None:
    """Why videos cannot be taken on this install (PyAV missing), or None. Found without
    importing it: the ffmpeg libraries load only when a video is decoded."""
    import importlib.util

    if importlib.util.find_spec("av") is None:
        return "video is not taken: PyAV (`av`) is not installed; see scripts/setup.sh"
    return None


@dataclass(frozen=True, slots=True)
class MediaSettings:
    """The gates' settings (config.yaml: `media_*`, `vad_*`)."""

    drop_above: float = 0.90  # visual similarity at or above which an image is dropped
    new_below: float = 0.60  # below it an image is new; in between, a change of scene
    clip_drop_above: float = 0.95  # the same, when the CLIP gate decides (cosine)
    clip_new_below: float = 0.85
    max_pixels: int = 40_000_000
    stream_gap: float = 600.0  # seconds after which an inbox's image stream starts over
    vad_frame_ms: int = 30
    vad_aggressiveness: int = 2
    vad_energy_floor_db: float = -45.0
    vad_min_modulation_db: float = 4.0
    max_audio_seconds: float = 4 * 3600.0  # longer recordings and videos are refused
    video_frame_interval: float = 1.0  # seconds between the frames of a video the gate sees


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a medium came from when a conversation carried it or pointed at it."""

    source: str  # the node's `source`: 'inbox:chat.jsonl#t2' | 'session:<id>#t2'
    stream: str  # the visual gate's stream: the conversation, not the inbox
    note: str  # a sentence for L2: which conversation and turn


@dataclass(slots=True)
class Analysis:
    """What the worker thread learnt of one file (pure data)."""

    kind: str  # 'image' | 'audio' | 'video'
    hash: str = ""
    error: str = ""  # a refusal: the bytes are not what the name says, damaged, too big
    info: ImageInfo | None = None  # an image's
    signature: object = None  # the visual gate's signature
    decision: AudioDecision | None = None  # a recording's, or a video's audio track's
    pcm: Pcm | WavStream | None = None
    source_format: str = ""
    video: VideoResult | None = None
    seconds: float = 0.0  # time the analysis took
    extra: dict = field(default_factory=dict)


def _stem(filename: str) -> str:
    return re.sub(r"\.[A-Za-z0-9]+$", "", filename) or "media"


def _suffix(filename: str) -> str:
    m = re.search(r"(\.[A-Za-z0-9]+)$", filename)
    return m.group(1).lower() if m else ""


def _hms(seconds: float) -> str:
    m, s = divmod(seconds, 60)
    return f"{int(m)}:{s:06.3f}"


def _speech_parts(d, pcm, said: list[str], files: list) -> list[str]:
    """The speech segments of a recording or a video as `speech/NNNN.wav` files (added to
    `files`) and their L2 lines with times, and the words when a transcript was made."""
    from contextfs.media.audio import wav_bytes

    lines = []
    for i, seg in enumerate(d.segments, 1):
        name = f"{i:04d}.wav"
        files.append(("speech", name, wav_bytes(pcm, seg)))
        words = f": {said[i - 1]}" if i <= len(said) and said[i - 1] else ""
        lines.append(
            f"- speech/{name}: {_hms(seg.start)} – {_hms(seg.end)} ({seg.length:.2f} s){words}"
        )
    return lines


def _frame_runs(frames, names: dict[float, str]) -> list[str]:
    """Every sampled frame's decision with its score, for the report: a kept frame on its
    own line, a run of dropped frames on one line (their times and lowest/highest score),
    so an hour of one slide is one line, not 3600."""
    out: list[str] = []
    run: list = []

    def flush() -> None:
        if run:
            lo = min(f.similarity for f in run)
            hi = max(f.similarity for f in run)
            score = f"{lo:.3f}" if lo == hi else f"{lo:.3f}–{hi:.3f}"
            when = _hms(run[0].time) + ("" if len(run) == 1 else f" – {_hms(run[-1].time)}")
            out.append(
                f"  - {when}: {len(run)} frame(s) dropped (near-duplicate, similarity {score})"
            )
            run.clear()

    for f in frames:
        if f.kept:
            flush()
            score = "none" if f.similarity is None else f"{f.similarity:.3f}"
            out.append(
                f"  - {_hms(f.time)}: kept as {names[f.time]} ({f.reason}, similarity {score})"
            )
        else:
            run.append(f)
    flush()
    return out


class MediaIntake:
    """The media half of the inbox: gates, streams and media nodes."""

    def __init__(
        self,
        memory: Memory,
        settings: MediaSettings | None = None,
        *,
        clock=None,
        clip=None,
        describer=None,
    ) -> None:
        from contextfs.media.visual import HashGate

        self.memory = memory
        # conversations.llm.MediaDescriber when a chat endpoint is configured: captions of
        # kept pictures, transcripts of kept speech
        self.describer = describer
        self.settings = settings or MediaSettings()
        self.clock = clock or time.time
        self.hash_gate = HashGate()
        # media.clip.LazyClip when a checkpoint is configured: the CLIP gate, once loaded
        self.clip = clip
        self._clip_gate = None
        self.origin: Origin | None = None  # of the item `finish` is deciding
        # stream (an owner's inbox, or (owner, conversation)) -> (signature, when, node
        # path, gate name) of the last accepted image of that stream
        self.last: dict[object, tuple[object, float, str, str]] = {}

    def gate(self):
        """The visual gate for the next image: CLIP when its checkpoint is configured and
        loads (the first call loads it: seconds, in the caller's worker thread), else the
        perceptual hash."""
        from contextfs.media.clip import ClipGate

        model = self.clip.get() if self.clip is not None else None
        if model is None:
            if self.clip is not None:  # configured, but it did not load
                self.hash_gate.name = "perceptual hash (the CLIP checkpoint did not load)"
            return self.hash_gate
        if self._clip_gate is None or self._clip_gate.clip is not model:
            self._clip_gate = ClipGate(model)
        return self._clip_gate

    def visual_gate(self) -> tuple[VisualGate, float, float]:
        """The visual gate a video's frames go through, and its thresholds (drop at or
        above, new below): CLIP when it is configured and loads, as for images."""
        gate = self.gate()
        return (gate, *self.thresholds(gate.name))

    def thresholds(self, gate_name: str) -> tuple[float, float]:
        s = self.settings
        if gate_name.startswith("CLIP"):
            return s.clip_drop_above, s.clip_new_below
        return s.drop_above, s.new_below

    def gate_name(self) -> str:
        """What `.status` says of the visual gate."""
        clip = self.clip
        if clip is None:
            return self.hash_gate.name
        if clip.loaded is not None:
            return f"CLIP ({clip.loaded.name})"
        if clip.error:
            return f"perceptual hash (the CLIP checkpoint did not load: {clip.error})"
        return f"CLIP ({clip.spec.describe()}), loads with the first image or the search index"

    def status_line(self) -> str:
        drop, new = self.thresholds(self.gate_name())
        return (
            f"visual gate: {self.gate_name()} (drop at >= {drop:g}, new below {new:g}); "
            "audio gate: webrtcvad "
            f"(aggressiveness {self.settings.vad_aggressiveness}, "
            f"{self.settings.vad_frame_ms} ms frames, energy floor "
            f"{self.settings.vad_energy_floor_db:g} dBFS)"
        )

    @staticmethod
    def handles(filename: str) -> bool:
        return _suffix(filename) in IMAGE_SUFFIXES + AUDIO_SUFFIXES + VIDEO_SUFFIXES

    # ---- worker thread --------------------------------------------------------------------

    def analyse(self, data: bytes, filename: str) -> Analysis:
        """Decode and gate one file; never raises for bad bytes (the error says why)."""
        from contextfs.media import BadMedia
        from contextfs.media.audio import VadSettings, decode_audio, gate_audio, open_wav
        from contextfs.media.visual import probe_image

        started = time.perf_counter()
        suffix = _suffix(filename)
        kind = (
            "image"
            if suffix in IMAGE_SUFFIXES
            else ("video" if suffix in VIDEO_SUFFIXES else "audio")
        )
        out = Analysis(kind, hash=xxhash.xxh3_128_hexdigest(data))
        s = self.settings
        vad = VadSettings(
            frame_ms=s.vad_frame_ms,
            aggressiveness=s.vad_aggressiveness,
            energy_floor_db=s.vad_energy_floor_db,
            min_modulation_db=s.vad_min_modulation_db,
            max_seconds=s.max_audio_seconds,
        )
        try:
            if kind == "image":
                out.info = probe_image(data, suffix, s.max_pixels)
                gate = self.gate()
                out.signature = gate.signature(data)
                out.extra["gate"] = gate
            elif kind == "video":
                from contextfs.media.video import analyse_video

                gate, drop_above, new_below = self.visual_gate()
                out.extra["gate"] = (gate.name, drop_above, new_below)
                out.video = video = analyse_video(
                    data,
                    suffix,
                    gate,
                    interval=s.video_frame_interval,
                    drop_above=drop_above,
                    new_below=new_below,
                    max_pixels=s.max_pixels,
                    max_seconds=s.max_audio_seconds,
                )
                out.source_format = video.info.format
                if video.pcm is not None:
                    out.pcm = video.pcm
                    out.decision = gate_audio(video.pcm, vad)
            else:
                # a WAV is streamed a minute at a time (a 2-hour file is never one array)
                pcm = open_wav(data) if suffix == ".wav" else decode_audio(data, suffix)
                out.pcm = pcm
                out.source_format = suffix[1:].upper()
                out.decision = gate_audio(pcm, vad)
        except BadMedia as exc:
            out.error = exc.reason
        except MemoryError:
            out.error = "the file is too large to decode in memory"
        except Exception as exc:  # noqa: BLE001 - a decoder's own fault must not stall the inbox
            log.warning("media analysis of %s failed", filename, exc_info=True)
            out.error = f"the file could not be analysed ({type(exc).__name__})"
        out.seconds = time.perf_counter() - started
        return out

    # ---- trio thread ----------------------------------------------------------------------

    def _image_verdict(self, owner: tuple[str, str], a: Analysis, when: float):
        """The visual gate's decision for an analysed image against its stream's last
        kept one: (gate, drop at, new below, stream, previous, similarity, verdict)."""
        from contextfs.media.visual import decide

        gate = a.extra.get("gate") or self.hash_gate
        drop_above, new_below = self.thresholds(gate.name)
        stream = owner if self.origin is None else (owner, self.origin.stream)
        prev = self.last.get(stream)
        if prev is not None and when - prev[1] > self.settings.stream_gap:
            prev = None  # the stream starts over
        if prev is not None and prev[3] != gate.name:
            prev = None  # signatures of two gates do not compare: the stream starts over
        sim = gate.similarity(a.signature, prev[0]) if prev is not None else None
        return gate, drop_above, new_below, stream, prev, sim, decide(sim, drop_above, new_below)

    def _media_owner(self, owner: tuple[str, str], kind: str) -> tuple[str, str]:
        ctype = self.memory.types.get(kind)
        if ctype is not None and owner[0] != ctype.scope:  # agents' media: the default user
            return ("user", self.memory.default_owner)
        return owner

    def needs_words(self, owner: tuple[str, str], a: Analysis, when: float) -> bool:
        """Trio thread: whether to ask the endpoint for this analysed file's words (a
        caption, a transcript) before `finish`: only for what will be kept, so a dropped
        repeat or a duplicate costs no call."""
        d = self.describer
        if d is None or a.error or a.kind not in ("image", "audio", "video"):
            return False
        owner = self._media_owner(owner, a.kind)
        if self.duplicate_of(owner, a.kind, a.hash) is not None:
            return False
        if a.kind == "image":
            return self._image_verdict(owner, a, when)[-1].kept
        # a recording's or a video's speech (a video's frames get no captions: one call
        # per kept frame would cost more than the rest of the video)
        return bool(d.transcribe_model) and a.decision is not None and a.decision.kept

    def add_words(self, a: Analysis, data: bytes, filename: str) -> Analysis:
        """Worker thread: the caption or the transcripts, in `a.extra` (`words_error` says
        why there are none: the node then keeps its derived text)."""
        from contextfs.errors import LLMUnavailable
        from contextfs.media.audio import wav_bytes

        d = self.describer
        try:
            if a.kind == "image":
                assert a.info is not None  # needs_words: an image analysed without error
                mime = "image/" + a.info.format.lower().replace("jpg", "jpeg")
                a.extra["caption"] = d.caption(data, mime, filename)
            else:
                # needs_words: a recording or a video whose speech the gate kept
                assert a.decision is not None and a.pcm is not None
                a.extra["transcripts"] = [
                    d.transcribe(wav_bytes(a.pcm, seg), f"{i:04d}.wav")
                    for i, seg in enumerate(a.decision.segments, 1)
                ]
        except LLMUnavailable as exc:
            a.extra["words_error"] = exc.reason if hasattr(exc, "reason") else str(exc)
        return a

    def duplicate_of(self, owner: tuple[str, str], kind: str, digest: str) -> Node | None:
        """The owner's live node of this kind that holds these very bytes."""
        needle = f"hash: {digest}"
        for n in self.memory.walk(owner=owner, types=(kind,), texts=True):
            if needle in n.l2:
                return n
        return None

    def finish(
        self,
        owner: tuple[str, str],
        filename: str,
        data: bytes,
        when: float,
        a: Analysis,
        origin: Origin | None = None,
    ) -> tuple[str, list[str], Node | None]:
        """The decision for one analysed file: (state, report lines, the new node).
        state is 'done' (a node was made, or the bytes were already stored), 'dropped'
        (the gate found nothing new) or 'refused' (bad media). `origin`: the conversation
        turn that carried it (its own stream, source and L2 line)."""
        self.origin = origin
        lines = [f"# {filename}", ""]
        if a.error:
            return "refused", [*lines, f"state: refused: {a.error}", ""], None
        ctype = self.memory.types.get(a.kind)
        if ctype is None:
            return "refused", [*lines, f"state: refused: no {a.kind!r} type is loaded", ""], None
        owner = self._media_owner(owner, a.kind)
        same = self.duplicate_of(owner, a.kind, a.hash)
        if same is not None:
            path = self.memory.node_path(same)
            lines += [
                f"state: done (duplicate: these bytes are already stored as {path}; "
                "nothing new was stored)",
                f"- hash: xxh3-128 {a.hash}",
                "",
            ]
            return "done", lines, None
        if a.kind == "image":
            return self._finish_image(owner, filename, data, when, a, lines)
        if a.kind == "video":
            return self._finish_video(owner, filename, data, when, a, lines)
        return self._finish_audio(owner, filename, data, when, a, lines)

    def _finish_image(self, owner, filename, data, when, a, lines):
        info = a.info
        gate, drop_above, new_below, stream, prev, sim, verdict = self._image_verdict(
            owner, a, when
        )
        score = "none (first image of its stream)" if sim is None else f"{sim:.3f}"
        gate_line = (
            f"visual gate ({gate.name}): {verdict.reason}, similarity {score} to "
            + (prev[2] if prev is not None else "nothing")
            + f"; drop at >= {drop_above:g}, new below {new_below:g}"
        )
        desc = f"{info.format} {info.width}x{info.height}"
        if info.frames > 1:
            desc += f", {info.frames} frames"
        if not verdict.kept:
            lines += [
                f"state: dropped (near-duplicate of {prev[2]}, similarity {sim:.3f}); "
                "the file stays here as it arrived",
                f"- {gate_line}",
                f"- {desc}, {len(data)} bytes",
                "",
            ]
            return "dropped", lines, None
        day = (info.taken or dt.datetime.fromtimestamp(when, dt.UTC).isoformat())[:10]
        fields = {
            "date": day,
            "title": _stem(filename),
            "source": f"inbox:{filename}",
            "hash": a.hash,
            "format": info.format,
            "width": info.width,
            "height": info.height,
            "frames": info.frames,
            "bytes": len(data),
            "gate": f"{verdict.reason}, similarity {score}",
        }
        if info.taken:
            fields["taken"] = info.taken
        original = f"original.{info.extension}"
        caption = a.extra.get("caption")
        body = "\n".join(
            [
                f"# Image {filename}",
                "",
                *([caption, ""] if caption else []),
                f"A {desc} image ({len(data)} bytes, {info.mode})"
                + (f", taken {info.taken}." if info.taken else "."),
                f"Received in the inbox as {filename} on "
                f"{dt.datetime.fromtimestamp(when, dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}.",
                f"The original is {original} in this directory.",
                f"Visual gate: {verdict.reason} (similarity {score}).",
                "",
            ]
        )
        note = ""
        if _suffix(filename).lstrip(".").replace("jpeg", "jpg") != info.extension:
            note = f"- note: the name says {_suffix(filename)}, the bytes are {info.format}"
        node = self._store(owner, "image", fields, body, [(None, original, data)])
        path = self.memory.node_path(node)
        self.last[stream] = (a.signature, when, path, gate.name)
        lines += [
            f"state: done (image kept: {path})",
            f"- {gate_line}",
            f"- {desc}, {len(data)} bytes" + (f", taken {info.taken}" if info.taken else ""),
            *([note] if note else []),
            *self._words_line(a, "caption"),
            "",
            "## Memories",
            f"- created {path} ({original})",
            "",
        ]
        return "done", lines, node

    def _finish_audio(self, owner, filename, data, when, a, lines):

        d, pcm = a.decision, a.pcm
        gate_line = self._audio_gate_line(d)
        if not d.kept:
            lines += [
                "state: dropped (no speech: silence or noise); the file stays here as it arrived",
                f"- {gate_line}",
                "",
            ]
            return "dropped", lines, None
        suffix = _suffix(filename)
        original = f"original{suffix}"
        files: list[tuple[str | None, str, bytes]] = [(None, original, data)]
        said = a.extra.get("transcripts") or []
        seg_lines = _speech_parts(d, pcm, said, files)
        fields = {
            "date": dt.datetime.fromtimestamp(when, dt.UTC).date().isoformat(),
            "title": _stem(filename),
            "source": f"inbox:{filename}",
            "hash": a.hash,
            "format": a.source_format,
            "bytes": len(data),
            "duration": round(d.duration, 3),
            "sample_rate": pcm.source_rate,
            "channels": pcm.channels,
            "speech_share": round(d.speech_share, 3),
            "segments": len(d.segments),
        }
        body = "\n".join(
            [
                f"# Recording {filename}",
                "",
                f"A {a.source_format} recording of {d.duration:.2f} s ({pcm.source_rate} Hz, "
                f"{pcm.channels} channel(s), {len(data)} bytes), received in the inbox on "
                f"{dt.datetime.fromtimestamp(when, dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}.",
                f"Speech: {d.kept_seconds:.2f} s in {len(d.segments)} segment(s), "
                f"{100 * d.speech_share:.0f}% of the recording. "
                + (
                    f"Transcribed by {self.describer.transcribe_model}."
                    if said
                    else "No transcript yet."
                ),
                f"The original is {original}; the speech segments are in speech/:",
                "",
                *seg_lines,
                "",
            ]
        )
        node = self._store(owner, "audio", fields, body, files)
        path = self.memory.node_path(node)
        lines += [
            f"state: done (recording kept: {path})",
            f"- {gate_line}",
            *self._words_line(a, "transcript"),
            *seg_lines,
            "",
            "## Memories",
            f"- created {path} ({original}, {len(d.segments)} speech segment(s))",
            "",
        ]
        return "done", lines, node

    def _words_line(self, a: Analysis, what: str) -> list[str]:
        """The report's line on a caption or transcript: who made it, or why there is none."""
        if "words_error" in a.extra:
            return [f"- {what}: none ({a.extra['words_error']}); the text is derived"]
        if what == "caption" and a.extra.get("caption"):
            return [f"- caption: by {self.describer.model}"]
        if what == "transcript" and a.extra.get("transcripts"):
            return [f"- transcript: by {self.describer.transcribe_model}"]
        return []

    def _audio_gate_line(self, d) -> str:
        s = self.settings
        return (
            f"audio gate (webrtcvad, aggressiveness {s.vad_aggressiveness}, "
            f"{s.vad_frame_ms} ms frames, energy floor {s.vad_energy_floor_db:g} dBFS): "
            f"speech share {d.speech_share:.3f} ({d.kept_seconds:.2f} s of {d.duration:.2f} s, "
            f"{len(d.segments)} segment(s); {d.speech_frames} of {d.frames} frames speech, "
            f"{d.vad_frames} by webrtcvad alone)"
        )

    def _finish_video(self, owner, filename, data, when, a, lines):
        """One node for the whole video: its kept frames (frames/0001.jpg, …) and speech
        segments (speech/0001.wav, …) are its parts, each with its time."""

        s = self.settings
        v, d, pcm = a.video, a.decision, a.pcm
        gate_name, drop_above, new_below = a.extra["gate"]
        info = v.info
        sampled, kept = len(v.frames), v.kept_frames
        gate_line = (
            f"visual gate ({gate_name}): {sampled} frame(s) sampled every "
            f"{s.video_frame_interval:g} s, {len(kept)} kept, {sampled - len(kept)} dropped "
            f"as near-duplicates of the last kept frame; drop at >= {drop_above:g}, "
            f"new below {new_below:g}"
        )
        audio_line = self._audio_gate_line(d) if d is not None else "audio gate: no audio track"
        if not kept and (d is None or not d.kept):
            lines += [
                "state: dropped (no frame and no speech); the file stays here as it arrived",
                f"- {gate_line}",
                f"- {audio_line}",
                "",
            ]
            return "dropped", lines, None
        ext = {"MP4": "mp4", "WebM": "webm", "MKV": "mkv"}[info.format]
        original = f"original.{ext}"
        files: list[tuple[str | None, str, bytes]] = [(None, original, data)]
        frame_lines, decisions = [], []
        names: dict[float, str] = {}
        for i, f in enumerate(kept, 1):
            name = f"{i:04d}.jpg"
            names[f.time] = f"frames/{name}"
            files.append(("frames", name, f.jpeg))
            score = "" if f.similarity is None else f", similarity {f.similarity:.3f}"
            frame_lines.append(f"- frames/{name}: {_hms(f.time)} ({f.reason}{score})")
        decisions = _frame_runs(v.frames, names)
        said = a.extra.get("transcripts") or []
        seg_lines = _speech_parts(d, pcm, said, files) if d is not None else []
        share = d.speech_share if d is not None else 0.0
        fields = {
            "date": dt.datetime.fromtimestamp(when, dt.UTC).date().isoformat(),
            "title": _stem(filename),
            "source": f"inbox:{filename}",
            "hash": a.hash,
            "format": info.format,
            "bytes": len(data),
            "duration": info.duration,
            "width": info.width,
            "height": info.height,
            "fps": info.fps,
            "video_codec": info.video_codec,
            "audio_codec": info.audio_codec or "none",
            "frames_sampled": sampled,
            "frames_kept": len(kept),
            "speech_share": round(share, 3),
            "segments": len(d.segments) if d is not None else 0,
        }
        audio_desc = (
            f"audio {info.audio_codec} {info.audio_rate} Hz, {info.channels} channel(s)"
            if info.audio_codec
            else "no audio track"
        )
        dropped_share = (sampled - len(kept)) / sampled if sampled else 0.0
        speech_text = (
            f"Speech: {d.kept_seconds:.2f} s in {len(d.segments)} segment(s), "
            f"{100 * share:.0f}% of the video. "
            + (
                f"Transcribed by {self.describer.transcribe_model}."
                if said
                else "No transcript yet."
            )
            if d is not None
            else "No audio track."
        )
        body = "\n".join(
            [
                f"# Video {filename}",
                "",
                f"{'A' if info.format == 'WebM' else 'An'} {info.format} video of "
                f"{info.duration:.2f} s ({info.width}x{info.height}, "
                f"{info.fps:g} fps, {info.video_codec}; {audio_desc}; {len(data)} bytes), "
                "received in the inbox on "
                f"{dt.datetime.fromtimestamp(when, dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}.",
                f"Frames: {len(kept)} kept of {sampled} sampled every "
                f"{s.video_frame_interval:g} s ({100 * dropped_share:.0f}% dropped as "
                "near-duplicates); the kept frames are in frames/:",
                "",
                *frame_lines,
                "",
                speech_text + (" The speech segments are in speech/:" if seg_lines else ""),
                "",
                *seg_lines,
                *([""] if seg_lines else []),
                f"The original is {original} in this directory.",
                "",
            ]
        )
        node = self._store(owner, "video", fields, body, files)
        path = self.memory.node_path(node)
        lines += [
            f"state: done (video kept: {path})",
            f"- {info.format} {info.width}x{info.height}, {info.duration:.2f} s, {len(data)} bytes",
            f"- {gate_line}",
            *decisions,
            f"- {audio_line}",
            *self._words_line(a, "transcript"),
            *seg_lines,
            "",
            "## Memories",
            f"- created {path} ({original}, {len(kept)} frame(s), "
            f"{len(seg_lines)} speech segment(s))",
            "",
        ]
        return "done", lines, node

    def _store(
        self,
        owner: tuple[str, str],
        kind: str,
        fields: dict,
        body: str,
        files: list[tuple[str | None, str, bytes]],
    ) -> Node:
        """The node and its attachments, in one transaction. A medium a conversation
        carried names that conversation and turn (its source, and a line of L2)."""
        if self.origin is not None:
            fields = {**fields, "source": self.origin.source}
            body = body.rstrip("\n") + "\n\n" + self.origin.note + "\n"
        memory = self.memory
        ctype = memory.types[kind]
        with memory.transaction():
            res = memory.routing.route_document(
                owner, ctype, Document(fields, body), source=str(fields["source"])
            )
            folders: dict[str, int] = {}
            for folder, name, data in files:
                parent = None
                if folder is not None:
                    if folder not in folders:
                        folders[folder] = memory.attachment_store.add_attachment(
                            res.node, None, folder, "dir", 0o755
                        ).id
                    parent = folders[folder]
                memory.attachment_store.add_attachment(
                    res.node, parent, name, "file", 0o644, data=data
                )
        return res.node
