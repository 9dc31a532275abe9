"""Store fixtures on both backends: DuckDB in tmp_path, and a real PostgreSQL server
(contextfs.testing.postgres: initdb + pg_ctl in a temporary directory, one per session)
with a fresh database per test."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from contextfs.store.backend import StoreBackend, open_store
from contextfs.testing.postgres import PgServer

_names = itertools.count()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    with PgServer() as server:
        yield server


@pytest.fixture
def pg_dsn(pg_server: PgServer) -> str:
    """A new empty database on the session's server."""
    return pg_server.create_database(f"t{next(_names)}")


@pytest.fixture(params=["duckdb", "postgresql"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str | Path:
    """Where a store lives, once per backend."""
    if request.param == "duckdb":
        return tmp_path / "contextfs.duckdb"
    return request.getfixturevalue("pg_dsn")


@pytest.fixture
def opener(location: str | Path) -> Callable[..., StoreBackend]:
    """Opens the store at `location` (again, for a "remount")."""
    return lambda **kw: open_store(location, **kw)
