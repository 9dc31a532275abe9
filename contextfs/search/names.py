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

import bisect
import re
import threading

from contextfs.memory.service import Memory

ENTITY_TYPE = "entity"
# Past this many nodes changed since the last look, the table is read again whole.
REFRESH_MAX = 5_000


class EntityNames:
    """Lowercased entity names (the node name with spaces: "maya lopez") to live node ids."""

    def __init__(self, memory: Memory, refresh_max: int = REFRESH_MAX) -> None:
        self.memory = memory
        self.refresh_max = refresh_max
        self.full_reads = 0  # how often the whole table was read (once, unless much changed)
        # searches run in worker threads, several at once, and the warm-up in another
        self._lock = threading.Lock()
        self._upto = -1  # the outbox seq the table reflects; -1: never read
        self._name_of: dict[int, str] = {}  # node id -> its key in `_ids`
        self._ids: dict[str, list[int]] = {}  # name -> ids, ascending
        self._starts: dict[str, set[str]] = {}  # first word -> names of two words or more

    def refresh(self) -> None:
        """Bring the table up to what the store has committed (cheap when nothing changed).
        The first call reads it whole: the daemon makes it after a mount, in the warm-up."""
        with self._lock:
            self._refresh()

    def _refresh(self) -> None:
        if self._upto == self.memory.generation:
            return
        store = self.memory.store
        upto = store.outbox_upto()
        if upto == self._upto:
            return  # the newest change is not committed yet: seen when it is
        changed = (
            None if self._upto < 0 else store.nodes_changed_since(self._upto, self.refresh_max)
        )
        if changed is None:
            self._name_of, self._ids, self._starts = {}, {}, {}
            rows = store.live_names(ENTITY_TYPE)
            self.full_reads += 1
        else:
            for nid in changed:
                self._drop(nid)
            rows = store.live_names(ENTITY_TYPE, changed) if changed else []
        for nid, name in rows:
            self._add(nid, name)
        self._upto = upto

    def _add(self, nid: int, node_name: str) -> None:
        if len(node_name) < 3:
            return
        name = node_name.replace("-", " ").lower()
        self._name_of[nid] = name
        bisect.insort(self._ids.setdefault(name, []), nid)
        if " " in name:
            self._starts.setdefault(name.split(" ", 1)[0], set()).add(name)

    def _drop(self, nid: int) -> None:
        name = self._name_of.pop(nid, None)
        if name is None:
            return
        ids = self._ids[name]
        ids.remove(nid)
        if not ids:
            del self._ids[name]
            if " " in name:
                first = name.split(" ", 1)[0]
                self._starts[first].discard(name)
                if not self._starts[first]:
                    del self._starts[first]

    def ids(self, name: str) -> list[int]:
        """The live entity nodes called `name` (lowercased, spaces for hyphens), oldest first."""
        with self._lock:
            return list(self._ids.get(name, ()))

    def named(self, question: str) -> list[str]:
        """The names the question names, oldest entity first: a one-word name as one of its
        words, a longer one as written in it ("Maya Lopez's trip"), case aside. Found from
        the question's words, not by trying every entity (18 ms a question at 100,000
        nodes, half of them entities)."""
        asked = question.lower()
        words = set(re.findall(r"[\w'’-]+", asked))
        with self._lock:
            self._refresh()
            found = {w for w in words if w in self._ids}
            for w in words:
                found.update(name for name in self._starts.get(w, ()) if name in asked)
            return sorted(found, key=lambda name: self._ids[name][0])
