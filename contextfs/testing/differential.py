"""Differential POSIX testing of node attachments: ContextFS against a native directory.

The same operation is applied to a node's attachment area in a real mount and to a plain
directory on native disk; every result (value or errno) and then the whole tree (names,
types, modes, sizes, contents, symlink targets, set mtimes) must be identical.

`Differ` does one operation on both sides and compares; it has no hypothesis import, so a
shrunk failure is replayed as plain calls (tests/integration/test_differential_regressions.py).
`DifferentialMachine` drives a `Differ` with hypothesis' stateful testing; its rules have the
names and arguments of the `Differ` methods, so a printed failing run
(`state.rename(src='a', dst='d/a')`) becomes a regression test by replacing `state.` with
`d.`. Both the CI test and `scripts/campaign_differential.py` use `machine_for()`, the
only place that imports hypothesis (a test dependency, not the package's).

Kept out of the comparison, by design or because the two sides legitimately differ; listed
in EXCLUDED (the campaign writes them to its JSON):
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import stat
import subprocess
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NODE_ENTRIES = {".history", "L0.md", "L1.md", "L2.md", "meta.yaml"}

# A small alphabet so that names collide: renames over existing names, EEXIST, ENOTEMPTY,
# ENOTDIR, EISDIR and ENOENT come up often. No editor scratch names (they are memory-only).
NAMES = ("a", "b", "c", "d", "e")
PATHS = NAMES + tuple(f"{p}/{n}" for p in ("d", "e") for n in ("a", "b", "c"))
DIRS = ("", "d", "e")
# Relative targets without `..` stay inside the node wherever the link is moved; the
# absolute one dangles on both sides (creating through it fails with ENOENT on both).
TARGETS = ("a", "b", "d", "d/a", "e/b", "/nonexistent-contextfs/x", "")
MODES = (0o644, 0o600, 0o755, 0o700, 0o444, 0o000, 0o4755, 0o2775, 0o1777)
SIZES = (0, 1, 3, 7, 20, 4096, 5000)
OFFSETS = (0, 1, 2, 5, 11, 4095, 4097)
# Times set by utime lie before SET_LIMIT; mtimes a write or create sets are "now" (after
# it), so a set mtime is recognisable on both sides and compared to the microsecond.
TIMES = (
    0,
    1,
    999_999_999,
    1_000_000_000_123_456_789,
    1_500_000_000_000_000_001,
    1_234_567_890_987_654_321,
    -1_000_000_000,
)
SET_LIMIT = 1_600_000_000 * 10**9
SLOTS = 3
# Files written while the disk is full: small ones may still fit in the store's log.
BIG_SIZES = (65536, 262144)

_ACC = (os.O_RDONLY, os.O_WRONLY, os.O_RDWR)
OPEN_FLAGS = tuple(
    acc | extra
    for acc in _ACC
    for extra in (
        0,
        os.O_CREAT,
        os.O_CREAT | os.O_EXCL,
        os.O_TRUNC,
        os.O_CREAT | os.O_TRUNC,
        os.O_APPEND,
        os.O_CREAT | os.O_APPEND,
        os.O_DIRECTORY,
    )
)

EXCLUDED = [
    {
        "op": "link across nodes",
        "reason": "refused by design (EXDEV); every example is one node "
        "(tests/integration/test_hard_links.py covers it)",
    },
    {
        "op": "mknod/mkfifo",
        "reason": "device nodes are refused by design (EPERM); FIFOs and sockets inside a "
        "node are kept (tests/integration/test_attachments.py), not generated",
    },
    {"op": "chown", "reason": "accepted and never stored by design (docs/operations.md)"},
    {
        "op": "atime",
        "reason": "reads update atime per the mount's atime policy (relatime on "
        "disk, FUSE attr caching); atime is not compared",
    },
    {
        "op": "mtime/ctime after data changes",
        "reason": "the two sides write at different "
        "instants; only mtimes set by utime (before 2020-09) are compared",
    },
    {
        "op": "utime",
        "reason": "mtime compared to the microsecond, not the nanosecond: "
        "ContextFS stores attachment mtimes as float seconds",
    },
    {
        "op": "stat of directories",
        "reason": "st_size of a directory is filesystem-specific "
        "(ext4 4096 vs ContextFS 4096 fixed); not compared",
    },
    {
        "op": "permission denial",
        "reason": "the tests run as root, which permission bits do not block; not generated",
    },
    {
        "op": "symlink targets with '..'",
        "reason": "would resolve outside the node / the "
        "native directory, which differ by construction; not generated",
    },
    {"op": "st_ino, st_dev, st_blocks, st_uid/gid", "reason": "filesystem-specific"},
]
# Differences found by this test that are ContextFS bugs (see the regression tests). The
# comparison keeps checking them; `Differ.tolerate` can leave one out for a campaign.
KNOWN_BUGS = {
    "dir-nlink": "st_nlink of an attachment directory not listed since the mount counts no "
    "subdirectories (2 instead of 2 + subdirs)",
    "dir-mtime": "an attachment directory's mtime: a rename into it does not mark it, and the "
    "mark a new or removed entry gives is not stored (after a remount it is back "
    "to the stored one, e.g. the one utime set)",
    "o-trunc-mtime": "open(O_TRUNC) of a file that is already empty does not mark its mtime "
    "(not tolerable: listed for the record)",
}

__doc__ += "".join(f"\n- {e['op']}: {e['reason']}" for e in EXCLUDED) + "\n"


class Mismatch(AssertionError):
    pass


@dataclass
class Stats:
    examples: int = 0
    steps: int = 0
    remounts: int = 0
    outcomes: Counter = field(default_factory=Counter)  # (op, "ok" or errno name)


STATS = Stats()


def _outcome(fn: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return ("ok", fn())
    except OSError as exc:
        code = exc.errno
        return ("err", None if code is None else errno.errorcode.get(code, code))


def _mtime(st: os.stat_result) -> Any:
    """A set mtime to the microsecond; a 'now' mtime only as such."""
    ns = st.st_mtime_ns
    return round(ns / 1000) if ns < SET_LIMIT else "now"


def _describe(st: os.stat_result, *, nlink: bool = True, dir_mtime: bool = True) -> tuple:
    kind = stat.S_IFMT(st.st_mode)
    mtime = _mtime(st) if dir_mtime or kind != stat.S_IFDIR else None
    d: tuple = (stat.filemode(st.st_mode), oct(stat.S_IMODE(st.st_mode)), mtime)
    if kind == stat.S_IFDIR:
        return (*d, ("nlink", st.st_nlink) if nlink else None)
    return (*d, ("size", st.st_size), ("nlink", st.st_nlink))


@dataclass
class Differ:
    """Both sides of one example: `mnt` (a node dir in the mount) and `nat` (native)."""

    mnt: Path
    nat: Path
    remount_fn: Callable[[], None] | None = None
    # Known ContextFS bugs (KNOWN_BUGS keys) left out of the comparison. Empty in the CI test
    # and the regression tests; the campaign may tolerate one to look for other bugs.
    tolerate: frozenset[str] = frozenset()
    fds: dict[int, tuple[int, int, str]] = field(default_factory=dict)  # slot: (mnt, nat, path)
    log: list[str] = field(default_factory=list)
    # entries removed or renamed since the start or the last restore: a restore brings
    # back what was removed shortly before the `rm -r` (docs/operations.md), which a
    # native directory has no model of, so the machine restores only when this is 0
    removals: int = 0
    # fills the disk under the mount's data dir and returns what frees it again (None: the
    # data dir is not on a disk of its own, and the machine takes no disk-full step)
    fill_fn: Callable[[], Callable[[], None]] | None = None

    # ---- plumbing ---------------------------------------------------------------------------

    def _both(self, what: str, fn: Callable[[Path], Any]) -> tuple[tuple, tuple]:
        m = _outcome(lambda: fn(self.mnt))
        n = _outcome(lambda: fn(self.nat))
        return m, n

    def _compare(self, what: str, m: tuple, n: tuple) -> tuple:
        self.log.append(f"{what} -> native {n}")
        STATS.outcomes[(what.split("(")[0], n[0] if n[0] == "ok" else n[1])] += 1
        if m != n:
            raise Mismatch(
                f"{what}: native {n!r}, contextfs {m!r}\nsteps:\n  " + "\n  ".join(self.log)
            )
        return n

    def _op(self, what: str, fn: Callable[[Path], Any]) -> tuple:
        m, n = self._both(what, fn)
        res = self._compare(what, m, n)
        self.check()
        return res

    def _fd_op(self, what: str, slot: int, fn: Callable[[int], Any]) -> tuple | None:
        if slot not in self.fds:
            return None
        fm, fn_, _ = self.fds[slot]
        m = _outcome(lambda: fn(fm))
        n = _outcome(lambda: fn(fn_))
        res = self._compare(what, m, n)
        self.check()
        return res

    # ---- whole-tree comparison ------------------------------------------------------------

    def _describe(self, st: os.stat_result) -> tuple:
        return _describe(
            st, nlink="dir-nlink" not in self.tolerate, dir_mtime="dir-mtime" not in self.tolerate
        )

    def snapshot(self, root: Path) -> dict[str, Any]:
        """Every entry's description; a file with hard links also names all the paths of
        its inode (st_ino itself differs between the sides)."""
        out: dict[str, Any] = {}
        inodes: dict[int, list[str]] = {}

        def walk(rel: str) -> None:
            d = root / rel if rel else root
            names = sorted(os.listdir(d))
            if not rel:
                names = [x for x in names if x not in NODE_ENTRIES]
            out[(rel or ".") + "/"] = names
            for name in names:
                p = f"{rel}/{name}" if rel else name
                st = os.lstat(root / p)
                desc: tuple = self._describe(st)
                if stat.S_ISLNK(st.st_mode):
                    desc += (("target", os.readlink(root / p)),)
                elif stat.S_ISREG(st.st_mode):
                    with open(root / p, "rb") as f:
                        desc += (("data", f.read()),)
                    inodes.setdefault(st.st_ino, []).append(p)
                out[p] = desc
                if stat.S_ISDIR(st.st_mode):
                    walk(p)

        walk("")
        for paths in inodes.values():
            if len(paths) > 1:
                for p in paths:
                    out[p] += (("same file as", tuple(sorted(paths))),)
        return out

    def check(self) -> None:
        m, n = self.snapshot(self.mnt), self.snapshot(self.nat)
        if m != n:
            diffs = [
                f"  {k}: native {n.get(k)!r}, contextfs {m.get(k)!r}"
                for k in sorted(set(m) | set(n))
                if m.get(k) != n.get(k)
            ]
            raise Mismatch(
                "trees differ:\n" + "\n".join(diffs) + "\nsteps:\n  " + "\n  ".join(self.log)
            )

    # ---- descriptors ------------------------------------------------------------------------

    def open(self, slot: int, path: str, flags: int, mode: int = 0o644) -> tuple:
        """os.open into `slot` (a slot in use is closed first, on both sides)."""
        if slot in self.fds:
            self.close(slot)
        what = f"open(slot={slot}, path={path!r}, flags={flags:#o}, mode={mode:#o})"
        m = _outcome(lambda: os.open(self.mnt / path, flags, mode))
        n = _outcome(lambda: os.open(self.nat / path, flags, mode))
        if m[0] == n[0] == "ok":
            self.fds[slot] = (m[1], n[1], path)
        else:
            for side in (m, n):
                if side[0] == "ok":
                    os.close(side[1])
        self._compare(
            what, (m[0], None if m[0] == "ok" else m[1]), (n[0], None if n[0] == "ok" else n[1])
        )
        self.check()
        return n

    def close(self, slot: int) -> tuple | None:
        if slot not in self.fds:
            return None
        fm, fn_, _ = self.fds.pop(slot)
        m, n = _outcome(lambda: os.close(fm)), _outcome(lambda: os.close(fn_))
        res = self._compare(f"close(slot={slot})", m, n)
        self.check()
        return res

    def reopen(self, slot: int, flags: int) -> tuple | None:
        """Close a descriptor and open its path again."""
        if slot not in self.fds:
            return None
        path = self.fds[slot][2]
        self.close(slot)
        return self.open(slot, path, flags)

    def write(self, slot: int, offset: int, data: bytes) -> tuple | None:
        return self._fd_op(
            f"write(slot={slot}, offset={offset}, data={data!r})",
            slot,
            lambda fd: os.pwrite(fd, data, offset),
        )

    def append(self, slot: int, data: bytes) -> tuple | None:
        """write() at the descriptor's own position (the end for O_APPEND)."""
        return self._fd_op(
            f"append(slot={slot}, data={data!r})", slot, lambda fd: os.write(fd, data)
        )

    def read(self, slot: int, offset: int, size: int) -> tuple | None:
        return self._fd_op(
            f"read(slot={slot}, offset={offset}, size={size})",
            slot,
            lambda fd: os.pread(fd, size, offset),
        )

    def ftruncate(self, slot: int, size: int) -> tuple | None:
        return self._fd_op(
            f"ftruncate(slot={slot}, size={size})", slot, lambda fd: os.ftruncate(fd, size)
        )

    def fsync(self, slot: int) -> tuple | None:
        return self._fd_op(f"fsync(slot={slot})", slot, os.fsync)

    def fstat(self, slot: int) -> tuple | None:
        return self._fd_op(
            f"fstat(slot={slot})", slot, lambda fd: _describe(os.fstat(fd), nlink=False)
        )

    def write_file(self, path: str, data: bytes, mode: int = 0o644) -> tuple:
        """A whole file in one go: open(O_CREAT|O_TRUNC), write, close (`echo > file`)."""

        def put(r: Path) -> int:
            fd = os.open(r / path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
            try:
                return os.write(fd, data)
            finally:
                os.close(fd)

        shown = repr(data) if len(data) <= 64 else f"<{len(data)} bytes>"
        return self._op(f"write_file(path={path!r}, data={shown}, mode={mode:#o})", put)

    def populate(self, dirs: tuple[str, ...], files: tuple[str, ...]) -> None:
        """A starting tree, so that names collide from the first step."""
        for d in dirs:
            self.mkdir(d)
        for f in files:
            self.write_file(f, f"{f}\n".encode() * 2)

    def abandon(self) -> None:
        """Close what is still open without comparing (a failure may be in flight)."""
        for fm, fn_, _ in self.fds.values():
            for fd in (fm, fn_):
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.fds.clear()

    def close_all(self) -> None:
        for slot in sorted(self.fds):
            self.close(slot)

    # ---- paths ----------------------------------------------------------------------------

    def truncate(self, path: str, size: int) -> tuple:
        return self._op(
            f"truncate(path={path!r}, size={size})", lambda r: os.truncate(r / path, size)
        )

    def _removed(self, res: tuple) -> tuple:
        if res[0] == "ok":
            self.removals += 1
        return res

    def rename(self, src: str, dst: str) -> tuple:
        return self._removed(
            self._op(f"rename(src={src!r}, dst={dst!r})", lambda r: os.rename(r / src, r / dst))
        )

    def unlink(self, path: str) -> tuple:
        return self._removed(self._op(f"unlink(path={path!r})", lambda r: os.unlink(r / path)))

    def mkdir(self, path: str, mode: int = 0o755) -> tuple:
        return self._op(f"mkdir(path={path!r}, mode={mode:#o})", lambda r: os.mkdir(r / path, mode))

    def rmdir(self, path: str) -> tuple:
        return self._removed(self._op(f"rmdir(path={path!r})", lambda r: os.rmdir(r / path)))

    def symlink(self, link_target: str, path: str) -> tuple:
        return self._op(
            f"symlink(link_target={link_target!r}, path={path!r})",
            lambda r: os.symlink(link_target, r / path),
        )

    def readlink(self, path: str) -> tuple:
        return self._op(f"readlink(path={path!r})", lambda r: os.readlink(r / path))

    def link(self, src: str, dst: str, follow: bool = False) -> tuple:
        """A hard link: of a symlink itself (`ln`, link(2)), or with follow of what it
        points to (`ln -L`, linkat(AT_SYMLINK_FOLLOW))."""

        def ln(r: Path) -> None:
            fd = os.open(r, os.O_RDONLY | os.O_DIRECTORY)
            try:  # dir fds make os.link call linkat, whose flag follow sets
                os.link(src, dst, src_dir_fd=fd, dst_dir_fd=fd, follow_symlinks=follow)
            finally:
                os.close(fd)

        return self._op(f"link(src={src!r}, dst={dst!r}, follow={follow})", ln)

    def link_nth(self, n: int, m: int, follow: bool = False) -> tuple | None:
        """link() of the n-th existing non-folder to the m-th free name whose folder
        exists (both as the native side has them now), so that most links are made:
        random names mostly hit EEXIST or ENOENT."""
        entries = [
            p for p in PATHS if os.path.lexists(self.nat / p) and not (self.nat / p).is_dir()
        ]
        free = [
            p for p in PATHS if not os.path.lexists(self.nat / p) and (self.nat / p).parent.is_dir()
        ]
        if not entries or not free:
            return None
        return self.link(entries[n % len(entries)], free[m % len(free)], follow)

    def chmod(self, path: str, mode: int) -> tuple:
        return self._op(f"chmod(path={path!r}, mode={mode:#o})", lambda r: os.chmod(r / path, mode))

    def utime(self, path: str, atime_ns: int, mtime_ns: int, follow: bool = True) -> tuple:
        return self._op(
            f"utime(path={path!r}, atime_ns={atime_ns}, mtime_ns={mtime_ns}, follow={follow})",
            lambda r: os.utime(r / path, ns=(atime_ns, mtime_ns), follow_symlinks=follow),
        )

    def readdir(self, path: str) -> tuple:
        def ls(r: Path) -> list[str]:
            names = sorted(os.listdir(r / path))
            return [x for x in names if x not in NODE_ENTRIES] if path == "" else names

        return self._op(f"readdir(path={path!r})", ls)

    def stat(self, path: str, follow: bool = True) -> tuple:
        return self._op(
            f"stat(path={path!r}, follow={follow})",
            lambda r: self._describe(os.stat(r / path, follow_symlinks=follow)),
        )

    def restore(self) -> None:
        """`rm -r` of the node, then `mv` of it back out of `<owner>/.trash`: the tree must
        come back as it was. The native side is copied away and back (`cp -a` keeps modes,
        set mtimes, symlinks and hard links) after the mark `rm -r` gives every folder it
        empties (its mtime is now: ContextFS keeps that mark through the restore, as
        docs/operations.md says). Open descriptors are closed first."""
        self.close_all()
        self.log.append("restore()")
        trash = self.mnt.parent.parent / ".trash" / self.mnt.parent.name / self.mnt.name
        for argv in (["rm", "-r", str(self.mnt)], ["mv", str(trash), str(self.mnt)]):
            done = subprocess.run(argv, capture_output=True, text=True)
            if done.returncode != 0:
                raise Mismatch(
                    f"restore: {' '.join(argv[:2])} exited {done.returncode}: "
                    f"{done.stderr.strip()}\nsteps:\n  " + "\n  ".join(self.log)
                )
        for folder, dirs, files in os.walk(self.nat):
            if Path(folder) != self.nat and (dirs or files):
                os.utime(folder, follow_symlinks=False)
        away = self.nat.with_name(self.nat.name + ".away")
        subprocess.run(["cp", "-a", str(self.nat), str(away)], check=True)
        subprocess.run(["rm", "-r", str(self.nat)], check=True)
        away.rename(self.nat)
        self.removals = 0
        STATS.outcomes[("restore", "ok")] += 1
        self.check()

    # What a full disk may refuse: the path operations that store something.
    FULL_DISK_OPS = ("write_file", "chmod", "rename", "unlink", "mkdir", "rmdir", "symlink")

    def disk_full(self, ops: list[tuple[str, tuple]], exhaust: bool = False) -> None:
        """The disk under the data dir fills; `ops` (a method of FULL_DISK_OPS and its
        arguments) run. An operation the mount takes runs on the native side too and must
        give the same result; one it refuses must fail with ENOSPC and change nothing (a
        refused `write_file` may leave the file it created or cut at open, empty, as on a
        native disk).
        Reads go on meanwhile. Then the disk is freed and the mount remounted: it must show
        what it showed before (nothing shown that was not stored, nothing stored that was
        not shown). The native side then takes the mount's state (`rsync -aH`), so the
        comparison goes on from there. With `exhaust`, small changes to another node use up
        the room the store's log still has first, so that `ops` are refused."""
        assert self.fill_fn is not None
        self.close_all()
        self.log.append(f"disk_full({ops!r}, exhaust={exhaust})")
        ballast = self.mnt.with_name(self.mnt.name + "-ballast")
        if exhaust and not ballast.exists():
            ballast.mkdir()
            (ballast / "L2.md").write_text("Room the store's log had, used up.\n")
        free = self.fill_fn()
        try:
            for i in range(2000 if exhaust else 0):
                try:
                    os.chmod(ballast, (0o755, 0o700)[i % 2])
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
            for name, args in ops:
                self._full_disk_op(name, args)
            shown = self.snapshot(self.mnt)
        finally:
            free()
        if self.remount_fn is not None:
            self.remount_fn()
        after = self.snapshot(self.mnt)
        if after != shown:
            diffs = [
                f"  {k}: shown {shown.get(k)!r}, after a remount {after.get(k)!r}"
                for k in sorted(set(shown) | set(after))
                if shown.get(k) != after.get(k)
            ]
            raise Mismatch(
                "a full disk: the mount showed what it did not store:\n"
                + "\n".join(diffs)
                + "\nsteps:\n  "
                + "\n  ".join(self.log)
            )
        self._adopt_mount()
        self.check()

    def _adopt_mount(self) -> None:
        """The native side takes the mount's tree, as a refusal left it."""
        excludes = [f"--exclude=/{e}" for e in sorted(NODE_ENTRIES)]
        subprocess.run(
            ["rsync", "-aH", "--delete", *excludes, f"{self.mnt}/", f"{self.nat}/"], check=True
        )

    def _full_disk_op(self, name: str, args: tuple) -> None:
        if name == "write_file" and isinstance(args[1], int):  # a big file, by its size
            args = (args[0], bytes(range(256)) * (args[1] // 256), *args[2:])
        before = self.snapshot(self.mnt)
        refused: list[tuple] = []
        compare = self._compare

        def on_mount_first(what: str, m: tuple, n: tuple) -> tuple:
            return compare("disk full: " + what, m, n)

        # run the mount's side first: when it refuses with ENOSPC, the native side is
        # left alone (it has room)
        both = self._both

        def mount_then_native(what: str, fn: Callable[[Path], Any]) -> tuple[tuple, tuple]:
            m = _outcome(lambda: fn(self.mnt))
            if m == ("err", "ENOSPC"):
                refused.append(m)
                return m, m
            return m, _outcome(lambda: fn(self.nat))

        self._both, self._compare = mount_then_native, on_mount_first  # type: ignore[method-assign]
        try:
            getattr(self, name)(*args)
        except Mismatch:
            if not refused:
                raise  # the tree check after a refusal is judged below
        finally:
            self._both, self._compare = both, compare  # type: ignore[method-assign]
        if not refused:
            return
        now = self.snapshot(self.mnt)
        path = args[0] if name != "symlink" else args[1]
        allowed = set()
        if name == "write_file":  # created or cut at open, then the write refused
            folder = path.rsplit("/", 1)[0] if "/" in path else "."
            allowed = {path, folder, folder + "/"}
            desc = now.get(path)
            if desc is not None and (not desc[0].startswith("-") or desc[3] != ("size", 0)):
                allowed.discard(path)
            elif desc is not None:  # its other names (hard links) are the same file, cut too
                for part in desc:
                    if isinstance(part, tuple) and part and part[0] == "same file as":
                        allowed |= set(part[1])
        diffs = [
            f"  {k}: before {before.get(k)!r}, after {now.get(k)!r}"
            for k in sorted(set(before) | set(now))
            if before.get(k) != now.get(k) and k not in allowed
        ]
        if diffs:
            shown = tuple(f"<{len(a)} bytes>" if isinstance(a, bytes) and len(a) > 64 else a
                          for a in args)  # fmt: skip
            raise Mismatch(
                f"a full disk: {name}{shown!r} was refused with ENOSPC and changed the tree:\n"
                + "\n".join(diffs)
                + "\nsteps:\n  "
                + "\n  ".join(self.log)
            )
        if now != before:  # what the refusal may leave (an empty file): the next op's start
            self._adopt_mount()

    def remount(self) -> None:
        """Unmount and mount again; open descriptors are closed first on both sides."""
        self.close_all()
        self.log.append("remount()")
        if self.remount_fn is not None:
            self.remount_fn()
        self.check()


# ---- the hypothesis state machine ------------------------------------------------------------

_node_numbers = itertools.count(1)


def new_differ(
    mount: Any,
    native_root: Path,
    tolerate: frozenset[str] = frozenset(),
    fill: Callable[[], Callable[[], None]] | None = None,
) -> Differ:
    """A fresh node in the mount and a fresh native directory for one example."""
    name = f"diff-{os.getpid()}-{next(_node_numbers)}"
    mnt = mount.path / "user/default/preferences" / name
    mnt.mkdir()
    (mnt / "L2.md").write_text(f"Differential test node {name}.\n")
    nat = native_root / name
    nat.mkdir(parents=True)
    return Differ(mnt, nat, remount_fn=mount.remount, tolerate=tolerate, fill_fn=fill)


def machine_for(
    mount: Any,
    native_root: Path,
    *,
    max_remounts: int = 2,
    tolerate: frozenset[str] = frozenset(),
    fill: Callable[[], Callable[[], None]] | None = None,
) -> type:
    """A RuleBasedStateMachine class bound to one mount and a native directory; with
    `fill` (fills the disk of the mount's data dir, returns what frees it), at most one
    disk-full step per example (`Differ.disk_full`)."""
    from hypothesis import strategies as st
    from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

    paths, dirs = st.sampled_from(PATHS), st.sampled_from(DIRS)
    slots = st.integers(0, SLOTS - 1)
    data = st.binary(min_size=0, max_size=12)
    sizes, offsets = st.sampled_from(SIZES), st.sampled_from(OFFSETS)
    modes, times = st.sampled_from(MODES), st.sampled_from(TIMES)
    flags = st.sampled_from(OPEN_FLAGS)

    class DifferentialMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.d = new_differ(mount, native_root, tolerate, fill)
            self.remounts = 0
            self.full = False
            STATS.examples += 1

        def _step(self) -> None:
            STATS.steps += 1

        def teardown(self) -> None:
            self.d.abandon()

        @initialize(
            dirs=st.lists(st.sampled_from(DIRS[1:]), unique=True).map(tuple),
            files=st.lists(paths, unique=True, max_size=6).map(tuple),
        )
        def populate(self, dirs, files):
            self._step()
            self.d.populate(dirs, files)

        @rule(path=paths, data=data, mode=modes)
        def write_file(self, path, data, mode):
            self._step()
            self.d.write_file(path, data, mode)

        @rule(slot=slots, path=paths, flags=flags, mode=modes)
        def open(self, slot, path, flags, mode):
            self._step()
            self.d.open(slot, path, flags, mode)

        @rule(slot=slots, path=paths, mode=modes)
        def create(self, slot, path, mode):
            """creat(): the most common way a file is made."""
            self._step()
            self.d.open(slot, path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)

        @rule(slot=slots)
        def close(self, slot):
            self._step()
            self.d.close(slot)

        @rule(slot=slots, flags=flags)
        def reopen(self, slot, flags):
            self._step()
            self.d.reopen(slot, flags)

        @rule(slot=slots, offset=offsets, data=data)
        def write(self, slot, offset, data):
            self._step()
            self.d.write(slot, offset, data)

        @rule(slot=slots, data=data)
        def append(self, slot, data):
            self._step()
            self.d.append(slot, data)

        @rule(slot=slots, offset=offsets, size=st.sampled_from((1, 5, 100, 8192)))
        def read(self, slot, offset, size):
            self._step()
            self.d.read(slot, offset, size)

        @rule(slot=slots, size=sizes)
        def ftruncate(self, slot, size):
            self._step()
            self.d.ftruncate(slot, size)

        @rule(slot=slots)
        def fsync(self, slot):
            self._step()
            self.d.fsync(slot)

        @rule(slot=slots)
        def fstat(self, slot):
            self._step()
            self.d.fstat(slot)

        @rule(path=paths, size=sizes)
        def truncate(self, path, size):
            self._step()
            self.d.truncate(path, size)

        @rule(src=paths, dst=paths)
        def rename(self, src, dst):
            self._step()
            self.d.rename(src, dst)

        @rule(path=paths)
        def unlink(self, path):
            self._step()
            self.d.unlink(path)

        @rule(path=paths, mode=st.sampled_from((0o755, 0o700, 0o2775)))
        def mkdir(self, path, mode):
            self._step()
            self.d.mkdir(path, mode)

        @rule(path=paths)
        def rmdir(self, path):
            self._step()
            self.d.rmdir(path)

        @rule(link_target=st.sampled_from(TARGETS), path=paths)
        def symlink(self, link_target, path):
            self._step()
            self.d.symlink(link_target, path)

        @rule(path=paths)
        def readlink(self, path):
            self._step()
            self.d.readlink(path)

        @rule(src=paths, dst=paths, follow=st.booleans())
        def link(self, src, dst, follow):
            self._step()
            self.d.link(src, dst, follow)

        @rule(n=st.integers(0, 7), m=st.integers(0, 7), follow=st.booleans())
        def link_nth(self, n, m, follow):
            self._step()
            self.d.link_nth(n, m, follow)

        @rule(path=paths, mode=modes)
        def chmod(self, path, mode):
            self._step()
            self.d.chmod(path, mode)

        @rule(path=paths, atime_ns=times, mtime_ns=times, follow=st.booleans())
        def utime(self, path, atime_ns, mtime_ns, follow):
            self._step()
            self.d.utime(path, atime_ns, mtime_ns, follow)

        @rule(path=dirs)
        def readdir(self, path):
            self._step()
            self.d.readdir(path)

        @rule(path=paths, follow=st.booleans())
        def stat(self, path, follow):
            self._step()
            self.d.stat(path, follow)

        @precondition(lambda self: self.d.removals == 0)
        @rule()
        def restore(self):
            self._step()
            self.d.restore()

        # under a full disk: small writes may still fit in the store's log, big ones not
        full_data = st.one_of(data, st.sampled_from(BIG_SIZES))
        full_ops = st.lists(
            st.one_of(
                st.tuples(st.just("write_file"), st.tuples(paths, full_data, modes)),
                st.tuples(st.just("chmod"), st.tuples(paths, modes)),
                st.tuples(st.just("rename"), st.tuples(paths, paths)),
                st.tuples(st.just("unlink"), st.tuples(paths)),
                st.tuples(st.just("mkdir"), st.tuples(paths)),
                st.tuples(st.just("rmdir"), st.tuples(paths)),
                st.tuples(st.just("symlink"), st.tuples(st.sampled_from(TARGETS), paths)),
            ),
            min_size=1,
            max_size=4,
        )

        @precondition(lambda self: fill is not None and not self.full)
        @rule(ops=full_ops, exhaust=st.booleans())
        def disk_full(self, ops, exhaust):
            self._step()
            self.full = True
            STATS.remounts += 1
            self.d.disk_full(ops, exhaust)

        @precondition(lambda self: self.remounts < max_remounts)
        @rule()
        def remount(self):
            self._step()
            self.remounts += 1
            STATS.remounts += 1
            self.d.remount()

    return DifferentialMachine
