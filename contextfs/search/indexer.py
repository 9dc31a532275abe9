"""The indexer: drains the store's outbox into the derived indexes (hnswlib + tantivy).

This is where the canonical store and the derived indexes meet (STYLE: `store/` and
`index/` never import each other). A background service in the daemon's trio nursery:
woken by every commit, it reads outbox rows after the generation the indexes reflect,
turns the nodes they name into units (L0, L1, L2 chunks), embeds only units whose text
changed (xxhash digests), and applies upserts and deletions. Embedding, hnswlib and
tantivy calls run in a worker thread under one lock, which searches share.

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

import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import trio

from contextfs.errors import IndexCorrupt
from contextfs.index.compact import CompactVectorIndex, load_vectors
from contextfs.index.digests import UnitDigests, digest_int
from contextfs.index.embed import Embedder
from contextfs.index.text import TextIndex
from contextfs.index.units import Unit
from contextfs.index.vectors import VectorIndex
from contextfs.memory.background import Service
from contextfs.memory.service import Memory
from contextfs.model import Change, Node
from contextfs.search.images import ImageVectors
from contextfs.search.passages import SESSION_TYPE, node_passages

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
    units = [
        Unit(n.id, tier, 0, prefix + body.strip())
        for tier, body in (("L0", n.l0), ("L1", n.l1))
        if body.strip()
    ]
    units += [Unit(n.id, "L2", p.index, prefix + p.index_text()) for p in node_passages(n)]
    return units


class Indexer(Service):
    """Keeps hnswlib and tantivy caught up with the outbox. run() in the nursery, until
    stop(); woken by every commit that changed a node (`Memory.subscribe`)."""

    CHECKPOINT_SECONDS = 20.0

    def __init__(
        self,
        memory: Memory,
        index_dir: Path,
        embedder_factory: Callable[[], Embedder],
        *,
        model_name: str,
        batch: int = 256,
        on_indexed: Callable[[list[int]], None] | None = None,
        images: ImageVectors | None = None,
        compact_units: int = COMPACT_UNITS,
    ) -> None:
        super().__init__()
        self.compact_units = compact_units
        self.images = images  # CLIP image vectors (search.images), when configured
        self._images_fill = False  # the CLIP model is in, its saved vectors were not usable
        self.memory = memory
        self.dir = Path(index_dir)
        self.embedder_factory = embedder_factory
        self.model_name = model_name
        self.batch = batch
        self.on_indexed = on_indexed
        # asked once the model is in, before `.status` says ready (search.Searcher.warm_up:
        # the first questions after a mount find what they touch loaded)
        self.warm_up: Callable[[], object] | None = None
        self.lock = threading.Lock()  # hnswlib and tantivy: one user at a time
        self.embedder: Embedder | None = None
        self.vectors: VectorIndex | CompactVectorIndex | None = None
        self.text: TextIndex | None = None
        # label -> xxh64 of the unit's text, for every unit in the vectors; a node's
        # units are the labels in its range (`labels_of`)
        self.digests = UnitDigests()
        self.generation = 0  # everything up to this outbox seq is indexed
        self.saved_generation = 0
        self.state = "opening the text index"
        self.error: str | None = None
        self.dead = False  # the text index could not open: nothing will ever answer
        self.text_generation = 0  # everything up to this outbox seq is in the BM25 index
        self._must_rebuild = False  # the model is in, the vectors are empty: index everything
        self._progress = trio.Event()
        self.unsubscribe = memory.subscribe(self._committed)

    # ---- lifecycle ----------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """Both sides answer: the model is loaded and both indexes are open."""
        return self.vectors is not None and self.text is not None and self.embedder is not None

    @property
    def vector_kind(self) -> str | None:
        """Which vector index answers: "hnswlib", "compact", or None before the model."""
        if self.vectors is None:
            return None
        return "hnswlib" if isinstance(self.vectors, VectorIndex) else "compact"

    @property
    def searchable_generation(self) -> int:
        """Every commit up to this outbox seq is found by what is loaded: both sides once
        the model is in, BM25 alone before."""
        return self.generation if self.ready else self.text_generation

    def _committed(self, changes: Sequence[Change]) -> None:
        if any(c.kind == "node" for c in changes):
            self.wake()

    async def run(self) -> None:
        """BM25 first: the text index opens (and catches up) at once, while the embedding
        model loads in the background; the vectors join when it is in. A model that does
        not load leaves BM25 working (`error` says why)."""
        try:
            await trio.to_thread.run_sync(self._open_text, abandon_on_cancel=True)
        except Exception as exc:  # noqa: BLE001 - a broken index must not kill the mount
            self.dead = True
            self._failed(f"failed: {exc}", exc)
            return
        self._progress.set()
        self._progress = trio.Event()
        last_save = time.monotonic()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._load_model)
                pause = 1.0
                while not self.stopping:
                    self._rearm()  # fresh before looking: a wake meanwhile counts
                    try:
                        worked = await self._step()
                    except Exception as exc:  # noqa: BLE001 - the mount outlives the indexer
                        # The batch is not marked done: it is tried again after a pause
                        # that grows to a minute, and `.status` says what failed meanwhile.
                        self.error = f"indexing failed: {exc!r}"
                        log.exception("indexer: a batch failed; retrying in %.0f s", pause)
                        await self._pause(pause)
                        pause = min(60.0, pause * 2)
                        continue
                    pause = 1.0
                    if worked:
                        continue
                    if (
                        self.ready
                        and self.generation != self.saved_generation
                        and (time.monotonic() - last_save > self.CHECKPOINT_SECONDS)
                    ):
                        await trio.to_thread.run_sync(self._save)
                        last_save = time.monotonic()
                    await self._idle(self.CHECKPOINT_SECONDS / 2)
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                if self.ready and self.generation != self.saved_generation:
                    await trio.to_thread.run_sync(self._save)
                if self.text is not None:
                    self.text.close()  # release tantivy's writer lock

    async def _step(self) -> bool:
        """One unit of the loop's work; whether there was any."""
        if self._must_rebuild:
            await self._rebuild()
            self._must_rebuild = self._images_fill = False
            self.state = "ready"
            return True
        if self._images_fill and self.ready:
            self._images_fill = False
            todo, gone = self.images.collect(self.memory, self.images.all_images(self.memory))
            await trio.to_thread.run_sync(self.images.apply, todo, gone)
            return True
        return await (self.drain_once() if self.ready else self._drain_text())

    async def _load_model(self) -> None:
        try:
            # abandon_on_cancel: an unmount while the model still loads must not wait for it
            embedder = await trio.to_thread.run_sync(self.embedder_factory, abandon_on_cancel=True)
            if self.images is not None:
                self.state = "loading the CLIP model (BM25 answers meanwhile)"
                await trio.to_thread.run_sync(self.images.load_model, abandon_on_cancel=True)
            self.state = "opening the vector index"
            await trio.to_thread.run_sync(self._open_vectors, embedder, abandon_on_cancel=True)
            # The rebuild runs in `run`'s loop, never beside a batch of `drain_once`: both
            # would index the same rows, and the rebuild's end would set the generation back.
            self._must_rebuild = self.generation == 0 and self.memory.generation > 0
            self.embedder = embedder
            if not self._must_rebuild and self.warm_up is not None:
                self.state = "warming up (questions are answered meanwhile)"
                await trio.to_thread.run_sync(self._warm_up, abandon_on_cancel=True)
            if not self._must_rebuild:
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

    def _warm_up(self) -> None:
        """Worker thread: `warm_up`, whose failure costs only speed."""
        t0 = time.monotonic()
        try:
            self.warm_up()  # type: ignore[misc]
        except Exception as exc:  # noqa: BLE001 - a cold first question, not a dead index
            log.warning("search warm-up failed: %s", exc)
            return
        log.info("search warmed up in %.2f s", time.monotonic() - t0)

    def _failed(self, state: str, exc: Exception) -> None:
        self.state = state
        self.error = str(exc)
        log.error("indexer: %s", state)
        self._progress.set()
        self._progress = trio.Event()

    async def barrier(self, generation: int, timeout: float) -> bool:
        """Wait until everything up to `generation` is searchable by what is loaded (fsync
        is a barrier); never waits for the model to load."""
        with trio.move_on_after(timeout):
            while self.searchable_generation < generation and not self.dead and not self.stopping:
                self.wake()
                ev = self._progress
                await ev.wait()
            return self.searchable_generation >= generation
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

    def _open_text(self) -> None:
        """Worker thread, at start: the BM25 index, caught up with the store if it was
        missing or unusable (it needs no model, so this takes seconds, not minutes)."""
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
        if generation == 0 and self.memory.generation > 0:
            self.state = "rebuilding the text index"
            ids = self.memory.live.ids()  # ids only, by SQL (memory.heads)
            target = self.memory.generation
            with self.lock:
                self.text.clear()
            for i in range(0, len(ids), 256):
                live, gone = self._snapshot(ids[i : i + 256])
                self._apply_text(live, gone)
            generation = target
        self.text_generation = generation
        self.state = "loading the embedding model (BM25 answers meanwhile)"

    def open_sync(self, embedder: Embedder) -> None:
        """Open both indexes in the calling thread, without trio (scripts, offline use);
        the text index catches up if it must, the vectors are used as they are."""
        self._open_text()
        if self.images is not None:
            self.images.load_model()
        self._open_vectors(embedder)
        self.embedder = embedder
        self.state = "ready"

    def _open_vectors(self, emb: Embedder) -> None:
        """Worker thread, once the model is in: the vector snapshot if it is whole and was
        built with this model, else an empty index (rebuilt by `run`)."""
        meta = self._read_meta()
        vectors, digests, generation = VectorIndex(emb.dim), UnitDigests(), 0
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
        self.vectors = VectorIndex(self.embedder.dim)
        self.text = TextIndex(self.dir / "text")
        self.digests = UnitDigests()
        if self.images is not None:
            self.images.clear()
        self.generation = self.saved_generation = self.text_generation = 0

    def _save(self) -> None:
        """Checkpoint: vectors and digests go to a new snapshot folder, then index.json
        names it (one atomic rename), then older snapshots go. tantivy commits itself."""
        with self.lock:
            generation = self.generation
            snap = self.dir / f"snap-{generation}-{time.time_ns()}"
            snap.mkdir()
            self._maybe_compact()
            self.vectors.save(snap / "vectors.bin")
            self.digests.save(snap / "digests.npy")
            if self.images is not None:
                self.images.save(snap)
        tmp = self.dir / f"index.json.{snap.name}.tmp"  # never shared by two saves
        tmp.write_text(
            json.dumps(
                {
                    "model": self.model_name,
                    "dim": self.embedder.dim,
                    "generation": generation,
                    "snapshot": snap.name,
                    "text_generation": max(generation, self.text_generation),
                    "saved": time.time(),
                }
            )
        )
        os.replace(tmp, self._meta_path())
        for old in self.dir.glob("snap-*"):
            if old.name != snap.name:
                shutil.rmtree(old, ignore_errors=True)
        self.saved_generation = generation

    def _maybe_compact(self) -> None:
        """Under the lock, at a checkpoint or between the batches of a rebuild (which
        would otherwise grow hnswlib to the whole store first): past `compact_units`, move
        the units from hnswlib into a compact index. Its `vectors.f16` is new; no saved
        snapshot names the old one, if any (a compact index that loaded would not be an
        hnswlib one here)."""
        if not isinstance(self.vectors, VectorIndex):
            return
        if len(self.vectors) < max(1, self.compact_units):  # it trains on what there is
            return
        state, self.state = self.state, f"moving {len(self.vectors)} units to a compact index"
        t0 = time.monotonic()
        self.vectors = CompactVectorIndex.from_index(self.vectors, self._data_path())
        self.state = state
        log.info(
            "vector index: %d units moved to the compact index in %.1f s",
            len(self.vectors),
            time.monotonic() - t0,
        )

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
        units, last = self.digests.last_in([nid * SLOTS for nid in node_ids], SLOTS)
        return {
            nid: max(0, lab - nid * SLOTS - 1)
            for nid, u, lab in zip(node_ids, units, last, strict=True)
            if u > 0
        }

    def _compact_locked(self) -> None:
        with self.lock:
            self._maybe_compact()

    # ---- draining the outbox -----------------------------------------------------------

    async def drain_once(self) -> bool:
        """Index one batch of outbox rows; returns whether there was anything to do."""
        if not self.ready:
            return False
        rows = self.memory.store.outbox_since(self.generation, self.batch)
        if not rows:
            self._progress.set()
            self._progress = trio.Event()
            return False
        last_seq = rows[-1][0]
        node_ids = list(dict.fromkeys(r[1] for r in rows))
        live, gone = self._snapshot(node_ids)
        pending = self._images_pending(node_ids)
        await trio.to_thread.run_sync(self._apply, live, gone, pending)
        self.generation = last_seq
        self.text_generation = max(self.text_generation, last_seq)
        done = []
        for nid, (n, version, _units, _meta) in live.items():
            if n.indexed_version != version:
                n.indexed_version = version
                done.append(nid)
        if self.on_indexed is not None and done:
            self.on_indexed(done)
        self._progress.set()
        self._progress = trio.Event()
        return True

    async def _drain_text(self) -> bool:
        """BM25 only, while the model loads (or after it failed): one batch of rows."""
        if self.text is None:
            return False
        rows = self.memory.store.outbox_since(self.text_generation, self.batch)
        if not rows:
            self._progress.set()
            self._progress = trio.Event()
            return False
        live, gone = self._snapshot(list(dict.fromkeys(r[1] for r in rows)))
        await trio.to_thread.run_sync(self._apply_text, live, gone)
        self.text_generation = rows[-1][0]
        self._progress.set()
        self._progress = trio.Event()
        return True

    def _apply_text(self, live, gone: list[int]) -> None:
        """Worker thread: the BM25 side of `_apply`."""
        with self.lock:
            self._text_side(live, gone)

    def _text_side(self, live, gone: list[int], commit: bool = True) -> None:
        """Under the lock: the nodes' documents in the text index (committed, unless a
        rebuild leaves them to a later batch)."""
        if gone:
            self.text.delete_nodes(gone)
        if live:
            units = [u for _n, _v, _us, (_m, tus) in live.values() for u in tus]
            metas = {nid: m for nid, (_n, _v, _u, (m, _t)) in live.items()}
            self.text.upsert(units, metas, commit=commit)
        elif commit:
            self.text.commit()  # what earlier batches of a rebuild left uncommitted

    def _snapshot(self, node_ids: Sequence[int]):
        """Read the nodes in the trio thread (their texts are immutable strings)."""
        live: dict[int, tuple[Node, int, list[Unit], tuple[str, str, str]]] = {}
        gone: list[int] = []
        # one query for the nodes not held and one for their texts (memory.heads), not
        # two a node: a rebuild reads the whole store this way
        nodes = self.memory.nodes.get_many(list(node_ids))
        self.memory.texts.prefetch(list(nodes.values()))
        for nid in node_ids:
            n = nodes.get(nid)
            if n is None or not self.memory.is_live(n):
                gone.append(nid)
                continue
            # Vectors see the text as written; BM25 also sees the type and node name.
            units = _distinct(units_of(n))
            text_units = _distinct(units_of(n, prefix=unit_prefix(n)))
            meta = (f"{n.owner_kind}/{n.owner_id}", n.type, self.memory.node_path(n))
            live[nid] = (n, n.version, units, (meta, text_units))
        return live, gone

    def _images_pending(self, node_ids: Sequence[int]) -> tuple[list, list[int]]:
        """Trio thread: the image bytes the CLIP side must embed for these nodes."""
        if self.images is None:
            return [], []
        return self.images.collect(self.memory, node_ids)

    def _apply(
        self,
        live,
        gone: list[int],
        pending: tuple[list, list[int]] = ([], []),
        commit: bool = True,
    ) -> None:
        """Worker thread: embed what changed, then update both indexes under the lock
        (and the image vectors, under theirs). `commit=False` (a rebuild) leaves the text
        index's new documents to a later commit."""
        if self.images is not None:
            self.images.apply(*pending)
        labels_by_node: dict[int, dict[int, Unit]] = {}
        for nid, (_n, _v, units, _m) in live.items():
            labels_by_node[nid] = {unit_label(u): u for u in units}
        every = [(label, u) for lab in labels_by_node.values() for label, u in lab.items()]
        known, found = self.digests.lookup(label for label, _u in every)
        to_embed = [
            u
            for (_label, u), was, there in zip(every, known.tolist(), found.tolist(), strict=True)
            if not there or was != digest_int(u.digest)
        ]
        vectors = self.embedder.embed([u.text for u in to_embed]) if to_embed else None
        with self.lock:
            stale: list[int] = []
            for nid in gone:
                stale += self.labels_of(nid)
            for nid, lab in labels_by_node.items():
                stale += [x for x in self.labels_of(nid) if x not in lab]
            if stale:
                self.vectors.delete(stale)
                self.digests.remove(stale)
            if to_embed:
                labels = [unit_label(u) for u in to_embed]
                self.vectors.upsert(labels, vectors)
                self.digests.set_many(labels, [digest_int(u.digest) for u in to_embed])
            self._text_side(live, gone, commit)

    async def _rebuild(self) -> None:
        """Index every live node (cheaper than replaying the whole outbox)."""
        target = self.memory.generation
        ids = self.memory.live.ids()
        log.info("indexing %d nodes from scratch", len(ids))
        if self.images is not None:
            self.images.clear()
        for i in range(0, len(ids), 64):
            self.state = f"rebuilding ({i}/{len(ids)} nodes)"
            live, gone = self._snapshot(ids[i : i + 64])
            pending = self._images_pending(ids[i : i + 64])
            commit = _rebuild_commits(i, 64, len(ids))
            await trio.to_thread.run_sync(self._apply, live, gone, pending, commit)
            await trio.to_thread.run_sync(self._compact_locked)
            for n, version, _u, _m in live.values():
                n.indexed_version = version
        self.generation = target
        await trio.to_thread.run_sync(self._save)

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
            pending = self._images_pending(nodes[i : i + step])
            self._apply(live, gone, pending, _rebuild_commits(i, step, total))
            self._compact_locked()
            for n, version, _u, _m in live.values():
                n.indexed_version = version
            if progress:
                progress(min(i + step, total), total)
        self.generation = target
        self._save()
        if progress and total == 0:
            progress(0, 0)
        return total

    def status_lines(self) -> list[str]:
        committed = self.memory.generation
        lag = max(0, committed - self.generation)
        name = self.embedder.name if self.embedder else self.model_name
        lines = [
            f"index: {self.state}",
            f"index_generation: {self.generation} (committed {committed}, queue {lag})",
            f"text_index_generation: {self.text_generation} (BM25 answers from the start)",
            f"embedding_model: {name}" + (f" ({self.embedder.dim}-d)" if self.embedder else ""),
            f"indexed_units: {len(self.digests)}",
        ]
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
