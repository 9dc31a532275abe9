"""Many mounts, one store: loading what other mounts committed, and what a write does when
another mount got there first (docs/scaling.md).

Role: the parts of `Memory` that only a shared store (PostgreSQL) needs. `catch_up` loads
every node another mount changed since this one last looked (the outbox after
`store.applied`) into the in-memory mirrors, in place, so the tree's inodes keep their
nodes; what it loaded waits in `memory.reloaded` for the tree (the `ClusterSync` service
tells it). `keep_both` is the answer to a whole-file save of L2 that lost the race: the
newer version stays current, the losing text is kept as a version in `.history` and named
in `.status`. Boundary: memory and store only; no FUSE, no trio. On the embedded DuckDB
store nothing here runs (no conflict is ever raised there).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import deque
from contextlib import AbstractContextManager
from dataclasses import fields
from typing import TYPE_CHECKING, Protocol

from contextfs.errors import VersionConflict
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


def reload_nodes(memory: Mirror, ids: list[int]) -> list[tuple[Node, bool]]:
    """Load these nodes as stored now into memory: (node, created) of each that differed.
    Between transactions, or at the start of one before it changed these nodes: what is
    loaded is committed, so a rollback has nothing of it to undo."""
    tx = memory.transactions.journal
    assert tx is None or not set(ids) & set(tx.nodes), "loaded over a change in progress"
    fresh = memory.store.nodes_by_id(ids)  # type: ignore[attr-defined]
    out: list[tuple[Node, bool]] = []
    for nid in ids:
        f = fresh.get(nid)
        if f is None:
            continue
        n = memory.nodes.peek(nid)
        if n is None:
            # not held: nothing here shows it (an inode would hold it); read as stored now
            # (memory.heads), for the tree to place where it belongs
            n = memory.nodes.get(nid)
            if n is None:
                continue
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
    # what was loaded is committed: its texts may be let go again (memory.texts)
    memory.texts.committed([n for n, _created in out])
    memory.nodes.release([n for n, _created in out])
    if out:
        memory.live.changed()  # (where they were is not known here)
    memory.reloaded.extend(out)
    return out


def reload_access(memory: Mirror) -> None:
    """Owners, groups and modes as stored now (another mount changed some): `memory.access`
    is updated in place (the transactions' journal holds the same dict), and the keys
    that changed wait in `memory.reaccessed` for the tree, whose kernel caches of the
    attributes they decide must go before the next permission check."""
    fresh = memory.store.access()
    held = memory.access
    changed = {k for k in held.keys() | fresh.keys() if held.get(k) != fresh.get(k)}
    if changed:
        held.clear()
        held.update(fresh)
        memory.reaccessed.update(changed)


def reload_attachments(memory: Mirror, node_ids: set[int]) -> None:
    """The attachments of these nodes as stored now (another mount changed some): the
    records in `memory.attachments` updated in place (the tree's inodes hold them), new
    ones added, purged ones dropped; the nodes wait in `memory.reattached` for the tree."""
    fresh = memory.store.node_attachments(sorted(node_ids))  # type: ignore[attr-defined]
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
    """Load everything other mounts committed since `store.applied`; returns how many
    nodes changed. Memory's generation moves to the newest commit seen. Owners made
    elsewhere (an owner is no outbox row: one small query a round) join first, so their
    nodes have a directory to show in."""
    store = memory.store
    count = 0
    for owner in store.owners():
        _owner_joined(memory, owner)
    while True:
        changes = store.changes_after(store.applied)  # type: ignore[attr-defined]
        if changes.upto <= store.applied:  # type: ignore[attr-defined]
            return count
        count += len(reload_nodes(memory, changes.nodes)) if changes.nodes else 0
        if changes.access:
            reload_access(memory)
        if changes.attachments:
            reload_attachments(memory, changes.attachments)
        store.mark_applied(changes.upto)  # type: ignore[attr-defined]
        memory.transactions.generation = max(memory.transactions.generation, changes.upto)


def lock_and_load(memory: Mirror, node_id: int) -> None:
    """At the start of a transaction re-applying a write that lost: lock the node's row
    (waiting for a writer that holds it), then load what every mount committed. No other
    mount can change the node before this transaction ends, so the re-applied write
    cannot lose again however busy the node is (optimistic first, pessimistic after)."""
    memory.store.lock_node(node_id)  # type: ignore[attr-defined]
    catch_up(memory)


def keep_both(memory: Mirror, n: Node, text: str, reason: str) -> bool:
    """A whole-file save of n's L2 lost to another mount's newer version: keep the losing
    text as a version in .history, then the newer one again as the current version, and
    say so in `.status`. Returns whether anything was stored."""
    for attempt in range(ATTEMPTS):
        try:
            with memory.transaction():
                lock_and_load(memory, n.id)
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
