"""The memory's heads on demand: the nodes a mount uses are held, the rest stay in the store.

`Memory` used to read every node's row (without L1/L2) and the whole versions table at
open, and hold a node object per node: a mount's time and memory grew with the store
(18 s and 2 GB at a million nodes). Now:

- `NodeCache` is `Memory.nodes`: node id -> node, asking the store (`Store.node_head`, by
  primary key) for a node it does not hold. It keeps every node object it handed out in
  an identity map of weak references, so a node stays ONE object while anything holds it
  (a tree inode, a transaction's journal, a search in a worker thread): a second read
  never makes a copy that a write through the first would not change. Strongly held:
  the `capacity` most recently used nodes (LRU) and the pinned ones, which the store does
  not hold as they are (made by mkdir and not stored yet, access counts not flushed, L1/L2
  set and not committed); a pinned node returns to the LRU when `release`d.
- `LiveIndex` is `Memory.live`: (owner kind, owner id, type, name) -> id of the live node,
  asked of the store (`Store.live_node_id`, index nodes_owner_type_name), with the live
  nodes the store does not hold yet (`pending`, journaled by `Transactions.set_live`) first.
- `walk` streams nodes from the store page by page (`Store.node_head_page`, keyset by
  id), giving the held object where there is one: what consolidation, an index rebuild,
  an export and routing read instead of iterating a dict of every node.

The version list of a node read here is read when first asked for (`LazyNode.history`).
Thread-safety: the trio thread and search's worker threads call `get` and `walk`; the maps
change under one lock; the store reads through the calling thread's connection
(`Store._meta_con`). Boundary: no FUSE and no SQL here; the store is reached only through
the methods named above.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from contextfs.memory.texts import LazyNode, TierTexts
from contextfs.model import Node

if TYPE_CHECKING:
    from contextfs.store import Store

log = logging.getLogger(__name__)

WALK_PAGE = 2_000  # nodes a query while walking the store (a few ms a page)

LiveKey = tuple[str, str, str, str]


class NodeCache:
    """Node id -> node: held ones by identity, others read from the store on a miss."""

    def __init__(
        self,
        store: Store,
        texts: TierTexts,
        capacity: int,
        keep: Callable[[Node], bool] = lambda n: False,
    ) -> None:
        self.store = store
        self.texts = texts
        self.capacity = capacity
        self._keep = keep  # besides the node's own state: what Memory has not stored
        self.lock = threading.RLock()
        self._alive: weakref.WeakValueDictionary[int, Node] = weakref.WeakValueDictionary()
        self._recent: OrderedDict[int, Node] = OrderedDict()
        self._pinned: dict[int, Node] = {}
        self.loads = 0  # heads read from the store (for tests and benchmarks)

    # ---- one node ------------------------------------------------------------------------

    def peek(self, nid: int) -> Node | None:
        """The node if something holds it; never reads the store."""
        return self._alive.get(nid)

    def get(self, nid: int, default: Node | None = None) -> Node | None:
        n = self._alive.get(nid)
        if n is None:
            head = self.store.node_head(nid, LazyNode)
            if head is None:
                return default
            n = self.adopt(*head)
            self.loads += 1
        self.use(n)
        return n

    def get_many(self, ids: list[int] | tuple[int, ...]) -> dict[int, Node]:
        """These nodes (those with a row, or held), the missing ones read in one query a
        thousand: what reads a batch of nodes (the indexer) costs a query, not one each."""
        out: dict[int, Node] = {}
        missing = []
        for nid in ids:
            n = self._alive.get(nid)
            if n is None:
                missing.append(nid)
            else:
                out[nid] = n
        for i in range(0, len(missing), 1000):
            part = missing[i : i + 1000]
            for head in self.store.node_head_page(0, len(part), LazyNode, ids=part):
                out[head[0].id] = self.adopt(*head)
                self.loads += 1
        for n in out.values():
            self.use(n)
        return out

    def __getitem__(self, nid: int) -> Node:
        n = self.get(nid)
        if n is None:
            raise KeyError(nid)
        return n

    def __contains__(self, nid: object) -> bool:
        return isinstance(nid, int) and self.get(nid) is not None

    def __setitem__(self, nid: int, n: Node) -> None:
        """A node this mount made (or loaded whole): held, pinned while not stored."""
        with self.lock:
            self._alive[nid] = n
            if self._must_keep(n):
                self._pinned[nid] = n
            else:
                self._lru_add(n)

    def pop(self, nid: int, default: Node | None = None) -> Node | None:
        """Forget a node (a rolled-back creation)."""
        with self.lock:
            n = self._alive.pop(nid, None)
            self._recent.pop(nid, None)
            self._pinned.pop(nid, None)
        return n if n is not None else default

    def adopt(self, n: Node, l1_size: int, l2_size: int) -> Node:
        """A head just read from the store: the held object if there is one (it is the
        truth in this process), else n, made lazy (texts and versions on demand)."""
        with self.lock:
            held = self._alive.get(n.id)
            if held is not None:
                return held
            if isinstance(n, LazyNode):
                self.texts.adopt(n, (l1_size, l2_size))
                n.forget_history()
            self._alive[n.id] = n
            return n

    def use(self, n: Node) -> None:
        """n was used: the most recent of the held; past the capacity the least recently
        used clean node is let go (pinned, if the store does not hold it as it is)."""
        with self.lock:
            if n.id in self._pinned:
                return
            self._lru_add(n)

    def _lru_add(self, n: Node) -> None:
        recent = self._recent
        if recent.get(n.id) is n:  # held already (a search asks for a node many times)
            recent.move_to_end(n.id)
            return
        recent[n.id] = n
        recent.move_to_end(n.id)
        while len(recent) > self.capacity:
            _nid, old = recent.popitem(last=False)
            if self._must_keep(old):
                self._pinned[old.id] = old

    def _must_keep(self, n: Node) -> bool:
        return not n.persisted or getattr(n, "_dirty", False) or self._keep(n)

    def pin(self, n: Node) -> None:
        with self.lock:
            self._alive[n.id] = n
            self._recent.pop(n.id, None)
            self._pinned[n.id] = n

    def release(self, nodes: list[Node]) -> None:
        """These nodes are stored as they are now (a commit, a flush): pinned ones that
        need no pin any more go back to the LRU."""
        with self.lock:
            for n in nodes:
                if n.id in self._pinned and not self._must_keep(n):
                    del self._pinned[n.id]
                    self._lru_add(n)

    # ---- many ------------------------------------------------------------------------------

    def unstored(self) -> list[Node]:
        """Nodes made by mkdir and not stored yet."""
        with self.lock:
            return [n for n in self._pinned.values() if not n.persisted]

    def held(self) -> int:
        """Node objects alive in this process (held by the cache, the tree, a journal)."""
        return len(self._alive)

    def walk(
        self,
        *,
        owner: tuple[str, str] | None = None,
        types: tuple[str, ...] | None = None,
        live: bool | None = None,
        ids: list[int] | None = None,
        page: int = WALK_PAGE,
        texts: bool = False,
    ) -> Iterator[Node]:
        """Every node (of an owner, of some types, live or not), in id order, read from the
        store a page at a time, then the nodes not stored yet. A node held here is given
        as held (and checked against the filters again: it may have changed since the
        row was read by a worker thread). The nodes are not added to the LRU: a walk over
        the store does not push out what the mount is using. With texts, each page's L1/L2
        are read in one query too (for a caller that reads every node's text)."""
        after = 0
        while True:
            rows = self.store.node_head_page(
                after, page, LazyNode, owner=owner, types=types, live=live, ids=ids
            )
            got = [n for n in (self.adopt(*head) for head in rows) if _fits(n, owner, types, live)]
            if texts:
                self.texts.prefetch(got)
            yield from got
            if len(rows) < page:
                break
            after = rows[-1][0].id
        for n in self.unstored():
            if _fits(n, owner, types, live) and (ids is None or n.id in ids):
                yield n

    def values(self) -> Iterator[Node]:
        """Every node in the store (and not yet stored): a walk, not a dict's values."""
        return self.walk()

    def __len__(self) -> int:
        """Every node: stored ones counted by the store, plus those not stored yet."""
        return self.store.node_counts()[0] + len(self.unstored())


def _fits(
    n: Node, owner: tuple[str, str] | None, types: tuple[str, ...] | None, live: bool | None
) -> bool:
    if owner is not None and n.owner != owner:
        return False
    if types is not None and n.type not in types:
        return False
    return live is None or live == (n.deleted_at is None and n.archived_at is None)


class LiveIndex:
    """(owner kind, owner id, type, name) -> id of the live node there, asked of the store,
    with the live nodes not stored yet (`pending`) first. Maintained by
    `Transactions.set_live`; reads only."""

    def __init__(self, store: Store, nodes: NodeCache) -> None:
        self.store = store
        self.nodes = nodes
        self.pending: dict[LiveKey, int] = {}
        # (owner, type) -> (every node, live ones) as the store counted them: `stat` of
        # every type directory (`st_nlink`) and `.status` ask often, nodes come and go
        # rarely. The type directories' are read in one aggregate the first time (a
        # directory it does not name holds no node: the first `find` after a mount asked
        # the store of each empty one), then a directory a commit touched is counted
        # again on its own (`changed` marks it None).
        self._dirs: dict[tuple[tuple[str, str], str], tuple[int, int] | None] | None = None
        self._counts: dict[tuple, tuple[int, int]] = {}

    def changed(self, nodes: list[Node] | None = None) -> None:
        """These nodes were stored, or rolled back (None: anything may have changed)."""
        self._counts = {}
        if nodes is None or self._dirs is None:
            self._dirs = None
            return
        for n in nodes:
            self._dirs[(n.owner, n.type)] = None

    def node_counts(
        self, owner: tuple[str, str] | None = None, type_name: str | None = None
    ) -> tuple[int, int]:
        if owner is not None and type_name is not None:
            dirs = self._dirs
            if dirs is None:
                dirs = self._dirs = dict(self.store.node_counts_by_dir())
            got = dirs.get((owner, type_name), (0, 0))
            if got is None:
                got = dirs[(owner, type_name)] = self.store.node_counts(owner, type_name)
            return got
        key = (owner, type_name)
        got = self._counts.get(key)
        if got is None:
            got = self._counts[key] = self.store.node_counts(owner, type_name)
        return got

    def node_at(self, key: LiveKey) -> Node | None:
        """The live node at key: held, or read from the store by its path (one query)."""
        nid = self.pending.get(key)
        if nid is not None:
            return self.nodes.get(nid)
        head = self.store.live_node_head(*key, LazyNode)
        if head is None:
            return None
        n = self.nodes.adopt(*head)
        self.nodes.use(n)
        return n

    def get(self, key: LiveKey, default: int | None = None) -> int | None:
        nid = self.pending.get(key)
        if nid is None:
            nid = self.store.live_node_id(*key)
        return nid if nid is not None else default

    def __getitem__(self, key: LiveKey) -> int:
        nid = self.get(key)
        if nid is None:
            raise KeyError(key)
        return nid

    def __contains__(self, key: object) -> bool:
        return isinstance(key, tuple) and self.get(key) is not None

    def _unstored(self) -> dict[LiveKey, int]:
        """pending, without the nodes stored since (the store names those itself)."""
        out = {}
        for key, nid in list(self.pending.items()):
            n = self.nodes.peek(nid)
            if n is not None and not n.persisted:
                out[key] = nid
        return out

    def ids(self, owner: tuple[str, str] | None = None, type_name: str | None = None) -> list[int]:
        """Ids of the live nodes (of an owner, of a type), in id order."""
        got = self.store.live_ids(owner, type_name)
        extra = [
            nid
            for key, nid in self._unstored().items()
            if (owner is None or key[:2] == owner) and (type_name is None or key[2] == type_name)
        ]
        return sorted(set(got).union(extra)) if extra else got

    def count(self, owner: tuple[str, str] | None = None, type_name: str | None = None) -> int:
        extra = sum(
            1
            for key in self._unstored()
            if (owner is None or key[:2] == owner) and (type_name is None or key[2] == type_name)
        )
        return self.node_counts(owner, type_name)[1] + extra

    def values(self) -> Iterator[int]:
        return iter(self.ids())

    def items(self) -> Iterator[tuple[LiveKey, int]]:
        for n in self.nodes.walk(live=True):
            yield (n.owner_kind, n.owner_id, n.type, n.name), n.id

    def __len__(self) -> int:
        return self.count()

    def __bool__(self) -> bool:
        return self.count() > 0
