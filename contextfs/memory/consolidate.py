"""Consolidation (SPEC §7): decay, merge, archive — visibly and reversibly.

- Importance decays with age by the type's half-life and rises with access (reads of a
  node's tiers through the mount): importance = 0.5 · 0.5^(age / half-life) + boost, with
  boost = min(0.5, 0.1 · log2(1 + reads)), age counted from the last change. A type
  without a half-life (profile) never decays.
- Near-duplicate nodes of one type and owner are merged by the type's write strategy
  (`strategies.STRATEGIES`, the same entry routing uses: merge: fields by op; aggregate:
  items folded) into the older one; the newer one goes to the trash with a provenance
  note, so it can be restored. Modes whose strategy says so (append) are never merged.
- Nodes whose importance falls below the type's `min_importance` move to the owner's
  `.archive/` (not searched; `mv` back into the type directory restores them).

Every run is recorded in the store and summarised in `.status`. `consolidate()` runs in
the trio thread of the daemon (ConsolidationService) or offline (`contextfs consolidate`).
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from contextfs.ctxtypes import ContextType
from contextfs.errors import ContextFSError
from contextfs.memory.background import Service
from contextfs.memory.document import Document, is_near_duplicate, parse_document, render_document
from contextfs.memory.service import Memory
from contextfs.memory.strategies import combine_keeping_person_text, strategy_for
from contextfs.model import Node

log = logging.getLogger(__name__)

BASE_IMPORTANCE = 0.5
MAX_MERGE_GROUP = 2000  # pairwise comparison above this many nodes of one type and owner


@dataclass(slots=True)
class Report:
    decayed: int = 0
    merged: int = 0
    archived: int = 0
    details: list[str] = field(default_factory=list)
    touched: list[Node] = field(default_factory=list)

    def summary(self) -> str:
        return f"{self.decayed} re-weighted, {self.merged} merged, {self.archived} archived"


def importance(memory: Memory, n: Node, now: float) -> float:
    ctype = memory.types.get(n.type)
    half_life = ctype.half_life_days if ctype else None
    age_days = max(0.0, (now - n.updated) / 86400)
    decay = 0.5 ** (age_days / half_life) if half_life else 1.0
    boost = min(0.5, 0.1 * math.log2(1 + n.access_count))
    return round(min(1.0, BASE_IMPORTANCE * decay + boost), 6)


def _body(n: Node) -> str:
    return " ".join(parse_document(n.l2).body.split())


def consolidate(memory: Memory, *, now: float | None = None) -> Report:
    memory.check_writable()
    now = memory.clock() if now is None else now
    report = Report()
    # streamed from the store (memory.heads); the list holds this run's nodes only
    live = [n for n in memory.walk(texts=True) if n.persisted]
    # 1. merge near-duplicates (before archiving, so a merge can save a node)
    groups: dict[tuple, list[Node]] = defaultdict(list)
    for n in live:
        ctype = memory.types.get(n.type)
        if (
            ctype is not None
            and not ctype.singleton
            and strategy_for(ctype).consolidate
            and n.l2.strip()
        ):
            groups[(n.owner, n.type)].append(n)
    gone: set[int] = set()
    for (_owner, tname), nodes in groups.items():
        if len(nodes) > MAX_MERGE_GROUP:
            continue
        nodes.sort(key=lambda n: (n.created, n.id))
        ctype = memory.types[tname]
        bodies = {n.id: _body(n) for n in nodes}
        for i, keep in enumerate(nodes):
            if keep.id in gone:
                continue
            for other in nodes[i + 1 :]:
                if other.id in gone or not is_near_duplicate(bodies[keep.id], bodies[other.id]):
                    continue
                try:
                    _merge(memory, ctype, keep, other)
                except ContextFSError as exc:
                    report.details.append(f"not merged {memory.node_path(other)}: {exc}")
                    continue
                gone.add(other.id)
                report.merged += 1
                report.touched += [keep, other]
                report.details.append(
                    f"merged {memory.node_path(other)} into {memory.node_path(keep)}"
                )
                bodies[keep.id] = _body(keep)
    # 2. decay and access
    changes: dict[int, float] = {}
    for n in live:
        if n.id in gone:
            continue
        value = importance(memory, n, now)
        if abs(value - n.importance) > 1e-6:
            changes[n.id] = value
    memory.set_importance(changes)
    report.decayed = len(changes)
    # 3. archive what fell below the type's minimum
    for n in live:
        ctype = memory.types.get(n.type)
        if n.id in gone or ctype is None or not memory.is_live(n):
            continue
        if n.importance < ctype.min_importance:
            path = memory.node_path(n)
            memory.archive_node(n)
            report.archived += 1
            report.touched.append(n)
            report.details.append(
                f"archived {path} (importance {n.importance:.3f} < {ctype.min_importance})"
            )
    memory.record_consolidation(
        now,
        report.decayed,
        report.merged,
        report.archived,
        report.summary() + ("\n" + "\n".join(report.details) if report.details else ""),
    )
    log.info("consolidation: %s", report.summary())
    return report


def _merge(memory: Memory, ctype: ContextType, keep: Node, other: Node) -> None:
    old, new = parse_document(keep.l2), parse_document(other.l2)
    new_fields = {k: v for k, v in new.fields.items() if k not in ctype.key_fields}
    note = f"merged:{memory.node_path(other)}"
    if keep.person_wrote:  # a person's text is never replaced by a merge (SPEC §5)
        merged, _folded = combine_keeping_person_text(
            ctype, old, Document(new_fields, new.body), f"consolidate:{note}"
        )
    else:
        merged, _folded = strategy_for(ctype).combine(ctype, old, Document(new_fields, new.body))
    with memory.transaction():
        if note not in keep.sources:
            memory.add_source(keep, note)
        memory.save_l2(keep, render_document(ctype, merged), f"consolidate:{note}")
        memory.add_source(other, f"merged into {memory.node_path(keep)}")
        memory.delete_node(other)


class ConsolidationService(Service):
    """Runs consolidate() every `every` seconds in the daemon's nursery.

    What a run merged or archived is published by the memory's change feed like any
    commit; `on_done(report)` is optional."""

    def __init__(
        self, memory: Memory, every: float, on_done: Callable[[Report], None] | None = None
    ) -> None:
        super().__init__()
        self.memory = memory
        self.every = every
        self.on_done = on_done

    async def run(self) -> None:
        while not self.stopping:
            self._rearm()
            await self._idle(self.every)
            if self.stopping:
                return
            if self.memory.failsafe:
                continue
            try:
                report = consolidate(self.memory)
                if self.on_done is not None:
                    self.on_done(report)
            except Exception:  # noqa: BLE001 - a failed run must not stop the daemon
                log.exception("consolidation failed")
