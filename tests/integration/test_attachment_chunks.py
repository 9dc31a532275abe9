"""Big attachments on a real mount: offset writes with fsync are stored chunk by chunk,
survive a remount and a kill -9 byte for byte, and a secret written into the middle of a
file by an offset write is redacted in what the mount shows and stores."""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
import time
from pathlib import Path

import pytest

from contextfs.testing import close_after_kill
from tests.integration.test_conversations import make_mount

CHUNK = 64 * 1024
AWS_KEY = b"AKIAIOSFODNN7EXAMPLE"


def node_dir(mount, name: str = "files"):
    node = mount.path / "user/default/preferences" / name
    node.mkdir()
    (node / "L2.md").write_text("Big files kept next to this memory.\n")
    return node


def sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def random_io(fds: tuple[int, int], rnd: random.Random, size: int, ops: int) -> None:
    """The same pwrite / ftruncate / fsync sequence on every descriptor in fds."""
    for _ in range(ops):
        r = rnd.random()
        if r < 0.7:
            off = rnd.randint(0, size + CHUNK)
            buf = rnd.randbytes(rnd.choice([1, 4096, 5000, CHUNK + 3]))
            for fd in fds:
                os.pwrite(fd, buf, off)
        elif r < 0.8:
            n = rnd.randint(size // 2, size + 2 * CHUNK)
            for fd in fds:
                os.ftruncate(fd, n)
        for fd in fds:
            os.fsync(fd)


def same_random_io(
    paths: tuple, size: int, *, seed: int, ops: int, then: tuple[bytes, int] | None = None
) -> None:
    """The same random bytes of `size` written to each path, then the same `random_io`
    (and a last pwrite + fsync `then`) on all of them."""
    base = os.urandom(size)
    for path in paths:
        path.write_bytes(base)
    fds = tuple(os.open(path, os.O_RDWR) for path in paths)
    try:
        random_io(fds, random.Random(seed), size, ops)
        for fd in fds if then else ():
            os.pwrite(fd, *then)
            os.fsync(fd)
    finally:
        for fd in fds:
            os.close(fd)


def test_random_offset_writes_with_fsync_match_native_across_a_remount(mount, tmp_path):
    node = node_dir(mount)
    native = tmp_path / "native.bin"
    ours = node / "data.bin"
    same_random_io((native, ours), 2 << 20, seed=5, ops=120)
    assert ours.stat().st_size == native.stat().st_size
    assert sha(ours) == sha(native)
    mount.remount()
    assert sha(ours) == sha(native)


@pytest.mark.slow
@pytest.mark.allow_warnings
def test_kill_9_after_fsync_keeps_the_offset_writes(mount, tmp_path):
    """Every fsynced write is there after SIGKILL; the write after the last fsync, made on
    a descriptor that was never closed, was never acknowledged and is not."""
    node = node_dir(mount)
    ours = node / "data.bin"
    expected = bytearray(os.urandom(1 << 20))
    ours.write_bytes(expected)
    fd = os.open(ours, os.O_RDWR)
    rnd = random.Random(9)
    for _ in range(30):
        off = rnd.randint(0, len(expected) + 1000)
        buf = rnd.randbytes(rnd.choice([100, 4096, CHUNK + 1]))
        os.pwrite(fd, buf, off)
        os.fsync(fd)
        if off > len(expected):
            expected.extend(bytes(off - len(expected)))
        expected[off : off + len(buf)] = buf
    os.ftruncate(fd, len(expected) - 3 * CHUNK - 7)
    os.fsync(fd)
    del expected[len(expected) - 3 * CHUNK - 7 :]
    os.pwrite(fd, b"never synced", 0)
    mount.kill()
    close_after_kill(fd)
    mount.start()
    assert ours.stat().st_size == len(expected)
    assert (
        hashlib.sha256(ours.read_bytes()).hexdigest() == hashlib.sha256(bytes(expected)).hexdigest()
    )


def test_a_secret_written_at_an_offset_is_redacted_on_the_mount(mount):
    node = node_dir(mount)
    f = node / "log.txt"
    line = b"an ordinary line of a long log file, nothing to hide here\n"
    base = (line * (1_100_000 // len(line)))[: 1 << 20]
    f.write_bytes(base)
    fd = os.open(f, os.O_RDWR)
    try:
        patch = bytearray(b"." * 4096)
        patch[2000 : 2000 + len(AWS_KEY) + 2] = b" " + AWS_KEY + b" "
        os.pwrite(fd, bytes(patch), 500_000)
        os.fsync(fd)
        # The writer reads back what is stored: the daemon drops the kernel's copy of the
        # written pages right after the fsync reply (asynchronously, see ops.py).
        deadline = time.monotonic() + 5
        while AWS_KEY in (shown := os.pread(fd, 8192, 498_000)) and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        os.close(fd)
    assert AWS_KEY not in shown and b"[REDACTED:aws_access_key]" in shown
    mount.remount()
    stored = f.read_bytes()
    assert AWS_KEY not in stored and stored.count(b"[REDACTED:aws_access_key]") == 1
    assert stored[:500_000] == base[:500_000]
    assert stored.endswith(base[504_096:])
    assert "1 in all" in next(
        ln for ln in mount.status().splitlines() if ln.startswith("redactions:")
    )


def test_a_secret_saved_by_rename_over_an_attachment_is_redacted(mount):
    """Editors save by writing a scratch file and renaming it over the original: the
    renamed bytes cross the write boundary too."""
    node = node_dir(mount)
    f = node / "notes.txt"
    f.write_bytes(b"first draft\n")
    tmp = node / ".notes.txt.swp"  # a scratch name: never memory until it is renamed
    tmp.write_bytes(b"second draft, key " + AWS_KEY + b" inside\n")
    os.rename(tmp, f)
    shown = f.read_bytes()
    assert AWS_KEY not in shown and b"[REDACTED:aws_access_key]" in shown
    mount.remount()
    stored = f.read_bytes()
    assert stored == shown and stored.startswith(b"second draft, key ")


def high_bit_mib(seed: int) -> bytes:
    """1 MiB with the high bit set: no printable run for the redactor to take a secret from."""
    return bytes(b | 0x80 for b in random.Random(seed).randbytes(1 << 20))


def write_mibs(fd: int, block: bytes, mibs: range, want) -> None:
    """MiB i of a file: `block` rotated by i (every MiB differs: no blob is shared)."""
    for i in mibs:
        piece = block[i:] + block[:i]
        os.write(fd, piece)
        want.update(piece)


@pytest.mark.slow
def test_a_file_bigger_than_the_store_buffers_is_stored_and_the_mount_stays_writable(tmp_path):
    """A file several times the store's buffer limit, written in 1 MiB writes and fsynced
    (a `dd` of a big file): the commit is a success, the file reads back byte for byte
    before and after a remount, and the mount keeps taking writes. One transaction
    holding it all did not fit DuckDB's buffers: the commit failed as fatal and every
    read and write of the mount failed until a restart."""
    limit = 32  # MiB of buffers, the least store_memory_mb allowed
    m = make_mount(
        tmp_path, f"search: false\nstore_memory_mb: {limit}\nmax_file_size: {256 << 20}\n"
    )
    try:
        node = node_dir(m)
        block, want = high_bit_mib(7), hashlib.sha256()
        fd = os.open(node / "big.bin", os.O_CREAT | os.O_WRONLY, 0o644)
        try:
            write_mibs(fd, block, range(3 * limit), want)
            os.fsync(fd)
        finally:
            os.close(fd)
        assert "state: read-write" in (m.path / ".status").read_text()
        assert sha(node / "big.bin") == want.hexdigest()
        (node / "after.txt").write_text("still writable\n")
        m.remount()
        assert sha(node / "big.bin") == want.hexdigest()
        assert (node / "after.txt").read_text() == "still writable\n"
    finally:
        m.stop()


def rss_anon(pid: int) -> int:
    """The daemon's heap (RssAnon, bytes): what a file held in its memory would grow."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("RssAnon:"))


@pytest.mark.slow
def test_a_big_file_being_written_is_not_held_in_the_daemons_memory(tmp_path):
    """64 MiB written in 1 MiB writes and not yet closed: the bytes wait in a spill file
    (the kernel's page cache), not the daemon's heap, which grows by far less than the
    file; the commit stores them, and they read back byte for byte, also after a
    remount. Held in a bytearray, the heap grew by the file's size and more."""
    m = make_mount(tmp_path, f"search: false\nmax_file_size: {256 << 20}\n")
    try:
        assert m.proc is not None
        node = node_dir(m)
        block, want = high_bit_mib(11), hashlib.sha256()
        fd = os.open(node / "big.bin", os.O_CREAT | os.O_WRONLY, 0o644)
        try:
            write_mibs(fd, block, range(1), want)  # the first MiB: a write was handled
            before = rss_anon(m.proc.pid)
            write_mibs(fd, block, range(1, 64), want)
            grown = rss_anon(m.proc.pid) - before
            assert grown < 24 << 20, f"the daemon's heap grew {grown >> 20} MiB for 63 MiB"
            os.fsync(fd)
        finally:
            os.close(fd)
        assert sha(node / "big.bin") == want.hexdigest()
        assert os.listdir(m.data_dir / "spill") == []  # a spill file has no name
        m.remount()
        assert sha(node / "big.bin") == want.hexdigest()
    finally:
        m.stop()


def test_offset_writes_cuts_and_a_secret_in_a_spilled_file(mount, tmp_path):
    """A file past the size that moves its buffer to a spill file (8 MiB) takes offset
    writes, holes, cuts and appends as a native file does, across a remount; a secret
    written into its middle is redacted in what the mount shows and stores."""
    node = node_dir(mount)
    native = tmp_path / "native.bin"
    ours = node / "big.bin"
    size = 10 << 20
    # then past the end: a hole and an append
    same_random_io((native, ours), size, seed=12, ops=40, then=(b"tail", size + 3 * CHUNK))
    assert sha(ours) == sha(native)
    mount.remount()
    assert sha(ours) == sha(native)
    text = node / "big.log"
    line = b"an ordinary line of a long log file, nothing to hide here\n"
    body = (line * ((9 << 20) // len(line) + 1))[: 9 << 20]
    text.write_bytes(body)
    fd = os.open(text, os.O_RDWR)
    try:
        os.pwrite(fd, b" " + AWS_KEY + b" ", 5_000_000)
        os.fsync(fd)
    finally:
        os.close(fd)
    mount.remount()
    stored = text.read_bytes()
    assert AWS_KEY not in stored and stored.count(b"[REDACTED:aws_access_key]") == 1
    assert stored[:5_000_000] == body[:5_000_000]


def spill_files(pid: int) -> list[str]:
    """The spill files a daemon holds open, once the kernel's RELEASEs (sent after close()
    returned) have had 5 s to arrive."""
    deadline = time.monotonic() + 5
    while True:
        out = []
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except FileNotFoundError:  # closed meanwhile
                continue
            if "/spill/" in target:
                out.append(target)
        if not out or time.monotonic() > deadline:
            return out
        time.sleep(0.05)


@pytest.mark.slow
def test_spilled_files_through_truncate_links_renames_and_a_refused_dd(tmp_path):
    """What users do to big files, each past the 8 MiB that moves a buffer to a spill file:
    `truncate -s` makes a hole that reads as zeros; a hard link and a rename show the same
    bytes; a `dd` over a stored big file that runs past the size limit is refused and
    leaves what the file held (kept in a second spill file while the O_TRUNC is undone)."""
    limit = 24 << 20
    m = make_mount(tmp_path, f"search: false\nmax_file_size: {limit}\n")
    try:
        node = node_dir(m)
        hole = node / "hole.bin"
        subprocess.run(["truncate", "-s", "20M", str(hole)], check=True)
        with open(hole, "r+b") as f:
            f.seek(12 << 20)
            f.write(b"middle")
        assert hole.stat().st_size == 20 << 20
        want = bytearray(20 << 20)
        want[12 << 20 : (12 << 20) + 6] = b"middle"
        assert hole.read_bytes() == want
        big = node / "big.bin"
        body = os.urandom(12 << 20)
        big.write_bytes(body)
        os.link(big, node / "same.bin")
        os.rename(big, node / "renamed.bin")
        assert m.proc is not None
        assert spill_files(m.proc.pid) == [], "mv read the whole file"
        assert (node / "same.bin").read_bytes() == body
        r = subprocess.run(
            ["dd", "if=/dev/urandom", f"of={node / 'renamed.bin'}", "bs=1M", "count=30"],
            capture_output=True,
            text=True,
        )
        assert r.returncode != 0 and "File too large" in r.stderr, r.stderr
        assert (node / "renamed.bin").read_bytes() == body
        assert spill_files(m.proc.pid) == [], "a refused dd's bytes are still held"
        m.remount()
        assert (node / "renamed.bin").read_bytes() == body
        assert (node / "same.bin").read_bytes() == body
        assert hole.read_bytes() == want
    finally:
        m.stop()


def test_a_database_and_an_archive_holding_a_secret_stay_readable(mount, tmp_path):
    """A secret inside bytes that are not text (a SQLite database, a tar archive: its
    text members sit between NUL bytes) gives way to as many bytes: the database still
    passes its integrity check and the archive lists and extracts every member. Before,
    the marker's other length made the database "malformed" and cut the archive short."""
    import sqlite3
    import tarfile

    node = node_dir(mount)
    secret = "correct-horse-battery-staple-99"
    db = node / "notes.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)")
    con.execute("INSERT INTO t (body) VALUES (?)", [f'deploy: password = "{secret}"'])
    con.executemany("INSERT INTO t (body) VALUES (?)", [(f"note {i} " * 20,) for i in range(300)])
    con.commit()
    con.close()
    members = tmp_path / "members"
    members.mkdir()
    (members / "config.yaml").write_text(f'db:\n  user: app\n  password: "{secret}"\n')
    (members / "after.txt").write_text("the member after the secret\n" * 40)
    built = tmp_path / "backup.tar"
    with tarfile.open(built, "w") as tar:
        for name in ("config.yaml", "after.txt"):
            tar.add(members / name, arcname=name)
    (node / "backup.tar").write_bytes(built.read_bytes())
    mount.remount()
    stored = (node / "notes.db").read_bytes()
    assert secret.encode() not in stored
    con = sqlite3.connect(node / "notes.db")
    assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert con.execute("SELECT count(*) FROM t").fetchone() == (301,)
    con.close()
    archive = (node / "backup.tar").read_bytes()
    assert secret.encode() not in archive and len(archive) == built.stat().st_size
    with tarfile.open(node / "backup.tar") as tar:
        assert tar.getnames() == ["config.yaml", "after.txt"]
        after = tar.extractfile("after.txt")
        assert after is not None and after.read() == b"the member after the secret\n" * 40
