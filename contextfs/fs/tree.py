"""What the memory looks like as a POSIX tree: every filesystem operation, dispatched by role.

Pure Python with no pyfuse3 import (borg's `vfs.py` idea): every method takes and returns
plain values and raises `contextfs.errors` exceptions; `fs.ops` is the only adapter to the
kernel protocol. `Tree` hands every operation to the `RoleHandler` of the role it concerns
(`fs.roles`): the memory tree (`nodes`, `tiers`, `attachments`, `trash`), the virtual
directories (`query`, `inbox`, `sessions`) and the generated files (`static`). What every
inode needs (numbers, names, lookup counts, handles, invalidations) is the inode table
(`fs.table`); renames, which cross roles, are `fs.roles.rename`; what opens, writes,
truncates and setattr do to a file's buffer before its commit is `fs.buffers`.
`fs.build` assembles all of it.

The tree lives in memory and writes through to the memory service at the durability
points (close, fsync, rename, truncate without an open file), so lookup, getattr and
readdir never touch the database. Whoever follows commits (the indexer, the summary
service) subscribes to the memory service's feed; the tree tells no one.
"""

from __future__ import annotations

import contextlib
import os
import stat
from bisect import bisect_right
from collections.abc import Iterator

from contextfs.errors import (
    ContextFSError,
    Exists,
    InvalidInput,
    IsADirectory,
    NameTooLong,
    NotAccepted,
    NotADirectory,
    NotFound,
    NotSupported,
)
from contextfs.fs.buffers import Buffers
from contextfs.fs.inode import (
    GENERATED,
    NAME_MAX,
    RESERVED_IN_NODE,
    VOLATILE,
    Attr,
    FileData,
    Handle,
    Inode,
    Role,
    ns,
)
from contextfs.fs.perms import Caller, Perms
from contextfs.fs.roles.attachments import Attachments
from contextfs.fs.roles.base import RoleHandler, RoleMap, check_name
from contextfs.fs.roles.nodes import Nodes
from contextfs.fs.roles.query import QueryDirs
from contextfs.fs.roles.rename import Renames
from contextfs.fs.roles.static import Static
from contextfs.fs.roles.tiers import Tiers
from contextfs.fs.table import InodeTable
from contextfs.memory.background import FOREGROUND
from contextfs.memory.service import Memory


def _listing_key(c: Inode, d: Inode | None = None, name: str = "") -> int:
    """readdir offset of an entry: its inode number; a node's derived entries (meta.yaml,
    .history) list after everything else, so `rm -r` of a node (readdir order) removes
    its tiers before it reaches them (fs.roles.tiers.Tiers.unlink). A hard link's other
    names (two may share a folder) take their link row's id, above every inode number."""
    if c.links and (c.parent is not d or c.name != name):
        for ln in c.links:
            if ln.parent is d and ln.name == name:
                return (1 << 47) + ln.att.id
    return c.ino + (1 << 48) if c.role in (Role.META, Role.HISTORY) else c.ino


class Tree:
    """Every filesystem operation, dispatched to the handler of the role it concerns."""

    def __init__(
        self,
        table: InodeTable,
        memory: Memory,
        roles: RoleMap,
        *,
        buffers: Buffers,
        perms: Perms,
        renames: Renames,
        static: Static,
        nodes: Nodes,
        tiers: Tiers,
        attachments: Attachments,
        query: QueryDirs,
    ) -> None:
        assert roles.complete(), "every role has a handler"
        self.table = table
        self.memory = memory
        self.roles = roles  # the dispatch table
        self.buffers = buffers  # file bytes and attributes between open and commit
        self.perms = perms  # stored owners, groups, modes
        self.renames = renames
        # the handlers the tree calls by name: what crosses roles (.query in every
        # directory, a caller's .status, hard links and special files, a tier's own buffer)
        self.static = static
        self.nodes = nodes
        self.tiers = tiers
        self.attachments = attachments
        self.query = query

    def handler(self, inode: Inode) -> RoleHandler:
        return self.roles.of(inode)

    def get(self, ino: int) -> Inode:
        return self.table.get(ino)

    def file_bytes(self, inode: Inode) -> FileData:
        """Current content of a regular file (what a read returns)."""
        return self.roles.file_bytes(inode)

    # ---- attributes ----------------------------------------------------------------------

    def attr(self, inode: Inode) -> Attr:
        mtime = inode.mtime_ns
        if inode.role in (Role.TIER, Role.META) and inode.data is None and inode.node:
            mtime = ns(inode.node.updated)
        if inode.role == Role.META:
            inode.listed = True  # the kernel now caches its size: see Tiers.count_access
        # an inode whose last name is gone (unlinked while open, a removed cwd) has
        # st_nlink 0, as POSIX fstat after unlink shows
        named = inode.parent is not None or inode.ino == 1
        if inode.is_dir:
            nlink = 2 + (inode.ndirs if inode.populated else self.nodes.unloaded_ndirs(inode))
            nlink = nlink if named else 0
            size = 4096
        else:
            nlink = 1 + len(inode.links or ()) if named else 0
            size = len(inode.data) if inode.data is not None else self.handler(inode).size(inode)
        mode, uid, gid = self.perms.attrs(inode)
        return Attr(
            inode.ino,
            mode,
            nlink,
            uid,
            gid,
            size,
            inode.atime_ns or mtime,
            mtime,
            max(inode.ctime_ns, mtime),
            inode.role in GENERATED,
            inode.role in VOLATILE,
        )

    def setattr(
        self,
        ino: int,
        *,
        size: int | None = None,
        mode: int | None = None,
        uid: int | None = None,
        gid: int | None = None,
        atime_ns: int | None = None,
        mtime_ns: int | None = None,
        fh: int | None = None,
    ) -> Inode:
        inode = self.get(ino)
        if size is not None and fh is not None and fh in self.table.handles:
            self.table.handles[fh].wrote = True  # ftruncate: committed at this handle's close
        if size is not None:
            self.buffers.truncate(
                inode, size, self.table.handles.get(fh) if fh is not None else None
            )
        if (mode is not None or uid is not None or gid is not None) and self.perms.change(
            inode, mode, uid, gid
        ):
            mode = uid = gid = None  # stored as the owner's, node's or attachment's access
            self._node_access_shown(inode)
        self.buffers.set_attributes(
            inode, mode=mode, uid=uid, gid=gid, atime_ns=atime_ns, mtime_ns=mtime_ns
        )
        if mtime_ns is not None and inode.role == Role.VERSION:
            self.tiers.copied_version_time(inode, mtime_ns)
        return inode

    def _node_access_shown(self, inode: Inode) -> None:
        """A chmod/chown of a node's directory or of one of its files changed the access of
        all of them (one mode for a node): the kernel's attributes of the others go, before
        its next permission check (`default_permissions` checks the cached ones; `cat
        L0.md` after `chmod 600 L2.md` read for a minute). The inode changed answers with
        its new attributes itself."""
        if inode.role not in (Role.NODE, Role.TIER, Role.META, Role.HISTORY, Role.VERSION):
            return
        d = inode if inode.role == Role.NODE else inode.parent
        if d is not None and d.role == Role.HISTORY:
            d = d.parent
        if d is None or d.role != Role.NODE:
            return
        stack = [d]
        while stack:
            c = stack.pop()
            if c is not inode:
                self.table.invalidate(c, attr_only=True)
            if c.role in (Role.NODE, Role.HISTORY):
                stack += [x for x in (c.children or {}).values() if x.role != Role.ATTACH]

    # ---- lookups and listing -------------------------------------------------------------

    async def lookup(
        self, parent_ino: int, name: str, caller: tuple[int, int, int] | None = None
    ) -> Inode:
        """The entry `name` of a directory; a question in `.query` runs its search here."""
        parent = self.get(parent_ino)
        if not parent.is_dir:
            raise NotADirectory("not a directory")
        if len(os.fsencode(name)) > NAME_MAX:
            # every call that resolves a path (open, stat, unlink, rename, link, mknod…)
            # looks the name up first: this is where the kernel learns ENAMETOOLONG
            raise NameTooLong(f"a name is limited to {NAME_MAX} bytes")
        if name == ".":
            return parent
        if name == "..":
            return parent.parent or parent
        if self.query.shows_query_root(parent, name):
            # root and the daemon's own user see everything; anyone else what they may read
            reader = None
            if caller is not None and caller[0] not in (0, self.table.uid):
                reader = Caller.of(*caller)
            return self.query.root_for(parent, reader)
        try:
            return await self.handler(parent).lookup(parent, name)
        except NotFound:
            routed = self.table.routed_file(parent, name)
            if routed is None:
                raise
            return routed

    def ref(self, inode: Inode, n: int = 1) -> None:
        self.table.ref(inode, n)

    def forget(self, ino: int, n: int) -> None:
        self.table.forget(ino, n)

    def listdir(self, ino: int, off: int) -> Iterator[tuple[str, Inode, int]]:
        """Entries after offset `off`; offsets are inode numbers, stable across changes.

        A generator: readdir stops as soon as the kernel's buffer is full."""
        d = self.get(ino)
        if not d.is_dir:
            raise NotADirectory("not a directory")
        if not self.handler(d).listable(d):
            return
        self.table.ensure(d)
        d.listed = True
        children = d.children
        assert children is not None
        if d.sorted_names is None:
            d.sorted_names = sorted(
                (_listing_key(c, d, name), name) for name, c in children.items()
            )
        entries = d.sorted_names
        start = bisect_right(entries, (off, "\U0010ffff")) if off else 0
        for i in range(start, len(entries)):
            key, name = entries[i]
            child = children.get(name)
            if child is not None and _listing_key(child, d, name) == key:
                yield name, child, key

    def readlink(self, ino: int) -> bytes:
        inode = self.get(ino)
        if not stat.S_ISLNK(inode.mode):
            raise InvalidInput("not a symbolic link")
        return inode.target or b""

    # ---- opening, reading, writing -------------------------------------------------------

    async def open(
        self, ino: int, flags: int, caller: tuple[int, int, int] | None = None
    ) -> Handle:
        h = self.buffers.open(self.get(ino), flags)
        if caller is not None and h.writable:  # (a reader's close sends no FLUSH)
            _add_process(h, caller[2])
        if (
            h.inode.role == Role.STATUS
            and caller is not None
            and caller[0] not in (0, self.table.uid)
        ):
            h.snapshot = self.static.status_for(Caller.of(*caller), h.inode)
        try:
            await self.handler(h.inode).opened(h)
        except BaseException:
            self.release(h.fh)
            raise
        return h

    def read(self, fh: int, off: int, size: int) -> bytes:
        h = self.table.handle(fh)
        data: FileData | None = h.snapshot if h.snapshot is not None else h.buffer
        if data is None:
            data = self.file_bytes(h.inode)
        return bytes(data[off : off + size])

    def write(self, fh: int, off: int, buf: bytes, pid: int = 0) -> int:
        h = self.table.handle(fh)
        if pid and pid != h.last_pid:
            h.last_pid = pid
            _add_process(h, pid)
        return self.buffers.write(h, off, buf)

    async def flush(self, fh: int, pid: int = 0) -> None:
        """close(): the commit point for written bytes, and routing for dropped files.

        flush comes for every close() of every descriptor, also for the one a shell
        closes right after dup2 of a freshly truncated file, before anything is written.
        So flush commits only what this handle wrote; a truncation alone is committed at
        release (or fsync), which keeps "one save, one version" for `> file`.

        A process that forks closes its copy of every descriptor in the child, at its
        exit or at exec (Python opens files close-on-exec), each close a FLUSH, while the
        writer may be halfway through the file: a FLUSH from a process (`pid`, 0 when
        not known) that neither opened the handle nor wrote through it commits nothing
        and reports nothing; the writer's own fsync or close does, or the last release.
        """
        h = self.table.handle(fh)
        closer = _process_of(pid) if pid else 0
        if closer and h.processes and closer not in h.processes:
            return
        saved = False
        # (meta.yaml or a version emptied by O_TRUNC and closed: refused here, where
        # close() can say so, not at release; a file made by create and not stored yet is
        # stored by this close, written or not: RELEASE waits for the last descriptor,
        # and a crash before it lost the file)
        if (
            h.wrote
            or (h.dirty and h.inode.role in (Role.META, Role.VERSION))
            or self._unstored(h.inode)
        ):
            h.wrote = False
            saved = h.dirty or h.inode.dirty
            try:
                await self.handler(h.inode).flush(h)
            except ContextFSError as exc:
                if h.inode.refused is exc and closer:  # this process hears of it now
                    h.inode.told = {closer}
                raise
        self.report_refused(h.inode, saved=saved, caller=closer)

    def _unstored(self, inode: Inode) -> bool:
        """A file made by create whose row waits for its first commit."""
        att = inode.att
        return (
            inode.role == Role.ATTACH
            and att is not None
            and self.memory.attachment_store.unstored(att)
        )

    # the requests that store something: background threads step aside while one runs
    # (`Foreground.step_aside`); an fsync is `serving` as a whole
    STORING = frozenset(
        {
            "mkdir",
            "create",
            "flush",
            "release",
            "rename",
            "unlink",
            "rmdir",
            "setattr",
            "symlink",
            "link",
            "mknod",
            "setxattr",
            "removexattr",
        }
    )

    def request(self, op: str) -> contextlib.AbstractContextManager[None]:
        """What a request named `op` (a pyfuse3 handler's name) marks while it runs."""
        return FOREGROUND.request(op in self.STORING)

    async def fsync(self, fh: int) -> None:
        """Commit like close; for a node's text, also wait until it is searchable."""
        h = self.table.handle(fh)
        unsaved = h.dirty or h.inode.dirty
        with FOREGROUND.serving():  # background services step aside meanwhile
            await self.handler(h.inode).fsync(h)
        self.report_refused(h.inode, saved=unsaved)

    @staticmethod
    def report_refused(inode: Inode, *, saved: bool, caller: int = 0) -> None:
        """After an fsync or a close that raised nothing: a commit of this file refused
        since (`Inode.refused`) is reported now, as Linux reports a writeback error to the
        next fsync, unless this call just saved the bytes it holds, or comes from a
        process (`caller`, 0 when not known) that was told already. A child that writes
        through a descriptor it inherited commits at its close: when that commit is
        refused, only the child hears of it (at that close, and not again at its next),
        and the writer's own fsync must not then say its bytes are stored."""
        refused = inode.refused
        if refused is None:
            return
        if not saved and caller and caller in inode.told:
            return
        inode.refused = None
        inode.told = set()
        if not saved:
            raise refused

    def release(self, fh: int) -> None:
        h = self.table.handles.pop(fh, None)
        if h is None:
            return
        inode = h.inode
        if h.buffer is not None:
            with contextlib.suppress(ContextFSError):  # recorded in .status; no reply
                self.tiers.release_own(h)
        inode.opened -= 1
        if inode.opened <= 0:
            inode.opened = 0
            inode.refused = None  # no descriptor left to report it to
            inode.told = set()
            # a refused commit is already recorded in .status; release has no reply
            with contextlib.suppress(ContextFSError):
                self.handler(inode).release(h)
            self.buffers.unload_clean(inode)
        self.table.maybe_free(inode)

    # ---- creating and removing -----------------------------------------------------------

    def _new_entry_in(self, parent_ino: int, name: str) -> Inode:
        d = self.get(parent_ino)
        check_name(self.memory, name)
        self.table.ensure(d)
        assert d.children is not None
        return d

    async def create(
        self, parent_ino: int, name: str, mode: int, flags: int, uid: int, gid: int, pid: int = 0
    ) -> Handle:
        d = self._new_entry_in(parent_ino, name)
        assert d.children is not None
        existing = d.children.get(name)
        if existing is not None:
            if flags & os.O_EXCL and not self.tiers.unwritten(existing):
                raise Exists(f"{self.table.child_path(d, name)} exists")
            return await self.open(existing.ino, flags, (uid, gid, pid) if pid else None)
        self.memory.check_writable()
        dmode, _, dgid = self.perms.attrs(d)
        if dmode & stat.S_ISGID:  # a new file takes a setgid directory's group
            gid = dgid
        handle = self.handler(d).create(d, name, mode, flags, uid, gid)
        _add_process(handle, pid)
        self.perms.created(handle.inode, mode, uid, gid)
        return handle

    def mkdir(self, parent_ino: int, name: str, mode: int, uid: int, gid: int) -> Inode:
        d = self._new_entry_in(parent_ino, name)
        assert d.children is not None
        if name in d.children:
            raise Exists(f"{self.table.child_path(d, name)} exists")
        self.memory.check_writable()
        dmode, _, dgid = self.perms.attrs(d)
        if dmode & stat.S_ISGID:  # a new folder takes a setgid directory's group
            gid = dgid
        inode = self.handler(d).mkdir(d, name, mode, uid, gid)
        self.perms.created(inode, mode, uid, gid)
        return inode

    def symlink(self, parent_ino: int, name: str, target: bytes, uid: int, gid: int) -> Inode:
        d = self._new_entry_in(parent_ino, name)
        assert d.children is not None
        if name in d.children:
            raise Exists(f"{self.table.child_path(d, name)} exists")
        self.memory.check_name(os.fsdecode(target), "a symlink target")
        dmode, _, dgid = self.perms.attrs(d)
        if dmode & stat.S_ISGID:  # a new entry takes a setgid directory's group
            gid = dgid
        if name not in RESERVED_IN_NODE:
            self.nodes.begin_singleton(d)  # a singleton never written: an attachment
        inode = self.attachments.symlink(d, name, target, uid, gid)
        self.perms.created(inode, stat.S_IMODE(inode.mode), uid, gid)
        return inode

    def unlink(self, parent_ino: int, name: str) -> None:
        d = self.get(parent_ino)
        try:
            inode = self.table.child(d, name)
        except NotFound:
            if self.table.forget_routed(d, name):
                return  # a file routed into memory a moment ago: its name goes now
            raise
        if inode.is_dir:
            raise IsADirectory("is a directory")
        if inode.role == Role.ATTACH:  # a hard-linked file: which of its names goes
            self.attachments.unlink(d, inode, name)
        else:
            self.handler(inode).unlink(d, inode)

    async def rmdir(self, parent_ino: int, name: str) -> None:
        d = self.get(parent_ino)
        inode = self.table.child(d, name)
        if not inode.is_dir:
            raise NotADirectory("not a directory")
        await self.handler(inode).rmdir(d, inode)

    def rename(
        self, old_parent: int, old_name: str, new_parent: int, new_name: str, flags: int = 0
    ) -> None:
        self.renames.rename(self.get(old_parent), old_name, self.get(new_parent), new_name, flags)

    def fsyncdir(self, ino: int) -> None:
        """fsync of a directory makes the nodes made in it by mkdir, the files made by
        create and not stored yet, and its entries' times, durable."""
        d = self.get(ino)
        self.memory.persist_pending(d.owner)
        self.memory.attachment_store.flush_touched()

    def link(self, ino: int, new_parent_ino: int, name: str) -> Inode:
        """A hard link: another name for an attachment file, inside its own node."""
        inode = self.get(ino)
        d = self._new_entry_in(new_parent_ino, name)
        assert d.children is not None
        if name in d.children:
            raise Exists(f"{self.table.child_path(d, name)} exists")
        self.memory.check_writable()
        return self.attachments.link(inode, d, name)

    def refuse_xattr(self, ino: int, name: str, what: str, *, shown: bool) -> None:
        """setfattr or `setfattr -x` (`what`: "set" or "removed"): nothing stores extended
        attributes, so each is refused (ENOTSUP) with the reason; with `shown` (the
        `ctx_xattr` option) the user.ctx.* facts are read-only."""
        self.get(ino)  # a stale inode is ENOENT, as for any call
        if shown:
            raise NotAccepted(
                f"extended attribute {name} not {what}: extended attributes are read-only "
                "(user.ctx.* shows the facts of meta.yaml; nothing else is stored)"
            )
        raise NotAccepted(
            f"extended attribute {name} not {what}: extended attributes are not supported "
            "(the mount option ctx_xattr shows a node's facts as user.ctx.*, read-only)"
        )

    async def mknod(self, parent_ino: int, name: str, mode: int, uid: int, gid: int) -> Inode:
        """A regular file made with mknod: created, closed, and returned; a FIFO or a
        socket inside a node: an attachment of that kind; a device node: refused."""
        check_name(self.memory, name)
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
            d = self._new_entry_in(parent_ino, name)
            assert d.children is not None
            if name in d.children:
                raise Exists(f"{self.table.child_path(d, name)} exists")
            self.memory.check_writable()
            dmode, _, dgid = self.perms.attrs(d)
            if dmode & stat.S_ISGID:  # a new entry takes a setgid directory's group
                gid = dgid
            if name not in RESERVED_IN_NODE:
                self.nodes.begin_singleton(d)  # a singleton never written: an attachment
            inode = self.attachments.special(d, name, mode, uid, gid)
            self.perms.created(inode, stat.S_IMODE(mode), uid, gid)  # the creator's, stored
            return inode
        if not stat.S_ISREG(mode):
            raise NotSupported("device nodes are not supported (EPERM)")
        h = await self.create(
            parent_ino, name, mode, os.O_WRONLY | os.O_CREAT | os.O_EXCL, uid, gid
        )
        self.release(h.fh)
        return h.inode


def _process_of(pid: int) -> int:
    """The process (thread group id) of the thread `pid`, which a FUSE request names;
    0 when it is gone or not visible here."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"Tgid:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _add_process(h: Handle, pid: int) -> None:
    """Count the process of thread `pid` among those that opened or wrote through h."""
    if pid:
        h.processes.add(_process_of(pid) or pid)
