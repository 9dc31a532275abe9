"""The check a mount runs, by store size: the full fsck against the check since the last pass.

Issue 14 item 5 ("mount time independent of the store's size"), the mount-time check. For
each store size N (`--quick`: 1,000 and 10,000; full: 1,000, 100,000 and 1,000,000):

1. Builds the store in-process as scripts/bench_scale.py does (`contextfs.testing.bench_store`:
   N nodes with L0/L1/L2 of about 1,000 characters, one version and one outbox row each;
   `--reuse DIR` takes the data dirs `DIR/n<N>` of an earlier build instead).
2. Times each check of the full fsck (`check_store`: what every mount ran before, and what
   `contextfs fsck` runs), and records its pass (`record_passed`) as a mount does.
3. Changes `--changes` random nodes (default 100) through `Store.update_node` (a new L2
   version each, with its outbox row: the code path of a save).
4. Times each check of the mount's check since that point (`mount_check`: the node checks
   restricted to the changed nodes, the rest whole), and the whole of it.
5. Unless `--no-postgres`, for N up to `--pg-max` (100,000): copies the store into a
   PostgreSQL database (a server in a temporary directory, as the tests start one) and
   times steps 2-4 there too.
6. Unless `--no-mounts`: mounts the store for real (search off) three times, timing each
   from the start of the daemon until `ls` of an owner answers: with the check since the
   point, with the point forgotten (the full check, as a store from before has none), and
   since the point that mount recorded. The rest of a mount (loading the node heads) is
   the same in all three.

Every time is the best of `--repeat` runs (default 3): the machine is shared, and the
slower runs measure the neighbours.

`--files MB` measures a store of files instead: it builds a data dir holding MB megabytes
of attachments (random bytes, 4 MiB files, ten to a node; `--files-from DIR` copies a data
dir instead), mounts it once (the first mount of a built store, or of one migrated), then
`--repeat` times more, each timed from the daemon's start until `ls` answers, and prints
the mount time, the check's own time (`.status`) and the daemon's peak RSS (VmHWM) of
each. It runs the code on PYTHONPATH, so the same store can be mounted by two versions:

    cd /tmp && PYTHONPATH=WORKTREE .venv/bin/python WORKTREE/scripts/bench_fsck.py --files 1000

It prints a markdown table (ms per check, full and mount, at each N; the totals' ratio to
the smallest N) and writes JSON under bench-results/. Progress goes to stderr.

    .venv/bin/python scripts/bench_fsck.py --quick
    .venv/bin/python scripts/bench_fsck.py                       # 1k, 100k, 1M (~6 min)
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

from contextfs.store import Store
from contextfs.store.backend import StoreBackend, open_store
from contextfs.store.db import _NODE_COLS, _node_from_row
from contextfs.store.fsck import (
    CHECKED_SEQ,
    CHECKS,
    SINCE_AT_MOUNT,
    WHOLE_AT_MOUNT,
    full_check,
    mount_check,
    record_passed,
)
from contextfs.store.pg import PgStore
from contextfs.testing import log_problems, machine_info, say, write_json
from contextfs.testing.bench_store import Daemon, build_store, owner_of
from contextfs.testing.mount import unmount
from contextfs.testing.postgres import PgServer, available

SEED = 20261202


def copy_to_pg(duck: Path, dsn: str) -> None:
    """The DuckDB store's owners, nodes, versions and outbox into a new PostgreSQL store
    (PgStore makes its schema), by COPY; the outbox and id sequences set past them."""
    import duckdb
    import psycopg

    PgStore(dsn).close()
    src = duckdb.connect(str(duck), read_only=True)
    try:
        with psycopg.connect(dsn) as con:
            for table in ("owners", "nodes", "versions", "outbox"):
                cols = ", ".join(
                    r[0]
                    for r in src.execute(
                        "SELECT column_name FROM information_schema.columns "
                        "WHERE table_name = ? ORDER BY ordinal_position",
                        [table],
                    ).fetchall()
                )
                cur = src.execute(f"SELECT {cols} FROM {table}")
                with con.cursor().copy(f"COPY {table} ({cols}) FROM STDIN") as copy:
                    while rows := cur.fetchmany(10_000):
                        for row in rows:
                            copy.write_row(row)
            con.execute("SELECT setval('outbox_seq', (SELECT max(seq) FROM outbox))")
            con.execute("SELECT setval('object_ids', (SELECT max(id) FROM nodes))")
            con.commit()
            con.autocommit = True
            con.execute("ANALYZE")
    finally:
        src.close()


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


def fastest(runs: list[dict[str, float]]) -> dict[str, float]:
    """Each check's best time over the runs (the machine is shared: the rest is noise)."""
    return {k: min(r[k] for r in runs) for k in runs[0]}


def measure(store: StoreBackend, n: int, changes: int, rng: random.Random, repeat: int) -> dict:
    """The full check and the mount's check on `store` (closed at the end)."""
    try:
        say(f"N={n:,}: the full check, check by check, {repeat} time(s)")
        full = fastest([timed_checks(store, None) for _ in range(repeat)])
        run = full_check(store)
        assert run.passed, run.problems
        record_passed(store, run)
        say(f"N={n:,}: {changes} node(s) changed")
        change_nodes(store, changes, rng)
        say(f"N={n:,}: the mount's check since seq {run.upto}")
        mount = fastest([timed_checks(store, run.upto) for _ in range(repeat)])
        totals = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            m = mount_check(store)
            totals.append(time.perf_counter() - t0)
        mount_total = min(totals)
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


def mount_once(data: Path, mnt: Path) -> tuple[float, str]:
    """A real mount (search off): seconds until `ls` of an owner answers, and the
    `.status` line saying which check it ran."""
    d = Daemon(mnt, data)
    try:
        secs = d.wait_ready(mnt / "user" / owner_of(0))
        (line,) = [x for x in (mnt / ".status").read_text().splitlines() if x.startswith("fsck at")]
    finally:
        d.stop()
    return secs, line


def measure_mounts(data: Path, mnt: Path, n: int) -> dict:
    """The daemon's mount time: with the check since the point (the benchmark's changes
    after it), with the full check (the point forgotten, as a store from before has none),
    and since the point that mount recorded; in that order, so the full one is neither the
    first (cold) nor the last."""
    say(f"N={n:,}: mounting with the check since the point")
    since1_s, since1_line = mount_once(data, mnt)
    store = Store(data / "contextfs.duckdb")
    try:
        with store.atomic():
            store.con.execute("DELETE FROM store_meta WHERE key = ?", [CHECKED_SEQ])
    finally:
        store.close()
    say(f"N={n:,}: mounting with the full check")
    full_s, full_line = mount_once(data, mnt)
    say(f"N={n:,}: mounting with the check since the point again")
    since2_s, since2_line = mount_once(data, mnt)
    assert "full" in full_line and "since seq" in since1_line + since2_line, full_line
    return {
        "mount_since_first_s": since1_s,
        "mount_full_s": full_s,
        "mount_since_s": since2_s,
        "lines": [since1_line, full_line, since2_line],
        "log_problems": log_problems(data / "contextfs.log")[:20],
    }


def build_files(data: Path, mb: int) -> dict:
    """A data dir (search off) holding `mb` MB of files: 4 MiB of random bytes each, ten
    to a node, written through the memory as a copy into the mount would write them."""
    from contextfs.app import close_memory, load_all_types, open_memory
    from contextfs.config import load_config

    data.mkdir(parents=True)
    (data / "config.yaml").write_text("search: false\n")
    cfg = load_config(data)
    memory = open_memory(cfg, load_all_types(cfg))
    t0 = time.perf_counter()
    files = max(1, mb // 4)
    node = None
    try:
        for i in range(files):
            if i % 10 == 0:
                node = memory.create_node(("user", "default"), memory.types["preference"], f"p{i}")
            memory.attachment_store.add_attachment(
                node, None, f"f{i}.bin", "file", 0o644, data=random.randbytes(4 << 20)
            )
    finally:
        close_memory(memory, cfg)
    return {"files": files, "bytes": files << 22, "build_s": time.perf_counter() - t0}


def files_mounts(data: Path, mnt: Path, repeat: int) -> list[dict]:
    """The store's first mount, then `repeat` more: seconds until `ls` of the default
    owner answers, the `.status` line of the check, the daemon's VmHWM."""
    runs = []
    for i in range(repeat + 1):
        d = Daemon(mnt, data)
        try:
            secs = d.wait_ready(mnt / "user" / "default")
            peak = d.rss().get("VmHWM", 0)
            lines = (mnt / ".status").read_text().splitlines()
            (line,) = [x for x in lines if x.startswith("fsck at")]
        finally:
            d.stop()
        say(f"mount {i}: {secs:.2f} s, VmHWM {peak >> 20} MiB; {line}")
        runs.append({"mount_s": secs, "vmhwm_bytes": peak, "fsck_line": line})
    return runs


def files_main(args: argparse.Namespace) -> int:
    base = Path(tempfile.mkdtemp(prefix="cfs-fsck-files-"))
    data, mnt = base / "data", base / "mnt"
    mnt.mkdir()
    try:
        if args.files_from:
            say(f"copying {args.files_from}")
            shutil.copytree(args.files_from, data)
            build: dict = {"copied": str(args.files_from)}
        else:
            say(f"building a store of {args.files} MB of files")
            build = build_files(data, args.files)
        try:
            runs = files_mounts(data, mnt, args.repeat)
        finally:
            unmount(mnt)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print("| mount | mount time (s) | check (`.status`) | daemon VmHWM (MiB) |")
    print("|---|---|---|---|")
    for i, r in enumerate(runs):
        print(
            f"| {'first' if i == 0 else i} | {r['mount_s']:.2f} | {r['fsck_line']} "
            f"| {r['vmhwm_bytes'] >> 20} |"
        )
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = args.json or Path("bench-results") / f"bench_fsck-files-{stamp}.json"
    write_json(path, {"machine": machine_info(), "build": build, "mounts": runs})
    say(f"wrote {path}")
    return 0


def mount_table(results: list[dict]) -> str:
    lines = [
        "| N | mount, since the point (1st) (s) | mount, full check (s) "
        "| mount, since the point (s) | full - since (s) |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        m = r["mounts"]
        lines.append(
            f"| {r['n']:,} | {m['mount_since_first_s']:.2f} | {m['mount_full_s']:.2f} | "
            f"{m['mount_since_s']:.2f} | {m['mount_full_s'] - m['mount_since_s']:.2f} |"
        )
    return "\n".join(lines)


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
    ap.add_argument("--repeat", type=int, default=3, help="best of R runs of each check")
    ap.add_argument(
        "--mounts",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time real mounts (search off): full check, then since the point",
    )
    ap.add_argument(
        "--postgres",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also on PostgreSQL (a server in a temporary directory), sizes up to --pg-max",
    )
    ap.add_argument("--pg-max", type=int, default=100_000, help="largest N copied to PostgreSQL")
    ap.add_argument("--reuse", type=Path, help="data dirs DIR/n<N> built before (copied)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--files", type=int, help="instead: mount a store of MB megabytes of files")
    ap.add_argument("--files-from", type=Path, help="with --files: copy this data dir instead")
    args = ap.parse_args(argv)
    if args.files or args.files_from:
        return files_main(args)
    if args.sizes:
        sizes = [int(s) for s in args.sizes.split(",")]
    else:
        sizes = [1000, 10_000] if args.quick else [1000, 100_000, 1_000_000]
    rng = random.Random(SEED)
    base = Path(tempfile.mkdtemp(prefix="cfs-fsck-"))
    results: list[dict] = []
    pg = None
    if args.postgres and available():
        pg = PgServer()
        pg.start()
    elif args.postgres:
        say("no PostgreSQL server programs (scripts/setup.sh installs them): DuckDB only")
    try:
        for n in sizes:
            data = base / f"n{n}"
            if args.reuse and (args.reuse / f"n{n}").is_dir():
                say(f"N={n:,}: copying {args.reuse / f'n{n}'}")
                shutil.copytree(args.reuse / f"n{n}", data)
                build = {"reused": str(args.reuse / f"n{n}")}
            else:
                build = build_store(data, n)
            r = measure(Store(data / "contextfs.duckdb"), n, args.changes, rng, args.repeat)
            r["build"] = build
            if pg is not None and n <= args.pg_max:
                say(f"N={n:,}: copying the store into PostgreSQL")
                dsn = pg.create_database(f"n{n}")
                copy_to_pg(data / "contextfs.duckdb", dsn)
                r["postgresql"] = measure(open_store(dsn), n, args.changes, rng, args.repeat)
            if args.mounts:
                mnt = base / f"mnt{n}"
                mnt.mkdir()
                try:
                    r["mounts"] = measure_mounts(data, mnt, n)
                finally:
                    unmount(mnt)
            results.append(r)
            shutil.rmtree(data, ignore_errors=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
        if pg is not None:
            pg.close()
    print(table(results))
    print()
    on_pg = [r for r in results if "postgresql" in r]
    if on_pg:
        print("PostgreSQL (the same stores copied in):\n")
        print(table([r["postgresql"] for r in on_pg]))
        print()
    if args.mounts:
        print(mount_table(results))
        print()
    for r in results:
        print(f"N={r['n']:,}: mount check {r['mount_describe']}")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = args.json or Path("bench-results") / f"bench_fsck-{stamp}.json"
    write_json(
        path,
        {
            "machine": machine_info(),
            "sizes": sizes,
            "quick": args.quick,
            "repeat": args.repeat,
            "results": results,
        },
    )
    say(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
