"""The benchmarks' embedder: the real one wrapped and timed, or, past a budget of real texts,
synthetic vectors of the same count and shape (`scripts/bench_search.py`, and
`scripts/bench_scale.py` whose million units would take hours to embed for real).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import xxhash

if TYPE_CHECKING:
    from contextfs.index.embed import LocalEmbedder

SEED = 20261130  # the noise of the synthetic vectors (bench_search's seed)


class BenchEmbedder:
    """Wraps the real embedder and times it. With `real_budget`, only the first
    `real_budget` texts are embedded for real; later ones get a noisy copy of one of those
    (picked by a hash of the text): synthetic vectors, same count and shape. With
    `real_share` instead, that share of the texts, spread over the whole run (picked by a
    hash of the text), is embedded for real and the others are noisy copies."""

    def __init__(
        self,
        real: LocalEmbedder,
        real_budget: int | None = None,
        seed: int = SEED,
        *,
        real_share: float | None = None,
    ) -> None:
        self.real = real
        self.name, self.dim = real.name, real.dim
        self.real_budget = real_budget
        self.real_share = real_share
        self.bank: list[np.ndarray] = []
        self.model_seconds = 0.0
        self.model_texts = 0
        self.synthetic_texts = 0
        self.rng = np.random.default_rng(seed)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if self.real_share is not None:
            return self._shared(texts)
        if self.real_budget is None:
            return self._real(texts)
        n_real = max(0, min(len(texts), self.real_budget - len(self.bank)))
        parts = []
        if n_real:
            rows = self._real(texts[:n_real])
            self.bank.extend(rows)
            parts.append(rows)
        rest = texts[n_real:]
        if rest:
            parts.append(self._synthetic(rest))
        return np.concatenate(parts, axis=0) if parts else np.empty((0, self.dim), np.float32)

    def _shared(self, texts: list[str]) -> np.ndarray:
        """`real_share` of the texts through the model, in their places; the rest noisy
        copies of vectors the model made (the first text is real while there is none)."""
        cut = (self.real_share or 0.0) * 10_000
        real_at = [
            i
            for i, t in enumerate(texts)
            if xxhash.xxh64_intdigest(t.encode(), seed=1) % 10_000 < cut
        ]
        if texts and not self.bank and not real_at:
            real_at = [0]
        out = np.empty((len(texts), self.dim), np.float32)
        if real_at:
            rows = self._real([texts[i] for i in real_at])
            self.bank.extend(rows)
            out[real_at] = rows
        chosen = set(real_at)
        rest = [i for i in range(len(texts)) if i not in chosen]
        if rest:
            out[rest] = self._synthetic([texts[i] for i in rest])
        return out

    def _synthetic(self, rest: list[str]) -> np.ndarray:
        """A noisy copy of a real vector for each text (picked by a hash of the text)."""
        base = np.stack(
            [self.bank[xxhash.xxh64_intdigest(t.encode()) % len(self.bank)] for t in rest]
        )
        noise = self.rng.standard_normal(base.shape).astype(np.float32)
        rows = base + noise * (0.5 / np.sqrt(self.dim))
        rows /= np.linalg.norm(rows, axis=1, keepdims=True)
        self.synthetic_texts += len(rest)
        return rows.astype(np.float32)

    def _real(self, texts: list[str]) -> np.ndarray:
        t0 = time.perf_counter()
        rows = self.real.embed(texts)
        self.model_seconds += time.perf_counter() - t0
        self.model_texts += len(texts)
        return rows
