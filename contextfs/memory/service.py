"""The memory service: typed nodes and versions over the Store, and the parts it holds.

This is where context types, documents and the canonical store meet. It holds the nodes
in use and every attachment in memory (write-through to the store); a node not held is
read from the store when asked for (`memory.heads`: `nodes`, `live`, `walk`), so opening
a store of a million nodes costs what opening one of a thousand does. It knows nothing of
inodes or FUSE. This module holds the memory's state, owners, nodes and versions,
refusals, the redaction log and the rows of conversations; `Memory` builds and holds
its other parts, each given only what it uses: `transactions` (`memory.transactions`:
the transaction boundary, journal and change feed), `attachment_store`
(`memory.attachments`: attachment records and chunked bytes) and `routing`
(`memory.routing`: dropped files and extracted documents into nodes).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING

import xxhash

from contextfs.ctxtypes import ContextType, slugify
from contextfs.errors import (
    ContextFSError,
    Exists,
    InvalidInput,
    NoSpace,
    StoreDamaged,
    TooBig,
    VersionConflict,
)
from contextfs.memory.attachments import AttachmentStore
from contextfs.memory.document import Document, parse_document, render_document, trace_bytes
from contextfs.memory.heads import LiveIndex, NodeCache
from contextfs.memory.redact import escape_controls, marker
from contextfs.memory.remote import append_again, catch_up, give_way, keep_both, lock_and_load
from contextfs.memory.routing import Routing
from contextfs.memory.spill import SPILL_AT, SpillBuffer
from contextfs.memory.strategies import strategy_for
from contextfs.memory.summarize import summarize
from contextfs.memory.texts import DEFAULT_HOT_NODES, LazyNode, TierTexts
from contextfs.memory.transactions import Transactions
from contextfs.model import (
    DIR_MODE,
    FILE_MODE,
    MACHINE_REASONS,
    Access,
    AccessMap,
    Attachment,
    Change,
    Node,
    Refusal,
)
from contextfs.store import Store
from contextfs.store.schema import CHUNK_SIZE

if TYPE_CHECKING:
    from contextfs.memory.redact import Redaction, Redactor
    from contextfs.store.fsck import CheckRun

log = logging.getLogger(__name__)

OWNER_KINDS = ("user", "agent")
_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}$")
DEFAULT_MAX_FILE_SIZE = 64 * 1024 * 1024
DEFAULT_MAX_INBOX_SIZE = 512 * 1024 * 1024
DEFAULT_MAX_TIER_SIZE = 4 * 1024 * 1024


def content_hash(text: str) -> str:
    return xxhash.xxh64_hexdigest(text.encode("utf-8"))


def _iso(ts: float | None) -> str:
    if ts is None:
        return "null"
    # (time.gmtime: the same text as datetime's in half the time; meta.yaml is rendered
    # for every node a first listing shows, its size being the rendered text's)
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _json_list(items: list) -> str:
    return json.dumps(items) if items else "[]"  # (most are empty; dumps takes 3 µs)


class Memory:
    """Typed memory nodes with versions, write-through to the Store.

    This class holds the nodes, owners, refusals and redaction log; its parts are
    `transactions` (the transaction boundary and change feed), `attachment_store`
    (attachments) and `routing` (routed writes), reached through it by callers.
    `transaction()`, `generation`, `failsafe` and `disk_full` stay here as thin
    delegations to `transactions`: they are the memory's as a whole."""

    def __init__(
        self,
        store: Store,
        types: dict[str, ContextType],
        *,
        data_dir: Path,
        max_file_size: int = DEFAULT_MAX_FILE_SIZE,
        max_inbox_size: int = DEFAULT_MAX_INBOX_SIZE,
        max_tier_size: int = DEFAULT_MAX_TIER_SIZE,
        clock: Callable[[], float] = time.time,
        redactor: Redactor | None = None,
        default_owner: str = "default",
        hot_nodes: int = DEFAULT_HOT_NODES,
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
        self.max_inbox_size = max_inbox_size
        self.max_tier_size = max_tier_size
        self.clock = clock
        self.refusals: deque[Refusal] = deque(maxlen=50)
        self.refusal_count = 0
        # node id: versions whose stored text a later save redacted (`_redact_versions`);
        # the tree takes them to refresh what the kernel holds of those files
        self.rewritten_versions: dict[int, set[int]] = {}
        # what the mount's fsck checked (app.open_memory), for .status
        self.mount_check: CheckRun | None = None
        # type name: stored nodes of a type no schema loads (removed, or a broken link):
        # not shown, and said so in .status (app.open_memory)
        self.untyped: dict[str, int] = {}
        # a shared store (memory.remote): nodes loaded from other mounts' commits, for the
        # tree; and the saves that lost to another mount's, kept in .history (.status)
        self.reloaded: list[tuple[Node, bool]] = []
        self.new_owners: list[tuple[str, str]] = []  # owners another mount made, for the tree
        # access keys another mount changed (memory.remote.apply), for the tree
        self.reaccessed: set[tuple[str, str]] = set()
        self.reattached: set[int] = set()  # nodes whose attachments another mount changed
        self.conflicts: deque[str] = deque(maxlen=50)
        # the name a node takes in its owner's ".trash" or ".archive" (its own, or
        # `<name>.<id>` when one there has it), kept as its name so that it shows under
        # the same name after a remount: given by the tree that shows those (None: its own)
        self.box_name: Callable[[Node, str], str] | None = None
        self.owners: set[tuple[str, str]] = set(store.owners())
        # (kind, key) -> stored owner, group and modes; absent = the defaults
        self.access = AccessMap(store.access())
        # L1 and L2 stay in the store until read (memory.texts): most of a node's weight;
        # and a node's row until it is used (memory.heads): nothing is read per node here
        store.set_home()  # this thread's reads see its own open transaction
        self.texts = TierTexts(store, hot_nodes)
        self._access_dirty: set[int] = set()
        self.nodes = NodeCache(store, self.texts, hot_nodes, keep=self._unflushed)
        self.live = LiveIndex(store, self.nodes)
        self.attachments: dict[int, Attachment] = {a.id: a for a in store.attachments()}
        # the one transaction boundary, its journal and the change feed
        self.transactions = Transactions(
            store,
            nodes=self.nodes,
            live=self.live,
            texts=self.texts,
            owners=self.owners,
            access=self.access,
            attachments=self.attachments,
            clock=lambda: self.clock(),  # the memory's clock, as it is when asked
            node_path=self.node_path,
            attachment_path=lambda a: self.attachment_store.attachment_path(a),
        )
        if store.dialect == "postgresql":  # another mount's commit may refuse this one's
            self.transactions.after_conflict = lambda: give_way(self)
        self.redactor = redactor
        # attachment records and their chunked bytes
        self.attachment_store = AttachmentStore(
            store,
            self.transactions,
            nodes=self.nodes,
            attachments=self.attachments,
            node_path=self.node_path,
            record_redactions=self.record_redactions,
            redactor=redactor,
            max_file_size=max_file_size,
            clock=lambda: self.clock(),  # the memory's clock, as it is when asked
            spill_dir=self.data_dir / "spill",
        )
        self.default_owner = default_owner
        # dropped files and extracted documents into nodes
        self.routing = Routing(
            store,
            self.transactions,
            self,
            catch_up=lambda: catch_up(self),
            lock_and_load=lambda node_id: lock_and_load(self, node_id),
            max_tier_size=max_tier_size,
            clock=lambda: self.clock(),
        )
        self.redaction_count = 0

    # ---- the memory as a whole: its transaction, generation and state -------------------

    def transaction(self) -> AbstractContextManager[None]:
        """One store transaction around any number of changes (`Transactions.transaction`:
        nested uses join the outermost; a rollback puts memory back as it was)."""
        return self.transactions.transaction()

    @property
    def generation(self) -> int:
        """The store generation (outbox seq) the in-memory mirrors reflect."""
        return self.transactions.generation

    @property
    def failsafe(self) -> str | None:
        """Why the mount is read-only (a store fault, fsck's finding), or None."""
        return self.transactions.failsafe

    @failsafe.setter
    def failsafe(self, reason: str | None) -> None:
        self.transactions.failsafe = reason

    @property
    def disk_full(self) -> tuple[float, str] | None:
        """Since when and why writes are refused with ENOSPC, or None."""
        return self.transactions.disk_full

    @disk_full.setter
    def disk_full(self, value: tuple[float, str] | None) -> None:
        self.transactions.disk_full = value

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
        key = (owner[0], owner[1], ctype.name, name)
        n = self.live.node_at(key)
        # the held node is this process's truth (a shared store's row may be newer until
        # memory.remote catches up with it)
        if n is None or not self.is_live(n) or (n.owner_kind, n.owner_id, n.type, n.name) != key:
            return None
        return n

    def walk(
        self,
        *,
        owner: tuple[str, str] | None = None,
        types: tuple[str, ...] | None = None,
        live: bool | None = True,
        texts: bool = False,
    ) -> Iterator[Node]:
        """Nodes (live ones unless live=None/False) of an owner and types, streamed from
        the store in id order (`NodeCache.walk`; texts: with their L1/L2 read a page at a
        time); safe from a worker thread."""
        return self.nodes.walk(owner=owner, types=types, live=live, texts=texts)

    def recent_nodes(self, limit: int) -> list[Node]:
        """The `limit` most recently changed live nodes (any thread: the text warm-up)."""
        ids = self.store.recent_live_ids(limit)
        out: list[Node] = []
        for i in range(0, len(ids), 1000):  # a statement names at most 1,000 ids
            out += self.nodes.walk(ids=ids[i : i + 1000], live=True)
        return out

    def _unflushed(self, n: Node) -> bool:
        return n.id in self._access_dirty

    def owner_path(self, owner: tuple[str, str], ctype: ContextType | None, name: str) -> str:
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

    def clean_name(self, name: str) -> str:
        """A name or path as it is shown (`.status`, reasons, logs): any secret in it
        redacted, control characters escaped (one line, whatever the name holds)."""
        shown = self.redactor.redact_name(name).text if self.redactor is not None else name
        return escape_controls(shown)

    def check_name(self, name: str, what: str = "a name") -> None:
        """Refuse a name (or symlink target, id) that carries a secret (SPEC §10).

        A name is shown by `ls`, stored, indexed and logged as it is; rewriting it would
        move the file from under the program that made it. So it is refused (`EINVAL`),
        and the reason shows the name redacted.
        """
        if self.redactor is None:
            return
        res = self.redactor.redact_name(name)
        if res.changed:
            kinds = ", ".join(sorted(res.summary()))
            raise InvalidInput(
                f"{what} must not carry a secret ({kinds}): {res.text!r}; choose one without it"
            )

    def redact_bytes(self, data: bytes, path: str) -> bytes:
        if self.redactor is None:
            return data
        out, found = self.redactor.redact_bytes(data)
        self._log_found(path, found)
        return out

    def record_redactions(self, path: str, found: tuple[Redaction, ...]) -> None:
        """What a redaction done elsewhere (a worker thread, `Redactor.redact_bytes`)
        found, counted and logged as `redact_bytes` does."""
        self._log_found(path, found)

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
            self.transactions.pending_redactions.append((now, path, kind, count))
        log.info("redacted %s in %s", ", ".join(f"{c} {k}" for k, c in counts.items()), path)

    def check_writable(self) -> None:
        if self.failsafe:
            raise StoreDamaged(f"the mount is read-only: {self.failsafe}")

    def refuse(
        self, path: str, exc: ContextFSError, data: bytes | None = None, uid: int | None = None
    ) -> Refusal:
        """Record a refusal for `.status`; keep the refused bytes in the data dir. `uid`:
        the caller's, when known (`.status` shows a refused question to its asker only)."""
        path = path.encode("utf-8", "backslashreplace").decode()  # names may not be UTF-8
        # a refused name is shown, logged and names the kept file, never with a secret
        reason = exc.reason.encode("utf-8", "backslashreplace").decode()
        path, reason = self.clean_name(path), self.clean_name(reason)
        kept = None
        if data:
            data = self.redact_bytes(data, path)  # kept, but never with a secret in it
            folder = self.data_dir / "refused"
            stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
            self.refusal_count += 1
            base = re.sub(r"[^A-Za-z0-9._-]", "_", path.rsplit("/", 1)[-1])[:80] or "file"
            target = folder / f"{stamp}-{self.refusal_count:04d}-{base}"
            try:
                folder.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
                kept = str(target)
            except OSError as err:  # a full disk refuses the copy too: said, not raised
                target.unlink(missing_ok=True)
                reason += f" (its bytes could not be kept: {err.strerror})"
        else:
            self.refusal_count += 1
        r = Refusal(self.clock(), path, exc.errno, reason, kept, uid)
        self.refusals.append(r)
        log.info("refused %s: %s", path, reason)
        return r

    def trace_of(self, refusal: Refusal, name: str, data: bytes) -> bytes:
        """What the trace of a refused write, `name` (`NAME.refused`), holds: the reason,
        then the refused bytes with any secret redacted (memory.document.trace_bytes).
        The redactions were logged with the refusal already."""
        if self.redactor is not None:
            data = self.redactor.redact_bytes(data)[0]
        return trace_bytes(refusal.reason, name, data)

    def recent_refusals(
        self, visible: Callable[[Refusal], bool] | None = None
    ) -> tuple[list[Refusal], int]:
        """The kept refusals a reader may see, newest first, and how many were hidden from
        them (`visible` keeps one; None: all). `.status` and `.status.json` both show
        this list."""
        shown: list[Refusal] = []
        hidden = 0
        for r in reversed(self.refusals):
            if visible is None or visible(r):
                shown.append(r)
            else:
                hidden += 1
        return shown, hidden

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
            self.transactions.note_owner((kind, owner_id))

    def set_access(self, kind: str, key: str, access: Access | None) -> None:
        """Store who owns an owner directory (`owner`, 'user/alice'), one of its fixed
        folders (`dir`, 'user/alice/preferences'), a node (`node`, its id) or an attachment
        (`attachment`, its id), or a file parked in a type directory (`parked`, its
        pending-drop id) and its modes; None = the defaults."""
        if kind not in ("owner", "dir", "node", "attachment", "parked"):
            raise InvalidInput(f"no access is kept for {kind!r}")
        self.check_writable()
        with self.transaction():
            self.transactions.note_access((kind, key))
            self.store.set_access(kind, key, access)
            if access is None:
                self.access.pop((kind, key), None)
            else:
                self.access[(kind, key)] = access

    def owner_access(self, owner: str, uid: int, gid: int) -> Access:
        """What an owner directory ('user/alice') shows: its stored access, else `uid` and
        `gid` (the daemon's, or an offline command's) and the default modes."""
        return self.access.get(("owner", owner)) or Access(uid, gid, DIR_MODE, FILE_MODE)

    def dir_access(self, rel: str, uid: int, gid: int) -> Access:
        """What a fixed folder of an owner ('user/alice/preferences') shows: its own
        stored access, else its owner directory's."""
        owner = "/".join(rel.split("/", 2)[:2])
        return self.access.get(("dir", rel)) or self.owner_access(owner, uid, gid)

    def new_node(
        self, owner: tuple[str, str], ctype: ContextType, name: str, node_id: int | None = None
    ) -> Node:
        now = self.clock()
        if node_id is None or not self.store.claim_id(node_id):
            node_id = self.store.new_id()
        n = LazyNode(
            id=node_id,
            owner_kind=owner[0],
            owner_id=owner[1],
            type=ctype.name,
            name=name,
            version=0,
            l0="",
            l1="",
            l2="",
            l0_pinned=False,
            l1_pinned=False,
            content_hash=content_hash(""),
            created=now,
            updated=now,
            persisted=False,
        )
        return self.texts.adopt(n, None)  # dirty until its first commit

    def _check_name(self, ctype: ContextType, name: str) -> None:
        if ctype.singleton:
            if name:
                raise InvalidInput(f"{ctype.name} is a single node per owner")
            return
        problem = ctype.name_problem(name)
        if problem is not None:
            raise InvalidInput(problem)

    def create_node(
        self,
        owner: tuple[str, str],
        ctype: ContextType,
        name: str,
        *,
        persist: bool = True,
        node_id: int | None = None,
        created: float | None = None,
        absent: bool = False,
    ) -> Node:
        """A new, empty node. With persist=False (mkdir) it is stored with its first
        commit instead: one transaction per new node, not two. An import restoring an
        export asks for the node's id (taken only if it was never handed out) and its
        creation time (immutable once stored). absent: the caller knows no live node is
        at that path (a type directory's full listing, held by the tree), so the store is
        not asked (a query of about a millisecond); a node there all the same (another
        mount of a shared store, just now) is refused by its commit (`nodes_live_path`)."""
        self._check_name(ctype, name)
        self.check_writable()
        if not absent and self.live_node(owner, ctype, name) is not None:
            raise Exists(f"{ctype.type_dir}/{name} already exists")
        n = self.new_node(owner, ctype, name, node_id)
        if created is not None:
            n.created = created
        if persist:
            with self.transaction():
                self.transactions.store_node(n)
                self.transactions.add_node(n)
                self.transactions.set_live((owner[0], owner[1], ctype.name, name), n.id)
        else:  # nothing stored: journaled only when a caller's transaction is open
            self.transactions.add_node(n)
            self.transactions.set_live((owner[0], owner[1], ctype.name, name), n.id)
        return n

    def persist_pending(self, owner: tuple[str, str] | None = None) -> int:
        """Store nodes made by mkdir and never written (fsync of a type dir, unmount)."""
        for attempt in (1, 2):
            pending = [n for n in self.nodes.unstored() if owner is None or n.owner == owner]
            try:
                if pending:
                    with self.transaction():
                        for n in pending:
                            self.transactions.store_node(n)
            except VersionConflict:  # another mount made one of them: it gave way, store the rest
                if attempt == 2:
                    raise
                continue
            return len(pending)
        raise AssertionError("unreachable")

    def add_source(self, n: Node, source: str) -> None:
        """Provenance for n, stored with its next write in this transaction."""
        self.transactions.keep(n)
        n.sources.append(source)

    def add_tags(self, n: Node, tags: Sequence[str]) -> bool:
        """Tags for n (kept in order, each once), stored with its next write in this
        transaction. Returns whether any was new."""
        new = [t for t in tags if t not in n.tags]
        if new:
            self.transactions.keep(n)
            n.tags = [*n.tags, *new]
        return bool(new)

    def validate_l2(self, ctype: ContextType, text: str) -> Document:
        doc = parse_document(text)
        if doc.fields:
            ctype.coerce_fields(doc.fields, where="front matter")
        return doc

    def save_l2(
        self,
        n: Node,
        text: str,
        reason: str = "write",
        *,
        at: float | None = None,
        keep_pins: bool = False,
        appended_to: str | None = None,
    ) -> bool:
        """Commit text as n's L2: a new version when it differs. Returns whether it did.
        `at`: when the version was saved (an import restoring an exported one), else now.
        keep_pins: hand-written L0/L1 stay, as after a machine's write (a rename's new key).
        appended_to: text is an append (O_APPEND) to this text; when another mount saved a
        newer version first, the same lines are appended to that one instead."""
        if len(text.encode("utf-8")) > self.max_tier_size:
            raise TooBig(f"L2.md is limited to {self.max_tier_size} bytes")
        ctype = self.type_named(n.type)
        raw, path = text, self.node_path(n) + "/L2.md"
        found: tuple[Redaction, ...] = ()
        if self.redactor is not None:
            res = self.redactor.redact(raw)
            if res.redactions:
                self._log_redactions(path, res.summary())
            text, found = res.text, res.redactions
        self.validate_l2(ctype, text)
        h = content_hash(text)
        if h == n.content_hash and n.version > 0:
            return False
        # a secret whose first part an earlier save stored (no keyword, no shape to tell
        # it by then) and the rest this one added: out of those versions too
        earlier = self._reaching_back(n, raw, found) if found and n.version else []
        l0, l1 = summarize(ctype, text) if text.strip() else ("", "")
        now = max(self.clock(), n.updated) if at is None else at
        started_from = n.content_hash
        try:
            with self.transaction():
                self.transactions.keep(n)
                n.version += 1
                # a machine's L2 keeps what a person wrote in L0/L1 (pinned), which has no
                # version of its own to come back from; a person's L2 derives them again
                machine = reason.startswith(MACHINE_REASONS)
                kept = machine or keep_pins
                n.l0_pinned, n.l1_pinned = kept and n.l0_pinned, kept and n.l1_pinned
                n.l0 = n.l0 if n.l0_pinned else l0
                n.l1 = n.l1 if n.l1_pinned else l1
                n.l2 = text
                n.content_hash, n.updated = h, now
                if not machine:
                    n.person_wrote = True
                self.transactions.store_node(n, reason)
                n.history.append((n.version, now, len(text.encode("utf-8"))))
                self._redact_versions(n, raw, earlier)
        except VersionConflict:
            # another mount saved a newer version first (a shared store): a whole-file
            # save keeps both; inside a caller's transaction, the caller re-applies
            if self.transactions.journal is not None or not n.persisted:
                raise
            if appended_to is not None and text.startswith(appended_to):
                return append_again(self, n, text[len(appended_to) :], reason)
            return keep_both(self, n, text, reason, started_from)
        return True

    def _reaching_back(
        self, n: Node, raw: str, found: tuple[Redaction, ...]
    ) -> list[tuple[int, str, str]]:
        """The redactions of `raw` (n's new L2 as written) that begin in text n already
        stored: (start, kind, the secret as written) of each, `start` inside the part
        `raw` shares with the stored L2, its stored piece not already a marker."""
        stored = n.l2
        lo, hi = 0, min(len(stored), len(raw))  # the shared prefix's length, by halves
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if stored[:mid] == raw[:mid]:
                lo = mid
            else:
                hi = mid - 1
        same = lo
        return [
            (r.start, r.kind, raw[r.start : r.end])
            for r in found
            if r.start < same < r.end and "[REDACTED:" not in stored[r.start : same]
        ]

    def _redact_versions(self, n: Node, raw: str, earlier: list[tuple[int, str, str]]) -> None:
        """Inside the save's transaction: the first part of each secret in `earlier`
        replaced by its marker in every stored version that holds it, newest first, back
        to the first that does not (appends: each version a prefix of the next)."""
        if not earlier:
            return
        where = {v: i for i, (v, _c, _s) in enumerate(n.history)}
        redacted = 0
        for v, _created, _size in sorted(n.history[:-1], reverse=True):
            old = self.store.version_text(n.id, v)
            new = old
            for start, kind, secret in sorted(earlier, reverse=True):
                if new[:start] != raw[:start]:
                    continue
                k = 0
                while k < len(secret) and start + k < len(new) and new[start + k] == secret[k]:
                    k += 1
                if k:
                    new = new[:start] + marker(kind) + new[start + k :]
            if new == old:
                break
            self.store.rewrite_version(n.id, v, new, content_hash(new))
            i = where[v]
            n.history[i] = (v, n.history[i][1], len(new.encode("utf-8")))
            self.rewritten_versions.setdefault(n.id, set()).add(v)
            redacted += 1
        if redacted:
            log.info(
                "redacted a secret's first part from %d earlier version(s) of %s",
                redacted,
                self.node_path(n),
            )

    def insert_version(self, n: Node, position: int, text: str, reason: str = "write") -> None:
        """An earlier version put back into n's history at `position` (1-based, at most
        n.version): the versions from there on move one number up, and the current L2 stays
        what it is and the newest (a copy written back in the order of its files, its
        `.history` after its L2.md: rsync)."""
        if not 1 <= position <= n.version:
            raise InvalidInput(f"no version {position} to put a version before")
        if len(text.encode("utf-8")) > self.max_tier_size:
            raise TooBig(f"a version is limited to {self.max_tier_size} bytes")
        text = self.redact(text, f"{self.node_path(n)}/.history/v{position}.md")
        self.validate_l2(self.type_named(n.type), text)
        moved = [self.history_text(n, v) for v in range(position, n.version)]
        with self.transaction():
            self.transactions.keep(n)
            n.version += 1
            self.transactions.store_node(n, reason)  # the current L2, one number up
            n.history.append((n.version, max(self.clock(), n.updated), n.tier_size("L2")))
            where = {v: i for i, (v, _c, _s) in enumerate(n.history)}
            for v, new in zip(range(position, n.version), [text, *moved], strict=False):
                self.store.rewrite_version(n.id, v, new, content_hash(new))
                i = where[v]
                n.history[i] = (v, n.history[i][1], len(new.encode("utf-8")))
                self.rewritten_versions.setdefault(n.id, set()).add(v)

    def set_version_time(self, n: Node, version: int, at: float) -> None:
        """A copier gave a `.history/vN.md` of a node it is making the time its source
        shows (`tar x`, `cp -a`, `rsync -a` set it after the bytes): version `version` of n
        was saved then. Not the current version: its time is n's last change."""
        i = next((i for i, (v, _c, _s) in enumerate(n.history) if v == version), None)
        if i is None or version == n.version or n.history[i][1] == at:
            return
        self.check_writable()
        with self.transaction():
            self.transactions.keep(n)
            self.store.set_version_time(n.id, version, at)
            n.history[i] = (version, at, n.history[i][2])

    def save_pinned(self, n: Node, tier: str, text: str) -> bool:
        """A hand-written L0 or L1: kept as written until L2 changes."""
        ctype = self.type_named(n.type)
        limit = ctype.l0_max_chars if tier == "L0" else ctype.l1_max_chars
        if len(text) > limit * 4:
            raise TooBig(f"{tier}.md is limited to about {limit} characters (hard cap {limit * 4})")
        text = self.redact(text, f"{self.node_path(n)}/{tier}.md")
        old = n.l0 if tier == "L0" else n.l1
        pinned = n.l0_pinned if tier == "L0" else n.l1_pinned
        if old == text and (pinned or n.version > 0):
            return False  # the text it shows, written back (cp, rsync): nothing to pin
        with self.transaction():
            self.transactions.keep(n)
            if tier == "L0":
                n.l0, n.l0_pinned = text, True
            else:
                n.l1, n.l1_pinned = text, True
            n.updated = max(self.clock(), n.updated)
            self.transactions.store_node(n)
        return True

    def add_sources(self, n: Node, extra: Sequence[str]) -> None:
        """More provenance for a node (a writer's key beside what routing recorded, in
        the same transaction as the write), nothing else of it changed."""
        with self.transaction():
            self.transactions.keep(n)
            n.sources = [*n.sources, *(x for x in extra if x not in n.sources)]
            self.transactions.store_node(n)

    def restore_facts(
        self,
        n: Node,
        *,
        updated: float,
        sources: list[str],
        tags: list[str],
        importance: float,
        access_count: int,
    ) -> None:
        """An import restoring an exported node: its last change, provenance, tags,
        importance and reads as they were (after its text and versions were written)."""
        with self.transaction():
            self.transactions.keep(n)
            n.updated = updated
            n.sources, n.tags = list(sources), list(tags)
            n.importance, n.access_count = importance, access_count
            self.transactions.store_node(n)

    def rename_node(self, n: Node, owner: tuple[str, str], ctype: ContextType, name: str) -> None:
        """mv of a node directory: a new name, owner or type (validated). The key its L2's
        front matter holds follows the new name (`_renamed_text`), a new version."""
        self._check_name(ctype, name)
        if ctype.scope != owner[0]:
            raise InvalidInput(f"{ctype.name} nodes belong under {ctype.scope}/, not {owner[0]}/")
        other = self.live_node(owner, ctype, name)
        if other is not None and other is not n:
            raise Exists(f"{ctype.type_dir}/{name} already exists")
        renamed = self._renamed_text(n, ctype, name)
        if renamed is not None or n.l2.strip():
            doc = self.validate_l2(ctype, n.l2 if renamed is None else renamed)
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
            self.transactions.keep(n)
            n.owner_kind, n.owner_id, n.type, n.name = owner[0], owner[1], ctype.name, name
            n.deleted_at = None
            n.archived_at = None
            n.updated = max(self.clock(), n.updated)
            self.transactions.store_node(n)
            if was_deleted:
                self.attachment_store.restore_attachments(n, deleted_at)
            else:
                self.transactions.set_live(old_key, None)
            self.transactions.set_live((n.owner_kind, n.owner_id, n.type, n.name), n.id)
            if renamed is not None:
                self.save_l2(n, renamed, "rename", keep_pins=True)

    def _keys_from_name(self, ctype: ContextType, name: str) -> dict[str, object]:
        return dict(ctype.parse_node_name(name) or {}) if name else {}

    def _renamed_text(self, n: Node, ctype: ContextType, name: str) -> str | None:
        """n's L2 with the key fields of its front matter made to agree with the name it
        is moved to (`ctype`, `name`), or None when nothing changes: a key the name now
        carries otherwise is replaced by the name's part (`topic: tea` of preferences/tea
        moved to preferences/coffee is `topic: coffee`), spelled as the key it replaces
        wrote its words (`name: Ana Lima` moved to entities/ana-maria is `Ana Maria`:
        `spell_like`); a value that names the node as it is (`name: Ana Lima` of
        entities/ana-lima) stays; a key of the old type the new one does not declare goes
        (re-typed, the name carries it), and the new type's keys are added, spelled as the
        old type's were, when the text held them. Text with no key fields is kept."""
        old = self.types.get(n.type)
        if not n.l2.strip() or old is None:
            return None
        try:
            doc = parse_document(n.l2)
        except InvalidInput:
            return None  # refused by the validation that follows, with its line
        keys = self._keys_from_name(ctype, name)
        fields = dict(doc.fields)
        held_key = any(k in fields for k in old.key_fields)
        # the spelling of a key a re-typed node held, for the new type's key
        spelling = next((v for k in old.key_fields if isinstance(v := fields.get(k), str)), None)
        for k in old.key_fields:
            if k not in ctype.key_fields and ctype.field(k) is None:
                fields.pop(k, None)
        for var, part in keys.items():
            if var in fields:
                try:
                    names_it = ctype.node_name({**keys, var: fields[var]}) == name
                except InvalidInput:
                    names_it = False
                if not names_it:
                    fields[var] = self._respelled(ctype, name, keys, var, fields[var], part)
            elif held_key:
                fields[var] = self._respelled(ctype, name, keys, var, spelling, part)
        if fields == doc.fields:
            return None
        return render_document(ctype, Document(fields, doc.body))

    @staticmethod
    def _respelled(
        ctype: ContextType, name: str, keys: dict[str, object], var: str, held: object, part: object
    ) -> object:
        """The key `var` for the node's new `name`: its slug `part` written the way the
        value it `held` wrote its words (`name: Ana Lima` moved to entities/ana-maria is
        `Ana Maria`), or the slug itself when the held value shows no spelling (a slug,
        not text) or its spelling would not name the node."""
        spec = ctype.field(var)
        if not isinstance(held, str) or (spec is not None and spec.type == "date"):
            return part
        spelled = spell_like(held, str(part))
        try:
            return spelled if ctype.node_name({**keys, var: spelled}) == name else part
        except InvalidInput:
            return part

    def delete_node(self, n: Node) -> None:
        """Soft delete: the node leaves the tree, its rows stay restorable. It takes the
        name it shows in the trash (`box_name`)."""
        key = (n.owner_kind, n.owner_id, n.type, n.name)
        name = self.box_name(n, ".trash") if self.box_name is not None else n.name
        with self.transaction():
            self.transactions.keep(n)
            n.name = name
            n.deleted_at = self.clock()
            n.updated = max(n.deleted_at, n.updated)
            self.transactions.store_node(n)
            for a in self.attachments.values():
                if a.node_id == n.id and a.deleted_at is None:
                    self.transactions.keep_attachment(a)
                    a.deleted_at = n.deleted_at
                    self.store.update_attachment(a)
            self.transactions.set_live(key, None)

    def set_summaries(self, n: Node, l0: str, l1: str, version: int) -> bool:
        """L0/L1 written by the LLM for version `version` of n's L2 (no new version).
        Skipped when L2 moved on meanwhile or a hand-written L0/L1 is pinned."""
        if n.version != version or n.l0_pinned or n.l1_pinned or not self.is_live(n):
            return False
        if (n.l0, n.l1) == (l0, l1):
            return False
        with self.transaction():
            self.transactions.keep(n)
            n.l0 = self.redact(l0, self.node_path(n))
            n.l1 = self.redact(l1, self.node_path(n))
            self.transactions.store_node(n)
        return True

    def archive_node(self, n: Node) -> None:
        """Consolidation: a node below its type's minimum importance leaves the type
        directory for the owner's .archive (visible, restorable with mv, not searched),
        under the name it shows there (`box_name`)."""
        key = (n.owner_kind, n.owner_id, n.type, n.name)
        name = self.box_name(n, ".archive") if self.box_name is not None else n.name
        with self.transaction():
            self.transactions.keep(n)
            n.name = name
            n.archived_at = self.clock()
            self.transactions.store_node(n)
            self.transactions.set_live(key, None)

    def set_importance(self, changes: dict[int, float]) -> None:
        """Importance of nodes by id, and the access counts read since the last flush, in
        one transaction (no new versions). A node not held in memory is not loaded: its
        row is written as it is (consolidation re-weighs a million of them).

        A held node takes its value once the rows are written, not journaled: a journal
        copy reads the node's version list (a query a node: 9 s for 10,000 held nodes, the
        mount stalled meanwhile), and nothing else of the node changes. Inside an outer
        transaction that then rolls back, memory keeps the new value; it is advisory, and
        the next run computes it again."""
        counts = {
            nid: n.access_count
            for nid in self._access_dirty
            if (n := self.nodes.peek(nid)) is not None  # pinned until flushed
        }
        with self.transaction():
            self.store.set_importance(changes, counts)
        for nid, value in changes.items():
            if (n := self.nodes.peek(nid)) is not None:
                n.importance = value
        flushed = [n for nid in self._access_dirty if (n := self.nodes.peek(nid)) is not None]
        self._access_dirty.clear()
        self.nodes.release(flushed)

    def record_access(self, n: Node) -> None:
        """A read through the mount: counted in memory, stored with the next consolidation
        or at unmount (a read must not cost a transaction). Not counted while the mount is
        read-only (`-o ro`, failsafe): the store takes nothing then."""
        if self.failsafe:
            return
        n.access_count += 1
        if n.id not in self._access_dirty:
            self._access_dirty.add(n.id)
            self.nodes.pin(n)  # the count is in memory only until flushed

    def flush_access_counts(self) -> None:
        if self._access_dirty and not self.failsafe:
            self.set_importance({})

    def is_live(self, n: Node) -> bool:
        return n.deleted_at is None and n.archived_at is None

    def history_text(self, n: Node, version: int) -> str:
        if version == n.version:
            return n.l2
        return self.store.version_text(n.id, version)

    def new_id(self) -> int:
        return self.store.new_id()

    # ---- conversations and consolidation (their rows, written through here) ---------------

    def inbox_items(self) -> list[tuple]:
        return self.store.inbox_items()

    def inbox_item(self, item_id: int) -> tuple | None:
        return self.store.inbox_item(item_id)

    def claim(self, what: str, key: int) -> bool:
        """Work one mount of a shared store does at a time (`Store.claim`)."""
        return self.store.claim(what, key)

    def release(self, what: str, key: int) -> None:
        self.store.release(what, key)

    def inbox_data(self, item_id: int) -> bytes:
        return self.store.inbox_data(item_id)

    def inbox_buffer(self, item_id: int, size: int) -> bytes | SpillBuffer:
        """An item's bytes for reads through the mount (from any thread): a big one (past
        SPILL_AT) in a spill file, filled a few chunks at a time, never whole in memory; a
        full disk holds it in memory instead (a read does not fail for it)."""
        if size > SPILL_AT:
            try:
                return SpillBuffer.filled(
                    self.attachment_store.spill_dir,
                    size,
                    ((i * CHUNK_SIZE, d) for i, d in self.store.inbox_chunks(item_id)),
                )
            except NoSpace:
                pass
        return self.store.inbox_data(item_id)

    def add_inbox_item(
        self,
        item_id: int,
        owner: tuple[str, str],
        filename: str,
        data: bytes,
        created: float,
        state: str,
        report: str,
    ) -> None:
        """A file closed in an `.inbox/`: stored as it arrived (already redacted)."""
        with self.transaction():
            self.store.add_inbox_item(item_id, owner, filename, data, created, state, report)
            self.transactions.note_change(
                Change(
                    "inbox", "created", _inbox_path(owner, filename), self.generation, id=item_id
                )
            )

    # a big item is stored this many bytes a transaction (`receive_inbox_item`)
    INBOX_STEP_BYTES = 4 * 1024 * 1024

    def receive_inbox_item(
        self,
        item_id: int,
        owner: tuple[str, str],
        filename: str,
        data: bytes,
        created: float,
        state: str,
        report: str,
    ) -> Iterator[None]:
        """`add_inbox_item` for a big file, in steps: the row first in state `receiving`
        (the intake does not see it), then INBOX_STEP_BYTES of chunks a transaction, then
        its state, which the change feed publishes. Yields between steps, so the caller
        serves other requests meanwhile. A receive that fails or is cut short (a crash)
        is undone (`drop_inbox_item`, and at the next mount: `Intake`): its close never
        returned, so nothing acknowledged is lost."""
        with self.transaction():
            self.store.add_inbox_item(item_id, owner, filename, b"", created, "receiving", "")
            self.store.set_inbox_size(item_id, len(data))
        yield
        try:
            per_step = max(1, self.INBOX_STEP_BYTES // CHUNK_SIZE)
            chunks = -(-len(data) // CHUNK_SIZE)
            view = memoryview(data)
            for start in range(0, chunks, per_step):
                with self.transaction():
                    self.store.add_inbox_chunks(
                        item_id, view, range(start, min(chunks, start + per_step))
                    )
                yield
            self.set_inbox_state(item_id, owner, filename, state, report, created=True)
        except BaseException:
            self.drop_inbox_item(item_id)
            raise

    def drop_inbox_item(self, item_id: int) -> None:
        """An item that never finished arriving, and its chunks."""
        with self.transaction():
            self.store.delete_inbox_item(item_id)

    def set_inbox_state(
        self,
        item_id: int,
        owner: tuple[str, str],
        filename: str,
        state: str,
        report: str,
        progress: str = "",
        *,
        created: bool = False,
    ) -> None:
        """An inbox item's state and report; `progress` is how far processing of an item of
        several conversations got (JSON, '' when it is not under way). `created`: the
        item has just finished arriving (`receive_inbox_item`)."""
        with self.transaction():
            self.store.set_inbox_state(item_id, state, report, progress)
            self.transactions.note_change(
                Change(
                    "inbox",
                    "created" if created else "updated",
                    _inbox_path(owner, filename),
                    self.generation,
                    id=item_id,
                )
            )

    def add_inbox_step(self, item_id: int, conv: int, step: int, data: str) -> None:
        """Inside the transaction of a step of an item's filing: what it did."""
        with self.transaction():
            self.store.add_inbox_step(item_id, conv, step, data)

    def inbox_steps(self, item_id: int, conv: int) -> list[str]:
        return self.store.inbox_steps(item_id, conv)

    def clear_inbox_steps(self, item_id: int) -> None:
        with self.transaction():
            self.store.clear_inbox_steps(item_id)

    def sessions(self) -> list[tuple]:
        return self.store.sessions()

    def put_session(
        self,
        owner: tuple[str, str],
        sid: str,
        created: float,
        transcript: str,
        processed: int,
        summary: str,
        *,
        created_now: bool = False,
    ) -> None:
        with self.transaction():
            self.store.put_session(owner, sid, created, transcript, processed, summary)
            self.transactions.note_change(
                Change(
                    "session",
                    "created" if created_now else "updated",
                    _session_path(owner, sid),
                    self.generation,
                )
            )

    def append_session(self, owner: tuple[str, str], sid: str, idx: int, text: str) -> None:
        """`text` appended to a live session's stored transcript (its append `idx`): what it
        costs is the text's, not the transcript's."""
        with self.transaction():
            self.store.append_session(owner, sid, idx, text)
            self._session_updated(owner, sid)

    def set_session_state(
        self, owner: tuple[str, str], sid: str, processed: int, summary: str
    ) -> None:
        with self.transaction():
            self.store.set_session_state(owner, sid, processed, summary)
            self._session_updated(owner, sid)

    def _session_updated(self, owner: tuple[str, str], sid: str) -> None:
        self.transactions.note_change(
            Change("session", "updated", _session_path(owner, sid), self.generation)
        )

    def delete_session(self, owner: tuple[str, str], sid: str) -> None:
        with self.transaction():
            self.store.delete_session(owner, sid)
            self.transactions.note_change(
                Change("session", "deleted", _session_path(owner, sid), self.generation)
            )

    def record_consolidation(
        self, ts: float, decayed: int, merged: int, archived: int, summary: str
    ) -> None:
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
            f"sources: {_json_list(n.sources)}",
            f"tags: {_json_list(n.tags)}",
        ]
        if n.deleted_at is not None:
            lines.append(f"deleted_at: {_iso(n.deleted_at)}")
        return "\n".join(lines) + "\n"

    def counts(self) -> dict[str, int]:
        """`.status`'s counts, by SQL (the store is the truth; nothing is walked)."""
        live = self.live.count()
        return {
            "owners": len(self.owners),
            "nodes": live,
            "deleted_nodes": self.live.node_counts()[0] + len(self.nodes.unstored()) - live,
            "versions": self.store.version_count(),
            "attachments": sum(1 for a in self.attachments.values() if a.deleted_at is None),
        }


_WORD_RE = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")


def spell_like(held: str, part: str) -> str:
    """A slug (`ana-maria`) written in the spelling of a key it replaces (`Ana Lima`):
    each word the held key has is written as it is there (`Ana`, `São`), any other word
    capitalised, upper-cased or lower-case as most of its words are, the words joined
    by its separator (a blank, else `_` or `-`). A held key that is its own slug shows
    no spelling: the slug is kept."""
    words = _WORD_RE.findall(held)
    if not words or slugify(held) == held:
        return part
    known: dict[str, str] = {}
    for w in words:
        known.setdefault(slugify(w), w)
    sep = next((c for c in (" ", "_", "-") if c in held), " ")
    lettered = [w for w in words if any(c.isalpha() for c in w)]
    upper = sum(1 for w in lettered if w.isupper() and len(w) > 1)
    capital = sum(1 for w in lettered if w[0].isupper())
    tokens = part.split("-")
    out: list[str] = []
    i = 0
    while i < len(tokens):
        # the longest run of the slug's parts that is one word of the held key
        # (`o-brien` is O'Brien)
        for j in range(len(tokens), i, -1):
            w = known.get("-".join(tokens[i:j]))
            if w is not None:
                out.append(w)
                i = j
                break
        else:
            t = tokens[i]
            if lettered and upper * 2 > len(lettered):
                t = t.upper()
            elif lettered and capital * 2 > len(lettered):
                t = t.capitalize()
            out.append(t)
            i += 1
    return sep.join(out)


def _inbox_path(owner: tuple[str, str], filename: str) -> str:
    return f"{owner[0]}/{owner[1]}/.inbox/{filename}"


def _session_path(owner: tuple[str, str], sid: str) -> str:
    return f"{owner[0]}/{owner[1]}/.sessions/{sid}"
