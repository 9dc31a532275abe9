"""Creating many files in one node (issue 11): does the cost per file grow with the count?

`open(node / f"f{i}", "w").close()` N times in one node, timed in ten blocks, either
through a real mount (default: `contextfs mount --foreground` in a subprocess, the data
dir in a temporary directory) or in-process on the `Operations` handlers over a real
store (`--in-process`: the same LOOKUP, CREATE, FLUSH, RELEASE the kernel sends, no
kernel), where `--profile` also prints the cProfile of the last 500 files. A flat
ms/file across the blocks means nothing scans the directory per create.

    .venv/bin/python scripts/create_many.py                  # 2,000 files through a mount
    .venv/bin/python scripts/create_many.py -n 20000
    .venv/bin/python scripts/create_many.py --in-process --profile
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import os
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path

from contextfs.testing import Mount, machine_info, write_json


def through_mount(n: int, base: Path, block: int) -> list[float]:
    (base / "mnt").mkdir()
    m = Mount(base / "mnt", base / "data")
    m.start()
    try:
        node = base / "mnt/user/default/preferences/bulk"
        node.mkdir()
        return _timed(n, block, lambda i: open(node / f"f{i}", "w").close())  # noqa: SIM115
    finally:
        m.stop()


def in_process(n: int, base: Path, block: int, profile: bool) -> list[float]:
    import pyfuse3
    import trio

    from contextfs.ctxtypes import builtin_schema_dir, load_types
    from contextfs.fs.build import build_tree
    from contextfs.fs.ops import Operations
    from contextfs.memory.service import Memory
    from contextfs.store import Store

    store = Store(base / "contextfs.duckdb")
    memory = Memory(store, load_types([builtin_schema_dir()]), data_dir=base)
    memory.create_owner("user", "default")
    ops = Operations(build_tree(memory))
    ctx = pyfuse3.RequestContext()
    prof = cProfile.Profile()
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC

    async def run() -> list[float]:
        ino = pyfuse3.ROOT_INODE
        for part in ("user", "default", "preferences"):
            ino = (await ops.lookup(ino, part.encode(), ctx)).st_ino
        node = (await ops.mkdir(ino, b"bulk", 0o755, ctx)).st_ino
        out: list[float] = []
        t = time.perf_counter()
        for i in range(n):
            if profile and i == n - 500:
                prof.enable()
            name = f"f{i}".encode()
            with contextlib.suppress(pyfuse3.FUSEError):
                await ops.lookup(node, name, ctx)  # the kernel's negative lookup
            fi, _ = await ops.create(node, name, 0o644, flags, ctx)
            await ops.flush(fi.fh)
            await ops.release(fi.fh)
            if (i + 1) % block == 0:
                now = time.perf_counter()
                out.append((now - t) / block * 1000)
                print(f"{i + 1:>8} files: {out[-1]:.2f} ms/file", flush=True)
                t = now
        prof.disable()
        return out

    try:
        blocks = trio.run(run)
    finally:
        store.close()
    if profile:
        pstats.Stats(prof).sort_stats("tottime").print_stats(12)
    return blocks


def _timed(n: int, block: int, create) -> list[float]:
    out: list[float] = []
    t = time.perf_counter()
    for i in range(n):
        create(i)
        if (i + 1) % block == 0:
            now = time.perf_counter()
            out.append((now - t) / block * 1000)
            print(f"{i + 1:>8} files: {out[-1]:.2f} ms/file", flush=True)
            t = now
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=2000)
    ap.add_argument("--in-process", action="store_true")
    ap.add_argument("--profile", action="store_true", help="with --in-process")
    ap.add_argument("--json", type=Path, default=Path("create_many.json"))
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="cfs-create-"))
    block = max(1, args.n // 10)
    t0 = time.perf_counter()
    try:
        if args.in_process:
            blocks = in_process(args.n, base, block, args.profile)
        else:
            blocks = through_mount(args.n, base, block)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    total = time.perf_counter() - t0
    print(
        f"N={args.n} ({'in-process' if args.in_process else 'mount'}): "
        f"{args.n / total:.0f} files/s overall; ms/file first block {blocks[0]:.2f}, "
        f"last block {blocks[-1]:.2f}, median {sorted(blocks)[len(blocks) // 2]:.2f}"
    )
    write_json(
        args.json,
        {
            "machine": machine_info(),
            "n": args.n,
            "mode": "in-process" if args.in_process else "mount",
            "ms_per_file_blocks": blocks,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
