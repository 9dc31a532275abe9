"""Where `contextfs import` writes: a live mount's files, or a store opened offline.

Role: `vault._Importer` decides what each file of a tree becomes (a node made again as
exported, a file routed by its type's strategy, an attachment); a `Target` carries it
out. `MountTarget` does it with file calls on a live mount, as a person's writes: the
mount redacts, checks and refuses with an errno, and the node's bookkeeping facts (id,
times, provenance, importance, reads) start again, because no file call can set them.
`StoreTarget` does it with the calls of a `Memory` opened on an unmounted data dir (the
importer is then the store's only writer, as the daemon is for a mount): the same
redaction, validation and routing, and the exported facts restored, ids included when
the store never handed them out — so export → import → export gives the same tree.

Boundary: no pyfuse3, no `contextfs.fs`, no daemon; a `Memory` the caller opened.
"""

from __future__ import annotations

import datetime as dt
import errno
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from contextfs.agents.client import refusal_reason
from contextfs.ctxtypes import ContextType
from contextfs.memory.restore import RESTORE_FILE, fact_access, restore_node
from contextfs.model import Access

if TYPE_CHECKING:
    from contextfs.memory.service import Memory
    from contextfs.model import Attachment, Node


@dataclass(frozen=True, slots=True)
class Place:
    """A node an import writes: its owner ("user/alice"), type and name ("" for a
    singleton)."""

    owner: str
    ctype: ContextType
    name: str

    @property
    def owner_key(self) -> tuple[str, str]:
        kind, _, oid = self.owner.partition("/")
        return kind, oid

    @property
    def rel(self) -> str:
        base = f"{self.owner}/{self.ctype.type_dir}"
        return f"{base}/{self.name}" if self.name else base


class Target(Protocol):
    """The writes an import makes. Refusals are raised: `OSError` from a mount (with the
    file's name), `ContextFSError` from a store."""

    restores_facts: bool

    def counts(self) -> tuple[int, int]: ...  # (live nodes, secrets redacted so far)

    def has_owner(self, owner: str) -> bool: ...

    def make_owner(self, owner: str) -> None: ...

    def has_node(self, place: Place) -> bool: ...

    def node_text(self, place: Place) -> str | None:
        """The L2 of the node there ("" when it was never written)."""
        ...

    def route(
        self, owner: str, ctype: ContextType, filename: str, data: bytes, named: bool
    ) -> str | None:
        """Route a note; with `named`, the name of the node it made, when that can be told
        (None: it was merged into a node, or the target cannot tell)."""
        ...

    def make_node(
        self,
        place: Place,
        versions: list[tuple[bytes, float | None]],
        pins: dict[str, str],
        facts: dict[str, Any],
    ) -> None: ...

    def has_attachment(self, place: Place, rel: Path) -> bool: ...

    def add_dir(self, place: Place, rel: Path) -> None: ...

    def add_symlink(self, place: Place, rel: Path, target: str) -> None: ...

    def add_file(self, place: Place, rel: Path, data: bytes, mode: int, mtime: float) -> None: ...

    def add_link(self, place: Place, rel: Path, to: Path) -> None:
        """A hard link `rel` to the attachment `to` of the same node."""

    def set_dir_mode(self, place: Place, rel: Path, mode: int) -> None: ...

    def set_time(self, place: Place, rel: Path, mtime: float) -> None:
        """The mtime of an attachment folder or symlink (a file gets its own with it)."""

    def set_folder_access(self, rel: str, a: Access) -> None:
        """An owner directory (`user/alice`) or one of its type folders: `a.dir_mode`, and
        `a.uid`/`a.gid` where the importer may give them (root)."""

    def reason(self, exc: OSError) -> str: ...


class MountTarget:
    """File calls on a live mount; an exported node through the mount's `.restore`, with
    its facts, when the caller may write it (the mount's user or root), else by `mkdir`
    and writes of its tiers (its facts then start again)."""

    def __init__(self, mount: Path, status: Any) -> None:
        self.mount = mount
        self._status = status  # () -> the mount's .status.json, parsed
        self.restores_facts = os.access(mount / RESTORE_FILE, os.W_OK)

    def counts(self) -> tuple[int, int]:
        facts = self._status()
        return facts["counts"]["nodes"], facts["redactions"]["total"]

    def has_owner(self, owner: str) -> bool:
        return (self.mount / owner).is_dir()

    def make_owner(self, owner: str) -> None:
        (self.mount / owner).mkdir()

    def has_node(self, place: Place) -> bool:
        # a folder of a type directory is a node, one never written too (it shows no
        # meta.yaml); a singleton's folder is there before it is written
        node = self.mount / place.rel
        return node.is_dir() if place.name else singleton_made(node)

    def node_text(self, place: Place) -> str | None:
        l2 = self.mount / place.rel / "L2.md"
        try:
            return l2.read_bytes().decode("utf-8")
        except FileNotFoundError:
            return ""  # never written
        except (OSError, UnicodeDecodeError):
            return None

    def route(
        self, owner: str, ctype: ContextType, filename: str, data: bytes, named: bool
    ) -> str | None:
        """The drop does not stay (SPEC §5): a node made by it is the one new name in
        its type directory, looked for only when asked (`named`): listing a type
        directory of n nodes twice for every note made an import quadratic."""
        typedir = self.mount / owner / ctype.type_dir
        before = set(os.listdir(typedir)) if named and typedir.is_dir() else set()
        self._write(typedir / filename, data)
        if not named:
            return None
        made = set(os.listdir(typedir)) - before - {filename}
        return made.pop() if len(made) == 1 else None

    def make_node(
        self,
        place: Place,
        versions: list[tuple[bytes, float | None]],
        pins: dict[str, str],
        facts: dict[str, Any],
    ) -> None:
        if self.restores_facts:
            try:
                texts = [{"text": data.decode("utf-8"), "at": at} for data, at in versions]
            except UnicodeDecodeError:
                texts = None  # written as files: the mount refuses them with its reason
            if texts is not None:
                doc = {"node": place.rel, "versions": texts, "pins": pins, "facts": facts}
                self._write(self.mount / RESTORE_FILE, json.dumps(doc, default=_iso).encode())
                return
        node = self.mount / place.rel
        if place.name:
            node.mkdir()
        for data, _at in versions:  # each close is one version (saved now)
            self._write(node / "L2.md", data)
        for tier, text in pins.items():
            self._write(node / f"{tier}.md", text.encode())
        own = fact_access(facts.get("access"))
        if own is not None:  # as chmod and chown would (chown: root only)
            if os.geteuid() == 0:
                os.chown(node, own.uid, own.gid)
            if (node / "L2.md").exists():
                os.chmod(node / "L2.md", own.file_mode)
            os.chmod(node, own.dir_mode)

    def has_attachment(self, place: Place, rel: Path) -> bool:
        return os.path.lexists(self.mount / place.rel / rel)

    def add_dir(self, place: Place, rel: Path) -> None:
        d = self.mount / place.rel / rel
        if not d.is_dir():
            d.mkdir()

    def add_symlink(self, place: Place, rel: Path, target: str) -> None:
        os.symlink(target, self.mount / place.rel / rel)

    def add_file(self, place: Place, rel: Path, data: bytes, mode: int, mtime: float) -> None:
        dst = self.mount / place.rel / rel
        self._write(dst, data)
        os.chmod(dst, mode)
        os.utime(dst, (mtime, mtime))

    def add_link(self, place: Place, rel: Path, to: Path) -> None:
        os.link(self.mount / place.rel / to, self.mount / place.rel / rel)

    def set_dir_mode(self, place: Place, rel: Path, mode: int) -> None:
        os.chmod(self.mount / place.rel / rel, mode)

    def set_time(self, place: Place, rel: Path, mtime: float) -> None:
        os.utime(self.mount / place.rel / rel, (mtime, mtime), follow_symlinks=False)

    def set_folder_access(self, rel: str, a: Access) -> None:
        path = self.mount / rel
        st = path.stat()
        if os.geteuid() == 0 and (st.st_uid, st.st_gid) != (a.uid, a.gid):
            os.chown(path, a.uid, a.gid)
        if stat.S_IMODE(st.st_mode) != a.dir_mode:
            os.chmod(path, a.dir_mode)

    def reason(self, exc: OSError) -> str:
        where = Path(exc.filename) if exc.filename else None
        if where is None or not where.is_relative_to(self.mount):
            return exc.strerror or str(exc)
        name = errno.errorcode.get(exc.errno or 0, "EIO")
        rel = str(where.relative_to(self.mount))
        return refusal_reason(self.mount, rel, name) or exc.strerror or str(exc)

    @staticmethod
    def _write(path: Path, data: bytes) -> None:
        """Write and close: the close is the commit, and where a refusal is answered."""
        try:
            with open(path, "wb") as f:
                f.write(data)
        except OSError as exc:
            exc.filename = exc.filename or str(path)  # a refused close names no file
            raise


def singleton_made(folder: Path) -> bool:
    """Whether a singleton's folder in a mount holds its node: one written shows its
    meta.yaml, one never written its attachments (an empty folder is no node yet)."""
    try:
        return any(not name.startswith(".") for name in os.listdir(folder))
    except OSError:
        return False


def _iso(value: Any) -> str:
    """A fact YAML parsed into a date or time, as JSON carries it."""
    if isinstance(value, dt.date):
        return value.isoformat()
    raise TypeError(f"not JSON: {value!r}")


class StoreTarget:
    """The calls of a `Memory` opened on an unmounted data dir."""

    restores_facts = True

    def __init__(self, memory: Memory) -> None:
        self.memory = memory
        self._atts: dict[int, dict[Path, Attachment]] = {}

    def counts(self) -> tuple[int, int]:
        return self.memory.live.count(), self.memory.redaction_count

    def has_owner(self, owner: str) -> bool:
        kind, _, oid = owner.partition("/")
        return (kind, oid) in self.memory.owners

    def make_owner(self, owner: str) -> None:
        kind, _, oid = owner.partition("/")
        self.memory.create_owner(kind, oid)

    def _node(self, place: Place) -> Node | None:
        return self.memory.live_node(place.owner_key, place.ctype, place.name)

    def has_node(self, place: Place) -> bool:
        return self._node(place) is not None

    def node_text(self, place: Place) -> str | None:
        n = self._node(place)
        return None if n is None else n.l2

    def route(
        self, owner: str, ctype: ContextType, filename: str, data: bytes, named: bool
    ) -> str | None:
        kind, _, oid = owner.partition("/")
        done = self.memory.routing.route((kind, oid), ctype, filename, data)
        return done.node.name if done.created else None

    def make_node(
        self,
        place: Place,
        versions: list[tuple[bytes, float | None]],
        pins: dict[str, str],
        facts: dict[str, Any],
    ) -> None:
        texts = [(data.decode("utf-8"), at) for data, at in versions]
        restore_node(self.memory, place.owner_key, place.ctype, place.name, texts, pins, facts)

    def _tree(self, place: Place) -> tuple[Node, dict[Path, Attachment]]:
        n = self._node(place)
        assert n is not None, "attachments are added to a node the import made or found"
        if n.id not in self._atts:
            m = self.memory
            base = m.node_path(n) + "/"
            self._atts[n.id] = {
                Path(m.attachment_store.attachment_path(a).removeprefix(base)): a
                for a in m.attachment_store.node_attachments(n)
            }
        return n, self._atts[n.id]

    def _add(self, place: Place, rel: Path, kind: str, mode: int, **kw: Any) -> Attachment:
        n, tree = self._tree(place)
        self.memory.check_name(rel.name, "an attachment name")
        parent = tree.get(rel.parent) if rel.parent != Path() else None
        a = self.memory.attachment_store.add_attachment(
            n, parent.id if parent else None, rel.name, kind, mode, **kw
        )
        tree[rel] = a
        return a

    def has_attachment(self, place: Place, rel: Path) -> bool:
        return rel in self._tree(place)[1]

    def add_dir(self, place: Place, rel: Path) -> None:
        if rel not in self._tree(place)[1]:
            self._add(place, rel, "dir", 0o755)

    def add_symlink(self, place: Place, rel: Path, target: str) -> None:
        self.memory.check_name(target, "a symlink target")
        self._add(place, rel, "symlink", 0o777, target=target.encode("utf-8", "surrogateescape"))

    def add_file(self, place: Place, rel: Path, data: bytes, mode: int, mtime: float) -> None:
        a = self._add(place, rel, "file", mode)
        path = self.memory.attachment_store.attachment_path(a)
        self.memory.attachment_store.commit_attachment(a, data, mtime, path)

    def add_link(self, place: Place, rel: Path, to: Path) -> None:
        _n, tree = self._tree(place)
        self.memory.check_name(rel.name, "an attachment name")
        a = tree[to]
        holder = self.memory.attachments[a.link_of] if a.link_of is not None else a
        parent = tree.get(rel.parent) if rel.parent != Path() else None
        tree[rel] = self.memory.attachment_store.add_link(
            holder, parent.id if parent else None, rel.name
        )

    def set_dir_mode(self, place: Place, rel: Path, mode: int) -> None:
        a = self._tree(place)[1][rel]
        if a.mode != mode:
            a.mode = mode
            self.memory.attachment_store.update_attachment(a)

    def set_time(self, place: Place, rel: Path, mtime: float) -> None:
        a = self._tree(place)[1][rel]
        if a.mtime != mtime:
            a.mtime = mtime
            self.memory.attachment_store.update_attachment(a)

    def set_folder_access(self, rel: str, a: Access) -> None:
        kind = "owner" if rel.count("/") == 1 else "dir"
        shows = self.memory.owner_access if kind == "owner" else self.memory.dir_access
        shown = shows(rel, os.getuid(), os.getgid())
        if (shown.uid, shown.gid, shown.dir_mode) != (a.uid, a.gid, a.dir_mode):
            self.memory.set_access(kind, rel, Access(a.uid, a.gid, a.dir_mode, shown.file_mode))

    def reason(self, exc: OSError) -> str:
        return exc.strerror or str(exc)
