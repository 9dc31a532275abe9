"""What gets indexed: a node's tiers cut into searchable units.

A node has three tiers of text: L0 (a one-line abstract), L1 (an overview) and L2 (the full
content). L0 and L1 are short and become one unit each; L2 is cut into chunks that fit the
embedding model's window (MiniLM reads 256 word pieces, about 1000 characters of English).
Pure functions, no I/O: the indexer decides when to call them and where the units go (a
node's units are `search.indexer.units_of`, its L2 passages `search.passages`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import xxhash

# Break candidates, best first: a blank line, the end of a sentence, any whitespace.
_PARAGRAPH = re.compile(r"\n[ \t]*\n\s*")
_SENTENCE = re.compile(r"(?<=[.!?;:])[\"')\]]*\s+")
_SPACE = re.compile(r"\s+")
# A chunk is never cut shorter than this fraction of its budget when a later break exists.
_MIN_FILL = 0.5


@dataclass(frozen=True, slots=True)
class Unit:
    """One searchable piece of a node: its L0, its L1, or one chunk of its L2."""

    node_id: int
    tier: str
    chunk: int
    text: str

    @property
    def key(self) -> str:
        return f"{self.node_id}:{self.tier}:{self.chunk}"

    @property
    def digest(self) -> str:
        """Content hash: a unit whose digest did not change needs no new embedding."""
        return xxhash.xxh64(self.text.encode("utf-8", "surrogatepass")).hexdigest()


def _last_break(text: str, start: int, limit: int, pattern: re.Pattern[str]) -> int | None:
    """End of the last match of `pattern` ending in (start + min fill, limit], or None."""
    floor = start + int((limit - start) * _MIN_FILL)
    best = None
    for m in pattern.finditer(text, start, limit):
        if m.end() > floor:
            best = m.end()
    return best


def chunk_spans(text: str, max_chars: int, overlap: int) -> list[tuple[int, int, int]]:
    """(overlap start, body start, end) per chunk; the bodies tile `text` exactly."""
    overlap = max(0, min(overlap, max_chars // 2))
    budget = max_chars - overlap
    spans: list[tuple[int, int, int]] = []
    start, n = 0, len(text)
    while start < n:
        limit = start + budget
        if limit >= n:
            end = n
        else:
            end = (
                _last_break(text, start, limit, _PARAGRAPH)
                or _last_break(text, start, limit, _SENTENCE)
                or _last_break(text, start, limit, _SPACE)
                or limit
            )
        ov = start
        if spans and overlap:
            # Start the overlap at a word boundary so a chunk never opens mid-word.
            m = _SPACE.search(text, max(0, start - overlap), start)
            ov = m.end() if m else start
        spans.append((ov, start, end))
        start = end
    return spans


def chunk_text(text: str, max_chars: int = 1000, overlap: int = 100) -> list[str]:
    """Cut `text` on paragraph, then sentence, then word boundaries into chunks.

    The text view of `chunk_spans`, which is what the indexer reads (through
    `search.passages`); kept as the form the chunking tests state their properties in.

    Every chunk is at most `max_chars` long and non-empty; consecutive chunks share up to
    `overlap` characters (capped at half of `max_chars`) so that a sentence cut by a chunk
    border is still whole in one of them. A text of at most `max_chars` is one chunk.
    Nothing is lost: the chunks, less their overlaps, are the text (modulo whitespace
    at the borders).
    """
    if max_chars < 1:
        raise ValueError("max_chars must be positive")
    text = text.strip()
    if not text:
        return []
    if len(text) <= max_chars:
        return [text]
    chunks = []
    for ov, start, end in chunk_spans(text, max_chars, overlap):
        if not text[start:end].strip():
            continue
        chunks.append(text[ov:end].strip())
    return chunks
