"""What the memory looks like as a POSIX tree: inodes, names, file contents, commit points.

Pure Python with no pyfuse3 import (borg's `vfs.py` idea): every method takes and returns
plain values and raises `contextfs.errors` exceptions; `fs.ops` is the only adapter to the
kernel protocol. The tree lives in memory and writes through to the memory service at the
durability points (close, fsync, rename, truncate without an open file), so lookup,
getattr and readdir never touch the database.

Roles of inodes:

    ROOT ─ KIND (user/, agent/) ─ OWNER ─ TYPEDIR ─ NODE ─ TIER (L0.md, L1.md, L2.md)
                                    │        │        ├── META (meta.yaml), HISTORY ─ VERSION
                                    │        │        └── ATTACH (any other file, dir, symlink)
                                    │        └── DROP (a file to route), SCRATCH (editor files)
                                    └─ TRASH ─ TRASH_TYPE ─ NODE (soft-deleted, read-only view)
    ROOT ─ SCHEMAS ─ SCHEMA_FILE;  ROOT ─ STATUS

For a singleton type (e.g. profile) the type directory is itself the NODE.
"""

from __future__ import annotations

import enum
import errno
import logging
import os
import re
import stat
import time
import urllib.parse
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from contextfs.ctxtypes import ContextType
from contextfs.errors import (
    ContextFSError,
    Exists,
    InvalidInput,
    NameTooLong,
    NotEmpty,
    NotFound,
    NotSupported,
    ReadOnly,
    TooBig,
)
from contextfs.memory.redact import secret_filename_reason
from contextfs.memory.service import ATTACHMENT_CHUNK, Memory, decode_text
from contextfs.model import Attachment, Node

log = logging.getLogger(__name__)

NAME_MAX = 255
TIER_FILES = {"L0.md": "L0", "L1.md": "L1", "L2.md": "L2"}
META_FILE = "meta.yaml"
HISTORY_DIR = ".history"
TRASH_DIR = ".trash"
ARCHIVE_DIR = ".archive"  # consolidation puts nodes below their minimum importance here
RESERVED_IN_NODE = set(TIER_FILES) | {META_FILE, HISTORY_DIR}

# Editor scratch files (SPEC §3): accepted anywhere a file may be created, never memory.
_EDITOR_SCRATCH = re.compile(r"(\.sw[a-p]$|~$|^4913$|^\.#|^#.*#$)")
# In a type directory, also the temporary names of atomic writers (rsync, sed -i,
# Python's tempfile, *.tmp) and hidden files: they are routed only once renamed.
_TYPE_DIR_TEMP = re.compile(r"(^\.|^tmp[a-z0-9_]{6,}$|^sed[A-Za-z0-9]{6}$|\.tmp$|^[0-9]+$)")
_ROUTABLE_IN_SINGLETON = re.compile(r"\.(md|markdown|txt)$")


def is_editor_scratch(name: str) -> bool:
    return bool(_EDITOR_SCRATCH.search(name))


class Role(enum.Enum):
    ROOT = "root"
    KIND = "kind"
    OWNER = "owner"
    TYPEDIR = "typedir"
    NODE = "node"
    TIER = "tier"
    META = "meta"
    HISTORY = "history"
    VERSION = "version"
    ATTACH = "attach"
    SCRATCH = "scratch"
    DROP = "drop"
    SCHEMAS = "schemas"
    SCHEMA_FILE = "schema_file"
    STATUS = "status"
    TRASH = "trash"
    TRASH_TYPE = "trash_type"
    QUERYROOT = "queryroot"  # <dir>/.query
    QUERYOPTS = "queryopts"  # <dir>/.query/@k=5,...
    QUERY = "query"  # <dir>/.query/[@opts/]<question>
    QLINK = "qlink"  # 01_<name> -> the node
    QFILE = "qfile"  # _context.md, _results.json
    INBOX = "inbox"  # <owner>/.inbox (and the root's, for the default owner)
    INBOX_NEW = "inbox_new"  # a file being written into an inbox
    INBOX_ITEM = "inbox_item"  # what was handed in (read-only)
    INBOX_REPORT = "inbox_report"  # <name>.report.md: what processing it did
    SESSIONS = "sessions"  # <owner>/.sessions
    SESSION = "session"  # .sessions/<id>
    SESSION_CONTEXT = "session_context"  # context.md
    SESSION_TRANSCRIPT = "session_transcript"  # transcript.jsonl (append-only)
    SESSION_CONTROL = "session_control"  # control: write compact | end


# Roles whose content is generated on open (read-only, may change between opens).
_GENERATED = {Role.STATUS}
_READ_ONLY_FILES = {Role.META, Role.VERSION, Role.SCHEMA_FILE, Role.STATUS, Role.QFILE,
                    Role.INBOX_ITEM, Role.INBOX_REPORT, Role.SESSION_CONTEXT}
INBOX_DIR, SESSIONS_DIR = ".inbox", ".sessions"
QUERY_DIR = ".query"
_QUERY_ROLES = {Role.QUERYROOT, Role.QUERYOPTS, Role.QUERY, Role.QLINK, Role.QFILE}
# Never cached by the kernel, so the daemon never has to invalidate their names (a name
# invalidation from a thread can hang a daemon being killed): query results, and files
# that vanish once routed.
_VOLATILE = _QUERY_ROLES | {Role.DROP, Role.SCRATCH, Role.INBOX_NEW, Role.INBOX_REPORT,
                            Role.SESSION_CONTEXT}
_GENERATED |= {Role.INBOX_REPORT, Role.SESSION_CONTEXT}


class SessionAction(Exception):  # noqa: N818 - a signal to the adapter, not an error
    """`compact` / `end` of a session: the adapter extracts off the event loop first."""

    def __init__(self, session: object, command: str, inode: Inode | None = None) -> None:
        super().__init__(command)
        self.session = session
        self.command = command
        self.inode = inode


class QueryPending(Exception):  # noqa: N818 - a signal to the adapter, not an error
    """A lookup that needs a search: the adapter runs it off the event loop and calls
    `Tree.install_query` with the results."""

    def __init__(self, parent: Inode, name: str, scope: str, options: object,
                 question: str) -> None:
        super().__init__(question)
        self.parent = parent
        self.name = name
        self.scope = scope
        self.options = options
        self.question = question


@dataclass(eq=False, slots=True)
class Inode:
    ino: int
    role: Role
    mode: int
    name: str
    parent: Inode | None
    uid: int
    gid: int
    mtime_ns: int
    atime_ns: int = 0
    ctime_ns: int = 0
    children: dict[str, Inode] | None = None
    populated: bool = True
    data: bytearray | None = None
    target: bytes | None = None
    node: Node | None = None
    att: Attachment | None = None
    owner: tuple[str, str] | None = None
    ctype: ContextType | None = None
    tier: str | None = None
    version: int = 0
    dirty: bool = False
    opened: int = 0
    lookups: int = 0
    drop_id: int | None = None
    trashed: bool = False
    att_rescan: bool = False
    ndirs: int = 0  # child directories, for st_nlink
    _sorted: list[tuple[int, str]] | None = None
    # the kernel may cache what this shows (a directory: its listing, since it was last
    # listed; meta.yaml: its size and pages): a change made by the daemon must invalidate
    listed: bool = False
    scope: str | None = None  # query roles: the searched subtree ('' = everything)
    qopts: object | None = None  # query roles: the QueryOptions
    qgen: int = -1  # QUERY: the index generation its results reflect
    # ATTACH: which bytes of `data` differ from what is stored (None: unknown, all of it)
    changed: ChangedBytes | None = None

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.mode)


class ChangedBytes:
    """The bytes of an attachment's buffer written since it was last stored or loaded.

    Kept per store chunk (one span [lo, hi) per chunk, widened to cover each write), so
    marking a write costs O(chunks it touches) however many writes come before a commit,
    and a commit learns which chunks to store and which bytes to scan for secrets. An
    empty span marks where the file was cut short. It describes `buffer` only: a commit
    of any other buffer (the inode's data was replaced) stores everything.
    """

    __slots__ = ("buffer", "_spans")

    def __init__(self, buffer: bytearray) -> None:
        self.buffer = buffer
        self._spans: dict[int, list[int]] = {}

    def add(self, start: int, end: int) -> None:
        first = start // ATTACHMENT_CHUNK
        for i in range(first, max(first, (end - 1) // ATTACHMENT_CHUNK) + 1):
            lo = max(start, i * ATTACHMENT_CHUNK)
            hi = min(end, (i + 1) * ATTACHMENT_CHUNK) if end > start else lo
            span = self._spans.get(i)
            if span is None:
                self._spans[i] = [lo, hi]
            else:
                span[0], span[1] = min(span[0], lo), max(span[1], hi)

    def runs(self) -> list[tuple[int, int]]:
        """The changed ranges, adjacent ones merged, in order."""
        out: list[tuple[int, int]] = []
        for i in sorted(self._spans):
            lo, hi = self._spans[i]
            if out and out[-1][1] >= lo:
                out[-1] = (out[-1][0], max(out[-1][1], hi))
            else:
                out.append((lo, hi))
        return out


@dataclass(slots=True)
class Handle:
    fh: int
    inode: Inode
    flags: int
    snapshot: bytes | None = None
    wrote: bool = False
    failed: bool = False  # a write on it was refused: later writes are refused too

    @property
    def writable(self) -> bool:
        return (self.flags & os.O_ACCMODE) != os.O_RDONLY


@dataclass(frozen=True, slots=True)
class Attr:
    ino: int
    mode: int
    nlink: int
    uid: int
    gid: int
    size: int
    atime_ns: int
    mtime_ns: int
    ctime_ns: int
    generated: bool = False  # content computed per open: the kernel must not cache it
    volatile: bool = False  # a query result: the kernel must ask again on every lookup


@dataclass(slots=True)
class Invalidation:
    ino: int
    name: str | None = None  # set: forget the entry name in directory ino
    attr_only: bool = False
    listing: bool = False  # a directory's entries changed: drop the kernel's cached listing


def _ns(ts: float) -> int:
    return int(ts * 1e9)


class Tree:
    """The inode table and every filesystem operation, in plain Python."""

    def __init__(self, memory: Memory, *, uid: int | None = None, gid: int | None = None,
                 status: Callable[[], str] | None = None, schema_files: dict[str, bytes]
                 | None = None, search_generation: Callable[[], int] | None = None,
                 parse_options: Callable[[str], object] | None = None,
                 intake: object | None = None) -> None:
        self.memory = memory
        self.uid = os.getuid() if uid is None else uid
        self.gid = os.getgid() if gid is None else gid
        self.status_text = status or (lambda: "")
        self.schema_files = schema_files or {}
        self.inodes: dict[int, Inode] = {}
        self.handles: dict[int, Handle] = {}
        self._next_ino = 1
        self._next_fh = 1
        self.invalidations: list[Invalidation] = []
        self._att_children: dict[tuple[int, int | None], list[Attachment]] = {}
        self.search_generation = search_generation
        self.parse_options = parse_options or (lambda seg: None)
        self.intake = intake  # contextfs.conversations.inbox.Intake, when the inbox is on
        self.query_roots: dict[int, Inode] = {}
        self._file_cache: dict[int, bytes] = {}
        self._meta_cache: dict[int, tuple[tuple, bytes]] = {}
        self._build()

    # ---- building -----------------------------------------------------------------------

    def _new(self, role: Role, mode: int, name: str, parent: Inode | None, **kw) -> Inode:
        ino = self._next_ino
        self._next_ino += 1
        now = time.time_ns()
        inode = Inode(ino=ino, role=role, mode=mode, name=name, parent=parent,
                      uid=kw.pop("uid", self.uid), gid=kw.pop("gid", self.gid),
                      mtime_ns=kw.pop("mtime_ns", now), atime_ns=now, ctime_ns=now, **kw)
        if stat.S_ISDIR(mode) and inode.children is None:
            inode.children = {}
        self.inodes[ino] = inode
        if parent is not None:
            self._link(parent, inode)
        return inode

    def _link(self, parent: Inode, child: Inode) -> None:
        assert parent.children is not None
        old = parent.children.get(child.name)
        if old is not None and old.is_dir:
            parent.ndirs -= 1
        parent.children[child.name] = child
        child.parent = parent
        self._listing_changed(parent)
        if child.is_dir:
            parent.ndirs += 1

    def _unlink(self, child: Inode) -> None:
        parent = child.parent
        if parent is not None and parent.children is not None:
            if parent.children.get(child.name) is child:
                del parent.children[child.name]
                self._listing_changed(parent)
                if child.is_dir:
                    parent.ndirs -= 1
            parent.mtime_ns = time.time_ns()
        child.parent = None
        self._maybe_free(child)

    def _maybe_free(self, inode: Inode) -> None:
        if inode.parent is None and inode.lookups <= 0 and inode.opened <= 0 and inode.ino != 1:
            self.inodes.pop(inode.ino, None)

    def _dir(self, role: Role, name: str, parent: Inode | None, mode: int = 0o755, **kw):
        return self._new(role, stat.S_IFDIR | mode, name, parent, **kw)

    def _build(self) -> None:
        m = self.memory
        for a in m.attachments.values():
            if a.deleted_at is None:
                self._att_children.setdefault((a.node_id, a.parent_id), []).append(a)
        self.root = self._dir(Role.ROOT, "", None)
        self.kinds = {k: self._dir(Role.KIND, k, self.root) for k in ("user", "agent")}
        schemas = self._dir(Role.SCHEMAS, ".schemas", self.root, 0o555)
        for fname in sorted(self.schema_files):
            self._new(Role.SCHEMA_FILE, stat.S_IFREG | 0o444, fname, schemas)
        self._new(Role.STATUS, stat.S_IFREG | 0o444, ".status", self.root)
        if self.search_generation is not None:
            self._query_root(self.root)
        self._add_intake_dirs(self.root, ("user", self.memory.default_owner))
        self.owner_dirs: dict[tuple[str, str], Inode] = {}
        for owner in sorted(m.owners):
            self._add_owner(owner)
        for n in m.nodes.values():
            self._place_node(n)

    def _add_owner(self, owner: tuple[str, str]) -> Inode:
        od = self._dir(Role.OWNER, owner[1], self.kinds[owner[0]], owner=owner)
        self.owner_dirs[owner] = od
        for t in self.memory.types_for(owner[0]):
            if t.singleton:
                self._dir(Role.NODE, t.type_dir, od, owner=owner, ctype=t, populated=False)
            else:
                self._dir(Role.TYPEDIR, t.type_dir, od, owner=owner, ctype=t)
        self._dir(Role.TRASH, TRASH_DIR, od, 0o755, owner=owner)
        self._dir(Role.TRASH, ARCHIVE_DIR, od, 0o755, owner=owner)
        self._add_intake_dirs(od, owner)
        return od

    def _place_node(self, n: Node) -> Inode | None:
        """Put a node's directory where it belongs (its type dir, or the owner's trash)."""
        od = self.owner_dirs.get(n.owner)
        ctype = self.memory.types.get(n.type)
        if od is None or ctype is None:
            return None
        if n.deleted_at is not None or n.archived_at is not None:
            trash = od.children[TRASH_DIR if n.deleted_at is not None else ARCHIVE_DIR]
            tt = trash.children.get(ctype.type_dir)
            if tt is None:
                tt = self._dir(Role.TRASH_TYPE, ctype.type_dir, trash, owner=n.owner,
                               ctype=ctype)
            name = n.name or ctype.type_dir
            if name in tt.children:
                name = f"{name}.{n.id}"
            return self._dir(Role.NODE, name, tt, owner=n.owner, ctype=ctype, node=n,
                             populated=False, trashed=True, mtime_ns=_ns(n.updated))
        if ctype.singleton:
            d = od.children.get(ctype.type_dir)
            if d is not None:
                d.node = n
                d.populated = False
                d.children = {k: v for k, v in d.children.items()
                              if v.role in (Role.DROP, Role.SCRATCH)}
                self._listing_changed(d)
                d.ndirs = 0
            return d
        td = od.children.get(ctype.type_dir)
        if td is None:
            return None
        return self._dir(Role.NODE, n.name, td, owner=n.owner, ctype=ctype, node=n,
                         populated=False, mtime_ns=_ns(n.updated))

    def _populate(self, d: Inode) -> None:
        """Create a node directory's children on first use (cheap start for big stores)."""
        if d.populated:
            return
        d.populated = True
        n = d.node
        if d.role == Role.HISTORY:
            for version, created, _size in n.history:
                self._new(Role.VERSION, stat.S_IFREG | 0o444, f"v{version}.md", d, node=n,
                          version=version, mtime_ns=_ns(created))
            return
        if n is None:  # a singleton node not written yet: an empty directory
            return
        if d.trashed or n.deleted_at is not None or d.att_rescan:
            d.att_rescan = False
            for key in [k for k in self._att_children if k[0] == n.id]:
                del self._att_children[key]
            for a in self.memory.node_attachments(n):
                self._att_children.setdefault((n.id, a.parent_id), []).append(a)
        ro = 0o444 if d.trashed else 0o644
        for fname, tier in TIER_FILES.items():
            if fname not in d.children:
                self._new(Role.TIER, stat.S_IFREG | ro, fname, d, node=n, tier=tier)
        self._new(Role.META, stat.S_IFREG | 0o444, META_FILE, d, node=n)
        self._dir(Role.HISTORY, HISTORY_DIR, d, 0o555, node=n, populated=False)
        self._add_attachments(d, n, None)
        if d.trashed:
            self._retag(d, trashed=True)

    def _add_attachments(self, d: Inode, n: Node, parent_id: int | None) -> None:
        for a in self._att_children.pop((n.id, parent_id), []):
            self._attach_inode(d, n, a)

    def _attach_inode(self, d: Inode, n: Node, a: Attachment) -> Inode:
        kind = {"file": stat.S_IFREG, "dir": stat.S_IFDIR, "symlink": stat.S_IFLNK}[a.kind]
        inode = self._new(Role.ATTACH, kind | a.mode, a.name, d, node=n, att=a,
                          target=a.target, mtime_ns=_ns(a.mtime), trashed=d.trashed)
        if a.kind == "dir":
            inode.populated = False
        return inode

    def _ensure(self, d: Inode) -> None:
        if not d.populated:
            if d.role in (Role.INBOX, Role.SESSIONS):
                self._populate_intake(d)
            elif d.role == Role.ATTACH:
                d.populated = True
                self._add_attachments(d, d.node, d.att.id)
            else:
                self._populate(d)

    # ---- helpers ------------------------------------------------------------------------

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

    def _child_path(self, parent: Inode, name: str) -> str:
        p = self.path(parent)
        return name if p == "/" else f"{p}/{name}"

    def _listing_changed(self, d: Inode) -> None:
        """d's entries changed: drop the sorted view, and the kernel's cached listing
        if it may hold one (see docs/architecture.md, "Directory listings")."""
        d._sorted = None
        if d.listed:
            d.listed = False
            # a new mtime resets the kernel's cache even where dropping pages cannot (an
            # empty listing has none), and POSIX moves a directory's mtime on a change
            d.mtime_ns = max(time.time_ns(), d.mtime_ns + 1)
            self.invalidations.append(Invalidation(d.ino, listing=True))

    def _invalidate(self, inode: Inode | None, *, attr_only: bool = False) -> None:
        if inode is not None:
            self._file_cache.pop(inode.ino, None)
            self.invalidations.append(Invalidation(inode.ino, attr_only=attr_only))

    @staticmethod
    def _check_name(name: str) -> None:
        raw = os.fsencode(name)
        if len(raw) > NAME_MAX:
            raise NameTooLong(f"a name is limited to {NAME_MAX} bytes")
        if "\x00" in name:
            raise InvalidInput("names cannot contain NUL")
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidInput("names must be UTF-8 (the store keeps text names)") from None

    def _node_of(self, d: Inode) -> Node | None:
        return d.node

    def _file_bytes(self, inode: Inode) -> bytes | bytearray:
        """Current content of a regular file (what a read returns)."""
        if inode.data is not None:
            return inode.data
        role = inode.role
        if role == Role.TIER:
            cached = self._file_cache.get(inode.ino)
            if cached is None:
                cached = inode.node.tier(inode.tier).encode("utf-8")
                self._file_cache[inode.ino] = cached
            return cached
        if role == Role.ATTACH:
            inode.data = self.memory.attachment_data(inode.att)
            inode.changed = ChangedBytes(inode.data)
            return inode.data
        if role == Role.META:
            return self._meta_bytes(inode.node)
        if role == Role.VERSION:
            cached = self._file_cache.get(inode.ino)
            if cached is None:
                cached = self.memory.history_text(inode.node, inode.version).encode("utf-8")
                self._file_cache[inode.ino] = cached
            return cached
        if role == Role.SCHEMA_FILE:
            return self.schema_files.get(inode.name, b"")
        if role == Role.STATUS:
            return self.status_text().encode("utf-8")
        if role in (Role.INBOX_ITEM, Role.INBOX_REPORT, Role.SESSION_TRANSCRIPT):
            return self._intake_bytes(inode)
        return b""

    def _meta_bytes(self, n: Node) -> bytes:
        """meta.yaml, rendered again only when a fact it shows has changed."""
        key = (n.version, n.updated, n.indexed_version, n.access_count, n.l0_pinned,
               n.l1_pinned, n.deleted_at, n.name, n.type, n.owner_kind, n.owner_id,
               len(n.sources), n.importance, n.content_hash)
        hit = self._meta_cache.get(n.id)
        if hit is not None and hit[0] == key:
            return hit[1]
        data = self.memory.meta_yaml(n).encode("utf-8")
        self._meta_cache[n.id] = (key, data)
        return data

    def _size(self, inode: Inode) -> int:
        if stat.S_ISLNK(inode.mode):
            return len(inode.target or b"")
        if inode.is_dir:
            return 4096
        if inode.data is not None:
            return len(inode.data)
        if inode.role == Role.VERSION:
            for v, _c, size in inode.node.history:
                if v == inode.version:
                    return size
            return 0
        if inode.role == Role.ATTACH and inode.att is not None:
            return inode.att.size
        if inode.role == Role.INBOX_ITEM:
            return inode.qopts.size
        if inode.role in (Role.SESSION_CONTEXT, Role.SESSION_CONTROL):
            return 0
        return len(self._file_bytes(inode))

    def _unloaded_ndirs(self, d: Inode) -> int:
        """Subdirectories of a directory whose children are not built yet (st_nlink is
        2 + that; `find` relies on it), counted without building them."""
        n = d.node
        if n is None or d.role == Role.HISTORY:
            return 0
        if d.att_rescan or d.trashed:
            self._ensure(d)
            return d.ndirs
        parent_id = d.att.id if d.role == Role.ATTACH and d.att else None
        dirs = sum(1 for a in self._att_children.get((n.id, parent_id), ()) if a.kind == "dir")
        return dirs + (1 if d.role == Role.NODE else 0)  # a node also holds .history

    def _touch_dir(self, d: Inode) -> None:
        """An entry was added to or removed from d: its mtime and ctime move (POSIX), and
        an attachment folder keeps the new mtime across remounts."""
        now = time.time_ns()
        d.mtime_ns = d.ctime_ns = now
        if d.role == Role.ATTACH and d.att is not None and not d.trashed:
            d.att.mtime = now / 1e9
            self.memory.touch_attachment(d.att)

    def attr(self, inode: Inode) -> Attr:
        mtime = inode.mtime_ns
        if inode.role in (Role.TIER, Role.META) and inode.data is None and inode.node:
            mtime = _ns(inode.node.updated)
        if inode.role == Role.META:
            inode.listed = True  # the kernel now caches its size: see _count_read
        nlink = 2 + (inode.ndirs if inode.populated else self._unloaded_ndirs(inode)) \
            if inode.is_dir else 1
        return Attr(inode.ino, inode.mode, nlink, inode.uid, inode.gid, self._size(inode),
                    inode.atime_ns or mtime, mtime, max(inode.ctime_ns, mtime),
                    inode.role in _GENERATED, inode.role in _VOLATILE)

    # ---- lookups and listing ------------------------------------------------------------

    def lookup(self, parent_ino: int, name: str) -> Inode:
        parent = self.get(parent_ino)
        if not parent.is_dir:
            raise ContextFSError("not a directory", errno=errno.ENOTDIR)
        if name == ".":
            return parent
        if name == "..":
            return parent.parent or parent
        if parent.role in (Role.QUERYROOT, Role.QUERYOPTS):
            return self._query_lookup(parent, name)
        if name == QUERY_DIR and parent.role not in _QUERY_ROLES:
            return self._query_root(parent)
        self._ensure(parent)
        child = parent.children.get(name)
        if child is None:
            raise NotFound(f"{self._child_path(parent, name)} does not exist")
        return child

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
            raise ContextFSError("not a directory", errno=errno.ENOTDIR)
        if d.role in (Role.QUERYROOT, Role.QUERYOPTS):
            return  # questions are asked by name, never listed
        self._ensure(d)
        d.listed = True
        if d._sorted is None:
            d._sorted = sorted((c.ino, name) for name, c in d.children.items())
        entries = d._sorted
        start = bisect_right(entries, (off, "\U0010ffff")) if off else 0
        children = d.children
        for i in range(start, len(entries)):
            ino, name = entries[i]
            child = children.get(name)
            if child is not None and child.ino == ino:
                yield name, child, ino

    # ---- inbox and sessions (SPEC §5, §6) ---------------------------------------------------

    def _add_intake_dirs(self, d: Inode, owner: tuple[str, str]) -> None:
        if self.intake is None:
            return
        self._dir(Role.INBOX, INBOX_DIR, d, 0o755, owner=owner, populated=False)
        self._dir(Role.SESSIONS, SESSIONS_DIR, d, 0o755, owner=owner, populated=False)

    def _populate_intake(self, d: Inode) -> None:
        d.populated = True
        if d.role == Role.INBOX:
            for item in self.intake.items.values():
                if item.owner == d.owner:
                    self._show_item(d, item)
        elif d.role == Role.SESSIONS:
            for (kind, oid, _sid), sess in self.intake.sessions.items():
                if (kind, oid) == d.owner:
                    self._show_session(d, sess)

    def _show_item(self, d: Inode, item) -> Inode:
        name = item.filename
        if name in d.children:
            stem, dot, ext = name.rpartition(".")
            name = f"{stem}-{item.id}.{ext}" if dot and stem else f"{name}-{item.id}"
        inode = self._new(Role.INBOX_ITEM, stat.S_IFREG | 0o444, name, d, owner=d.owner,
                          mtime_ns=_ns(item.created))
        inode.qopts = item  # the item this file shows
        report = self._new(Role.INBOX_REPORT, stat.S_IFREG | 0o444, name + ".report.md", d,
                           owner=d.owner, mtime_ns=_ns(item.created))
        report.qopts = item
        return inode

    def _show_session(self, d: Inode, sess) -> Inode:
        sd = self._dir(Role.SESSION, sess.id, d, 0o755, owner=d.owner, mtime_ns=_ns(
            sess.created))
        sd.qopts = sess
        for name, role, mode in (("context.md", Role.SESSION_CONTEXT, 0o444),
                                 ("transcript.jsonl", Role.SESSION_TRANSCRIPT, 0o644),
                                 ("control", Role.SESSION_CONTROL, 0o644)):
            f = self._new(role, stat.S_IFREG | mode, name, sd, owner=d.owner)
            f.qopts = sess
        return sd

    def _intake_bytes(self, inode: Inode) -> bytes:
        if inode.role == Role.INBOX_ITEM:
            return self.intake.item_data(inode.qopts)
        if inode.role == Role.INBOX_REPORT:
            item = inode.qopts
            return (item.report or f"# {item.filename}\n\nstate: {item.state} (waiting to be "
                    "processed)\n").encode()
        if inode.role == Role.SESSION_TRANSCRIPT:
            return inode.qopts.transcript.encode()
        return b""

    def inbox_changed(self) -> None:
        """Processing moved on: reports and new nodes show the new state."""
        for inode in list(self.inodes.values()):
            if inode.role == Role.INBOX_REPORT:
                self._invalidate(inode)

    # ---- query directories (SPEC §4) ------------------------------------------------------

    def _query_root(self, d: Inode) -> Inode:
        """`.query` exists in every directory; only the root lists it (so `find` and
        `ls -R` never wander into the others)."""
        root = self.query_roots.get(d.ino)
        if root is None:
            listed = d is self.root
            root = self._new(Role.QUERYROOT, stat.S_IFDIR | 0o555, QUERY_DIR,
                             d if listed else None, scope="" if listed else self.path(d))
            root.parent = d  # a virtual child: its path is d's path + /.query
            self.query_roots[d.ino] = root
        return root

    def _query_lookup(self, d: Inode, name: str) -> Inode:
        if self.search_generation is None:
            raise ContextFSError("search is not available in this mount", errno=errno.ENOENT)
        if d.role == Role.QUERYROOT and name.startswith("@"):
            opts = d.children.get(name)
            if opts is None:
                parsed = self.parse_options(name)
                opts = self._new(Role.QUERYOPTS, stat.S_IFDIR | 0o555, name, d,
                                 scope=d.scope, qopts=parsed)
            return opts
        cached = d.children.get(name)
        if cached is not None and cached.qgen == self.search_generation():
            return cached
        question = urllib.parse.unquote(name)
        raise QueryPending(d, name, d.scope, d.qopts, question)

    def install_query(self, q: QueryPending, generation: int,
                      hits: list[tuple[str, str]], files: dict[str, bytes]) -> Inode:
        """Make the directory for a computed query: hits are (node path, node dir name)."""
        d = q.parent
        old = d.children.get(q.name)
        if old is not None:
            if old.qgen == generation:
                return old
            self._drop_query(old)
        qd = self._new(Role.QUERY, stat.S_IFDIR | 0o555, q.name, d, scope=q.scope,
                       qopts=q.options, qgen=generation)
        depth = self.path(qd).count("/") + 1
        for i, (node_path, dirname) in enumerate(hits):
            target = ("../" * depth + node_path).encode()
            self._new(Role.QLINK, stat.S_IFLNK | 0o777, f"{i + 1:02d}_{dirname}", qd,
                      target=target)
        for fname, data in files.items():
            self._new(Role.QFILE, stat.S_IFREG | 0o444, fname, qd, data=bytearray(data))
        return qd

    def refresh_nodes(self, nodes: list[Node]) -> None:
        """Nodes changed outside a request (consolidation): show each where it now is."""
        for n in nodes:
            od = self.owner_dirs.get(n.owner)
            ctype = self.memory.types.get(n.type)
            if od is None or ctype is None:
                continue
            td = od.children.get(ctype.type_dir)
            shown = td if ctype.singleton else (td.children.get(n.name) if td else None)
            if shown is not None and shown.node is n and not self.memory.is_live(n):
                if ctype.singleton:
                    shown.node, shown.children, shown.populated, shown.ndirs = None, {}, \
                        True, 0
                    self._listing_changed(shown)
                    self._invalidate(shown)
                else:
                    self._unlink(shown)
                self._place_node(n)
            else:
                self._node_changed(n)

    def nodes_indexed(self, node_ids: list[int]) -> None:
        """The indexer caught up with these nodes: their meta.yaml shows it."""
        for nid in node_ids:
            n = self.memory.nodes.get(nid)
            d = self._node_inode(n) if n is not None else None
            meta = d.children.get(META_FILE) if d is not None and d.populated else None
            if meta is not None:
                self._invalidate(meta)

    def _drop_query(self, qd: Inode) -> None:
        for c in list(qd.children.values()):
            self._unlink(c)
        self._unlink(qd)

    def readlink(self, ino: int) -> bytes:
        inode = self.get(ino)
        if not stat.S_ISLNK(inode.mode):
            raise InvalidInput("not a symbolic link")
        return inode.target or b""

    # ---- opening, reading, writing ------------------------------------------------------

    def _writable_file(self, inode: Inode) -> None:
        if inode.role in _READ_ONLY_FILES or inode.trashed:
            what = "a deleted node (restore it with mv first)" if inode.trashed else \
                f"{inode.name} (derived, read-only)"
            raise ReadOnly(f"cannot write {what}")
        self.memory.check_writable()

    def open(self, ino: int, flags: int) -> Handle:
        inode = self.get(ino)
        if inode.is_dir:
            raise ContextFSError("is a directory", errno=errno.EISDIR)
        h = Handle(self._next_fh, inode, flags)
        self._next_fh += 1
        if h.writable or flags & os.O_TRUNC:
            self._writable_file(inode)
            if flags & os.O_TRUNC and inode.role == Role.ATTACH:
                if inode.data is None:  # no need to load what is cut away
                    inode.data = bytearray()
                    inode.changed = ChangedBytes(inode.data)
                self._resize(inode, 0)
            elif inode.data is None:
                self._load_buffer(inode)
            if flags & os.O_TRUNC:  # POSIX: the mtime moves even if it was empty
                if inode.role != Role.ATTACH:
                    inode.data = bytearray()
                inode.dirty = True
                inode.mtime_ns = inode.ctime_ns = time.time_ns()
        if inode.role in _GENERATED:
            h.snapshot = bytes(self._file_bytes(inode))
        elif inode.role == Role.TIER and not h.writable and inode.node is not None:
            self._count_read(inode)
        if inode.role == Role.META:
            inode.listed = True
        self.handles[h.fh] = h
        inode.opened += 1
        return h

    def _count_read(self, tier: Inode) -> None:
        """Reads through the mount count (SPEC §7), and meta.yaml shows the count: forget
        what the kernel cached of meta.yaml, once until it is looked at again."""
        self.memory.record_access(tier.node)
        meta = tier.parent.children.get(META_FILE) if tier.parent is not None else None
        if meta is not None and meta.listed:
            meta.listed = False
            self._invalidate(meta)

    def handle(self, fh: int) -> Handle:
        try:
            return self.handles[fh]
        except KeyError:
            raise ContextFSError("bad file handle", errno=errno.EBADF) from None

    def read(self, fh: int, off: int, size: int) -> bytes:
        h = self.handle(fh)
        data = h.snapshot if h.snapshot is not None else self._file_bytes(h.inode)
        return bytes(data[off:off + size])

    def write(self, fh: int, off: int, buf: bytes) -> int:
        h = self.handle(fh)
        inode = h.inode
        if not h.writable:
            raise ContextFSError("file not open for writing", errno=errno.EBADF)
        if inode.data is None:
            self._load_buffer(inode)
        if h.flags & os.O_APPEND:
            off = len(inode.data)
        limit = self._limit(inode)
        if h.failed or off + len(buf) > limit:
            exc = TooBig(f"{inode.name} would exceed the {limit}-byte limit; the write was "
                         "refused and the stored content is unchanged")
            if not h.failed:
                h.failed = True
                self._abandon_write(inode, exc)
            raise exc
        data = inode.data
        old_size = len(data)
        if off > old_size:
            data.extend(bytes(off - old_size))
        data[off:off + len(buf)] = buf
        self._mark_changed(inode, min(off, old_size), off + len(buf))
        inode.dirty = True
        h.wrote = True
        inode.mtime_ns = time.time_ns()
        return len(buf)

    def _abandon_write(self, inode: Inode, exc: ContextFSError) -> None:
        """A write was refused midway: drop what this save wrote so far, so the stored
        content stays as it was (nothing half-written is ever committed)."""
        self._refuse(inode, exc, None)
        inode.dirty = False
        if inode.role in (Role.TIER, Role.ATTACH):
            inode.data, inode.changed = None, None
            self._invalidate(inode)
        elif inode.role == Role.DROP:
            inode.data = bytearray()
            if inode.parent is not None:
                self._unlink(inode)

    def _load_buffer(self, inode: Inode) -> bytearray:
        """inode.data, loaded for writing (an attachment's buffer is loaded only once)."""
        data = self._file_bytes(inode)
        if inode.data is None:
            inode.data = bytearray(data)
        return inode.data

    def _mark_changed(self, inode: Inode, start: int, end: int) -> None:
        """Bytes [start, end) of an attachment's buffer were written (start == end: the
        file ends there now); the next commit stores the chunks they touch."""
        if inode.changed is not None and inode.changed.buffer is inode.data:
            inode.changed.add(start, end)

    def _resize(self, inode: Inode, size: int) -> None:
        """ftruncate of a loaded buffer: cut, or extend with zeros (a hole)."""
        data = inode.data
        old = len(data)
        if size < old:
            del data[size:]
        elif size > old:
            data.extend(bytes(size - old))
        self._mark_changed(inode, min(old, size), size)

    def _limit(self, inode: Inode) -> int:
        if inode.role in (Role.TIER, Role.DROP):
            return self.memory.max_tier_size
        return self.memory.max_file_size

    def flush(self, fh: int) -> None:
        """close(): the commit point for written bytes, and routing for dropped files.

        flush comes for every close() of every descriptor, also for the one a shell
        closes right after dup2 of a freshly truncated file, before anything is written.
        So flush commits only what this handle wrote; a truncation alone is committed at
        release (or fsync), which keeps "one save, one version" for `> file`.
        """
        h = self.handle(fh)
        inode = h.inode
        if not h.wrote:
            return
        h.wrote = False
        if inode.role in (Role.INBOX_NEW, Role.SESSION_TRANSCRIPT, Role.SESSION_CONTROL):
            self._commit_intake(inode)
            return
        if inode.role == Role.DROP:
            if inode.dirty and inode.data:
                self._route_drop(inode)
        elif inode.dirty:
            self._commit(inode)

    def _commit_intake(self, inode: Inode) -> None:
        data = bytes(inode.data or b"")
        if inode.role == Role.INBOX_NEW:
            if not data or inode.parent is None:
                return
            parent = inode.parent
            item = self.intake.submit(parent.owner, inode.name, data)
            self._unlink(inode)  # the stored item (redacted) takes its place
            self._show_item(parent, item)
            inode.dirty = False
        elif inode.role == Role.SESSION_TRANSCRIPT:
            sess = inode.qopts
            old = sess.transcript.encode()
            if not data.startswith(old):
                inode.data, inode.dirty = None, False
                self._invalidate(inode)
                exc = InvalidInput("transcript.jsonl is append-only: add lines with >>")
                self._refuse(inode, exc, data[len(old):] or data)
                raise exc
            self.intake.record(sess, data[len(old):])
            inode.data, inode.dirty = None, False
            self._invalidate(inode, attr_only=True)
        elif inode.role == Role.SESSION_CONTROL:
            command = data.decode(errors="replace").strip().lower()
            inode.data, inode.dirty = None, False
            if command not in ("compact", "end", ""):
                raise InvalidInput(f"unknown session command {command!r}: use compact or end")
            if command:
                raise SessionAction(inode.qopts, command, inode.parent)

    def session_ended(self, sd: Inode) -> None:
        """After `end` (or rmdir): the session directory is gone."""
        if sd.parent is not None:
            for c in list(sd.children.values()):
                self._unlink(c)
            self._unlink(sd)

    def fsync(self, fh: int) -> bool:
        """Returns whether a node's text was committed (the adapter then waits for the
        index: fsync is a search barrier)."""
        h = self.handle(fh)
        inode = h.inode
        if inode.role in (Role.INBOX_NEW, Role.SESSION_TRANSCRIPT):
            if inode.dirty:
                h.wrote = False
                self._commit_intake(inode)
            return False
        if inode.role == Role.DROP:
            if inode.dirty and inode.data:
                if inode.drop_id is None:
                    inode.drop_id = self.memory.new_id()
                self.memory.persist_drop(inode.drop_id, inode.owner, inode.ctype, inode.name,
                                         bytes(inode.data))
            return False
        if inode.dirty:
            self._commit(inode)
        return inode.role == Role.TIER

    def release(self, fh: int) -> None:
        h = self.handles.pop(fh, None)
        if h is None:
            return
        inode = h.inode
        inode.opened -= 1
        if inode.opened <= 0:
            inode.opened = 0
            try:
                if inode.role == Role.DROP:
                    if inode.dirty and inode.data:
                        self._route_drop(inode)
                    elif inode.parent is not None and not inode.data:
                        self._unlink(inode)  # an empty drop (touch) is not a memory
                elif inode.dirty and inode.parent is not None:
                    self._commit(inode)
            except ContextFSError:
                pass  # already recorded in .status by the commit
            if not inode.dirty and (inode.role == Role.TIER or (
                    inode.role == Role.ATTACH and len(inode.data or b"") > 256 * 1024)):
                inode.data = None  # served from the node / reloaded on demand
                inode.changed = None
        self._maybe_free(inode)

    # ---- commits ------------------------------------------------------------------------

    def _refuse(self, inode: Inode, exc: ContextFSError, data: bytes | None) -> None:
        path = self.path(inode) if inode.parent is not None else inode.name
        r = self.memory.refuse(path, exc, data)
        exc.recorded = True  # the adapter must not record it twice
        if r.kept_at:
            exc.reason = f"{exc.reason} (your bytes are kept at {r.kept_at})"

    def _commit(self, inode: Inode) -> None:
        """Make an inode's written bytes durable according to its role."""
        role = inode.role
        if role == Role.SCRATCH or inode.data is None:
            inode.dirty = False
            return
        try:
            if role == Role.TIER:
                self._save_tier(inode, inode.node, inode.tier, bytes(inode.data))
            elif role == Role.ATTACH and inode.att is not None:
                self._commit_attachment(inode)
        except ContextFSError as exc:
            self._refuse(inode, exc, bytes(inode.data))
            inode.dirty = False
            if role == Role.TIER:
                inode.data = None if inode.opened <= 0 else bytearray(
                    inode.node.tier(inode.tier).encode("utf-8"))
                self._invalidate(inode)
            raise
        inode.dirty = False

    def _commit_attachment(self, inode: Inode) -> None:
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
        changed = inode.changed
        runs = changed.runs() if changed is not None and changed.buffer is inode.data \
            else None
        stored = self.memory.commit_attachment(inode.att, inode.data, inode.mtime_ns / 1e9,
                                               self.path(inode), runs)
        if stored is not None:  # a secret was redacted: show what is stored
            inode.data = bytearray(stored)
            self._invalidate(inode)
        inode.changed = ChangedBytes(inode.data)

    def _save_tier(self, inode: Inode, n: Node, tier: str, data: bytes) -> bool:
        text = decode_text(data, f"{tier}.md")
        if tier == "L2":
            changed = self.memory.save_l2(n, text)
        else:
            changed = self.memory.save_pinned(n, tier, text)
        if changed:
            self._node_changed(n, writer=inode)
            stored = n.tier(tier).encode("utf-8")
            if stored != data:  # a secret was redacted: the file shows what is stored
                inode.data = bytearray(stored) if inode.opened > 0 else None
                self._invalidate(inode)
        return changed

    def _node_inode(self, n: Node) -> Inode | None:
        od = self.owner_dirs.get(n.owner)
        ctype = self.memory.types.get(n.type)
        if od is None or ctype is None:
            return None
        if n.deleted_at is not None or n.archived_at is not None:
            box = TRASH_DIR if n.deleted_at is not None else ARCHIVE_DIR
            tt = od.children[box].children.get(ctype.type_dir)
            if tt is None:
                return None
            for c in tt.children.values():
                if c.node is n:
                    return c
            return None
        td = od.children.get(ctype.type_dir)
        if td is None or ctype.singleton:
            return td
        return td.children.get(n.name)

    def _node_changed(self, n: Node, writer: Inode | None = None) -> None:
        """The daemon changed a node: refresh what the kernel may have cached about it."""
        d = self._node_inode(n)
        if d is None:
            return
        d.mtime_ns = _ns(n.updated)
        if not d.populated:
            return
        for name in (*TIER_FILES, META_FILE):
            c = d.children.get(name)
            if c is None or c.node is not n:
                continue
            if c is writer:
                self._file_cache.pop(c.ino, None)
                self._invalidate(c, attr_only=True)
            elif c.data is None or not c.dirty:
                if c.opened <= 0:
                    c.data = None
                else:
                    c.data = bytearray(n.tier(c.tier).encode()) if c.tier else None
                self._invalidate(c)
        hist = d.children.get(HISTORY_DIR)
        if hist is not None and hist.populated:
            have = {c.version for c in hist.children.values()}
            for version, created, _size in n.history:
                if version not in have:
                    self._new(Role.VERSION, stat.S_IFREG | 0o444, f"v{version}.md", hist,
                              node=n, version=version, mtime_ns=_ns(created))

    def _route_drop(self, inode: Inode) -> None:
        """A file written into a type directory becomes memory, then leaves the tree."""
        parent = inode.parent
        data = bytes(inode.data or b"")
        inode.dirty = False
        name = inode.name
        try:
            res = self.memory.route(inode.owner, inode.ctype, name, data)
        except ContextFSError as exc:
            self._refuse(inode, exc, data)
            raise
        finally:
            if inode.drop_id is not None:
                self.memory.forget_drop(inode.drop_id)
                inode.drop_id = None
            if parent is not None:
                # drops are never cached by the kernel (volatile): no invalidation needed
                self._unlink(inode)
        self.node_routed(res.node, res.created)

    def node_routed(self, n: Node, created: bool) -> None:
        if created:
            self._place_node(n)  # ENOENT answers are not cached: nothing to invalidate
        else:
            self._node_changed(n)

    # ---- creating -----------------------------------------------------------------------

    def _new_file_role(self, d: Inode, name: str) -> Role:
        if d.role == Role.INBOX:
            if secret_filename_reason(name):
                return Role.INBOX_NEW  # refused when closed, with the reason
            return Role.SCRATCH if is_editor_scratch(name) or _TYPE_DIR_TEMP.search(name) \
                else Role.INBOX_NEW
        if d.role == Role.TYPEDIR:
            return Role.SCRATCH if (is_editor_scratch(name) or _TYPE_DIR_TEMP.search(name)) \
                else Role.DROP
        if d.role == Role.NODE and d.node is None and d.ctype is not None:
            # a singleton that has never been written: only L2.md (or routed drops) make it
            if name in TIER_FILES:
                return Role.TIER
            if is_editor_scratch(name) or _TYPE_DIR_TEMP.search(name):
                return Role.SCRATCH
            return Role.DROP
        if d.role in (Role.NODE, Role.ATTACH):
            if d.trashed:
                raise ReadOnly("a deleted node is read-only; restore it with mv first")
            if is_editor_scratch(name):
                return Role.SCRATCH
            if d.role == Role.NODE and name in TIER_FILES:
                return Role.TIER
            if d.role == Role.NODE and name in RESERVED_IN_NODE:
                raise ReadOnly(f"{name} is derived and read-only")
            if (d.role == Role.NODE and d.ctype is not None and d.ctype.singleton
                    and _ROUTABLE_IN_SINGLETON.search(name)):
                return Role.DROP
            return Role.ATTACH
        raise self._no_files_here(d)

    def _no_files_here(self, d: Inode) -> ContextFSError:
        where = {
            Role.ROOT: "the root holds only user/, agent/ and the dot entries",
            Role.KIND: "this folder holds owners: mkdir an owner id instead",
            Role.OWNER: "an owner holds one folder per context type",
            Role.TRASH: "the trash is managed by rm -r of nodes",
            Role.TRASH_TYPE: "the trash is managed by rm -r of nodes",
        }.get(d.role, f"{d.name or '/'} is read-only")
        return ContextFSError(f"cannot create here: {where}", errno=errno.EACCES)

    def create(self, parent_ino: int, name: str, mode: int, flags: int,
               uid: int, gid: int) -> Handle:
        d = self.get(parent_ino)
        self._check_name(name)
        self._ensure(d)
        if name in d.children:
            if flags & os.O_EXCL:
                raise Exists(f"{self._child_path(d, name)} exists")
            h = self.open(d.children[name].ino, flags)
            return h
        self.memory.check_writable()
        role = self._new_file_role(d, name)
        perm = stat.S_IMODE(mode)
        if d.mode & stat.S_ISGID:  # a new file takes a setgid directory's group
            gid = d.gid
        if role == Role.TIER:
            n = d.node
            if n is None:  # first L2.md of a singleton
                n = self.memory.create_node(d.owner, d.ctype, "", persist=False)
                d.node = n
                d.populated = False
                self._populate(d)
                inode = d.children[name]
                return self.open(inode.ino, flags | os.O_TRUNC)
            inode = self._new(Role.TIER, stat.S_IFREG | 0o644, name, d, node=n,
                              tier=TIER_FILES[name], data=bytearray(), dirty=True,
                              uid=uid, gid=gid)
        elif role == Role.ATTACH:
            a = self.memory.add_attachment(d.node, d.att.id if d.att else None, name, "file",
                                           perm)
            inode = self._new(Role.ATTACH, stat.S_IFREG | perm, name, d, node=d.node, att=a,
                              data=bytearray(), uid=uid, gid=gid)
            inode.changed = ChangedBytes(inode.data)
        else:
            inode = self._new(role, stat.S_IFREG | perm, name, d, node=d.node,
                              owner=d.owner, ctype=d.ctype, data=bytearray(), uid=uid, gid=gid)
        self._touch_dir(d)
        h = Handle(self._next_fh, inode, flags)
        self._next_fh += 1
        self.handles[h.fh] = h
        inode.opened += 1
        return h

    def mkdir(self, parent_ino: int, name: str, mode: int, uid: int, gid: int) -> Inode:
        d = self.get(parent_ino)
        self._check_name(name)
        self._ensure(d)
        if name in d.children:
            raise Exists(f"{self._child_path(d, name)} exists")
        self.memory.check_writable()
        perm = stat.S_IMODE(mode)
        if d.role == Role.KIND:
            self.memory.create_owner(d.name, name)
            return self._add_owner((d.name, name))
        if d.role == Role.SESSIONS:
            sess = self.intake.start_session(d.owner, name)
            return self._show_session(d, sess)
        if d.role == Role.TYPEDIR:
            if is_editor_scratch(name) or name.startswith("."):
                raise InvalidInput(f"{name!r} is not a node name")
            n = self.memory.create_node(d.owner, d.ctype, name, persist=False)
            return self._place_node(n)
        if d.role in (Role.NODE, Role.ATTACH) and d.node is not None and not d.trashed:
            if d.role == Role.NODE and name in RESERVED_IN_NODE:
                raise ReadOnly(f"{name} is reserved in a node")
            if d.mode & stat.S_ISGID:  # POSIX: a setgid directory passes on its bit and group
                perm |= stat.S_ISGID
                gid = d.gid
            a = self.memory.add_attachment(d.node, d.att.id if d.att else None, name, "dir",
                                           perm)
            inode = self._attach_inode(d, d.node, a)
            inode.populated = True
            inode.uid, inode.gid = uid, gid
            self._touch_dir(d)
            return inode
        if d.trashed:
            raise ReadOnly("a deleted node is read-only; restore it with mv first")
        raise self._no_files_here(d)

    def symlink(self, parent_ino: int, name: str, target: bytes, uid: int, gid: int) -> Inode:
        d = self.get(parent_ino)
        self._check_name(name)
        self._ensure(d)
        if name in d.children:
            raise Exists(f"{self._child_path(d, name)} exists")
        if d.role not in (Role.NODE, Role.ATTACH) or d.node is None or d.trashed:
            raise NotSupported("symbolic links can only be made inside a node")
        if d.role == Role.NODE and name in RESERVED_IN_NODE:
            raise ReadOnly(f"{name} is reserved in a node")
        a = self.memory.add_attachment(d.node, d.att.id if d.att else None, name, "symlink",
                                       0o777, target=target)
        inode = self._attach_inode(d, d.node, a)
        inode.uid, inode.gid = uid, gid
        self._touch_dir(d)
        return inode

    # ---- removing -----------------------------------------------------------------------

    def unlink(self, parent_ino: int, name: str) -> None:
        d = self.get(parent_ino)
        self._ensure(d)
        inode = d.children.get(name)
        if inode is None:
            raise NotFound(f"{self._child_path(d, name)} does not exist")
        if inode.is_dir:
            raise ContextFSError("is a directory", errno=errno.EISDIR)
        role = inode.role
        if role in (Role.TIER, Role.META, Role.VERSION):
            # Hidden, not changed: editors and `mv` remove the name before writing a new
            # file, and `rm -r` removes it before rmdir. The stored text stays.
            self._unlink(inode)
            return
        if role == Role.ATTACH:
            if inode.trashed:
                raise ReadOnly("a deleted node is read-only; restore it with mv first")
            self.memory.remove_attachment(inode.att)
            self._unlink(inode)
            self._touch_dir(d)
            return
        if role in (Role.SCRATCH, Role.DROP):
            if inode.drop_id is not None:
                self.memory.forget_drop(inode.drop_id)
            self._unlink(inode)
            self._touch_dir(d)
            return
        raise ContextFSError(f"{name} cannot be removed", errno=errno.EACCES)

    def rmdir(self, parent_ino: int, name: str) -> None:
        d = self.get(parent_ino)
        self._ensure(d)
        inode = d.children.get(name)
        if inode is None:
            raise NotFound(f"{self._child_path(d, name)} does not exist")
        if not inode.is_dir:
            raise ContextFSError("not a directory", errno=errno.ENOTDIR)
        if inode.role == Role.SESSION:
            raise SessionAction(inode.qopts, "end", inode)
        self._ensure(inode)
        if inode.role == Role.HISTORY:
            if inode.children:
                raise NotEmpty(".history is not empty")
            self._unlink(inode)
            return
        if inode.children:
            raise NotEmpty(f"{self._child_path(d, name)} is not empty")
        if inode.role == Role.ATTACH:
            if inode.trashed:
                raise ReadOnly("a deleted node is read-only; restore it with mv first")
            self.memory.remove_attachment(inode.att)
            self._unlink(inode)
            self._touch_dir(d)
            return
        if inode.role == Role.NODE and inode.node is not None and not inode.trashed:
            n = inode.node
            self.memory.delete_node(n)
            if inode.ctype.singleton:
                inode.node = None
                inode.populated = True
                self._listing_changed(inode)
                self._invalidate(inode, attr_only=True)
            else:
                self._unlink(inode)
            self._place_node(n)
            return
        if inode.role == Role.NODE and inode.node is None:
            raise ContextFSError(f"{name} is a type directory", errno=errno.EPERM)
        raise ContextFSError(
            f"{self._child_path(d, name)} cannot be removed "
            "(owners, type directories and the trash are fixed)", errno=errno.EPERM)

    # ---- renaming -----------------------------------------------------------------------

    def rename(self, old_parent: int, old_name: str, new_parent: int, new_name: str,
               flags: int = 0) -> None:
        src_dir, dst_dir = self.get(old_parent), self.get(new_parent)
        self._check_name(new_name)
        self._ensure(src_dir)
        self._ensure(dst_dir)
        src = src_dir.children.get(old_name)
        if src is None:
            raise NotFound(f"{self._child_path(src_dir, old_name)} does not exist")
        dst = dst_dir.children.get(new_name)
        if flags & 1 and dst is not None:  # RENAME_NOREPLACE
            raise Exists(f"{self._child_path(dst_dir, new_name)} exists")
        if flags & 2:  # RENAME_EXCHANGE
            raise InvalidInput("exchanging two names is not supported here")
        if src is dst:
            return
        self.memory.check_writable()
        if src.is_dir:
            self._rename_dir(src, dst_dir, new_name, dst)
        else:
            self._rename_file(src, dst_dir, new_name, dst)
        src.ctime_ns = time.time_ns()
        for d in {src_dir, dst_dir}:
            if d.role in (Role.ATTACH, Role.NODE, Role.TYPEDIR):
                self._touch_dir(d)

    def _rename_dir(self, src: Inode, dst_dir: Inode, new_name: str, dst: Inode | None) -> None:
        if (src.role == Role.NODE and src.trashed and src.ctype.singleton and dst is not None
                and dst.role == Role.NODE and dst.ctype is src.ctype and dst.node is None
                and dst.owner == src.owner):
            self._restore_singleton(src, dst)
            return
        if src.role == Role.NODE and src.node is not None and not src.ctype.singleton:
            if dst_dir.role != Role.TYPEDIR:
                raise InvalidInput("a node moves only into a type directory (to rename, "
                                   "re-type or restore it)")
            if dst is not None:
                self._ensure(dst)
                if dst.children:
                    raise NotEmpty(f"{new_name} already exists and is not empty")
                raise Exists(f"{new_name} already exists")
            n = src.node
            was_trashed = src.trashed
            self.memory.rename_node(n, dst_dir.owner, dst_dir.ctype, new_name)
            self._unlink(src)
            src.name = new_name
            src.owner, src.ctype, src.trashed = dst_dir.owner, dst_dir.ctype, False
            self._link(dst_dir, src)
            self.inodes[src.ino] = src
            if was_trashed and src.populated:
                # restored: the trash view already shows what comes back (its tiers and
                # the attachments removed with it); the same inodes become writable again
                self._retag(src, trashed=False)
            self._node_changed(n)  # meta.yaml shows the new path (and no deleted_at)
            return
        if src.role == Role.ATTACH and not src.trashed:
            if dst_dir.role not in (Role.NODE, Role.ATTACH) or dst_dir.node is None \
                    or dst_dir.trashed:
                raise ContextFSError("attachments move between nodes only", errno=errno.EXDEV)
            if dst is not None:
                if not dst.is_dir:
                    raise ContextFSError("not a directory", errno=errno.ENOTDIR)
                self._ensure(dst)
                if dst.children:
                    raise NotEmpty(f"{new_name} is not empty")
                if dst.role != Role.ATTACH:
                    raise ContextFSError(f"{new_name} cannot be replaced", errno=errno.EACCES)
            cur: Inode | None = dst_dir
            while cur is not None:
                if cur is src:
                    raise InvalidInput("cannot move a directory into itself")
                cur = cur.parent
            self._move_attachment(src, dst_dir, new_name, dst)
            return
        raise ContextFSError(f"{src.name} cannot be renamed", errno=errno.EPERM)

    def _restore_singleton(self, src: Inode, dst: Inode) -> None:
        """mv .trash/profile/profile profile: the deleted node's directory takes the place
        of the empty one, as the kernel expects after a rename over an empty directory."""
        self._ensure(dst)
        if any(c.role != Role.SCRATCH for c in dst.children.values()):
            raise NotEmpty(f"{dst.name} is not empty")
        n = src.node
        self.memory.rename_node(n, dst.owner, dst.ctype, "")
        owner_dir = dst.parent
        self._unlink(src)
        self._unlink(dst)
        src.name, src.trashed = dst.name, False
        self._link(owner_dir, src)
        self.inodes[src.ino] = src
        if src.populated:
            self._retag(src, trashed=False)
        self._node_changed(n)

    def _retag(self, d: Inode, *, trashed: bool) -> None:
        for c in (d.children or {}).values():
            c.trashed = trashed
            if c.role == Role.TIER:
                c.mode = stat.S_IFREG | (0o444 if trashed else 0o644)
            if c.is_dir:
                self._retag(c, trashed=trashed)

    def _move_attachment(self, src: Inode, dst_dir: Inode, new_name: str,
                         dst: Inode | None) -> None:
        a = src.att
        node = dst_dir.node
        with self.memory.store.transaction():
            if dst is not None and dst.role == Role.ATTACH:
                self.memory.remove_attachment(dst.att)
            a.node_id = node.id
            a.parent_id = dst_dir.att.id if dst_dir.att else None
            a.name = new_name
            self.memory.update_attachment(a)
            if src.is_dir and node is not src.node:
                self._reparent_attachments(src, node)
        if dst is not None:
            self._unlink(dst)
        self._unlink(src)
        src.name = new_name
        src.node = node
        self._link(dst_dir, src)
        self.inodes[src.ino] = src

    def _reparent_attachments(self, d: Inode, node: Node) -> None:
        self._ensure(d)
        for c in d.children.values():
            if c.att is not None:
                c.att.node_id = node.id
                c.node = node
                self.memory.store.update_attachment(c.att)
            if c.is_dir:
                self._reparent_attachments(c, node)

    def _rename_file(self, src: Inode, dst_dir: Inode, new_name: str,
                     dst: Inode | None) -> None:
        if src.role in _READ_ONLY_FILES or src.trashed:
            raise ReadOnly(f"{src.name} is read-only")
        if dst is not None and dst.is_dir:
            raise ContextFSError("is a directory", errno=errno.EISDIR)
        if dst is not None and (dst.role in _READ_ONLY_FILES or dst.trashed):
            raise ReadOnly(f"{new_name} is read-only")
        data = bytes(self._file_bytes(src)) if not stat.S_ISLNK(src.mode) else b""
        if dst_dir.role == Role.NODE and new_name in TIER_FILES and not dst_dir.trashed:
            # The editor pattern: a temporary file renamed over L2.md is a save.
            if stat.S_ISLNK(src.mode):
                raise InvalidInput("a symbolic link cannot become a memory tier")
            n = dst_dir.node
            if n is None:
                n = self.memory.create_node(dst_dir.owner, dst_dir.ctype, "", persist=False)
                dst_dir.node = n
            tier = TIER_FILES[new_name]
            try:
                with self.memory.store.transaction():
                    if tier == "L2":
                        self.memory.save_l2(n, decode_text(data, new_name), "rename-over")
                    else:
                        self.memory.save_pinned(n, tier, decode_text(data, new_name))
                    if src.role == Role.ATTACH:
                        self.memory.remove_attachment(src.att)
                    if src.drop_id is not None:
                        self.memory.forget_drop(src.drop_id)
            except ContextFSError as exc:
                self._refuse(src, exc, data)
                raise
            if not dst_dir.populated:
                self._populate(dst_dir)
                dst = dst_dir.children.get(new_name)
            if dst is not None:
                self._unlink(dst)
            self._unlink(src)
            src.name, src.role, src.node, src.tier, src.att = new_name, Role.TIER, n, tier, None
            src.data, src.dirty, src.drop_id = None, False, None
            self._link(dst_dir, src)
            self.inodes[src.ino] = src
            self._node_changed(n, writer=src)
            return
        role = self._new_file_role(dst_dir, new_name)
        if role == Role.INBOX_NEW:  # an atomic writer's temp file renamed into an inbox
            if dst is not None:
                raise Exists(f"{new_name} is already in the inbox")
            if src.role == Role.ATTACH:
                self.memory.remove_attachment(src.att)
            self._unlink(src)
            item = self.intake.submit(dst_dir.owner, new_name, data)
            self._show_item(dst_dir, item)
            return
        if role == Role.DROP:
            # Renamed into a type directory under a memory name: route it now.
            if src.role == Role.ATTACH:
                self.memory.remove_attachment(src.att)
            if dst is not None:
                self.unlink(dst_dir.ino, new_name)
            self._unlink(src)
            src.role, src.owner, src.ctype, src.name = Role.DROP, dst_dir.owner, \
                dst_dir.ctype, new_name
            src.data = bytearray(data)
            self._link(dst_dir, src)
            self.inodes[src.ino] = src
            self._route_drop(src)
            return
        if role == Role.TIER:  # unreachable: handled above
            raise InvalidInput("unexpected tier rename")
        # ATTACH or SCRATCH destination.
        if dst is not None:
            if dst.role in (Role.TIER, Role.META):
                self._unlink(dst)
            else:
                self.unlink(dst_dir.ino, new_name)
        if role == Role.ATTACH:
            if src.role == Role.ATTACH:
                self._move_attachment(src, dst_dir, new_name, None)
                return
            kind = "symlink" if stat.S_ISLNK(src.mode) else "file"
            if kind == "file":  # a scratch file or a drop becomes stored bytes: redact
                stored = self.memory.redact_bytes(data, self._child_path(dst_dir, new_name))
                if stored != data:
                    data = stored
                    self._invalidate(src)  # the kernel may hold the unredacted pages
            a = self.memory.add_attachment(
                dst_dir.node, dst_dir.att.id if dst_dir.att else None, new_name, kind,
                stat.S_IMODE(src.mode), target=src.target,
                data=None if kind == "symlink" else data)
            if src.drop_id is not None:
                self.memory.forget_drop(src.drop_id)
            self._unlink(src)
            src.name, src.role, src.att, src.node = new_name, Role.ATTACH, a, dst_dir.node
            src.data = bytearray(data) if kind == "file" else None
            src.changed = ChangedBytes(src.data) if src.data is not None else None
            src.dirty, src.tier, src.drop_id = False, None, None
        else:  # SCRATCH
            if src.role == Role.ATTACH:
                self.memory.remove_attachment(src.att)
            self._unlink(src)
            src.name, src.role, src.att, src.tier = new_name, Role.SCRATCH, None, None
            src.data = bytearray(data)
            src.dirty = False
            src.owner, src.ctype, src.node = dst_dir.owner, dst_dir.ctype, dst_dir.node
        self._link(dst_dir, src)
        self.inodes[src.ino] = src

    # ---- attributes -----------------------------------------------------------------------

    def setattr(self, ino: int, *, size: int | None = None, mode: int | None = None,
                uid: int | None = None, gid: int | None = None, atime_ns: int | None = None,
                mtime_ns: int | None = None, fh: int | None = None) -> Inode:
        inode = self.get(ino)
        if size is not None and fh is not None and fh in self.handles:
            self.handles[fh].wrote = True  # ftruncate: committed at this handle's close
        if size is not None:
            if inode.is_dir:
                raise ContextFSError("is a directory", errno=errno.EISDIR)
            self._writable_file(inode)
            if size > self._limit(inode):
                raise TooBig(f"{inode.name} would exceed the {self._limit(inode)}-byte limit")
            if inode.data is None and size == 0 and inode.role == Role.ATTACH and \
                    inode.att is not None and inode.att.size:
                inode.data = bytearray()  # `truncate -s 0`: no need to load it first
                inode.changed = ChangedBytes(inode.data)
                inode.changed.add(0, 0)
                inode.dirty = True
                inode.mtime_ns = time.time_ns()
            elif inode.data is None:
                self._load_buffer(inode)
            if size != len(inode.data):
                self._resize(inode, size)
                inode.dirty = True
                inode.mtime_ns = time.time_ns()
            if inode.opened <= 0 and inode.dirty:
                if inode.role == Role.DROP:
                    pass  # routed at close
                else:
                    self._commit(inode)
        changed_meta = False
        if mode is not None and not stat.S_ISLNK(inode.mode):
            if inode.role in _READ_ONLY_FILES or inode.role in (Role.ROOT, Role.KIND,
                                                                 Role.SCHEMAS, Role.HISTORY):
                raise ContextFSError(f"{inode.name or '/'} has fixed permissions",
                                     errno=errno.EPERM)
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
            self.memory.update_attachment(inode.att)
        return inode

    def fsyncdir(self, ino: int) -> None:
        """fsync of a directory makes the nodes made in it by mkdir, and its entries'
        times, durable."""
        d = self.get(ino)
        self.memory.persist_pending(d.owner)
        self.memory.flush_touched()

    def link(self) -> None:
        raise NotSupported("hard links are not supported (EPERM); copy the file instead")

    def mknod(self, parent_ino: int, name: str, mode: int, uid: int, gid: int) -> Handle:
        if not stat.S_ISREG(mode):
            raise NotSupported("device nodes, FIFOs and sockets are not supported (EPERM)")
        return self.create(parent_ino, name, mode, os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                           uid, gid)
