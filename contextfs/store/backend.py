"""What a store offers, and opening the one a configuration names.

Role: `StoreBackend` is the protocol both stores implement — `contextfs.store.db.Store`
(DuckDB, embedded, the default) and `contextfs.store.pg.PgStore` (PostgreSQL, shared by
many mounts: docs/scaling.md) — made of small protocols that say which rows a part of
the memory uses: `Transactions`, `NodeRows`, `TextRows` (texts and versions),
`AttachmentRows`, `InboxRows`, `FeedRows` (the outbox) and `Bookkeeping`; a shared store
also offers `SharedVectors` (`shared_vectors()`, None on the embedded one). `open_store`
picks one from a location: a postgresql:// URL, or the path of a DuckDB file. Boundary:
no FUSE, no Memory; psycopg is imported only when a PostgreSQL store is opened.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from contextfs.model import Access, Attachment, Node

if TYPE_CHECKING:
    from contextfs.store.backup import BackupPolicy
    from contextfs.store.schema import FileBytes


class Transactions(Protocol):
    """The store as a whole: where it is, its transactions (writes happen inside
    `atomic()`; nested uses join the outer transaction), ids, its generation (the last
    outbox seq; `last_seq`, the newest its own commits gave out), and the driver's
    exception classes: `errors` for any fault, `invalid` for
    a refused value, `conflict` for a row a constraint forbids (a second live name: the
    LIVE_NAME_INDEXES of contextfs.store.schema), `unavailable` for a server that is away
    (empty for an embedded store), `busy` for a change that found no room in the buffers."""

    dialect: str
    location: str  # where it is, as it may be shown (never a password)
    errors: tuple[type[BaseException], ...]
    invalid: tuple[type[BaseException], ...]
    conflict: tuple[type[BaseException], ...]
    unavailable: tuple[type[BaseException], ...]
    busy: tuple[type[BaseException], ...]
    garbage: set[str]
    backup: BackupPolicy | None  # a backup taken at close (a checked DuckDB store's mount)
    con: Any  # DuckDB's connection, or a PostgreSQL one with its call shape (fsck reads it)

    def describe(self) -> str: ...
    def read_ahead(self) -> None: ...
    def buffer_memory(self) -> tuple[int, int] | None: ...
    def close(self) -> None: ...
    def atomic(self) -> AbstractContextManager[None]: ...
    def sweep(self) -> None: ...
    def big_reads(self) -> AbstractContextManager[None]: ...
    def new_id(self) -> int: ...
    def claim_id(self, wanted: int) -> bool: ...
    def generation(self) -> int: ...
    @property
    def last_seq(self) -> int:
        """The newest outbox seq this store's commits gave out (or found at open): a
        write's returned generation is final once its transaction committed."""
        ...


class NodeRows(Protocol):
    """Owners, their access, and the nodes' rows without their texts: heads on demand
    (memory.heads; any thread, see `set_home`), lookups by path, counts; every node write
    appends its outbox row in the same transaction and returns the new generation."""

    def owners(self) -> list[tuple[str, str]]: ...
    def access(self) -> dict[tuple[str, str], Access]: ...
    def nodes(self) -> list[Node]: ...
    def node_heads(self, make: Callable[..., Node] = ...) -> list[tuple[Node, int, int]]: ...
    def set_home(self) -> None: ...
    def node_head(self, node_id: int, make: Callable[..., Node] = ...) -> tuple | None: ...
    def node_head_page(
        self,
        after: int,
        limit: int,
        make: Callable[..., Node] = ...,
        *,
        owner: tuple[str, str] | None = None,
        types: tuple[str, ...] | None = None,
        live: bool | None = None,
        ids: list[int] | None = None,
    ) -> list[tuple[Node, int, int]]: ...
    def live_node_head(
        self, kind: str, owner_id: str, type_name: str, name: str, make: Callable[..., Node] = ...
    ) -> tuple | None: ...
    def live_node_id(self, kind: str, owner_id: str, type_name: str, name: str) -> int | None: ...
    def live_ids(
        self, owner: tuple[str, str] | None = None, type_name: str | None = None
    ) -> list[int]: ...
    def node_counts(
        self, owner: tuple[str, str] | None = None, type_name: str | None = None
    ) -> tuple[int, int]: ...
    def node_counts_by_dir(self) -> dict[tuple[tuple[str, str], str], tuple[int, int]]: ...
    def recent_live_ids(self, limit: int) -> list[int]: ...
    def live_names(self, type_name: str, ids: list[int]) -> list[tuple[int, str]]: ...
    def live_named(self, type_name: str, names: list[str]) -> list[tuple[int, str]]: ...
    def all_live_names(self, type_name: str, batch: int = ...) -> Iterator[list[tuple]]: ...
    def add_owner(self, kind: str, owner_id: str) -> None: ...
    def set_access(self, kind: str, key: str, a: Access | None) -> None: ...
    def insert_node(self, n: Node, *, new_version_reason: str | None = None) -> int: ...
    def update_node(self, n: Node, *, new_version_reason: str | None = None) -> int: ...
    def repair_node(
        self,
        node_id: int,
        *,
        name: str | None = None,
        deleted_at: float | None = None,
        new_version: str | None = None,
    ) -> int: ...
    def set_importance(self, importance: dict[int, float], access: dict[int, int]) -> None: ...


class TextRows(Protocol):
    """The tiers' texts and the versions (memory.texts, `.history`; any thread)."""

    def node_text(self, node_id: int) -> tuple[str, str] | None: ...
    def node_texts(self, node_ids: list[int]) -> dict[int, tuple[str, str]]: ...
    def version_text(self, node_id: int, version: int) -> str: ...
    def version_count(self) -> int: ...
    def node_history(self, node_id: int) -> tuple[list[tuple[int, float, int]], bool]: ...
    def node_histories(
        self, node_ids: list[int]
    ) -> dict[int, tuple[list[tuple[int, float, int]], bool]]: ...
    def rewrite_version(self, node_id: int, version: int, text: str, content_hash: str) -> None: ...
    def set_version_time(self, node_id: int, version: int, created: float) -> None: ...


class AttachmentRows(Protocol):
    """Attachments and their bytes (stored in chunks, blobs by content hash)."""

    def attachments(self) -> list[Attachment]: ...
    def attachment(self, att_id: int) -> Attachment | None: ...
    def attachment_data(self, att_id: int) -> bytearray: ...
    def attachment_chunks(self, att_id: int, batch: int = ...) -> Iterator[tuple[int, bytes]]: ...
    def stored_bytes(self) -> tuple[int, int]: ...
    def insert_attachment(
        self, a: Attachment, data: FileBytes | None, staged: dict[int, str] | None = None
    ) -> None: ...
    def update_attachment(self, a: Attachment) -> None: ...
    def write_attachment_chunks(
        self,
        att_id: int,
        data: FileBytes,
        chunks: list[int],
        mtime: float,
        staged: dict[int, str] | None = None,
    ) -> int | None: ...
    def purge_attachment(self, att_id: int) -> int | None: ...
    def stage_blobs(self, data: FileBytes, chunks: list[int]) -> list[str]: ...
    def unstage(self, hashes: list[str], *, held: bool) -> None: ...


class InboxRows(Protocol):
    """What arrives: inbox items with their bytes and reports, drops still to route,
    live sessions."""

    def inbox_items(self) -> list[tuple]: ...
    def inbox_item(self, item_id: int) -> tuple | None: ...
    def claim(self, what: str, key: int) -> bool: ...
    def release(self, what: str, key: int) -> None: ...
    def inbox_data(self, item_id: int) -> bytes: ...
    def inbox_chunks(self, item_id: int, batch: int = ...) -> Iterator[tuple[int, bytes]]: ...
    def add_inbox_item(
        self,
        item_id: int,
        owner: tuple[str, str],
        filename: str,
        data: bytes,
        created: float,
        state: str,
        report: str,
    ) -> None: ...
    def set_inbox_state(
        self, item_id: int, state: str, report: str, progress: str = ""
    ) -> None: ...
    def add_inbox_step(self, item_id: int, conv: int, step: int, data: str) -> None: ...
    def inbox_steps(self, item_id: int, conv: int) -> list[str]: ...
    def clear_inbox_steps(self, item_id: int) -> None: ...
    def pending_drops(self) -> list[tuple[int, str, str, str, str, bytes]]: ...
    def add_pending_drop(
        self, drop_id: int, owner: tuple[str, str], type_name: str, filename: str, data: bytes
    ) -> None: ...
    def remove_pending_drop(self, drop_id: int) -> None: ...
    def sessions(self) -> list[tuple]: ...
    def put_session(
        self,
        owner: tuple[str, str],
        sid: str,
        created: float,
        transcript: str,
        processed: int,
        summary: str,
    ) -> None: ...
    def delete_session(self, owner: tuple[str, str], sid: str) -> None: ...


class FeedRows(Protocol):
    """The outbox: what changed, in commit order (the indexer and the summaries read it;
    other mounts of a shared store catch up from it)."""

    def outbox_since(self, seq: int, limit: int) -> list[tuple[int, int, int, str]]: ...
    def outbox_depth(self) -> int: ...
    def outbox_upto(self) -> int: ...
    def nodes_changed_since(self, seq: int, limit: int) -> list[int] | None: ...


class Bookkeeping(Protocol):
    """The store's own facts: meta keys, consolidation runs, the redaction log."""

    def meta(self, key: str) -> str | None: ...
    def set_meta(self, key: str, value: str) -> None: ...
    def last_consolidation(self) -> tuple | None: ...
    def begin_consolidation(self, ts: float) -> None: ...
    def consolidation_begun(self) -> float | None: ...
    def add_consolidation_run(
        self, ts: float, decayed: int, merged: int, archived: int, summary: str
    ) -> None: ...
    def redaction_total(self) -> int: ...
    def add_redaction(self, ts: float, path: str, kind: str, count: int) -> None: ...


class SharedVectors(Protocol):
    """Unit vectors kept in a store that many mounts share, so a text is embedded once
    across them (`PgStore.shared_vectors`): keyed by the embedding model (its name and
    dimension, `model`) and the xxh64 of the unit's text (a signed 64-bit `digest`), the
    vector as the bytes of its float32 row. A fault is a miss, never an error: the caller
    embeds the text itself. Used from one worker thread at a time."""

    def get(self, model: str, digests: Sequence[int]) -> dict[int, bytes]: ...
    def put(self, model: str, rows: Sequence[tuple[int, bytes]]) -> None: ...
    def close(self) -> None: ...


class StoreBackend(
    Transactions, NodeRows, TextRows, AttachmentRows, InboxRows, FeedRows, Bookkeeping, Protocol
):
    """The canonical store: every read and write of the rows (contextfs.store.schema), as
    the small protocols above group them. Both engines implement all of it; a part of the
    memory that needs one group names that protocol."""

    def shared_vectors(self) -> SharedVectors | None: ...


def is_remote(location: str | Path) -> bool:
    """A PostgreSQL URL rather than a DuckDB file."""
    return str(location).startswith(("postgresql://", "postgres://"))


def open_store(
    location: str | Path,
    *,
    read_only: bool = False,
    memory_mb: int = 0,
    checkpoint_mb: int = 64,
    deadline_s: float | None = None,
) -> StoreBackend:
    """The store at `location`: a postgresql:// URL (PgStore) or a DuckDB file (Store);
    `memory_mb` caps DuckDB's buffers (0: DuckDB's default; a server's memory is its own),
    `checkpoint_mb` is the size of DuckDB's log that starts a checkpoint, `deadline_s` how
    long a PostgreSQL statement may take (None: `pg.STATEMENT_DEADLINE_S`)."""
    if is_remote(location):
        from contextfs.store.pg import STATEMENT_DEADLINE_S, PgStore

        return PgStore(
            str(location),
            read_only=read_only,
            deadline_s=STATEMENT_DEADLINE_S if deadline_s is None else deadline_s,
        )
    from contextfs.store.db import Store

    return Store(
        Path(location), read_only=read_only, memory_mb=memory_mb, checkpoint_mb=checkpoint_mb
    )


def shown(location: str | Path) -> str:
    """A store location as it may be shown: a URL without its password."""
    if is_remote(location):
        from contextfs.store.pg import redact_dsn

        return redact_dsn(str(location))
    return str(location)


__all__ = ["SharedVectors", "StoreBackend", "is_remote", "open_store", "shown"]
