"""Derived search indexes: unit embeddings (hnswlib), BM25 (tantivy), and the embedders.

Everything here is rebuildable from the canonical store and knows nothing of it: this
package imports only `contextfs.errors` from the project (`store/` and `index/` never
import each other; the indexer is where they meet). Pure library code: no trio and no
threads of its own. The caller serialises calls to one index (hnswlib and tantivy writers
are not safe for concurrent use) and runs them off the event loop.
"""
