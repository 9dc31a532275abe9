"""Passages: the pieces of a node that are indexed on their own and shown in a bundle.

A session archive (type `session`) is cut at its turns: each turn is one passage carrying its
speaker, its date and its turn id, so a question finds the turn that holds the evidence and
the bundle can show that turn and not the whole session. Any other node's L2 is cut into
chunks (`index.units.chunk_spans`); a short L2 is one passage. Passage `i` of a node is
the unit `(node, "L2", i)` in both indexes, so a hit names its passage directly.

Pure: a node's passages are a function of its L2 text (cached by node id and version).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from functools import lru_cache

from contextfs.conversations.timeparse import (
    format_date,
    format_range,
    parse_timestamp,
    resolve_relative,
)
from contextfs.conversations.transcript import turn_blocks
from contextfs.index.units import chunk_spans
from contextfs.model import Node

SESSION_TYPE = "session"
# a line quoting a turn: "- 14 March 2023 [S1:5] what was said"
_QUOTED_TURN = re.compile(r"^- (?:\d{1,2} [A-Z][a-z]+ \d{4} )?\[[^\]\n]+\] .*$\n?", re.M)
CHUNK_CHARS = 1000  # MiniLM reads about 1,000 characters of English
# An archive with more turns than a node has unit slots is cut into windows of turns.
MAX_PASSAGES = 8000


@dataclass(frozen=True, slots=True)
class Passage:
    """One indexed and showable piece of a node's L2."""

    index: int  # the unit's chunk number
    start: int  # character span in L2
    end: int
    text: str  # what a bundle shows
    turn_ids: tuple[str, ...] = ()
    speaker: str | None = None
    date: str | None = None  # "14 March 2023", when known
    # the text without the lines in it that quote a turn (`without_quoted_turns`; None:
    # none does): what is indexed and shown of a speaker's node
    plain: str | None = None

    @property
    def label(self) -> str:
        """How a bundle cites it: turn ids, else a character span."""
        if self.turn_ids:
            return (
                ", ".join(self.turn_ids)
                if len(self.turn_ids) <= 2
                else f"{self.turn_ids[0]}–{self.turn_ids[-1]}"
            )
        return f"chars {self.start}–{self.end}"

    def index_text(self) -> str:
        """What the indexes see: the passage's own words. Speaker and date are shown in the
        bundle but not indexed: with the speaker's name in every turn, a question naming a
        person matched their shortest small talk first (scripts/bench_recall.py, dev half).
        A line of another node that quotes a turn ("- 14 March 2023 [S1:5] ...": a
        speaker's node, `conversations.people.speaker_hubs`) is not indexed either: the
        turn is, where it was said, and a question finds it there, whole."""
        return self.text if self.plain is None else self.plain


def without_quoted_turns(text: str) -> str:
    """Text of a node that is no turn, without the lines that quote a turn."""
    return _QUOTED_TURN.sub("", text) if "[" in text else text


def _when(timestamp: str | None) -> str | None:
    if not timestamp:
        return None
    ts = parse_timestamp(timestamp)
    return format_date(ts.date()) if ts is not None else timestamp


def _turn_passages(l2: str) -> list[Passage]:
    blocks = [b for b in turn_blocks(l2) if b.content]
    if not blocks:
        return []
    per = -(-len(blocks) // MAX_PASSAGES)  # turns per passage: 1 unless the archive is huge
    out: list[Passage] = []
    for i in range(0, len(blocks), per):
        group = blocks[i : i + per]
        first = group[0]
        speaker = first.name or first.role
        if per == 1:
            text = first.content
        else:
            text = "\n".join(f"{b.name or b.role}: {b.content}" for b in group)
        out.append(
            Passage(
                len(out),
                first.start,
                group[-1].end,
                text,
                tuple(b.id for b in group if b.id),
                speaker if per == 1 else None,
                _when(first.timestamp),
            )
        )
    return out


def _chunk_passages(l2: str, date: str | None) -> list[Passage]:
    out: list[Passage] = []
    quoted = [m.span() for m in _QUOTED_TURN.finditer(l2)] if "[" in l2 else []
    for ov, start, end in chunk_spans(l2, CHUNK_CHARS, CHUNK_CHARS // 10):
        text = l2[ov:end].strip()
        if text and l2[start:end].strip():
            plain = _outside(l2, ov, end, quoted) if quoted else None
            out.append(Passage(len(out), ov, end, text, date=date, plain=plain))
    return out


def _outside(l2: str, start: int, end: int, spans: list[tuple[int, int]]) -> str:
    """l2[start:end] without what the spans cover (a chunk may begin inside one)."""
    parts, at = [], start
    for a, b in spans:
        if b <= at or a >= end:
            continue
        parts.append(l2[at:a])
        at = max(at, b)
    parts.append(l2[at:end] if at < end else "")
    return "".join(parts).strip()


@lru_cache(maxsize=4096)
def _passages(
    node_id: int, version: int, type_name: str, l2: str, date: str | None
) -> tuple[Passage, ...]:
    if type_name == SESSION_TYPE:
        turns = _turn_passages(l2)
        if turns:
            return tuple(turns)
    return tuple(_chunk_passages(l2, date))


def node_passages(n: Node) -> tuple[Passage, ...]:
    """The passages of a node's current L2 (cached per node version)."""
    key = (n.id, n.version)
    hit = _recent.get(key)
    if hit is not None and (hit[0] is n.l2 or hit[0] == n.l2):
        return hit[1]
    ps = _passages(n.id, n.version, n.type, n.l2, _l2_date(n.l2))
    if len(_recent) >= _RECENT_MAX:
        _recent.clear()  # cheap and rare: the lru below still holds the recent ones
    _recent[key] = (n.l2, ps)
    return ps


# (node id, version) -> (the L2 they were cut from, passages): a search asks for the same
# nodes' passages many times, and the date in the lru key below costs a front-matter parse
_recent: dict[tuple[int, int], tuple[str, tuple[Passage, ...]]] = {}
_RECENT_MAX = 8192


def passages_of(node_id: int, version: int, type_name: str, l2: str) -> tuple[Passage, ...]:
    """`node_passages` of a node given by its fields: what a worker thread cuts from the
    texts the trio thread read (a node object is the trio thread's)."""
    return _passages(node_id, version, type_name, l2, _l2_date(l2))


def _l2_date(l2: str) -> str | None:
    """A node's own date, for passages that carry none: a `date:` field in its front
    matter (events, archives), else none (the bundle shows the update time instead)."""
    head = l2[:400]
    if head.startswith("---"):
        for line in head.splitlines()[1:]:
            if line.startswith("---"):
                break
            if line.startswith("date:"):
                ts = parse_timestamp(line[5:].strip().strip("'\""))
                if ts is not None:
                    return format_date(ts.date())
    return None


@lru_cache(maxsize=4096)
def passage_day(said: str) -> dt.date | None:
    """A passage's date as `_when` writes it ("14 March 2023", `format_date`), as a day."""
    try:
        return dt.datetime.strptime(said, "%d %B %Y").date()
    except ValueError:
        return None


@lru_cache(maxsize=8192)
def resolved_dates(text: str, said: str | None) -> str:
    """The days a turn's relative time words mean, counted from the day it was said
    (`said`, a passage's date: "9 May 2023"): " [yesterday = Monday 8 May 2023; on
    Saturday = Saturday 6 May 2023]". "I handed in my notice yesterday" is answered "8 May
    2023", which its words alone never say. Empty when the turn has no date or says no
    day relatively. A bundle puts it after the turn, whose own words stay as said."""
    day = passage_day(said) if said else None
    if day is None:
        return ""
    parts = []
    for m in resolve_relative(text, day):
        if not m.relative:
            continue
        when = (
            f"{m.start.strftime('%A')} {format_date(m.start)}"
            if m.start == m.end
            else format_range(m.start, m.end)
        )
        parts.append(f"{' '.join(m.text.split())} = {when}")
    return f" [{'; '.join(parts)}]" if parts else ""
