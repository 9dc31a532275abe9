"""Hybrid retrieval and the answer bundle: what a `.query/<question>/` directory shows.

One query embedding; vector search over every unit (L0, L1, L2 chunks) plus BM25 over the
same units; reciprocal-rank fusion; hits grouped per node (an L0 or L1 hit leads to its
node, hence to its L2); scoped by path. Then `_context.md` packs the hits into a token
budget as a pyramid: L0 for every hit, L1 for the best, L2 for the best few.

Runs in a worker thread (embedding, hnswlib, tantivy); the indexes are shared with the
indexer under its lock.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from contextfs.errors import InvalidInput
from contextfs.memory.service import Memory
from contextfs.memory.tokens import estimate_tokens
from contextfs.model import Node
from contextfs.search.indexer import Indexer, label_node, label_tier

RRF_K = 60  # the usual reciprocal-rank-fusion constant
DEFAULT_K = 10
DEFAULT_BUDGET = 2000  # tokens (estimate_tokens: one per four characters)
L1_HITS = 3  # how many of the best hits show L1
L2_HITS = 2  # how many of the best hits show L2


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
    values: dict[str, object] = {}
    for part in filter(None, segment[1:].split(",")):
        key, eq, value = part.partition("=")
        key = key.strip()
        if not eq or not value:
            raise InvalidInput(f"query option {part!r} needs a value (key=value)")
        if key in ("k", "budget"):
            try:
                number = int(value)
            except ValueError:
                raise InvalidInput(f"query option {key} must be a whole number") from None
            lo, hi = (1, 100) if key == "k" else (50, 100_000)
            if not lo <= number <= hi:
                raise InvalidInput(f"query option {key} must be between {lo} and {hi}")
            values[key] = number
        elif key == "type":
            if value not in known_types:
                raise InvalidInput(f"unknown type {value!r} in query options; known: "
                                   + ", ".join(sorted(known_types)))
            values[key] = value
        else:
            raise InvalidInput(f"unknown query option {key!r}; known: k, budget, type")
    return QueryOptions(**values)


@dataclass(slots=True)
class Hit:
    node: Node
    path: str
    score: float
    tiers: list[str] = field(default_factory=list)
    snippet: str = ""


# Words that carry no topic: dropped from the BM25 side of a question (the vector side
# sees the whole question). Without this, "what does she like" matches every "she".
STOPWORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further
had has have having he her here hers herself him himself his how i if in into is it its
itself just me more most my myself no nor not now of off on once only or other our ours out
over own same she should so some such than that the their theirs them themselves then there
these they this those through to too under until up very was we were what when where which
while who whom why will with would you your yours yourself kind sort thing things
""".split())  # noqa: SIM905 - a word list reads better as prose


def keywords(question: str) -> str:
    words = question.split()
    kept = [w for w in words if w.strip("?!.,;:'\"()").lower() not in STOPWORDS]
    return " ".join(kept) if kept else question


def _in_scope(path: str, scope: str) -> bool:
    return not scope or path == scope or path.startswith(scope + "/")


class Searcher:
    def __init__(self, memory: Memory, indexer: Indexer) -> None:
        self.memory = memory
        self.indexer = indexer

    def _scoped_labels(self, scope: str) -> list[int] | None:
        """The vector labels of a scope under one owner, when few enough to compare them
        all exactly (an hnswlib filter callback per candidate is slow for small scopes)."""
        owner = _owner_of(scope)
        if owner is None:
            return None
        ids = self.memory.live.by_owner.get(owner, set())
        for _ in range(5):  # the event loop may add or drop a node while we copy
            try:
                ids = list(ids)
                break
            except RuntimeError:
                continue
        else:
            return None
        labels = [x for nid in ids for x in self.indexer.node_labels.get(nid, ())]
        return labels if len(labels) <= SCOPED_EXACT_MAX else None

    def search(self, question: str, scope: str, opts: QueryOptions) -> list[Hit]:
        """Worker thread. Scope is a mount-relative path ('' = everything)."""
        ix = self.indexer
        if not ix.ready or not question.strip():
            return []
        memory = self.memory
        nodes = memory.nodes

        def allowed(n: Node | None) -> bool:
            return (n is not None and memory.is_live(n)
                    and (opts.type is None or n.type == opts.type)
                    and _in_scope(memory.node_path(n), scope))

        qvec = ix.embedder.embed([question])[0]
        depth = max(50, opts.k * 8)
        with ix.lock:  # node_labels belongs to the indexer's lock too
            scoped = self._scoped_labels(scope) if scope else None
            if scoped is not None:  # a small subtree: exact, no graph walk with a filter
                vec_hits = ix.vectors.search_among(
                    qvec, [x for x in scoped if allowed(nodes.get(label_node(x)))], depth)
            else:
                vec_hits = ix.vectors.search(
                    qvec, depth, allow=None if not scope and opts.type is None else
                    lambda label: allowed(nodes.get(label_node(label))))
            text_hits = ix.text.search(keywords(question), depth * 2,
                                       path_prefix=scope or None)
        # Each ranker ranks nodes by their best unit (an L0 or L1 hit stands for its node);
        # reciprocal-rank fusion then adds the two rankings.
        tiers: dict[int, set[str]] = {}
        snippets: dict[int, str] = {}
        vec_rank: dict[int, int] = {}
        for label, _sim in vec_hits:
            nid = label_node(label)
            vec_rank.setdefault(nid, len(vec_rank))
            tiers.setdefault(nid, set()).add(label_tier(label))
        text_rank: dict[int, int] = {}
        for h in text_hits:
            if not allowed(nodes.get(h.node_id)):
                continue
            text_rank.setdefault(h.node_id, len(text_rank))
            tiers.setdefault(h.node_id, set()).add(h.tier)
            snippets.setdefault(h.node_id, h.snippet)
        scores: dict[int, float] = {}
        for ranking in (vec_rank, text_rank):
            for nid, rank in ranking.items():
                scores[nid] = scores.get(nid, 0.0) + 1.0 / (RRF_K + rank + 1)
        # ties (one ranker each): the exact word match goes first, then the newer node
        far = len(scores) + 1
        best = sorted(scores.items(), key=lambda kv: (
            -kv[1], text_rank.get(kv[0], far), -kv[0]))[: opts.k]
        hits = []
        for nid, score in best:
            n = nodes.get(nid)
            if not allowed(n):
                continue
            snippet = snippets.get(nid) or n.l0.strip()
            hits.append(Hit(n, memory.node_path(n), round(score, 6),
                            sorted(tiers.get(nid, ())), snippet[:300]))
        return hits


SCOPED_EXACT_MAX = 20_000  # units; above this a filtered graph search is cheaper


def _owner_of(scope: str) -> tuple[str, str] | None:
    parts = scope.split("/")
    return (parts[0], parts[1]) if len(parts) >= 2 and parts[0] in ("user", "agent") else None


def results_json(question: str, scope: str, hits: list[Hit]) -> str:
    return json.dumps({
        "question": question,
        "scope": scope or "/",
        "hits": [{"rank": i + 1, "path": h.path, "score": h.score, "type": h.node.type,
                  "version": h.node.version, "tiers": h.tiers, "snippet": h.snippet}
                 for i, h in enumerate(hits)],
    }, indent=2) + "\n"


def pack_context(question: str, scope: str, hits: list[Hit], budget: int) -> str:
    """The pyramid: L0 of every hit that fits, then L1 for the best, L2 for the best few,
    each under its node path; never over `budget` tokens (estimate_tokens)."""
    header = (f"# Context for: {question}\n\n"
              f"Scope: {scope or '/'} · {len(hits)} hit(s) · budget {budget} tokens "
              "(1 token ≈ 4 characters)\n")
    if not hits:
        header += "\nNo memory matches this question yet.\n"
    levels = [0] * len(hits)  # 0 = L0, 1 = L1, 2 = L2; -1 = left out

    def section(i: int, level: int) -> str:
        h = hits[i]
        body = {0: h.node.l0, 1: h.node.l1 or h.node.l0, 2: h.node.l2}[level].strip()
        tier = ("L0", "L1", "L2")[level]
        return f"\n## {i + 1}. {h.path} ({tier}, score {h.score:g})\n\n{body}\n"

    def render() -> str:
        return header + "".join(section(i, lv) for i, lv in enumerate(levels) if lv >= 0)

    if estimate_tokens(header) > budget:
        return header[: budget * 4]
    used = estimate_tokens(header)
    for i in range(len(hits)):  # L0 of every hit, best first, while it fits
        cost = estimate_tokens(section(i, 0))
        if used + cost > budget:
            levels[i:] = [-1] * (len(hits) - i)
            break
        used += cost
    for level, count in ((1, L1_HITS), (2, L2_HITS)):  # upgrade the best ones
        for i in range(min(count, len(hits))):
            if levels[i] < 0 or levels[i] >= level:
                continue
            delta = estimate_tokens(section(i, level)) - estimate_tokens(section(i, levels[i]))
            if used + delta <= budget:
                used += delta
                levels[i] = level
    text = render()
    while estimate_tokens(text) > budget and any(lv >= 0 for lv in levels):
        last = max(i for i, lv in enumerate(levels) if lv >= 0)
        levels[last] = levels[last] - 1 if levels[last] > 0 else -1
        text = render()
    return text
