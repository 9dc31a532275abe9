"""`contextfs salvage` and backups on a DuckDB store file damaged block by block: every
node salvage writes holds exactly the text that was stored, every node it cannot read is
listed, and a lost current text comes back from its version row; a backup taken at close
is the whole store and `restore` puts it back, keeping the damaged file aside."""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

import pytest

from contextfs.app import load_all_types
from contextfs.config import load_config
from contextfs.memory.service import Memory
from contextfs.store import Store
from contextfs.store.backup import BackupPolicy, backups, restore, take
from contextfs.store.fsck import check_store
from contextfs.transfer.salvage import SalvageSource
from contextfs.transfer.vault import export_tree

HEADER = 3 * 4096  # DuckDB's file header: the blocks after it are 256 KiB each
BLOCK = 256 * 1024
NODES = 60


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], bytes]:
    """A data dir of NODES entities with ~10 KB of text each (several blocks of L2 in
    `nodes` and again in `versions`), one with an attachment; the store file's bytes."""
    d = tmp_path_factory.mktemp("salvage")
    cfg = load_config(d)
    types = load_all_types(cfg)
    store = Store(cfg.db_path)
    m = Memory(store, types, data_dir=d)
    m.create_owner("user", "default")
    rnd = random.Random(7)
    words = [
        "".join(rnd.choice("abcdefghij") for _ in range(rnd.randint(3, 9))) for _ in range(999)
    ]
    texts = {}
    for i in range(NODES):
        n = m.create_node(("user", "default"), types["entity"], f"n{i}")
        texts[f"n{i}"] = f"node {i}: " + " ".join(rnd.choice(words) for _ in range(1500)) + "\n"
        m.save_l2(n, texts[f"n{i}"])
    n0 = next(n for n in m.nodes.values() if n.name == "n0")
    m.attachment_store.add_attachment(
        n0, None, "notes.txt", "file", 0o644, data=b"kept beside n0\n"
    )
    store.close()
    return d, texts, cfg.db_path.read_bytes()


def _salvage(d: Path, out: Path) -> tuple[SalvageSource, dict[str, str]]:
    cfg = load_config(d)
    store = Store(cfg.db_path, read_only=True)
    try:
        source = SalvageSource(store.con, load_all_types(cfg))
        export_tree(source, out)
    finally:
        store.close()
    base = out / "user/default/entities"
    got = {p.stem: p.read_text() for p in base.glob("*.md")} if base.is_dir() else {}
    return source, got


def test_salvage_of_an_undamaged_store_is_the_whole_store(stored, tmp_path):
    d, texts, _good = stored
    source, got = _salvage(d, tmp_path / "out")
    assert source.problems == [] and source.notes == []
    assert set(got) == set(texts)
    for name, text in texts.items():
        assert got[name].endswith("---\n" + text), name
    assert (tmp_path / "out/user/default/entities/n0/notes.txt").read_bytes() == b"kept beside n0\n"


def test_salvage_reads_around_each_damaged_block(stored, tmp_path):
    d, texts, good = stored
    damaged_dir = tmp_path / "data"
    damaged_dir.mkdir()
    db = load_config(damaged_dir).db_path
    blocks = (len(good) - HEADER) // BLOCK
    assert blocks >= 6  # the texts span several blocks of each table
    damaged = from_versions = 0
    for b in range(1, blocks):
        bad = bytearray(good)
        at = HEADER + b * BLOCK + 1000
        bad[at : at + 64] = os.urandom(64)
        db.write_bytes(bad)
        store = Store(db, read_only=True)
        try:  # the damage is real when a full read of the store meets it
            hit = any("Corrupt database file" in p for p in _check(store))
        finally:
            store.close()
        damaged += hit
        source, got = _salvage(damaged_dir, tmp_path / f"out{b}")
        # never a wrong byte: what is written is what was stored
        for name, body in got.items():
            assert body.endswith("---\n" + texts[name]), (b, name)
        # never a silent loss: what is not written is listed
        unreadable = [p for p in source.problems if "unreadable" in p]
        assert len(got) + len(unreadable) >= NODES, (b, len(got), source.problems)
        if len(got) == NODES and any("version 1 kept" in n for n in source.notes):
            from_versions += 1
    assert damaged >= blocks // 2, damaged
    # a block of current texts lost, each one taken from its version row instead
    assert from_versions >= 1


def _check(store: Store) -> list[str]:
    try:
        return check_store(store)
    except Exception as exc:  # noqa: BLE001 - a damaged block is what this looks for
        return [str(exc)]


def test_a_backup_at_close_is_the_whole_store_and_restore_puts_it_back(stored, tmp_path):
    d, texts, good = stored
    data = tmp_path / "data"
    data.mkdir()
    db = load_config(data).db_path
    db.write_bytes(good)
    policy = BackupPolicy(data / "backups", keep=2, interval=0)
    for _ in range(3):  # every close is due (interval 0); the newest two are kept
        store = Store(db)
        store.backup = policy
        store.close()
    have = backups(data / "backups")
    assert len(have) == 2
    assert take(db, BackupPolicy(data / "backups", keep=2, interval=3600)) is None  # not due
    with open(db, "r+b") as f:  # the header's block: the file does not open
        f.seek(4096)
        f.write(os.urandom(4096))
    with pytest.raises(Exception, match="Corrupt database file"):
        Store(db)
    aside = restore(db, have[0])
    assert aside.exists() and aside.read_bytes()[4096:8192] != good[4096:8192]
    store = Store(db, read_only=True)
    try:
        assert check_store(store) == []
        assert store.con.execute("SELECT count(*) FROM nodes").fetchone()[0] == NODES
    finally:
        store.close()


@pytest.mark.allow_warnings  # the damaged files are logged
def test_a_damaged_newest_backup_gives_way_to_the_one_before(stored, tmp_path, capsys):
    """The store file and its newest backup both damaged: the mount shows the backup
    before (read-only), and `contextfs restore` puts that one back."""
    from contextfs.app import close_memory, open_memory
    from contextfs.cli import main

    d, _texts, good = stored
    data = tmp_path / "data"
    data.mkdir()
    cfg = load_config(data)
    cfg.db_path.write_bytes(good)
    policy = BackupPolicy(data / "backups", keep=2, interval=0)
    older, newer = take(cfg.db_path, policy, now=1_000.0), take(cfg.db_path, policy, now=2_000.0)
    assert older is not None and newer is not None
    for f in (cfg.db_path, newer):
        with open(f, "r+b") as fh:
            fh.seek(4096)
            fh.write(os.urandom(4096))
    memory = open_memory(cfg, load_all_types(cfg))
    try:
        assert memory.failsafe is not None and "backup of 1970-01-01T00:16:40Z" in memory.failsafe
        assert memory.store.path == older
        assert len(list(memory.walk())) == NODES
    finally:
        close_memory(memory, cfg)
    assert main(["restore", str(data)]) == 0
    out = capsys.readouterr()
    assert f"from {older}" in out.out and f"skipped {newer}" in out.err
    store = Store(cfg.db_path, read_only=True)
    try:
        assert check_store(store) == []
    finally:
        store.close()


def test_salvage_finds_nodes_by_id_when_the_nodes_table_cannot_place_them(stored, tmp_path):
    """A damaged block of `nodes` that holds the columns placing every node (owner, type,
    name): `contextfs salvage` writes each node the other tables name to
    `lost+found/node-<id>.md` with its newest readable version, and lists each one. It
    wrote nothing at all, though every version was readable."""
    from contextfs.testing.mount import contextfs_cmd

    d, texts, good = stored
    data = tmp_path / "data"
    data.mkdir()
    db = load_config(data).db_path
    for b in range(1, (len(good) - HEADER) // BLOCK):
        bad = bytearray(good)
        at = HEADER + b * BLOCK + 1000
        bad[at : at + 64] = b"\xab" * 64
        db.write_bytes(bad)
        store = Store(db, read_only=True)
        try:
            placed = _readable(store, "SELECT owner_kind, type, name FROM nodes")
            versions = _readable(store, "SELECT node_id, l2 FROM versions")
        finally:
            store.close()
        if not placed and versions:
            break
    else:
        pytest.fail("no block holds the columns that place the nodes alone")
    out = tmp_path / "out"
    r = subprocess.run(
        contextfs_cmd("salvage", str(data), str(out)), capture_output=True, text=True
    )
    assert r.returncode == 1, r.stdout + r.stderr  # something was not written whole
    found = {p.stem: p.read_text() for p in (out / "lost+found").glob("node-*.md")}
    assert len(found) == NODES, (sorted(found), r.stdout)
    bodies = {body.split("---\n", 2)[2] for body in found.values()}
    assert bodies == set(texts.values())  # every text, exactly as stored
    for name in found:
        assert f"written to lost+found/, its place lost: node {name[5:]}: " in r.stdout
    # n0's attachment is found by its node's id too
    assert any((out / "lost+found" / n / "notes.txt").exists() for n in found), r.stdout


def _readable(store: Store, sql: str) -> bool:
    try:
        store.con.execute(sql).fetchall()
    except Exception:  # noqa: BLE001 - the damage is what this looks for
        return False
    return True
