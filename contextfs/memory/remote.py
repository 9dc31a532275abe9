"""Many mounts, one store: loading what other mounts committed, and what a write does when
another mount got there first (docs/scaling.md).

Role: the parts of `Memory` that only a shared store (PostgreSQL) needs. `catch_up` loads
every node another mount changed since this one last looked (the outbox after
`store.applied`) into the in-memory mirrors, in place, so the tree's inodes keep their
nodes; what it loaded waits in `memory.reloaded` for the tree (the `ClusterSync` service
tells it). It is two steps: `fetch` only reads the store and may run in a worker thread,
so a slow or frozen server never holds up the event loop's reads; `apply` loads what was
read, in the thread that owns the memory, unless memory moved meanwhile. `keep_both` is
the answer to a whole-file save of L2 that lost the race: the newer version stays
current, the losing text is kept as a version in `.history` and named in `.status`.
Boundary: memory and store only; no FUSE, no trio. On the embedded DuckDB store nothing
here runs (no conflict is ever raised there).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import deque
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Protocol

from contextfs.errors import VersionConflict
from contextfs.memory.texts import LazyNode
from contextfs.model import Access, Attachment, Node

if TYPE_CHECKING:
    from contextfs.memory.heads import LiveIndex, NodeCache
    from contextfs.memory.texts import TierTexts
    from contextfs.memory.transactions import Transactions
    from contextfs.store.backend import NodeRows

log = logging.getLogger(__name__)

# What another mount's commit may change; importance and access counts are this mount's
# own tallies (flushed by it, last writer wins), indexed_version and persisted are local.
_LOCAL = {"indexed_version", "persisted", "importance", "access_count"}
_COPIED = tuple(f.name for f in fields(Node) if f.name not in _LOCAL)
_ATTACHMENT_FIELDS = tuple(f.name for f in fields(Attachment))
ATTEMPTS = 5  # re-applications of one write before the conflict reaches the caller


class Mirror(Protocol):
    """What catching up with other mounts uses of the memory (`memory.service.Memory` is
    one): its mirrors of the store, where loaded nodes and owners wait for the tree, its
    transactions (the journal, the generation), a transaction and a save of L2."""

    @property
    def store(self) -> NodeRows: ...  # a shared store (store.pg.PgStore) in practice
    @property
    def nodes(self) -> NodeCache: ...
    @property
    def texts(self) -> TierTexts: ...
    @property
    def live(self) -> LiveIndex: ...
    @property
    def owners(self) -> set[tuple[str, str]]: ...
    @property
    def new_owners(self) -> list[tuple[str, str]]: ...
    @property
    def access(self) -> dict[tuple[str, str], Access]: ...
    @property
    def reaccessed(self) -> set[tuple[str, str]]: ...
    @property
    def attachments(self) -> dict[int, Attachment]: ...
    @property
    def reattached(self) -> set[int]: ...
    @property
    def reloaded(self) -> list[tuple[Node, bool]]: ...
    @property
    def conflicts(self) -> deque[str]: ...
    @property
    def transactions(self) -> Transactions: ...
    def transaction(self) -> AbstractContextManager[None]: ...
    def save_l2(self, n: Node, text: str, reason: str = ...) -> bool: ...
    def node_path(self, n: Node) -> str: ...


@dataclass
class Fetched:
    """What other mounts committed after `since`, as read by `fetch` (in any thread) for
    `apply` (in the thread that owns the memory)."""

    since: int  # store.applied when it was read
    opened: int  # the memory's transactions begun by then (-1: one was open)
    upto: int  # the newest outbox seq read
    owners: list[tuple[str, str]]
    nodes: dict[int, Node] = field(default_factory=dict)  # the changed nodes' rows
    # of those, the ones held when read (kept, so they stay the ones held), and the heads
    # (memory.heads) of the others
    held: dict[int, Node] = field(default_factory=dict)
    heads: dict[int, tuple[Node, int, int]] = field(default_factory=dict)
    access: dict[tuple[str, str], Access] | None = None  # when another mount changed some
    attachment_nodes: set[int] = field(default_factory=set)  # whose attachments changed
    attachments: list[Attachment] = field(default_factory=list)  # theirs, as stored
    complete: bool = True  # False: more outbox rows wait after upto


def fetch(memory: Mirror, rounds: int = 10, *, in_memory_thread: bool = False) -> Fetched:
    """Read what other mounts committed since `store.applied`: up to `rounds` pages of the
    outbox, and the rows `apply` needs. Only reads (each thread on a connection of its
    own) and changes nothing in memory, so it may run off the event loop while the
    server is slow or frozen, and what it read may be dropped. `in_memory_thread`: called
    by the thread that owns the memory (`catch_up`), inside its transaction maybe."""
    store = memory.store
    opened = memory.transactions.opened
    if memory.transactions.journal is not None and not in_memory_thread:
        # a transaction of the memory's thread is open (this runs in another thread): the
        # rows read now may be overtaken by its commit without a new one being opened
        opened = -1
    got = Fetched(store.applied, opened, store.applied, store.owners())  # type: ignore[attr-defined]
    ids: list[int] = []
    for _ in range(rounds):
        changes = store.changes_after(got.upto)  # type: ignore[attr-defined]
        if changes.upto <= got.upto:
            break
        got.upto = changes.upto
        ids += changes.nodes
        got.attachment_nodes |= changes.attachments
        if changes.access and got.access is None:
            got.access = {}
    else:
        got.complete = False
    ids = list(dict.fromkeys(ids))
    unheld = []
    for nid in ids:  # before the rows are read: they are as new as the held nodes, or newer
        n = memory.nodes.peek(nid)
        if n is None:
            unheld.append(nid)
        else:
            got.held[nid] = n
    got.nodes = store.nodes_by_id(ids) if ids else {}  # type: ignore[attr-defined]
    for i in range(0, len(unheld), 1000):
        part = unheld[i : i + 1000]
        for head in store.node_head_page(0, len(part), LazyNode, ids=part):
            got.heads[head[0].id] = head
    if got.access is not None:
        got.access = store.access()
    if got.attachment_nodes:
        got.attachments = store.node_attachments(sorted(got.attachment_nodes))  # type: ignore[attr-defined]
    return got


def apply(memory: Mirror, got: Fetched) -> int | None:
    """Load what `fetch` read into memory; how many nodes changed. None, with nothing
    loaded, when memory moved since (a transaction of this mount began, or another catch
    up loaded changes): what was read may be older than memory, and must be read again."""
    store = memory.store
    if memory.transactions.opened != got.opened or store.applied != got.since:  # type: ignore[attr-defined]
        return None
    if any(memory.nodes.peek(nid) is not got.held.get(nid) for nid in got.nodes):
        return None  # a lookup read one of them meanwhile, maybe before its row was read
    for owner in got.owners:
        _owner_joined(memory, owner)
    count = len(_load_nodes(memory, got)) if got.nodes else 0
    if got.access is not None:
        _load_access(memory, got.access)
    if got.attachment_nodes:
        _load_attachments(memory, got.attachment_nodes, got.attachments)
    if got.upto > got.since:
        store.mark_applied(got.upto)  # type: ignore[attr-defined]
        memory.transactions.generation = max(memory.transactions.generation, got.upto)
    return count


def _load_nodes(memory: Mirror, got: Fetched) -> list[tuple[Node, bool]]:
    """The nodes as stored (`got.nodes`) into memory, the held ones in place; one nothing
    held is not loaded but made from its head, for the tree to place where it belongs
    (`apply` saw that the same ones are held as when they were read)."""
    tx = memory.transactions.journal
    assert tx is None or not set(got.nodes) & set(tx.nodes), "loaded over a change in progress"
    out: list[tuple[Node, bool]] = []
    for nid, f in got.nodes.items():
        n = got.held.get(nid)
        if n is None:
            head = got.heads.get(nid)
            if head is None:
                continue  # no row by then
            n = memory.nodes.adopt(*head)
            memory.nodes.use(n)
            _owner_joined(memory, n.owner)
            out.append((n, True))
            continue
        if n.persisted and all(getattr(n, name) == getattr(f, name) for name in _COPIED):
            continue  # this mount's own write, or already loaded
        # stored, whatever this mount believed: a commit whose answer was lost (the server
        # went away at that moment) may have committed all the same; the live map is the
        # store's (memory.heads), so only the held node changes
        n.persisted = True
        for name in _COPIED:
            setattr(n, name, getattr(f, name))
        out.append((n, False))
    for n, _created in out:
        mine = memory.live.pending.get(_live_key(n))
        if mine is not None and mine != n.id and _is_live(n):
            _give_way(memory, mine, n.id)
    # what was loaded is committed: its texts may be let go again (memory.texts)
    memory.texts.committed([n for n, _created in out])
    memory.nodes.release([n for n, _created in out])
    if out:
        memory.live.changed()  # (where they were is not known here)
    memory.reloaded.extend(out)
    return out


def _live_key(n: Node) -> tuple[str, str, str, str]:
    return (n.owner_kind, n.owner_id, n.type, n.name)


def _is_live(n: Node) -> bool:
    return n.deleted_at is None and n.archived_at is None


def _give_way(memory: Mirror, nid: int, theirs: int) -> Node | None:
    """The node nid, made here by mkdir and never stored, is at a path where another
    mount's node is live now: it goes (from the live map and the node cache), and the
    files made in it and not stored yet go to the other's node, so the tree shows that
    node in its place (`fs.roles.nodes.Nodes.place`). Not while a transaction of this
    mount is storing it: its commit is refused, and `give_way` runs after the rollback.
    Returns the node that went (None: it stays)."""
    n = memory.nodes.peek(nid)
    tx = memory.transactions.journal
    if n is None or n.persisted or (tx is not None and (nid in tx.nodes or nid in tx.new_nodes)):
        return None
    key = _live_key(n)
    if memory.live.pending.get(key) == nid:
        del memory.live.pending[key]
    memory.nodes.pop(nid)
    moved = [a for a in memory.transactions.created_attachments.values() if a.node_id == nid]
    for a in moved:  # stored with the next commit, in the other's node
        a.node_id = theirs
    if moved:
        memory.reattached.add(theirs)
    log.info("%s, made here and never stored, gives way to another mount's node", key)
    return n


def give_way(memory: Mirror) -> int:
    """After a refused commit (a shared store): load what every mount committed, then
    every node made here by mkdir and never stored whose path another mount's live node
    took meanwhile gives way to it (`_give_way`); that node waits in `memory.reloaded`
    for the tree. Doing the refused write again then writes into the other's node.
    Returns how many gave way."""
    if not memory.live.pending:
        return 0  # nothing made here waits to be stored
    catch_up(memory)
    count = 0
    for key, nid in list(memory.live.pending.items()):
        theirs = memory.store.live_node_id(*key)
        if theirs is None or theirs == nid or _give_way(memory, nid, theirs) is None:
            continue
        count += 1
        winner = memory.nodes.get(theirs)
        if winner is not None and all(w is not winner for w, _created in memory.reloaded):
            memory.reloaded.append((winner, True))
    return count


def _load_access(memory: Mirror, fresh: dict[tuple[str, str], Access]) -> None:
    """`memory.access` updated in place to `fresh` (the transactions' journal holds the
    same dict), and the keys that changed wait in `memory.reaccessed` for the tree, whose
    kernel caches of the attributes they decide must go before the next permission
    check."""
    held = memory.access
    changed = {k for k in held.keys() | fresh.keys() if held.get(k) != fresh.get(k)}
    if changed:
        held.clear()
        held.update(fresh)
        memory.reaccessed.update(changed)


def _load_attachments(memory: Mirror, node_ids: set[int], fresh: list[Attachment]) -> None:
    """The records in `memory.attachments` of these nodes updated in place to `fresh`
    (the tree's inodes hold them), new ones added, purged ones dropped; the nodes wait in
    `memory.reattached` for the tree."""
    held = memory.attachments
    seen = set()
    for f in fresh:
        seen.add(f.id)
        a = held.get(f.id)
        if a is None:
            held[f.id] = f
        else:
            for name in _ATTACHMENT_FIELDS:
                setattr(a, name, getattr(f, name))
    waiting = memory.transactions.created_attachments  # made here, stored with the next commit
    for aid in [
        i for i, a in held.items() if a.node_id in node_ids and i not in seen and i not in waiting
    ]:
        del held[aid]
    memory.reattached.update(node_ids)


def _owner_joined(memory: Mirror, owner: tuple[str, str]) -> None:
    if owner not in memory.owners:
        memory.owners.add(owner)
        memory.new_owners.append(owner)


def catch_up(memory: Mirror) -> int:
    """Load everything other mounts committed since `store.applied`, in the thread that
    owns the memory (inside a transaction too); returns how many nodes changed. Memory's
    generation moves to the newest commit seen. Owners made elsewhere (an owner is no
    outbox row: one small query a round) join first, so their nodes have a directory to
    show in."""
    count = 0
    while True:
        got = fetch(memory, in_memory_thread=True)
        loaded = apply(memory, got)
        assert loaded is not None, "nothing runs between a fetch and an apply here"
        count += loaded
        if got.complete:
            return count


def lock_and_load(memory: Mirror, node_id: int) -> None:
    """At the start of a transaction re-applying a write that lost: lock the node's row
    (waiting for a writer that holds it), then load what every mount committed. No other
    mount can change the node before this transaction ends, so the re-applied write
    cannot lose again however busy the node is (optimistic first, pessimistic after)."""
    memory.store.lock_node(node_id)  # type: ignore[attr-defined]
    catch_up(memory)


def keep_both(memory: Mirror, n: Node, text: str, reason: str, started_from: str) -> bool:
    """A whole-file save of n's L2 lost to another mount's newer version: keep the losing
    text as a version in .history, then the newer one again as the current version, and
    say so in `.status`. Returns whether anything was stored.

    Unless the text is still the one this save started from (`started_from`, the
    content hash n had before the save): the versions stored meanwhile changed nothing
    current (a text saved again as
    it was, the other mount's own conflict keeping this mount's text current), so this
    save is simply the newest, as on one mount."""
    for attempt in range(ATTEMPTS):
        try:
            with memory.transaction():
                lock_and_load(memory, n.id)
                if n.content_hash == started_from:
                    return memory.save_l2(n, text, reason)  # committed on the way out
                theirs, their_version = n.l2, n.version
                if not memory.save_l2(n, text, f"conflict:{reason}"):
                    return False  # the other mount saved the same text
                mine = n.version
                memory.save_l2(n, theirs, "conflict:kept the newer save of another mount")
        except VersionConflict:
            if attempt == ATTEMPTS - 1:
                raise
            continue
        path = memory.node_path(n) + "/L2.md"
        when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        memory.conflicts.append(
            f"{when} {path}: another mount saved version {their_version} first; this "
            f"save is version {mine} in .history, theirs stays current as {n.version}"
        )
        log.warning("write conflict on %s: kept both (versions %d and %d)", path, mine, n.version)
        return True
    return False


def append_again(memory: Mirror, n: Node, appended: str, reason: str) -> bool:
    """An append (O_APPEND, `>>`) to n's L2 lost to another mount's newer version: the
    same text appended to that version instead, as two appends on one mount would be
    (the row is locked first, so it cannot lose again). Returns whether it stored."""
    for attempt in range(ATTEMPTS):
        try:
            with memory.transaction():
                lock_and_load(memory, n.id)
                return memory.save_l2(n, n.l2 + appended, reason)  # committed on the way out
        except VersionConflict:
            if attempt == ATTEMPTS - 1:
                raise
    return False
