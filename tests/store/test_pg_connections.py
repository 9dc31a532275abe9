"""How many connections a mount holds on a PostgreSQL server (issue 30, "no call without a
deadline"; docs/scaling.md): every thread but the memory's reads through a few shared
connections (`PgReaders`), so sixteen reading threads cost the server two connections, not
sixteen, and the reads come back right, also across a restart of the server."""

from __future__ import annotations

import threading
from pathlib import Path

import psycopg
import psycopg.conninfo

from contextfs.memory.service import Memory
from contextfs.store.backend import open_store
from contextfs.store.pg import READERS
from contextfs.testing.postgres import PgServer


def text_of(i: int) -> str:
    return f"Kettle note {i}: oolong at 90 degrees, three minutes {i}.\n"


def connections(server: PgServer, dsn: str) -> int:
    """Server backends of the database `dsn` names, this check's own left out."""
    with psycopg.connect(server.dsn(), autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            [psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]],
        ).fetchone()
    assert row is not None
    return int(row[0])


def read_in_threads(store, ids: list[int], threads: int, rounds: int) -> list[str]:
    """Every id's L2 read `rounds` times by each of `threads` threads, all running at once;
    what each read returned that was not the text written (and any error)."""
    wrong: list[str] = []
    start = threading.Barrier(threads)

    def reader() -> None:
        start.wait()
        try:
            for _ in range(rounds):
                for i, nid in enumerate(ids):
                    got = store.node_text(nid)
                    if got is None or got[1] != text_of(i):
                        wrong.append(f"{nid}: {got!r}")
        except Exception as exc:  # noqa: BLE001 - reported by the test
            wrong.append(f"{type(exc).__name__}: {exc}")

    pool = [threading.Thread(target=reader) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(60)
    return wrong


def test_reading_threads_share_a_few_connections_across_a_restart(
    tmp_path: Path, pg_server: PgServer, pg_dsn: str, types
) -> None:
    store = open_store(pg_dsn)
    m = Memory(store, types, data_dir=tmp_path)
    m.create_owner("user", "default")
    ctype = m.types["preference"]
    ids = []
    with m.transaction():
        for i in range(8):
            n = m.create_node(("user", "default"), ctype, f"k{i}", persist=False)
            m.save_l2(n, text_of(i))
            ids.append(n.id)
    try:
        assert read_in_threads(store, ids, threads=16, rounds=5) == []
        # the memory's own connection and the readers, however many threads read
        assert connections(pg_server, pg_dsn) <= 1 + READERS
        pg_server.stop()
        pg_server.start()
        # the connections the restart ended are found and made again, once each
        assert read_in_threads(store, ids, threads=16, rounds=2) == []
        assert connections(pg_server, pg_dsn) <= 1 + READERS
    finally:
        store.close()
    assert connections(pg_server, pg_dsn) == 0
