"""Which units the vector index holds, and the hash of the text each was embedded from.

The indexer embeds a unit again only when its text's xxh64 changed, and finds a node's
units by their labels (label = node id x SLOTS + slot, so a node's labels are one range).
A dict of labels to hex strings plus a dict of per-node sets cost about 330 B a unit
(measured: 1 GB at a million nodes of three units); two sorted numpy arrays cost 16 B.
Writes come a batch at a time (one indexer batch: a few hundred units), so inserting into
the sorted arrays (a copy of each) is cheap next to the embedding that precedes it.

Pure data, no I/O but `save`/`load` of one `.npy` file.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np


def digest_int(digest: str) -> int:
    """A unit's hex xxh64 (`Unit.digest`) as the integer kept here."""
    return int(digest, 16)


class UnitDigests:
    """label -> xxh64 (as uint64) of every unit in the vector index, sorted by label."""

    def __init__(self, labels: Sequence[int] = (), digests: Sequence[int] = ()) -> None:
        keys = np.asarray(labels, dtype=np.int64)
        values = np.asarray(digests, dtype=np.uint64)
        if keys.shape != values.shape:
            raise ValueError("labels and digests differ in length")
        order = np.argsort(keys, kind="stable")
        self._keys, self._values = keys[order], values[order]
        if len(self._keys) > 1 and not (np.diff(self._keys) > 0).all():
            raise ValueError("a label appears twice")

    def __len__(self) -> int:
        return len(self._keys)

    def _find(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        pos = np.searchsorted(self._keys, labels)
        found = pos < len(self._keys)
        found[found] = self._keys[pos[found]] == labels[found]
        return pos, found

    def lookup(self, labels: Iterable[int]) -> tuple[np.ndarray, np.ndarray]:
        """The digests of these labels (0 where unknown) and which are known."""
        keys = np.asarray(list(labels), dtype=np.int64)
        pos, found = self._find(keys)
        out = np.zeros(len(keys), dtype=np.uint64)
        out[found] = self._values[pos[found]]
        return out, found

    def get(self, label: int) -> int | None:
        digests, found = self.lookup([label])
        return int(digests[0]) if found[0] else None

    def set_many(self, labels: Sequence[int], digests: Sequence[int]) -> None:
        """Add or replace; labels must be distinct."""
        keys = np.asarray(labels, dtype=np.int64)
        values = np.asarray(digests, dtype=np.uint64)
        if not len(keys):
            return
        pos, found = self._find(keys)
        self._values[pos[found]] = values[found]
        new = ~found
        if new.any():
            order = np.argsort(keys[new], kind="stable")
            at = np.searchsorted(self._keys, keys[new][order])
            self._keys = np.insert(self._keys, at, keys[new][order])
            self._values = np.insert(self._values, at, values[new][order])

    def remove(self, labels: Iterable[int]) -> None:
        """Forget these labels; unknown ones are ignored."""
        keys = np.unique(np.asarray(list(labels), dtype=np.int64))
        if not len(keys):
            return
        pos, found = self._find(keys)
        self._keys = np.delete(self._keys, pos[found])
        self._values = np.delete(self._values, pos[found])

    def in_range(self, lo: int, hi: int) -> list[int]:
        """The labels in [lo, hi): one node's units."""
        a, b = np.searchsorted(self._keys, [lo, hi])
        return self._keys[a:b].tolist()

    def in_ranges(self, starts: Sequence[int], width: int, most: int) -> list[int] | None:
        """The labels in [s, s + width) for every s (many nodes' units, in one pass), or
        None when there are more than `most`."""
        lo = np.asarray(starts, dtype=np.int64)
        a = np.searchsorted(self._keys, lo)
        b = np.searchsorted(self._keys, lo + width)
        if int((b - a).sum()) > most:
            return None
        return [
            x for i, j in zip(a.tolist(), b.tolist(), strict=True) for x in self._keys[i:j].tolist()
        ]

    def last_in(
        self, starts: Sequence[int] | np.ndarray, width: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """For every s: how many labels lie in [s, s + width), and the last of them (-1
        when none), as int64 arrays."""
        lo = np.asarray(starts, dtype=np.int64)
        a, b = np.searchsorted(self._keys, lo), np.searchsorted(self._keys, lo + width)
        last = np.where(b > a, self._keys[np.maximum(b - 1, 0)] if len(self._keys) else -1, -1)
        return (b - a).astype(np.int64), last.astype(np.int64)

    def labels(self) -> np.ndarray:
        return self._keys.copy()

    # ---- persistence ---------------------------------------------------------------------

    def save(self, path: Path) -> None:
        """One (n, 2) little-endian uint64 array: label, digest."""
        table = np.empty((len(self._keys), 2), dtype="<u8")
        table[:, 0] = self._keys.astype(np.uint64)
        table[:, 1] = self._values
        with open(path, "wb") as f:
            np.save(f, table, allow_pickle=False)

    @classmethod
    def load(cls, path: Path) -> UnitDigests:
        """ValueError (or OSError) when the file is not a whole table written by `save`."""
        table = np.load(path, allow_pickle=False)
        if table.ndim != 2 or table.shape[1] != 2 or table.dtype != np.dtype("<u8"):
            raise ValueError(f"{path} is not a table of unit digests")
        return cls(table[:, 0].astype(np.int64), table[:, 1])
