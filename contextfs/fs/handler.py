"""The one seam between the tree and what a role shows: the `RoleHandler` protocol.

`fs.tree.Tree` keeps the inode table and dispatches every operation to the handler of the
role it concerns: directory operations (lookup, listing, create, mkdir, unlink, rmdir) to
the handler of the directory's role, file operations (content, open, flush, fsync,
release) to the handler of the file's role. A handler decides all of what its directories
contain. Work that must not block the event loop (a search, a session's context, waiting
for extraction or for the index) happens inside the async methods.

`RoleBase` gives the answers most roles share (children from the table, no new entries,
nothing to commit); handlers override what differs.
"""

from __future__ import annotations

import stat
from typing import TYPE_CHECKING, Protocol

from contextfs.errors import Forbidden, NotFound, NotPermitted
from contextfs.fs.inode import Handle, Inode, Role

if TYPE_CHECKING:
    from contextfs.fs.tree import Tree


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

    def content(self, inode: Inode) -> bytes | bytearray:
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


class RoleBase:
    """Defaults: children from the table, nothing may be added or removed, no commits."""

    roles: frozenset[Role] = frozenset()

    def __init__(self, tree: Tree) -> None:
        self.tree = tree

    def populate(self, d: Inode) -> None:
        d.populated = True

    async def lookup(self, d: Inode, name: str) -> Inode:
        return self.tree.child(d, name)

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
            f"{self.tree.child_path(d, child.name)} cannot be removed "
            "(owners, type directories and the trash are fixed)"
        )

    def content(self, inode: Inode) -> bytes | bytearray:
        return b""

    def size(self, inode: Inode) -> int:
        if stat.S_ISLNK(inode.mode):
            return len(inode.target or b"")
        return len(self.tree.file_bytes(inode))

    async def opened(self, h: Handle) -> None:
        return None

    async def flush(self, h: Handle) -> None:
        return None

    async def fsync(self, h: Handle) -> None:
        return None

    def release(self, h: Handle) -> None:
        return None

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


def missing(tree: Tree, d: Inode, name: str) -> NotFound:
    return NotFound(f"{tree.child_path(d, name)} does not exist")
