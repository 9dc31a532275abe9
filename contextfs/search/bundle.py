"""The answer bundle: `_context.md` and `_results.json` of a query directory.

`_context.md` is filled where the evidence is: the matched passages, best first, each under
its node's path and date with its turn ids (the turns of one session are shown in the order
they were said), never over the budget; a passage that does not fit is skipped for a later
one that does. What room is left goes to one-line pointers (L0) to further hits. Nothing is
spent on a long tier that did not match. The header says which rankers answered.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field

from contextfs.memory.tokens import estimate_tokens
from contextfs.search.retrieval import Hit, PassageHit, Results

SIDE_NAMES = {"bm25": "BM25", "vectors": "vectors"}


@dataclass(slots=True)
class _Section:
    """One node in the bundle: its heading and the passages shown under it."""

    hit_path: str
    heading: str
    passages: list[PassageHit] = field(default_factory=list)


def _heading(ph: PassageHit) -> str:
    n = ph.node
    when = ph.passage.date or dt.datetime.fromtimestamp(n.updated, dt.UTC).strftime("%-d %B %Y")
    return f"\n## {ph.path} · {when}\n"


def _line(ph: PassageHit, heading_date: str | None) -> str:
    p = ph.passage
    text = p.text.strip()
    if p.turn_ids or p.speaker:
        who = f"{p.speaker}: " if p.speaker else ""
        date = f" ({p.date})" if p.date and p.date != heading_date else ""
        return f"- [{p.label}]{date} {who}{text}\n"
    if len(ph.node.l2.strip()) <= len(text) + 1:  # the whole L2: no span to cite
        return text + "\n"
    return f"[{p.label}] {text}\n"


def _header(question: str, scope: str, res: Results, budget: int) -> str:
    sides = " + ".join(SIDE_NAMES[s] for s in res.sides) or "nothing"
    head = (
        f"# Context for: {question}\n"
        f"{scope or '/'} · {len(res.hits)} hits · searched by {sides} · {budget} tokens\n"
    )
    if res.note:
        head += f"Note: {res.note}\n"
    if not res.hits:
        head += (
            "\nNo memory matches this question.\n"
            if not res.note
            else "\nNothing found by what has answered so far; ask again shortly.\n"
        )
    return head


def pack_context(question: str, scope: str, res: Results, budget: int) -> str:
    """The bundle, never over `budget` tokens (estimate_tokens)."""
    header = _header(question, scope, res, budget)
    if estimate_tokens(header) > budget:
        return header[: budget * 4]
    used = estimate_tokens(header)
    sections: dict[int, _Section] = {}
    for ph in res.passages:
        sec = sections.get(ph.node.id)
        heading = "" if sec is not None else _heading(ph)
        cost = estimate_tokens(heading + _line(ph, ph.passage.date))
        if used + cost > budget:
            continue
        used += cost
        if sec is None:
            sec = sections[ph.node.id] = _Section(ph.path, heading)
        sec.passages.append(ph)
    pointers = "\n## Further hits\n\n"
    further = [h for h in res.hits if h.node.id not in sections]
    shown_pointers: list[str] = []
    if further:
        used += estimate_tokens(pointers)
        for h in further:
            line = f"- {h.path}: {h.node.l0.strip()}\n"
            if used + estimate_tokens(line) > budget:
                continue
            used += estimate_tokens(line)
            shown_pointers.append(line)
    out = [header]
    for sec in sections.values():
        out.append(sec.heading)
        date = sec.passages[0].passage.date
        for ph in sorted(sec.passages, key=lambda x: x.passage.index):
            out.append(_line(ph, date))
    if shown_pointers:
        out.append(pointers + "".join(shown_pointers))
    text = "".join(out)
    while estimate_tokens(text) > budget:  # rounding per piece: trim the last line
        text = text[: text.rstrip("\n").rfind("\n") + 1] or text[: budget * 4]
    return text


def results_json(question: str, scope: str, res: Results) -> str:
    """Machine-readable hits: each node with its score and matched tiers and passages."""

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
            "type": h.node.type,
            "version": h.node.version,
            "tiers": h.tiers,
            "snippet": h.snippet,
            "passages": [passage(ph) for ph in h.passages[:20]],
        }

    return (
        json.dumps(
            {
                "question": question,
                "scope": scope or "/",
                "searched_by": list(res.sides),
                "note": res.note,
                "hits": [hit(i, h) for i, h in enumerate(res.hits)],
            },
            indent=2,
        )
        + "\n"
    )
