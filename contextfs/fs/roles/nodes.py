"""The memory's directories: kinds, owners, type directories, node directories, .history.

Decides what `user/`, `agent/`, an owner, a type directory and a node directory contain:
where a node's directory is placed (its type directory, or the trash for a deleted or
archived one, via `fs.roles.trash`), how a node directory is populated on first use (tiers,
meta.yaml, .history, attachments), what a new name in one of them becomes (a tier, a
routed drop, an editor's scratch file, an attachment), and how the tree follows a node the
daemon changed (a save, a routed drop, consolidation, the indexer).

The files themselves (tiers, meta.yaml, versions, drops, scratch) are `fs.roles.tiers`;
attachments are `fs.roles.attachments`; an owner's `.inbox` and `.sessions` are made by
`fs.roles.inbox` with the owner's directory.
"""

from __future__ import annotations

import itertools
import os
import re
import stat
import time
from collections import OrderedDict
from collections.abc import Iterator
from typing import TYPE_CHECKING

from contextfs.errors import InvalidInput, NotEmpty, NotPermitted, ReadOnly
from contextfs.fs.buffers import Buffers
from contextfs.fs.inode import (
    ARCHIVE_DIR,
    HISTORY_DIR,
    META_FILE,
    RESERVED_IN_NODE,
    ROUTABLE_IN_SINGLETON,
    TIER_FILES,
    TRASH_DIR,
    Handle,
    Inode,
    Invalidation,
    Role,
    is_editor_scratch,
    is_temp_name,
    ns,
)
from contextfs.fs.roles.attachments import Attachments
from contextfs.fs.roles.base import RoleBase, missing
from contextfs.fs.roles.inbox import Inbox
from contextfs.fs.roles.trash import Trash
from contextfs.fs.table import InodeTable
from contextfs.model import Node

VERSION_NAME = re.compile(r"v([1-9][0-9]{0,8})\.md")

# `.history` version lists read together when one is listed (`_prefetch_history`)
HISTORY_BATCH = 1000
# rsync's temporary name for a file it is copying: `.<name>.XXXXXX`
_COPIER_TEMP = re.compile(r"\.(.+)\.[A-Za-z0-9]{6}")

if TYPE_CHECKING:
    from contextfs.ctxtypes import ContextType
    from contextfs.memory.service import Memory


HOT_TYPE_DIRS = 64  # built type directories kept before the cold ones are emptied
# what a node directory holds that can be built again from the memory alone
_RELEASABLE = frozenset({Role.NODE, Role.TIER, Role.META, Role.HISTORY, Role.VERSION})


class Nodes(RoleBase):
    roles = frozenset({Role.KIND, Role.OWNER, Role.TYPEDIR, Role.NODE, Role.HISTORY})

    def __init__(
        self,
        table: InodeTable,
        memory: Memory,
        *,
        attachments: Attachments,
        trash: Trash,
        inbox: Inbox,
        buffers: Buffers,
    ) -> None:
        super().__init__(table)
        self.memory = memory
        self.attachments = attachments  # what a node holds besides its tiers
        self.trash = trash  # where a deleted or archived node's directory is
        self.inbox = inbox  # an owner's intake directories
        self.buffers = buffers  # a new tier is opened with a buffer of its own
        self.kinds: dict[str, Inode] = {}  # user/ and agent/
        self.owner_dirs: dict[tuple[str, str], Inode] = {}
        # built type directories, least recently used first: past HOT_TYPE_DIRS the cold
        # ones let their node directories go (`_evict_cold`)
        self.hot_dirs: OrderedDict[int, Inode] = OrderedDict()
        self.hot_type_dirs = HOT_TYPE_DIRS
        self.evicted = 0  # type directories emptied so far (for tests and benchmarks)

    # ---- building ------------------------------------------------------------------------

    def add_kinds(self, root: Inode) -> None:
        self.kinds = {k: self.table.new_dir(Role.KIND, k, root) for k in ("user", "agent")}

    def build(self) -> None:
        """Every owner's directory; the directories of the trashed and archived nodes and
        of the singletons."""
        self.attachments.load_index()
        for owner in sorted(self.memory.owners):
            self.add_owner(owner)
        # a type directory builds its node directories when first used (`populate`):
        # mount time and memory do not grow with the nodes no one looks at. Read from the
        # store (memory.heads): the trashed and archived nodes, and the singletons
        singletons = tuple(sorted(t.name for t in self.memory.types.values() if t.singleton))
        # in the order they went there: where two share a name (deleted without a tree),
        # the first keeps it, as when they were shown
        boxed = sorted(self.memory.walk(live=False), key=_boxed_order)
        for n in boxed:
            self.place(n)
        for n in self.memory.walk(types=singletons):
            self.place(n)

    def in_trash(self, owner: tuple[str, str], ctype: ContextType, shown: str) -> list[str]:
        """The names in the owner's `.trash/<type-dir>` of nodes deleted as `shown`
        (`shown`, or `shown.<id>` when that was taken), the first deleted first."""
        od = self.owner_dirs.get(owner)
        trash = (od.children or {}).get(TRASH_DIR) if od is not None else None
        tt = (trash.children or {}).get(ctype.type_dir) if trash is not None else None
        if tt is None:
            return []
        found = [
            c
            for k, c in (tt.children or {}).items()
            if c.node is not None
            and (k == shown or (k.startswith(shown + ".") and k[len(shown) + 1 :].isdigit()))
        ]
        return [c.name for c in sorted(found, key=lambda c: _boxed_order(c.node))]  # type: ignore[arg-type]

    def box_name(self, n: Node, box: str) -> str:
        """The name n takes in its owner's `box` (`Memory.box_name`, set by `fs.build`)."""
        od = self.owner_dirs.get(n.owner)
        ctype = self.memory.types.get(n.type)
        if od is None or ctype is None:
            return n.name
        return self.trash.free_name(od, ctype, n, box)

    def add_owner(self, owner: tuple[str, str]) -> Inode:
        """An owner's directory with its type directories, trash and intake directories."""
        t = self.table
        od = t.new_dir(Role.OWNER, owner[1], self.kinds[owner[0]], owner=owner)
        self.owner_dirs[owner] = od
        for ct in self.memory.types_for(owner[0]):
            if ct.singleton:
                t.new_dir(Role.NODE, ct.type_dir, od, owner=owner, ctype=ct, populated=False)
            else:
                t.new_dir(Role.TYPEDIR, ct.type_dir, od, owner=owner, ctype=ct, populated=False)
        t.new_dir(Role.TRASH, TRASH_DIR, od, 0o755, owner=owner)
        t.new_dir(Role.TRASH, ARCHIVE_DIR, od, 0o755, owner=owner)
        self.inbox.add_dirs(od, owner)
        return od

    def access_changed(self, keys: set[tuple[str, str]]) -> None:
        """Owners, groups or modes changed outside a request (another mount on a shared
        store, `memory.remote.apply`): the kernel's attributes of everything
        they decide go, before its next permission check (`default_permissions` checks
        the cached ones). An owner's access decides its folders' and its nodes' too
        (`Perms`), so everything of each owner concerned; for an attachment or a parked
        file (whose node is not at hand here) everything owned."""
        owners: set[tuple[str, str]] = set()
        every = False
        for kind, key in keys:
            if kind in ("owner", "dir"):
                owner_kind, _, rest = key.partition("/")
                owners.add((owner_kind, rest.split("/", 1)[0]))
            elif kind == "node" and key.isdigit():
                n = self.memory.nodes.peek(int(key))
                if n is not None:  # a node no inode holds shows nothing to invalidate
                    owners.add(n.owner)
            else:
                every = True
        for inode in list(self.table.inodes.values()):
            owner = inode.owner or (inode.node.owner if inode.node is not None else None)
            if owner is not None and (every or owner in owners):
                self.table.invalidate(inode, attr_only=True)

    def attachments_changed(self, node_ids: set[int]) -> None:
        """Another mount of a shared store changed attachments of these nodes (bytes,
        names, folders, modes, deletions; `memory.remote.apply` read their
        records again). A node directory already built is built again, under a new
        inode: the kernel drops the old one's name, and the files it cached go with it
        (a descriptor open on an old file keeps working on it). One not built yet reads
        them when it is (`att_rescan`)."""
        for nid in node_ids:
            n = self.memory.nodes.peek(nid)  # a node no inode holds shows nothing
            d = self.node_inode(n) if n is not None else None
            if n is None or d is None:
                # shown later, from memory's rows, not the ones read at the mount
                self.attachments.stale.add(nid)
                continue
            if not d.populated:
                d.att_rescan = True
                continue
            ctype = self.memory.types.get(n.type)
            if d.trashed or not self.memory.is_live(n) or ctype is None:
                continue  # shown in .trash: its attachments come back with it
            self.attachments.keep_open(n)
            if ctype.singleton:
                kept = (Role.DROP, Role.SCRATCH)
                gone = [c for c in (d.children or {}).values() if c.role not in kept]
                for c in gone:
                    self.table.invalidations.append(Invalidation(d.ino, name=c.name))
                placed = self.place(n)  # the type directory, built again in place
            else:
                self._forget(d)
                placed = self.place(n)
            if placed is not None:
                placed.att_rescan = True

    def owner_joined(self, owner: tuple[str, str]) -> None:
        """An owner made outside a request (another mount on a shared store): its
        directory appears in user/ or agent/, and the kernel's listing of that is dropped."""
        kind = self.kinds[owner[0]]
        if kind.children is not None and owner[1] in kind.children:
            return
        self.add_owner(owner)
        self.table.touch_dir(kind)
        self.table.listing_changed(kind)
        self.table.invalidate(kind, attr_only=True)

    def place(self, n: Node) -> Inode | None:
        """Put a node's directory where it belongs (its type dir, or the owner's trash)."""
        od = self.owner_dirs.get(n.owner)
        ctype = self.memory.types.get(n.type)
        if od is None or ctype is None:
            return None
        if n.deleted_at is not None or n.archived_at is not None:
            return self.trash.place(od, ctype, n)
        assert od.children is not None
        if ctype.singleton:
            d = od.children.get(ctype.type_dir)
            if d is not None:
                assert d.children is not None
                d.node = n
                d.populated = False
                d.children = {
                    k: v for k, v in d.children.items() if v.role in (Role.DROP, Role.SCRATCH)
                }
                self.table.listing_changed(d)
                d.ndirs = 0
            return d
        td = od.children.get(ctype.type_dir)
        if td is None:
            return None
        found = (td.children or {}).get(n.name)
        if found is not None and found.node is n:  # shown already (a lookup built it)
            return found
        if found is not None and self._gave_way(found):
            self._forget(found)  # n is another mount's node at the path it had
        return self.table.new_dir(
            Role.NODE,
            n.name,
            td,
            owner=n.owner,
            ctype=ctype,
            node=n,
            populated=False,
            mtime_ns=ns(n.updated),
        )

    def populate(self, d: Inode) -> None:
        """Create a type directory's node directories, or a node directory's children, on
        first use (cheap start for big stores)."""
        if d.populated:
            return
        d.populated = True
        t = self.table
        if d.role == Role.TYPEDIR:
            assert d.children is not None and d.ctype is not None
            for live in self._live_in(d):
                if live.name not in d.children:
                    self.place(live)
            self.hot_dirs[d.ino] = d
            self.hot_dirs.move_to_end(d.ino)
            self._evict_cold(keep=d)
            return
        n = d.node
        if d.role == Role.HISTORY:
            assert n is not None
            self._prefetch_history(d)
            for version, created, _size in n.history:
                t.new(
                    Role.VERSION,
                    stat.S_IFREG | 0o444,
                    f"v{version}.md",
                    d,
                    node=n,
                    version=version,
                    mtime_ns=ns(created),
                )
            return
        if n is None:  # a singleton node not written yet: an empty directory
            return
        if self.attachments.take_stale(n) or d.trashed or n.deleted_at is not None or d.att_rescan:
            d.att_rescan = False
            self.attachments.rescan(n)
        assert d.children is not None
        # Numbered in this order, shown or not: `cp` copies a directory in the order of
        # its inode numbers, so a copy gets the derived files before L2.md and can create
        # each (O_EXCL) before L2.md's first save makes them appear
        # (docs/reference.md, "Copying nodes with cp, rsync and tar").
        ro = 0o444 if d.trashed else 0o644
        fresh = n.version == 0 and not d.trashed
        unborn: dict[str, Inode] = {}
        for fname in (META_FILE, HISTORY_DIR, *TIER_FILES):
            if fname in d.children:
                continue
            if fname == META_FILE:
                inode = t.reserve(Role.META, stat.S_IFREG | 0o444, fname, node=n)
                shown = not fresh
            elif fname == HISTORY_DIR:
                inode = t.reserve(
                    Role.HISTORY, stat.S_IFDIR | 0o555, fname, node=n, populated=False
                )
                shown = not fresh
            else:
                tier = TIER_FILES[fname]
                inode = t.reserve(Role.TIER, stat.S_IFREG | ro, fname, node=n, tier=tier)
                shown = self.tier_exists(n, tier)
            if shown:
                t.link_inode(d, inode)
            else:
                unborn[fname] = inode
        d.unborn = unborn or None
        self.attachments.add_inodes(d, n, None)
        if d.trashed:
            self.trash.retag(d, trashed=True)

    def _prefetch_history(self, d: Inode) -> None:
        """A `.history` is listed: the version lists of its node's siblings too, in one
        query (`find` and `ls -R` list every node's next, and one query each was most of
        the first `find` after a mount)."""
        node_dir = d.parent
        above = node_dir.parent if node_dir is not None else None
        texts = self.memory.texts
        if above is None or above.children is None or texts.history_loaded(d.node):
            return
        siblings = [c.node for c in above.children.values() if c.node is not None]
        texts.prefetch_history([d.node, *siblings], HISTORY_BATCH)

    def bear(self, d: Inode, name: str, uid: int | None = None, gid: int | None = None) -> Inode:
        """Show a file of a node that it did not show yet (its inode numbered when the
        node was populated), or the one it shows."""
        assert d.children is not None
        shown = d.children.get(name)
        if shown is not None:
            if d.unborn:
                d.unborn.pop(name, None)
            return shown
        inode = d.unborn.pop(name, None) if d.unborn else None
        if inode is None:  # populated before any was numbered (a singleton's first L2)
            n = d.node
            if name == META_FILE:
                inode = self.table.reserve(Role.META, stat.S_IFREG | 0o444, name, node=n)
            elif name == HISTORY_DIR:
                inode = self.table.reserve(
                    Role.HISTORY, stat.S_IFDIR | 0o555, name, node=n, populated=False
                )
            else:
                inode = self.table.reserve(
                    Role.TIER, stat.S_IFREG | 0o644, name, node=n, tier=TIER_FILES[name]
                )
        now = time.time_ns()
        inode.mtime_ns = inode.atime_ns = inode.ctime_ns = now
        if uid is not None:
            inode.uid = uid
        if gid is not None:
            inode.gid = gid
        self.table.link_inode(d, inode)
        return inode

    @staticmethod
    def tier_exists(n: Node, tier: str) -> bool:
        """A tier of a node made by mkdir and never written does not exist yet, so that
        `cp -r`/`tar x` of a copied node can create it (O_EXCL): L2 once a version is
        stored, L0/L1 then or once written by hand (pinned)."""
        if n.version > 0:
            return True
        return (tier == "L0" and n.l0_pinned) or (tier == "L1" and n.l1_pinned)

    @staticmethod
    def emptying(d: Inode | None) -> bool:
        """Whether a node directory is being removed as a whole: its L2.md is gone from
        it (`rm -r` removes the tiers first), or was never written."""
        return d is not None and d.children is not None and "L2.md" not in d.children

    def unloaded_ndirs(self, d: Inode) -> int:
        """Subdirectories of a directory whose children are not built yet (st_nlink is
        2 + that; `find` relies on it), counted without building them."""
        if d.role == Role.TYPEDIR:
            assert d.owner is not None and d.ctype is not None
            return self.memory.live.count(d.owner, d.ctype.name)  # by SQL, nothing built
        n = d.node
        if n is None or d.role == Role.HISTORY:
            return 0
        if d.att_rescan or d.trashed or n.id in self.attachments.stale:
            self.table.ensure(d)
            return d.ndirs
        dirs = self.attachments.unloaded_dirs(d, n)
        # a node also holds .history, once it has a version
        return dirs + (1 if d.role == Role.NODE and n.version > 0 else 0)

    async def lookup(self, d: Inode, name: str) -> Inode:
        if d.role == Role.TYPEDIR and not d.populated:
            # one name: build that node's directory only (a listing builds them all)
            assert d.children is not None and d.owner is not None and d.ctype is not None
            c = d.children.get(name)
            if c is None:
                n = self.memory.live_node(d.owner, d.ctype, name)
                if n is None:
                    raise missing(self.table, d, name)
                c = self.place(n)
                assert c is not None
            self.hot_dirs[d.ino] = d
            self.hot_dirs.move_to_end(d.ino)
            self._evict_cold(keep=d)
            return c
        if d.ino in self.hot_dirs:
            self.hot_dirs.move_to_end(d.ino)
        return await super().lookup(d, name)

    def _evict_cold(self, keep: Inode) -> None:
        """Empty the least recently used built type directories past HOT_TYPE_DIRS whose
        node directories nothing holds: no inode under them that the kernel has looked up
        and not forgotten, none open or with a buffer, no attachment, drop or scratch
        file, no node not yet stored. The next lookup or listing builds them again."""
        excess = len(self.hot_dirs) - self.hot_type_dirs
        if excess <= 0:
            return
        # the oldest few only, so a build costs the same however many are held; one the
        # kernel still holds is in use: it goes to the recent end, to be looked at later
        for ino, td in list(itertools.islice(self.hot_dirs.items(), 8)):
            if excess <= 0:
                break
            if td is keep:
                continue
            if self._release(td):
                del self.hot_dirs[ino]
                excess -= 1
                self.evicted += 1
            else:
                self.hot_dirs.move_to_end(ino)

    def _release(self, td: Inode) -> bool:
        assert td.children is not None
        inodes: list[Inode] = []
        for c in td.children.values():
            if not self._cold(c, inodes):
                return False
        t = self.table
        for c in inodes:
            t.drop(c)
            c.parent = None
        td.children = {}
        td.ndirs = 0
        td.populated = False
        td.sorted_names = None
        if td.listed:  # the kernel's listing names inode numbers that are gone now
            td.listed = False
            t.invalidations.append(Invalidation(td.ino, listing=True))
        return True

    @staticmethod
    def _cold(inode: Inode, out: list[Inode]) -> bool:
        """Whether nothing holds inode or what is under it; collects them into out."""
        if inode.role not in _RELEASABLE or inode.lookups > 0 or inode.opened > 0:
            return False
        if inode.data is not None or inode.dirty or inode.links or inode.att_rescan:
            return False
        if inode.node is not None and not inode.node.persisted:
            return False
        out.append(inode)
        return all(Nodes._cold(c, out) for c in (inode.children or {}).values())

    def _live_in(self, d: Inode) -> Iterator[Node]:
        """The live nodes of a type directory, oldest first."""
        assert d.owner is not None and d.ctype is not None
        # streamed from the store (memory.heads); the folders made hold their nodes
        yield from self.memory.walk(owner=d.owner, types=(d.ctype.name,))

    # ---- new names -----------------------------------------------------------------------

    def new_file_role(self, d: Inode, name: str) -> Role:
        """What a new file `name` in d becomes."""
        if d.role == Role.TYPEDIR:
            return Role.SCRATCH if is_temp_name(name) else Role.DROP
        if self.unborn_singleton(d):
            # a singleton that has never been written: what a name becomes is what it
            # would become once it has an L2 (`begin_singleton` makes its node for a
            # tier, meta.yaml or an attachment); temporary names are parked scratch
            if name in TIER_FILES:
                return Role.TIER
            if is_temp_name(name):
                return Role.SCRATCH
            if name == META_FILE:
                return Role.META  # a copier's meta.yaml, before the node's first save
            if name in RESERVED_IN_NODE:
                raise ReadOnly(f"{name} is derived and read-only")
            return Role.DROP if ROUTABLE_IN_SINGLETON.search(name) else Role.ATTACH
        if d.role == Role.HISTORY:
            return self._new_in_history(d, name)
        if d.role == Role.OWNER and self.singleton_file_type(d, name) is not None:
            # an export's singleton (`profile.md` beside the type directories), copied in
            return Role.SCRATCH if is_temp_name(name) else Role.DROP
        if d.role == Role.NODE:
            if d.trashed:
                raise ReadOnly("a deleted node is read-only; restore it with mv first")
            if is_editor_scratch(name):
                return Role.SCRATCH
            if name in TIER_FILES:
                return Role.TIER
            if name == META_FILE and d.unborn and META_FILE in d.unborn:
                return Role.META  # a copier's meta.yaml, before the node's first save
            if name in RESERVED_IN_NODE:
                raise ReadOnly(f"{name} is derived and read-only")
            if d.ctype is not None and d.ctype.singleton and ROUTABLE_IN_SINGLETON.search(name):
                return Role.DROP
            return Role.ATTACH
        raise self.no_files_here(d)

    @staticmethod
    def unborn_singleton(d: Inode) -> bool:
        """Whether d is the directory of a singleton type never written (a fresh
        `profile/`): a node directory with no node yet."""
        return d.role == Role.NODE and d.node is None and d.ctype is not None and not d.trashed

    def begin_singleton(self, d: Inode) -> None:
        """A singleton never written gets its node now, not stored before its first
        commit, as a node made by mkdir: for its first L2.md, a copier's meta.yaml or
        `.history`, or its first attachment (a file that is not routed, a folder, a
        symlink or FIFO)."""
        if not self.unborn_singleton(d):
            return
        assert d.ctype is not None and d.owner is not None
        d.node = self.memory.create_node(d.owner, d.ctype, "", persist=False)
        d.populated = False
        self.populate(d)

    def singleton_file_type(self, d: Inode, name: str) -> ContextType | None:
        """The singleton type whose exported file `name` is in owner directory d
        (`profile.md`, or rsync's temporary `.profile.md.XXXXXX` for it), else None."""
        if d.role != Role.OWNER or d.owner is None:
            return None
        m = _COPIER_TEMP.fullmatch(name)
        base = m.group(1) if m else name
        if not base.endswith(".md"):
            return None
        t = self.memory.types_by_dir.get((d.owner[0], base[: -len(".md")]))
        return t if t is not None and t.singleton else None

    def _new_in_history(self, d: Inode, name: str) -> Role:
        """A new name in `.history`: a version written back into a node that has none
        yet (a copy being made: kept, and stored before its L2.md) or into a node made by
        mkdir during this mount (as stored, or put in its place in a copy:
        `Tiers.write_back`), or a copier's
        temporary file (rsync's `.v1.md.XXXXXX`, in daemon memory only, to be renamed over
        a version with the bytes it holds)."""
        n = d.node
        node_dir = d.parent
        if n is None or d.trashed or (node_dir is not None and node_dir.trashed):
            raise ReadOnly(".history of a deleted node is read-only")
        if name.startswith(".") or is_editor_scratch(name):
            return Role.SCRATCH
        if VERSION_NAME.fullmatch(name) and (
            n.version == 0 or (node_dir is not None and node_dir.made_here)
        ):
            return Role.VERSION
        raise ReadOnly(
            f".history is read-only: {name} is not a stored version (versions are written "
            "back only into a new node, before its L2.md, or with the bytes already stored)"
        )

    def pending_version(self, d: Inode, name: str) -> Inode:
        """A version written back into the `.history` of a node with no version yet: held
        in daemon memory, stored before the node's first L2.md (`Tiers.first_save`); or
        into a copy after its L2.md: put in its place at its close (`Tiers.write_back`)."""
        m = VERSION_NAME.fullmatch(name)
        assert m is not None
        inode = self.table.new(
            Role.VERSION,
            stat.S_IFREG | 0o444,
            name,
            d,
            node=d.node,
            version=int(m.group(1)),
            data=bytearray(),
        )
        self.table.touch_dir(d)
        return inode

    def create(self, d: Inode, name: str, mode: int, flags: int, uid: int, gid: int) -> Handle:
        t = self.table
        role = self.new_file_role(d, name)
        if role in (Role.ATTACH, Role.META, Role.TIER):
            self.begin_singleton(d)
        if role == Role.ATTACH:
            return self.attachments.create_file(d, name, mode, flags, uid, gid)
        if role == Role.META:
            # taken at its close and not kept: a new node's facts are its own
            inode = self.bear(d, META_FILE)
            t.touch_dir(d)
            return self.buffers.open(inode, flags | os.O_TRUNC)
        if role == Role.VERSION:
            return self.buffers.open(self.pending_version(d, name), flags | os.O_TRUNC)
        if role == Role.TIER:
            inode = self.bear(d, name, uid, gid)
            t.touch_dir(d)
            # its own buffer, like any open for writing; a file created and closed empty
            # (`touch`) is saved empty at its close
            return self.buffers.open(inode, flags | os.O_TRUNC)
        else:  # a drop or a scratch file
            inode = t.new(
                role,
                stat.S_IFREG | stat.S_IMODE(mode),
                name,
                d,
                node=d.node,
                owner=d.owner,
                ctype=d.ctype or self.singleton_file_type(d, name),
                data=bytearray(),
                uid=uid,
                gid=gid,
            )
        t.touch_dir(d)
        return t.new_handle(inode, flags)

    def mkdir(self, d: Inode, name: str, mode: int, uid: int, gid: int) -> Inode:
        if d.role == Role.KIND:
            self.memory.create_owner(d.name, name)
            return self.add_owner((d.name, name))
        if d.role == Role.TYPEDIR:
            if is_editor_scratch(name) or name.startswith("."):
                raise InvalidInput(f"{name!r} is not a node name")
            assert d.owner is not None and d.ctype is not None
            # a listed type directory holds every live node's name (the kernel's LOOKUP
            # before this MKDIR was answered from it): the store need not be asked again
            absent = d.populated and name not in (d.children or {})
            n = self.memory.create_node(d.owner, d.ctype, name, persist=False, absent=absent)
            placed = self.place(n)
            assert placed is not None
            placed.made_here = True
            return placed
        if self.unborn_singleton(d):
            if name in RESERVED_IN_NODE and name != HISTORY_DIR:
                raise ReadOnly(f"{name} is reserved in a node")
            # a singleton never written: a folder in it is an attachment folder, made
            # as in a singleton with an L2; a copier's `.history` (`tar x` of an export:
            # its folder's `.history` before the file beside it) begins it as its first
            # L2.md would
            self.begin_singleton(d)
            if name == HISTORY_DIR:
                d.made_here = True
        if d.role == Role.NODE and d.node is not None and not d.trashed:
            if name == HISTORY_DIR and d.unborn and HISTORY_DIR in d.unborn:
                # a copier's `.history` (cp -r makes it before its versions): shown now
                return self.bear(d, HISTORY_DIR)
            if name in RESERVED_IN_NODE:
                raise ReadOnly(f"{name} is reserved in a node")
            return self.attachments.mkdir(d, name, mode, uid, gid)
        if d.trashed:
            raise ReadOnly("a deleted node is read-only; restore it with mv first")
        raise self.no_files_here(d)

    # ---- removing ------------------------------------------------------------------------

    async def rmdir(self, d: Inode, child: Inode) -> None:
        t = self.table
        t.ensure(child)
        if child.role == Role.HISTORY:
            # the versions go with their node, never alone: removing the node as a whole
            # (`rm -r`) passes over it and hides nothing; anything else is refused
            if self.emptying(d):
                return
            raise ReadOnly(".history is read-only; it goes with its node (rm -r of the node)")
        derived = (Role.META, Role.HISTORY) if child.role == Role.NODE else ()
        if any(c.role not in derived for c in (child.children or {}).values()):
            raise NotEmpty(f"{t.child_path(d, child.name)} is not empty")
        if child.role == Role.NODE and child.node is not None and not child.trashed:
            n = child.node
            self.memory.delete_node(n)
            assert child.ctype is not None
            if child.ctype.singleton:
                for c in list((child.children or {}).values()):
                    t.unlink_inode(c)  # meta.yaml and .history went with the node
                child.node = None
                child.populated = True
                t.listing_changed(child)
                t.invalidate(child, attr_only=True)
            else:
                t.unlink_inode(child)
            self.place(n)
            return
        if child.role == Role.NODE and child.node is None:
            raise NotPermitted(f"{child.name} is a type directory")
        await super().rmdir(d, child)

    # ---- following nodes the daemon changed ----------------------------------------------

    def node_inode(self, n: Node) -> Inode | None:
        od = self.owner_dirs.get(n.owner)
        ctype = self.memory.types.get(n.type)
        if od is None or ctype is None:
            return None
        assert od.children is not None
        if n.deleted_at is not None or n.archived_at is not None:
            return self.trash.find(od, ctype, n)
        td = od.children.get(ctype.type_dir)
        if td is None or ctype.singleton:
            return td
        assert td.children is not None
        return td.children.get(n.name)

    def changed(self, n: Node, writer: Inode | None = None) -> None:
        """The daemon changed a node: refresh what the kernel may have cached about it."""
        t = self.table
        rewritten = self.memory.rewritten_versions.pop(n.id, set())
        d = self.node_inode(n)
        if d is None:
            return
        d.mtime_ns = ns(n.updated)
        if not d.populated:
            return
        assert d.children is not None
        if n.version >= 1 and (d.unborn or n.version == 1):
            # saved: what it did not show exists from now on (the tiers from the first save;
            # a name hidden by `rm` of a tier stays hidden)
            for fname in (META_FILE, HISTORY_DIR, *TIER_FILES):
                if (d.unborn and fname in d.unborn) or (n.version == 1 and fname in TIER_FILES):
                    self.bear(d, fname)
            d.unborn = None
        for name in (*TIER_FILES, META_FILE):
            c = d.children.get(name)
            if c is None or c.node is not n:
                continue
            if c is writer:
                t.file_cache.pop(c.ino, None)
                t.invalidate(c, attr_only=True)
            elif c.data is None or not c.dirty:
                # read from the node again (a writer's own buffer is its handle's)
                c.data = None
                t.invalidate(c)
        hist = d.children.get(HISTORY_DIR)
        if hist is not None and hist.populated:
            assert hist.children is not None
            for c in hist.children.values():
                if c.version in rewritten:  # a secret's first part redacted from it
                    t.file_cache.pop(c.ino, None)
                    t.invalidate(c)
            have = {c.version for c in hist.children.values()}
            for version, created, _size in n.history:
                if version not in have:
                    t.new(
                        Role.VERSION,
                        stat.S_IFREG | 0o444,
                        f"v{version}.md",
                        hist,
                        node=n,
                        version=version,
                        mtime_ns=ns(created),
                    )

    def routed(self, n: Node, created: bool) -> None:
        """A write made or changed n (here, through the inbox, or on another mount). A live
        node this tree does not show yet is placed even if the write only changed it: on a
        shared store another mount may have made it, and this mount's first sight of it is
        then its own write into it, or a catch-up that finds it held by the node cache."""
        if created or self._unshown(n):
            self._moved_away(n, anywhere=not created)
            d = self.place(n)  # ENOENT answers are not cached: nothing to invalidate
            if d is not None:
                d.att_rescan = True  # it may come with attachments (an inbox's media)
        else:
            self.changed(n)

    def refresh(self, nodes: list[Node]) -> None:
        """Nodes changed outside a request (consolidation): show each where it now is."""
        t = self.table
        for n in nodes:
            od = self.owner_dirs.get(n.owner)
            ctype = self.memory.types.get(n.type)
            if od is None or ctype is None:
                continue
            assert od.children is not None
            td = od.children.get(ctype.type_dir)
            shown = (
                td
                if ctype.singleton
                else (
                    td.children.get(n.name) if td is not None and td.children is not None else None
                )
            )
            if shown is not None and shown.node is n and not self.memory.is_live(n):
                if ctype.singleton:
                    shown.node, shown.children, shown.populated, shown.ndirs = None, {}, True, 0
                    t.listing_changed(shown)
                    t.invalidate(shown)
                else:
                    self._forget(shown)
                self.place(n)
            else:
                self.routed(n, False)

    def _forget(self, d: Inode) -> None:
        """A node directory the daemon took away outside a request (deleted or renamed by
        another mount, archived): its name goes, from the kernel's name cache too, which
        keeps a name for `entry_timeout` (a minute) after a lookup."""
        parent = d.parent
        self.table.unlink_inode(d)
        if parent is not None:
            self.table.invalidations.append(Invalidation(parent.ino, name=d.name))

    def _moved_away(self, n: Node, *, anywhere: bool = False) -> None:
        """n, placed under its name now, may be shown under the name it had (renamed on
        another mount): that directory goes. `anywhere`: a node this tree held before may
        have moved to another owner or type, or out of the trash: every directory that
        shows it elsewhere goes (`InodeTable.node_dirs`; a node just made skips it)."""
        td = self._node_type_dir(n)
        if td is not None and td.children is not None:
            for d in [d for d in td.children.values() if d.node is n and d.name != n.name]:
                self._forget(d)
        if anywhere and td is not None and self.memory.is_live(n):
            stale = [
                d
                for d in self.table.node_dirs.get(n.id, {}).values()
                if d.role == Role.NODE and d.node is n and d.parent is not None
                and (d.parent is not td or d.trashed)
            ]  # fmt: skip
            for d in stale:
                self._forget(d)

    def _gave_way(self, d: Inode) -> bool:
        """d shows a node made here by mkdir and never stored, which gave way to another
        mount's node at its path (memory.remote.give_way)."""
        n = d.node
        return (
            d.role == Role.NODE
            and n is not None
            and not n.persisted
            and self.memory.nodes.peek(n.id) is not n
        )

    def in_place_of(self, d: Inode) -> Inode:
        """The directory to use for d: d, unless its node gave way to another mount's
        node at its path; then that node's directory, shown now in d's place."""
        if not self._gave_way(d):
            return d
        n, ctype = d.node, d.ctype
        assert n is not None
        winner = None if ctype is None else self.memory.live_node(n.owner, ctype, n.name)
        placed = self.place(winner) if winner is not None else None
        return placed if placed is not None else d

    def _unshown(self, n: Node) -> bool:
        """n is live, of a node type with a directory per node, and its type directory
        lists no directory holding it."""
        td = self._node_type_dir(n)
        if td is None or td.children is None or not self.memory.is_live(n):
            return False
        shown = td.children.get(n.name)
        return shown is None or shown.node is not n

    def _node_type_dir(self, n: Node) -> Inode | None:
        """The type directory n's directory is in, for a type with a directory per node
        (None for a singleton type, or an owner or type not shown)."""
        ctype = self.memory.types.get(n.type)
        od = self.owner_dirs.get(n.owner)
        if ctype is None or ctype.singleton or od is None or od.children is None:
            return None
        return od.children.get(ctype.type_dir)

    def indexed(self, node_ids: list[int]) -> None:
        """The indexer caught up with these nodes: their meta.yaml shows it."""
        for nid in node_ids:
            n = self.memory.nodes.peek(nid)  # a node no inode holds has no meta.yaml shown
            d = self.node_inode(n) if n is not None else None
            meta = (
                d.children.get(META_FILE)
                if d is not None and d.populated and d.children is not None
                else None
            )
            if meta is not None:
                self.table.invalidate(meta)


def _boxed_order(n: Node) -> tuple[float, int]:
    """When a node went into the trash or the archive, then its id."""
    at = n.deleted_at if n.deleted_at is not None else n.archived_at
    return (at or 0.0, n.id)
