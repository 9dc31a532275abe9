"""The trash and the archive: `<owner>/.trash/<type>/<node>` and `.archive/...`.

`rm -r` of a node soft-deletes it and its directory reappears here, read-only;
consolidation puts nodes below their type's minimum importance in `.archive`. `mv` back
into a type directory restores either (`fs.roles.rename`); a deleted singleton (the
profile) is restored by renaming it over the empty type directory. Nothing here writes the
store.
"""

from __future__ import annotations

import stat

from contextfs.ctxtypes import ContextType
from contextfs.fs.inode import ARCHIVE_DIR, TRASH_DIR, Inode, Role, ns
from contextfs.fs.roles.base import RoleBase
from contextfs.model import Node


class Trash(RoleBase):
    roles = frozenset({Role.TRASH, Role.TRASH_TYPE})

    @staticmethod
    def _box(od: Inode, n: Node) -> Inode:
        assert od.children is not None
        return od.children[TRASH_DIR if n.deleted_at is not None else ARCHIVE_DIR]

    def free_name(self, od: Inode, ctype: ContextType, n: Node, box: str) -> str:
        """The name n takes when it goes into its owner's `box` (TRASH_DIR or ARCHIVE_DIR):
        its own ("" for a singleton, shown as its type directory), or `<name>.<id>` when
        one there has it. The memory keeps it as n's name (`Memory.box_name`), so the
        entry shows under it after a remount, whatever else comes and goes there."""
        assert od.children is not None
        tt = (od.children[box].children or {}).get(ctype.type_dir)
        shown = n.name or ctype.type_dir
        if tt is None or shown not in (tt.children or {}):
            return n.name
        return f"{shown}.{n.id}"

    def place(self, od: Inode, ctype: ContextType, n: Node) -> Inode:
        """The directory of a deleted or archived node, under its type in the box."""
        box = self._box(od, n)
        assert box.children is not None
        tt = box.children.get(ctype.type_dir)
        if tt is None:
            tt = self.table.new_dir(
                Role.TRASH_TYPE, ctype.type_dir, box, owner=n.owner, ctype=ctype
            )
        assert tt.children is not None
        name = n.name or ctype.type_dir
        if name in tt.children:  # deleted without a tree (`contextfs consolidate DIR`)
            name = f"{name}.{n.id}"
        return self.table.new_dir(
            Role.NODE,
            name,
            tt,
            owner=n.owner,
            ctype=ctype,
            node=n,
            populated=False,
            trashed=True,
            mtime_ns=ns(n.updated),
        )

    def find(self, od: Inode, ctype: ContextType, n: Node) -> Inode | None:
        tt = (self._box(od, n).children or {}).get(ctype.type_dir)
        if tt is None:
            return None
        for c in (tt.children or {}).values():
            if c.node is n:
                return c
        return None

    def retag(self, d: Inode, *, trashed: bool) -> None:
        """A node directory moved into or out of the trash: its files follow."""
        for c in (d.children or {}).values():
            c.trashed = trashed
            if c.role == Role.TIER:
                c.mode = stat.S_IFREG | (0o444 if trashed else 0o644)
            if c.is_dir:
                self.retag(c, trashed=trashed)
