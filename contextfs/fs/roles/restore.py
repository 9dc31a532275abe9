"""`.restore`: how the mount's owner makes an exported node again with its facts.

A file call cannot set what the store keeps about a node (its id, creation and change
times, provenance, tags, importance, reads), so `contextfs import` of an export into a
live mount writes each node here instead of `mkdir` + `L2.md`: one JSON document per
close, `{"node": "user/alice/entities/ana", "versions": [{"text": ..., "at": ...}, ...],
"pins": {"L0": ...}, "facts": {...}}` (an export's front matter and history, as JSON;
a version may be a bare text, saved now). The daemon makes the node with
`memory.restore.restore_node` (the same call as a restore into an unmounted data dir) and
shows it; its attachments then come through their files as usual.

Only the mount's own user and root may write it (mode 0200, the daemon's user, checked by
the kernel under `default_permissions`); a read returns nothing. A refusal is an errno at
close (EINVAL for a document that is not one, or that names a node and nothing of it:
the reason says how to restore a deleted node of that name from `.trash`; ENOENT for an
unknown owner, EEXIST for a node already there) with its reason in `.status`.
"""

from __future__ import annotations

import json
import stat
from typing import TYPE_CHECKING

from contextfs.errors import ContextFSError, InvalidInput, NotFound
from contextfs.fs.inode import Handle, Inode, Role
from contextfs.fs.roles.base import Refusals, RoleBase
from contextfs.fs.table import InodeTable
from contextfs.memory.restore import RESTORE_FILE, fact_time, restore_node

if TYPE_CHECKING:
    from contextfs.ctxtypes import ContextType
    from contextfs.fs.roles.nodes import Nodes
    from contextfs.memory.service import Memory


class Restore(RoleBase):
    roles = frozenset({Role.RESTORE})

    def __init__(self, table: InodeTable, memory: Memory, nodes: Nodes, refusals: Refusals) -> None:
        super().__init__(table)
        self.memory = memory
        self.nodes = nodes  # shows a restored node where it belongs
        self.refusals = refusals

    def build(self, root: Inode) -> None:
        self.table.new(Role.RESTORE, stat.S_IFREG | 0o200, RESTORE_FILE, root)

    def size(self, inode: Inode) -> int:
        return 0

    def content(self, inode: Inode) -> bytes:
        return b""

    async def flush(self, h: Handle) -> None:
        self.commit(h.inode)

    async def fsync(self, h: Handle) -> None:
        self.commit(h.inode)

    def release(self, h: Handle) -> None:
        h.inode.data, h.inode.dirty = None, False

    def commit(self, inode: Inode) -> None:
        data = bytes(inode.data or b"")
        inode.data, inode.dirty = None, False
        if not data.strip():
            return
        try:
            self._restore(data)
        except ContextFSError as exc:
            self.refusals.refuse(inode, exc, data)
            raise

    def _restore(self, data: bytes) -> None:
        try:
            doc = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InvalidInput(f"{RESTORE_FILE} takes one JSON document: {exc}") from None
        if not isinstance(doc, dict):
            raise InvalidInput(f"{RESTORE_FILE} takes a JSON object")
        path, versions = doc.get("node"), doc.get("versions", [])
        pins, facts = doc.get("pins", {}), doc.get("facts", {})
        if not isinstance(path, str):
            raise InvalidInput('"node" must be a path such as user/alice/entities/ana')
        if not isinstance(versions, list):
            raise InvalidInput('"versions" must be a list')
        if not (
            isinstance(pins, dict)
            and set(pins) <= {"L0", "L1"}
            and all(isinstance(v, str) for v in pins.values())
        ):
            raise InvalidInput('"pins" maps L0 and L1 to their hand-written texts')
        if not isinstance(facts, dict):
            raise InvalidInput('"facts" must be an object')
        owner, ctype, name = self._place(path)
        saved = [_version(v) for v in versions]
        if not saved and not pins and not facts:
            raise InvalidInput(self._nothing(path, owner, ctype, name))
        n = restore_node(self.memory, owner, ctype, name, saved, pins, facts)
        self.nodes.routed(n, True)

    def _nothing(self, path: str, owner: tuple[str, str], ctype: ContextType, name: str) -> str:
        """Why a document with no version, pin or fact is refused: it would make an empty
        node (mkdir does that), not bring one back; a deleted one is restored with mv."""
        said = f"{RESTORE_FILE} got no version, pin or fact of {path}: nothing to restore"
        shown = name or ctype.type_dir
        where = f"{owner[0]}/{owner[1]}"
        entries = self.nodes.in_trash(owner, ctype, shown)
        if not entries:
            return f"{said} (an exported node has them; mkdir makes an empty node)"
        to = f"{where}/{ctype.type_dir}" + (f"/{name}" if name else "")
        return (
            f"{said}; the deleted node is {where}/.trash/{ctype.type_dir}/{entries[0]}: "
            f"restore it with mv {where}/.trash/{ctype.type_dir}/{entries[0]} {to}"
        )

    def _place(self, path: str) -> tuple[tuple[str, str], ContextType, str]:
        parts = path.strip("/").split("/")
        if len(parts) not in (3, 4) or parts[0] not in ("user", "agent"):
            raise InvalidInput(f"{path!r} is not a node path (user|agent/<id>/<type-dir>/<name>)")
        owner = (parts[0], parts[1])
        if owner not in self.memory.owners:
            raise NotFound(f"{parts[0]}/{parts[1]} does not exist: mkdir it first")
        ctype = self.memory.types_by_dir.get((owner[0], parts[2]))
        if ctype is None:
            raise InvalidInput(f"no context type keeps its nodes in {parts[2]}/ under {parts[0]}/")
        if ctype.singleton != (len(parts) == 3):
            what = "a singleton: no name after" if ctype.singleton else "needs a node name after"
            raise InvalidInput(f"{path!r}: {parts[2]} is {what} it")
        return owner, ctype, parts[3] if len(parts) == 4 else ""


def _version(v: object) -> tuple[str, float | None]:
    """One of "versions": its text, or {"text": ..., "at": when it was saved (seconds since
    the epoch, or an ISO time)}."""
    if isinstance(v, str):
        return v, None
    if isinstance(v, dict) and isinstance(v.get("text"), str):
        at = v.get("at")
        when = fact_time(at)
        if at is not None and when is None:
            raise InvalidInput(f'"at" of a version is a time, not {at!r}')
        return v["text"], when
    raise InvalidInput('each of "versions" is a text or {"text": ..., "at": time}')
