"""The answer bundle: `_context.md` and `_results.json` of a query directory.

`_context.md` is filled where the evidence is: the matched passages, best first, each under
its node's path and date with its turn ids (the turns of one session are shown in the order
they were said), never over the budget; a passage that does not fit is skipped for a later
one that does. What room is left goes to one-line pointers (L0) to further hits. Nothing is
spent on a long tier that did not match. The header says which rankers answered.

When nothing found is relevant (no hit above the similarity floor, `Results.relevant`), the
bundle says so in one line and points at the nearest few nodes instead of packing what
merely came closest: an agent that injects it gets a few lines, not unrelated memories.
So it does when the question says what kind of answer it wants (a colour, a name for the
hotel) and nothing found holds one (`Results.unanswered`): the memories talk about the
subject but do not say the answer.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
from dataclasses import dataclass, field
from json.encoder import encode_basestring_ascii as _escape

from contextfs.errors import ContextFSError
from contextfs.memory.document import parse_document
from contextfs.memory.tokens import estimate_tokens
from contextfs.search.passages import passage_day, resolved_dates
from contextfs.search.retrieval import Hit, PassageHit, Results

SIDE_NAMES = {"bm25": "BM25", "vectors": "vectors", "clip": "CLIP images"}
NOTHING_RELEVANT = "Nothing relevant found"
NO_ANSWER = "No answer found"
NEAREST_SHOWN = 3  # pointers under "Nothing relevant found", at most
NEAREST_CHARS = 80  # of each one's L0
PASSAGE_CHARS = 160  # of its best passage, under "No answer found"
NOTHING_SHARE = 0.1  # of the budget, the most a "Nothing relevant found" bundle takes


@dataclass(slots=True)
class _Section:
    """One node in the bundle: its heading and the passages shown under it."""

    hit_path: str
    heading: str
    passages: list[PassageHit] = field(default_factory=list)


def _heading(ph: PassageHit, scope: str) -> str:
    """`## <path under the scope> · <date>`; the date is left out when the node's name
    already says that day (a session archive `2023-03-14-s1`)."""
    n = ph.node
    path = ph.path[len(scope) + 1 :] if scope and ph.path.startswith(scope + "/") else ph.path
    when = ph.passage.date or _updated_day(n.updated)
    iso = _iso(when)
    if iso and iso in n.name:
        return f"\n## {path}\n"
    return f"\n## {path} · {when}\n"


# Both cached: a bundle weighs a heading for every passage it considers (about 50), and
# the same nodes come up question after question.
@functools.lru_cache(maxsize=4096)
def _updated_day(updated: float) -> str:
    """The day of a node's last update, as a heading says it ("14 March 2023")."""
    return dt.datetime.fromtimestamp(updated, dt.UTC).strftime("%-d %B %Y")


@functools.lru_cache(maxsize=4096)
def _iso(human: str) -> str | None:
    day = passage_day(human)
    return day.isoformat() if day is not None else None


def _line(ph: PassageHit, heading_date: str | None) -> str:
    p = ph.passage
    text = p.text.strip()
    if p.turn_ids or p.speaker:
        who = f"{p.speaker}: " if p.speaker else ""
        date = f" ({p.date})" if p.date and p.date != heading_date else ""
        return f"- [{p.label}]{date} {who}{text}{resolved_dates(text, p.date)}\n"
    whole = len(ph.node.l2.strip()) <= len(text) + 1
    if p.plain is not None:
        # a line quoting a turn (a speaker's node) is shown where it was said, as the turn;
        # what is left is its fields, on one line
        text, whole = p.plain, True
        if not text:
            return ""
    if whole:  # the whole L2: fields on one line
        return _compact_document(text) + "\n"
    return f"[{p.label}] {text}\n"


@functools.lru_cache(maxsize=4096)
def _compact_document(text: str) -> str:
    """A short node's L2 with its front matter as one `key: value · …` line (YAML's own
    layout costs tokens the budget is better spent on)."""
    try:
        doc = parse_document(text)
    except ContextFSError:
        return text
    if not doc.fields:
        return text
    parts = []
    for key, value in doc.fields.items():
        if isinstance(value, dict):
            value = "; ".join(f"{k}: {v}" for k, v in value.items())
        elif isinstance(value, list):
            value = ", ".join(map(str, value))
        parts.append(f"{key}: {value}")
    body = doc.body.strip()
    return " · ".join(parts) + ("\n" + body if body else "")


def _header(question: str, scope: str, res: Results, budget: int, *, note: bool = True) -> str:
    sides = " + ".join(SIDE_NAMES[s] for s in res.sides) or "nothing"
    head = (
        f"# Context for: {question}\n"
        f"{scope or '/'} · {len(res.hits)} hits · searched by {sides} · {budget} tokens\n"
    )
    if res.note and note:
        head += f"Note: {res.note}\n"
    if not res.hits:
        head += (
            "\nNo memory matches this question.\n"
            if not res.note
            else "\nNothing found by what has answered so far; ask again shortly.\n"
        )
    return head


POINTERS = "\n## Further hits\n\n"


def _pointer(h: Hit, *, l0: bool = True, said: bool = False) -> str:
    """A further hit's line: its path and L0 (`l0`), `(said in a turn above)` (`said`),
    or its path alone (what is left when neither fits)."""
    if said:
        return f"- {h.path} (said in a turn above)\n"
    if l0 and h.node.l0.strip():
        return f"- {h.path}: {' '.join(h.node.l0.split())}\n"
    return f"- {h.path}\n"


def _fitted_header(question: str, scope: str, res: Results, budget: int) -> str:
    """The header, leaving room for the best hit named by its path under "Further hits":
    a note (vectors behind, loading) gives way first, then the end of a long question."""
    header = _header(question, scope, res, budget)
    if not res.hits:
        return header
    need = estimate_tokens(POINTERS) + estimate_tokens(_pointer(res.hits[0], l0=False))
    if estimate_tokens(header) + need <= budget:
        return header
    header = _header(question, scope, res, budget, note=False)
    cut = len(question)
    while cut > 0 and estimate_tokens(header) + need > budget:
        cut = max(0, cut - max(1, (estimate_tokens(header) + need - budget) * 4))
        header = _header(question[:cut].rstrip() + "…", scope, res, budget, note=False)
    return header


def pack_context(question: str, scope: str, res: Results, budget: int) -> str:
    """The bundle, never over `budget` tokens (estimate_tokens). The best hit is always in
    it: by its passages, else named by a line under "Further hits" (its path, with its L0
    when that fits); room for that line, and for the next hits' within a tenth of the
    budget, is kept before any passage is packed; further hits are named as room is left."""
    header = _header(question, scope, res, budget)
    if res.relevant is False:
        if estimate_tokens(header) > budget:
            return _trim(header, budget)
        best = max((h.confidence or 0.0 for h in res.hits), default=0.0)
        line = f"{NOTHING_RELEVANT}: no memory is close to this question ({best:.2f}).\n"
        return _trim(
            _short(header + "\n" + line, scope, res, budget, "Nearest, not relevant"), budget
        )
    if res.unanswered:
        if estimate_tokens(header) > budget:
            return _trim(header, budget)
        line = f"{NO_ANSWER}: the memories found do not say {res.unanswered}.\n"
        short = _short(header + "\n" + line, scope, res, budget, "Nearest", passages=True)
        return _trim(short, budget)
    header = _fitted_header(question, scope, res, budget)
    if estimate_tokens(header) > budget:
        return _trim(header, budget)
    media = {h.node.id: h.media for h in res.hits if h.media}
    # the hits whose path-alone pointers are kept room for, best first: the best always,
    # the others within a tenth of the budget (kept for them all, the paths of ten hits
    # took a fifth of a 500-token bundle from the evidence); the rest are named as room
    # is left after the passages
    reserve: dict[int, int] = {}
    room = budget - estimate_tokens(header) - estimate_tokens(POINTERS)
    share = budget // 10
    for i, h in enumerate(res.hits):
        cost = estimate_tokens(_pointer(h, l0=False))
        if cost <= room and (i == 0 or cost <= share):
            reserve[h.node.id] = cost
            room -= cost
            share -= cost if i else 0
    sections, used = _fill(scope, res.passages, estimate_tokens(header), budget, reserve, media)
    # a memory whose text a turn shown says already (an event extracted from that turn)
    # gives its room to the next passage: the turn shows who said it and when
    repeats = _repeated(sections)
    said = set()  # the nodes of those memories: a pointer names them, without their text
    if repeats:
        said = {ph.node.id for ph in res.passages if id(ph) in repeats}
        kept = [ph for ph in res.passages if id(ph) not in repeats]
        sections, used = _fill(scope, kept, estimate_tokens(header), budget, reserve, media)
    further = [h for h in res.hits if h.node.id not in sections]
    # what the reserved hits further down still need, for each hit in turn
    owed = [0] * (len(further) + 1)
    for i in range(len(further) - 1, -1, -1):
        owed[i] = owed[i + 1] + reserve.get(further[i].node.id, 0)
    shown_pointers: list[str] = []
    for i, h in enumerate(further):
        heading = 0 if shown_pointers else estimate_tokens(POINTERS)
        left = budget - used - heading - owed[i + 1]
        for line in (
            _pointer(h, said=h.node.id in said),
            _pointer(h, l0=False),
        ):
            if estimate_tokens(line) <= left:
                used += heading + estimate_tokens(line)
                shown_pointers.append(line)
                break
    out = [header]
    for nid, sec in sections.items():
        out.append(sec.heading)
        date = sec.passages[0].passage.date
        for ph in sorted(sec.passages, key=lambda x: x.passage.index):
            out.append(_line(ph, date))
        if nid in media:  # a picture: its text above, its bytes here
            out.append(_media_line(media[nid]))
    if shown_pointers:
        out.append(POINTERS + "".join(shown_pointers))
    return _trim("".join(out), budget)


def _media_line(media: str) -> str:
    return f"bytes: {media}\n"


def _fill(
    scope: str,
    passages: list[PassageHit],
    used: int,
    budget: int,
    reserve: dict[int, int],
    media: dict[int, str],
) -> tuple[dict[int, _Section], int]:
    """The passages that fit, best first, per node (a passage that does not fit is
    skipped for a later one that does); and the tokens used. The room `reserve` keeps
    for naming each of those hits under "Further hits" (and the heading) is not packed;
    a reserved hit whose passage is shown gives its line's room back."""
    sections: dict[int, _Section] = {}
    pending = sum(reserve.values())
    heading_cost = estimate_tokens(POINTERS)
    for ph in passages:
        nid = ph.node.id
        sec = sections.get(nid)
        p = ph.passage
        if p.turn_ids or p.speaker:  # its line holds all its text: skip it unbuilt
            after = pending - (reserve.get(nid, 0) if sec is None else 0)
            least = used + estimate_tokens(p.text.strip()) + after
            if least + (heading_cost if after else 0) > budget:
                continue
        # a line costs what it will be shown as: dated unless its section's first is
        line = _line(ph, sec.passages[0].passage.date if sec is not None else ph.passage.date)
        if not line:
            continue
        heading = "" if sec is not None else _heading(ph, scope)
        cost = estimate_tokens(heading + line)
        if sec is None and nid in media:
            cost += estimate_tokens(_media_line(media[nid]))
        after = pending - (reserve.get(nid, 0) if sec is None else 0)
        if used + cost + after + (heading_cost if after else 0) > budget:
            continue
        used += cost
        pending = after
        if sec is None:
            sec = sections[nid] = _Section(ph.path, heading)
        sec.passages.append(ph)
    return sections, used


def _repeated(sections: dict[int, _Section]) -> set[int]:
    """The short memories shown whose whole text (without its fields) a turn shown says."""
    turns = [
        " ".join(ph.passage.text.split())
        for sec in sections.values()
        for ph in sec.passages
        if ph.passage.turn_ids
    ]
    if not turns:
        return set()
    out: set[int] = set()
    for sec in sections.values():
        for ph in sec.passages:
            if ph.passage.turn_ids or len(ph.node.l2.strip()) > len(ph.passage.text.strip()) + 1:
                continue  # a turn, or a chunk of a long node
            body = _body_words(ph.passage.text)
            if body is not None and len(body) >= 20 and any(body in t for t in turns):
                out.add(id(ph))
    return out


@functools.lru_cache(maxsize=4096)
def _body_words(text: str) -> str | None:
    """A short memory's text without its fields, its blanks made single (None: no
    document); cached, the same memories come up question after question (a YAML parse
    each time was a tenth of packing a bundle)."""
    try:
        return " ".join(parse_document(text).body.split())
    except ContextFSError:
        return None


def _trim(text: str, budget: int) -> str:
    while estimate_tokens(text) > budget:  # rounding per piece: trim the last line
        text = text[: text.rstrip("\n").rfind("\n") + 1] or text[: budget * 4]
    return text


def _short(
    text: str, scope: str, res: Results, budget: int, title: str, *, passages: bool = False
) -> str:
    """The bundle of a question nothing answers: `text` (the header and a line saying
    why), and the nearest few nodes as one-line pointers under `title`, as many as fit in
    a tenth of the budget: the path under the scope and the start of the node's L0, or
    with `passages` of its best passage ("- sessions/2023-03-06-s17 [S17:3] Maya: Nacho
    ate …"), which says why the node came up."""
    room = budget * NOTHING_SHARE
    pointers = ""
    for h in res.hits[:NEAREST_SHOWN]:
        path = h.path[len(scope) + 1 :] if scope and h.path.startswith(scope + "/") else h.path
        if passages and h.passages:
            p = h.passages[0].passage
            who = f"{p.speaker}: " if p.speaker else ""
            label = f" [{p.label}]" if p.turn_ids else ":"
            line = f"- {path}{label} {who}{_clip(p.index_text(), PASSAGE_CHARS)}\n"
        else:
            line = f"- {path}: {_clip(h.node.l0, NEAREST_CHARS)}\n"
        heading = "" if pointers else f"\n## {title}\n\n"
        if estimate_tokens(text + pointers + heading + line) > room:
            break
        pointers += heading + line
    return text + pointers


def _clip(text: str, chars: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= chars else text[: chars - 1].rstrip() + "…"


def results_json(question: str, scope: str, res: Results) -> str:
    """Machine-readable hits: each node with its score, confidence (0-1, how close it is
    to the question; null while that cannot be told) and matched tiers and passages; at the
    top, `relevant` (false when no hit is above the floor) and the best hit's confidence."""

    def passage(ph: PassageHit) -> dict:
        p = ph.passage
        out: dict[str, object] = {"index": p.index, "score": ph.score, "chars": [p.start, p.end]}
        if p.turn_ids:
            out["turns"] = list(p.turn_ids)
        if p.date:
            out["date"] = p.date
        return out

    def hit(i: int, h: Hit) -> dict:
        return {
            "rank": i + 1,
            "path": h.path,
            "score": h.score,
            "confidence": h.confidence,
            "type": h.node.type,
            "version": h.node.version,
            "tiers": h.tiers,
            "snippet": h.snippet,
            "passages": [passage(ph) for ph in h.passages[:20]],
            **({"media": h.media} if h.media else {}),
        }

    return (
        dumps_indented(
            {
                "question": question,
                "scope": scope or "/",
                "searched_by": list(res.sides),
                "note": res.note,
                "relevant": res.relevant,
                # what the question asks for that nothing found says ("a colour"), or null
                "unanswered": res.unanswered or None,
                "confidence": max(
                    (h.confidence for h in res.hits if h.confidence is not None), default=None
                ),
                "hits": [hit(i, h) for i, h in enumerate(res.hits)],
            },
        )
        + "\n"
    )


def dumps_indented(value: object) -> str:
    """`json.dumps(value, indent=2)`, the same text, in under half the time: with an
    indent the standard library encodes in pure Python, a generator step a token, and a
    `_results.json` of ten hits with their passages (30 KB) took 1.4 ms of each question.
    Keys must be strings."""
    out: list[str] = []
    _emit(value, out, "\n")
    return "".join(out)


def _emit(v: object, out: list[str], nl: str) -> None:
    if isinstance(v, str):
        out.append(_escape(v))
    elif v is None:
        out.append("null")
    elif v is True:
        out.append("true")
    elif v is False:
        out.append("false")
    elif isinstance(v, int):
        out.append(int.__repr__(v))
    elif isinstance(v, float):
        out.append(_float(v))
    elif isinstance(v, dict):
        if not v:
            out.append("{}")
            return
        inner = nl + "  "
        sep = "{" + inner
        for k, x in v.items():
            if not isinstance(k, str):
                raise TypeError(f"keys must be str, not {type(k).__name__}")
            out.append(sep)
            out.append(_escape(k))
            out.append(": ")
            _emit(x, out, inner)
            sep = "," + inner
        out.append(nl + "}")
    elif isinstance(v, list | tuple):
        if not v:
            out.append("[]")
            return
        inner = nl + "  "
        sep = "[" + inner
        for x in v:
            out.append(sep)
            _emit(x, out, inner)
            sep = "," + inner
        out.append(nl + "]")
    else:
        raise TypeError(f"Object of type {type(v).__name__} is not JSON serializable")


def _float(f: float) -> str:
    if f != f:
        return "NaN"
    if f in (math.inf, -math.inf):
        return "Infinity" if f > 0 else "-Infinity"
    return float.__repr__(f)
