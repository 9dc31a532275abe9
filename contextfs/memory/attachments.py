"""The attachments of nodes: their records, their bytes in 64 KiB chunks, and the secret
scan of a partial write.

`AttachmentStore` is the part of `Memory` that owns the attachments
(`Memory.attachment_store`): it adds, commits, updates, removes and restores attachment
records (the `attachments` mirror it shares with the memory) through the memory's
transaction (`memory.transactions`), writes only the chunks a commit changed, and scans
only the changed ranges for secrets when that is enough (`_secret_near`). It knows the
nodes only by id and path: it is given the node cache, a callable that names a node and
one that records what a redaction found.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from contextfs.errors import NoSpace, TooBig
from contextfs.memory.spill import SPILL_AT, SpillBuffer
from contextfs.model import Attachment, Node
from contextfs.store import backend
from contextfs.store.schema import CHUNK_SIZE, ByteSource, FileBytes, byte_view

if TYPE_CHECKING:
    from contextfs.memory.heads import NodeCache
    from contextfs.memory.redact import Redaction, Redactor
    from contextfs.memory.transactions import Transactions

# Bytes scanned for secrets on each side of a changed range of an attachment (see
# `AttachmentStore._secret_near`): the longest secret an offset write is sure to be checked for.
# 8 KiB is 30 times the longest bounded built-in pattern and the usual limit of an HTTP
# header (so of any bearer token or JWT that was ever sent in one); each fsync of a small
# write scans about 2 * 8 KiB more than it wrote (~0.4 ms here).
REDACT_MARGIN = 8 * 1024
ATTACHMENT_CHUNK = CHUNK_SIZE  # for fs.inode, which sees the store only through memory

# A changed range longer than this is scanned for secrets in pieces of this size that
# overlap by REDACT_MARGIN (a secret that fits the margin lies wholly inside one of them),
# so a big file's scan holds one piece of its text, not all of it.
SCAN_PIECE = 4 * 1024 * 1024


class AttachmentRowStore(backend.Transactions, backend.AttachmentRows, Protocol):
    """What the attachments use of the store: ids and the attachment rows and bytes."""


class AttachmentStore:
    """Attachment records and bytes, written through the memory's transaction."""

    def __init__(
        self,
        store: AttachmentRowStore,
        transactions: Transactions,
        *,
        nodes: NodeCache,
        attachments: dict[int, Attachment],
        node_path: Callable[[Node], str],
        record_redactions: Callable[[str, tuple[Redaction, ...]], None],
        redactor: Redactor | None,
        max_file_size: int,
        clock: Callable[[], float],
        spill_dir: Path,
    ) -> None:
        self.store = store
        self.spill_dir = spill_dir  # where a big open file's bytes wait (memory.spill)
        self.transactions = transactions
        self.nodes = nodes
        self.attachments = attachments  # id -> record: the memory's mirror, shared
        self.node_path = node_path
        self.record_redactions = record_redactions
        self.redactor = redactor
        self.max_file_size = max_file_size
        self.clock = clock

    def attachment_path(self, a: Attachment) -> str:
        parts = [a.name]
        seen = {a.id}
        parent = self.attachments.get(a.parent_id) if a.parent_id is not None else None
        while parent is not None and parent.id not in seen:  # a cycle would be a bug
            seen.add(parent.id)
            parts.append(parent.name)
            parent = (
                self.attachments.get(parent.parent_id) if parent.parent_id is not None else None
            )
        n = self.nodes.get(a.node_id)
        base = self.node_path(n) if n is not None else f"node-{a.node_id}"
        return "/".join([base, *reversed(parts)])

    # `rm -r` of a node unlinks its attachments one by one, then removes the node: the
    # attachments deleted in an unbroken run up to the node's removal, no two deletions
    # further apart than this, went with it and come back when the node is restored.
    RESTORE_WINDOW = 120.0

    def _went_with(self, n: Node, deleted_at: float) -> list[Attachment]:
        """The attachments of n that its removal at `deleted_at` took along, as they come
        back with it: deleted in the run of deletions that ends at the node's (a long
        `rm -r` of a deep tree is still one run), and of the rows that had one name in
        one folder the last deleted only (`echo one > f; rm f; echo two > f; rm -r n`
        brings back `f` with "two", never two files named `f`), each under a folder that
        comes back too and, for a hard link, with the file it names."""
        gone = sorted(
            (
                a
                for a in self.attachments.values()
                if a.node_id == n.id and a.deleted_at is not None and a.deleted_at <= deleted_at
            ),
            key=lambda a: (-(a.deleted_at or 0.0), -a.id),
        )
        run: list[Attachment] = []
        last = deleted_at
        for a in gone:
            assert a.deleted_at is not None
            if last - a.deleted_at > self.RESTORE_WINDOW:
                break
            run.append(a)
            last = a.deleted_at
        latest: dict[tuple[int | None, str], Attachment] = {}
        for a in run:  # the most recent deletion first
            latest.setdefault((a.parent_id, a.name), a)
        chosen = {a.id: a for a in latest.values()}
        kept: dict[int, Attachment] = {}
        grew = True
        while grew:  # a folder's contents only with the folder, a link only with its file
            grew = False
            for aid, a in chosen.items():
                if aid in kept:
                    continue
                if (a.parent_id is None or a.parent_id in kept) and (
                    a.link_of is None or a.link_of in kept or a.link_of == aid
                ):
                    kept[aid] = a
                    grew = True
        return sorted(kept.values(), key=lambda a: a.id)

    def restore_attachments(self, n: Node, deleted_at: float | None) -> None:
        if deleted_at is None:
            return
        for a in self._went_with(n, deleted_at):
            self.transactions.keep_attachment(a)
            a.deleted_at = None
            self.store.update_attachment(a)

    def node_attachments(self, n: Node) -> list[Attachment]:
        """What a node directory shows: live attachments, or for a deleted node those that
        went with it (`_went_with`: what a restore brings back)."""
        if n.deleted_at is None:
            return [
                a for a in self.attachments.values() if a.node_id == n.id and a.deleted_at is None
            ]
        return self._went_with(n, n.deleted_at)

    def add_attachment(
        self,
        node: Node,
        parent_id: int | None,
        name: str,
        kind: str,
        mode: int,
        *,
        target: bytes | None = None,
        data: bytes | None = None,
        created: bool = False,
    ) -> Attachment:
        """A new attachment, stored now; `created` (an empty file made by create, outside
        any transaction): stored by its first commit instead (`commit_attachment`), or
        first thing in the next transaction, so a file written and closed costs one
        transaction, not two (`Transactions.created_attachments`)."""
        a = Attachment(
            self.store.new_id(), node.id, parent_id, name, kind, mode & 0o7777, self.clock(), target
        )
        if kind == "file" and data is None:
            data = b""
        tx = self.transactions
        deferred = created and kind == "file" and not data and tx.journal is None
        if deferred and not tx.failsafe and not tx.disk_full:
            self.attachments[a.id] = a
            tx.created_attachments[a.id] = a
            return a
        with tx.transaction():
            if not node.persisted:
                self.transactions.store_node(node)
            self.store.insert_attachment(a, data)
            a.size = len(data or b"")
            self.attachments[a.id] = a
            self.transactions.note_new_attachment(a)
        return a

    def unstored(self, a: Attachment) -> bool:
        """Whether `a` was made by `add_attachment(created=True)` and waits for its first
        commit (its close, written or not, is one)."""
        return a.id in self.transactions.created_attachments

    def add_link(self, holder: Attachment, parent_id: int | None, name: str) -> Attachment:
        """A hard link: one more name (a row with link_of) for the file, symlink, FIFO or
        socket `holder` keeps (a symlink's target is copied: it never changes)."""
        a = Attachment(
            self.store.new_id(),
            holder.node_id,
            parent_id,
            name,
            holder.kind,
            holder.mode,
            holder.mtime,
            holder.target,
            link_of=holder.id,
        )
        with self.transactions.transaction():
            self.store.insert_attachment(a, None)
            self.attachments[a.id] = a
            self.transactions.note_new_attachment(a)
        return a

    def swap_names(self, a: Attachment, b: Attachment) -> None:
        """Two rows of one hard-linked file trade their names (node, folder, name): the
        holder takes the name that must stay, so it always keeps a live name."""
        with self.transactions.transaction():
            self.transactions.keep_attachment(a)
            self.transactions.keep_attachment(b)
            a.node_id, b.node_id = b.node_id, a.node_id
            a.parent_id, b.parent_id = b.parent_id, a.parent_id
            a.name, b.name = b.name, a.name
            # one row at a time, and never two live rows of one name (the store's unique
            # index): a first takes a name no file can have (a slash; PostgreSQL's text
            # takes no NUL), then its own
            name, a.name = a.name, f"/{a.id}"
            self.store.update_attachment(a)
            self.store.update_attachment(b)
            a.name = name
            self.store.update_attachment(a)

    def commit_attachment(
        self,
        a: Attachment,
        data: bytes | bytearray | SpillBuffer,
        mtime: float,
        path: str = "",
        changed: list[tuple[int, int]] | None = None,
    ) -> bytes | None:
        """Store `data` as the new content of file attachment a, secrets redacted.

        `changed` lists the byte ranges [lo, hi) of data that may differ from what is
        stored (an empty range marks where the file was cut short); only the chunks they
        touch are written, and only they (widened, see `_secret_near`) are scanned for
        secrets. None means anything may have changed: every chunk is written and the
        whole file is scanned. Returns the stored content when redaction changed it (the
        caller must show that instead), else None. Never copies data as a whole unless a
        secret was found (a secret in a spilled file is redacted in memory: the rare
        case that costs its size).
        """
        size = len(data)
        if size > self.max_file_size:
            raise TooBig(f"attachments are limited to {self.max_file_size} bytes")
        path = path or a.name
        view = byte_view(data)
        if changed is None:
            chunks = set(range(-(-size // CHUNK_SIZE)))
            changed = [(0, size)]
        else:
            chunks = {
                i
                for lo, hi in changed
                for i in range(lo // CHUNK_SIZE, max(lo, hi - 1) // CHUNK_SIZE + 1)
            }
        redacted: bytes | None = None
        if self.redactor is not None and self._secret_near(view, changed):
            out, found = self.redactor.redact_bytes(bytes(view))
            if found:
                self.record_redactions(path, found)
                # a marker is not as long as the secret: every later byte moves
                first = min(r.start for r in found)
                chunks.update(range(first // CHUNK_SIZE, -(-len(out) // CHUNK_SIZE)))
                redacted = out
        stored: FileBytes = data if redacted is None else redacted
        order = sorted(chunks)
        staged = self.store.stage_blobs(stored, order)  # a big file's, ahead
        held = False
        # a file made by create and not stored yet: its row and bytes in one statement each
        first = self.transactions.journal is None and self.transactions.take_created(a)
        try:
            with self.transactions.transaction():
                known = dict(zip(order, staged, strict=True)) if staged else None
                self.transactions.keep_attachment(a)
                a.mtime = mtime  # the row a first commit inserts carries it
                if first:
                    self.transactions.first_store(a)
                    self.store.insert_attachment(a, stored, known)
                else:
                    self.store.write_attachment_chunks(a.id, stored, order, mtime, known)
                a.size = len(stored)
            held = True
        finally:
            self.store.unstage(staged, held=held)
            if first and not held:
                self.transactions.wait_again(a)
        return redacted

    def _secret_near(self, view: memoryview | ByteSource, changed: list[tuple[int, int]]) -> bool:
        """Does the redactor report anything in the changed ranges, each widened by
        REDACT_MARGIN bytes on both sides?

        Why this is enough: what is stored is already clean (every commit redacts), so
        a new secret must overlap a changed byte, or have one in the context a detector
        looks at (the byte before or after it; the blanks after a `password:` value). A
        secret of up to REDACT_MARGIN bytes that does so lies wholly inside its window.
        The longest bounded built-in pattern is a keyword secret in prose (a keyword, at
        most three qualifying words, a verb and a value: under 500 bytes). A PEM private
        key may be longer (its body is allowed 64 KiB), but its BEGIN line alone is
        already reported and a new key has a new BEGIN line, so its window reports.
        Open-ended tokens (JWT, `sk-…`, bearer) longer than the margin are found when
        their start lies within the margin of the change. For the built-in detectors a
        window edge can only add a report (a lookbehind or lookahead that sees no byte
        there, a `$`, a token cut short), not hide one that fits, and an added report
        only costs a full scan. The rest of a token appended after its redacted first
        part is glued to the stored marker, which lies within the margin. Windows are cut
        at UTF-8 character boundaries, so a window decodes as UTF-8 whenever the whole
        file does. A window longer than SCAN_PIECE is scanned in pieces that overlap by
        REDACT_MARGIN, by the same argument. User patterns from
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
        for lo, hi in windows:
            while lo < hi:
                end = hi if hi - lo <= SCAN_PIECE else _char_start(view, lo + SCAN_PIECE, 1)
                if self.redactor.holds_secret(view[lo:end]):
                    return True
                if end >= hi:
                    break
                lo = _char_start(view, end - REDACT_MARGIN, -1)
        return False

    def carry_deleted(self, moved: Attachment) -> None:
        """Inside the transaction of a move of `moved` (a file, or a folder with all it
        holds) to another node, its row already changed: the rows deleted under it go along
        (restored with that node, as they would have been with the other), and a deleted
        hard link that would name a file of another node goes for good (a link names a
        file of its own node; its bytes are the file's, which stays). Before, such rows
        stayed behind under a folder of the other node: fsck found the store damaged and
        it mounted read-only."""
        under: dict[int, list[Attachment]] = {}
        for a in self.attachments.values():
            if a.parent_id is not None:
                under.setdefault(a.parent_id, []).append(a)
        inside = {moved.id}
        todo = [moved.id]
        while todo:
            for c in under.get(todo.pop(), ()):
                if c.id not in inside:
                    inside.add(c.id)
                    todo.append(c.id)
        tx = self.transactions
        for aid in inside:
            a = self.attachments[aid]
            if a.node_id != moved.node_id:
                tx.keep_attachment(a)
                a.node_id = moved.node_id
                self.store.update_attachment(a)
        crossing = [
            a
            for a in self.attachments.values()
            if a.link_of is not None
            and a.deleted_at is not None
            and (a.id in inside) != (a.link_of in inside)
        ]
        for a in crossing:
            self.store.purge_attachment(a.id)
            tx.note_purged_attachment(a)
            self.attachments.pop(a.id, None)

    def update_attachment(self, a: Attachment) -> None:
        """Store a's record, which the caller has changed already (a rollback reloads it
        from the store, unless this transaction kept a copy of it first)."""
        with self.transactions.transaction():
            self.transactions.note_changed_attachment(a)
            self.store.update_attachment(a)

    def touch_attachment(self, a: Attachment) -> None:
        """A folder's mtime moved: stored with the next transaction (or at unmount), so a
        create in a folder costs one transaction, not two."""
        self.transactions.dirty_attachments[a.id] = a

    def flush_touched(self) -> None:
        """Store folder mtimes and files made by create not stored yet (fsync of their
        folder, unmount)."""
        tx = self.transactions
        if (tx.dirty_attachments or tx.created_attachments) and not tx.failsafe:
            with tx.transaction():
                pass  # both are written with every commit

    def drop_moved_attachment(self, a: Attachment) -> None:
        """A file whose name and bytes moved on (renamed over a tier by an editor's save,
        into another node, to a scratch name): its row goes for good. Soft-deleted, it
        would be one more file deleted just before an `rm -r` of the node, and come back
        with the node's restore (`_went_with`). A file other names still link to is only
        removed, as by unlink."""
        if any(x.link_of == a.id and x.deleted_at is None for x in self.attachments.values()):
            self.remove_attachment(a)
            return
        with self.transactions.transaction():
            self.store.purge_attachment(a.id)
            self.transactions.note_purged_attachment(a)
            self.attachments.pop(a.id, None)

    def remove_attachment(self, a: Attachment) -> None:
        """Unlink/rmdir: soft until the retention purge, so `rm -r` of a node can be undone."""
        with self.transactions.transaction():
            self.transactions.keep_attachment(a)
            a.deleted_at = self.clock()
            self.store.update_attachment(a)

    def attachment_data(self, a: Attachment) -> bytearray | SpillBuffer:
        """A file's bytes for reading and writing: a big one (past SPILL_AT) in a spill
        file, filled a few MiB at a time, never whole in memory."""
        if a.size > SPILL_AT:
            try:
                return SpillBuffer.filled(
                    self.spill_dir,
                    a.size,
                    ((i * CHUNK_SIZE, data) for i, data in self.store.attachment_chunks(a.id)),
                )
            except NoSpace:
                pass  # a read does not fail for a full disk: the file is held in memory
        return self.store.attachment_data(a.id)

    def spill(self, data: bytearray) -> bytearray | SpillBuffer:
        """An open file grown past SPILL_AT: its bytes move to a spill file (they stay
        where they are when the disk has no room for them)."""
        try:
            return SpillBuffer(self.spill_dir, data)
        except NoSpace:
            return data


def _char_start(data: memoryview | ByteSource, i: int, step: int) -> int:
    """i, moved by `step` (-1: back, 1: on) past UTF-8 continuation bytes (at most
    three), so that a window cut at i splits no character."""
    for _ in range(3):
        if 0 < i < len(data) and 0x80 <= data[i] < 0xC0:
            i += step
    return i
