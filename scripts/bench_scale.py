"""A million nodes on one machine (issue 14 item 5): what a mount costs as the store grows.

For each store size N (`--quick`: 1,000 and 10,000; full: 1,000, 100,000 and 1,000,000):

1. Builds the store IN-PROCESS, straight into DuckDB in one transaction (building through
   `Memory.create_node` runs at about 1,000 nodes/s, a million would take 20 minutes): N
   nodes `user/uKKKK/{preferences,entities}/topic-NNNNNNN`, 1,000 nodes an owner (500 in
   each of its two type directories, so one owner's tree is the same size at every N), each
   with an L0 (one line), an L1 (about 300 characters) and an L2 (about 1,000 characters),
   one saved version and one outbox row; `content_hash` is the xxh64 of L2 as the store's
   invariant says. The store is opened once by `Memory` afterwards as a check.
2. Mounts it with search off (`contextfs mount --foreground` in a subprocess) twice: the
   first mount of a new store checks it whole and records the point later mounts check
   from (docs/fsck.md); the second is measured: mount time (from the start of the process
   until the mountpoint answers `ls` of an owner), the daemon's VmRSS, `ls -lR` of one
   owner (first and second time), `cat` of the L0.md of 1,000 random nodes (first and
   second time), and create + fsync (mkdir a node, write L2.md, fsync, close) p50.
3. With `--search` (default on; `--no-search` skips it): builds the vector and text indexes
   in-process with SYNTHETIC vectors (`--real-vectors` texts through MiniLM, every other unit
   a noisy copy: embedding a million units for real takes hours; past 100k units the
   rebuild moves to the compact vector index, `index/compact.py`), mounts with search on,
   waits for `index: ready`, and measures VmRSS with the embedding model loaded and query
   p50/p99: reads of `.query/@budget=B/<question>/_context.md`, every read a fresh search.

It prints a markdown table (each size, and each figure's ratio to the smallest size of the
same run) and writes JSON under bench-results/. Targets at 1M: RSS with the model <= 2 GiB,
mount <= 2 s, query p99 <= 100 ms; warm `ls`/`cat` as fast as at 1k (ratio about 1).

    .venv/bin/python scripts/bench_scale.py --quick                # 1k, 10k (< 3 min)
    .venv/bin/python scripts/bench_scale.py                        # 1k, 100k, 1M
    .venv/bin/python scripts/bench_scale.py --sizes 1000,100000 --no-search
    .venv/bin/python scripts/bench_scale.py --store postgresql --sizes 1000,100000 \
        --real-share 0.1

With `--store postgresql` the same store is built in DuckDB, copied into a database of a
real PostgreSQL server started in a temp dir (`contextfs.testing.postgres`, fsync on),
and mounted with `store:` set to it (a data dir of its own). The daemon's RSS then leaves
out the server's memory (its database size is reported beside). With search, a further
mount starts on the store with an empty data dir, as a new host would: the time until its
vector index covers the store, and how many units it embedded against those it took from
the store (`share_vectors`, docs/scaling.md). With
`--real-share S` that share of the units, spread over the store, is embedded by MiniLM
and the others are noisy copies of those (instead of the first `--real-vectors`).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from contextfs.testing import (
    Progress,
    daemon_pid,
    log_problems,
    machine_info,
    say,
    stats,
    wait_index_ready,
    write_json,
    write_synced,
)
from contextfs.testing.bench_embedder import BenchEmbedder
from contextfs.testing.bench_store import (
    PER_OWNER,
    SEED,
    TYPES,
    Daemon,
    build_store,
    copy_to_postgres,
    node_rel,
    owner_of,
)
from contextfs.testing.mount import unmount

TARGET_RSS = 2 * 2**30
TARGET_MOUNT_S = 2.0
TARGET_QUERY_P99_S = 0.100

QUESTIONS = [
    "tips for bicycle maintenance",
    "sourdough bread baking",
    "who prefers tea in the morning",
    "notes about the database index and query latency",
    "what happened at the release meeting",
    "dark mode or light theme in the editor",
    "remote team calendar and schedule",
    "weekend museum visits",
    "learning Spanish",
    "backup server storage",
    "mountain hiking weather",
    "piano music lessons",
    "camera lens and battery",
    "project deadline review",
    "family recipe for dinner",
    "travel budget and invoices",
]


def write_config(data: Path, *, search: bool, store: str) -> None:
    """The data dir's config.yaml: search on or off, and the store (DuckDB when "")."""
    lines = [f"search: {str(search).lower()}"] + ([f"store: {store}"] if store else [])
    (data / "config.yaml").write_text("\n".join(lines) + "\n")


def build_indexes(data: Path, real_vectors: int, real_share: float | None = None) -> dict:
    """The vector and text indexes of the store, with synthetic vectors (see the docstring)."""
    from contextfs.app import load_all_types
    from contextfs.config import load_config
    from contextfs.index.embed import LocalEmbedder
    from contextfs.memory.service import Memory
    from contextfs.search.indexer import Indexer
    from contextfs.store.backend import open_store

    cfg = load_config(data)
    store = open_store(cfg.store_location)
    try:
        memory = Memory(store, load_all_types(cfg), data_dir=data)
        n = len(memory.live)
        bench = BenchEmbedder(LocalEmbedder(), real_vectors, real_share=real_share)
        # on PostgreSQL the vectors go to the store too, as a mount's would (share_vectors)
        indexer = Indexer(
            memory,
            cfg.index_dir,
            lambda: bench,
            model_name=cfg.model_name,
            shared=store.shared_vectors(),
        )
        prog = Progress(f"index N={n} (synthetic vectors)", n)
        indexer.rebuild_sync(progress=lambda done, _t: prog.update(done))
        seconds = prog.done()
        indexer.text.close()  # release tantivy's writer lock before the daemon opens it
        # past Indexer's compact_units (100k) the rebuild moved to the compact index
        # (index/compact.py; its own figures: scripts/bench_vectors.py)
        kind = type(indexer.vectors).__name__
        say(f"  vector index: {kind} ({len(indexer.vectors)} units)")
        return {
            "seconds": seconds,
            "units": len(indexer.digests),
            "real": bench.model_texts,
            "model_s": bench.model_seconds,
            "vectors": kind,
        }
    finally:
        store.close()


def to_postgres(server, data: Path, pg_data: Path, n: int) -> tuple[str, dict]:
    """The DuckDB store of `data`, as built, copied into a new database `scale<n>` of the
    server; `pg_data` a data dir of its own whose config points at it. (DSN, figures.)"""
    import psycopg

    from contextfs.config import load_config

    dsn = server.create_database(f"scale{n}")
    res = copy_to_postgres(load_config(data).db_path, dsn)
    with psycopg.connect(dsn) as con:
        res["pg_bytes"] = con.execute("SELECT pg_database_size(current_database())").fetchone()[0]
    pg_data.mkdir(parents=True)
    write_config(pg_data, search=False, store=dsn)
    return dsn, res


# --------------------------------------------------------------------------------------
# Measuring through a mount


def cpu_sample(pid: int) -> tuple[float, float, int, float, float]:
    """(daemon CPU s, machine busy CPU s, daemon major faults, machine iowait s, time)."""
    tick = os.sysconf("SC_CLK_TCK")
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    with open("/proc/stat") as f:
        cpu = [int(x) for x in f.readline().split()[1:]]
    busy = sum(cpu) - cpu[3] - cpu[4]  # all but idle and iowait
    return (
        (int(fields[11]) + int(fields[12])) / tick,
        busy / tick,
        int(fields[9]),
        cpu[4] / tick,
        time.perf_counter(),
    )


def cpu_delta(a: tuple, b: tuple, wall: float) -> dict[str, float]:
    """What one read cost: its wall time, the daemon's CPU, the rest of the machine's CPU
    (other processes: the benchmark itself, the kernel's own threads), the daemon's major
    page faults and the machine's iowait, in ms (faults: a count)."""
    return {
        "wall_ms": round(wall * 1000, 1),
        "daemon_cpu_ms": round((b[0] - a[0]) * 1000, 1),
        "other_cpu_ms": round(((b[1] - a[1]) - (b[0] - a[0])) * 1000, 1),
        "daemon_major_faults": b[2] - a[2],
        "iowait_ms": round((b[3] - a[3]) * 1000, 1),
    }


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def ls_lr(path: Path) -> float:
    def run() -> None:
        subprocess.run(["ls", "-lR", str(path)], stdout=subprocess.DEVNULL, check=True)

    return timed(run)


def cat_all(paths: list[Path]) -> float:
    def run() -> None:
        for p in paths:
            with open(p, "rb") as f:
                if not f.read():
                    raise RuntimeError(f"{p} is empty")

    return timed(run)


def create_fsync(mnt: Path, trials: int) -> list[float]:
    out = []
    base = mnt / "user" / owner_of(0) / TYPES[0][1]
    for k in range(trials):
        node = base / f"bench-new-{k:04d}"
        t0 = time.perf_counter()
        node.mkdir()
        write_synced(node / "L2.md", f"A new note number {k} about tea and the garden.\n")
        out.append(time.perf_counter() - t0)
    return out


def measure_fs(mnt: Path, data: Path, n: int, args: argparse.Namespace) -> dict:
    rng = random.Random(SEED + n)
    res: dict = {}
    # The store was just built: its first mount checks it whole and records the point a
    # mount checks from (docs/fsck.md); every later mount checks what changed since.
    d = Daemon(mnt, data)
    try:
        res["first_mount_s"] = d.wait_ready(mnt / "user" / owner_of(0))
    finally:
        d.stop()
    d = Daemon(mnt, data)
    try:
        res["mount_s"] = d.wait_ready(mnt / "user" / owner_of(0))
        say(
            f"  N={n}: mounted in {res['mount_s']:.2f}s (the first mount, a full check: "
            f"{res['first_mount_s']:.2f}s)"
        )
        res["rss_mounted"] = d.rss()
        owner = mnt / "user" / owner_of(rng.randrange(n) if n > PER_OWNER else 0)
        res["ls_lR_cold_s"] = ls_lr(owner)
        res["ls_lR_warm_s"] = ls_lr(owner)
        picks = [mnt / node_rel(rng.randrange(n)) / "L0.md" for _ in range(args.cats)]
        res["cat_l0_cold_s"] = cat_all(picks)
        res["cat_l0_warm_s"] = cat_all(picks)
        res["create_fsync"] = stats(create_fsync(mnt, args.creates))
        res["rss_after"] = d.rss()
        say(
            f"  N={n}: RSS {res['rss_after']['VmRSS'] / 2**20:.0f} MiB, ls -lR "
            f"{res['ls_lR_warm_s'] * 1000:.0f} ms warm, cat x{args.cats} "
            f"{res['cat_l0_warm_s'] * 1000:.0f} ms warm"
        )
    finally:
        d.stop()
    res["log_problems"] = log_problems(data / "contextfs.log")[:20]
    return res


def measure_search(
    mnt: Path, data: Path, n: int, args: argparse.Namespace, store: str = ""
) -> dict:
    res: dict = {"index": build_indexes(data, args.real_vectors, args.real_share)}
    write_config(data, search=True, store=store)
    d = Daemon(mnt, data)
    try:
        res["mount_s"] = d.wait_ready(mnt / "user" / owner_of(0))
        res["ready_s"], _ = wait_index_ready(mnt, 1800)
        res["rss_ready"] = d.rss()
        times = []
        pid = daemon_pid(mnt) or d.proc.pid
        probes = []  # of the first round: where each read's time went
        for r in range(args.rounds):
            for q in QUESTIONS:
                # a budget never asked before: the daemon searches afresh
                path = mnt / ".query" / f"@budget={2000 + r}" / q / "_context.md"
                before = cpu_sample(pid)
                t0 = time.perf_counter()
                text = path.read_text()
                times.append(time.perf_counter() - t0)
                if r == 0:
                    probes.append(cpu_delta(before, cpu_sample(pid), times[-1]))
                if "## " not in text:
                    raise RuntimeError(f"no passages for {q!r}")
        res["first_round_probe"] = probes
        res["query"] = stats(times)
        res["query_ms"] = [round(t * 1000, 1) for t in times]  # in the order asked
        res["rss_after"] = d.rss()
        first = res["query_ms"][: len(QUESTIONS)]
        say(
            f"  N={n}: search RSS {res['rss_after']['VmRSS'] / 2**20:.0f} MiB, query p50 "
            f"{res['query']['p50'] * 1000:.1f} ms p99 {res['query']['p99'] * 1000:.1f} ms "
            f"(first round, each question new: {min(first):.0f}-{max(first):.0f} ms; "
            f"in order: {', '.join(f'{t:.0f}' for t in first)})"
        )
        say(
            "  first round, daemon CPU ms / other CPU ms / major faults / iowait ms: "
            + "; ".join(
                f"{p['daemon_cpu_ms']:.0f}/{p['other_cpu_ms']:.0f}/{p['daemon_major_faults']}"
                f"/{p['iowait_ms']:.0f}"
                for p in probes
            )
        )
    finally:
        d.stop()
    write_config(data, search=False, store=store)
    res["log_problems"] = log_problems(data / "contextfs.log")[:20]
    return res


def measure_new_host(base: Path, n: int, dsn: str) -> dict:
    """A mount started on the shared store with an empty data dir, as on a new host:
    seconds until its vector index covers the store (`.status` ready, queue 0), and how
    many units it embedded itself against those it took from the store."""
    data, mnt = base / f"newhost-{n}", base / f"mnt-newhost-{n}"
    data.mkdir()
    mnt.mkdir()
    write_config(data, search=True, store=dsn)
    d = Daemon(mnt, data)
    try:
        res: dict = {"mount_s": d.wait_ready(mnt / "user" / owner_of(0))}
        res["ready_s"], _ = wait_index_ready(mnt, 7200)
        res["covered_s"] = time.perf_counter() - d.t0  # from the start of the process
        facts = json.loads((mnt / ".status.json").read_text())["index"]
        res.update(
            units=facts["indexed_units"],
            embedded_here=facts["embedded_here"],
            taken_from_store=facts["taken_from_store"],
        )
        text = (mnt / ".query" / QUESTIONS[0] / "_context.md").read_text()
        res["answered_by_vectors"] = "vectors" in text.splitlines()[1]
        say(
            f"  N={n}: a new host covered the store in {res['covered_s']:.1f}s from its start "
            f"({res['taken_from_store']} units taken from the store, "
            f"{res['embedded_here']} embedded)"
        )
    finally:
        d.stop()
    res["log_problems"] = log_problems(data / "contextfs.log")[:20]
    shutil.rmtree(data, ignore_errors=True)
    return res


# --------------------------------------------------------------------------------------
# Report


def metrics(r: dict) -> dict[str, tuple[float | None, str]]:
    fs, se = r["fs"], r.get("search") or {}
    mib = 2**20
    idx = se.get("index") or {}
    new = r.get("new_host") or {}
    return {
        "build store (in-process)": (r["build"]["build_s"], "s"),
        "copy into PostgreSQL": (r["build"].get("copy_s"), "s"),
        "PostgreSQL database size": (
            r["build"]["pg_bytes"] / mib if "pg_bytes" in r["build"] else None,
            "MiB",
        ),
        "build vector + text indexes (in-process)": (idx.get("seconds"), "s"),
        "units embedded by the model, % of all": (
            100 * idx["real"] / idx["units"] if idx.get("units") else None,
            "%",
        ),
        "first mount of the new store (full check)": (fs.get("first_mount_s"), "s"),
        "mount (start to `ls` answers)": (fs["mount_s"], "s"),
        "daemon VmRSS, search off": (fs["rss_after"]["VmRSS"] / mib, "MiB"),
        "daemon VmRSS, model + index loaded": (
            se["rss_after"]["VmRSS"] / mib if se else None,
            "MiB",
        ),
        "of it mapped files (RssFile: libraries, tantivy)": (
            se["rss_after"].get("RssFile", 0) / mib if se else None,
            "MiB",
        ),
        "`ls -lR` one owner (1,000 nodes), first": (fs["ls_lR_cold_s"] * 1000, "ms"),
        "`ls -lR` one owner, warm": (fs["ls_lR_warm_s"] * 1000, "ms"),
        "`cat` 1,000 random L0.md, first": (fs["cat_l0_cold_s"] * 1000, "ms"),
        "`cat` the same 1,000 L0.md, warm": (fs["cat_l0_warm_s"] * 1000, "ms"),
        "create + fsync p50": (fs["create_fsync"]["p50"] * 1000, "ms"),
        "query `_context.md` p50": (se["query"]["p50"] * 1000 if se else None, "ms"),
        "query `_context.md` p99": (se["query"]["p99"] * 1000 if se else None, "ms"),
        "new host: start until vector search covers the store": (new.get("covered_s"), "s"),
        "new host: units embedded by its model": (new.get("embedded_here"), "units"),
        "new host: units taken from the store": (new.get("taken_from_store"), "units"),
    }


def table(results: list[dict]) -> str:
    sizes = [r["n"] for r in results]
    head = "| metric | " + " | ".join(f"N={n:,}" for n in sizes)
    head += " | " + " | ".join(f"ratio {n:,}/{sizes[0]:,}" for n in sizes[1:]) + " |"
    lines = [head, "|" + "---|" * (1 + 2 * len(sizes) - 1)]
    per = [metrics(r) for r in results]
    for name in per[0]:
        vals = [p[name][0] for p in per]
        unit = per[0][name][1]
        cells = [f"{v:,.1f} {unit}" if v is not None else "—" for v in vals]
        base = vals[0]
        ratios = [f"{v / base:.2f}x" if v is not None and base else "—" for v in vals[1:]]
        lines.append(f"| {name} | " + " | ".join(cells + ratios) + " |")
    return "\n".join(lines)


def side_by_side(duck: list[dict], pg: list[dict]) -> str:
    """Each figure on PostgreSQL beside DuckDB's, for each size: pg, duckdb, ratio."""
    sizes = [r["n"] for r in duck]
    head = "| metric | " + " | ".join(f"N={n:,}: PostgreSQL / DuckDB" for n in sizes) + " |"
    lines = [head, "|" + "---|" * (1 + len(sizes))]
    per_d, per_p = [metrics(r) for r in duck], [metrics(r) for r in pg]
    for name in per_d[0]:
        cells = []
        for d, p in zip(per_d, per_p, strict=True):
            (dv, unit), pv = d[name], p[name][0]
            if dv is None and pv is None:
                cells.append("—")
                continue
            ratio = f" = {pv / dv:.2f}x" if dv and pv is not None else ""
            show = [f"{v:,.1f}" if v is not None else "—" for v in (pv, dv)]
            cells.append(f"{show[0]} / {show[1]} {unit}{ratio}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def verdicts(results: list[dict]) -> list[str]:
    big = results[-1]
    m = metrics(big)
    out = [f"targets, checked at the largest size N={big['n']:,}:"]
    rss = m["daemon VmRSS, model + index loaded"][0]
    checks = [
        ("RSS with the model <= 2048 MiB", rss, TARGET_RSS / 2**20),
        ("mount <= 2 s", m["mount (start to `ls` answers)"][0], TARGET_MOUNT_S),
        ("query p99 <= 100 ms", m["query `_context.md` p99"][0], TARGET_QUERY_P99_S * 1000),
    ]
    for label, value, limit in checks:
        if value is None:
            out.append(f"- {label}: not measured")
        else:
            out.append(f"- {label}: {value:,.1f} -> {'met' if value <= limit else 'NOT met'}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="N = 1k and 10k")
    ap.add_argument("--sizes", help="comma-separated node counts")
    ap.add_argument("--search", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--cats", type=int, default=1000)
    ap.add_argument("--creates", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=4, help="query rounds over the questions")
    ap.add_argument("--real-vectors", type=int, default=256)
    ap.add_argument(
        "--real-share",
        type=float,
        default=None,
        help="embed this share of the units by the model, spread over the store "
        "(instead of the first --real-vectors)",
    )
    ap.add_argument(
        "--store",
        choices=("duckdb", "postgresql", "both"),
        default="duckdb",
        help="the canonical store the mount uses (postgresql: a server in a temp dir; "
        "both: the same store measured on each, side by side)",
    )
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--keep", action="store_true", help="keep the data dirs")
    ap.add_argument(
        "--vocab",
        choices=("zipf", "uniform"),
        default="zipf",
        help="the texts' words: Zipf over 20,000 (default) or 75 equally likely",
    )
    args = ap.parse_args(argv)
    if args.sizes:
        sizes = [int(s) for s in args.sizes.split(",")]
    else:
        sizes = [1000, 10_000] if args.quick else [1000, 100_000, 1_000_000]
    stores = ["duckdb", "postgresql"] if args.store == "both" else [args.store]
    base = Path(tempfile.mkdtemp(prefix="cfs-scale-"))
    results: dict[str, list[dict]] = {s: [] for s in stores}
    started = time.perf_counter()
    server = None
    if "postgresql" in stores:
        from contextfs.testing.postgres import PgServer

        server = PgServer(fsync=True)
        server.start()
    try:
        for n in sizes:
            say(f"N={n:,}")
            data, pg_data = base / f"data-{n}", base / f"pgdata-{n}"
            build = build_store(data, n, args.vocab)
            where = {}
            if "duckdb" in stores:
                where["duckdb"] = (data, "", build)
            if server is not None:  # copied before any mount touches the DuckDB file
                dsn, copied = to_postgres(server, data, pg_data, n)
                where["postgresql"] = (pg_data, dsn, {**build, **copied})
            for store, (d, dsn, built) in where.items():
                say(f"N={n:,} on {store}")
                mnt = base / f"mnt-{store}-{n}"
                mnt.mkdir()
                r: dict = {"n": n, "store": store, "build": built}
                r["fs"] = measure_fs(mnt, d, n, args)
                if args.search:
                    r["search"] = measure_search(mnt, d, n, args, dsn)
                    if dsn:
                        r["new_host"] = measure_new_host(base, n, dsn)
                results[store].append(r)
                if not args.keep:
                    shutil.rmtree(d, ignore_errors=True)
            if not args.keep:
                shutil.rmtree(data, ignore_errors=True)
    finally:
        for mnt in base.glob("mnt-*"):
            unmount(mnt)
        if server is not None:
            server.close()
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    for store in stores:
        print(f"\nstore: {store}\n")
        print(table(results[store]))
        print()
        print("\n".join(verdicts(results[store])))
    if len(stores) == 2:
        print("\nPostgreSQL / DuckDB, same store, same run:\n")
        print(side_by_side(results["duckdb"], results["postgresql"]))
    problems = sum(
        len(r["fs"]["log_problems"]) + len((r.get("new_host") or {}).get("log_problems", []))
        for rs in results.values()
        for r in rs
    )
    total = time.perf_counter() - started
    print(f"\n{problems} warning/error line(s) in the daemons' logs; total {total:.0f}s")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = args.json or Path("bench-results") / f"bench_scale-{stamp}.json"
    write_json(
        path,
        {
            "machine": machine_info(),
            "sizes": sizes,
            "quick": args.quick,
            "stores": stores,
            "real_share": args.real_share,
            "vocab": args.vocab,
            # one store: the list as before; both: by store
            "results": results[stores[0]] if len(stores) == 1 else results,
            "median_query_ms": {
                s: statistics.median(
                    [r["search"]["query"]["p50"] * 1000 for r in rs if r.get("search")] or [0]
                )
                for s, rs in results.items()
            },
        },
    )
    say(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
