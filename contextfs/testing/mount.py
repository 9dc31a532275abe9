"""Real mounts for tests and benchmarks: the daemon always runs in a subprocess.

`Mount` runs `contextfs mount --foreground` and drives it (start, stop, kill -9, remount,
fsck of the store); `DrainedMount` also reads the daemon's output all along, for long
loads. `cli_mount`/`cli_umount` go through the daemonising command as a user would.

Never in the caller's own process or trio loop: a kernel request sent from the loop that
serves it would deadlock. So nothing here imports pyfuse3 or the daemon; the store is
imported only inside `fsck_store`, when a check asks for it.
"""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path

# pyfuse3 logs this when the kernel no longer waits for a RELEASE reply (the file was
# closed as the mount went away): nothing was lost, the close had already committed.
BENIGN_LOG = ["fuse_release(): fuse_reply_* failed with No such file or directory"]
# What a clean daemon never prints, in its log file or on stderr.
BAD_LOG = re.compile(r" ERROR |Traceback|--- Logging error ---| CRITICAL ")


def mount_tmpfs(disk: Path, size: str) -> Path:
    """A tmpfs of `size` (`160m`) at `disk` (root): a disk that fills on demand.
    `unmount_tmpfs` takes it away."""
    disk.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(disk)], check=True, timeout=60
    )
    return disk


def unmount_tmpfs(disk: Path) -> None:
    subprocess.run(["umount", "-l", str(disk)], check=False, timeout=60)


def disk_filler(disk: Path) -> Callable[[], Callable[[], None]]:
    """What the differential machine's disk-full step calls: fill `disk`, get what frees it."""

    def fill() -> Callable[[], None]:
        filler = fill_disk(disk)
        return lambda: filler.unlink(missing_ok=True)

    return fill


def fill_disk(disk: Path) -> Path:
    """Take every free byte of the filesystem at `disk`: the file that holds them."""
    filler = disk / f"filler-{os.getpid()}"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for size in (1 << 20, 4096, 1):
            chunk = b"\0" * size
            try:
                while True:
                    os.write(fd, chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
    finally:
        os.close(fd)
    return filler


def fsck_store(db: Path) -> list[str]:
    """`check_store` of the DuckDB file at `db`, opened read-only (so not while mounted)."""
    from contextfs.store import Store
    from contextfs.store.fsck import check_store

    store = Store(db, read_only=True)
    try:
        return check_store(store)
    finally:
        store.close()


def unmount(mnt: Path) -> None:
    """fusermount3 -u, lazily (-z) if the mount is busy; nothing if `mnt` is not mounted."""
    if os.path.ismount(mnt):
        # bounded: a stuck call shows as a failure with its traceback, not a silent hang
        r = subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True, timeout=60)
        if r.returncode != 0:
            subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True, timeout=60)


def contextfs_cmd(*args: str) -> list[str]:
    """The command line of `contextfs ARGS` with this interpreter."""
    return [sys.executable, "-m", "contextfs", *args]


class Mount:
    """A running daemon on `path` over `data_dir`; remount() and kill() for crash tests."""

    # Every mount started in this process, for the post-mortem of a failed test.
    started: weakref.WeakSet[Mount] = weakref.WeakSet()

    def __init__(self, path: Path, data_dir: Path, *, search: bool = False) -> None:
        self.path = path
        self.data_dir = data_dir
        # Search loads the embedding model (5-13 s, 0.5 GB): only the search tests turn it
        # on; everything else runs the same daemon with `search: false` in config.yaml.
        data_dir.mkdir(parents=True, exist_ok=True)
        cfg = data_dir / "config.yaml"
        if not cfg.exists():
            cfg.write_text(f"search: {'true' if search else 'false'}\n")
        self.proc: subprocess.Popen | None = None
        self.log_offset = 0
        self.expect_log: list[str] = []
        # The daemon's stdout/stderr, read continuously: a full 64 KiB pipe would block the
        # daemon in write(), and a daemon that died must be able to say why.
        self.output: list[str] = []
        self._reader: threading.Thread | None = None

    @property
    def log(self) -> Path:
        return self.data_dir / "contextfs.log"

    def start(self, *extra: str, expect_fail: bool = False) -> subprocess.Popen:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            contextfs_cmd(
                "mount", str(self.path), "--foreground", "--data-dir", str(self.data_dir), *extra
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
        )
        if expect_fail:
            self.proc.wait(timeout=60)
            return self.proc
        deadline = time.monotonic() + 60
        # a dead mount left by kill -9 also looks like a mount point: wait for an answer
        while not (os.path.ismount(self.path) and os.path.exists(self.path / ".status")):
            if self.proc.poll() is not None:
                assert self.proc.stdout is not None  # stdout=PIPE
                out = self.proc.stdout.read().decode(errors="replace")
                raise AssertionError(f"daemon exited {self.proc.returncode}:\n{out}")
            if time.monotonic() > deadline:
                raise AssertionError("mount not ready after 60 s")
            time.sleep(0.02)
        self.output = []
        Mount.started.add(self)
        self._reader = threading.Thread(target=self._drain, args=(self.proc,), daemon=True)
        self._reader.start()
        return self.proc

    def _drain(self, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None  # started with stdout=PIPE
        for raw in iter(proc.stdout.readline, b""):
            self.output.append(raw.decode("utf-8", "replace"))

    def _collected(self) -> str:
        if self._reader is not None:
            self._reader.join(timeout=10)
            self._reader = None
        return "".join(self.output)

    def stop(self) -> str:
        """Unmount cleanly; assert the daemon exited 0; return its output."""
        unmount(self.path)
        assert self.proc is not None
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("daemon did not exit after unmount") from None
        out = self._collected()
        assert self.proc.returncode == 0, f"daemon exit {self.proc.returncode}:\n{out}"
        self.proc = None
        return out

    def died(self) -> bool:
        """The daemon this fixture started has exited without being stopped."""
        return self.proc is not None and self.proc.poll() is not None

    def post_mortem(self) -> str:
        """What a test shows when the mount stopped answering: whether the daemon still
        runs, its exit code, its output and the end of its log."""
        if self.proc is None:
            return "no daemon was started by this fixture"
        code = self.proc.poll()
        state = "still running" if code is None else f"exited {code}"
        out = self._collected() if code is not None else "".join(self.output)
        log = self.log.read_text(errors="replace") if self.log.exists() else ""
        tail = "\n".join(log.splitlines()[-60:])
        return f"daemon {state}\n--- output ---\n{out[-6000:]}\n--- log tail ---\n{tail}"

    def kill(self) -> None:
        """SIGKILL the daemon, like a crash; leaves the kernel mount to clean up."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.proc = None
        subprocess.run(["fusermount3", "-u", "-z", str(self.path)], capture_output=True, timeout=60)

    def remount(self, *extra: str) -> None:
        if self.proc is not None:
            self.stop()
        self.start(*extra)

    def fsck(self) -> list[str]:
        return fsck_store(self.data_dir / "contextfs.duckdb")

    def status(self) -> str:
        try:
            return (self.path / ".status").read_text()
        except OSError as e:
            if e.errno in (errno.ENOTCONN, errno.ECONNABORTED):
                raise AssertionError(f"the mount is gone ({e}):\n{self.post_mortem()}") from e
            raise

    def new_log(self) -> str:
        """Log lines written since the last call."""
        if not self.log.exists():
            return ""
        text = self.log.read_text(errors="replace")
        new, self.log_offset = text[self.log_offset :], len(text)
        return new


class DrainedMount(Mount):
    """A `Mount` for long loads: unmounted without waiting for `contextfs umount`, and
    aborted (stacks to the log, then kill) when it hangs."""

    def stop(self) -> str:
        subprocess.run(["fusermount3", "-u", str(self.path)], capture_output=True, timeout=60)
        proc = self.proc
        assert proc is not None
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.abort()
            raise RuntimeError("daemon did not exit after unmount") from None
        self._collected()
        self.proc = None
        if proc.returncode != 0:
            raise RuntimeError(f"daemon exit {proc.returncode}")
        return "".join(self.output)

    def abort(self) -> None:
        """A hung mount: detach it lazily and kill the daemon (ours, by pid)."""
        subprocess.run(["fusermount3", "-u", "-z", str(self.path)], capture_output=True, timeout=60)
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGUSR1)  # stacks to the log first
            time.sleep(0.5)
            self.proc.kill()
            self.proc.wait(timeout=30)
        self.proc = None

    def problems(self) -> list[str]:
        log = self.log.read_text(errors="replace") if self.log.exists() else ""
        lines = [ln for ln in log.splitlines() if BAD_LOG.search(ln)]
        lines += [f"[stderr] {ln.rstrip()}" for ln in self.output if BAD_LOG.search(ln)]
        return lines

    def refusals(self) -> tuple[int, list[str]]:
        text = (self.path / ".status").read_text(errors="replace")
        m = re.search(r"^refusals: (\d+)", text, re.M)
        lines = [ln.strip() for ln in text.splitlines() if ln.startswith("  ")]
        return (int(m.group(1)) if m else 0), lines


# ---- through the daemonising command, as a user mounts ------------------------------------


def cli_mount(mnt: Path, data: Path, *, search: bool | None = None, timeout: float = 30.0) -> None:
    """`contextfs mount MNT --data-dir DATA`, which returns once the mount answers.

    `search` writes a config.yaml that turns search on or off, unless the data dir has one.
    Raises RuntimeError when the mount fails."""
    if search is not None:
        data.mkdir(parents=True, exist_ok=True)
        cfg = data / "config.yaml"
        if not cfg.exists():
            cfg.write_text(f"search: {'true' if search else 'false'}\n")
    res = subprocess.run(
        contextfs_cmd("mount", str(mnt), "--data-dir", str(data), "--timeout", f"{timeout:g}"),
        capture_output=True,
        text=True,
        timeout=timeout + 90,
    )
    if res.returncode != 0 or not os.path.ismount(mnt):
        raise RuntimeError(
            f"contextfs mount failed ({res.returncode}): {res.stderr.strip() or res.stdout.strip()}"
        )


def cli_umount(mnt: Path) -> str | None:
    """Unmount and wait for the daemon; fall back to a lazy unmount. Returns an error."""
    if not os.path.ismount(mnt):
        return None
    try:
        res = subprocess.run(
            contextfs_cmd("umount", str(mnt), "--timeout", "120"),
            capture_output=True,
            text=True,
            timeout=180,
        )
        if res.returncode == 0:
            return None
        err = f"contextfs umount exited {res.returncode}: {res.stderr.strip()}"
    except subprocess.TimeoutExpired:
        err = "contextfs umount timed out"
    subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True, timeout=60)
    return err


def daemon_pid(mnt: Path) -> int | None:
    """The daemon's pid from its mount record, falling back to pgrep."""
    try:
        from contextfs.config import mount_record

        rec = json.loads(mount_record(mnt).read_text())
        pid = int(rec["pid"])
        os.kill(pid, 0)
        return pid
    except (ImportError, OSError, ValueError, KeyError):
        pass
    res = subprocess.run(["pgrep", "-f", f"contextfs mount {mnt} "], capture_output=True, text=True)
    pids = [int(p) for p in res.stdout.split()]
    return pids[0] if pids else None


def wait_for(what: Callable[[], object], timeout: float, step: float = 0.05) -> object:
    """Poll `what()` until it returns something true or `timeout` seconds pass; its last
    value either way (the caller asserts on it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = what()
        if got:
            return got
        time.sleep(step)
    return what()


def wait_index_ready(mnt: Path, timeout: float) -> tuple[float, str]:
    """Wait until `.status` says the index is ready with an empty queue: (seconds, status)."""
    t0 = time.monotonic()
    while True:
        status = (mnt / ".status").read_text()
        line = next((ln for ln in status.splitlines() if ln.startswith("index_generation")), "")
        if "index: ready" in status and line.endswith("queue 0)"):
            return time.monotonic() - t0, status
        if "index: failed" in status or time.monotonic() - t0 > timeout:
            raise RuntimeError(f"index not ready after {time.monotonic() - t0:.0f}s:\n{status}")
        time.sleep(0.2)


def log_problems(log: Path) -> list[str]:
    """Warning, error and traceback lines of a daemon log file (not the BENIGN_LOG ones:
    a close racing the unmount, which tests that write just before stopping meet)."""
    if not log.exists():
        return [f"{log} missing"]
    return [
        line.rstrip()
        for line in log.read_text(errors="replace").splitlines()
        if (
            " WARNING " in line
            or " ERROR " in line
            or " CRITICAL " in line
            or line.startswith("Traceback")
        )
        and not any(b in line for b in BENIGN_LOG)
    ]


def write_synced(path: Path, text: str) -> None:
    """open (created or truncated), write, fsync, close: acknowledged when this returns."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def close_after_kill(*fds: int) -> None:
    """Close descriptors a killed daemon's mount left open: the close may fail, with
    ENOTCONN, ECONNABORTED or EIO (the mount is gone), and with nothing else."""
    for fd in fds:
        try:
            os.close(fd)
        except OSError as exc:
            assert exc.errno in (errno.ENOTCONN, errno.ECONNABORTED, errno.EIO), exc


def errno_of(fn: Callable[..., object], *args: object) -> int:
    """The errno a call fails with through the mount, 0 when it succeeds."""
    try:
        fn(*args)
    except OSError as exc:
        return exc.errno or 0
    return 0
