"""`contextfs fsck --repair`: mend what the checks of contextfs.store.fsck find.

Each repair answers one check and keeps every byte where a user can see it: a node or an
attachment that shares a live name with another is renamed beside it (a singleton node,
which has no name to change, goes to its owner's `.trash`), a text whose hash does not
match keeps its text (the hash is what is recomputed) and, when it differs from its
version row, becomes a new version so that both are in `.history`. Nothing is deleted
but the name of a deleted hard link that can no longer name its file (its bytes are the
file's).
The steps of an inbox filing that is over are bookkeeping no one saw, and are removed.
What no repair can mend (a missing blob: those bytes are gone) stays a problem, and fsck
says so. Everything runs in one transaction: a repair that fails leaves the store as it
was. Then the unique indexes the duplicates kept out (LIVE_NAME_INDEXES) are created, in
a second transaction (DuckDB builds none over rows its own transaction changed).

Boundary: SQL over the store's connection (both engines), node writes through
`Store.repair_node` so each has its outbox row and the derived indexes follow.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import PurePosixPath

import xxhash

from contextfs.store.backend import StoreBackend
from contextfs.store.schema import create_live_name_indexes

Repair = Callable[[StoreBackend, float], list[str]]

REASON = "fsck-repair"


def _taken_names(store: StoreBackend, sql: str, args: list) -> set[str]:
    return {r[0] for r in store.con.execute(sql, args).fetchall()}


def _beside(name: str, row_id: int, taken: set[str], *, keep_suffix: bool) -> str:
    """A free name for row_id next to `name`: `tea-duplicate-1234` for a node,
    `notes.duplicate-1234.txt` for a file (its suffix kept, so it opens as before)."""
    p = PurePosixPath(name)
    for n in range(100):
        extra = f"{row_id}" if n == 0 else f"{row_id}-{n}"
        if keep_suffix and p.suffix and p.stem:
            new = f"{p.stem}.duplicate-{extra}{p.suffix}"
        else:
            new = f"{name}{'.' if keep_suffix else '-'}duplicate-{extra}"
        if new not in taken:
            taken.add(new)
            return new
    raise RuntimeError(f"no free name beside {name!r}")  # 100 duplicates of one name


def duplicate_nodes(store: StoreBackend, now: float) -> list[str]:
    """Live nodes sharing a path: the one written last keeps it; each other one is
    renamed beside it, or (a singleton type: no name) moved to the trash."""
    done = []
    groups = store.con.execute(
        """
        SELECT owner_kind, owner_id, type, name FROM nodes
        WHERE deleted_at IS NULL AND archived_at IS NULL
        GROUP BY owner_kind, owner_id, type, name HAVING count(*) > 1"""
    ).fetchall()
    for kind, owner, type_name, name in groups:
        ids = [
            r[0]
            for r in store.con.execute(
                "SELECT id FROM nodes WHERE deleted_at IS NULL AND archived_at IS NULL "
                "AND owner_kind = ? AND owner_id = ? AND type = ? AND name = ? "
                "ORDER BY updated DESC, id DESC",
                [kind, owner, type_name, name],
            ).fetchall()
        ]
        keeper, others = ids[0], ids[1:]
        taken = _taken_names(
            store,
            "SELECT name FROM nodes WHERE deleted_at IS NULL AND archived_at IS NULL "
            "AND owner_kind = ? AND owner_id = ? AND type = ?",
            [kind, owner, type_name],
        )
        where = f"{kind}/{owner} {type_name} {name or '(singleton)'}"
        for nid in others:
            if name:
                new = _beside(name, nid, taken, keep_suffix=False)
                store.repair_node(nid, name=new)
                done.append(f"{where}: node {nid} renamed {new} (node {keeper} keeps the path)")
            else:
                store.repair_node(nid, deleted_at=now)
                done.append(f"{where}: node {nid} moved to the trash (node {keeper} stays)")
    return done


def duplicate_attachments(store: StoreBackend, now: float) -> list[str]:
    """Live attachments of one name in one folder: the one changed last keeps the name,
    each other one is renamed beside it (a folder with what it holds)."""
    done = []
    groups = store.con.execute(
        """
        SELECT node_id, coalesce(parent_id, 0), name FROM attachments
        WHERE deleted_at IS NULL GROUP BY node_id, coalesce(parent_id, 0), name
        HAVING count(*) > 1"""
    ).fetchall()
    for node_id, parent, name in groups:
        ids = [
            r[0]
            for r in store.con.execute(
                "SELECT id FROM attachments WHERE deleted_at IS NULL AND node_id = ? "
                "AND coalesce(parent_id, 0) = ? AND name = ? ORDER BY mtime DESC, id DESC",
                [node_id, parent, name],
            ).fetchall()
        ]
        taken = _taken_names(
            store,
            "SELECT name FROM attachments WHERE deleted_at IS NULL AND node_id = ? "
            "AND coalesce(parent_id, 0) = ?",
            [node_id, parent],
        )
        for aid in ids[1:]:
            new = _beside(name, aid, taken, keep_suffix=True)
            store.con.execute("UPDATE attachments SET name = ? WHERE id = ?", [new, aid])
            done.append(
                f"node {node_id}: attachment {aid} {name!r} renamed {new!r} "
                f"(attachment {ids[0]} keeps the name)"
            )
    return done


def deleted_links_elsewhere(store: StoreBackend, now: float) -> list[str]:
    """A deleted hard link whose file is gone or in another node (what moving the file or
    its folder to another node left behind before the move took such rows along) is
    removed: it names the file only, its bytes are the file's, and a restore could bring
    it back only as a link across nodes."""
    rows = store.con.execute(
        """
        SELECT a.id, a.node_id, a.name, a.link_of FROM attachments a
        LEFT JOIN attachments h ON h.id = a.link_of
        WHERE a.link_of IS NOT NULL AND a.deleted_at IS NOT NULL
          AND (h.id IS NULL OR h.node_id <> a.node_id)"""
    ).fetchall()
    for aid, _node_id, _name, _holder in rows:
        store.con.execute("DELETE FROM attachments WHERE id = ?", [aid])
    return [
        f"node {node_id}: deleted link {aid} {name!r} of attachment {holder} removed "
        "(its file is in another node)"
        for aid, node_id, name, holder in rows
    ]


def orphan_attachments(store: StoreBackend, now: float) -> list[str]:
    """An attachment whose folder is missing, or is not a folder of its node, goes to the
    top of its node's directory (under a free name)."""
    done = []
    rows = store.con.execute(
        """
        SELECT a.id, a.node_id, a.name FROM attachments a
        LEFT JOIN attachments p ON p.id = a.parent_id
        WHERE a.parent_id IS NOT NULL
          AND (p.id IS NULL OR p.kind <> 'dir' OR p.node_id <> a.node_id)"""
    ).fetchall()
    for aid, node_id, name in rows:
        taken = _taken_names(
            store,
            "SELECT name FROM attachments WHERE deleted_at IS NULL AND node_id = ? "
            "AND parent_id IS NULL",
            [node_id],
        )
        new = name if name not in taken else _beside(name, aid, taken, keep_suffix=True)
        taken.add(new)
        store.con.execute(
            "UPDATE attachments SET parent_id = NULL, name = ? WHERE id = ?", [new, aid]
        )
        done.append(f"node {node_id}: attachment {aid} moved to the node's top as {new!r}")
    return done


def missing_owners(store: StoreBackend, now: float) -> list[str]:
    rows = store.con.execute(
        """
        SELECT DISTINCT n.owner_kind, n.owner_id FROM nodes n WHERE NOT EXISTS
        (SELECT 1 FROM owners w WHERE w.kind = n.owner_kind AND w.id = n.owner_id)"""
    ).fetchall()
    for kind, owner in rows:
        store.con.execute("INSERT INTO owners VALUES (?, ?, ?)", [kind, owner, now])
    return [f"owner {k}/{o} added (its nodes had none)" for k, o in rows]


def text_hashes(store: StoreBackend, now: float) -> list[str]:
    """A hash or size that does not match its text is recomputed from the text (the text
    is what there is; which of the two changed cannot be known); a current L2 that then
    differs from its version row becomes a new version, so both texts are in .history."""
    done = []
    cur = store.con.execute("SELECT id, l1, l2, content_hash, l1_size, l2_size FROM nodes")
    bad = []
    while rows := cur.fetchmany(10_000):
        for nid, l1, l2, h, s1, s2 in rows:
            b2 = l2.encode("utf-8")
            b1 = l1.encode("utf-8")
            if xxhash.xxh64_hexdigest(b2) != h or s2 != len(b2) or s1 != len(b1):
                bad.append((nid, xxhash.xxh64_hexdigest(b2), len(b1), len(b2)))
    for nid, h, s1, s2 in bad:
        store.con.execute(
            "UPDATE nodes SET content_hash = ?, l1_size = ?, l2_size = ? WHERE id = ?",
            [h, s1, s2, nid],
        )
        done.append(f"node {nid}: hash and sizes recomputed from its texts")
    cur = store.con.execute("SELECT node_id, version, l2, content_hash FROM versions")
    bad_versions = []
    while rows := cur.fetchmany(10_000):
        for nid, v, l2, h in rows:
            if xxhash.xxh64_hexdigest(l2.encode("utf-8")) != h:
                bad_versions.append((nid, v, xxhash.xxh64_hexdigest(l2.encode("utf-8"))))
    for nid, v, h in bad_versions:
        store.con.execute(
            "UPDATE versions SET content_hash = ? WHERE node_id = ? AND version = ?", [h, nid, v]
        )
        done.append(f"node {nid} version {v}: hash recomputed from its text")
    differ = store.con.execute(
        """
        SELECT n.id, n.version FROM nodes n JOIN versions x
          ON x.node_id = n.id AND x.version = n.version
        WHERE x.content_hash <> n.content_hash"""
    ).fetchall()
    for nid, v in differ:
        store.repair_node(nid, new_version=REASON)
        done.append(f"node {nid}: its L2 differed from version {v}; kept as version {v + 1}")
    return done


def missing_current_versions(store: StoreBackend, now: float) -> list[str]:
    """A node whose current version has no row (its L2 not in .history) gets that row."""
    rows = store.con.execute(
        """
        SELECT n.id, n.version FROM nodes n WHERE n.version > 0 AND NOT EXISTS
        (SELECT 1 FROM versions x WHERE x.node_id = n.id AND x.version = n.version)"""
    ).fetchall()
    for nid, _v in rows:
        store.con.execute(
            "INSERT INTO versions SELECT id, version, l2, content_hash, updated, ? "
            "FROM nodes WHERE id = ?",
            [REASON, nid],
        )
    return [f"node {nid}: version {v} row written from its L2" for nid, v in rows]


def outbox_rows(store: StoreBackend, now: float) -> list[str]:
    """A node whose current state has no outbox row gets one, so the indexes catch up."""
    rows = store.con.execute(
        """
        SELECT n.id FROM nodes n LEFT JOIN outbox o ON o.node_id = n.id
        GROUP BY n.id, n.version
        HAVING max(o.version) IS NULL OR max(o.version) < n.version"""
    ).fetchall()
    for (nid,) in rows:
        store.repair_node(nid)
    return [f"node {nid}: outbox row added (the indexes will take it)" for (nid,) in rows]


def stray_inbox_steps(store: StoreBackend, now: float) -> list[str]:
    """The steps of a filing whose item is not pending (or gone) are removed: they are the
    record of a filing that is over, never shown to anyone."""
    rows = store.con.execute(
        "SELECT DISTINCT s.item_id FROM inbox_steps s LEFT JOIN inbox_items i "
        "ON i.id = s.item_id WHERE i.state IS NULL OR i.state <> 'pending' ORDER BY s.item_id"
    ).fetchall()
    for (item_id,) in rows:
        store.con.execute("DELETE FROM inbox_steps WHERE item_id = ?", [item_id])
    return [f"inbox item {i}: the steps of its finished filing removed" for (i,) in rows]


# in this order: names first (a rename may not take a name another repair gives), texts
# before the outbox (a new version has its own outbox row)
REPAIRS: tuple[Repair, ...] = (
    missing_owners,
    duplicate_nodes,
    deleted_links_elsewhere,
    orphan_attachments,
    duplicate_attachments,
    missing_current_versions,
    text_hashes,
    outbox_rows,
    stray_inbox_steps,
)


def repair_store(store: StoreBackend) -> list[str]:
    """Run every repair in one transaction, then create the missing unique indexes;
    returns one line per thing done. Missing acknowledged changes (a write-ahead log
    gone) cannot be brought back: the store is taken as it is, and said so."""
    now = time.time()
    done: list[str] = []
    accept = getattr(store, "accept_lost", None)
    lost = accept() if accept is not None else None
    if lost:
        done.append(
            f"acknowledged_commits: the store is taken as it is (seq {store.last_seq}); "
            "the missing changes are lost"
        )
    with store.atomic():
        for repair in REPAIRS:
            done += [f"{repair.__name__}: {line}" for line in repair(store, now)]
    with store.atomic():  # DuckDB builds no unique index over rows changed in its transaction
        left_out = create_live_name_indexes(store.con)
    done += [f"constraint {name}: still duplicates, not created" for name in left_out]
    return done
