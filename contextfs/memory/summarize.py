"""Extractive L0/L1 summaries of an L2 document: the fallback when no LLM is configured.

L0 is a one-line abstract (where to look), L1 a short structured overview (is it
relevant, what is in it). Both are derived only from the L2 text and the type's limits,
deterministically, without I/O; the memory service decides when to call this and whether a
pinned hand-written L0/L1 wins.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

from contextfs.ctxtypes import DEFAULT_L0, DEFAULT_L1, ContextType
from contextfs.errors import InvalidInput
from contextfs.memory.document import parse_document

_WS_RE = re.compile(r"\s+")
_CHUNK_RE = re.compile(r"\n[ \t\r]*\n")
_SPECIAL_RE = re.compile(r"^[ \t]*(?:[#>`~*+_-]|\d{1,9}[.)])", re.M)
_HEADING_RE = re.compile(r"^(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_BULLET_RE = re.compile(r"^(?:[-*+]|\d{1,9}[.)])(?:[ \t]+(.*)|$)")
_BREAK_RE = re.compile(r"^([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_IMAGE_RE = re.compile(r"!\[([^\]]*)\]\([^)]*\)")
_LINK_RE = re.compile(r"\[([^\]]+)\]\([^)]*\)")
_QUOTE_RE = re.compile(r"^(?:>[ \t]?)+")
_SENTENCE_RE = re.compile(r"[.!?][\"')\]]*(?=\s+[\"'(\[]?[A-Z0-9])")
_ELLIPSIS = "…"


def _clean(text: str) -> str:
    """Inline markdown removed, whitespace collapsed to single spaces."""
    if "[" in text:
        text = _LINK_RE.sub(r"\1", _IMAGE_RE.sub(r"\1", text))
    # Emphasis and code marks go; a lone '*' rarely carries meaning in prose.
    for mark in ("*", "__", "~~", "`"):
        if mark in text:
            text = text.replace(mark, "")
    return " ".join(text.split())


def _cut(text: str, limit: int) -> str:
    """At most `limit` characters, cut at a word boundary and marked with '…' if shortened."""
    if len(text) <= limit:
        return text
    if limit <= 1:
        return _ELLIPSIS[:limit]
    head = text[: limit - 1]
    space = head.rfind(" ")
    if space >= limit // 2:
        head = head[:space]
    return head.rstrip(" ,;:-") + _ELLIPSIS


def _first_sentence(raw: str, limit: int) -> str:
    """The first sentence of a block's raw text, markup removed, at most `limit` chars."""
    # Only the start can matter; bounding it keeps long paragraphs cheap.
    text = _clean(raw[: limit * 2 + 16])
    match = _SENTENCE_RE.search(text)
    return _cut(text[: match.end()] if match else text, limit)


def _blocks(body: str, max_chars: int) -> Iterator[tuple[str, str, int]]:
    """(kind, text, heading level) for headings, paragraphs and bullet items.

    Heading text is cleaned of markup; paragraph and item text is raw, joined into one line
    and bounded to about `max_chars` (only its first sentence is ever used). Blank-line
    separated chunks without any markdown line marker take a fast path.
    """
    fence = ""
    for chunk in _CHUNK_RE.split(body):
        if not fence and not _SPECIAL_RE.search(chunk):
            if chunk.strip():
                yield "para", chunk[:max_chars], 0
            continue
        lines: list[str] = []
        kind = ""
        size = 0
        for raw in chunk.split("\n"):
            line = raw.strip()
            if fence:
                if line.startswith(fence):
                    fence = ""
                continue
            if not line:
                if lines:
                    yield kind, " ".join(lines), 0
                    lines = []
                continue
            if line.startswith(("```", "~~~")):
                if lines:
                    yield kind, " ".join(lines), 0
                    lines = []
                fence = line[:3]
                continue
            if line[0] == ">":
                line = _QUOTE_RE.sub("", line).strip()
                if not line:
                    continue
            first = line[0]
            if first == "#":
                heading = _HEADING_RE.match(line)
                if heading:
                    if lines:
                        yield kind, " ".join(lines), 0
                        lines = []
                    text = _clean(heading.group(2) or "")
                    if text:
                        yield "heading", text, len(heading.group(1))
                    continue
            elif first in "-*_+0123456789":
                if first in "-*_" and _BREAK_RE.match(line):
                    if lines:
                        yield kind, " ".join(lines), 0
                        lines = []
                    continue
                bullet = _BULLET_RE.match(line)
                if bullet:
                    if lines:
                        yield kind, " ".join(lines), 0
                    lines = [bullet.group(1) or ""]
                    size = len(lines[0])
                    kind = "bullet"
                    continue
            if not lines:
                kind = "para"
                size = 0
            if size < max_chars:
                lines.append(line)
                size += len(line) + 1
        if lines:
            yield kind, " ".join(lines), 0


def _value_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ", ".join(_value_text(v) for v in value)
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={_value_text(v)}" for k, v in value.items())
    return str(value)


def _ordered(ctype: ContextType | None, fields: Mapping[str, object]) -> list[tuple[str, str]]:
    names: list[str] = []
    if ctype is not None:
        names = [f.name for f in ctype.fields if f.name in fields]
    names += sorted((str(k) for k in fields if k not in names), key=str)
    out = []
    for name in names:
        value = fields.get(name)
        if value is None or value == "" or value == [] or value == {}:
            continue
        out.append((name, _WS_RE.sub(" ", _value_text(value)).strip()))
    return out


def _from_fields(ctype: ContextType | None, fields: list[tuple[str, str]]) -> str:
    """An abstract made of key fields, e.g. "preference: editor = vim"."""
    keys = set(ctype.key_fields) if ctype is not None else set()
    key_text = " ".join(v for k, v in fields if k in keys)
    others = [(k, v) for k, v in fields if k not in keys and v]
    label = ctype.name if ctype is not None else ""
    if key_text:
        text = f"{label}: {key_text}" if label else key_text
        if len(others) == 1:
            return f"{text} = {others[0][1]}"
        if others:
            return f"{text} ({', '.join(f'{k} = {v}' for k, v in others)})"
        return text
    if others:
        joined = ", ".join(f"{k} = {v}" for k, v in others)
        return f"{label}: {joined}" if label else joined
    return ""


def summarize(ctype: ContextType | None, l2_text: str) -> tuple[str, str]:
    """(L0, L1) for an L2 text, within the type's limits (120/1500 without a type).

    Both limits count every character including the trailing newline. L0 is one line:
    the first block's heading (completed by the next sentence when the heading is one or
    two words), else the body's first sentence, else the key fields; never empty for
    non-empty input. L1 starts with the L0 text, then "- field: value" for each front-matter
    field, then every heading and the first sentence of every paragraph and bullet item,
    in order, cut at a line boundary.
    """
    l0_max = ctype.l0_max_chars if ctype is not None else DEFAULT_L0
    l1_max = ctype.l1_max_chars if ctype is not None else DEFAULT_L1
    try:
        doc = parse_document(l2_text)
        fields, body = doc.fields, doc.body
    except InvalidInput:
        fields, body = {}, l2_text
    field_lines = _ordered(ctype, fields)
    line_cap = min(l1_max - 1, max(80, l1_max // 5))
    blocks = _blocks(body, 2 * line_cap + 16)

    # L0 from the first block(s).
    l0_text = ""
    pending: list[tuple[str, str, int]] = []
    first = next(blocks, None)
    if first is not None:
        kind, text, _level = first
        if kind == "heading":
            l0_text = text
            if len(text.split()) <= 2:
                follow = next(blocks, None)
                if follow is not None:
                    pending.append(follow)
                    if follow[0] != "heading":
                        sentence = _first_sentence(follow[1], l0_max)
                        l0_text = f"{text}: {sentence}"
        else:
            l0_text = _first_sentence(text, l0_max)
        pending.insert(0, first)
    if not l0_text:
        l0_text = _from_fields(ctype, field_lines)
    if not l0_text:
        l0_text = _WS_RE.sub(" ", body if body.strip() else l2_text).strip()
    if not l0_text and l2_text:
        l0_text = "(empty)"
    l0_text = _cut(l0_text, l0_max - 1)
    l0 = l0_text + "\n" if l0_text else ""

    # L1: the abstract, the fields, then the outline, while it fits.
    out = [l0]
    used = len(l0)

    def add(line: str) -> bool:
        nonlocal used
        line = _cut(line, line_cap)
        if used + len(line) + 1 > l1_max:
            return False
        out.append(line + "\n")
        used += len(line) + 1
        return True

    full = False
    for name, value in field_lines:
        if not add(f"- {name}: {value}"):
            full = True
            break
    if not full:
        for kind, text, level in _chain(pending, blocks):
            if not text:
                continue
            if kind == "heading":
                if text in l0_text:
                    continue
                line = f"{'#' * level} {text}"
            else:
                sentence = _first_sentence(text, line_cap)
                if not sentence or sentence.rstrip(_ELLIPSIS) in l0_text:
                    continue
                line = f"- {sentence}" if kind == "bullet" else sentence
            if not add(line):
                break
    return l0, "".join(out)


def _chain(
    first: list[tuple[str, str, int]], rest: Iterator[tuple[str, str, int]]
) -> Iterator[tuple[str, str, int]]:
    yield from first
    yield from rest
