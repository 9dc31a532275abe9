"""Full-text BM25 search over units (tantivy); derived, rebuildable.

One tantivy document per unit. The user's question is free text, so it never goes through
tantivy's query parser: it is cut into terms by the same analyzer as the `text` field
(tantivy's "en_stem": simple tokenizer, long-token removal, lowercase, English stemmer) and
the terms are OR-ed. Any string is a valid query; none raises.

tantivy allows one writer per index, across processes. The writer is created on the first
write and held until `close()`; a write commits and reloads so the next search sees it, or
is *staged* (`stage=True`): it waits in the writer for a later `commit()` and is searched
meanwhile from memory (`_Staged`), scored by BM25 with the committed index's statistics.
A tantivy commit costs 8-20 ms whatever it holds (in memory too), so an fsync that
committed its node was mostly that; staged, the indexer commits once a second at most.
The caller serialises calls; tantivy's own merge threads are its business.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import tantivy

from contextfs.errors import IndexBusy, IndexCorrupt
from contextfs.index.units import Unit

log = logging.getLogger(__name__)

SNIPPET_CHARS = 160
# A question longer than this many distinct terms is cut: BM25 over hundreds of terms is slow
# and no better.
MAX_QUERY_TERMS = 64
_WRITER_HEAP = 32_000_000
# Path-prefix queries kept (`_prefix_query`): one a scope questions are asked in
_PREFIXES_KEPT = 256
# tantivy's BM25 (its Bm25Weight): what a staged unit is scored with, beside committed ones
_K1, _B = 1.2, 0.75


@dataclass(frozen=True, slots=True)
class TextHit:
    node_id: int
    tier: str
    chunk: int
    score: float


@dataclass(slots=True)
class _Staged:
    """What the writer holds since the last commit, as searches must see it: each staged
    node's units (they replace whatever the committed index holds of the node; none: the
    node was deleted) and its (owner, type, path). `since`: when the first was staged."""

    units: dict[int, list[Unit]] = field(default_factory=dict)
    meta: dict[int, tuple[str, str, str]] = field(default_factory=dict)
    since: float = 0.0
    # per unit, its terms as the index cuts them (made at the first search that needs them)
    terms: dict[tuple[int, str, int], Counter[str]] = field(default_factory=dict)

    def count(self) -> int:
        return sum(len(units) for units in self.units.values())


def _schema() -> tantivy.Schema:
    sb = tantivy.SchemaBuilder()
    # Ids and paths use the "raw" tokenizer: one term per value, so term lookups
    # (delete, prefix filters) match exactly. A tokenized id silently deletes nothing.
    sb.add_text_field("key", stored=True, tokenizer_name="raw")
    sb.add_integer_field("node_id", stored=True, indexed=True, fast=True)
    sb.add_text_field("tier", stored=True, tokenizer_name="raw")
    sb.add_integer_field("chunk", stored=True)
    sb.add_text_field("owner", tokenizer_name="raw")
    sb.add_text_field("type", tokenizer_name="raw")
    sb.add_text_field("path", tokenizer_name="raw")
    # Not stored: the store holds the text, and a snippet is made from it for the few hits
    # shown (`snippet`). Stored, it was 1 GB of a million nodes' index, and every hit read
    # and decompressed a block of it: 250 MB of the daemon's RSS after 16 questions.
    sb.add_text_field("text", tokenizer_name="en_stem")
    return sb.build()


def _query_analyzer() -> tantivy.TextAnalyzer:
    """The pipeline tantivy registers as "en_stem", rebuilt to analyze questions."""
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(40))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.stemmer("english"))
        .build()
    )


def _is_failure(e: BaseException) -> bool:
    """An error from tantivy: a Python exception, or a Rust panic (pyo3 raises those as
    PanicException, a BaseException), but never KeyboardInterrupt and friends."""
    return isinstance(e, Exception) or type(e).__name__ == "PanicException"


P = ParamSpec("P")
R = TypeVar("R")


def _panics_raised(fn: Callable[P, R]) -> Callable[P, R]:
    """A Rust panic inside tantivy comes out as pyo3's PanicException, a BaseException
    that `except Exception` lets through, up to the mount's nursery: raised as a
    RuntimeError instead, which the indexer reports and retries like any failed write."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except BaseException as e:
            if isinstance(e, Exception) or not _is_failure(e):
                raise
            raise RuntimeError(f"tantivy panicked: {e}") from e

    return wrapper


class TextIndex:
    """A tantivy index of units, on disk at `path` or in memory when `path` is None."""

    def __init__(self, path: Path | None) -> None:
        self.path = Path(path) if path is not None else None
        self._schema = _schema()
        self._analyzer = _query_analyzer()
        self._writer: Any = None
        self._staged = _Staged()
        # the committed index's BM25 statistics (unit count, mean unit length), once asked
        self._stats: tuple[float, float] | None = None
        self._prefixes: dict[str, tantivy.Query] = {}  # path prefix -> its regex query
        self._index: tantivy.Index | None
        try:
            if self.path is None:
                self._index = tantivy.Index(self._schema)
            else:
                self.path.mkdir(parents=True, exist_ok=True)
                self._index = tantivy.Index(self._schema, str(self.path), reuse=True)
            # Open every segment now, so that damage shows here and not in a search.
            self._index.reload()
            searcher = self._index.searcher()
            hits = searcher.search(tantivy.Query.all_query(), 1).hits
            for _, address in hits:
                searcher.doc(address)
        except BaseException as e:
            if not _is_failure(e):
                raise
            raise IndexCorrupt(f"text index {self.path} is unreadable: {e}") from e
        log.debug("opened text index at %s (%d docs)", self.path or "<memory>", self.count())

    # ---- writes --------------------------------------------------------------------------

    def _get_writer(self) -> Any:
        if self._index is None:
            raise ValueError("text index is closed")
        if self._writer is None:
            try:
                self._writer = self._index.writer(heap_size=_WRITER_HEAP, num_threads=1)
            except ValueError as e:
                if "LockBusy" in str(e):
                    raise IndexBusy(f"text index {self.path} is in use by another writer") from e
                raise
        return self._writer

    def _commit(self) -> None:
        writer = self._writer
        try:
            writer.commit()
        except BaseException:
            # A failed commit may leave the writer consumed: drop it, and stage what was
            # staged again in a new one (searches go on finding it; the next commit tries).
            self._drop_writer()
            try:
                self._restage()
            except Exception as e:  # noqa: BLE001 - the indexer applies its cursor again
                log.warning("text index: staged changes not written again (%s)", e)
                self._staged = _Staged()
            raise
        assert self._index is not None  # a writer comes from an open index
        self._index.reload()
        self._staged = _Staged()
        self._stats = None

    @_panics_raised
    def upsert(
        self,
        units: Sequence[Unit],
        meta: Mapping[int, tuple[str, str, str]],
        *,
        commit: bool = True,
        fresh: Iterable[int] | None = None,
        stage: bool = False,
    ) -> None:
        """Replace every document of the nodes in `units` by `units`.

        `fresh`, when given, names the nodes whose documents are deleted first instead (a
        node too big for one commit comes in slices: its first slice deletes, the later
        ones add; a node in `fresh` without units is only deleted).

        `meta` maps node_id to (owner, type name, node path), e.g.
        ("user/alice", "preference", "user/alice/preferences/editor"). With `commit=False`
        the documents wait in the writer for a later `commit()` (a rebuild: a commit costs
        ~0.1 s, one per batch of 64 nodes was most of a million-node rebuild), unseen
        until then; with `stage=True` they wait too, but searches find them meanwhile.
        """
        node_ids = sorted({u.node_id for u in units})
        missing = [n for n in node_ids if n not in meta]
        if missing:
            raise ValueError(f"no meta for node(s) {missing}")
        drop = node_ids if fresh is None else sorted({int(n) for n in fresh})
        writer = self._get_writer()
        try:
            for node_id in drop:
                writer.delete_documents_by_term("node_id", node_id)
            for u in units:
                writer.add_document(self._document(u, meta[u.node_id]))
        except BaseException:
            self._rollback()
            raise
        if stage:
            self._stage(drop, units, meta)
        elif commit:
            self._commit()

    @staticmethod
    def _document(u: Unit, meta: tuple[str, str, str]) -> tantivy.Document:
        owner, type_name, path = meta
        return tantivy.Document(
            key=u.key,
            node_id=u.node_id,
            tier=u.tier,
            chunk=u.chunk,
            owner=owner,
            type=type_name,
            path=path,
            text=u.text,
        )

    def _stage(
        self,
        drop: Iterable[int],
        units: Sequence[Unit],
        meta: Mapping[int, tuple[str, str, str]],
    ) -> None:
        staged = self._staged
        if not staged.units:
            staged.since = time.monotonic()
        for node_id in drop:
            for u in staged.units.get(node_id, ()):
                staged.terms.pop((u.node_id, u.tier, u.chunk), None)
            staged.units[node_id] = []
        for u in units:
            staged.units.setdefault(u.node_id, []).append(u)
            staged.meta[u.node_id] = meta[u.node_id]

    @property
    def staged_units(self) -> int:
        """Units written and searchable but not committed (0: nothing waits)."""
        return self._staged.count() if self._staged.units else 0

    @property
    def staged_since(self) -> float | None:
        """When the oldest change not committed was staged (time.monotonic), or None."""
        return self._staged.since if self._staged.units else None

    @_panics_raised
    def commit(self) -> None:
        """Make what `upsert(commit=False)` added searchable (and durable)."""
        if self._writer is not None:
            self._commit()

    @_panics_raised
    def delete_nodes(
        self, node_ids: Iterable[int], *, commit: bool = True, stage: bool = False
    ) -> None:
        """Remove every document of these nodes; unknown ids are ignored."""
        ids = {int(n) for n in node_ids}
        writer = self._get_writer()
        try:
            for node_id in ids:
                writer.delete_documents_by_term("node_id", node_id)
        except BaseException:
            self._rollback()
            raise
        if stage:
            self._stage(ids, (), {})
        elif commit:
            self._commit()

    @_panics_raised
    def clear(self) -> None:
        """Remove every document (before a full rebuild)."""
        writer = self._get_writer()
        writer.delete_all_documents()
        self._commit()

    def _rollback(self) -> None:
        """A write that failed half-way is undone, and with it (tantivy's rollback drops
        everything since the last commit) what was staged before it, which is then
        written again: a staged change was promised to searches."""
        try:
            self._writer.rollback()
        except Exception:
            self._drop_writer()
        try:
            self._restage()
        except Exception as e:  # noqa: BLE001 - the indexer applies its cursor again
            log.warning("text index: staged changes not written again (%s)", e)
            self._staged = _Staged()

    def _restage(self) -> None:
        staged = self._staged
        if not staged.units:
            return
        writer = self._get_writer()
        for node_id, units in staged.units.items():
            writer.delete_documents_by_term("node_id", node_id)
            for u in units:
                writer.add_document(self._document(u, staged.meta[node_id]))

    # ---- reads ---------------------------------------------------------------------------

    def count(self) -> int:
        if self._index is None:
            raise ValueError("text index is closed")
        return self._index.searcher().num_docs

    def query_terms(self, query: str) -> list[str]:
        """The distinct index terms of a free-text question, in order of appearance."""
        terms = self._analyzer.analyze(_valid_utf8(query))
        return list(dict.fromkeys(terms))[:MAX_QUERY_TERMS]

    @_panics_raised
    def search(
        self,
        query: str,
        k: int,
        *,
        path_prefix: str | None = None,
        types: tuple[str, ...] | None = None,
        require: str = "",
    ) -> list[TextHit]:
        """The k best units for a free-text question by BM25, best first.

        `path_prefix` keeps only units whose node path starts with it (plain string prefix:
        "user/alice/" for an owner, "user/alice/preferences/editor" for one node); `types`
        only units of nodes of those types; `require` only units holding every word of it
        (as indexed: stemmed). Neither changes a unit's score: they only leave units out,
        before the ranking (a filter after it would cut the k best short).
        """
        if self._index is None:
            raise ValueError("text index is closed")
        terms = self.query_terms(query)
        if k <= 0 or not terms:
            return []
        if path_prefix:
            path_prefix = _valid_utf8(path_prefix)
        must = self.query_terms(require) if require else []
        if require and not must:
            return []  # nothing indexable to require: no unit holds it
        try:
            return self._search(terms, k, path_prefix, types, must)
        except BaseException as e:
            if not _is_failure(e):
                raise
            raise IndexCorrupt(f"text index {self.path} failed a search: {e}") from e

    def _search(
        self,
        terms: list[str],
        k: int,
        path_prefix: str | None,
        types: tuple[str, ...] | None = None,
        must: list[str] | None = None,
    ) -> list[TextHit]:
        Q, Occur = tantivy.Query, tantivy.Occur
        assert self._index is not None  # `search` checked
        searcher = self._index.searcher()
        text_query = Q.boolean_query(
            [(Occur.Should, Q.term_query(self._schema, "text", t)) for t in terms]
        )
        # Filters score 0, leaving BM25 as it was; the engine skips along the narrowest
        # (a name's few units), not through every unit a common word is in.
        filters = []
        if path_prefix:
            filters.append(self._prefix_query(searcher, path_prefix))
        if types is not None:
            filters.append(
                Q.boolean_query(
                    [(Occur.Should, Q.term_query(self._schema, "type", t)) for t in types]
                )
            )
        filters += [Q.term_query(self._schema, "text", t) for t in must or ()]
        query = text_query
        if filters:
            query = Q.boolean_query(
                [(Occur.Must, text_query)]
                + [(Occur.Must, Q.const_score_query(f, 0.0)) for f in filters]
            )
        staged = self._staged
        if staged.units:  # what the committed index holds of a staged node is out of date
            query = Q.boolean_query(
                [
                    (Occur.Must, query),
                    (Occur.MustNot, Q.term_set_query(self._schema, "node_id", list(staged.units))),
                ]
            )
        out = []
        for score, address in searcher.search(query, k).hits:
            doc = searcher.doc(address)
            node_id, chunk = doc.get_first("node_id"), doc.get_first("chunk")
            assert node_id is not None and chunk is not None  # stored in every unit's document
            out.append(
                TextHit(
                    node_id=int(node_id),
                    tier=str(doc.get_first("tier")),
                    chunk=int(chunk),
                    score=float(score),
                )
            )
        if staged.units:
            out += self._staged_hits(searcher, text_query, terms, path_prefix, types, must)
        # Equal scores (two units of the same words) come in the order of their documents
        # in tantivy's segments, which a background merge changes: the same question then
        # listed its ties the other way round. The older node goes first, as tantivy lists
        # the documents of segments it has not merged.
        out.sort(key=_hit_order)
        del out[k:]
        return out

    def _staged_hits(
        self,
        searcher: Any,
        text_query: tantivy.Query,
        terms: list[str],
        path_prefix: str | None,
        types: tuple[str, ...] | None,
        must: list[str] | None,
    ) -> list[TextHit]:
        """The staged units that match, scored as tantivy scores a term query's sum (BM25,
        its k1 and b): a term's document frequency and the unit count are the committed
        index's plus the staged units' (those in scope, for the frequency), the mean unit
        length the committed index's."""
        staged = self._staged
        units = [
            u
            for node_id, node_units in staged.units.items()
            if node_units
            and (not path_prefix or staged.meta[node_id][2].startswith(path_prefix))
            and (types is None or staged.meta[node_id][1] in types)
            for u in node_units
        ]
        if not units:
            return []
        counts = [self._unit_terms(u) for u in units]
        committed, avgdl = self._committed_stats(searcher, text_query, counts)
        total = committed + staged.count()
        idf = {}
        for t in terms:
            df = searcher.doc_freq("text", t) + sum(1 for c in counts if c[t])
            # never above the count: a unit deleted but not merged away yet is in both
            idf[t] = math.log(1 + (total - min(df, total) + 0.5) / (df + 0.5))
        out = []
        for u, tf in zip(units, counts, strict=True):
            if any(tf[t] == 0 for t in must or ()):
                continue
            norm = _K1 * (1 - _B + _B * sum(tf.values()) / avgdl)
            score = sum(idf[t] * (_K1 + 1) * tf[t] / (tf[t] + norm) for t in terms if tf[t])
            if score > 0:
                out.append(TextHit(node_id=u.node_id, tier=u.tier, chunk=u.chunk, score=score))
        return out

    def _unit_terms(self, u: Unit) -> Counter[str]:
        key = (u.node_id, u.tier, u.chunk)
        tf = self._staged.terms.get(key)
        if tf is None:
            tf = self._staged.terms[key] = Counter(self._analyzer.analyze(_valid_utf8(u.text)))
        return tf

    def _committed_stats(
        self, searcher: Any, text_query: tantivy.Query, counts: list[Counter[str]]
    ) -> tuple[float, float]:
        """BM25's unit count and mean unit length as tantivy has them for the committed
        index (kept until the next commit). The count is not `num_docs`: it holds the
        units deleted but not yet merged away, as the document frequencies do (an fsync
        of a node committed before counted its old units in a term's frequency but not in
        `num_docs`, and the staged units' idf went negative). tantivy tells both in the
        explanation of a hit; with no committed hit, `num_docs` and the staged units'
        own mean length stand in."""
        if self._stats is None:
            hits = searcher.search(text_query, 1).hits
            if hits:
                try:
                    explained = json.loads(text_query.explain(searcher, hits[0][1]).to_json())
                    count = _explained(explained, "N, total number of docs")
                    avgdl = _explained(explained, "avgdl")
                    if count and avgdl:
                        self._stats = (count, avgdl)
                except (ValueError, TypeError) as e:
                    log.debug("text index: no BM25 statistics from tantivy (%s)", e)
        if self._stats is not None:
            return self._stats
        length = sum(sum(c.values()) for c in counts) / max(1, len(counts))
        return float(searcher.num_docs), max(1.0, length)

    def snippet(self, query: str, text: str) -> str:
        """The part of `text` (a unit's) that best matches a question, at most
        SNIPPET_CHARS long; its head when no word of the question is in it."""
        return self.snippets(query, [text])[0]

    def snippets(self, query: str, texts: Sequence[str]) -> list[str]:
        """`snippet` of each of these texts for one question: the question is analysed and
        tantivy's snippet generator made once (a search makes the snippets of its k hits
        together, and making the generator was most of each one's cost)."""
        terms = self.query_terms(query)
        if self._index is None or not terms:
            return [_head(text) for text in texts]
        Q, Occur = tantivy.Query, tantivy.Occur
        text_query = Q.boolean_query(
            [(Occur.Should, Q.term_query(self._schema, "text", t)) for t in terms]
        )
        try:
            generator = tantivy.SnippetGenerator.create(
                self._index.searcher(), text_query, self._schema, "text"
            )
            generator.set_max_num_chars(SNIPPET_CHARS)
        except BaseException as e:
            if not _is_failure(e):
                raise
            return [_head(text) for text in texts]
        out = []
        for text in texts:
            try:
                fragment = generator.snippet_from_doc(tantivy.Document(text=text)).fragment()
            except BaseException as e:
                if not _is_failure(e):
                    raise
                fragment = ""
            out.append(fragment or _head(text))
        return out

    def _prefix_query(self, searcher: Any, prefix: str) -> tantivy.Query:
        """Paths starting with `prefix`, taken literally."""
        query = self._prefixes.get(prefix)
        if query is not None:
            return query
        try:
            # An anchored regex over the term dictionary: 4x faster than listing the
            # matching terms when thousands of paths match. Making it compiles the regex
            # (0.3 ms), and a scope's questions ask for the same prefix: kept.
            query = tantivy.Query.regex_query(
                self._schema, "path", _regex_escape(prefix) + "(?s:.*)"
            )
            if len(self._prefixes) >= _PREFIXES_KEPT:
                self._prefixes.clear()
            self._prefixes[prefix] = query
            return query
        except ValueError as e:  # say, a prefix too long for the regex automaton
            log.debug("path prefix as a regex failed (%s); listing terms instead", e)
            paths = [t for t, _ in searcher.terms_with_prefix("path", prefix)]
            return tantivy.Query.term_set_query(self._schema, "path", paths)

    def read_ahead(self) -> None:
        """Ask the kernel for the index's files (posix_fadvise WILLNEED), in the background
        of the call: this machine reclaims the page cache of files not read for a while
        (even with memory free), and tantivy maps its files, so the first questions after
        a mount paid a major page fault per block they touched (30-60 a question at a
        million nodes, bench_scale). Positions (`.pos`) are left out: no query here reads
        them."""
        if self.path is None or not hasattr(os, "posix_fadvise"):
            return
        for f in self.path.iterdir():
            if f.suffix == ".pos" or not f.is_file():
                continue
            try:
                fd = os.open(f, os.O_RDONLY)
            except OSError:
                continue
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
            except OSError:
                pass
            finally:
                os.close(fd)

    def close(self) -> None:
        """Commit what is staged, let merges finish and release the writer's lock.
        Idempotent."""
        if self._staged.units and self._writer is not None:
            try:
                self._commit()
            except Exception as e:  # noqa: BLE001 - the indexer's cursor applies it again
                log.warning("text index: staged changes not committed at close (%s)", e)
        self._drop_writer()
        self._index = None

    def _drop_writer(self) -> None:
        """Let the writer's merges finish and release its lock at once (consumed: a
        failure's traceback that still holds the object no longer holds the lock, and
        the next writer can be opened)."""
        writer, self._writer = self._writer, None
        if writer is not None:
            try:
                writer.wait_merging_threads()
            except Exception as e:  # a consumed or killed writer has nothing to wait for
                log.debug("closing text index writer: %s", e)

    def __enter__(self) -> TextIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# The characters Rust's regex-syntax treats as meta (its `escape` escapes exactly these);
# every other character, unicode included, stands for itself.
_REGEX_META = frozenset("\\.+*?()|[]{}^$#&-~")


def _regex_escape(text: str) -> str:
    return "".join("\\" + c if c in _REGEX_META else c for c in text)


def _hit_order(h: TextHit) -> tuple[float, int, str, int]:
    """Best first; of equal scores the older node (lower id), then its tiers and chunks."""
    return (-h.score, h.node_id, h.tier, h.chunk)


def _valid_utf8(text: str) -> str:
    """`text` less lone surrogates, which cannot cross into Rust."""
    return text.encode("utf-8", "ignore").decode("utf-8")


def _explained(node: Any, name: str) -> float | None:
    """The value a tantivy explanation (JSON) gives for `name` (the start of a leaf's
    description: "avgdl", "N, total number of docs"), wherever it is nested."""
    if isinstance(node, dict):
        if str(node.get("description", "")).startswith(name) and "details" not in node:
            return float(node["value"]) if node.get("value") else None
        for child in node.get("details", ()):
            found = _explained(child, name)
            if found:
                return found
    return None


def _head(text: str) -> str:
    if len(text) <= SNIPPET_CHARS:
        return text
    cut = text.rfind(" ", 0, SNIPPET_CHARS)
    return text[: cut if cut > SNIPPET_CHARS // 2 else SNIPPET_CHARS] + "…"
