"""Secret redaction at the write boundary: text in, text with typed markers out.

Every writer (type-directory drops, `.inbox/`, session transcripts, edits of L2) passes
its content through a `Redactor` before anything is stored, versioned or indexed. A secret
value is replaced by `[REDACTED:<kind>]`; the surrounding text stays, and each
`Redaction` says where and what kind, never the secret itself. `secret_filename_reason`
refuses files whose *name* says they are a secret store (`.env`, `id_rsa`, `*.pem`, …).

Pure: no I/O, no store; `RedactingFilter` is the one piece of logging (a filter the
roots attach to their handlers). Imports only the stdlib, `contextfs.errors`, the
built-in detector table (`memory.secret_patterns`) and, when asked for
(`Redactor(model=True)`), the learned layer (`memory.secret_model`); the memory service
decides what to do with the result (log it, show it in `.status`).

Design notes (why, not what):
- Detectors are precise where a format is known (provider key prefixes, JWT, PEM) and
  conservative where it is not (`password=`-style assignments skip code expressions,
  type annotations, templates and placeholders): a false positive garbles a memory.
- Markers never match any detector (a match that overlaps a marker is dropped), and
  `redact` rescans its own output until nothing changes, so redaction is idempotent.
- The learned layer (opt-in) only adds: its spans come after every rule's, lose to them
  where they overlap, never run on names nor on bytes that are not text, and are marked
  `[REDACTED:secret_guess]`, so a reader can tell a guess from a rule's find.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import xxhash

from contextfs.errors import InvalidInput
from contextfs.memory.secret_patterns import (
    BUILTIN,
    BUILTIN_KINDS,
    CUT_GATE,
    Detector,
    Span,
    continued_codes,
    group_span,
    listed_values,
    repeated_values,
)

if TYPE_CHECKING:
    from contextfs.memory.secret_model import SecretModel

__all__ = [
    "BUILTIN_KINDS",
    "MODEL_KIND",
    "Redaction",
    "RedactResult",
    "RedactingFilter",
    "Redactor",
    "escape_controls",
    "marker",
    "replacement",
    "secret_filename_reason",
]

# the kind of what the learned layer redacts (`Redactor(model=True)`): a guess, told apart
# from the rules' kinds in the text and in the redaction log
MODEL_KIND = "secret_guess"
_MARKER_RE = re.compile(r"\[REDACTED:[a-z0-9_]+\]")
VOUCHED_TEXTS = 1024  # texts scanned ahead and found clean, remembered by digest (`vouch`)
# PEM blocks of what is public by design (a certificate, a public key, a signature): their
# base64 lines hold, by chance, the shapes some detectors take for a secret (a CA bundle
# copied into a node had a line of a certificate redacted, and TLS could no longer read
# it). Private key blocks are another kind, and redacted.
_PUBLIC_PEM_RE = re.compile(
    r"-----(BEGIN|END) (CERTIFICATE|TRUSTED CERTIFICATE|X509 CRL|CERTIFICATE REQUEST"
    r"|NEW CERTIFICATE REQUEST|PUBLIC KEY|RSA PUBLIC KEY|SSH2 PUBLIC KEY|PKCS7|CMS"
    r"|PGP PUBLIC KEY BLOCK|PGP SIGNATURE)-----"
)
# In bytes that are not UTF-8, where a replaced secret can be: printable ASCII (and the
# blanks of a `password: value` line), in a run of at least 16 bytes. Random bytes (a
# compressed picture, an archive) hold runs of 6 by chance every 2 KiB, and in about one
# GiB of them a run like `PW:Y?Y%` that a keyword secret matches: a file changed by its
# own redaction. Runs of 16 come about once in 8 MiB, with such a shape far more rarely.
PRINTABLE_RUN_MIN = 16
# byte -> 1 if printable (as above), else 0: runs are found with bytes.find over the
# translated bytes, 4-5x the speed of a regex character class (827 vs 152 MB/s on bytes
# with no printable run, 363 vs 90 on random bytes)
_PRINTABLE = bytes(1 if 0x20 <= c <= 0x7E or c in b"\t\r\n" else 0 for c in range(256))
_RUN_WINDOW = 8 << 20  # bytes translated at a time: a big file is not copied whole
_NAME_RE = re.compile(r"[a-z0-9_]+")
# A rescan of redacted output finds nothing in practice; the bound only guards a
# pathological user pattern against looping forever.
_MAX_PASSES = 4
_NAME_SEPARATORS = frozenset("-_.+@=~/ ")

# A text longer than BIG_TEXT characters is redacted a window at a time (`_redact_long`):
# Python's regex engine holds the GIL for a whole search, and one search of a 100 MB
# inbox file that finds nothing held it for a second or more, stalling the event loop
# (every FUSE request) meanwhile. A window of WINDOW characters is read with OVERLAP
# more, so a secret that starts in it is read whole (none is that long).
BIG_TEXT = 1 << 20
WINDOW = 1 << 18
OVERLAP = 1 << 16


@dataclass(frozen=True, slots=True)
class Redaction:
    """One removed secret: its kind and where it was in the original input."""

    kind: str
    start: int
    end: int
    line: int


@dataclass(frozen=True, slots=True)
class RedactResult:
    """The redacted text and what was removed from it, in order of position."""

    text: str
    redactions: tuple[Redaction, ...]

    @property
    def changed(self) -> bool:
        return bool(self.redactions)

    def summary(self) -> dict[str, int]:
        """kind -> count, for a log line or `.status`."""
        out: dict[str, int] = {}
        for r in self.redactions:
            out[r.kind] = out.get(r.kind, 0) + 1
        return out


def marker(kind: str) -> str:
    return f"[REDACTED:{kind}]"


# The rest of a token written after its first part was stored and redacted (two `>>`
# appends: `token=` + half, then the other half): whatever is glued to a marker continues
# the secret the marker replaced. It is removed without a marker of its own, so the text
# reads as if the whole token had been there at once.
SPLIT_TOKEN = "split_token"


def _continuation_span(m: re.Match[str]) -> Span | None:
    start, end = m.span("s")
    while end > start and m.string[end - 1] in ".,:;?":
        end -= 1  # the sentence's punctuation after the token
    return (start, end) if end > start else None


_CONTINUATION = Detector(
    SPLIT_TOKEN,
    re.compile(r"\[REDACTED:[a-z0-9_]+\](?P<s>[A-Za-z0-9_+/=-][^\s\"'`<>()\[\]{},;]*)"),
    ("[REDACTED:",),
    _continuation_span,
    0,
)


def replacement(kind: str) -> str:
    """What a redaction of this kind leaves in the text (nothing for a split token's rest)."""
    return "" if kind == SPLIT_TOKEN else marker(kind)


def fitted_replacement(kind: str, length: int) -> str:
    """What a redaction leaves in bytes that are not text: `length` ASCII characters, the
    marker padded with `*` when it fits (`[REDACTED:jwt]*****`), else `[REDACTED]` so
    padded, else `*` alone (a PIN)."""
    for mark in (marker(kind), "[REDACTED]"):
        if len(mark) <= length:
            return mark + "*" * (length - len(mark))
    return "*" * length


def _text_of(data: bytes | memoryview) -> str | None:
    """data as text, or None when it is not: not UTF-8, or holding a NUL byte (a
    database, an archive or compiled code may be valid UTF-8 throughout; no text file
    holds a NUL)."""
    try:
        text = str(data, "utf-8")
    except UnicodeDecodeError:
        return None
    return None if "\0" in text else text


# --------------------------------------------------------------------------- redactor


class Redactor:
    """Finds secrets with the built-in detectors plus user patterns, and replaces them.

    `extra` maps a kind name (`[a-z0-9_]+`) to a regex. When the regex has a group named
    `secret`, only that group is replaced (`(?:acme_pin=)(?P<secret>\\d{6})`); otherwise the
    whole match is.

    `model`: also redact what the learned layer (`memory.secret_model`) takes for a
    secret in text, as `MODEL_KIND` (config key `secret_model`, off by default: it
    garbles a few ordinary paragraphs in a thousand; docs/secrets.md).
    """

    __slots__ = ("_detectors", "_clean", "_lock", "_model")

    def __init__(self, extra: Mapping[str, str] | None = None, *, model: bool = False) -> None:
        detectors = [*BUILTIN, _CONTINUATION]
        for name, source in (extra or {}).items():
            detectors.append(_user_detector(name, source))
        self._detectors: tuple[Detector, ...] = tuple(detectors)
        self._model: SecretModel | None = None
        if model:
            from contextfs.memory.secret_model import shipped

            self._model = shipped()
        # digests of texts a worker thread scanned and found clean (`vouch`), so that the
        # event loop's redaction of the same text at its save need not scan it again
        self._clean: OrderedDict[bytes, None] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def uses_model(self) -> bool:
        """Whether the learned layer runs (`model=True`)."""
        return self._model is not None

    def redact(self, text: str) -> RedactResult:
        if self._clean and self._vouched(text):
            return RedactResult(text, ())
        return self._redact(text, ascii_only=False)

    def vouch(self, text: str) -> bool:
        """Any thread: scan text now; when it holds nothing to redact, its redaction later
        (on the event loop, at its save) costs a digest, not a scan: an inbox item's
        archive parts, 256 KB each, are scanned in the worker thread that makes them.
        Returns whether it was clean."""
        if self._redact(text, ascii_only=False).redactions:
            return False
        digest = xxhash.xxh3_128_digest(text.encode("utf-8", "surrogatepass"))
        with self._lock:
            self._clean[digest] = None
            while len(self._clean) > VOUCHED_TEXTS:
                self._clean.popitem(last=False)
        return True

    def _vouched(self, text: str) -> bool:
        digest = xxhash.xxh3_128_digest(text.encode("utf-8", "surrogatepass"))
        with self._lock:
            return self._clean.pop(digest, 0) is None  # each vouch serves one save

    def holds_secret(self, data: bytes | memoryview) -> bool:
        """Whether `redact_bytes` would redact anything in data, without making the
        redacted bytes, nor a copy of data when it is a memoryview of a big file."""
        text = _text_of(data)
        if text is None:
            return bool(self._binary_secrets(data))
        return bool(self._redact(text, ascii_only=False).redactions)

    def redact_bytes(self, data: bytes) -> tuple[bytes, tuple[Redaction, ...]]:
        """Redact UTF-8 text, or ASCII secrets inside other bytes.

        Offsets in the returned redactions are byte offsets into `data`. Bytes that are not
        text (not valid UTF-8, or holding a NUL byte) are read as latin-1 (one character
        per byte), only all-ASCII secrets are replaced, each by as many bytes as it had,
        and every other byte is kept as it was.
        """
        text = _text_of(data)
        if text is None:
            return self._redact_binary(data)
        result = self._redact(text, ascii_only=False)
        if not result.redactions:
            return bytes(data), ()  # the same object when it is bytes: no second copy
        if text.isascii():
            return result.text.encode("utf-8"), result.redactions
        return result.text.encode("utf-8"), _to_byte_offsets(text, result.redactions)

    def redact_name(self, name: str) -> RedactResult:
        """Redact a name or a path: a file, folder or node name, a symlink target, an id.

        As `redact`, and also each part after a separator (`-_.+@=~/`, space) is scanned
        as if it started the text: a token glued to a name's separators
        (`notes-ghp_…`, `session-xoxb-…`) has no edge of its own there.
        """
        first = self._redact(name, ascii_only=False, name=True)
        taken = _Intervals((r.start, r.end) for r in first.redactions)
        found = [(r.start, r.end, r.kind) for r in first.redactions]
        for i, ch in enumerate(name[:-1]):
            if ch in _NAME_SEPARATORS:
                for s, e, kind in self._scan(name[i + 1 :], False, name=True):
                    if taken.add(s + i + 1, e + i + 1):
                        found.append((s + i + 1, e + i + 1, kind))
        if len(found) == len(first.redactions):
            return first
        found.sort()
        redactions = tuple(
            Redaction(kind, s, e, name.count("\n", 0, s) + 1) for s, e, kind in found
        )
        return RedactResult(_apply(name, found), redactions)

    # -- internals

    def _redact_binary(self, data: bytes) -> tuple[bytes, tuple[Redaction, ...]]:
        """Bytes that are not text: the ASCII secrets `_binary_secrets` finds replaced by
        as many bytes (`fitted_replacement`), every other byte kept. A database, an
        archive or compiled code records where and how long its strings are: a marker of
        another length made a SQLite file "malformed", a tar archive unreadable past it
        and a `.pyc` "bad marshal data"."""
        done = self._binary_secrets(data)
        if not done:
            return data, ()
        out = bytearray(data)
        for a, b, kind in done:
            out[a:b] = fitted_replacement(kind, b - a).encode("ascii")
        redactions = tuple(
            Redaction(kind, a, b, data.count(b"\n", 0, a) + 1) for a, b, kind in done
        )
        return bytes(out), redactions

    def _binary_secrets(self, data: bytes | memoryview) -> list[tuple[int, int, str]]:
        """(start, end, kind) of the secrets in bytes that are not UTF-8: only their runs
        of printable ASCII can hold a secret that is replaced (an all-ASCII one), so only
        those are scanned, joined in one text: a picture or an archive of 60 MiB is a few
        hundred KiB of such runs, where a scan of every byte as latin-1 ran every detector
        over all of them (7 MB/s). A secret is never shorter than a run; one glued to
        control bytes is not an ASCII-text secret this finds."""
        runs = printable_runs(data)
        if not runs:
            return []
        # a non-ASCII separator: a match across two runs is not an ASCII secret, as a match
        # across the bytes between them is not in a scan of every byte
        joined = "\x80".join(str(data[a:b], "ascii") for a, b in runs)
        result = self._redact(joined, ascii_only=True)
        if not result.redactions:
            return []
        # joined offset of each run's start, to map a span back into `data`
        starts = list(itertools.accumulate((b - a + 1 for a, b in runs[:-1]), initial=0))

        def back(pos: int, end: bool) -> int:
            i = bisect.bisect_right(starts, pos - (1 if end else 0)) - 1
            return runs[i][0] + pos - starts[i]

        return [(back(r.start, False), back(r.end, True), r.kind) for r in result.redactions]

    def _redact(
        self, text: str, *, ascii_only: bool, name: bool = False, at_end: bool = True
    ) -> RedactResult:
        """`at_end`: the text ends where the content ends (a window of a long text does
        not), so a token cut there may be the first part of a secret (`Detector.tail`)."""
        if len(text) > BIG_TEXT and not name:
            return self._redact_long(text, ascii_only)
        # Replacements so far, in original coordinates: (start, end, kind), sorted.
        done: list[tuple[int, int, str]] = []
        current = text
        for _ in range(_MAX_PASSES):
            found = self._scan(current, ascii_only, name=name, at_end=at_end)
            if not found:
                break
            found = [(*_to_original(s, e, done), k) for s, e, k in found]
            done = sorted(done + found)
            current = _apply(text, done)
        if not done:
            return RedactResult(text, ())
        newlines = [i for i, c in enumerate(text) if c == "\n"] if "\n" in text else []
        redactions = tuple(
            Redaction(kind, s, e, bisect.bisect_left(newlines, s) + 1) for s, e, kind in done
        )
        return RedactResult(current, redactions)

    def _redact_long(self, text: str, ascii_only: bool) -> RedactResult:
        """`_redact` a window at a time (see BIG_TEXT): each window starts after a line
        break and is read with OVERLAP more; what a window finds starting in it is kept,
        unless an earlier window's find covers it. Line numbers are counted once, in order."""
        n = len(text)
        taken = _Intervals()
        done: list[tuple[int, int, str]] = []
        a = 0
        while a < n:
            if n - a <= WINDOW + OVERLAP:
                b = end = n
            else:
                b = text.rfind("\n", a + WINDOW // 2, a + WINDOW) + 1 or a + WINDOW
                end = text.rfind("\n", b + OVERLAP // 2, b + OVERLAP) + 1 or b + OVERLAP
            part = self._redact(text[a:end], ascii_only=ascii_only, at_end=end == n)
            for r in part.redactions:
                if r.start >= b - a:
                    break
                if taken.add(a + r.start, a + r.end):
                    done.append((a + r.start, a + r.end, r.kind))
            a = b
        if not done:
            return RedactResult(text, ())
        done.sort()
        redactions = []
        line, pos = 1, 0
        for s, e, kind in done:
            line += text.count("\n", pos, s)
            pos = s
            redactions.append(Redaction(kind, s, e, line))
        return RedactResult(_apply(text, done), tuple(redactions))

    def _scan(
        self, text: str, ascii_only: bool, *, name: bool = False, at_end: bool = True
    ) -> list[tuple[int, int, str]]:
        """Every detector's spans in text, overlaps resolved by priority. A name is never
        cut by two writes: the detectors of a cut token's first part skip it."""
        lowered: str | None = None
        candidates: list[tuple[int, int, int, str]] = []
        cut: bool | None = None  # whether the text ends in what may be a cut token
        for det in self._detectors:
            if det.prose and ascii_only:  # bytes that are not text
                continue
            if det.tail:
                if cut is None:
                    cut = (
                        not name
                        and at_end
                        and bool(CUT_GATE.search(text, max(0, len(text) - det.tail)))
                    )
                if not cut:
                    continue
            if det.anchors:
                if det.fold:
                    if lowered is None:
                        lowered = _lower(text)
                    hay = lowered
                else:
                    hay = text
                if not any(a in hay for a in det.anchors):
                    continue
            for m in _matches(det, text, lowered):
                found = det.span(m)
                if found is None:
                    continue
                for span in found if isinstance(found, list) else (found,):
                    if span[0] == span[1]:
                        continue
                    if ascii_only and not text[span[0] : span[1]].isascii():
                        continue
                    candidates.append((det.priority, span[0], span[1], det.kind))
        guess = self._model is not None and not name and not ascii_only
        if not candidates and not guess:
            return []
        # Existing markers are taken first so nothing ever matches inside or across one,
        # and so are public PEM blocks.
        taken = _Intervals(
            _public_blocks(text) + [(m.start(), m.end()) for m in _MARKER_RE.finditer(text)]
        )
        out: list[tuple[int, int, str]] = []
        for _prio, s, e, kind in sorted(candidates, key=lambda c: (c[0], c[1], -c[2])):
            if taken.add(s, e):
                out.append((s, e, kind))
        # then what the finds bring with them, each pass seeing the ones before it: more
        # codes of a list (`…, the ipad one is 0505`), a value told twice, a list's other
        # entries
        for more in (continued_codes, repeated_values, listed_values):
            for s, e, kind in more(text, sorted(out)):
                if taken.add(s, e):
                    out.append((s, e, kind))
        if guess:
            self._guesses(text, taken, out)
        return sorted(out)

    def _guesses(self, text: str, taken: _Intervals, out: list[tuple[int, int, str]]) -> None:
        """The learned layer's spans, but the parts the rules (or markers) took: a guess
        never moves a rule's find, and what is left of it beside one is still redacted."""
        assert self._model is not None
        for s, e in self._model.spans(text):
            for a, b in taken.free(s, e):
                while a < b and text[a].isspace():
                    a += 1
                while b > a and text[b - 1].isspace():
                    b -= 1
                if any(c.isalnum() for c in text[a:b]) and taken.add(a, b):
                    out.append((a, b, MODEL_KIND))


def _public_blocks(text: str) -> list[tuple[int, int]]:
    """The spans of the public PEM blocks in text (`_PUBLIC_PEM_RE`), each from its BEGIN
    line to its END line. A window of a long text may cut one: a BEGIN with no END takes
    the base64 lines after it, an END with no BEGIN those before it."""
    if "-----" not in text:
        return []
    spans: list[tuple[int, int]] = []
    begin: re.Match[str] | None = None
    ended = 0  # where the last block ended: an END before any BEGIN was cut off before
    for m in _PUBLIC_PEM_RE.finditer(text):
        if m.group(1) == "BEGIN":
            if begin is not None:  # the one before has no END
                spans.append((begin.start(), _base64_lines_after(text, begin.end())))
            begin = m
        elif begin is not None and begin.group(2) == m.group(2):
            spans.append((begin.start(), m.end()))
            begin, ended = None, m.end()
        elif begin is None:
            spans.append((_base64_lines_before(text, m.start(), ended), m.end()))
            ended = m.end()
    if begin is not None:
        spans.append((begin.start(), _base64_lines_after(text, begin.end())))
    return spans


_BASE64_LINE_RE = re.compile(r"\r?\n[A-Za-z0-9+/=]{1,80}(?=\r?\n|$)")
_BASE64_RE = re.compile(r"[A-Za-z0-9+/=]{1,80}")


def _base64_lines_after(text: str, pos: int) -> int:
    while (m := _BASE64_LINE_RE.match(text, pos)) is not None:
        pos = m.end()
    return pos


def _base64_lines_before(text: str, pos: int, floor: int) -> int:
    """Back from `pos` (the start of an END line) over whole base64 lines, not below floor."""
    start = pos
    while start > floor:
        line_start = max(floor, text.rfind("\n", floor, start - 1) + 1)
        line = text[line_start:start].rstrip("\r\n")
        if not _BASE64_RE.fullmatch(line):
            break
        start = line_start
    return start


def _matches(det: Detector, text: str, lowered: str | None) -> Iterator[re.Match[str]]:
    if det.tail:
        yield from det.pattern.finditer(text, max(0, len(text) - det.tail))
        return
    if det.seek is None:
        yield from det.pattern.finditer(text)
        return
    if lowered is None:
        lowered = _lower(text)
    end = 0
    for hit in det.seek.finditer(lowered):
        if hit.start() < end:
            continue
        m = det.pattern.match(text, hit.start())
        if m is not None:
            end = m.end()
            yield m


def _lower(text: str) -> str:
    """Lower-cased with offsets kept (a few characters lower-case to two)."""
    low = text.lower()
    return low if len(low) == len(text) else text.translate(_ASCII_LOWER)


_ASCII_LOWER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}


class _Intervals:
    """Disjoint half-open intervals; `add` refuses one that overlaps what is there."""

    __slots__ = ("_starts", "_ends")

    def __init__(self, spans: Iterable[Span] = ()) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []
        for s, e in spans:
            self.add(s, e)

    def free(self, start: int, end: int) -> list[Span]:
        """The parts of [start, end) no interval covers, in order."""
        out: list[Span] = []
        i = max(0, bisect.bisect_right(self._starts, start) - 1)
        pos = start
        while i < len(self._starts) and self._starts[i] < end:
            if self._ends[i] > pos:
                if self._starts[i] > pos:
                    out.append((pos, self._starts[i]))
                pos = self._ends[i]
            i += 1
        if pos < end:
            out.append((pos, end))
        return out

    def add(self, start: int, end: int) -> bool:
        i = bisect.bisect_right(self._starts, start)
        if i > 0 and self._ends[i - 1] > start:
            return False
        if i < len(self._starts) and self._starts[i] < end:
            return False
        self._starts.insert(i, start)
        self._ends.insert(i, end)
        return True


def _apply(text: str, done: list[tuple[int, int, str]]) -> str:
    parts: list[str] = []
    pos = 0
    for s, e, kind in done:
        parts.append(text[pos:s])
        parts.append(replacement(kind))
        pos = e
    parts.append(text[pos:])
    return "".join(parts)


def _to_original(start: int, end: int, done: list[tuple[int, int, str]]) -> Span:
    """Map a span of the redacted text back to the original.

    A rescan never matches across a marker (markers are taken first), so the span lies in
    text that was copied unchanged and maps back by a constant shift.
    """
    shift = 0
    for s, e, kind in done:
        new_start = s + shift
        if new_start >= start:
            break
        shift += len(replacement(kind)) - (e - s)
    return start - shift, end - shift


def _to_byte_offsets(text: str, redactions: tuple[Redaction, ...]) -> tuple[Redaction, ...]:
    out = []
    pos = 0
    bpos = 0
    for r in redactions:
        bpos += len(text[pos : r.start].encode("utf-8"))
        bstart = bpos
        bpos += len(text[r.start : r.end].encode("utf-8"))
        pos = r.end
        out.append(Redaction(r.kind, bstart, bpos, r.line))
    return tuple(out)


def _user_detector(name: str, source: str) -> Detector:
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise InvalidInput(f"redaction pattern name {name!r}: use lowercase letters, digits, _")
    if name in BUILTIN_KINDS or name == MODEL_KIND:
        raise InvalidInput(f"redaction pattern {name!r}: the name of a built-in kind")
    if not isinstance(source, str):
        raise InvalidInput(f"redaction pattern {name!r}: the pattern must be a string")
    try:
        pattern = re.compile(source)
    except re.error as exc:
        raise InvalidInput(f"redaction pattern {name!r} does not compile: {exc}") from None
    if pattern.search("") is not None:
        raise InvalidInput(f"redaction pattern {name!r} matches the empty string")
    group: str | int = "secret" if "secret" in pattern.groupindex else 0
    return Detector(name, pattern, (), group_span(group), 5)


# --------------------------------------------------------------------------- logs


# C0 and C1 control characters, DEL, and the Unicode line and paragraph separators: in a
# name they would forge lines in `.status` or the log
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape_controls(text: str) -> str:
    """`text` with every control character written as an escape (`\\n`, `\\x1b`, `\\u2028`):
    one line, whatever a name holds, wherever it is shown (`.status`, the log)."""
    if not _CONTROLS.search(text):
        return text

    def escape(m: re.Match[str]) -> str:
        c = m.group()
        return _ESCAPES.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")

    return _CONTROLS.sub(escape, text)


class RedactingFilter(logging.Filter):
    """A logging filter that redacts every record's message and traceback.

    The defensive layer under the rule that no log line carries a secret: the code logs
    paths, kinds and counts, never content, but a name, an id or an exception's repr can
    still hold one. Attach it to the handlers (a filter on a logger does not see its
    children's records). A record is changed in place, so every handler sees the
    redacted text.
    """

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format is logging's to report, not ours
            return True
        clean = self.redactor.redact_name(message)
        one_line = escape_controls(clean.text)  # a name cannot forge a log line
        if clean.changed or one_line is not clean.text:
            record.msg, record.args = one_line, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redactor.redact_name(record.exc_text).text
        if record.stack_info:
            record.stack_info = self.redactor.redact_name(record.stack_info).text
        return True


# --------------------------------------------------------------------------- file names

_SSH_KEY_RE = re.compile(r"id_(?:rsa|dsa|ecdsa|ed25519)(?:_sk)?(?:[._-][a-z0-9]+)*")
_SECRET_NAMES = {
    ".netrc": "a .netrc file (machine logins and passwords)",
    "_netrc": "a .netrc file (machine logins and passwords)",
    ".pgpass": "a PostgreSQL password file",
    ".my.cnf": "a MySQL client config (often holds a password)",
    ".npmrc": "an npm config (holds registry tokens)",
    ".pypirc": "a PyPI config (holds upload tokens)",
    ".git-credentials": "a git credential store",
    ".htpasswd": "an htpasswd file (password hashes)",
    ".dockercfg": "a Docker registry credential file",
    ".envrc": "a direnv file (exports environment secrets)",
    "credentials": "a cloud credentials file",
    "credentials.json": "a credentials file",
    "credentials.csv": "a credentials file",
    "service-account.json": "a service account key file",
    "secrets.json": "a secrets file",
    "secrets.yaml": "a secrets file",
    "secrets.yml": "a secrets file",
    "secrets.toml": "a secrets file",
    ".secrets": "a secrets file",
    "terraform.tfstate": "a Terraform state file (holds secrets in clear)",
}
_SECRET_SUFFIXES = {
    ".pem": "a PEM file (private keys, certificates)",
    ".key": "a private key file",
    ".p12": "a PKCS#12 key store",
    ".pfx": "a PKCS#12 key store",
    ".p8": "a PKCS#8 private key",
    ".jks": "a Java key store",
    ".keystore": "a key store",
    ".kdbx": "a KeePass password database",
    ".kdb": "a KeePass password database",
    ".ppk": "a PuTTY private key",
    ".keychain": "a macOS keychain",
    ".keychain-db": "a macOS keychain",
    ".tfstate": "a Terraform state file (holds secrets in clear)",
}


def secret_filename_reason(name: str) -> str | None:
    """Why a file with this name is refused as a secret store, or None when it is not one.

    Only the last path component counts. Public halves (`id_rsa.pub`) pass.
    """
    base = name.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]
    low = base.lower()
    if not low or low.endswith(".pub"):
        return None
    why: str | None = None
    if low == ".env" or low.startswith(".env.") or (low.endswith(".env") and low != ".env"):
        why = "an environment file (.env holds API keys and passwords)"
    elif _SSH_KEY_RE.fullmatch(low):
        why = "an SSH private key"
    elif low in _SECRET_NAMES:
        why = _SECRET_NAMES[low]
    elif low.startswith("client_secret") and low.endswith(".json"):
        why = "an OAuth client secret file"
    else:
        for suffix, what in _SECRET_SUFFIXES.items():
            if low.endswith(suffix) and len(low) > len(suffix):
                why = what
                break
    if why is None:
        return None
    return f"{base!r} looks like {why}; secret stores are refused, not remembered"


def printable_runs(
    data: bytes | memoryview, least: int = PRINTABLE_RUN_MIN, window: int = _RUN_WINDOW
) -> list[tuple[int, int]]:
    """The [start, end) of every run of at least `least` printable bytes (see
    `_PRINTABLE`), in order. Translated a window at a time; each window ends after a byte
    that is not printable, so no run crosses one."""
    view = memoryview(data)
    size = len(view)
    need = b"\x01" * least
    out: list[tuple[int, int]] = []
    pos = 0
    while pos < size:
        end = min(size, pos + window)
        while end < size and _PRINTABLE[view[end - 1]]:
            more = bytes(view[end : end + 65536]).translate(_PRINTABLE)
            k = more.find(0)
            end = min(size, end + (k + 1 if k >= 0 else len(more)))
        marks = bytes(view[pos:end]).translate(_PRINTABLE)
        i = marks.find(need)
        while i >= 0:
            j = marks.find(0, i + least)
            j = len(marks) if j < 0 else j
            out.append((pos + i, pos + j))
            i = marks.find(need, j)
        pos = end
    return out
