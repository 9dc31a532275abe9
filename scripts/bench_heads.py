"""The memory's heads on demand (issue 14 item 5): what opening a big store costs, step by step.

For each store size N (`--quick`: 10,000; default: 100,000 and 1,000,000) it builds the
store as `bench_scale.py` does (`contextfs.testing.bench_store`: in-process, straight into
DuckDB), then:

1. In-process, twice (a first mount's full fsck, then a mount's check since the point it
   recorded): the seconds of `open_store`, `Memory(...)`, `build_tree(...)` (the mount's build)
   and the mount's fsck (`mount_check`), and the process RSS after them.
2. The real daemon (`contextfs mount` in a subprocess, search off), once the store has a
   recorded point: start to `ls user/<owner>` answering, and VmRSS a few seconds later
   (the text warm-up of `hot_nodes` nodes). Then 100 lookups of nodes not held (`stat`
   of `user/<owner>/<type>/<node>` in owners no one listed) and their mean.

Prints a markdown table and writes JSON under bench-results/. Targets at 1M: mount <= 2 s;
RSS with the model <= 2 GiB (the model ~0.9 GB: search off must stay well under 1 GB).

    .venv/bin/python scripts/bench_heads.py --quick      # 10k (~1 min)
    .venv/bin/python scripts/bench_heads.py              # 100k, 1M (~5 min)
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import shutil
import tempfile
import time
from pathlib import Path

from contextfs.ctxtypes import builtin_schema_dir, load_types
from contextfs.fs.build import build_tree
from contextfs.memory.service import Memory
from contextfs.store.backend import open_store
from contextfs.store.fsck import mount_check, record_passed
from contextfs.testing import (
    Mount,
    bench_store,
    daemon_pid,
    machine_info,
    proc_status,
    say,
    write_json,
)


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    return 0.0


def in_process(db: Path) -> list[dict]:
    types = load_types([builtin_schema_dir()])
    out = []
    for label in ("first open (full fsck)", "next open (fsck since the point)"):
        row: dict = {"open": label}
        t = time.perf_counter()
        store = open_store(db)
        row["open_store_s"] = time.perf_counter() - t
        t = time.perf_counter()
        memory = Memory(store, types, data_dir=db.parent)
        row["memory_s"] = time.perf_counter() - t
        t = time.perf_counter()
        tree = build_tree(memory, status=lambda: "")
        row["tree_s"] = time.perf_counter() - t
        t = time.perf_counter()
        run = mount_check(store)
        row["fsck_s"] = time.perf_counter() - t
        if run.problems:
            raise SystemExit(f"fsck found problems: {run.problems[:3]}")
        record_passed(store, run)
        row["rss_mib"] = rss_mib()
        row["held_nodes"] = memory.nodes.held()
        out.append(row)
        store.close()
        del tree, memory, store
        gc.collect()
    return out


def daemon(data: Path, n: int, wait: float) -> dict:
    mnt = data.parent / f"mnt-{n}"
    mnt.mkdir(exist_ok=True)
    m = Mount(mnt, data, search=False)
    owner = bench_store.owner_of(n // 2)
    t = time.perf_counter()
    m.start()
    while True:
        try:
            if os.listdir(mnt / "user" / owner):
                break
        except OSError:
            pass
        time.sleep(0.02)
    mount_s = time.perf_counter() - t
    time.sleep(wait)
    pid = daemon_pid(mnt)
    rss = proc_status(pid).get("VmRSS", 0) / 2**20 if pid else 0.0
    rng = random.Random(bench_store.SEED)
    picks = rng.sample(range(n), min(100, n))
    t = time.perf_counter()
    for i in picks:
        os.stat(mnt / bench_store.node_rel(i))
    lookup_ms = (time.perf_counter() - t) / len(picks) * 1000
    m.stop()
    return {"mount_s": mount_s, "rss_mib": rss, "cold_lookup_ms": lookup_ms}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="N = 10k")
    ap.add_argument("--sizes", help="comma-separated node counts")
    ap.add_argument("--wait", type=float, default=10.0, help="seconds before VmRSS is read")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    sizes = (
        [int(x) for x in args.sizes.split(",")]
        if args.sizes
        else ([10_000] if args.quick else [100_000, 1_000_000])
    )
    base = Path(tempfile.mkdtemp(prefix="cfs-heads-"))
    results = []
    try:
        for n in sizes:
            data = base / f"data-{n}"
            data.mkdir()
            say(f"N={n:,}: building the store")
            bench_store.build_store(data, n)
            say(f"N={n:,}: opening it in-process twice")
            steps = in_process(data / "contextfs.duckdb")
            say(f"N={n:,}: mounting it")
            results.append({"n": n, "steps": steps, "daemon": daemon(data, n, args.wait)})
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(
        "| N | open | open_store | `Memory(...)` | `build_tree(...)` | fsck at mount | RSS | held |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        for s in r["steps"]:
            print(
                f"| {r['n']:,} | {s['open']} | {s['open_store_s']:.2f} s | {s['memory_s']:.2f} s "
                f"| {s['tree_s']:.2f} s | {s['fsck_s']:.2f} s | {s['rss_mib']:.0f} MiB "
                f"| {s['held_nodes']} |"
            )
    print()
    print("| N | daemon: start to `ls` | VmRSS, search off | lookup of a node not held |")
    print("|---|---|---|---|")
    for r in results:
        d = r["daemon"]
        print(
            f"| {r['n']:,} | {d['mount_s']:.2f} s | {d['rss_mib']:.0f} MiB "
            f"| {d['cold_lookup_ms']:.1f} ms |"
        )
    big = results[-1]["daemon"]
    print(
        f"\ntarget at N={results[-1]['n']:,}: mount <= 2 s: {big['mount_s']:.2f} s -> "
        + ("met" if big["mount_s"] <= 2 else "NOT met")
    )
    out = args.json or Path("bench-results") / "bench_heads.json"
    write_json(out, {"machine": machine_info(), "results": results})
    say(f"wrote {out}")


if __name__ == "__main__":
    main()
