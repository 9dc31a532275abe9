"""A conversation as an episode: who spoke, when it happened, what was named (rules, offline).

A session archive's L0/L1 come from this: a heading line "Efua and Theo · 14 March 2023 ·
Fernhill Studio, Toffee, Edinburgh" and a summary of the named things and the dates the turns
mention (resolved against each turn's own time). Pure: turns in, text out. With an LLM endpoint
configured, the background summaries replace L0/L1 as for any node.
"""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter
from collections.abc import Sequence

from contextfs.conversations.timeparse import format_date, parse_timestamp, resolve_relative
from contextfs.conversations.transcript import Turn

# Capitalised words that are not names of things.
_COMMON_WORDS = """
i i'm i've i'll i'd im ive ill id a an the and but or so oh ah ha haha yes yeah no not ok okay
hi hey hello thanks thank sorry well wow what when where who why how which this that these
those there here it it's its my your our their his her we you they he she me us them is are
was were be been do did does don't can can't could would should will won't just also then
now today tomorrow yesterday tonight mr mrs ms dr monday tuesday wednesday thursday friday
saturday sunday january february march april may june july august september october november
december lol omg good great nice sure right love happy congratulations guess wait same
anyway honestly also maybe still very really if as at by for from in into of on to up with
year week month day morning night weekend last next poor dear meanwhile
how's what's that's it's here's there's where's who's let's she's he's
mondays tuesdays wednesdays thursdays fridays saturdays sundays weekends
mum mom dad mummy mommy daddy gran granny grandma grandpa nan nana papa
probably barely basically actually definitely literally seriously totally absolutely
started finished tried still only even almost apparently hopefully luckily sadly
"""
_COMMON = frozenset(_COMMON_WORDS.split())
_UP = "A-ZÀ-ÖØ-Þ" + "".join(c for c in map(chr, range(0x100, 0x530)) if c.isupper())
# a capitalised word, accented ones too ("Kraków", "Ålesund", "Malmö"); a title's words
# joined by "of" or "and the" ("The Mirror and the Light", "Bank of England") are one name
_WORD = rf"[{_UP}][^\W\d_]*(?:['’-][^\W\d_]+)*"
_NAME_RE = re.compile(
    rf"(?<![\w'’])({_WORD}(?:(?:\s+|\s+(?:of|and)\s+the\s+|\s+of\s+){_WORD}){{0,3}})"
)
# a capital that opens a sentence or a clause set off by a dash, colon, ellipsis, quote or
# list mark: a word of the sentence, not a name ("… Barely", "Update: Coffee")
_OPENER = re.compile(r"(?:^|[.!?:;…—–\-(\[\"“*•]\s*|\s[-–—]\s+)$")
MAX_NAMED = 8


def speakers(turns: Sequence[Turn]) -> list[str]:
    """The speakers in order of first appearance (name, else role; tools left out)."""
    seen: dict[str, None] = {}
    for t in turns:
        if t.role != "tool":
            seen.setdefault(t.name or t.role, None)
    return list(seen)


def started(turns: Sequence[Turn]) -> dt.datetime | None:
    """When the conversation happened: its earliest readable turn time."""
    times = [ts for t in turns if t.timestamp and (ts := parse_timestamp(t.timestamp))]
    if not times:
        return None
    naive = [
        t.replace(tzinfo=None) if t.tzinfo is None else t.astimezone(dt.UTC).replace(tzinfo=None)
        for t in times
    ]
    return min(naive)


def named_things(turns: Sequence[Turn], exclude: Sequence[str] = ()) -> list[str]:
    """Names that come up (people, pets, places, projects), most mentioned first."""
    skip = {e.lower() for e in exclude}
    # a word the conversation also writes in small letters is a word, not a name
    # ("Coffee first." beside "more coffee")
    small = {w.lower() for t in turns for w in re.findall(r"(?<![\w'’])[^\W\d_A-Z]\w*", t.content)
             if w[:1].islower()}  # fmt: skip
    counts: Counter[str] = Counter()
    for t in turns:
        for sentence in re.split(r"(?<=[.!?…])\s+|\n+", t.content):
            for m in _NAME_RE.finditer(sentence):
                name = re.sub(r"['’]s$", "", m.group(1)).strip("'’-")  # "Idris's": Idris
                words = name.split()
                before = sentence[: m.start()]
                if len(words) == 1 and (
                    not re.search(r"[^\W\d_]", before)
                    or _OPENER.search(before)
                    or words[0].lower() in small
                ):
                    continue  # a capital that only starts the sentence ("1. Rinse", "Keep")
                if all(w.isupper() for w in words) and (len(words) > 1 or len(name) > 4):
                    continue  # shouting ("UNDER TWO HOURS"), not a name; "BBC" stays
                while words and words[0].lower().replace("’", "'") in _COMMON:
                    words = words[1:]
                if not words or " ".join(words).lower() in skip:
                    continue
                if len(words) == 1 and (words[0].lower() in _COMMON or len(words[0]) < 3):
                    continue
                counts[" ".join(words)] += 1
    return [name for name, _ in counts.most_common(MAX_NAMED)]


def mentioned_dates(turns: Sequence[Turn]) -> list[str]:
    """Days and periods the turns speak of, resolved against each turn's own time."""
    out: dict[str, None] = {}
    for t in turns:
        ts = parse_timestamp(t.timestamp) if t.timestamp else None
        if ts is None:
            continue
        for m in resolve_relative(t.content, ts.date()):
            out.setdefault(f"{m.text.strip()} → {m.label}", None)
    return list(out)[:12]


def heading(turns: Sequence[Turn], day: dt.date | None = None) -> str:
    """One line: who, when (the turns' time, else `day`), what was named, else what the
    first turn said (a live session's turns often carry no time and name nothing: "user
    · 7 December 2026 · I always indent with tabs." rather than "user")."""
    who = speakers(turns)
    people = " and ".join(who[:2]) if len(who) <= 2 else ", ".join(who[:3])
    when = started(turns)
    parts = [people or "conversation"]
    if when is not None:
        parts.append(format_date(when.date()))
    elif day is not None:
        parts.append(format_date(day))
    named = named_things(turns, who)
    if named:
        parts.append(", ".join(named[:5]))
    elif gist := _gist(turns):
        parts.append(gist)
    return " · ".join(parts)


GIST_CHARS = 60


def _gist(turns: Sequence[Turn]) -> str:
    """The first sentence of the first turn that says something, cut at a word."""
    first = next((t for t in turns if t.role != "tool" and t.content.strip()), None)
    if first is None:
        return ""
    line = " ".join(first.content.split())
    sentence = re.split(r"(?<=[.!?])\s", line, maxsplit=1)[0]
    if len(sentence) <= GIST_CHARS:
        return sentence
    return sentence[:GIST_CHARS].rsplit(" ", 1)[0].rstrip(",;:") + "…"


def summary(turns: Sequence[Turn]) -> str:
    """A few lines for L1: speakers, time span, named things, dates spoken of."""
    who = speakers(turns)
    count = f"{len(turns)} turn{'s' if len(turns) != 1 else ''}"
    lines = [
        f"{count} between {', '.join(who)}."
        if len(who) > 1
        else (f"{count} by {who[0]}." if who else f"{count}.")
    ]
    named = named_things(turns, who)
    if named:
        lines.append("Named: " + ", ".join(named) + ".")
    dates = mentioned_dates(turns)
    if dates:
        lines.append("Dates spoken of: " + "; ".join(dates) + ".")
    return " ".join(lines)
