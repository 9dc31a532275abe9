"""The memory's transaction boundary, its journal and its change feed.

`Transactions` is the part of `Memory` (`memory.transactions`) that owns the one store
transaction boundary, `transaction()`. Inside it, every change to the in-memory mirrors
(nodes, the live map, owners, access rows, attachments) is journaled through `keep`,
`keep_attachment`, `add_node`, `set_live`, `store_node` and the `note_*` methods, so a
rollback puts memory back as it was; a commit tells the subscribers what changed
(`subscribe`). A database fault turns the mount read-only (`failsafe`), a full disk
refuses writes until there is room (`disk_full`). What a change means is decided by the
other parts (`memory.service`, `memory.attachments`, `memory.routing`); this part is given
the mirrors it restores and two callables that name a node and an attachment.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Protocol

from contextfs.errors import (
    ContextFSError,
    Exists,
    InvalidInput,
    NoSpace,
    StoreBusy,
    StoreDamaged,
    StoreUnavailable,
    VersionConflict,
    disk_full,
)
from contextfs.model import Access, Attachment, Change, ChangeOp, Node
from contextfs.store import backend

if TYPE_CHECKING:
    from contextfs.memory.heads import LiveIndex, NodeCache
    from contextfs.memory.texts import TierTexts

log = logging.getLogger("contextfs.memory.service")  # the name these lines always had

# Restored on rollback: every field but `indexed_version`, which the indexer moves
# outside transactions.
_RESTORED_NODE_FIELDS = tuple(f.name for f in fields(Node) if f.name != "indexed_version")
_ATTACHMENT_FIELDS = tuple(f.name for f in fields(Attachment))


class JournalStore(
    backend.Transactions, backend.NodeRows, backend.AttachmentRows, backend.Bookkeeping, Protocol
):
    """What the transaction boundary uses of the store: its transactions and errors, the
    node rows it writes (`store_node`), the attachment rows it writes at commit (folder
    mtimes) and reloads after a rollback, and the redaction log."""


def _is_live(n: Node) -> bool:
    return n.deleted_at is None and n.archived_at is None


@dataclass(slots=True)
class Journal:
    """What the open outermost transaction changed in memory: enough to undo it on
    rollback and to tell subscribers what committed."""

    generation: int  # the store generation before it
    redactions: int  # len(pending_redactions) before it
    nodes: dict[int, tuple[Node, Node]] = field(default_factory=dict)  # id: (node, copy)
    new_nodes: list[int] = field(default_factory=list)  # added to Memory.nodes
    live: dict[tuple[str, str, str, str], int | None] = field(default_factory=dict)
    owners: list[tuple[str, str]] = field(default_factory=list)
    access: dict[tuple[str, str], Access | None] = field(default_factory=dict)  # before
    # id: (attachment, copy before its first change, or None: reload from the store)
    atts: dict[int, tuple[Attachment, Attachment | None]] = field(default_factory=dict)
    new_atts: list[int] = field(default_factory=list)
    # files made by create whose rows this transaction stores: waiting again on undo
    first_stored_atts: list[int] = field(default_factory=list)
    gone_atts: dict[int, Attachment] = field(default_factory=dict)  # purged: back on undo
    stored: dict[int, None] = field(default_factory=dict)  # ids of the nodes stored, in order
    other: list[Change] = field(default_factory=list)  # inbox items, sessions
    # a store statement refused inside a nested use (a second live name, a bad value, a
    # full disk, a server gone): the store has aborted the whole transaction, so it rolls
    # back whatever its caller makes of the refusal, and no statement runs in it meanwhile
    refused: ContextFSError | None = None


class Transactions:
    """The transaction boundary, the journal that undoes a rollback, and the change feed."""

    def __init__(
        self,
        store: JournalStore,
        *,
        nodes: NodeCache,
        live: LiveIndex,
        texts: TierTexts,
        owners: set[tuple[str, str]],
        access: dict[tuple[str, str], Access],
        attachments: dict[int, Attachment],
        clock: Callable[[], float],
        node_path: Callable[[Node], str],
        attachment_path: Callable[[Attachment], str],
    ) -> None:
        self.store = store
        self.nodes = nodes
        self.live = live
        self.texts = texts
        self.owners = owners  # the memory's mirrors, restored in place on rollback
        self.access = access
        self.attachments = attachments
        self.clock = clock
        self.node_path = node_path
        self.attachment_path = attachment_path
        self.generation = store.generation()
        self.failsafe: str | None = None  # reason, when the store turned read-only
        self.disk_full: tuple[float, str] | None = None  # since, why: ENOSPC until room
        # redaction-log rows (when, path, kind, count), written with the next commit
        self.pending_redactions: list[tuple[float, str, str, int]] = []
        self.dirty_attachments: dict[int, Attachment] = {}  # folder mtimes to store
        # files made by create, not stored yet: each is stored by its first commit (its
        # close or fsync stores row and bytes in one transaction), or first thing in the
        # next transaction, whatever it is, so nothing stored later can miss its row
        self.created_attachments: dict[int, Attachment] = {}
        self._tx: Journal | None = None
        # outermost transactions begun: what was read off the event loop meanwhile may be
        # older than memory (memory.remote.apply)
        self.opened = 0
        self._subscribers: list[Callable[[Sequence[Change]], None]] = []
        # a shared store: after an outermost transaction another mount's commit refused
        # (memory.remote.give_way), so that the same change made again is taken
        self.after_conflict: Callable[[], object] | None = None

    @property
    def journal(self) -> Journal | None:
        """The open outermost transaction's journal (None: no transaction is open)."""
        return self._tx

    def _open(self) -> Journal:
        tx = self._tx
        assert tx is not None, "journaled inside Memory.transaction()"
        return tx

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """One store transaction around any number of changes; the only transaction boundary.

        Nested uses join the outermost one. Every change to the in-memory mirrors made
        inside it (nodes, the live map, owners, attachments) is journaled: when the
        outermost rolls back — an exception from anywhere inside the `with`, the caller's
        own code included — memory is put back as it was, and nothing is published. When
        it commits, pending redaction-log rows and folder mtimes are written with it, and
        subscribers get what committed (`subscribe`). A database fault turns the mount
        read-only.
        """
        if self.failsafe:
            raise StoreDamaged(f"the mount is read-only: {self.failsafe}")
        if self._tx is not None:
            if self._tx.refused is not None:
                raise self._tx.refused
            with self._store_errors():
                yield
            return
        tx = Journal(self.generation, len(self.pending_redactions))
        self._tx = tx
        self.opened += 1
        try:
            with self._store_errors(), self.store.atomic():
                for a in list(self.created_attachments.values()):
                    if self.take_created(a):
                        self.first_store(a)
                        self.store.insert_attachment(a, b"")
                yield
                if tx.refused is not None:  # taken for one change's refusal, it was all's
                    raise tx.refused
                # the log never names a change that was not stored, nor misses one that was
                for row in self.pending_redactions:
                    self.store.add_redaction(*row)
                for a in self.dirty_attachments.values():
                    self.store.update_attachment(a)
        except BaseException as exc:
            if isinstance(exc, NoSpace) and self.disk_full is None:
                self.disk_full = (self.clock(), exc.reason)
                log.warning("disk full: writes are refused until there is room (%s)", exc)
            self._tx = None
            self._undo(tx)
            self.live.changed()  # counts read inside it may have seen its rows
            if isinstance(exc, VersionConflict) and self.after_conflict is not None:
                try:
                    self.after_conflict()
                except ContextFSError as err:  # the server away: the next catch-up does it
                    log.info("not caught up after a refused commit: %s", err)
            raise
        self._tx = None
        # a store that gives seqs out at its commit (PostgreSQL) returned lower bounds
        self.generation = max(self.generation, self.store.last_seq)
        if self.disk_full is not None:
            log.info("the disk has room again: writes are taken")
            self.disk_full = None
        self.pending_redactions.clear()
        self.dirty_attachments.clear()
        # what committed is the store's now: those nodes' texts may be let go (memory.texts)
        stored = [tx.nodes[nid][0] for nid in tx.stored]
        if stored:  # where they were and where they are now
            self.live.changed(stored + [tx.nodes[nid][1] for nid in tx.stored])
        self.texts.committed(stored)
        self.nodes.release(stored)  # stored as they are: no longer pinned (memory.heads)
        self.live.pending = {k: nid for k, nid in self.live.pending.items() if nid not in tx.stored}
        self._publish(self._changes(tx))

    @contextlib.contextmanager
    def _store_errors(self) -> Iterator[None]:
        """The store's errors as the project's: a refused value is EINVAL, anything else a
        fault that turns the mount read-only."""
        store = self.store
        try:
            yield
        except (*store.unavailable, *store.invalid, *store.conflict, *store.errors) as exc:
            tx = self._tx
            if tx is not None and tx.refused is not None:
                raise tx.refused from None  # a statement after the refusal: aborted too
            refused = self._refusal(exc)
            if tx is not None and not isinstance(refused, StoreDamaged):
                tx.refused = refused  # a full disk, a server gone: aborted all the same
            raise refused from exc

    def _refusal(self, exc: BaseException) -> ContextFSError:
        """The project's error for a store error; a fault turns the mount read-only."""
        if isinstance(exc, self.store.busy):
            # (asked first: PostgreSQL's OutOfMemory is an OperationalError, `unavailable`)
            # DuckDB rolled the transaction back and its buffer limit grew (store.db's
            # _Roomy): this write is refused whole; the store is fine and the next try fits
            log.warning("the store had no room for a change, refused: %s", exc)
            return StoreBusy(
                f"the store had no room in its buffers; nothing was stored, "
                f"try again ({str(exc).splitlines()[0]})"
            )
        if isinstance(exc, self.store.unavailable):
            # the server is away (PostgreSQL): this write is refused, nothing of it stored;
            # the mount stays read-write and the store reconnects by itself
            return StoreUnavailable(exc.reason if isinstance(exc, StoreUnavailable) else str(exc))
        if isinstance(exc, self.store.invalid):
            return InvalidInput(f"the store refused a value: {exc}")
        if isinstance(exc, self.store.conflict):
            # a second live name where the store allows one (LIVE_NAME_INDEXES): this
            # change is refused and rolled back whole; the store is as it was, so the
            # mount stays read-write
            reason = str(exc).split("\n", 1)[0]
            log.warning("the store refused a second live name: %s", reason)
            return Exists(f"the store refused a second live name: {reason}")
        if disk_full(exc):  # refused, nothing stored; the store itself is fine
            return NoSpace(f"the disk is full; nothing of this change was stored ({exc})")
        self.failsafe = f"store error: {exc}"
        log.error("store write failed, switching to read-only: %s", exc)
        return StoreDamaged(f"the store failed a write and is now read-only: {exc}")

    # ---- the journal: undo on rollback, changes on commit ---------------------------------

    def keep(self, n: Node) -> None:
        """Before n's first change in a transaction: keep a copy to restore on rollback."""
        tx = self._tx
        if tx is not None and n.id not in tx.nodes:
            tx.nodes[n.id] = (
                n,
                replace(n, sources=list(n.sources), tags=list(n.tags), history=list(n.history)),
            )

    def keep_attachment(self, a: Attachment) -> None:
        tx = self._tx
        if tx is not None and a.id not in tx.atts:
            tx.atts[a.id] = (a, replace(a))

    def add_node(self, n: Node) -> None:
        if self._tx is not None and self.nodes.peek(n.id) is None:
            self._tx.new_nodes.append(n.id)
        self.nodes[n.id] = n

    def set_live(self, key: tuple[str, str, str, str], nid: int | None) -> None:
        """The live node at key is nid (None: none), journaled. The store answers for the
        stored nodes (its rows change with the node, in the same transaction); only a
        node not stored yet (mkdir) is kept in `live.pending`."""
        tx = self._tx
        pending = self.live.pending
        if tx is not None and key not in tx.live:
            tx.live[key] = pending.get(key)
        n = self.nodes.peek(nid) if nid is not None else None
        if n is not None and not n.persisted:
            pending[key] = n.id
        else:
            pending.pop(key, None)

    def store_node(self, n: Node, reason: str | None = None) -> None:
        """Inside a transaction: write n (insert on its first commit), with a new version
        row when reason is given. A rollback puts `persisted` back with the rest of n."""
        tx = self._open()
        self.keep(n)
        if n.persisted:
            self.generation = self.store.update_node(n, new_version_reason=reason)
        else:
            self.generation = self.store.insert_node(n, new_version_reason=reason)
            n.persisted = True
        tx.stored[n.id] = None

    def note_owner(self, owner: tuple[str, str]) -> None:
        """A new owner, added to `owners` by the caller: taken away again on rollback."""
        self._open().owners.append(owner)

    def note_access(self, key: tuple[str, str]) -> None:
        """Before the access row `key` changes: what it was, put back on rollback."""
        self._open().access.setdefault(key, self.access.get(key))

    def note_change(self, change: Change) -> None:
        """A change of an inbox item or a session, published when the transaction
        commits (with the generation it committed)."""
        self._open().other.append(change)

    def note_new_attachment(self, a: Attachment) -> None:
        """An attachment just added to `attachments`: gone again on rollback."""
        tx = self._open()
        tx.new_atts.append(a.id)
        tx.atts[a.id] = (a, replace(a))

    def take_created(self, a: Attachment) -> bool:
        """Is a a file made by create whose row is not stored yet? Then it waits no more:
        the caller stores it (`first_store`) or lets it wait again (`wait_again`). A row
        gone from `attachments` meanwhile (its creation undone) is never stored."""
        return (
            self.created_attachments.pop(a.id, None) is not None and self.attachments.get(a.id) is a
        )

    def first_store(self, a: Attachment) -> None:
        """Inside a transaction, before the caller inserts the row of a (`take_created`):
        its node stored first when mkdir left it unstored; a rollback makes a wait again."""
        tx = self._open()
        tx.first_stored_atts.append(a.id)
        tx.atts.setdefault(a.id, (a, replace(a)))
        n = self.nodes.peek(a.node_id)
        if n is not None and not n.persisted:
            self.store_node(n)

    def wait_again(self, a: Attachment) -> None:
        """a, taken by `take_created`, was not stored after all: stored later, as before."""
        if self.attachments.get(a.id) is a:
            self.created_attachments[a.id] = a

    def note_purged_attachment(self, a: Attachment) -> None:
        """An attachment just taken out of `attachments` for good: back on rollback."""
        self._open().gone_atts[a.id] = a

    def note_changed_attachment(self, a: Attachment) -> None:
        """An attachment the caller changed already: reloaded from the store on rollback,
        unless this transaction kept a copy of it first (`keep_attachment`)."""
        tx = self._open()
        if a.id not in tx.atts:
            tx.atts[a.id] = (a, None)

    def _undo(self, tx: Journal) -> None:
        """The outermost transaction rolled back: memory as it was before it began."""
        pending = self.live.pending
        for key in tx.live:
            pending.pop(key, None)
        for key, nid in tx.live.items():
            if nid is not None:
                pending[key] = nid
        for nid in tx.new_nodes:
            self.nodes.pop(nid, None)
        for n, before in tx.nodes.values():
            for name in _RESTORED_NODE_FIELDS:
                setattr(n, name, getattr(before, name))
        for aid in tx.new_atts:
            self.attachments.pop(aid, None)
        for aid in tx.first_stored_atts:
            if aid in self.attachments:
                self.created_attachments[aid] = self.attachments[aid]
        self.attachments.update(tx.gone_atts)
        for a, a_before in tx.atts.values():
            if a_before is None:  # changed by the caller before update_attachment: reload
                try:
                    a_before = self.store.attachment(a.id)
                except self.store.errors + (StoreUnavailable,) as exc:
                    log.error("cannot reload attachment %d after a rollback: %s", a.id, exc)
                    continue
                if a_before is None:
                    continue
            for name in _ATTACHMENT_FIELDS:
                setattr(a, name, getattr(a_before, name))
        for owner in tx.owners:
            self.owners.discard(owner)
        for access_key, access_before in tx.access.items():
            if access_before is None:
                self.access.pop(access_key, None)
            else:
                self.access[access_key] = access_before
        del self.pending_redactions[tx.redactions :]
        self.generation = tx.generation

    def _changes(self, tx: Journal) -> tuple[Change, ...]:
        """What the committed transaction changed, for subscribers."""
        out: list[Change] = []
        gen = self.generation
        for owner in tx.owners:
            out.append(Change("owner", "created", f"{owner[0]}/{owner[1]}", gen))
        op: ChangeOp
        for nid in tx.stored:
            n, before = tx.nodes[nid]
            path = self.node_path(n)
            old_path = None
            if not before.persisted:
                op = "created"
            elif not _is_live(n):
                op = "deleted" if _is_live(before) else "updated"
            else:
                old_path = self.node_path(before)
                op = "moved" if old_path != path or not _is_live(before) else "updated"
                if op == "updated":
                    old_path = None
            out.append(Change("node", op, path, gen, node_id=nid, old_path=old_path))
        for aid, (a, a_before) in tx.atts.items():
            if aid in tx.new_atts or aid in tx.first_stored_atts:
                op = "created"
            elif a.deleted_at is not None and (a_before is None or a_before.deleted_at is None):
                op = "deleted"
            elif a_before is not None and (a_before.node_id, a_before.parent_id, a_before.name) != (
                a.node_id,
                a.parent_id,
                a.name,
            ):
                op = "moved"
            else:
                op = "updated"
            out.append(
                Change("attachment", op, self.attachment_path(a), gen, node_id=a.node_id, id=aid)
            )
        out += [replace(c, generation=gen) for c in tx.other]
        return tuple(out)

    def subscribe(self, callback: Callable[[Sequence[Change]], None]) -> Callable[[], None]:
        """Call callback(changes) after every outermost transaction that committed a
        change (never for a rollback), in the thread that wrote. A callback that raises
        is logged; the write stands. Returns a function that unsubscribes."""
        self._subscribers.append(callback)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                self._subscribers.remove(callback)

        return unsubscribe

    def _publish(self, changes: tuple[Change, ...]) -> None:
        if not changes:
            return
        for callback in list(self._subscribers):
            try:
                callback(changes)
            except Exception:  # noqa: BLE001 - a subscriber must not fail a committed write
                log.exception("a change subscriber failed")
