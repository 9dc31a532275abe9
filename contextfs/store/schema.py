"""The one canonical DuckDB schema, with every column's meaning and invariants.

Bump SCHEMA_VERSION and add a step to MIGRATIONS for every change; `create_tables()`
always builds the newest schema, `migrate()` brings an older file up to it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, overload

import xxhash

SCHEMA_VERSION = 14

# An attachment's bytes are stored in chunks of this size (v3): a commit rewrites only
# the chunks it changed, so an fsync of a 4 KiB write into a 32 MiB file stores 64 KiB.
CHUNK_SIZE = 64 * 1024


class Rows(Protocol):
    """What a statement gives back: a DuckDB connection, or a psycopg cursor."""

    def fetchone(self) -> tuple[Any, ...] | None: ...
    def fetchall(self) -> list[tuple[Any, ...]]: ...


class Connection(Protocol):
    """What the schema's statements run on: a DuckDB connection, the Store's wrapper of
    one (`contextfs.store.db._Roomy`), or PgStore's `PgConnection` (DuckDB's call shape)."""

    def execute(self, sql: str, params: object = ..., /) -> Rows: ...


SCHEMA = """
-- Key/value facts about the store itself. Keys: 'schema_version', 'created'.
CREATE TABLE IF NOT EXISTS store_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- Every id in nodes, attachments, pending_drops comes from this sequence, so ids are
-- never reused, even after a delete, and can serve as stable inode seeds.
CREATE SEQUENCE IF NOT EXISTS object_ids START 1000;

-- Owners: user/<id> and agent/<id>. kind is 'user' or 'agent'.
CREATE TABLE IF NOT EXISTS owners (
    kind    TEXT   NOT NULL,
    id      TEXT   NOT NULL,
    created DOUBLE NOT NULL,           -- unix time
    PRIMARY KEY (kind, id)
);

-- Memory nodes. Invariants (checked by fsck):
--  * at most one live row (deleted_at IS NULL AND archived_at IS NULL) per (owner_kind,
--    owner_id, type, name); (v10) a constraint too: the unique index nodes_live_path
--    (LIVE_NAME_INDEXES); (v11) an archived node holds no name, as a deleted one;
--  * version = max(versions.version) for the node, or 0 when it has no L2 yet;
--  * content_hash = xxh64 hex of l2 (utf-8);
--  * name = '' exactly when the type is a singleton;
--  * l1_size, l2_size = the UTF-8 length in bytes of l1, l2.
CREATE TABLE IF NOT EXISTS nodes (
    id           BIGINT  PRIMARY KEY,
    owner_kind   TEXT    NOT NULL,
    owner_id     TEXT    NOT NULL,
    type         TEXT    NOT NULL,     -- context type name (not its directory)
    name         TEXT    NOT NULL,     -- node directory name under the type directory
    version      INTEGER NOT NULL,     -- current L2 version; 0 = created, nothing saved yet
    l0           TEXT    NOT NULL,     -- one-line abstract (derived unless l0_pinned)
    l1           TEXT    NOT NULL,     -- overview (derived unless l1_pinned)
    l2           TEXT    NOT NULL,     -- canonical content
    l0_pinned    BOOLEAN NOT NULL,     -- hand-written L0 kept until L2 changes
    l1_pinned    BOOLEAN NOT NULL,
    content_hash TEXT    NOT NULL,
    sources      TEXT    NOT NULL,     -- JSON list of provenance strings
    tags         TEXT    NOT NULL,     -- JSON list of strings
    importance   DOUBLE  NOT NULL,     -- 0..1, consolidation input
    access_count BIGINT  NOT NULL,     -- reads through the mount
    created      DOUBLE  NOT NULL,
    updated      DOUBLE  NOT NULL,
    deleted_at   DOUBLE,               -- NULL = live; else soft-deleted at this unix time
    archived_at  DOUBLE,               -- (v2) NULL = active; else archived by consolidation
    -- (v8) the sizes `stat` shows for L1.md/L2.md: a node read without its texts (the
    -- mount's heads, a search's candidates) never reads the text columns; computing them
    -- there read ~40 ms of text for a search's 480 candidates at a million nodes
    l1_size      BIGINT  NOT NULL DEFAULT 0,
    l2_size      BIGINT  NOT NULL DEFAULT 0
);

-- Every saved L2, one row per version (1-based). The current one is also in nodes.l2.
CREATE TABLE IF NOT EXISTS versions (
    node_id      BIGINT  NOT NULL,
    version      INTEGER NOT NULL,
    l2           TEXT    NOT NULL,
    content_hash TEXT    NOT NULL,
    created      DOUBLE  NOT NULL,
    reason       TEXT    NOT NULL,     -- 'write', 'route:<file>', 'rename-over', ...; machine
                                       -- writes: 'route:inbox:', 'route:session:', 'consolidate:'
    PRIMARY KEY (node_id, version)
);

-- Files, folders, symlinks, FIFOs and sockets a user keeps inside a node directory.
-- parent_id is NULL for the node directory itself, else the id of a 'dir' attachment of
-- the same node. A hard link (v5) is one more row, a name of the file whose row is
-- link_of: that row (the "holder") keeps the bytes, size, mode, mtime and access of all
-- its names, and is always the one that keeps the file's last live name.
-- Invariants (checked by fsck): at most one live row per (node_id, parent_id, name)
-- ((v10) a constraint too: the unique index attachments_live_name, LIVE_NAME_INDEXES);
-- size = 0 unless kind = 'file'; target is NULL unless kind = 'symlink'. A file's bytes
-- are its rows in attachment_chunks (v3; before, a `data` BLOB column of this table).
-- A link row has its holder's kind (never 'dir') and symlink target, size 0 and no
-- chunks; its link_of names a row of the same node with link_of NULL, live whenever the
-- link row is live.
CREATE TABLE IF NOT EXISTS attachments (
    id         BIGINT PRIMARY KEY,
    node_id    BIGINT NOT NULL,
    parent_id  BIGINT,
    name       TEXT   NOT NULL,
    kind       TEXT   NOT NULL,        -- 'file' | 'dir' | 'symlink' | 'fifo' | 'socket'
    mode       INTEGER NOT NULL,       -- permission bits only
    mtime      DOUBLE NOT NULL,
    size       BIGINT NOT NULL,        -- (v3) a file's length in bytes; 0 for any other kind
    target     BLOB,                   -- a symlink's target, as given to symlink(2)
    deleted_at DOUBLE,                 -- NULL = live; soft-deleted, restorable with its node
    link_of    BIGINT                  -- (v5) NULL, or a hard link: the holder's id
);

-- (v3) The bytes of every 'file' attachment, in fixed chunks of CHUNK_SIZE (64 KiB) bytes:
-- chunk idx holds bytes [idx * CHUNK_SIZE, (idx + 1) * CHUNK_SIZE) of the file; (v6) the
-- bytes themselves are the blob of that hash, stored once however many chunks hold them.
-- Invariants (checked by fsck): a file of size s has exactly ceil(s / CHUNK_SIZE) chunks,
-- idx 0, 1, ... without a gap; every chunk but the last holds exactly CHUNK_SIZE bytes and
-- the last 1..CHUNK_SIZE (so their lengths add up to attachments.size; an empty file has
-- none); chunks belong to an existing attachment of kind 'file' (a soft-deleted one keeps
-- its chunks until it is purged); every hash has its blob. A hole written by a seek past
-- the end is stored as zeros (one blob of zeros, however long the hole).
CREATE TABLE IF NOT EXISTS attachment_chunks (
    att_id BIGINT  NOT NULL,           -- attachments.id
    idx    INTEGER NOT NULL,           -- 0-based chunk number
    hash   TEXT    NOT NULL,           -- (v6) blobs.hash of its bytes (before: a data BLOB)
    PRIMARY KEY (att_id, idx)
);

-- (v6) Bytes stored once by content: the bytes of every chunk of a file attachment or an
-- inbox item, keyed by their xxh3-128. The same photo dropped twice, a video frame that is
-- also an image, a file copied into another node: one row each chunk, however many hold
-- it. Invariants (checked by fsck): hash = xxh3-128 hex of data; data is 1..CHUNK_SIZE
-- bytes and (v12) size is its length; every chunk's blob exists. A blob no chunk holds
-- any more is garbage, reclaimed in batches of 64 and when the store closes (Store.sweep;
-- its first sweep takes all garbage, a crashed daemon's too): never read, counted by
-- fsck, not a problem. The chunk and size checks a mount runs add up `size`, never
-- reading a byte; `contextfs fsck` reads every blob and compares.
CREATE TABLE IF NOT EXISTS blobs (
    hash TEXT PRIMARY KEY,
    data BLOB NOT NULL,
    size BIGINT                        -- (v12) octet_length(data), written with it
);

-- Files written into a type directory and fsync()ed but not yet routed (routing happens at
-- close). A daemon that dies in between routes them on the next start. A row whose filename
-- is a temporary or scratch name (memory.routing.is_temp_name) is a *parked* file instead:
-- closed in a type directory under that name, never routed, shown again at every start.
CREATE TABLE IF NOT EXISTS pending_drops (
    id         BIGINT PRIMARY KEY,
    owner_kind TEXT   NOT NULL,
    owner_id   TEXT   NOT NULL,
    type       TEXT   NOT NULL,
    filename   TEXT   NOT NULL,
    data       BLOB   NOT NULL,
    created    DOUBLE NOT NULL
);

-- One row per committed node change, written in the same transaction as the change.
-- The indexer (derived state) consumes it in seq order. op: 'upsert' | 'delete'.
CREATE TABLE IF NOT EXISTS outbox (
    seq      BIGINT  PRIMARY KEY,      -- 1, 2, 3, ...: max(seq) is the store generation
    node_id  BIGINT  NOT NULL,
    version  INTEGER NOT NULL,
    op       TEXT    NOT NULL,
    created  DOUBLE  NOT NULL
);
"""

# outbox.op of a row that says only that a node's attachments changed (version 0): written
# by PostgreSQL, whose other mounts read the outbox to catch up
ATTACH_OP = "attach"

SCHEMA_V2 = """

-- (v4) Who may do what: the POSIX owner, group and permission bits of an owner directory
-- (kind 'owner', key 'user/alice'), one of its fixed folders (kind 'dir', key
-- 'user/alice/preferences', 'user/alice/.trash/preferences'; none = the owner's), a
-- node (kind 'node', key its id: dir_mode for its directory, file_mode for L0/L1/L2,
-- and for meta.yaml and .history without the write bits) or an attachment (kind
-- 'attachment', key its id; its mode is attachments.mode), or a file parked in a type
-- directory (kind 'parked', key its pending_drops id; file_mode is its mode), such as the
-- `NAME.refused` trace of a refused write. No schema change: the kind is a value.
-- No row = the defaults: the daemon's uid and gid, 0755 folders, 0644 files.
CREATE TABLE IF NOT EXISTS access (
    kind      TEXT    NOT NULL,       -- 'owner' | 'dir' | 'node' | 'attachment' | 'parked'
    key       TEXT    NOT NULL,
    uid       BIGINT  NOT NULL,
    gid       BIGINT  NOT NULL,
    dir_mode  INTEGER NOT NULL,       -- permission bits (07777) of the directory
    file_mode INTEGER NOT NULL,       -- permission bits of the files it covers
    PRIMARY KEY (kind, key)
);
-- (v2) Files dropped into an .inbox: the raw bytes (secrets already redacted), kept as
-- the record of what was handed in, and what processing them did. (v6) The bytes are the
-- item's rows in inbox_chunks (before: a `data` BLOB column of this table), so an inbox
-- item and the media node made of it share their bytes.
CREATE TABLE IF NOT EXISTS inbox_items (
    id         BIGINT PRIMARY KEY,
    owner_kind TEXT   NOT NULL,
    owner_id   TEXT   NOT NULL,
    filename   TEXT   NOT NULL,
    size       BIGINT NOT NULL,        -- (v6) the bytes' length
    created    DOUBLE NOT NULL,
    state      TEXT   NOT NULL,        -- 'pending' | 'done' | 'dropped' | 'refused'
    report     TEXT   NOT NULL,        -- what it did (markdown), or why it was refused
    -- (v9) how far processing got, for an item of several conversations (an export):
    -- JSON {"done": conversations archived and routed, "total", counts and what the
    -- report lists so far}, written in the transaction of each conversation's archive and
    -- routing, so a mount that stops resumes after the last one done; '' (or NULL, on a
    -- store migrated from v8) when processing has not started or is over
    progress   TEXT   DEFAULT ''
);

-- (v6) The bytes of an inbox item, as attachment_chunks holds a file's: chunk idx of
-- item_id is the blob of hash. Invariants as attachment_chunks' (their lengths add up to
-- inbox_items.size, numbered 0, 1, ... without a gap, every hash has its blob).
CREATE TABLE IF NOT EXISTS inbox_chunks (
    item_id BIGINT  NOT NULL,
    idx     INTEGER NOT NULL,
    hash    TEXT    NOT NULL,
    PRIMARY KEY (item_id, idx)
);

-- (v14) A conversation of an inbox item filed in steps (`conversations.inbox`,
-- `Intake._file`: its archive, then its memories a batch a transaction): one row a step,
-- written in the step's transaction, so a mount that stops part way goes on after the
-- last step, neither routing a memory twice nor losing one. `conv` is the conversation's
-- place in the item (0 in a one-conversation item); `step` 0, 1, ... without a gap;
-- `data` the JSON of what the step did: how many memories it routed (`routed`) and their
-- report lines (`changed`, `refused`), and in step 0 the conversation as it was extracted
-- (its candidate memories in order, its archive's paths). The step that ends the
-- conversation deletes its rows: there are rows only of a pending item.
CREATE TABLE IF NOT EXISTS inbox_steps (
    item_id BIGINT  NOT NULL,
    conv    INTEGER NOT NULL,
    step    INTEGER NOT NULL,
    data    TEXT    NOT NULL,
    PRIMARY KEY (item_id, conv, step)
);

-- (v2) Live sessions (SPEC §6). Ended sessions become nodes of type 'session'.
CREATE TABLE IF NOT EXISTS sessions (
    owner_kind TEXT    NOT NULL,
    owner_id   TEXT    NOT NULL,
    id         TEXT    NOT NULL,
    created    DOUBLE  NOT NULL,
    transcript TEXT    NOT NULL,       -- the JSONL turns recorded so far (redacted)
    processed  INTEGER NOT NULL,       -- turns already extracted
    summary    TEXT    NOT NULL,       -- compacted earlier turns
    PRIMARY KEY (owner_kind, owner_id, id)
);

-- (v13) What was appended to a live session's transcript after sessions.transcript, one
-- row a recorded append: the transcript is sessions.transcript followed by the text of
-- its rows in idx order (0, 1, ...). An append inserts a row, so it costs what was
-- appended whatever the transcript's length; a rewrite of the transcript (a compact) puts
-- it whole in sessions.transcript and deletes the rows. Invariant (fsck): every row's
-- session exists.
CREATE TABLE IF NOT EXISTS session_appends (
    owner_kind TEXT    NOT NULL,
    owner_id   TEXT    NOT NULL,
    id         TEXT    NOT NULL,
    idx        INTEGER NOT NULL,
    text       TEXT    NOT NULL,
    PRIMARY KEY (owner_kind, owner_id, id, idx)
);

-- (v2) Where a secret was redacted and what kind: never the secret itself.
CREATE TABLE IF NOT EXISTS redactions (
    ts    DOUBLE NOT NULL,
    path  TEXT   NOT NULL,
    kind  TEXT   NOT NULL,
    count INTEGER NOT NULL
);

-- (v2) Every consolidation run and what it did.
CREATE TABLE IF NOT EXISTS consolidation_runs (
    ts       DOUBLE  NOT NULL,
    decayed  INTEGER NOT NULL,
    merged   INTEGER NOT NULL,
    archived INTEGER NOT NULL,
    summary  TEXT    NOT NULL
);
"""


def _chunk_attachments(con: Connection) -> None:
    """v2 -> v3: every file's `data` BLOB becomes rows of attachment_chunks, and the
    attachments table is rebuilt with a `size` column in place of `data`.

    Rebuilt rather than altered, so a migrated store has exactly the table a new one gets
    (DuckDB's ADD COLUMN takes no NOT NULL and appends at the end). Runs inside the
    Store's opening transaction: a failure leaves the v2 store as it was.
    """
    con.execute("ALTER TABLE attachments RENAME TO attachments_v2")
    con.execute(SCHEMA)  # CREATE ... IF NOT EXISTS: creates only the new attachments table
    con.execute("""
        INSERT INTO attachments (id, node_id, parent_id, name, kind, mode, mtime, size,
                                 target, deleted_at)
        SELECT id, node_id, parent_id, name, kind, mode, mtime,
               CASE WHEN kind = 'file' THEN coalesce(octet_length(data), 0) ELSE 0 END,
               target, deleted_at
        FROM attachments_v2""")
    ids = [
        r[0]
        for r in con.execute(
            "SELECT id FROM attachments_v2 WHERE kind = 'file' AND octet_length(data) > 0 "
            "ORDER BY id"
        ).fetchall()
    ]
    for att_id in ids:  # one file in memory at a time
        row = con.execute("SELECT data FROM attachments_v2 WHERE id = ?", [att_id]).fetchone()
        assert row is not None  # one of the ids just read
        data = row[0]
        insert_chunks(con, att_id, memoryview(data), range(-(-len(data) // CHUNK_SIZE)))
    con.execute("DROP TABLE attachments_v2")


def insert_chunks(
    con: Connection,
    att_id: int,
    data: FileBytes,
    indexes: range | list[int],
    *,
    table: str = "attachment_chunks",
    staged: dict[int, str] | None = None,
) -> None:
    """Insert chunks `indexes` of `data` (the whole file) for att_id (an inbox item's id
    with table='inbox_chunks'); rows with these keys must not exist. A chunk's bytes go to
    `blobs` unless a blob of the same hash is there already, or `staged` holds its hash
    (its blob stored ahead: `Store.stage_blobs`). Many rows per statement:
    `executemany` manages ~260 rows/s here."""
    key = {"attachment_chunks": "att_id", "inbox_chunks": "item_id"}[table]
    idx = list(indexes)
    for start in range(0, len(idx), _ROWS_PER_INSERT):
        batch = idx[start : start + _ROWS_PER_INSERT]
        if staged is not None and all(i in staged for i in batch):
            hashes = [staged[i] for i in batch]
        else:
            hashes = insert_blobs(con, data, batch)
        params: list[object] = []
        for i, h in zip(batch, hashes, strict=True):
            params += [att_id, i, h]
        con.execute(
            f"INSERT INTO {table} ({key}, idx, hash) VALUES "
            + ", ".join(["(?, ?, ?)"] * len(batch)),
            params,
        )


class ByteSource(Protocol):
    """A file's bytes that are not in memory (`memory.spill.SpillBuffer`): read by slices."""

    def __len__(self) -> int: ...
    @overload
    def __getitem__(self, key: int, /) -> int: ...
    @overload
    def __getitem__(self, key: slice, /) -> bytes: ...
    def __bytes__(self) -> bytes: ...


# the whole content of a file, as the chunk writers take it
FileBytes = bytes | bytearray | memoryview | ByteSource


def byte_view(data: FileBytes) -> memoryview | ByteSource:
    """Slices of data without copying what is in memory (a memoryview), or data itself
    when it is read from elsewhere."""
    return memoryview(data) if isinstance(data, bytes | bytearray | memoryview) else data


def insert_blobs(con: Connection, data: FileBytes, indexes: list[int]) -> list[str]:
    """Store the blobs of chunks `indexes` of `data` (the whole file) that `blobs` does
    not hold yet, _ROWS_PER_INSERT a statement; returns the chunks' hashes, in order."""
    view = byte_view(data)
    hashes: list[str] = []
    for start in range(0, len(indexes), _ROWS_PER_INSERT):
        new: dict[str, memoryview | bytes] = {}
        for i in indexes[start : start + _ROWS_PER_INSERT]:
            piece = view[i * CHUNK_SIZE : (i + 1) * CHUNK_SIZE]
            h = xxhash.xxh3_128_hexdigest(piece)
            hashes.append(h)
            new.setdefault(h, piece)
        have = {
            r[0]
            for r in con.execute(
                "SELECT hash FROM blobs WHERE list_contains(?::TEXT[], hash)", [list(new)]
            ).fetchall()
        }
        fresh = [(h, piece) for h, piece in new.items() if h not in have]
        if fresh:
            con.execute(
                "INSERT INTO blobs (hash, data, size) VALUES "
                + ", ".join(["(?, ?, ?)"] * len(fresh)),
                [x for h, piece in fresh for x in (h, piece, len(piece))],
            )
    return hashes


def sweep_blobs(con: Connection, hashes: list[str] | None = None) -> None:
    """Delete the blobs (of these hashes; None: all) that no chunk holds."""
    if hashes is None:
        con.execute(
            "DELETE FROM blobs WHERE hash NOT IN (SELECT hash FROM attachment_chunks) "
            "AND hash NOT IN (SELECT hash FROM inbox_chunks)"
        )
    elif hashes:
        con.execute(
            """
            DELETE FROM blobs WHERE list_contains(?::TEXT[], hash)
            AND hash NOT IN (SELECT hash FROM attachment_chunks
                             WHERE list_contains(?::TEXT[], hash))
            AND hash NOT IN (SELECT hash FROM inbox_chunks WHERE list_contains(?::TEXT[], hash))
            """,
            [hashes, hashes, hashes],
        )


_ROWS_PER_INSERT = 64


def _add_link_of(con: Connection) -> None:
    """v4 -> v5: attachments.link_of (hard links). A store migrated from v2 already has it
    (step 2 builds the newest attachments table)."""
    cols = {
        r[0]
        for r in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'attachments'"
        ).fetchall()
    }
    if "link_of" not in cols:
        con.execute("ALTER TABLE attachments ADD COLUMN link_of BIGINT")


def _columns(con: Connection, table: str) -> set[str]:
    return {
        r[0]
        for r in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = ?", [table]
        ).fetchall()
    }


def _content_address(con: Connection) -> None:
    """v5 -> v6: bytes stored once by content. attachment_chunks' `data` becomes a `hash`
    of a row of `blobs`; inbox_items' `data` becomes chunks in inbox_chunks (and a `size`
    column). Rebuilt rather than altered, one file in memory at a time, inside the Store's
    opening transaction. A table already in the new shape (a store migrated from v2 gets
    the newest attachment_chunks, a v1 store the newest inbox_items) is left as it is."""
    if "data" in _columns(con, "attachment_chunks"):
        con.execute("ALTER TABLE attachment_chunks RENAME TO attachment_chunks_v5")
        con.execute(SCHEMA)  # creates only the new attachment_chunks
        ids = [
            r[0]
            for r in con.execute(
                "SELECT DISTINCT att_id FROM attachment_chunks_v5 ORDER BY att_id"
            ).fetchall()
        ]
        for att_id in ids:
            rows = con.execute(
                "SELECT idx, data FROM attachment_chunks_v5 WHERE att_id = ? ORDER BY idx",
                [att_id],
            ).fetchall()
            data = b"".join(bytes(d) for _i, d in rows)
            insert_chunks(con, att_id, data, [i for i, _d in rows])
        con.execute("DROP TABLE attachment_chunks_v5")
    if "data" in _columns(con, "inbox_items"):
        con.execute("ALTER TABLE inbox_items RENAME TO inbox_items_v5")
        con.execute(SCHEMA_V2)  # creates only the new inbox_items
        con.execute("""
            INSERT INTO inbox_items (id, owner_kind, owner_id, filename, size, created, state,
                                     report)
            SELECT id, owner_kind, owner_id, filename, octet_length(data), created, state,
                   report FROM inbox_items_v5""")
        for (item_id,) in con.execute(
            "SELECT id FROM inbox_items_v5 WHERE octet_length(data) > 0 ORDER BY id"
        ).fetchall():
            row = con.execute("SELECT data FROM inbox_items_v5 WHERE id = ?", [item_id]).fetchone()
            assert row is not None  # one of the ids just read
            data = row[0]
            insert_chunks(
                con, item_id, data, range(-(-len(data) // CHUNK_SIZE)), table="inbox_chunks"
            )
        con.execute("DROP TABLE inbox_items_v5")


def _text_sizes(con: Connection) -> None:
    """v7 -> v8: nodes.l1_size, l2_size, filled from the texts. DuckDB cannot ALTER a table
    an index depends on: the path index goes and comes back around it."""
    cols = {
        r[0]
        for r in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'nodes'"
        ).fetchall()
    }
    if "l2_size" in cols:  # a store built at v8 and marked older (the migration tests)
        return
    con.execute("DROP INDEX IF EXISTS nodes_owner_type_name")
    con.execute("ALTER TABLE nodes ADD COLUMN l1_size BIGINT DEFAULT 0")
    con.execute("ALTER TABLE nodes ADD COLUMN l2_size BIGINT DEFAULT 0")
    con.execute("UPDATE nodes SET l1_size = strlen(l1), l2_size = strlen(l2)")
    con.execute(_NODES_OWNER_TYPE_NAME)


# (v10) fsck's one-live-name invariants as constraints: a second live node at a path, or
# a second live attachment of one name in one folder, cannot commit (the statement fails,
# its transaction rolls back). Unique over the name and a key that is 0 for the live row
# and the row's own id for a deleted one: deleted rows never collide, live ones do. An
# expression, not a partial index (`WHERE deleted_at IS NULL`): DuckDB has none; the same
# text runs on PostgreSQL. DuckDB cannot ALTER a table an index depends on: a migration
# that alters nodes or attachments drops these first (`drop_live_name_indexes`).
LIVE_NAME_INDEXES = {
    "nodes_live_path": "CREATE UNIQUE INDEX IF NOT EXISTS nodes_live_path ON nodes "
    "(owner_kind, owner_id, type, name, "
    "(CASE WHEN deleted_at IS NULL AND archived_at IS NULL THEN 0 ELSE id END))",
    "attachments_live_name": "CREATE UNIQUE INDEX IF NOT EXISTS attachments_live_name ON "
    "attachments (node_id, coalesce(parent_id, 0), name, "
    "(CASE WHEN deleted_at IS NULL THEN 0 ELSE id END))",
}

# what each index forbids, for a store whose rows already break it (then not created:
# fsck reports the duplicates and the missing constraint; `fsck --repair` mends both)
_LIVE_DUPLICATES = {
    "nodes_live_path": "SELECT 1 FROM nodes WHERE deleted_at IS NULL AND archived_at IS NULL "
    "GROUP BY owner_kind, owner_id, type, name HAVING count(*) > 1 LIMIT 1",
    "attachments_live_name": "SELECT 1 FROM attachments WHERE deleted_at IS NULL "
    "GROUP BY node_id, coalesce(parent_id, 0), name HAVING count(*) > 1 LIMIT 1",
}


def create_live_name_indexes(con: Connection) -> list[str]:
    """Create the LIVE_NAME_INDEXES a store lacks, unless its rows already hold the
    duplicates one forbids; returns the names of those left out."""
    left_out = []
    for name, sql in LIVE_NAME_INDEXES.items():
        if con.execute(_LIVE_DUPLICATES[name]).fetchone() is not None:
            left_out.append(name)
        else:
            con.execute(sql)
    return left_out


def drop_live_name_indexes(con: Connection) -> None:
    for name in LIVE_NAME_INDEXES:
        con.execute(f"DROP INDEX IF EXISTS {name}")


def _blob_sizes(con: Connection) -> None:
    """v11 -> v12: blobs.size, each blob's length, read from its bytes once here so that
    no mount reads them again (a mount's chunk checks summed octet_length(data) over every
    blob: a minute and GBs of DuckDB buffers at every mount of a store of 1 GB of files).
    DuckDB needs more than its default 128 MiB of buffers for this one pass (a BLOB column
    is read 2,048 rows at a time): the Store migrates with the limit lifted."""
    if "size" not in _columns(con, "blobs"):
        con.execute("ALTER TABLE blobs ADD COLUMN size BIGINT")
    con.execute("UPDATE blobs SET size = octet_length(data) WHERE size IS NULL")


def _archived_hold_no_name(con: Connection) -> None:
    """nodes_live_path again, without the archived rows: an archived node held its name
    in the store while the mount showed it free, so a new memory of that name failed
    its commit (and the transaction around it)."""
    con.execute("DROP INDEX IF EXISTS nodes_live_path")
    create_live_name_indexes(con)


# v7: a live node by its path without a scan, on both engines (memory.heads reads the
# nodes a mount uses on demand instead of every node at open)
_NODES_OWNER_TYPE_NAME = (
    "CREATE INDEX IF NOT EXISTS nodes_owner_type_name ON nodes (owner_kind, owner_id, type, name)"
)

# MIGRATIONS[n] upgrades a store at schema version n to n + 1: SQL, or a function for a
# step that needs more than one statement.
MIGRATIONS: dict[int, str | Callable[[Connection], object]] = {
    1: "ALTER TABLE nodes ADD COLUMN archived_at DOUBLE",
    2: _chunk_attachments,
    3: "SELECT 1",  # the access table: created by create_tables on any store
    4: _add_link_of,
    5: _content_address,
    6: _NODES_OWNER_TYPE_NAME,
    7: _text_sizes,
    # v9: inbox_items.progress, where an export's processing resumes after a remount
    8: "ALTER TABLE inbox_items ADD COLUMN IF NOT EXISTS progress TEXT DEFAULT ''",
    # v10: one live name per path and per folder, as constraints (LIVE_NAME_INDEXES)
    9: create_live_name_indexes,
    # v11: an archived node holds no name (as a deleted one): a new node may take it
    10: _archived_hold_no_name,
    # v12: blobs.size, so that a mount's chunk checks read no blob bytes
    11: _blob_sizes,
    # v13: session_appends, a live transcript's appends (created by create_tables)
    12: "SELECT 1",
    # v14: inbox_steps, where a conversation filed in steps resumes (create_tables makes it)
    13: "SELECT 1",
}


def create_tables(con: Connection) -> None:
    """The newest schema on a new store; on an older one, the tables it lacks (its
    changed tables are brought up to date by `migrate`)."""
    row = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'nodes'"
    ).fetchone()
    assert row is not None  # a count is one row
    fresh = row[0] == 0
    con.execute(SCHEMA)
    con.execute(SCHEMA_V2)
    if not fresh:
        return
    # not in SCHEMA: DuckDB cannot ALTER a table an index depends on (migration 1 does)
    con.execute(_NODES_OWNER_TYPE_NAME)
    create_live_name_indexes(con)
    con.execute(
        "INSERT INTO store_meta VALUES ('schema_version', ?) ON CONFLICT DO NOTHING",
        [str(SCHEMA_VERSION)],
    )


def migrate(con: Connection) -> int:
    """Bring the store to SCHEMA_VERSION; return the version it was at."""
    row = con.execute("SELECT value FROM store_meta WHERE key = 'schema_version'").fetchone()
    assert row is not None  # create_tables wrote it
    found = int(row[0])
    for v in range(found, SCHEMA_VERSION):
        step = MIGRATIONS[v]
        if callable(step):
            step(con)
        else:
            con.execute(step)
    if found != SCHEMA_VERSION:
        con.execute(
            "UPDATE store_meta SET value = ? WHERE key = 'schema_version'", [str(SCHEMA_VERSION)]
        )
    return found
