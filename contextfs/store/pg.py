"""PgStore: the Store on a PostgreSQL database, shared by many mounts (docs/scaling.md).

Role: the same rows as the DuckDB Store (contextfs.store.db), in a PostgreSQL database
reached with psycopg 3, so that mounts on several hosts share one memory. Every statement
is the Store's own shared SQL text, rendered for PostgreSQL by `contextfs.store.dialect`;
only what PostgreSQL does differently is overridden here: the connection (and reconnecting
to it), transactions, ids, the outbox order across writers, and the commit notice.

Boundary: rows in, rows out, like the Store; it knows nothing of FUSE or of Memory. The
DSN's password is never logged, shown or put in an exception (`redact_dsn`).

Across writers: every transaction that writes an outbox row first takes one transaction
advisory lock (`OUTBOX_LOCK`), so outbox seqs are given out in commit order and a reader
that has seen seq N has seen every commit before it. The commit also sends
`NOTIFY contextfs_outbox, '<seq>'` (delivered only if it commits) for the other mounts.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import psycopg.errors

from contextfs.errors import StoreDamaged, StoreUnavailable
from contextfs.model import Node
from contextfs.store.db import Store
from contextfs.store.dialect import POSTGRES, render
from contextfs.store.schema import create_tables, migrate

log = logging.getLogger(__name__)

CHANNEL = "contextfs_outbox"
OUTBOX_LOCK = 0x636F6E74  # 'cont': the one advisory lock that orders outbox seqs
_CONNECT_TIMEOUT = 2  # seconds; a server that does not answer by then is down
_BACKOFF_MAX = 2.0  # seconds between reconnection attempts at most

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


class PgConnection:
    """A psycopg connection with DuckDB's call shape (`execute(sql, params)` returning
    something with fetchone/fetchall/fetchmany; begin/commit/rollback), which renders the
    shared SQL for PostgreSQL and reconnects, with backoff, after the server went away.

    Autocommit, with explicit BEGIN/COMMIT: outside `atomic()` every read is its own
    transaction, as with DuckDB. A lost connection is never re-opened inside a
    transaction: the transaction fails (its rollback is the server's), the next one
    reconnects."""

    def __init__(self, dsn: str, *, read_only: bool = False) -> None:
        self._dsn = dsn
        self.shown = redact_dsn(dsn)
        self.read_only = read_only
        self.raw: psycopg.Connection | None = None
        self.down_reason = ""
        self.down_since: float | None = None
        self._next_try = 0.0
        self._backoff = 0.1
        self.in_tx = False
        self._connect()

    def _connect(self) -> None:
        try:
            self.raw = psycopg.connect(self._dsn, autocommit=True, connect_timeout=_CONNECT_TIMEOUT)
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
        if self.up:
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

    def execute(self, sql: str, params: Any = None) -> psycopg.Cursor:
        con = self._ready()
        try:
            return con.execute(render(sql, POSTGRES), params)
        except psycopg.OperationalError as exc:
            if con.broken or con.closed:
                self._down(exc)
                raise StoreUnavailable(self.down_reason) from None
            raise

    def begin(self) -> None:
        self.execute("BEGIN")
        self.in_tx = True

    def commit(self) -> None:
        try:
            self.execute("COMMIT")
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


class PgStore(Store):
    """The Store on PostgreSQL; `dsn` a libpq connection string or postgresql:// URL."""

    dialect = POSTGRES
    errors: tuple[type[BaseException], ...] = (psycopg.Error,)
    invalid: tuple[type[BaseException], ...] = (psycopg.errors.DataError,)
    unavailable: tuple[type[BaseException], ...] = (StoreUnavailable, psycopg.OperationalError)

    def __init__(self, dsn: str, *, read_only: bool = False) -> None:  # noqa: D107
        # Store.__init__ opens DuckDB: this sets the same state up over PostgreSQL
        self.path = None
        self.location = redact_dsn(dsn)
        self.con = PgConnection(dsn, read_only=read_only)  # type: ignore[assignment]
        self._depth = 0
        self.garbage: set[str] = set()
        self._swept_all = False
        self._ids: list[int] = []
        self._seq = 0
        self._notify = 0  # the newest outbox seq written by the open transaction
        self._last_known: dict[str, Any] = {}
        self.boundary = None
        if not read_only:
            with self.atomic():
                # one mount at a time creates or migrates the schema
                self.con.execute("SELECT pg_advisory_xact_lock(?)", [OUTBOX_LOCK])
                create_tables(self.con)  # type: ignore[arg-type]
                self.con.execute("CREATE SEQUENCE IF NOT EXISTS outbox_seq START 1")
                migrate(self.con)  # type: ignore[arg-type]
                self.con.execute(
                    "INSERT INTO store_meta VALUES ('created', ?) ON CONFLICT DO NOTHING",
                    [str(time.time())],
                )
        self._seq = self.generation()

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
        self.con.close()

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """One PostgreSQL transaction (READ COMMITTED); nested uses join the outer one.
        A commit whose answer is lost is reported as failed (StoreUnavailable): the
        caller never acknowledges what may not be stored."""
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        self.con.begin()
        self._depth = 1
        self._notify = 0
        try:
            yield
            if self._notify:
                self.con.execute("SELECT pg_notify(?, ?)", [CHANNEL, str(self._notify)])
        except BaseException:
            self._depth = 0
            self._ids.clear()  # harmless: ids are never reused either way
            try:
                self.con.rollback()
            except (psycopg.Error, StoreUnavailable):
                log.warning("rollback could not reach the server (it rolls back by itself)")
            raise
        self._depth = 0
        try:
            self.con.commit()
        except (psycopg.OperationalError, StoreUnavailable) as exc:
            raise StoreUnavailable(
                f"the commit's answer was lost ({type(exc).__name__}); nothing acknowledged"
            ) from None
        except psycopg.Error as exc:
            raise StoreDamaged(f"commit failed: {exc}") from exc

    def new_id(self) -> int:
        if not self._ids:
            rows = self.con.execute(
                "SELECT nextval('object_ids') FROM generate_series(1, ?)", [self._ID_BLOCK]
            ).fetchall()
            self._ids = [r[0] for r in reversed(rows)]
        return self._ids.pop()

    def _outbox(self, node_id: int, version: int, op: str) -> int:
        """Outbox rows from every writer, in commit order: the first row of a transaction
        takes the outbox lock (held to its commit), then the seq comes from a sequence."""
        if not self._notify:
            self.con.execute("SELECT pg_advisory_xact_lock(?)", [OUTBOX_LOCK])
        seq = self.con.execute(
            "INSERT INTO outbox VALUES (nextval('outbox_seq'), ?, ?, ?, ?) RETURNING seq",
            [node_id, version, op, time.time()],
        ).fetchone()[0]
        self._seq = self._notify = seq
        return seq

    def _remember(self, key: str, read: Any) -> Any:
        """A read for `.status`: while the server is away, the last value it gave."""
        try:
            value = read()
        except (StoreUnavailable, psycopg.OperationalError):
            return self._last_known.get(key, 0)
        self._last_known[key] = value
        return value

    def outbox_depth(self) -> int:
        return self._remember("outbox_depth", super().outbox_depth)

    def last_consolidation(self) -> tuple | None:
        return self._remember("last_consolidation", super().last_consolidation) or None

    def redaction_total(self) -> int:
        return self._remember("redaction_total", super().redaction_total)

    def stored_bytes(self) -> tuple[int, int]:
        got = self._remember("stored_bytes", super().stored_bytes)
        return got if got else (0, 0)

    def node(self, node_id: int) -> Node | None:
        """One node as stored now, with its history (another mount may have changed it)."""
        return self.nodes_by_id([node_id]).get(node_id)
