"""fsck: the store's invariants, one small check each (S3QL's fsck idea).

Every check returns a list of problems (empty = fine). The queries are the SQL DuckDB and
PostgreSQL share (no ANTI JOIN, QUALIFY or GROUP BY ALL), so fsck runs on both stores.
The tests reuse `check_store` as an oracle after filesystem operations; `contextfs fsck
DATA_DIR` prints it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import xxhash

from contextfs.store.backend import StoreBackend
from contextfs.store.dialect import POSTGRES
from contextfs.store.schema import ATTACH_OP, CHUNK_SIZE, LIVE_NAME_INDEXES, SCHEMA_VERSION

log = logging.getLogger(__name__)

Check = Callable[[StoreBackend], list[str]]


def _rows(store: StoreBackend, sql: str) -> list[tuple]:
    return store.con.execute(sql).fetchall()


def _each(store: StoreBackend, sql: str, batch: int = 10_000) -> Iterator[tuple]:
    """The rows of sql a batch at a time: a check that reads every text of a big store
    (at every mount) must not hold them all at once (freed memory stays with the process)."""
    cur = store.con.execute(sql)
    while rows := cur.fetchmany(batch):
        yield from rows


def schema_version(store: StoreBackend) -> list[str]:
    row = store.con.execute("SELECT value FROM store_meta WHERE key='schema_version'").fetchone()
    if row is None or int(row[0]) != SCHEMA_VERSION:
        return [f"schema version is {row and row[0]}, expected {SCHEMA_VERSION}"]
    return []


def live_name_constraints(store: StoreBackend) -> list[str]:
    """The unique indexes that make a second live name impossible exist (a store migrated
    with duplicates in it goes without them until `fsck --repair` mends those)."""
    if store.dialect == POSTGRES:
        sql = "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()"
    else:
        sql = "SELECT index_name FROM duckdb_indexes()"
    have = {r[0] for r in _rows(store, sql)}
    return [
        f"constraint {name} is missing (run `contextfs fsck --repair`)"
        for name in LIVE_NAME_INDEXES
        if name not in have
    ]


def unique_live_nodes(store: StoreBackend) -> list[str]:
    return [
        f"{k}/{o}/{t}/{n or '(singleton)'}: {c} live nodes share one path"
        for k, o, t, n, c in _rows(
            store,
            """
            SELECT owner_kind, owner_id, type, name, count(*) FROM nodes
            WHERE deleted_at IS NULL AND archived_at IS NULL
            GROUP BY owner_kind, owner_id, type, name
            HAVING count(*) > 1""",
        )
    ]


def node_owners_exist(store: StoreBackend) -> list[str]:
    return [
        f"node {i} belongs to missing owner {k}/{o}"
        for i, k, o in _rows(
            store,
            """
            SELECT n.id, n.owner_kind, n.owner_id FROM nodes n WHERE NOT EXISTS
            (SELECT 1 FROM owners w WHERE w.kind = n.owner_kind AND w.id = n.owner_id)""",
        )
    ]


def versions_complete(store: StoreBackend) -> list[str]:
    """version = number of version rows, numbered 1..version, and nodes.l2 = the last."""
    problems = []
    # only the nodes that break it come back (a million rows would at every mount)
    for i, v, cnt, mx, _mn in _rows(
        store,
        """
            SELECT n.id, n.version, count(x.version), coalesce(max(x.version), 0),
                   coalesce(min(x.version), 1)
            FROM nodes n LEFT JOIN versions x ON x.node_id = n.id GROUP BY n.id, n.version
            HAVING n.version <> coalesce(max(x.version), 0)
                OR count(x.version) <> coalesce(max(x.version), 0)
                OR coalesce(min(x.version), 1) <> 1""",
    ):
        problems.append(f"node {i}: version {v} but versions 1..{mx} has {cnt} rows")
    # by hash: content_hashes checks each hash against its text, and a join on the texts
    # holds every L2 twice in DuckDB's memory at every mount
    for i, v in _rows(
        store,
        """
            SELECT n.id, n.version FROM nodes n JOIN versions x
              ON x.node_id = n.id AND x.version = n.version
            WHERE x.content_hash <> n.content_hash""",
    ):
        problems.append(f"node {i}: current L2 differs from its version {v}")
    for (i,) in _rows(
        store,
        "SELECT node_id FROM versions v WHERE NOT EXISTS "
        "(SELECT 1 FROM nodes WHERE id = v.node_id)",
    ):
        problems.append(f"versions of missing node {i}")
    return problems


def _node_texts_agree(rows: Iterable[tuple], problems: list[str]) -> None:
    """Each (id, l1, l2, content_hash, l1_size, l2_size): the hash and sizes of its texts."""
    for i, l1, l2, h, s1, s2 in rows:
        b2 = l2.encode("utf-8")
        if xxhash.xxh64_hexdigest(b2) != h:
            problems.append(f"node {i}: content hash does not match its L2")
        if s2 != len(b2) or s1 != len(l1.encode("utf-8")):
            problems.append(f"node {i}: the sizes stored for L1/L2 are not their lengths")


_TEXT_COLS = "id, l1, l2, content_hash, l1_size, l2_size"


def content_hashes(store: StoreBackend) -> list[str]:
    problems: list[str] = []
    _node_texts_agree(_each(store, f"SELECT {_TEXT_COLS} FROM nodes"), problems)
    for i, v, l2, h in _each(store, "SELECT node_id, version, l2, content_hash FROM versions"):
        if xxhash.xxh64_hexdigest(l2.encode("utf-8")) != h:
            problems.append(f"node {i} version {v}: content hash does not match")
    return problems


def attachments_consistent(store: StoreBackend) -> list[str]:
    problems = [
        f"attachment {i} belongs to missing node {n}"
        for i, n in _rows(
            store,
            "SELECT id, node_id FROM attachments a "
            "WHERE NOT EXISTS (SELECT 1 FROM nodes WHERE nodes.id = a.node_id)",
        )
    ]
    problems += [
        f"attachment {i}: parent {p} is not a directory of node {n}"
        for i, p, n in _rows(
            store,
            """
            SELECT a.id, a.parent_id, a.node_id FROM attachments a
            LEFT JOIN attachments p ON p.id = a.parent_id
            WHERE a.parent_id IS NOT NULL
              AND (p.id IS NULL OR p.kind <> 'dir' OR p.node_id <> a.node_id)""",
        )
    ]
    problems += [
        f"node {n}: {c} live attachments named {name!r} in one folder"
        for n, p, name, c in _rows(
            store,
            """
            SELECT node_id, parent_id, name, count(*) FROM attachments
            WHERE deleted_at IS NULL GROUP BY node_id, parent_id, name
            HAVING count(*) > 1""",
        )
    ]
    problems += [
        f"attachment {i}: kind {k} with size={s} target={t}"
        for i, k, s, t in _rows(
            store,
            """
            SELECT id, kind, size, target IS NOT NULL FROM attachments
            WHERE kind NOT IN ('file', 'dir', 'symlink', 'fifo', 'socket') OR size < 0
               OR (kind <> 'file' AND size <> 0)
               OR (kind = 'symlink') <> (target IS NOT NULL)""",
        )
    ]
    return problems


def chunks_belong_to_files(store: StoreBackend) -> list[str]:
    """Chunks only of existing file attachments (a purge removes them with the row)."""
    return [
        f"attachment {i} ({k or 'missing'}) has {c} chunk(s)"
        for i, k, c in _rows(
            store,
            """
            SELECT c.att_id, a.kind, count(*) FROM attachment_chunks c
            LEFT JOIN attachments a ON a.id = c.att_id
            WHERE a.id IS NULL OR a.kind <> 'file' GROUP BY c.att_id, a.kind""",
        )
    ]


def chunks_contiguous(store: StoreBackend) -> list[str]:
    """A file's chunks are numbered 0, 1, ... without a gap."""
    return [
        f"attachment {i}: chunks numbered {lo}..{hi} but {c} present"
        for i, lo, hi, c in _rows(
            store,
            """
            SELECT att_id, min(idx), max(idx), count(*) FROM attachment_chunks
            GROUP BY att_id HAVING min(idx) <> 0 OR max(idx) <> count(*) - 1""",
        )
    ]


def chunk_sizes(store: StoreBackend) -> list[str]:
    """Every chunk but the last is CHUNK_SIZE bytes, the last 1..CHUNK_SIZE, and their
    lengths add up to attachments.size (an empty file has no chunk). A chunk's length is
    its blob's `size` (v12): no byte is read (`blobs_consistent` checks each size against
    its bytes). Summing octet_length(data) here took a minute and GBs of DuckDB's buffers
    at every mount of a store of 1 GB of files."""
    problems = [
        f"attachment {i}: chunk {x} of {c} holds {n} bytes"
        for i, x, c, n in _rows(
            store,
            f"""
            SELECT att_id, idx, cnt, len FROM (
                SELECT c.att_id, c.idx, count(*) OVER (PARTITION BY c.att_id) AS cnt,
                       max(c.idx) OVER (PARTITION BY c.att_id) AS last, b.size AS len
                FROM attachment_chunks c JOIN blobs b ON b.hash = c.hash) w
            WHERE len > {CHUNK_SIZE} OR len < 1 OR (len < {CHUNK_SIZE} AND idx <> last)
            ORDER BY att_id, idx""",
        )
    ]
    problems += [
        f"attachment {i}: size {s} but its chunks hold {t} bytes"
        for i, s, t in _rows(
            store,
            """
            SELECT a.id, a.size, coalesce(sum(b.size), 0) FROM attachments a
            LEFT JOIN attachment_chunks c ON c.att_id = a.id
            LEFT JOIN blobs b ON b.hash = c.hash
            WHERE a.kind = 'file' GROUP BY a.id, a.size
            HAVING coalesce(sum(b.size), 0) <> a.size""",
        )
    ]
    return problems


def garbage_blobs(store: StoreBackend) -> tuple[int, int]:
    """(count, bytes) of the blobs no chunk holds: reclaimed at the next sweep."""
    n, size = store.con.execute(
        "SELECT count(*), coalesce(sum(size), 0) FROM blobs "
        "WHERE hash NOT IN (SELECT hash FROM attachment_chunks) "
        "AND hash NOT IN (SELECT hash FROM inbox_chunks)"
    ).fetchone()
    return int(n), int(size)


def inbox_chunks_complete(store: StoreBackend) -> list[str]:
    """(v6) An inbox item's chunks belong to an item, are numbered 0, 1, ... without a gap,
    and their lengths add up to inbox_items.size; except while it is `receiving` (stored
    in steps: a daemon that died meanwhile left it, and the next mount drops it)."""
    problems = [
        f"inbox chunks of missing item {i}"
        for (i,) in _rows(
            store,
            "SELECT DISTINCT c.item_id FROM inbox_chunks c "
            "WHERE NOT EXISTS (SELECT 1 FROM inbox_items i WHERE i.id = c.item_id)",
        )
    ]
    problems += _inbox_sizes(store)
    return problems


def _inbox_sizes(store: StoreBackend) -> list[str]:
    return [
        f"inbox item {i}: size {s} but its chunks hold {t} bytes in {c} (numbered {lo}..{hi})"
        for i, s, t, c, lo, hi in _rows(
            store,
            """
            SELECT i.id, i.size, coalesce(sum(b.size), 0), count(c.idx),
                   min(c.idx), max(c.idx)
            FROM inbox_items i LEFT JOIN inbox_chunks c ON c.item_id = i.id
            LEFT JOIN blobs b ON b.hash = c.hash WHERE i.state <> 'receiving'
            GROUP BY i.id, i.size
            HAVING coalesce(sum(b.size), 0) <> i.size
                OR (count(c.idx) > 0 AND (min(c.idx) <> 0 OR max(c.idx) <> count(c.idx) - 1))""",
        )
    ]


def inbox_chunks_numbered(store: StoreBackend) -> list[str]:
    """The half of `inbox_chunks_complete` a mount runs: chunks belong to an item, and an
    item has ceil(size / CHUNK_SIZE) of them numbered 0, 1, ... without a gap. It reads
    no blob: summing the bytes of a 100 MB item's blobs grew the store's buffers past
    their limit at every mount."""
    problems = [
        f"inbox chunks of missing item {i}"
        for (i,) in _rows(
            store,
            "SELECT DISTINCT c.item_id FROM inbox_chunks c "
            "WHERE NOT EXISTS (SELECT 1 FROM inbox_items i WHERE i.id = c.item_id)",
        )
    ]
    problems += [
        f"inbox item {i}: size {s} needs {(s + CHUNK_SIZE - 1) // CHUNK_SIZE} chunks, "
        f"it has {c} (numbered {lo}..{hi})"
        for i, s, c, lo, hi in _rows(
            store,
            f"""
            SELECT i.id, i.size, count(c.idx), min(c.idx), max(c.idx)
            FROM inbox_items i LEFT JOIN inbox_chunks c ON c.item_id = i.id
            WHERE i.state <> 'receiving' GROUP BY i.id, i.size
            HAVING count(c.idx) <> ceil(i.size / {CHUNK_SIZE}.0)
                OR (count(c.idx) > 0 AND (min(c.idx) <> 0 OR max(c.idx) <> count(c.idx) - 1))""",
        )
    ]
    return problems


def session_appends_belong(store: StoreBackend) -> list[str]:
    """(v13) A live transcript's appends belong to a live session and are numbered 0, 1,
    ... without a gap (the transcript is its stored text followed by them in order)."""
    return [
        f"session {k}/{o}/{i}: {c} appends numbered {lo}..{hi}"
        + ("" if live else ", of no live session")
        for k, o, i, c, lo, hi, live in _rows(
            store,
            """
            SELECT a.owner_kind, a.owner_id, a.id, count(*), min(a.idx), max(a.idx),
                   bool_or(s.id IS NOT NULL)
            FROM session_appends a LEFT JOIN sessions s ON s.owner_kind = a.owner_kind
                 AND s.owner_id = a.owner_id AND s.id = a.id
            GROUP BY a.owner_kind, a.owner_id, a.id
            HAVING NOT bool_or(s.id IS NOT NULL) OR min(a.idx) <> 0
                OR max(a.idx) <> count(*) - 1""",
        )
    ]


def inbox_steps_of_pending(store: StoreBackend) -> list[str]:
    """(v14) The steps of a conversation filed in steps are of a pending item: the step
    that ends the conversation deletes them with its item's new state."""
    return [
        f"inbox steps of item {i}, which is {state or 'missing'}"
        for i, state in _rows(
            store,
            "SELECT DISTINCT s.item_id, i.state FROM inbox_steps s "
            "LEFT JOIN inbox_items i ON i.id = s.item_id "
            "WHERE i.state IS NULL OR i.state <> 'pending' ORDER BY s.item_id",
        )
    ]


def blobs_present(store: StoreBackend) -> list[str]:
    """(v6) Every chunk's hash has its blob, and (v12) a blob's size is 1..CHUNK_SIZE: the
    half of `blobs_consistent` that reads no byte of a blob (a mount's)."""
    problems = [
        f"{t} {i} chunk {x}: blob {h} is missing"
        for t, i, x, h in _rows(
            store,
            """
            SELECT 'attachment', c.att_id, c.idx, c.hash FROM attachment_chunks c
            WHERE NOT EXISTS (SELECT 1 FROM blobs b WHERE b.hash = c.hash)
            UNION ALL
            SELECT 'inbox item', c.item_id, c.idx, c.hash FROM inbox_chunks c
            WHERE NOT EXISTS (SELECT 1 FROM blobs b WHERE b.hash = c.hash)""",
        )
    ]
    problems += [
        f"blob {h} holds {n} bytes"
        for h, n in _rows(
            store,
            f"SELECT hash, size FROM blobs WHERE size IS NULL OR size < 1 OR size > {CHUNK_SIZE}",
        )
    ]
    return problems


def blobs_consistent(store: StoreBackend) -> list[str]:
    """(v6) Bytes stored once by content: `blobs_present`, and every blob's bytes read
    back a few at a time: their length is its `size` (which the chunk checks add up) and
    their xxh3-128 its hash. A blob no chunk holds is garbage waiting to be reclaimed
    (`garbage_blobs`), not a problem: a daemon that dies leaves some, the first sweep
    after a restart takes them."""
    problems = blobs_present(store)
    with store.big_reads():
        res = store.con.execute("SELECT hash, size, data FROM blobs")
        while rows := res.fetchmany(64):  # a few MiB at a time, however big the store
            for h, size, data in rows:
                if len(data) != size:
                    problems.append(f"blob {h}: its row says {size} bytes, it holds {len(data)}")
                elif 0 < len(data) <= CHUNK_SIZE and xxhash.xxh3_128_hexdigest(data) != h:
                    problems.append(f"blob {h}: its bytes hash to another value")
    return problems


def links_consistent(store: StoreBackend) -> list[str]:
    """A hard link (v5) names a holder of its own node: of the link's kind (not a folder),
    no link itself, live whenever the link is, and with the same symlink target; the link
    has no bytes of its own and no access row."""
    problems = [
        f"attachment {i}: link of {h} ({why})"
        for i, h, why in _rows(
            store,
            """
            SELECT a.id, a.link_of, CASE
                WHEN h.id IS NULL THEN 'missing'
                WHEN h.kind <> a.kind OR a.kind = 'dir' THEN 'another kind'
                WHEN h.target IS DISTINCT FROM a.target THEN 'another target'
                WHEN h.link_of IS NOT NULL THEN 'a link itself'
                WHEN h.node_id <> a.node_id THEN 'another node'
                WHEN a.size <> 0 THEN 'the link has a size'
                ELSE 'removed while the link is live' END
            FROM attachments a LEFT JOIN attachments h ON h.id = a.link_of
            WHERE a.link_of IS NOT NULL AND (
                h.id IS NULL OR h.kind <> a.kind OR a.kind = 'dir'
                OR h.target IS DISTINCT FROM a.target
                OR h.link_of IS NOT NULL OR h.node_id <> a.node_id OR a.size <> 0
                OR (a.deleted_at IS NULL AND h.deleted_at IS NOT NULL))""",
        )
    ]
    problems += [
        f"attachment {i}: a hard link with an access row"
        for (i,) in _rows(
            store,
            """
            SELECT a.id FROM attachments a JOIN access x
              ON x.kind = 'attachment' AND x.key = CAST(a.id AS TEXT)
            WHERE a.link_of IS NOT NULL""",
        )
    ]
    return problems


def outbox_covers_nodes(store: StoreBackend) -> list[str]:
    """Every node's current state has an outbox row, so derived indexes can catch up."""
    return [
        f"node {i}: version {v} has no outbox row (newest is {o})"
        for i, v, o in _rows(
            store,
            """
            SELECT n.id, n.version, max(o.version) FROM nodes n
            LEFT JOIN outbox o ON o.node_id = n.id GROUP BY n.id, n.version
            HAVING max(o.version) IS NULL OR max(o.version) < n.version""",
        )
    ]


def acknowledged_commits(store: StoreBackend) -> list[str]:
    """The store holds every change its last commit acknowledged: the commit mark beside
    a DuckDB file (`db.CommitMark`) is not ahead of it, nor its write-ahead log shorter
    than the mark says (a log deleted after a crash)."""
    lost = getattr(store, "lost_commits", None)
    return [lost] if lost else []


CHECKS: tuple[Check, ...] = (
    acknowledged_commits,
    schema_version,
    live_name_constraints,
    unique_live_nodes,
    node_owners_exist,
    versions_complete,
    content_hashes,
    attachments_consistent,
    chunks_belong_to_files,
    chunks_contiguous,
    chunk_sizes,
    inbox_chunks_complete,
    session_appends_belong,
    inbox_steps_of_pending,
    blobs_consistent,
    links_consistent,
    outbox_covers_nodes,
)


Step = Callable[[str], object]  # told the name of each check as it begins


def _no_step(_name: str) -> None:
    pass


def check_store(
    store: StoreBackend, checks: Iterable[Check] = CHECKS, step: Step = _no_step
) -> list[str]:
    problems: list[str] = []
    for check in checks:
        step(check.__name__)
        problems += [f"{check.__name__}: {p}" for p in check(store)]
    return problems


# ---- the mount's check: what changed since the last check that passed -----------------
#
# Every write of a node row or a version row goes through Store.insert_node/update_node,
# which append an outbox row (seq, node_id, version) in the same transaction; nothing
# deletes nodes, versions, outbox rows or owners. So when a check passed with the outbox at
# seq P, a node whose text, hash, version or path broke an invariant since has an outbox
# row after P, and the node checks need only look at those nodes. What no seq covers —
# bytes that rot on disk under a row nobody wrote — is `contextfs fsck`'s, which reads it
# all. The attachment, chunk and inbox checks cost what those tables hold (SQL, not a row
# of them in Python) and stay whole.

# store_meta keys (new keys of the key/value table: no migration)
CHECKED_SEQ = "fsck_checked_seq"  # outbox seq up to which the last passing check reached
CHECKED_SCHEMA = "fsck_checked_schema"  # the schema version it checked (a migration: full)
CHECKED_AT = "fsck_checked_at"  # unix time of the last passing check, mount's or full
FULL_AT = "fsck_full_at"  # unix time of the last passing full check (`contextfs fsck`)
OPEN_PREFIX = "mount_open:"  # + host and data dir: a mount is writing (unclean if left)


# The ids of the nodes written after seq ? (the one parameter of each query using it).
_CHANGED = "(SELECT node_id FROM outbox WHERE seq > ?)"


def unique_live_nodes_since(store: StoreBackend, since: int) -> list[str]:
    """`unique_live_nodes` for the paths of the nodes changed since: a duplicate made
    after a passing check has at least one row written since. DuckDB has no index on the
    path (a scan of those columns, ~50 ms at a million nodes); PostgreSQL's unique
    `nodes_live_path` can answer the join, and refuses a duplicate anyway."""
    return [
        f"{k}/{o}/{t}/{n or '(singleton)'}: {c} live nodes share one path"
        for k, o, t, n, c in store.con.execute(
            f"""
            SELECT n.owner_kind, n.owner_id, n.type, n.name, count(*) FROM nodes n JOIN
                (SELECT DISTINCT owner_kind, owner_id, type, name FROM nodes
                 WHERE id IN {_CHANGED} AND deleted_at IS NULL AND archived_at IS NULL) p
              ON p.owner_kind = n.owner_kind AND p.owner_id = n.owner_id
             AND p.type = n.type AND p.name = n.name
            WHERE n.deleted_at IS NULL AND n.archived_at IS NULL
            GROUP BY n.owner_kind, n.owner_id, n.type, n.name HAVING count(*) > 1""",
            [since],
        ).fetchall()
    ]


def node_owners_exist_since(store: StoreBackend, since: int) -> list[str]:
    """`node_owners_exist` for the nodes changed since (an owner is never deleted)."""
    return [
        f"node {i} belongs to missing owner {k}/{o}"
        for i, k, o in store.con.execute(
            f"""
            SELECT n.id, n.owner_kind, n.owner_id FROM nodes n
            WHERE n.id IN {_CHANGED} AND NOT EXISTS
            (SELECT 1 FROM owners w WHERE w.kind = n.owner_kind AND w.id = n.owner_id)""",
            [since],
        ).fetchall()
    ]


def versions_complete_since(store: StoreBackend, since: int) -> list[str]:
    """`versions_complete` for the nodes changed since: a version row is only ever written
    with its node's outbox row."""
    problems = [
        f"node {i}: version {v} but versions 1..{mx} has {cnt} rows"
        for i, v, cnt, mx in store.con.execute(
            f"""
            SELECT n.id, n.version, count(x.version), coalesce(max(x.version), 0)
            FROM nodes n LEFT JOIN
                (SELECT node_id, version FROM versions WHERE node_id IN {_CHANGED}) x
                ON x.node_id = n.id
            WHERE n.id IN {_CHANGED} GROUP BY n.id, n.version
            HAVING n.version <> coalesce(max(x.version), 0)
                OR count(x.version) <> coalesce(max(x.version), 0)
                OR coalesce(min(x.version), 1) <> 1""",
            [since, since],
        ).fetchall()
    ]
    problems += [
        f"node {i}: current L2 differs from its version {v}"
        for i, v in store.con.execute(
            f"""
            SELECT n.id, n.version FROM nodes n JOIN versions x
              ON x.node_id = n.id AND x.version = n.version
            WHERE n.id IN {_CHANGED} AND x.content_hash <> n.content_hash""",
            [since],
        ).fetchall()
    ]
    # a changed id without its node: counted first, named only then (the anti-join that
    # names them scans every node)
    changed, present = store.con.execute(
        f"SELECT (SELECT count(DISTINCT node_id) FROM outbox WHERE seq > ?), "
        f"(SELECT count(*) FROM nodes WHERE id IN {_CHANGED})",
        [since, since],
    ).fetchone()
    if changed != present:
        problems += [
            f"versions of missing node {i}"
            for (i,) in store.con.execute(
                "SELECT DISTINCT x.node_id FROM versions x JOIN outbox o "
                "ON o.node_id = x.node_id WHERE o.seq > ? AND NOT EXISTS "
                "(SELECT 1 FROM nodes WHERE id = x.node_id)",
                [since],
            ).fetchall()
        ]
    return problems


def content_hashes_since(store: StoreBackend, since: int) -> list[str]:
    """`content_hashes` of the nodes changed since, and of the versions they wrote (each
    version row has the outbox row of the change that wrote it)."""
    problems: list[str] = []
    cur = store.con.execute(f"SELECT {_TEXT_COLS} FROM nodes WHERE id IN {_CHANGED}", [since])
    while rows := cur.fetchmany(1000):
        _node_texts_agree(rows, problems)
    cur = store.con.execute(
        "SELECT x.node_id, x.version, x.l2, x.content_hash FROM versions x "
        "JOIN (SELECT DISTINCT node_id, version FROM outbox WHERE seq > ?) o "
        "ON o.node_id = x.node_id AND o.version = x.version",
        [since],
    )
    while rows := cur.fetchmany(1000):
        for i, v, l2, h in rows:
            if xxhash.xxh64_hexdigest(l2.encode("utf-8")) != h:
                problems.append(f"node {i} version {v}: content hash does not match")
    return problems


def outbox_covers_nodes_since(store: StoreBackend, since: int) -> list[str]:
    """`outbox_covers_nodes` for the nodes changed since: their newest outbox row is one
    of those after `since` (a node's outbox versions only grow). A row that says only
    that the node's files changed (PostgreSQL's `attach`, version 0) names no version:
    a node whose files alone changed since is not asked."""
    return [
        f"node {i}: version {v} has no outbox row (newest is {o})"
        for i, v, o in store.con.execute(
            f"""
            SELECT n.id, n.version, max(o.version) FROM nodes n
            JOIN outbox o ON o.node_id = n.id AND o.seq > ? AND o.op <> '{ATTACH_OP}'
            GROUP BY n.id, n.version
            HAVING max(o.version) < n.version""",
            [since],
        ).fetchall()
    ]


Since = Callable[[StoreBackend, int], list[str]]

# The mount's check after a passing one: the node checks restricted to what changed, the
# rest whole. blobs_present, not blobs_consistent: a blob's hash is computed from its bytes
# when it is written (schema.insert_chunks), so only rot can break it — fsck's to find.
WHOLE_AT_MOUNT: tuple[Check, ...] = (
    acknowledged_commits,
    schema_version,
    live_name_constraints,
    attachments_consistent,
    chunks_belong_to_files,
    chunks_contiguous,
    chunk_sizes,
    inbox_chunks_numbered,
    session_appends_belong,
    inbox_steps_of_pending,
    blobs_present,
    links_consistent,
)
SINCE_AT_MOUNT: tuple[Since, ...] = (
    unique_live_nodes_since,
    node_owners_exist_since,
    versions_complete_since,
    content_hashes_since,
    outbox_covers_nodes_since,
)


@dataclass(frozen=True, slots=True)
class CheckRun:
    """What one check of a store did: `since` None = every check over every row."""

    problems: tuple[str, ...]
    since: int | None
    upto: int  # the store generation when it began: what a pass covers
    changed: int  # nodes the restricted checks looked at (full: every node)
    seconds: float
    # a mount's: when the last session of the same mount began, if it never closed the
    # store (killed, crashed); None when it did, or for `contextfs fsck`
    left_open: float | None = None

    @property
    def passed(self) -> bool:
        return not self.problems

    def describe(self) -> str:
        """One line for `.status` and the log."""
        scope = (
            f"full (every row; {self.changed} nodes)"
            if self.since is None
            else f"since seq {self.since} ({self.changed} node(s) changed, up to seq "
            f"{self.upto}; older texts are `contextfs fsck`'s)"
        )
        line = f"{scope}, {len(self.problems)} problem(s), {self.seconds:.2f} s"
        if self.left_open is not None:
            began = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.left_open))
            line += f"; the last session (begun {began}) never closed"
        return line

    def as_dict(self) -> dict[str, object]:
        """The same facts for `.status.json`."""
        return {
            "scope": "full" if self.since is None else "since",
            "since": self.since,
            "upto": self.upto,
            "changed_nodes": self.changed,
            "problems": len(self.problems),
            "seconds": round(self.seconds, 3),
            "last_session_closed": self.left_open is None,
        }


def checked_point(store: StoreBackend) -> int | None:
    """The outbox seq up to which the last passing check reached, if it checked this
    schema; None: never recorded (a store from before), or a migration since."""
    seq, schema = store.meta(CHECKED_SEQ), store.meta(CHECKED_SCHEMA)
    if seq is None or schema != str(SCHEMA_VERSION):
        return None
    return int(seq)


def full_check(
    store: StoreBackend, checks: Iterable[Check] = CHECKS, step: Step = _no_step
) -> CheckRun:
    """Every check over every row (`contextfs fsck`, and a mount with no checked point).
    `step` is told each check's name as it begins (what a mount stopped meanwhile says)."""
    t0 = time.perf_counter()
    upto = store.generation()  # before: whatever commits during the check is after it
    problems = check_store(store, checks, lambda name: step(f"full, {name}"))
    nodes = store.con.execute("SELECT count(*) FROM nodes").fetchone()[0]
    return CheckRun(tuple(problems), None, upto, nodes, time.perf_counter() - t0)


def mount_check(store: StoreBackend, step: Step = _no_step) -> CheckRun:
    """The check a mount runs: since the recorded checked point when there is one (and the
    store has not gone back before it), else the full check once. `step` is told each
    check's name as it begins."""
    since = checked_point(store)
    upto = store.generation()
    if since is None or since > upto:
        return full_check(store, step=step)
    t0 = time.perf_counter()
    problems = check_store(store, WHOLE_AT_MOUNT, lambda name: step(f"since seq {since}, {name}"))
    for check in SINCE_AT_MOUNT:
        name = check.__name__.removesuffix("_since")  # as the full check names it
        step(f"since seq {since}, {name}")
        problems += [f"{name}: {p}" for p in check(store, since)]
    changed = store.con.execute(
        "SELECT count(DISTINCT node_id) FROM outbox WHERE seq > ?", [since]
    ).fetchone()[0]
    return CheckRun(tuple(problems), since, upto, changed, time.perf_counter() - t0)


def record_passed(store: StoreBackend, run: CheckRun) -> None:
    """Remember that `run` passed (a writable store): the next mount checks what changed
    after run.upto. A restricted check never moves the point back (another mount of a
    shared store may have recorded a later one)."""
    if not run.passed:
        return
    now = str(time.time())
    with store.atomic():
        old = checked_point(store)
        # a full check vouches for everything up to run.upto, whatever was recorded (a
        # point past the store's newest seq is stale); a restricted one only adds to it
        point = run.upto if run.since is None else max(run.upto, old or 0)
        store.set_meta(CHECKED_SEQ, str(point))
        store.set_meta(CHECKED_SCHEMA, str(SCHEMA_VERSION))
        store.set_meta(CHECKED_AT, now)
        if run.since is None:
            store.set_meta(FULL_AT, now)


def open_session(store: StoreBackend, who: str) -> str | None:
    """Mark a mount (`who`: its host and data dir) as writing; returns when the previous
    session of the same mount began if it never closed the store (killed, crashed, power
    lost), else None."""
    key = OPEN_PREFIX + who
    left = store.meta(key)
    with store.atomic():
        store.set_meta(key, str(time.time()))
    return left


def close_session(store: StoreBackend, who: str) -> None:
    """The mount closes the store: its session ended cleanly."""
    with store.atomic():
        store.con.execute("DELETE FROM store_meta WHERE key = ?", [OPEN_PREFIX + who])
