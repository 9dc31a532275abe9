"""Derived search indexes: unit embeddings (hnswlib), BM25 (tantivy), and the embedders.

Everything here is rebuildable from the canonical store and knows nothing of it: this
package imports only `contextfs.errors` from the project (`store/` and `index/` never
import each other; the indexer is where they meet). Pure library code: no trio and no
threads of its own. The caller serialises calls to one index (hnswlib and tantivy writers
are not safe for concurrent use) and runs them off the event loop.
"""

from __future__ import annotations

from contextfs.index.embed import (
    Embedder,
    EmbedderUnavailable,
    LocalEmbedder,
    OpenAIEmbedder,
    local_model_path,
)
from contextfs.index.text import IndexBusy, TextHit, TextIndex
from contextfs.index.units import Unit, chunk_text, node_units
from contextfs.index.vectors import IndexCorrupt, VectorIndex

__all__ = [
    "Embedder",
    "EmbedderUnavailable",
    "IndexBusy",
    "IndexCorrupt",
    "LocalEmbedder",
    "OpenAIEmbedder",
    "TextHit",
    "TextIndex",
    "Unit",
    "VectorIndex",
    "chunk_text",
    "local_model_path",
    "node_units",
]
