"""PgStore: the Store on a PostgreSQL database, shared by many mounts (docs/scaling.md).

Role: the same rows as the DuckDB Store (contextfs.store.db), in a PostgreSQL database
reached with psycopg 3, so that mounts on several hosts share one memory. Every statement
is the Store's own shared SQL text, rendered for PostgreSQL by `contextfs.store.dialect`;
only what PostgreSQL does differently is overridden here: the connection (and reconnecting
to it), transactions, ids, the outbox order across writers, and the commit notice.

Boundary: rows in, rows out, like the Store; it knows nothing of FUSE or of Memory. The
DSN's password is never logged, shown or put in an exception (`redact_dsn`).

Across writers: a transaction's outbox rows are kept here until it commits, then sent
with the COMMIT in one message (`_COMMIT_WITH_OUTBOX`): take one transaction advisory lock
(`OUTBOX_LOCK`), insert the rows with seqs from a sequence, `NOTIFY contextfs_outbox`
(delivered only if it commits), COMMIT. So outbox seqs are given out in commit order and a
reader that has seen seq N has seen every commit before it, while the lock is held only
as long as the server takes to run that one message: never across a round trip to a
mount, so a mount that stops (SIGSTOP, a paused VM, a slow link) cannot hold the others'
commits up.
"""

from __future__ import annotations

import logging
import os
import re
import select
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import psycopg.conninfo
import psycopg.errors
from psycopg.abc import PQGen
from psycopg.waiting import Ready

from contextfs import greenwait
from contextfs.errors import StoreDamaged, StoreUnavailable, VersionConflict
from contextfs.model import MACHINE_REASONS, Access, Attachment, Node
from contextfs.store.db import _NODE_COLS, Store, _node_from_row
from contextfs.store.dialect import POSTGRES, render
from contextfs.store.schema import ATTACH_OP, FileBytes, create_tables, migrate

log = logging.getLogger(__name__)

CHANNEL = "contextfs_outbox"
OUTBOX_LOCK = 0x636F6E74  # 'cont': the one advisory lock that orders outbox seqs
# Work one mount does at a time (`PgStore.claim`): a session-level advisory lock of two
# keys, this class and the key. The server lets go of it when the holder's connection
# ends, so a mount that dies (kill -9, a lost host) leaves its work to the others at once.
CLAIMS = {"inbox": 0x696E6278, "lead": 0x6C656164}  # 'inbx', 'lead'
ACCESS_OP = "access"  # an outbox row of node 0: the access rows changed (`set_access`)
_CONNECT_TIMEOUT = 2  # seconds; a server that does not answer by then is down
# How a transaction with outbox rows ends (`PgStore._commit`): one message, so the outbox
# lock is taken and let go of within the server's run of it, never held across a round
# trip to the mount. The seqs come from a sequence under the lock, so they are given out
# in commit order and a transaction's are consecutive: currval is its newest.
_COMMIT_WITH_OUTBOX = (
    "SELECT pg_advisory_xact_lock(?); "
    "INSERT INTO outbox SELECT nextval('outbox_seq'), u.node_id, u.version, u.op, u.created "
    "FROM unnest(?::BIGINT[], ?::INTEGER[], ?::TEXT[], ?::DOUBLE[]) WITH ORDINALITY "
    "AS u(node_id, version, op, created, i) ORDER BY u.i RETURNING seq; "
    "SELECT pg_notify(?, currval('outbox_seq')::TEXT); "
    "COMMIT"
)


# TCP keepalives on every connection a mount opens (its store, its LISTEN, its vector
# share): a server host gone silent (powered off, a cut link) is found in about 25 s
# (10 s idle, then 3 probes 5 s apart) even on a connection that only waits
def with_keepalives(dsn: str) -> str:
    return psycopg.conninfo.make_conninfo(
        dsn, keepalives=1, keepalives_idle=10, keepalives_interval=5, keepalives_count=3
    )


# Deadlines the server keeps for each mount's session (docs/scaling.md, "Faults"). A
# mount's transactions are milliseconds of statements with Python between them; one
# idle longer than this is a mount that stopped (SIGSTOP, a frozen VM, a cut link)
# while holding locks every other mount's commit needs: the server ends its session,
# its transaction rolls back (it was never acknowledged) and the others go on.
IDLE_IN_TRANSACTION_MS = 5_000
# A lock another mount holds longer than this (a row, the outbox lock) refuses the
# write waiting for it (EIO, the reason in .status) instead of hanging the caller; above
# the idle deadline, so a stopped holder is ended before its waiters give up.
LOCK_TIMEOUT_MS = 10_000
# How long a statement may take (config `store_deadline_s`): the server cancels one that
# runs longer (statement_timeout), and a server that does not answer at all (its
# processes stopped, a host frozen: the kernel still acknowledges every byte, so neither
# TCP keepalives nor a server-side timeout fire) is given up on by the mount a second
# later (`Deadlines`): the call fails like a lost connection instead of waiting for ever.
STATEMENT_DEADLINE_S = 30.0
_GIVE_UP_AFTER_S = 1.0  # past the server's own deadline: its cancel answers first


def _session_options(deadline_s: float) -> str:
    return (
        f"-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_MS} "
        f"-c lock_timeout={LOCK_TIMEOUT_MS} "
        f"-c statement_timeout={int(deadline_s * 1000)}"
    )


class Deadlines:
    """Statements in flight and the time by which each must have been answered. One
    thread of its own waits for the earliest; when it passes, the statement's socket is
    shut down (`shutdown(2)` on a duplicate of its descriptor), so the psycopg call
    blocked on it returns with a broken connection, which the caller handles as a lost
    one. `watch` / `done` bracket each statement."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._due: dict[int, tuple[float, int]] = {}  # token -> (monotonic due, fd)
        self._fired: set[int] = set()
        self._next = 0
        self._thread: threading.Thread | None = None

    def watch(self, fd: int, seconds: float) -> int:
        with self._cond:
            self._next += 1
            self._due[self._next] = (time.monotonic() + seconds, fd)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="pg-deadlines", daemon=True)
                self._thread.start()
            self._cond.notify()
            return self._next

    def done(self, token: int) -> bool:
        """The statement returned (or failed); whether its deadline had passed first."""
        with self._cond:
            self._due.pop(token, None)
            if token in self._fired:
                self._fired.discard(token)
                return True
            return False

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                late = [t for t, (due, _fd) in self._due.items() if due <= now]
                for token in late:
                    _due, fd = self._due.pop(token)
                    self._fired.add(token)
                    _cut(fd)
                nearest = min((due for due, _fd in self._due.values()), default=None)
                self._cond.wait(None if nearest is None else max(0.0, nearest - now))


def _cut(fd: int) -> None:
    """Shut the connection on `fd` down in both directions (its descriptor stays open:
    psycopg closes it, as after any lost connection)."""
    try:
        dup = socket.socket(fileno=os.dup(fd))
    except OSError:
        return
    with suppress(OSError):
        dup.shutdown(socket.SHUT_RDWR)
    dup.close()


DEADLINES = Deadlines()
_BACKOFF_MAX = 2.0  # seconds between reconnection attempts at most
# Unit vectors every mount of the database reuses (`PgVectorShare`, docs/scaling.md,
# "Vectors embedded once"): derived data, like the local indexes, but shared, so a text is
# embedded by one mount and a new mount builds its index without the model. model: the
# embedding model's name and dimension ("all-MiniLM-L6-v2/384"); digest: the xxh64 of the
# unit's text as a signed BIGINT; vector: the float32 row's bytes. Rows are only added
# (a text's vector never changes); rows no unit uses any more stay (docs/scaling.md says
# what they cost and how to empty the table).
UNIT_VECTORS = """
CREATE TABLE IF NOT EXISTS unit_vectors (
    model  TEXT   NOT NULL,
    digest BIGINT NOT NULL,
    vector BYTEA  NOT NULL,
    PRIMARY KEY (model, digest)
)
"""
_SHARE_TIMEOUT_MS = 5_000  # a share that does not answer by then is a miss
_SHARE_RETRY_S = 10.0  # after a fault the share is left alone this long (no connect per slice)

# Statements sent again, once, when the connection broke under them outside a
# transaction: reads and the BEGIN of a transaction (`PgConnection.execute`).
_REPEATABLE = re.compile(r"\s*(SELECT|WITH|BEGIN)\b", re.I)

_PW_IN_KV = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.I)


def is_dsn(location: str) -> bool:
    return location.startswith(("postgresql://", "postgres://"))


def redact_dsn(dsn: str) -> str:
    """The DSN as it may be shown: without its password (URL or key=value form)."""
    if is_dsn(dsn):
        parts = urlsplit(dsn)
        netloc = parts.netloc
        if "@" in netloc:
            cred, host = netloc.rsplit("@", 1)
            user = cred.split(":", 1)[0]
            netloc = f"{user}@{host}"
        query = _PW_IN_KV.sub(r"\1***", parts.query.replace("&", " ")).replace(" ", "&")
        return urlunsplit((parts.scheme, netloc, parts.path, query, ""))
    return _PW_IN_KV.sub(r"\1***", dsn)


@dataclass(frozen=True, slots=True)
class Changes:
    """What other mounts committed after a seq, by the outbox's ops (`changes_after`)."""

    upto: int  # the newest seq read
    nodes: list[int] = field(default_factory=list)  # nodes changed (upsert, delete)
    access: bool = False  # access rows changed (op access): read them all again
    attachments: set[int] = field(default_factory=set)  # nodes whose attachments changed


class _LoopConnection(psycopg.Connection):
    """A psycopg connection whose waits for the server, inside a request or service that
    `greenwait.run` drives, are trio's: the event loop serves the mount's other requests
    while a statement is in flight (a read of a cached file no longer waits behind a write
    to a slow or frozen server). Elsewhere (a worker thread, before the mount serves) it
    waits as psycopg does."""

    def wait(self, gen: PQGen[Any], interval: float = 0.1, timeout: float | None = None) -> Any:
        if timeout is not None or not greenwait.inside():
            return super().wait(gen, interval, timeout)
        fd = self.pgconn.socket
        try:
            want = next(gen)
            while True:
                want = gen.send(Ready(greenwait.suspend(greenwait.fd_ready, fd, int(want))))
        except StopIteration as done:
            return done.value


class PgConnection:
    """A psycopg connection with DuckDB's call shape (`execute(sql, params)` returning
    something with fetchone/fetchall/fetchmany; begin/commit/rollback), which renders the
    shared SQL for PostgreSQL and reconnects, with backoff, after the server went away.

    Autocommit, with explicit BEGIN/COMMIT: outside `atomic()` every read is its own
    transaction, as with DuckDB. A lost connection is never re-opened inside a
    transaction: the transaction fails (its rollback is the server's), the next one
    reconnects."""

    def __init__(
        self,
        dsn: str,
        *,
        read_only: bool = False,
        deadline_s: float = STATEMENT_DEADLINE_S,
        connect: bool = True,
    ) -> None:
        """connect=False: connected at its first statement (`_ready`)."""
        self._dsn = dsn
        self.shown = redact_dsn(dsn)
        self.read_only = read_only
        self.deadline_s = deadline_s
        self.raw: psycopg.Connection | None = None
        self.down_reason = ""
        self.down_since: float | None = None
        self._next_try = 0.0
        self._backoff = 0.1
        self.in_tx = False
        # The one thread that may use it, once set (`PgStore.set_home`). Its transaction
        # state is this object's: a statement of another thread would run inside that
        # transaction, or reconnect under it, and a commit then sent down the new
        # connection would acknowledge what the old one rolled back.
        self.owner: int | None = None
        if connect:
            self._connect()

    def _connect(self) -> None:
        try:
            # in a worker thread inside a request (greenwait): a server that does not
            # answer holds the connection attempt, not the mount, until connect_timeout
            self.raw = greenwait.off_loop(
                lambda: _LoopConnection.connect(
                    with_keepalives(self._dsn),
                    autocommit=True,
                    connect_timeout=_CONNECT_TIMEOUT,
                    options=_session_options(self.deadline_s),
                )
            )
        except psycopg.Error as exc:
            self._down(exc)
            raise StoreUnavailable(self.down_reason) from None
        if self.read_only:
            self.raw.execute("SET default_transaction_read_only = on")
        if self.down_since is not None:
            log.info(
                "reconnected to %s after %.1f s", self.shown, time.monotonic() - self.down_since
            )
        self.down_since = None
        self.down_reason = ""
        self._backoff = 0.1

    def _down(self, exc: BaseException) -> None:
        """The server is unreachable: say why (never with the password), retry later."""
        first = self.down_since is None
        if first:
            self.down_since = time.monotonic()
        # psycopg's messages name host and port, never the password; redact anyway
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        self.down_reason = f"PostgreSQL at {self.shown} unreachable: {redact_dsn(msg)}"
        self._next_try = time.monotonic() + self._backoff
        self._backoff = min(_BACKOFF_MAX, self._backoff * 2)
        if first:
            log.warning("%s; writes are refused until it returns", self.down_reason)
        if self.raw is not None:
            with suppress(psycopg.Error):
                self.raw.close()
            self.raw = None

    @property
    def up(self) -> bool:
        return self.raw is not None and not self.raw.closed and not self.raw.broken

    def _ready(self) -> psycopg.Connection:
        if self.up and (self.in_tx or self._still_open()):
            assert self.raw is not None
            return self.raw
        if self.in_tx:
            raise StoreUnavailable(self.down_reason or f"lost the connection to {self.shown}")
        if self.raw is not None:  # broken since the last statement
            self._down(psycopg.OperationalError("the connection was lost"))
        if time.monotonic() < self._next_try:
            raise StoreUnavailable(self.down_reason)
        self._connect()
        assert self.raw is not None
        return self.raw

    def _still_open(self) -> bool:
        """Whether the idle connection is still the server's. With no statement in flight
        the server writes to it only to end it (a restart, an administrator, a deadline):
        a socket with something to read is taken in, and a connection that ended is
        closed here, before a statement is sent down it and fails (EIO for nothing)."""
        assert self.raw is not None
        pg = self.raw.pgconn
        try:
            if not select.select([pg.socket], [], [], 0)[0]:
                return True
            pg.consume_input()
        except (OSError, ValueError, psycopg.Error):
            pass
        if pg.status == psycopg.pq.ConnStatus.OK and not self.raw.broken:
            return True
        log.info("the connection to %s was ended by the server; connecting again", self.shown)
        with suppress(psycopg.Error):
            self.raw.close()
        self.raw = None
        self._next_try = 0.0  # not a fault of the server's now: connect at once
        return False

    def execute(self, sql: str, params: Any = None) -> psycopg.Cursor:
        return self._execute(sql, params, again=not self.in_tx and bool(_REPEATABLE.match(sql)))

    def _execute(
        self, sql: str, params: Any, *, again: bool, one_message: bool = False
    ) -> psycopg.Cursor:
        if self.owner is not None and threading.get_ident() != self.owner:
            raise RuntimeError(f"{self.shown}: a connection used outside its own thread")
        greenwait.enter_store()  # one coroutine at a time in the store (greenwait)
        con = self._ready()
        token = DEADLINES.watch(con.pgconn.socket, self.deadline_s + _GIVE_UP_AFTER_S)
        try:
            if one_message:
                # parameters bound here, so several statements go as one simple query
                cur = psycopg.ClientCursor(con)
                return cur.execute(render(sql, POSTGRES), params)
            return con.execute(render(sql, POSTGRES), params)
        except psycopg.errors.TransactionRollback as exc:
            # a deadlock between two mounts' transactions (PostgreSQL aborts one): as
            # a lost race, the caller re-applies or the user sees EAGAIN
            raise VersionConflict(
                f"another mount's transaction collided with this one: {exc}"
            ) from None
        except psycopg.errors.LockNotAvailable:
            raise StoreUnavailable(
                f"another mount held a lock this write needs for over {LOCK_TIMEOUT_MS // 1000}"
                " s (a mount stopped in a transaction is ended by the server): try again"
            ) from None
        except psycopg.Error as exc:
            late = DEADLINES.done(token)
            if not (con.broken or con.closed):
                raise
            cause: BaseException = exc
            if late:
                # the server did not answer in time (stopped, frozen): given up on, not
                # sent again, which would only wait as long once more
                cause = psycopg.OperationalError(
                    f"no answer within {self.deadline_s + _GIVE_UP_AFTER_S:g} s (store_deadline_s)"
                )
                again = False
            if again:
                # a read outside a transaction, or the BEGIN of one, whose connection
                # broke under it: sent once more on a fresh connection (nothing of it
                # took effect that a second run could repeat wrongly)
                with suppress(psycopg.Error):
                    con.close()
                self.raw = None
                return self._execute(sql, params, again=False)
            # a lost connection, or one the server ended (its idle-in-transaction
            # deadline, an administrator): reconnected for the next transaction
            self._down(cause)
            raise StoreUnavailable(self.down_reason) from None
        finally:
            DEADLINES.done(token)

    def begin(self) -> None:
        self.execute("BEGIN")
        self.in_tx = True

    def commit(self) -> None:
        try:
            self.execute("COMMIT")
        finally:
            self.in_tx = False

    def commit_with(self, sql: str, params: Sequence[Any]) -> psycopg.Cursor:
        """End the open transaction with `sql`, several statements ending in COMMIT, sent
        as one message: the server runs them one after the other without waiting for this
        mount. The cursor is at the first statement's result (`nextset` for the others).
        On an error the transaction is rolled back (a statement that failed skips the
        rest, COMMIT included)."""
        try:
            return self._execute(sql, params, again=False, one_message=True)
        except BaseException:
            raw = self.raw
            if (
                raw is not None
                and not (raw.broken or raw.closed)
                and raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE
            ):
                with suppress(psycopg.Error):
                    raw.execute("ROLLBACK")
            raise
        finally:
            self.in_tx = False

    def rollback(self) -> None:
        self.in_tx = False
        if self.up:
            self.execute("ROLLBACK")

    def close(self) -> None:
        if self.raw is not None:
            self.raw.close()
            self.raw = None


# The connections a mount's other threads read committed rows through (`PgReaders`): the
# indexer's, the catch-up's, text loads. Trio makes and retires worker threads as it
# likes; a connection each, kept for the thread's id, grew with them (six a mount where
# two were in use). At most this many, lent for one statement at a time; one idle longer
# than READER_IDLE_S is closed, so an idle mount holds its own connection and its
# listener's, and the server's connections go further across hosts (docs/scaling.md).
READERS = 2
READER_IDLE_S = 60.0


class PgReaders:
    """At most `size` read-only PgConnections, shared by every thread but the memory's:
    `execute` borrows one for a single statement and gives it back before returning the
    cursor (psycopg has the whole result client-side by then, so it is read after the
    connection has gone on to another thread's statement). Each connection keeps its own
    deadlines, reconnection and backoff (PgConnection); a thread that finds every one
    lent waits for one, as long as a statement may take."""

    def __init__(self, dsn: str, *, size: int = READERS, deadline_s: float) -> None:
        self._dsn = dsn
        self.size = size
        self.deadline_s = deadline_s
        self._lock = threading.Lock()
        self._free: list[tuple[float, PgConnection]] = []  # (idle since, connection)
        self._lent = threading.BoundedSemaphore(size)
        self._closed = False

    def execute(self, sql: str, params: Any = None) -> psycopg.Cursor:
        if not self._lent.acquire(timeout=self.deadline_s + _GIVE_UP_AFTER_S):
            raise StoreUnavailable(
                f"every one of this mount's {self.size} reading connections was busy for "
                f"{self.deadline_s + _GIVE_UP_AFTER_S:g} s (store_deadline_s)"
            )
        try:
            con = self._borrow()
            try:
                return con.execute(sql, params)
            finally:
                self._give_back(con)
        finally:
            self._lent.release()

    def _borrow(self) -> PgConnection:
        with self._lock:
            if self._free:
                return self._free.pop()[1]  # the newest: the oldest are left to idle out
        # connected by its first statement: a server that is away refuses that statement,
        # and the connection, given back, keeps its backoff for the next one
        return PgConnection(self._dsn, read_only=True, deadline_s=self.deadline_s, connect=False)

    def _give_back(self, con: PgConnection) -> None:
        now = time.monotonic()
        with self._lock:
            if self._closed:
                idle = [con]
            else:
                self._free.append((now, con))
                idle = [c for since, c in self._free if now - since > READER_IDLE_S]
                self._free = [(since, c) for since, c in self._free if c not in idle]
        for c in idle:
            with suppress(psycopg.Error):
                c.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            free, self._free = self._free, []
        for _since, c in free:
            with suppress(psycopg.Error):
                c.close()


class PgStore(Store):
    """The Store on PostgreSQL; `dsn` a libpq connection string or postgresql:// URL."""

    dialect = POSTGRES
    errors: tuple[type[BaseException], ...] = (psycopg.Error,)
    invalid: tuple[type[BaseException], ...] = (psycopg.errors.DataError,)
    conflict: tuple[type[BaseException], ...] = (psycopg.errors.UniqueViolation,)
    unavailable: tuple[type[BaseException], ...] = (StoreUnavailable, psycopg.OperationalError)
    busy: tuple[type[BaseException], ...] = (psycopg.errors.OutOfMemory,)

    def __init__(
        self, dsn: str, *, read_only: bool = False, deadline_s: float = STATEMENT_DEADLINE_S
    ) -> None:
        # Store.__init__ opens DuckDB: this sets the same state up over PostgreSQL
        self.path = None
        self.location = redact_dsn(dsn)
        self.deadline_s = deadline_s
        self.con = PgConnection(  # type: ignore[assignment]
            dsn, read_only=read_only, deadline_s=deadline_s
        )
        self._depth = 0
        self.garbage: set[str] = set()
        self._swept_all = False
        self._staged: set[str] = set()  # blobs stored ahead of their chunks (stage_blobs)
        self._ids: list[int] = []
        self._seq = 0
        # the open transaction's outbox rows (node_id, version, op, created), sent with its
        # COMMIT (`_COMMIT_WITH_OUTBOX`), which gives them their seqs
        self._rows: list[tuple[int, int, str, float]] = []
        # Memory reflects every commit up to this outbox seq (`applied`): the indexer reads
        # no further (`outbox_since`), so it never indexes another mount's change before
        # this mount has loaded it. Seqs this store committed above it wait in `_own`.
        self.applied = 0
        self._own: set[int] = set()
        self._last_known: dict[str, Any] = {}
        self._known_at: dict[str, tuple[int, int] | None] = {}  # `_remember`'s per_commit
        if not read_only:
            with self.atomic():
                # one mount at a time creates or migrates the schema
                self.con.execute("SELECT pg_advisory_xact_lock(?)", [OUTBOX_LOCK])
                create_tables(self.con)
                self.con.execute("CREATE SEQUENCE IF NOT EXISTS outbox_seq START 1")
                # create_tables and migrate make the unique index nodes_live_path (schema
                # LIVE_NAME_INDEXES): two mounts creating one path at once cannot both
                # commit (the second re-applies: VersionConflict)
                migrate(self.con)
                self.con.execute(UNIT_VECTORS)
                self.con.execute(
                    "INSERT INTO store_meta VALUES ('created', ?) ON CONFLICT DO NOTHING",
                    [str(time.time())],
                )
        self._seq = self.applied = self.generation()

    def set_home(self) -> None:
        super().set_home()
        self.con.owner = self._home  # type: ignore[attr-defined]  # others: `_text_con`

    def read_ahead(self) -> None:
        """The server reads its own files."""

    def buffer_memory(self) -> None:
        """The server's buffers are its own memory, not the daemon's."""
        return None

    def describe(self) -> str:
        con: PgConnection = self.con  # type: ignore[assignment]
        if con.up:
            return f"{self.location} (connected)"
        return f"{self.location} (writes refused: {con.down_reason or 'not connected'})"

    def close(self) -> None:
        if self.garbage:
            try:
                with self.atomic():
                    self.sweep()
            except (psycopg.Error, StoreDamaged, StoreUnavailable):
                log.warning("could not reclaim %d unheld blob(s) at close", len(self.garbage))
        self._close_readers()
        self.con.close()

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """One PostgreSQL transaction (READ COMMITTED); nested uses join the outer one.
        A commit whose answer is lost is reported as failed (StoreUnavailable): the
        caller never acknowledges what may not be stored."""
        if self._depth:
            with self._joined():
                yield
            return
        self.con.begin()
        self._depth = 1
        self._rows = []
        try:
            yield
        except BaseException:
            self._depth = 0
            self._ids.clear()  # harmless: ids are never reused either way
            try:
                self.con.rollback()
            except (psycopg.Error, StoreUnavailable):
                log.warning("rollback could not reach the server (it rolls back by itself)")
            raise
        self._depth = 0
        rows, self._rows = self._rows, []
        try:
            seqs = self._commit(rows)
        except (psycopg.OperationalError, StoreUnavailable) as exc:
            raise StoreUnavailable(
                f"the commit's answer was lost ({type(exc).__name__}); nothing acknowledged"
            ) from None
        except psycopg.Error as exc:
            raise StoreDamaged(f"commit failed: {exc}") from exc
        if seqs:
            self._seq = max(self._seq, *seqs)
        self._own.update(seqs)
        while self.applied + 1 in self._own:  # ours, and nothing of another mount between
            self.applied += 1
            self._own.discard(self.applied)

    def _commit(self, rows: list[tuple[int, int, str, float]]) -> list[int]:
        """COMMIT, with the transaction's outbox rows when it has any; their seqs."""
        if not rows:
            self.con.commit()
            return []
        node_ids, versions, ops, created = (list(col) for col in zip(*rows, strict=True))
        cur = self.con.commit_with(
            _COMMIT_WITH_OUTBOX, [OUTBOX_LOCK, node_ids, versions, ops, created, CHANNEL]
        )
        cur.nextset()  # past the lock's row: the INSERT's
        return [r[0] for r in cur.fetchall()]

    def _next_ids(self, count: int) -> list[int]:
        rows = self.con.execute(
            "SELECT nextval('object_ids') FROM generate_series(1, ?)", [count]
        ).fetchall()
        return sorted(r[0] for r in rows)

    def _outbox(self, node_id: int, version: int, op: str) -> int:
        """The row is sent with the COMMIT (`_COMMIT_WITH_OUTBOX`), which gives it its seq
        in commit order. Returned meanwhile: the seq it would have with nothing of another
        mount's committed before it, a lower bound (the caller takes the generation the
        commit reached from `last_seq`)."""
        self._rows.append((node_id, version, op, time.time()))
        return self._seq + len(self._rows)

    def insert_node(self, n: Node, *, new_version_reason: str | None = None) -> int:
        """As the Store's; a live node at the same path made by another mount meanwhile
        is a VersionConflict (the unique index `nodes_live_path`)."""
        try:  # the error aborts the transaction: the caller rolls back and re-applies
            return super().insert_node(n, new_version_reason=new_version_reason)
        except psycopg.errors.UniqueViolation:
            raise VersionConflict(
                f"another mount made {n.owner_kind}/{n.owner_id} {n.type} {n.name!r} meanwhile",
                node_id=None,
            ) from None

    def update_node(self, n: Node, *, new_version_reason: str | None = None) -> int:
        """As the Store's, checked first (optimistic concurrency): the stored row must be
        at the version this change started from — n.version - 1 for a new version, else
        n.version. The row stays locked to the commit, so no other mount slips between
        the check and the write; a mismatch is a VersionConflict and nothing is written."""
        expected = n.version - 1 if new_version_reason is not None else n.version
        row = self.con.execute(
            "SELECT version FROM nodes WHERE id = ? FOR UPDATE", [n.id]
        ).fetchone()
        if row is None or row[0] != expected:
            raise VersionConflict(
                f"{n.owner_kind}/{n.owner_id} {n.type} {n.name!r} is at version "
                f"{row[0] if row else 'none'} in the store, this mount had {expected}",
                node_id=n.id,
            )
        return super().update_node(n, new_version_reason=new_version_reason)

    def shared_vectors(self) -> PgVectorShare:
        """The vectors every mount of the database reuses, on a connection of their own."""
        return PgVectorShare(self.con._dsn, read_only=self.con.read_only)

    def claim(self, what: str, key: int) -> bool:
        """As the Store's, across every mount of the database. A held claim is this
        connection's: if the connection is lost and made again (the server restarted),
        it is gone, and another mount may take the work meanwhile."""
        row = self.con.execute(
            "SELECT pg_try_advisory_lock(?::INTEGER, ?::INTEGER)", [CLAIMS[what], key % 2**31]
        ).fetchone()
        return bool(row and row[0])

    def release(self, what: str, key: int) -> None:
        # a connection that is gone took the claim with it
        with suppress(psycopg.Error, StoreUnavailable):
            self.con.execute(
                "SELECT pg_advisory_unlock(?::INTEGER, ?::INTEGER)", [CLAIMS[what], key % 2**31]
            )

    def lock_node(self, node_id: int) -> None:
        """Inside a transaction: hold n's row until the commit (waits for a holder)."""
        self.con.execute("SELECT version FROM nodes WHERE id = ? FOR UPDATE", [node_id])

    # ---- many mounts: what the others committed ---------------------------------------

    def outbox_since(self, seq: int, limit: int) -> list[tuple[int, int, int, str]]:
        """As the Store's, but never past `applied` (what Memory has loaded)."""
        return [
            tuple(r)
            for r in self.con.execute(
                "SELECT seq, node_id, version, op FROM outbox WHERE seq > ? AND seq <= ? "
                "ORDER BY seq LIMIT ?",
                [seq, self.applied, limit],
            ).fetchall()
        ]

    def set_access(self, kind: str, key: str, a: Access | None) -> None:
        """As the Store's, with an outbox row (node 0, op 'access') that tells the other
        mounts to read the access rows again: owners, groups and modes decide what their
        readers may see. The indexer finds no node 0 and has nothing to do for it."""
        super().set_access(kind, key, a)
        self._outbox(0, 0, ACCESS_OP)

    # ---- attachments: each change tells the other mounts which node's to read again ----

    def insert_attachment(
        self, a: Attachment, data: FileBytes | None, staged: dict[int, str] | None = None
    ) -> None:
        super().insert_attachment(a, data, staged)
        self._outbox(a.node_id, 0, ATTACH_OP)

    def update_attachment(self, a: Attachment) -> None:
        was = self._attachment_node(a.id)
        super().update_attachment(a)
        self._outbox(a.node_id, 0, ATTACH_OP)
        if was is not None and was != a.node_id:  # moved to another node
            self._outbox(was, 0, ATTACH_OP)

    def write_attachment_chunks(
        self,
        att_id: int,
        data: FileBytes,
        chunks: list[int],
        mtime: float,
        staged: dict[int, str] | None = None,
    ) -> int | None:
        node_id = super().write_attachment_chunks(att_id, data, chunks, mtime, staged)
        if node_id is not None:
            self._outbox(node_id, 0, ATTACH_OP)
        return node_id

    def purge_attachment(self, att_id: int) -> int | None:
        node_id = super().purge_attachment(att_id)
        if node_id is not None:
            self._outbox(node_id, 0, ATTACH_OP)
        return node_id

    def _attachment_node(self, att_id: int) -> int | None:
        row = self.con.execute("SELECT node_id FROM attachments WHERE id = ?", [att_id]).fetchone()
        return row[0] if row else None

    def changes_after(self, seq: int, limit: int = 1000) -> Changes:
        """What other mounts committed after seq (at most `limit` outbox rows); the seqs
        this store wrote itself are skipped. Any thread (`_meta_con`)."""
        rows = (
            self._meta_con()
            .execute(
                "SELECT seq, node_id, op FROM outbox WHERE seq > ? ORDER BY seq LIMIT ?",
                [seq, limit],
            )
            .fetchall()
        )
        if not rows:
            return Changes(seq)
        theirs = [(nid, op) for sq, nid, op in rows if sq not in self._own]
        return Changes(
            rows[-1][0],
            list(dict.fromkeys(nid for nid, op in theirs if op not in (ACCESS_OP, ATTACH_OP))),
            any(op == ACCESS_OP for _nid, op in theirs),
            {nid for nid, op in theirs if op == ATTACH_OP},
        )

    def mark_applied(self, seq: int) -> None:
        """Memory has loaded every change up to seq."""
        if seq > self.applied:
            self.applied = seq
            self._own = {s for s in self._own if s > seq}

    def nodes_by_id(self, ids: list[int]) -> dict[int, Node]:
        """These nodes as stored now, with their history (another mount changed them).
        Any thread (`_meta_con`)."""
        if not ids:
            return {}
        con = self._meta_con()
        rows = con.execute(
            f"SELECT {_NODE_COLS} FROM nodes WHERE id = ANY(?::BIGINT[])", [ids]
        ).fetchall()
        out = {r[0]: _node_from_row(r) for r in rows}
        for node_id, version, created, size, reason in con.execute(
            "SELECT node_id, version, created, octet_length(l2), reason FROM versions "
            "WHERE node_id = ANY(?::BIGINT[]) ORDER BY node_id, version",
            [ids],
        ).fetchall():
            n = out[node_id]
            n.history.append((version, created, size))
            if not reason.startswith(MACHINE_REASONS):
                n.person_wrote = True
        return out

    def listener(self) -> PgListener:
        """A connection of its own that waits for other mounts' commits."""
        return PgListener(self.con._dsn, self.location)

    def _remember(self, key: str, read: Any, *, per_commit: bool = False) -> Any:
        """A read for `.status`: while the server is away, the last value it gave.
        `per_commit`: a figure only a commit with outbox rows changes (counts of nodes,
        versions, outbox rows), read again only once a commit was made or loaded since:
        a count over 100,000 rows costs the server 10-30 ms, and `.status` read five
        times a second during a new host's rebuild took a fifth of its event loop."""
        mark = (self.applied, self._seq)
        if per_commit and self._known_at.get(key) == mark:
            return self._last_known[key]
        try:
            value = read()
        except (StoreUnavailable, psycopg.OperationalError):
            return self._last_known.get(key, 0)
        self._last_known[key] = value
        self._known_at[key] = mark if per_commit else None
        return value

    def outbox_depth(self) -> int:
        return self._remember("outbox_depth", super().outbox_depth, per_commit=True)

    def last_consolidation(self) -> tuple | None:
        return self._remember("last_consolidation", super().last_consolidation) or None

    def consolidation_begun(self) -> float | None:
        return self._remember("consolidation_begun", super().consolidation_begun) or None

    def redaction_total(self) -> int:
        return self._remember("redaction_total", super().redaction_total)

    def node_counts(
        self, owner: tuple[str, str] | None = None, type_name: str | None = None
    ) -> tuple[int, int]:
        got = self._remember(
            f"node_counts {owner} {type_name}",
            lambda: super(PgStore, self).node_counts(owner, type_name),
            per_commit=True,
        )
        return got if got else (0, 0)

    def node_counts_by_dir(self) -> dict[tuple[tuple[str, str], str], tuple[int, int]]:
        return self._remember("node_counts_by_dir", super().node_counts_by_dir) or {}

    def version_count(self) -> int:
        return self._remember("version_count", super().version_count, per_commit=True)

    def stored_bytes(self) -> tuple[int, int]:
        got = self._remember("stored_bytes", super().stored_bytes)
        return got if got else (0, 0)

    def _text_con(self) -> PgReaders:
        """Every thread but the memory's (`_meta_con`) reads through the shared readers."""
        readers = self.__dict__.get("_pool")
        if readers is None:
            readers = self.__dict__.setdefault(
                "_pool", PgReaders(self.con._dsn, deadline_s=self.deadline_s)
            )
        return readers

    def _close_readers(self) -> None:
        readers = self.__dict__.pop("_pool", None)
        if readers is not None:
            readers.close()


class PgVectorShare:
    """`SharedVectors` on the database's `unit_vectors` table, through a connection of its
    own (autocommit), used from the indexer's embedding thread. Every call has a deadline;
    a fault is a miss (the caller embeds) or a row not shared, logged once until the
    share answers again, and for `_SHARE_RETRY_S` after it every call is one."""

    def __init__(self, dsn: str, *, read_only: bool = False) -> None:
        self._dsn = dsn
        self.read_only = read_only
        self.raw: psycopg.Connection | None = None
        self._failing = False
        self._retry_at = 0.0

    def _con(self) -> psycopg.Connection:
        if self.raw is None or self.raw.closed or self.raw.broken:
            self.raw = psycopg.connect(
                with_keepalives(self._dsn),
                autocommit=True,
                connect_timeout=_CONNECT_TIMEOUT,
                options=f"-c statement_timeout={_SHARE_TIMEOUT_MS}",
            )
        return self.raw

    def _run(self, sql: str, params: Sequence[Any]) -> psycopg.Cursor:
        """One statement, sent once more on a fresh connection when the one it went down
        had broken (a server restart ends every idle session), not when it was given up on
        at its deadline; both statements of the share can run twice."""
        con = self._con()
        # the server's statement_timeout cannot fire while it is stopped: the mount's
        # own deadline ends the wait (`Deadlines`), and a call given up on is a miss
        token = DEADLINES.watch(con.pgconn.socket, _SHARE_TIMEOUT_MS / 1000 + _GIVE_UP_AFTER_S)
        try:
            return con.execute(sql, params)
        except psycopg.Error:
            if DEADLINES.done(token) or not (con.broken or con.closed):
                raise
            self.close()
            return self._con().execute(sql, params)
        finally:
            DEADLINES.done(token)

    def _fault(self, what: str, exc: psycopg.Error) -> None:
        if not self._failing:
            log.warning("shared vectors: %s failed (%s); embedding here", what, type(exc).__name__)
        self._failing = True
        self._retry_at = time.monotonic() + _SHARE_RETRY_S
        self.close()

    def get(self, model: str, digests: Sequence[int]) -> dict[int, bytes]:
        if not digests or time.monotonic() < self._retry_at:
            return {}
        try:
            # the keys as one array literal: psycopg dumps a list of ints one by one in
            # Python (half the time of a new host's reads of the share went there)
            keys = "{" + ",".join(map(str, digests)) + "}"
            rows = self._run(
                "SELECT digest, vector FROM unit_vectors "
                "WHERE model = %s AND digest = ANY(%s::BIGINT[])",
                [model, keys],
            ).fetchall()
        except psycopg.Error as exc:
            self._fault("a read", exc)
            return {}
        self._failing = False
        return {int(d): bytes(v) for d, v in rows}

    def put(self, model: str, rows: Sequence[tuple[int, bytes]]) -> None:
        if not rows or self.read_only or time.monotonic() < self._retry_at:
            return
        try:
            self._run(
                "INSERT INTO unit_vectors SELECT %s, d, v FROM unnest(%s::BIGINT[], %s::BYTEA[]) "
                "AS t(d, v) ON CONFLICT DO NOTHING",
                [model, [d for d, _v in rows], [v for _d, v in rows]],
            )
        except psycopg.Error as exc:
            self._fault("a write", exc)
            return
        self._failing = False

    def close(self) -> None:
        if self.raw is not None:
            with suppress(psycopg.Error):
                self.raw.close()
            self.raw = None


class PgListener:
    """LISTEN contextfs_outbox on a connection of its own, used from one worker thread
    (`wait`); reconnects with backoff when the server goes away."""

    def __init__(self, dsn: str, shown: str) -> None:
        self._dsn = dsn
        self.shown = shown
        self.raw: psycopg.Connection | None = None
        self._backoff = 0.1

    def wait(self, timeout: float) -> bool:
        """Block up to `timeout` s for a notice; True when one came, or the connection was
        (re)made (notices may have been missed: the caller looks at the outbox)."""
        if self.raw is None or self.raw.closed or self.raw.broken:
            try:
                self.raw = psycopg.connect(
                    with_keepalives(self._dsn), autocommit=True, connect_timeout=_CONNECT_TIMEOUT
                )
                self.raw.execute(f"LISTEN {CHANNEL}")
            except psycopg.Error:
                self.raw = None
                time.sleep(min(timeout, self._backoff))
                self._backoff = min(_BACKOFF_MAX, self._backoff * 2)
                return False
            self._backoff = 0.1
            return True
        try:
            for _n in self.raw.notifies(timeout=timeout, stop_after=1):
                return True
        except psycopg.Error:
            with suppress(psycopg.Error):
                self.raw.close()
            self.raw = None
            return True
        return False

    def close(self) -> None:
        if self.raw is not None:
            with suppress(psycopg.Error):
                self.raw.close()
            self.raw = None
