"""Work one mount of a shared store does at a time (`Store.claim`): an inbox item, the
daily jobs' lead. On a real PostgreSQL server, between two stores as two mounts hold
them: a claim is held by one, given back by `release`, and let go by the server when
its holder dies (kill -9), so another mount takes the work at once. The embedded store
has one mount: every claim is its own."""

from __future__ import annotations

import subprocess
import sys
import time

from contextfs.store import Store
from contextfs.store.pg import PgStore


def test_a_claim_is_held_by_one_mount_until_released(pg_dsn: str) -> None:
    a, b = PgStore(pg_dsn), PgStore(pg_dsn)
    try:
        assert a.claim("inbox", 7)
        assert not b.claim("inbox", 7)  # a has it
        assert b.claim("inbox", 8)  # another item is free
        assert b.claim("lead", 0) and not a.claim("lead", 0)  # one leader
        a.release("inbox", 7)
        assert b.claim("inbox", 7)
        assert not a.claim("inbox", 7)
    finally:
        a.close()
        b.close()


def test_a_dead_mounts_claims_are_taken_by_another_at_once(pg_dsn: str) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from contextfs.store.pg import PgStore\n"
            f"s = PgStore({pg_dsn!r})\n"
            "assert s.claim('inbox', 42) and s.claim('lead', 0)\n"
            "print('held', flush=True)\n"
            "time.sleep(600)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    b = PgStore(pg_dsn)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        assert not b.claim("inbox", 42) and not b.claim("lead", 0)
        holder.kill()  # kill -9: no release, the connection just ends
        holder.wait()
        t0 = time.monotonic()
        while not b.claim("inbox", 42):
            assert time.monotonic() - t0 < 5, "the dead mount's claim was not let go"
            time.sleep(0.05)
        assert b.claim("lead", 0)
    finally:
        holder.kill()
        b.close()


def test_the_embedded_store_has_every_claim(tmp_path) -> None:
    s = Store(tmp_path / "contextfs.duckdb")
    try:
        assert s.claim("inbox", 1) and s.claim("inbox", 1) and s.claim("lead", 0)
        s.release("inbox", 1)
    finally:
        s.close()
