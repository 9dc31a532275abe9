"""Attachments: any other file, folder or symlink kept inside a node.

Decides what an attachment folder contains (built from the store's attachment rows on
first use), what a new name in one becomes, and how an attachment's bytes are committed:
only the 64 KiB chunks a buffer's writes touched (`ChangedBytes`), redacted at this
boundary. Moving attachments between nodes is one memory transaction. Attachments of a
node in the trash are read-only.
"""

from __future__ import annotations

import stat
from typing import TYPE_CHECKING

from contextfs.errors import NotEmpty, NotSupported, ReadOnly
from contextfs.fs.handler import RoleBase
from contextfs.fs.inode import (
    RESERVED_IN_NODE,
    ChangedBytes,
    Handle,
    Inode,
    Role,
    is_editor_scratch,
    ns,
)
from contextfs.model import Attachment, Node

if TYPE_CHECKING:
    from contextfs.fs.tree import Tree

_KINDS = {
    "file": stat.S_IFREG,
    "dir": stat.S_IFDIR,
    "symlink": stat.S_IFLNK,
    # named pipes and socket files: only the name, mode and times are kept; the kernel
    # serves what goes through them (an open of a FIFO never reaches the daemon)
    "fifo": stat.S_IFIFO,
    "socket": stat.S_IFSOCK,
}
SPECIAL_KINDS = {stat.S_IFIFO: "fifo", stat.S_IFSOCK: "socket"}


class Attachments(RoleBase):
    roles = frozenset({Role.ATTACH})

    def __init__(self, tree: Tree) -> None:
        super().__init__(tree)
        self.memory = tree.memory
        # attachments whose inodes are not built yet, by (node id, parent folder id)
        self._unbuilt: dict[tuple[int, int | None], list[Attachment]] = {}

    # ---- building ------------------------------------------------------------------------

    def load_index(self) -> None:
        for a in self.memory.attachments.values():
            if a.deleted_at is None:
                self._unbuilt.setdefault((a.node_id, a.parent_id), []).append(a)

    def rescan(self, n: Node) -> None:
        """Read n's attachments from the store again (a node in, or back from, the trash)."""
        for key in [k for k in self._unbuilt if k[0] == n.id]:
            del self._unbuilt[key]
        for a in self.memory.node_attachments(n):
            self._unbuilt.setdefault((n.id, a.parent_id), []).append(a)

    def add_inodes(self, d: Inode, n: Node, parent_id: int | None) -> None:
        for a in self._unbuilt.pop((n.id, parent_id), []):
            self.inode_for(d, n, a)

    def inode_for(self, d: Inode, n: Node, a: Attachment) -> Inode:
        inode = self.tree.new(
            Role.ATTACH,
            _KINDS[a.kind] | a.mode,
            a.name,
            d,
            node=n,
            att=a,
            target=a.target,
            mtime_ns=ns(a.mtime),
            trashed=d.trashed,
        )
        if a.kind == "dir":
            inode.populated = False
        return inode

    def unloaded_dirs(self, d: Inode, n: Node) -> int:
        parent_id = d.att.id if d.role == Role.ATTACH and d.att else None
        return sum(1 for a in self._unbuilt.get((n.id, parent_id), ()) if a.kind == "dir")

    def populate(self, d: Inode) -> None:
        d.populated = True
        assert d.node is not None and d.att is not None
        self.add_inodes(d, d.node, d.att.id)

    # ---- reading -------------------------------------------------------------------------

    def content(self, inode: Inode) -> bytes | bytearray:
        assert inode.att is not None
        if inode.att.kind != "file":
            return b""
        inode.data = self.memory.attachment_data(inode.att)
        inode.changed = ChangedBytes(inode.data)
        return inode.data

    def size(self, inode: Inode) -> int:
        if stat.S_ISLNK(inode.mode):
            return len(inode.target or b"")
        return inode.att.size if inode.att is not None else 0

    # ---- new entries (in a node or an attachment folder) ---------------------------------

    def _writable_dir(self, d: Inode) -> None:
        if d.trashed:
            raise ReadOnly("a deleted node is read-only; restore it with mv first")

    def new_file_role(self, d: Inode, name: str) -> Role:
        self._writable_dir(d)
        return Role.SCRATCH if is_editor_scratch(name) else Role.ATTACH

    def create(self, d: Inode, name: str, mode: int, flags: int, uid: int, gid: int) -> Handle:
        if self.new_file_role(d, name) == Role.SCRATCH:
            t = self.tree
            inode = t.new(
                Role.SCRATCH,
                stat.S_IFREG | stat.S_IMODE(mode),
                name,
                d,
                node=d.node,
                owner=d.owner,
                ctype=d.ctype,
                data=bytearray(),
                uid=uid,
                gid=gid,
            )
            t.touch_dir(d)
            return t.new_handle(inode, flags)
        return self.create_file(d, name, mode, flags, uid, gid)

    def create_file(self, d: Inode, name: str, mode: int, flags: int, uid: int, gid: int) -> Handle:
        perm = stat.S_IMODE(mode)
        assert d.node is not None
        a = self.memory.add_attachment(d.node, d.att.id if d.att else None, name, "file", perm)
        inode = self.tree.new(
            Role.ATTACH,
            stat.S_IFREG | perm,
            name,
            d,
            node=d.node,
            att=a,
            data=bytearray(),
            uid=uid,
            gid=gid,
        )
        inode.changed = ChangedBytes(inode.data)  # type: ignore[arg-type]
        self.tree.touch_dir(d)
        return self.tree.new_handle(inode, flags)

    def mkdir(self, d: Inode, name: str, mode: int, uid: int, gid: int) -> Inode:
        self._writable_dir(d)
        assert d.node is not None
        perm = stat.S_IMODE(mode)
        if d.mode & stat.S_ISGID:  # POSIX: a setgid directory passes on its bit and group
            perm |= stat.S_ISGID
            gid = d.gid
        a = self.memory.add_attachment(d.node, d.att.id if d.att else None, name, "dir", perm)
        inode = self.inode_for(d, d.node, a)
        inode.populated = True
        inode.uid, inode.gid = uid, gid
        self.tree.touch_dir(d)
        return inode

    def special(self, d: Inode, name: str, mode: int, uid: int, gid: int) -> Inode:
        """mkfifo / a socket's bind() inside a node: kept like any attachment (name, mode,
        times), never any bytes."""
        kind = SPECIAL_KINDS.get(stat.S_IFMT(mode))
        if kind is None:
            raise NotSupported("device nodes are not supported (EPERM)")
        if d.role not in (Role.NODE, Role.ATTACH) or d.node is None or d.trashed:
            raise NotSupported("FIFOs and sockets can only be made inside a node (EPERM)")
        if d.role == Role.NODE and name in RESERVED_IN_NODE:
            raise ReadOnly(f"{name} is reserved in a node")
        perm = stat.S_IMODE(mode)
        a = self.memory.add_attachment(d.node, d.att.id if d.att else None, name, kind, perm)
        inode = self.inode_for(d, d.node, a)
        inode.uid, inode.gid = uid, gid
        self.tree.touch_dir(d)
        return inode

    def symlink(self, d: Inode, name: str, target: bytes, uid: int, gid: int) -> Inode:
        if d.role not in (Role.NODE, Role.ATTACH) or d.node is None or d.trashed:
            raise NotSupported("symbolic links can only be made inside a node")
        if d.role == Role.NODE and name in RESERVED_IN_NODE:
            raise ReadOnly(f"{name} is reserved in a node")
        a = self.memory.add_attachment(
            d.node, d.att.id if d.att else None, name, "symlink", 0o777, target=target
        )
        inode = self.inode_for(d, d.node, a)
        inode.uid, inode.gid = uid, gid
        self.tree.touch_dir(d)
        return inode

    # ---- removing ------------------------------------------------------------------------

    def unlink(self, d: Inode, child: Inode) -> None:
        self._writable_dir(child)
        assert child.att is not None
        self.memory.remove_attachment(child.att)
        self.tree.unlink_inode(child)
        self.tree.touch_dir(d)

    async def rmdir(self, d: Inode, child: Inode) -> None:
        self.tree.ensure(child)
        if child.children:
            raise NotEmpty(f"{self.tree.child_path(d, child.name)} is not empty")
        self.unlink(d, child)

    # ---- commit points -------------------------------------------------------------------

    async def flush(self, h: Handle) -> None:
        if h.inode.dirty:
            self.tree.tiers.commit(h.inode)

    async def fsync(self, h: Handle) -> None:
        if h.inode.dirty:
            self.tree.tiers.commit(h.inode)

    def release(self, h: Handle) -> None:
        if h.inode.dirty and h.inode.parent is not None:
            self.tree.tiers.commit(h.inode)

    def commit(self, inode: Inode) -> None:
        """Store the chunks an attachment's writes touched (all of them when that is not
        known); a refused commit keeps the marks, so the next one still stores them.

        A file unlinked while open is not stored any more (as at its last release): no
        name can show its bytes again (link() is refused), POSIX drops them at the last
        close, and its soft-deleted row keeps the file as it was when it was removed,
        which is what restoring its node brings back. Scratch files that are opened and
        unlinked at once (stress-ng's iomix does so, with O_SYNC) cost no store writes.
        """
        if inode.parent is None:
            return
        assert inode.att is not None and inode.data is not None
        changed = inode.changed
        runs = changed.runs() if changed is not None and changed.buffer is inode.data else None
        stored = self.memory.commit_attachment(
            inode.att, inode.data, inode.mtime_ns / 1e9, self.tree.path(inode), runs
        )
        if stored is not None:  # a secret was redacted: show what is stored
            inode.data = bytearray(stored)
            self.tree.invalidate(inode)
        inode.changed = ChangedBytes(inode.data)

    # ---- moving --------------------------------------------------------------------------

    def move(self, src: Inode, dst_dir: Inode, new_name: str, dst: Inode | None) -> None:
        """An attachment (file or folder) to another name, folder or node: one transaction."""
        a = src.att
        node = dst_dir.node
        assert a is not None and node is not None
        with self.memory.transaction():
            if dst is not None and dst.role == Role.ATTACH:
                assert dst.att is not None
                self.memory.remove_attachment(dst.att)
            a.node_id = node.id
            a.parent_id = dst_dir.att.id if dst_dir.att else None
            a.name = new_name
            self.memory.update_attachment(a)
            if src.is_dir and node is not src.node:
                self._reparent(src, node)
        if dst is not None:
            self.tree.unlink_inode(dst)
        self.tree.unlink_inode(src)
        src.name = new_name
        src.node = node
        self.tree.link_inode(dst_dir, src)

    def _reparent(self, d: Inode, node: Node) -> None:
        self.tree.ensure(d)
        assert d.children is not None
        for c in d.children.values():
            if c.att is not None:
                c.att.node_id = node.id
                c.node = node
                self.memory.update_attachment(c.att)
            if c.is_dir:
                self._reparent(c, node)
