"""Inboxes (SPEC §5): `<owner>/.inbox/` and the root's, for the default owner.

A file written into an inbox is handed to `Intake.submit` when it is closed (or renamed
in by an atomic writer) and then shows as the stored item (read-only, redacted) next to
`<name>.report.md`, which says what processing did or why it was refused. Processing runs
in `IntakeService`; `changed()` makes the reports show its progress. Editors' and atomic
writers' temporary names stay scratch files.
"""

from __future__ import annotations

import re
import stat
from typing import TYPE_CHECKING

import trio

from contextfs.conversations.inbox import MEDIA_SUFFIXES, TEXT_SUFFIXES, InboxItem, Intake
from contextfs.errors import (
    ContextFSError,
    Forbidden,
    InvalidInput,
    NoSpace,
    NotAccepted,
    StoreUnavailable,
)
from contextfs.fs.inode import (
    INBOX_DIR,
    Handle,
    InboxEntry,
    Inode,
    Role,
    is_temp_name,
    ns,
)
from contextfs.fs.roles.base import RoleBase
from contextfs.fs.roles.sessions import Sessions
from contextfs.fs.table import InodeTable
from contextfs.memory.document import TRACE_SUFFIX
from contextfs.memory.redact import secret_filename_reason
from contextfs.memory.spill import SpillBuffer

REPORT_SUFFIX = ".report.md"  # beside each item: what processing did, or why it refused

# A file handed in at least this big is redacted in a worker thread at its close (the
# patterns scan a few MB a second); a smaller one on the event loop, as every other write.
BIG_INBOX_FILE = 1024 * 1024

if TYPE_CHECKING:
    from contextfs.memory.service import Memory


class Inbox(RoleBase):
    roles = frozenset({Role.INBOX, Role.INBOX_NEW, Role.INBOX_ITEM, Role.INBOX_REPORT})

    def __init__(
        self, table: InodeTable, memory: Memory, intake: Intake | None, *, sessions: Sessions
    ) -> None:
        super().__init__(table)
        self.memory = memory
        self.intake = intake
        self.sessions = sessions  # `.sessions` is made beside each `.inbox`
        # owner -> its `.inbox` directories: the root's is also the default owner's
        self._views: dict[tuple[str, str], list[Inode]] = {}

    def add_dirs(self, d: Inode, owner: tuple[str, str]) -> None:
        """The intake directories of an owner (or the root): `.inbox` and `.sessions`."""
        if self.intake is None:
            return
        view = self.table.new_dir(Role.INBOX, INBOX_DIR, d, 0o755, owner=owner, populated=False)
        self._views.setdefault(owner, []).append(view)
        self.sessions.add_dir(d, owner)

    def _show_in_views(self, d: Inode, item: InboxItem) -> Inode:
        """An item handed in through d, shown there and in the owner's other `.inbox` (the
        root's is the default owner's) once that one is listed."""
        assert d.owner is not None
        for view in self._views.get(d.owner, []):
            if view is not d and view.populated and view.parent is not None:
                self._show(view, item)
        return self._show(d, item)

    def populate(self, d: Inode) -> None:
        d.populated = True
        assert self.intake is not None
        for item in self.intake.items.values():
            if item.owner == d.owner:
                self._show(d, item)

    def _show(self, d: Inode, item: InboxItem) -> Inode:
        assert d.children is not None
        name = item.filename
        if name in d.children:
            stem, dot, ext = name.rpartition(".")
            name = f"{stem}-{item.id}.{ext}" if dot and stem else f"{name}-{item.id}"
        entry = InboxEntry(item)
        inode = self.table.new(
            Role.INBOX_ITEM,
            stat.S_IFREG | 0o444,
            name,
            d,
            owner=d.owner,
            mtime_ns=ns(item.created),
            payload=entry,
        )
        self.table.new(
            Role.INBOX_REPORT,
            stat.S_IFREG | 0o444,
            name + REPORT_SUFFIX,
            d,
            owner=d.owner,
            mtime_ns=ns(item.created),
            payload=entry,
        )
        return inode

    def refusal(self, name: str) -> ContextFSError | None:
        """What an inbox refuses by the name alone, as the errno the shell shows: a secret
        store EACCES (its bytes are not kept), media no gate takes on this mount and
        unknown formats EOPNOTSUPP. Media the gates take close with 0: what the gate
        decided (kept, dropped, refused as damaged) is in the report."""
        reason = secret_filename_reason(name)
        if reason:
            return Forbidden(f"refused: {reason}")
        m = re.search(r"(\.[A-Za-z0-9]+)$", name)  # the suffix, as the intake reads it
        suffix = m.group(1).lower() if m else ""
        if suffix in MEDIA_SUFFIXES:
            why = self.intake.media_refusal(suffix) if self.intake is not None else "no inbox"
            return NotAccepted(f"refused: {why}") if why else None
        if suffix not in TEXT_SUFFIXES:
            return NotAccepted(f"refused: {suffix} files are not understood")
        return None

    def submit(self, d: Inode, name: str, data: bytes) -> Inode:
        """Hand bytes in: stored now (redacted), processed in the background."""
        assert self.intake is not None and d.owner is not None
        item = self.intake.submit(d.owner, name, data)
        return self._show_in_views(d, item)

    def changed(self) -> None:
        """Processing moved on: every report shows the new state."""
        for inode in list(self.table.inodes.values()):
            if inode.role == Role.INBOX_REPORT:
                self.table.invalidate(inode)

    # ---- new files -----------------------------------------------------------------------

    def new_file_role(self, d: Inode, name: str) -> Role:
        if d.role != Role.INBOX:
            raise self.no_files_here(d)
        if name.endswith(REPORT_SUFFIX) and not is_temp_name(name):
            # the report of `x.jsonl` is `x.jsonl.report.md`: an item of that name would
            # be hidden behind it
            raise InvalidInput(
                f"{name}: names ending in {REPORT_SUFFIX} are the inbox's reports; "
                "hand the file in under another name"
            )
        if secret_filename_reason(name):
            return Role.INBOX_NEW  # refused when closed, with the reason
        if name.endswith(TRACE_SUFFIX):  # a refused write's trace is handed in, not parked
            return Role.INBOX_NEW
        return Role.SCRATCH if is_temp_name(name) else Role.INBOX_NEW

    def create(self, d: Inode, name: str, mode: int, flags: int, uid: int, gid: int) -> Handle:
        role = self.new_file_role(d, name)
        inode = self.table.new(
            role,
            stat.S_IFREG | stat.S_IMODE(mode),
            name,
            d,
            owner=d.owner,
            data=bytearray(),
            uid=uid,
            gid=gid,
        )
        return self.table.new_handle(inode, flags)

    # ---- files ---------------------------------------------------------------------------

    def unlink(self, d: Inode, child: Inode) -> None:
        """`rm` of an item refused with nothing stored (`Intake.remove`) takes its report
        along; any other item, and a report alone, stay (EACCES)."""
        if child.role != Role.INBOX_ITEM or self.intake is None:
            super().unlink(d, child)
            return
        item = child.inbox_item
        self.intake.remove(item)
        assert d.owner is not None
        for view in {id(v): v for v in [d, *self._views.get(d.owner, [])]}.values():
            for inode in list((view.children or {}).values()):  # gone from every view
                if inode.role in (Role.INBOX_ITEM, Role.INBOX_REPORT) and (
                    inode.inbox_item is item
                ):
                    self.table.unlink_inode(inode)

    def content(self, inode: Inode) -> bytes:
        assert self.intake is not None
        if inode.role == Role.INBOX_ITEM:
            return self.intake.item_data(inode.inbox_item)
        if inode.role == Role.INBOX_REPORT:
            item = inode.inbox_item
            return (
                item.report
                or f"# {item.filename}\n\nstate: {item.state} (waiting to be processed)\n"
            ).encode()
        return b""

    def size(self, inode: Inode) -> int:
        if inode.role == Role.INBOX_ITEM:
            return inode.inbox_item.size
        return super().size(inode)

    async def opened(self, h: Handle) -> None:
        """An item opened: its bytes read back once, in a worker thread, for every read
        until its last close (a big one into a spill file, never whole in memory), so
        that no read loads all of it (a 50 MB transcript, 128 KiB a read)."""
        inode = h.inode
        if inode.role != Role.INBOX_ITEM or inode.data is not None or self.intake is None:
            return
        data = await trio.to_thread.run_sync(self.intake.item_buffer, inode.inbox_item)
        if inode.data is None and inode.opened > 0:  # (not closed meanwhile)
            inode.data = data if isinstance(data, SpillBuffer) else bytearray(data)

    async def flush(self, h: Handle) -> None:
        await self._hand_in(h.inode)

    async def fsync(self, h: Handle) -> None:
        if h.inode.dirty:
            h.wrote = False
            await self._hand_in(h.inode)

    async def _hand_in(self, inode: Inode) -> None:
        """close() of a new inbox file: a small one stored at once (`_commit`); a big one
        redacted in a worker thread and stored a few MiB a transaction, other requests
        served between the steps."""
        redacted = await self._redact_big(inode)
        if redacted is None:
            self._commit(inode)
            return
        data, found = redacted
        parent = inode.parent
        assert self.intake is not None and parent is not None and parent.owner is not None
        item = None
        try:
            for step in self.intake.receive(parent.owner, inode.name, data, found):
                if step is None:
                    await trio.sleep(0)
                item = step
        except (StoreUnavailable, NoSpace) as exc:
            self._not_handed_in(inode, exc, data)
            raise
        assert item is not None
        self._replace(inode, item, parent)

    async def _redact_big(self, inode: Inode) -> tuple[bytes, tuple] | None:
        """A big file's redaction (a 100 MB export: seconds) runs in a worker thread, so
        the mount serves other requests meanwhile: its bytes redacted and what was found;
        None for a small one, or when the file changed while it ran (stored as a small
        one: redacted at commit)."""
        redactor = self.memory.redactor
        data = inode.data
        if inode.role != Role.INBOX_NEW or redactor is None or data is None:
            return None
        if len(data) < BIG_INBOX_FILE or secret_filename_reason(inode.name):
            return None
        snapshot = bytes(data)  # the worker reads it while writes may still resize `data`
        out, found = await trio.to_thread.run_sync(redactor.redact_bytes, snapshot)
        if inode.data is None or inode.data != snapshot:  # compared in place, not copied
            return None
        return out, found

    def release(self, h: Handle) -> None:
        h.inode.dirty = False  # only a close after a write hands a file in
        inode = h.inode
        if inode.role == Role.INBOX_ITEM:
            inode.data = None  # its last close: read back again at the next open
            return
        if inode.role == Role.INBOX_NEW and inode.parent is None:
            # handed in (the stored item took its name) and closed: nothing can open it
            # again, and the kernel may keep its inode for long; its bytes are the item's
            inode.data = None
            return
        if (
            inode.role == Role.INBOX_NEW
            and not inode.data
            and self.intake is not None
            and self.intake.media is not None
            and self.intake.media.handles(inode.name)
        ):
            # an empty image or recording (`cp` of a 0-byte file writes nothing): refused
            # in its report, so that it does not sit in the inbox unexplained
            self._commit(inode, empty=True)

    def _commit(self, inode: Inode, *, empty: bool = False) -> None:
        """close() of a new inbox file: the stored (redacted) item takes its place."""
        if inode.role != Role.INBOX_NEW:
            return
        data = bytes(inode.data or b"")
        parent = inode.parent
        if (not data and not empty) or parent is None:
            return
        assert self.intake is not None and parent.owner is not None
        try:
            item = self.intake.submit(parent.owner, inode.name, data)
        except (StoreUnavailable, NoSpace) as exc:
            self._not_handed_in(inode, exc, data)
            raise
        self._replace(inode, item, parent)

    def _not_handed_in(self, inode: Inode, exc: ContextFSError, data: bytes) -> None:
        """The store could not take a file handed in (its server away, a full disk): its
        bytes are kept in `refused/` (the error and `.status` say where) and its name goes,
        so that nothing in the inbox looks handed in that is not; a copy again hands it in."""
        r = self.memory.refuse(self.table.path(inode), exc, data)
        exc.recorded = True  # type: ignore[attr-defined]
        if r.kept_at:
            exc.reason = f"{exc.reason} (your bytes are kept at {r.kept_at})"
        self.table.unlink_inode(inode)

    def _replace(self, inode: Inode, item: InboxItem, parent: Inode) -> None:
        """The stored item (and its report) in the place of the file handed in (in
        `parent`, where it was closed); a refusal is raised for close() to show."""
        path = self.table.child_path(parent, inode.name)
        if inode.parent is not None:  # not removed while it was stored
            self.table.unlink_inode(inode)  # the stored item (redacted) takes its place
        shown = self._show_in_views(parent, item)
        inode.dirty = False
        refused = self.refusal(inode.name) if item.state == "refused" else None
        if refused is not None:
            # close() says so (cp exits 1); the item and its report stay (a secret
            # store without its bytes), and .status points at the report
            refused.reason += f" (see {shown.name}.report.md)"
            self.memory.refuse(path, refused)
            refused.recorded = True  # type: ignore[attr-defined]
            raise refused
