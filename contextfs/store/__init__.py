"""Canonical state in DuckDB: the schema, the Store that reads and writes it, and fsck.

The store knows nothing of FUSE, of context types or of indexes: rows in, rows out.
"""

from contextfs.store.db import Store

__all__ = ["Store"]
