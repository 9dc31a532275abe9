"""SPEC §8 on a real mount: every refusal is an errno the shell shows plus a line in
.status, a refused write's bytes are kept, and a damaged store turns the mount read-only."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import duckdb
import pytest
import xxhash

from contextfs.testing import errno_of
from contextfs.testing.mount import contextfs_cmd, log_problems

_errno = errno_of


def _write(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def test_shell_sees_errnos_and_status_says_why(mount):
    u = mount.path / "user/default"
    node = u / "preferences/editor"
    node.mkdir()
    (node / "L2.md").write_text("vim\n")
    cases = [
        (errno.EACCES, _write, node / "meta.yaml", b"x"),
        (errno.EACCES, _write, node / ".history/v1.md", b"x"),
        (errno.EACCES, _write, mount.path / ".status", b"x"),
        (errno.ENAMETOOLONG, os.mkdir, u / ("n" * 256)),
        (errno.EINVAL, os.mkdir, mount.path / "user/has space"),
        (errno.EINVAL, os.mkdir, u / "events/not-a-dated-name"),
        (errno.EPERM, os.link, node / "L2.md", node / "hard"),
        (errno.EPERM, os.mkfifo, u / "fifo"),
        (errno.EINVAL, _write, u / "preferences/bad.md", b"---\nnope: 1\n---\nbody\n"),
        (errno.EINVAL, _write, node / "L2.md", b"\xff\xfe\x00binary"),
        (errno.EACCES, _write, u / "stray.txt", b"x"),
    ]
    for expected, fn, *args in cases:
        assert _errno(fn, *args) == expected, (fn.__name__, args)
    status = mount.status()
    for reason in (
        "meta.yaml",
        "limited to 255 bytes",
        "has space",
        "does not fit the event template",
        "hard links",
        "FIFOs and sockets can only be made inside a node",
        "unknown field 'nope'",
        "UTF-8",
    ):
        assert reason in status, reason
    # the shell shows the errno too
    r = subprocess.run(
        ["bash", "-c", f"echo x > '{node}/meta.yaml'"], capture_output=True, text=True
    )
    assert r.returncode != 0 and "Permission denied" in r.stderr
    # a refused L2 leaves the stored text in place
    assert (node / "L2.md").read_text() == "vim\n"


def test_a_name_cannot_forge_lines_in_status_or_the_log(mount):
    """A refused name is shown as one line, its control characters escaped: a newline in
    a name would otherwise add lines to what root reads in `.status` and the log."""
    forged = "Bad\nstate: read-only: forged\n  2026-01-01T00:00:00Z EIO nothing\x1b[2J"
    with pytest.raises(OSError):
        os.mkdir(mount.path / "user/default/preferences" / forged)
    status = (mount.path / ".status").read_text()
    assert [ln for ln in status.splitlines() if ln.startswith("state:")] == ["state: read-write"]
    assert "Bad\\nstate: read-only: forged\\n  2026-01-01T00:00:00Z EIO nothing\\x1b[2J" in status
    assert "\x1b" not in status
    raw = (mount.path / ".status.json").read_text()
    shown = [json.dumps(r) for r in json.loads(raw)["refusals"]["recent"]]
    assert any("Bad\\\\nstate: read-only: forged" in r for r in shown), shown  # JSON of "\\n"
    log = mount.log.read_text()
    assert "forged" in log and "\nstate: read-only: forged" not in log and "\x1b" not in log


def test_refused_bytes_are_kept_where_status_says(mount):
    drop = mount.path / "user/default/preferences/broken.md"
    data = b"---\ntopic: [oops\n---\nMy precious notes.\n"
    assert _errno(_write, drop, data) == errno.EINVAL
    m = re.search(r"bytes kept at (\S+?)\)", mount.status())
    assert m, mount.status()
    assert Path(m.group(1)).read_bytes() == data
    assert not drop.exists()


def test_file_size_limit_is_efbig(tmp_path):
    from contextfs.testing import Mount

    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "config.yaml").write_text(
        "search: false\nmax_file_size: 1048576\nmax_tier_size: 65536\n"
    )
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    m = Mount(mnt, data_dir)
    m.start()
    try:
        node = mnt / "user/default/preferences/big"
        node.mkdir()
        assert _errno(_write, node / "blob.bin", b"x" * (2 << 20)) == errno.EFBIG
        assert _errno(_write, node / "L2.md", b"y" * 100_000) == errno.EFBIG
        assert _errno(os.truncate, node / "L2.md", 1 << 30) == errno.EFBIG
        (node / "ok.bin").write_bytes(b"z" * 1000)
        assert "EFBIG" in m.status()
    finally:
        m.stop()
    assert m.fsck() == []


@pytest.mark.allow_warnings
def test_damaged_store_mounts_read_only(mount):
    node = mount.path / "user/default/preferences/keep"
    node.mkdir()
    (node / "L2.md").write_text("precious\n")
    mount.stop()
    con = duckdb.connect(str(mount.data_dir / "contextfs.duckdb"))
    con.execute("UPDATE nodes SET content_hash = 'deadbeef'")
    con.close()
    mount.expect_log.append("store failed its checks")
    mount.start()
    assert (node / "L2.md").read_text() == "precious\n", "reading still works"
    assert "state: read-only" in mount.status()
    assert _errno(_write, node / "L2.md", b"new\n") == errno.EROFS
    assert _errno(os.mkdir, mount.path / "user/default/preferences/new") == errno.EROFS
    mount.stop()
    # repaired (the real hash back), the next mount is writable again
    con = duckdb.connect(str(mount.data_dir / "contextfs.duckdb"))
    con.execute("UPDATE nodes SET content_hash = ?", [xxhash.xxh64_hexdigest(b"precious\n")])
    con.close()
    mount.start()
    assert "state: read-write" in mount.status()
    (node / "L2.md").write_text("new\n")


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(contextfs_cmd(*args), capture_output=True, text=True)


def test_fsck_repair_mends_duplicate_names_an_older_version_left(mount):
    """Two live files of one name in a folder, and two live nodes at one path, as a store
    written before the unique indexes could hold them: the mount is read-only and says
    why; `contextfs fsck` exits 5; `contextfs fsck --repair` renames each duplicate beside
    the one written last, deletes nothing and exits 0; the next mount is writable, shows
    both files and both nodes with their bytes, and takes writes again."""
    prefs = mount.path / "user/default/preferences"
    node = prefs / "files"
    node.mkdir()
    (node / "L2.md").write_text("Files.\n")
    (node / "att.txt").write_text("one\n")
    (node / "other.txt").write_text("two\n")
    for name, text in (("tea", "Green tea.\n"), ("tea2", "Black tea.\n")):
        (prefs / name).mkdir()
        (prefs / name / "L2.md").write_text(text)
    mount.stop()
    db = mount.data_dir / "contextfs.duckdb"
    con = duckdb.connect(str(db))
    for index in ("nodes_live_path", "attachments_live_name"):
        con.execute(f"DROP INDEX {index}")
    con.execute("UPDATE attachments SET name = 'att.txt' WHERE name = 'other.txt'")
    first = con.execute("SELECT id FROM attachments WHERE name = 'att.txt' ORDER BY id").fetchone()
    tea = con.execute("SELECT id FROM nodes WHERE name = 'tea'").fetchone()[0]
    con.execute("UPDATE nodes SET name = 'tea' WHERE name = 'tea2'")
    con.execute("UPDATE store_meta SET value = '9' WHERE key = 'schema_version'")
    con.close()

    mount.expect_log.append("store failed its checks")
    mount.start()
    status = mount.status()
    assert "state: read-only: fsck found" in status, status
    mount.stop()
    r = _run("fsck", str(mount.data_dir))
    assert r.returncode == 5, r.stdout + r.stderr
    assert "live_name_constraints: constraint attachments_live_name is missing" in r.stdout
    r = _run("fsck", "--repair", str(mount.data_dir))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "problem(s) left" in r.stdout and "not repaired" not in r.stdout, r.stdout
    assert "repaired duplicate_attachments:" in r.stdout, r.stdout
    assert "repaired duplicate_nodes:" in r.stdout, r.stdout
    assert _run("fsck", str(mount.data_dir)).returncode == 0

    mount.start()
    assert "state: read-write" in mount.status()
    assert (node / "att.txt").read_text() == "two\n"  # written last: keeps the name
    assert (node / f"att.duplicate-{first[0]}.txt").read_text() == "one\n"
    assert (prefs / "tea/L2.md").read_text() == "Black tea.\n"
    assert (prefs / f"tea-duplicate-{tea}/L2.md").read_text() == "Green tea.\n"
    (prefs / "tea/L2.md").write_text("Black tea, strong.\n")


def test_a_store_file_with_a_bad_block_is_reported_in_one_line(mount):
    """A block of the store's file overwritten (a bad sector, a stray write) and no
    backup to fall back on: `fsck` says the store cannot be read (exit 5), `status`,
    `export` and `mount` refuse it in one line (exit 1), never with a traceback; the
    mount's line names `contextfs salvage`, and so does fsck's, for a bad block and for a
    file cut short (it gave no pointer at all)."""
    node = mount.path / "user/default/preferences/keep"
    node.mkdir()
    (node / "L2.md").write_text("precious\n")
    mount.stop()
    shutil.rmtree(mount.data_dir / "backups")  # the one the unmount took
    db = mount.data_dir / "contextfs.duckdb"
    good = db.read_bytes()
    with open(db, "r+b") as f:
        f.seek(4096)  # DuckDB's header blocks, checked at every open
        f.write(os.urandom(4096))
    run = lambda *a: subprocess.run(contextfs_cmd(*a), capture_output=True, text=True)  # noqa: E731
    r = run("fsck", str(mount.data_dir))
    assert r.returncode == 5 and "store_readable: " in r.stdout, r.stdout + r.stderr
    assert "cannot be read" in r.stdout and "Traceback" not in r.stdout + r.stderr
    # what to do: there is no backup, so salvage
    assert "it has no backup in" in r.stdout, r.stdout
    assert f"`contextfs salvage {mount.data_dir} OUT`" in r.stdout, r.stdout
    other = mount.path.parent / "elsewhere"
    other.mkdir()
    for args in (
        ("status", str(mount.data_dir)),
        ("export", str(mount.data_dir), str(mount.path.parent / "out")),
        ("mount", str(other), "--data-dir", str(mount.data_dir)),
    ):
        r = run(*args)
        if os.path.ismount(other):  # mounted after all: the test fails, nothing left behind
            run("umount", str(other))
        assert r.returncode == 1, (args, r.stdout, r.stderr)
        assert "the store cannot be read (damaged?)" in r.stderr, (args, r.stderr)
        assert "Traceback" not in r.stdout + r.stderr, (args, r.stderr)
    assert "contextfs salvage" in r.stderr, r.stderr
    assert not os.path.ismount(other)
    db.write_bytes(good[: len(good) // 2])  # a file cut short: the same pointer
    r = run("fsck", str(mount.data_dir))
    assert r.returncode == 5 and "cannot be read" in r.stdout, r.stdout + r.stderr
    assert f"`contextfs salvage {mount.data_dir} OUT`" in r.stdout, r.stdout
    db.write_bytes(good)  # the block mended: the store is whole again
    assert run("fsck", str(mount.data_dir)).returncode == 0


def test_a_damaged_store_file_mounts_its_backup_read_only_until_restored(tmp_path):
    """With a backup taken at a clean unmount (`backup_interval_hours: 0`: at every one), a
    store file whose header block is overwritten still mounts: read-only, from the backup,
    and `.status` says so and what to run. `contextfs restore` refuses while it is mounted
    (exit 4), then puts the backup back and keeps the damaged file aside; the next mount
    is writable with everything the backup held."""
    from contextfs.testing import Mount

    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    (data / "config.yaml").write_text("backup_interval_hours: 0\n")
    (tmp_path / "mnt").mkdir()
    m = Mount(tmp_path / "mnt", data)
    m.start()
    try:
        node = m.path / "user/default/preferences/keep"
        node.mkdir()
        (node / "L2.md").write_text("precious\n")
        (node / "photo.bin").write_bytes(bytes(range(256)) * 64)
        m.stop()
        assert [p.name for p in (data / "backups").iterdir()][0].startswith("contextfs-")
        db = data / "contextfs.duckdb"
        with open(db, "r+b") as f:
            f.seek(4096)  # DuckDB's header: the file does not open at all
            f.write(os.urandom(4096))
        m.expect_log.append("store file damaged, mounting its backup")
        m.start()
        status = m.status()
        assert "state: read-only: the store file cannot be read" in status, status
        assert f"contextfs restore {data}" in status, status
        assert (node / "L2.md").read_text() == "precious\n"
        assert (node / "photo.bin").read_bytes() == bytes(range(256)) * 64
        assert _errno(_write, node / "L2.md", b"new\n") == errno.EROFS
        assert _run("restore", str(data)).returncode == 4  # mounted: the store is in use
        m.stop()
        r = _run("restore", str(data))
        assert r.returncode == 0, r.stdout + r.stderr
        kept = [p for p in data.iterdir() if p.name.startswith("contextfs.duckdb.damaged-")]
        assert len(kept) == 1 and f"kept as {kept[0]}" in r.stdout, r.stdout
        assert _run("fsck", str(data)).returncode == 0
        m.expect_log.clear()
        m.start()
        assert "state: read-write" in m.status()
        assert (node / "L2.md").read_text() == "precious\n"
        (node / "L2.md").write_text("precious, and written again\n")
    finally:
        if m.proc is not None:
            m.stop()
    problems = [p for p in log_problems(m.log) if "store file damaged" not in p]
    assert problems == [], problems


def test_a_damaged_write_ahead_log_is_said_in_one_line_and_mounts_the_backup(tmp_path):
    """A crash left a write-ahead log, and a block of it is damaged: the offline commands
    say the store cannot be read in one line (fsck exits 5), and a mount serves the
    backup read-only and says so. They died with a traceback, and the mount with a line of
    dashes."""
    from contextfs.testing import Mount

    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    (data / "config.yaml").write_text("search: false\nbackup_interval_hours: 0\n")
    (tmp_path / "mnt").mkdir()
    m = Mount(tmp_path / "mnt", data)
    m.start()
    try:
        prefs = m.path / "user/default/preferences"
        (prefs / "kept").mkdir()
        (prefs / "kept/L2.md").write_text("in the backup\n")
        m.stop()  # a clean unmount: a backup
        m.start()
        for i in range(5):
            (prefs / f"w{i}").mkdir()
            (prefs / f"w{i}/L2.md").write_text(f"in the log {i}\n")
        m.kill()
        wal = data / "contextfs.duckdb.wal"
        with open(wal, "r+b") as f:
            f.seek(wal.stat().st_size // 2)
            f.write(os.urandom(64))
        fsck = _run("fsck", str(data))
        assert fsck.returncode == 5 and "Traceback" not in fsck.stderr + fsck.stdout, fsck
        status = _run("status", str(data))
        assert "Traceback" not in status.stderr and "cannot be read" in status.stderr, status
        m.expect_log.append("store file damaged, mounting its backup")
        m.start()
        assert "state: read-only: the store file cannot be read" in m.status()
        assert (prefs / "kept/L2.md").read_text() == "in the backup\n"
    finally:
        if m.proc is not None:
            m.stop()


def test_a_write_ahead_log_deleted_after_a_crash_is_said_not_served_silently(tmp_path):
    """The daemon killed with an acknowledged change in its write-ahead log, and the log
    then deleted (a cleaner, a copy that left it out): fsck says the acknowledged changes
    are missing (exit 5), and a mount serves what the store holds read-only, saying why.
    The log put back, the change is there again; `fsck --repair` takes a store whose log
    is gone for good as it is. The mount served the older store read-write, silently."""
    from contextfs.testing import Mount

    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    (data / "config.yaml").write_text("search: false\n")
    (tmp_path / "mnt").mkdir()
    m = Mount(tmp_path / "mnt", data)
    prefs = m.path / "user/default/preferences"
    wal, saved = data / "contextfs.duckdb.wal", tmp_path / "saved.wal"
    m.start()
    try:
        (prefs / "kept").mkdir()
        (prefs / "kept/L2.md").write_text("checkpointed\n")
        m.stop()
        m.start()
        (prefs / "acked").mkdir()
        (prefs / "acked/L2.md").write_text("only in the log\n")  # closed: acknowledged
        m.kill()
        os.replace(wal, saved)
        r = _run("fsck", str(data))
        assert r.returncode == 5, r.stdout + r.stderr
        assert (
            "acknowledged_commits: acknowledged changes are missing: its write-ahead log "
            "contextfs.duckdb.wal is gone" in r.stdout
        ), r.stdout
        m.expect_log += ["acknowledged changes are missing", "store failed its checks"]
        m.start()
        status = m.status()
        assert "state: read-only: fsck found 1 problem(s): acknowledged_commits:" in status
        assert "contextfs fsck --repair" in status, status
        assert sorted(os.listdir(prefs)) == ["kept"]
        assert _errno(os.mkdir, prefs / "new") == errno.EROFS
        m.stop()
        os.replace(saved, wal)  # the log put back: nothing was lost
        m.expect_log.clear()
        m.start()
        assert "state: read-write" in m.status()
        assert (prefs / "acked/L2.md").read_text() == "only in the log\n"
        (prefs / "later").mkdir()
        (prefs / "later/L2.md").write_text("lost for good\n")
        m.kill()
        wal.unlink()
        r = _run("fsck", "--repair", str(data))
        assert r.returncode == 0, r.stdout + r.stderr
        assert "repaired acknowledged_commits: the store is taken as it is" in r.stdout
        m.start()
        assert "state: read-write" in m.status()
        assert "kept" in os.listdir(prefs) and "later" not in os.listdir(prefs)
    finally:
        if m.proc is not None:
            m.stop()


def _bad_block(db: Path) -> int:
    """The offset of a 64-byte stretch of `db` (a closed store file) that, overwritten,
    leaves the file opening but a full check unable to read it: damage that shows only
    when a block is read (DuckDB checks each block's checksum as it reads it)."""
    from contextfs.store import Store
    from contextfs.store.fsck import full_check

    good = db.read_bytes()
    probe = db.with_name("probe.duckdb")
    try:
        for block in range(1, (len(good) - 3 * 4096) // (256 * 1024)):
            at = 3 * 4096 + block * 256 * 1024 + 1000  # after the header, 256 KiB blocks
            probe.write_bytes(good[:at] + b"\xab" * 64 + good[at + 64 :])
            try:
                store = Store(probe, read_only=True)
            except duckdb.Error:
                continue  # a block read at open: not the damage looked for
            try:
                full_check(store)
            except duckdb.Error:
                return at
            finally:
                store.close()
    finally:
        probe.unlink(missing_ok=True)
        probe.with_name("probe.duckdb.lock").unlink(missing_ok=True)
    raise AssertionError(f"no block of {db} is read only by a full check")


def _damage(path: Path, at: int) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(b"\xab" * 64)


def test_a_damaged_newest_backup_gives_way_to_the_one_before_that_passes_fsck(tmp_path):
    """The store file cannot be read, and its newest backup opens but a block of it
    cannot be read. The mount shows the backup before it (read-only) and `.status` says
    why the newest was passed over; `contextfs restore` puts that one back and names the
    one it skipped; `contextfs fsck` names that backup and the command that puts it back.
    Both took the newest backup, which opened: the mount served a store that failed to
    read, and restore put back a store fsck refused."""
    from contextfs.testing import Mount

    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    (data / "config.yaml").write_text("search: false\nbackup_interval_hours: 0\n")
    (tmp_path / "mnt").mkdir()
    m = Mount(tmp_path / "mnt", data)
    prefs = m.path / "user/default/preferences"
    m.start()
    try:
        for i in range(8):  # texts over several blocks of the file
            (prefs / f"p{i}").mkdir()
            (prefs / f"p{i}/L2.md").write_text(f"older {i} " + "abcdefgh " * 20_000 + "\n")
        m.stop()  # the older backup
        time.sleep(1.1)  # a backup's name is its second
        m.start()
        (prefs / "newer").mkdir()
        (prefs / "newer/L2.md").write_text("only in the newest backup\n")
        m.stop()  # the newest backup
        older, newest = sorted((data / "backups").iterdir())
        _damage(newest, _bad_block(newest))
        _damage(data / "contextfs.duckdb", 4096)  # the header: the file does not open
        r = _run("fsck", str(data))  # names what to run, and the backup it would take
        assert r.returncode == 5 and "the store cannot be read" in r.stdout, r.stdout
        assert f"backup passed over: {newest}" in r.stdout, r.stdout
        assert f"({older}), the newest that passes fsck: `contextfs restore {data}`" in r.stdout
        assert f"`contextfs salvage {data} OUT`" in r.stdout, r.stdout
        m.expect_log += ["store file damaged, mounting its backup", "backup passed over"]
        m.start()
        status = m.status()
        assert "state: read-only: the store file cannot be read" in status, status
        assert f"passed over: {newest}" in status, status
        assert sorted(os.listdir(prefs)) == [f"p{i}" for i in range(8)]
        assert (prefs / "p7/L2.md").read_text().startswith("older 7 ")
        m.stop()
        r = _run("restore", str(data))
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"from {older}" in r.stdout, r.stdout
        assert f"skipped {newest}" in r.stderr and "cannot be read" in r.stderr, r.stderr
        assert _run("fsck", str(data)).returncode == 0
    finally:
        if m.proc is not None:
            m.stop()


def test_ctx_xattr_mount_option(tmp_path):
    from contextfs.testing import Mount

    (tmp_path / "mnt").mkdir()
    m = Mount(tmp_path / "mnt", tmp_path / "data")
    m.start("-o", "ctx_xattr")
    try:
        node = m.path / "user/default/preferences/tea"
        node.mkdir()
        (node / "L2.md").write_text("green\n")
        (node / "L2.md").write_text("oolong\n")
        assert os.getxattr(node, "user.ctx.type") == b"preference"
        assert os.getxattr(node / "L2.md", "user.ctx.version") == b"2"
        assert os.getxattr(node, "user.ctx.indexed_version") == b"0"  # search is off here
        assert "user.ctx.path" in os.listxattr(node)
        # user.* xattrs exist on regular files and directories only (Linux): a symlink or
        # a FIFO lists none, so `rsync -aX` copies the node with nothing it cannot read
        (node / "tools").mkdir()
        os.symlink("L2.md", node / "link")
        os.mkfifo(node / "fifo")
        assert os.listxattr(node / "link", follow_symlinks=False) == []
        assert os.listxattr(node / "fifo") == []
        assert "user.ctx.id" in os.listxattr(node / "tools")
        r = subprocess.run(
            ["rsync", "-aX", f"{node}/", f"{tmp_path / 'copy'}/"], capture_output=True, text=True
        )
        assert (r.returncode, r.stderr) == (0, ""), r.stderr
        assert os.getxattr(tmp_path / "copy/L2.md", "user.ctx.type") == b"preference"
    finally:
        m.stop()
    m.start()  # off by default: the kernel stops asking (ENOSYS), ls -l stays cheap
    try:
        with pytest.raises(OSError) as err:
            os.getxattr(m.path / "user/default/preferences/tea", "user.ctx.type")
        assert err.value.errno in (errno.ENOTSUP, errno.EOPNOTSUPP)
    finally:
        m.stop()


def test_restore_of_a_mounted_store_is_in_use_before_any_backup_is_looked_for(mount):
    """A data dir in use is exit 4 (store in use) whether or not it has backups: a fresh
    mount has none yet, and `restore` said "no backup" (exit 2) instead."""
    assert not any((mount.data_dir / "backups").glob("*"))
    r = _run("restore", str(mount.data_dir))
    assert r.returncode == 4, r.stdout + r.stderr
    assert "store in use by PID" in r.stderr, r.stderr
    mount.stop()
    for backup in (mount.data_dir / "backups").iterdir():  # the one taken at the unmount
        backup.unlink()
    r = _run("restore", str(mount.data_dir))  # not mounted: now there is just no backup
    assert r.returncode == 2 and "no backup in" in r.stderr, r.stdout + r.stderr
