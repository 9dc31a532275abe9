"""`contextfs salvage DATA_DIR OUT`: what a damaged DuckDB store still holds, as the
export's markdown tree.

A bad block makes DuckDB refuse every query that touches it, so a mount (whose reads
cover whole tables) cannot use the store, while most rows are still on the disk. This
reads them around the damage: the live rows of `nodes` by rowid (in ranges; a range whose
deleted marks are lost is written whole), then each row alone, then each column of a row
alone, and a node's L2
from its newest readable version when the node's own text is lost; attachments one by
one. A node whose path is lost (its row, or the columns that place it, unreadable) but
whose id the other tables name (`versions`, `attachments`, `outbox`) is written to
`lost+found/node-<id>.md`, with its newest readable version and its attachments, unless
its last outbox row says it was deleted. What it cannot read is listed, never guessed.
The tree is what `contextfs export` writes (`vault.export_tree`), so `contextfs import OUT
DEST` brings it back (but for `lost+found/`, whose nodes have no place to go).

Boundary: SQL reads of the store's file (opened read-only) into `vault` records; no
`Memory` (whose loading reads whole tables), nothing written to the store.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Generator, Iterator
from typing import Any

from contextfs.ctxtypes import ContextType
from contextfs.transfer.vault import AttachmentRecord, NodeRecord, Source

log = logging.getLogger(__name__)

_RANGE = 2048  # rows a range read asks for; a damaged range is skipped
LOST_AND_FOUND = "lost+found"  # where a node whose path is lost is written, by its id
_NODE_COLS = ("owner_kind", "owner_id", "type", "name", "version", "l0", "l1", "l2")
_NODE_MORE = ("l0_pinned", "l1_pinned", "created", "updated", "importance", "tags", "sources")


class SalvageSource(Source):
    """The live nodes of a store that DuckDB opens but cannot read whole."""

    def __init__(self, con: Any, types: dict[str, ContextType]) -> None:
        self.con = con
        self.types = types
        self.problems: list[str] = []  # what was not written
        self.notes: list[str] = []  # what was written with a caveat
        self.lost: list[str] = []  # nodes written to lost+found/: their place is lost
        self._rows: list[int] | None = None

    def _try(self, sql: str, args: list | None = None) -> list[tuple] | None:
        try:
            return self.con.execute(sql, args or []).fetchall()
        except Exception as exc:  # noqa: BLE001 - any read the damage breaks is skipped
            log.debug("unreadable: %s (%s)", sql, exc)
            return None

    def owners(self) -> list[str]:
        rows = self._try("SELECT kind, id FROM owners")
        if rows is None:
            rows = self._try("SELECT DISTINCT owner_kind, owner_id FROM nodes") or []
        return sorted(f"{k}/{o}" for k, o in rows)

    def _live_rows(self) -> list[int]:
        """The rowids of the live nodes. A row is found by its rowid, which needs no
        column: a damaged `id` or `deleted_at` column does not hide the rest of it."""
        if self._rows is not None:
            return self._rows
        rows = self._try("SELECT rowid FROM nodes WHERE deleted_at IS NULL ORDER BY rowid")
        if rows is None:  # some range of the table is damaged: read around it
            total = (self._try("SELECT count(*) FROM nodes") or [(0,)])[0][0]
            rows = []
            for lo in range(0, total, _RANGE):
                span = [lo, lo + _RANGE]
                got = self._try(
                    "SELECT rowid FROM nodes WHERE rowid >= ? AND rowid < ? AND deleted_at IS NULL",
                    span,
                )
                if got is None:  # which are deleted is lost: every row of the range
                    got = [(r,) for r in range(lo, min(lo + _RANGE, total))]
                    self.notes.append(
                        f"rows {lo}..{span[1] - 1} of nodes: whether each is deleted is "
                        "unreadable, all are written"
                    )
                rows += got
        self._rows = sorted(r[0] for r in rows)
        return self._rows

    def count(self) -> int:
        return len(self._live_rows())

    def _node(self, row: int) -> dict[str, Any] | None:
        cols = ("id", *_NODE_COLS, *_NODE_MORE)
        got = self._try(f"SELECT {', '.join(cols)} FROM nodes WHERE rowid = ?", [row])
        if got:
            return dict(zip(cols, got[0], strict=True))
        node: dict[str, Any] = {}
        for c in cols:  # one column at a time: the damage may be in one of them
            got = self._try(f"SELECT {c} FROM nodes WHERE rowid = ?", [row])
            if got:
                node[c] = got[0][0]
        if not all(c in node for c in _NODE_COLS[:4]):
            return None  # no path to put it at
        if "l2" not in node and "id" in node:  # the newest version that can be read
            text = self._newest_version(node["id"])
            if text is not None:
                node["l2"] = text[1]
                self.notes.append(
                    f"node {node['id']}: current L2 unreadable, version {text[0]} kept"
                )
        return node if "l2" in node else None

    def _path(self, node: dict[str, Any]) -> str:
        t = self.types.get(node["type"])
        tdir = t.type_dir if t else node["type"]
        base = f"{node['owner_kind']}/{node['owner_id']}/{tdir}"
        return f"{base}/{node['name']}" if node["name"] else base

    def _attachments(self, nid: int, path: str) -> tuple[AttachmentRecord, ...]:
        rows = self._try(
            "SELECT id, parent_id, name, kind, mode, mtime, target, link_of FROM attachments "
            "WHERE node_id = ? AND deleted_at IS NULL",
            [nid],
        )
        if rows is None:
            self.problems.append(f"{path}: attachments unreadable")
            return ()
        by_id = {r[0]: r for r in rows}

        def rel(r: tuple) -> str | None:
            """r's path under the node directory; None when a folder above is lost."""
            parts, seen = [], set()
            while r[0] not in seen:
                seen.add(r[0])
                parts.append(r[2])
                if r[1] is None:
                    return "/".join(reversed(parts))
                parent = by_id.get(r[1])
                if parent is None:
                    return None
                r = parent
            return None

        out = []
        for r in rows:
            aid, _parent, _name, kind, mode, mtime, target, link_of = r
            where = rel(r)
            if where is None:
                self.problems.append(f"{path}: attachment {aid}: its folder is lost")
                continue
            if kind == "dir":
                out.append(AttachmentRecord(where, "dir", mode & 0o7777, mtime))
            elif kind == "symlink":
                text = bytes(target or b"").decode("utf-8", "surrogateescape")
                out.append(AttachmentRecord(where, "symlink", 0o777, mtime, target=text))
            elif kind == "file":
                data = self._bytes(link_of if link_of is not None else aid)
                if data is None:
                    self.problems.append(f"{path}/{where}: bytes unreadable")
                    continue
                out.append(AttachmentRecord(where, "file", mode & 0o7777, mtime, data))
        return tuple(sorted(out, key=lambda a: a.rel))

    def _bytes(self, aid: int) -> bytes | None:
        rows = self._try(
            "SELECT c.idx, b.data FROM attachment_chunks c JOIN blobs b ON b.hash = c.hash "
            "WHERE c.att_id = ? ORDER BY c.idx",
            [aid],
        )
        if rows is None:
            return None
        return b"".join(bytes(d) for _i, d in rows)

    def _history(self, nid: int) -> tuple[tuple[int, str, float], ...]:
        out = []
        for v, created in (
            self._try(
                "SELECT version, created FROM versions WHERE node_id = ? ORDER BY version", [nid]
            )
            or []
        ):
            got = self._try("SELECT l2 FROM versions WHERE node_id = ? AND version = ?", [nid, v])
            if got:
                out.append((v, got[0][0], created))
        return tuple(out)

    def nodes(self, history: bool) -> Iterator[NodeRecord]:
        written: set[int] = set()
        placeless: dict[int, int] = {}  # id -> row: a live row whose path or text is lost
        rowless: list[int] = []  # live rows whose id is lost too
        for row in self._live_rows():
            node = self._node(row)
            if node is None:
                got = self._try("SELECT id FROM nodes WHERE rowid = ?", [row])
                if got and got[0][0] is not None:
                    placeless[got[0][0]] = row
                else:
                    rowless.append(row)
                continue
            if node.get("id") is not None:
                written.add(node["id"])
            path = self._path(node)
            nid = node.get("id")
            facts: dict[str, Any] = {}
            for k in ("id", "version", "created", "updated", "importance"):
                if node.get(k) is not None:
                    facts[k] = node[k]
            for k in ("tags", "sources"):
                if node.get(k) is not None:
                    facts[k] = _json_list(node[k])
            if nid is None:
                self.notes.append(f"{path}: its id is unreadable (no attachments, no history)")
            yield NodeRecord(
                path=path,
                type=node["type"],
                l2=node["l2"],
                l0=node.get("l0") if node.get("l0_pinned") else None,
                l1=node.get("l1") if node.get("l1_pinned") else None,
                facts=facts,
                attachments=self._attachments(nid, path) if nid is not None else (),
                history=self._history(nid) if history and nid is not None else (),
            )
        found = yield from self._lost_and_found(written, placeless, history)
        where = f"; {LOST_AND_FOUND}/ holds {found} node(s) found by id" if found else ""
        self.problems += [
            f"node in row {row}: unreadable (its id, and its path or text, are lost{where})"
            for row in rowless
        ]

    def _ids(self, table: str, column: str) -> set[int] | None:
        """The values of an id column, read around damaged ranges; None when no range
        of it can be read."""
        rows = self._try(f"SELECT DISTINCT {column} FROM {table}")
        if rows is not None:
            return {r[0] for r in rows if r[0] is not None}
        total = (self._try(f"SELECT count(*) FROM {table}") or [(0,)])[0][0]
        found: set[int] | None = None
        for lo in range(0, total, _RANGE):
            got = self._try(
                f"SELECT {column} FROM {table} WHERE rowid >= ? AND rowid < ?", [lo, lo + _RANGE]
            )
            if got is not None:
                found = (found or set()) | {r[0] for r in got if r[0] is not None}
        return found

    def _lost_and_found(
        self, written: set[int], placeless: dict[int, int], history: bool
    ) -> Generator[NodeRecord, None, int]:
        """Nodes the nodes table cannot place, found by the ids the other tables hold:
        each written to `lost+found/node-<id>` with what can be read of it. Returns how
        many."""
        in_nodes = self._ids("nodes", "id") or set()
        named: set[int] = set()
        for table in ("versions", "attachments", "outbox"):
            named |= self._ids(table, "node_id") or set()
        # an id the nodes table holds readably is live there (written, or placeless) or
        # deleted; only the ids it does not hold readably are looked up in the outbox
        lost = sorted(set(placeless) | (named - in_nodes - written))
        deleted = found = 0
        for nid in lost:
            why = "its row in nodes is unreadable"
            if nid in placeless:
                why = f"its path in nodes (row {placeless[nid]}) is unreadable"
            else:
                last = self._try(
                    "SELECT op FROM outbox WHERE node_id = ? AND op IN ('upsert', 'delete') "
                    "ORDER BY seq DESC LIMIT 1",
                    [nid],
                )
                if last and last[0][0] == "delete":
                    deleted += 1  # deleted or archived: not a live node
                    continue
                if not last:
                    why += ", and whether it was deleted too"
            path = f"{LOST_AND_FOUND}/node-{nid}"
            text = self._newest_version(nid)
            attachments = self._attachments(nid, path)
            if text is None and not attachments:
                self.problems.append(f"node {nid}: {why}, and so are its texts")
                continue
            v, l2 = text if text is not None else (0, "")
            got = f"version {v} of its L2" if text is not None else "no L2 (none readable)"
            self.lost.append(
                f"node {nid}: {why}; {path}.md holds {got} and {len(attachments)} "
                "attachment(s), not its path, type, tiers or facts"
            )
            found += 1
            yield NodeRecord(
                path=path,
                type="unknown",
                l2=l2,
                l0=None,
                l1=None,
                facts={"id": nid, "version": v},
                attachments=attachments,
                history=self._history(nid) if history else (),
            )
        if deleted:
            self.notes.append(
                f"{deleted} node(s) whose rows in nodes are unreadable were deleted or "
                "archived (their last outbox row): not written"
            )
        return found

    def _newest_version(self, nid: int) -> tuple[int, str] | None:
        """The newest version of a node's L2 that can be read."""
        for (v,) in (
            self._try("SELECT version FROM versions WHERE node_id = ? ORDER BY version DESC", [nid])
            or []
        ):
            got = self._try("SELECT l2 FROM versions WHERE node_id = ? AND version = ?", [nid, v])
            if got:
                return v, got[0][0]
        return None


def _json_list(text: str) -> list:
    try:
        value = json.loads(text)
    except ValueError:
        return []
    return value if isinstance(value, list) else []
