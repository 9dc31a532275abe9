"""Creating many files in one node (issue 11): does the cost per file grow with the count?

`open(node / f"f{i}", "w").close()` N times in one node (with `--size B`, each file
written with B bytes of its own prose first, as `cp -r` of small notes does), timed in
ten blocks, either
through a real mount (default: `contextfs mount --foreground` in a subprocess, the data
dir in a temporary directory) or in-process on the `Operations` handlers over a real
store (`--in-process`: the same LOOKUP, CREATE, FLUSH, RELEASE the kernel sends, no
kernel), where `--profile` also prints the cProfile of the last 500 files. A flat
ms/file across the blocks means nothing scans the directory per create.

    .venv/bin/python scripts/create_many.py                  # 2,000 files through a mount
    .venv/bin/python scripts/create_many.py -n 20000
    .venv/bin/python scripts/create_many.py --in-process --profile
    .venv/bin/python scripts/create_many.py --size 300        # small notes, as cp -r
    .venv/bin/python scripts/create_many.py --size 300 --compare 4a8d140

`--compare REF` runs the same measure with the code of commit REF (extracted with
`git archive`, its daemon too) and with this checkout's, alternating `--reps` times, and
prints each side's median ms/file and their ratio.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from contextfs.testing import Mount, machine_info, write_json


def body(i: int, size: int) -> bytes:
    """File i's bytes: `size` bytes of prose that begin with its number (no two alike)."""
    return (b"%d: a small note, one line of prose.\n" % i * (size // 30 + 1))[:size]


def write_file(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        if data:
            f.write(data)


def through_mount(n: int, base: Path, block: int, size: int = 0) -> list[float]:
    (base / "mnt").mkdir()
    m = Mount(base / "mnt", base / "data")
    m.start()
    try:
        node = base / "mnt/user/default/preferences/bulk"
        node.mkdir()
        return _timed(n, block, lambda i: write_file(node / f"f{i}", body(i, size)))
    finally:
        m.stop()


def in_process(n: int, base: Path, block: int, profile: bool, size: int = 0) -> list[float]:
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
            if size:
                await ops.write(fi.fh, 0, body(i, size))
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


def compare(args: argparse.Namespace, argv: list[str]) -> int:
    """This checkout against commit `args.compare`, run after run; a table and JSON."""
    # here, not at the top: the other side runs this script with its own package
    from contextfs.testing.report import checkout_at

    here = Path(__file__).resolve().parent.parent
    runs: dict[str, list[float]] = {"this checkout": [], "compared": []}
    with tempfile.TemporaryDirectory() as tmp:
        sides = {"this checkout": here, "compared": checkout_at(here, args.compare, Path(tmp))}
        for rep in range(args.reps):
            for label, root in sides.items():
                out = Path(tmp) / f"{rep}-{label[0]}.json"
                env = {**os.environ, "PYTHONPATH": str(root)}
                cmd = [sys.executable, str(Path(__file__).resolve()), *argv, "--json", str(out)]
                subprocess.run(cmd, cwd=root, env=env, check=True, stdout=subprocess.DEVNULL)
                blocks = json.loads(out.read_text())["ms_per_file_blocks"]
                runs[label].append(statistics.median(blocks))
                print(f"run {rep + 1} {label}: {runs[label][-1]:.2f} ms/file", flush=True)
    med = {k: statistics.median(v) for k, v in runs.items()}
    mode = "in-process" if args.in_process else "mount"
    print(f"\n| N = {args.n}, {mode}, {args.size} B a file | ms/file, median of {args.reps} |")
    print("|---|---:|")
    for label in runs:
        print(f"| {label} ({args.compare if label == 'compared' else here}) | {med[label]:.2f} |")
    print(f"| ratio, this / compared | {med['this checkout'] / med['compared']:.2f}x |")
    write_json(
        args.json,
        {"machine": machine_info(), "n": args.n, "mode": mode, "size": args.size, "runs": runs},
    )
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=2000)
    ap.add_argument("--in-process", action="store_true")
    ap.add_argument("--profile", action="store_true", help="with --in-process")
    ap.add_argument("--size", type=int, default=0, help="bytes written into each file")
    ap.add_argument("--json", type=Path, default=Path("create_many.json"))
    ap.add_argument("--compare", metavar="REF", help="another commit, run alternately")
    ap.add_argument("--reps", type=int, default=3, help="with --compare")
    args = ap.parse_args()
    if args.compare:
        argv = ["-n", str(args.n), "--size", str(args.size)]
        return compare(args, argv + (["--in-process"] if args.in_process else []))
    base = Path(tempfile.mkdtemp(prefix="cfs-create-"))
    block = max(1, args.n // 10)
    t0 = time.perf_counter()
    try:
        if args.in_process:
            blocks = in_process(args.n, base, block, args.profile, args.size)
        else:
            blocks = through_mount(args.n, base, block, args.size)
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
            "size": args.size,
            "ms_per_file_blocks": blocks,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
