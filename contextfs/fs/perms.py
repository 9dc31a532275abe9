"""Who owns what in the tree, and who may read it: owners, groups and modes of owner
directories, nodes and attachments, kept in the store (`Memory.access`) so a chmod or a
chown survives a remount, and the check a query applies for each caller.

The kernel enforces the modes this module reports (the mount always runs with
`default_permissions`). What it cannot see is what a virtual directory gathers from many
nodes (`.query`, `.status`): those ask `may_read` for the caller. A node's one mode covers
all its tiers (L0, L1, L2), and, without the write bits, `meta.yaml` and `.history`:
hiding L2 while its abstract or an old version stays readable would hide nothing. Type
directories and an owner's trash follow the owner directory. Pure Python, no pyfuse3.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from typing import TYPE_CHECKING

from contextfs.errors import NotPermitted
from contextfs.fs.inode import Inode, Role
from contextfs.model import DIR_MODE, FILE_MODE, Access, Node

if TYPE_CHECKING:
    from contextfs.memory.service import Memory

_NO_WRITE = ~0o222
_NO_GROUP_OTHER_WRITE = ~0o022
# An owner's fixed folders: their own stored access, else the owner directory's.
FIXED_DIRS = frozenset({Role.TYPEDIR, Role.TRASH, Role.TRASH_TYPE, Role.INBOX, Role.SESSIONS})
# Roles whose owner, group and mode come from the stored access of their owner or node.
OWNED = frozenset(
    {
        Role.OWNER,
        Role.TYPEDIR,
        Role.TRASH,
        Role.TRASH_TYPE,
        Role.NODE,
        Role.TIER,
        Role.META,
        Role.HISTORY,
        Role.VERSION,
        Role.ATTACH,
    }
)

# Inside an owner's .inbox and .sessions: the owner directory's user and group, own modes.
OWNER_USED = frozenset(
    {
        Role.INBOX_NEW,
        Role.INBOX_ITEM,
        Role.INBOX_REPORT,
        Role.SESSION,
        Role.SESSION_CONTEXT,
        Role.SESSION_TRANSCRIPT,
        Role.SESSION_CONTROL,
    }
)


@dataclass(frozen=True, slots=True)
class Caller:
    """Who asks: a uid and every group it is in (the kernel sends only the primary group;
    the others are read from /proc/<pid>/status)."""

    uid: int
    groups: frozenset[int]

    @classmethod
    def of(cls, uid: int, gid: int, pid: int) -> Caller:
        groups = {gid}
        try:
            with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
                for line in f:
                    if line.startswith("Groups:"):
                        groups.update(int(g) for g in line.split()[1:])
                        break
        except OSError:
            pass  # the process is gone: its primary group only
        return cls(uid, frozenset(groups))

    @property
    def key(self) -> str:
        return f"{self.uid}:{','.join(map(str, sorted(self.groups)))}"


def allows(caller: Caller, uid: int, gid: int, mode: int, want: int) -> bool:
    """POSIX: the owner's bits for the owner, the group's for a member, else the others'.
    `want` is a combination of os.R_OK, os.W_OK, os.X_OK. Root may do anything."""
    if caller.uid == 0:
        return True
    if caller.uid == uid:
        bits = mode >> 6
    elif gid in caller.groups:
        bits = mode >> 3
    else:
        bits = mode
    return (bits & want) == want


class Perms:
    """Owners, groups and modes of the owned part of the tree, read from and written to
    `Memory.access`."""

    def __init__(self, memory: Memory, uid: int, gid: int) -> None:
        self.memory = memory
        self.uid = uid  # the defaults: the daemon's
        self.gid = gid

    # ---- reading -------------------------------------------------------------------------

    def owner_access(self, owner: tuple[str, str]) -> Access:
        return self.memory.owner_access(f"{owner[0]}/{owner[1]}", self.uid, self.gid)

    def node_access(self, n: Node) -> Access:
        found = self.memory.access.get(("node", str(n.id)))
        if found is not None:
            return found
        o = self.owner_access(n.owner)
        return Access(o.uid, o.gid, DIR_MODE, FILE_MODE)

    def dir_access(self, owner: tuple[str, str], rel: str) -> Access:
        """A fixed folder of an owner (`preferences`, `.trash/preferences`, `.inbox`): its
        own stored access once chmod/chown set one, else the owner directory's."""
        return self.memory.dir_access(f"{owner[0]}/{owner[1]}/{rel}", self.uid, self.gid)

    def _fixed_dir(self, inode: Inode) -> str | None:
        """The path under its owner of a fixed folder, None for anything else."""
        if inode.owner is None or not (
            inode.role in FIXED_DIRS or (inode.role == Role.NODE and inode.node is None)
        ):
            return None
        names = []
        d: Inode | None = inode
        while d is not None and d.role != Role.OWNER:
            names.append(d.name)
            d = d.parent
        if d is None:  # the root's .inbox and .sessions: the default owner's own folders
            return inode.name
        return "/".join(reversed(names))

    def attrs(self, inode: Inode) -> tuple[int, int, int]:
        """(st_mode, uid, gid) of an inode."""
        role = inode.role
        kind = stat.S_IFMT(inode.mode)
        rel = self._fixed_dir(inode)
        if rel is not None:
            # type folders, .trash, .archive, .inbox, .sessions (the root's are the default
            # owner's): as private as the owner directory unless set apart
            assert inode.owner is not None
            a = self.dir_access(inode.owner, rel)
            return kind | a.dir_mode, a.uid, a.gid
        if role in OWNER_USED and inode.owner is not None:
            a = self.owner_access(inode.owner)
            return inode.mode, a.uid, a.gid
        if role not in OWNED or inode.owner is None and inode.node is None:
            return inode.mode, inode.uid, inode.gid
        n = inode.node
        if role == Role.OWNER:
            assert inode.owner is not None
            a = self.owner_access(inode.owner)
            return kind | a.dir_mode, a.uid, a.gid
        assert n is not None
        a = self.node_access(n)
        if role == Role.NODE:
            return kind | a.dir_mode, a.uid, a.gid
        if role == Role.HISTORY:
            # the owner's write bit stays: `rm -r` of the node unlinks its versions first,
            # which the kernel checks against this mode (`default_permissions`) before the
            # daemon can take them as part of the removal (or refuse them anywhere else)
            return kind | (a.dir_mode & _NO_GROUP_OTHER_WRITE), a.uid, a.gid
        if role == Role.TIER:
            mode = a.file_mode & _NO_WRITE if inode.trashed else a.file_mode
            return kind | mode, a.uid, a.gid
        if role in (Role.META, Role.VERSION):
            return kind | (a.file_mode & _NO_WRITE), a.uid, a.gid
        # an attachment: its own mode (attachments.mode), its own owner when it has one
        att = inode.att
        found = self.memory.access.get(("attachment", str(att.id))) if att else None
        return inode.mode, (found or a).uid, (found or a).gid

    def may_read(self, caller: Caller, n: Node) -> bool:
        """Whether the caller could `cat` the node's L2 through the mount: search the
        owner directory and the node directory, read the file."""
        if caller.uid == 0:
            return True
        o = self.owner_access(n.owner)
        if not allows(caller, o.uid, o.gid, o.dir_mode, os.X_OK):
            return False
        ctype = self.memory.types.get(n.type)
        if ctype is not None and not ctype.singleton:
            t = self.dir_access(n.owner, ctype.type_dir)
            if not allows(caller, t.uid, t.gid, t.dir_mode, os.X_OK):
                return False
        a = self.node_access(n)
        return allows(caller, a.uid, a.gid, a.dir_mode, os.X_OK) and allows(
            caller, a.uid, a.gid, a.file_mode, os.R_OK
        )

    def may_enter(self, caller: Caller, owner: tuple[str, str]) -> bool:
        o = self.owner_access(owner)
        return allows(caller, o.uid, o.gid, o.dir_mode, os.X_OK)

    # ---- writing -------------------------------------------------------------------------

    def change(self, inode: Inode, mode: int | None, uid: int | None, gid: int | None) -> bool:
        """chmod/chown of an owned inode, stored; False when the role keeps its attributes
        in the inode (not owned)."""
        role = inode.role
        if role not in OWNED or inode.owner is None and inode.node is None:
            return False
        if mode is not None:
            mode = stat.S_IMODE(mode)
        n = inode.node
        rel = self._fixed_dir(inode)
        if rel is not None or role == Role.OWNER:  # a folder: its own mode and owner
            assert inode.owner is not None
            owner_path = f"{inode.owner[0]}/{inode.owner[1]}"
            if rel is not None:
                kind, key, a = "dir", f"{owner_path}/{rel}", self.dir_access(inode.owner, rel)
            else:
                kind, key, a = "owner", owner_path, self.owner_access(inode.owner)
            self._store(
                kind,
                key,
                a,
                Access(
                    a.uid if uid is None else uid,
                    a.gid if gid is None else gid,
                    a.dir_mode if mode is None else mode,
                    a.file_mode,
                ),
            )
            return True
        if role == Role.ATTACH:
            if uid is None and gid is None:
                return False  # its mode is attachments.mode
            att = inode.att
            assert att is not None and n is not None
            _, cur_uid, cur_gid = self.attrs(inode)
            self._store(
                "attachment",
                str(att.id),
                Access(cur_uid, cur_gid, stat.S_IMODE(inode.mode), stat.S_IMODE(inode.mode)),
                Access(
                    cur_uid if uid is None else uid,
                    cur_gid if gid is None else gid,
                    stat.S_IMODE(inode.mode),
                    stat.S_IMODE(inode.mode),
                ),
            )
            return mode is None  # a mode still goes to attachments.mode
        assert n is not None
        derived = role in (Role.META, Role.VERSION, Role.HISTORY)
        if derived and mode is not None and not mode & (stat.S_IWGRP | stat.S_IWOTH):
            # They show the node's modes without write bits. A copier sets the mode it
            # read, or adds u+w to a folder it fills and restores it after (`cp -r`,
            # `cp -a`, `rsync -a`, `tar x`), while the node's folder may still have the
            # mode the copier made it with: taken and not kept. Only making them
            # writable by others is refused.
            mode = None
        if derived and mode is not None:
            if self._same_as_shown(inode, mode, None, None):
                mode = None  # `cp -a`, `rsync -a` set what they read: fine
            else:
                raise NotPermitted(
                    f"{inode.name} takes the node's mode: chmod the node or its L2.md"
                )
        a = self.node_access(n)
        dir_mode, file_mode = a.dir_mode, a.file_mode
        if mode is not None:
            if role == Role.NODE:
                dir_mode = mode
            else:
                file_mode = mode
        self._store(
            "node",
            str(n.id),
            a,
            Access(
                a.uid if uid is None else uid, a.gid if gid is None else gid, dir_mode, file_mode
            ),
        )
        return True

    def created(self, inode: Inode, mode: int, uid: int, gid: int) -> None:
        """A new owner directory, node or attachment takes its creator's uid, gid and mode
        (stored only when they differ from what it would show anyway). A node's files
        take its folder's mode without the execute bits (`mkdir` under umask 077: 0700 and
        0600), until its first tier is created, whose mode they take (`first_tier`)."""
        if inode.role == Role.TIER:
            self.first_tier(inode, mode)
            return
        if inode.role not in (Role.OWNER, Role.NODE, Role.ATTACH):
            return
        if inode.role != Role.OWNER and (
            inode.node is None or inode.role == Role.ATTACH and inode.att is None
        ):
            return
        shown_mode, shown_uid, shown_gid = self.attrs(inode)
        new_mode: int | None = mode
        if inode.role == Role.ATTACH:
            new_mode = None  # already its attachments.mode
        elif stat.S_IMODE(mode) == stat.S_IMODE(shown_mode):
            new_mode = None
        if uid == shown_uid and gid == shown_gid and new_mode is None:
            return
        if inode.role == Role.NODE:
            self.node_made(inode.node, stat.S_IFDIR | stat.S_IMODE(mode), uid, gid)
            return
        self.change(inode, new_mode, uid, gid)

    def node_made(
        self, n: Node | None, mode: int, uid: int | None = None, gid: int | None = None
    ) -> None:
        """A node just made: `mode` (a folder's, or a file's) sets both of its modes, its
        folder's with an execute bit wherever its files may be read; uid and gid, when
        given, are its owner and group."""
        if n is None:
            return
        perm = stat.S_IMODE(mode)
        if stat.S_ISDIR(mode):
            dir_mode, file_mode = perm, perm & 0o666
        else:  # a file's setuid and execute bits are not a memory's
            file_mode = perm & 0o666
            dir_mode = file_mode | (file_mode & 0o444) >> 2
        a = self.node_access(n)
        self._store(
            "node",
            str(n.id),
            a,
            Access(
                a.uid if uid is None else uid, a.gid if gid is None else gid, dir_mode, file_mode
            ),
        )

    def first_tier(self, inode: Inode, mode: int) -> None:
        """The first tier file created in a node that has no version yet: its mode is the
        node's files' (its creator's umask, as on any filesystem)."""
        n = inode.node
        if n is None or n.version != 0 or inode.trashed:
            return
        a = self.node_access(n)
        if stat.S_IMODE(mode) != a.file_mode:
            self._store("node", str(n.id), a, Access(a.uid, a.gid, a.dir_mode, stat.S_IMODE(mode)))

    def files_mode(self, n: Node, mode: int) -> None:
        """A node's files take `mode` (a file's setuid and execute bits are not a
        memory's); its folder keeps its own."""
        a = self.node_access(n)
        self._store(
            "node", str(n.id), a, Access(a.uid, a.gid, a.dir_mode, stat.S_IMODE(mode) & 0o666)
        )

    def _store(self, kind: str, key: str, current: Access, new: Access) -> None:
        if new != current:
            self.memory.set_access(kind, key, new)

    def _same_as_shown(
        self, inode: Inode, mode: int | None, uid: int | None, gid: int | None
    ) -> bool:
        """A derived directory: a change to what it already shows is accepted (chmod -R,
        chown -R, cp -a), anything else is refused."""
        shown_mode, shown_uid, shown_gid = self.attrs(inode)
        if (
            (mode is None or mode == stat.S_IMODE(shown_mode))
            and (uid is None or uid == shown_uid)
            and (gid is None or gid == shown_gid)
        ):
            return True
        raise NotPermitted(
            f"{inode.name} follows its owner directory: chmod or chown the owner directory"
        )
