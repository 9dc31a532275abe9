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

import xxhash

from contextfs.memory.document import Document
from contextfs.memory.service import Memory
from contextfs.model import Node

log = logging.getLogger(__name__)

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".webp")
AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".mp3")


def media_missing() -> str | None:
    """Why media cannot be taken on this install (a package missing), or None."""
    try:
        import PIL  # noqa: F401
        import soundfile  # noqa: F401
        import webrtcvad  # noqa: F401
    except ImportError as exc:
        return f"the media packages are not installed ({exc.name}); see scripts/setup.sh"
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
    max_audio_seconds: float = 4 * 3600.0


@dataclass(slots=True)
class Analysis:
    """What the worker thread learnt of one file (pure data)."""

    kind: str  # 'image' | 'audio'
    hash: str = ""
    error: str = ""  # a refusal: the bytes are not what the name says, damaged, too big
    info: object = None  # media.visual.ImageInfo
    signature: object = None  # the visual gate's signature
    decision: object = None  # media.audio.AudioDecision
    pcm: object = None  # media.audio.Pcm
    source_format: str = ""
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


class MediaIntake:
    """The media half of the inbox: gates, streams and media nodes."""

    def __init__(
        self,
        memory: Memory,
        settings: MediaSettings | None = None,
        *,
        clock=None,
        clip=None,
    ) -> None:
        from contextfs.media.visual import HashGate

        self.memory = memory
        self.settings = settings or MediaSettings()
        self.clock = clock or time.time
        self.hash_gate = HashGate()
        # media.clip.LazyClip when a checkpoint is configured: the CLIP gate, once loaded
        self.clip = clip
        self._clip_gate = None
        # owner -> (signature, when, node path, gate name) of its stream's last kept image
        self.last: dict[tuple[str, str], tuple[object, float, str, str]] = {}

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
        return _suffix(filename) in IMAGE_SUFFIXES + AUDIO_SUFFIXES

    # ---- worker thread --------------------------------------------------------------------

    def analyse(self, data: bytes, filename: str) -> Analysis:
        """Decode and gate one file; never raises for bad bytes (the error says why)."""
        from contextfs.media import BadMedia
        from contextfs.media.audio import VadSettings, decode_audio, gate_audio
        from contextfs.media.visual import probe_image

        started = time.perf_counter()
        suffix = _suffix(filename)
        kind = "image" if suffix in IMAGE_SUFFIXES else "audio"
        out = Analysis(kind, hash=xxhash.xxh3_128_hexdigest(data))
        s = self.settings
        try:
            if kind == "image":
                out.info = probe_image(data, suffix, s.max_pixels)
                gate = self.gate()
                out.signature = gate.signature(data)
                out.extra["gate"] = gate
            else:
                pcm = decode_audio(data, suffix)
                out.pcm = pcm
                out.source_format = suffix[1:].upper()
                out.decision = gate_audio(
                    pcm,
                    VadSettings(
                        frame_ms=s.vad_frame_ms,
                        aggressiveness=s.vad_aggressiveness,
                        energy_floor_db=s.vad_energy_floor_db,
                        min_modulation_db=s.vad_min_modulation_db,
                        max_seconds=s.max_audio_seconds,
                    ),
                )
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

    def duplicate_of(self, owner: tuple[str, str], kind: str, digest: str) -> Node | None:
        """The owner's live node of this kind that holds these very bytes."""
        needle = f"hash: {digest}"
        for n in self.memory.node_list():
            if n.type == kind and n.owner == owner and self.memory.is_live(n) and needle in n.l2:
                return n
        return None

    def finish(
        self, owner: tuple[str, str], filename: str, data: bytes, when: float, a: Analysis
    ) -> tuple[str, list[str], Node | None]:
        """The decision for one analysed file: (state, report lines, the new node).
        state is 'done' (a node was made, or the bytes were already stored), 'dropped'
        (the gate found nothing new) or 'refused' (bad media)."""
        lines = [f"# {filename}", ""]
        if a.error:
            return "refused", [*lines, f"state: refused: {a.error}", ""], None
        ctype = self.memory.types.get(a.kind)
        if ctype is None:
            return "refused", [*lines, f"state: refused: no {a.kind!r} type is loaded", ""], None
        if owner[0] != ctype.scope:  # agents' media are kept under the default user
            owner = ("user", self.memory.default_owner)
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
        return self._finish_audio(owner, filename, data, when, a, lines)

    def _finish_image(self, owner, filename, data, when, a, lines):
        from contextfs.media.visual import decide

        s = self.settings
        info = a.info
        gate = a.extra.get("gate") or self.hash_gate
        drop_above, new_below = self.thresholds(gate.name)
        prev = self.last.get(owner)
        if prev is not None and when - prev[1] > s.stream_gap:
            prev = None  # the stream starts over
        if prev is not None and prev[3] != gate.name:
            prev = None  # signatures of two gates do not compare: the stream starts over
        sim = gate.similarity(a.signature, prev[0]) if prev is not None else None
        verdict = decide(sim, drop_above, new_below)
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
        body = "\n".join(
            [
                f"# Image {filename}",
                "",
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
        self.last[owner] = (a.signature, when, path, gate.name)
        lines += [
            f"state: done (image kept: {path})",
            f"- {gate_line}",
            f"- {desc}, {len(data)} bytes" + (f", taken {info.taken}" if info.taken else ""),
            *([note] if note else []),
            "",
            "## Memories",
            f"- created {path} ({original})",
            "",
        ]
        return "done", lines, node

    def _finish_audio(self, owner, filename, data, when, a, lines):
        from contextfs.media.audio import wav_bytes

        d, pcm = a.decision, a.pcm
        s = self.settings
        gate_line = (
            f"audio gate (webrtcvad, aggressiveness {s.vad_aggressiveness}, "
            f"{s.vad_frame_ms} ms frames, energy floor {s.vad_energy_floor_db:g} dBFS): "
            f"speech share {d.speech_share:.3f} ({d.kept_seconds:.2f} s of {d.duration:.2f} s, "
            f"{len(d.segments)} segment(s); {d.speech_frames} of {d.frames} frames speech, "
            f"{d.vad_frames} by webrtcvad alone)"
        )
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
        seg_lines = []
        for i, seg in enumerate(d.segments, 1):
            name = f"{i:04d}.wav"
            files.append(("speech", name, wav_bytes(pcm, seg)))
            seg_lines.append(
                f"- speech/{name}: {_hms(seg.start)} – {_hms(seg.end)} ({seg.length:.2f} s)"
            )
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
                f"{100 * d.speech_share:.0f}% of the recording. No transcript yet.",
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
            *seg_lines,
            "",
            "## Memories",
            f"- created {path} ({original}, {len(d.segments)} speech segment(s))",
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
        """The node and its attachments, in one transaction."""
        memory = self.memory
        ctype = memory.types[kind]
        with memory.transaction():
            res = memory.route_document(
                owner, ctype, Document(fields, body), source=str(fields["source"])
            )
            folders: dict[str, int] = {}
            for folder, name, data in files:
                parent = None
                if folder is not None:
                    if folder not in folders:
                        folders[folder] = memory.add_attachment(
                            res.node, None, folder, "dir", 0o755
                        ).id
                    parent = folders[folder]
                memory.add_attachment(res.node, parent, name, "file", 0o644, data=data)
        return res.node
