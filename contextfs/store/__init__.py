"""Canonical state: the schema, the Store that reads and writes it (DuckDB, the default;
`store.pg.PgStore` on a shared PostgreSQL database), and fsck.

The store knows nothing of FUSE, of context types or of indexes: rows in, rows out.
"""

from contextfs.store.db import Store

__all__ = ["Store"]
