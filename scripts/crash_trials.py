"""Crash trials: SIGKILL the daemon (or cut the power under its data dir) at a random
moment while several writer processes create, edit, rename, delete and restore nodes
(`mv` out of `.trash`), then check
that every acknowledged write survived, derived state caught up and fsck is clean.

    .venv/bin/python scripts/crash_trials.py [--trials 100] [--writers 3] [--power-cut]

Each writer is a process working on its own nodes under `user/default/preferences/`. It
journals every operation before starting it and again when the call that acknowledges it
(`close()`, `fsync()`, `rename()`, `rmdir()`, `mkdir()`, `unlink()`) has returned, with the
state the operation leads to. After the kill a fresh daemon mounts the same data dir and
the checker replays the journals: every path must hold its acknowledged value; the one
in-flight operation per writer may have happened or not (for the paths it touches, either
value is accepted). Then, for every node: L0/L1 equal the extractive summary of L2 (the
writers never pin them), L0 is non-empty when L2 is, `meta.yaml` version equals the number
of `.history` files and the newest history file equals L2. Nodes of earlier trials are
re-read (a sample) to catch later damage. Then a clean unmount, `contextfs fsck`, and a
scan of the daemon log for tracebacks and errors.

`--power-cut` puts the data dir on a small pyfuse3 layer (`--serve-layer`, in this file)
that keeps every written byte in memory until `fsync()`/`fdatasync()` of that file and loses
all of it when the layer is SIGKILLed together with the daemon: the page cache of a machine
losing power. Namespace operations (create, rename, unlink, mkdir) go to the backing
directory at once, like a journalling filesystem that has committed its metadata; file
contents and sizes (truncate included) are durable only once fsynced.

Results go to bench-results/crash.json (`--out`); a `--power-cut` run updates only its
`power_cut` entry, a plain run keeps an existing `power_cut` entry.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from contextfs.testing import BENIGN_LOG, write_json

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
OWNER = "user/default"
TYPE_DIR = "preferences"
DIR = "<dir>"
GONE_ERRNOS = {errno.ENOTCONN, errno.ECONNABORTED, errno.ENOENT, errno.EIO}


# ==== writer process ========================================================================


class Writer:
    """Random operations on this writer's own nodes, journalled before and after."""

    def __init__(self, root: Path, prefix: str, seed: int, journal: Path) -> None:
        self.root = root  # <mnt>/user/default
        self.prefix = prefix
        self.rng = random.Random(seed)
        self.jfd = os.open(journal, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.seq = 0
        self.nodes: dict[str, dict[str, bytes]] = {}  # node -> attachment -> bytes
        self.l2: dict[str, bytes | None] = {}
        # nodes in the trash, as `rm -r` left them (L2, attachments): `mv` brings them back
        self.trashed: dict[str, tuple[bytes | None, dict[str, bytes]]] = {}
        # nodes a file was unlinked from: a restore brings back what was deleted in the run
        # of deletions that ended with the node's (docs/operations.md), so such a node is
        # not restored by the trials (the unlinked file would come back with it)
        self.unlinked: set[str] = set()
        self.counter = 0

    def log(self, rec: dict) -> None:
        os.write(self.jfd, (json.dumps(rec) + "\n").encode())

    def fresh(self, what: str) -> str:
        self.counter += 1
        return f"{self.prefix}-{what}{self.counter}"

    def node_path(self, n: str) -> Path:
        return self.root / TYPE_DIR / n

    def text(self, n: str) -> bytes:
        k = self.rng.randrange(1_000_000)
        words = " ".join(
            self.rng.choice(["alpha", "beta", "gamma", "delta", "vim", "tabs"])
            for _ in range(self.rng.randrange(3, 30))
        )
        return f"# Note {n} rev {k}\n\nThe writer says {words}. Done {k}.\n".encode()

    # Each op returns (effects, loose): effects map a path (relative to the owner dir)
    # to its value after the op (bytes, DIR, or None = absent); loose paths may hold
    # anything while the op is in flight (temporary files).
    def plan(self) -> tuple[str, dict, list[str], object]:
        self.also: dict[str, list] = {}  # other values allowed while the op is in flight
        live = sorted(self.nodes)
        choices = ["mkdir"] * 3
        if self.trashed:
            choices += ["restore"] * 2
        if live:
            choices += (
                ["rewrite"] * 4
                + ["append"] * 3
                + ["atomic"] * 2
                + ["att_new"] * 3
                + ["att_append"] * 2
                + ["att_rename"] * 2
                + ["att_unlink"]
                + ["node_rename"]
                + ["rmr"]
            )
        op = self.rng.choice(choices)
        if op == "restore":
            n = self.rng.choice(sorted(self.trashed))
            l2, atts = self.trashed[n]
            eff = {
                f"{TYPE_DIR}/{n}": DIR,
                f"{TYPE_DIR}/{n}/L2.md": l2,
                f".trash/{TYPE_DIR}/{n}/L2.md": None,
            }
            for a, data in atts.items():
                eff[f"{TYPE_DIR}/{n}/{a}"] = data
            return op, eff, [], n
        if op != "mkdir" and not live:
            op = "mkdir"
        n = self.rng.choice(live) if live else ""
        base = f"{TYPE_DIR}/{n}"
        if op == "mkdir":
            # mkdir alone is not an acknowledgement (POSIX: fsync the parent directory);
            # a new node is acknowledged by fsync of its type directory or by the close()
            # of its first L2.md or attachment.
            n = self.fresh("n")
            how = self.rng.choice(["fsyncdir", "l2", "att"])
            # a node made by mkdir has no L2.md until one is written (None: absent)
            eff = {f"{TYPE_DIR}/{n}": DIR, f"{TYPE_DIR}/{n}/L2.md": None}
            data, a = b"", ""
            if how == "l2":
                data = self.text(n)
                eff[f"{TYPE_DIR}/{n}/L2.md"] = data
                self.also = {f"{TYPE_DIR}/{n}/L2.md": [None, b""]}
            elif how == "att":
                a = self.fresh("a") + ".bin"
                data = self.rng.randbytes(self.rng.choice([1, 300, 9000]))
                eff[f"{TYPE_DIR}/{n}/{a}"] = data
                self.also = {f"{TYPE_DIR}/{n}/{a}": [b""]}
            return op, eff, [], (n, how, a, data)
        if op in ("rewrite", "atomic"):
            data = self.text(n)
            tmp = f"tmp{self.rng.randrange(16**8):08x}"
            return op, {f"{base}/L2.md": data}, [f"{base}/{tmp}"], (n, data, tmp)
        if op == "append":
            data = f"- appended {self.rng.randrange(10**6)}\n".encode()
            return op, {f"{base}/L2.md": (self.l2[n] or b"") + data}, [], (n, data)
        atts = sorted(self.nodes[n])
        if op in ("att_append", "att_rename", "att_unlink") and not atts:
            op = "att_new"
        if op == "att_new":
            a = self.fresh("a") + ".bin"
            data = self.rng.randbytes(self.rng.choice([0, 1, 100, 5000, 70000]))
            self.also = {f"{base}/{a}": [b""]}  # created (empty) before its bytes commit
            return op, {f"{base}/{a}": data}, [], (n, a, data)
        a = self.rng.choice(atts) if atts else ""
        if op == "att_append":
            data = self.rng.randbytes(self.rng.randrange(1, 3000))
            return op, {f"{base}/{a}": self.nodes[n][a] + data}, [], (n, a, data)
        if op == "att_rename":
            b = self.fresh("m") + ".bin"
            return op, {f"{base}/{a}": None, f"{base}/{b}": self.nodes[n][a]}, [], (n, a, b)
        if op == "att_unlink":
            return op, {f"{base}/{a}": None}, [], (n, a)
        paths = [base, f"{base}/L2.md", *(f"{base}/{a}" for a in atts)]
        if op == "node_rename":
            m = self.fresh("n")
            eff: dict = {p: None for p in paths}
            eff[f"{TYPE_DIR}/{m}"] = DIR
            eff[f"{TYPE_DIR}/{m}/L2.md"] = self.l2[n]
            for a in atts:
                eff[f"{TYPE_DIR}/{m}/{a}"] = self.nodes[n][a]
            return op, eff, [], (n, m)
        eff = {p: None for p in paths}  # rmr
        eff[f".trash/{TYPE_DIR}/{n}/L2.md"] = self.l2[n]
        return op, eff, [], n

    def _write(self, path: Path, data: bytes, flags: int, fsync: bool) -> None:
        fd = os.open(path, os.O_WRONLY | flags, 0o644)
        try:
            if data:
                os.write(fd, data)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)

    def apply(self, op: str, arg) -> None:
        sync = self.rng.random() < 0.5
        if op == "mkdir":
            n, how, a, data = arg
            os.mkdir(self.node_path(n))
            self.nodes[n], self.l2[n] = {}, None
            if how == "fsyncdir":
                fd = os.open(self.root / TYPE_DIR, os.O_RDONLY | os.O_DIRECTORY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            elif how == "l2":
                self._write(self.node_path(n) / "L2.md", data, os.O_CREAT | os.O_TRUNC, sync)
                self.l2[n] = data
            else:
                self._write(self.node_path(n) / a, data, os.O_CREAT | os.O_EXCL, sync)
                self.nodes[n][a] = data
        elif op == "rewrite":
            n, data, _tmp = arg
            self._write(self.node_path(n) / "L2.md", data, os.O_CREAT | os.O_TRUNC, sync)
            self.l2[n] = data
        elif op == "atomic":
            n, data, tmp = arg
            self._write(self.node_path(n) / tmp, data, os.O_CREAT | os.O_EXCL, sync)
            os.rename(self.node_path(n) / tmp, self.node_path(n) / "L2.md")
            self.l2[n] = data
        elif op == "append":
            n, data = arg
            self._write(self.node_path(n) / "L2.md", data, os.O_CREAT | os.O_APPEND, sync)
            self.l2[n] = (self.l2[n] or b"") + data
        elif op == "att_new":
            n, a, data = arg
            self._write(self.node_path(n) / a, data, os.O_CREAT | os.O_EXCL, sync)
            self.nodes[n][a] = data
        elif op == "att_append":
            n, a, data = arg
            self._write(self.node_path(n) / a, data, os.O_APPEND, sync)
            self.nodes[n][a] += data
        elif op == "att_rename":
            n, a, b = arg
            os.rename(self.node_path(n) / a, self.node_path(n) / b)
            self.nodes[n][b] = self.nodes[n].pop(a)
        elif op == "att_unlink":
            n, a = arg
            os.unlink(self.node_path(n) / a)
            del self.nodes[n][a]
            self.unlinked.add(n)
        elif op == "node_rename":
            n, m = arg
            os.rename(self.node_path(n), self.node_path(m))
            self.nodes[m], self.l2[m] = self.nodes.pop(n), self.l2.pop(n)
            if n in self.unlinked:
                self.unlinked.add(m)
        elif op == "rmr":
            shutil.rmtree(self.node_path(arg))
            atts, l2 = self.nodes.pop(arg), self.l2.pop(arg)
            if arg not in self.unlinked:
                self.trashed[arg] = (l2, atts)
        elif op == "restore":
            os.rename(self.root / ".trash" / TYPE_DIR / arg, self.node_path(arg))
            l2, atts = self.trashed.pop(arg)
            self.nodes[arg], self.l2[arg] = dict(atts), l2

    def run(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.seq += 1
            op, effects, loose, arg = self.plan()
            self.log(
                {
                    "seq": self.seq,
                    "op": op,
                    "effects": _enc(effects),
                    "loose": loose,
                    "also": {p: [_enc({p: v})[p] for v in vs] for p, vs in self.also.items()},
                    "t": time.time(),
                }
            )
            try:
                self.apply(op, arg)
            except OSError as exc:
                self.log({"seq": self.seq, "err": exc.errno, "msg": str(exc), "t": time.time()})
                return
            self.log({"seq": self.seq, "ack": True, "t": time.time()})
        self.log({"done": True})


def _enc(effects: dict) -> dict:
    return {p: (v.hex() if isinstance(v, bytes) else v) for p, v in effects.items()}


def _dec(v):
    if v is None or v == DIR:
        return v
    return bytes.fromhex(v)


# ==== the daemon and the power-cut layer ====================================================


class Daemon:
    def __init__(self, mnt: Path, data_dir: Path) -> None:
        self.mnt, self.data_dir = mnt, data_dir
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        # The trials check the canonical store; search (index catch-up after kill -9 is
        # tested in tests/integration/test_search.py) would load the model every trial.
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cfg = self.data_dir / "config.yaml"
        if not cfg.exists():
            cfg.write_text("search: false\n")
        self.out = open(self.data_dir.parent / "daemon.out", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                PY,
                "-m",
                "contextfs",
                "mount",
                str(self.mnt),
                "--foreground",
                "--data-dir",
                str(self.data_dir),
            ],
            stdout=self.out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPO,
        )
        deadline = time.monotonic() + 60
        while not (os.path.ismount(self.mnt) and os.path.exists(self.mnt / ".status")):
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited {self.proc.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError("mount not ready after 60 s")
            time.sleep(0.02)

    def kill(self) -> bool:
        """SIGKILL; returns False when the daemon could not exit within 30 s (the FUSE
        connection is then aborted through fusectl so the campaign can go on)."""
        assert self.proc is not None
        dev = _fuse_conn(self.mnt)
        self.proc.send_signal(signal.SIGKILL)
        ok = True
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            ok = False
            abort_connection(dev)
            self.proc.wait(timeout=30)
        self.proc = None
        subprocess.run(["fusermount3", "-u", "-z", str(self.mnt)], capture_output=True)
        return ok

    def stop(self) -> int:
        r = subprocess.run(["fusermount3", "-u", str(self.mnt)], capture_output=True)
        if r.returncode != 0:
            subprocess.run(["fusermount3", "-u", "-z", str(self.mnt)], capture_output=True)
        assert self.proc is not None
        try:
            code = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
            code = -999
        self.proc = None
        return code


def _fuse_conn(mnt: Path) -> str | None:
    """The fusectl connection number of the mount on mnt (its device minor)."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        f = line.split()
        if f[4] == str(mnt):
            return f[2].split(":")[1]
    return None


def abort_connection(conn: str | None) -> None:
    ctl = Path("/sys/fs/fuse/connections")
    if conn is None:
        return
    if not (ctl / conn).exists():
        subprocess.run(["mount", "-t", "fusectl", "none", str(ctl)], capture_output=True)
    with contextlib.suppress(OSError):
        (ctl / conn / "abort").write_text("1")


class Layer:
    """The power-cut layer (this file with --serve-layer) on `mnt` over `backing`."""

    def __init__(self, backing: Path, mnt: Path) -> None:
        self.backing, self.mnt = backing, mnt
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [PY, __file__, "--serve-layer", str(self.backing), str(self.mnt)], cwd=REPO
        )
        deadline = time.monotonic() + 30
        while not os.path.ismount(self.mnt):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("power-cut layer did not mount")
            time.sleep(0.02)

    def cut(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.proc = None

    def detach(self) -> None:
        subprocess.run(["fusermount3", "-u", "-z", str(self.mnt)], capture_output=True)

    def stop(self) -> None:
        subprocess.run(["fusermount3", "-u", str(self.mnt)], capture_output=True)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
        self.detach()


def serve_layer(backing: str, mnt: str) -> None:
    """A passthrough FUSE filesystem whose file contents are volatile until fsync."""
    import stat as st

    import pyfuse3
    import trio

    class PowerCutFS(pyfuse3.Operations):
        def __init__(self) -> None:
            super().__init__()
            self.paths: dict[int, str] = {pyfuse3.ROOT_INODE: backing}
            self.dirty: dict[int, bytearray] = {}  # backing st_ino -> content not yet synced
            self.fds: dict[int, int] = {}

        def _path(self, ino: int) -> str:
            try:
                return self.paths[ino]
            except KeyError:
                raise pyfuse3.FUSEError(errno.ENOENT) from None

        def _attr(self, path: str) -> pyfuse3.EntryAttributes:
            try:
                s = os.lstat(path)
            except OSError as exc:
                raise pyfuse3.FUSEError(exc.errno) from None
            ino = pyfuse3.ROOT_INODE if path == backing else s.st_ino
            self.paths[ino] = path
            a = pyfuse3.EntryAttributes()
            a.st_ino, a.st_mode, a.st_nlink = ino, s.st_mode, s.st_nlink
            a.st_uid, a.st_gid, a.st_rdev = s.st_uid, s.st_gid, s.st_rdev
            a.st_size = len(self.dirty[ino]) if ino in self.dirty else s.st_size
            a.st_atime_ns, a.st_mtime_ns, a.st_ctime_ns = (
                s.st_atime_ns,
                s.st_mtime_ns,
                s.st_ctime_ns,
            )
            a.st_blksize, a.st_blocks = 4096, (a.st_size + 511) // 512
            a.attr_timeout = a.entry_timeout = 0
            return a

        def _content(self, ino: int) -> bytearray:
            if ino not in self.dirty:
                with open(self._path(ino), "rb") as f:
                    self.dirty[ino] = bytearray(f.read())
            return self.dirty[ino]

        def _sync(self, ino: int) -> None:
            data = self.dirty.pop(ino, None)
            if data is None:
                return
            fd = os.open(self._path(ino), os.O_WRONLY)
            try:
                os.pwrite(fd, data, 0)
                os.ftruncate(fd, len(data))
                os.fsync(fd)
            finally:
                os.close(fd)

        def _join(self, parent: int, name: bytes) -> str:
            return os.path.join(self._path(parent), os.fsdecode(name))

        async def lookup(self, parent, name, ctx=None):
            return self._attr(self._join(parent, name))

        async def getattr(self, ino, ctx=None):
            return self._attr(self._path(ino))

        async def setattr(self, ino, attr, fields, fh, ctx):
            path = self._path(ino)
            try:
                if fields.update_size:
                    data = self._content(ino)
                    if attr.st_size < len(data):
                        del data[attr.st_size :]
                    else:
                        data.extend(b"\0" * (attr.st_size - len(data)))
                if fields.update_mode:
                    os.chmod(path, st.S_IMODE(attr.st_mode))
                if fields.update_mtime or fields.update_atime:
                    s = os.lstat(path)
                    os.utime(
                        path,
                        ns=(
                            attr.st_atime_ns if fields.update_atime else s.st_atime_ns,
                            attr.st_mtime_ns if fields.update_mtime else s.st_mtime_ns,
                        ),
                    )
            except OSError as exc:
                raise pyfuse3.FUSEError(exc.errno) from None
            return self._attr(path)

        async def readlink(self, ino, ctx):
            return os.fsencode(os.readlink(self._path(ino)))

        async def opendir(self, ino, ctx):
            return ino

        async def readdir(self, fh, off, token):
            path = self._path(fh)
            names = sorted(os.listdir(path))
            for i, name in enumerate(names[off:], off):
                try:
                    a = self._attr(os.path.join(path, name))
                except pyfuse3.FUSEError:
                    continue
                if not pyfuse3.readdir_reply(token, os.fsencode(name), a, i + 1):
                    break

        async def releasedir(self, fh):
            pass

        async def mkdir(self, parent, name, mode, ctx):
            path = self._join(parent, name)
            try:
                os.mkdir(path, mode)
            except OSError as exc:
                raise pyfuse3.FUSEError(exc.errno) from None
            return self._attr(path)

        async def unlink(self, parent, name, ctx):
            path = self._join(parent, name)
            try:
                ino = os.lstat(path).st_ino
                os.unlink(path)
            except OSError as exc:
                raise pyfuse3.FUSEError(exc.errno) from None
            self.dirty.pop(ino, None)

        async def rmdir(self, parent, name, ctx):
            try:
                os.rmdir(self._join(parent, name))
            except OSError as exc:
                raise pyfuse3.FUSEError(exc.errno) from None

        async def rename(self, p_old, n_old, p_new, n_new, flags, ctx):
            if flags:
                raise pyfuse3.FUSEError(errno.EINVAL)
            old, new = self._join(p_old, n_old), self._join(p_new, n_new)
            try:
                ino = os.lstat(old).st_ino
                try:
                    gone = os.lstat(new).st_ino
                except FileNotFoundError:
                    gone = None
                os.rename(old, new)
            except OSError as exc:
                raise pyfuse3.FUSEError(exc.errno) from None
            if gone is not None and gone != ino:
                self.dirty.pop(gone, None)
            self.paths[ino] = new

        async def open(self, ino, flags, ctx):
            if flags & os.O_TRUNC:
                self.dirty[ino] = bytearray()
            return pyfuse3.FileInfo(fh=ino)

        async def create(self, parent, name, mode, flags, ctx):
            path = self._join(parent, name)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | (flags & os.O_EXCL), mode)
                os.close(fd)
            except OSError as exc:
                raise pyfuse3.FUSEError(exc.errno) from None
            a = self._attr(path)
            if flags & os.O_TRUNC:
                self.dirty[a.st_ino] = bytearray()
            return pyfuse3.FileInfo(fh=a.st_ino), a

        async def read(self, fh, off, size):
            if fh in self.dirty:
                return bytes(self.dirty[fh][off : off + size])
            with open(self._path(fh), "rb") as f:
                f.seek(off)
                return f.read(size)

        async def write(self, fh, off, buf):
            data = self._content(fh)
            if off > len(data):
                data.extend(b"\0" * (off - len(data)))
            data[off : off + len(buf)] = buf
            return len(buf)

        async def fsync(self, fh, datasync):
            self._sync(fh)

        async def flush(self, fh):
            pass

        async def release(self, fh):
            pass

        async def fsyncdir(self, fh, datasync):
            pass

        async def statfs(self, ctx):
            s = os.statvfs(backing)
            r = pyfuse3.StatvfsData()
            for k in (
                "f_bsize",
                "f_frsize",
                "f_blocks",
                "f_bfree",
                "f_bavail",
                "f_files",
                "f_ffree",
                "f_favail",
                "f_namemax",
            ):
                setattr(r, k, getattr(s, k))
            return r

    options = set(pyfuse3.default_options)
    options.add("fsname=powercut")
    options.discard("default_permissions")
    pyfuse3.init(PowerCutFS(), mnt, options)
    try:
        trio.run(pyfuse3.main)
    finally:
        pyfuse3.close(unmount=True)


# ==== the checker ===========================================================================


def read_state(owner: Path, names: set[str]) -> dict[str, object]:
    """What the mount shows for these nodes: live files and dirs, trash L2s."""
    state: dict[str, object] = {}
    for n in names:
        base = owner / TYPE_DIR / n
        if base.is_dir():
            state[f"{TYPE_DIR}/{n}"] = DIR
            for dirpath, dirnames, filenames in os.walk(base):
                rel = os.path.relpath(dirpath, owner)
                dirnames[:] = [d for d in dirnames if d != ".history"]
                for f in filenames:
                    if rel == f"{TYPE_DIR}/{n}" and f in ("L0.md", "L1.md", "meta.yaml"):
                        continue
                    state[f"{rel}/{f}"] = Path(dirpath, f).read_bytes()
        trash = owner / ".trash" / TYPE_DIR / n / "L2.md"
        if trash.exists():
            state[f".trash/{TYPE_DIR}/{n}/L2.md"] = trash.read_bytes()
    return state


def derived_problems(owner: Path, names: set[str], summarize, ctype) -> list[str]:
    problems = []
    for n in sorted(names):
        base = owner / TYPE_DIR / n
        if not base.is_dir() or not (base / "L2.md").exists():  # never written: no tiers
            continue
        l2 = (base / "L2.md").read_text()
        l0, l1 = (base / "L0.md").read_text(), (base / "L1.md").read_text()
        want0, want1 = summarize(ctype, l2) if l2.strip() else ("", "")
        if l2.strip() and not l0.strip():
            problems.append(f"{n}: L0 empty for a non-empty L2")
        if (l0, l1) != (want0, want1):
            problems.append(f"{n}: L0/L1 do not match L2 (L0={l0!r}, expected {want0!r})")
        meta = dict(
            line.split(": ", 1)
            for line in (base / "meta.yaml").read_text().splitlines()
            if ": " in line
        )
        hist = sorted(os.listdir(base / ".history"))
        version = int(meta["version"])
        if version != len(hist):
            problems.append(f"{n}: meta.yaml version {version} but {len(hist)} history files")
        if version and (base / ".history" / f"v{version}.md").read_text() != l2:
            problems.append(f"{n}: .history/v{version}.md differs from L2.md")
    return problems


def check_trial(journals: list[Path], owner: Path, kill_time: float, summarize, ctype) -> dict:
    acked = 0
    by_op: dict[str, int] = {}  # acknowledged operations by kind
    lost: list[str] = []
    early_errors: list[str] = []
    names: set[str] = set()
    expected: dict[str, object] = {}
    inflight: dict[str, list[object]] = {}
    loose: set[str] = set()
    for j in journals:
        recs = [json.loads(line) for line in j.read_text().splitlines() if line.strip()]
        begun: dict[int, dict] = {}
        state: dict[str, object] = {}
        open_op = None
        for r in recs:
            if "op" in r:
                begun[r["seq"]] = r
                open_op = r
                for p in r["effects"]:
                    names.add(p.split("/")[2] if p.startswith(".trash") else p.split("/")[1])
            elif r.get("ack"):
                acked += 1
                by_op[begun[r["seq"]]["op"]] = by_op.get(begun[r["seq"]]["op"], 0) + 1
                for p, v in begun[r["seq"]]["effects"].items():
                    state[p] = _dec(v)
                open_op = None
            elif (
                "err" in r
                and r["t"] < kill_time
                and r["err"] not in (errno.ENOTCONN, errno.ECONNABORTED)
            ):
                early_errors.append(f"{j.name} seq {r['seq']} {begun[r['seq']]['op']}: {r['msg']}")
        expected.update(state)
        if open_op is not None:
            for p, v in open_op["effects"].items():
                inflight.setdefault(p, []).append(_dec(v))
            for p, vs in open_op.get("also", {}).items():
                inflight.setdefault(p, []).extend(_dec(v) for v in vs)
            loose.update(f"{p}" for p in open_op["loose"])
    actual = read_state(owner, names)
    for p in sorted(set(expected) | set(actual) | set(inflight)):
        have = actual.get(p)
        ok = [expected.get(p), *inflight.get(p, [])]
        if have in ok or p in loose:
            continue
        want = expected.get(p)
        lost.append(
            f"{p}: expected {_short(want)}"
            + (f" or {', '.join(_short(v) for v in inflight[p])}" if p in inflight else "")
            + f", found {_short(have)}"
        )
    derived = derived_problems(owner, names, summarize, ctype)
    return {
        "acked": acked,
        "by_op": by_op,
        "lost": lost,
        "early_errors": early_errors,
        "derived": derived,
        "state": actual,
    }


def _short(v) -> str:
    if v is None:
        return "absent"
    if v == DIR:
        return "a directory"
    b = bytes(v)
    return repr(b[:40] + (b"..." if len(b) > 40 else b"")) + f" ({len(b)} B)"


def fsck(data_dir: Path) -> tuple[int, str]:
    r = subprocess.run(
        [PY, "-m", "contextfs", "fsck", str(data_dir)], capture_output=True, text=True, cwd=REPO
    )
    return r.returncode, (r.stdout + r.stderr).strip()


def log_problems(log: Path, offset: int) -> tuple[list[str], int]:
    if not log.exists():
        return [], offset
    text = log.read_bytes()[offset:].decode(errors="replace")
    bad = [
        line
        for line in text.splitlines()
        if ("Traceback" in line or " ERROR " in line or " CRITICAL " in line)
        and not any(b in line for b in BENIGN_LOG)  # a close racing an unmount
    ]
    return bad, offset + len(text.encode())


# ==== the campaign ==========================================================================


def run(args: argparse.Namespace) -> dict:
    from contextfs.ctxtypes import builtin_schema_dir, load_types
    from contextfs.memory.summarize import summarize

    ctype = next(
        t
        for t in load_types([builtin_schema_dir()]).values()
        if t.type_dir == TYPE_DIR and t.scope == "user"
    )
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="ctxfs-crash-", dir=args.tmp))
    mnt = work / "mnt"
    mnt.mkdir()
    layer = None
    if args.power_cut:
        backing, lmnt = work / "backing", work / "layer"
        backing.mkdir()
        lmnt.mkdir()
        layer = Layer(backing, lmnt)
        layer.start()
        data_dir = lmnt / "data"
    else:
        data_dir = work / "data"
    data_dir.mkdir()
    daemon = Daemon(mnt, data_dir)
    owner = mnt / OWNER
    log_path = data_dir / "contextfs.log"
    settled: dict[str, object] = {}
    by_op: dict[str, int] = {}
    totals = {
        "acked": 0,
        "lost": 0,
        "fsck_errors": 0,
        "derived": 0,
        "early_errors": 0,
        "log_errors": 0,
        "settled_checked": 0,
        "hangs": 0,
        "daemon_exit": 0,
    }
    defects: list[str] = []
    t0 = time.monotonic()
    daemon.start()
    log_off = 0
    for trial in range(1, args.trials + 1):
        tt = time.monotonic()
        jdir = work / f"journal-{trial:03d}"
        jdir.mkdir()
        writers = []
        for w in range(args.writers):
            j = jdir / f"w{w}.jsonl"
            writers.append(
                (
                    j,
                    subprocess.Popen(
                        [
                            PY,
                            __file__,
                            "--writer",
                            str(owner),
                            f"t{trial}-w{w}",
                            str(rng.randrange(2**32)),
                            str(j),
                            "30",
                        ],
                        cwd=REPO,
                    ),
                )
            )
        delay = rng.uniform(args.min_delay, args.max_delay)
        time.sleep(delay)
        kill_time = time.time()
        if layer is not None:
            layer.cut()  # the power goes: unsynced bytes under the data dir are gone
        if not daemon.kill():
            totals["hangs"] += 1
            defects.append(
                f"trial {trial}: the SIGKILLed daemon did not exit within 30 s "
                "(FUSE connection aborted through fusectl)"
            )
        for _j, p in writers:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                totals["hangs"] += 1
                defects.append(f"trial {trial}: a writer hung 30 s after the kill")
                p.kill()
                p.wait()
        if layer is not None:
            layer.detach()
            layer.start()
        daemon.start()
        res = check_trial([j for j, _p in writers], owner, kill_time, summarize, ctype)
        sample = rng.sample(sorted(settled), min(len(settled), args.sample))
        rotten = []
        if sample:
            names = {p.split("/")[2] if p.startswith(".trash") else p.split("/")[1] for p in sample}
            now = read_state(owner, names)
            rotten = [p for p in sample if now.get(p) != settled[p]]
            totals["settled_checked"] += len(sample)
        settled.update(res["state"])
        code = daemon.stop()
        fcode, fout = fsck(data_dir)
        bad_log, log_off = log_problems(log_path, log_off)
        if code != 0:
            totals["daemon_exit"] += 1
            defects.append(f"trial {trial}: daemon exit {code} at unmount")
        totals["acked"] += res["acked"]
        for op, count in res["by_op"].items():
            by_op[op] = by_op.get(op, 0) + count
        totals["lost"] += len(res["lost"]) + len(rotten)
        totals["derived"] += len(res["derived"])
        totals["early_errors"] += len(res["early_errors"])
        totals["log_errors"] += len(bad_log)
        if fcode != 0:
            totals["fsck_errors"] += max(1, fout.count("\n"))
        for what, items in (
            ("lost", res["lost"]),
            ("settled data changed", rotten),
            ("derived", res["derived"]),
            ("error before the kill", res["early_errors"]),
            ("daemon log", bad_log),
        ):
            defects += [f"trial {trial}: {what}: {x}" for x in items[:5]]
        if fcode != 0:
            defects.append(f"trial {trial}: fsck exit {fcode}: {fout[:500]}")
        print(
            f"trial {trial:3d}/{args.trials}: kill after {delay:4.2f}s, "
            f"{res['acked']:3d} acked, lost {len(res['lost']) + len(rotten)}, "
            f"derived {len(res['derived'])}, fsck {'ok' if fcode == 0 else 'FAIL'}, "
            f"log {len(bad_log)}, {time.monotonic() - tt:4.1f}s",
            flush=True,
        )
        if trial < args.trials:
            daemon.start()
    if layer is not None:
        layer.stop()
    seconds = round(time.monotonic() - t0, 1)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"kept {work}")
    return {
        "trials": args.trials,
        "writers": args.writers,
        "acknowledged": totals["acked"],
        "acknowledged_by_op": dict(sorted(by_op.items())),
        "lost": totals["lost"],
        "fsck_errors": totals["fsck_errors"],
        "derived_mismatches": totals["derived"],
        "errors_before_kill": totals["early_errors"],
        "daemon_log_errors": totals["log_errors"],
        "settled_paths_rechecked": totals["settled_checked"],
        "hangs": totals["hangs"],
        "unclean_daemon_exits": totals["daemon_exit"],
        "seconds": seconds,
        "kill_delay_s": [args.min_delay, args.max_delay],
        "seed": args.seed,
        "defects": defects[:50],
    }


POWER_CUT_MODEL = (
    "data dir on a pyfuse3 layer (scripts/crash_trials.py --serve-layer) that keeps file "
    "contents and sizes in memory until fsync/fdatasync of that file and loses them when "
    "SIGKILLed together with the daemon; create/rename/unlink/mkdir reach the backing "
    "directory at once. dm-log-writes/dm-flakey are not available here: no "
    "/dev/mapper/control, no kernel modules (/lib/modules missing, modprobe absent)."
)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--writer":
        root, prefix, seed, journal, seconds = sys.argv[2:7]
        Writer(Path(root), prefix, int(seed), Path(journal)).run(float(seconds))
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "--serve-layer":
        serve_layer(sys.argv[2], sys.argv[3])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=None, help="default 100 (20 with --power-cut)")
    ap.add_argument("--writers", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--min-delay", type=float, default=0.3)
    ap.add_argument("--max-delay", type=float, default=2.5)
    ap.add_argument(
        "--sample", type=int, default=200, help="paths of earlier trials re-read after each kill"
    )
    ap.add_argument("--power-cut", action="store_true")
    ap.add_argument("--out", type=Path, default=REPO / "bench-results/crash.json")
    ap.add_argument("--tmp", default=None)
    ap.add_argument("--keep", action="store_true", help="keep the work dir")
    args = ap.parse_args()
    if args.trials is None:
        args.trials = 20 if args.power_cut else 100
    res = run(args)
    print(
        f"\n{'power-cut ' if args.power_cut else ''}trials {res['trials']}, writers "
        f"{res['writers']}, acknowledged ops checked {res['acknowledged']}, lost "
        f"{res['lost']}, fsck errors {res['fsck_errors']}, derived mismatches "
        f"{res['derived_mismatches']}, daemon log errors {res['daemon_log_errors']}, "
        f"{res['seconds']} s"
    )
    print(
        "acknowledged by operation: "
        + ", ".join(f"{k} {v}" for k, v in res["acknowledged_by_op"].items())
    )
    for d in res["defects"]:
        print("  " + d)
    out: dict = {}
    if args.out.exists():
        try:
            out = json.loads(args.out.read_text())
        except ValueError:
            out = {}
    if args.power_cut:
        out.setdefault("power_cut", {})
        out["power_cut"] = {"run": True, "model": POWER_CUT_MODEL, **res}
    else:
        pc = out.get("power_cut") or {"run": False, "reason": "not run yet: use --power-cut"}
        out = {**res, "power_cut": pc}
    write_json(args.out, out)
    bad = (
        res["lost"]
        or res["fsck_errors"]
        or res["derived_mismatches"]
        or res["hangs"]
        or res["daemon_log_errors"]
        or res["errors_before_kill"]
        or res["unclean_daemon_exits"]
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
