"""The real embedding model on a machine where each batch takes longer (as on a busy one):
for tests that must catch the indexer part way through its work."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from contextfs.index.embed import LocalEmbedder


class Slowed:
    """The real model on a machine where each batch takes `delay` seconds more."""

    def __init__(self, model: LocalEmbedder, delay: float) -> None:
        self.model, self.delay = model, delay
        self.name, self.dim = model.name, model.dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        time.sleep(self.delay)
        return self.model.embed(texts)
