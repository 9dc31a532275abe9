"""Hybrid retrieval: what a question matches, as nodes and as passages.

One query embedding; vector search over every unit (L0, L1, and the passages of L2: a turn
of a session archive, a chunk of any other L2) plus BM25 over the same units; reciprocal-rank
fusion per unit; nodes rank by their best unit (an L0 or L1 hit leads to its node); scoped by
path and type. `bundle.py` turns the result into `_context.md` and `_results.json`.

Runs in a worker thread (embedding, hnswlib, tantivy); the indexes are shared with the
indexer under its lock.
"""

from __future__ import annotations

import functools
import heapq
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from contextfs.errors import InvalidInput
from contextfs.index.embed import LOCAL_MODEL_NAME
from contextfs.index.text import TextHit
from contextfs.index.vectors import Snapshot
from contextfs.memory.service import Memory
from contextfs.memory.texts import LazyNode
from contextfs.memory.tokens import estimate_tokens
from contextfs.model import Node
from contextfs.search.answers import wanted
from contextfs.search.images import IMAGE_TYPE, original_of
from contextfs.search.indexer import Indexer, label_node, label_unit
from contextfs.search.names import EntityNames
from contextfs.search.passages import SESSION_TYPE, Passage, node_passages

RRF_K = 60  # the usual reciprocal-rank-fusion constant
DEFAULT_K = 10
DEFAULT_BUDGET = 2000  # tokens (estimate_tokens: one per four characters)
# Searcher.warm_up: plain questions, of common words and of none (any store's segments)
WARM_UP_QUESTIONS = (
    "what did we decide about the project and the meeting",
    "notes on preferences, habits and the schedule",
    "who, when, where",
)


@dataclass(frozen=True, slots=True)
class QueryOptions:
    k: int = DEFAULT_K
    budget: int = DEFAULT_BUDGET
    type: str | None = None

    def key(self) -> tuple:
        return (self.k, self.budget, self.type)


def parse_options(segment: str, known_types: set[str]) -> QueryOptions:
    """`@k=20,budget=4000,type=event` -> QueryOptions; EINVAL with the reason otherwise."""
    if not segment.startswith("@"):
        raise InvalidInput("an options segment starts with '@'")
    numbers: dict[str, int] = {}  # k, budget
    type_name: str | None = None
    given: set[str] = set()
    for part in filter(None, segment[1:].split(",")):
        key, eq, value = part.partition("=")
        key = key.strip()
        if not eq or not value:
            raise InvalidInput(f"query option {part!r} needs a value (key=value)")
        if key in given:  # `@k=2,k=3`: which one was meant cannot be told
            raise InvalidInput(f"query option {key} is given twice")
        given.add(key)
        if key in ("k", "budget"):
            try:
                number = int(value)
            except ValueError:
                raise InvalidInput(f"query option {key} must be a whole number") from None
            lo, hi = (1, 100) if key == "k" else (50, 100_000)
            if not lo <= number <= hi:
                raise InvalidInput(f"query option {key} must be between {lo} and {hi}")
            numbers[key] = number
        elif key == "type":
            if value not in known_types:
                raise InvalidInput(
                    f"unknown type {value!r} in query options; known: "
                    + ", ".join(sorted(known_types))
                )
            type_name = value
        else:
            raise InvalidInput(f"unknown query option {key!r}; known: k, budget, type")
    return QueryOptions(**numbers, type=type_name)


@dataclass(frozen=True, slots=True)
class PassageHit:
    """A matched passage: a turn of a session archive or a chunk of an L2."""

    node: Node
    path: str
    passage: Passage
    score: float


@dataclass(slots=True, eq=False)
class _Candidate:
    """A passage while a search ranks it: its node and number, its text not read yet (its
    node's path too: made for the passages read). Replaced, never changed (not frozen: a
    frozen dataclass's __init__ costs four times as much, and a search makes hundreds)."""

    node: Node
    index: int
    score: float


@dataclass(frozen=True, slots=True)
class _Question:
    """One question on its way through `Searcher.search`'s steps."""

    text: str  # as asked
    asked: str  # as the rankers get it: without the participants' names
    scope: str
    opts: QueryOptions
    allowed: Callable[[Node | None], TypeGuard[Node]]  # live, in scope, of the type, readable
    reader_key: str
    depth: int  # units asked of each ranker (`unit_depth`)
    vectors_on: bool
    qvec: Any  # the question's embedding (None while vectors are off)
    scale: tuple[float, float] | None  # the embedder's (floor, sure) similarities, if known


@dataclass(frozen=True, slots=True)
class _Found:
    """What the rankers returned for a question."""

    text_hits: list[TextHit]
    vec_hits: list[tuple[int, float]]  # (label, similarity)
    image_hits: list[tuple[int, float]]  # (node id, similarity)
    images_on: bool
    counts: dict[int, int]  # node id -> passages the index holds (`Indexer.passage_counts`)
    held: dict[int, Node]  # every candidate's head, kept for the rest of the search
    _passages: dict[int, int] = field(default_factory=dict)  # node id -> passage_count

    def passage_count(self, n: Node) -> int:
        """How many passages n has (asked for each of its units: counted once)."""
        got = self._passages.get(n.id)
        if got is None:
            got = self._passages[n.id] = count_passages(n, self.counts.get(n.id))
        return got


@dataclass(slots=True)
class _Fused:
    """The rankers' lists fused: passages by unit, nodes by their best unit."""

    unit_score: dict[tuple[int, str, int], float] = field(default_factory=dict)
    node_score: dict[int, float] = field(default_factory=dict)
    text_rank: dict[int, int] = field(default_factory=dict)  # node -> its rank by BM25
    # the units each ranker found, (node, tier, chunk): `tiers_of` the k hits shown
    # (a set for every node found, made during the fusion, was hundreds a search)
    units: tuple[list[tuple[int, str, int]], ...] = ()
    images: list[int] = field(default_factory=list)  # nodes CLIP found
    best_unit: dict[int, tuple[str, int]] = field(default_factory=dict)  # by BM25
    image_bonus: dict[int, float] = field(default_factory=dict)  # CLIP's, by node
    # node -> the cosine of its closest unit to the question (the vectors' hits only)
    similarity: dict[int, float] = field(default_factory=dict)
    # the similarity of a node the vectors did not return: at most that of their last hit
    below: float | None = None

    @property
    def far(self) -> int:
        """The BM25 rank of a node BM25 did not find (ties sort it after those it did)."""
        return len(self.node_score) + 1

    def tiers_of(self, nids: set[int]) -> dict[int, set[str]]:
        """The tiers that matched of these nodes (any ranker's unit, or CLIP's picture)."""
        out: dict[int, set[str]] = {}
        for keys in self.units:
            for nid, tier, _chunk in keys:
                if nid in nids:
                    out.setdefault(nid, set()).add(tier)
        for nid in self.images:
            if nid in nids:
                out.setdefault(nid, set()).add("image")
        return out


def _passage(n: Node, index: int) -> Passage | None:
    """Passage `index` of n's current L2, if it has one (reads n's text)."""
    ps = node_passages(n)
    return ps[index] if 0 <= index < len(ps) else None


def _unit_text(n: Node, tier: str, chunk: int) -> str:
    """The text of one of n's index units, as `units_of` makes it ("" when n changed
    since it was indexed), without making the others."""
    if tier in ("L0", "L1"):
        return (n.l0 if tier == "L0" else n.l1).strip()
    p = _passage(n, chunk)
    return p.index_text() if p is not None else ""


def count_passages(n: Node, indexed: int | None) -> int:
    """How many passages n has: from its text when that is in memory or the index has no
    unit of it (`indexed` None), else from the index (`Indexer.passage_counts`) without
    reading the text. The index holds no L2 unit of a node whose L2 is empty or is one
    passage that repeats its L0 or L1; the L2's size tells the two apart."""
    if indexed is None or not isinstance(n, LazyNode) or n.loaded:
        return len(node_passages(n))
    return indexed if indexed > 0 else int(n.tier_size("L2") > 0)


@dataclass(slots=True)
class Hit:
    """A matched node: the links of a query directory, best first."""

    node: Node
    path: str
    score: float
    tiers: list[str] = field(default_factory=list)
    snippet: str = ""
    passages: list[PassageHit] = field(default_factory=list)  # its matched passages
    media: str = ""  # an image node: the path of its original bytes
    confidence: float | None = None  # 0-1, how close it is to the question (`confidence`)


@dataclass(slots=True)
class Results:
    """What one question found: nodes (k of them), every matched passage, and which
    rankers answered (BM25 from the first second of a mount, vectors once the model is in)."""

    hits: list[Hit]
    passages: list[PassageHit]
    sides: tuple[str, ...]
    note: str = ""  # why a side is missing, when one is
    # whether anything found is relevant (a hit's confidence above 0); None while it
    # cannot be told (BM25 alone, or an embedder whose similarities are not calibrated)
    relevant: bool | None = None
    # what the question asks for ("a colour") when it says and no passage read holds
    # anything of that kind (`search.answers`); "" otherwise
    unanswered: str = ""


# Words that carry no topic: dropped from the BM25 side of a question (the vector side
# sees the whole question). Without this, "what does she like" matches every "she".
_STOPWORD_TEXT = """
a about above after again against all am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further
had has have having he her here hers herself him himself his how i if in into is it its
itself just me more most my myself no nor not now of off on once only or other our ours out
over own same she should so some such than that the their theirs them themselves then there
these they this those through to too under until up very was we were what when where which
while who whom why will with would you your yours yourself kind sort thing things
"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())


def keywords(question: str) -> str:
    words = question.split()
    kept = [w for w in words if w.strip("?!.,;:'\"()").lower() not in STOPWORDS]
    return " ".join(kept) if kept else question


def _unanswered(question: str, passages: list[PassageHit]) -> str:
    """What `question` asks for ("a colour"), when it says and none of the passages read
    (the bundle's and the first hits' others) holds anything of that kind; "" otherwise."""
    want = wanted(question, keywords(question))
    if want is None or not passages:
        return ""
    if want.found_in((ph.passage.index_text(), ph.passage.speaker) for ph in passages):
        return ""
    return want.what


def _in_scope(path: str, scope: str) -> bool:
    return not scope or path == scope or path.startswith(scope + "/")


class Searcher:
    def __init__(self, memory: Memory, indexer: Indexer, *, warm_up: bool = False) -> None:
        """`warm_up`: ask the indexer to run `warm_up` once its model is in (a mount's)."""
        self.memory = memory
        self.indexer = indexer
        if warm_up:
            indexer.add_warm_up(self.warm_up)
        self._archives: dict[tuple[str, str, str], Node] = {}  # (kind, owner, source)
        self._archives_at = -1  # the store generation the table reflects
        self.names = EntityNames(memory)
        # owner (None: everyone) -> (store generation, the speakers of that owner's session
        # archives, whether it has any) (`_participants`, `_has_sessions`): one entry per
        # owner, as an agent asking of one owner and of everything does not read them again
        # at every switch
        self._sessions: dict[tuple[str, str] | None, tuple[int, tuple[str, ...], bool]] = {}
        # (scope, type, reader, store and vector generations) -> that scope's vectors; read
        # and written under the indexer's lock
        self._snapshots: dict[tuple[str, str | None, str, int, int], Snapshot] = {}

    def warm_up(self) -> None:
        """Worker thread, once the model is in: ask `WARM_UP_QUESTIONS` and drop the answers.

        At a million nodes the first four questions after a mount took 190-330 ms where
        the ones after took 70-110 (bench_scale, fresh store): 2-3x the daemon's CPU and
        30-60 major page faults each. What a first question touches is loaded lazily and
        shared by every later one: the text index's per-segment readers (field norms,
        fast fields, the doc store's index), the first forward pass of the model, the
        store's buffer pool and the pages of its files."""
        for question in WARM_UP_QUESTIONS:
            self.search(question, "", QueryOptions())

    def _scoped_labels(self, scope: str) -> list[int] | None:
        """The vector labels of a scope under one owner, when few enough to compare them
        all exactly (an hnswlib filter callback per candidate is slow for small scopes)."""
        owner = _owner_of(scope)
        if owner is None:
            return None
        ids = self.memory.live.ids(owner)  # by SQL, the committed rows (memory.heads)
        return self.indexer.labels_of_nodes(ids, SCOPED_EXACT_MAX)

    def _scoped_vectors(
        self,
        scope: str,
        type_name: str | None,
        allowed: Callable[[Node | None], bool],
        reader_key: str = "",
    ) -> Snapshot | None:
        """The vectors of a small scope, kept while neither the store nor the vector index
        has moved (an agent asks one owner many questions in a row). Under the indexer's
        lock."""
        key = (scope, type_name, reader_key, self.memory.generation, self.indexer.epoch)
        snap = self._snapshots.get(key)
        if snap is not None:
            return snap
        scoped = self._scoped_labels(scope)
        if scoped is None or self.indexer.vectors is None:
            return None
        nodes = self.memory.nodes
        snap = self.indexer.vectors.snapshot(
            [x for x in scoped if allowed(nodes.get(label_node(x)))]
        )
        if len(self._snapshots) >= SNAPSHOTS_KEPT:
            self._snapshots.pop(next(iter(self._snapshots)))
        self._snapshots[key] = snap
        return snap

    def search(
        self,
        question: str,
        scope: str,
        opts: QueryOptions,
        readable: Callable[[Node], bool] | None = None,
        reader_key: str = "",
    ) -> Results:
        """Worker thread. Scope is a mount-relative path ('' = everything). `readable`
        keeps only the nodes a caller may read (`reader_key` names that caller, for the
        cached scope vectors).

        A pipeline of named steps: `_question` (who may see what, the question as the
        rankers get it), `_retrieve` (BM25, vectors, CLIP), `_fuse` (reciprocal-rank
        fusion of units and of nodes), `_node_hits` (the links, best first),
        `_passage_candidates` (the passages, ranked by number), `_named_memories` (a
        memory the question names goes first), three expansions (`_add_named_entities`,
        `_add_entity_mentions`, `_add_linked_turns`), `_fill_gaps` (the turn between two
        of the best), `_read_passages` (their texts, within the budget), `_snippets`,
        `_relevant` (is anything close enough to the question to be worth showing),
        `_unanswered` (do the passages hold the kind of answer it asks for) and `_sides`."""
        ix = self.indexer
        if ix.text is None:
            return Results([], [], (), note=f"the search index is not open yet ({ix.state})")
        if not question.strip():
            return Results([], [], ())
        q = self._question(question, scope, opts, readable, reader_key)
        found = self._retrieve(q)
        fused = self._fuse(q, found)
        by_node = self._node_hits(q, found, fused)
        cands = self._passage_candidates(q, found, fused, by_node)
        by_node = self._named_memories(q, cands, by_node)
        self._add_named_entities(question, cands, by_node, q.allowed, q.scale is not None)
        self._add_entity_mentions(question, scope, cands, by_node, q.allowed)
        self._add_linked_turns(cands, by_node, q.allowed)
        text_rank, far = fused.text_rank, fused.far
        cands.sort(key=lambda c: (-c.score, text_rank.get(c.node.id, far), -c.node.id))
        if _fill_gaps(cands, opts.budget):
            cands.sort(key=lambda c: (-c.score, text_rank.get(c.node.id, far), -c.node.id))
        hits = list(by_node.values())[: opts.k]
        self._shown(hits, fused)
        passages = self._read_passages(cands, opts.budget, {h.node.id for h in hits})
        for ph in passages:
            by_node[ph.node.id].passages.append(ph)
        self._snippets(question, hits, fused.best_unit)
        sides, note = self._sides(q, found)
        relevant = self._relevant(q, by_node, found)
        unanswered = _unanswered(question, passages) if relevant is not False else ""
        return Results(hits, passages, sides, note, relevant, unanswered)

    def _question(
        self,
        question: str,
        scope: str,
        opts: QueryOptions,
        readable: Callable[[Node], bool] | None,
        reader_key: str,
    ) -> _Question:
        """The question as the rankers get it, and which nodes may answer it."""
        memory = self.memory

        seen: dict[int, bool] = {}  # node id -> allowed: a search asks of a node often

        def allowed(n: Node | None) -> TypeGuard[Node]:
            if n is None:
                return False
            ok = seen.get(n.id)
            if ok is None:
                ok = seen[n.id] = (
                    memory.is_live(n)
                    and (opts.type is None or n.type == opts.type)
                    and (not scope or _in_scope(memory.node_path(n), scope))
                    and (readable is None or readable(n))
                )
            return ok

        emb = self.indexer.embedder  # once: the model may fail and be dropped meanwhile
        vectors_on = self.indexer.ready and emb is not None
        asked = self._without_participants(question, scope)
        qvec = emb.embed([asked])[0] if emb is not None and vectors_on else None
        scale = SIMILARITY_SCALE.get(emb.name) if emb is not None and vectors_on else None
        return _Question(
            question,
            asked,
            scope,
            opts,
            allowed,
            reader_key,
            unit_depth(opts),
            vectors_on,
            qvec,
            scale,
        )

    def _retrieve(self, q: _Question) -> _Found:
        """What each ranker finds: units by BM25 and by vectors, pictures by CLIP; and how
        many passages the index holds of each candidate."""
        ix = self.indexer
        nodes = self.memory.nodes
        allowed = q.allowed
        # BM25 first, then the vectors and what they hold of each candidate under one hold
        # of the indexer's lock: a node whose vectors land between the two readings would
        # be counted as held (no stand-in rank on the vector side, `_fuse`) yet missing
        # from the vector hits, and rank below older nodes only for that (fsync, then a
        # question at once, meets exactly this moment).
        text_hits = ix.search_text(keywords(q.asked), q.depth, path_prefix=q.scope or None)
        vec_hits: list[tuple[int, float]] = []
        counts: dict[int, int] = {}
        with ix.lock:  # the indexer's digests (labels_of) belong to its lock too
            if q.qvec is not None and ix.vectors is not None:
                snap = (
                    self._scoped_vectors(q.scope, q.opts.type, allowed, q.reader_key)
                    if q.scope
                    else None
                )
                if snap is not None:  # a small subtree: exact, no graph walk with a filter
                    vec_hits = snap.nearest(q.qvec, q.depth)
                else:
                    vec_hits = ix.vectors.search(
                        q.qvec,
                        q.depth,
                        allow=None
                        if not q.scope and q.opts.type is None
                        else lambda label: allowed(nodes.get(label_node(label))),
                    )
            # every candidate node, vectors' first: listed once for both uses below
            ids = list(
                dict.fromkeys(
                    [label_node(label) for label, _sim in vec_hits] + [h.node_id for h in text_hits]
                )
            )
            if q.vectors_on:
                counts = ix.passage_counts(ids)
        # the CLIP side: pictures near the question in CLIP's space (their own index)
        images = ix.images
        images_on = images is not None and images.ready and q.opts.type in (None, IMAGE_TYPE)
        image_hits = (
            images.search(q.asked, q.depth, allow=lambda nid: allowed(nodes.get(nid)))
            if images is not None and images_on
            else []
        )
        # Every candidate's head in one query: a node the memory does not hold is a row to
        # read, and one query each (~1 ms) was most of a search over a big store (480 a
        # question). Referenced by `held`, they stay held for the rest of the search.
        held = nodes.get_many(ids)
        return _Found(text_hits, vec_hits, image_hits, images_on, counts, held)

    def _fuse(self, q: _Question, found: _Found) -> _Fused:
        """Reciprocal-rank fusion twice. Nodes: each ranker ranks nodes by their best unit
        (an L0 or L1 hit stands for its node), as for the links. Passages: each ranker's
        own unit ranks, so the bundle shows the turn or chunk that matched.

        Runs over every unit found (about 500 at the default budget): one pass a ranker,
        over locals; the tiers that matched are left to the k hits shown (`_shown`)."""
        memory = self.memory
        get, held = memory.nodes.get, found.held

        def node(nid: int) -> Node | None:
            """A candidate's head: the one `held` keeps (the object `memory.nodes.get`
            gives while it is held, without the cache's LRU bookkeeping), else get's."""
            n = held.get(nid)
            return n if n is not None else get(nid)

        fused = _Fused()
        vec_hits = found.vec_hits
        vec_units = [label_unit(label) for label, _sim in vec_hits]
        similarity = fused.similarity
        for key, (_label, sim) in zip(vec_units, vec_hits, strict=True):
            if key[0] not in similarity:  # best first: a node's first is its closest
                similarity[key[0]] = sim
        if vec_hits and len(vec_hits) >= q.depth:
            fused.below = vec_hits[-1][1]
        allowed = q.allowed
        text_units = [
            (h.node_id, h.tier, h.chunk) for h in found.text_hits if allowed(node(h.node_id))
        ]
        fused.units = (vec_units, text_units)
        # How many passages each candidate has: the index knows (its units), so the texts
        # of hundreds of candidates are not read from the store to count them (at a
        # million nodes that read was a third of a question's time). Nodes the index
        # holds no unit of, or every node while vectors are off (the units are counted
        # where the vectors are), are counted from their texts, read in one query.
        counts = found.counts
        uncounted = [
            nid
            for nid in dict.fromkeys(key[0] for keys in fused.units for key in keys)
            if nid not in counts
        ]
        if uncounted:
            memory.texts.prefetch([node(nid) for nid in uncounted])
        unit_score = fused.unit_score
        passage_count = found.passage_count
        single: dict[int, bool] = {}  # node id -> whether it is one passage
        node_rank: tuple[dict[int, int], ...] = ({}, {}, {})
        pending: list[tuple[tuple[int, str, int], int]] = []  # BM25 passages with no vectors
        for side, keys in enumerate(fused.units):
            weight, ranking, rank = SIDE_WEIGHT[side], node_rank[side], 0
            for key in keys:
                # passages rank among passages: summaries of long nodes do not push them
                # down (a short node's one unit is its L0, which stands for its one passage)
                nid, tier, _chunk = key
                one: bool | None = tier == "L2"
                if not one:
                    one = single.get(nid)
                    if one is None:
                        n = node(nid)
                        one = single[nid] = n is not None and passage_count(n) == 1
                if one:
                    unit_score[key] = unit_score.get(key, 0.0) + weight / (RRF_K + rank + 1)
                    if side == 1 and q.vectors_on and nid not in counts:
                        pending.append((key, rank))
                    rank += 1
                if nid not in ranking:
                    ranking[nid] = len(ranking)
        # A passage of a node the vectors hold nothing of yet (saved moments ago, its
        # vectors queued) stands on the vector side at its BM25 rank, as its node does
        # below: else the bundle put the older nodes' passages, found by both sides, ahead
        # of the one just written that the links list first.
        for key, rank in pending:
            unit_score[key] += SIDE_WEIGHT[0] / (RRF_K + rank + 1)
        # CLIP ranks pictures, not passages: its score goes to the picture's first passage
        # (its caption or derived text), on top of what the text rankers gave it
        for rank, (nid, _sim) in enumerate(found.image_hits):
            node_rank[2][nid] = rank
            fused.images.append(nid)
            fused.image_bonus[nid] = SIDE_WEIGHT[2] / (RRF_K + rank + 1)
        for th in found.text_hits:  # a node's snippet: from its best unit by BM25
            fused.best_unit.setdefault(th.node_id, (th.tier, th.chunk))
        fused.text_rank = node_rank[1]
        if q.vectors_on:
            # A node BM25 found that the vectors hold nothing of yet (saved moments ago,
            # its vectors queued behind others) stands on the vector side at its BM25
            # rank: not ranked below older nodes only because its embedding is pending.
            for nid, rank in fused.text_rank.items():
                if nid not in counts:
                    node_rank[0].setdefault(nid, rank)
        node_score = fused.node_score
        for side, ranking in enumerate(node_rank):
            weight = NODE_WEIGHT[side]
            for nid, rank in ranking.items():
                node_score[nid] = node_score.get(nid, 0.0) + weight / (RRF_K + rank + 1)
        return fused

    def _node_hits(self, q: _Question, found: _Found, fused: _Fused) -> dict[int, Hit]:
        """The nodes found, best first (ties, one ranker each: the exact word match goes
        first, then the newer node), those the question may see."""
        get, held, allowed = self.memory.nodes.get, found.held, q.allowed
        text_rank, far = fused.text_rank, fused.far
        # sorted as tuples (node ids are distinct: a total order), not by a key function
        # called per node
        best = sorted(
            (-score, text_rank.get(nid, far), -nid) for nid, score in fused.node_score.items()
        )
        # A hit's confidence (0-1) comes from the cosine of its closest unit; None when
        # the embedder's similarities are not calibrated, or the vectors hold nothing of
        # it yet (one they did not return counts at `below`, their last hit's, unless they
        # compared every unit they hold). A picture CLIP finds near the question counts as
        # relevant whatever its derived text says.
        scale, similarity, below = q.scale, fused.similarity, fused.below
        by_node: dict[int, Hit] = {}
        for neg_score, _text_rank, neg_id in best:
            nid = -neg_id
            n = held.get(nid)
            if n is None:
                n = get(nid)
            if not allowed(n):
                continue
            conf: float | None = None
            if scale is not None:
                sim = similarity.get(nid, below)
                if sim is not None:
                    conf = confidence(sim, scale)
                    if nid in fused.image_bonus:
                        conf = max(conf, IMAGE_CONFIDENCE)
            by_node[nid] = Hit(n, "", round(-neg_score, 6), confidence=conf)
        return by_node

    def _shown(self, hits: list[Hit], fused: _Fused) -> None:
        """What only the links show, for the k hits `_node_hits` made (of the hundreds of
        nodes a search ranks, only these): the node's path, the tiers that matched, the L0
        as the snippet until `_snippets` finds a better one, a picture's original."""
        memory = self.memory
        tiers = fused.tiers_of({hit.node.id for hit in hits if not hit.path})
        for hit in hits:
            nid = hit.node.id
            if hit.path:
                continue  # made by an expansion, which fills its own
            hit.path = memory.node_path(hit.node)
            if nid in tiers:
                hit.tiers = sorted(tiers[nid])
            hit.snippet = hit.node.l0.strip()[:300]
            if hit.node.type == IMAGE_TYPE:
                att = original_of(memory, hit.node)
                if att is not None:
                    hit.media = memory.attachment_store.attachment_path(att)

    def _named_memories(
        self, q: _Question, cands: list[_Candidate], by_node: dict[int, Hit]
    ) -> dict[int, Hit]:
        """A memory found whose name the question names (`preferences/tea` for "tea" or
        "what tea does she like") is kept among the first hits: right after the best one
        (first, if it is that), its passages raised to the second best passage's score;
        it is the node kept for that key, but a better match of the question's rarer words
        stays ahead ("quokkafern for the shade corner" before `preferences/shade-corner`).
        Without this, a dozen archived conversations whose turns say "tea" (and the events
        made of them) filled the k hits and the bundle, and the preference was in neither.
        Session archives are not named this way (their names are dates), and only the
        nodes found are looked at."""
        words = set(_WORD.findall(q.text.lower()))
        named: set[int] = set()
        owners: set[int] = set()  # profiles named by whose they are: first of all
        for nid, h in by_node.items():  # `_names`, inlined: asked of every node found
            n = h.node
            if n.type == PROFILE_TYPE:  # "Where does Ola live?" asks Ola's profile
                if any(p <= words for p in _profile_names(n.id, n.version, n.owner_id, n.l2)):
                    named.add(nid)
                    owners.add(nid)
                continue
            parts = _name_words(n.name)
            if parts is not None and parts <= words and n.type != SESSION_TYPE:
                named.add(nid)
        if not named:
            return by_node
        order = list(by_node)
        first = order[:1] if order[0] not in named else []
        scores = sorted((c.score for c in cands if c.node.id not in named), reverse=True)
        second = scores[min(1, len(scores) - 1)] if scores else 0.0
        top = round(scores[0] + 1e-6, 6) if scores else 0.0  # above the best, not tied
        for i, c in enumerate(cands):
            floor = top if c.node.id in owners else second
            if c.node.id in named and c.score < floor:
                cands[i] = _Candidate(c.node, c.index, floor)
        if owners:  # the owner's profile goes before the best hit, not after it
            first = []
        below = by_node[first[0]].score if first else None
        for nid in named:
            hit = by_node[nid]
            if below is not None and hit.score < below:
                hit.score = below
            if q.scale is not None:
                hit.confidence = max(hit.confidence or 0.0, NAMED_CONFIDENCE)
        ahead = [
            *first,
            *(nid for nid in order if nid in owners),
            *(nid for nid in order if nid in named and nid not in owners),
        ]
        up = set(ahead)
        return {nid: by_node[nid] for nid in ahead} | {
            nid: h for nid, h in by_node.items() if nid not in up
        }

    def _relevant(self, q: _Question, by_node: dict[int, Hit], found: _Found) -> bool | None:
        """Whether anything found is relevant: a hit of confidence above 0 (its closest
        unit above the floor, or a memory the question names), a question that names
        a person who speaks in the scope's conversations ("Does Jonah have children?" is
        asked of the rankers without "Jonah", and "Does have children?" is far from
        "the kids are at school"), or a hit holding every word the question was searched
        by (`flaky` finds "Marguerite maintains the flaky build farm", however far a
        single word is from a sentence by meaning). None when it cannot be told: no
        calibrated vectors, or a hit the vectors hold nothing of yet (a node saved
        moments ago) and none above."""
        if q.scale is None:
            return None
        confs = [h.confidence for h in by_node.values()]
        if any(c for c in confs) or q.asked != q.text or self._literal(q, by_node, found):
            return True
        return None if any(c is None for c in confs) else False

    def _literal(self, q: _Question, by_node: dict[int, Hit], found: _Found) -> bool:
        """Whether a hit holds every word the question was searched by in one unit."""
        words = keywords(q.asked)
        if not by_node or not found.text_hits or not words.strip():
            return False
        held = self.indexer.search_text(
            words,
            LITERAL_DEPTH,
            path_prefix=q.scope or None,
            types=(q.opts.type,) if q.opts.type else None,
            require=words,
        )
        return any(h.node_id in by_node for h in held)

    def _passage_candidates(
        self, q: _Question, found: _Found, fused: _Fused, by_node: dict[int, Hit]
    ) -> list[_Candidate]:
        """The matched passages of the nodes found, ranked by number: their texts are read
        once the ranking is done, for the best of them only (`_read_passages`). What the
        people the question names said themselves is the likelier answer."""
        named = {
            x.lower()
            for x in self._participants(q.scope)
            if re.search(rf"\b{re.escape(x)}\b", q.text)
        }
        if named:  # a turn's speaker is in its archive's text
            self.memory.texts.prefetch(
                [h.node for h in by_node.values() if h.node.type == SESSION_TYPE]
            )
        image_bonus = dict(fused.image_bonus)
        cands: list[_Candidate] = []
        have: set[tuple[int, int]] = set()
        passage_count = found.passage_count
        for (nid, tier, chunk), score in fused.unit_score.items():
            hit = by_node.get(nid)
            if hit is None:
                continue
            n = hit.node
            count = passage_count(n)
            if count == 1:  # a short node: any of its tiers stands for its one passage
                index = 0
            elif tier == "L2" and chunk < count:
                index = chunk
            else:
                continue
            if (nid, index) in have:
                continue
            have.add((nid, index))
            if named and n.type == SESSION_TYPE:
                p = _passage(n, index)
                if (
                    p is not None
                    and p.speaker
                    and p.speaker.lower() in named
                    and not p.text.rstrip().endswith("?")  # asking says nothing of them
                ):
                    score *= 1 + SPEAKER_BOOST
            if index == 0 and image_bonus:
                score += image_bonus.pop(nid, 0.0)
            cands.append(_Candidate(n, index, round(score, 6)))
        for nid, bonus in image_bonus.items():  # pictures no text ranker found
            hit = by_node.get(nid)
            if hit is not None and passage_count(hit.node) > 0:
                cands.append(_Candidate(hit.node, 0, round(bonus, 6)))
        return cands

    def _snippets(
        self, question: str, hits: list[Hit], best_unit: dict[int, tuple[str, int]]
    ) -> None:
        """The shown hits' snippets, from their best BM25 unit's text (read by now, or
        together in one query)."""
        self.memory.texts.prefetch([h.node for h in hits if h.node.id in best_unit])
        shown: list[tuple[Hit, str]] = []
        for h in hits:
            unit = best_unit.get(h.node.id)
            text = _unit_text(h.node, *unit) if unit is not None else ""
            if text.strip():
                shown.append((h, text))
        if shown:
            snippets = self.indexer.snippets(question, [text for _h, text in shown])
            for (h, _text), snippet in zip(shown, snippets, strict=True):
                h.snippet = snippet[:300]

    def _sides(self, q: _Question, found: _Found) -> tuple[tuple[str, ...], str]:
        """Which rankers answered, and why one is missing or behind."""
        ix = self.indexer
        sides: tuple[str, ...] = ("bm25", "vectors") if q.vectors_on else ("bm25",)
        if found.images_on:
            sides += ("clip",)
        note = "" if q.vectors_on else f"vectors not used yet: {ix.state}"
        behind = self.memory.generation - ix.generation
        cover = ix.vector_coverage
        if q.vectors_on and cover is not None:
            # built from scratch (a new index, a model changed): how far, so a reader
            # knows the vector side answered from part of the store; a node they do not
            # hold yet stands at its BM25 rank on their side (`_fuse`)
            note = (
                f"vectors cover {cover[0]:,} of {cover[1]:,} nodes (being built); BM25 covers "
                "every node"
            )
        elif q.vectors_on and behind > 0:
            # BM25 covers every change; the vectors are still embedding some (a backlog)
            note = f"vectors behind BM25 by {behind} change(s) (being indexed)"
        return sides, note

    def _read_passages(
        self, cands: list[_Candidate], budget: int, hits: set[int]
    ) -> list[PassageHit]:
        """The ranked candidates as passages, best first, their texts read a batch of
        nodes at a time: until what is read would fill the budget READ_FILL times over
        (the bundle packs the best passages, and those after could only fill the few
        tokens left), and after that only the passages of the first k hits (each hit
        lists its passages in `_results.json`). A candidate whose node no longer has
        that passage (its L2 changed since it was indexed) is dropped."""
        out: list[PassageHit] = []
        tokens = 0
        paths: dict[int, str] = {}  # node id -> its path, made once and for these only
        node_path = self.memory.node_path
        for i in range(0, len(cands), READ_BATCH):
            batch = cands[i : i + READ_BATCH]
            if tokens >= budget * READ_FILL:
                batch = [c for c in batch if c.node.id in hits]
            self.memory.texts.prefetch([c.node for c in batch])
            for c in batch:
                p = _passage(c.node, c.index)
                if p is None:
                    continue
                path = paths.get(c.node.id)
                if path is None:  # the node's heading, once
                    path = paths[c.node.id] = node_path(c.node)
                    tokens += estimate_tokens(path) + HEADING_TOKENS
                out.append(PassageHit(c.node, path, p, c.score))
                tokens += estimate_tokens(p.text)
        return out

    def _add_linked_turns(
        self,
        cands: list[_Candidate],
        by_node: dict[int, Hit],
        allowed: Callable[[Node | None], bool],
    ) -> None:
        """A memory extracted from a conversation leads to the turns it came from (its
        sources name the inbox file and the turn ids): they join the passages at a share of
        its score. An entity gathered over several sessions so brings each of them."""
        have = {(c.node.id, c.index) for c in cands}
        extra: list[_Candidate] = []
        for c in cands:
            n = c.node
            if n.type == SESSION_TYPE or len(extra) > LINKED_MAX:
                continue
            for src in n.sources:
                base, _, refs = src.partition("#")
                archive = self._archive(n.owner_kind, n.owner_id, base) if refs else None
                if archive is None or not allowed(archive):
                    continue
                turns = {tid: p for p in node_passages(archive) for tid in p.turn_ids}
                for ref in refs.split(","):
                    p = turns.get(ref.strip())
                    if p is None or (archive.id, p.index) in have:
                        continue
                    have.add((archive.id, p.index))
                    score = round(c.score * LINK_SHARE, 6)
                    hit = by_node.get(archive.id)
                    if hit is None:  # a session only the memory led to: a hit of its own
                        hit = by_node[archive.id] = Hit(
                            archive,
                            self.memory.node_path(archive),
                            score,
                            [],
                            archive.l0.strip()[:300],
                            confidence=_share(
                                by_node[n.id].confidence if n.id in by_node else None
                            ),
                        )
                    extra.append(_Candidate(archive, p.index, score))
        cands.extend(extra)

    def _add_named_entities(
        self,
        question: str,
        cands: list[_Candidate],
        by_node: dict[int, Hit],
        allowed: Callable[[Node | None], bool],
        calibrated: bool,
    ) -> None:
        """An entity named in the question is a hub: its node joins the hits and its
        passage the candidates (at the best passage's score), so the turns it was gathered
        from follow (`_add_linked_turns`), from every session that spoke of it. Named, it
        is relevant (`NAMED_CONFIDENCE` at least)."""
        top = max((c.score for c in cands), default=1.0 / (RRF_K + 1))
        have = {c.node.id for c in cands}
        for name in self.names.named(question):
            for nid in self.names.ids(name):
                n = self.memory.nodes.get(nid)
                if n is None or n.id in have or not allowed(n):
                    continue
                if not node_passages(n):
                    continue
                hit = by_node.get(n.id)
                if hit is None:
                    hit = by_node[n.id] = Hit(
                        n, self.memory.node_path(n), round(top, 6), [], n.l0.strip()[:300]
                    )
                if calibrated:
                    hit.confidence = max(hit.confidence or 0.0, NAMED_CONFIDENCE)
                cands.append(_Candidate(n, 0, round(top, 6)))
                have.add(n.id)

    def _add_entity_mentions(
        self,
        question: str,
        scope: str,
        cands: list[_Candidate],
        by_node: dict[int, Hit],
        allowed: Callable[[Node | None], bool],
    ) -> None:
        """A second hop: an entity among the best passages that the question does not name
        ("Maya's cousin" found the hub of Luca) is asked about by name, so the turns that
        speak of it ("Luca passed his exams, he's a vet now") join the candidates, at a
        share of the hub's score that falls with their rank."""
        ix = self.indexer
        if ix.text is None or not self._has_sessions(scope):
            return  # a hop joins turns of session archives: the scope's owner has none
        asked = question.lower()
        # the best, in the order a stable sort puts them, without sorting them all
        ranked = heapq.nsmallest(READ_BATCH, cands, key=lambda c: -c.score)
        best = ranked[:HOP_FROM]
        # their texts, with those of the first batch `_read_passages` reads: one query
        self.memory.texts.prefetch([c.node for c in ranked])
        taken: set[tuple[int, int]] = set()  # joined by a hop already
        nodes = self.memory.nodes
        hops: list[tuple[str, _Candidate]] = []
        self.names.refresh()
        for c in best:
            if c.node.type == "entity":
                names = [c.node.name.replace("-", " ").lower()]
            else:  # a turn naming a known entity ("Will had a twelve-hour shift")
                names = []
                p = _passage(c.node, c.index)
                for match in _PROPER.finditer(p.text if p is not None else ""):
                    phrase = match.group(0).lower()
                    for cand in (phrase, phrase.split()[0]):
                        if any(allowed(nodes.get(i)) for i in self.names.ids(cand)):
                            names.append(cand)
                            break
            for name in names:
                if (
                    len(name) >= 3
                    and not re.search(rf"\b{re.escape(name)}\b", asked)
                    and name not in {h for h, _ in hops}
                ):
                    hops.append((name, c))
        # candidate -> its place in cands, for a hop that finds it again
        where = {(c.node.id, c.index): i for i, c in enumerate(cands)} if hops else {}
        for name, hub in hops[:HOP_MAX]:
            # only the archives' turns that hold the name can join (below): asking BM25
            # for those alone, not for every unit with a word of the question (at a
            # million nodes three such hops were 60% of a question's time)
            hits = ix.search_text(
                f"{name} {keywords(question)}",
                HOP_DEPTH,
                path_prefix=scope or None,
                types=(SESSION_TYPE,),
                require=name,
            )
            rank = 0
            batch = nodes.get_many([h.node_id for h in hits])  # one query, as in search()
            self.memory.texts.prefetch(list(batch.values()))
            for h in hits:
                m = batch.get(h.node_id)
                if m is None or m.type != SESSION_TYPE or not allowed(m):
                    continue
                p = _passage(m, h.chunk) if h.tier == "L2" else None
                if p is None:
                    continue
                key = (m.id, p.index)
                if key in taken or not re.search(rf"\b{re.escape(name)}\b", p.text, re.IGNORECASE):
                    continue
                taken.add(key)
                score = round(hub.score * LINK_SHARE * (RRF_K + 1) / (RRF_K + 1 + rank), 6)
                rank += 1
                hit = by_node.get(m.id)
                if hit is None:
                    hit = by_node[m.id] = Hit(
                        m,
                        self.memory.node_path(m),
                        score,
                        [],
                        m.l0.strip()[:300],
                        confidence=_share(by_node[hub.node.id].confidence),
                    )
                at = where.get(key)
                if at is None:  # new: a candidate of its own
                    where[key] = len(cands)
                    cands.append(_Candidate(m, p.index, score))
                elif cands[at].score < score:  # found weakly before: the hop raises it
                    cands[at] = _Candidate(m, p.index, score)
                if rank >= HOP_TURNS:
                    break

    def _without_participants(self, question: str, scope: str) -> str:
        """The question without the names of the people whose conversations are in the
        scope. In a turn those names are mostly a greeting ("Maya! Long time no chat."):
        a question naming Maya would rank every such greeting first, on both sides. Names
        are matched as written (capitalised): "Will" the person, not "will". A question
        that is nothing but names stays as it is."""
        names = self._participants(scope)
        if not names:
            return question
        kept = re.sub(
            r"\b(" + "|".join(map(re.escape, names)) + r")(['’]s)?\b",
            " ",
            question,
        )
        return kept if keywords(kept).strip() else question

    def _participants(self, scope: str) -> tuple[str, ...]:
        """Speaker names in the session archives of the scope's owner (not roles)."""
        return self._sessions_of(scope)[1]

    def _has_sessions(self, scope: str) -> bool:
        """Whether the scope's owner (everyone's, for no owner) has a live session archive."""
        return self._sessions_of(scope)[2]

    def _sessions_of(self, scope: str) -> tuple[int, tuple[str, ...], bool]:
        owner = _owner_of(scope)
        generation = self.memory.generation
        got = self._sessions.get(owner)
        if got is None or got[0] != generation:
            names: set[str] = set()
            some = False
            for n in self.memory.walk(owner=owner, types=(SESSION_TYPE,), texts=True):
                some = True
                names.update(p.speaker for p in node_passages(n) if p.speaker)
            names -= ROLES
            got = (generation, tuple(sorted(x for x in names if len(x) >= 2)), some)
            if len(self._sessions) >= SESSION_OWNERS_KEPT:
                self._sessions.clear()  # rare: many owners asked of in turn
            self._sessions[owner] = got
        return got

    def _archive(self, kind: str, owner: str, source: str) -> Node | None:
        """The session archive made from an inbox file or session (`inbox:<file>`)."""
        generation = self.memory.generation
        if self._archives_at != generation:
            table: dict[tuple[str, str, str], Node] = {}
            for n in self.memory.walk(types=(SESSION_TYPE,)):
                for src in n.sources:
                    table.setdefault((n.owner_kind, n.owner_id, src), n)
            self._archives, self._archives_at = table, generation
        return self._archives.get((kind, owner, source))


def _fill_gaps(cands: list[_Candidate], budget: int) -> bool:
    """A turn between two turns of the best passages (the same archive, one before it and
    one after) joins them, just below the lower of the two: an exchange reads whole ("The
    kitchen is finally finished!" / "It came to £19,400 in the end" / "only a little over
    budget"), and the middle turn is often the one that says it in words the question
    does not use. `cands` is ranked; whether any joined or rose."""
    n_top = max(GAP_TOP_MIN, budget // GAP_TOKENS)
    top = {(c.node.id, c.index): c for c in cands[:n_top]}
    rest: dict[tuple[int, int], _Candidate] | None = None  # made at the first gap: rare
    changed = False
    for c in list(top.values()):
        if c.node.type != SESSION_TYPE:
            continue
        after = top.get((c.node.id, c.index + 2))
        key = (c.node.id, c.index + 1)
        if after is None or key in top:
            continue
        score = round(min(c.score, after.score) * GAP_SHARE, 6)
        if rest is None:
            rest = {(r.node.id, r.index): r for r in cands[n_top:]}
        lower = rest.get(key)
        if lower is not None:  # ranked further down: it rises
            lower.score = max(lower.score, score)
            top[key] = lower
        else:
            top[key] = gap = _Candidate(c.node, c.index + 1, score)
            cands.append(gap)
        changed = True
    return changed


def confidence(similarity: float, scale: tuple[float, float]) -> float:
    """A cosine similarity as a confidence in [0, 1]: 0 at or below the floor (nothing
    there is about the question), 1 at or above `sure`, linear between."""
    floor, sure = scale
    return round(min(1.0, max(0.0, (similarity - floor) / (sure - floor))), 3)


@functools.lru_cache(maxsize=16384)
def _name_words(name: str) -> frozenset[str] | None:
    """The words of a node's name (`tea`, `text-editor`), lowercased; None when it has
    none or fewer than three letters in all. A question names the node when it has every
    one of them (`Searcher._named_memories`, which asks this of every node found)."""
    parts = _WORD.findall(name.lower())
    return frozenset(parts) if parts and sum(map(len, parts)) >= 3 else None


@functools.lru_cache(maxsize=1024)
def _profile_names(
    node_id: int, version: int, owner_id: str, l2: str
) -> tuple[frozenset[str], ...]:
    """The names a question calls a profile's owner by: the owner's id ("ola") and the
    `name` its front matter gives ("Ola Nordmann", or "Ola" alone)."""
    out = [p for p in (_name_words(owner_id),) if p is not None]
    m = _PROFILE_NAME_RE.search(l2[:2000])
    if m is not None:
        name = m.group(1).strip().strip("'\"")
        for part in (name, name.split()[0] if name else ""):
            words = _name_words(part)
            if words is not None:
                out.append(words)
    return tuple(out)


_PROFILE_NAME_RE = re.compile(r"^name:[ \t]*(\S.*)$", re.M)


def _share(conf: float | None) -> float | None:
    """The confidence of what a hit leads to (a linked turn's session)."""
    return None if conf is None else round(conf * LINK_SHARE, 3)


def unit_depth(opts: QueryOptions) -> int:
    """Units asked of each ranker: enough passages to fill the budget a few times over (a
    passage is 25 tokens or more), at most UNIT_DEPTH, never fewer than 8 per hit."""
    return max(opts.k * 8, min(UNIT_DEPTH, opts.budget // 8))


UNIT_DEPTH = 300  # units asked of each ranker: enough passages to fill a 4,000-token budget
# Passage fusion weights (vectors, BM25): BM25 at 0.7 ranked evidence turns a little better
# on the development conversations of scripts/recall_data (never tuned on the held-out half).
SIDE_WEIGHT = (1.0, 0.7, 2.0)  # the third: CLIP's pictures (search.images), as NODE_WEIGHT
# Node fusion weights (vectors, BM25, CLIP images). An image's derived text (format, size,
# dates) says nothing of what it shows, so the text rankers place pictures by noise; the one
# ranker that sees the picture counts double, and only pictures CLIP finds near the
# question at all (`clip_query_min`) are ranked by it.
NODE_WEIGHT = (1.0, 1.0, 2.0)
LINK_SHARE = 0.9  # a linked turn's score, as a share of the memory that links to it
GAP_SHARE = 0.99  # a turn between two of the best, as a share of the lower one's score
GAP_TOKENS = 40  # the best passages are those of the budget's first budget/40 candidates
GAP_TOP_MIN = 8
# Relevance: per embedder, the cosine (question to a node's closest unit) at or below which
# nothing is about the question (confidence 0) and the one from which it surely is
# (confidence 1). Calibrated on the development half of scripts/recall_data (docs/search.md).
SIMILARITY_SCALE: dict[str, tuple[float, float]] = {LOCAL_MODEL_NAME: (0.30, 0.60)}
NAMED_CONFIDENCE = 0.5  # an entity the question names is relevant
LITERAL_DEPTH = 20  # units asked of BM25 for one holding every word of the question
IMAGE_CONFIDENCE = 0.5  # so is a picture CLIP finds near the question (`clip_query_min`)
# A passage said by a person the question names, as a factor of its score: "Does Mateo have
# children?" is answered by what Mateo said (dev conversations: 0.3 and 0.6 tried, 0.6 kept)
SPEAKER_BOOST = 0.6
PROFILE_TYPE = "profile"  # a profile is named by whose it is (`_named_memories`)
ROLES = frozenset({"user", "assistant", "system", "tool", "developer"})
# a capitalised word or two in a turn: where an entity's name may stand
_PROPER = re.compile(r"(?<![\w'’])[A-Z][\w'’-]+(?: [A-Z][\w'’-]+)?")
_WORD = re.compile(r"[^\W_]+")
HOP_FROM = 6  # passages whose entities are asked about by name (a second hop)
HOP_MAX = 3  # entity names asked about per question
HOP_DEPTH = 40  # units asked of BM25 for an entity's name
HOP_TURNS = 4  # turns that name the entity joined per hop
# Passage texts are read, best first, until they would fill the budget this many times over
# (`Searcher._read_passages`), READ_BATCH nodes a query; a node's heading costs about
# HEADING_TOKENS besides its path.
READ_FILL = 2
READ_BATCH = 32
HEADING_TOKENS = 6
LINKED_MAX = 200  # passages: enough to fill the largest budget many times over
SESSION_OWNERS_KEPT = 256  # owners whose speakers are kept (`Searcher._sessions_of`)
SNAPSHOTS_KEPT = 4  # scopes whose vectors are kept (each at most SCOPED_EXACT_MAX x dim)
SCOPED_EXACT_MAX = 20_000  # units; above this a filtered graph search is cheaper


def _owner_of(scope: str) -> tuple[str, str] | None:
    parts = scope.split("/")
    return (parts[0], parts[1]) if len(parts) >= 2 and parts[0] in ("user", "agent") else None
