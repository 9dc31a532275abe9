"""Write throughput of one mount on PostgreSQL, this checkout against another commit.

One PostgreSQL server (fsync on) in a temp dir; per round, a mount of each side on a fresh
database (the other side's daemon runs that commit's `contextfs/`, from a `git worktree`),
3 writers x `--writes` nodes each created with mkdir + write + fsync + close, the sides
alternating first; creates a second per side, their medians and the ratio. Prints a table
and writes JSON.

    .venv/bin/python scripts/bench_pg_writes.py --ref 2831dab            # 4 rounds x 100
    .venv/bin/python scripts/bench_pg_writes.py --ref HEAD~1 --rounds 2 --writes 30
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from contextfs.testing import Mount, write_synced
from contextfs.testing.postgres import PgServer
from contextfs.testing.ref import alternating, ref_worktree
from contextfs.testing.report import say

REPO = Path(__file__).resolve().parents[1]
PREFS = Path("user/default/preferences")
WRITERS = 3


def create(mnt: Path, name: str) -> None:
    """mkdir a node, then open, write, fsync and close its L2.md: acknowledged on return."""
    d = mnt / PREFS / name
    d.mkdir()
    write_synced(d / "L2.md", f"A note called {name}.\n")


def throughput(mnt: Path, writes: int, prefix: str) -> tuple[float, int]:
    """Creates a second of WRITERS threads making `writes` nodes each; and the errors."""
    errors: list[str] = []

    def writer(t: int) -> None:
        for i in range(writes):
            try:
                create(mnt, f"{prefix}-{t}-{i}")
            except OSError as e:
                errors.append(str(e))

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(WRITERS)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return (WRITERS * writes - len(errors)) / (time.perf_counter() - t0), len(errors)


def mount(root: Path, name: str, dsn: str) -> Mount:
    data, mnt = root / f"data-{name}", root / f"mnt-{name}"
    data.mkdir()
    mnt.mkdir()
    (data / "config.yaml").write_text(f"search: false\nstore: {dsn}\n")
    m = Mount(mnt, data)
    m.start()
    return m


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref", required=True, help="the commit to compare with")
    ap.add_argument("--writes", type=int, default=100, help="nodes per writer (3 writers)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--json", type=Path, default=REPO / "bench-results" / "bench_pg_writes.json")
    args = ap.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="bench-pg-writes-"))
    server = PgServer(fsync=True)
    rates: dict[str, list[float]] = {"this": [], "ref": []}
    errors = 0
    try:
        server.start()
        with ref_worktree(REPO, args.ref, root / "ref") as other:
            for r, side in alternating(args.rounds, other):
                dsn = server.create_database(f"w{r}{side}")
                m = mount(root, f"{r}{side}", dsn)
                try:
                    rate, errs = throughput(m.path, args.writes, f"t{r}")
                finally:
                    m.stop()
                errors += errs
                rates[side].append(rate)
                say(f"  round {r + 1}: {side} {rate:.1f} creates/s")
    finally:
        server.close()
        shutil.rmtree(root, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in rates.items()}
    ratio = med["this"] / med["ref"]
    print("\n| side | creates+fsync a second, per round | median |\n|---|---|---:|")
    for k in ("this", "ref"):
        label = "this checkout" if k == "this" else args.ref
        print(f"| {label} | {', '.join(f'{x:.1f}' for x in rates[k])} | {med[k]:.1f} |")
    print(f"\nratio this / {args.ref}: {ratio:.3f}; write errors: {errors}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"ref": args.ref, "rates": rates, "ratio": ratio}, indent=2))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
