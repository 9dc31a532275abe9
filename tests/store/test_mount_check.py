"""The mount's fsck checks what changed since the last check that passed; `contextfs fsck`
checks everything (docs/fsck.md). Each test runs on DuckDB and on a real
PostgreSQL, through `app.open_memory` (what a mount runs) and the real `contextfs fsck`.

Damage is done the way bit rot or a bug would leave it: straight in the database, with no
outbox row. Rot under rows written before the checked point is not the mount's to find
(that is the contract), but `contextfs fsck` finds it; damage to anything written after
it turns the mount read-only, as every fsck problem does."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from contextfs.app import close_memory, load_all_types, open_memory
from contextfs.config import Config, load_config
from contextfs.memory.service import Memory
from contextfs.store.fsck import CHECKED_SCHEMA, CHECKED_SEQ, FULL_AT, checked_point
from contextfs.testing import contextfs_cmd

OWNER = ("user", "default")


def _config(location: str | Path, tmp_path: Path) -> Config:
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    (data / "config.yaml").write_text("search: false\n")
    cfg = load_config(data)
    if isinstance(location, Path):  # DuckDB: the data dir's own file
        return cfg
    return replace(cfg, store=location)


def _mount(cfg: Config) -> Memory:
    return open_memory(cfg, load_all_types(cfg))


def _said(m: Memory) -> str:
    """What `.status` says of the mount's fsck."""
    assert m.mount_check is not None
    return m.mount_check.describe()


def _write(m: Memory, name: str, text: str) -> int:
    n = m.create_node(OWNER, m.types["preference"], name)
    m.save_l2(n, text)
    return n.id


def _fsck(cfg: Config) -> subprocess.CompletedProcess[str]:
    extra = ["--store", cfg.store] if cfg.store else []
    return subprocess.run(
        contextfs_cmd("fsck", str(cfg.data_dir), *extra),
        capture_output=True,
        text=True,
        timeout=120,
    )


def _rot(m: Memory, node_id: int, text: str) -> None:
    """A node's text changes on disk with no write of ours: no outbox row, no new hash."""
    with m.store.atomic():
        m.store.con.execute("UPDATE nodes SET l2 = ? WHERE id = ?", [text, node_id])


def test_a_mount_checks_fully_once_then_only_what_changed(location, tmp_path):
    cfg = _config(location, tmp_path)
    m = _mount(cfg)
    assert _said(m).startswith("full (every row"), _said(m)
    _write(m, "tea", "Green tea.\n")
    upto = m.store.generation()
    close_memory(m, cfg)

    m = _mount(cfg)
    assert not m.failsafe
    assert _said(m).startswith("since seq "), _said(m)
    assert "node(s) changed" in _said(m) and "never closed" not in _said(m)
    assert checked_point(m.store) == upto  # this mount's pass: the next one starts here
    close_memory(m, cfg)


def test_rot_before_the_checked_point_is_found_by_fsck_not_by_the_mount(location, tmp_path):
    cfg = _config(location, tmp_path)
    m = _mount(cfg)
    tea = _write(m, "tea", "Green tea.\n")
    close_memory(m, cfg)
    m = _mount(cfg)  # checks tea (changed since the first mount's pass) and passes
    close_memory(m, cfg)

    m = _mount(cfg)
    _rot(m, tea, "Green tea, rotten.\n")
    close_memory(m, cfg)
    m = _mount(cfg)
    assert not m.failsafe, "the mount does not rehash texts written before its point"
    assert "since seq" in _said(m)
    close_memory(m, cfg)

    f = _fsck(cfg)
    assert f.returncode == 5, f.stdout + f.stderr
    assert f"content_hashes: node {tea}: content hash does not match its L2" in f.stdout


@pytest.mark.allow_warnings
@pytest.mark.parametrize(
    "damage",
    [
        "text",
        "old version text",
        "version row lost",
        "node row lost",
        "outbox row lost",
        "path taken twice",
    ],
)
def test_damage_to_what_changed_after_the_point_turns_the_mount_read_only(
    location, tmp_path, damage
):
    cfg = _config(location, tmp_path)
    m = _mount(cfg)  # the point: before every write below
    tea = _write(m, "tea", "Green tea.\n")
    (node,) = [n for n in m.nodes.values() if n.id == tea]
    m.save_l2(node, "Green tea, no sugar.\n")
    coffee = _write(m, "coffee", "Black.\n")
    con = m.store.con
    if damage == "path taken twice":  # a store written before the unique indexes
        with m.store.atomic():
            con.execute("DROP INDEX nodes_live_path")
    with m.store.atomic():
        if damage == "text":
            con.execute("UPDATE nodes SET l2 = 'rot' WHERE id = ?", [tea])
            expect = f"content_hashes: node {tea}: content hash does not match its L2"
        elif damage == "old version text":
            con.execute("UPDATE versions SET l2 = 'rot' WHERE node_id = ? AND version = 1", [tea])
            expect = f"content_hashes: node {tea} version 1: content hash does not match"
        elif damage == "version row lost":
            con.execute("DELETE FROM versions WHERE node_id = ? AND version = 1", [tea])
            expect = f"versions_complete: node {tea}: version 2 but versions 1..2 has 1 rows"
        elif damage == "node row lost":
            con.execute("DELETE FROM nodes WHERE id = ?", [coffee])
            expect = f"versions_complete: versions of missing node {coffee}"
        elif damage == "outbox row lost":
            con.execute("DELETE FROM outbox WHERE node_id = ? AND version = 2", [tea])
            expect = f"outbox_covers_nodes: node {tea}: version 2 has no outbox row"
        else:  # the mount names the missing index first
            con.execute("UPDATE nodes SET name = 'tea' WHERE id = ?", [coffee])
            expect = "live_name_constraints: constraint nodes_live_path is missing"
    close_memory(m, cfg)

    m = _mount(cfg)
    assert m.failsafe and "since seq" in _said(m), (m.failsafe, _said(m))
    assert expect in m.failsafe, m.failsafe
    m.store.close()
    f = _fsck(cfg)  # the full check agrees, and records no pass
    assert f.returncode == 5 and expect.split(": ", 1)[1][:30] in f.stdout, f.stdout


@pytest.mark.allow_warnings
def test_a_store_without_a_checked_point_gets_the_full_check(location, tmp_path):
    cfg = _config(location, tmp_path)
    m = _mount(cfg)
    tea = _write(m, "tea", "Green tea.\n")
    close_memory(m, cfg)
    m = _mount(cfg)
    close_memory(m, cfg)

    m = _mount(cfg)  # a store from before this check kept no point; rot is under it
    with m.store.atomic():
        m.store.con.execute(
            "DELETE FROM store_meta WHERE key IN (?, ?, ?)", [CHECKED_SEQ, CHECKED_SCHEMA, FULL_AT]
        )
    _rot(m, tea, "Green tea, rotten.\n")
    close_memory(m, cfg)
    m = _mount(cfg)
    assert _said(m).startswith("full (every row"), _said(m)
    assert m.failsafe and f"node {tea}: content hash does not match" in m.failsafe
    m.store.close()


def test_a_point_recorded_under_another_schema_version_gets_the_full_check(location, tmp_path):
    cfg = _config(location, tmp_path)
    m = _mount(cfg)
    _write(m, "tea", "Green tea.\n")
    with m.store.atomic():  # as a migration leaves it: the point checked the old tables
        m.store.con.execute("UPDATE store_meta SET value = '1' WHERE key = ?", [CHECKED_SCHEMA])
    close_memory(m, cfg)
    m = _mount(cfg)
    assert _said(m).startswith("full (every row"), _said(m)
    close_memory(m, cfg)
    m = _mount(cfg)
    assert _said(m).startswith("since seq"), _said(m)
    close_memory(m, cfg)


def test_fsck_records_its_pass_and_the_mount_starts_from_it(location, tmp_path):
    cfg = _config(location, tmp_path)
    m = _mount(cfg)
    for i in range(3):
        _write(m, f"note-{i}", f"Note {i}.\n")
    gen = m.store.generation()
    m.store.close()  # without close_memory: the session is left open, as a kill -9 leaves it
    assert checked_point_of(cfg) < gen

    f = _fsck(cfg)
    assert f.returncode == 0 and f"checked up to seq {gen}" in f.stdout, f.stdout + f.stderr
    assert checked_point_of(cfg) == gen
    m = _mount(cfg)
    assert f"since seq {gen} (0 node(s) changed" in _said(m), _said(m)
    assert "never closed" in _said(m)  # the session the store.close() above left
    assert m.mount_check.as_dict()["last_session_closed"] is False
    close_memory(m, cfg)
    m = _mount(cfg)
    assert "never closed" not in _said(m)
    close_memory(m, cfg)


def checked_point_of(cfg: Config) -> int:
    from contextfs.store.backend import open_store

    store = open_store(cfg.store_location, read_only=True)
    try:
        return checked_point(store) or 0
    finally:
        store.close()


@pytest.mark.allow_warnings
def test_blob_bytes_are_rehashed_by_fsck_and_their_sizes_checked_at_every_mount(location, tmp_path):
    cfg = _config(location, tmp_path)
    m = _mount(cfg)
    with m.store.atomic():  # an inbox item's bytes: one blob, as a drop stores them
        m.store.add_inbox_item(
            m.store.new_id(), OWNER, "notes.txt", b"tea at four\n", 0.0, "done", "kept"
        )
    (h,) = m.store.con.execute("SELECT hash FROM blobs").fetchone()
    close_memory(m, cfg)

    m = _mount(cfg)
    with m.store.atomic():  # rot: same length, other bytes, no write of ours
        m.store.con.execute("UPDATE blobs SET data = ? WHERE hash = ?", [b"tea at five\n", h])
    close_memory(m, cfg)
    m = _mount(cfg)
    assert not m.failsafe, "a mount does not re-read blob bytes"
    close_memory(m, cfg)
    f = _fsck(cfg)
    assert f.returncode == 5 and f"blob {h}: its bytes hash to another value" in f.stdout

    m = _mount(cfg)
    with m.store.atomic():  # bytes cut short to nothing under their row: rot, fsck's
        m.store.con.execute("UPDATE blobs SET data = ? WHERE hash = ?", [b"", h])
    close_memory(m, cfg)
    m = _mount(cfg)
    assert not m.failsafe, "a mount reads no blob bytes, not even their length"
    close_memory(m, cfg)
    f = _fsck(cfg)
    assert f.returncode == 5 and f"blob {h}: its row says 12 bytes, it holds 0" in f.stdout

    m = _mount(cfg)
    with m.store.atomic():  # a blob's recorded size out of range: checked at every mount
        m.store.con.execute("UPDATE blobs SET size = 0 WHERE hash = ?", [h])
    close_memory(m, cfg)
    m = _mount(cfg)
    assert m.failsafe and m.mount_check is not None
    assert f"blobs_present: blob {h} holds 0 bytes" in m.mount_check.problems
    m.store.close()


async def test_a_node_whose_files_alone_changed_passes_the_mounts_check(location, tmp_path):
    """A file saved beside a node's tiers, and nothing else since the last check: on
    PostgreSQL its outbox rows say only that the files changed (version 0), and the
    check took them for the node's newest version, missing: every mount after it was
    read-only while `contextfs fsck` found nothing."""
    from contextfs.fs.build import build_tree
    from contextfs.fs.ops import Operations
    from tests.fs.conftest import FS

    cfg = _config(location, tmp_path)
    m = _mount(cfg)
    _write(m, "x", "hello\n")
    close_memory(m, cfg)
    for name in ("notes.txt", "more.txt"):
        m = _mount(cfg)
        assert m.failsafe is None, m.failsafe
        fs = FS(Operations(build_tree(m, status=lambda: "status\n")))
        await fs.write(f"user/default/preferences/x/{name}", b"note\n")
        close_memory(m, cfg)
    m = _mount(cfg)
    assert m.failsafe is None, m.failsafe
    assert "0 problem" in _said(m) or "passed" in _said(m), _said(m)
    m.store.close()


def test_a_mount_of_a_store_full_of_files_reads_none_of_their_bytes(tmp_path, caplog):
    """A store of 160 MB of files, checked and closed, mounts without reading their bytes:
    the chunk checks summed the length of every blob at every mount, and DuckDB, which
    reads a BLOB column 2,048 rows (128 MiB) at a time, grew its buffers past their limit
    again and again (1 GB of files: a minute of checking, 3.9 GB of memory, a mount that
    `contextfs mount`'s 30 s gave up on)."""
    import logging
    import os

    cfg = _config(tmp_path / "contextfs.duckdb", tmp_path)
    m = _mount(cfg)
    n = m.create_node(OWNER, m.types["preference"], "photos")
    for i in range(40):  # 4 MiB each, 2,560 chunks in all
        m.attachment_store.add_attachment(
            n, None, f"p{i}.bin", "file", 0o644, data=os.urandom(4 << 20)
        )
    close_memory(m, cfg)
    m = _mount(cfg)  # the check since the point its first mount recorded
    close_memory(m, cfg)

    caplog.set_level(logging.INFO, logger="contextfs.store.db")
    caplog.clear()
    m = _mount(cfg)
    try:
        assert not m.failsafe and _said(m).startswith("since seq "), _said(m)
        said = [r.getMessage() for r in caplog.records if "store buffers" in r.getMessage()]
        assert said == [], said
        buffers = m.store.buffer_memory()
        assert buffers is not None and buffers[1] == cfg.store_memory_mb << 20, buffers
    finally:
        close_memory(m, cfg)
