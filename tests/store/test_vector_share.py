"""The vectors mounts of one PostgreSQL store share (`PgVectorShare`), against a real
server: a row put by one mount is read by another, and a server that goes away makes the
share a miss (the indexer embeds) without an error and without trying to connect on every
slice, then the share answers again once the server is back."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import numpy as np
import pytest

from contextfs.search.indexer import shared_digest
from contextfs.store import pg
from contextfs.store.pg import PgStore
from contextfs.testing.postgres import PgServer

MODEL = "all-MiniLM-L6-v2/384"


@pytest.fixture
def server() -> Iterator[PgServer]:
    with PgServer() as s:
        yield s


def _row(seed: int) -> bytes:
    return np.random.default_rng(seed).standard_normal(384).astype(np.float32).tobytes()


@pytest.mark.allow_warnings  # the share's one warning while the server is away
def test_vectors_one_mount_shares_are_read_by_another_and_a_lost_server_is_a_miss(
    server, monkeypatch, caplog
):
    dsn = server.create_database("share")
    store_a, store_b = PgStore(dsn), PgStore(dsn)
    a, b = store_a.shared_vectors(), store_b.shared_vectors()
    try:
        keys = [shared_digest(t) for t in ("tea at dawn", "kite on sunday", "x" * 3000)]
        a.put(MODEL, [(k, _row(i)) for i, k in enumerate(keys)])
        a.put(MODEL, [(keys[0], _row(99))])  # a text's first vector stays
        got = b.get(MODEL, keys + [12345])
        assert got == {k: _row(i) for i, k in enumerate(keys)}
        assert b.get("other-model/384", keys) == {}, "another model's vectors are not mixed in"

        monkeypatch.setattr(pg, "_SHARE_RETRY_S", 1.0)
        connects = []
        real_connect = pg.psycopg.connect

        def counted(*args, **kwargs):
            connects.append(time.monotonic())
            return real_connect(*args, **kwargs)

        monkeypatch.setattr(pg.psycopg, "connect", counted)
        server.stop()
        with caplog.at_level(logging.WARNING, logger="contextfs.store.pg"):
            assert b.get(MODEL, keys) == {}
            b.put(MODEL, [(7, _row(7))])  # not shared, not raised
            for _ in range(20):
                assert b.get(MODEL, keys) == {}
        # the first call found its connection gone and tried a fresh one once (a
        # restarted server would have taken it); the next ones, within the retry window,
        # did not try again (a connect a slice would slow the indexer down)
        assert len(connects) == 1, f"the share tried to connect {len(connects)} times"
        warnings = [r for r in caplog.records if "shared vectors" in r.getMessage()]
        assert len(warnings) == 1, [r.getMessage() for r in warnings]

        server.start()
        time.sleep(1.1)
        assert b.get(MODEL, keys[:1]) == {keys[0]: _row(0)}
        assert len(connects) == 2
    finally:
        a.close()
        b.close()
        store_a.close()
        store_b.close()


@pytest.mark.allow_warnings  # the share's one warning while the server does not answer
def test_a_frozen_server_makes_the_share_a_miss_by_its_deadline(server, monkeypatch):
    """The server stops answering (SIGSTOP): its statement_timeout cannot fire, so the
    share's own deadline (`_SHARE_TIMEOUT_MS` and a second) ends the call, which is a
    miss (the indexer embeds) instead of holding the indexer's thread until the thaw."""

    dsn = server.create_database("frozen")
    store = PgStore(dsn)
    share = store.shared_vectors()
    monkeypatch.setattr(pg, "_SHARE_TIMEOUT_MS", 1_000)
    try:
        key = shared_digest("tea at dawn")
        share.put(MODEL, [(key, _row(1))])
        got: list[object] = []

        def ask() -> None:
            t0 = time.monotonic()
            got.append(share.get(MODEL, [key]))
            got.append(time.monotonic() - t0)

        assert server.while_frozen(ask) is None, "the share waited for the frozen server"
        assert got[0] == {} and 1.5 < float(got[1]) < 10, got  # type: ignore[arg-type]
        time.sleep(pg._SHARE_RETRY_S + 0.1)
        assert share.get(MODEL, [key]) == {key: _row(1)}
    finally:
        share.close()
        store.close()


def test_every_connection_a_mount_opens_probes_a_silent_server(server) -> None:
    """The store's, the LISTEN's and the vector share's connections all ask for TCP
    keepalives (10 s idle, 3 probes 5 s apart): a server host that goes silent is found
    on each, the LISTEN that only waits included (a connection libpq made with them
    lists them among its parameters)."""
    dsn = server.create_database("alive")
    store = PgStore(dsn)
    listener, share = store.listener(), store.shared_vectors()
    try:
        listener.wait(0.1)
        assert listener.raw is not None
        for con in (store.con.raw, listener.raw, share._con()):
            params = con.info.get_parameters()
            assert (params["keepalives"], params["keepalives_idle"]) == ("1", "10"), params
            assert (params["keepalives_interval"], params["keepalives_count"]) == ("5", "3")
            assert con.execute("SELECT 1").fetchone() == (1,)
    finally:
        listener.close()
        share.close()
        store.close()
