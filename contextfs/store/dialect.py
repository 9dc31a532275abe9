"""SQL dialects: the store's one SQL text, rendered for the engine that runs it.

Role: the schema (contextfs.store.schema), the Store's statements and fsck's checks are
written once, in the SQL DuckDB and PostgreSQL share, with DuckDB's `?` placeholders and
type names. `render` turns such a statement into PostgreSQL's: the few words that differ
(BLOB, DOUBLE, strlen, list_contains) and psycopg's `%s` placeholders. DuckDB runs the text
as written. Boundary: text in, text out; no connection, no import of either driver.
"""

from __future__ import annotations

import functools
import re

DUCKDB = "duckdb"
POSTGRES = "postgresql"

# (pattern, replacement) in order; each is one word of DuckDB's with PostgreSQL's meaning
_PG_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\bBLOB\b"), "BYTEA"),
    (re.compile(r"\bDOUBLE\b(?!\s+PRECISION)"), "DOUBLE PRECISION"),
    # DuckDB's strlen counts bytes, as PostgreSQL's octet_length does (length counts chars)
    (re.compile(r"\bstrlen\("), "octet_length("),
    # list_contains(?::T[], col) -> col = ANY(?::T[])
    (re.compile(r"list_contains\((\?::\w+\[\]),\s*([\w.]+)\)"), r"\2 = ANY(\1)"),
)


@functools.lru_cache(maxsize=512)
def render(sql: str, dialect: str) -> str:
    """`sql` (the shared text) as `dialect` runs it. Cached: the Store's statements are a
    few dozen constant strings."""
    if dialect == DUCKDB:
        return sql
    if dialect != POSTGRES:
        raise ValueError(f"unknown SQL dialect {dialect!r}")
    for pattern, repl in _PG_RULES:
        sql = pattern.sub(repl, sql)
    # psycopg's placeholders are %s, so a literal % is written %%; no statement of ours
    # has a ? inside a string literal
    return sql.replace("%", "%%").replace("?", "%s")
