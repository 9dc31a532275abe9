"""Build pyfuse3 3.5.0 with three small changes: ContextFS may skip opendir, a file opened
only for reading may skip flush, and write and flush know the sending process.

Why: a directory listing through FUSE costs four requests (OPENDIR, READDIRPLUS, the empty
READDIRPLUS that ends it, RELEASEDIR), about 85 us each through pyfuse3 here, and a memory
store has a directory per memory, so `ls -lR` over 10k memories ran at 7.9x native disk.
When a filesystem answers OPENDIR with ENOSYS, Linux (>= 5.1) stops sending OPENDIR and
RELEASEDIR and opens every directory with FOPEN_KEEP_CACHE | FOPEN_CACHE_DIR, so a listing
the kernel has seen is served from its page cache until the directory changes or the daemon
invalidates it. The catch: READDIRPLUS then carries file handle 0, and pyfuse3 3.5 hands
`readdir` only the file handle, never the directory's inode. The change below passes the
inode when the handle is 0 (in `readdirplus` and `fsyncdir`); nothing else differs from the
PyPI release.

The second change: `FileInfo.noflush` (libfuse's `fuse_file_info.noflush`, the kernel's
FOPEN_NOFLUSH, Linux >= 5.16). Every close() of a FUSE file waits for a FLUSH request,
which for a descriptor opened read-only has nothing to do; with `noflush` set at open the
kernel does not send it, and a warm `cat` costs one round trip (OPEN) instead of two.

The third: `write` and `flush` are also handed the pid of the process that sent them
(libfuse's `fuse_req_ctx`), which pyfuse3 3.5 gives only the handlers that create or open.
A process that forks closes its copies of every descriptor in the child (at exit, or at
exec for those opened close-on-exec, as Python opens them), and each of those closes is a
FLUSH: the daemon commits at a FLUSH only from a process that opened or wrote through the
file (docs/architecture.md, commit points).

The wheel gets the local version `3.5.0+contextfs.dirino3`, which satisfies the
`pyfuse3==3.5.0` pin and tells the daemon (contextfs.fs.ops.DIR_HANDLE_IS_INODE) that it
may answer OPENDIR with ENOSYS. With an unpatched pyfuse3 the daemon keeps opendir and
flush.

Usage: python scripts/build_pyfuse3.py [--check]   (run by scripts/setup.sh)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tarfile
import tempfile
from importlib import metadata
from pathlib import Path

UPSTREAM = "3.5.0"
LOCAL_VERSION = f"{UPSTREAM}+contextfs.dirino3"

# (handler, the line pyfuse3 has, the line we want); each must occur exactly once.
PATCHES = [
    (
        "cdef void fuse_readdirplus",
        "    c.fh = fi.fh\n",
        "    c.fh = fi.fh if fi.fh else ino  # contextfs: no-opendir mode sends handle 0\n",
    ),
    (
        "cdef void fuse_fsyncdir",
        "    c.fh = fi.fh\n",
        "    c.fh = fi.fh if fi.fh else ino  # contextfs: no-opendir mode sends handle 0\n",
    ),
]

# (file under the sdist, text it has, text we want); each must occur exactly once.
FILE_PATCHES = [
    (
        "Include/fuse_common.pxd",
        "        unsigned int nonseekable\n",
        "        unsigned int nonseekable\n        unsigned int noflush\n",
    ),
    (
        "src/pyfuse3/__init__.pyx",
        "    cdef public bint nonseekable\n\n"
        "    def __cinit__(self, fh=0, direct_io=0, keep_cache=1, nonseekable=0):\n",
        "    cdef public bint nonseekable\n"
        "    cdef public bint noflush  # contextfs: FOPEN_NOFLUSH\n\n"
        "    def __cinit__(self, fh=0, direct_io=0, keep_cache=1, nonseekable=0, noflush=0):\n"
        "        self.noflush = noflush\n",
    ),
    (
        "src/pyfuse3/__init__.pyx",
        "        if self.nonseekable:\n"
        "            out.nonseekable = 1\n"
        "        else:\n"
        "            out.nonseekable = 0\n",
        "        if self.nonseekable:\n"
        "            out.nonseekable = 1\n"
        "        else:\n"
        "            out.nonseekable = 0\n\n"
        "        if self.noflush:\n"
        "            out.noflush = 1\n"
        "        else:\n"
        "            out.noflush = 0\n",
    ),
    (
        "src/pyfuse3/handlers.pxi",
        "        len_ = await operations.write(c.fh, c.off, pbuf)\n",
        "        len_ = await operations.write(c.fh, c.off, pbuf, fuse_req_ctx(c.req).pid)\n",
    ),
    (
        "src/pyfuse3/handlers.pxi",
        "        len_ = await operations.write(c.fh, c.off, buf)\n",
        "        len_ = await operations.write(c.fh, c.off, buf, fuse_req_ctx(c.req).pid)\n",
    ),
    (
        "src/pyfuse3/handlers.pxi",
        "        await operations.flush(c.fh)\n",
        "        await operations.flush(c.fh, fuse_req_ctx(c.req).pid)\n",
    ),
]


def installed_version() -> str | None:
    try:
        return metadata.version("pyfuse3")
    except metadata.PackageNotFoundError:
        return None


def patch_handlers(path: Path) -> None:
    text = path.read_text()
    for anchor, old, new in PATCHES:
        start = text.find(anchor)
        if start < 0 or text.count(anchor) != 1:
            sys.exit(f"build_pyfuse3: {path}: cannot find {anchor!r} exactly once")
        end = text.find("\n\n", start)
        body = text[start:end]
        if body.count(old) != 1:
            sys.exit(f"build_pyfuse3: {path}: {anchor!r} does not set c.fh as expected")
        text = text[:start] + body.replace(old, new) + text[end:]
    path.write_text(text)


def patch_files(src: Path) -> None:
    for rel, old, new in FILE_PATCHES:
        path = src / rel
        text = path.read_text()
        if text.count(old) != 1:
            sys.exit(f"build_pyfuse3: {path}: cannot find the text to patch exactly once")
        path.write_text(text.replace(old, new))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--check",
        action="store_true",
        help="exit 0 when the patched build is installed, 1 otherwise",
    )
    args = ap.parse_args()
    if installed_version() == LOCAL_VERSION:
        return 0
    if args.check:
        return 1
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    with tempfile.TemporaryDirectory(prefix="pyfuse3-build-") as tmp:
        subprocess.run(
            [
                *pip,
                "download",
                "-q",
                "--no-deps",
                # pyfuse3's sdist only: ":all:" would also build its build dependencies
                # (Cython, setuptools) from source to read its metadata, ~4 minutes here
                "--no-binary",
                "pyfuse3",
                f"pyfuse3=={UPSTREAM}",
                "-d",
                tmp,
            ],
            check=True,
        )
        sdist = next(Path(tmp).glob("pyfuse3-*.tar.gz"))
        with tarfile.open(sdist) as tar:
            # the "data" filter refuses links and paths out of tmp; Python 3.11 has it from
            # 3.11.4 (Debian 12's python3 is 3.11.2): there, PyPI's sdist as it is
            if hasattr(tarfile, "data_filter"):
                tar.extractall(tmp, filter="data")
            else:
                tar.extractall(tmp)
        src = Path(tmp) / f"pyfuse3-{UPSTREAM}"
        patch_handlers(src / "src" / "pyfuse3" / "handlers.pxi")
        patch_files(src)
        # the shipped C file predates the change: make the build regenerate it
        (src / "src" / "pyfuse3" / "__init__.c").unlink(missing_ok=True)
        env = dict(os.environ, SETUPTOOLS_SCM_PRETEND_VERSION=LOCAL_VERSION)
        print(f"build_pyfuse3: building pyfuse3 {LOCAL_VERSION} (~30 s)", file=sys.stderr)
        subprocess.run(
            [*pip, "install", "-q", "--no-deps", "--force-reinstall", str(src)], check=True, env=env
        )
    if installed_version() != LOCAL_VERSION:
        sys.exit(
            f"build_pyfuse3: installed pyfuse3 is {installed_version()}, expected {LOCAL_VERSION}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
