"""Nearest-neighbour search over unit embeddings (hnswlib); derived, rebuildable.

Labels are plain ints chosen by the caller (the indexer maps unit keys to them). hnswlib is
not thread-safe for add + query, so the caller serialises every call on one lock; this
module starts no threads (hnswlib is told to use one).

On disk an index is one file: a small header of ours (magic, dim, space, the deleted
labels, the payload's length and xxh64) followed by hnswlib's own bytes. The header lets
`load` refuse a truncated or foreign file before hnswlib parses it (hnswlib trusts its
input), and carries what hnswlib does not tell us back: which labels are deleted.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import hnswlib
import numpy as np
import xxhash

from contextfs.errors import IndexCorrupt

log = logging.getLogger(__name__)

SPACES = ("cosine", "ip", "l2")

_MAGIC = b"CFSHNSW1"
# magic, dim, space index, M, ef_construction, number of deleted labels, payload length,
# payload xxh64
_HEADER = struct.Struct("<8sIBIIQQQ")
_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Some labels and their vectors (unit length for cosine), compared exactly."""

    labels: tuple[int, ...]
    vectors: np.ndarray
    space: str

    def nearest(self, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
        """The k nearest of the snapshot's labels as (label, similarity), best first."""
        if not self.labels or k <= 0:
            return []
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        if self.space == "l2":
            sims = -np.sum((self.vectors - query) ** 2, axis=1)
        elif self.space == "cosine":
            norm = float(np.linalg.norm(query))
            sims = self.vectors @ (query / (norm or 1.0))
        else:
            sims = self.vectors @ query
        k = min(k, len(self.labels))
        top = np.argpartition(-sims, k - 1)[:k] if k < len(self.labels) else np.arange(k)
        order = top[np.argsort(-sims[top], kind="stable")]
        return [(self.labels[i], float(sims[i])) for i in order]


class VectorIndex:
    """An hnswlib index of unit vectors with replace-on-upsert and soft delete."""

    def __init__(
        self,
        dim: int,
        *,
        space: str = "cosine",
        ef: int = 64,
        M: int = 16,
        capacity: int = 1024,
        ef_construction: int = 200,
    ) -> None:
        self._setup(dim, space, ef, M, ef_construction)
        self._index.init_index(max_elements=max(capacity, 1), M=M, ef_construction=ef_construction)
        self._index.set_ef(ef)

    def _setup(self, dim: int, space: str, ef: int, M: int, ef_construction: int) -> None:
        if space not in SPACES:
            raise ValueError(f"space must be one of {SPACES}, not {space!r}")
        if dim < 1:
            raise ValueError("dim must be positive")
        self.dim = dim
        self.space = space
        self.ef = ef
        self.M = M
        self.ef_construction = ef_construction
        self._index = hnswlib.Index(space=space, dim=dim)
        self._index.set_num_threads(1)
        # Every label hnswlib holds, and those of them marked deleted.
        self._labels: set[int] = set()
        self._deleted: set[int] = set()

    # ---- writes --------------------------------------------------------------------------

    def upsert(self, labels: Sequence[int], vectors: np.ndarray) -> None:
        """Add or replace vectors; a deleted label comes back to life."""
        labels = [int(x) for x in labels]
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim == 1:
            vectors = vectors.reshape(1, -1)
        if vectors.shape != (len(labels), self.dim):
            raise ValueError(
                f"expected vectors of shape ({len(labels)}, {self.dim}), got {vectors.shape}"
            )
        if len(set(labels)) != len(labels):
            raise ValueError("duplicate labels in one upsert")
        if not labels:
            return
        new = sum(1 for x in labels if x not in self._labels)
        needed = len(self._labels) + new
        capacity = self._index.get_max_elements()
        if needed > capacity:
            # doubled, and at least what is needed: an empty index saved and loaded again
            # holds room for 0 (hnswlib keeps its count as its size), which doubling alone
            # never grew, and the upsert spun for ever holding the indexer's lock
            capacity = max(needed, 2 * capacity)
            log.debug("growing vector index to %d", capacity)
            self._index.resize_index(capacity)
        # hnswlib replaces the vector of a known label and clears its deleted mark.
        self._index.add_items(vectors, np.asarray(labels, dtype=np.uint64), num_threads=1)
        self._labels.update(labels)
        self._deleted.difference_update(labels)

    def delete(self, labels: Iterable[int]) -> None:
        """Mark labels deleted; unknown or already deleted labels are ignored."""
        for label in labels:
            label = int(label)
            if label in self._labels and label not in self._deleted:
                self._index.mark_deleted(label)
                self._deleted.add(label)

    # ---- reads ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._labels) - len(self._deleted)

    def __contains__(self, label: object) -> bool:
        return label in self._labels and label not in self._deleted

    def live_labels(self) -> list[int]:
        """Every live label, sorted (what a move to another index kind copies)."""
        return sorted(self._labels - self._deleted)

    def search_among(
        self, vector: np.ndarray, labels: Sequence[int], k: int
    ) -> list[tuple[int, float]]:
        """Exact nearest among the given live labels (a small scope): no graph walk, no
        per-candidate callback. Unknown or deleted labels are skipped."""
        return self.snapshot(labels).nearest(vector, k)

    def snapshot(self, labels: Sequence[int]) -> Snapshot:
        """The live labels among `labels` with a copy of their vectors, to compare many
        queries against exactly (hnswlib's `get_items` copies item by item: ~25 µs a
        vector here, so a caller that asks the same scope again keeps the snapshot)."""
        wanted = [x for x in labels if x in self._labels and x not in self._deleted]
        if not wanted:
            return Snapshot((), np.zeros((0, self.dim), dtype=np.float32), self.space)
        items: np.ndarray = np.asarray(self._index.get_items(wanted), dtype=np.float32)
        if self.space == "cosine":
            norms = np.linalg.norm(items, axis=1, keepdims=True)
            items = items / np.where(norms == 0, 1.0, norms)
        return Snapshot(tuple(wanted), items, self.space)

    def search(
        self,
        vector: np.ndarray,
        k: int,
        *,
        allow: Callable[[int], bool] | None = None,
    ) -> list[tuple[int, float]]:
        """The k nearest live labels as (label, similarity), best first.

        Similarity is the cosine (or inner product) in [-1, 1], higher is better. `k` is
        clipped to the live count; `allow` keeps only the labels it accepts (run inside
        hnswlib's search, so it sees every candidate, not just the final k).
        """
        query = np.asarray(vector, dtype=np.float32).reshape(1, -1)
        if query.shape[1] != self.dim:
            raise ValueError(f"expected a vector of dim {self.dim}, got {query.shape[1]}")
        k = min(int(k), len(self))
        if k <= 0:
            return []
        try:
            labels, distances = self._query(query, k, allow)
        except RuntimeError:
            # hnswlib raises when it finds fewer than k: a strict `allow`, or a graph
            # thinned by deletions. Ask for no more than can pass, then step down.
            if allow is not None:
                k = min(k, sum(1 for x in self._labels - self._deleted if allow(x)))
            labels, distances = self._query_fewer(query, k, allow)
        return [
            (int(label), self._similarity(float(d)))
            for label, d in zip(labels, distances, strict=True)
        ]

    def _query(
        self, query: np.ndarray, k: int, allow: Callable[[int], bool] | None
    ) -> tuple[np.ndarray, np.ndarray]:
        labels, distances = self._index.knn_query(query, k=k, num_threads=1, filter=allow)
        return labels[0], distances[0]

    def _query_fewer(
        self, query: np.ndarray, k: int, allow: Callable[[int], bool] | None
    ) -> tuple[np.ndarray, np.ndarray]:
        while k > 0:
            try:
                return self._query(query, k, allow)
            except RuntimeError:
                k -= 1
        return np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.float32)

    def _similarity(self, distance: float) -> float:
        if self.space == "l2":
            # squared L2 between unit vectors is 2 - 2 cos
            return 1.0 - distance / 2.0
        return 1.0 - distance

    # ---- persistence ---------------------------------------------------------------------

    def save(self, path: Path) -> None:
        """Write the index to `path` atomically (a temporary file, then os.replace)."""
        deleted = np.asarray(sorted(self._deleted), dtype="<i8")

        def head(raw_name: str) -> bytes:
            length, digest = digest_file(raw_name)
            header = _HEADER.pack(
                _MAGIC,
                self.dim,
                SPACES.index(self.space),
                self.M,
                self.ef_construction,
                len(deleted),
                length,
                digest.intdigest(),
            )
            return header + deleted.tobytes()

        write_snapshot(Path(path), self._index.save_index, head)
        log.debug("saved vector index (%d live) to %s", len(self), path)

    @classmethod
    def load(cls, path: Path, dim: int, *, ef: int = 64) -> VectorIndex:
        """Read an index written by `save`; IndexCorrupt on any failure, including a
        dim mismatch (a different embedder wrote it)."""
        path = Path(path)
        try:
            return cls._load(path, dim, ef)
        except IndexCorrupt:
            raise
        except (OSError, ValueError, RuntimeError, MemoryError, struct.error) as e:
            raise IndexCorrupt(f"vector index {path} is unreadable: {e}") from e

    @classmethod
    def _load(cls, path: Path, dim: int, ef: int) -> VectorIndex:
        with open(path, "rb") as f:
            head = f.read(_HEADER.size)
            if len(head) != _HEADER.size:
                raise IndexCorrupt(f"vector index {path} is truncated")
            magic, fdim, space_ix, m, efc, n_deleted, length, want = _HEADER.unpack(head)
            if magic != _MAGIC:
                raise IndexCorrupt(f"{path} is not a vector index")
            if fdim != dim:
                raise IndexCorrupt(f"vector index {path} has dim {fdim}, expected {dim}")
            if space_ix >= len(SPACES):
                raise IndexCorrupt(f"vector index {path} has an unknown space")
            size = os.fstat(f.fileno()).st_size
            if size != _HEADER.size + 8 * n_deleted + length:
                raise IndexCorrupt(f"vector index {path} is truncated or has trailing data")
            deleted = np.frombuffer(f.read(8 * n_deleted), dtype="<i8")
            # hnswlib reads only from a path: copy the payload out, checking its hash.
            fd, raw_name = tempfile.mkstemp(prefix=path.name + ".", suffix=".load", dir=path.parent)
            try:
                digest = xxhash.xxh64()
                with os.fdopen(fd, "wb") as raw:
                    for block in iter(lambda: f.read(_CHUNK), b""):
                        digest.update(block)
                        raw.write(block)
                if digest.intdigest() != want:
                    raise IndexCorrupt(f"vector index {path} fails its checksum")
                index = cls.__new__(cls)  # no init_index: load_index builds the graph
                index._setup(dim, SPACES[space_ix], ef, m, efc)
                index._index.load_index(raw_name)
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(raw_name)
        # ef is not saved by hnswlib; the thread count is not either.
        index._index.set_ef(ef)
        index._index.set_num_threads(1)
        index._labels = {int(x) for x in index._index.get_ids_list()}
        index._deleted = {int(x) for x in deleted}
        if not index._deleted <= index._labels:
            raise IndexCorrupt(f"vector index {path} lists deleted labels it does not hold")
        log.debug("loaded vector index (%d live) from %s", len(index), path)
        return index


def digest_file(name: str, seed: bytes = b"") -> tuple[int, xxhash.xxh64]:
    """(length, xxh64) of `seed` followed by the file's bytes."""
    digest = xxhash.xxh64()
    digest.update(seed)
    with open(name, "rb") as raw:
        for block in iter(lambda: raw.read(_CHUNK), b""):
            digest.update(block)
        return len(seed) + raw.tell(), digest


def write_snapshot(
    path: Path, payload: Callable[[str], object], head: Callable[[str], bytes]
) -> None:
    """Write a snapshot of ours to `path` atomically: `payload(name)` writes the engine's
    own bytes (hnswlib's, faiss's) to a temporary file; `head(name)` returns what goes
    before them (our checked header, computed from that file); the whole is fsynced under
    a temporary name, then put in place with os.replace."""
    path.parent.mkdir(parents=True, exist_ok=True)
    raw_fd, raw_name = tempfile.mkstemp(prefix=path.name + ".", suffix=".raw", dir=path.parent)
    os.close(raw_fd)
    out_fd, out_name = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        payload(raw_name)
        before = head(raw_name)
        with os.fdopen(out_fd, "wb") as out, open(raw_name, "rb") as raw:
            out_fd = -1
            out.write(before)
            for block in iter(lambda: raw.read(_CHUNK), b""):
                out.write(block)
            out.flush()
            os.fsync(out.fileno())
        os.replace(out_name, path)
    except BaseException:
        if out_fd >= 0:
            os.close(out_fd)
        with contextlib.suppress(OSError):
            os.unlink(out_name)
        raise
    finally:
        with contextlib.suppress(OSError):
            os.unlink(raw_name)
