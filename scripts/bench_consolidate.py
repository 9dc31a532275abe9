"""Consolidation as the store grows (issue 14 item 5: a million nodes on one machine).

For each store size N (`--quick`: 4,000; default 100,000; `--sizes` for others):

1. Builds `bench_scale`'s store (`contextfs.testing.bench_store`: N nodes; one owner's
   preferences or entities are a group of 500 bodies of ~950 characters) and plants
   `--dups` near-duplicates through `Memory`, each a copy of a random node's L2 with a few
   characters changed (the ratio test) or its sentences in another order (the Jaccard test),
   named after its original (`topic-…-dup-…`: in a merge type only names that can name one
   thing merge).
2. The first run, offline, as `contextfs consolidate` does it: seconds, groups compared,
   pairs checked by `near_duplicate`, merges. Every group holds a changed node (none was
   compared before), so every pair of every group is covered: the merges must be exactly
   the planted duplicates.
3. The old way, estimated: before this, every pair of a group went through
   `is_near_duplicate` (difflib). Timed on `--sample` random pairs of one group, times the
   pairs the first run covered.
4. A day later: `--dups` more duplicates planted and `--edits` nodes rewritten; the second
   run compares only the groups with a changed node, and in them only pairs with one.
5. The mount during a run (`--mount`, default on): the store mounted (search off) with a
   short `consolidate_every`, after `--edits` more rewrites; `cat` of random L0.md in a
   loop before and during the daemon's run (planned in a worker thread, applied a
   transaction at a time): p50/p99/max of each, and their ratio.

Prints a markdown table and writes JSON under bench-results/.

    .venv/bin/python scripts/bench_consolidate.py --quick       # 4k (under a minute)
    .venv/bin/python scripts/bench_consolidate.py               # 100k
    .venv/bin/python scripts/bench_consolidate.py --sizes 1000000 --no-mount
"""

from __future__ import annotations

import argparse
import difflib
import random
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from contextfs.app import load_all_types
from contextfs.config import load_config
from contextfs.memory.consolidate import Report as RunReport
from contextfs.memory.consolidate import apply, plan
from contextfs.memory.document import is_near_duplicate, normalize_item, parse_document
from contextfs.memory.service import Memory
from contextfs.store import Store
from contextfs.testing import (
    bench_store,
    log_problems,
    machine_info,
    say,
    stats,
    unmount,
    write_json,
)

SEED = 20261202
NUMBER_RE = re.compile(r"\d+")


def open_memory(data: Path) -> Memory:
    cfg = load_config(data)
    return Memory(Store(cfg.db_path), load_all_types(cfg), data_dir=data)


def plant(
    memory: Memory, rng: random.Random, count: int, n: int, tag: str
) -> list[tuple[int, int]]:
    """`count` near-duplicates of random nodes, each in its original's group: (copy,
    original) ids."""
    made = []
    for k in range(count):
        i = rng.randrange(n)
        owner = ("user", bench_store.owner_of(i))
        tname = bench_store.TYPES[i % 2][0]
        original = memory.live_node(owner, memory.types[tname], f"topic-{i:07d}")
        if original is None:
            continue
        text = original.l2
        if k % 2 == 0:  # a few characters changed
            chars = list(text)
            for _ in range(5):
                chars[rng.randrange(len(chars) - 1)] = rng.choice("aeiou")
            text = "".join(chars)
        else:  # the sentences in another order
            parts = [p.strip() for p in text.strip().split(".") if p.strip()]
            rng.shuffle(parts)
            text = ". ".join(parts) + ".\n"
        # named after its original (in a merge type two names that say two things stay two
        # memories however alike they read: `consolidate.same_subject`)
        dup = memory.create_node(owner, memory.types[tname], f"topic-{i:07d}-dup-{tag}-{k:05d}")
        memory.save_l2(dup, text)
        made.append((dup.id, original.id))
    return made


def true_duplicates(memory: Memory, planted: list[tuple[int, int]]) -> set[int]:
    """The planted copies that are near-duplicates of their original as both are now, by
    the definition (`is_near_duplicate` on the whole bodies): what a run must merge. A
    copy can stop being one: its original edited since, or merged with another copy."""
    nodes = memory.nodes
    return {
        dup for dup, orig in planted if is_near_duplicate(body(nodes[dup].l2), body(nodes[orig].l2))
    }


def body(l2: str) -> str:
    return " ".join(parse_document(l2).body.split())


def edit(memory: Memory, rng: random.Random, count: int, n: int) -> None:
    for _ in range(count):
        i = rng.randrange(n)
        owner = ("user", bench_store.owner_of(i))
        node = memory.live_node(owner, memory.types[bench_store.TYPES[i % 2][0]], f"topic-{i:07d}")
        if node is not None:  # (no number: one would make it distinct from a planted copy)
            word = rng.choice(bench_store.vocabulary("zipf"))
            memory.save_l2(node, node.l2.rstrip() + f" Edited: {word}.\n")


def run(memory: Memory, now: float) -> dict:
    t0 = time.perf_counter()
    found = plan(memory, now=now)
    planned = time.perf_counter() - t0
    report = RunReport()
    for _ in apply(memory, found, report):
        pass
    return {
        "seconds": time.perf_counter() - t0,
        "plan_s": planned,
        "groups": found.groups,
        "pairs_checked": found.pairs,
        "merged": report.merged,
        "reweighted": report.decayed,
        "skipped": len(found.skipped),
        "merged_ids": sorted(other for _keep, other in found.merges),
    }


def difflib_near_duplicate(a: str, b: str) -> bool:
    """`is_near_duplicate` as it was before the LCS pre-check (session 9's code): what
    every pair of a group cost."""
    na, nb = normalize_item(a), normalize_item(b)
    if na == nb:
        return True
    if not na or not nb or sorted(NUMBER_RE.findall(na)) != sorted(NUMBER_RE.findall(nb)):
        return False
    matcher = difflib.SequenceMatcher(None, na, nb, autojunk=False)
    if (
        matcher.real_quick_ratio() >= 0.9
        and matcher.quick_ratio() >= 0.9
        and matcher.ratio() >= 0.9
    ):
        return True
    ta, tb = set(na.split()), set(nb.split())
    if len(ta) >= 4 and len(tb) >= 4:
        return len(ta & tb) / len(ta | tb) >= 0.85
    return False


def old_pair_ms(memory: Memory, rng: random.Random, sample: int) -> float:
    """Mean ms of the old comparison of a pair (`difflib_near_duplicate`) on random pairs
    of the first group; the new one must agree on each."""
    owner = ("user", bench_store.owner_of(0))
    nodes = list(memory.walk(owner=owner, types=(bench_store.TYPES[0][0],)))
    bodies = [" ".join(n.l2.split()) for n in nodes]
    pairs = [tuple(rng.sample(range(len(bodies)), 2)) for _ in range(sample)]
    t0 = time.perf_counter()
    old = [difflib_near_duplicate(bodies[a], bodies[b]) for a, b in pairs]
    took = (time.perf_counter() - t0) / sample * 1000
    if old != [is_near_duplicate(bodies[a], bodies[b]) for a, b in pairs]:
        raise RuntimeError("the old and the new comparison disagree on a pair")
    return took


def measure_mount(data: Path, mnt: Path, n: int, args: argparse.Namespace) -> dict:
    """`cat` of random L0.md before and during the daemon's consolidation run."""
    memory = open_memory(data)
    try:
        edit(memory, random.Random(SEED + 2), args.edits, n)
        planted = plant(memory, random.Random(SEED + 3), args.dups, n, "mount")
    finally:
        memory.store.close()
    (data / "config.yaml").write_text(f"search: false\nconsolidate_every: {args.every}\n")
    rng = random.Random(SEED + 4)
    paths = [mnt / bench_store.node_rel(rng.randrange(n)) / "L0.md" for _ in range(500)]
    d = bench_store.Daemon(mnt, data)
    before: list[float] = []
    during: list[float] = []
    try:
        d.wait_ready(mnt / "user" / bench_store.owner_of(0))
        t_mount = time.monotonic()
        runs_at_start = _runs(mnt)
        done = threading.Event()
        i = 0
        while time.monotonic() - t_mount < 600:
            if i % 50 == 0 and _runs(mnt) > runs_at_start:
                done.set()
                break
            p = paths[i % len(paths)]
            t0 = time.perf_counter()
            p.read_bytes()
            dt = time.perf_counter() - t0
            (before if time.monotonic() - t_mount < args.every - 0.5 else during).append(dt)
            i += 1
        if not done.is_set():
            raise RuntimeError("the daemon's consolidation run did not end in 10 minutes")
    finally:
        d.stop()
    # the daemon's own run (`.status` shows the latest by date: the offline "day later")
    log = (data / "contextfs.log").read_text()
    ran = [ln.split("consolidation: ")[1] for ln in log.splitlines() if "consolidation: " in ln]
    line = ran[-1] if ran else ""
    return {
        "planted": len(planted),
        "status_line": line,
        "before": stats(before),
        "during": stats(during),
        "log_problems": log_problems(data / "contextfs.log")[:20],
    }


def _runs(mnt: Path) -> int:
    status = (mnt / ".status").read_text()
    line = next((ln for ln in status.splitlines() if ln.startswith("consolidation")), "")
    # "consolidation: every 2s, N run(s), last ...": the count of runs
    for word, nxt in zip(line.split(), line.split()[1:], strict=False):
        if nxt.startswith("run"):
            try:
                return int(word)
            except ValueError:
                return 0
    return 0


def measure(n: int, base: Path, args: argparse.Namespace) -> dict:
    data, mnt = base / f"data-{n}", base / f"mnt-{n}"
    mnt.mkdir()
    res: dict = {"n": n, "build": bench_store.build_store(data, n)}
    memory = open_memory(data)
    rng = random.Random(SEED)
    try:
        planted = plant(memory, rng, args.dups, n, "a")
        must = true_duplicates(memory, planted)
        now = time.time()
        say(f"  N={n:,}: first run ({len(planted)} planted near-duplicates) ...")
        first = run(memory, now)
        first["planted"], first["true_duplicates"] = len(planted), len(must)
        first["found_all_planted"] = must <= set(first["merged_ids"])
        first["extra_merges"] = len(set(first["merged_ids"]) - {d for d, _o in planted})
        res["first"] = first
        group_pairs = bench_store.PER_OWNER // 2 * (bench_store.PER_OWNER // 2 - 1) // 2
        res["old_pair_ms"] = old_pair_ms(memory, random.Random(SEED + 1), args.sample)
        res["old_estimate_s"] = res["old_pair_ms"] / 1000 * group_pairs * first["groups"]
        say(
            f"  N={n:,}: first run {first['seconds']:.1f}s ({first['groups']} groups, "
            f"{first['pairs_checked']} pairs checked, {first['merged']} merged); the old "
            f"way ~{res['old_estimate_s']:.0f}s"
        )
        planted2 = plant(memory, random.Random(SEED + 5), args.dups, n, "b")
        edit(memory, random.Random(SEED + 6), args.edits, n)
        must = true_duplicates(memory, planted2)
        second = run(memory, now + 86400)
        second["planted"], second["true_duplicates"] = len(planted2), len(must)
        second["found_all_planted"] = must <= set(second["merged_ids"])
        second["missed"] = sorted(must - set(second["merged_ids"]))
        res["second"] = second
        say(
            f"  N={n:,}: a day later ({args.edits} edits, {len(planted2)} planted): "
            f"{second['seconds']:.1f}s ({second['groups']} groups, "
            f"{second['pairs_checked']} pairs checked, {second['merged']} merged)"
        )
    finally:
        memory.store.close()
    if args.mount:
        res["mount"] = measure_mount(data, mnt, n, args)
        m = res["mount"]
        say(
            f"  N={n:,}: cat L0.md p99 before {m['before']['p99'] * 1000:.1f} ms, during "
            f"the daemon's run {m['during']['p99'] * 1000:.1f} ms ({m['status_line']})"
        )
    for r in (res["first"], res["second"]):
        r.pop("merged_ids")
    return res


def table(results: list[dict]) -> str:
    rows = [
        "| N | first run | groups | pairs checked | merged / planted (near-duplicates) "
        "| old way (est.) | day later | groups | pairs | merged / planted (near-duplicates) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        f, s = r["first"], r["second"]
        rows.append(
            f"| {r['n']:,} | {f['seconds']:.1f} s | {f['groups']} | {f['pairs_checked']:,} | "
            f"{f['merged']} / {f['planted']} ({f['true_duplicates']}) | "
            f"{r['old_estimate_s']:,.0f} s "
            f"({r['old_pair_ms']:.1f} ms a pair) | {s['seconds']:.1f} s | {s['groups']} | "
            f"{s['pairs_checked']:,} | {s['merged']} / {s['planted']} ({s['true_duplicates']}) |"
        )
    mounted = [r for r in results if r.get("mount")]
    if mounted:
        rows += [
            "",
            "| N | `cat` L0.md before the run: p50 / p99 / max | during it | p99 ratio |",
            "|---|---|---|---|",
        ]
        for r in mounted:
            b, d = r["mount"]["before"], r["mount"]["during"]

            def ms(s: dict) -> str:
                return f"{s['p50'] * 1000:.2f} / {s['p99'] * 1000:.2f} / {s['max'] * 1000:.1f} ms"

            rows.append(
                f"| {r['n']:,} | {ms(b)} ({b['count']}) | {ms(d)} ({d['count']}) | "
                f"{d['p99'] / b['p99']:.2f}x |"
            )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="N = 4k")
    ap.add_argument("--sizes", help="comma-separated node counts (default 100,000)")
    ap.add_argument("--dups", type=int, default=200, help="near-duplicates planted a run")
    ap.add_argument("--edits", type=int, default=1000, help="nodes rewritten a day later")
    ap.add_argument("--sample", type=int, default=100, help="pairs timed the old way")
    ap.add_argument("--mount", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--every", type=float, default=8.0, help="consolidate_every of the mount")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.sizes:
        sizes = [int(s) for s in args.sizes.split(",")]
    else:
        sizes = [4_000] if args.quick else [100_000]
    if args.quick:
        args.dups, args.edits, args.sample = min(args.dups, 50), min(args.edits, 200), 20
    base = Path(tempfile.mkdtemp(prefix="cfs-consolidate-"))
    results = []
    started = time.perf_counter()
    try:
        for n in sizes:
            say(f"N={n:,}")
            r = measure(n, base, args)
            r["planted"] = args.dups
            results.append(r)
    finally:
        for n in sizes:
            unmount(base / f"mnt-{n}")
        shutil.rmtree(base, ignore_errors=True)
    print(table(results))
    problems = sum(len(r.get("mount", {}).get("log_problems", [])) for r in results)
    ok = all(
        r["first"]["found_all_planted"]
        and r["second"]["found_all_planted"]
        and r["first"]["extra_merges"] == 0
        for r in results
    )
    print(
        f"\nevery planted near-duplicate merged, nothing else: {'yes' if ok else 'NO'}; "
        f"{problems} warning/error line(s) in the daemon's log; "
        f"total {time.perf_counter() - started:.0f}s"
    )
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = args.json or Path("bench-results") / f"bench_consolidate-{stamp}.json"
    write_json(
        path,
        {
            "machine": machine_info(),
            "sizes": sizes,
            "quick": args.quick,
            "args": vars(args),
            "results": results,
            "median_first_run_s": statistics.median(r["first"]["seconds"] for r in results),
        },
    )
    say(f"wrote {path}")
    return 0 if ok and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
