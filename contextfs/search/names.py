"""The live entity names of a store, for the questions that name an entity.

Role: `EntityNames` answers "which entities does this question name?" (`named`) and "which
entity nodes have this name?" (`ids`) from a table of (node id, name) kept in step with the
store through the outbox: after a write, only the nodes changed since the last look are
read again, never every entity (at a million nodes, half of them entities, a full read is
about a second, and a search after every write would pay it). The table holds ids and
names, not nodes: a node is read (or found held) only when a question names it.

Boundary: reads the store through `Memory.store` (the calling thread's own connection: a
search runs in a worker thread and sees committed rows); knows nothing of indexes.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable

import numpy as np
import xxhash

from contextfs.memory.service import Memory
from contextfs.store.backend import FeedRows, NodeRows

ENTITY_TYPE = "entity"
# Past this many nodes changed since the last look, the table is read again whole.
REFRESH_MAX = 5_000
# While the table is first read, the longest name (in words) a question is asked for.
LOADING_WORDS = 6
LOOKED_UP_MAX = 8192  # names whose ids are kept between changes of the table
_WORD = re.compile(r"\w+")
_EMPTY_IDS = np.empty(0, np.int64)
_EMPTY_KEYS = np.empty(0, np.uint64)


def _key(name: str) -> int:
    return xxhash.xxh64_intdigest(name.encode())


class EntityNames:
    """Lowercased entity names (the node name with spaces: "maya lopez") to live node ids.

    Kept as two numpy arrays, not dicts of strings and lists: at a million nodes, half of
    them entities, the dicts took 204 MiB of the daemon, the arrays take 8 MiB. A name is
    its 64-bit hash (xxh64): the table answers for the names a question spells, never
    lists them. The (key, id) pairs are sorted by key (what a question looks up); a change
    removes and inserts a few, never re-sorts."""

    def __init__(self, memory: Memory, refresh_max: int = REFRESH_MAX) -> None:
        self.memory = memory
        self.feed: FeedRows = memory.store  # which nodes changed since the table was read
        self.rows: NodeRows = memory.store  # the entities' names
        self.refresh_max = refresh_max
        self.full_reads = 0  # how often the whole table was read (once, unless much changed)
        # searches run in worker threads, several at once, and the warm-up in another
        self._lock = threading.Lock()
        self._upto = -1  # the outbox seq the table reflects; -1: never read
        self._keys, self._ids_by_key = _EMPTY_KEYS, _EMPTY_IDS  # ascending keys
        self._words = 1  # the most words a name has had (how long a phrase to look up)
        # name -> ids, while the table does not change: a search looks up the capitalised
        # words of its best passages, the same few names question after question, and a
        # lookup in the arrays costs two numpy calls
        self._looked_up: dict[str, tuple[int, ...]] = {}

    def refresh(self) -> None:
        """Bring the table up to what the store has committed (cheap when nothing changed).
        The first call reads it whole: the daemon makes it after a mount, in the warm-up."""
        if self._loading():
            return
        with self._lock:
            self._refresh()

    def _refresh(self) -> None:
        if self._upto == self.memory.generation:
            return
        upto = self.feed.outbox_upto()
        if upto == self._upto:
            return  # the newest change is not committed yet: seen when it is
        changed = (
            None if self._upto < 0 else self.feed.nodes_changed_since(self._upto, self.refresh_max)
        )
        if changed is None:
            self._set(self.rows.all_live_names(ENTITY_TYPE))
            self.full_reads += 1
        elif changed:
            self._drop(np.asarray(changed, np.int64))
            self._add(self.rows.live_names(ENTITY_TYPE, changed))
        self._upto = upto

    def _pairs(self, rows: list[tuple[int, str]]) -> tuple[np.ndarray, np.ndarray]:
        """(ids, keys) of the rows whose names are long enough to be told from a word."""
        ids, keys = [], []
        for nid, node_name in rows:
            if len(node_name) >= 3:
                name = node_name.replace("-", " ").lower()
                self._words = max(self._words, name.count(" ") + 1)
                ids.append(nid)
                keys.append(_key(name))
        return np.asarray(ids, np.int64), np.asarray(keys, np.uint64)

    def _set(self, batches: Iterable[list[tuple[int, str]]]) -> None:
        pairs = [self._pairs(rows) for rows in batches]
        ids = np.concatenate([p[0] for p in pairs] or [_EMPTY_IDS])
        keys = np.concatenate([p[1] for p in pairs] or [_EMPTY_KEYS])
        order = np.argsort(keys, kind="stable")
        self._keys, self._ids_by_key = keys[order], ids[order]
        self._looked_up.clear()

    def _drop(self, changed: np.ndarray) -> None:
        gone = np.isin(self._ids_by_key, changed)
        if gone.any():
            self._keys, self._ids_by_key = self._keys[~gone], self._ids_by_key[~gone]
            self._looked_up.clear()

    def _add(self, rows: list[tuple[int, str]]) -> None:
        ids, keys = self._pairs(rows)
        if not len(ids):
            return
        # np.insert puts values bound for one place in the order given: sorted first
        order = np.argsort(keys, kind="stable")
        at = np.searchsorted(self._keys, keys[order])
        self._keys = np.insert(self._keys, at, keys[order])
        self._ids_by_key = np.insert(self._ids_by_key, at, ids[order])
        self._looked_up.clear()

    def _lookup(self, name: str) -> list[int]:
        got = self._looked_up.get(name)
        if got is None:
            k = np.uint64(_key(name))
            lo = int(np.searchsorted(self._keys, k, "left"))
            hi = int(np.searchsorted(self._keys, k, "right"))
            got = tuple(sorted(int(i) for i in self._ids_by_key[lo:hi]))
            if len(self._looked_up) >= LOOKED_UP_MAX:
                self._looked_up.clear()
            self._looked_up[name] = got
        return list(got)

    def _loading(self) -> bool:
        """Whether another thread is reading the whole table for the first time (the
        warm-up after a mount: about a second at a million nodes). A question asked
        meanwhile asks the store for its own phrases instead of waiting for it."""
        return self._upto < 0 and self._lock.locked()

    def _from_store(self, phrases: set[str]) -> dict[str, list[int]]:
        """phrase -> ids of the live entities so named, from the store itself (one query)."""
        slugs = {p.replace(" ", "-"): p for p in phrases if len(p) >= 3}
        found: dict[str, list[int]] = {}
        for nid, name in self.rows.live_named(ENTITY_TYPE, sorted(slugs)):
            found.setdefault(slugs[name], []).append(nid)
        return {p: sorted(ids) for p, ids in found.items()}

    def ids(self, name: str) -> list[int]:
        """The live entity nodes called `name` (lowercased, spaces for hyphens), oldest first."""
        if self._loading():
            return self._from_store({name}).get(name, [])
        with self._lock:
            return self._lookup(name)

    def named(self, question: str) -> list[str]:
        """The names the question names, oldest entity first: a name as a run of its words
        ("Maya Lopez's trip" names "maya lopez"; "maximal" does not name "max"), case
        aside. Found by looking up the question's own phrases, not by trying every entity
        (18 ms a question at 100,000 nodes, half of them entities)."""
        words = _WORD.findall(question.lower())

        def phrases(longest: int) -> set[str]:
            return {
                " ".join(words[i : i + n])
                for i in range(len(words))
                for n in range(1, longest + 1)
                if i + n <= len(words)
            }

        if self._loading():
            found = self._from_store(phrases(LOADING_WORDS))
        else:
            with self._lock:
                self._refresh()
                found = {
                    p: ids for p in phrases(self._words) if len(p) >= 3 and (ids := self._lookup(p))
                }
        return sorted(found, key=lambda name: found[name][0])
