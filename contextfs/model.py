"""Plain records shared by the store, the memory service and the tree. No behaviour."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

# `versions.reason` prefixes of machine writes: extraction from the inbox or a session
# (`route:inbox:…`, `route:session:…`) and consolidation (`consolidate:…`). Every other
# reason (`write`, `rename-over`, `route:<dropped file>`) is a person's write through the
# mount. A machine write never silently replaces a person's text (SPEC §5).
MACHINE_REASONS = ("route:inbox:", "route:session:", "consolidate:")


@dataclass(slots=True)
class Node:
    """In-memory mirror of a `nodes` row (see store/schema.py for the meaning of columns)."""

    id: int
    owner_kind: str
    owner_id: str
    type: str
    name: str
    version: int
    l0: str
    l1: str
    l2: str
    l0_pinned: bool
    l1_pinned: bool
    content_hash: str
    sources: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    importance: float = 0.5
    access_count: int = 0
    created: float = 0.0
    updated: float = 0.0
    deleted_at: float | None = None
    archived_at: float | None = None
    # Not stored in `nodes`: (version, created, size) of every saved version, oldest first.
    history: list[tuple[int, float, int]] = field(default_factory=list)
    indexed_version: int = 0
    # False for a node made by mkdir and not written to yet: it reaches the store with its
    # first commit (or fsync of its type directory, or unmount), like a POSIX directory
    # entry that is durable only once its parent is fsync()ed.
    persisted: bool = True
    # Not stored in `nodes`: whether a person wrote any stored version of L2 (derived from
    # `versions.reason`, see MACHINE_REASONS). Machine writes then add below their text.
    person_wrote: bool = False

    @property
    def owner(self) -> tuple[str, str]:
        return (self.owner_kind, self.owner_id)

    def tier(self, name: str) -> str:
        # one attribute read: a LazyNode reads L1/L2 from the store when asked for them
        if name == "L0":
            return self.l0
        if name == "L1":
            return self.l1
        if name == "L2":
            return self.l2
        raise KeyError(name)

    def tier_size(self, name: str) -> int:
        """The UTF-8 size of a tier: what `stat` shows (a LazyNode knows it unloaded)."""
        return len(self.tier(name).encode("utf-8"))


# The permission bits of what has no stored `access` row: an owner directory, a node
# directory (its files: FILE_MODE), a fixed folder.
DIR_MODE = 0o755
FILE_MODE = 0o644


@dataclass(frozen=True, slots=True)
class Access:
    """POSIX owner, group and permission bits of an owner directory, a node (its
    directory and the files it covers) or an attachment (see store/schema.py `access`)."""

    uid: int
    gid: int
    dir_mode: int
    file_mode: int


class AccessMap(dict[tuple[str, str], Access]):
    """Every stored `Access`, by (kind, key) as `Memory.set_access` names them. `version`
    moves at every change, whoever makes it (a chmod, a rollback, another mount's): what
    was computed for one caller's rights (a question's answer) is stale once it moved."""

    __slots__ = ("version",)

    def __init__(self, items: dict[tuple[str, str], Access] | None = None) -> None:
        super().__init__(items or {})
        self.version = 0

    def __setitem__(self, key: tuple[str, str], value: Access) -> None:
        super().__setitem__(key, value)
        self.version += 1

    def __delitem__(self, key: tuple[str, str]) -> None:
        super().__delitem__(key)
        self.version += 1

    def pop(self, key: tuple[str, str], *default: Any) -> Any:
        self.version += 1
        return super().pop(key, *default)

    def clear(self) -> None:
        super().clear()
        self.version += 1

    def update(self, *args: Any, **kwargs: Any) -> None:
        super().update(*args, **kwargs)
        self.version += 1

    def setdefault(self, key: tuple[str, str], default: Any = None) -> Any:
        self.version += 1
        return super().setdefault(key, default)

    def popitem(self) -> tuple[tuple[str, str], Access]:
        self.version += 1
        return super().popitem()

    def __ior__(self, other: Any) -> AccessMap:  # type: ignore[override,misc]
        self.update(other)
        return self


@dataclass(slots=True)
class Attachment:
    """In-memory mirror of an `attachments` row, without its data."""

    id: int
    node_id: int
    parent_id: int | None
    name: str
    kind: str  # 'file' | 'dir' | 'symlink'
    mode: int
    mtime: float
    target: bytes | None = None
    deleted_at: float | None = None
    size: int = 0
    link_of: int | None = None  # a hard link: the id of the row that holds the file


ChangeKind = Literal["node", "owner", "attachment", "inbox", "session"]
ChangeOp = Literal["created", "updated", "deleted", "moved"]


@dataclass(frozen=True, slots=True)
class Change:
    """One thing a committed transaction changed, as `Transactions.subscribe` callbacks see it.

    `node_id` is the node (for an attachment: its node; None for owners, inbox items and
    sessions); `id` is the attachment or inbox item id; `path` is where it shows in the
    mount, relative to the root (for a move: the new path, `old_path` the one before);
    `generation` is the store generation (outbox seq) its transaction committed at.
    """

    kind: ChangeKind
    op: ChangeOp
    path: str
    generation: int
    node_id: int | None = None
    id: int | None = None
    old_path: str | None = None


@dataclass(frozen=True, slots=True)
class Refusal:
    """A commit refused with an errno, as `.status` lists it (and where its bytes are kept)."""

    when: float
    path: str
    errno: int
    reason: str
    kept_at: str | None
    uid: int | None = None  # who asked, when the request said (a question names its asker)
