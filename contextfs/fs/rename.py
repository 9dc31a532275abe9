"""rename(2): the one operation that crosses roles, one small function per case.

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
from contextfs.fs.handler import RoleBase, missing
from contextfs.fs.inode import READ_ONLY_FILES, TIER_FILES, ChangedBytes, Inode, Role
from contextfs.memory.document import decode_text

if TYPE_CHECKING:
    from contextfs.fs.tree import Tree

RENAME_NOREPLACE, RENAME_EXCHANGE = 1, 2


class _RenameEinval(InvalidInput):
    """An EINVAL rename(2) itself documents (a directory into itself, a flag not
    supported): kept as EINVAL, which mv reports truly."""


def rename(
    t: Tree, src_dir: Inode, old_name: str, dst_dir: Inode, new_name: str, flags: int
) -> None:
    """Every other refusal that is EINVAL elsewhere answers EPERM here: coreutils mv
    prints any EINVAL from rename as "cannot move … to a subdirectory of itself" (and
    with RENAME_NOREPLACE, gnulib retries an EINVAL without it). `.status` says why."""
    t.invalid_errno = errno.EPERM  # for the refusals recorded on the way (Tree.refuse)
    try:
        _rename(t, src_dir, old_name, dst_dir, new_name, flags)
    except InvalidInput as exc:
        if not isinstance(exc, _RenameEinval):
            exc.errno = errno.EPERM
        raise
    finally:
        t.invalid_errno = errno.EINVAL


def _rename(
    t: Tree, src_dir: Inode, old_name: str, dst_dir: Inode, new_name: str, flags: int
) -> None:
    t.check_name(new_name)
    t.ensure(src_dir)
    t.ensure(dst_dir)
    assert src_dir.children is not None and dst_dir.children is not None
    src = src_dir.children.get(old_name)
    if src is None:
        raise missing(t, src_dir, old_name)
    dst = dst_dir.children.get(new_name)
    if flags & RENAME_NOREPLACE and dst is not None:
        raise Exists(f"{t.child_path(dst_dir, new_name)} exists")
    if flags & RENAME_EXCHANGE:
        raise _RenameEinval("exchanging two names is not supported here")
    if src is dst:
        return  # two names of one file: POSIX leaves both
    t.memory.check_writable()
    if src.links:  # a hard-linked file: the name that moves becomes the holder's
        t.attachments.moves_within_node(src, dst_dir, new_name)
        t.attachments.make_primary(src, src_dir, old_name)
    if src.is_dir:
        _rename_dir(t, src, dst_dir, new_name, dst)
    else:
        _rename_file(t, src, dst_dir, new_name, dst)
    src.ctime_ns = time.time_ns()
    for d in {src_dir, dst_dir}:
        if d.role in (Role.ATTACH, Role.NODE, Role.TYPEDIR):
            t.touch_dir(d)


# ---- directories -----------------------------------------------------------------------------


def _rename_dir(t: Tree, src: Inode, dst_dir: Inode, new_name: str, dst: Inode | None) -> None:
    if _is_singleton_restore(src, dst):
        assert dst is not None
        t.trash.restore_singleton(src, dst)
    elif (
        src.role == Role.NODE
        and src.node is not None
        and src.ctype is not None
        and not src.ctype.singleton
    ):
        _move_node(t, src, dst_dir, new_name, dst)
    elif src.role == Role.ATTACH and not src.trashed:
        _move_attachment_dir(t, src, dst_dir, new_name, dst)
    else:
        raise NotPermitted(f"{src.name} cannot be renamed")


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


def _move_node(t: Tree, src: Inode, dst_dir: Inode, new_name: str, dst: Inode | None) -> None:
    """Rename, re-type or restore a node: only into a type directory, never over one."""
    if dst_dir.role != Role.TYPEDIR:
        raise InvalidInput(
            "a node moves only into a type directory (to rename, re-type or restore it)"
        )
    if dst is not None:
        t.ensure(dst)
        if dst.children:
            raise NotEmpty(f"{new_name} already exists and is not empty")
        raise Exists(f"{new_name} already exists")
    n = src.node
    assert n is not None and dst_dir.owner is not None and dst_dir.ctype is not None
    was_trashed = src.trashed
    t.memory.rename_node(n, dst_dir.owner, dst_dir.ctype, new_name)
    t.unlink_inode(src)
    src.name = new_name
    src.owner, src.ctype, src.trashed = dst_dir.owner, dst_dir.ctype, False
    t.link_inode(dst_dir, src)
    if was_trashed and src.populated:
        # restored: the trash view already shows what comes back (its tiers and
        # the attachments removed with it); the same inodes become writable again
        t.trash.retag(src, trashed=False)
    elif was_trashed:
        # never shown since the mount began: its attachments were not live then, so
        # they are read from the store when it is first listed
        src.att_rescan = True
    t.nodes.changed(n)  # meta.yaml shows the new path (and no deleted_at)


def _move_attachment_dir(
    t: Tree, src: Inode, dst_dir: Inode, new_name: str, dst: Inode | None
) -> None:
    if dst_dir.role not in (Role.NODE, Role.ATTACH) or dst_dir.node is None or dst_dir.trashed:
        raise CrossDevice("attachments move between nodes only")
    if dst is not None:
        if not dst.is_dir:
            raise NotADirectory("not a directory")
        t.ensure(dst)
        if dst.children:
            raise NotEmpty(f"{new_name} is not empty")
        if dst.role != Role.ATTACH:
            raise Forbidden(f"{new_name} cannot be replaced")
    cur: Inode | None = dst_dir
    while cur is not None:
        if cur is src:
            raise _RenameEinval("cannot move a directory into itself")
        cur = cur.parent
    t.attachments.move(src, dst_dir, new_name, dst)


# ---- files ------------------------------------------------------------------------------------


def _rename_file(t: Tree, src: Inode, dst_dir: Inode, new_name: str, dst: Inode | None) -> None:
    if src.role in READ_ONLY_FILES or src.trashed:
        raise ReadOnly(f"{src.name} is read-only")
    if dst is not None and dst.is_dir:
        raise IsADirectory("is a directory")
    if dst is not None and (dst.role in READ_ONLY_FILES or dst.trashed):
        raise ReadOnly(f"{new_name} is read-only")
    data = bytes(t.file_bytes(src)) if not stat.S_ISLNK(src.mode) else b""
    if dst_dir.role == Role.NODE and new_name in TIER_FILES and not dst_dir.trashed:
        _save_over_tier(t, src, dst_dir, new_name, dst, data)
        return
    role = _file_role(t, dst_dir, new_name)
    if not stat.S_ISREG(src.mode) and role in (Role.INBOX_NEW, Role.DROP):
        raise _no_symlink_memory(new_name)
    if role == Role.INBOX_NEW:
        _submit_to_inbox(t, src, dst_dir, new_name, dst, data)
    elif role == Role.DROP:
        _route_into_typedir(t, src, dst_dir, new_name, dst, data)
    elif role == Role.TIER:  # unreachable: handled above
        raise InvalidInput("unexpected tier rename")
    else:
        _replace_plain(t, dst_dir, new_name, dst)
        if role == Role.ATTACH:
            _become_attachment(t, src, dst_dir, new_name, data)
        else:
            _become_scratch(t, src, dst_dir, new_name, data)


def _no_symlink_memory(name: str) -> NotSupported:
    """A symlink (or a FIFO, a socket) has no text of its own: renamed where a file becomes
    memory (an inbox, a type directory, a singleton, a tier) it would be an empty memory.
    Refused, and a symlink's target is not followed (it may lie anywhere)."""
    return NotSupported(
        f"a symbolic link, FIFO or socket cannot become a memory ({name}): copy the file "
        "it points to instead (cp -L)"
    )


def _file_role(t: Tree, d: Inode, name: str) -> Role:
    """What a new file `name` in d would become."""
    if d.role == Role.INBOX:
        return t.inbox.new_file_role(d, name)
    if d.role in (Role.TYPEDIR, Role.NODE):
        return t.nodes.new_file_role(d, name)
    if d.role == Role.ATTACH:
        return t.attachments.new_file_role(d, name)
    raise RoleBase.no_files_here(d)


def _drop_source_row(t: Tree, src: Inode) -> None:
    """The source's own store row goes with the move (an attachment's, a pending drop's)."""
    if src.role == Role.ATTACH and src.att is not None:
        t.memory.drop_moved_attachment(src.att)
    if src.drop_id is not None:
        t.memory.forget_drop(src.drop_id)


def _save_over_tier(
    t: Tree, src: Inode, dst_dir: Inode, new_name: str, dst: Inode | None, data: bytes
) -> None:
    """The editor pattern: a temporary file renamed over L2.md is a save (one version).

    One memory transaction: a node made by mkdir and first stored here is marked persisted
    when it commits, so it is not stored again by `persist_pending`."""
    if not stat.S_ISREG(src.mode):
        raise _no_symlink_memory(new_name)
    n = dst_dir.node
    if n is None:
        assert dst_dir.owner is not None and dst_dir.ctype is not None
        n = t.memory.create_node(dst_dir.owner, dst_dir.ctype, "", persist=False)
        dst_dir.node = n
    tier = TIER_FILES[new_name]
    try:
        with t.memory.transaction():
            if tier == "L2":
                t.memory.save_l2(n, decode_text(data, new_name), "rename-over")
            else:
                t.memory.save_pinned(n, tier, decode_text(data, new_name))
            _drop_source_row(t, src)
    except ContextFSError as exc:
        t.refuse(src, exc, data)
        raise
    if not dst_dir.populated:
        t.nodes.populate(dst_dir)
        dst = (dst_dir.children or {}).get(new_name)
    if dst is not None:
        t.unlink_inode(dst)
    t.unlink_inode(src)
    src.name, src.role, src.node, src.tier, src.att = new_name, Role.TIER, n, tier, None
    src.data, src.dirty, src.drop_id = None, False, None
    t.link_inode(dst_dir, src)
    t.nodes.changed(n, writer=src)


def _submit_to_inbox(
    t: Tree, src: Inode, dst_dir: Inode, new_name: str, dst: Inode | None, data: bytes
) -> None:
    """An atomic writer's temp file renamed into an inbox: handed in. A name the inbox
    refuses is refused before anything moves: the file stays where it was."""
    if dst is not None:
        raise Exists(f"{new_name} is already in the inbox")
    refused = t.inbox.refusal(new_name)
    if refused is not None:
        raise refused
    _drop_source_row(t, src)
    t.unlink_inode(src)
    t.inbox.submit(dst_dir, new_name, data)


def _route_into_typedir(
    t: Tree, src: Inode, dst_dir: Inode, new_name: str, dst: Inode | None, data: bytes
) -> None:
    """Renamed into a type directory under a memory name: routed now, in one transaction
    with the source's removal, so a refused one leaves the file where it was (mv says it
    could not move it; the bytes are also kept in refused/)."""
    assert dst_dir.owner is not None and dst_dir.ctype is not None
    try:
        with t.memory.transaction():
            res = t.memory.route(dst_dir.owner, dst_dir.ctype, new_name, data)
            _drop_source_row(t, src)
    except ContextFSError as exc:
        t.refuse(src, exc, data)
        raise
    if dst is not None:
        t.handler(dst).unlink(dst_dir, dst)
    t.unlink_inode(src)
    t.nodes.routed(res.node, res.created)


def _replace_plain(t: Tree, dst_dir: Inode, new_name: str, dst: Inode | None) -> None:
    """What an attachment or scratch file replaces: a hidden tier name, or a removal."""
    if dst is None:
        return
    if dst.role in (Role.TIER, Role.META):
        t.unlink_inode(dst)
    elif dst.role == Role.ATTACH:
        t.attachments.unlink(dst_dir, dst, new_name)
    else:
        t.handler(dst).unlink(dst_dir, dst)


def _become_attachment(t: Tree, src: Inode, dst_dir: Inode, new_name: str, data: bytes) -> None:
    if src.role == Role.ATTACH:
        t.attachments.move(src, dst_dir, new_name, None)
        return
    assert dst_dir.node is not None
    kind = "symlink" if stat.S_ISLNK(src.mode) else "file"
    if kind == "file":  # a scratch file or a drop becomes stored bytes: redact
        stored = t.memory.redact_bytes(data, t.child_path(dst_dir, new_name))
        if stored != data:
            data = stored
            t.invalidate(src)  # the kernel may hold the unredacted pages
    a = t.memory.add_attachment(
        dst_dir.node,
        dst_dir.att.id if dst_dir.att else None,
        new_name,
        kind,
        stat.S_IMODE(src.mode),
        target=src.target,
        data=None if kind == "symlink" else data,
    )
    if src.drop_id is not None:
        t.memory.forget_drop(src.drop_id)
    t.unlink_inode(src)
    src.name, src.role, src.att, src.node = new_name, Role.ATTACH, a, dst_dir.node
    src.data = bytearray(data) if kind == "file" else None
    src.changed = ChangedBytes(src.data) if src.data is not None else None
    src.dirty, src.tier, src.drop_id = False, None, None
    t.link_inode(dst_dir, src)


def _become_scratch(t: Tree, src: Inode, dst_dir: Inode, new_name: str, data: bytes) -> None:
    if src.role == Role.ATTACH and src.att is not None:
        t.memory.drop_moved_attachment(src.att)
    t.unlink_inode(src)
    src.name, src.role, src.att, src.tier = new_name, Role.SCRATCH, None, None
    src.data = bytearray(data)
    src.dirty = False
    src.owner, src.ctype, src.node = dst_dir.owner, dst_dir.ctype, dst_dir.node
    t.link_inode(dst_dir, src)
    if src.drop_id is not None or t.tiers.parks(dst_dir):
        t.tiers.park(src)  # under its new name (or forgotten out of a type directory)
