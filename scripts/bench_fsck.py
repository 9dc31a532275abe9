"""The check a mount runs, by store size: the full fsck against the check since the last pass.

Issue 14 item 5 ("mount time independent of the store's size"), the mount-time check. For
each store size N (`--quick`: 1,000 and 10,000; full: 1,000, 100,000 and 1,000,000):

1. Builds the store in-process as scripts/bench_scale.py does (N nodes with L0/L1/L2 of
   about 1,000 characters, one version and one outbox row each; `--reuse DIR` takes the
   data dirs `DIR/n<N>` of an earlier build instead).
2. Times each check of the full fsck (`check_store`: what every mount ran before, and what
   `contextfs fsck` runs), and records its pass (`record_passed`) as a mount does.
3. Changes `--changes` random nodes (default 100) through `Store.update_node` (a new L2
   version each, with its outbox row: the code path of a save).
4. Times each check of the mount's check since that point (`mount_check`: the node checks
   restricted to the changed nodes, the rest whole), and the whole of it.

It prints a markdown table (ms per check, full and mount, at each N; the totals' ratio to
the smallest N) and writes JSON under bench-results/. Progress goes to stderr.

    .venv/bin/python scripts/bench_fsck.py --quick
    .venv/bin/python scripts/bench_fsck.py                       # 1k, 100k, 1M (~2 min)
    .venv/bin/python scripts/bench_fsck.py --sizes 1000,100000 --reuse /tmp/stores
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

import xxhash

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scale import build_store  # noqa: E402  (a sibling script, not a package)

from contextfs.store import Store  # noqa: E402
from contextfs.store.db import _NODE_COLS, _node_from_row  # noqa: E402
from contextfs.store.fsck import (  # noqa: E402
    CHECKS,
    SINCE_AT_MOUNT,
    WHOLE_AT_MOUNT,
    full_check,
    mount_check,
    record_passed,
)
from contextfs.testing import machine_info, say, write_json  # noqa: E402

SEED = 20261202


def timed_checks(store: Store, since: int | None) -> dict[str, float]:
    """ms of each check: the full ones (since None) or the mount's since `since`."""
    out: dict[str, float] = {}
    if since is None:
        for check in CHECKS:
            t0 = time.perf_counter()
            assert check(store) == [], check.__name__
            out[check.__name__] = (time.perf_counter() - t0) * 1000
        return out
    for check in WHOLE_AT_MOUNT:
        t0 = time.perf_counter()
        assert check(store) == [], check.__name__
        # blobs_present is the half of blobs_consistent a mount runs (no rehash)
        shown = {"blobs_present": "blobs_consistent"}.get(check.__name__, check.__name__)
        out[shown] = (time.perf_counter() - t0) * 1000
    for since_check in SINCE_AT_MOUNT:
        t0 = time.perf_counter()
        assert since_check(store, since) == [], since_check.__name__
        out[since_check.__name__.removesuffix("_since")] = (time.perf_counter() - t0) * 1000
    return out


def change_nodes(store: Store, count: int, rng: random.Random) -> None:
    """`count` random nodes get a new L2 version, as a save writes it."""
    ids = [r[0] for r in store.con.execute("SELECT id FROM nodes").fetchall()]
    picked = rng.sample(ids, min(count, len(ids)))
    with store.atomic():
        for node_id in picked:
            row = store.con.execute(
                f"SELECT {_NODE_COLS} FROM nodes WHERE id = ?", [node_id]
            ).fetchone()
            n = _node_from_row(row)
            n.l2 = n.l2 + "\nChanged for the benchmark.\n"
            n.content_hash = xxhash.xxh64_hexdigest(n.l2.encode("utf-8"))
            n.version += 1
            n.updated = time.time()
            store.update_node(n, new_version_reason="write")


def measure(data: Path, n: int, changes: int, rng: random.Random) -> dict:
    store = Store(data / "contextfs.duckdb")
    try:
        say(f"N={n:,}: the full check, check by check")
        full = timed_checks(store, None)
        run = full_check(store)
        assert run.passed, run.problems
        record_passed(store, run)
        say(f"N={n:,}: {changes} node(s) changed")
        change_nodes(store, changes, rng)
        say(f"N={n:,}: the mount's check since seq {run.upto}")
        mount = timed_checks(store, run.upto)
        t0 = time.perf_counter()
        m = mount_check(store)
        mount_total = time.perf_counter() - t0
        assert m.passed and m.since == run.upto, m
    finally:
        store.close()
    return {
        "n": n,
        "changes": changes,
        "changed_seen": m.changed,
        "full_ms": full,
        "mount_ms": mount,
        "full_total_s": sum(full.values()) / 1000,
        "mount_total_s": mount_total,
        "mount_describe": m.describe(),
    }


def table(results: list[dict]) -> str:
    names = [c.__name__ for c in CHECKS]
    head = "| check | " + " | ".join(f"full N={r['n']:,} | mount N={r['n']:,}" for r in results)
    lines = [head + " |", "|---" * (1 + 2 * len(results)) + "|"]
    for name in names:
        cells = []
        for r in results:
            cells.append(f"{r['full_ms'][name]:.1f}")
            got = r["mount_ms"].get(name)
            cells.append("—" if got is None else f"{got:.1f}")
        lines.append(f"| {name} (ms) | " + " | ".join(cells) + " |")
    totals = []
    for r in results:
        totals += [f"**{r['full_total_s'] * 1000:.0f}**", f"**{r['mount_total_s'] * 1000:.0f}**"]
    lines.append("| **total (ms)** | " + " | ".join(totals) + " |")
    base = results[0]
    ratios = []
    for r in results:
        ratios.append(f"{r['full_total_s'] / base['full_total_s']:.1f}x")
        ratios.append(f"{r['mount_total_s'] / base['mount_total_s']:.1f}x")
    lines.append(f"| total / N={base['n']:,} | " + " | ".join(ratios) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="N = 1k and 10k")
    ap.add_argument("--sizes", help="comma-separated node counts")
    ap.add_argument("--changes", type=int, default=100, help="nodes changed after the pass")
    ap.add_argument("--reuse", type=Path, help="data dirs DIR/n<N> built before (copied)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.sizes:
        sizes = [int(s) for s in args.sizes.split(",")]
    else:
        sizes = [1000, 10_000] if args.quick else [1000, 100_000, 1_000_000]
    rng = random.Random(SEED)
    base = Path(tempfile.mkdtemp(prefix="cfs-fsck-"))
    results: list[dict] = []
    try:
        for n in sizes:
            data = base / f"n{n}"
            if args.reuse and (args.reuse / f"n{n}").is_dir():
                say(f"N={n:,}: copying {args.reuse / f'n{n}'}")
                shutil.copytree(args.reuse / f"n{n}", data)
                build = {"reused": str(args.reuse / f"n{n}")}
            else:
                build = build_store(data, n)
            r = measure(data, n, args.changes, rng)
            r["build"] = build
            results.append(r)
            shutil.rmtree(data, ignore_errors=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(table(results))
    print()
    for r in results:
        print(f"N={r['n']:,}: mount check {r['mount_describe']}")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = args.json or Path("bench-results") / f"bench_fsck-{stamp}.json"
    write_json(
        path, {"machine": machine_info(), "sizes": sizes, "quick": args.quick, "results": results}
    )
    say(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
