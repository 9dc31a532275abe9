"""A compact vector index for large stores: IVF-PQ codes in RAM, exact vectors on disk.

hnswlib (`index.vectors.VectorIndex`) keeps every unit's float32 vector and its graph links
in RAM, about 1.9 KB a unit: three million units would not fit beside the embedding model.
`CompactVectorIndex` answers the same calls (upsert, delete, search, search_among,
snapshot, save/load, len, in) with about 80-130 B of RAM a unit (measured 81 B by its own
count, 112 B of process RSS at 3M units: docs/scaling.md):

- faiss `IndexIVFPQFastScan` holds a product-quantised code a unit (4 bits for every 4
  dimensions: 48 bytes at 384-d) plus its row number, in inverted lists over a coarse
  k-means; a query scans the `nprobe` nearest lists (SIMD over the 4-bit codes) and keeps
  a shortlist of the best approximate scores;
- each unit's exact vector sits in a float16 file on disk (`data_path`, one fixed-size row
  a unit); the shortlist is re-ranked exactly from rows read with `os.pread`, never mapped,
  so they cost page cache (which the kernel reclaims), not resident memory;
- labels live in numpy arrays (sorted labels and their rows; row -> label), not in Python
  sets or dicts, whose per-entry cost (about 100 B) would be larger than the codes.

A deleted or replaced unit's row is marked dead at once (searches skip it) and leaves the
inverted lists at the next `save`; the row is written again only after one more `save`,
so no row is overwritten while a save that names it may still be the one the indexer
loads after a crash (it replays the outbox after it). A row a load finds dead is free.

faiss must be trained: `build` (or `from_index`, the switch from hnswlib at the indexer's
size threshold) trains on the vectors it is given, then adds them. The coarse lists are
not retrained as the index grows; recall at 30x the training size is in
docs/scaling.md. Like hnswlib here, faiss runs on one thread: the caller serialises
every call on one lock (as for `VectorIndex`), and this module starts no threads.

On disk: the index file (a header of ours with magic, dim, space, the data file's id, row
count, payload length and xxh64, then row -> label and faiss's own bytes) and the data
file (magic, dim, id, then the rows). `load` refuses a truncated or foreign file, and an
index whose data file is missing, short or from another build (IndexCorrupt).
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import tempfile
import uuid
import weakref
from collections.abc import Callable, Iterable, Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import xxhash

from contextfs.errors import IndexCorrupt
from contextfs.index.vectors import Snapshot, VectorIndex, digest_file, write_snapshot

if TYPE_CHECKING:
    import faiss

log = logging.getLogger(__name__)

SPACES = ("cosine", "ip")  # inner product over unit vectors; hnswlib's l2 is not offered

_MAGIC = b"CFSIVFS1"
# magic, dim, space index, data file id, rows named (the row -> label array's length),
# payload length (row -> label bytes + faiss bytes), payload xxh64
_HEADER = struct.Struct("<8sIB16sQQQ")
_DATA_MAGIC = b"CFSF16V1"
_DATA_HEADER = struct.Struct("<8sI16s")  # magic, dim, data file id
_CHUNK = 1 << 20
TRAIN_UNITS = 40_000  # k-means on more points costs minutes and gains little recall
_PQ_DIMS = 4  # dimensions a 4-bit sub-quantiser: a code of dim / 8 bytes (48 at 384-d)
_TRAIN_MIN = 64  # a tiny index trains on copies of what it has (k-means needs points)
# How many candidates an `allow` filter may make a search look at before it settles for
# fewer than k (hnswlib's filter walks the graph until it finds k or runs out).
_FILTER_MAX = 1 << 16
_FADVISE = hasattr(os, "posix_fadvise")  # Linux; elsewhere rows are read one by one


@cache
def _faiss() -> Any:
    """faiss, imported on first use (0.2 s: a mount of a small store never pays it).
    Its OpenMP loops get one thread, process-wide, like hnswlib here: the daemon serialises
    calls and the embedding model wants the cores (two threads on two busy cores were
    measured 25x slower to train)."""
    import faiss

    faiss.omp_set_num_threads(1)
    return faiss


def _coarse_lists(n: int) -> int:
    """Inverted lists for an index trained on n vectors: at least 39 training points a
    list (faiss's own floor), at most 1024 (trained at 100k units, the index serves 3M:
    3,000 a list), a power of two."""
    want = max(1, min(1024, n // 39))
    return 1 << (want.bit_length() - 1)


class CompactVectorIndex:
    """IVF-PQ (faiss) over unit vectors with exact float16 re-ranking from a file."""

    def __init__(
        self,
        dim: int,
        data_path: Path,
        *,
        space: str = "cosine",
        nprobe: int = 128,
        shortlist: int = 400,
    ) -> None:
        """An untrained, empty index; `build`/`from_index`/`load` make usable ones."""
        if space not in SPACES:
            raise ValueError(f"space must be one of {SPACES}, not {space!r}")
        if dim < 1 or dim % (2 * _PQ_DIMS):
            raise ValueError(f"dim must be a positive multiple of {2 * _PQ_DIMS}")
        self.dim = dim
        self.space = space
        self.nprobe = nprobe
        self.shortlist = shortlist
        self.data_path = Path(data_path)
        self._row_bytes = 2 * dim
        self._ivf: faiss.IndexIVFPQFastScan | None = None
        self._row_label = np.full(1024, -1, dtype=np.int64)  # -1: a free or dead row
        self._rows = 0  # rows 0.._rows-1 are named by the data file
        self._keys = np.empty(0, dtype=np.int64)  # live labels, sorted
        self._key_rows = np.empty(0, dtype=np.int64)  # their rows
        # Rows free to write: named by neither of the last two saves (the caller names a
        # save as current a moment after `save` returns, so the one before stays current
        # until then). Rows dropped by the last save wait in `_settled` for the next one.
        self._free = np.empty(0, dtype=np.int64)
        self._settled = np.empty(0, dtype=np.int64)
        self._dead: list[np.ndarray] = []  # rows dead since the last save (still in faiss)
        self._data_id = b""
        self._fd = -1

    # ---- building ------------------------------------------------------------------------

    @classmethod
    def build(
        cls,
        dim: int,
        data_path: Path,
        labels: Sequence[int],
        vectors: np.ndarray,
        *,
        space: str = "cosine",
        nprobe: int = 128,
        shortlist: int = 400,
    ) -> CompactVectorIndex:
        """A new index (and a new data file at `data_path`, replacing any) trained on and
        holding these vectors."""
        index = cls(dim, data_path, space=space, nprobe=nprobe, shortlist=shortlist)
        vectors = index._rows_of(labels, vectors)
        index._create_data_file()
        index._train(vectors[_sample(len(vectors), TRAIN_UNITS)])
        index.upsert(labels, vectors)
        return index

    @classmethod
    def from_index(
        cls,
        source: VectorIndex,
        data_path: Path,
        *,
        nprobe: int = 128,
        shortlist: int = 400,
        batch: int = 8192,
    ) -> CompactVectorIndex:
        """The live units of an hnswlib index, moved into a new compact index (the switch
        at the indexer's size threshold). Reads the vectors back a batch at a time."""
        labels = source.live_labels()
        index = cls(source.dim, data_path, space=source.space, nprobe=nprobe, shortlist=shortlist)
        index._create_data_file()
        sample = sorted(labels[i] for i in _sample(len(labels), TRAIN_UNITS))
        index._train(source.snapshot(sample).vectors)
        for i in range(0, len(labels), batch):
            part = labels[i : i + batch]
            index.upsert(part, source.snapshot(part).vectors)
        log.info("moved %d units from hnswlib into a compact index", len(labels))
        return index

    def _train(self, sample: np.ndarray) -> None:
        n = len(sample)
        if n == 0:
            raise ValueError("a compact index needs vectors to train on")
        sample = np.ascontiguousarray(sample, dtype=np.float32)
        if n < _TRAIN_MIN:
            copies = np.tile(sample, (-(-_TRAIN_MIN // n), 1))
            jitter = np.random.default_rng(0).standard_normal(copies.shape).astype(np.float32)
            sample = copies + 1e-3 * jitter
        nlist = _coarse_lists(n)
        faiss = _faiss()
        metric = faiss.METRIC_INNER_PRODUCT
        quantizer = faiss.IndexFlatIP(self.dim)
        subs = self.dim // _PQ_DIMS
        ivf = faiss.IndexIVFPQFastScan(quantizer, self.dim, nlist, subs, 4, metric)
        ivf.cp.min_points_per_centroid = 1  # a small index trains on what it has, quietly
        ivf.pq.cp.min_points_per_centroid = 1
        ivf.train(sample)
        ivf.nprobe = min(self.nprobe, nlist)
        self._ivf = ivf
        log.debug("trained a compact index on %d vectors: %d lists", n, nlist)

    # ---- the data file -----------------------------------------------------------------

    def _create_data_file(self) -> None:
        self.data_path.parent.mkdir(parents=True, exist_ok=True)
        self._data_id = uuid.uuid4().bytes
        fd = os.open(self.data_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        os.pwrite(fd, _DATA_HEADER.pack(_DATA_MAGIC, self.dim, self._data_id), 0)
        self._adopt_fd(fd)

    def _adopt_fd(self, fd: int) -> None:
        self._fd = fd
        weakref.finalize(self, _close_fd, fd)

    def _offset(self, row: int) -> int:
        return _DATA_HEADER.size + row * self._row_bytes

    def _write_rows(self, rows: np.ndarray, vectors: np.ndarray) -> None:
        data = vectors.astype("<f2")
        order = np.argsort(rows, kind="stable")
        rows, data = rows[order], data[order]
        start = 0
        while start < len(rows):  # runs of consecutive rows go in one write
            end = start + 1
            while end < len(rows) and rows[end] == rows[end - 1] + 1:
                end += 1
            os.pwrite(self._fd, data[start:end].tobytes(), self._offset(int(rows[start])))
            start = end

    def _read_rows(self, rows: np.ndarray) -> np.ndarray:
        out = np.empty((len(rows), self.dim), dtype="<f2")
        size = self._row_bytes
        offsets = [self._offset(row) for row in rows.tolist()]
        if len(offsets) > 1 and _FADVISE:
            # Ask the kernel for every row first, then read: the disk reads run together.
            # Read one by one, a shortlist of 1,000 rows not in the page cache took about
            # 100 ms; told first, 11 ms (a rarely used file's pages do not stay cached).
            for off in offsets:
                os.posix_fadvise(self._fd, off, size, os.POSIX_FADV_WILLNEED)
        for i, off in enumerate(offsets):
            buf = os.pread(self._fd, size, off)
            if len(buf) != size:
                raise IndexCorrupt(f"vector data file {self.data_path} is short")
            out[i] = np.frombuffer(buf, dtype="<f2")
        return out.astype(np.float32)

    # ---- writes --------------------------------------------------------------------------

    def _rows_of(self, labels: Sequence[int] | np.ndarray, vectors: np.ndarray) -> np.ndarray:
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim == 1:
            vectors = vectors.reshape(1, -1)
        if vectors.shape != (len(labels), self.dim):
            raise ValueError(
                f"expected vectors of shape ({len(labels)}, {self.dim}), got {vectors.shape}"
            )
        if self.space == "cosine":
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            vectors = vectors / np.where(norms == 0, 1.0, norms)
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def _find(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Positions of labels in the sorted key array, and whether each is there."""
        pos = np.searchsorted(self._keys, labels)
        found = pos < len(self._keys)
        found[found] = self._keys[pos[found]] == labels[found]
        return pos, found

    def _kill(self, rows: np.ndarray) -> None:
        if len(rows):
            self._row_label[rows] = -1
            self._dead.append(rows.copy())

    def _take_rows(self, n: int) -> np.ndarray:
        reuse = self._free[:n]
        self._free = self._free[n:]
        fresh = np.arange(self._rows, self._rows + n - len(reuse), dtype=np.int64)
        self._rows += len(fresh)
        if self._rows > len(self._row_label):
            grown = np.full(max(self._rows, 2 * len(self._row_label)), -1, dtype=np.int64)
            grown[: len(self._row_label)] = self._row_label
            self._row_label = grown
        return np.concatenate([reuse, fresh])

    def upsert(self, labels: Sequence[int], vectors: np.ndarray) -> None:
        """Add or replace vectors; a deleted label comes back to life."""
        if self._ivf is None:
            raise ValueError("the compact index is not trained (use build or from_index)")
        keys = np.asarray([int(x) for x in labels], dtype=np.int64)
        vectors = self._rows_of(keys, vectors)
        if len(np.unique(keys)) != len(keys):
            raise ValueError("duplicate labels in one upsert")
        if not len(keys):
            return
        pos, found = self._find(keys)
        self._kill(self._key_rows[pos[found]])
        rows = self._take_rows(len(keys))
        self._write_rows(rows, vectors)
        self._ivf.add_with_ids(vectors, rows)
        self._row_label[rows] = keys
        self._key_rows[pos[found]] = rows[found]
        new = ~found
        if new.any():
            order = np.argsort(keys[new], kind="stable")
            new_keys, new_rows = keys[new][order], rows[new][order]
            at = np.searchsorted(self._keys, new_keys)
            self._keys = np.insert(self._keys, at, new_keys)
            self._key_rows = np.insert(self._key_rows, at, new_rows)

    def delete(self, labels: Iterable[int]) -> None:
        """Delete labels; unknown or already deleted labels are ignored."""
        keys = np.unique(np.asarray([int(x) for x in labels], dtype=np.int64))
        if not len(keys):
            return
        pos, found = self._find(keys)
        at = pos[found]
        self._kill(self._key_rows[at])
        self._keys = np.delete(self._keys, at)
        self._key_rows = np.delete(self._key_rows, at)

    # ---- reads ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, label: object) -> bool:
        if not isinstance(label, int | np.integer):
            return False
        return bool(self._find(np.asarray([int(label)], dtype=np.int64))[1][0])

    @property
    def nbytes(self) -> int:
        """RAM held by this index: faiss's codes, ids and centroids, and the label arrays."""
        ivf = self._ivf
        held = self._row_label.nbytes + self._keys.nbytes + self._key_rows.nbytes
        held += self._free.nbytes + self._settled.nbytes + sum(x.nbytes for x in self._dead)
        if ivf is not None:
            lists = ivf.invlists
            assert lists is not None  # an IVF index owns its lists
            sizes = np.asarray([lists.list_size(i) for i in range(ivf.nlist)], dtype=np.int64)
            blocks = -(-sizes // ivf.bbs)  # codes are kept in blocks of bbs units
            held += int(blocks.sum()) * ivf.bbs * ivf.code_size + int(sizes.sum()) * 8
            held += ivf.nlist * self.dim * 4 + ivf.pq.centroids.size() * 4
        return held

    def search_among(
        self, vector: np.ndarray, labels: Sequence[int], k: int
    ) -> list[tuple[int, float]]:
        """Exact nearest among the given live labels (a small scope)."""
        return self.snapshot(labels).nearest(vector, k)

    def snapshot(self, labels: Sequence[int]) -> Snapshot:
        """The live labels among `labels` with their vectors (read from the data file)."""
        keys = np.asarray([int(x) for x in labels], dtype=np.int64)
        pos, found = self._find(keys)
        wanted = tuple(int(x) for x in keys[found])
        if not wanted:
            return Snapshot((), np.zeros((0, self.dim), dtype=np.float32), self.space)
        items = self._read_rows(self._key_rows[pos[found]])
        if self.space == "cosine":  # float16 rounding moves the norm a little
            norms = np.linalg.norm(items, axis=1, keepdims=True)
            items = items / np.where(norms == 0, 1.0, norms)
        return Snapshot(wanted, items, self.space)

    def search(
        self,
        vector: np.ndarray,
        k: int,
        *,
        allow: Callable[[int], bool] | None = None,
    ) -> list[tuple[int, float]]:
        """The k nearest live labels as (label, similarity), best first: a shortlist from
        the PQ codes, re-ranked exactly. `allow` keeps only the labels it accepts; the
        shortlist grows until k pass (or `_FILTER_MAX` candidates were looked at)."""
        query = np.asarray(vector, dtype=np.float32).reshape(1, -1)
        if query.shape[1] != self.dim:
            raise ValueError(f"expected a vector of dim {self.dim}, got {query.shape[1]}")
        k = min(int(k), len(self))
        if k <= 0 or self._ivf is None:
            return []
        if self.space == "cosine":
            norm = float(np.linalg.norm(query))
            query = query / (norm or 1.0)
        total = self._ivf.ntotal
        want = min(total, max(self.shortlist, 4 * k))
        while True:
            _dist, found = self._ivf.search(query, want)
            rows = found[0][found[0] >= 0]
            labels = self._row_label[rows]
            keep = labels >= 0  # dead rows stay in faiss until the next save
            if allow is not None:
                keep &= np.fromiter((allow(int(x)) for x in labels), bool, len(labels))
            rows, labels = rows[keep], labels[keep]
            if len(rows) >= k or want >= min(total, _FILTER_MAX):
                break
            want = min(total, _FILTER_MAX, want * 4)
        if not len(rows):
            return []
        sims = self._read_rows(rows) @ query[0]
        if self.space == "cosine":  # rows are unit length before float16 rounding
            sims = np.clip(sims, -1.0, 1.0)
        top = np.argsort(-sims, kind="stable")[:k]
        return [(int(labels[i]), float(sims[i])) for i in top]

    # ---- persistence ---------------------------------------------------------------------

    def _settle(self) -> np.ndarray:
        """Drop the dead rows from faiss (one pass over the inverted lists); which."""
        if not self._dead:
            return np.empty(0, dtype=np.int64)
        dead = np.unique(np.concatenate(self._dead))
        assert self._ivf is not None  # `save` checked
        # faiss's stub names only IDSelector; its wrapper takes an id array too
        self._ivf.remove_ids(dead)  # type: ignore[arg-type]
        self._dead = []
        return dead

    def save(self, path: Path) -> None:
        """Write the index to `path` atomically (a temporary file, then os.replace), after
        the data file is on disk; rows freed before this save become reusable."""
        if self._ivf is None:
            raise ValueError("the compact index is not trained")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        dropped = self._settle()
        os.fsync(self._fd)
        names = self._row_label[: self._rows].astype("<i8")

        def head(raw_name: str) -> bytes:
            length, digest = digest_file(raw_name, names.tobytes())
            header = _HEADER.pack(
                _MAGIC,
                self.dim,
                SPACES.index(self.space),
                self._data_id,
                self._rows,
                length,
                digest.intdigest(),
            )
            return header + names.tobytes()

        write_snapshot(path, lambda raw_name: _faiss().write_index(self._ivf, raw_name), head)
        # rows the save before this one dropped are named by no save that may be current
        self._free = np.concatenate([self._free, self._settled])
        self._settled = dropped
        log.debug("saved compact vector index (%d live) to %s", len(self), path)

    @classmethod
    def load(
        cls,
        path: Path,
        dim: int,
        data_path: Path,
        *,
        nprobe: int = 128,
        shortlist: int = 400,
    ) -> CompactVectorIndex:
        """Read an index written by `save`, with its data file; IndexCorrupt on any
        failure, including a dim mismatch or a data file of another build."""
        path = Path(path)
        try:
            return cls._load(path, dim, Path(data_path), nprobe, shortlist)
        except IndexCorrupt:
            raise
        except (OSError, ValueError, RuntimeError, MemoryError, struct.error) as e:
            raise IndexCorrupt(f"vector index {path} is unreadable: {e}") from e

    @classmethod
    def _load(
        cls, path: Path, dim: int, data_path: Path, nprobe: int, shortlist: int
    ) -> CompactVectorIndex:
        with open(path, "rb") as f:
            head = f.read(_HEADER.size)
            if len(head) != _HEADER.size:
                raise IndexCorrupt(f"vector index {path} is truncated")
            magic, fdim, space_ix, data_id, rows, length, want = _HEADER.unpack(head)
            if magic != _MAGIC:
                raise IndexCorrupt(f"{path} is not a compact vector index")
            if fdim != dim:
                raise IndexCorrupt(f"vector index {path} has dim {fdim}, expected {dim}")
            if space_ix >= len(SPACES):
                raise IndexCorrupt(f"vector index {path} has an unknown space")
            if os.fstat(f.fileno()).st_size != _HEADER.size + length or length < 8 * rows:
                raise IndexCorrupt(f"vector index {path} is truncated or has trailing data")
            names = f.read(8 * rows)
            digest = xxhash.xxh64(names)
            # faiss reads only from a path: copy its bytes out, checking the hash.
            fd, raw_name = tempfile.mkstemp(prefix=path.name + ".", suffix=".load", dir=path.parent)
            try:
                with os.fdopen(fd, "wb") as raw:
                    for block in iter(lambda: f.read(_CHUNK), b""):
                        digest.update(block)
                        raw.write(block)
                if digest.intdigest() != want:
                    raise IndexCorrupt(f"vector index {path} fails its checksum")
                ivf = _faiss().read_index(raw_name)
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(raw_name)
        index = cls(dim, data_path, space=SPACES[space_ix], nprobe=nprobe, shortlist=shortlist)
        if not isinstance(ivf, _faiss().IndexIVFPQFastScan) or ivf.d != dim:
            raise IndexCorrupt(f"vector index {path} does not hold an IVF-PQ index of dim {dim}")
        ivf.nprobe = min(nprobe, ivf.nlist)
        row_label = np.frombuffer(names, dtype="<i8").astype(np.int64)
        live = np.flatnonzero(row_label >= 0)
        if ivf.ntotal != len(live):
            raise IndexCorrupt(f"vector index {path} names {len(live)} rows, faiss {ivf.ntotal}")
        index._open_data_file(data_id, rows)
        index._ivf = ivf
        index._rows = rows
        index._row_label = row_label if len(row_label) else index._row_label
        order = np.argsort(row_label[live], kind="stable")
        index._keys = row_label[live][order]
        index._key_rows = live[order].astype(np.int64)
        if len(index._keys) > 1 and not (np.diff(index._keys) > 0).all():
            raise IndexCorrupt(f"vector index {path} names a label twice")
        index._free = np.flatnonzero(row_label < 0).astype(np.int64)
        log.debug("loaded compact vector index (%d live) from %s", len(index), path)
        return index

    def _open_data_file(self, data_id: bytes, rows: int) -> None:
        try:
            fd = os.open(self.data_path, os.O_RDWR)
        except FileNotFoundError as e:
            raise IndexCorrupt(f"vector data file {self.data_path} is missing") from e
        try:
            head = os.pread(fd, _DATA_HEADER.size, 0)
            if len(head) != _DATA_HEADER.size:
                raise IndexCorrupt(f"vector data file {self.data_path} is truncated")
            magic, dim, got = _DATA_HEADER.unpack(head)
            if magic != _DATA_MAGIC or dim != self.dim or got != data_id:
                raise IndexCorrupt(f"vector data file {self.data_path} is not this index's")
            if os.fstat(fd).st_size < self._offset(rows):
                raise IndexCorrupt(f"vector data file {self.data_path} is truncated")
        except BaseException:
            os.close(fd)
            raise
        self._data_id = data_id
        self._adopt_fd(fd)


def load_vectors(
    path: Path, dim: int, data_path: Path, **compact: int
) -> VectorIndex | CompactVectorIndex:
    """Whichever kind of vector index `path` holds (by its magic): IndexCorrupt if
    neither."""
    try:
        with open(path, "rb") as f:
            magic = f.read(8)
    except OSError as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise IndexCorrupt(f"vector index {path} is unreadable: {e}") from e
    if magic == _MAGIC:
        return CompactVectorIndex.load(path, dim, data_path, **compact)
    return VectorIndex.load(path, dim)


def _sample(n: int, most: int) -> np.ndarray:
    """Up to `most` distinct positions of n, spread evenly (deterministic)."""
    if n <= most:
        return np.arange(n)
    return np.linspace(0, n - 1, most).astype(np.int64)


def _close_fd(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)
