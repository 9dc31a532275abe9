"""rename(2): the one operation that crosses roles, one small method per case.

Directories: a node moves between type directories (rename, re-type, restore from the
trash), a deleted singleton is restored over its empty type directory, an attachment
folder moves between nodes. Files: a file renamed over a tier is a save (the editor
pattern), into an inbox a submission, into a type directory a routed drop, and anywhere
else in a node an attachment or a scratch file. Each case is one memory transaction.
"""

from __future__ import annotations

import errno
import stat
import time
from typing import TYPE_CHECKING

from contextfs.errors import (
    ContextFSError,
    CrossDevice,
    Exists,
    Forbidden,
    InvalidInput,
    IsADirectory,
    NotADirectory,
    NotEmpty,
    NotPermitted,
    NotSupported,
    ReadOnly,
)
from contextfs.fs.inode import (
    META_FILE,
    READ_ONLY_FILES,
    TIER_FILES,
    ChangedBytes,
    Inode,
    Invalidation,
    Role,
)
from contextfs.fs.roles.attachments import Attachments
from contextfs.fs.roles.base import Refusals, RoleBase, RoleMap, check_name, missing
from contextfs.fs.roles.inbox import Inbox
from contextfs.fs.roles.nodes import Nodes
from contextfs.fs.roles.tiers import Tiers
from contextfs.fs.roles.trash import Trash
from contextfs.fs.table import InodeTable
from contextfs.memory.document import decode_text

if TYPE_CHECKING:
    from contextfs.memory.service import Memory

RENAME_NOREPLACE, RENAME_EXCHANGE = 1, 2


class _RenameEinval(InvalidInput):
    """An EINVAL rename(2) itself documents (a directory into itself, a flag not
    supported): kept as EINVAL, which mv reports truly."""


def _is_singleton_restore(src: Inode, dst: Inode | None) -> bool:
    return (
        src.role == Role.NODE
        and src.trashed
        and src.ctype is not None
        and src.ctype.singleton
        and dst is not None
        and dst.role == Role.NODE
        and dst.ctype is src.ctype
        and dst.node is None
        and dst.owner == src.owner
    )


def _no_symlink_memory(name: str) -> NotSupported:
    """A symlink (or a FIFO, a socket) has no text of its own: renamed where a file becomes
    memory (an inbox, a type directory, a singleton, a tier) it would be an empty memory.
    Refused, and a symlink's target is not followed (it may lie anywhere)."""
    return NotSupported(
        f"a symbolic link, FIFO or socket cannot become a memory ({name}): copy the file "
        "it points to instead (cp -L)"
    )


class Renames:
    """rename(2) across roles: given the handlers of the roles a rename can touch, and the
    role map for the file it may replace (any role's)."""

    def __init__(
        self,
        table: InodeTable,
        memory: Memory,
        roles: RoleMap,
        refusals: Refusals,
        *,
        nodes: Nodes,
        tiers: Tiers,
        attachments: Attachments,
        trash: Trash,
        inbox: Inbox,
    ) -> None:
        self.table = table
        self.memory = memory
        self.roles = roles
        self.refusals = refusals
        self.nodes = nodes
        self.tiers = tiers
        self.attachments = attachments
        self.trash = trash
        self.inbox = inbox

    def rename(
        self, src_dir: Inode, old_name: str, dst_dir: Inode, new_name: str, flags: int
    ) -> None:
        """Every other refusal that is EINVAL elsewhere answers EPERM here: coreutils mv
        prints any EINVAL from rename as "cannot move … to a subdirectory of itself" (and
        with RENAME_NOREPLACE, gnulib retries an EINVAL without it). `.status` says why."""
        # for the refusals recorded on the way (Refusals.refuse)
        self.refusals.invalid_errno = errno.EPERM
        try:
            self._rename(src_dir, old_name, dst_dir, new_name, flags)
        except InvalidInput as exc:
            if not isinstance(exc, _RenameEinval):
                exc.errno = errno.EPERM
            raise
        finally:
            self.refusals.invalid_errno = errno.EINVAL

    def _rename(
        self, src_dir: Inode, old_name: str, dst_dir: Inode, new_name: str, flags: int
    ) -> None:
        check_name(self.memory, new_name)
        self.table.ensure(src_dir)
        self.table.ensure(dst_dir)
        assert src_dir.children is not None and dst_dir.children is not None
        src = src_dir.children.get(old_name)
        if src is None:
            raise missing(self.table, src_dir, old_name)
        dst = dst_dir.children.get(new_name)
        if flags & RENAME_NOREPLACE and dst is not None:
            raise Exists(f"{self.table.child_path(dst_dir, new_name)} exists")
        if flags & RENAME_EXCHANGE:
            raise _RenameEinval("exchanging two names is not supported here")
        if src is dst:
            return  # two names of one file: POSIX leaves both
        self.memory.check_writable()
        if src.links:  # a hard-linked file: the name that moves becomes the holder's
            self.attachments.moves_within_node(src, dst_dir, new_name)
            self.attachments.make_primary(src, src_dir, old_name)
        if src.is_dir:
            self._rename_dir(src, dst_dir, new_name, dst)
        else:
            self._rename_file(src, dst_dir, new_name, dst)
        src.ctime_ns = time.time_ns()
        for d in {src_dir, dst_dir}:
            if d.role in (Role.ATTACH, Role.NODE, Role.TYPEDIR):
                self.attachments.touch_dir(d)

    # ---- directories ---------------------------------------------------------------------

    def _rename_dir(self, src: Inode, dst_dir: Inode, new_name: str, dst: Inode | None) -> None:
        if _is_singleton_restore(src, dst):
            assert dst is not None
            self._restore_singleton(src, dst)
        elif (
            src.role == Role.NODE
            and src.node is not None
            and src.ctype is not None
            and not src.ctype.singleton
        ):
            self._move_node(src, dst_dir, new_name, dst)
        elif src.role == Role.ATTACH and not src.trashed:
            self._move_attachment_dir(src, dst_dir, new_name, dst)
        else:
            raise NotPermitted(f"{src.name} cannot be renamed")

    def _restore_singleton(self, src: Inode, dst: Inode) -> None:
        """mv .trash/profile/profile profile: the deleted node's directory takes the place
        of the empty one, as the kernel expects after a rename over an empty directory."""
        self.table.ensure(dst)
        if any(c.role != Role.SCRATCH for c in (dst.children or {}).values()):
            raise NotEmpty(f"{dst.name} is not empty")
        n = src.node
        assert n is not None and dst.owner is not None and dst.ctype is not None
        self.memory.rename_node(n, dst.owner, dst.ctype, "")
        owner_dir = dst.parent
        assert owner_dir is not None
        self.table.unlink_inode(src)
        self.table.unlink_inode(dst)
        src.name, src.trashed = dst.name, False
        self.table.link_inode(owner_dir, src)
        if src.populated:
            self.trash.retag(src, trashed=False)
        self.nodes.changed(n)

    def _move_node(self, src: Inode, dst_dir: Inode, new_name: str, dst: Inode | None) -> None:
        """Rename, re-type or restore a node: only into a type directory, never over one."""
        if dst_dir.role != Role.TYPEDIR:
            raise InvalidInput(
                "a node moves only into a type directory (to rename, re-type or restore it)"
            )
        if dst is not None:
            self.table.ensure(dst)
            if dst.children:
                raise NotEmpty(f"{new_name} already exists and is not empty")
            raise Exists(f"{new_name} already exists")
        n = src.node
        assert n is not None and dst_dir.owner is not None and dst_dir.ctype is not None
        was_trashed = src.trashed
        self.memory.rename_node(n, dst_dir.owner, dst_dir.ctype, new_name)
        self.table.unlink_inode(src)
        src.name = new_name
        src.owner, src.ctype, src.trashed = dst_dir.owner, dst_dir.ctype, False
        self.table.link_inode(dst_dir, src)
        if was_trashed and src.populated:
            # restored: the trash view already shows what comes back (its tiers and
            # the attachments removed with it); the same inodes become writable again
            self.trash.retag(src, trashed=False)
        elif was_trashed:
            # never shown since the mount began: its attachments were not live then, so
            # they are read from the store when it is first listed
            src.att_rescan = True
        self.nodes.changed(n)  # meta.yaml shows the new path (and no deleted_at)

    def _move_attachment_dir(
        self, src: Inode, dst_dir: Inode, new_name: str, dst: Inode | None
    ) -> None:
        if dst_dir.role not in (Role.NODE, Role.ATTACH) or dst_dir.node is None or dst_dir.trashed:
            raise CrossDevice("attachments move between nodes only")
        if dst is not None:
            if not dst.is_dir:
                raise NotADirectory("not a directory")
            self.table.ensure(dst)
            if dst.children:
                raise NotEmpty(f"{new_name} is not empty")
            if dst.role != Role.ATTACH:
                raise Forbidden(f"{new_name} cannot be replaced")
        cur: Inode | None = dst_dir
        while cur is not None:
            if cur is src:
                raise _RenameEinval("cannot move a directory into itself")
            cur = cur.parent
        self.attachments.move(src, dst_dir, new_name, dst)

    # ---- files ---------------------------------------------------------------------------

    def _rename_file(self, src: Inode, dst_dir: Inode, new_name: str, dst: Inode | None) -> None:
        if src.role in READ_ONLY_FILES or src.trashed:
            raise ReadOnly(f"{src.name} is read-only")
        if src.role in (Role.SESSION_TRANSCRIPT, Role.SESSION_CONTROL):
            # its session would go on without it (no append, no end by control) while its
            # turns were handed in elsewhere too, to be filed twice
            raise NotPermitted(
                f"{src.name} belongs to its live session and stays there: copy it (cp), "
                "and end the session with rmdir"
            )
        if dst is not None and dst.is_dir:
            raise IsADirectory("is a directory")
        written_back = dst is not None and dst.role in (Role.META, Role.VERSION)
        if dst is not None and ((dst.role in READ_ONLY_FILES and not written_back) or dst.trashed):
            raise ReadOnly(f"{new_name} is read-only")
        if (
            src.role == Role.ATTACH
            and dst_dir.role in (Role.NODE, Role.ATTACH)
            and new_name not in TIER_FILES
            and new_name != META_FILE
            and self._file_role(dst_dir, new_name) == Role.ATTACH
        ):
            # an attachment to another attachment name: its stored bytes stay where they
            # are (not read: a big file would be read whole for nothing)
            self._replace_plain(dst_dir, new_name, dst)
            self.attachments.move(src, dst_dir, new_name, None)
            return
        data = bytes(self.roles.file_bytes(src)) if not stat.S_ISLNK(src.mode) else b""
        if dst_dir.role == Role.HISTORY or (dst_dir.role == Role.NODE and new_name == META_FILE):
            self._write_back(src, dst_dir, new_name, dst, data)
            return
        if dst_dir.role == Role.NODE and new_name in TIER_FILES and not dst_dir.trashed:
            self._save_over_tier(src, dst_dir, new_name, dst, data)
            return
        role = self._file_role(dst_dir, new_name)
        if not stat.S_ISREG(src.mode) and role in (Role.INBOX_NEW, Role.DROP):
            raise _no_symlink_memory(new_name)
        if role == Role.INBOX_NEW:
            self._submit_to_inbox(src, dst_dir, new_name, dst, data)
        elif role == Role.DROP:
            self._route_into_typedir(src, dst_dir, new_name, dst, data)
        elif role == Role.TIER:  # unreachable: handled above
            raise InvalidInput("unexpected tier rename")
        else:
            self._replace_plain(dst_dir, new_name, dst)
            if role == Role.ATTACH:
                self._become_attachment(src, dst_dir, new_name, data)
            else:
                self._become_scratch(src, dst_dir, new_name, data)

    def _write_back(
        self, src: Inode, dst_dir: Inode, new_name: str, dst: Inode | None, data: bytes
    ) -> None:
        """A copier's temporary file renamed over meta.yaml or a `.history` version (rsync,
        atomic writers): what it holds is written back (`Tiers.write_back`: the bytes the
        file shows, or a new node's copy), and the temporary file is gone; anything else
        is refused and the file stays where it was. In `.history` a copier's temporary
        name may also be renamed to another temporary name."""
        if not stat.S_ISREG(src.mode):
            raise _no_symlink_memory(new_name)
        made = None
        if dst is None:
            role = self.nodes.new_file_role(dst_dir, new_name)
            if role == Role.SCRATCH:
                self._replace_plain(dst_dir, new_name, dst)
                self._become_scratch(src, dst_dir, new_name, data)
                return
            if role == Role.META:
                self.nodes.begin_singleton(dst_dir)  # before a singleton's first save
                dst = self.nodes.bear(dst_dir, META_FILE)
            else:  # a version of a node that has none yet, stored before its L2.md
                dst = self.nodes.pending_version(dst_dir, new_name)
                made = dst
        try:
            with self.memory.transaction():
                self.tiers.write_back(dst, data)
                self._drop_source_row(src)
                if dst.role == Role.VERSION:  # rsync set its source's time on the temp file
                    self.tiers.copied_version_time(dst, src.mtime_ns)
        except ContextFSError as exc:
            self.refusals.refuse(dst, exc, data)
            if made is not None and made.parent is not None:
                self.table.unlink_inode(made)
            raise
        self._keep_replaced(src, dst_dir, new_name)

    def _keep_replaced(self, src: Inode, dst_dir: Inode, new_name: str) -> None:
        """A rename over a file that keeps its inode (meta.yaml, a version, L0.md or
        L1.md): the renamed file goes, and the kernel, which gave the name to the renamed
        inode, looks the name up again. The replaced file keeps its inode number, by
        which `cp` orders what it copies (docs/reference.md, "Copying nodes")."""
        self.table.unlink_inode(src)
        self.table.invalidations.append(Invalidation(dst_dir.ino, name=new_name))
        shown = (dst_dir.children or {}).get(new_name)
        if shown is not None:
            self.table.invalidate(shown)

    def _file_role(self, d: Inode, name: str) -> Role:
        """What a new file `name` in d would become."""
        if d.role == Role.INBOX:
            return self.inbox.new_file_role(d, name)
        if d.role in (Role.TYPEDIR, Role.NODE, Role.OWNER):
            return self.nodes.new_file_role(d, name)
        if d.role == Role.ATTACH:
            return self.attachments.new_file_role(d, name)
        raise RoleBase.no_files_here(d)

    def _drop_source_row(self, src: Inode) -> None:
        """The source's own store row goes with the move (an attachment's, a pending drop's)."""
        if src.role == Role.ATTACH and src.att is not None:
            self.memory.attachment_store.drop_moved_attachment(src.att)
        if src.drop_id is not None:
            self.memory.routing.forget_drop(src.drop_id)

    def _save_over_tier(
        self, src: Inode, dst_dir: Inode, new_name: str, dst: Inode | None, data: bytes
    ) -> None:
        """The editor pattern: a temporary file renamed over L2.md is a save (one version).

        One memory transaction: a node made by mkdir and first stored here is marked persisted
        when it commits, so it is not stored again by `persist_pending`."""
        if not stat.S_ISREG(src.mode):
            raise _no_symlink_memory(new_name)
        n = dst_dir.node
        if n is None:
            assert dst_dir.owner is not None and dst_dir.ctype is not None
            n = self.memory.create_node(dst_dir.owner, dst_dir.ctype, "", persist=False)
            dst_dir.node = n
        tier = TIER_FILES[new_name]
        try:
            with self.memory.transaction():
                if tier == "L2":
                    self.tiers.first_save(dst_dir, n, decode_text(data, new_name), "rename-over")
                else:
                    self.memory.save_pinned(n, tier, decode_text(data, new_name))
                self._drop_source_row(src)
        except ContextFSError as exc:
            self.refusals.refuse(src, exc, data)
            raise
        if not dst_dir.populated:
            self.nodes.populate(dst_dir)
            dst = (dst_dir.children or {}).get(new_name)
        if dst is not None and tier != "L2" and dst.role == Role.TIER:
            self._keep_replaced(src, dst_dir, new_name)
            self.nodes.changed(n)
            return
        if dst is not None:
            self.table.unlink_inode(dst)
        self.table.unlink_inode(src)
        src.name, src.role, src.node, src.tier, src.att = new_name, Role.TIER, n, tier, None
        src.data, src.dirty, src.drop_id = None, False, None
        self.table.link_inode(dst_dir, src)
        self.nodes.changed(n, writer=src)

    def _submit_to_inbox(
        self, src: Inode, dst_dir: Inode, new_name: str, dst: Inode | None, data: bytes
    ) -> None:
        """An atomic writer's temp file renamed into an inbox: handed in. A name the inbox
        refuses is refused before anything moves: the file stays where it was."""
        if dst is not None:
            raise Exists(f"{new_name} is already in the inbox")
        refused = self.inbox.refusal(new_name)
        if refused is not None:
            raise refused
        self._drop_source_row(src)
        self.table.unlink_inode(src)
        self.inbox.submit(dst_dir, new_name, data)

    def _route_into_typedir(
        self, src: Inode, dst_dir: Inode, new_name: str, dst: Inode | None, data: bytes
    ) -> None:
        """Renamed into a type directory under a memory name: routed now, in one transaction
        with the source's removal, so a refused one leaves the file where it was (mv says it
        could not move it; the bytes are also kept in refused/)."""
        # an owner directory takes only a singleton's exported file (`Nodes.new_file_role`)
        ctype = dst_dir.ctype or self.nodes.singleton_file_type(dst_dir, new_name)
        assert dst_dir.owner is not None and ctype is not None
        try:
            with self.memory.transaction():
                res = self.tiers.route(dst_dir.owner, ctype, new_name, data, src.mode)
                self._drop_source_row(src)
        except ContextFSError as exc:
            self.refusals.refuse(src, exc, data)
            raise
        if dst is not None:
            self.roles.of(dst).unlink(dst_dir, dst)
        self.table.unlink_inode(src)
        if src.role in (Role.SCRATCH, Role.DROP) and src.opened <= 0:
            # what a copier does by the new name next (a chmod) finds it a moment longer
            src.role, src.name, src.drop_id = Role.DROP, new_name, None
            src.owner, src.ctype, src.data = dst_dir.owner, ctype, bytearray()
            self.table.routed(dst_dir, src)
        if res.created:  # what a user creates is theirs, renamed in as written in
            self.tiers.perms.node_made(res.node, src.mode, src.uid, src.gid)
        self.nodes.routed(res.node, res.created)

    def _replace_plain(self, dst_dir: Inode, new_name: str, dst: Inode | None) -> None:
        """What an attachment or scratch file replaces: a hidden tier name, or a removal."""
        if dst is None:
            return
        if dst.role in (Role.TIER, Role.META):
            self.table.unlink_inode(dst)
        elif dst.role == Role.ATTACH:
            self.attachments.unlink(dst_dir, dst, new_name)
        else:
            self.roles.of(dst).unlink(dst_dir, dst)

    def _become_attachment(self, src: Inode, dst_dir: Inode, new_name: str, data: bytes) -> None:
        if src.role == Role.ATTACH:
            self.attachments.move(src, dst_dir, new_name, None)
            return
        self.nodes.begin_singleton(dst_dir)  # a singleton never written: its first one
        assert dst_dir.node is not None
        kind = "symlink" if stat.S_ISLNK(src.mode) else "file"
        if kind == "file":  # a scratch file or a drop becomes stored bytes: redact
            stored = self.memory.redact_bytes(data, self.table.child_path(dst_dir, new_name))
            if stored != data:
                data = stored
                self.table.invalidate(src)  # the kernel may hold the unredacted pages
        a = self.memory.attachment_store.add_attachment(
            dst_dir.node,
            dst_dir.att.id if dst_dir.att else None,
            new_name,
            kind,
            stat.S_IMODE(src.mode),
            target=src.target,
            data=None if kind == "symlink" else data,
        )
        if src.drop_id is not None:
            self.memory.routing.forget_drop(src.drop_id)
        self.table.unlink_inode(src)
        src.name, src.role, src.att, src.node = new_name, Role.ATTACH, a, dst_dir.node
        src.data = bytearray(data) if kind == "file" else None
        src.changed = ChangedBytes(src.data) if src.data is not None else None
        src.dirty, src.tier, src.drop_id = False, None, None
        self.table.link_inode(dst_dir, src)

    def _become_scratch(self, src: Inode, dst_dir: Inode, new_name: str, data: bytes) -> None:
        if src.role == Role.ATTACH and src.att is not None:
            self.memory.attachment_store.drop_moved_attachment(src.att)
        self.table.unlink_inode(src)
        src.name, src.role, src.att, src.tier = new_name, Role.SCRATCH, None, None
        src.data = bytearray(data)
        src.dirty = False
        src.owner, src.ctype, src.node = dst_dir.owner, dst_dir.ctype, dst_dir.node
        self.table.link_inode(dst_dir, src)
        if src.drop_id is not None or self.tiers.parks(dst_dir):
            self.tiers.park(src)  # under its new name (or forgotten out of a type directory)
