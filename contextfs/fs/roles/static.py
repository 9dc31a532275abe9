"""The fixed top of the tree: the root, `.schemas/` and the generated `.status`.

The root holds `user/`, `agent/` and the dot entries only; `.schemas/*.yaml` show the
loaded context types as they were read; `.status` and `.status.json` (the same facts for
programs) are rendered on every open by the callables the daemon passes in. No other
role's content is decided here.
"""

from __future__ import annotations

import re
import stat
from collections.abc import Callable
from typing import TYPE_CHECKING

from contextfs.fs.inode import Inode, Role
from contextfs.fs.perms import Caller, Perms
from contextfs.fs.roles.base import RoleBase
from contextfs.fs.table import InodeTable

if TYPE_CHECKING:
    from contextfs.memory.service import Memory
    from contextfs.model import Refusal


_OWNER_IN_PATH = re.compile(r"(?:^|\s)(user|agent)/([^/\s]+)")
_ROOT_OWNED = re.compile(r"(?:^|\s)\.(inbox|sessions)(/|$)")
_QUESTION = re.compile(r"(?:^|\s|/)\.query(/|$)")
STATUS_JSON = ".status.json"


class Static(RoleBase):
    roles = frozenset({Role.ROOT, Role.SCHEMAS, Role.SCHEMA_FILE, Role.STATUS})

    def __init__(
        self,
        table: InodeTable,
        status: Callable[..., str],
        schema_files: dict[str, bytes],
        status_json: Callable[..., str] | None = None,
        *,
        memory: Memory,
        perms: Perms,
    ) -> None:
        super().__init__(table)
        self.memory = memory  # its default owner owns the root's .inbox and .sessions
        self.perms = perms  # whose refusals a caller may see
        self.status_text = status
        self.status_json = status_json or (lambda visible=None: "{}\n")
        self.schema_files = schema_files

    def build(self, root: Inode) -> None:
        schemas = self.table.new_dir(Role.SCHEMAS, ".schemas", root, 0o555)
        for fname in sorted(self.schema_files):
            self.table.new(Role.SCHEMA_FILE, stat.S_IFREG | 0o444, fname, schemas)
        self.table.new(Role.STATUS, stat.S_IFREG | 0o444, ".status", root)
        self.table.new(Role.STATUS, stat.S_IFREG | 0o444, STATUS_JSON, root)

    def content(self, inode: Inode) -> bytes:
        if inode.role == Role.SCHEMA_FILE:
            return self.schema_files.get(inode.name, b"")
        if inode.role == Role.STATUS:
            render = self.status_json if inode.name == STATUS_JSON else self.status_text
            return render().encode("utf-8")
        return b""

    def status_for(self, reader: Caller, inode: Inode) -> bytes:
        """`.status` (or `.status.json`, the inode) as a caller who is not root sees it:
        the refusals in owner directories they cannot open are counted, not shown (their
        paths name nodes)."""
        perms = self.perms
        default = ("user", self.memory.default_owner)

        def visible(r: Refusal) -> bool:
            path = r.path
            if _QUESTION.search(path):  # the question is its asker's words, theirs alone
                return r.uid == reader.uid
            # a refusal's path may lead with the operation ("mkdir user/alice/…")
            m = _OWNER_IN_PATH.search(path)
            if m is not None:
                return perms.may_enter(reader, (m.group(1), m.group(2)))
            if _ROOT_OWNED.search(path):  # the root's .inbox, .sessions: the default owner's
                return perms.may_enter(reader, default)
            return True

        render = self.status_json if inode.name == STATUS_JSON else self.status_text
        return render(visible).encode("utf-8")
