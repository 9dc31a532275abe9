"""What the role handlers share: the `RoleHandler` protocol, its defaults and the role map.

The tree dispatches every operation to the handler of the role it concerns: directory
operations (lookup, listing, create, mkdir, unlink, rmdir) to the handler of the
directory's role, file operations (content, open, flush, fsync, release, commit) to the
handler of the file's role. A handler decides all of what its directories contain. Work
that must not block the event loop (a search, a session's context, waiting for extraction
or for the index) happens inside the async methods.

`RoleBase` gives the answers most roles share (children from the table, no new entries,
nothing to commit); handlers override what differs. `RoleMap` is which handler serves
each role, for the few who act on an inode of any role (the tree, a rename, the buffers,
the table's first listing of a directory). `Refusals` records a refused commit in
`.status`; `check_name` is what any new name must pass.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import TYPE_CHECKING, Protocol

from contextfs.errors import (
    ContextFSError,
    Forbidden,
    InvalidInput,
    NameTooLong,
    NotFound,
    NotPermitted,
)
from contextfs.fs.inode import NAME_MAX, FileData, Handle, Inode, Role
from contextfs.fs.table import InodeTable

if TYPE_CHECKING:
    from contextfs.memory.service import Memory
    from contextfs.model import Refusal


class RoleHandler(Protocol):
    """What directories and files of `roles` show, and what happens to them."""

    roles: frozenset[Role]

    def populate(self, d: Inode) -> None:
        """Build d's children on first use (cheap start for big stores)."""

    async def lookup(self, d: Inode, name: str) -> Inode:
        """The entry `name` of d (NotFound when there is none)."""

    def listable(self, d: Inode) -> bool:
        """Whether a listing of d shows its children (queries are asked, never listed)."""

    def create(self, d: Inode, name: str, mode: int, flags: int, uid: int, gid: int) -> Handle:
        """A new file `name` in d, opened."""

    def mkdir(self, d: Inode, name: str, mode: int, uid: int, gid: int) -> Inode:
        """A new directory `name` in d."""

    def unlink(self, d: Inode, child: Inode) -> None:
        """Remove the file `child` of d."""

    async def rmdir(self, d: Inode, child: Inode) -> None:
        """Remove the directory `child` of d."""

    def content(self, inode: Inode) -> FileData:
        """What a read of the file returns now (when it has no buffer of its own)."""

    def size(self, inode: Inode) -> int:
        """st_size of a file with no buffer."""

    async def opened(self, h: Handle) -> None:
        """After the tree opened h: take a snapshot of generated content, count a read."""

    async def flush(self, h: Handle) -> None:
        """close(): commit what h wrote."""

    async def fsync(self, h: Handle) -> None:
        """fsync(): commit, and wait for whatever fsync promises for this role."""

    def release(self, h: Handle) -> None:
        """The last close of the file: commit anything still dirty."""

    def commit(self, inode: Inode) -> None:
        """Make the file's written bytes durable now (a truncate of a file that is not
        open, an `O_TRUNC` that cuts an attachment's bytes)."""


class RoleBase:
    """Defaults: children from the table, nothing may be added or removed, no commits."""

    roles: frozenset[Role] = frozenset()

    def __init__(self, table: InodeTable) -> None:
        self.table = table

    def populate(self, d: Inode) -> None:
        d.populated = True

    async def lookup(self, d: Inode, name: str) -> Inode:
        return self.table.child(d, name)

    def listable(self, d: Inode) -> bool:
        return True

    def create(self, d: Inode, name: str, mode: int, flags: int, uid: int, gid: int) -> Handle:
        raise self.no_files_here(d)

    def mkdir(self, d: Inode, name: str, mode: int, uid: int, gid: int) -> Inode:
        raise self.no_files_here(d)

    def unlink(self, d: Inode, child: Inode) -> None:
        raise Forbidden(f"{child.name} cannot be removed")

    async def rmdir(self, d: Inode, child: Inode) -> None:
        raise NotPermitted(
            f"{self.table.child_path(d, child.name)} cannot be removed "
            "(owners, type directories and the trash are fixed)"
        )

    def content(self, inode: Inode) -> FileData:
        return b""

    def size(self, inode: Inode) -> int:
        if stat.S_ISLNK(inode.mode):
            return len(inode.target or b"")
        return len(self.bytes_of(inode))

    def bytes_of(self, inode: Inode) -> FileData:
        """What a read of a file of this handler's roles returns now."""
        return inode.data if inode.data is not None else self.content(inode)

    async def opened(self, h: Handle) -> None:
        return None

    async def flush(self, h: Handle) -> None:
        return None

    async def fsync(self, h: Handle) -> None:
        return None

    def release(self, h: Handle) -> None:
        return None

    def commit(self, inode: Inode) -> None:
        inode.dirty = False

    @staticmethod
    def no_files_here(d: Inode) -> Forbidden:
        where = {
            Role.ROOT: "the root holds only user/, agent/ and the dot entries",
            Role.KIND: "this folder holds owners: mkdir an owner id instead",
            Role.OWNER: "an owner holds one folder per context type",
            Role.TRASH: "the trash is managed by rm -r of nodes",
            Role.TRASH_TYPE: "the trash is managed by rm -r of nodes",
        }.get(d.role, f"{d.name or '/'} is read-only")
        return Forbidden(f"cannot create here: {where}")


def missing(table: InodeTable, d: Inode, name: str) -> NotFound:
    return NotFound(f"{table.child_path(d, name)} does not exist")


class RoleMap:
    """Which handler serves each role. Made empty (the table and the buffers are given
    it before the handlers exist), filled once by the assembly (`fs.build`)."""

    def __init__(self) -> None:
        self._handlers: dict[Role, RoleHandler] = {}

    def add(self, *handlers: RoleHandler) -> None:
        for h in handlers:
            for role in h.roles:
                assert role not in self._handlers, role
                self._handlers[role] = h

    def complete(self) -> bool:
        return set(self._handlers) == set(Role)

    def __getitem__(self, role: Role) -> RoleHandler:
        return self._handlers[role]

    def of(self, inode: Inode) -> RoleHandler:
        return self._handlers[inode.role]

    def populate(self, d: Inode) -> None:
        self._handlers[d.role].populate(d)

    def file_bytes(self, inode: Inode) -> FileData:
        """Current content of a regular file (what a read returns)."""
        if inode.data is not None:
            return inode.data
        return self._handlers[inode.role].content(inode)

    def commit(self, inode: Inode) -> None:
        self._handlers[inode.role].commit(inode)


class Refusals:
    """A refused commit, recorded in `.status` with its bytes (the adapter must not record
    it again). Invalid input answers EINVAL, but EPERM inside a rename (`fs.roles.rename`
    says why): `invalid_errno`."""

    def __init__(self, memory: Memory, table: InodeTable) -> None:
        self.memory = memory
        self.table = table
        self.invalid_errno = errno.EINVAL

    def refuse(self, inode: Inode, exc: ContextFSError, data: bytes | None) -> Refusal:
        path = self.table.path(inode) if inode.parent is not None else inode.name
        if isinstance(exc, InvalidInput) and exc.errno == errno.EINVAL:
            exc.errno = self.invalid_errno
        r = self.memory.refuse(path, exc, data)
        exc.recorded = True  # type: ignore[attr-defined]
        if r.kept_at:
            exc.reason = f"{exc.reason} (your bytes are kept at {r.kept_at})"
        return r

    def refuse_commit(self, inode: Inode, exc: ContextFSError, data: bytes | None) -> Refusal:
        """A refused commit of inode's written bytes: recorded as `refuse` does, and kept
        on the inode for the next fsync or close of it to report (`Tree.report_refused`)."""
        r = self.refuse(inode, exc, data)
        inode.refused = exc
        return r


def check_name(memory: Memory, name: str) -> None:
    """What a new name must be: at most NAME_MAX bytes of UTF-8 with no NUL, and one the
    memory accepts (no secret in it)."""
    raw = os.fsencode(name)
    if len(raw) > NAME_MAX:
        raise NameTooLong(f"a name is limited to {NAME_MAX} bytes")
    if "\x00" in name:
        raise InvalidInput("names cannot contain NUL")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput("names must be UTF-8 (the store keeps text names)") from None
    memory.check_name(name)
