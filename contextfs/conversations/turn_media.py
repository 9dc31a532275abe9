"""Media in conversations (issue 12): what the turns of a transcript carry or point at.

A JSONL turn may carry a picture or a recording as an OpenAI-style part (`image_url` with
a `data:` URL, `input_audio` with base64 data) or point at one by path (`image_url` with a
path as its url, or `{"type": "image"|"audio"|"video", "path": "shot.png"}`). This module
turns those parts (`transcript.MediaRef`) into bytes with a file name, or into the reason
they are not taken, and writes the gates' decisions back into the turns' text.

Paths are safe by construction: a path names a file **in the same inbox** (one that was
closed there before the transcript was processed), by its bare name or `./name`. The
daemon never opens a host path a transcript names: an absolute path, `~`, `..`, a folder
or a `file:` URL is refused with that reason, and an `http(s)` URL is not fetched (nothing
is downloaded at run time). A session takes only carried (data) media: it has no inbox.

Pure: no store, no FUSE, no trio. `conversations.inbox` reads the inbox and runs the gates.
"""

from __future__ import annotations

import binascii
import dataclasses
import logging
import posixpath
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from contextfs.conversations.transcript import MediaRef, Turn

log = logging.getLogger(__name__)

MIME_SUFFIXES = {
    "image/png": ".png",
    "image/jpeg": ".jpg",
    "image/jpg": ".jpg",
    "image/webp": ".webp",
    "image/gif": ".gif",
    "audio/wav": ".wav",
    "audio/x-wav": ".wav",
    "audio/wave": ".wav",
    "audio/mpeg": ".mp3",
    "audio/mp3": ".mp3",
    "audio/ogg": ".ogg",
    "audio/flac": ".flac",
    "video/mp4": ".mp4",
    "video/webm": ".webm",
    "video/x-matroska": ".mkv",
}
MEDIA_NAME_SUFFIXES = tuple(sorted(set(MIME_SUFFIXES.values()) | {".jpeg", ".mkv"}))


@dataclass(frozen=True, slots=True)
class TurnMedia:
    """One media part of one turn: its bytes and the name they are taken under, or why
    they are not taken (`error`)."""

    turn: Turn
    ref: MediaRef
    filename: str  # <conversation>-<turn ref>-<index><suffix>
    data: bytes = b""
    error: str = ""


def suffix_of(name: str) -> str:
    m = re.search(r"\.[A-Za-z0-9]+$", name)
    return m.group(0).lower() if m else ""


def inbox_name(path: str) -> tuple[str, str]:
    """(the inbox file a path names, '') or ('', why it is not read)."""
    raw = path.strip()
    if re.match(r"[a-z][a-z0-9+.-]*:", raw, re.I):
        return "", f"{raw.split(':', 1)[0]}: URLs are not read; name a file of this inbox"
    if raw.startswith(("/", "~")):
        return "", (
            "an absolute path is not read (the daemon opens no file outside the mount); "
            "copy the file into this inbox and name it"
        )
    norm = posixpath.normpath(raw)
    if norm.startswith("..") or "/" in norm or norm in ("", "."):
        return "", "only a file of this inbox is read (no folders, no ..)"
    return norm, ""


def collect(
    turns: Sequence[Turn],
    conversation: str,
    read_inbox: Callable[[str], bytes | None] | None,
) -> list[TurnMedia]:
    """Every media part of the turns, with its bytes or its refusal. `read_inbox(name)`
    gives the bytes of a file of the same inbox (None when there is none); without it (a
    session) paths are refused."""
    stem = re.sub(r"\.[A-Za-z0-9]+$", "", conversation) or "conversation"
    out: list[TurnMedia] = []
    for turn in turns:
        for ref in turn.media:
            base = f"{stem}-{re.sub(r'[^A-Za-z0-9._-]+', '-', turn.ref)}-{ref.index}"
            out.append(_one(turn, ref, base, read_inbox))
    return out


def _one(
    turn: Turn, ref: MediaRef, base: str, read_inbox: Callable[[str], bytes | None] | None
) -> TurnMedia:
    if ref.source == "url":
        return TurnMedia(turn, ref, base, error=f"not fetched (nothing is downloaded): {ref.value}")
    if ref.source == "data":
        suffix = MIME_SUFFIXES.get(ref.mime)
        if suffix is None:
            return TurnMedia(turn, ref, base, error=f"{ref.mime or 'untyped'} data is not taken")
        try:
            data = binascii.a2b_base64(ref.value.encode("ascii"), strict_mode=True)
        except (binascii.Error, UnicodeEncodeError, ValueError) as exc:
            return TurnMedia(turn, ref, base + suffix, error=f"the base64 data is damaged ({exc})")
        return TurnMedia(turn, ref, base + suffix, data)
    if read_inbox is None:
        return TurnMedia(turn, ref, base, error="a session reads no path; carry the bytes")
    name, why = inbox_name(ref.value)
    if why:
        return TurnMedia(turn, ref, base, error=why)
    suffix = suffix_of(name)
    if suffix not in MEDIA_NAME_SUFFIXES:
        return TurnMedia(turn, ref, base, error=f"{name} is not an image, recording or video")
    found = read_inbox(name)
    if found is None:
        return TurnMedia(
            turn,
            ref,
            base,
            error=f"no file {name} in this inbox (copy it in before the transcript)",
        )
    return TurnMedia(turn, ref, base + suffix, found)


def annotate(turns: Sequence[Turn], notes: dict[tuple[int, str, int], str]) -> list[Turn]:
    """The turns with each media placeholder followed by what became of it (keyed by
    (turn line, turn ref, media index)), e.g. `[image_url #1: image kept as user/…]`."""
    out = []
    for turn in turns:
        content = turn.content
        for ref in turn.media:
            note = notes.get((turn.line, turn.ref, ref.index))
            if note:
                content = content.replace(ref.placeholder, f"[{ref.part} #{ref.index}: {note}]", 1)
        out.append(dataclasses.replace(turn, content=content) if content != turn.content else turn)
    return out


def note_of(state_line: str) -> str:
    """The turn's note from a media report's state line: `done (image kept: P)` → `image
    kept as P`; a duplicate names the node that has the bytes; a drop or refusal says so."""
    m = re.match(r"state: done \((image|recording|video) kept: (\S+)\)", state_line)
    if m:
        return f"{m.group(1)} kept as {m.group(2)}"
    m = re.search(r"already stored as (\S+?);", state_line)
    if m:
        return f"already stored as {m.group(1)}"
    return state_line.removeprefix("state: ").split("; the file stays")[0]
