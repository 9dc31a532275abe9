"""The memory service: typed nodes, versions, routing and attachments over the Store.

This is where context types, documents and the canonical store meet. It keeps every live
node and attachment in memory (write-through to DuckDB) so the filesystem never queries
the database on the metadata path. It knows nothing of inodes or FUSE.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import re
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import xxhash

from contextfs.ctxtypes import ContextType
from contextfs.errors import (
    ContextFSError,
    Exists,
    InvalidInput,
    StoreDamaged,
    TooBig,
)
from contextfs.memory.document import (
    Document,
    body_items,
    normalize_item,
    parse_document,
    render_document,
)
from contextfs.memory.strategies import strategy_for
from contextfs.memory.summarize import summarize
from contextfs.model import Attachment, Change, Node
from contextfs.store import Store
from contextfs.store.schema import CHUNK_SIZE

if TYPE_CHECKING:
    from contextfs.memory.redact import Redaction, Redactor

log = logging.getLogger(__name__)

OWNER_KINDS = ("user", "agent")
_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}$")
DEFAULT_MAX_FILE_SIZE = 64 * 1024 * 1024
DEFAULT_MAX_TIER_SIZE = 4 * 1024 * 1024
# Bytes scanned for secrets on each side of a changed range of an attachment (see
# `Memory._secret_near`): the longest secret an offset write is sure to be checked for.
# 8 KiB is 30 times the longest bounded built-in pattern and the usual limit of an HTTP
# header (so of any bearer token or JWT that was ever sent in one); each fsync of a small
# write scans about 2 * 8 KiB more than it wrote (~0.4 ms here).
REDACT_MARGIN = 8 * 1024
ATTACHMENT_CHUNK = CHUNK_SIZE  # for fs.tree, which sees the store only through Memory


def content_hash(text: str) -> str:
    return xxhash.xxh64_hexdigest(text.encode("utf-8"))


def decode_text(data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(
            f"{what} must be UTF-8 text (invalid byte at offset {exc.start}); "
            "keep binary files as attachments inside a node"
        ) from None


def _iso(ts: float | None) -> str:
    if ts is None:
        return "null"
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _slug_stem(filename: str) -> str:
    stem = filename
    for ext in (".markdown", ".md", ".txt", ".yaml", ".yml"):
        if stem.lower().endswith(ext):
            stem = stem[: -len(ext)]
            break
    return stem


def _tokens(text: str) -> set[str]:
    return set(normalize_item(text).split())


class LiveNodes(dict):
    """(owner kind, owner id, type, name) -> node id of every live node, with the node ids
    of each owner kept alongside (scoped searches start from them)."""

    def __init__(self) -> None:
        super().__init__()
        self.by_owner: dict[tuple[str, str], set[int]] = {}

    def __setitem__(self, key: tuple[str, str, str, str], nid: int) -> None:
        super().__setitem__(key, nid)
        self.by_owner.setdefault(key[:2], set()).add(nid)

    def pop(self, key, default=None):
        nid = super().pop(key, default)
        if nid is not None and nid is not default:
            self.by_owner.get(key[:2], set()).discard(nid)
        return nid


# Restored on rollback: every field but `indexed_version`, which the indexer moves
# outside transactions.
_RESTORED_NODE_FIELDS = tuple(f.name for f in fields(Node) if f.name != "indexed_version")
_ATTACHMENT_FIELDS = tuple(f.name for f in fields(Attachment))


@dataclass(slots=True)
class _Journal:
    """What the open outermost transaction changed in memory: enough to undo it on
    rollback and to tell subscribers what committed."""

    generation: int  # the store generation before it
    redactions: int  # len(pending_redactions) before it
    nodes: dict[int, tuple[Node, Node]] = field(default_factory=dict)  # id: (node, copy)
    new_nodes: list[int] = field(default_factory=list)  # added to Memory.nodes
    live: dict[tuple[str, str, str, str], int | None] = field(default_factory=dict)
    owners: list[tuple[str, str]] = field(default_factory=list)
    # id: (attachment, copy before its first change, or None: reload from the store)
    atts: dict[int, tuple[Attachment, Attachment | None]] = field(default_factory=dict)
    new_atts: list[int] = field(default_factory=list)
    stored: dict[int, int] = field(default_factory=dict)  # node id: generation of its row
    other: list[Change] = field(default_factory=list)  # inbox items, sessions


@dataclass(frozen=True, slots=True)
class Refusal:
    when: float
    path: str
    errno: int
    reason: str
    kept_at: str | None


@dataclass(frozen=True, slots=True)
class RouteResult:
    node: Node
    created: bool
    changed: bool
    folded: int


class Memory:
    """Typed memory nodes with versions, write-through to the Store."""

    def __init__(
        self,
        store: Store,
        types: dict[str, ContextType],
        *,
        data_dir: Path,
        max_file_size: int = DEFAULT_MAX_FILE_SIZE,
        max_tier_size: int = DEFAULT_MAX_TIER_SIZE,
        clock: Callable[[], float] = time.time,
        redactor: Redactor | None = None,
        default_owner: str = "default",
    ) -> None:
        self.store = store
        self.types = types
        for t in types.values():
            strategy_for(t)  # a mode without a write strategy is refused at the start
        self.types_by_dir: dict[tuple[str, str], ContextType] = {
            (t.scope, t.type_dir): t for t in types.values()
        }
        self.data_dir = Path(data_dir)
        self.max_file_size = max_file_size
        self.max_tier_size = max_tier_size
        self.clock = clock
        self.refusals: deque[Refusal] = deque(maxlen=50)
        self.refusal_count = 0
        self.failsafe: str | None = None  # reason, when the store turned read-only
        self.owners: set[tuple[str, str]] = set(store.owners())
        self.nodes: dict[int, Node] = {}
        self.live = LiveNodes()
        for n in store.nodes():
            self.nodes[n.id] = n
            if n.deleted_at is None and n.archived_at is None:
                self.live[(n.owner_kind, n.owner_id, n.type, n.name)] = n.id
        self.attachments: dict[int, Attachment] = {a.id: a for a in store.attachments()}
        self.generation = store.generation()
        self._tx: _Journal | None = None
        self._subscribers: list[Callable[[Sequence[Change]], None]] = []
        self._access_dirty: set[int] = set()
        self._dirty_atts: dict[int, Attachment] = {}  # folder mtimes to store
        self.redactor = redactor
        self.default_owner = default_owner
        self.redaction_count = 0
        self.pending_redactions: list[tuple[float, str, str, int]] = []
        # `Memory.transaction` is the boundary, even for code that still asks the store
        store.boundary = self.transaction

    # ---- small helpers ------------------------------------------------------------------

    def type_named(self, name: str) -> ContextType:
        try:
            return self.types[name]
        except KeyError:
            raise InvalidInput(f"unknown context type {name!r}") from None

    def types_for(self, kind: str) -> list[ContextType]:
        return sorted((t for t in self.types.values() if t.scope == kind), key=lambda t: t.type_dir)

    def node_path(self, n: Node) -> str:
        t = self.types.get(n.type)
        tdir = t.type_dir if t else n.type
        base = f"{n.owner_kind}/{n.owner_id}/{tdir}"
        return f"{base}/{n.name}" if n.name else base

    def live_node(self, owner: tuple[str, str], ctype: ContextType, name: str) -> Node | None:
        nid = self.live.get((owner[0], owner[1], ctype.name, name))
        return self.nodes[nid] if nid is not None else None

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
            with self._store_errors():
                yield
            return
        tx = _Journal(self.generation, len(self.pending_redactions))
        self._tx = tx
        try:
            with self._store_errors(), self.store.atomic():
                yield
                # the log never names a change that was not stored, nor misses one that was
                for row in self.pending_redactions:
                    self.store.add_redaction(*row)
                for a in self._dirty_atts.values():
                    self.store.update_attachment(a)
        except BaseException:
            self._tx = None
            self._undo(tx)
            raise
        self._tx = None
        self.pending_redactions.clear()
        self._dirty_atts.clear()
        self._publish(self._changes(tx))

    @contextlib.contextmanager
    def _store_errors(self) -> Iterator[None]:
        """DuckDB errors as the project's: a refused value is EINVAL, anything else a
        fault that turns the mount read-only."""
        try:
            yield
        except (duckdb.InvalidInputException, duckdb.ConversionException) as exc:
            raise InvalidInput(f"the store refused a value: {exc}") from exc
        except duckdb.Error as exc:
            self.failsafe = f"store error: {exc}"
            log.error("store write failed, switching to read-only: %s", exc)
            raise StoreDamaged(f"the store failed a write and is now read-only: {exc}") from exc

    # ---- the journal: undo on rollback, changes on commit ---------------------------------

    def _touch(self, n: Node) -> None:
        """Before n's first change in a transaction: keep a copy to restore on rollback."""
        tx = self._tx
        if tx is not None and n.id not in tx.nodes:
            tx.nodes[n.id] = (n, replace(n, sources=list(n.sources), tags=list(n.tags),
                                         history=list(n.history)))

    def _touch_att(self, a: Attachment) -> None:
        tx = self._tx
        if tx is not None and a.id not in tx.atts:
            tx.atts[a.id] = (a, replace(a))

    def _add_node(self, n: Node) -> None:
        if self._tx is not None and n.id not in self.nodes:
            self._tx.new_nodes.append(n.id)
        self.nodes[n.id] = n

    def _set_live(self, key: tuple[str, str, str, str], nid: int | None) -> None:
        """live[key] = nid (None: remove the key), journaled."""
        tx = self._tx
        if tx is not None and key not in tx.live:
            tx.live[key] = self.live.get(key)
        if nid is None:
            self.live.pop(key, None)
        else:
            self.live[key] = nid

    def _undo(self, tx: _Journal) -> None:
        """The outermost transaction rolled back: memory as it was before it began."""
        for key in tx.live:
            self.live.pop(key, None)
        for key, nid in tx.live.items():
            if nid is not None:
                self.live[key] = nid
        for nid in tx.new_nodes:
            self.nodes.pop(nid, None)
        for n, before in tx.nodes.values():
            for name in _RESTORED_NODE_FIELDS:
                setattr(n, name, getattr(before, name))
        for aid in tx.new_atts:
            self.attachments.pop(aid, None)
        for a, before in tx.atts.values():
            if before is None:  # changed by the caller before update_attachment: reload
                try:
                    before = self.store.attachment(a.id)
                except duckdb.Error as exc:
                    log.error("cannot reload attachment %d after a rollback: %s", a.id, exc)
                    continue
                if before is None:
                    continue
            for name in _ATTACHMENT_FIELDS:
                setattr(a, name, getattr(before, name))
        for owner in tx.owners:
            self.owners.discard(owner)
        del self.pending_redactions[tx.redactions:]
        self.generation = tx.generation

    def _changes(self, tx: _Journal) -> tuple[Change, ...]:
        """What the committed transaction changed, for subscribers."""
        out: list[Change] = []
        gen = self.generation
        for owner in tx.owners:
            out.append(Change("owner", "created", f"{owner[0]}/{owner[1]}", gen))
        for nid, ngen in tx.stored.items():
            n, before = tx.nodes[nid]
            path = self.node_path(n)
            old_path = None
            if not before.persisted:
                op = "created"
            elif not self.is_live(n):
                op = "deleted" if self.is_live(before) else "updated"
            else:
                old_path = self.node_path(before)
                op = "moved" if old_path != path or not self.is_live(before) else "updated"
                if op == "updated":
                    old_path = None
            out.append(Change("node", op, path, ngen, node_id=nid, old_path=old_path))
        for aid, (a, before) in tx.atts.items():
            if aid in tx.new_atts:
                op = "created"
            elif a.deleted_at is not None and (before is None or before.deleted_at is None):
                op = "deleted"
            elif before is not None and (before.node_id, before.parent_id, before.name) != (
                    a.node_id, a.parent_id, a.name):
                op = "moved"
            else:
                op = "updated"
            out.append(Change("attachment", op, self.attachment_path(a), gen,
                              node_id=a.node_id, id=aid))
        out += [replace(c, generation=gen) for c in tx.other]
        return tuple(out)

    def attachment_path(self, a: Attachment) -> str:
        parts = [a.name]
        seen = {a.id}
        parent = self.attachments.get(a.parent_id) if a.parent_id is not None else None
        while parent is not None and parent.id not in seen:  # a cycle would be a bug
            seen.add(parent.id)
            parts.append(parent.name)
            parent = (self.attachments.get(parent.parent_id)
                      if parent.parent_id is not None else None)
        n = self.nodes.get(a.node_id)
        base = self.node_path(n) if n is not None else f"node-{a.node_id}"
        return "/".join([base, *reversed(parts)])

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

    def _owner_path(self, owner: tuple[str, str], ctype: ContextType | None, name: str) -> str:
        base = f"{owner[0]}/{owner[1]}"
        return f"{base}/{ctype.type_dir}/{name}" if ctype else f"{base}/{name}"

    def redact(self, text: str, path: str) -> str:
        """Secrets out before anything is stored, versioned or indexed (SPEC §5)."""
        if self.redactor is None:
            return text
        res = self.redactor.redact(text)
        if res.redactions:
            self._log_redactions(path, res.summary())
        return res.text

    def redact_bytes(self, data: bytes, path: str) -> bytes:
        if self.redactor is None:
            return data
        out, found = self.redactor.redact_bytes(data)
        self._log_found(path, found)
        return out

    def _log_found(self, path: str, found: tuple[Redaction, ...]) -> None:
        if found:
            counts: dict[str, int] = {}
            for r in found:
                counts[r.kind] = counts.get(r.kind, 0) + 1
            self._log_redactions(path, counts)

    def _log_redactions(self, path: str, counts: dict[str, int]) -> None:
        now = self.clock()
        for kind, count in counts.items():
            self.redaction_count += count
            self.pending_redactions.append((now, path, kind, count))
        log.info("redacted %s in %s", ", ".join(f"{c} {k}" for k, c in counts.items()), path)

    def check_writable(self) -> None:
        if self.failsafe:
            raise StoreDamaged(f"the mount is read-only: {self.failsafe}")

    def refuse(self, path: str, exc: ContextFSError, data: bytes | None = None) -> Refusal:
        """Record a refusal for `.status`; keep the refused bytes in the data dir."""
        kept = None
        if data:
            data = self.redact_bytes(data, path)  # kept, but never with a secret in it
            folder = self.data_dir / "refused"
            folder.mkdir(parents=True, exist_ok=True)
            stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
            self.refusal_count += 1
            base = re.sub(r"[^A-Za-z0-9._-]", "_", path.rsplit("/", 1)[-1])[:80] or "file"
            target = folder / f"{stamp}-{self.refusal_count:04d}-{base}"
            target.write_bytes(data)
            kept = str(target)
        else:
            self.refusal_count += 1
        path = path.encode("utf-8", "backslashreplace").decode()  # names may not be UTF-8
        r = Refusal(self.clock(), path, exc.errno, exc.reason, kept)
        self.refusals.append(r)
        log.info("refused %s: %s", path, exc.reason)
        return r

    # ---- owners and nodes ---------------------------------------------------------------

    def create_owner(self, kind: str, owner_id: str) -> None:
        if kind not in OWNER_KINDS:
            raise InvalidInput(f"owners live under user/ or agent/, not {kind!r}")
        if not _SAFE_ID.match(owner_id):
            raise InvalidInput(
                f"owner id {owner_id!r} must start with a letter or digit and use only "
                "letters, digits and . _ @ + -"
            )
        if (kind, owner_id) in self.owners:
            raise Exists(f"{kind}/{owner_id} already exists")
        with self.transaction():
            self.store.add_owner(kind, owner_id)
            self.owners.add((kind, owner_id))
            self._tx.owners.append((kind, owner_id))

    def _new_node(self, owner: tuple[str, str], ctype: ContextType, name: str) -> Node:
        now = self.clock()
        return Node(
            id=self.store.new_id(), owner_kind=owner[0], owner_id=owner[1], type=ctype.name,
            name=name, version=0, l0="", l1="", l2="", l0_pinned=False, l1_pinned=False,
            content_hash=content_hash(""), created=now, updated=now, persisted=False,
        )

    def _check_name(self, ctype: ContextType, name: str) -> None:
        if ctype.singleton:
            if name:
                raise InvalidInput(f"{ctype.name} is a single node per owner")
            return
        if not ctype.matches_node_name(name):
            raise InvalidInput(
                f"{name!r} does not fit the {ctype.name} template {ctype.directory!r}"
            )

    def create_node(self, owner: tuple[str, str], ctype: ContextType, name: str, *,
                    persist: bool = True) -> Node:
        """A new, empty node. With persist=False (mkdir) it is stored with its first
        commit instead: one transaction per new node, not two."""
        self._check_name(ctype, name)
        self.check_writable()
        if self.live_node(owner, ctype, name) is not None:
            raise Exists(f"{ctype.type_dir}/{name} already exists")
        n = self._new_node(owner, ctype, name)
        if persist:
            with self.transaction():
                self._store_node(n)
                self._add_node(n)
                self._set_live((owner[0], owner[1], ctype.name, name), n.id)
        else:  # nothing stored: journaled only when a caller's transaction is open
            self._add_node(n)
            self._set_live((owner[0], owner[1], ctype.name, name), n.id)
        return n

    def _store_node(self, n: Node, reason: str | None = None) -> None:
        """Inside a transaction: write n (insert on its first commit), with a new version
        row when reason is given. A rollback puts `persisted` back with the rest of n."""
        assert self._tx is not None, "a node is stored inside Memory.transaction()"
        self._touch(n)
        if n.persisted:
            self.generation = self.store.update_node(n, new_version_reason=reason)
        else:
            self.generation = self.store.insert_node(n, new_version_reason=reason)
            n.persisted = True
        self._tx.stored[n.id] = self.generation

    def persist_pending(self, owner: tuple[str, str] | None = None) -> int:
        """Store nodes made by mkdir and never written (fsync of a type dir, unmount)."""
        pending = [n for n in self.nodes.values()
                   if not n.persisted and (owner is None or n.owner == owner)]
        if pending:
            with self.transaction():
                for n in pending:
                    self._store_node(n)
        return len(pending)

    def add_source(self, n: Node, source: str) -> None:
        """Provenance for n, stored with its next write in this transaction."""
        self._touch(n)
        n.sources.append(source)

    def validate_l2(self, ctype: ContextType, text: str) -> Document:
        doc = parse_document(text)
        if doc.fields:
            ctype.coerce_fields(doc.fields, where="front matter")
        return doc

    def save_l2(self, n: Node, text: str, reason: str = "write") -> bool:
        """Commit text as n's L2: a new version when it differs. Returns whether it did."""
        if len(text.encode("utf-8")) > self.max_tier_size:
            raise TooBig(f"L2.md is limited to {self.max_tier_size} bytes")
        ctype = self.type_named(n.type)
        text = self.redact(text, self.node_path(n) + "/L2.md")
        self.validate_l2(ctype, text)
        h = content_hash(text)
        if h == n.content_hash and n.version > 0:
            return False
        l0, l1 = summarize(ctype, text) if text.strip() else ("", "")
        now = max(self.clock(), n.updated)
        with self.transaction():
            self._touch(n)
            n.version += 1
            n.l0, n.l1, n.l2 = l0, l1, text
            n.l0_pinned = n.l1_pinned = False
            n.content_hash, n.updated = h, now
            self._store_node(n, reason)
            n.history.append((n.version, now, len(text.encode("utf-8"))))
        return True

    def save_pinned(self, n: Node, tier: str, text: str) -> bool:
        """A hand-written L0 or L1: kept as written until L2 changes."""
        ctype = self.type_named(n.type)
        limit = ctype.l0_max_chars if tier == "L0" else ctype.l1_max_chars
        if len(text) > limit * 4:
            raise TooBig(f"{tier}.md is limited to about {limit} characters (hard cap {limit * 4})")
        text = self.redact(text, f"{self.node_path(n)}/{tier}.md")
        old = n.l0 if tier == "L0" else n.l1
        pinned = n.l0_pinned if tier == "L0" else n.l1_pinned
        if old == text and pinned:
            return False
        with self.transaction():
            self._touch(n)
            if tier == "L0":
                n.l0, n.l0_pinned = text, True
            else:
                n.l1, n.l1_pinned = text, True
            n.updated = max(self.clock(), n.updated)
            self._store_node(n)
        return True

    def rename_node(
        self, n: Node, owner: tuple[str, str], ctype: ContextType, name: str
    ) -> None:
        """mv of a node directory: a new name, owner or type (validated)."""
        self._check_name(ctype, name)
        if ctype.scope != owner[0]:
            raise InvalidInput(f"{ctype.name} nodes belong under {ctype.scope}/, not {owner[0]}/")
        other = self.live_node(owner, ctype, name)
        if other is not None and other is not n:
            raise Exists(f"{ctype.type_dir}/{name} already exists")
        if n.l2.strip():
            doc = self.validate_l2(ctype, n.l2)
            missing = ctype.missing_required({**doc.fields, **self._keys_from_name(ctype, name)})
            if missing and ctype.name != n.type:
                raise InvalidInput(
                    f"cannot re-type to {ctype.name}: missing required field(s) "
                    + ", ".join(missing)
                )
        old_key = (n.owner_kind, n.owner_id, n.type, n.name)
        was_deleted = n.deleted_at is not None or n.archived_at is not None
        deleted_at = n.deleted_at
        with self.transaction():
            self._touch(n)
            n.owner_kind, n.owner_id, n.type, n.name = owner[0], owner[1], ctype.name, name
            n.deleted_at = None
            n.archived_at = None
            n.updated = max(self.clock(), n.updated)
            self._store_node(n)
            if was_deleted:
                self._restore_attachments(n, deleted_at)
            else:
                self._set_live(old_key, None)
            self._set_live((n.owner_kind, n.owner_id, n.type, n.name), n.id)

    def _keys_from_name(self, ctype: ContextType, name: str) -> dict[str, object]:
        return dict(ctype.parse_node_name(name) or {}) if name else {}

    # Attachments removed in this window before their node's rmdir are part of `rm -r`
    # and come back when the node is restored.
    RESTORE_WINDOW = 120.0

    def delete_node(self, n: Node) -> None:
        """Soft delete: the node leaves the tree, its rows stay restorable."""
        with self.transaction():
            self._touch(n)
            n.deleted_at = self.clock()
            n.updated = max(n.deleted_at, n.updated)
            self._store_node(n)
            for a in self.attachments.values():
                if a.node_id == n.id and a.deleted_at is None:
                    self._touch_att(a)
                    a.deleted_at = n.deleted_at
                    self.store.update_attachment(a)
            self._set_live((n.owner_kind, n.owner_id, n.type, n.name), None)

    def set_summaries(self, n: Node, l0: str, l1: str, version: int) -> bool:
        """L0/L1 written by the LLM for version `version` of n's L2 (no new version).
        Skipped when L2 moved on meanwhile or a hand-written L0/L1 is pinned."""
        if n.version != version or n.l0_pinned or n.l1_pinned or not self.is_live(n):
            return False
        if (n.l0, n.l1) == (l0, l1):
            return False
        with self.transaction():
            self._touch(n)
            n.l0 = self.redact(l0, self.node_path(n))
            n.l1 = self.redact(l1, self.node_path(n))
            self._store_node(n)
        return True

    def archive_node(self, n: Node) -> None:
        """Consolidation: a node below its type's minimum importance leaves the type
        directory for the owner's .archive (visible, restorable with mv, not searched)."""
        with self.transaction():
            self._touch(n)
            n.archived_at = self.clock()
            self._store_node(n)
            self._set_live((n.owner_kind, n.owner_id, n.type, n.name), None)

    def set_importance(self, changes: dict[int, float]) -> None:
        """Importance and access counts in one transaction (no new versions)."""
        with self.transaction():
            for nid, value in changes.items():
                n = self.nodes[nid]
                self._touch(n)
                n.importance = value
                self.store.set_importance(nid, value, n.access_count)
            for nid in self._access_dirty:
                n = self.nodes.get(nid)
                if n is not None and nid not in changes:
                    self.store.set_importance(nid, n.importance, n.access_count)
        self._access_dirty.clear()

    def record_access(self, n: Node) -> None:
        """A read through the mount: counted in memory, stored with the next consolidation
        or at unmount (a read must not cost a transaction)."""
        n.access_count += 1
        self._access_dirty.add(n.id)

    def flush_access_counts(self) -> None:
        if self._access_dirty and not self.failsafe:
            self.set_importance({})

    def _restore_attachments(self, n: Node, deleted_at: float | None) -> None:
        if deleted_at is None:
            return
        for a in self.attachments.values():
            if (
                a.node_id == n.id
                and a.deleted_at is not None
                and deleted_at - self.RESTORE_WINDOW <= a.deleted_at <= deleted_at
            ):
                self._touch_att(a)
                a.deleted_at = None
                self.store.update_attachment(a)

    def node_attachments(self, n: Node) -> list[Attachment]:
        """What a node directory shows: live attachments, or for a deleted node those that
        went with it (removed within RESTORE_WINDOW before the node)."""
        if n.deleted_at is None:
            return [a for a in self.attachments.values()
                    if a.node_id == n.id and a.deleted_at is None]
        lo = n.deleted_at - self.RESTORE_WINDOW
        return [a for a in self.attachments.values()
                if a.node_id == n.id and a.deleted_at is not None
                and lo <= a.deleted_at <= n.deleted_at]

    def is_live(self, n: Node) -> bool:
        return n.deleted_at is None and n.archived_at is None

    def node_list(self) -> list[Node]:
        """Every node (live, deleted, archived), safe to call from a worker thread while
        the trio thread adds nodes: the copy is one C-level loop under the GIL that runs
        no Python code, so no insertion can interleave with it (iterating `nodes` itself
        there raises "dictionary changed size during iteration")."""
        return list(self.nodes.values())

    def history_text(self, n: Node, version: int) -> str:
        if version == n.version:
            return n.l2
        return self.store.version_text(n.id, version)

    # ---- routed writes (SPEC §5, first bullet) ------------------------------------------

    def route(self, owner: tuple[str, str], ctype: ContextType, filename: str,
              data: bytes) -> RouteResult:
        """A file written into a type directory becomes memory by the type's mode."""
        if len(data) > self.max_tier_size:
            raise TooBig(f"a memory file is limited to {self.max_tier_size} bytes")
        text = decode_text(data, filename)
        with self.transaction():  # the redaction is logged only if the write is stored
            text = self.redact(text, self._owner_path(owner, ctype, filename))
            doc = parse_document(text)
            return self.route_document(owner, ctype, doc, filename, source=filename)

    def route_document(self, owner: tuple[str, str], ctype: ContextType, doc: Document,
                       filename: str = "", *, source: str = "") -> RouteResult:
        """Route fields + body (a dropped file, or an extracted candidate) by the type's
        mode (its entry in `strategies.STRATEGIES`). `filename` may give a key; `source`
        is recorded as provenance."""
        self.check_writable()
        strategy = strategy_for(ctype)
        fields = ctype.coerce_fields(doc.fields, where="front matter") if doc.fields else {}
        incoming = Document(fields, doc.body)
        stem = _slug_stem(filename)
        reason = f"route:{source or filename}"
        if ctype.singleton:
            target = self.live_node(owner, ctype, "")
            return self._route_into(owner, ctype, "", target, incoming, reason)
        explicit = all(k in fields for k in ctype.key_fields)
        values = dict(fields)
        for k in ctype.key_fields:
            if k in values:
                continue
            f = ctype.field(k)
            if f is not None and f.type == "date":
                values[k] = dt.datetime.fromtimestamp(self.clock(), dt.UTC).date().isoformat()
            elif stem and not stem.startswith("."):
                values[k] = stem
                stem = ""
            else:
                words = " ".join(doc.body.split()[:6])
                if not words:
                    raise InvalidInput(f"missing key field {k!r} for {ctype.name}")
                values[k] = words
        fields = {**fields, **{k: v for k, v in values.items() if k in ctype.key_fields}}
        fields = ctype.coerce_fields(fields, where="front matter")
        incoming = Document(fields, doc.body)
        name = ctype.node_name(values)
        if strategy.new_node_each_write:
            base, i = name, 2
            while self.live_node(owner, ctype, name) is not None:
                name = f"{base}-{i}"
                i += 1
            return self._route_into(owner, ctype, name, None, incoming, reason)
        target = self.live_node(owner, ctype, name)
        if target is None and strategy.match_similar and not explicit:
            target = self._similar_node(owner, ctype, doc.body)
            if target is not None:
                name = target.name
                incoming = Document(
                    {k: v for k, v in fields.items() if k not in ctype.key_fields}, doc.body
                )
        return self._route_into(owner, ctype, name, target, incoming, reason)

    def _similar_node(self, owner: tuple[str, str], ctype: ContextType, body: str) -> Node | None:
        """The topic node whose items share most words with body, if close enough."""
        new = _tokens(body)
        if len(new) < 3:
            return None
        best, best_score = None, 0.0
        for nid in self.live.values():
            n = self.nodes[nid]
            if n.type != ctype.name or n.owner != owner:
                continue
            for item in body_items(parse_document(n.l2).body):
                old = _tokens(item)
                if not old:
                    continue
                score = len(new & old) / len(new | old)
                if score > best_score:
                    best, best_score = n, score
        return best if best_score >= 0.5 else None

    def _route_into(self, owner: tuple[str, str], ctype: ContextType, name: str,
                    target: Node | None, incoming: Document, reason: str) -> RouteResult:
        strategy = strategy_for(ctype)
        if target is None:
            merged, folded = strategy.start(ctype, incoming)
        else:
            merged, folded = strategy.combine(ctype, parse_document(target.l2), incoming)
        missing = ctype.missing_required(merged.fields)
        if missing:
            raise InvalidInput(f"{ctype.name} needs field(s): " + ", ".join(missing))
        text = render_document(ctype, merged)
        created = target is None
        n = self._new_node(owner, ctype, name) if created else target
        source = reason.removeprefix("route:")
        with self.transaction():
            if source not in n.sources and len(n.sources) < 100:
                self.add_source(n, source)  # provenance, stored with this version
            changed = self.save_l2(n, text, reason)  # a new node: inserted with version 1
            if created:
                self._add_node(n)
                self._set_live((owner[0], owner[1], ctype.name, name), n.id)
        return RouteResult(n, created, changed, folded)

    # ---- attachments --------------------------------------------------------------------

    def add_attachment(self, node: Node, parent_id: int | None, name: str, kind: str,
                       mode: int, *, target: bytes | None = None,
                       data: bytes | None = None) -> Attachment:
        a = Attachment(self.store.new_id(), node.id, parent_id, name, kind, mode & 0o7777,
                       self.clock(), target)
        if kind == "file" and data is None:
            data = b""
        with self.transaction():
            if not node.persisted:
                self._store_node(node)
            self.store.insert_attachment(a, data)
            a.size = len(data or b"")
            self.attachments[a.id] = a
            self._tx.new_atts.append(a.id)
            self._tx.atts[a.id] = (a, replace(a))
        return a

    def commit_attachment(self, a: Attachment, data: bytes | bytearray, mtime: float,
                          path: str = "", changed: list[tuple[int, int]] | None = None
                          ) -> bytes | None:
        """Store `data` as the new content of file attachment a, secrets redacted.

        `changed` lists the byte ranges [lo, hi) of data that may differ from what is
        stored (an empty range marks where the file was cut short); only the chunks they
        touch are written, and only they (widened, see `_secret_near`) are scanned for
        secrets. None means anything may have changed: every chunk is written and the
        whole file is scanned. Returns the stored content when redaction changed it (the
        caller must show that instead), else None. Never copies data as a whole unless a
        secret was found.
        """
        size = len(data)
        if size > self.max_file_size:
            raise TooBig(f"attachments are limited to {self.max_file_size} bytes")
        path = path or a.name
        with memoryview(data) as view:
            if changed is None:
                chunks = set(range(-(-size // CHUNK_SIZE)))
                scan_all = True
            else:
                chunks = {i for lo, hi in changed
                          for i in range(lo // CHUNK_SIZE, max(lo, hi - 1) // CHUNK_SIZE + 1)}
                scan_all = self._secret_near(view, changed)
            redacted: bytes | None = None
            if scan_all and self.redactor is not None:
                out, found = self.redactor.redact_bytes(bytes(view))
                if found:
                    self._log_found(path, found)
                    # a marker is not as long as the secret: every later byte moves
                    first = min(r.start for r in found)
                    chunks.update(range(first // CHUNK_SIZE, -(-len(out) // CHUNK_SIZE)))
                    redacted = out
            stored = view if redacted is None else redacted
            with self.transaction():
                self.store.write_attachment_chunks(a.id, stored, sorted(chunks), mtime)
                self._touch_att(a)
                a.mtime, a.size = mtime, len(stored)
        return redacted

    def _secret_near(self, view: memoryview, changed: list[tuple[int, int]]) -> bool:
        """Does the redactor report anything in the changed ranges, each widened by
        REDACT_MARGIN bytes on both sides?

        Why this is enough: what is stored is already clean (every commit redacts), so
        a new secret must overlap a changed byte, or have one in the context a detector
        looks at (the byte before or after it; the blanks after a `password:` value). A
        secret of up to REDACT_MARGIN bytes that does so lies wholly inside its window.
        The longest bounded built-in pattern is a GitHub token (262 bytes). A PEM private
        key may be longer (its body is allowed 64 KiB), but its BEGIN line alone is
        already reported and a new key has a new BEGIN line, so its window reports.
        Open-ended tokens (JWT, `sk-…`, bearer) longer than the margin are found when
        their start lies within the margin of the change. For the built-in detectors a
        window edge can only add a report (a lookbehind or lookahead that sees no byte
        there, a `$`, a token cut short), not hide one that fits, and an added report
        only costs a full scan. Windows are cut at UTF-8 character boundaries, so a
        window decodes as UTF-8 whenever the whole file does. User patterns from
        config.yaml are assumed to match less than REDACT_MARGIN bytes; a pattern added
        later applies to bytes written after it, and to stored bytes near a change.
        """
        if self.redactor is None:
            return False
        size = len(view)
        windows: list[tuple[int, int]] = []
        for lo, hi in sorted(changed):
            lo, hi = min(lo, size), min(max(lo, hi), size)
            lo = _char_start(view, max(0, lo - REDACT_MARGIN), -1)
            hi = _char_start(view, min(size, hi + REDACT_MARGIN), 1)
            if windows and lo <= windows[-1][1]:
                windows[-1] = (windows[-1][0], max(hi, windows[-1][1]))
            else:
                windows.append((lo, hi))
        return any(self.redactor.redact_bytes(bytes(view[lo:hi]))[1] for lo, hi in windows
                   if lo < hi)

    def update_attachment(self, a: Attachment) -> None:
        """Store a's record, which the caller has changed already (a rollback reloads it
        from the store, unless this transaction kept a copy of it first)."""
        with self.transaction():
            tx = self._tx
            if a.id not in tx.atts:
                tx.atts[a.id] = (a, None)
            self.store.update_attachment(a)

    def touch_attachment(self, a: Attachment) -> None:
        """A folder's mtime moved: stored with the next transaction (or at unmount), so a
        create in a folder costs one transaction, not two."""
        self._dirty_atts[a.id] = a

    def flush_touched(self) -> None:
        if self._dirty_atts and not self.failsafe:
            with self.transaction():
                pass  # the folder mtimes are written with every commit

    def remove_attachment(self, a: Attachment) -> None:
        """Unlink/rmdir: soft until the retention purge, so `rm -r` of a node can be undone."""
        with self.transaction():
            self._touch_att(a)
            a.deleted_at = self.clock()
            self.store.update_attachment(a)

    def attachment_data(self, a: Attachment) -> bytearray:
        return self.store.attachment_data(a.id)

    # ---- drops --------------------------------------------------------------------------

    def persist_drop(self, drop_id: int, owner: tuple[str, str], ctype: ContextType,
                     filename: str, data: bytes) -> None:
        with self.transaction():
            data = self.redact_bytes(data, self._owner_path(owner, ctype, filename))
            self.store.add_pending_drop(drop_id, owner, ctype.name, filename, data)

    def forget_drop(self, drop_id: int) -> None:
        with self.transaction():
            self.store.remove_pending_drop(drop_id)

    def new_id(self) -> int:
        return self.store.new_id()

    def recover_drops(self) -> list[tuple[str, RouteResult | Refusal]]:
        """Route files that were fsync()ed into a type directory before a crash."""
        done: list[tuple[str, RouteResult | Refusal]] = []
        for drop_id, kind, oid, tname, filename, data in self.store.pending_drops():
            path = f"{kind}/{oid}/{tname}/{filename}"
            try:
                ctype = self.type_named(tname)
                res: RouteResult | Refusal = self.route((kind, oid), ctype, filename, data)
            except ContextFSError as exc:
                res = self.refuse(path, exc, data)
            self.forget_drop(drop_id)
            done.append((path, res))
            log.info("recovered pending drop %s", path)
        return done

    # ---- conversations and consolidation (their rows, written through here) ---------------

    def inbox_items(self) -> list[tuple]:
        return self.store.inbox_items()

    def inbox_data(self, item_id: int) -> bytes:
        return self.store.inbox_data(item_id)

    def add_inbox_item(self, item_id: int, owner: tuple[str, str], filename: str,
                       data: bytes, created: float, state: str, report: str) -> None:
        """A file closed in an `.inbox/`: stored as it arrived (already redacted)."""
        with self.transaction():
            self.store.add_inbox_item(item_id, owner, filename, data, created, state, report)
            self._tx.other.append(Change("inbox", "created", _inbox_path(owner, filename),
                                         self.generation, id=item_id))

    def set_inbox_state(self, item_id: int, owner: tuple[str, str], filename: str,
                        state: str, report: str) -> None:
        with self.transaction():
            self.store.set_inbox_state(item_id, state, report)
            self._tx.other.append(Change("inbox", "updated", _inbox_path(owner, filename),
                                         self.generation, id=item_id))

    def sessions(self) -> list[tuple]:
        return self.store.sessions()

    def put_session(self, owner: tuple[str, str], sid: str, created: float, transcript: str,
                    processed: int, summary: str, *, created_now: bool = False) -> None:
        with self.transaction():
            self.store.put_session(owner, sid, created, transcript, processed, summary)
            self._tx.other.append(Change("session", "created" if created_now else "updated",
                                         _session_path(owner, sid), self.generation))

    def delete_session(self, owner: tuple[str, str], sid: str) -> None:
        with self.transaction():
            self.store.delete_session(owner, sid)
            self._tx.other.append(Change("session", "deleted", _session_path(owner, sid),
                                         self.generation))

    def record_consolidation(self, ts: float, decayed: int, merged: int, archived: int,
                             summary: str) -> None:
        with self.transaction():
            self.store.add_consolidation_run(ts, decayed, merged, archived, summary)

    # ---- facts --------------------------------------------------------------------------

    def meta_yaml(self, n: Node) -> str:
        lines = [
            f"id: {n.id}",
            f"type: {n.type}",
            f"owner: {n.owner_kind}/{n.owner_id}",
            f"path: {json.dumps(self.node_path(n))}",
            f"version: {n.version}",
            f"indexed_version: {n.indexed_version}",
            f"created: {_iso(n.created)}",
            f"updated: {_iso(n.updated)}",
            f"content_hash: {n.content_hash}",
            f"l0_pinned: {str(n.l0_pinned).lower()}",
            f"l1_pinned: {str(n.l1_pinned).lower()}",
            f"importance: {n.importance:.3f}",
            f"access_count: {n.access_count}",
            f"sources: {json.dumps(n.sources)}",
            f"tags: {json.dumps(n.tags)}",
        ]
        if n.deleted_at is not None:
            lines.append(f"deleted_at: {_iso(n.deleted_at)}")
        return "\n".join(lines) + "\n"

    def counts(self) -> dict[str, int]:
        live = len(self.live)
        return {
            "owners": len(self.owners),
            "nodes": live,
            "deleted_nodes": len(self.nodes) - live,
            "versions": sum(len(n.history) for n in self.nodes.values()),
            "attachments": sum(1 for a in self.attachments.values() if a.deleted_at is None),
        }


def _inbox_path(owner: tuple[str, str], filename: str) -> str:
    return f"{owner[0]}/{owner[1]}/.inbox/{filename}"


def _session_path(owner: tuple[str, str], sid: str) -> str:
    return f"{owner[0]}/{owner[1]}/.sessions/{sid}"


def _char_start(data: memoryview, i: int, step: int) -> int:
    """i, moved by `step` (-1: back, 1: on) past UTF-8 continuation bytes (at most
    three), so that a window cut at i splits no character."""
    for _ in range(3):
        if 0 < i < len(data) and 0x80 <= data[i] < 0xC0:
            i += step
    return i
