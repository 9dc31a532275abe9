"""Where a question's time goes in the daemon's Python: `Searcher.search`, `pack_context`
(`_context.md`) and `results_json` (`_results.json`), in process, over the questions of the
recall conversations, on a copy of a data dir that `scripts/bench_recall.py --keep` left.

The query embedding is computed once per question and reused (it is the same for every
budget, and it is the raw floor's cost, not the Python's), so the figures are the Python
alone. Prints the p50 of each part per budget; `--profile` adds cProfile's top functions.

    .venv/bin/python scripts/bench_recall.py --set handwritten --split dev --no-off-topic --keep
    .venv/bin/python scripts/profile_search.py /tmp/bench_recall.XXXX/data --budgets 1000,4000
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from contextfs.app import load_all_types
from contextfs.config import load_config
from contextfs.index.embed import LocalEmbedder
from contextfs.memory.service import Memory
from contextfs.search.bundle import pack_context, results_json
from contextfs.search.indexer import Indexer
from contextfs.search.retrieval import QueryOptions, Searcher
from contextfs.store import Store

DATA = Path(__file__).resolve().parent / "recall_data"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("data_dir", type=Path, help="a data dir a --keep run of bench_recall left")
    p.add_argument("--budgets", default="1000,4000")
    p.add_argument("--profile", action="store_true", help="print cProfile's top functions")
    args = p.parse_args(argv)
    budgets = [int(b) for b in args.budgets.split(",")]
    data = Path(tempfile.mkdtemp(prefix="profile-search-")) / "data"
    shutil.copytree(args.data_dir, data)  # DuckDB lets one process open a file
    cfg = load_config(data)
    store = Store(cfg.db_path)
    try:
        memory = Memory(store, load_all_types(cfg), data_dir=data)
        embedder = LocalEmbedder()
        indexer = Indexer(memory, cfg.index_dir, lambda: embedder, model_name=embedder.name)
        indexer.open_sync(embedder)
        owners = {o for kind, o in store.owners() if kind == "user"}  # the conversations
        questions = []
        for path in sorted(DATA.glob("*/*.json")):
            conv = json.loads(path.read_text())
            if conv["id"] in owners:
                questions += [(f"user/{conv['id']}", q["question"]) for q in conv["questions"]]
        searcher = Searcher(memory, indexer)
        vectors: dict[tuple[str, ...], object] = {}
        embed = embedder.embed

        def once(texts: list[str]) -> object:
            key = tuple(texts)
            if key not in vectors:
                vectors[key] = embed(texts)
            return vectors[key]

        embedder.embed = once  # type: ignore[method-assign]
        for scope, q in questions:  # warm: every question's vector and the node caches
            searcher.search(q, scope, QueryOptions(budget=budgets[0]))
        prof = cProfile.Profile() if args.profile else None
        print("| budget | questions | search p50 ms | _context.md p50 ms | _results.json p50 ms |")
        print("|---:|---:|---:|---:|---:|")
        for budget in budgets:
            parts: dict[str, list[float]] = {"search": [], "pack": [], "json": []}
            for scope, q in questions:
                if prof is not None:
                    prof.enable()
                t0 = time.perf_counter()
                res = searcher.search(q, scope, QueryOptions(budget=budget))
                t1 = time.perf_counter()
                pack_context(q, scope, res, budget)
                t2 = time.perf_counter()
                results_json(q, scope, res)
                t3 = time.perf_counter()
                if prof is not None:
                    prof.disable()
                parts["search"].append(t1 - t0)
                parts["pack"].append(t2 - t1)
                parts["json"].append(t3 - t2)
            p50 = {k: statistics.median(v) * 1000 for k, v in parts.items()}
            print(
                f"| {budget} | {len(questions)} | {p50['search']:.2f} | {p50['pack']:.2f} "
                f"| {p50['json']:.2f} |"
            )
        if prof is not None:
            pstats.Stats(prof, stream=sys.stdout).sort_stats("cumulative").print_stats(40)
        indexer.text.close()
    finally:
        store.close()
        shutil.rmtree(data.parent, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
