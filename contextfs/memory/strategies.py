"""Write strategies: one entry per context-type mode (`ctxtypes.MODES`).

A strategy says how a write is routed to a node and how two documents of the type
combine. Routing of dropped files and extracted candidates (`Routing.route_document`) and
consolidation's near-duplicate merge (`consolidate._merge`) both look the type's mode up
here, so adding a mode is one entry in `STRATEGIES` (plus its name in `ctxtypes.MODES`,
which sits below this package; `Memory` refuses a type whose mode has no entry, and a
unit test checks the two lists agree).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from contextfs.ctxtypes import ContextType
from contextfs.errors import InvalidInput
from contextfs.memory.document import Document, aggregate_documents, merge_documents

# (type, old document, new document) -> (combined document, items folded as duplicates)
Combine = Callable[[ContextType, Document, Document], tuple[Document, int]]
# (type, the first document of a new node) -> (its document, items folded)
Start = Callable[[ContextType, Document], tuple[Document, int]]


@dataclass(frozen=True, slots=True)
class Strategy:
    """How writes of one mode become memory.

    - `new_node_each_write`: every write is a node of its own (its key name numbered
      `-2`, `-3`… when taken) instead of going into the node its key fields name.
    - `match_similar`: a write that does not give all its key fields joins the node of
      the type whose items share most words with it (`Routing._similar_node`), if any.
    - `start`: the document of a node a write creates.
    - `combine`: an existing node's document with a new write (routing), or a
      near-duplicate node folded into the older one (consolidation).
    - `consolidate`: whether consolidation merges near-duplicate nodes of the mode.
    """

    mode: str
    new_node_each_write: bool
    match_similar: bool
    start: Start
    combine: Combine
    consolidate: bool


def _as_written(ctype: ContextType, doc: Document) -> tuple[Document, int]:
    return doc, 0


def _merge(ctype: ContextType, old: Document, new: Document) -> tuple[Document, int]:
    return merge_documents(ctype, old, new), 0


def _aggregate_start(ctype: ContextType, doc: Document) -> tuple[Document, int]:
    # items are folded even within the first write ("- a" twice is one fact)
    if not doc.body.strip():
        return doc, 0
    return aggregate_documents(ctype, Document({}, ""), doc)


STRATEGIES: dict[str, Strategy] = {
    # fields combine by their merge ops, the body by the type's body merge
    "merge": Strategy(
        "merge",
        new_node_each_write=False,
        match_similar=False,
        start=_as_written,
        combine=_merge,
        consolidate=True,
    ),
    # body items accumulate, near-duplicates folded; a keyless write finds its topic
    "aggregate": Strategy(
        "aggregate",
        new_node_each_write=False,
        match_similar=True,
        start=_aggregate_start,
        combine=aggregate_documents,
        consolidate=True,
    ),
    # a log: every write is kept as its own node, never merged
    "append": Strategy(
        "append",
        new_node_each_write=True,
        match_similar=False,
        start=_as_written,
        combine=_merge,
        consolidate=False,
    ),
}


def strategy_for(ctype: ContextType) -> Strategy:
    try:
        return STRATEGIES[ctype.mode]
    except KeyError:
        raise InvalidInput(
            f"context type {ctype.name}: no write strategy for mode {ctype.mode!r}"
        ) from None


# ---- a machine write onto a person's text (SPEC §5) ---------------------------------------

_MACHINE_WRITERS = {"inbox:": "extraction", "session:": "extraction", "consolidate:": ""}


def machine_writer(source: str) -> str | None:
    """'extraction' or 'consolidation' when `source` (a provenance string or a version
    reason without its `route:`) names a machine write; None for a person's write."""
    for prefix, who in _MACHINE_WRITERS.items():
        if source.startswith(prefix):
            return who or "consolidation"
    return None


def _contains(old: object, new: object) -> bool:
    """Whether the combined value `new` still holds what `old` said."""
    if old is None or old == "" or old == [] or old == {} or old == new:
        return True
    if isinstance(old, str) and isinstance(new, str):
        return old.strip() in new
    if isinstance(old, list) and isinstance(new, list):
        return all(item in new for item in old)
    if isinstance(old, dict) and isinstance(new, dict):
        return all(k in new and _contains(v, new[k]) for k, v in old.items())
    return isinstance(old, int | float) and isinstance(new, int | float)  # sum: accumulates


def _line(name: str, value: object) -> str:
    if isinstance(value, list):
        value = ", ".join(str(v) for v in value)
    elif isinstance(value, dict):
        value = ", ".join(f"{k}={v}" for k, v in value.items())
    return f"- {name}: {' '.join(str(value).split())}"


def combine_keeping_person_text(
    ctype: ContextType, old: Document, new: Document, source: str
) -> tuple[Document, int]:
    """A machine write (`source` says which) onto a node a person wrote.

    The type's own combine is used when its result keeps every field value and the whole
    body the person's version had (an aggregate appending items, a field filled in);
    otherwise — a body or a field it would replace — the person's document stays as it
    is (a key or required field they left empty is filled in), and what the machine
    brought lands below their text as a section `## Added by <extraction|consolidation>
    (<source>)`, once (a fact already in the text is not added again)."""
    merged, folded = strategy_for(ctype).combine(ctype, old, new)
    if old.body.strip() in merged.body and all(
        _contains(v, merged.fields.get(k)) for k, v in old.fields.items()
    ):
        return merged, folded
    fields = dict(old.fields)
    lines = []
    for name, value in new.fields.items():
        if value is None or value == "" or value == []:
            continue
        spec = ctype.field(name)
        needed = name in ctype.key_fields or (spec is not None and spec.required)
        if needed and fields.get(name) in (None, "", [], {}):
            fields[name] = value
        elif name not in fields or not _contains(value, fields[name]):
            lines.append(_line(name, value))
    body = new.body.strip()
    added = [x for x in [*lines, body] if x and x not in old.body]
    if not added:
        return Document(fields, old.body), 0
    who = machine_writer(source) or "a machine"
    section = f"## Added by {who} ({source})\n\n" + "\n".join(lines)
    if body:
        section += ("\n\n" if lines else "") + body
    return Document(fields, old.body.rstrip() + "\n\n" + section.strip() + "\n"), 0
