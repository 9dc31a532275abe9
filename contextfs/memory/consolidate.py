"""Consolidation (SPEC §7): decay, merge, archive — visibly and reversibly.

- Importance decays with age by the type's half-life and rises with access (reads of a
  node's tiers through the mount): importance = 0.5 · 0.5^(age / half-life) + boost, with
  boost = min(0.5, 0.1 · log2(1 + reads)), age counted from the last change. A type
  without a half-life (profile) never decays.
- Near-duplicate nodes of one type and owner are merged by the type's write strategy
  (`strategies.STRATEGIES`, the same entry routing uses: merge: fields by op; aggregate:
  items folded) into the older one; the newer one goes to the trash with a provenance
  note, so it can be restored. Modes whose strategy says so (append) are never merged;
  in a `merge` type, whose key says what a node is about, only nodes whose names can
  name one thing (`same_subject`) are.
- Nodes whose importance falls below the type's `min_importance` move to the owner's
  `.archive/` (not searched; `mv` back into the type directory restores them).

A run is a plan, then its application (docs/scaling.md, consolidation):

- `plan()` only reads, so the daemon runs it in a worker thread: it streams the live
  nodes' heads once (importance, what falls below its minimum, the size of each group of
  one owner and type) and compares bodies only in the groups that hold a node changed
  since the last run (the outbox seq the last run reached, in `store_meta`): a pair of
  nodes neither of which changed was compared then. Comparing is exact but never all
  pairs in Python: `_candidates` finds every pair that can pass one of
  `document.near_duplicate`'s tests (an LCS ratio by rapidfuzz in C, equal texts, a
  prefix filter for the Jaccard test) and only those are checked.
- `apply()` writes, in the memory's thread, a transaction at a time (a generator: the
  daemon lets the mount serve requests between them): each planned merge if both nodes
  are still live and still near-duplicates, the importance values in one statement a
  batch, then the archive moves.

Every run is recorded in the store and summarised in `.status`. `consolidate()` is the
two in a row (offline: `contextfs consolidate`, and the tests).
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import re
from array import array
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import trio
from rapidfuzz.distance import Indel
from rapidfuzz.process import cdist

from contextfs.ctxtypes import ContextType
from contextfs.errors import ContextFSError
from contextfs.memory.background import Service
from contextfs.memory.document import (
    JACCARD_MIN,
    JACCARD_TOKENS,
    RATIO_MIN,
    Comparable,
    Document,
    comparable,
    near_duplicate,
    parse_document,
    render_document,
)
from contextfs.memory.service import Memory
from contextfs.memory.strategies import combine_keeping_person_text, strategy_for
from contextfs.model import Node

log = logging.getLogger(__name__)

BASE_IMPORTANCE = 0.5
# Pairs one group's comparison may cost: 2,000 nodes all against all (about 4 s in C), or
# a day's 20 changed nodes against 100,000. A group past it is left alone and said so.
MAX_GROUP_PAIRS = 2000 * 1999 // 2
# More nodes changed since the last run than this: every group is compared whole.
MAX_CHANGED = 100_000
CDIST_BLOCK = 64  # rows of one group compared by one rapidfuzz call
APPLY_BATCH = 20_000  # importance values written by one transaction of `apply`
COMPARED_UPTO = "consolidation_compared_seq"  # store_meta: outbox seq the last run reached

# (stage, done, total): "nodes" read, "groups" compared
Progress = Callable[[str, int, int], None]


@dataclass(slots=True)
class Report:
    decayed: int = 0
    merged: int = 0
    archived: int = 0
    details: list[str] = field(default_factory=list)
    touched: list[Node] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # groups too big to compare

    def summary(self) -> str:
        """One line (`.status` shows it): the counts, and the groups that were not
        compared, since near duplicates there were never looked for."""
        line = f"{self.decayed} re-weighted, {self.merged} merged, {self.archived} archived"
        if self.skipped:
            line += f"; not compared (too many pairs): {', '.join(self.skipped)}"
        return line


class Stopped(Exception):
    """A plan given up because the daemon is stopping."""


@dataclass(slots=True)
class Plan:
    """What a run would do, worked out from the store without writing."""

    now: float
    upto: int  # the outbox seq read before the nodes: the next run compares what is after
    ids: array = field(default_factory=lambda: array("q"))  # nodes whose importance changes
    values: array = field(default_factory=lambda: array("d"))  # to these values
    archive: list[int] = field(default_factory=list)  # below their type's minimum
    merges: list[tuple[int, int]] = field(default_factory=list)  # (keep, other), in order
    groups: int = 0  # groups compared
    pairs: int = 0  # pairs whose texts were checked by near_duplicate
    skipped: list[str] = field(default_factory=list)  # groups too big to compare


def importance(memory: Memory, n: Node, now: float) -> float:
    ctype = memory.types.get(n.type)
    half_life = ctype.half_life_days if ctype else None
    age_days = max(0.0, (now - n.updated) / 86400)
    decay = 0.5 ** (age_days / half_life) if half_life else 1.0
    boost = min(0.5, 0.1 * math.log2(1 + n.access_count))
    return round(min(1.0, BASE_IMPORTANCE * decay + boost), 6)


def _body(l2: str) -> str:
    return " ".join(parse_document(l2).body.split())


def consolidate(
    memory: Memory, *, now: float | None = None, progress: Progress | None = None
) -> Report:
    """A whole run in this thread: `plan`, then every step of `apply`."""
    report = Report()
    begin(memory)
    for _ in apply(memory, plan(memory, now=now, progress=progress), report):
        pass
    return report


def begin(memory: Memory) -> None:
    """Record that a run begins (before its plan): a run that never records its end, the
    daemon killed or stopped during it, is said so in `.status` until the next one ends."""
    with memory.transaction():
        memory.store.begin_consolidation(memory.clock())
    log.info("a consolidation run begins")


def _merges(memory: Memory, n: Node) -> bool:
    ctype = memory.types.get(n.type)
    return ctype is not None and not ctype.singleton and strategy_for(ctype).consolidate


def plan(
    memory: Memory,
    *,
    now: float | None = None,
    progress: Progress | None = None,
    workers: int = -1,
    stopping: Callable[[], bool] = lambda: False,
) -> Plan:
    """What to re-weigh, merge and archive; reads only (any thread). `workers`: threads of
    the text comparisons (-1: a core each; the daemon leaves the other core to the mount).
    `stopping()` is asked between batches: True ends the plan with `Stopped` (an unmount
    does not wait for a first run over a million nodes)."""
    memory.check_writable()
    store = memory.store
    out = Plan(now=memory.clock() if now is None else now, upto=store.outbox_upto())
    since = store.meta(COMPARED_UPTO)
    changed = None if since is None else store.nodes_changed_since(int(since), MAX_CHANGED)
    fresh = None if changed is None else set(changed)
    sizes: Counter[tuple] = Counter()  # nodes of each group (owner, type)
    changed_in: Counter[tuple] = Counter()  # of them changed since the last run
    total = store.node_counts()[1]  # (not memory.live: its counts are the trio thread's)
    for done, n in enumerate(memory.walk(live=True), 1):
        if done % 10_000 == 0:
            if stopping():
                raise Stopped
            if progress is not None:
                progress("nodes", done, total)
        if not n.persisted:
            continue
        value = importance(memory, n, out.now)
        if abs(value - n.importance) > 1e-6:
            out.ids.append(n.id)
            out.values.append(value)
        ctype = memory.types.get(n.type)
        if ctype is not None and value < ctype.min_importance:
            out.archive.append(n.id)
        if _merges(memory, n):
            sizes[(n.owner, n.type)] += 1
            if fresh is None or n.id in fresh:
                changed_in[(n.owner, n.type)] += 1
    if progress is not None:
        progress("nodes", total, total)
    for done, (group, rows) in enumerate(sorted(changed_in.items()), 1):
        if stopping():
            raise Stopped
        (owner, tname), size = group, sizes[group]
        if rows * size - rows * (rows + 1) // 2 > MAX_GROUP_PAIRS:  # pairs with a changed node
            out.skipped.append(f"{owner[0]}/{owner[1]}/{tname} ({size} nodes)")
        else:
            nodes = [n for n in memory.walk(owner=owner, types=(tname,), live=True)]
            out.merges += _plan_group(
                memory, [n for n in nodes if n.persisted], fresh, out, workers
            )
            out.groups += 1
        if progress is not None:
            progress("groups", done, len(changed_in))
    return out


def _plan_group(
    memory: Memory, nodes: list[Node], fresh: set[int] | None, out: Plan, workers: int
) -> list[tuple[int, int]]:
    """The merges of one group, the oldest node the keeper. The keeper is compared by its
    text as it is: `apply` checks each merge again with the text the earlier merges made,
    and a keeper that changed is compared anew by the next run (it is in the outbox)."""
    l2s = memory.texts.read_l2(nodes)
    nodes = [n for n in nodes if l2s.get(n.id, "").strip()]
    nodes.sort(key=lambda n: (n.created, n.id))
    keys = [comparable(_body(l2s[n.id])) for n in nodes]
    rows = [i for i, n in enumerate(nodes) if fresh is None or n.id in fresh]
    near = _candidates(keys, rows, range(len(nodes)), workers)
    merges: list[tuple[int, int]] = []
    gone: set[int] = set()
    for i, keep in enumerate(nodes):
        if i in gone:
            continue
        for j in sorted(j for j in near[i] if j > i):
            if j in gone:
                continue
            out.pairs += 1
            if not _may_merge(memory, keep, nodes[j]) or not near_duplicate(keys[i], keys[j]):
                continue
            merges.append((keep.id, nodes[j].id))
            gone.add(j)
    return merges


_WORDS = re.compile(r"[^\W_]+")


def _stem(word: str) -> str:
    """`spaces`, `space` -> `spac`; `classes` -> `class`; `coding`, `code` -> `cod`."""
    if word.endswith("ing") and len(word) > 5:
        word = word[:-3]
    elif word.endswith(("sses", "xes", "zes", "ches", "shes")):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith("ss") and len(word) > 3:
        word = word[:-1]
    return word.rstrip("e") or word


def _may_merge(memory: Memory, a: Node, b: Node) -> bool:
    """In a `merge` type a node's key is what it is about (one node per person, per
    topic): two keys are two memories however alike their bodies read, unless the names
    can name one thing. An `aggregate` type gathers items by likeness whatever the key."""
    ctype = memory.types.get(a.type)
    return ctype is None or ctype.mode != "merge" or same_subject(a.name, b.name)


def same_subject(a: str, b: str) -> bool:
    """Whether two node names can name one thing: the same words but for a plural or an
    -ing (`tests`, `testing`) or a separator (`proj-x`, `projx`), or one's words among the
    other's (`tea`, `green-tea`). Two nodes whose bodies read alike under names that say
    otherwise are two things: `maria` and `joao` ("… of the owner, lives in Lisbon"),
    `reply-length` and `reply-language`, `tabs` and `spaces`."""
    words_a, words_b = _WORDS.findall(a.lower()), _WORDS.findall(b.lower())
    wa, wb = {_stem(w) for w in words_a}, {_stem(w) for w in words_b}
    return wa <= wb or wb <= wa or "".join(words_a) == "".join(words_b)


def _candidates(
    keys: list[Comparable], rows: list[int], among: Iterable[int], workers: int
) -> list[set[int]]:
    """For each node, the others (of `among`) that may be its near-duplicates, for every
    pair with a node of `rows` in it: all that can pass `near_duplicate` (a superset)."""
    near: list[set[int]] = [set() for _ in keys]
    among = list(among)
    if not rows or not among:
        return near

    def link(i: int, j: int) -> None:
        if i != j:
            near[i].add(j)
            near[j].add(i)

    # equal texts (the empty ones too)
    by_norm: dict[str, list[int]] = defaultdict(list)
    for j in among:
        by_norm[keys[j].norm].append(j)
    for i in rows:
        for j in by_norm.get(keys[i].norm, ()):
            link(i, j)
    # the ratio test: difflib's ratio is never above the LCS ratio (document.ratio_at_least);
    # by blocks of rows, each against what is not a row or is a later one: every pair once
    rows = sorted(rows)
    in_rows = set(rows)
    for start in range(0, len(rows), CDIST_BLOCK):
        block = rows[start : start + CDIST_BLOCK]
        cols = [j for j in among if j not in in_rows or j > block[0]]
        scores = cdist(
            [keys[i].norm for i in block],
            [keys[j].norm for j in cols],
            scorer=Indel.normalized_similarity,
            score_cutoff=RATIO_MIN - 1e-9,
            workers=workers,  # in C, without the GIL: the mount goes on answering
        )
        for a, b in zip(*np.nonzero(scores), strict=True):
            link(block[a], cols[b])
    # the Jaccard test, by prefix filtering: with every token set ordered the same way
    # (rarest first), two sets whose Jaccard is at least t share a token among the first
    # |s| - ceil(t·|s|) + 1 of each
    freq = Counter(t for j in among for t in keys[j].words)
    for i in rows:
        freq.update(keys[i].words)

    def prefix(words: frozenset[str]) -> list[str]:
        ordered = sorted(words, key=lambda t: (freq[t], t))
        return ordered[: len(ordered) - math.ceil(JACCARD_MIN * len(ordered) - 1e-9) + 1]

    holders: dict[str, list[int]] = defaultdict(list)
    for j in among:
        if len(keys[j].words) >= JACCARD_TOKENS:
            for t in prefix(keys[j].words):
                holders[t].append(j)
    for i in rows:
        if len(keys[i].words) >= JACCARD_TOKENS:
            for t in prefix(keys[i].words):
                for j in holders.get(t, ()):
                    link(i, j)
    return near


def apply(memory: Memory, plan: Plan, report: Report) -> Iterator[None]:
    """Write what `plan` found, in the memory's thread, yielding after each transaction.
    What changed since the plan is looked at again: a merge needs both nodes live and
    still near-duplicates; an archive move, the importance as it is now."""
    memory.check_writable()
    now = plan.now
    gone: set[int] = set()
    kept: set[int] = set()
    for keep_id, other_id in plan.merges:
        keep, other = memory.nodes.get(keep_id), memory.nodes.get(other_id)
        if keep is None or other is None or not memory.is_live(keep) or not memory.is_live(other):
            continue
        if not _may_merge(memory, keep, other) or not near_duplicate(
            comparable(_body(keep.l2)), comparable(_body(other.l2))
        ):
            continue  # changed since the plan
        ctype = memory.types[keep.type]
        try:
            _merge(memory, ctype, keep, other)
        except ContextFSError as exc:
            report.details.append(f"not merged {memory.node_path(other)}: {exc}")
            continue
        gone.add(other_id)
        kept.add(keep_id)
        report.merged += 1
        report.touched += [keep, other]
        report.details.append(f"merged {memory.node_path(other)} into {memory.node_path(keep)}")
        yield
    # 2. decay and access (a merged keeper is weighed as it is now: it just changed)
    changes: dict[int, float] = {}
    for nid, value in zip(plan.ids, plan.values, strict=True):
        if nid not in gone and nid not in kept:
            changes[nid] = value
        if len(changes) >= APPLY_BATCH:
            memory.set_importance(changes)
            report.decayed += len(changes)
            changes = {}
            yield
    for nid in kept:
        n = memory.nodes.get(nid)
        if n is not None and abs((value := importance(memory, n, now)) - n.importance) > 1e-6:
            changes[nid] = value
    memory.set_importance(changes)
    report.decayed += len(changes)
    yield
    # 3. archive what fell below the type's minimum
    for start in range(0, len(plan.archive), 1000):
        batch = plan.archive[start : start + 1000]
        held = memory.nodes.get_many(batch)
        for nid in batch:
            n = held.get(nid)
            ntype = memory.types.get(n.type) if n is not None else None
            if n is None or nid in gone or ntype is None or not memory.is_live(n):
                continue
            if importance(memory, n, now) < ntype.min_importance:
                path = memory.node_path(n)
                memory.archive_node(n)
                report.archived += 1
                report.touched.append(n)
                report.details.append(
                    f"archived {path} (importance {n.importance:.3f} < {ntype.min_importance})"
                )
                yield
    report.skipped = list(plan.skipped)
    for group in plan.skipped:
        report.details.append(f"not compared {group}: too many pairs")
    # recorded when it ran, so the newest run is the last one `.status` shows; a run as
    # of another day (`contextfs consolidate --now`) says which
    ran = memory.clock()
    summary = report.summary() + ("\n" + "\n".join(report.details) if report.details else "")
    if abs(ran - now) > 86400:  # not a long run: a run as of another day
        as_of = dt.datetime.fromtimestamp(now, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        summary = f"as of {as_of}: {summary}"
    with memory.transaction():
        memory.record_consolidation(ran, report.decayed, report.merged, report.archived, summary)
        memory.store.set_meta(COMPARED_UPTO, str(plan.upto))
    log.info(
        "consolidation: %s (%d group(s) compared, %d pair(s) checked)",
        report.summary(),
        plan.groups,
        plan.pairs,
    )


def _combined(ctype: ContextType, keep: Node, keep_l2: str, other_l2: str, note: str) -> Document:
    old, new = parse_document(keep_l2), parse_document(other_l2)
    new_fields = {k: v for k, v in new.fields.items() if k not in ctype.key_fields}
    if keep.person_wrote:  # a person's text is never replaced by a merge (SPEC §5)
        merged, _folded = combine_keeping_person_text(
            ctype, old, Document(new_fields, new.body), f"consolidate:{note}"
        )
    else:
        merged, _folded = strategy_for(ctype).combine(ctype, old, Document(new_fields, new.body))
    return merged


def _merge(memory: Memory, ctype: ContextType, keep: Node, other: Node) -> None:
    note = f"merged:{memory.node_path(other)}"
    merged = _combined(ctype, keep, keep.l2, other.l2, note)
    with memory.transaction():
        if note not in keep.sources:
            memory.add_source(keep, note)
        memory.save_l2(keep, render_document(ctype, merged), f"consolidate:{note}")
        memory.add_source(other, f"merged into {memory.node_path(keep)}")
        memory.delete_node(other)


class ConsolidationService(Service):
    """A consolidation run every `every` seconds in the daemon's nursery: `plan` in a
    worker thread, `apply` in the trio thread.

    What a run merged or archived is published by the memory's change feed like any
    commit; its followers get each run's `Report`."""

    def __init__(self, memory: Memory, every: float) -> None:
        super().__init__()
        self.memory = memory
        self.every = every

    async def run(self) -> None:
        while not self.stopping:
            self._rearm()
            await self._idle(self.every)
            if self.stopping:
                return
            if self.memory.failsafe:
                continue
            if not self.memory.claim("lead", 0):
                # on a shared store one mount, the leader, runs it for all: the first to
                # take the claim, until it stops (then the next run's first)
                continue
            try:
                begin(self.memory)
                # the comparing in a worker thread; the writes here, a transaction at a
                # time, the mount answering between them
                found = await trio.to_thread.run_sync(
                    partial(plan, self.memory, workers=1, stopping=lambda: self.stopping)
                )
                report = Report()
                for _ in apply(self.memory, found, report):
                    await trio.sleep(0)
                self._tell(report)
            except Stopped:
                return
            except Exception:  # noqa: BLE001 - a failed run must not stop the daemon
                log.exception("consolidation failed")
