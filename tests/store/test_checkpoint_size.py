"""The store's write-ahead log goes into the database file once it holds
`store_checkpoint_mb` (64 MiB by default): a checkpoint stalls every write while it runs
and rewrites whole columns of the row groups the log touched, so during a big import
rarer ones keep writes moving (scripts/bench_ingest.py --backlog); what the log holds is
replayed at the next open after a crash, and nothing in it is lost."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from contextfs.config import load_config
from contextfs.errors import UsageError
from contextfs.store.db import Store

MiB = 2**20


def _write_items(store: Store, count: int) -> list[bytes]:
    """`count` inbox items of 2 MiB that do not compress, one a transaction."""
    out = []
    for i in range(count):
        data = os.urandom(2 * MiB)
        with store.atomic():
            store.add_inbox_item(store.new_id(), ("user", "u"), f"{i}.json", data, 0.0, "done", "")
        out.append(data)
    return out


def test_the_log_is_moved_into_the_file_at_the_configured_size(tmp_path: Path) -> None:
    wal = tmp_path / "s.duckdb.wal"
    store = Store(tmp_path / "s.duckdb", checkpoint_mb=8)
    try:
        _write_items(store, 3)  # 6 MiB: under the size, kept in the log
        assert wal.stat().st_size >= 6 * MiB
        _write_items(store, 1)  # the commit that passes 8 MiB moves it
        assert not wal.exists() or wal.stat().st_size < MiB
    finally:
        store.close()


def test_the_log_stays_under_half_the_buffer_limit(tmp_path: Path) -> None:
    """What the log holds sits in DuckDB's buffers until it is moved: under a 32 MiB limit
    a 64 MiB log failed a commit out of memory (fatally), so it is moved at 16 MiB there."""
    wal = tmp_path / "s.duckdb.wal"
    store = Store(tmp_path / "s.duckdb", memory_mb=32, checkpoint_mb=64)
    try:
        _write_items(store, 7)  # 14 MiB
        assert wal.stat().st_size >= 14 * MiB
        _write_items(store, 1)  # past 16 MiB: moved
        assert not wal.exists() or wal.stat().st_size < MiB
        _write_items(store, 20)  # 40 MiB more: stored all the same
    finally:
        store.close()


def test_a_crash_with_a_big_log_loses_nothing(tmp_path: Path) -> None:
    """A daemon killed with 40 MiB in the log (under the default size, so never moved):
    the next open replays it, every item is there."""
    db = tmp_path / "s.duckdb"
    code = (
        "import os, random\n"
        "from pathlib import Path\n"
        "from contextfs.store.db import Store\n"
        f"s = Store(Path({str(db)!r}))\n"
        "for i in range(20):\n"
        "    data = random.Random(i).randbytes(2 << 20)\n"
        "    with s.atomic():\n"
        "        s.add_inbox_item(s.new_id(), ('user', 'u'), f'{i}.json', data, 0.0, 'done', '')\n"
        "os._exit(0)\n"  # no close: nothing checkpoints the log
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2])
    assert (tmp_path / "s.duckdb.wal").stat().st_size >= 40 * MiB
    store = Store(db)
    try:
        items = {row[3]: row[0] for row in store.inbox_items()}
        assert len(items) == 20
        for i in (0, 7, 19):
            assert store.inbox_data(items[f"{i}.json"]) == random.Random(i).randbytes(2 << 20)
    finally:
        store.close()


def test_the_size_comes_from_config_and_is_checked(tmp_path: Path) -> None:
    assert load_config(tmp_path).store_checkpoint_mb == 64
    (tmp_path / "config.yaml").write_text("store_checkpoint_mb: 16\n")
    assert load_config(tmp_path).store_checkpoint_mb == 16
    for bad in ("0", "-1", "yes", "5000"):
        (tmp_path / "config.yaml").write_text(f"store_checkpoint_mb: {bad}\n")
        with pytest.raises(UsageError, match="store_checkpoint_mb"):
            load_config(tmp_path)
