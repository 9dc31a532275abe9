"""Store: every read and write of the canonical DuckDB file.

All writes that change a node happen in one transaction together with their outbox row.
A DuckDB connection is not thread-safe: the Store is used from one thread at a time (the
daemon's trio thread), which is also what keeps DuckDB's one-writer rule.

Transactions belong to the memory service (`Memory.transaction`), which keeps its
in-memory mirrors in step with what commits; `Store.atomic` is the bare DuckDB transaction
it is built on.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from contextfs.errors import NoSpace, StoreDamaged, StoreLocked, disk_full
from contextfs.model import MACHINE_REASONS, Access, Attachment, Node
from contextfs.store.backup import BackupPolicy, take
from contextfs.store.dialect import DUCKDB
from contextfs.store.schema import (
    CHUNK_SIZE,
    FileBytes,
    create_tables,
    insert_blobs,
    insert_chunks,
    migrate,
    sweep_blobs,
)

if TYPE_CHECKING:
    from contextfs.store.backend import SharedVectors

log = logging.getLogger(__name__)

# store_meta: unix time at which the newest consolidation run began (its first write)
CONSOLIDATION_BEGUN = "consolidation_begun"

_NODE_COLS = (
    "id, owner_kind, owner_id, type, name, version, l0, l1, l2, l0_pinned, l1_pinned, "
    "content_hash, sources, tags, importance, access_count, created, updated, deleted_at, "
    "archived_at"
)


# lock files this process holds: path -> [descriptor, stores open on it]. Two stores of
# one file in one process share the lock (a test that drops a store without closing it,
# as a crash would, and opens it again).
_HELD: dict[str, list[int]] = {}
_HELD_LOCK = threading.Lock()


def lock_store(db: Path, read_only: bool) -> str | None:
    """Hold `<db>.lock` while the store is open: exclusive for a writer (a mount, a
    `reindex`), shared for a reader (`fsck`, `status` of a data dir). DuckDB's own lock
    covers the file only while a connection writes (a second mount of a data dir opened
    it and failed at its first commit); this one refuses at once, naming the holder
    (StoreLocked: exit 4). The lock goes with the process, so a killed daemon leaves none.
    Returns the key to let go of it (`_unlock_store`)."""
    path = db.with_name(db.name + ".lock")
    key = str(path.resolve()) if path.parent.exists() else str(path)
    with _HELD_LOCK:
        held = _HELD.get(key)
        if held is not None:
            held[1] += 1
            return key
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:
            return None  # a read-only data dir: DuckDB's own lock is all there is
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if read_only else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            finally:
                os.close(fd)
            who = f"PID {holder}" if holder.isdigit() else "another process"
            raise StoreLocked(f"store in use by {who}: {db} (is it mounted?)") from None
        if not read_only:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        _HELD[key] = [fd, 1]
        return key


def unlock_store(key: str | None) -> None:
    if key is None:
        return
    with _HELD_LOCK:
        held = _HELD.get(key)
        if held is None:
            return
        held[1] -= 1
        if held[1] <= 0:
            del _HELD[key]
            os.close(held[0])  # closing the descriptor lets go of the flock


def _close_when_idle(con: Any, wait: float = 10.0) -> None:
    """Close a DuckDB connection, waiting for a query another thread is running on it: a
    worker the unmount abandoned (the indexer's start, which reads texts) may still be in
    one, and DuckDB refuses to close a busy connection. Committed data is safe either way."""
    deadline = time.monotonic() + wait
    while True:
        try:
            con.close()
            return
        except duckdb.ResourceInUseException:
            if time.monotonic() > deadline:
                log.warning("closing the store while a worker thread still uses it")
                return
            time.sleep(0.02)


class _Roomy:
    """A DuckDB connection (or cursor) whose statements DuckDB refuses for want of buffer
    memory run again with a larger limit.

    Under a buffer limit (`store_memory_mb`) DuckDB does not wait for memory: a statement
    that cannot pin what it needs fails, whether it reads a big inbox item whole or runs
    beside other reads that pin a lot (a search, the warm-up, the indexer). The limit is a
    cache size, not a cap on what a user may store: such a statement makes it grow by half
    (up to DuckDB's own default, 80% of the machine's memory; logged, and `.status` shows
    the limit in force) and runs again, outside a transaction. Inside one, DuckDB has
    already rolled the transaction back: the limit grows and the error goes up, to the
    write's own error path (a refused write, its bytes kept), and the next try fits."""

    __slots__ = ("_con", "_store")

    def __init__(self, con: Any, store: Store) -> None:
        self._con = con
        self._store = store

    def _run(self, method: str, *args: Any, **kwargs: Any) -> Any:
        while True:
            try:
                getattr(self._con, method)(*args, **kwargs)
                return self
            except duckdb.OutOfMemoryException as exc:
                self._store._grow_buffers(exc)  # raises it at the ceiling
                if self._con is self._store.con._con and self._store._depth:
                    raise

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        return self._run("execute", *args, **kwargs)

    def executemany(self, *args: Any, **kwargs: Any) -> Any:
        return self._run("executemany", *args, **kwargs)

    def cursor(self) -> _Roomy:
        return _Roomy(self._con.cursor(), self._store)

    def __getattr__(self, name: str) -> Any:  # fetch*, begin, commit, close, ...
        return getattr(self._con, name)


_LIVE_OF_TYPE = "deleted_at IS NULL AND archived_at IS NULL AND type = ?"


def _utf8_len(text: str) -> int:
    """What `stat` shows for a tier (the l1_size/l2_size columns)."""
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def _node_from_row(row: tuple, make: Callable[..., Node] = Node) -> Node:
    n = make(*row[:12])
    n.sources = json.loads(row[12])
    n.tags = json.loads(row[13])
    n.importance, n.access_count, n.created, n.updated, n.deleted_at, n.archived_at = row[14:20]
    return n


def _history_of(rows: list) -> tuple[list[tuple[int, float, int]], bool]:
    """(version, created, L2 size, reason) rows, oldest first, as `node_history` gives
    them: the version list and whether a person wrote any of them (MACHINE_REASONS)."""
    person = any(not r[3].startswith(MACHINE_REASONS) for r in rows)
    return [(v, c, s) for v, c, s, _r in rows], person


class Store:
    """The DuckDB store (embedded, the default); `contextfs.store.pg.PgStore` is the same
    over PostgreSQL. What both offer is `contextfs.store.backend.StoreBackend`."""

    dialect = DUCKDB
    path: Path | None  # the DuckDB file; None on PostgreSQL (PgStore)
    # set by a mount whose store passed its check: a backup taken at close, when due
    backup: BackupPolicy | None = None
    # the driver's errors: any fault; a refused value; the server gone (none: embedded)
    errors: tuple[type[BaseException], ...] = (duckdb.Error,)
    invalid: tuple[type[BaseException], ...] = (
        duckdb.InvalidInputException,
        duckdb.ConversionException,
    )
    conflict: tuple[type[BaseException], ...] = (duckdb.ConstraintException,)
    unavailable: tuple[type[BaseException], ...] = ()
    # no room in the buffers inside a transaction (`_Roomy`): refused, the limit grown
    busy: tuple[type[BaseException], ...] = (duckdb.OutOfMemoryException,)
    # acknowledged changes the store as opened does not hold (`CommitMark`), or None
    lost_commits: str | None = None

    def __init__(
        self,
        path: Path,
        *,
        read_only: bool = False,
        memory_mb: int = 0,
        lock_as: Path | None = None,
        checkpoint_mb: int = 64,
    ) -> None:
        """`lock_as`: hold that store's lock, exclusively, instead of path's (a mount
        showing a backup of a damaged store keeps `restore` and other mounts off it)."""
        self.path = Path(path)
        self.location = str(self.path)
        self.read_only = read_only
        # DuckDB keeps the pages it read in its own buffers, up to 80% of the machine's
        # memory by default: over a big store a daemon's reads kept growing them (hundreds
        # of MiB at a million nodes). A limit makes them a cache of that size; a statement
        # that needs more makes it grow (`_Roomy`); big scans (fsck) spill to `<file>.tmp`.
        # The limit is set once the file is open: opening replays the write-ahead log of a
        # daemon that died and checkpoints it, which needs room for the row groups it
        # rewrites (`_checkpoint`), more than the limit after a big import.
        config: dict[str, str | bool | int | float | list[str]] = {}
        if not read_only:  # checkpoints are the Store's (`_checkpoint_if_due`)
            config["checkpoint_threshold"] = "1000GB"
        self._wal = self.path.with_name(self.path.name + ".wal")
        # what the log holds is held in DuckDB's buffers too until a checkpoint moves it:
        # past half the buffer limit, a commit failed out of memory, fatally
        self.checkpoint_wal = (
            min(checkpoint_mb, max(1, memory_mb // 2)) if memory_mb > 0 else checkpoint_mb
        ) << 20
        self._postponed = False
        self._lock_fd = lock_store(lock_as or self.path, read_only and lock_as is None)
        self._mark = CommitMark(self.path)
        # what the last commit left, read before DuckDB replays (and cuts) the log
        marked, log_size = self._mark.read(), _size(self._wal)
        file = _mtime(self.path)
        try:
            self.con = _Roomy(
                duckdb.connect(str(self.path), read_only=read_only, config=config), self
            )
            if memory_mb > 0:
                self.con.execute(f"SET memory_limit = '{memory_mb}MiB'")
        except duckdb.IOException as exc:
            unlock_store(self._lock_fd)
            if "lock" in str(exc).lower():
                pid = re.search(r"\(PID (\d+)\)", str(exc))
                raise StoreLocked(
                    f"store in use by PID {pid.group(1)}: {self.path} (is it mounted?)"
                    if pid
                    else f"{self.path} is in use by another process (is it mounted?)"
                ) from exc
            raise StoreDamaged(f"cannot open {self.path}: {exc}") from exc
        except BaseException:
            unlock_store(self._lock_fd)
            raise
        self._depth = 0
        # hashes of blobs a rewrite or purge let go of: reclaimed (when no chunk holds them)
        # in batches and at close; one blob deleted per commit costs ~2.4 ms. The first
        # sweep of a store's life also takes what a daemon that died left; not at open:
        # a store that fails fsck is not written to, and its unheld blobs may be evidence
        self.garbage: set[str] = set()
        self._swept_all = False
        self._staged: set[str] = set()  # blobs stored ahead of the chunks that hold them
        self._ids: list[int] = []
        self._seq = 0
        # Set by the Memory that owns this store: `transaction()` is then its transaction.
        if not read_only:
            with self.atomic(), self._lifted():  # a migration may read every blob once
                create_tables(self.con)
                migrate(self.con)
                self.con.execute(
                    "INSERT INTO store_meta VALUES ('created', ?) ON CONFLICT DO NOTHING",
                    [str(time.time())],
                )
        self._seq = self.generation()
        self._opened_by = threading.get_ident()  # see node_text
        self.lost_commits = _lost_commits(marked, log_size, file, self._seq, self._wal)
        if self.lost_commits:
            log.error("%s", self.lost_commits)
        elif not read_only:  # kept as found while something is missing: `accept_lost`
            self._mark.open()
            self._mark.write(self._seq, _size(self._wal) or 0)

    def describe(self) -> str:
        """Where the store is, for `.status` (never a password)."""
        return f"duckdb {self.location}"

    def _grow_buffers(self, why: BaseException) -> None:
        """Raise DuckDB's buffer limit by half, up to 80% of the machine's memory; raises
        `why` when it is there already."""
        with self._grow_lock:
            # a connection of its own: the refused statement's transaction may be aborted
            con = self.con._con.cursor()
            try:
                limit = _bytes(con.execute("SELECT current_setting('memory_limit')").fetchone()[0])
                ceiling = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 0.8)
                grown = min(ceiling, limit * 3 // 2)
                if grown <= limit:
                    raise why
                con.execute(f"SET memory_limit = '{grown // 1024 + 1}KiB'")
                now = _bytes(con.execute("SELECT current_setting('memory_limit')").fetchone()[0])
            finally:
                con.close()
            if now <= limit:
                raise why  # it did not take: never loop
        log.log(
            logging.INFO if self._big_reads else logging.WARNING,
            "store buffers: a statement needed more than %.1f MiB; the limit is now %.1f MiB "
            "(store_memory_mb in config.yaml sets where it starts)",
            limit / 2**20,
            now / 2**20,
        )

    _grow_lock = threading.Lock()
    # reads under way that return many blobs (`inbox_data`): growing the buffers for them
    # is expected, not an anomaly
    _big_reads = 0

    def buffer_memory(self) -> tuple[int, int] | None:
        """Bytes of the daemon's memory the store's buffers hold now, and their limit
        (`.status`); None where the store's memory is a server's own (PostgreSQL)."""
        con = self._meta_con()
        used = con.execute("SELECT sum(memory_usage_bytes) FROM duckdb_memory()").fetchone()[0]
        limit = con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
        return int(used or 0), _bytes(limit)

    def read_ahead(self) -> None:
        """Ask the kernel to bring the store's file into the page cache (after a mount, in
        a worker thread). DuckDB reads its file through its own small buffers, and the
        first questions after a mount read hundreds of random rows: on a file whose pages
        the machine let go (here a file not read for some minutes is reclaimed, with
        memory free), each is a disk read. The page cache is the kernel's, not the
        daemon's memory."""
        if not hasattr(os, "posix_fadvise"):
            return
        assert self.path is not None  # PgStore overrides this
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        except OSError:
            pass
        finally:
            os.close(fd)

    def close(self) -> None:
        self._close_readers()
        if self.garbage:
            try:
                with self.atomic():
                    self.sweep()
            except (duckdb.Error, StoreDamaged):  # a later sweep reclaims them
                log.warning("could not reclaim %d unheld blob(s) at close", len(self.garbage))
        if not self.read_only:  # closing checkpoints: with room for it (`_checkpoint`)
            # another connection in a transaction: the close's own checkpoint, then
            with suppress(duckdb.Error):
                self._checkpoint()
        _close_when_idle(self.con)
        if self.backup is not None:  # the file is whole now, and still ours (the lock)
            assert self.path is not None  # PgStore overrides close
            try:
                take(self.path, self.backup)
            except OSError as exc:
                log.warning("no backup of the store taken: %s", exc)
        self._mark.close()
        unlock_store(self._lock_fd)
        self._lock_fd = None

    def accept_lost(self) -> str | None:
        """Take the store as it is, its missing acknowledged changes lost (`fsck
        --repair`): the mark is written anew from what the store holds. What was said."""
        said, self.lost_commits = self.lost_commits, None
        if said and not self.read_only:
            self._mark.open()
            self._mark.write(self._seq, _size(self._wal) or 0)
        return said

    GARBAGE_BATCH = 64

    def _let_go(self, hashes: list[str]) -> None:
        """Blobs these chunks held may be held by nothing now: reclaim them with others
        (a batch of 64 costs ~0.12 ms a blob)."""
        self.garbage.update(hashes)
        if len(self.garbage) >= self.GARBAGE_BATCH:
            self.sweep()

    def sweep(self) -> None:
        """Delete the let-go blobs no chunk holds (inside the caller's transaction); the
        first sweep deletes every blob no chunk holds (not while staged blobs wait for
        their chunks: it waits for a later one)."""
        if not self.garbage or (self._staged and not self._swept_all):
            return
        sweep_blobs(self.con, sorted(self.garbage - self._staged) if self._swept_all else None)
        self._swept_all = True
        self.garbage.clear()

    # A change that stores more new chunk bytes than this stores their blobs first, in
    # transactions of their own of at most this many bytes each (`stage_blobs`).
    STAGE_BYTES = 8 * 1024 * 1024

    def stage_blobs(self, data: FileBytes, chunks: list[int]) -> list[str]:
        """Before the transaction that writes these chunks of a big file: store their
        blobs ahead, STAGE_BYTES a transaction, so that transaction holds hashes only.

        DuckDB keeps what a transaction writes in its buffers until the commit, and a
        commit that needs more than the buffer limit fails as fatal: the database is
        invalidated and every later read and write fails until a restart (a 200 MB file
        at the default 128 MiB). Staged blobs are held by no chunk until that commit: no
        sweep takes them meanwhile; `unstage` releases them. Returns their hashes (none:
        not staged, for a small change or inside an open transaction)."""
        if self._depth or len(chunks) * CHUNK_SIZE <= self.STAGE_BYTES:
            return []
        per = self.STAGE_BYTES // CHUNK_SIZE
        staged: list[str] = []
        try:
            for start in range(0, len(chunks), per):
                part = chunks[start : start + per]
                with self.atomic():
                    hashes = insert_blobs(self.con, data, part)
                self._staged.update(hashes)
                staged += hashes
        except BaseException:
            self.unstage(staged, held=False)
            raise
        return staged

    def unstage(self, hashes: list[str], *, held: bool) -> None:
        """The transaction that staged blobs were for has ended: committed (held), or
        not, and then they are let go like any blob no chunk holds."""
        self._staged.difference_update(hashes)
        if not held:
            self.garbage.update(hashes)

    @contextmanager
    def _joined(self) -> Iterator[None]:
        """A nested `atomic`: part of the transaction already open."""
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """One DuckDB transaction; nested uses join the outer one. No bookkeeping: this is
        what `Memory.transaction` is built on."""
        if self._depth:
            with self._joined():
                yield
            return
        self.con.begin()
        self._depth = 1
        try:
            yield
        except BaseException:
            self._depth = 0
            try:
                self.con.rollback()
                self._seq = self.generation()  # the rolled-back outbox rows are gone
            except duckdb.Error:
                log.error("rollback failed; the store is unusable until restart")
            raise
        self._depth = 0
        try:
            self.con.commit()
        except duckdb.Error as exc:
            # nothing of it was stored, its outbox rows neither: the commit mark must not
            # say they were at the next commit
            with suppress(duckdb.Error):
                self._seq = self.generation()
            if disk_full(exc):
                raise NoSpace(
                    f"the disk is full; nothing of this change was stored ({exc})"
                ) from exc
            raise StoreDamaged(f"commit failed: {exc}") from exc
        self._checkpoint_if_due()

    # Past `checkpoint_wal` (store_checkpoint_mb) the write-ahead log goes into the
    # database file. A checkpoint rewrites every column a change touched in the row groups
    # it touched, whole: a node's L2 saved rewrites the L2s of all the nodes beside it. So
    # its cost grows with the store, and during a 100 MB import DuckDB's own 16 MiB made
    # one every few seconds, each stalling every write for up to 0.8 s; at 64 MiB there
    # are a quarter as many, and replaying such a log after a crash takes about 0.5 s.
    # a checkpoint writes the log's pages into the file before it cuts the log: with less
    # free space than the log, a quarter more and this, it waits (DuckDB's own checkpoint,
    # failing on a full disk, invalidates the database for the rest of the process: every
    # read and write of the mount would fail until a restart)
    CHECKPOINT_ROOM = 16 * 1024 * 1024

    def _checkpoint_if_due(self) -> None:
        """Move the write-ahead log into the database file when it has grown past
        `checkpoint_wal` and the disk has room for it; else later (logged once)."""
        try:
            wal = os.stat(self._wal).st_size
        except OSError:
            return
        self._mark.write(self._seq, wal)  # the commit is in the log: it has this much
        if wal < self.checkpoint_wal:
            return
        assert self.path is not None  # PgStore overrides atomic, which calls this
        free = shutil.disk_usage(self.path.parent).free
        if free < wal + wal // 4 + self.CHECKPOINT_ROOM:
            if not self._postponed:
                log.warning(
                    "disk nearly full (%d MiB free): the store's checkpoint waits (its "
                    "write-ahead log holds %d MiB; every write is kept there meanwhile)",
                    free >> 20,
                    wal >> 20,
                )
            self._postponed = True
            return
        try:
            self._checkpoint()
            self._postponed = False
        except duckdb.TransactionException:
            pass  # another connection's transaction is open: at a later commit

    def _checkpoint(self) -> None:
        """CHECKPOINT with the buffer limit lifted to the machine's ceiling, then put back.

        A checkpoint rewrites the row groups the log changed whole, and the blobs of a big
        import share one: it needs buffers for all of them at once (at 128 MiB it failed
        once a store held about 220 MB of blobs). DuckDB raises that failure as fatal and
        invalidates the database: every read and write of the mount would fail until a
        restart. The buffers it takes are let go after; what a process keeps of them is
        its allocator's."""
        # the log is about to be cut: from now no size of it is owed (a crash during or
        # after the checkpoint finds it gone, rightly); the seq still is
        self._mark.write(self._seq, 0)
        with self._lifted():
            self.con._con.execute("CHECKPOINT")

    @contextmanager
    def _lifted(self) -> Iterator[None]:
        """The buffer limit lifted to the machine's ceiling meanwhile, then put back: for
        what needs room all at once and must not fail half done (a checkpoint; a
        migration that reads every blob once, `schema._blob_sizes`)."""
        con = self.con._con
        with self._grow_lock:  # not held meanwhile: a statement in there may grow them
            limit = con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
            ceiling = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 0.8)
            con.execute(f"SET memory_limit = '{ceiling // 1024}KiB'")
        try:
            yield
        finally:
            with self._grow_lock:
                con.execute(f"SET memory_limit = '{limit}'")

    _ID_BLOCK = 256

    def _next_ids(self, count: int) -> list[int]:
        """The next `count` values of the id sequence, ascending. Taken outside the
        transaction that uses them: a full disk is refused here as in one (NoSpace)."""
        try:
            rows = self.con.execute(f"SELECT nextval('object_ids') FROM range({count})").fetchall()
        except duckdb.Error as exc:
            if disk_full(exc):
                raise NoSpace(f"the disk is full; nothing was stored ({exc})") from exc
            raise
        return sorted(r[0] for r in rows)

    def new_id(self) -> int:
        """A fresh object id. Ids are taken from the sequence in blocks (a statement costs
        about 0.25 ms); DuckDB does not roll sequences back, so an id is never reused."""
        if not self._ids:
            self._ids = list(reversed(self._next_ids(self._ID_BLOCK)))
        return self._ids.pop()

    def claim_id(self, wanted: int) -> bool:
        """Take `wanted` as an id (an import restoring an exported node's id) when it was
        never handed out; False when it may have been (then the caller takes a new one).
        Ids up to `wanted` that the sequence skips stay free for `new_id`."""
        if wanted in self._ids:
            self._ids.remove(wanted)
            return True
        [top] = self._next_ids(1)
        if wanted < top:
            self._ids.insert(0, top)  # not lost: handed out last
            return False
        skipped = [top, *self._next_ids(wanted - top)] if wanted > top else [top]
        skipped.remove(wanted)
        self._ids[:0] = reversed(skipped)
        return True

    def _outbox(self, node_id: int, version: int, op: str) -> int:
        """Append the outbox row of a change; returns the new store generation.

        One process owns the database file, so the next seq is kept in memory."""
        self._seq += 1
        self.con.execute(
            "INSERT INTO outbox VALUES (?, ?, ?, ?, ?)",
            [self._seq, node_id, version, op, time.time()],
        )
        return self._seq

    @property
    def last_seq(self) -> int:
        """The newest outbox seq this store's commits gave out (or found at open)."""
        return self._seq

    # ---- reading everything at mount time -------------------------------------------

    def generation(self) -> int:
        row = self.con.execute("SELECT max(seq) FROM outbox").fetchone()
        return row[0] or 0

    def owners(self) -> list[tuple[str, str]]:
        rows = self._meta_con().execute("SELECT kind, id FROM owners ORDER BY 1, 2").fetchall()
        return [tuple(r) for r in rows]

    def access(self) -> dict[tuple[str, str], Access]:
        rows = (
            self._meta_con()
            .execute("SELECT kind, key, uid, gid, dir_mode, file_mode FROM access")
            .fetchall()
        )
        return {(k, key): Access(uid, gid, dm, fm) for k, key, uid, gid, dm, fm in rows}

    def nodes(self) -> list[Node]:
        rows = self.con.execute(f"SELECT {_NODE_COLS} FROM nodes ORDER BY id").fetchall()
        nodes = [_node_from_row(r) for r in rows]
        by_id = {n.id: n for n in nodes}
        hist = self.con.execute(
            "SELECT node_id, version, created, strlen(l2), reason FROM versions "
            "ORDER BY node_id, version"
        ).fetchall()
        for node_id, version, created, size, reason in hist:
            if node_id in by_id:
                n = by_id[node_id]
                n.history.append((version, created, size))
                if not reason.startswith(MACHINE_REASONS):
                    n.person_wrote = True
        return nodes

    def attachments(self) -> list[Attachment]:
        rows = self.con.execute(
            "SELECT id, node_id, parent_id, name, kind, mode, mtime, target, deleted_at, "
            "size, link_of FROM attachments ORDER BY id"
        ).fetchall()
        return [Attachment(*r) for r in rows]  # the columns in Attachment's field order

    def node_attachments(self, node_ids: list[int]) -> list[Attachment]:
        """The attachment records of these nodes as stored now, deleted ones too. Any
        thread (`_meta_con`)."""
        rows = (
            self._meta_con()
            .execute(
                "SELECT id, node_id, parent_id, name, kind, mode, mtime, target, deleted_at, "
                "size, link_of FROM attachments WHERE list_contains(?::BIGINT[], node_id) "
                "ORDER BY id",
                [node_ids],
            )
            .fetchall()
        )
        return [Attachment(*r) for r in rows]

    def attachment(self, att_id: int) -> Attachment | None:
        """One attachment record as stored (a rollback reloads what it had changed)."""
        row = self.con.execute(
            "SELECT id, node_id, parent_id, name, kind, mode, mtime, target, deleted_at, "
            "size, link_of FROM attachments WHERE id = ?",
            [att_id],
        ).fetchone()
        if row is None:
            return None
        return Attachment(*row)

    def attachment_data(self, att_id: int) -> bytearray:
        """A file attachment's bytes: its chunks in order (empty for no chunks)."""
        out = bytearray()
        for (chunk,) in self.con.execute(
            "SELECT b.data FROM attachment_chunks c JOIN blobs b ON b.hash = c.hash "
            "WHERE c.att_id = ? ORDER BY c.idx",
            [att_id],
        ).fetchall():
            out += chunk
        return out

    def attachment_chunks(self, att_id: int, batch: int = 64) -> Iterator[tuple[int, bytes]]:
        """A file attachment's chunks as (index, bytes), in no set order, `batch` rows at
        a time: a big file is never held whole in Python (`memory.spill`). One query: the
        blobs of a file share row groups, which any query of some of them reads whole."""
        cur = self.con.execute(
            "SELECT c.idx, b.data FROM attachment_chunks c JOIN blobs b ON b.hash = c.hash "
            "WHERE c.att_id = ?",
            [att_id],
        )
        while rows := cur.fetchmany(batch):
            yield from rows

    def version_text(self, node_id: int, version: int) -> str:
        row = self.con.execute(
            "SELECT l2 FROM versions WHERE node_id = ? AND version = ?", [node_id, version]
        ).fetchone()
        return row[0] if row else ""

    def rewrite_version(self, node_id: int, version: int, text: str, content_hash: str) -> None:
        """An earlier version's text replaced: a secret's first part by its marker (a later
        save found the rest: Memory._redact_versions), or the versions from one on moved
        up a number for one a copier put back (Memory.insert_version). Call in a
        transaction."""
        self.con.execute(
            "UPDATE versions SET l2 = ?, content_hash = ? WHERE node_id = ? AND version = ?",
            [text, content_hash, node_id, version],
        )

    def set_version_time(self, node_id: int, version: int, created: float) -> None:
        """When a version was saved, as the copy it came from says (`Memory.set_version_time`).
        Call in a transaction."""
        self.con.execute(
            "UPDATE versions SET created = ? WHERE node_id = ? AND version = ?",
            [created, node_id, version],
        )

    def pending_drops(self) -> list[tuple[int, str, str, str, str, bytes]]:
        rows = self.con.execute(
            "SELECT id, owner_kind, owner_id, type, filename, data FROM pending_drops ORDER BY id"
        ).fetchall()
        return [(*r[:5], bytes(r[5])) for r in rows]

    def outbox_since(self, seq: int, limit: int) -> list[tuple[int, int, int, str]]:
        """Outbox rows after seq, oldest first: (seq, node_id, version, op)."""
        return [
            tuple(r)
            for r in self.con.execute(
                "SELECT seq, node_id, version, op FROM outbox WHERE seq > ? ORDER BY seq LIMIT ?",
                [seq, limit],
            ).fetchall()
        ]

    def outbox_depth(self) -> int:
        return self.con.execute("SELECT count(*) FROM outbox").fetchone()[0]

    # ---- writing ----------------------------------------------------------------------

    def add_owner(self, kind: str, owner_id: str) -> None:
        self.con.execute(
            "INSERT INTO owners VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
            [kind, owner_id, time.time()],
        )

    def set_access(self, kind: str, key: str, a: Access | None) -> None:
        """Store (or, with None, forget) the access of an owner, node or attachment."""
        if a is None:
            self.con.execute("DELETE FROM access WHERE kind = ? AND key = ?", [kind, key])
            return
        self.con.execute(
            "INSERT INTO access VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (kind, key) DO UPDATE "
            "SET uid = excluded.uid, gid = excluded.gid, dir_mode = excluded.dir_mode, "
            "file_mode = excluded.file_mode",
            [kind, key, a.uid, a.gid, a.dir_mode, a.file_mode],
        )

    def insert_node(self, n: Node, *, new_version_reason: str | None = None) -> int:
        """Insert a new node row (and its first version, with a reason); returns the
        generation of the change."""
        self.con.execute(
            f"INSERT INTO nodes ({_NODE_COLS}, l1_size, l2_size) VALUES "
            "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                n.id,
                n.owner_kind,
                n.owner_id,
                n.type,
                n.name,
                n.version,
                n.l0,
                n.l1,
                n.l2,
                n.l0_pinned,
                n.l1_pinned,
                n.content_hash,
                json.dumps(n.sources),
                json.dumps(n.tags),
                n.importance,
                n.access_count,
                n.created,
                n.updated,
                n.deleted_at,
                n.archived_at,
                _utf8_len(n.l1),
                _utf8_len(n.l2),
            ],
        )
        if new_version_reason is not None:
            self._insert_version(n, new_version_reason)
        return self._outbox(n.id, n.version, "delete" if n.deleted_at else "upsert")

    def _insert_version(self, n: Node, reason: str) -> None:
        self.con.execute(
            "INSERT INTO versions VALUES (?, ?, ?, ?, ?, ?)",
            [n.id, n.version, n.l2, n.content_hash, n.updated, reason],
        )

    def update_node(self, n: Node, *, new_version_reason: str | None = None) -> int:
        """Write every mutable column of n; with a reason, also record n.l2 as n.version."""
        self.con.execute(
            "UPDATE nodes SET owner_kind=?, owner_id=?, type=?, name=?, version=?, l0=?, l1=?, "
            "l2=?, l0_pinned=?, l1_pinned=?, content_hash=?, sources=?, tags=?, importance=?, "
            "access_count=?, updated=?, deleted_at=?, archived_at=?, l1_size=?, l2_size=? "
            "WHERE id=?",
            [
                n.owner_kind,
                n.owner_id,
                n.type,
                n.name,
                n.version,
                n.l0,
                n.l1,
                n.l2,
                n.l0_pinned,
                n.l1_pinned,
                n.content_hash,
                json.dumps(n.sources),
                json.dumps(n.tags),
                n.importance,
                n.access_count,
                n.updated,
                n.deleted_at,
                n.archived_at,
                _utf8_len(n.l1),
                _utf8_len(n.l2),
                n.id,
            ],
        )
        if new_version_reason is not None:
            self._insert_version(n, new_version_reason)
        op = "delete" if n.deleted_at is not None or n.archived_at is not None else "upsert"
        return self._outbox(n.id, n.version, op)

    def repair_node(
        self,
        node_id: int,
        *,
        name: str | None = None,
        deleted_at: float | None = None,
        new_version: str | None = None,
    ) -> int:
        """fsck --repair's change of a node row (contextfs.store.repair): a new name, a
        soft delete, or its current L2 recorded as a new version (with that reason), or
        none of them; with its outbox row, so the derived indexes follow. Returns the
        generation."""
        if name is not None:
            self.con.execute("UPDATE nodes SET name = ? WHERE id = ?", [name, node_id])
        if deleted_at is not None:
            self.con.execute("UPDATE nodes SET deleted_at = ? WHERE id = ?", [deleted_at, node_id])
        if new_version is not None:
            self.con.execute(
                "UPDATE nodes SET version = version + 1, updated = ? WHERE id = ?",
                [time.time(), node_id],
            )
            self.con.execute(
                "INSERT INTO versions SELECT id, version, l2, content_hash, updated, ? "
                "FROM nodes WHERE id = ?",
                [new_version, node_id],
            )
        version, gone = self.con.execute(
            "SELECT version, deleted_at IS NOT NULL OR archived_at IS NOT NULL FROM nodes "
            "WHERE id = ?",
            [node_id],
        ).fetchone()
        return self._outbox(node_id, version, "delete" if gone else "upsert")

    def set_importance(self, importance: dict[int, float], access: dict[int, int]) -> None:
        """Nodes' importance and access counts (no new versions): each column in one
        statement, whatever the number of nodes (consolidation re-weighs every node of a
        store each day: a statement each took 1.5 ms, 25 minutes at a million)."""
        for column, values, sql_type in (
            ("importance", importance, "DOUBLE"),
            ("access_count", access, "BIGINT"),
        ):
            if values:
                self.con.execute(
                    f"UPDATE nodes SET {column} = v.value FROM (SELECT unnest(?::BIGINT[]) AS "
                    f"id, unnest(?::{sql_type}[]) AS value) AS v WHERE nodes.id = v.id",
                    [list(values), list(values.values())],
                )

    def meta(self, key: str) -> str | None:
        """A value of the store's key/value table (store_meta), None when unset (any
        thread: consolidation plans in a worker thread)."""
        con = self._meta_con()
        row = con.execute("SELECT value FROM store_meta WHERE key = ?", [key]).fetchone()
        return None if row is None else row[0]

    def set_meta(self, key: str, value: str) -> None:
        self.con.execute(
            "INSERT INTO store_meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = "
            "excluded.value",
            [key, value],
        )

    def add_consolidation_run(
        self, ts: float, decayed: int, merged: int, archived: int, summary: str
    ) -> None:
        self.con.execute(
            "INSERT INTO consolidation_runs VALUES (?, ?, ?, ?, ?)",
            [ts, decayed, merged, archived, summary],
        )

    def last_consolidation(self) -> tuple | None:
        return self.con.execute(
            "SELECT ts, decayed, merged, archived, summary, (SELECT count(*) FROM "
            "consolidation_runs) FROM consolidation_runs ORDER BY ts DESC LIMIT 1"
        ).fetchone()

    def begin_consolidation(self, ts: float) -> None:
        """Record that a consolidation run begins at ts (see `consolidation_begun`)."""
        self.set_meta(CONSOLIDATION_BEGUN, repr(ts))

    def consolidation_begun(self) -> float | None:
        """When the newest consolidation run began (`store_meta`, written as it starts):
        later than the last recorded run, that run did not end."""
        value = self.meta(CONSOLIDATION_BEGUN)
        return None if value is None else float(value)

    def insert_attachment(
        self, a: Attachment, data: FileBytes | None, staged: dict[int, str] | None = None
    ) -> None:
        """A new attachment row; a file's bytes (data, never None for a file) as chunks
        (`staged`: as for `write_attachment_chunks`)."""
        size = len(data) if a.kind == "file" and data else 0
        self.con.execute(
            "INSERT INTO attachments (id, node_id, parent_id, name, kind, mode, mtime, size, "
            "target, deleted_at, link_of) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                a.id,
                a.node_id,
                a.parent_id,
                a.name,
                a.kind,
                a.mode,
                a.mtime,
                size,
                a.target,
                a.deleted_at,
                a.link_of,
            ],
        )
        if size:
            assert data is not None  # size is 0 without data
            insert_chunks(self.con, a.id, data, range(-(-size // CHUNK_SIZE)), staged=staged)

    def update_attachment(self, a: Attachment) -> None:
        self.con.execute(
            "UPDATE attachments SET node_id=?, parent_id=?, name=?, mode=?, mtime=?, "
            "deleted_at=? WHERE id=?",
            [a.node_id, a.parent_id, a.name, a.mode, a.mtime, a.deleted_at, a.id],
        )

    def write_attachment_chunks(
        self,
        att_id: int,
        data: FileBytes,
        chunks: list[int],
        mtime: float,
        staged: dict[int, str] | None = None,
    ) -> int | None:
        """data is the whole new content of a file attachment; store chunks `chunks` of it
        (every chunk that differs from the stored one, or did not exist), drop the chunks
        past its new end, and set its size and mtime. Call inside a transaction. Returns
        the attachment's node (None: no such attachment). `staged`: the hashes of chunks
        whose blobs `stage_blobs` stored already.

        Delete-then-insert rather than UPDATE or INSERT OR REPLACE: measured here, a 64 KiB
        chunk replaced that way commits in ~3 ms, an UPDATE of the BLOB in ~9 ms."""
        size = len(data)
        count = -(-size // CHUNK_SIZE)
        chunks = sorted({i for i in chunks if 0 <= i < count})
        gone = self.con.execute(
            "DELETE FROM attachment_chunks WHERE att_id = ? "
            "AND (idx >= ? OR list_contains(?::INTEGER[], idx)) RETURNING hash",
            [att_id, count, chunks],
        ).fetchall()
        insert_chunks(self.con, att_id, data, chunks, staged=staged)
        self._let_go([h for (h,) in gone])
        row = self.con.execute(
            "UPDATE attachments SET size = ?, mtime = ? WHERE id = ? RETURNING node_id",
            [size, mtime, att_id],
        ).fetchone()
        return row[0] if row else None

    def purge_attachment(self, att_id: int) -> int | None:
        """Remove an attachment's row and chunks; returns its node (None: none was)."""
        gone = self.con.execute(
            "DELETE FROM attachment_chunks WHERE att_id = ? RETURNING hash", [att_id]
        ).fetchall()
        self._let_go([h for (h,) in gone])
        row = self.con.execute(
            "DELETE FROM attachments WHERE id = ? RETURNING node_id", [att_id]
        ).fetchone()
        return row[0] if row else None

    def add_pending_drop(
        self, drop_id: int, owner: tuple[str, str], type_name: str, filename: str, data: bytes
    ) -> None:
        self.con.execute("DELETE FROM pending_drops WHERE id = ?", [drop_id])
        self.con.execute(
            "INSERT INTO pending_drops VALUES (?, ?, ?, ?, ?, ?, ?)",
            [drop_id, owner[0], owner[1], type_name, filename, data, time.time()],
        )

    # ---- inbox and sessions (v2) -------------------------------------------------------

    def inbox_items(self) -> list[tuple]:
        """(id, owner_kind, owner_id, filename, created, state, report, size, progress),
        oldest first; progress '' when there is none."""
        return self.con.execute(
            "SELECT id, owner_kind, owner_id, filename, created, state, report, size, "
            "coalesce(progress, '') FROM inbox_items ORDER BY id"
        ).fetchall()

    def shared_vectors(self) -> SharedVectors | None:
        """The embedded store has one mount: no vectors to share (`SharedVectors`)."""
        return None

    def claim(self, what: str, key: int) -> bool:
        """Take work one mount of a store does at a time: an inbox item ("inbox", its
        id), the daily jobs ("lead", 0). True when this mount holds it until `release`
        or its exit. The embedded store has one mount (the file lock): always."""
        return True

    def release(self, what: str, key: int) -> None:
        """Give back what `claim` took."""

    def inbox_item(self, item_id: int) -> tuple | None:
        """An item's row as `inbox_items` gives it, read now (None: there is none)."""
        return self.con.execute(
            "SELECT id, owner_kind, owner_id, filename, created, state, report, size, "
            "coalesce(progress, '') FROM inbox_items WHERE id = ?",
            [item_id],
        ).fetchone()

    def add_inbox_item(
        self,
        item_id: int,
        owner: tuple[str, str],
        filename: str,
        data: bytes,
        created: float,
        state: str,
        report: str,
    ) -> None:
        """The item and its bytes (v6: chunks of blobs, shared with every other holder of
        the same bytes)."""
        self.con.execute(
            "INSERT INTO inbox_items (id, owner_kind, owner_id, filename, size, created, "
            "state, report) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [item_id, owner[0], owner[1], filename, len(data), created, state, report],
        )
        if data:
            insert_chunks(
                self.con, item_id, data, range(-(-len(data) // CHUNK_SIZE)), table="inbox_chunks"
            )

    def add_inbox_chunks(self, item_id: int, data: bytes | memoryview, indexes: range) -> None:
        """Chunks `indexes` of a big item's bytes (`data`: all of them), stored in steps
        (`Memory.receive_inbox_item`): one transaction for a 100 MB item outgrew DuckDB's
        buffers and held the event loop for seconds."""
        insert_chunks(self.con, item_id, data, indexes, table="inbox_chunks")

    def delete_inbox_item(self, item_id: int) -> None:
        """An item and its chunks (a receive that did not finish); its blobs are let go."""
        gone = self.con.execute(
            "DELETE FROM inbox_chunks WHERE item_id = ? RETURNING hash", [item_id]
        ).fetchall()
        self._let_go([h for (h,) in gone])
        self.con.execute("DELETE FROM inbox_steps WHERE item_id = ?", [item_id])
        self.con.execute("DELETE FROM inbox_items WHERE id = ?", [item_id])

    def inbox_data(self, item_id: int) -> bytes:
        """An item's bytes; from any thread (another thread reads what is committed,
        through its own connection). One pass over `blobs` for the item's hashes, streamed:
        a join a few chunks at a time scanned the table once per page (5.4 s for 100 MB
        where this takes 0.5 s). DuckDB handles 2,048 rows a vector, so a scan that
        returns blobs may need more than the buffers' 128 MiB: it grows them (`_Roomy`),
        expectedly here, so at info level."""
        con = self._meta_con()
        order = [
            h
            for (h,) in con.execute(
                "SELECT hash FROM inbox_chunks WHERE item_id = ? ORDER BY idx", [item_id]
            ).fetchall()
        ]
        if not order:
            return b""
        got: dict[str, bytes] = {}
        with self.big_reads():
            res = con.execute(
                "SELECT hash, data FROM blobs WHERE hash IN "
                "(SELECT hash FROM inbox_chunks WHERE item_id = ?)",
                [item_id],
            )
            while rows := res.fetchmany(64):
                for h, d in rows:
                    got[h] = bytes(d)
        # put together as the chunks are let go, so that a 100 MB item is held about
        # once, not twice (chunks and their join) while it is read back
        last = {h: i for i, h in enumerate(order)}
        out = bytearray()
        for i, h in enumerate(order):
            out += got[h]
            if last[h] == i:
                del got[h]
        return out  # type: ignore[return-value]  # bytes-like: decoded or sliced

    def inbox_chunks(self, item_id: int, batch: int = 64) -> Iterator[tuple[int, bytes]]:
        """An item's chunks as (index, bytes), in no set order, `batch` rows at a time,
        from any thread: a big item is never held whole in Python (`memory.spill`). One
        query, one pass (`attachment_chunks`): DuckDB reads a BLOB column a vector of
        2,048 rows at a time, so a query for part of an item reads the vectors before it
        too (a window at the end of a 64 MiB item took 0.5 s, a 64 MiB `cat` by windows
        27 s)."""
        con = self._meta_con()
        with self.big_reads():
            cur = con.execute(
                "SELECT c.idx, b.data FROM inbox_chunks c JOIN blobs b ON b.hash = c.hash "
                "WHERE c.item_id = ?",
                [item_id],
            )
            while rows := cur.fetchmany(batch):
                yield from rows

    @contextmanager
    def big_reads(self) -> Iterator[None]:
        """Statements in here scan blob bytes (an item read back, fsck's blob sizes): the
        buffers growing for them is expected, and logged at info level."""
        self._big_reads += 1
        try:
            yield
        finally:
            self._big_reads -= 1

    def stored_bytes(self) -> tuple[int, int]:
        """(bytes held by attachments and inbox items, bytes actually stored in blobs):
        what content addressing saved is the difference."""
        held = self.con.execute(
            "SELECT (SELECT coalesce(sum(size), 0) FROM attachments WHERE kind = 'file') "
            "+ (SELECT coalesce(sum(size), 0) FROM inbox_items)"
        ).fetchone()[0]
        stored = self.con.execute("SELECT coalesce(sum(size), 0) FROM blobs").fetchone()[0]
        return int(held), int(stored)

    def set_inbox_size(self, item_id: int, size: int) -> None:
        self.con.execute("UPDATE inbox_items SET size = ? WHERE id = ?", [size, item_id])

    def set_inbox_state(self, item_id: int, state: str, report: str, progress: str = "") -> None:
        self.con.execute(
            "UPDATE inbox_items SET state = ?, report = ?, progress = ? WHERE id = ?",
            [state, report, progress, item_id],
        )

    def add_inbox_step(self, item_id: int, conv: int, step: int, data: str) -> None:
        """What step `step` of the filing of conversation `conv` of an item did (v12)."""
        self.con.execute("INSERT INTO inbox_steps VALUES (?, ?, ?, ?)", [item_id, conv, step, data])

    def inbox_steps(self, item_id: int, conv: int) -> list[str]:
        """The data of the steps of conversation `conv` of an item stored so far, in order."""
        rows = self.con.execute(
            "SELECT data FROM inbox_steps WHERE item_id = ? AND conv = ? ORDER BY step",
            [item_id, conv],
        ).fetchall()
        return [r[0] for r in rows]

    def clear_inbox_steps(self, item_id: int) -> None:
        """An item's steps, once the conversation they filed is done."""
        self.con.execute("DELETE FROM inbox_steps WHERE item_id = ?", [item_id])

    def sessions(self) -> list[tuple]:
        """Each live session: owner kind, owner id, id, created, its transcript (the stored
        text and its appends after it), processed, summary, and how many appends follow
        the stored text (the next one's idx)."""
        return self.con.execute(
            "SELECT s.owner_kind, s.owner_id, s.id, s.created, s.transcript || coalesce(("
            "SELECT string_agg(a.text, '' ORDER BY a.idx) FROM session_appends a WHERE "
            "a.owner_kind = s.owner_kind AND a.owner_id = s.owner_id AND a.id = s.id), ''), "
            "s.processed, s.summary, (SELECT coalesce(max(a.idx) + 1, 0) FROM session_appends "
            "a WHERE a.owner_kind = s.owner_kind AND a.owner_id = s.owner_id AND a.id = s.id) "
            "FROM sessions s ORDER BY s.created"
        ).fetchall()

    def put_session(
        self,
        owner: tuple[str, str],
        sid: str,
        created: float,
        transcript: str,
        processed: int,
        summary: str,
    ) -> None:
        """The session with this whole transcript (its appends gone)."""
        self._drop_appends(owner, sid)
        self.con.execute(
            "INSERT INTO sessions VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (owner_kind, "
            "owner_id, id) DO UPDATE SET created = excluded.created, transcript = "
            "excluded.transcript, processed = excluded.processed, summary = excluded.summary",
            [owner[0], owner[1], sid, created, transcript, processed, summary],
        )

    def append_session(self, owner: tuple[str, str], sid: str, idx: int, text: str) -> None:
        """`text` appended to the session's transcript, as its append `idx`."""
        self.con.execute(
            "INSERT INTO session_appends VALUES (?, ?, ?, ?, ?)",
            [owner[0], owner[1], sid, idx, text],
        )

    def set_session_state(
        self, owner: tuple[str, str], sid: str, processed: int, summary: str
    ) -> None:
        """The session's extraction progress and summary; its transcript as it is."""
        self.con.execute(
            "UPDATE sessions SET processed = ?, summary = ? "
            "WHERE owner_kind = ? AND owner_id = ? AND id = ?",
            [processed, summary, owner[0], owner[1], sid],
        )

    def delete_session(self, owner: tuple[str, str], sid: str) -> None:
        self._drop_appends(owner, sid)
        self.con.execute(
            "DELETE FROM sessions WHERE owner_kind = ? AND owner_id = ? AND id = ?",
            [owner[0], owner[1], sid],
        )

    def _drop_appends(self, owner: tuple[str, str], sid: str) -> None:
        self.con.execute(
            "DELETE FROM session_appends WHERE owner_kind = ? AND owner_id = ? AND id = ?",
            [owner[0], owner[1], sid],
        )

    def add_redaction(self, ts: float, path: str, kind: str, count: int) -> None:
        self.con.execute("INSERT INTO redactions VALUES (?, ?, ?, ?)", [ts, path, kind, count])

    def redaction_total(self) -> int:
        return self.con.execute("SELECT coalesce(sum(count), 0) FROM redactions").fetchone()[0]

    def remove_pending_drop(self, drop_id: int) -> None:
        self.con.execute("DELETE FROM pending_drops WHERE id = ?", [drop_id])

    # ---- nodes without their tier texts (memory.texts reads those on demand) ------------

    _HEAD_BATCH = 20_000  # rows a fetch: the peak of the load, which RSS keeps after it

    def node_heads(self, make: Callable[..., Node] = Node) -> list[tuple[Node, int, int]]:
        """Every node as `nodes()` gives it (made by `make`, a Node class) but with l1 and
        l2 left empty, each with the UTF-8 sizes of its L1 and L2 (their columns). Read in
        batches: a million rows fetched at once would leave the process a gigabyte larger
        for good (freed memory stays with the allocator)."""
        cols = _NODE_COLS.replace("l1, l2,", "'', '',")
        intern, loads = sys.intern, json.loads
        out: list[tuple[Node, int, int]] = []
        by_id: dict[int, Node] = {}
        cur = self.con.execute(f"SELECT {cols}, l1_size, l2_size FROM nodes ORDER BY id")
        while rows := cur.fetchmany(self._HEAD_BATCH):
            for r in rows:
                n = make(*r[:12])
                # owners and types repeat on every row: one string each, not one per node
                n.owner_kind, n.owner_id, n.type = intern(r[1]), intern(r[2]), intern(r[3])
                n.sources = [] if r[12] == "[]" else loads(r[12])
                n.tags = [] if r[13] == "[]" else loads(r[13])
                n.importance, n.access_count, n.created, n.updated = r[14:18]
                n.deleted_at, n.archived_at = r[18:20]
                out.append((n, r[20], r[21]))
                by_id[n.id] = n
        cur = self.con.execute(
            "SELECT node_id, version, created, strlen(l2), reason FROM versions "
            "ORDER BY node_id, version"
        )
        while rows := cur.fetchmany(self._HEAD_BATCH):
            for node_id, version, created, size, reason in rows:
                node = by_id.get(node_id)
                if node is not None:
                    node.history.append((version, created, size))
                    if not reason.startswith(MACHINE_REASONS):
                        node.person_wrote = True
        return out

    def node_text(self, node_id: int) -> tuple[str, str] | None:
        """(l1, l2) of a node as committed; None if it has no row. Safe from any thread:
        a thread other than the store's reads through its own cursor (a DuckDB connection
        is not thread-safe), so it never sees a transaction still open on the main one."""
        con = self._text_con()
        row = con.execute("SELECT l1, l2 FROM nodes WHERE id = ?", [node_id]).fetchone()
        return (row[0], row[1]) if row is not None else None

    def node_texts(self, node_ids: list[int]) -> dict[int, tuple[str, str]]:
        """(l1, l2) of many nodes in one query, as `node_text` reads one (any thread)."""
        if not node_ids:
            return {}
        con = self._text_con()
        out: dict[int, tuple[str, str]] = {}
        # A list, as for heads (node_head_page): DuckDB scans with the list as a filter.
        # `IN (?, ...)` went row by row through the ART index, pinned a block of each text
        # segment it touched until the query ended, and 480 rows at once in four threads
        # ran past a 256 MiB buffer limit; this form read 1,000 rows at once in four
        # threads under 128 MiB, in 45 ms for 480 where 100 at a time took 56 ms
        # (docs/scaling.md). Batches only bound the list's size.
        for i in range(0, len(node_ids), self._TEXT_BATCH):
            part = list(node_ids[i : i + self._TEXT_BATCH])
            rows = con.execute("SELECT id, l1, l2 FROM nodes WHERE id = ANY(?::BIGINT[])", [part])
            out.update((r[0], (r[1], r[2])) for r in rows.fetchall())
        return out

    _TEXT_BATCH = 1000

    # ---- the memory's heads on demand (memory.heads): one node, a page, counts -----------

    _HEAD_COLS = _NODE_COLS.replace("l1, l2,", "'', '',") + ", l1_size, l2_size"

    def _head(self, r: tuple, make: Callable[..., Node]) -> tuple[Node, int, int]:
        n = make(*r[:12])
        # owners and types repeat on every row: one string each, not one per node
        n.owner_kind, n.owner_id, n.type = sys.intern(r[1]), sys.intern(r[2]), sys.intern(r[3])
        n.sources = [] if r[12] == "[]" else json.loads(r[12])
        n.tags = [] if r[13] == "[]" else json.loads(r[13])
        n.importance, n.access_count, n.created, n.updated = r[14:18]
        n.deleted_at, n.archived_at = r[18:20]
        return n, r[20], r[21]

    def node_head(self, node_id: int, make: Callable[..., Node] = Node) -> tuple | None:
        """(node without l1/l2 or version list, L1 size, L2 size) by primary key; None if
        it has no row. Any thread (see `_meta_con`)."""
        row = (
            self._meta_con()
            .execute(f"SELECT {self._HEAD_COLS} FROM nodes WHERE id = ?", [node_id])
            .fetchone()
        )
        return self._head(row, make) if row is not None else None

    def node_head_page(
        self,
        after: int,
        limit: int,
        make: Callable[..., Node] = Node,
        *,
        owner: tuple[str, str] | None = None,
        types: tuple[str, ...] | None = None,
        live: bool | None = None,
        ids: list[int] | None = None,
    ) -> list[tuple[Node, int, int]]:
        """Up to `limit` heads (as `node_head`) with id > after, in id order: a walk over
        every node reads page after page, never holding a cursor open across its caller's
        own queries. Filters: an owner, type names, live (True) or not (False), ids."""
        # a page of given ids: no range and no ORDER BY (sorted here), which let DuckDB scan
        # the ids for the IN list and took 2-3x as long at a million rows
        by_ids = ids is not None and after <= 0 and limit >= len(ids)
        where: list[str] = [] if by_ids else ["id > ?"]
        params: list[object] = [] if by_ids else [after]
        if owner is not None:
            where.append("owner_kind = ? AND owner_id = ?")
            params += list(owner)
        if types is not None:
            where.append(f"type IN ({', '.join('?' * len(types))})" if types else "FALSE")
            params += list(types)
        if live is not None:
            alive = "deleted_at IS NULL AND archived_at IS NULL"
            where.append(alive if live else f"NOT ({alive})")
        if ids is not None:
            # a list, not an IN of placeholders: DuckDB answers `IN (?, ...)` with its ART
            # index, fetching row by row (30 ms for 480 random heads at a million rows), and
            # `= ANY(list)` with one scan filtered by the list (7 ms); PostgreSQL's own form
            where.append("id = ANY(?::BIGINT[])" if ids else "FALSE")
            params.append(list(ids))
        if by_ids:
            sql, params = f"SELECT {self._HEAD_COLS} FROM nodes WHERE {' AND '.join(where)}", params
        else:
            sql = f"SELECT {self._HEAD_COLS} FROM nodes WHERE {' AND '.join(where)} "
            sql, params = sql + "ORDER BY id LIMIT ?", [*params, limit]
        rows = self._meta_con().execute(sql, params).fetchall()
        if by_ids:
            rows.sort(key=lambda r: r[0])
        return [self._head(r, make) for r in rows]

    def live_node_id(self, kind: str, owner_id: str, type_name: str, name: str) -> int | None:
        """The id of the live node at (owner, type, name) (index nodes_owner_type_name)."""
        row = (
            self._meta_con()
            .execute(
                "SELECT id FROM nodes WHERE owner_kind = ? AND owner_id = ? AND type = ? "
                "AND name = ? AND deleted_at IS NULL AND archived_at IS NULL",
                [kind, owner_id, type_name, name],
            )
            .fetchone()
        )
        return row[0] if row is not None else None

    def live_node_head(
        self, kind: str, owner_id: str, type_name: str, name: str, make: Callable[..., Node] = Node
    ) -> tuple | None:
        """The live node at (owner, type, name) as `node_head` gives it, in one query (a
        lookup by path: one round trip, not an id then a row)."""
        row = (
            self._meta_con()
            .execute(
                f"SELECT {self._HEAD_COLS} FROM nodes WHERE owner_kind = ? AND owner_id = ? "
                "AND type = ? AND name = ? AND deleted_at IS NULL AND archived_at IS NULL",
                [kind, owner_id, type_name, name],
            )
            .fetchone()
        )
        return self._head(row, make) if row is not None else None

    def live_ids(
        self, owner: tuple[str, str] | None = None, type_name: str | None = None
    ) -> list[int]:
        """Ids of the live nodes (of an owner, of a type), in id order."""
        where, params = _owner_type(
            ["deleted_at IS NULL AND archived_at IS NULL"], owner, type_name
        )
        rows = (
            self._meta_con()
            .execute(f"SELECT id FROM nodes WHERE {' AND '.join(where)} ORDER BY id", params)
            .fetchall()
        )
        return [r[0] for r in rows]

    def node_counts(
        self, owner: tuple[str, str] | None = None, type_name: str | None = None
    ) -> tuple[int, int]:
        """(every node, live nodes), of an owner and type when given."""
        where, params = _owner_type(["TRUE"], owner, type_name)
        row = (
            self._meta_con()
            .execute(
                "SELECT count(*), count(*) FILTER (WHERE deleted_at IS NULL AND archived_at "
                f"IS NULL) FROM nodes WHERE {' AND '.join(where)}",
                params,
            )
            .fetchone()
        )
        return int(row[0]), int(row[1] or 0)

    def node_counts_by_dir(self) -> dict[tuple[tuple[str, str], str], tuple[int, int]]:
        """(every node, live nodes) of each (owner, type), in one aggregate."""
        rows = (
            self._meta_con()
            .execute(
                "SELECT owner_kind, owner_id, type, count(*), count(*) FILTER (WHERE "
                "deleted_at IS NULL AND archived_at IS NULL) FROM nodes "
                "GROUP BY owner_kind, owner_id, type"
            )
            .fetchall()
        )
        return {((k, o), t): (int(a), int(b or 0)) for k, o, t, a, b in rows}

    def version_count(self) -> int:
        return int(self._meta_con().execute("SELECT count(*) FROM versions").fetchone()[0])

    def node_history(self, node_id: int) -> tuple[list[tuple[int, float, int]], bool]:
        """A node's version list ((version, created, L2 size), oldest first) and whether a
        person wrote any of them (see MACHINE_REASONS)."""
        rows = (
            self._meta_con()
            .execute(
                "SELECT version, created, strlen(l2), reason FROM versions WHERE node_id = ? "
                "ORDER BY version",
                [node_id],
            )
            .fetchall()
        )
        return _history_of(rows)

    def node_histories(
        self, node_ids: list[int]
    ) -> dict[int, tuple[list[tuple[int, float, int]], bool]]:
        """`node_history` of many nodes, 1,000 a query (the first `find` after a mount lists
        the `.history` of every node; one query each was most of its time)."""
        rows_of: dict[int, list[tuple]] = {nid: [] for nid in node_ids}
        con = self._meta_con()
        for i in range(0, len(node_ids), self._TEXT_BATCH):
            part = list(node_ids[i : i + self._TEXT_BATCH])
            rows = con.execute(
                "SELECT node_id, version, created, strlen(l2), reason FROM versions "
                "WHERE node_id = ANY(?::BIGINT[]) ORDER BY node_id, version",
                [part],
            ).fetchall()
            for nid, *row in rows:
                rows_of[nid].append(row)
        return {nid: _history_of(rows) for nid, rows in rows_of.items()}

    def live_names(self, type_name: str, ids: list[int]) -> list[tuple[int, str]]:
        """(id, name) of the live nodes of a type among `ids`, in id order: the changes to
        the table of entity names a search keeps (`search.names`), without reading a node."""
        out: list[tuple[int, str]] = []
        for i in range(0, len(ids), 1000):
            chunk = ids[i : i + 1000]
            rows = (
                self._meta_con()
                .execute(
                    f"SELECT id, name FROM nodes WHERE {_LIVE_OF_TYPE} "
                    f"AND id IN ({', '.join('?' * len(chunk))})",
                    [type_name, *chunk],
                )
                .fetchall()
            )
            out += [(r[0], r[1]) for r in rows]
        return sorted(out)

    def live_named(self, type_name: str, names: list[str]) -> list[tuple[int, str]]:
        """(id, name) of the live nodes of a type with one of these names, in id order."""
        if not names:
            return []
        rows = self._meta_con().execute(
            f"SELECT id, name FROM nodes WHERE {_LIVE_OF_TYPE} "
            f"AND name IN ({', '.join('?' * len(names))}) ORDER BY id",
            [type_name, *names],
        )
        return [(r[0], r[1]) for r in rows.fetchall()]

    def all_live_names(self, type_name: str, batch: int = 20_000) -> Iterator[list[tuple]]:
        """(id, name) of every live node of a type, `batch` rows at a time: the whole table
        of entity names, read without holding every row at once (500,000 rows as Python
        tuples were 75 MiB, and freed memory stays with the process)."""
        cur = self._meta_con().execute(
            f"SELECT id, name FROM nodes WHERE {_LIVE_OF_TYPE}", [type_name]
        )
        while rows := cur.fetchmany(batch):
            yield rows

    def outbox_upto(self) -> int:
        """The newest outbox seq this thread's connection sees (committed, from a worker)."""
        row = self._meta_con().execute("SELECT max(seq) FROM outbox").fetchone()
        return row[0] or 0

    def nodes_changed_since(self, seq: int, limit: int) -> list[int] | None:
        """The nodes with an outbox row after `seq`; None when more than `limit` changed."""
        rows = (
            self._meta_con()
            .execute("SELECT DISTINCT node_id FROM outbox WHERE seq > ? LIMIT ?", [seq, limit + 1])
            .fetchall()
        )
        return None if len(rows) > limit else [r[0] for r in rows]

    def recent_live_ids(self, limit: int) -> list[int]:
        """The most recently changed live nodes, newest first (the text warm-up)."""
        rows = (
            self._meta_con()
            .execute(
                "SELECT id FROM nodes WHERE deleted_at IS NULL AND archived_at IS NULL "
                "ORDER BY updated DESC LIMIT ?",
                [limit],
            )
            .fetchall()
        )
        return [r[0] for r in rows]

    # The thread that owns the Memory over this store (`set_home`): it reads through the
    # store's own connection, so it sees its open transaction's rows; other threads read
    # committed rows through their own (`_text_con`).
    _home: int | None = None

    def set_home(self) -> None:
        self._home = threading.get_ident()

    def _meta_con(self) -> Any:
        if threading.get_ident() == self._home:
            return self.con
        return self._text_con()

    # The connections of threads other than the store's own, by thread id (few: trio's
    # worker threads); made on first use, closed with the store.
    _opened_by: int | None = None

    def _text_con(self) -> Any:
        if threading.get_ident() == self._opened_by:
            return self.con
        readers = self.__dict__.setdefault("_readers", {})
        tid = threading.get_ident()
        con = readers.get(tid)
        if con is None:
            con = readers[tid] = self._reader()
        return con

    def _reader(self) -> Any:
        """A connection for another thread (DuckDB: a cursor, a connection of its own)."""
        return self.con.cursor()

    def _close_readers(self) -> None:
        for con in self.__dict__.pop("_readers", {}).values():
            _close_when_idle(con)


_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def _bytes(setting: str) -> int:
    """DuckDB's spelling of a memory size ('244.1 MiB') in bytes."""
    number, _, unit = setting.strip().partition(" ")
    return int(float(number) * _UNITS.get(unit, 1))


def _owner_type(
    where: list[str], owner: tuple[str, str] | None, type_name: str | None
) -> tuple[list[str], list[str]]:
    """`where` with the conditions for an owner and a type when given, and their values."""
    params: list[str] = []
    if owner is not None:
        where = [*where, "owner_kind = ? AND owner_id = ?"]
        params += list(owner)
    if type_name is not None:
        where = [*where, "type = ?"]
        params.append(type_name)
    return where, params


def _size(path: Path) -> int | None:
    try:
        return os.stat(path).st_size
    except OSError:
        return None


def _mtime(path: Path) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


class CommitMark:
    """`<store>.last-commit`, beside the DuckDB file: the outbox seq of the last commit,
    the size its write-ahead log had then and the store file's mtime, rewritten in place
    after every commit.

    DuckDB flushes a commit to its log before the commit returns; a log deleted after a
    crash (by hand, by a cleaner, by a copy of the data dir that left it out) takes every
    change since the last checkpoint with it, and DuckDB opens the file without it as if
    nothing were missing. The mark is written after the commit, with no flush of its own
    (a `stat` and a `pwrite` of 64 bytes: ~14 µs here; a commit takes milliseconds):
    a crash or a power cut can leave it behind the store, which
    says nothing, never ahead of it. So a mark ahead of what the store holds, or a log
    shorter than the mark says beside a file no checkpoint wrote since, is a loss of
    acknowledged writes, said by
    `fsck`'s `acknowledged_commits` (docs/fsck.md). Before a checkpoint cuts the log its
    size is written as 0. A mark that cannot be read (cut by a crash) says nothing."""

    SIZE = 64

    def __init__(self, db: Path) -> None:
        self.db = db
        self.path = db.with_name(db.name + ".last-commit")
        self._fd: int | None = None

    def read(self) -> tuple[int, int, int] | None:
        try:
            text = self.path.read_text(encoding="ascii")
        except (OSError, UnicodeDecodeError):
            return None
        m = re.fullmatch(r"seq (\d+) wal (\d+) file (\d+)\s*", text)
        return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None

    def open(self) -> None:
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600)
            except OSError:
                self._fd = None  # a read-only data dir: no mark, nothing said

    def write(self, seq: int, wal: int) -> None:
        if self._fd is None:
            return
        with suppress(OSError):  # a full disk: its block is there already (it never grows)
            # the file's mtime: a checkpoint the mark did not see (DuckDB's own, when a
            # process drops its connection at exit) rewrites the file, and cuts the log
            file = os.stat(self.db).st_mtime_ns
            line = f"seq {seq} wal {wal} file {file}\n"
            os.pwrite(self._fd, line.ljust(self.SIZE).encode(), 0)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _lost_commits(
    marked: tuple[int, int, int] | None, log_size: int | None, file: int | None, seq: int, wal: Path
) -> str | None:
    """What the mark says is missing from the store as DuckDB opened it, or None. `file`:
    the store file's mtime before DuckDB opened it (a file written since the mark was
    checkpointed: its log was moved into it, not lost)."""
    if marked is None:
        return None
    marked_seq, marked_log, marked_file = marked
    said = []
    if marked_log and (log_size or 0) < marked_log and file == marked_file:
        had = "is gone" if log_size is None else f"has {log_size} bytes"
        said.append(
            f"its write-ahead log {wal.name} {had}, and held {marked_log} bytes of "
            "committed changes at the last commit"
        )
    if marked_seq > seq:
        said.append(
            f"the store holds changes up to seq {seq}, the last commit was seq {marked_seq}"
        )
    if not said:
        return None
    return (
        "acknowledged changes are missing: " + "; ".join(said) + ". Put the log back and "
        "mount again, `contextfs restore` a backup, or take the store as it is with "
        "`contextfs fsck --repair`"
    )
