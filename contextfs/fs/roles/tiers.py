"""The files of the memory tree: tiers, meta.yaml, versions, dropped and scratch files.

Decides what those files read as and when what is written to them is committed: a tier's
close saves a version (L2) or pins it (L0/L1) and its fsync also waits until BM25 finds
that node as saved (never for the rest of the indexer's queue, SPEC §3); a file dropped
into a type directory is routed by its type's strategy at close (or kept as a pending drop
at fsync); editors' scratch files are accepted and never stored. A refused commit is
recorded in `.status`, keeps the refused bytes, shows the stored text again, and leaves a
`NAME.refused` trace beside the file (`leave_trace`): the reason and the bytes, where the
writer looks.
"""

from __future__ import annotations

import logging
import os
import stat
import time
from typing import TYPE_CHECKING

import yaml

from contextfs.errors import ContextFSError, InvalidInput, ReadOnly
from contextfs.fs.inode import (
    HISTORY_DIR,
    META_FILE,
    NAME_MAX,
    Handle,
    Inode,
    Invalidation,
    Role,
)
from contextfs.fs.perms import Perms
from contextfs.fs.roles.attachments import Attachments
from contextfs.fs.roles.base import Refusals, RoleBase
from contextfs.fs.roles.nodes import Nodes
from contextfs.fs.searchport import SearchPort
from contextfs.fs.table import InodeTable
from contextfs.memory.document import decode_text, trace_name
from contextfs.memory.exported import Note, read_note
from contextfs.memory.restore import restore_node
from contextfs.memory.routing import RouteResult
from contextfs.memory.texts import LRU
from contextfs.model import Access, Node

if TYPE_CHECKING:
    from contextfs.ctxtypes import ContextType
    from contextfs.memory.service import Memory
    from contextfs.model import Refusal

log = logging.getLogger(__name__)

# what the mount writes in every meta.yaml (Memory.meta_yaml)
_META_KEYS = frozenset({"id", "type", "owner", "path", "version", "content_hash"})


def _meta_id(data: bytes) -> int | None:
    """The node id of bytes that read as a node's meta.yaml (a mapping with the facts
    the mount writes in one), else None."""
    try:
        doc = yaml.safe_load(data.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError):
        return None
    if not isinstance(doc, dict) or not set(doc) >= _META_KEYS:
        return None
    node_id = doc["id"]
    return node_id if isinstance(node_id, int) else None


def _first_difference(a: bytes, b: bytes) -> int:
    same = (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
    return next(same, min(len(a), len(b)))


class Tiers(RoleBase):
    roles = frozenset({Role.TIER, Role.META, Role.VERSION, Role.DROP, Role.SCRATCH})

    def __init__(
        self,
        table: InodeTable,
        memory: Memory,
        *,
        nodes: Nodes,
        attachments: Attachments,
        perms: Perms,
        refusals: Refusals,
        search: SearchPort | None,
    ) -> None:
        super().__init__(table)
        self.memory = memory
        self.nodes = nodes  # the node directories these files are in
        self.attachments = attachments  # a refused write's trace in a node is one
        self.perms = perms
        self.refusals = refusals
        self.search = search
        # meta.yaml bytes by node id: the hot ones only
        self._meta_cache: LRU[int, tuple[tuple[object, ...], bytes]] = LRU(4096)

    # ---- reading -------------------------------------------------------------------------

    def content(self, inode: Inode) -> bytes:
        cache = self.table.file_cache
        n = inode.node
        if inode.role == Role.TIER and n is not None and inode.tier is not None:
            cached = cache.get(inode.ino)
            if cached is None:
                cached = cache[inode.ino] = n.tier(inode.tier).encode("utf-8")
            return cached
        if inode.role == Role.META and n is not None:
            return self._meta_bytes(n)
        if inode.role == Role.VERSION and n is not None:
            if inode.data is not None:  # written back, stored with the node's first L2
                return bytes(inode.data)
            cached = cache.get(inode.ino)
            if cached is None:
                cached = cache[inode.ino] = self.memory.history_text(n, inode.version).encode(
                    "utf-8"
                )
            return cached
        return b""

    def size(self, inode: Inode) -> int:
        n = inode.node
        if inode.role == Role.TIER and n is not None and inode.tier is not None:
            cached = self.table.file_cache.get(inode.ino)
            # a node's L1/L2 may be in the store only (memory.texts): stat does not load it
            return len(cached) if cached is not None else n.tier_size(inode.tier)
        if inode.role == Role.VERSION and inode.node is not None:
            for v, _c, size in inode.node.history:
                if v == inode.version:
                    return size
            return 0
        return super().size(inode)

    def _meta_bytes(self, n: Node) -> bytes:
        """meta.yaml, rendered again only when a fact it shows has changed."""
        key = (
            n.version,
            n.updated,
            n.indexed_version,
            n.access_count,
            n.l0_pinned,
            n.l1_pinned,
            n.deleted_at,
            n.name,
            n.type,
            n.owner_kind,
            n.owner_id,
            len(n.sources),
            n.importance,
            n.content_hash,
        )
        hit = self._meta_cache.get(n.id)
        if hit is not None and hit[0] == key:
            return hit[1]
        data = self.memory.meta_yaml(n).encode("utf-8")
        self._meta_cache[n.id] = (key, data)
        return data

    async def opened(self, h: Handle) -> None:
        # Opening a file never counts as an access: `cat`, `grep -r`, rsync and backups
        # read without changing anything (meta.yaml keeps its size while it is copied).
        # What counts is reading a `.query` answer (fs.roles.query: count_access).
        inode = h.inode
        if inode.role == Role.META:
            inode.listed = True
        if h.writable and inode.role in (Role.META, Role.VERSION) and not self._taken(inode):
            h.exact = self.content(inode)

    @staticmethod
    def _taken(inode: Inode) -> bool:
        """Whether other bytes than it shows may be written into meta.yaml or a version
        (checked at the close, `write_back`): a version of a node with no version yet, or
        either in a node made by mkdir during this mount (a copy being made)."""
        n, d = inode.node, inode.parent
        if inode.role == Role.META:
            return d is not None and (d.made_here or (n is not None and n.version == 0))
        if n is not None and n.version == 0:
            return True
        d = d.parent if d is not None else None
        return d is not None and d.copied_from is not None

    def count_access(self, n: Node) -> None:
        """An access to n (SPEC §7), which meta.yaml shows: forget what the kernel cached
        of meta.yaml, once until it is looked at again."""
        self.memory.record_access(n)
        d = self.nodes.node_inode(n)
        meta = d.children.get(META_FILE) if d is not None and d.children else None
        if meta is not None and meta.listed:
            meta.listed = False
            self.table.invalidate(meta)

    # ---- commit points -------------------------------------------------------------------

    async def flush(self, h: Handle) -> None:
        inode = h.inode
        if h.buffer is not None:
            if h.dirty:
                self.commit_own(h)
        elif inode.role == Role.DROP:
            if inode.dirty and inode.data:
                fsynced = inode.drop_id is not None  # fsync stored it: findable at close
                node = self.route_drop(inode)
                if fsynced and self.search is not None:
                    await self.search.sync([node.id])
        elif inode.dirty:
            self.commit(inode)

    async def fsync(self, h: Handle) -> None:
        inode = h.inode
        if inode.role == Role.DROP:
            if inode.dirty and inode.data:
                if inode.drop_id is None:
                    inode.drop_id = self.memory.new_id()
                assert inode.owner is not None and inode.ctype is not None
                self.memory.routing.persist_drop(
                    inode.drop_id, inode.owner, inode.ctype, inode.name, bytes(inode.data)
                )
            return
        if h.buffer is not None:
            if h.dirty:
                self.commit_own(h)
        elif inode.dirty:
            self.commit(inode)
        if inode.role == Role.TIER and self.search is not None and inode.node is not None:
            # searchable by BM25 when fsync returns, whatever the backlog (SPEC §3)
            await self.search.sync([inode.node.id])

    def release(self, h: Handle) -> None:
        inode = h.inode
        if inode.role == Role.SCRATCH and inode.drop_id is None:
            inode.dirty = True  # a file made and closed in a type directory is parked too
        if inode.role == Role.DROP:
            if inode.dirty and inode.data:
                self.route_drop(inode)
            elif inode.parent is not None and not inode.data:
                self.table.unlink_inode(inode)  # an empty drop (touch) is not a memory
        elif inode.dirty and inode.parent is not None:
            self.commit(inode)

    @staticmethod
    def unwritten(inode: Inode) -> bool:
        """A tier no one wrote: L2 of a node with no version yet, an L0/L1 derived from L2
        (not pinned). `O_EXCL` creates it (`cp -r`, `tar x` of a copied node): writing it
        is its first hand-written text, so nothing anyone wrote is replaced."""
        n = inode.node
        if inode.role != Role.TIER or n is None or inode.trashed:
            return False
        if inode.tier == "L2":
            return n.version == 0
        return not (n.l0_pinned if inode.tier == "L0" else n.l1_pinned)

    def release_own(self, h: Handle) -> None:
        """Every close of a tier's handle: what it holds unsaved (an O_TRUNC or ftruncate
        with nothing written after, `: > L2.md`) is saved now."""
        if h.dirty and h.inode.parent is not None:
            self.commit_own(h)
        h.buffer, h.dirty = None, False

    def commit_own(self, h: Handle) -> None:
        """Save a tier handle's own buffer: one version, exactly what it held."""
        inode = h.inode
        if inode.role in (Role.META, Role.VERSION):
            assert h.buffer is not None
            data = bytes(h.buffer)
            h.dirty = False
            try:
                self.write_back(inode, data)
            except ContextFSError as exc:
                refusal = self.refusals.refuse_commit(inode, exc, data)
                n = inode.node
                if inode.data is not None and n is not None and n.version > 0:
                    # a version name made by this write: it goes (the stored ones stay)
                    self.table.unlink_inode(inode)
                    inode.data = None
                    self.nodes.changed(n)
                h.buffer = bytearray(self.content(inode))
                self.table.invalidate(inode)
                if inode.role == Role.META:  # `printf … > meta.yaml` ignores close()'s errno
                    self.leave_trace(inode.parent, inode.name, data, refusal)
                raise
            return
        assert h.buffer is not None and inode.node is not None and inode.tier is not None
        data = bytes(h.buffer)
        appended = None
        if h.rebase is not None:
            # O_APPEND: what it appended, after the text as stored now (the node's: a save
            # renamed over L2.md since this open replaced the file it opened)
            base = inode.node.tier(inode.tier)
            data = base.encode("utf-8") + data[h.rebase :]
            appended = base  # the text it appends to: on a conflict, to the newest one
        h.dirty = False
        try:
            stored = self.save_tier(inode, inode.node, inode.tier, data, appended_to=appended)
        except ContextFSError as exc:
            refusal = self.refusals.refuse_commit(inode, exc, data)
            h.buffer = bytearray(inode.node.tier(inode.tier).encode("utf-8"))
            self.table.invalidate(inode)
            self.leave_trace(inode.parent, inode.name, data, refusal)
            raise
        # the handle now holds what is stored (a redacted secret included)
        h.buffer = bytearray(stored if stored is not None else data)
        if h.rebase is not None:
            h.rebase = len(h.buffer)

    def commit(self, inode: Inode) -> None:
        """Make an inode's written bytes durable according to its role: a tier's save, a
        scratch file parked."""
        role = inode.role
        if role == Role.SCRATCH and inode.data is not None:
            self.park(inode)
        if role == Role.SCRATCH or inode.data is None:
            inode.dirty = False
            return
        try:
            if role == Role.TIER:
                assert inode.node is not None and inode.tier is not None
                self.save_tier(inode, inode.node, inode.tier, bytes(inode.data))
        except ContextFSError as exc:
            data = bytes(inode.data)
            refusal = self.refusals.refuse_commit(inode, exc, data)
            inode.dirty = False
            assert inode.node is not None and inode.tier is not None
            inode.data = (
                None
                if inode.opened <= 0
                else bytearray(inode.node.tier(inode.tier).encode("utf-8"))
            )
            self.table.invalidate(inode)
            self.leave_trace(inode.parent, inode.name, data, refusal)
            raise
        inode.dirty = False

    def write_back(self, inode: Inode, data: bytes) -> None:
        """What a copier wrote into meta.yaml or a `.history` version, at its close.

        The bytes the file shows: nothing changes (`cp`, `rsync`, `tar x` writing back what
        they read). A version written into a node with no version yet: kept, and stored
        before its L2.md (`first_save`). meta.yaml written into a node made by mkdir
        during this mount: taken and not kept when it reads as a meta.yaml (a copy's: its
        facts are the node it came from; the new node has its own). Anything else is a
        conflict: EACCES, with the reason."""
        n = inode.node
        assert n is not None
        if inode.role == Role.VERSION and inode.data is not None and n.version == 0:  # pending
            decode_text(data, inode.name)
            inode.data = bytearray(data)
            if not inode.time_set:  # else the copier's (tar x sets it before the close)
                inode.mtime_ns = time.time_ns()
            return
        transient = inode.role == Role.VERSION and inode.data is not None
        if transient:  # made again by a copier that unlinked it (tar x): as stored
            stored = inode.version <= n.version
            shown = self.memory.history_text(n, inode.version).encode() if stored else b""
        else:
            shown = self.content(inode)
        d = inode.parent
        if inode.role == Role.VERSION and d is not None:
            d = d.parent
        copy = d.copied_from if d is not None else None
        if inode.role == Role.META and d is not None and (d.made_here or n.version == 0):
            other = _meta_id(data)
            if other is not None and other != n.id:  # another node's: this is its copy
                if copy is None:
                    d.copied_from = [None] * n.version
                return
        if data == shown or (
            inode.role == Role.VERSION
            and copy is not None
            and self._late_version(n, copy, inode.version, decode_text(data, inode.name))
        ):
            if transient and inode.time_set and inode.parent is not None:
                inode.data, stamp = None, inode.mtime_ns  # placed: the copier's time
                self.copied_version_time(inode, stamp)
            if transient and inode.parent is not None:
                # the name shows the stored version again (Nodes.changed makes it)
                self.table.invalidations.append(Invalidation(inode.parent.ino, name=inode.name))
                self.table.unlink_inode(inode)
                inode.data = None
                self.nodes.changed(n)
            return
        what = (
            f"version {inode.version} as stored"
            if inode.role == Role.VERSION
            else f"the facts of {self.memory.node_path(n)}"
        )
        raise ReadOnly(
            f"{inode.name} is derived and read-only: what was written differs from {what} "
            f"(first difference at byte {_first_difference(data, shown)}); only the bytes it "
            "shows can be written back"
        )

    def copied_version_time(self, inode: Inode, mtime_ns: int) -> None:
        """A copier set the time of a `.history/vN.md` it wrote (tar x and cp -a set the
        file's after its close; rsync its temporary file's before the rename): in a node
        the copy is making, the version the file became keeps that time, as its source
        had it. A version still waiting for its node's first L2 keeps it until then
        (`first_save`); elsewhere a version's time is not a file's to set."""
        n = inode.node
        hist = inode.parent
        d = hist.parent if hist is not None else None
        if n is None or hist is None or d is None:
            return
        if inode.data is not None:  # its bytes are not placed yet: at their close
            inode.mtime_ns, inode.time_set = mtime_ns, True
            return
        copy = d.copied_from
        stored = next((p for p, src in enumerate(copy or (), 1) if src == inode.version), None)
        if stored is None:
            return
        self.memory.set_version_time(n, stored, mtime_ns / 1e9)
        shown = (hist.children or {}).get(f"v{stored}.md")
        if shown is not None and shown.data is None:
            shown.mtime_ns = mtime_ns
            self.table.invalidate(shown)

    def _late_version(self, n: Node, copy: list[int | None], number: int, text: str) -> bool:
        """A version written back into a copy after its L2.md (rsync copies a folder's
        files before its subfolders): put into the history where its number goes among
        the versions the copy wrote back, before the current L2, which stays the newest.
        False when it has no place there (newer than the current L2): a conflict."""
        copy.extend([None] * (n.version - len(copy)))  # saves since: L2.md's
        saves = [p for p, src in enumerate(copy, 1) if src is None]
        for p in saves:  # the save that wrote this very text: it had this number
            if self.memory.history_text(n, p) == text:
                copy[p - 1] = number
                return True
        place = next((p for p, src in enumerate(copy, 1) if src is None or src > number), None)
        if place is None:
            return False
        self.memory.insert_version(n, place, text)
        copy.insert(place - 1, number)
        self.nodes.changed(n)  # the versions from `place` on read again
        return True

    def first_save(
        self,
        d: Inode | None,
        n: Node,
        text: str,
        reason: str = "write",
        *,
        appended_to: str | None = None,
    ) -> bool:
        """L2's save; in a node with no version yet, the versions written back into its
        `.history` are stored first, in order (a copy keeps its history), and L0/L1 written
        before it stay as written when they differ from what this L2 derives (a copy keeps
        its pins). Returns whether a version was stored."""
        if n.version > 0 or d is None:
            if d is not None:
                d.copied_from = None  # saved again: no longer a copy being made
            return self.memory.save_l2(n, text, reason, appended_to=appended_to)
        hist = (d.children or {}).get(HISTORY_DIR)
        pending = sorted(
            (c for c in (hist.children or {}).values() if c.role == Role.VERSION and c.data)
            if hist is not None
            else (),
            key=lambda c: c.version,
        )
        pins = {
            tier: (n.l0 if tier == "L0" else n.l1)
            for tier, pinned in (("L0", n.l0_pinned), ("L1", n.l1_pinned))
            if pinned
        }
        with self.memory.transaction():
            numbers: list[int | None] = []
            for c in pending:
                assert c.data is not None
                text_c = decode_text(bytes(c.data), c.name)
                # saved at the file's time: a copier set its source's (tar x, cp -a, rsync)
                if self.memory.save_l2(n, text_c, reason, at=c.mtime_ns / 1e9):
                    numbers.append(c.version)
            changed = self.memory.save_l2(n, text, reason)
            if numbers:
                d.copied_from = [*numbers, *([None] if changed else [])]
            for tier, pinned_text in pins.items():
                if pinned_text != (n.l0 if tier == "L0" else n.l1):
                    self.memory.save_pinned(n, tier, pinned_text)
        for c in pending:
            # stored: what it shows comes from the store now; a number the store gave
            # another version goes, and `Nodes.changed` shows the stored ones
            c.data = None
            if not any(v == c.version for v, _c, _s in n.history) and c.parent is not None:
                self.table.invalidations.append(Invalidation(c.parent.ino, name=c.name))
                self.table.unlink_inode(c)
        return changed or bool(pending)

    def save_tier(
        self, inode: Inode, n: Node, tier: str, data: bytes, *, appended_to: str | None = None
    ) -> bytes | None:
        """Save data as a tier; returns what is stored when it differs from data (a secret
        was redacted), else None. appended_to: data is an append (O_APPEND) to this text
        (`Memory.save_l2`)."""
        text = decode_text(data, f"{tier}.md")
        if tier == "L2":
            changed = self.first_save(inode.parent, n, text, appended_to=appended_to)
        else:
            changed = self.memory.save_pinned(n, tier, text)
        if changed:
            self.nodes.changed(n, writer=inode)
            stored = n.tier(tier).encode("utf-8")
            if stored != data:  # a secret was redacted: the file shows what is stored
                if inode.data is not None:
                    inode.data = bytearray(stored) if inode.opened > 0 else None
                self.table.invalidate(inode)
                return stored
        return None

    @staticmethod
    def parks(d: Inode | None) -> bool:
        """Whether a temporary or scratch file in d is parked: kept in the store as it was
        closed, never routed, until it is renamed or removed (a type directory, or a
        singleton's). Scratch files elsewhere (in a node) live in daemon memory only."""
        return d is not None and (
            d.role == Role.TYPEDIR
            or (d.role == Role.NODE and d.ctype is not None and d.ctype.singleton)
        )

    def park(self, inode: Inode) -> None:
        """Store a temporary or scratch file of a type directory, so that a save that
        returned survives a remount (SPEC §8: nothing a user wrote is lost)."""
        if inode.owner is None or inode.ctype is None or not self.parks(inode.parent):
            if inode.drop_id is not None:  # moved out of a type directory
                self.memory.routing.forget_drop(inode.drop_id)
                inode.drop_id = None
            return
        if inode.drop_id is None:
            inode.drop_id = self.memory.new_id()
        data = bytes(inode.data or b"")
        self.memory.routing.persist_drop(
            inode.drop_id, inode.owner, inode.ctype, inode.name, data, self._parked_access(inode)
        )

    def _parked_access(self, inode: Inode) -> Access | None:
        """A parked file's owner, group and mode, to show again after a remount (None:
        the defaults, the daemon's user and 0644)."""
        mode = stat.S_IMODE(inode.mode)
        if (inode.uid, inode.gid, mode) == (self.table.uid, self.table.gid, 0o644):
            return None
        return Access(inode.uid, inode.gid, mode, mode)

    def restore_parked(self) -> None:
        """At mount: show the parked files again where they were closed."""
        for drop_id, owner, tname, filename, data in self.memory.routing.parked_files():
            od = self.nodes.owner_dirs.get(owner)
            ctype = self.memory.types.get(tname)
            d = od.children.get(ctype.type_dir) if od and od.children and ctype else None
            if d is None or d.children is None or filename in d.children:
                continue
            a = self.memory.access.get(("parked", str(drop_id)))
            self.table.new(
                Role.SCRATCH,
                stat.S_IFREG | (a.file_mode if a else 0o644),
                filename,
                d,
                node=d.node,
                owner=owner,
                ctype=ctype,
                data=bytearray(data),
                drop_id=drop_id,
                uid=a.uid if a else self.table.uid,
                gid=a.gid if a else self.table.gid,
            )

    def route_drop(self, inode: Inode) -> Node:
        """A file written into a type directory becomes memory (the node it went to),
        then leaves the tree (its name finds it for a few seconds: `InodeTable.routed`).
        Written again through that name, it is routed again."""
        parent = inode.parent if inode.parent is not None else self.table.routed_from(inode)
        data = bytes(inode.data or b"")
        inode.dirty = False
        assert inode.owner is not None and inode.ctype is not None
        try:
            res = self.route(inode.owner, inode.ctype, inode.name, data, inode.mode)
        except ContextFSError as exc:
            refusal = self.refusals.refuse_commit(inode, exc, data)
            self._forget_drop(inode, parent)
            self.leave_trace(
                parent, inode.name, data, refusal, inode.uid, inode.gid, stat.S_IMODE(inode.mode)
            )
            raise
        except BaseException:
            self._forget_drop(inode, parent)
            raise
        self._forget_drop(inode, parent)
        if parent is not None:
            if inode.opened <= 1:  # (the closing handle's): its bytes are memory now
                inode.data = bytearray()  # the name finds an empty file, no secret in it
            self.table.routed(parent, inode)
        if res.created:  # what a user creates is theirs: their uid, gid and mode
            self.perms.node_made(res.node, inode.mode, inode.uid, inode.gid)
        self.nodes.routed(res.node, res.created)
        return res.node

    def route(
        self,
        owner: tuple[str, str],
        ctype: ContextType,
        name: str,
        data: bytes,
        mode: int | None = None,
    ) -> RouteResult:
        """A file closed in (or renamed into) a type directory: a node's file as
        `contextfs export` wrote it (`<name>.md` with a `contextfs:` mapping: `rsync`,
        `tar x` or `cp` of an export) is that node (`exported`; `mode`: the file's, which
        its node's files take); anything else is routed by the type's strategy."""
        note = _exported_note(ctype, name, data)
        if note is not None:
            node_name = "" if ctype.singleton else name[:-3]
            done = self.exported(owner, ctype, node_name, note, mode)
            if done is not None:
                return done
            data = note.l2.encode()  # a node of that name with versions: its strategy
        return self.memory.routing.route(owner, ctype, name, data)

    def exported(
        self,
        owner: tuple[str, str],
        ctype: ContextType,
        name: str,
        note: Note,
        mode: int | None = None,
    ) -> RouteResult | None:
        """The node `name` as exported: made with its L2 and hand-written L0/L1 when there
        is none (its facts start again, as for any write through a file: `contextfs
        import` restores them), or, when a node made by `mkdir` has no version yet (rsync
        makes a node's folder, its `.history` and attachments before the file beside it),
        given them, after the versions written into its `.history`, and its files the
        mode of the file (`mode`), as a node made from the file alone gets it: not the
        one its folder was made with (`rsync` and `tar` make it 0700 and chmod it after).
        Either way it is a copy being made: versions written into its `.history` later
        (`tar x` extracts the file first) take their places before its L2. None: a node
        with versions is there."""
        pins = note.pins
        n = self.memory.live_node(owner, ctype, name)
        if n is not None and n.version > 0:
            return None
        created = n is None
        if n is None:
            texts = [(note.l2, None)] if note.l2 else []  # a node never written: no version
            n = restore_node(self.memory, owner, ctype, name, texts, pins, {})
            self.nodes.routed(n, True)
            d = self.nodes.node_inode(n)
        else:
            d = self.nodes.node_inode(n)
            with self.memory.transaction():
                if mode is not None:
                    self.perms.files_mode(n, mode)
                if note.l2:  # a node exported never written stays so: no empty version
                    self.first_save(d, n, note.l2)
                for tier, text in pins.items():
                    self.memory.save_pinned(n, tier, text)
            self.nodes.changed(n)
        if d is not None:
            d.made_here = True
            if d.copied_from is None:
                d.copied_from = [None] * n.version
        return RouteResult(n, created, changed=True, folded=0)

    def _forget_drop(self, inode: Inode, parent: Inode | None) -> None:
        """A drop was routed or refused: it leaves the tree, and its pending row the store."""
        if inode.drop_id is not None:
            self.memory.routing.forget_drop(inode.drop_id)
            inode.drop_id = None
        if parent is not None:
            # drops are never cached by the kernel (volatile): no invalidation needed
            self.table.unlink_inode(inode)

    # ---- traces of refused writes --------------------------------------------------------

    def leave_trace(
        self,
        d: Inode | None,
        name: str,
        data: bytes,
        refusal: Refusal,
        uid: int | None = None,
        gid: int | None = None,
        mode: int | None = None,
    ) -> None:
        """A write refused at close stays visible where it was made, as `NAME.refused`:
        the reason, then the bytes (memory.document.trace_bytes), until it is removed.

        `printf … > NAME` (bash ignores close()'s error) and a Python file closed by the
        garbage collector never show the errno; this is what they see instead. In a type
        directory (or a singleton never written) it is a parked file (kept in the store,
        never routed); in a node directory an attachment of the node, which moves, is
        deleted and is private with it. It takes the owner, group and mode of the refused
        file (a tier's: the node's), so no one reads it who could not read that. A later
        refusal of the same NAME replaces it (every refused write is also in refused/)."""
        t = self.table
        if d is not None:  # a node made by mkdir here that lost to another mount's
            d = self.nodes.in_place_of(d)
        if d is None or d.trashed or not data or d.role not in (Role.TYPEDIR, Role.NODE):
            return
        if self.memory.failsafe:
            return  # the store takes nothing now: .status and refused/ say it all
        tname = trace_name(name)
        if len(os.fsencode(tname)) > NAME_MAX:
            return  # no room for the suffix: .status and refused/ say it all
        try:
            t.ensure(d)
            assert d.children is not None
            old = d.children.get(tname)
            if old is not None and (old.is_dir or old.role not in (Role.SCRATCH, Role.ATTACH)):
                return
            body = self.memory.trace_of(refusal, tname, data)
            n = d.node
            if d.role == Role.NODE and n is not None:
                a = self.perms.node_access(n)
                if old is not None:  # a scratch file or an attachment
                    if old.role == Role.ATTACH:
                        self.attachments.unlink(d, old)
                    else:
                        self.unlink(d, old)
                att = self.memory.attachment_store.add_attachment(
                    n, None, tname, "file", a.file_mode if mode is None else mode, data=body
                )
                inode = self.attachments.inode_for(d, n, att)
                self.perms.created(
                    inode, att.mode, a.uid if uid is None else uid, a.gid if gid is None else gid
                )
            else:
                assert d.owner is not None and d.ctype is not None
                if old is not None:
                    self.unlink(d, old)
                inode = t.new(
                    Role.SCRATCH,
                    stat.S_IFREG | (0o644 if mode is None else mode),
                    tname,
                    d,
                    node=n,
                    owner=d.owner,
                    ctype=d.ctype,
                    data=bytearray(body),
                    uid=t.uid if uid is None else uid,
                    gid=t.gid if gid is None else gid,
                )
                self.park(inode)
            self.attachments.touch_dir(d)
        except ContextFSError as exc:
            # the refusal itself is recorded and its bytes kept: only the trace is missing
            log.warning("no trace of the refused write %s: %s", t.child_path(d, tname), exc)

    # ---- removing ------------------------------------------------------------------------

    def _copy_unlinks(self, d: Inode, child: Inode) -> bool:
        """`tar x` into a copy being made unlinks meta.yaml and each version it finds there
        before it writes its own (`Tiers.write_back` takes them): in a node made by mkdir
        during this mount that may be a copy being made (at most the one version its
        L2.md gave it, tar extracting a node's tiers before its `.history`; or versions
        written back by a copier), the name is hidden until it is written back or the node
        next changes; nothing stored changes. In any other node, `rm -r .history` must not
        look as if it took the history: EACCES."""
        node_dir = d if child.role == Role.META else d.parent
        if node_dir is None or not node_dir.made_here:
            return False
        n = node_dir.node
        if n is not None and n.version > 1 and node_dir.copied_from is None:
            return False  # its own versions: `rm -r .history` takes nothing and hides nothing
        self.table.unlink_inode(child)
        if child.role == Role.META:
            d.unborn = {**(d.unborn or {}), META_FILE: child}  # its number, for `cp`
        return True

    def unlink(self, d: Inode, child: Inode) -> None:
        if child.role in (Role.META, Role.VERSION):
            # Derived: they go with their node. `rm -r` of the node removes its tiers first
            # and then passes over these (0, nothing hidden, the rmdir of the node follows);
            # anywhere else (`rm meta.yaml`, `tar x` over a node, `rm -r .history`): EACCES.
            if self.nodes.emptying(d if child.role == Role.META else d.parent):
                return
            if self._copy_unlinks(d, child):
                return
            raise ReadOnly(
                f"{child.name} is derived and read-only; it goes with its node (rm -r the node)"
            )
        if child.role == Role.TIER:
            # Hidden, not changed: editors and `mv` remove the name before writing a new
            # file, and `rm -r` removes it before rmdir. The stored text stays.
            self.table.unlink_inode(child)
            return
        if child.drop_id is not None:  # a drop or a scratch file
            self.memory.routing.forget_drop(child.drop_id)
        self.table.unlink_inode(child)
        self.attachments.touch_dir(d)


def _exported_note(ctype: ContextType, name: str, data: bytes) -> Note | None:
    """`data` read as the file an export writes for a node of `ctype` named by `name`
    (`<node>.md`; a singleton's, `<type-dir>.md`, beside the type directories or in its
    own), or None when it is not one. One exported as another type is refused."""
    if not name.endswith(".md"):
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    note = read_note(text, ctype.type_dir if ctype.singleton else name[:-3])
    if note.meta is None:
        return None
    if note.meta["type"] != ctype.name:
        raise InvalidInput(
            f"{name} was exported as a node of type {note.meta['type']}; this folder keeps "
            f"type {ctype.name}"
        )
    return note
