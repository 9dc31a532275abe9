"""The store's buffers are a cache of a set size in the daemon's memory (`store_memory_mb`).

DuckDB keeps the pages it reads in buffers of its own, by default up to 80% of the
machine's memory: at a million nodes a day of reads grew a daemon by hundreds of MiB
(docs/scaling.md). A mount opens its store with a limit from `config.yaml`, reads past
it still answer, and `.status` says what the buffers hold (a PostgreSQL store's buffers
are the server's: the line says so)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from contextfs.app import close_memory, load_all_types, open_memory
from contextfs.config import load_config
from contextfs.errors import UsageError
from contextfs.status_json import memory_facts, memory_line
from contextfs.store.db import Store

MiB = 2**20


def _items(store: Store, count: int) -> list[bytes]:
    """`count` inbox items of 4 MiB that do not compress, one a transaction (as a mount
    stores a big file: a few MiB a step)."""
    out = []
    for i in range(count):
        data = os.urandom(4 * MiB)
        with store.atomic():
            store.add_inbox_item(store.new_id(), ("user", "u"), f"{i}.json", data, 0.0, "done", "")
        out.append(data)
    return out


def _fill(store: Store, rows: int) -> None:
    """A scratch table of `rows` texts that do not compress (each ~1 KB of digests)."""
    store.con.execute(
        "CREATE TABLE scratch AS SELECT i, "
        + " || ".join(f"md5((i * 31 + {k})::VARCHAR)" for k in range(32))
        + f" AS t FROM range({rows}) AS r(i)"
    )
    store.con.execute("CHECKPOINT")


def test_a_limited_store_reads_more_than_its_limit_and_its_buffers_stay_under_it(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "s.duckdb", memory_mb=48)
    try:
        _fill(store, 120_000)  # ~120 MB of text on disk
        used, limit = store.buffer_memory()
        assert limit == 48 * MiB
        total = store.con.execute("SELECT sum(strlen(t)) FROM scratch").fetchone()[0]
        assert total == 120_000 * 32 * 32
        rows = store.con.execute(
            "SELECT count(*) FROM scratch WHERE t LIKE '%abc%' AND i % 7 = 3"
        ).fetchone()[0]
        assert rows > 0
        used, _ = store.buffer_memory()
        assert 0 < used <= 48 * MiB
    finally:
        store.close()
    # the same reads without a limit keep more than the limited store could
    store = Store(tmp_path / "s.duckdb")
    try:
        store.con.execute("SELECT count(*) FROM scratch WHERE t LIKE '%abc%'").fetchone()
        used, limit = store.buffer_memory()
        assert limit > 48 * MiB and used > 48 * MiB
    finally:
        store.close()


def test_a_mount_opens_its_store_with_the_configured_limit_and_shows_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "config.yaml").write_text("search: false\nstore_memory_mb: 64\n")
    cfg = load_config(data)
    memory = open_memory(cfg, load_all_types(cfg))
    try:
        facts = memory_facts(memory)
        assert facts["store_buffers_limit_bytes"] == 64 * MiB
        assert facts["rss_bytes"] > facts["anonymous_bytes"] > 0
        assert 0 < facts["file_bytes"] < facts["rss_bytes"]
        line = memory_line(memory)
        assert line.startswith("memory: ") and "MiB resident" in line
        assert "store buffers " in line and " of 64 MiB" in line
    finally:
        close_memory(memory, cfg)
    # the default: 128 MiB
    (data / "config.yaml").write_text("search: false\n")
    cfg = load_config(data)
    assert cfg.store_memory_mb == 128
    memory = open_memory(cfg, load_all_types(cfg))
    try:
        assert memory_facts(memory)["store_buffers_limit_bytes"] == 128 * MiB
    finally:
        close_memory(memory, cfg)


def test_a_postgresql_store_says_its_buffers_are_the_servers(pg_dsn: str, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "config.yaml").write_text("search: false\n")
    cfg = replace(load_config(data), store=pg_dsn)
    memory = open_memory(cfg, load_all_types(cfg))
    try:
        facts = memory_facts(memory)
        assert facts["store_buffers_bytes"] is None
        assert facts["store_buffers_limit_bytes"] is None
        assert "store buffers: the server's" in memory_line(memory)
    finally:
        close_memory(memory, cfg)


@pytest.mark.parametrize(
    ("value", "error"),
    [("0", None), ("32", None), ("8", "at least 32"), ("-1", "at least 32"), ("big", "int")],
)
def test_store_memory_mb_in_config_yaml(tmp_path: Path, value: str, error: str | None) -> None:
    (tmp_path / "config.yaml").write_text(f"store_memory_mb: {value}\n")
    if error is None:
        assert load_config(tmp_path).store_memory_mb == int(value)
    else:
        with pytest.raises(UsageError, match=error):
            load_config(tmp_path)


@pytest.mark.allow_warnings
def test_a_read_past_the_limit_grows_it_and_answers(tmp_path: Path, caplog) -> None:
    """Reads running together can pin more than the limit (DuckDB then fails the query,
    it does not wait): the store raises the limit and answers, and says so in the log."""
    from contextfs.ctxtypes import builtin_schema_dir, load_types
    from contextfs.memory.service import Memory

    db = tmp_path / "contextfs.duckdb"
    memory = Memory(Store(db), load_types([builtin_schema_dir()]), data_dir=tmp_path)
    memory.create_owner("user", "default")
    want = {}
    for i in range(400):
        n = memory.create_node(("user", "default"), memory.types["preference"], f"note-{i}")
        text = " ".join(f"word{(i * 7919 + k * 104729) % 100003}" for k in range(400)) + "\n"
        memory.save_l2(n, text)
        want[n.id] = text
    memory.store.close()
    store = Store(db, memory_mb=32)
    store.con.execute("SET memory_limit = '1MiB'")  # far less than one read pins
    try:
        with caplog.at_level("WARNING", logger="contextfs.store.db"):
            texts = store.node_texts(list(want))
        assert {i: t[1] for i, t in texts.items()} == want
        _used, limit = store.buffer_memory()
        assert limit > 1 * MiB
        assert any("the limit is now" in r.getMessage() for r in caplog.records)
    finally:
        store.close()


def test_the_mount_check_of_a_store_holding_a_big_inbox_item_warns_of_nothing(
    tmp_path: Path, caplog
) -> None:
    """An inbox item bigger than the buffers (a 100 MB chat export in a 128 MiB store):
    the checks a mount runs that read blob bytes grow the buffers as expected (info), and
    the log has no warning (each remount of such a store logged one)."""
    from contextfs.store.fsck import mount_check, record_passed

    store = Store(tmp_path / "s.duckdb", memory_mb=32)
    try:
        _items(store, 12)  # 48 MB
        record_passed(store, mount_check(store))  # the checked point: the next is a mount's
        with caplog.at_level("INFO", logger="contextfs.store.db"):
            run = mount_check(store)
        assert run.passed and run.since is not None
        assert not [r for r in caplog.records if r.levelname == "WARNING"], caplog.text
    finally:
        store.close()


def test_an_import_far_bigger_than_the_buffers_is_stored_and_checkpointed(tmp_path: Path) -> None:
    """A checkpoint rewrites the row group the blobs of a big import share, whole: under the
    buffer limit DuckDB failed it as fatal and invalidated the database (at 128 MiB once a
    store held about 220 MB of blobs; here at 32 MiB after ~90 MB). It runs with the limit
    lifted, and the limit is back after it."""
    store = Store(tmp_path / "s.duckdb", memory_mb=32)
    try:
        items = _items(store, 24)  # 96 MB: several checkpoints (every 16 MB of log)
        assert store.buffer_memory() is not None
        assert store.buffer_memory()[1] == 32 * MiB  # type: ignore[index]
        ids = [r[0] for r in store.inbox_items()]
    finally:
        store.close()
    store = Store(tmp_path / "s.duckdb", memory_mb=32)
    try:
        assert [store.inbox_data(i) for i in ids[:2]] == items[:2]
        assert len(ids) == 24
    finally:
        store.close()
