"""SPEC §8 on a real mount: every refusal is an errno the shell shows plus a line in
.status, a refused write's bytes are kept, and a damaged store turns the mount read-only."""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
from pathlib import Path

import duckdb
import pytest
import xxhash

from contextfs.testing import errno_of
from contextfs.testing.mount import contextfs_cmd

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


def test_a_store_file_with_a_bad_block_is_reported_in_one_line(mount):
    """A block of the store's file overwritten (a bad sector, a stray write): `fsck` says
    the store cannot be read (exit 5), `status`, `export` and `mount` refuse it in one
    line (exit 1), never with a traceback."""
    node = mount.path / "user/default/preferences/keep"
    node.mkdir()
    (node / "L2.md").write_text("precious\n")
    mount.stop()
    db = mount.data_dir / "contextfs.duckdb"
    good = db.read_bytes()
    with open(db, "r+b") as f:
        f.seek(4096)  # DuckDB's header blocks, checked at every open
        f.write(os.urandom(4096))
    run = lambda *a: subprocess.run(contextfs_cmd(*a), capture_output=True, text=True)  # noqa: E731
    r = run("fsck", str(mount.data_dir))
    assert r.returncode == 5 and "store_readable: " in r.stdout, r.stdout + r.stderr
    assert "cannot be read" in r.stdout and "Traceback" not in r.stdout + r.stderr
    other = mount.path.parent / "elsewhere"
    other.mkdir()
    for args in (
        ("status", str(mount.data_dir)),
        ("export", str(mount.data_dir), str(mount.path.parent / "out")),
        ("mount", str(other), "--data-dir", str(mount.data_dir)),
    ):
        r = run(*args)
        assert r.returncode == 1, (args, r.stdout, r.stderr)
        assert "the store cannot be read (damaged?)" in r.stderr, (args, r.stderr)
        assert "Traceback" not in r.stdout + r.stderr, (args, r.stderr)
    assert not os.path.ismount(other)
    db.write_bytes(good)  # the block mended: the store is whole again
    assert run("fsck", str(mount.data_dir)).returncode == 0


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
    finally:
        m.stop()
    m.start()  # off by default: the kernel stops asking (ENOSYS), ls -l stays cheap
    try:
        with pytest.raises(OSError) as err:
            os.getxattr(m.path / "user/default/preferences/tea", "user.ctx.type")
        assert err.value.errno in (errno.ENOTSUP, errno.EOPNOTSUPP)
    finally:
        m.stop()
