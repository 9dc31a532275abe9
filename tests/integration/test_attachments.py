"""Attachments in a node behave like an ordinary POSIX filesystem (SPEC §3, §8).

Everything other than L0/L1/L2, meta.yaml and .history inside a node directory is an
attachment: files, folders and symlinks that keep their bytes, modes, mtimes and names
across a remount. Device nodes are refused with EPERM, derived files with EACCES, and
every refusal shows in .status. Hard links: tests/integration/test_hard_links.py.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
import subprocess
import tempfile
import threading
from pathlib import Path

import pytest

NODE_ENTRIES = {".history", "L0.md", "L1.md", "L2.md", "meta.yaml"}


def make_node(mount, name: str = "tools") -> Path:
    node = mount.path / "user/default/preferences" / name
    node.mkdir()
    (node / "L2.md").write_text(f"She keeps {name} notes next to this memory.\n")
    return node


def attachments(node: Path) -> set[str]:
    return set(os.listdir(node)) - NODE_ENTRIES


def version(node: Path) -> str:
    return next(
        line
        for line in (node / "meta.yaml").read_text().splitlines()
        if line.startswith("version:")
    )


# ---- files: create, write at offsets, truncate, append ---------------------------------------


def test_write_at_offsets_truncate_and_append(mount):
    node = make_node(mount)
    f = node / "data.bin"
    fd = os.open(f, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)
    try:
        assert os.pwrite(fd, b"hello world", 0) == 11
        assert os.pwrite(fd, b"W", 6) == 1
        assert os.pwrite(fd, b"!", 20) == 1  # past the end: a hole that reads as zeros
    finally:
        os.close(fd)
    assert f.read_bytes() == b"hello World" + b"\0" * 9 + b"!"
    with open(f, "rb") as r:
        r.seek(6)
        assert r.read(5) == b"World"
    with open(f, "r+b") as w:
        w.seek(0)
        w.write(b"J")
    assert f.read_bytes() == b"Jello World" + b"\0" * 9 + b"!"

    os.truncate(f, 5)  # shrink
    assert f.read_bytes() == b"Jello"
    assert f.stat().st_size == 5
    os.truncate(f, 8)  # extend with zeros
    assert f.read_bytes() == b"Jello\0\0\0"
    with open(f, "ab") as a:
        a.write(b"tail")
    subprocess.run(["sh", "-c", 'printf more >> "$1"', "sh", str(f)], check=True)
    expected = b"Jello\0\0\0tailmore"
    assert f.read_bytes() == expected
    assert f.stat().st_size == len(expected)
    (node / "empty").touch()

    mount.remount()
    assert f.read_bytes() == expected
    assert (node / "empty").read_bytes() == b""
    assert attachments(node) == {"data.bin", "empty"}
    # Attachments are not memory: L2 did not change.
    assert version(node) == "version: 1"


def test_large_attachment_read_your_writes_and_mtime(mount):
    node = make_node(mount)
    f = node / "big.bin"
    blob = os.urandom(3 * 1024 * 1024 + 17)
    f.write_bytes(blob)
    assert f.read_bytes() == blob
    with open(f, "r+b") as rw:  # read back through the same descriptor before close
        rw.seek(1_000_000)
        rw.write(b"PATCH")
        rw.seek(999_998)
        assert rw.read(9) == blob[999_998:1_000_000] + b"PATCH" + blob[1_000_005:1_000_007]
    blob = blob[:1_000_000] + b"PATCH" + blob[1_000_005:]
    subprocess.run(["truncate", "-s", "2M", str(f)], check=True)
    blob = blob[: 2 * 1024 * 1024]
    assert f.read_bytes() == blob
    mtime = f.stat().st_mtime
    mount.remount()
    assert f.stat().st_size == len(blob)
    assert f.read_bytes() == blob
    assert int(f.stat().st_mtime) == int(mtime)


def test_binary_content_round_trips(mount):
    node = make_node(mount)
    blob = bytes(range(256)) * 64 + bytes(reversed(range(256)))
    (node / "all-bytes.bin").write_bytes(blob)
    (node / "nul-only").write_bytes(b"\0" * 1000)
    assert (node / "all-bytes.bin").read_bytes() == blob
    mount.remount()
    assert (node / "all-bytes.bin").read_bytes() == blob
    assert (node / "all-bytes.bin").stat().st_size == len(blob)
    assert (node / "nul-only").read_bytes() == b"\0" * 1000


# ---- names: rename, overwrite-by-rename, folders, listing, unlink ----------------------------


def test_rename_within_node_into_folder_and_over_a_file(mount):
    node = make_node(mount)
    (node / "a.txt").write_text("A\n")
    (node / "b.txt").write_text("B\n")
    (node / "sub").mkdir()
    os.rename(node / "a.txt", node / "renamed.txt")
    assert not (node / "a.txt").exists()
    assert (node / "renamed.txt").read_text() == "A\n"
    os.rename(node / "renamed.txt", node / "sub" / "moved.txt")
    assert (node / "sub/moved.txt").read_text() == "A\n"
    os.rename(node / "b.txt", node / "sub" / "moved.txt")  # replaces the existing file
    assert (node / "sub/moved.txt").read_text() == "B\n"
    assert os.listdir(node / "sub") == ["moved.txt"]
    subprocess.run(["mv", str(node / "sub"), str(node / "folder")], check=True)
    assert attachments(node) == {"folder"}

    mount.remount()
    assert attachments(node) == {"folder"}
    assert os.listdir(node / "folder") == ["moved.txt"]
    assert (node / "folder/moved.txt").read_text() == "B\n"


def test_mkdir_rmdir_nested_readdir_and_unlink(mount):
    node = make_node(mount)
    (node / "a/b/c").mkdir(parents=True)
    (node / "a/b/c/deep.txt").write_text("deep\n")
    for name in ("one.txt", "two.txt", "three.md"):
        (node / "a" / name).write_text(name)
    assert sorted(os.listdir(node / "a")) == ["b", "one.txt", "three.md", "two.txt"]
    assert (node / "a").stat().st_nlink == 3  # ".", its entry in node, and b's ".."
    with pytest.raises(OSError) as e:
        os.rmdir(node / "a/b")
    assert e.value.errno == errno.ENOTEMPTY
    os.unlink(node / "a/two.txt")
    assert not (node / "a/two.txt").exists()
    os.unlink(node / "a/b/c/deep.txt")
    os.rmdir(node / "a/b/c")
    (node / "a/b/kept").mkdir()
    with pytest.raises(IsADirectoryError):
        os.unlink(node / "a/b/kept")
    with pytest.raises(NotADirectoryError):
        os.rmdir(node / "a/one.txt")

    def check() -> None:
        assert sorted(os.listdir(node / "a")) == ["b", "one.txt", "three.md"]
        assert os.listdir(node / "a/b") == ["kept"]
        assert os.listdir(node / "a/b/kept") == []
        assert (node / "a/one.txt").read_text() == "one.txt"

    check()
    mount.remount()
    check()
    os.rmdir(node / "a/b/kept")
    os.rmdir(node / "a/b")
    mount.remount()
    assert sorted(os.listdir(node / "a")) == ["one.txt", "three.md"]


# ---- metadata: chmod, utime, symlinks ----------------------------------------------------------


def test_chmod_utime_and_symlinks_survive_remount(mount):
    node = make_node(mount)
    script = node / "run.sh"
    script.write_text("#!/bin/sh\necho ran\n")
    secret = node / "private.txt"
    secret.write_text("private\n")
    os.chmod(script, 0o755)
    os.chmod(secret, 0o600)
    (node / "bin").mkdir()
    os.chmod(node / "bin", 0o700)
    mtime = 1_600_000_000.25
    os.utime(secret, (1_500_000_000, mtime))
    os.symlink("run.sh", node / "first-link")
    os.rename(node / "first-link", node / "link")
    os.symlink("../../elsewhere/missing", node / "bin/dangling")
    os.utime(node / "bin", (1_500_000_000, 1_400_000_000))  # after its last change

    def check() -> None:
        assert stat.S_IMODE(script.stat().st_mode) == 0o755
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600
        assert stat.S_IMODE((node / "bin").stat().st_mode) == 0o700
        assert int(secret.stat().st_mtime) == int(mtime)
        assert int((node / "bin").stat().st_mtime) == 1_400_000_000
        assert os.readlink(node / "link") == "run.sh"
        assert os.lstat(node / "link").st_size == len("run.sh")
        assert not (node / "first-link").exists()
        assert (node / "link").is_symlink()
        assert (node / "link").read_text() == "#!/bin/sh\necho ran\n"
        assert os.readlink(node / "bin/dangling") == "../../elsewhere/missing"
        assert not (node / "bin/dangling").exists()
        assert (
            subprocess.run([str(node / "link")], capture_output=True, check=True).stdout == b"ran\n"
        )

    check()
    mount.remount()
    check()


# ---- refusals --------------------------------------------------------------------------------


def test_fifos_and_sockets_work_in_a_node_device_nodes_are_refused(mount):
    node = make_node(mount)
    with pytest.raises(OSError) as e:
        os.mknod(node / "null", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    assert e.value.errno == errno.EPERM
    assert "EPERM mknod user/default/preferences/tools/null" in mount.status()
    # a FIFO: the kernel carries the bytes, the mount keeps the name, mode and times
    os.mkfifo(node / "pipe", 0o640)
    st = os.stat(node / "pipe")
    assert stat.S_ISFIFO(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o640
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append((node / "pipe").read_bytes()))
    reader.start()
    (node / "pipe").write_bytes(b"through the pipe")
    reader.join(10)
    assert got == [b"through the pipe"]
    # a unix socket bound in a node answers a client; bound through a short link to the
    # node, since a socket's path is at most 107 bytes and the node's may be longer
    short = Path(tempfile.mkdtemp(prefix="cfs-")) / "node"
    short.symlink_to(node)
    path = str(short / "sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(path)
    conn, _ = server.accept()
    client.sendall(b"ping")
    assert conn.recv(4) == b"ping"
    for s in (conn, client, server):
        s.close()
    assert stat.S_ISSOCK(os.stat(path).st_mode)
    assert {"pipe", "sock"} <= attachments(node)
    # both survive a remount (as names: a FIFO's bytes and a socket's listener never do)
    mount.remount()
    assert stat.S_ISFIFO(os.stat(node / "pipe").st_mode)
    assert stat.S_ISSOCK(os.stat(path).st_mode)
    os.unlink(node / "pipe")
    os.unlink(path)
    assert attachments(node) == set()
    short.unlink()
    short.parent.rmdir()


@pytest.mark.parametrize("name", ["meta.yaml", ".history/v1.md"])
def test_derived_files_are_read_only(mount, name):
    """Refused by the daemon itself: the tests run as root, who passes any mode check.
    Opening one for writing is allowed so that copiers can write back the bytes it shows
    (docs/reference.md, "Copying nodes with cp, rsync and tar"); any other bytes are not."""
    node = make_node(mount)
    before = (node / name).read_bytes()
    for mode, data in (("wb", b""), ("wb", b"version: 9\n"), ("ab", b"x"), ("r+b", b"zz")):
        with pytest.raises(PermissionError) as e, open(node / name, mode) as f:
            f.write(data)
        assert e.value.errno == errno.EACCES
    with pytest.raises(OSError) as e:
        os.truncate(node / name, 0)
    assert e.value.errno in (errno.EACCES, errno.EROFS, errno.EPERM)
    assert (node / name).read_bytes() == before
    with open(node / name, "wb") as f:  # the same bytes: nothing changes, no error
        f.write(before)
    assert (node / name).read_bytes() == before
    assert f"user/default/preferences/tools/{name}: {name.split('/')[-1]} is derived" in (
        mount.status()
    )


# ---- between nodes, and whole trees ------------------------------------------------------------


def test_attachment_moved_between_nodes_keeps_content(mount):
    a, b = make_node(mount, "first"), make_node(mount, "second")
    blob = bytes(range(256)) * 4
    (a / "data.bin").write_bytes(blob)
    (a / "dir/inner").mkdir(parents=True)
    (a / "dir/inner/x.txt").write_text("x\n")
    subprocess.run(["mv", str(a / "data.bin"), str(b / "data.bin")], check=True)
    os.rename(a / "dir", b / "dir")
    assert attachments(a) == set()
    assert (b / "data.bin").read_bytes() == blob
    assert (b / "dir/inner/x.txt").read_text() == "x\n"
    mount.remount()
    assert attachments(a) == set()
    assert attachments(b) == {"data.bin", "dir"}
    assert (b / "data.bin").read_bytes() == blob
    assert (b / "dir/inner/x.txt").read_text() == "x\n"
    # It now belongs to the second node: removing it there removes it for good.
    os.unlink(b / "data.bin")
    mount.remount()
    assert attachments(b) == {"dir"}


def make_source_tree(root: Path) -> Path:
    src = root / "src"
    (src / "sub").mkdir(parents=True)
    (src / "readme.md").write_text("Read me: the rsync fixture.\n")
    (src / "run.sh").write_text("#!/bin/sh\nexit 0\n")
    os.chmod(src / "run.sh", 0o750)
    (src / "sub/data.bin").write_bytes(bytes(range(256)) * 3)
    os.symlink("sub/data.bin", src / "link")
    os.utime(src / "readme.md", (1_500_000_000, 1_500_000_000))
    return src


def test_rsync_tree_into_node_then_diff(mount, tools, tmp_path):
    node = make_node(mount)
    src = make_source_tree(tmp_path)
    subprocess.run(["rsync", "-a", f"{src}/", f"{node}/tree/"], check=True)

    def check() -> None:
        r = subprocess.run(
            ["diff", "-r", "--no-dereference", str(src), str(node / "tree")],
            capture_output=True,
            text=True,
        )
        assert r.returncode == 0, r.stdout + r.stderr
        assert sorted(os.listdir(node / "tree")) == ["link", "readme.md", "run.sh", "sub"]
        assert os.readlink(node / "tree/link") == "sub/data.bin"
        for rel in ("readme.md", "run.sh", "sub/data.bin"):
            s, d = (src / rel).stat(), (node / "tree" / rel).stat()
            assert stat.S_IMODE(d.st_mode) == stat.S_IMODE(s.st_mode), rel
            assert int(d.st_mtime) == int(s.st_mtime), rel
        assert attachments(node) == {"tree"}

    check()
    # A second rsync finds nothing to do.
    out = subprocess.run(
        ["rsync", "-ai", f"{src}/", f"{node}/tree/"], check=True, capture_output=True, text=True
    ).stdout
    assert out.strip() == "", out
    mount.remount()
    check()


def test_find_and_grep_see_attachments(mount, tools):
    node = make_node(mount)
    (node / "docs/deep").mkdir(parents=True)
    (node / "docs/deep/howto.txt").write_text("Use the periscope command.\n")
    (node / "notes.txt").write_text("unrelated\n")
    os.symlink("notes.txt", node / "link")
    found = subprocess.run(
        f"find '{node}' -type f | sort", shell=True, check=True, capture_output=True, text=True
    ).stdout.splitlines()
    rel = [os.path.relpath(p, node) for p in found]
    assert rel == sorted(
        [
            ".history/v1.md",
            "L0.md",
            "L1.md",
            "L2.md",
            "docs/deep/howto.txt",
            "meta.yaml",
            "notes.txt",
        ]
    )
    hits = subprocess.run(
        ["grep", "-rl", "periscope", str(node)], check=True, capture_output=True, text=True
    ).stdout.splitlines()
    assert hits == [str(node / "docs/deep/howto.txt")]
    mount.remount()
    hits = subprocess.run(
        ["grep", "-r", "periscope", str(node)], check=True, capture_output=True, text=True
    ).stdout
    assert hits == f"{node}/docs/deep/howto.txt:Use the periscope command.\n"


def test_a_singleton_never_written_takes_attachments_and_git_init(mount, tmp_path):
    """A fresh `profile/` (a singleton never written) routes only `*.md`, `*.markdown`
    and `*.txt` into its L2: `settings.ini` is an attachment, mkdir an attachment folder
    and `git init` works there, as in a profile that has an L2."""
    profile = mount.path / "user/default/profile"
    subprocess.run(f"echo key=value > '{profile}/settings.ini'", shell=True, check=True)
    (profile / "scripts").mkdir()
    (profile / "scripts/run.sh").write_text("echo hi\n")
    env = {**os.environ, "HOME": str(tmp_path), "GIT_CONFIG_NOSYSTEM": "1"}
    r = subprocess.run(["git", "init", "-q", str(profile)], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert (profile / ".git/HEAD").is_file()
    assert attachments(profile) == {".git", "scripts", "settings.ini"}
    assert not (profile / "L2.md").exists()  # nothing was routed into the profile
    (profile / "about.md").write_text("Plays chess.\n")  # a memory: routed
    assert "Plays chess." in (profile / "L2.md").read_text()
    mount.remount()
    assert (profile / "settings.ini").read_text() == "key=value\n"
    assert (profile / "scripts/run.sh").read_text() == "echo hi\n"
    assert "Plays chess." in (profile / "L2.md").read_text()
    r = subprocess.run(
        ["git", "-C", str(profile), "status", "--porcelain"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode == 0, r.stderr
