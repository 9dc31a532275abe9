"""The values the tree is made of: roles, inodes, open handles, attributes, invalidations.

Plain data with no behaviour beyond small properties; `fs.table` holds these and the role
handlers (`fs.roles`: nodes, tiers, attachments, trash, query, inbox, sessions, static)
decide what each role shows. Nothing here imports pyfuse3.

Roles of inodes:

    ROOT ─ KIND (user/, agent/) ─ OWNER ─ TYPEDIR ─ NODE ─ TIER (L0.md, L1.md, L2.md)
                                    │        │        ├── META (meta.yaml), HISTORY ─ VERSION
                                    │        │        └── ATTACH (any other file, dir, symlink)
                                    │        └── DROP (a file to route), SCRATCH (editor files)
                                    ├─ TRASH ─ TRASH_TYPE ─ NODE (soft-deleted, read-only view)
                                    ├─ INBOX ─ INBOX_NEW, INBOX_ITEM, INBOX_REPORT
                                    └─ SESSIONS ─ SESSION ─ SESSION_CONTEXT, _TRANSCRIPT, _CONTROL
    ROOT ─ SCHEMAS ─ SCHEMA_FILE;  ROOT ─ STATUS;  <any dir> ─ QUERYROOT ─ [QUERYOPTS ─] QUERY

For a singleton type (e.g. profile) the type directory is itself the NODE.
"""

from __future__ import annotations

import enum
import os
import re
import stat
from dataclasses import dataclass, field
from typing import Any, TypedDict

from contextfs.conversations.inbox import InboxItem, Session
from contextfs.ctxtypes import ContextType
from contextfs.errors import ContextFSError
from contextfs.memory.attachments import ATTACHMENT_CHUNK
from contextfs.memory.routing import is_editor_scratch, is_temp_name  # noqa: F401 (re-exported)
from contextfs.memory.spill import SpillBuffer
from contextfs.model import Attachment, Node
from contextfs.search.retrieval import Hit, QueryOptions

NAME_MAX = 255

# what a read of a regular file is served from: a big attachment's bytes in a spill file
FileData = bytes | bytearray | SpillBuffer
TIER_FILES = {"L0.md": "L0", "L1.md": "L1", "L2.md": "L2"}
META_FILE = "meta.yaml"
HISTORY_DIR = ".history"
TRASH_DIR = ".trash"
ARCHIVE_DIR = ".archive"  # consolidation puts nodes below their minimum importance here
RESERVED_IN_NODE = set(TIER_FILES) | {META_FILE, HISTORY_DIR}
INBOX_DIR, SESSIONS_DIR = ".inbox", ".sessions"
QUERY_DIR = ".query"

ROUTABLE_IN_SINGLETON = re.compile(r"\.(md|markdown|txt)$")


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
    RESTORE = "restore"  # /.restore: the owner makes an exported node with its facts


QUERY_ROLES = frozenset({Role.QUERYROOT, Role.QUERYOPTS, Role.QUERY, Role.QLINK, Role.QFILE})
# Content generated on open (read-only, may change between opens): never cached.
GENERATED = frozenset({Role.STATUS, Role.INBOX_REPORT, Role.SESSION_CONTEXT})
READ_ONLY_FILES = frozenset(
    {
        Role.META,
        Role.VERSION,
        Role.SCHEMA_FILE,
        Role.STATUS,
        Role.QFILE,
        Role.INBOX_ITEM,
        Role.INBOX_REPORT,
        Role.SESSION_CONTEXT,
    }
)
# Never cached by the kernel, so the daemon never has to invalidate their names (a name
# invalidation from a thread can hang a daemon being killed): query results, and files
# that vanish once routed.
VOLATILE = QUERY_ROLES | {
    Role.DROP,
    Role.SCRATCH,
    Role.INBOX_NEW,
    Role.INBOX_REPORT,
    Role.SESSION_CONTEXT,
}


# ---- per-role payloads: what only some inodes carry ----------------------------------------


@dataclass(frozen=True, slots=True)
class QueryDir:
    """A `.query` directory, an options segment or a question's results."""

    scope: str  # the searched subtree ('' = everything)
    options: QueryOptions | None = None
    # a question's results: the index epoch and the access version they reflect
    generation: tuple[int, int] = (-1, -1)
    hits: tuple[Hit, ...] = ()  # a question's results: the nodes its answer delivers
    # who asks (a fs.perms.Caller): answers hold only what they may read; None = anyone
    reader: Any = None


@dataclass(frozen=True, slots=True)
class InboxEntry:
    """An inbox item's file or its report: the item it shows."""

    item: InboxItem


@dataclass(frozen=True, slots=True)
class SessionDir:
    """A live session's directory or one of its files."""

    session: Session


Payload = QueryDir | InboxEntry | SessionDir


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
    data: bytearray | SpillBuffer | None = None  # a written (or generated) file's bytes
    target: bytes | None = None  # a symlink's
    node: Node | None = None
    att: Attachment | None = None
    owner: tuple[str, str] | None = None
    ctype: ContextType | None = None
    tier: str | None = None  # TIER: "L0" | "L1" | "L2"
    version: int = 0  # VERSION: which one
    dirty: bool = False
    opened: int = 0
    lookups: int = 0
    drop_id: int | None = None  # DROP: its pending-drop row, once fsync stored one
    trashed: bool = False
    att_rescan: bool = False
    ndirs: int = 0  # child directories, for st_nlink
    sorted_names: list[tuple[int, str]] | None = None
    # the kernel may cache what this shows (a directory: its listing, since it was last
    # listed; meta.yaml: its size and pages): a change made by the daemon must invalidate
    listed: bool = False
    payload: Payload | None = None  # the query, inbox or session role's value
    # ATTACH: which bytes of `data` differ from what is stored (None: unknown, all of it)
    changed: ChangedBytes | None = None
    # ATTACH file with hard links: its other names (parent, name) are each a link row;
    # (parent, name) is always the name of `att`, the row that holds the file
    links: list[LinkName] | None = None
    # NODE: the files it does not show yet (a node made by mkdir and never written: its
    # tiers, meta.yaml and .history), numbered when the node was first shown so that their
    # inode numbers, which `cp` copies in, keep the derived files before L2.md
    unborn: dict[str, Inode] | None = None
    # NODE made by mkdir during this mount: a copier may write another node's meta.yaml
    # into it, which makes it a copy being made (fs.roles.tiers: write_back)
    made_here: bool = False
    # NODE being made a copy of another (its versions written back into `.history`, or
    # another node's meta.yaml), until L2.md is saved again: for each version stored, the
    # number it had in the `.history` the copier wrote (None: a save of L2.md)
    copied_from: list[int | None] | None = None
    # VERSION written by a copier (its bytes not placed in the history yet): the copier
    # set its time (`utimensat` before the close: tar x), which the version takes once
    # placed (fs.roles.tiers: copied_version_time)
    time_set: bool = False
    # A commit of its bytes refused (`Refusals.refuse_commit`) and not yet reported to a
    # later fsync or close: the FLUSH that heard of it may have come from another process
    # (a child writing through a descriptor it inherited), while the writer's own fsync
    # then finds nothing unsaved. Dropped when the bytes are saved after all, when a
    # process other than those told (`told`, by thread group id) hears of it, or when the
    # last descriptor goes.
    refused: ContextFSError | None = None
    told: set[int] = field(default_factory=set)

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.mode)

    @property
    def query(self) -> QueryDir:
        assert isinstance(self.payload, QueryDir), self.role
        return self.payload

    @property
    def inbox_item(self) -> InboxItem:
        assert isinstance(self.payload, InboxEntry), self.role
        return self.payload.item

    @property
    def session(self) -> Session:
        assert isinstance(self.payload, SessionDir), self.role
        return self.payload.session


@dataclass(eq=False, slots=True)
class LinkName:
    """One more name of a hard-linked attachment file, and its store row (link_of set)."""

    parent: Inode
    name: str
    att: Attachment


class ChangedBytes:
    """The bytes of an attachment's buffer written since it was last stored or loaded.

    Kept per store chunk (one span [lo, hi) per chunk, widened to cover each write), so
    marking a write costs O(chunks it touches) however many writes come before a commit,
    and a commit learns which chunks to store and which bytes to scan for secrets. An
    empty span marks where the file was cut short. It describes `buffer` only: a commit
    of any other buffer (the inode's data was replaced) stores everything.
    """

    __slots__ = ("buffer", "_spans")

    def __init__(self, buffer: bytearray | SpillBuffer) -> None:
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
    snapshot: bytes | None = None  # generated content, taken at open
    wrote: bool = False
    failed: bool = False  # a write on it was refused: later writes are refused too
    # TIER opened for writing: this handle's own copy of the file (fs.buffers), committed
    # whole at its close; `dirty` when it holds what is not stored (written, truncated)
    buffer: bytearray | None = None
    dirty: bool = False
    # O_APPEND: the length of `buffer` when it last matched the file; what follows is
    # appended to the file as it is at the commit (concurrent `>>` lose nothing)
    rebase: int | None = None
    # ATTACH whose bytes this handle's O_TRUNC cut (stored at open): what it held, put
    # back when a write of this handle is refused before it stored anything (`dd` past
    # the size limit leaves the file as it was, not empty)
    before: bytes | SpillBuffer | None = None
    # meta.yaml or a stored version opened for writing: the bytes it shows, which every
    # write must repeat at its offset (fs.roles.tiers: write_back), so that a write of
    # other bytes is refused at write(2) and the shell says so
    exact: bytes | None = None
    # a session's transcript.jsonl opened with O_APPEND: what this handle appended and its
    # close has not recorded yet (`fs.roles.sessions`), so that each writer's close takes
    # (or refuses) its own lines only, whatever other writers append meanwhile; None: none
    appended: bytearray | None = None
    append_base: int = 0  # the transcript's stored size at this handle's first append
    # the processes (thread group ids) that opened this handle or wrote through it: a
    # FLUSH from any other commits nothing (`Tree.flush`); empty: not known
    processes: set[int] = field(default_factory=set)
    last_pid: int = 0  # the pid (a thread's) of the last write, whose process is known

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


@dataclass(frozen=True, slots=True)
class Invalidation:
    ino: int
    name: str | None = None  # set: forget the entry name in directory ino
    attr_only: bool = False
    listing: bool = False  # a directory's entries changed: drop the kernel's cached listing


def ns(ts: float) -> int:
    return int(ts * 1e9)


class InodeRest(TypedDict, total=False):
    """The `Inode` fields `InodeTable.new` passes on as they are given."""

    children: dict[str, Inode] | None
    populated: bool
    data: bytearray | SpillBuffer | None
    target: bytes | None
    node: Node | None
    att: Attachment | None
    owner: tuple[str, str] | None
    ctype: ContextType | None
    tier: str | None
    version: int
    dirty: bool
    opened: int
    lookups: int
    drop_id: int | None
    trashed: bool
    att_rescan: bool
    ndirs: int
    sorted_names: list[tuple[int, str]] | None
    listed: bool
    payload: Payload | None
    changed: ChangedBytes | None
    links: list[LinkName] | None


class InodeFields(InodeRest, total=False):
    """The `Inode` fields `InodeTable.new` takes as keywords (uid, gid, mtime_ns: the defaults)."""

    uid: int
    gid: int
    mtime_ns: int
