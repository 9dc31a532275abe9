"""Write strategies: one entry per context-type mode (`ctxtypes.MODES`).

A strategy says how a write is routed to a node and how two documents of the type
combine. Routing of dropped files and extracted candidates (`Memory.route_document`) and
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
      the type whose items share most words with it (`Memory._similar_node`), if any.
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
