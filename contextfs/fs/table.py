"""The inode table: what every inode of the tree needs, whatever its role.

Inode numbers (never reused), the `inodes` dict, names, parents and children, kernel lookup
counts and `forget`, open handles, the invalidations the kernel must hear about, and the
bytes of the hot tier and version files. An inode is freed only when it has no name, no
lookup and no open handle (pyfuse3's rule for lookup counts).

The table knows no role handler: a directory is populated on first use by the `populate`
callable the assembly hands it (`fs.build`: the role's handler), and what a role shows or
commits is decided in `fs.roles`. Pure Python, no pyfuse3.
"""

from __future__ import annotations

import stat
import time
from collections.abc import Callable
from typing import Unpack

from contextfs.errors import BadHandle, NotFound
from contextfs.fs.inode import Handle, Inode, InodeFields, InodeRest, Invalidation, Role
from contextfs.memory.texts import LRU

FILE_CACHE_ENTRIES = 4096  # tier and version files whose bytes are kept
# how long a file routed out of a type directory still answers to its name (`routed`)
ROUTED_GRACE_S = 5.0


class InodeTable:
    """Inodes by number, their names and lookup counts, handles and invalidations."""

    def __init__(self, uid: int, gid: int, populate: Callable[[Inode], None]) -> None:
        self.uid = uid  # the daemon's user and group: the default owner of a new inode
        self.gid = gid
        self._populate = populate
        self.inodes: dict[int, Inode] = {}
        self.handles: dict[int, Handle] = {}
        self._next_ino = 1
        self._next_fh = 1
        self.invalidations: list[Invalidation] = []
        # tier and version bytes, by inode: the hot ones only (a million nodes read once
        # would otherwise all stay here)
        self.file_cache: LRU[int, bytes] = LRU(FILE_CACHE_ENTRIES)
        # node id -> the directories made for that node (Role.NODE), by inode number: where
        # a node moved by another mount was shown (`Nodes._moved_away`); a user checks
        # `d.node` (a directory may have been given another node since)
        self.node_dirs: dict[int, dict[int, Inode]] = {}
        self._dir_node: dict[int, int] = {}  # inode number -> the node id it is under there
        # (directory inode number, name) -> a file routed from there into memory, and until
        # when its name still finds it (`routed`)
        self._routed: dict[tuple[int, str], tuple[Inode, Inode, float]] = {}

    @property
    def root(self) -> Inode:
        """Inode 1, which is never freed."""
        return self.inodes[1]

    # ---- inodes and names ----------------------------------------------------------------

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
        if role == Role.NODE and inode.node is not None:
            self.node_dirs.setdefault(inode.node.id, {})[ino] = inode
            self._dir_node[ino] = inode.node.id
        if parent is not None:
            self.link_inode(parent, inode)
        return inode

    def reserve(self, role: Role, mode: int, name: str, **kw: Unpack[InodeFields]) -> Inode:
        """An inode numbered now and given no name: `link_inode` shows it later."""
        inode = self.new(role, mode, name, None, **kw)
        del self.inodes[inode.ino]
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
        self.maybe_free(child)

    def maybe_free(self, inode: Inode) -> None:
        """Free an inode with no name, no lookup and no open handle."""
        if inode.parent is None and inode.lookups <= 0 and inode.opened <= 0 and inode.ino != 1:
            self.drop(inode)

    def drop(self, inode: Inode) -> None:
        """Let go of an inode the kernel holds no more (freed, or shed with a cold
        directory's listing): its number, its cached bytes, its place in `node_dirs`."""
        self.inodes.pop(inode.ino, None)
        self.file_cache.pop(inode.ino, None)
        nid = self._dir_node.pop(inode.ino, None)
        if nid is not None:
            dirs = self.node_dirs.get(nid)
            if dirs is not None:
                dirs.pop(inode.ino, None)
                if not dirs:
                    del self.node_dirs[nid]

    def ref(self, inode: Inode, n: int = 1) -> None:
        inode.lookups += n

    def forget(self, ino: int, n: int) -> None:
        inode = self.inodes.get(ino)
        if inode is None:
            return
        inode.lookups -= n
        self.maybe_free(inode)

    # ---- files routed into memory --------------------------------------------------------

    def routed(self, d: Inode, inode: Inode) -> None:
        """inode, a file of d, became memory and left d: for a few seconds its name still
        finds it (unlisted), so that what copiers do by name after `close()` (the chmod of
        Python's `shutil.copy` and of `install -m`, a `stat`, an `rm`) works on it."""
        self._prune_routed()
        self._routed[(d.ino, inode.name)] = (inode, d, time.monotonic() + ROUTED_GRACE_S)

    def _prune_routed(self) -> None:
        now = time.monotonic()
        for key, (inode, _, until) in list(self._routed.items()):
            if until <= now:
                del self._routed[key]
                if inode.opened <= 0:
                    inode.data = None

    def routed_file(self, d: Inode, name: str) -> Inode | None:
        """The file routed from d under name within the last few seconds (`routed`): an
        empty file (what it held is memory); a write through the name is routed anew."""
        if not self._routed:
            return None
        self._prune_routed()
        got = self._routed.get((d.ino, name))
        if got is None:
            return None
        inode = got[0]
        if inode.opened <= 0:
            inode.data, inode.dirty = bytearray(), False
        self.inodes[inode.ino] = inode  # freed once the kernel forgot it: known again
        return inode

    def routed_from(self, inode: Inode) -> Inode | None:
        """The directory a routed file (`routed`) was routed from, while it is remembered."""
        for routed, d, _ in self._routed.values():
            if routed is inode:
                return d
        return None

    def forget_routed(self, d: Inode, name: str) -> bool:
        """`rm` of a routed file's name (`routed`): nothing is left to remove."""
        return self._routed.pop((d.ino, name), None) is not None

    # ---- finding -------------------------------------------------------------------------

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
        """d's children, built on first use."""
        if not d.populated:
            self._populate(d)

    def child(self, d: Inode, name: str) -> Inode:
        self.ensure(d)
        assert d.children is not None
        c = d.children.get(name)
        if c is None:
            raise NotFound(f"{self.child_path(d, name)} does not exist")
        return c

    # ---- what the kernel must hear about -------------------------------------------------

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
        """An entry was added to or removed from d: its mtime and ctime move (POSIX). An
        attachment folder also keeps the new mtime in the store (`Attachments.touch_dir`)."""
        d.mtime_ns = d.ctime_ns = time.time_ns()

    # ---- handles -------------------------------------------------------------------------

    def new_handle(self, inode: Inode, flags: int) -> Handle:
        h = Handle(self._next_fh, inode, flags)
        self._next_fh += 1
        self.handles[h.fh] = h
        inode.opened += 1
        return h

    def handle(self, fh: int) -> Handle:
        try:
            return self.handles[fh]
        except KeyError:
            raise BadHandle("bad file handle") from None
