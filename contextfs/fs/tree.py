"""What the memory looks like as a POSIX tree: the inode table and the dispatcher.

Pure Python with no pyfuse3 import (borg's `vfs.py` idea): every method takes and returns
plain values and raises `contextfs.errors` exceptions; `fs.ops` is the only adapter to the
kernel protocol. `Tree` owns what every inode needs (numbers, names, parents, lookup
counts, open handles, the invalidations the kernel must hear about) and hands every
operation to the `RoleHandler` of the role it concerns (`fs.handler`): the memory
tree (`fs.nodes`, `fs.tiers`, `fs.attachments`, `fs.trash`), the virtual directories
(`fs.query`, `fs.inbox`, `fs.sessions`) and the generated files (`fs.static`). Renames,
which cross roles, are `fs.rename`; what writes, truncates and setattr do to a file's
buffer before its commit is `fs.buffers`.

The tree lives in memory and writes through to the memory service at the durability
points (close, fsync, rename, truncate without an open file), so lookup, getattr and
readdir never touch the database. Whoever follows commits (the indexer, the summary
service) subscribes to the memory service's feed; the tree tells no one.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
import time
from bisect import bisect_right
from collections.abc import Callable, Iterator
from typing import Unpack

from contextfs.conversations.inbox import Intake
from contextfs.errors import (
    BadHandle,
    ContextFSError,
    Exists,
    InvalidInput,
    IsADirectory,
    NameTooLong,
    NotADirectory,
    NotFound,
    NotSupported,
)
from contextfs.fs.attachments import Attachments
from contextfs.fs.buffers import Buffers
from contextfs.fs.handler import RoleHandler, missing
from contextfs.fs.inbox import Inbox
from contextfs.fs.inode import (
    GENERATED,
    NAME_MAX,
    VOLATILE,
    Attr,
    Handle,
    Inode,
    InodeFields,
    InodeRest,
    Invalidation,
    Role,
    ns,
)
from contextfs.fs.nodes import Nodes
from contextfs.fs.perms import Caller, Perms
from contextfs.fs.query import QueryDirs, SearchPort
from contextfs.fs.rename import rename
from contextfs.fs.sessions import Sessions, SessionsConfig
from contextfs.fs.static import Static
from contextfs.fs.tiers import Tiers
from contextfs.fs.trash import Trash
from contextfs.memory.background import FOREGROUND
from contextfs.memory.service import Memory, Refusal
from contextfs.memory.texts import LRU
from contextfs.model import Node

log = logging.getLogger(__name__)

FILE_CACHE_ENTRIES = 4096  # tier and version files whose bytes are kept


def _listing_key(c: Inode, d: Inode | None = None, name: str = "") -> int:
    """readdir offset of an entry: its inode number; a node's derived entries (meta.yaml,
    .history) list after everything else, so `rm -r` of a node (readdir order) removes
    its tiers before it reaches them (fs.tiers.Tiers.unlink). A hard link's other names
    (two may share a folder) take their link row's id, above every inode number."""
    if c.links and (c.parent is not d or c.name != name):
        for ln in c.links:
            if ln.parent is d and ln.name == name:
                return (1 << 47) + ln.att.id
    return c.ino + (1 << 48) if c.role in (Role.META, Role.HISTORY) else c.ino


class Tree:
    """The inode table, and every filesystem operation dispatched to a role handler."""

    def __init__(
        self,
        memory: Memory,
        *,
        uid: int | None = None,
        gid: int | None = None,
        status: Callable[..., str] | None = None,
        status_json: Callable[..., str] | None = None,
        schema_files: dict[str, bytes] | None = None,
        search: SearchPort | None = None,
        intake: Intake | None = None,
        sessions_config: SessionsConfig | None = None,
    ) -> None:
        self.memory = memory
        self.uid = os.getuid() if uid is None else uid
        self.gid = os.getgid() if gid is None else gid
        self.inodes: dict[int, Inode] = {}
        self.handles: dict[int, Handle] = {}
        self._next_ino = 1
        self._next_fh = 1
        self.invalidations: list[Invalidation] = []
        # tier and version bytes, by inode: the hot ones only (a million nodes read once
        # would otherwise all stay here)
        self.file_cache: LRU[int, bytes] = LRU(FILE_CACHE_ENTRIES)
        # what a refused commit of invalid input answers: EINVAL, but EPERM inside rename
        # (fs.rename says why)
        self.invalid_errno = errno.EINVAL
        self.buffers = Buffers(self)  # file bytes and attributes between open and commit
        self.perms = Perms(memory, self.uid, self.gid)  # stored owners, groups, modes
        # the role handlers; the tree knows them by role and nothing else about them
        self.static = Static(
            self, status or (lambda visible=None: ""), schema_files or {}, status_json
        )
        self.attachments = Attachments(self)
        self.nodes = Nodes(self)
        self.tiers = Tiers(self, search)
        self.trash = Trash(self)
        self.query = QueryDirs(self, search)
        self.inbox = Inbox(self, intake)
        self.sessions = Sessions(self, intake, search, sessions_config)
        self._handlers: dict[Role, RoleHandler] = {}
        for h in (
            self.static,
            self.attachments,
            self.nodes,
            self.tiers,
            self.trash,
            self.query,
            self.inbox,
            self.sessions,
        ):
            for role in h.roles:
                assert role not in self._handlers, role
                self._handlers[role] = h
        assert set(self._handlers) == set(Role), set(Role) - set(self._handlers)
        self._build()

    def handler(self, inode: Inode) -> RoleHandler:
        return self._handlers[inode.role]

    # ---- the table ------------------------------------------------------------------------

    def new(
        self, role: Role, mode: int, name: str, parent: Inode | None, **kw: Unpack[InodeFields]
    ) -> Inode:
        ino = self._next_ino
        self._next_ino += 1
        now = time.time_ns()
        rest: InodeRest = kw  # what is left once uid, gid and mtime_ns are popped below
        inode = Inode(
            ino=ino,
            role=role,
            mode=mode,
            name=name,
            parent=parent,
            uid=kw.pop("uid", self.uid),
            gid=kw.pop("gid", self.gid),
            mtime_ns=kw.pop("mtime_ns", now),
            atime_ns=now,
            ctime_ns=now,
            **rest,
        )
        if stat.S_ISDIR(mode) and inode.children is None:
            inode.children = {}
        self.inodes[ino] = inode
        if parent is not None:
            self.link_inode(parent, inode)
        return inode

    def new_dir(
        self,
        role: Role,
        name: str,
        parent: Inode | None,
        mode: int = 0o755,
        **kw: Unpack[InodeFields],
    ) -> Inode:
        return self.new(role, stat.S_IFDIR | mode, name, parent, **kw)

    def link_inode(self, parent: Inode, child: Inode) -> None:
        """Give child the name child.name in parent (replacing what had it)."""
        assert parent.children is not None
        old = parent.children.get(child.name)
        if old is not None and old.is_dir:
            parent.ndirs -= 1
        parent.children[child.name] = child
        child.parent = parent
        self.inodes[child.ino] = child
        self.listing_changed(parent)
        if child.is_dir:
            parent.ndirs += 1

    def unlink_inode(self, child: Inode) -> None:
        """Take child's name away; the inode lives on while the kernel or a handle uses it."""
        parent = child.parent
        if parent is not None and parent.children is not None:
            if parent.children.get(child.name) is child:
                del parent.children[child.name]
                self.listing_changed(parent)
                if child.is_dir:
                    parent.ndirs -= 1
            parent.mtime_ns = time.time_ns()
        child.parent = None
        self._maybe_free(child)

    def _maybe_free(self, inode: Inode) -> None:
        if inode.parent is None and inode.lookups <= 0 and inode.opened <= 0 and inode.ino != 1:
            self.inodes.pop(inode.ino, None)

    def _build(self) -> None:
        self.root = self.new_dir(Role.ROOT, "", None)
        self.kinds = {k: self.new_dir(Role.KIND, k, self.root) for k in ("user", "agent")}
        self.static.build(self.root)
        self.query.build(self.root)
        self.inbox.add_dirs(self.root, ("user", self.memory.default_owner))
        self.nodes.build()

    def add_owner(self, owner: tuple[str, str]) -> Inode:
        """An owner's directory with its type directories, trash and intake directories."""
        od = self.nodes.add_owner(owner)
        self.inbox.add_dirs(od, owner)
        return od

    def owner_joined(self, owner: tuple[str, str]) -> None:
        """An owner made outside a request (another mount on a shared store): its
        directory appears in user/ or agent/, and the kernel's listing of that is dropped."""
        kind = self.kinds[owner[0]]
        if kind.children is not None and owner[1] in kind.children:
            return
        self.add_owner(owner)
        self.touch_dir(kind)
        self.listing_changed(kind)
        self.invalidate(kind, attr_only=True)

    # ---- helpers for the handlers --------------------------------------------------------

    def get(self, ino: int) -> Inode:
        try:
            return self.inodes[ino]
        except KeyError:
            raise NotFound(f"inode {ino} is gone") from None

    def path(self, inode: Inode) -> str:
        parts: list[str] = []
        cur: Inode | None = inode
        while cur is not None and cur.parent is not None:
            parts.append(cur.name)
            cur = cur.parent
        return "/".join(reversed(parts)) or "/"

    def child_path(self, parent: Inode, name: str) -> str:
        p = self.path(parent)
        return name if p == "/" else f"{p}/{name}"

    def ensure(self, d: Inode) -> None:
        if not d.populated:
            self.handler(d).populate(d)

    def child(self, d: Inode, name: str) -> Inode:
        self.ensure(d)
        assert d.children is not None
        c = d.children.get(name)
        if c is None:
            raise missing(self, d, name)
        return c

    def listing_changed(self, d: Inode) -> None:
        """d's entries changed: drop the sorted view, and the kernel's cached listing
        if it may hold one (see docs/architecture.md, "Directory listings")."""
        if d.listed:
            # a new mtime resets the kernel's cache even where dropping pages cannot (an
            # empty listing has none), and POSIX moves a directory's mtime on a change
            d.mtime_ns = max(time.time_ns(), d.mtime_ns + 1)
        self.listing_rekeyed(d)

    def listing_rekeyed(self, d: Inode) -> None:
        """The same names in d took other readdir offsets (a hard link's names swapped
        which one holds the file): the sorted view and the kernel's cached pages go; d's
        mtime stays, as nothing was added or removed (the listing is not empty, so dropping
        its pages is enough)."""
        d.sorted_names = None
        if d.listed:
            d.listed = False
            self.invalidations.append(Invalidation(d.ino, listing=True))

    def invalidate(self, inode: Inode | None, *, attr_only: bool = False) -> None:
        if inode is not None:
            self.file_cache.pop(inode.ino, None)
            self.invalidations.append(Invalidation(inode.ino, attr_only=attr_only))

    def touch_dir(self, d: Inode) -> None:
        """An entry was added to or removed from d: its mtime and ctime move (POSIX), and
        an attachment folder keeps the new mtime across remounts."""
        now = time.time_ns()
        d.mtime_ns = d.ctime_ns = now
        if d.role == Role.ATTACH and d.att is not None and not d.trashed:
            d.att.mtime = now / 1e9
            self.memory.touch_attachment(d.att)

    def check_name(self, name: str) -> None:
        raw = os.fsencode(name)
        if len(raw) > NAME_MAX:
            raise NameTooLong(f"a name is limited to {NAME_MAX} bytes")
        if "\x00" in name:
            raise InvalidInput("names cannot contain NUL")
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidInput("names must be UTF-8 (the store keeps text names)") from None
        self.memory.check_name(name)

    def file_bytes(self, inode: Inode) -> bytes | bytearray:
        """Current content of a regular file (what a read returns)."""
        if inode.data is not None:
            return inode.data
        return self.handler(inode).content(inode)

    def refuse(self, inode: Inode, exc: ContextFSError, data: bytes | None) -> Refusal:
        """Record a refused commit in .status (keeping the bytes); the adapter must not
        record it again."""
        path = self.path(inode) if inode.parent is not None else inode.name
        if isinstance(exc, InvalidInput) and exc.errno == errno.EINVAL:
            exc.errno = self.invalid_errno
        r = self.memory.refuse(path, exc, data)
        exc.recorded = True  # type: ignore[attr-defined]
        if r.kept_at:
            exc.reason = f"{exc.reason} (your bytes are kept at {r.kept_at})"
        return r

    def new_handle(self, inode: Inode, flags: int) -> Handle:
        h = Handle(self._next_fh, inode, flags)
        self._next_fh += 1
        self.handles[h.fh] = h
        inode.opened += 1
        return h

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
        if size is not None and fh is not None and fh in self.handles:
            self.handles[fh].wrote = True  # ftruncate: committed at this handle's close
        if size is not None:
            self.buffers.truncate(inode, size, self.handles.get(fh) if fh is not None else None)
        if (mode is not None or uid is not None or gid is not None) and self.perms.change(
            inode, mode, uid, gid
        ):
            mode = uid = gid = None  # stored as the owner's, node's or attachment's access
        self.buffers.set_attributes(
            inode, mode=mode, uid=uid, gid=gid, atime_ns=atime_ns, mtime_ns=mtime_ns
        )
        return inode

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
            if caller is not None and caller[0] not in (0, self.uid):
                reader = Caller.of(*caller)
            return self.query.root_for(parent, reader)
        return await self.handler(parent).lookup(parent, name)

    def ref(self, inode: Inode, n: int = 1) -> None:
        inode.lookups += n

    def forget(self, ino: int, n: int) -> None:
        inode = self.inodes.get(ino)
        if inode is None:
            return
        inode.lookups -= n
        self._maybe_free(inode)

    def listdir(self, ino: int, off: int) -> Iterator[tuple[str, Inode, int]]:
        """Entries after offset `off`; offsets are inode numbers, stable across changes.

        A generator: readdir stops as soon as the kernel's buffer is full."""
        d = self.get(ino)
        if not d.is_dir:
            raise NotADirectory("not a directory")
        if not self.handler(d).listable(d):
            return
        self.ensure(d)
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
        h = self.open_file(self.get(ino), flags)
        if h.inode.role == Role.STATUS and caller is not None and caller[0] not in (0, self.uid):
            h.snapshot = self.static.status_for(Caller.of(*caller), h.inode)
        try:
            await self.handler(h.inode).opened(h)
        except BaseException:
            self.release(h.fh)
            raise
        return h

    def open_file(self, inode: Inode, flags: int) -> Handle:
        """Open without the role's own work at open (a generated file's snapshot is
        taken; what the role adds, `open` awaits)."""
        if inode.is_dir:
            raise IsADirectory("is a directory")
        writing = (flags & os.O_ACCMODE) != os.O_RDONLY
        own = None
        if writing or flags & os.O_TRUNC:
            own = self.buffers.open_for_writing(inode, flags)
        h = self.new_handle(inode, flags)
        if own is not None:  # a tier: this handle's own copy, saved whole at its close
            h.buffer, h.dirty = own, bool(flags & os.O_TRUNC)
            if flags & os.O_APPEND and not flags & os.O_TRUNC:
                h.rebase = len(own)
        if inode.role in GENERATED:
            h.snapshot = bytes(self.file_bytes(inode))
        return h

    def handle(self, fh: int) -> Handle:
        try:
            return self.handles[fh]
        except KeyError:
            raise BadHandle("bad file handle") from None

    def read(self, fh: int, off: int, size: int) -> bytes:
        h = self.handle(fh)
        data = h.snapshot if h.snapshot is not None else h.buffer
        if data is None:
            data = self.file_bytes(h.inode)
        return bytes(data[off : off + size])

    def write(self, fh: int, off: int, buf: bytes) -> int:
        return self.buffers.write(self.handle(fh), off, buf)

    async def flush(self, fh: int) -> None:
        """close(): the commit point for written bytes, and routing for dropped files.

        flush comes for every close() of every descriptor, also for the one a shell
        closes right after dup2 of a freshly truncated file, before anything is written.
        So flush commits only what this handle wrote; a truncation alone is committed at
        release (or fsync), which keeps "one save, one version" for `> file`.
        """
        h = self.handle(fh)
        if not h.wrote:
            return
        h.wrote = False
        await self.handler(h.inode).flush(h)

    async def fsync(self, fh: int) -> None:
        """Commit like close; for a node's text, also wait until it is searchable."""
        h = self.handle(fh)
        with FOREGROUND.serving():  # background services step aside meanwhile
            await self.handler(h.inode).fsync(h)

    def release(self, fh: int) -> None:
        h = self.handles.pop(fh, None)
        if h is None:
            return
        inode = h.inode
        if h.buffer is not None:
            with contextlib.suppress(ContextFSError):  # recorded in .status; no reply
                self.tiers.release_own(h)
        inode.opened -= 1
        if inode.opened <= 0:
            inode.opened = 0
            # a refused commit is already recorded in .status; release has no reply
            with contextlib.suppress(ContextFSError):
                self.handler(inode).release(h)
            self.buffers.unload_clean(inode)
        self._maybe_free(inode)

    # ---- creating and removing -----------------------------------------------------------

    def _new_entry_in(self, parent_ino: int, name: str) -> Inode:
        d = self.get(parent_ino)
        self.check_name(name)
        self.ensure(d)
        assert d.children is not None
        return d

    async def create(
        self, parent_ino: int, name: str, mode: int, flags: int, uid: int, gid: int
    ) -> Handle:
        d = self._new_entry_in(parent_ino, name)
        assert d.children is not None
        existing = d.children.get(name)
        if existing is not None:
            if flags & os.O_EXCL and not self.tiers.unwritten(existing):
                raise Exists(f"{self.child_path(d, name)} exists")
            return await self.open(existing.ino, flags)
        self.memory.check_writable()
        dmode, _, dgid = self.perms.attrs(d)
        if dmode & stat.S_ISGID:  # a new file takes a setgid directory's group
            gid = dgid
        handle = self.handler(d).create(d, name, mode, flags, uid, gid)
        self.perms.created(handle.inode, mode, uid, gid)
        return handle

    def mkdir(self, parent_ino: int, name: str, mode: int, uid: int, gid: int) -> Inode:
        d = self._new_entry_in(parent_ino, name)
        assert d.children is not None
        if name in d.children:
            raise Exists(f"{self.child_path(d, name)} exists")
        self.memory.check_writable()
        inode = self.handler(d).mkdir(d, name, mode, uid, gid)
        self.perms.created(inode, mode, uid, gid)
        return inode

    def symlink(self, parent_ino: int, name: str, target: bytes, uid: int, gid: int) -> Inode:
        d = self._new_entry_in(parent_ino, name)
        assert d.children is not None
        if name in d.children:
            raise Exists(f"{self.child_path(d, name)} exists")
        self.memory.check_name(os.fsdecode(target), "a symlink target")
        inode = self.attachments.symlink(d, name, target, uid, gid)
        self.perms.created(inode, stat.S_IMODE(inode.mode), uid, gid)
        return inode

    def unlink(self, parent_ino: int, name: str) -> None:
        d = self.get(parent_ino)
        inode = self.child(d, name)
        if inode.is_dir:
            raise IsADirectory("is a directory")
        if inode.role == Role.ATTACH:  # a hard-linked file: which of its names goes
            self.attachments.unlink(d, inode, name)
        else:
            self.handler(inode).unlink(d, inode)

    async def rmdir(self, parent_ino: int, name: str) -> None:
        d = self.get(parent_ino)
        inode = self.child(d, name)
        if not inode.is_dir:
            raise NotADirectory("not a directory")
        await self.handler(inode).rmdir(d, inode)

    def rename(
        self, old_parent: int, old_name: str, new_parent: int, new_name: str, flags: int = 0
    ) -> None:
        rename(self, self.get(old_parent), old_name, self.get(new_parent), new_name, flags)

    def fsyncdir(self, ino: int) -> None:
        """fsync of a directory makes the nodes made in it by mkdir, and its entries'
        times, durable."""
        d = self.get(ino)
        self.memory.persist_pending(d.owner)
        self.memory.flush_touched()

    def link(self, ino: int, new_parent_ino: int, name: str) -> Inode:
        """A hard link: another name for an attachment file, inside its own node."""
        inode = self.get(ino)
        d = self._new_entry_in(new_parent_ino, name)
        assert d.children is not None
        if name in d.children:
            raise Exists(f"{self.child_path(d, name)} exists")
        self.memory.check_writable()
        return self.attachments.link(inode, d, name)

    async def mknod(self, parent_ino: int, name: str, mode: int, uid: int, gid: int) -> Inode:
        """A regular file made with mknod: created, closed, and returned; a FIFO or a
        socket inside a node: an attachment of that kind; a device node: refused."""
        self.check_name(name)
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
            d = self._new_entry_in(parent_ino, name)
            assert d.children is not None
            if name in d.children:
                raise Exists(f"{self.child_path(d, name)} exists")
            self.memory.check_writable()
            dmode, _, dgid = self.perms.attrs(d)
            if dmode & stat.S_ISGID:  # a new entry takes a setgid directory's group
                gid = dgid
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

    # ---- changes made outside a request (background services) ---------------------------

    def refresh_nodes(self, nodes: list[Node]) -> None:
        """Nodes changed outside a request (consolidation): show each where it now is."""
        self.nodes.refresh(nodes)

    def node_routed(self, n: Node, created: bool) -> None:
        """A node was made or changed outside a request (inbox, sessions)."""
        self.nodes.routed(n, created)

    def nodes_indexed(self, node_ids: list[int]) -> None:
        """The indexer caught up with these nodes: their meta.yaml shows it."""
        self.nodes.indexed(node_ids)

    def inbox_changed(self) -> None:
        """Processing moved on: reports and new nodes show the new state."""
        self.inbox.changed()
