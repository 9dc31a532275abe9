"""A real mount on a real PostgreSQL server: what is written comes back after a remount
and is found by search; the DSN's password shows nowhere a user or another local user
could read it."""

from __future__ import annotations

import errno
import json
import os
import time
from pathlib import Path

import pytest

from contextfs.store.fsck import check_store
from contextfs.store.pg import PgStore
from contextfs.testing import Mount
from contextfs.testing.mount import log_problems
from tests.integration.test_search import results, wait_indexed, write_node

pytestmark = pytest.mark.timeout(300)


def test_a_mount_on_postgresql_keeps_and_finds_what_was_written(tmp_path: Path, pg_dsn: str):
    password = pg_dsn.split(":", 2)[2].split("@", 1)[0]
    assert len(password) > 10 and password in pg_dsn
    data = tmp_path / "data"
    data.mkdir()
    (data / "config.yaml").write_text("search: true\n")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    m = Mount(mnt, data, search=True)
    m.start("--store", pg_dsn)  # on the command line, as a user would type it
    try:
        # the long-lived daemon's command line does not carry the DSN
        cmdline = Path(f"/proc/{m.proc.pid}/cmdline").read_bytes().decode()
        assert "postgresql://" not in cmdline and password not in cmdline
        prefs = mnt / "user" / "default" / "preferences"
        write_node(prefs, "espresso", "Espresso with oat milk every morning.\n", fsync=True)
        assert (prefs / "espresso" / "L2.md").read_text().endswith("oat milk every morning.\n")
        hits = results(mnt, "what coffee do I drink in the morning")
        assert hits and hits[0]["path"].startswith("user/default/preferences/espresso")
        status = m.status()
        assert "store: postgresql://postgres@/" in status and "(connected)" in status
        status_json = (mnt / ".status.json").read_text()
        m.stop()

        # nothing in the DuckDB file: the rows are in PostgreSQL, read by a second mount
        assert not (data / "contextfs.duckdb").exists()
        m.start("--store", pg_dsn)
        assert (prefs / "espresso" / "L2.md").read_text().endswith("oat milk every morning.\n")
        wait_indexed(m)
        hits = results(mnt, "oat milk")
        assert hits and hits[0]["path"].startswith("user/default/preferences/espresso")
        status += m.status()
        m.stop()
    finally:
        if m.proc is not None:
            m.stop()
    for where, text in [
        ("the log", m.log.read_text()),
        (".status", status),
        (".status.json", status_json),
        ("the daemon's output", "".join(m.output)),
    ]:
        assert password not in text, f"the password appears in {where}"
    json.loads(status_json)
    store = PgStore(pg_dsn, read_only=True)
    try:
        assert check_store(store) == []
    finally:
        store.close()


def test_a_wrong_password_is_refused_without_showing_it(tmp_path: Path, pg_dsn: str):
    password = pg_dsn.split(":", 2)[2].split("@", 1)[0]
    wrong = pg_dsn.replace(password, "Wr0ngSecret-" + password[:4])
    data = tmp_path / "data"
    data.mkdir()
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    m = Mount(mnt, data)
    t0 = time.monotonic()
    proc = m.start("--store", wrong, expect_fail=True)
    out = proc.stdout.read().decode()
    assert proc.returncode != 0 and time.monotonic() - t0 < 30
    assert "password authentication failed" in out, out
    assert "Wr0ngSecret" not in out and "Wr0ngSecret" not in m.log.read_text()
    assert not os.path.ismount(mnt)


def test_a_file_handed_in_while_the_server_is_away_is_kept_not_left_looking_queued(
    tmp_path: Path, pg_server, pg_dsn: str
):
    """`cp note.md .inbox/` while the PostgreSQL server is down: EIO, and the note was left
    listed in the inbox with its bytes, never processed, gone at unmount. Now its bytes
    are kept in refused/ (the .status line says where) and the inbox does not list it; a
    copy once the server is back is handed in."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "config.yaml").write_text("search: false\n")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    m = Mount(mnt, data)
    m.expect_log.append("unreachable: connection")
    m.start("--store", pg_dsn)
    note = tmp_path / "note-dave.md"
    note.write_text("Dave's notes from the planning meeting.\n")
    try:
        pg_server.stop()
        try:
            with pytest.raises(OSError) as err:
                (mnt / ".inbox" / note.name).write_bytes(note.read_bytes())
            assert err.value.errno in (errno.EIO, errno.EAGAIN), err.value
            assert note.name not in os.listdir(mnt / ".inbox")
            kept = [p for p in (data / "refused").iterdir() if p.name.endswith(note.name)]
            assert [p.read_bytes() for p in kept] == [note.read_bytes()]
            assert f"kept at {kept[0]}" in m.status()
        finally:
            pg_server.start()
        for _ in range(100):  # the store reconnects by itself
            try:
                (mnt / ".inbox" / note.name).write_bytes(note.read_bytes())
                break
            except OSError:
                time.sleep(0.1)
        assert note.name in os.listdir(mnt / ".inbox")
    finally:
        m.stop()


def test_a_read_only_mount_on_postgresql_counts_no_access(tmp_path: Path, pg_dsn: str):
    """`-o ro` on a shared store writes nothing to it either: a `.query` answer read counts
    no access (not after a remount), and `.status` says the mount option made it
    read-only."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "config.yaml").write_text("search: true\n")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    m = Mount(mnt, data, search=True)
    node = mnt / "user/default/entities/rex"
    m.start("--store", pg_dsn)
    try:
        node.mkdir()
        (node / "L2.md").write_text("Rex is a dog who likes long walks.\n")
        m.stop()
        m.start("--store", pg_dsn, "-o", "ro")
        assert "state: read-only: mounted read-only (-o ro)" in m.status()
        for _ in range(3):
            assert "entities/rex" in (mnt / ".query/rex dog/_context.md").read_text()
        with pytest.raises(OSError) as info:
            (node / "L2.md").write_text("changed\n")
        assert info.value.errno == errno.EROFS
        m.stop()
        m.start("--store", pg_dsn)
        assert "access_count: 0\n" in (node / "meta.yaml").read_text()
    finally:
        if m.proc is not None:
            m.stop()
    assert log_problems(m.log) == []


def test_a_mount_stopped_by_its_timeout_says_what_the_daemon_was_doing(tmp_path: Path, pg_dsn: str):
    """`contextfs mount` stops a daemon that is not mounted within --timeout. It said only
    "the daemon was stopped", and the daemon died by the signal with nothing in its log
    (a store whose check took longer than 30 s: nothing said so). Here the daemon waits
    for the store (another connection holds the lock a mount opens it under)."""
    import subprocess

    import psycopg

    from contextfs.store.pg import OUTBOX_LOCK
    from contextfs.testing import contextfs_cmd

    data = tmp_path / "data"
    data.mkdir()
    (data / "config.yaml").write_text("search: false\n")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    with psycopg.connect(pg_dsn, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", [OUTBOX_LOCK])
        res = subprocess.run(
            contextfs_cmd(
                "mount", "--data-dir", str(data), str(mnt), "--store", pg_dsn, "--timeout", "8"
            ),
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert res.returncode == 1, res
    assert not os.path.ismount(mnt)
    said = res.stderr.strip()
    assert said.startswith(f"contextfs: {mnt} not mounted after 8.0s: the daemon was stopped, "
                           "still opening the store (for "), said  # fmt: skip
    assert f"see {data / 'contextfs.log'}" in said, said
    log = (data / "contextfs.log").read_text()
    assert "SIGTERM: stopped before the mount was ready: still opening the store" in log, log
