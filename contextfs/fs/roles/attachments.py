"""Attachments: any other file, folder or symlink kept inside a node.

Decides what an attachment folder contains (built from the store's attachment rows on
first use), what a new name in one becomes, and how an attachment's bytes are committed:
only the 64 KiB chunks a buffer's writes touched (`ChangedBytes`), redacted at this
boundary. Moving attachments between nodes is one memory transaction. Attachments of a
node in the trash are read-only.

Hard links: a file attachment may have several names within its node (one inode, one
`Inode` object in several folders' children). The name in `inode.parent`/`inode.name` is
always the holder row's (`inode.att`, which keeps bytes, mode, mtime and access); every
other name is a `LinkName` with its own link row. Removing or moving a name first swaps
rows so that the holder keeps a name that stays.
"""

from __future__ import annotations

import logging
import stat
import time
from typing import TYPE_CHECKING

from contextfs.errors import (
    ContextFSError,
    CrossDevice,
    NotEmpty,
    NotFound,
    NotSupported,
    ReadOnly,
)
from contextfs.fs.inode import (
    RESERVED_IN_NODE,
    TIER_FILES,
    ChangedBytes,
    FileData,
    Handle,
    Inode,
    LinkName,
    Role,
    is_editor_scratch,
    ns,
)
from contextfs.fs.roles.base import Refusals, RoleBase
from contextfs.fs.table import InodeTable
from contextfs.model import Attachment, Node

if TYPE_CHECKING:
    from contextfs.memory.service import Memory

log = logging.getLogger(__name__)

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

    def __init__(self, table: InodeTable, memory: Memory, refusals: Refusals) -> None:
        super().__init__(table)
        self.memory = memory
        self.refusals = refusals
        # attachments whose inodes are not built yet, by (node id, parent folder id)
        self._unbuilt: dict[tuple[int, int | None], list[Attachment]] = {}
        # hard links not built yet, by the id of the row that holds their file
        self._unbuilt_links: dict[int, list[Attachment]] = {}
        # open files of a node directory built again (`keep_open`), by attachment id
        self._kept_open: dict[int, Inode] = {}
        # nodes whose rows in `_unbuilt` are older than memory's: another mount changed
        # their files while this tree showed nothing of them (`Nodes.attachments_changed`),
        # read again from memory when their directory is built (`take_stale`)
        self.stale: set[int] = set()

    # ---- building ------------------------------------------------------------------------

    def load_index(self) -> None:
        for a in self.memory.attachments.values():
            if a.deleted_at is None:
                self._unbuilt_row(a)

    def _unbuilt_row(self, a: Attachment) -> None:
        self._unbuilt.setdefault((a.node_id, a.parent_id), []).append(a)
        if a.link_of is not None:
            self._unbuilt_links.setdefault(a.link_of, []).append(a)

    def take_stale(self, n: Node) -> bool:
        """Whether n's rows must be read again (`stale`), forgetting that they must."""
        if n.id in self.stale:
            self.stale.discard(n.id)
            return True
        return False

    def rescan(self, n: Node) -> None:
        """Read n's attachments from the store again (a node in, or back from, the trash)."""
        for key in [k for k in self._unbuilt if k[0] == n.id]:
            for a in self._unbuilt.pop(key):
                if a.link_of is not None:
                    self._unbuilt_links.pop(a.link_of, None)
        for a in self.memory.attachment_store.node_attachments(n):
            self._unbuilt_row(a)

    def add_inodes(self, d: Inode, n: Node, parent_id: int | None) -> None:
        rows = self._unbuilt.pop((n.id, parent_id), [])
        for a in rows:
            if a.link_of is None:
                self.inode_for(d, n, a)
        # a file's other names are built with it, so its st_nlink counts them all
        for a in rows:
            for other in self._unbuilt_links.pop(a.id, []) if a.link_of is None else ():
                folder = self._folder(d, other.parent_id)
                if folder is not None:
                    self.table.ensure(folder)
        for a in rows:
            if a.link_of is None:
                continue
            holder = self._holder_inode(d, a.link_of)
            if holder is None:  # fsck reports such a row; nothing to show it as
                log.debug("link %d: holder %d not found", a.id, a.link_of)
            elif self._other_name(holder, d, a.name) is None:
                self._add_name(holder, d, a.name, a)

    def _folder(self, d: Inode, parent_id: int | None) -> Inode | None:
        """The folder of d's node whose attachment id is parent_id (None: the node
        directory), found by its path from the node directory."""
        top = d
        while top.role == Role.ATTACH and top.parent is not None:
            top = top.parent
        names: list[str] = []
        pid = parent_id
        while pid is not None:
            p = self.memory.attachments.get(pid)
            if p is None:
                return None
            names.append(p.name)
            pid = p.parent_id
        cur = top
        try:
            for name in reversed(names):
                cur = self.table.child(cur, name)
        except ContextFSError:
            return None
        return cur

    def _holder_inode(self, d: Inode, holder_id: int) -> Inode | None:
        """The inode of the row that holds a linked file (built if need be)."""
        h = self.memory.attachments.get(holder_id)
        folder = self._folder(d, h.parent_id) if h is not None else None
        if h is None or folder is None:
            return None
        try:
            c = self.table.child(folder, h.name)
        except ContextFSError:
            return None
        return c if c.att is not None and c.att.id == h.id else None

    def _add_name(self, inode: Inode, d: Inode, name: str, row: Attachment) -> None:
        if inode.links is None:
            inode.links = []
        inode.links.append(LinkName(d, name, row))
        assert d.children is not None
        d.children[name] = inode
        self.table.listing_changed(d)

    def keep_open(self, n: Node) -> None:
        """n's directory is about to be built again (another mount changed its files):
        a file open here keeps its inode, shown again in the new directory, so what it
        writes and commits is what that name reads, not a second inode's cached size and
        pages. A file with hard links is shown again under new inodes, as before."""
        self._kept_open = {k: v for k, v in self._kept_open.items() if v.opened}
        for h in self.table.handles.values():
            inode, a = h.inode, h.inode.att
            if inode.role == Role.ATTACH and inode.node is n and a is not None and not inode.links:
                self._kept_open[a.id] = inode

    def inode_for(self, d: Inode, n: Node, a: Attachment) -> Inode:
        kept = self._kept_open.pop(a.id, None)
        if kept is not None and kept.att is a and a.kind == "file" and kept.opened:
            old = kept.parent
            if old is not None and old.children is not None and old.children.get(kept.name) is kept:
                del old.children[kept.name]
            kept.name, kept.node, kept.trashed = a.name, n, d.trashed
            kept.mode = _KINDS[a.kind] | a.mode
            self.table.link_inode(d, kept)
            self.table.invalidate(kept, attr_only=True)
            return kept
        inode = self.table.new(
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

    def content(self, inode: Inode) -> FileData:
        assert inode.att is not None
        if inode.att.kind != "file":
            return b""
        inode.data = self.memory.attachment_store.attachment_data(inode.att)
        inode.changed = ChangedBytes(inode.data)
        return inode.data

    def size(self, inode: Inode) -> int:
        if stat.S_ISLNK(inode.mode):
            return len(inode.target or b"")
        return inode.att.size if inode.att is not None else 0

    # ---- new entries (in a node or an attachment folder) ---------------------------------

    def touch_dir(self, d: Inode) -> None:
        """An entry was added to or removed from d: its mtime and ctime move (POSIX), and
        an attachment folder keeps the new mtime across remounts."""
        self.table.touch_dir(d)
        if d.role == Role.ATTACH and d.att is not None and not d.trashed:
            d.att.mtime = d.mtime_ns / 1e9
            self.memory.attachment_store.touch_attachment(d.att)

    def _writable_dir(self, d: Inode) -> None:
        if d.trashed:
            raise ReadOnly("a deleted node is read-only; restore it with mv first")

    def new_file_role(self, d: Inode, name: str) -> Role:
        self._writable_dir(d)
        return Role.SCRATCH if is_editor_scratch(name) else Role.ATTACH

    def create(self, d: Inode, name: str, mode: int, flags: int, uid: int, gid: int) -> Handle:
        if self.new_file_role(d, name) == Role.SCRATCH:
            t = self.table
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
            self.touch_dir(d)
            return t.new_handle(inode, flags)
        return self.create_file(d, name, mode, flags, uid, gid)

    def create_file(self, d: Inode, name: str, mode: int, flags: int, uid: int, gid: int) -> Handle:
        perm = stat.S_IMODE(mode)
        assert d.node is not None
        a = self.memory.attachment_store.add_attachment(
            d.node, d.att.id if d.att else None, name, "file", perm, created=True
        )
        inode = self.table.new(
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
        inode.dirty = True  # its row is stored by its first commit, at the latest its close
        self.touch_dir(d)
        return self.table.new_handle(inode, flags)

    def mkdir(self, d: Inode, name: str, mode: int, uid: int, gid: int) -> Inode:
        self._writable_dir(d)
        assert d.node is not None
        perm = stat.S_IMODE(mode)
        if d.mode & stat.S_ISGID:  # POSIX: a setgid directory passes on its bit and group
            perm |= stat.S_ISGID
            gid = d.gid
        a = self.memory.attachment_store.add_attachment(
            d.node, d.att.id if d.att else None, name, "dir", perm
        )
        inode = self.inode_for(d, d.node, a)
        inode.populated = True
        inode.uid, inode.gid = uid, gid
        self.touch_dir(d)
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
        a = self.memory.attachment_store.add_attachment(
            d.node, d.att.id if d.att else None, name, kind, perm
        )
        inode = self.inode_for(d, d.node, a)
        inode.uid, inode.gid = uid, gid
        self.touch_dir(d)
        return inode

    def symlink(self, d: Inode, name: str, target: bytes, uid: int, gid: int) -> Inode:
        if d.role not in (Role.NODE, Role.ATTACH) or d.node is None or d.trashed:
            raise NotSupported("symbolic links can only be made inside a node")
        if d.role == Role.NODE and name in RESERVED_IN_NODE:
            raise ReadOnly(f"{name} is reserved in a node")
        a = self.memory.attachment_store.add_attachment(
            d.node, d.att.id if d.att else None, name, "symlink", 0o777, target=target
        )
        inode = self.inode_for(d, d.node, a)
        inode.uid, inode.gid = uid, gid
        self.touch_dir(d)
        return inode

    # ---- hard links ----------------------------------------------------------------------

    def link(self, src: Inode, d: Inode, name: str) -> Inode:
        """`ln src d/name`: one more name of an attachment file, symlink, FIFO or socket
        (the kernel refuses folders), within its node."""
        if src.role != Role.ATTACH or src.att is None:
            raise NotSupported(
                f"{src.name} is not an attachment file: hard links are made only of files "
                "kept inside a node (EPERM); copy it instead"
            )
        if src.parent is None:
            raise NotFound(f"{src.name} was removed")
        if d.role not in (Role.NODE, Role.ATTACH) or d.node is None or d.node is not src.node:
            raise CrossDevice(
                "hard links stay inside the node of the file they name (EXDEV); copy it instead"
            )
        if src.trashed or d.trashed:
            raise ReadOnly("a deleted node is read-only; restore it with mv first")
        if d.role == Role.NODE and name in RESERVED_IN_NODE:
            raise NotSupported(f"{name} is reserved in a node: a hard link cannot take it (EPERM)")
        row = self.memory.attachment_store.add_link(src.att, d.att.id if d.att else None, name)
        self._add_name(src, d, name, row)
        src.ctime_ns = time.time_ns()
        self.touch_dir(d)
        return src

    @staticmethod
    def _other_name(inode: Inode, d: Inode, name: str) -> LinkName | None:
        for ln in inode.links or ():
            if ln.parent is d and ln.name == name:
                return ln
        return None

    def _swap(self, inode: Inode, ln: LinkName) -> None:
        """The holder row takes ln's name and ln's row the holder's: store and inode."""
        assert inode.att is not None and inode.parent is not None
        self.memory.attachment_store.swap_names(inode.att, ln.att)
        inode.parent, ln.parent = ln.parent, inode.parent
        inode.name, ln.name = ln.name, inode.name
        for d in {inode.parent, ln.parent}:  # both names' readdir offsets changed
            self.table.listing_rekeyed(d)

    def make_primary(self, inode: Inode, d: Inode, name: str) -> None:
        """Make (d, name) the holder's name (before it is moved)."""
        ln = self._other_name(inode, d, name)
        if ln is not None:
            self._swap(inode, ln)

    def moves_within_node(self, src: Inode, dst_dir: Inode, new_name: str) -> None:
        """A hard-linked file is renamed only to another attachment name of its node;
        anywhere else mv copies it (EXDEV), as between two filesystems."""
        if (
            dst_dir.role not in (Role.NODE, Role.ATTACH)
            or dst_dir.node is not src.node
            or dst_dir.trashed
            or is_editor_scratch(new_name)
            or (dst_dir.role == Role.NODE and new_name in TIER_FILES)
        ):
            raise CrossDevice(
                f"{src.name} has {1 + len(src.links or ())} hard links: it moves only to "
                "another attachment name of its node (EXDEV); mv copies it"
            )

    def holds_links(self, d: Inode) -> bool:
        """Whether an attachment folder holds a name of a hard-linked file."""
        self.table.ensure(d)
        assert d.children is not None
        return any(c.links or (c.is_dir and self.holds_links(c)) for c in d.children.values())

    # ---- removing ------------------------------------------------------------------------

    def unlink(self, d: Inode, child: Inode, name: str | None = None) -> None:
        self._writable_dir(child)
        assert child.att is not None
        name = child.name if name is None else name
        if child.links:
            ln = self._other_name(child, d, name)
            if ln is None:  # the holder's name goes: it takes another one first
                ln = child.links[0]
                self._swap(child, ln)
            self.memory.attachment_store.remove_attachment(ln.att)
            child.links.remove(ln)
            if not child.links:
                child.links = None
            assert d.children is not None
            if d.children.get(name) is child:
                del d.children[name]
                self.table.listing_changed(d)
            child.ctime_ns = time.time_ns()
            self.touch_dir(d)
            return
        if child.dirty and child.data is not None and self._holds_bytes(child):
            # open and written: its row keeps what was written up to the unlink, which is
            # what the trash shows and a restore brings back (`rm -r` of the node)
            self.commit(child)
        if child.opened:  # its node's trash or restore shows this file, still open
            self._kept_open = {k: v for k, v in self._kept_open.items() if v.opened}
            self._kept_open[child.att.id] = child
        self.memory.attachment_store.remove_attachment(child.att)
        self.table.unlink_inode(child)
        self.touch_dir(d)

    def _holds_bytes(self, inode: Inode) -> bool:
        """Whether a file's buffer is worth a commit at its unlink: not a file made by
        create and removed before a byte was written (stress-ng's iomix: no store write)."""
        assert inode.att is not None and inode.data is not None
        return bool(len(inode.data)) or not self.memory.attachment_store.unstored(inode.att)

    def _keeps_unlinked(self, inode: Inode) -> bool:
        """Whether a file with no name left still stores what it commits: when its row is
        one its node's restore brings back (or brought back), as a file moved with its
        node to the trash keeps what its writer adds. A name removed from a live node
        does not (POSIX drops the bytes at the last close)."""
        a, n = inode.att, inode.node
        if a is None or n is None:
            return False
        if a.deleted_at is None:
            return True  # its node was restored: the row is shown again
        if n.deleted_at is None:
            return False
        return any(x is a for x in self.memory.attachment_store.node_attachments(n))

    async def rmdir(self, d: Inode, child: Inode) -> None:
        self.table.ensure(child)
        if child.children:
            raise NotEmpty(f"{self.table.child_path(d, child.name)} is not empty")
        self.unlink(d, child)

    # ---- commit points -------------------------------------------------------------------

    async def flush(self, h: Handle) -> None:
        if h.inode.dirty:
            self.commit(h.inode)

    async def fsync(self, h: Handle) -> None:
        if h.inode.dirty:
            self.commit(h.inode)

    def release(self, h: Handle) -> None:
        if h.inode.dirty:  # (a file with no name left: `store` decides)
            self.commit(h.inode)

    def commit(self, inode: Inode) -> None:
        """Make an attachment's written bytes durable (`store`); a refused commit is
        recorded in .status and the file shows what is stored (the rollback put its
        record back), as a remount would: refused bytes are not shown as if they were
        kept."""
        if inode.data is None:
            inode.dirty = False
            return
        try:
            if inode.att is not None:
                self.store(inode)
        except ContextFSError as exc:
            self.refusals.refuse_commit(inode, exc, bytes(inode.data))
            inode.dirty = False
            if inode.att is not None:
                inode.data, inode.changed = None, None
                inode.mtime_ns = ns(inode.att.mtime)
                self.table.invalidate(inode)
            raise
        inode.dirty = False

    def store(self, inode: Inode) -> None:
        """Store the chunks an attachment's writes touched (all of them when that is not
        known); a refused commit keeps the marks, so the next one still stores them.

        A file unlinked while open is not stored any more (as at its last release): no
        name can show its bytes again (link() needs a name), POSIX drops them at the last
        close, and its soft-deleted row keeps the file as it was when it was removed
        (`unlink` commits what was written). Scratch files that are opened and unlinked at
        once (stress-ng's iomix does so, with O_SYNC) cost no store writes. Except a file
        removed with its node (`rm -r`): its row is in the trash, and what its writer
        adds goes there, as into a file moved with its folder (`_keeps_unlinked`).
        """
        if inode.parent is None and not self._keeps_unlinked(inode):
            return
        assert inode.att is not None and inode.data is not None
        changed = inode.changed
        runs = changed.runs() if changed is not None and changed.buffer is inode.data else None
        stored = self.memory.attachment_store.commit_attachment(
            inode.att, inode.data, inode.mtime_ns / 1e9, self.table.path(inode), runs
        )
        if stored is not None:  # a secret was redacted: show what is stored
            inode.data = bytearray(stored)
            self.table.invalidate(inode)
        inode.changed = ChangedBytes(inode.data)

    # ---- moving --------------------------------------------------------------------------

    def move(self, src: Inode, dst_dir: Inode, new_name: str, dst: Inode | None) -> None:
        """An attachment (file or folder) to another name, folder or node: one transaction."""
        a = src.att
        node = dst_dir.node
        assert a is not None and node is not None
        if node is not src.node and (src.links or (src.is_dir and self.holds_links(src))):
            raise CrossDevice(
                f"{src.name} holds hard-linked files: it moves only within its node (EXDEV); "
                "mv copies it"
            )
        with self.memory.transaction():
            if dst is not None and dst.role == Role.ATTACH:
                assert dst.att is not None
                self.memory.attachment_store.remove_attachment(dst.att)
            a.node_id = node.id
            a.parent_id = dst_dir.att.id if dst_dir.att else None
            a.name = new_name
            self.memory.attachment_store.update_attachment(a)
            if node is not src.node:
                if src.is_dir:
                    self._reparent(src, node)
                self.memory.attachment_store.carry_deleted(a)
        if dst is not None:
            self.table.unlink_inode(dst)
        self.table.unlink_inode(src)
        src.name = new_name
        src.node = node
        self.table.link_inode(dst_dir, src)

    def _reparent(self, d: Inode, node: Node) -> None:
        self.table.ensure(d)
        assert d.children is not None
        for c in d.children.values():
            if c.att is not None:
                c.att.node_id = node.id
                c.node = node
                self.memory.attachment_store.update_attachment(c.att)
            if c.is_dir:
                self._reparent(c, node)
