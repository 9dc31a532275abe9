"""Tier text on demand: nodes whose L1 and L2 are read from the store when first asked for.

A node's L1 and L2 are most of what it weighs (about 1.4 KB of a node's 4 KB at 10k nodes
in `scripts/bench_scale.py`), and a mount reads few of them: so `Memory` keeps them only for
the nodes in use. `LazyNode` is a `Node` whose `l1`/`l2` are properties: unloaded, they are
fetched from the store (`Store.node_text`, which is safe from any thread: search reads
nodes in worker threads) and the node joins `TierTexts`, a bounded LRU; past its capacity
the least recently used node lets its texts go again. Everything that reads `n.l1`/`n.l2`
works unchanged.

Only texts the store holds as committed are ever let go: setting `l1`/`l2` marks the node
dirty (its text exists in memory only, or in an open transaction), and it stays loaded
until `Memory`'s transaction commits it (`TierTexts.committed`). A rollback leaves it
loaded with the restored text, which is right either way.

L0 (one short line that listings and summaries read all the time), the tags, sources and
the version list stay in memory. `TextWarmup` is the background service that, after a
mount, reads the texts of the most recently changed nodes (up to the capacity) in worker
threads: a store of up to `capacity` nodes is then whole in memory a moment after the
mount, as before texts were on demand, and the first queries do not wait for a cold
store. Boundary: no FUSE, no SQL here; the store is reached only through
`Store.node_text(s)`.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

import trio

from contextfs.memory.background import Service
from contextfs.model import Node

if TYPE_CHECKING:
    from contextfs.store import Store

log = logging.getLogger(__name__)

# Nodes whose L1/L2 stay loaded once clean: every node of a store of up to 20,000 (what a
# mount held before texts were on demand; about 30 MB of text in bench_scale's nodes), the
# most recently used of a larger one.
DEFAULT_HOT_NODES = 20_000
WARM_BATCH = 500  # texts read by one query of the warm-up (about 10-40 ms here)

K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T")

if TYPE_CHECKING:

    class _Slot(Protocol[T]):
        """A slot descriptor of Node holding a T (None: not loaded)."""

        def __get__(self, obj: Node, owner: type[Node]) -> T: ...

        def __set__(self, obj: Node, value: T | None) -> None: ...


# The slot descriptors the dataclass made for Node's l1 and l2: LazyNode's properties
# keep the text in them (None = not loaded), so a loaded node costs what a Node does.
_L1: _Slot[str] = Node.__dict__["l1"]
_L2: _Slot[str] = Node.__dict__["l2"]
# ... and for the version list and person_wrote, read per node when first asked for
# (memory.heads: a node read from the store does not read its versions until then)
_HISTORY: _Slot[list[tuple[int, float, int]]] = Node.__dict__["history"]
_PERSON: _Slot[bool] = Node.__dict__["person_wrote"]


class LRU(OrderedDict, Generic[K, V]):
    """A dict that keeps at most `capacity` entries, dropping the least recently used;
    `get` and assignment count as use. Not thread-safe by itself."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity

    def get(self, key, default=None):
        try:
            value = self[key]
        except KeyError:
            return default
        self.move_to_end(key)
        return value

    def __setitem__(self, key, value) -> None:
        super().__setitem__(key, value)
        self.move_to_end(key)
        while len(self) > self.capacity:
            self.popitem(last=False)


def _peek(slot: _Slot[T], n: Node) -> T | None:
    """The text in a slot; None when not loaded (or not yet set: during __init__)."""
    try:
        return slot.__get__(n, Node)
    except AttributeError:
        return None


class LazyNode(Node):
    """A Node whose L1 and L2 live in the store until read (see the module docstring).

    `_texts` is the TierTexts that loads and evicts it (absent on copies made with
    `dataclasses.replace`, which carry their texts); `_sizes` is the UTF-8 byte size of
    (L1, L2) while they are not loaded, so `stat` does not read them."""

    __slots__ = ("_texts", "_sizes", "_dirty", "__weakref__")
    _texts: TierTexts
    _sizes: tuple[int, int]
    _dirty: bool

    @property
    def history(self) -> list[tuple[int, float, int]]:
        v = _peek(_HISTORY, self)
        return v if v is not None else self._load_history()[0]

    @history.setter
    def history(self, value: list[tuple[int, float, int]]) -> None:
        _HISTORY.__set__(self, value)

    @property
    def person_wrote(self) -> bool:
        v = _peek(_PERSON, self)
        return v if v is not None else self._load_history()[1]

    @person_wrote.setter
    def person_wrote(self, value: bool) -> None:
        _PERSON.__set__(self, value)

    def forget_history(self) -> None:
        """The version list is the store's: read it when first asked for."""
        _HISTORY.__set__(self, None)
        _PERSON.__set__(self, None)

    def _load_history(self) -> tuple[list[tuple[int, float, int]], bool]:
        texts: TierTexts | None = getattr(self, "_texts", None)
        if texts is None:
            raise RuntimeError(f"node {self.id}: versions not loaded and no store to read")
        history, person = texts.store.node_history(self.id)
        texts.history_reads += 1
        with texts.lock:  # (another thread may have loaded it, or a writer appended)
            if _peek(_HISTORY, self) is None:
                _HISTORY.__set__(self, history)
                _PERSON.__set__(self, person)
            return _HISTORY.__get__(self, Node), _PERSON.__get__(self, Node)

    @property
    def l1(self) -> str:
        v = _peek(_L1, self)
        return v if v is not None else self._load()[0]

    @l1.setter
    def l1(self, value: str) -> None:
        self._set(_L1, _L2, value)

    @property
    def l2(self) -> str:
        v = _peek(_L2, self)
        return v if v is not None else self._load()[1]

    @l2.setter
    def l2(self, value: str) -> None:
        self._set(_L2, _L1, value)

    def _set(self, slot: _Slot[str], other: _Slot[str], value: str) -> None:
        texts: TierTexts | None = getattr(self, "_texts", None)
        if texts is None:  # being built (dataclass __init__, replace): a plain slot
            self._dirty = True
            slot.__set__(self, value)
            return
        if _peek(other, self) is None:
            texts.load(self)  # a dirty node is whole in memory: never half in the store
        with texts.lock:  # dirty before the text, so an eviction never drops it
            self._dirty = True
            slot.__set__(self, value)

    def _load(self) -> tuple[str, str]:
        texts: TierTexts | None = getattr(self, "_texts", None)
        if texts is None:
            raise RuntimeError(f"node {self.id}: texts not loaded and no store to read them from")
        return texts.load(self)

    @property
    def loaded(self) -> bool:
        return _peek(_L2, self) is not None

    def tier_size(self, name: str) -> int:
        if name != "L0" and not self.loaded:
            return self._sizes[0 if name == "L1" else 1]
        return super().tier_size(name)

    def unload(self) -> bool:
        """Let go of L1 and L2 if the store holds them as they are; True if it did.
        Called with the TierTexts lock held."""
        l1, l2 = _peek(_L1, self), _peek(_L2, self)
        if getattr(self, "_dirty", True) or l1 is None or l2 is None:
            return False
        self._sizes = (len(l1.encode("utf-8")), len(l2.encode("utf-8")))
        _L1.__set__(self, None)
        _L2.__set__(self, None)
        return True


class TierTexts:
    """Loads LazyNodes' texts from the store and keeps at most `capacity` clean nodes
    loaded (LRU). Called from the trio thread and from search's worker threads."""

    def __init__(self, store: Store, capacity: int = DEFAULT_HOT_NODES) -> None:
        self.store = store
        self.capacity = capacity
        self._hot: OrderedDict[int, LazyNode] = OrderedDict()
        self.lock = threading.Lock()
        self.loads = 0  # texts read from the store (for .status and benchmarks)
        self.history_reads = 0  # store queries for version lists (tests, benchmarks)
        self.evictions = 0

    def adopt(self, n: LazyNode, sizes: tuple[int, int] | None) -> LazyNode:
        """Make n this cache's: with sizes, n's texts are not loaded (l1 and l2 None)."""
        n._texts = self
        n._dirty = sizes is None
        if sizes is not None:
            n._sizes = sizes
            _L1.__set__(n, None)
            _L2.__set__(n, None)
        return n

    def load(self, n: LazyNode) -> tuple[str, str]:
        """n's (L1, L2), read from the store unless loaded; n joins the hot nodes."""
        with self.lock:
            l1, l2 = _peek(_L1, n), _peek(_L2, n)
            if l1 is not None and l2 is not None:
                self._use(n)
                return l1, l2
        stored = self.store.node_text(n.id)  # outside the lock: a query, maybe a thread's
        if stored is None:  # no row: a node never stored is dirty, so this is not reached
            log.warning("node %d has no row to read its texts from", n.id)
            stored = ("", "")
        with self.lock:
            l1, l2 = _peek(_L1, n), _peek(_L2, n)
            if l1 is None or l2 is None:  # (another thread may have loaded or set them)
                l1, l2 = stored
                _L1.__set__(n, l1)
                _L2.__set__(n, l2)
                n._dirty = False
                self.loads += 1
            self._use(n)
            return l1, l2

    def prefetch(self, nodes: Sequence[Node | None]) -> None:
        """Load the texts of those of these nodes that are not loaded, in one query (a
        search reads the texts of its candidates; one query each costs a millisecond)."""
        want: dict[int, LazyNode] = {}
        for n in nodes:
            if isinstance(n, LazyNode) and getattr(n, "_texts", None) is self and not n.loaded:
                want[n.id] = n
        if not want:
            return
        stored = self.store.node_texts(list(want)[: self.capacity])
        with self.lock:
            for nid, (l1, l2) in stored.items():
                n = want[nid]
                if _peek(_L1, n) is None or _peek(_L2, n) is None:
                    _L1.__set__(n, l1)
                    _L2.__set__(n, l2)
                    n._dirty = False
                    self.loads += 1
                self._use(n)

    @staticmethod
    def history_loaded(n: Node | None) -> bool:
        """Whether n's version list is in memory (a node not read lazily always is)."""
        return not isinstance(n, LazyNode) or _peek(_HISTORY, n) is not None

    def prefetch_history(self, nodes: list[Node | None], most: int) -> None:
        """Load the version lists of the first `most` of these nodes that have none loaded,
        in one query (a listing of `.history` in every node of a directory: `find`, `ls -R`)."""
        want = list(
            {
                n.id: n
                for n in nodes
                if isinstance(n, LazyNode)
                and getattr(n, "_texts", None) is self
                and _peek(_HISTORY, n) is None
            }.values()
        )[:most]
        if not want:
            return
        stored = self.store.node_histories([n.id for n in want])
        self.history_reads += 1
        with self.lock:  # (another thread may have loaded one, or a writer appended)
            for n in want:
                if _peek(_HISTORY, n) is None:
                    history, person = stored[n.id]
                    _HISTORY.__set__(n, history)
                    _PERSON.__set__(n, person)

    def read_l2(self, nodes: list[Node]) -> dict[int, str]:
        """The L2 of these nodes by id, without making them hot: a loaded one's from
        memory, the others' read 1,000 a query and let go (a consolidation pass reads a
        whole group once; through the LRU it would push out what the mount is using)."""
        out: dict[int, str] = {}
        cold: list[int] = []
        with self.lock:
            for n in nodes:
                l2 = _peek(_L2, n) if isinstance(n, LazyNode) else n.l2
                if l2 is None:
                    cold.append(n.id)
                else:
                    out[n.id] = l2
        for i in range(0, len(cold), 1000):
            for nid, (_l1, l2) in self.store.node_texts(cold[i : i + 1000]).items():
                out.setdefault(nid, l2)
        return out

    def committed(self, nodes: list[Node]) -> None:
        """These nodes' rows just committed: their texts are the store's, they may go."""
        with self.lock:
            for n in nodes:
                if isinstance(n, LazyNode) and getattr(n, "_texts", None) is self:
                    n._dirty = False
                    self._use(n)

    def _use(self, n: LazyNode) -> None:
        """n was used: most recent; past the capacity the oldest clean node unloads."""
        hot = self._hot
        hot[n.id] = n
        hot.move_to_end(n.id)
        while len(hot) > self.capacity:
            _nid, old = hot.popitem(last=False)
            if old.unload():
                self.evictions += 1

    def __len__(self) -> int:
        return len(self._hot)


class TextWarmup(Service):
    """After a mount: load the texts of the most recently changed live nodes, up to the
    hot capacity, `WARM_BATCH` a query in a worker thread, then end. Writes and reads go
    on meanwhile (the loads take the TierTexts lock like a search's)."""

    def __init__(
        self,
        texts: TierTexts,
        nodes: list[Node] | Callable[[int], list[Node]],
        also: Callable[[], object] | None = None,
    ) -> None:
        super().__init__()
        self.texts = texts
        # read first, in a worker thread too: what a first question would otherwise wait
        # for (the search's table of entity names: about a second at a million nodes)
        self.also = also
        # nodes, or what reads the most recently changed (up to a limit) in a worker thread
        self.nodes = nodes
        self.loaded = 0

    def _order(self) -> list[Node]:
        nodes = self.nodes(self.texts.capacity) if callable(self.nodes) else self.nodes
        live = [n for n in nodes if n.deleted_at is None and n.archived_at is None]
        live.sort(key=attrgetter("updated"), reverse=True)
        return live[: self.texts.capacity]

    async def run(self) -> None:
        if self.also is not None:
            await trio.to_thread.run_sync(self.also)
        order = await trio.to_thread.run_sync(self._order)
        before = self.texts.loads
        for i in range(0, len(order), WARM_BATCH):
            if self.stopping:
                break
            await trio.to_thread.run_sync(self.texts.prefetch, order[i : i + WARM_BATCH])
        self.loaded = self.texts.loads - before
        log.info("texts of %d node(s) read into memory after the mount", self.loaded)
