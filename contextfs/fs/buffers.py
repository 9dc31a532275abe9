"""Open-file buffers: what write(2), ftruncate(2), O_TRUNC and setattr(2) do to a file's bytes
and attributes before a commit.

The tree hands `Buffers` every open of a file and every change to a regular file's content
or metadata; the role handlers decide what a commit of the buffer means (`flush`, `fsync`,
`release`, `commit`). A buffer is `Inode.data` (a `bytearray` loaded on the first write),
or a tier handle's own copy (`Handle.buffer`), or what a `>>` writer appended to a
session's transcript (`Handle.appended`); for an attachment, `Inode.changed` records
the byte spans each write touched so its commit rewrites only those chunks
(`fs.inode.ChangedBytes`). Nothing here touches the store except through the role
handlers (a truncate with no open file commits at once) and `AttachmentStore.update_attachment`
(an attachment's mode and mtime).
"""

from __future__ import annotations

import os
import stat
import time
from typing import TYPE_CHECKING

from contextfs.errors import (
    BadHandle,
    ContextFSError,
    IsADirectory,
    NoSpace,
    NotPermitted,
    ReadOnly,
    TooBig,
)
from contextfs.fs.inode import (
    GENERATED,
    READ_ONLY_FILES,
    ChangedBytes,
    FileData,
    Handle,
    Inode,
    Role,
)
from contextfs.fs.roles.base import Refusals, RoleMap
from contextfs.fs.table import InodeTable
from contextfs.memory.spill import SPILL_AT, SpillBuffer

if TYPE_CHECKING:
    from contextfs.memory.service import Memory

# how every meta.yaml starts (memory.service.Memory.meta_yaml)
META_START = b"id: "

# Read-only files a copier may write back: the close compares (fs.roles.tiers.write_back).
WRITTEN_BACK = (Role.META, Role.VERSION)

# Roles whose permissions are fixed: chmod on them is refused (EPERM).
_FIXED_MODE = frozenset({Role.ROOT, Role.KIND, Role.SCHEMAS, Role.HISTORY}) | READ_ONLY_FILES

# A clean attachment buffer larger than this is dropped at the last close and reloaded
# from the store on demand; a smaller one stays cached.
_KEEP_ATTACHMENT_BUFFER = 256 * 1024


def own_copy(data: FileData) -> bytearray:
    """A bytearray of a file's bytes (a spill buffer's read whole: never an attachment's
    buffer, which stays where it is; a tier's, meta.yaml's or a version's)."""
    return bytearray(bytes(data) if isinstance(data, SpillBuffer) else data)


class Buffers:
    """The bytes and attributes of regular files between open and commit."""

    def __init__(
        self, memory: Memory, table: InodeTable, roles: RoleMap, refusals: Refusals
    ) -> None:
        self.memory = memory
        self.table = table
        self.roles = roles  # a file's content and its commit are its role's
        self.refusals = refusals

    def writable(self, inode: Inode) -> None:
        """Refuse a write to a derived file, a deleted node's file, or a read-only mount.
        meta.yaml and a `.history` version may be opened for writing: what is written is
        compared at the close (`Tiers.write_back`), so a copier that writes back the bytes
        they show succeeds."""
        if (inode.role in READ_ONLY_FILES and inode.role not in WRITTEN_BACK) or inode.trashed:
            if inode.trashed:
                what = "a deleted node (restore it with mv first)"
            elif inode.role == Role.INBOX_ITEM:  # what was handed in, as it was taken
                what = f"{inode.name} (handed in to the inbox: read-only; copy in a new file)"
            else:
                what = f"{inode.name} (derived, read-only)"
            raise ReadOnly(f"cannot write {what}")
        self.memory.check_writable()

    def load(self, inode: Inode) -> bytearray | SpillBuffer:
        """inode.data, loaded for writing (an attachment's buffer is loaded only once)."""
        data = self.roles.file_bytes(inode)
        if inode.data is None:
            inode.data = own_copy(data)
        return inode.data

    def resize(self, inode: Inode, size: int) -> None:
        """ftruncate of a loaded buffer: cut, or extend with zeros (a hole)."""
        assert inode.data is not None
        data = self._room(inode, size)
        old = len(data)
        if isinstance(data, SpillBuffer):
            data.resize(size)
        elif size < old:
            del data[size:]
        elif size > old:
            data.extend(bytes(size - old))
        self._mark_changed(inode, min(old, size), size)

    @staticmethod
    def _snapshot(data: bytearray | SpillBuffer) -> bytes | SpillBuffer:
        """A copy of a buffer as it is now (in memory when the disk has no room)."""
        if isinstance(data, SpillBuffer):
            try:
                return data.copy()
            except NoSpace:
                pass
        return bytes(data)

    def _room(self, inode: Inode, size: int) -> bytearray | SpillBuffer:
        """inode.data, able to hold `size` bytes: an attachment's buffer that would grow
        past SPILL_AT moves to a spill file first (memory.spill), so a big file is not
        held in the daemon's memory while it is written."""
        data = inode.data
        assert data is not None
        if size > SPILL_AT and isinstance(data, bytearray) and inode.role == Role.ATTACH:
            spilled = self.memory.attachment_store.spill(data)
            if spilled is data:
                return data
            if inode.changed is not None and inode.changed.buffer is data:
                inode.changed.buffer = spilled
            inode.data = data = spilled
        return data

    def _mark_changed(self, inode: Inode, start: int, end: int) -> None:
        """Bytes [start, end) of an attachment's buffer were written (start == end: the
        file ends there now); the next commit stores the chunks they touch."""
        if inode.changed is not None and inode.changed.buffer is inode.data:
            inode.changed.add(start, end)

    def limit(self, inode: Inode) -> int:
        if inode.role in (Role.TIER, Role.DROP):
            return self.memory.max_tier_size
        if inode.role == Role.INBOX_NEW:
            return self.memory.max_inbox_size
        return self.memory.max_file_size

    # ---- setattr ---------------------------------------------------------------------------

    def truncate(self, inode: Inode, size: int, h: Handle | None = None) -> None:
        """truncate(2)/ftruncate(2): resize the buffer; with no open file, commit now.

        ftruncate of a tier's own handle cuts that handle's copy (saved at its close);
        truncate(2) of a tier by path is a save of its own, at once."""
        if inode.is_dir:
            raise IsADirectory("is a directory")
        self.writable(inode)
        if size > self.limit(inode):
            raise TooBig(f"{inode.name} would exceed the {self.limit(inode)}-byte limit")
        if h is not None and h.buffer is not None:
            if size != len(h.buffer):
                del h.buffer[size:]
                h.buffer.extend(bytes(size - len(h.buffer)))
                inode.mtime_ns = time.time_ns()
            h.dirty, h.rebase = True, None
            return
        if inode.role in WRITTEN_BACK:
            if size != len(self.roles.file_bytes(inode)):
                exc = ReadOnly(
                    f"{inode.name} is derived and read-only: truncating it to {size} bytes "
                    "would change it"
                )
                self.refusals.refuse(inode, exc, None)
                raise exc
            return  # the size it has: nothing changes
        if inode.role == Role.TIER and inode.data is None:
            data = own_copy(self.roles.file_bytes(inode))
            if size != len(data):
                del data[size:]
                data.extend(bytes(size - len(data)))
                inode.data, inode.dirty, inode.mtime_ns = data, True, time.time_ns()
                try:
                    self.roles.commit(inode)
                finally:
                    inode.data = None
            return
        if (
            inode.data is None
            and size == 0
            and inode.role == Role.ATTACH
            and inode.att is not None
            and inode.att.size
        ):
            inode.data = bytearray()  # `truncate -s 0`: no need to load it first
            inode.changed = ChangedBytes(inode.data)
            inode.changed.add(0, 0)
            inode.dirty = True
            inode.mtime_ns = time.time_ns()
        elif inode.data is None:
            self.load(inode)
        assert inode.data is not None
        if size != len(inode.data):
            self.resize(inode, size)
            inode.dirty = True
            inode.mtime_ns = time.time_ns()
        elif inode.role == Role.ATTACH:
            # Linux marks the mtime even when the size stays (POSIX asks it on a change)
            inode.dirty = True
            inode.mtime_ns = time.time_ns()
        if inode.opened <= 0 and inode.dirty and inode.role != Role.DROP:  # drops: at close
            self.roles.commit(inode)

    def set_attributes(
        self,
        inode: Inode,
        *,
        mode: int | None,
        uid: int | None,
        gid: int | None,
        atime_ns: int | None,
        mtime_ns: int | None,
    ) -> None:
        """chmod, chown and utimes; an attachment keeps its mode and mtime in the store."""
        before = (inode.mode, inode.uid, inode.gid, inode.atime_ns, inode.mtime_ns, inode.ctime_ns)
        try:
            self._set_attributes(inode, mode, uid, gid, atime_ns, mtime_ns)
        except ContextFSError:
            # refused (a full disk): the rollback put the record back, and the inode shows
            # it as it was, not a change that was not stored
            (inode.mode, inode.uid, inode.gid) = before[:3]
            inode.atime_ns, inode.mtime_ns, inode.ctime_ns = before[3:]
            raise

    def _set_attributes(
        self,
        inode: Inode,
        mode: int | None,
        uid: int | None,
        gid: int | None,
        atime_ns: int | None,
        mtime_ns: int | None,
    ) -> None:
        changed_meta = False
        if mode is not None and inode.role == Role.INBOX_ITEM:
            # what was handed in stays read-only; a copier's chmod after the close
            # (Python's shutil.copy, install -m) must not fail a copy that was taken
            mode = None
        if mode is not None and not stat.S_ISLNK(inode.mode):
            if inode.role in _FIXED_MODE:
                raise NotPermitted(f"{inode.name or '/'} has fixed permissions")
            inode.mode = stat.S_IFMT(inode.mode) | stat.S_IMODE(mode)
            changed_meta = True
        if uid is not None:
            inode.uid = uid
        if gid is not None:
            inode.gid = gid
        if atime_ns is not None:
            inode.atime_ns = atime_ns
        if mtime_ns is not None:
            inode.mtime_ns = mtime_ns
            changed_meta = True
        inode.ctime_ns = time.time_ns()
        if changed_meta and inode.att is not None and inode.role == Role.ATTACH:
            inode.att.mode = stat.S_IMODE(inode.mode)
            inode.att.mtime = inode.mtime_ns / 1e9
            self.memory.attachment_store.update_attachment(inode.att)

    # ---- open, write, release -------------------------------------------------------------

    def open(self, inode: Inode, flags: int) -> Handle:
        """Open without the role's own work at open (a generated file's snapshot is
        taken; what the role adds, the tree awaits)."""
        if inode.is_dir:
            raise IsADirectory("is a directory")
        writing = (flags & os.O_ACCMODE) != os.O_RDONLY
        own = before = None
        if writing or flags & os.O_TRUNC:
            own, before = self.open_for_writing(inode, flags)
        h = self.table.new_handle(inode, flags)
        h.before = before
        if own is not None:  # a tier: this handle's own copy, saved whole at its close
            h.buffer, h.dirty = own, bool(flags & os.O_TRUNC)
            if flags & os.O_APPEND and not flags & os.O_TRUNC:
                h.rebase = len(own)
        if inode.role in GENERATED:
            h.snapshot = bytes(self.roles.file_bytes(inode))
        return h

    def open_for_writing(
        self, inode: Inode, flags: int
    ) -> tuple[bytearray | None, bytes | SpillBuffer | None]:
        """An open for writing or with O_TRUNC: the buffer is loaded (or cut) now.
        Returns (the handle's own buffer, what an attachment held before its O_TRUNC cut).

        A tier gets a buffer of the handle's own: what that handle writes is saved whole
        at its close, and another open's O_TRUNC or writes do not touch it, so every
        version is a state one writer saved (concurrent rewriters: the last close wins,
        like an editor's atomic rename)."""
        self.writable(inode)
        if inode.role in (Role.TIER, *WRITTEN_BACK):
            if flags & os.O_TRUNC:
                inode.mtime_ns = inode.ctime_ns = time.time_ns()
                return bytearray(), None
            return own_copy(self.roles.file_bytes(inode)), None
        if inode.role == Role.SESSION_TRANSCRIPT and flags & os.O_APPEND and not flags & os.O_TRUNC:
            return None, None  # `>>`: the handle's own appends (`_append_own`)
        cut = False  # an attachment with bytes, cut by O_TRUNC
        before = None
        if flags & os.O_TRUNC and inode.role == Role.ATTACH:
            cut = bool(inode.data) if inode.data is not None else bool(inode.att and inode.att.size)
            if cut:  # kept until the handle's close, should a write of it be refused
                before = self._snapshot(self.load(inode))
            if inode.data is None:
                inode.data = bytearray()
                inode.changed = ChangedBytes(inode.data)
            self.resize(inode, 0)
        elif inode.data is None:
            self.load(inode)
        if flags & os.O_TRUNC:  # POSIX: the mtime moves even if it was empty
            if inode.role != Role.ATTACH:
                inode.data = bytearray()
            inode.dirty = True
            inode.mtime_ns = inode.ctime_ns = time.time_ns()
        if cut:
            # stored now, as a native O_TRUNC cuts at open: a refusal (a full disk) is then
            # open's error, not lost at a release, which cannot report one
            self.roles.commit(inode)
        return None, before

    def write(self, h: Handle, off: int, buf: bytes) -> int:
        inode = h.inode
        if not h.writable:
            raise BadHandle("file not open for writing")
        if inode.role == Role.SESSION_TRANSCRIPT and h.flags & os.O_APPEND:
            return self._append_own(h, buf)
        if h.buffer is None and inode.data is None:
            self.load(inode)
        if h.flags & os.O_APPEND:
            off = len(h.buffer if h.buffer is not None else inode.data or b"")
        if h.exact is not None and buf != h.exact[off : off + len(buf)]:
            refused = ReadOnly(
                f"{inode.name} is derived and read-only: only the bytes it shows can be "
                f"written back (a write at byte {off} differs)"
            )
            self.refusals.refuse(inode, refused, bytes(buf))
            assert h.buffer is not None
            h.buffer, h.dirty = bytearray(h.exact), False
            raise refused
        limit = self.limit(inode)
        if h.failed or off + len(buf) > limit:
            exc = TooBig(
                f"{inode.name} would exceed the {limit}-byte limit; the write was "
                "refused and the stored content is unchanged"
            )
            if not h.failed:
                h.failed = True
                if h.buffer is not None:  # only this handle's copy is dropped
                    self.refusals.refuse(inode, exc, None)
                    h.buffer, h.dirty = own_copy(self.roles.file_bytes(inode)), False
                    self.table.invalidate(inode)
                else:
                    self._abandon(inode, exc)
                    if h.before is not None:  # its O_TRUNC's cut is undone too
                        self._put_back(inode, h.before)
                h.before = None
            raise exc  # (no buffer is held by this frame, which its traceback keeps)
        data = h.buffer if h.buffer is not None else self._room(inode, off + len(buf))
        old_size = len(data)
        if off > old_size:
            if isinstance(data, SpillBuffer):
                data.resize(off)  # a hole: nothing written
            else:
                data.extend(bytes(off - old_size))
        data[off : off + len(buf)] = buf
        if (
            inode.role == Role.META
            and h.exact is None
            and not META_START.startswith(bytes(data[: len(META_START)]))
        ):
            # another node's meta.yaml, written into a copy, is taken at the close; what
            # does not start as one is refused now, where the shell can say so
            refused = ReadOnly(
                f"{inode.name} is derived and read-only: only the bytes it shows (or, in a "
                "copy being made, another node's meta.yaml) can be written back"
            )
            self.refusals.refuse(inode, refused, bytes(data))
            h.buffer, h.dirty = own_copy(self.roles.file_bytes(inode)), False
            raise refused
        self._mark_changed(inode, min(off, old_size), off + len(buf))
        if h.buffer is not None:
            h.dirty = True
        else:
            inode.dirty = True
        h.wrote = True
        inode.mtime_ns = time.time_ns()
        return len(buf)

    def _append_own(self, h: Handle, buf: bytes) -> int:
        """`>>` to a session's transcript: the bytes go to the handle's own pending
        appends, recorded (or refused) by its close alone. Two writers' lines never share
        a buffer, so one writer's bad line is not another's refusal."""
        inode = h.inode
        if h.appended is None:
            h.appended = bytearray()
            h.append_base = self.roles.of(inode).size(inode)
        limit = self.limit(inode)
        if h.failed or h.append_base + len(h.appended) + len(buf) > limit:
            h.failed, h.appended = True, None
            exc = TooBig(
                f"{inode.name} would exceed the {limit}-byte limit; the append was "
                "refused and nothing of it recorded"
            )
            self.refusals.refuse(inode, exc, None)
            raise exc
        h.appended += buf
        h.wrote = True
        inode.mtime_ns = time.time_ns()
        return len(buf)

    def _abandon(self, inode: Inode, exc: ContextFSError) -> None:
        """A write was refused midway: drop what this save wrote so far, so the stored
        content stays as it was (nothing half-written is ever committed)."""
        self.refusals.refuse(inode, exc, None)
        inode.dirty = False
        if inode.role in (Role.TIER, Role.ATTACH):
            inode.data, inode.changed = None, None
            self.table.invalidate(inode)
        elif inode.role == Role.DROP:
            inode.data = bytearray()
            if inode.parent is not None:
                self.table.unlink_inode(inode)

    def _put_back(self, inode: Inode, before: bytes | SpillBuffer) -> None:
        """An attachment's bytes as they were before an O_TRUNC, stored again."""
        self.load(inode)
        assert inode.data is not None
        self.resize(inode, 0)
        data = self._room(inode, len(before))
        if isinstance(data, SpillBuffer):
            data.extend(before)
        else:
            data.extend(bytes(before))
        self._mark_changed(inode, 0, len(before))
        inode.dirty = True
        inode.mtime_ns = time.time_ns()
        self.roles.commit(inode)
        self.table.invalidate(inode)

    def unload_clean(self, inode: Inode) -> None:
        """The last close of a file with nothing left to commit: a node's tier is served
        from the node again, and a large attachment is reloaded on demand."""
        if not inode.dirty and (
            inode.role == Role.TIER
            or (inode.role == Role.ATTACH and len(inode.data or b"") > _KEEP_ATTACHMENT_BUFFER)
        ):
            inode.data = None  # a spill file is closed with its last reference
            inode.changed = None
