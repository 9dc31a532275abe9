"""The indexer: drains the store's outbox into the derived indexes (hnswlib + tantivy).

This is where the canonical store and the derived indexes meet (STYLE: `store/` and
`index/` never import each other). A background service in the daemon's trio nursery:
woken by every commit, it reads outbox rows after the generation each index reflects,
turns the nodes they name into units (L0, L1, L2 chunks), embeds only units whose text
changed (xxhash digests), and applies upserts and deletions. The work goes in bounded
slices (a BM25 commit of at most TEXT_SLICE_UNITS documents, an embedding slice of about
SLICE_SECONDS), BM25 ahead of the vectors, and what a person or an agent saved through the
mount ahead of both cursors (the urgent lane; `sync_nodes` is fsync's). Embedding runs in
a worker thread outside any lock; hnswlib and the digests are under `lock`, tantivy under
`text_lock`, which searches share.

On disk (DATA_DIR/index/): `snap-*/vectors.bin` (hnswlib, or past `compact_units` units the
compact index of `index.compact`, whose exact vectors are `vectors.f16`, outside the
snapshots: no row a saved snapshot names is rewritten) and `snap-*/digests.npy` (unit
digests, `index.digests`; a `digests.json` of an older snapshot is read) of the last
checkpoint, `text/` (tantivy), and `index.json` {model, dim,
generation, snapshot}, replaced atomically after the snapshot is whole. A crash re-applies
the outbox rows after the checkpoint's generation; applying a row twice is harmless. Files that do
not load, or that were built with another model or dimension, are rebuilt, never trusted.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import trio
import xxhash

from contextfs import greenwait
from contextfs.errors import IndexCorrupt, StoreUnavailable
from contextfs.index.compact import TRAIN_UNITS, CompactVectorIndex, load_vectors
from contextfs.index.digests import UnitDigests, digest_int
from contextfs.index.embed import Embedder
from contextfs.index.text import TextHit, TextIndex
from contextfs.index.units import Unit
from contextfs.index.vectors import VectorIndex
from contextfs.memory.background import BACKGROUND, FOREGROUND, Service
from contextfs.memory.service import Memory
from contextfs.model import Change, Node
from contextfs.search.images import ImageVectors
from contextfs.search.passages import (
    SESSION_TYPE,
    Passage,
    node_passages,
    passages_of,
    without_quoted_turns,
)
from contextfs.store.backend import FeedRows, SharedVectors

log = logging.getLogger(__name__)

# Past this many units the hnswlib index (about 1.9 KB of RAM a unit) becomes the compact
# one (about 100 B a unit), at the next checkpoint or between a rebuild's batches; a store
# that shrinks again keeps it until a `reindex`. 100k units of hnswlib are about 180 MB.
COMPACT_UNITS = 100_000
SLOTS = 8192  # label = node_id * SLOTS + slot; slot 0 = L0, 1 = L1, 2 + c = L2 chunk c
_TIER_SLOT = {"L0": 0, "L1": 1}


def unit_label(u: Unit) -> int:
    slot = _TIER_SLOT.get(u.tier, 2 + min(u.chunk, SLOTS - 3))
    return u.node_id * SLOTS + slot


def label_node(label: int) -> int:
    return label // SLOTS


def label_chunk(label: int) -> int:
    """The passage number of an L2 unit's label (0 for L0/L1)."""
    return max(0, label % SLOTS - 2)


def label_tier(label: int) -> str:
    slot = label % SLOTS
    return "L0" if slot == 0 else "L1" if slot == 1 else "L2"


def label_unit(label: int) -> tuple[int, str, int]:
    """(node id, tier, passage number) of a label: `label_node`, `label_tier` and
    `label_chunk` at once (a search takes apart hundreds)."""
    nid, slot = divmod(label, SLOTS)
    return (nid, "L0", 0) if slot == 0 else (nid, "L1", 0) if slot == 1 else (nid, "L2", slot - 2)


def unit_prefix(n: Node) -> str:
    """BM25 units carry their node's type and name ("preference editor: "); a session
    archive's turns carry their speaker and date instead (see `passages`)."""
    if n.type == SESSION_TYPE:
        return ""
    name = (n.name or n.type).replace("-", " ")
    return f"{n.type} {name}: "


def units_of(n: Node, *, prefix: str = "") -> list[Unit]:
    """The units of a node: L0, L1 and one per passage of L2 (a turn of a session archive,
    a chunk of any other L2), skipping empty tiers."""
    return _tier_units(n.id, n.l0, n.l1, node_passages(n), prefix)


def _tier_units(nid: int, l0: str, l1: str, passages: Sequence[Passage], prefix: str) -> list[Unit]:
    if not (passages and passages[0].turn_ids):  # no session archive: its quotes of turns
        l0, l1 = without_quoted_turns(l0), without_quoted_turns(l1)  # are found as turns
    units = [
        Unit(nid, tier, 0, prefix + body.strip())
        for tier, body in (("L0", l0), ("L1", l1))
        if body.strip()
    ]
    # (a chunk of nothing but quotes of turns has no words of its own to index)
    units += [
        Unit(nid, "L2", p.index, prefix + p.index_text())
        for p in passages
        if p.plain is None or p.plain
    ]
    return units


# A bulk commit to the BM25 index adds at most this many documents (a huge node comes in
# slices), so the text lock is never held long: an fsync waits for it.
TEXT_SLICE_UNITS = 500
# What fsync and the urgent lane stage (searched at once from memory) is committed to
# tantivy this long after the first of it at most, or once this many units wait (a search
# cuts the staged units into terms, about 40 us each): a commit costs 8-20 ms whatever it
# holds, and holds the text lock that an fsync waits for. A bulk slice commits at once.
TEXT_COMMIT_SECONDS = 1.0
TEXT_COMMIT_UNITS = 500
# The BM25 cursor reads the outbox at most this often while only saves through the mount
# woke it (the urgent lane has applied them already) and its last read left nothing for
# the next job: reading at each such wake cost two DuckDB queries a save on the event
# loop (one for the row, one finding none; a sixth of the loop's busy time in a run of
# creates with fsync, by py-spy: 191 of 1,151 samples, 26 of 1,212 with this). Any other
# wake (a background service's commit, another mount's, a change that is not a node's)
# has it read at once.
TEXT_POLL_SECONDS = 0.25
# A rebuild headed for the compact index puts its vectors in this many at a time
# (`Indexer._put_held`): faiss adds 300 units in about the time it adds 2,000
HELD_UNITS = 8192
# A job (a batch of at most `batch` outbox rows) holds about this much text at most: the
# rows of a huge import are cut into jobs that each finish, move their cursor, and let the
# next one start; the trio thread reads a job's texts, and a worker cuts them holding the
# GIL, so a small job keeps both pauses short.
JOB_BYTES = 2 * 1024 * 1024
# An embedding slice aims at this long (its size follows the measured rate), so a stop,
# an urgent write or the BM25 side never waits for more than about one slice.
SLICE_SECONDS = 0.5
SLICE_UNITS = (1, 512)  # the bounds of a slice, in units
# Embedding threads run below the mount's priority (nice), so a backlog takes the cores
# the filesystem leaves: the slices' dedicated thread, and the OpenMP team it starts.
EMBED_NICE = 10
URGENT_NODES = 16  # foreground nodes taken into one urgent job
BUSY_CHECKPOINT_SECONDS = 60.0  # while a backlog drains, the vectors are saved this often
MODELS_FIRST = 30.0  # at most this long an inbox import waits for the models to load
# The models start loading once the mount has served no request for LOAD_QUIET_SECONDS
# (a `find` right after the mount goes first: `Foreground.quiet`), LOAD_WAIT_MOST at most.
LOAD_QUIET_SECONDS = 0.15
LOAD_WAIT_MOST = 3.0


def _log_failure(exc: Exception, msg: str, pause: float) -> None:
    """A failed batch: a store server away (PostgreSQL) is expected and said in one
    warning line; anything else is an error with its traceback."""
    if isinstance(exc, StoreUnavailable):
        log.warning(msg + " (the store is away: %s)", pause, exc.reason)
    else:
        log.exception(msg, pause)


@dataclass(slots=True)
class _Doc:
    """A live node as the trio thread read it; a worker thread cuts it into units."""

    node: Node
    id: int
    version: int
    seq: int  # snapshot order: a bigger seq read the node later
    type: str
    prefix: str  # what BM25 units carry before their text (`unit_prefix`)
    meta: tuple[str, str, str]  # (owner, type, path) for the text index
    l0: str
    l1: str
    l2: str
    units: list[Unit] | None = None  # the vector side's, once cut
    text_units: list[Unit] | None = None  # the BM25 side's

    def cut(self) -> None:
        """Worker thread: the units of both sides (pure; the passages are cached)."""
        if self.units is None:
            passages = passages_of(self.id, self.version, self.type, self.l2)
            self.units = _distinct(_tier_units(self.id, self.l0, self.l1, passages, ""))
            self.text_units = _distinct(
                _tier_units(self.id, self.l0, self.l1, passages, self.prefix)
            )

    @property
    def size(self) -> int:
        return len(self.l0) + len(self.l1) + len(self.l2)

    @property
    def key(self) -> tuple:
        """What the BM25 documents of the node are made of (equal keys: equal documents)."""
        return (self.version, self.prefix, self.meta, self.l0, self.l1)


@dataclass(slots=True)
class _Job:
    """Nodes on their way into the indexes, applied in bounded slices.

    A bulk job completes the outbox rows up to `upto`; an urgent job (what a person or an
    agent just saved) and a rebuild's batch complete none."""

    docs: list[_Doc]
    gone: dict[int, int]  # node id -> snapshot seq, for nodes no longer live
    upto: int | None = None
    urgent: bool = False
    images: tuple[list, list[int]] = ([], [])
    text_at: int = 0  # the next doc of the text side, and the next unit within it
    text_off: int = 0
    gone_done: bool = False
    todo: list[tuple[Unit, int]] | None = None  # vector units to embed, with their seq
    vec_at: int = 0
    changes: int = 0  # outbox seqs the job covers (a bulk job), for the backlog's estimate
    resets: int = 0  # the BM25 cursor's `_text_resets` when it read the job
    rebuild_at: int | None = None  # a vector rebuild's batch: where in `_rebuild` it starts
    more: bool = False  # rows after `upto` were read and left for the next job (a bulk job)

    @property
    def remaining(self) -> int:
        """Units still to embed (0 before the job is prepared)."""
        return 0 if self.todo is None else len(self.todo) - self.vec_at


class Indexer(Service):
    """Keeps hnswlib and tantivy caught up with the outbox. run() in the nursery, until
    stop(); woken by every commit that changed a node (`Transactions.subscribe`).

    Three lanes, each advanced one bounded slice per round: urgent (nodes saved through
    the mount by a person or an agent: BM25 at once, then their vectors), the BM25
    cursor over the outbox (`text_generation`), and the vector cursor (`generation`).
    Work from background services (an inbox import, consolidation: `BACKGROUND`) only
    moves with the cursors. A node applied by the urgent lane is not set back by a bulk
    slice that read it earlier (`_newest`)."""

    CHECKPOINT_SECONDS = 20.0

    def __init__(
        self,
        memory: Memory,
        index_dir: Path,
        embedder_factory: Callable[[], Embedder],
        *,
        model_name: str,
        batch: int = 64,
        images: ImageVectors | None = None,
        compact_units: int = COMPACT_UNITS,
        shared: SharedVectors | None = None,
    ) -> None:
        super().__init__()
        self.feed: FeedRows = memory.store  # the outbox: what changed, in commit order
        # a shared store's vectors: what another mount embedded is taken, not embedded
        self.shared = shared
        self.embedded_here = 0  # units this indexer ran through the model
        self.shared_taken = 0  # units whose vectors came from the shared store
        self.compact_units = compact_units
        self.images = images  # CLIP image vectors (search.images), when configured
        self._images_fill = False  # the CLIP model is in, its saved vectors were not usable
        self.memory = memory
        self.dir = Path(index_dir)
        self.embedder_factory = embedder_factory
        self.model_name = model_name
        self.batch = batch
        # asked once the model is in, before `.status` says ready (`add_warm_up`)
        self._warm_ups: list[Callable[[], object]] = []
        self._closing = False  # set as `run` ends: late failures of abandoned threads are quiet
        self.lock = threading.Lock()  # hnswlib and the digests: one user at a time
        self.text_lock = threading.Lock()  # tantivy: one user at a time
        self.embedder: Embedder | None = None
        self.vectors: VectorIndex | CompactVectorIndex | None = None
        self.text: TextIndex | None = None
        # label -> xxh64 of the unit's text, for every unit in the vectors; a node's
        # units are the labels in its range (`labels_of`)
        self.digests = UnitDigests()
        self.generation = 0  # everything up to this outbox seq is in the vectors
        self.saved_generation = 0
        self.state = "opening the text index"
        self.error: str | None = None
        self.dead = False  # the text index could not open: nothing will ever answer
        self.text_generation = 0  # everything up to this outbox seq is in the BM25 index
        # what of it is in tantivy's files (a commit); a failed write goes back to it
        self._text_durable = 0
        self._text_resets = 0  # moves at each such failure: a cursor job read before ends
        self._text_failure: str | None = None  # the last BM25 write failed (and why)
        self.epoch = 0  # moves whenever either index changed (caches of answers key on it)
        self._vec_epoch = self._saved_epoch = 0  # moves when the vectors changed
        self._seq = 0  # snapshot counter (`_Doc.seq`)
        self._urgent: dict[int, None] = {}  # foreground node ids, in commit order
        self._urgent_vec: dict[int, None] = {}  # those in BM25, their vectors next
        self._urgent_job: _Job | None = None
        # the urgent lane's nodes a restart found in the checkpoint (`_urgent_ids`): done
        # by the lane when it has nothing fresher, so a node saved after a remount never
        # waits behind the hundreds saved before it
        self._resumed: dict[int, None] = {}
        self._text_job: _Job | None = None
        self._vec_job: _Job | None = None
        # node id -> seq of the urgent snapshot applied, per side, until a bulk slice that
        # read the node later passes it
        self._text_seen: dict[int, int] = {}
        # node id -> `_Doc.key` the urgent lane put in BM25: fsync's own apply is not
        # repeated by the lane, nor by the cursor when it reaches an unchanged node
        self._text_as: dict[int, tuple] = {}
        self._vec_seen: dict[int, int] = {}
        self._rebuild: list[int] | None = None  # live ids a rebuild of the vectors walks
        self._rebuild_at = 0
        self._rebuild_target = 0
        self._rebuild_since = 0.0  # monotonic
        self._text_rebuilding = False  # `_rebuild_text` runs: the BM25 cursor waits
        self._text_wake = trio.Event()  # set by every wake: `_text_lane` looks for work
        self._text_polled = -math.inf  # when the BM25 cursor last read the outbox
        self._text_more = False  # whether that read left rows for the next job
        self._text_skipped = False  # whether the last step left the outbox unread (too soon)
        self._text_hurry = False  # a wake the urgent lane does not cover: read it at once
        # A rebuild headed past compact_units holds its vectors (with their digests) and
        # puts them in HELD_UNITS at a time (`_put_held`): the compact index is built
        # straight from the first TRAIN_UNITS, never through hnswlib, and faiss adds in
        # big batches (an add costs about the same for 300 units as for 2,000). Held units
        # are in neither the vectors nor the digests: a search meanwhile does not see them.
        self._holding = False
        self._held: list[tuple[list[int], np.ndarray, list[int]]] = []
        self._held_units = 0
        self._held_nodes: set[int] = set()
        self.rate = 0.0  # units embedded per second, smoothed
        self.char_rate = 0.0  # characters embedded per second, smoothed (sizes the slices)
        self._embed_pool: ThreadPoolExecutor | None = None
        self._units_per_change = 0.0  # smoothed: how many units a queued change brings
        self._text_open = trio.Event()
        self._progress = trio.Event()
        self.unsubscribe = memory.transactions.subscribe(self._committed)

    # ---- lifecycle ----------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """Both sides answer: the model is loaded and both indexes are open."""
        return self.vectors is not None and self.text is not None and self.embedder is not None

    @property
    def _unsaved(self) -> bool:
        """The vectors changed since the last checkpoint (a job half done counts: its
        units are kept by digest and not embedded again after a restart)."""
        return (
            self.generation != self.saved_generation
            or self._vec_epoch != self._saved_epoch
            or bool(self._urgent or self._urgent_vec or self._urgent_job or self._resumed)
        )

    @property
    def vector_kind(self) -> str | None:
        """Which vector index answers: "hnswlib", "compact", or None before the model."""
        if self.vectors is None:
            return None
        return "hnswlib" if isinstance(self.vectors, VectorIndex) else "compact"

    @property
    def searchable_generation(self) -> int:
        """Every commit up to this outbox seq is found by what is loaded: both sides once
        the model is in (and the vectors are not being rebuilt), BM25 alone before."""
        if self.ready:
            vectors = self.generation if self._rebuild is None else 0
            return min(vectors, self.text_generation)
        return self.text_generation

    @property
    def shown_state(self) -> str:
        """`state` as `.status` shows it: never "ready" while work is queued."""
        if self.state == "ready" and self.busy:
            return "indexing (search answers; what is queued joins as it is indexed)"
        return self.state

    @property
    def vector_rebuilding(self) -> bool:
        """The vectors are being built from scratch (they cover part of the store)."""
        return self._rebuild is not None

    @property
    def vector_coverage(self) -> tuple[int, int] | None:
        """While the vectors are built from scratch: (nodes they hold so far, nodes in
        all); None otherwise. The nodes of the batch being embedded count once it is
        done. Read from other threads: a moment's snapshot."""
        rebuild, job = self._rebuild, self._vec_job
        if rebuild is None:
            return None
        pending = (len(job.docs) if job is not None else 0) + len(self._held_nodes)
        return max(0, min(self._rebuild_at, len(rebuild)) - pending), len(rebuild)

    @property
    def busy(self) -> bool:
        """Work is queued or under way on either side."""
        committed = self.memory.generation
        return bool(
            self._urgent
            or (self.ready and (self._urgent_vec or self._resumed))
            or self._urgent_job
            or self._text_job
            or self._vec_job
            or self._rebuild is not None
            or self.text_generation < committed
            or (self.ready and self.generation < committed)
        )

    def _committed(self, changes: Sequence[Change]) -> None:
        """Every commit wakes the indexer once (any change moves the store generation it
        reports against); nodes saved through the mount go ahead of any bulk backlog."""
        covered = not BACKGROUND.get()
        if covered:
            for c in changes:
                if c.kind == "node" and c.node_id is not None:
                    self._urgent[c.node_id] = None
                else:
                    covered = False
        if covered:  # the urgent lane applies it: the BM25 cursor may read it later
            Service.wake(self)
        else:
            self.wake()

    def wake(self) -> None:
        """Look for work now (any thread): the BM25 cursor reads the outbox at once."""
        self._text_hurry = True
        super().wake()

    async def run(self) -> None:
        """BM25 first: the text index opens (and catches up) at once, while the embedding
        model loads in the background; the vectors join when it is in. A model that does
        not load leaves BM25 working (`error` says why)."""
        try:
            rebuild = await trio.to_thread.run_sync(self._open_text, abandon_on_cancel=True)
        except Exception as exc:  # noqa: BLE001 - a broken index must not kill the mount
            self.dead = True
            self._text_open.set()
            self._failed(f"failed: {exc}", exc)
            return
        self._text_open.set()  # fsync's own writes go in from now on, even mid-rebuild
        last_save = time.monotonic()
        try:
            async with trio.open_nursery() as nursery:
                # the model loads while BM25 is rebuilt, and the vectors are rebuilt beside
                # it once the model is in (a new host: all three at once, on two threads)
                # (each a task of its own: run by greenwait, as the service is)
                nursery.start_soon(greenwait.task, self._load_model)
                if rebuild:  # emptied here, before anything else of the mount runs
                    nursery.start_soon(
                        greenwait.task, self._rebuild_text, self._start_text_rebuild()
                    )
                nursery.start_soon(greenwait.task, self._text_lane)
                self._moved()
                pause = 1.0
                while not self.stopping:
                    self._rearm()  # fresh before looking: a wake meanwhile counts
                    try:
                        worked = await self._step()
                    except Exception as exc:  # noqa: BLE001 - the mount outlives the indexer
                        # The slice is not marked done: its job is read again after a
                        # pause that grows to a minute; `.status` says what failed.
                        failed = self._vec_job
                        if failed is not None and failed.rebuild_at is not None:
                            self._rebuild_at = min(self._rebuild_at, failed.rebuild_at)
                        self._urgent_job = self._vec_job = None
                        self.error = f"indexing failed: {exc!r}"
                        _log_failure(exc, "indexer: a batch failed; retrying in %.0f s", pause)
                        await self._pause(pause)
                        pause = min(60.0, pause * 2)
                        continue
                    if worked and self._text_failure is None and self._failing():
                        log.info("indexer: working again after %s", self.error)
                        self.error = None  # recovered: `.status` no longer says it failed
                    pause = 1.0
                    since = time.monotonic() - last_save
                    due = BUSY_CHECKPOINT_SECONDS if worked else self.CHECKPOINT_SECONDS
                    if self.ready and self._unsaved and since > due:
                        await self._yield()  # a checkpoint writes the whole index
                        await self._checkpoint()
                        last_save = time.monotonic()
                    if worked:
                        await trio.sleep(0)  # a checkpoint: requests go between slices
                        continue
                    await self._idle(self.CHECKPOINT_SECONDS / 2)
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                if self.ready and self._unsaved:
                    await self._checkpoint()
                self._closing = True
                if self.text is not None:
                    with self.text_lock:
                        self.text.close()  # release tantivy's writer lock
                if self._embed_pool is not None:
                    if self.shared is not None:  # after the embedding in progress, if any
                        self._embed_pool.submit(self.shared.close)
                    self._embed_pool.shutdown(wait=False)
                elif self.shared is not None:
                    self.shared.close()

    async def _text_lane(self) -> None:
        """The BM25 cursor's own loop, beside `run`'s (the urgent lane and the vectors): a
        change is searchable by its words after a BM25 slice, never after an embedding
        slice of the vectors (0.5 s or more on busy cores; another mount's writes waited
        behind them for up to 3 s). Woken by every wake of the indexer."""
        pause = 1.0
        while not self.stopping:
            self._text_wake = trio.Event()
            await self._yield()  # an fsync in flight goes first (`FOREGROUND`)
            try:
                worked = self.text is not None and await self._text_step()
                due = self._text_commit_due()
                if due is not None and due <= 0:
                    await trio.to_thread.run_sync(self._commit_text)
                    worked = True
            except Exception as exc:  # noqa: BLE001 - the mount outlives the indexer
                self._text_job = None  # read again after the pause
                self.error = f"indexing failed: {exc!r}"
                _log_failure(exc, "indexer: a BM25 batch failed; retrying in %.0f s", pause)
                await self._pause(pause)
                pause = min(60.0, pause * 2)
                continue
            pause = 1.0
            if worked:
                if self._text_failure is None and self._failing():
                    log.info("indexer: BM25 working again after %s", self.error)
                    self.error = None
                self._moved()
                await trio.sleep(0)  # requests go between slices
                continue
            wait = self.CHECKPOINT_SECONDS / 2
            if due is not None and due > 0:
                wait = min(wait, due)
            if self._text_skipped:  # the outbox left unread: read it once it may, or at a
                wait = min(wait, max(0.0, self._text_poll_due()))  # wake that hurries it
            with trio.move_on_after(wait):
                await self._text_wake.wait()

    def _failing(self, what: str = "indexing failed") -> bool:
        """Whether `.status`'s index error is one of `what` (a failed batch, a failed
        checkpoint), which the lane that failed clears once it works again."""
        return self.error is not None and self.error.startswith(what)

    def _text_failed(self, exc: BaseException) -> None:
        """Under `text_lock`: a write to the BM25 index failed. What tantivy had not
        committed may be gone with it (a rollback drops it, and writing it again may fail
        too), so the cursor goes back to the last commit and applies every change after it
        again, taking nothing as in the index already; `.status` says it failed until a
        commit succeeds."""
        self.text_generation = self._text_durable
        self._text_as.clear()
        self._text_seen.clear()
        self._text_resets += 1
        self._text_failure = repr(exc)
        self.error = f"indexing failed: {exc!r}"

    def _text_poll_due(self) -> float:
        """Seconds until the BM25 cursor may read the outbox again (0 or less: now)."""
        if self._text_more or self._text_hurry or self._text_job is not None:
            return 0.0
        return self._text_polled + TEXT_POLL_SECONDS - time.monotonic()

    def _text_commit_due(self) -> float | None:
        """Seconds until what is staged in the BM25 index must be committed (0 or less:
        now), or None when nothing is."""
        text = self.text
        since = text.staged_since if text is not None else None
        if since is None or text is None:
            return None
        if text.staged_units >= TEXT_COMMIT_UNITS:
            return 0.0
        return since + TEXT_COMMIT_SECONDS - time.monotonic()

    def _durable_text_generation(self) -> int:
        """Worker thread: what is staged in the BM25 index committed; the BM25 cursor,
        read after (under the lock that staging takes: the cursor moves after its
        slice is staged), so every change it covers is in tantivy's files."""
        with self.text_lock:
            try:
                if self.text is not None and self.text.staged_since is not None:
                    self._commit_locked()
            except Exception as exc:  # noqa: BLE001 - the cursor went back to the last commit
                log.warning("indexer: BM25 commit failed (%r)", exc)
            return self.text_generation

    def _commit_locked(self) -> None:
        """Under `text_lock`: what waits in the BM25 writer committed; a failure makes the
        cursor go back to the last commit (`_text_failed`) and is raised."""
        if self.text is None:
            return
        try:
            self.text.commit()
        except BaseException as exc:
            self._text_failed(exc)
            raise
        self._text_durable = self.text_generation
        self._text_failure = None

    def _set_wake(self) -> None:
        super()._set_wake()
        self._text_wake.set()

    async def _step(self) -> bool:
        """One slice of each lane that has work but BM25's (`_text_lane`); whether there
        was any."""
        worked = False
        if self._urgent or self._urgent_vec or self._urgent_job is not None or self._resumed:
            worked = await self._urgent_step()
        await self._yield()  # an fsync in flight goes first (`FOREGROUND`)
        if self.ready:
            if self._images_fill:
                assert self.images is not None  # only images set it
                self._images_fill = False
                todo, gone = self.images.collect(self.memory, self.images.all_images(self.memory))
                await trio.to_thread.run_sync(self.images.apply, todo, gone)
                worked = True
            worked = await self._vector_step() or worked
        self._moved()
        return worked

    def _moved(self) -> None:
        """Wake whoever waits for progress (`wait_searchable`, tests)."""
        self._progress.set()
        self._progress = trio.Event()

    async def _load_model(self) -> None:
        try:
            await FOREGROUND.quiet(LOAD_QUIET_SECONDS, LOAD_WAIT_MOST)
            # bulk work (an inbox import) waits meanwhile, at most MODELS_FIRST seconds:
            # what people save while the model loads gets its vectors that much sooner
            with FOREGROUND.loading(MODELS_FIRST):
                embedder = await self._load_models()
                # The rebuild runs in `run`'s loop as the vector lane's jobs, never beside
                # them: both would index the same rows.
                if self.generation == 0 and self.memory.generation > 0:
                    self._rebuild_target = self.memory.generation
                    self._rebuild = self.memory.live.ids()  # ids only, by SQL (memory.heads)
                    self._rebuild_at = 0
                    self._rebuild_since = time.monotonic()
                    if self.images is not None:
                        self.images.clear()
                    self._images_fill = False
                    log.info("indexing %d nodes from scratch", len(self._rebuild))
                    self.state = "rebuilding the vectors (BM25 answers meanwhile)"
                self.embedder = embedder
            if self._rebuild is None and self._warm_ups:
                self.state = "warming up (questions are answered meanwhile)"
                await trio.to_thread.run_sync(self._warm_up, abandon_on_cancel=True)
            if self._rebuild is None:
                self.state = "ready"
            log.info(
                "indexer ready (%s, generation %d of %d)",
                embedder.name,
                self.generation,
                self.memory.generation,
            )
        except Exception as exc:  # noqa: BLE001 - a broken model must not kill the mount
            self.embedder = self.vectors = None
            self._failed(f"vectors failed: {exc}; BM25 answers alone", exc)
        self.wake()

    async def _load_models(self) -> Embedder:
        """The embedding model (and CLIP's) loaded and the vector index opened, in worker
        threads; abandon_on_cancel: an unmount while they load must not wait for them."""
        embedder = await trio.to_thread.run_sync(self.embedder_factory, abandon_on_cancel=True)
        if self.images is not None:
            self.state = "loading the CLIP model (BM25 answers meanwhile)"
            await trio.to_thread.run_sync(self.images.load_model, abandon_on_cancel=True)
        self.state = "opening the vector index"
        await trio.to_thread.run_sync(self._open_vectors, embedder, abandon_on_cancel=True)
        return embedder

    def add_warm_up(self, warm_up: Callable[[], object]) -> None:
        """Run `warm_up` in a worker thread once the model is in, before `.status` says
        ready (search.Searcher's: the first questions after a mount find what they touch
        loaded)."""
        self._warm_ups.append(warm_up)

    def _warm_up(self) -> None:
        """Worker thread: the warm-ups, whose failure costs only speed."""
        t0 = time.monotonic()
        try:
            for warm_up in self._warm_ups:
                warm_up()
        except Exception as exc:  # noqa: BLE001 - a cold first question, not a dead index
            if self._closing:  # the mount stopped under it: nothing was lost
                log.info("search warm-up stopped by the unmount")
                return
            log.warning("search warm-up failed: %s", exc)
            return
        log.info("search warmed up in %.2f s", time.monotonic() - t0)

    def _failed(self, state: str, exc: Exception) -> None:
        self.state = state
        self.error = str(exc)
        log.error("indexer: %s", state)
        self._moved()

    async def sync_nodes(self, node_ids: Sequence[int], timeout: float) -> bool:
        """fsync's promise (SPEC §3): these nodes as they are now are in the BM25 index
        when this returns True, whatever the backlog (the text lane's slices are short);
        their vectors follow through the urgent lane. Never waits for the model."""
        with trio.move_on_after(timeout):
            await self._text_open.wait()
            if self.text is None:
                return False
            for nid in node_ids:  # the lane's vectors, and a retry if BM25 fails here
                self._urgent.setdefault(nid, None)
            Service.wake(self)  # the BM25 side is applied here
            live, gone = self._snapshot(node_ids)
            job = _Job(live, gone, urgent=True)
            try:
                await trio.to_thread.run_sync(self._text_slice, job, None)
            except Exception as exc:  # noqa: BLE001 - the write is durable; the index is derived
                self.error = f"indexing failed: {exc!r}"
                log.warning("fsync: node(s) %s not in the text index (%r)", list(node_ids), exc)
                return False
            return True
        return False

    async def wait_settled(self, timeout: float) -> bool:
        """Wait until both sides (BM25 alone while the model loads) have caught up with
        every commit so far (tests, `contextfs search` through a mount)."""
        target = self.memory.generation
        with trio.move_on_after(timeout):
            while not self.dead and not self.stopping:
                vectors_behind = self.ready and (
                    self.generation < target or self._rebuild is not None
                )
                urgent = (
                    self._urgent
                    or self._urgent_vec
                    or self._urgent_job is not None
                    or (self.ready and self._resumed)
                )
                if self.text_generation >= target and not vectors_behind and not urgent:
                    return True
                self.wake()
                await self._progress.wait()
        return False

    # ---- opening, rebuilding, saving ---------------------------------------------------

    def _meta_path(self) -> Path:
        return self.dir / "index.json"

    def _data_path(self) -> Path:
        return self.dir / "vectors.f16"  # the exact vectors of a compact index

    def _read_meta(self) -> dict:
        try:
            meta = json.loads(self._meta_path().read_text())
        except FileNotFoundError:
            return {}
        except (ValueError, OSError) as exc:
            log.warning("index.json not usable (%s); rebuilding", exc)
            return {}
        return meta if isinstance(meta, dict) else {}

    def _open_text(self) -> bool:
        """Worker thread, at start: the BM25 index; whether it must be rebuilt (missing or
        unusable: `_rebuild_text`, which needs no model, so it takes seconds)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        for tmp in self.dir.glob("index.json.*.tmp"):  # a save cut short by a crash
            tmp.unlink(missing_ok=True)
        meta = self._read_meta()
        generation = int(meta.get("text_generation", meta.get("generation", 0)) or 0)
        try:
            self.text = TextIndex(self.dir / "text")
        except (IndexCorrupt, ValueError, OSError) as exc:
            if "schema does not match" in str(exc):  # an older version's fields
                log.info("text index of an older layout; rebuilding it")
            else:
                log.warning("text index not usable (%s); rebuilding it", exc)
            shutil.rmtree(self.dir / "text", ignore_errors=True)
            self.text = TextIndex(self.dir / "text")
            generation = 0
        self.text.read_ahead()
        if generation > self.memory.generation:
            generation = 0  # ahead of the store: not this store's index
        vectors = int(meta.get("generation", 0) or 0)  # shown until the vectors open
        if vectors <= self.memory.generation:
            self.generation = self.saved_generation = vectors
        for nid in meta.get("urgent", ()) if isinstance(meta.get("urgent"), list) else ():
            self._resumed.setdefault(int(nid), None)
        self.text_generation = self._text_durable = generation
        self.state = "loading the embedding model (BM25 answers meanwhile)"
        return generation == 0 and self.memory.generation > 0

    def _start_text_rebuild(self) -> tuple[int, list[int], float]:
        """Trio thread: the BM25 index emptied and the nodes to put back listed, at one
        moment: what fsync applies from here on (the urgent lane) stays, the rebuild's
        older reading of a node does not replace it (`_newest`). (target, ids, start)."""
        self._text_rebuilding = True
        target = self.memory.generation
        ids = self.memory.live.ids()  # ids only, by SQL (memory.heads)
        with self.text_lock:
            assert self.text is not None  # `_open_text` opened it
            self.text.clear()
        return target, ids, time.monotonic()

    async def _rebuild_text(self, start: tuple[int, list[int], float] | None = None) -> None:
        """Trio thread: a missing or unusable BM25 index is rebuilt from the live nodes
        (cheaper than replaying the whole outbox), a batch at a time, while the model
        loads and the vectors are rebuilt; an unmount meanwhile leaves it for the next
        mount, which starts it again. The BM25 cursor waits for it."""
        try:
            await self._rebuild_text_from_nodes(*(start or self._start_text_rebuild()))
        finally:
            self._text_rebuilding = False
            self.wake()  # the cursor takes over (what was committed meanwhile)

    async def _rebuild_text_from_nodes(self, target: int, ids: list[int], t0: float) -> None:
        """A failed BM25 write meanwhile (the rebuild's, or an fsync's: a full disk) drops
        what the writer held since its last commit (`_text_failed` counts it): the rebuild
        goes back to the first node after that commit, after a pause if it was its own."""
        i = done = 0  # the nodes before `done` are in a commit
        resets, pause = self._text_resets, 1.0
        while i < len(ids):
            if self.stopping:
                return
            if self.embedder is None:  # once the model is in, `state` is the vectors'
                self.state = f"rebuilding the text index ({i}/{len(ids)} nodes)"
            live, gone = self._snapshot(ids[i : i + 256])
            job = _Job(live, gone)
            try:
                # a commit costs 30-100 ms: one every REBUILD_COMMIT_NODES nodes, not a
                # slice (a new host's 100,000 nodes made 800 commits, most of its rebuild)
                while not await trio.to_thread.run_sync(
                    self._text_slice, job, TEXT_SLICE_UNITS, "hold"
                ):
                    pass
                if _rebuild_commits(i, 256, len(ids)):
                    await trio.to_thread.run_sync(self._commit_text)
                    if self._text_resets == resets:
                        done = i + 256
            except Exception as exc:  # noqa: BLE001 - the mount outlives the indexer
                log.warning("indexer: BM25 rebuild failed (%r); again in %.0f s", exc, pause)
                await self._pause(pause)
                pause = min(60.0, pause * 2)
                if self._text_resets != resets:
                    resets, i = self._text_resets, done
                continue  # this batch again (or from the last commit)
            pause = 1.0
            if self._text_resets != resets:
                resets, i = self._text_resets, done
                continue
            i += 256
        self.text_generation = self._text_durable = target
        log.info("text index rebuilt: %d nodes in %.1f s", len(ids), time.monotonic() - t0)
        if self.embedder is None:
            self.state = "loading the embedding model (BM25 answers meanwhile)"

    def _commit_text(self) -> None:
        """Worker thread: what waits in the BM25 writer becomes searchable."""
        with self.text_lock:
            self._commit_locked()

    def open_sync(self, embedder: Embedder) -> None:
        """Open both indexes in the calling thread, without trio (scripts, offline use);
        the text index catches up if it must, the vectors are used as they are."""
        if self._open_text():
            trio.run(self._rebuild_text)
        if self.images is not None:
            self.images.load_model()
        self._open_vectors(embedder)
        self.embedder = embedder
        self.state = "ready"

    def _open_vectors(self, emb: Embedder) -> None:
        """Worker thread, once the model is in: the vector snapshot if it is whole and was
        built with this model, else an empty index (rebuilt by `run`)."""
        meta = self._read_meta()
        vectors: VectorIndex | CompactVectorIndex = VectorIndex(emb.dim)
        digests, generation = UnitDigests(), 0
        try:
            if not meta:
                raise FileNotFoundError("no index yet")
            if meta.get("model") != self.model_name or meta.get("dim") != emb.dim:
                raise IndexCorrupt(
                    f"index built with {meta.get('model')}/{meta.get('dim')}, "
                    f"now {self.model_name}/{emb.dim}: rebuilding"
                )
            if meta.get("generation", 0) > self.memory.generation:
                raise IndexCorrupt("index is ahead of the store: rebuilding")
            snap = self.dir / meta["snapshot"]
            vectors = load_vectors(snap / "vectors.bin", emb.dim, self._data_path())
            digests = _load_digests(snap)
            generation = int(meta["generation"])
            snap_dir: Path | None = snap
        except FileNotFoundError:
            snap_dir = None
        except (IndexCorrupt, ValueError, KeyError, OSError) as exc:
            log.warning("index files not usable (%s); rebuilding the vectors", exc)
            vectors, digests, generation, snap_dir = VectorIndex(emb.dim), UnitDigests(), 0, None
        if self.images is not None and self.images.ready:
            self._images_fill = not self.images.load(snap_dir)
        with self.lock:
            self.vectors, self.digests = vectors, digests
            self.generation = self.saved_generation = generation

    def _fresh(self, why: str) -> None:
        self._meta_path().unlink(missing_ok=True)
        for old in self.dir.glob("snap-*"):
            shutil.rmtree(old, ignore_errors=True)
        shutil.rmtree(self.dir / "text", ignore_errors=True)
        self._data_path().unlink(missing_ok=True)
        assert self.embedder is not None  # the caller loaded it
        self.vectors = VectorIndex(self.embedder.dim)
        self._holding, self._held, self._held_units, self._held_nodes = False, [], 0, set()
        self.text = TextIndex(self.dir / "text")
        self.digests = UnitDigests()
        if self.images is not None:
            self.images.clear()
        self.generation = self.saved_generation = self.text_generation = 0
        self._text_durable = 0

    def _save(self) -> None:
        """Checkpoint: vectors and digests go to a new snapshot folder, then index.json
        names it (one atomic rename), then older snapshots go. What BM25 has staged is
        committed first: the BM25 cursor it records is in tantivy's files."""
        text_generation = self._durable_text_generation()  # never ahead of tantivy's files
        with self.lock:
            generation, epoch = self.generation, self._vec_epoch
            snap = self.dir / f"snap-{generation}-{time.time_ns()}"
            tmp = self.dir / f"index.json.{snap.name}.tmp"  # never shared by two saves
            try:
                self._save_to(snap, tmp, generation, text_generation)
            except BaseException:
                # (a full disk): the last whole checkpoint stays the one `index.json` names
                shutil.rmtree(snap, ignore_errors=True)
                tmp.unlink(missing_ok=True)
                raise
        os.replace(tmp, self._meta_path())
        for old in self.dir.glob("snap-*"):
            if old.name != snap.name:
                shutil.rmtree(old, ignore_errors=True)
        self.saved_generation, self._saved_epoch = generation, epoch

    def _save_to(self, snap: Path, tmp: Path, generation: int, text_generation: int) -> None:
        """Under the lock: `_save`'s snapshot folder and the `index.json` that names it,
        written to `tmp`."""
        snap.mkdir()
        self._put_held()
        self._maybe_compact()
        assert self.vectors is not None  # saved once open
        self.vectors.save(snap / "vectors.bin")
        self.digests.save(snap / "digests.npy")
        if self.images is not None:
            self.images.save(snap)
        assert self.embedder is not None  # saved once the model is in
        tmp.write_text(
            json.dumps(
                {
                    "model": self.model_name,
                    "dim": self.embedder.dim,
                    "generation": generation,
                    "snapshot": snap.name,
                    "text_generation": text_generation,
                    # saved through the mount, vectors not in yet: first after a restart
                    "urgent": self._urgent_ids(),
                    "saved": time.time(),
                }
            )
        )

    async def _checkpoint(self) -> None:
        """`_save` in a worker thread, for the mount: one that fails (a full disk) changes
        nothing on disk, shows in `.status` (`index_error: checkpoint failed: ...`) and is
        tried again at the next checkpoint; the indexes in memory are whole meanwhile, and
        a crash before a checkpoint succeeds indexes again from the last one."""
        try:
            await trio.to_thread.run_sync(self._save)
        except Exception as exc:  # noqa: BLE001 - the mount outlives its index's copy on disk
            if not self._failing("checkpoint failed"):
                log.warning("indexer: checkpoint failed, tried again later (%r)", exc)
            self.error = f"checkpoint failed: {exc!r}"
            return
        if self._failing("checkpoint failed"):
            log.info("indexer: checkpoint written again")
            self.error = None

    def _urgent_ids(self) -> list[int]:
        """Nodes a restart puts first: those saved through the mount whose vectors are not
        in, and those the urgent lane did that the vector cursor has not passed yet (their
        `indexed_version`, kept in memory only, is shown again once the lane sees them;
        their units are not embedded twice)."""
        ids = list(self._urgent) + list(self._urgent_vec) + list(self._vec_seen)
        ids += list(self._resumed)
        if self._urgent_job is not None:
            ids += [d.id for d in self._urgent_job.docs]
        return list(dict.fromkeys(ids))[:10_000]

    def _maybe_compact(self) -> None:
        """Under the lock, at a checkpoint or between the batches of a rebuild: past
        `compact_units`, move the units from hnswlib into a compact index (a rebuild
        headed there builds it straight instead: `_put_held`). Its `vectors.f16` is new;
        no saved snapshot names the old one, if any (a compact index that loaded would not
        be an hnswlib one here)."""
        if not isinstance(self.vectors, VectorIndex):
            return
        if len(self.vectors) < max(1, self.compact_units):  # it trains on what there is
            return
        state, self.state = self.state, f"moving {len(self.vectors)} units to a compact index"
        t0 = time.monotonic()
        try:
            self.vectors = CompactVectorIndex.from_index(self.vectors, self._data_path())
        finally:
            self.state = state
        log.info(
            "vector index: %d units moved to the compact index in %.1f s",
            len(self.vectors),
            time.monotonic() - t0,
        )

    def search_text(
        self,
        query: str,
        k: int,
        *,
        path_prefix: str | None = None,
        types: tuple[str, ...] | None = None,
        require: str = "",
    ) -> list[TextHit]:
        """BM25's k best units (`TextIndex.search`), under the text index's lock; none
        while the text index is not open."""
        with self.text_lock:
            if self.text is None:
                return []
            return self.text.search(query, k, path_prefix=path_prefix, types=types, require=require)

    def snippets(self, question: str, texts: Sequence[str]) -> list[str]:
        """The part of each of these units' texts that best matches the question
        (`TextIndex.snippets`)."""
        text_index = self.text
        if text_index is None:
            return [text[:300] for text in texts]
        return text_index.snippets(question, texts)

    def labels_of(self, node_id: int) -> list[int]:
        """The labels of a node's units in the vector index (under the lock)."""
        return self.digests.in_range(node_id * SLOTS, (node_id + 1) * SLOTS)

    def labels_of_nodes(self, node_ids: Sequence[int], most: int) -> list[int] | None:
        """The labels of these nodes' units (under the lock), or None past `most`."""
        return self.digests.in_ranges([nid * SLOTS for nid in node_ids], SLOTS, most)

    def passage_counts(self, node_ids: Sequence[int]) -> dict[int, int]:
        """For the nodes the index holds units of (under the lock): how many L2 passages
        it holds, counted up to the last (a passage that repeats a tier or an earlier
        passage is indexed once, `_distinct`). 0: none, so the node's L2 is empty or is
        one passage that repeats its L0 or L1 (a short node). A search needs to know
        which nodes are one passage without reading their texts from the store."""
        # in numpy: a search asks this of a few hundred nodes
        ids = np.asarray(node_ids, dtype=np.int64)
        units, last = self.digests.last_in(ids * SLOTS, SLOTS)
        held = units > 0
        counts = np.maximum(0, last[held] - ids[held] * SLOTS - 1)
        return dict(zip(ids[held].tolist(), counts.tolist(), strict=True))

    def _compact_locked(self, done: int = 0, total: int = 0) -> None:
        """Between a rebuild's batches: `done` of its `total` nodes are in (the last:
        `done == total`, what is held goes in)."""
        with self.lock:
            units = len(self.vectors) if self.vectors is not None else 0
            units += self._held_units
            projected = units * total // done if done else 0
            self._holding = done < total and projected >= max(1, self.compact_units)
            if not self._holding:
                self._put_held()
            self._maybe_compact()

    # ---- the lanes ---------------------------------------------------------------------

    async def _urgent_step(self) -> bool:
        """Foreground nodes: BM25 at once, then (once the model is in) their vectors, a
        slice a round for a big node."""
        worked = False
        if not (self._urgent or self._urgent_vec or self._urgent_job) and self._resumed:
            for nid in list(self._resumed)[:URGENT_NODES]:  # nothing fresher: a batch
                del self._resumed[nid]
                self._urgent[nid] = None
        if self._urgent:
            ids = list(self._urgent)[:URGENT_NODES]
            for nid in ids:
                del self._urgent[nid]
                self._urgent_vec[nid] = None
            live, gone = self._snapshot(ids)
            await trio.to_thread.run_sync(self._text_slice, _Job(live, gone, urgent=True), None)
            worked = True
        job = self._urgent_job
        if job is None:
            if not self.ready or not self._urgent_vec:
                return worked
            ids = list(self._urgent_vec)[:URGENT_NODES]
            for nid in ids:
                del self._urgent_vec[nid]
            live, gone = self._snapshot(ids)
            job = _Job(live, gone, urgent=True, images=self._images_pending(ids))
            job.gone_done = True  # BM25 has them: this job is for the vectors
            self._urgent_job = job
        # a few units (a note saved): all of them now; many (a big file): a slice a round
        t0 = time.monotonic()
        done = False
        while not done and time.monotonic() - t0 < SLICE_SECONDS:
            done = await trio.to_thread.run_sync(self._vector_slice, job)
        if done:
            await trio.to_thread.run_sync(self._vector_finish, job)
            self._urgent_job = None
            self._indexed(job)
        return True

    async def _text_step(self) -> bool:
        """The BM25 cursor: one slice of the job after `text_generation` (none while the
        text index is rebuilt: it ends at the generation it started at, and the cursor
        goes on from there)."""
        if self._text_rebuilding:
            return False
        job = self._text_job
        if job is None:
            self._text_skipped = self._text_poll_due() > 0
            if self._text_skipped:
                return False
            self._text_hurry = False  # a wake from here on reads again
            resets = self._text_resets
            job = self._bulk_job(self.text_generation)
            self._text_polled = time.monotonic()
            self._text_more = job is not None and job.more
            if job is None:
                return False
            job.resets = resets
            self._text_job = job
        if await trio.to_thread.run_sync(self._text_slice, job, TEXT_SLICE_UNITS, "commit"):
            self._text_job = None  # the cursor moved on under the lock (`_text_slice`)
        return True

    async def _vector_step(self) -> bool:
        """The vector cursor (or a rebuild's walk over the live nodes): a new job is
        prepared (cut, compared with the digests), then embedded a slice a round."""
        job = self._vec_job
        if job is None:
            job = self._next_vector_job()
            if job is None:
                return False
            self._vec_job = job
            await trio.to_thread.run_sync(self._prepare, job)
            if job.changes and self._units_per_change <= 0:  # a first estimate
                self._units_per_change = len(job.todo or ()) / job.changes
            return True
        if not await trio.to_thread.run_sync(self._vector_slice, job):
            return True
        await trio.to_thread.run_sync(self._vector_finish, job)
        self._vec_job = None
        if job.upto is not None:
            done = max(0, job.upto - self.generation)
            units = len(job.todo or ())
            if done:
                self._units_per_change = _smooth(self._units_per_change, units / done)
            self.generation = max(self.generation, job.upto)
        elif self._rebuild is not None:
            await trio.to_thread.run_sync(
                self._compact_locked, self._rebuild_at, len(self._rebuild)
            )
            if self._rebuild_at >= len(self._rebuild):
                self.generation = max(self.generation, self._rebuild_target)
                log.info(
                    "vectors rebuilt: %d nodes in %.1f s (%d units taken from the store, "
                    "%d embedded here)",
                    len(self._rebuild),
                    time.monotonic() - self._rebuild_since,
                    self.shared_taken,
                    self.embedded_here,
                )
                self._rebuild = None
                await self._checkpoint()
                self.state = "ready"
        self._indexed(job)
        return True

    def _next_vector_job(self) -> _Job | None:
        if self._rebuild is not None:
            at, total = self._rebuild_at, len(self._rebuild)
            ids = self._rebuild[at : at + 64]
            self._rebuild_at = at + len(ids)
            self.state = f"rebuilding the vectors ({at}/{total} nodes; BM25 answers meanwhile)"
            live, gone = self._snapshot(ids)
            return _Job(live, gone, images=self._images_pending(ids), rebuild_at=at)
        return self._bulk_job(self.generation, images=True)

    def _bulk_job(self, cursor: int, *, images: bool = False) -> _Job | None:
        """Trio thread: the outbox rows after `cursor`, as a job of at most `batch` rows
        and about JOB_BYTES of text (at least one node), or None when there are none."""
        rows = self.feed.outbox_since(cursor, self.batch)
        if not rows:
            return None
        more = len(rows) >= self.batch
        live, gone = self._snapshot(list(dict.fromkeys(r[1] for r in rows)))
        by_id = {d.id: d for d in live}
        kept: set[int] = set()
        size, upto = 0, cursor
        for seq, nid, *_rest in rows:
            if nid not in kept:
                if kept and size >= JOB_BYTES:
                    more = True
                    break
                kept.add(nid)
                doc = by_id.get(nid)
                size += doc.size if doc is not None else 0
            upto = seq
        docs = [d for d in live if d.id in kept]
        return _Job(
            docs,
            {nid: s for nid, s in gone.items() if nid in kept},
            upto=upto,
            images=self._images_pending(sorted(kept)) if images else ([], []),
            changes=max(1, upto - cursor),
            more=more,
        )

    def _indexed(self, job: _Job) -> None:
        """Trio thread: the nodes whose vectors now match their version (meta.yaml's
        indexed version): their ids go to the indexer's followers."""
        done = []
        for d in job.docs:
            if d.node.indexed_version != d.version and d.node.version == d.version:
                d.node.indexed_version = d.version
                done.append(d.id)
        if done:
            self._tell(done)

    # ---- worker-thread halves ------------------------------------------------------------

    def _newest(self, seen: dict[int, int], nid: int, seq: int, urgent: bool) -> bool:
        """Under the side's lock: whether a snapshot read at `seq` may be applied, i.e.
        no urgent snapshot read later was applied already. An urgent apply leaves its
        seq; a bulk apply that read the node later clears it."""
        latest = seen.get(nid)
        if latest is not None and latest > seq:
            return False
        if urgent:
            seen[nid] = seq
        elif latest is not None:
            del seen[nid]
        return True

    def _text_slice(
        self, job: _Job, limit: int | None, mode: Literal["stage", "commit", "hold"] = "stage"
    ) -> bool:
        """Worker thread: the next slice of the job's BM25 side; whether the text side of
        the job is done. `limit` None: the whole job at once (urgent). `mode`: "stage"
        (what a person or an agent saved: searched at once, committed by `_text_lane`
        within TEXT_COMMIT_SECONDS; a tantivy commit costs 8-20 ms, most of an fsync's
        when each made one), "commit" (a bulk slice of the cursor: committed with what is
        staged, so a search never scores hundreds of staged units), "hold" (a rebuild:
        unseen until the rebuild's own commit)."""
        most = limit if limit is not None else 1 << 62
        batch: list[tuple[_Doc, list[Unit], bool]] = []
        count = 0
        while job.text_at < len(job.docs) and count < most:
            doc = job.docs[job.text_at]
            FOREGROUND.step_aside()  # a bulk slice lets a request in flight go first
            doc.cut()
            assert doc.text_units is not None
            part = doc.text_units[job.text_off : job.text_off + (most - count)]
            batch.append((doc, part, job.text_off == 0))
            count += len(part)
            job.text_off += len(part)
            if job.text_off >= len(doc.text_units):
                job.text_at, job.text_off = job.text_at + 1, 0
        with self.text_lock:
            if self.text is None:
                return True
            if job.upto is not None and job.resets != self._text_resets:
                return True  # read before a failed write: the cursor reads again from before
            try:
                committed = self._text_write(job, batch, mode)
            except BaseException as exc:
                self._text_failed(exc)
                raise
            done = job.text_at >= len(job.docs)
            if done and job.upto is not None:  # a cursor job: the cursor moves past it
                self.text_generation = max(self.text_generation, job.upto)
            if committed:  # what was staged went along
                self._text_durable = self.text_generation
        return done

    def _text_write(self, job: _Job, batch: list[tuple[_Doc, list[Unit], bool]], mode: str) -> bool:
        """Under `text_lock`: a slice of the job into the BM25 index (`_text_slice`);
        whether it committed."""
        assert self.text is not None
        seen, urgent = self._text_seen, job.urgent
        gone = []
        if not job.gone_done:
            gone = [n for n, s in job.gone.items() if self._newest(seen, n, s, urgent)]
            job.gone_done = True
        fresh: list[int] = []
        units: list[Unit] = []
        metas: dict[int, tuple[str, str, str]] = {}
        for doc, part, first in batch:
            if not self._newest(seen, doc.id, doc.seq, urgent and first):
                continue
            whole = first and len(part) == len(doc.text_units or ())
            if whole and self._text_as.get(doc.id) == doc.key:
                if not urgent:  # the cursor reached what the urgent lane applied
                    del self._text_as[doc.id]
                continue  # these very documents are in the index
            if urgent and whole:
                self._text_as[doc.id] = doc.key
            elif first:
                self._text_as.pop(doc.id, None)
            if first:
                fresh.append(doc.id)
            units += part
            metas[doc.id] = doc.meta
        for nid in gone:
            self._text_as.pop(nid, None)
        stage, commit = mode == "stage", mode == "commit"
        if gone:
            self.text.delete_nodes(gone, commit=False, stage=stage)
        if units or fresh:  # a commit takes what is staged along
            self.text.upsert(units, metas, fresh=fresh, commit=commit, stage=stage)
        elif gone and commit:
            self.text.commit()
        if not (gone or units or fresh):
            return False
        self.epoch += 1
        if commit:  # in tantivy's files: BM25 works again (staging touches no disk)
            self._text_failure = None
        return commit

    def _prepare(self, job: _Job) -> None:
        """Worker thread: cut the job's nodes, embed its images, and list the units whose
        text the vectors do not hold yet (by digest: nothing is embedded twice)."""
        if self.images is not None:
            self.images.apply(*job.images)
        every: list[tuple[int, Unit, int]] = []
        for doc in job.docs:
            FOREGROUND.step_aside()
            doc.cut()
            assert doc.units is not None
            every += [(unit_label(u), u, doc.seq) for u in doc.units]
        with self.lock:
            if job.urgent:
                for doc in job.docs:
                    self._newest(self._vec_seen, doc.id, doc.seq, True)
            known, found = self.digests.lookup(label for label, _u, _s in every)
        job.todo = [
            (u, seq)
            for (_label, u, seq), was, there in zip(
                every, known.tolist(), found.tolist(), strict=True
            )
            if not there or was != digest_int(u.digest)
        ]

    def _vector_slice(self, job: _Job) -> bool:
        """Worker thread: embed the next slice of the job's units (outside the lock) and
        put them in the vectors; whether every unit of the job is in."""
        if job.todo is None:
            self._prepare(job)
        assert job.todo is not None
        end = self._next_slice(job.todo, job.vec_at)
        part = job.todo[job.vec_at : end]
        job.vec_at = end
        with self.lock:
            part = [(u, s) for u, s in part if self._fresh_for(u.node_id, s)]
        if part:
            t0 = time.monotonic()
            texts = [u.text for u, _s in part]
            rows = self._embed(texts)
            self._timed(len(part), sum(map(len, texts)), time.monotonic() - t0)
            with self.lock:
                keep = [i for i, (u, s) in enumerate(part) if self._fresh_for(u.node_id, s)]
                if keep:
                    units = [part[i][0] for i in keep]
                    labels = [unit_label(u) for u in units]
                    digests = [digest_int(u.digest) for u in units]
                    if self._holding and not job.urgent:
                        self._held.append((labels, rows[keep], digests))
                        self._held_units += len(labels)
                        self._held_nodes.update(u.node_id for u in units)
                        self._put_held(force=False)
                    else:
                        self._put_held()  # first: a later write of a label wins
                        assert self.vectors is not None  # the vector lane runs once open
                        self.vectors.upsert(labels, rows[keep])
                        self.digests.set_many(labels, digests)
                    self.epoch += 1
                    self._vec_epoch += 1
        return job.vec_at >= len(job.todo)

    def _put_held(self, *, force: bool = True) -> None:
        """Under the lock: the held vectors go in, when there are HELD_UNITS of them (or
        `force`: before anything else changes the vectors or they are saved). The first
        batch of a rebuild headed past compact_units builds the compact index, once
        there are TRAIN_UNITS to train on."""
        if not self._held:
            return
        vectors = self.vectors
        assert vectors is not None  # held by the vector lane, which runs once open
        building = isinstance(vectors, VectorIndex)
        if building:
            enough = len(vectors) + self._held_units >= min(self.compact_units, TRAIN_UNITS)
        else:
            enough = self._held_units >= HELD_UNITS
        if not (force or enough):
            return
        labels = np.asarray([x for part, _r, _d in self._held for x in part], dtype=np.int64)
        rows = np.concatenate([r for _l, r, _d in self._held])
        digests = [x for _l, _r, part in self._held for x in part]
        # the last write of a label wins (a unit held twice)
        _, last = np.unique(labels[::-1], return_index=True)
        keep = np.sort(len(labels) - 1 - last)
        labels, rows = labels[keep], rows[keep]
        digests = [digests[i] for i in keep.tolist()]
        if building and enough and isinstance(vectors, VectorIndex):
            t0 = time.monotonic()
            old = vectors.snapshot(vectors.live_labels())  # an urgent write's, if any
            mine = set(labels.tolist())
            kept = [i for i, x in enumerate(old.labels) if x not in mine]
            both = np.concatenate([np.asarray(old.labels, dtype=np.int64)[kept], labels])
            rows = np.concatenate([old.vectors[kept], rows])
            self.vectors = CompactVectorIndex.build(
                vectors.dim, self._data_path(), both.tolist(), rows, space=vectors.space
            )
            log.info(
                "vector index: a compact index built from %d units in %.1f s",
                len(both),
                time.monotonic() - t0,
            )
        else:
            vectors.upsert(labels.tolist(), rows)
        self.digests.set_many(labels.tolist(), digests)
        # let go once in (a compact index's file written on a full disk: held still, and
        # put in at the next checkpoint)
        self._held, self._held_units, self._held_nodes = [], 0, set()

    def _fresh_for(self, nid: int, seq: int) -> bool:
        """Under the lock: no urgent snapshot read after `seq` was applied to the vectors."""
        latest = self._vec_seen.get(nid)
        return latest is None or latest <= seq

    def _vector_finish(self, job: _Job) -> None:
        """Worker thread: the labels the job's nodes no longer have, and those of nodes
        that are gone, leave the vectors (after the new ones are in)."""
        with self.lock:
            stale: list[int] = []
            for nid, seq in job.gone.items():
                if self._newest(self._vec_seen, nid, seq, job.urgent):
                    stale += self.labels_of(nid)
            for doc in job.docs:
                if job.urgent:
                    keep = self._fresh_for(doc.id, doc.seq)
                else:
                    keep = self._newest(self._vec_seen, doc.id, doc.seq, False)
                if keep:
                    assert doc.units is not None
                    labels = {unit_label(u) for u in doc.units}
                    stale += [x for x in self.labels_of(doc.id) if x not in labels]
            if stale:
                assert self.vectors is not None  # the vector lane runs once open
                self._put_held()
                self.vectors.delete(stale)
                self.digests.remove(stale)
                self.epoch += 1
                self._vec_epoch += 1

    def _timed(self, units: int, chars: int, seconds: float) -> None:
        """The next slice is sized to take about SLICE_SECONDS at the rate just seen (in
        characters: a turn of a thousand costs ten of a short note's)."""
        seconds = max(seconds, 1e-3)
        self.rate = _smooth(self.rate, units / seconds)
        self.char_rate = _smooth(self.char_rate, chars / seconds)

    def _next_slice(self, todo: list[tuple[Unit, int]], start: int) -> int:
        """Where the slice from `start` ends: about SLICE_SECONDS of text at the measured
        rate, within SLICE_UNITS."""
        lo, hi = SLICE_UNITS
        budget = self.char_rate * SLICE_SECONDS if self.char_rate > 0 else 8_000
        end, size = start, 0
        while end < len(todo) and end - start < hi and (end - start < lo or size < budget):
            size += len(todo[end][0].text)
            end += 1
        return end

    def _embed(self, texts: list[str]):  # noqa: ANN202 - the embedder's float32 rows
        """Worker thread: embed in the indexer's own thread at a lower priority (a query
        embeds in its own thread, at the mount's)."""
        if self._embed_pool is None:
            self._embed_pool = ThreadPoolExecutor(
                1, thread_name_prefix="contextfs-embed", initializer=_lower_priority
            )
        assert self.embedder is not None  # the vector lane runs once the model is in
        return self._embed_pool.submit(self._embed_or_take, texts).result()

    def _embed_or_take(self, texts: list[str]):  # noqa: ANN202 - float32 rows
        """Embedding thread: the rows of texts another mount of a shared store embedded
        are taken from it (same model, same text); the rest are embedded here and shared."""
        emb = self.embedder
        assert emb is not None
        if self.shared is None:
            self.embedded_here += len(texts)
            return emb.embed(texts)
        dim = emb.dim
        model = f"{emb.name}/{dim}"
        keys = [shared_digest(t) for t in texts]
        found = self.shared.get(model, keys)
        out = np.empty((len(texts), dim), np.float32)
        missing: list[int] = []
        for i, key in enumerate(keys):
            row = found.get(key)
            if row is not None and len(row) == dim * 4:
                out[i] = np.frombuffer(row, np.float32)
            else:
                missing.append(i)
        if missing:
            rows = np.asarray(emb.embed([texts[i] for i in missing]), np.float32)
            out[missing] = rows
            self.shared.put(model, [(keys[i], rows[j].tobytes()) for j, i in enumerate(missing)])
        self.embedded_here += len(missing)
        self.shared_taken += len(texts) - len(missing)
        return out

    def _snapshot(self, node_ids: Sequence[int]) -> tuple[list[_Doc], dict[int, int]]:
        """Trio thread: the live nodes among these, with their texts, and the others (gone)
        with the seq of this reading."""
        self._seq += 1
        seq = self._seq
        live: list[_Doc] = []
        gone: dict[int, int] = {}
        # one query for the nodes not held and one for their texts (memory.heads), not
        # two a node: a rebuild reads the whole store this way
        nodes = self.memory.nodes.get_many(list(node_ids))
        self.memory.texts.prefetch(list(nodes.values()))
        for nid in dict.fromkeys(node_ids):
            n = nodes.get(nid)
            if n is None or not self.memory.is_live(n):
                gone[nid] = seq
                continue
            # Vectors see the text as written; BM25 also sees the type and node name.
            meta = (f"{n.owner_kind}/{n.owner_id}", n.type, self.memory.node_path(n))
            live.append(
                _Doc(n, nid, n.version, seq, n.type, unit_prefix(n), meta, n.l0, n.l1, n.l2)
            )
        return live, gone

    def _images_pending(self, node_ids: Sequence[int]) -> tuple[list, list[int]]:
        """Trio thread: the image bytes the CLIP side must embed for these nodes."""
        if self.images is None:
            return [], []
        return self.images.collect(self.memory, node_ids)

    async def drain_once(self) -> bool:
        """Run the lanes until nothing is left (tests and scripts); whether anything was."""
        worked = False
        while True:
            text = self.text is not None and await self._text_step()
            if not (await self._step() or text):
                return worked
            worked = True

    def backlog(self) -> dict[str, float | int]:
        """What is queued, for `.status`: outbox changes behind each cursor, units left in
        the jobs under way, the embedding rate and an estimate of the time left."""
        committed = self.memory.generation
        text_changes = max(0, committed - self.text_generation)
        vec_changes = max(0, committed - self.generation) if self.ready else 0
        units = sum(j.remaining for j in (self._urgent_job, self._vec_job) if j is not None)
        if self._rebuild is not None:
            vec_changes = len(self._rebuild) - self._rebuild_at  # nodes, during a rebuild
        later = vec_changes * self._units_per_change
        eta = (units + later) / self.rate if self.rate > 0 and (units or later) else 0.0
        return {
            "text_changes": text_changes,
            "vector_changes": vec_changes,
            "urgent_nodes": len(self._urgent)
            + len(self._urgent_vec)
            + len(self._resumed)
            + (len(self._urgent_job.docs) if self._urgent_job is not None else 0),
            "units_in_progress": units,
            "units_per_second": round(self.rate, 1),
            "eta_seconds": round(eta, 1),
        }

    # ---- offline rebuild (contextfs reindex) -------------------------------------------

    def rebuild_sync(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Rebuild every derived index from the store, without trio (CLI)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self.embedder = self.embedder or self.embedder_factory()
        if self.images is not None:
            self.images.load_model()
        self._fresh("reindex")
        target = self.memory.generation
        nodes = self.memory.live.ids()
        total = len(nodes)
        step = max(1, min(self.batch, 64))
        for i in range(0, total, step):
            live, gone = self._snapshot(nodes[i : i + step])
            job = _Job(live, gone, images=self._images_pending(nodes[i : i + step]))
            self._prepare(job)
            while not self._vector_slice(job):
                pass
            self._vector_finish(job)
            self._bulk_text(job, commit=_rebuild_commits(i, step, total))
            self._compact_locked(min(i + step, total), total)
            self._indexed(job)
            if progress:
                progress(min(i + step, total), total)
        self.generation = self.text_generation = target
        self._save()
        if self._embed_pool is not None:
            self._embed_pool.shutdown()
        if self.shared is not None:
            self.shared.close()
        if progress and total == 0:
            progress(0, 0)
        return total

    def _bulk_text(self, job: _Job, *, commit: bool) -> None:
        """A rebuild's BM25 side without a commit a batch (a commit costs ~0.1 s; one per
        64 nodes was most of a million-node rebuild)."""
        units: list[Unit] = []
        metas: dict[int, tuple[str, str, str]] = {}
        for doc in job.docs:
            doc.cut()
            assert doc.text_units is not None
            units += doc.text_units
            metas[doc.id] = doc.meta
        with self.text_lock:
            assert self.text is not None  # `_fresh` opened it
            if units:
                self.text.upsert(units, metas, commit=commit)
            elif commit:
                self.text.commit()

    def status_lines(self) -> list[str]:
        committed = self.memory.generation
        lag = max(0, committed - self.generation)
        name = self.embedder.name if self.embedder else self.model_name
        lines = [
            f"index: {self.shown_state}",
            f"index_generation: {self.generation} (committed {committed}, queue {lag})",
            f"text_index_generation: {self.text_generation} (BM25 answers from the start)",
        ]
        if self.busy:
            b = self.backlog()
            eta = f", about {_duration(b['eta_seconds'])} left" if b["eta_seconds"] else ""
            lines.append(
                f"index_backlog: {b['text_changes']} change(s) for BM25, "
                f"{b['vector_changes']} for the vectors, {b['urgent_nodes']} saved node(s) "
                f"first; {b['units_in_progress']} unit(s) being embedded at "
                f"{b['units_per_second']:.0f}/s{eta}"
            )
        lines += [
            f"embedding_model: {name}" + (f" ({self.embedder.dim}-d)" if self.embedder else ""),
            f"indexed_units: {len(self.digests)}",
        ]
        if self.shared is not None:
            lines.append(
                f"shared_vectors: {self.shared_taken} unit(s) taken from the store, "
                f"{self.embedded_here} embedded here"
            )
        if self.vector_kind == "hnswlib":
            lines.append(f"vector_index: hnswlib (compact from {self.compact_units} units)")
        elif self.vector_kind == "compact":
            lines.append("vector_index: compact (IVF-PQ codes in RAM, float16 rows on disk)")
        if self.images is not None:
            lines.append(self.images.status_line())
        if self.error:
            lines.append(f"index_error: {self.error}")
        return lines


REBUILD_COMMIT_NODES = 4096


def _rebuild_commits(start: int, step: int, total: int) -> bool:
    """Whether the rebuild's batch at `start` commits the text index: about every
    REBUILD_COMMIT_NODES nodes, and the last batch (BM25 sees a rebuild in steps)."""
    return start + step >= total or (start + step) // REBUILD_COMMIT_NODES > start // (
        REBUILD_COMMIT_NODES
    )


def _load_digests(snap: Path) -> UnitDigests:
    """A snapshot's unit digests: `digests.npy`, or the JSON of a snapshot written before."""
    if (snap / "digests.npy").exists():
        return UnitDigests.load(snap / "digests.npy")
    old = json.loads((snap / "digests.json").read_text())
    return UnitDigests([int(k) for k in old], [digest_int(v) for v in old.values()])


def shared_digest(text: str) -> int:
    """A text's key among shared vectors: its xxh64 as a signed 64-bit integer (BIGINT)."""
    d = xxhash.xxh64_intdigest(text.encode("utf-8", "surrogatepass"))
    return d - 2**64 if d >= 2**63 else d


def _distinct(units: list[Unit]) -> list[Unit]:
    """Short nodes have L0 = L1 = L2: index such a text once (as its first tier)."""
    seen: set[str] = set()
    out = []
    for u in units:
        body = u.text.strip()
        if body and body not in seen:
            seen.add(body)
            out.append(u)
    return out


def _lower_priority() -> None:
    """The embedding thread's initializer: below the mount's priority (Linux nice values
    are per thread; OpenMP's threads, started from here, inherit it)."""
    with contextlib.suppress(OSError, AttributeError):  # not Linux, or not allowed
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), EMBED_NICE)


def _smooth(old: float, new: float) -> float:
    """An exponential average that starts at its first sample."""
    return new if old <= 0 else 0.7 * old + 0.3 * new


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
