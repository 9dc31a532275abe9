"""Search: indexing the store into the derived indexes, retrieval, and the answer bundle.

`indexer` drains the store's outbox into hnswlib and tantivy (`contextfs.index`);
`retrieval` runs the hybrid search and packs `_context.md`. Change ranking here.
"""
