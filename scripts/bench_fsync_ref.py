"""create+fsync latency with search on (the mount's default), this checkout against another
commit.

Per round, a mount of each side on a fresh DuckDB data dir (the other side's daemon runs
that commit's `contextfs/`, from a `git worktree`), the sides alternating first; each
waits until its index is ready (the model loaded), makes `--warm` nodes, then `--nodes`
nodes one after another with mkdir + open + write + fsync + close, each timed whole.
Prints each round's p50 and p99 per side, the medians over the rounds and the ratio of
the p50s, and writes JSON. Side by side in one run, because the absolute figures move
with what else the two cores do.

    .venv/bin/python scripts/bench_fsync_ref.py --ref HEAD~1              # 6 rounds x 300
    .venv/bin/python scripts/bench_fsync_ref.py --ref HEAD --quick        # 1 round x 30
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from contextfs.testing import Mount, write_synced
from contextfs.testing.ref import alternating, ref_worktree
from contextfs.testing.report import percentile, say

REPO = Path(__file__).resolve().parents[1]
PREFS = Path("user/default/preferences")


def ready(m: Mount, timeout: float = 180.0) -> None:
    """Wait until `.status` says the index is ready (the model loaded, vectors caught up)."""
    deadline = time.monotonic() + timeout
    while "index: ready" not in (m.path / ".status").read_text():
        if time.monotonic() > deadline:
            raise SystemExit(f"index not ready after {timeout:.0f} s")
        time.sleep(0.2)


def creates(mnt: Path, count: int, prefix: str) -> list[float]:
    """Seconds each of `count` nodes took: mkdir, then L2.md opened, written, fsynced,
    closed (acknowledged, and findable by BM25, on return)."""
    took = []
    for i in range(count):
        t0 = time.perf_counter()
        d = mnt / PREFS / f"{prefix}-{i}"
        d.mkdir()
        write_synced(d / "L2.md", f"Note {i}: the kettle is set to {60 + i % 40} degrees.\n")
        took.append(time.perf_counter() - t0)
    return took


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref", required=True, help="the commit to compare with")
    ap.add_argument("--nodes", type=int, default=300, help="nodes timed per mount")
    ap.add_argument("--warm", type=int, default=50, help="nodes made first, not timed")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--quick", action="store_true", help="1 round of 30 nodes (5 warm)")
    ap.add_argument("--json", type=Path, default=REPO / "bench-results" / "bench_fsync_ref.json")
    args = ap.parse_args(argv)
    if args.quick:
        args.rounds, args.nodes, args.warm = 1, 30, 5
    root = Path(tempfile.mkdtemp(prefix="bench-fsync-ref-"))
    rounds: dict[str, list[dict[str, float]]] = {"this": [], "ref": []}
    try:
        with ref_worktree(REPO, args.ref, root / "ref") as other:
            for r, side in alternating(args.rounds, other):
                m = Mount(root / f"mnt-{r}{side}", root / f"data-{r}{side}", search=True)
                m.path.mkdir()
                m.start()
                try:
                    ready(m)
                    creates(m.path, args.warm, "warm")
                    took = creates(m.path, args.nodes, "n")
                finally:
                    m.stop()
                p50, p99 = percentile(took, 50) * 1e3, percentile(took, 99) * 1e3
                rounds[side].append({"p50_ms": p50, "p99_ms": p99})
                say(f"  round {r + 1}: {side} p50 {p50:.2f} ms, p99 {p99:.2f} ms")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    med = {
        k: {m: statistics.median(x[m] for x in v) for m in ("p50_ms", "p99_ms")}
        for k, v in rounds.items()
    }
    ratio = med["this"]["p50_ms"] / med["ref"]["p50_ms"]
    print("\n| side | p50 per round, ms | median p50, ms | median p99, ms |")
    print("|---|---|---:|---:|")
    for k in ("this", "ref"):
        label = "this checkout" if k == "this" else args.ref
        per = ", ".join(f"{x['p50_ms']:.2f}" for x in rounds[k])
        print(f"| {label} | {per} | {med[k]['p50_ms']:.2f} | {med[k]['p99_ms']:.2f} |")
    print(f"\np50 ratio this / {args.ref}: {ratio:.2f}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps({"ref": args.ref, "rounds": rounds, "median": med, "ratio": ratio}, indent=2)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
