"""Benchmark search through a ContextFS mount against the raw floor of the same indexes.

What it measures, for each store size N (default 1,000, 10,000 and 100,000 nodes):

1. Builds a store of N nodes IN-PROCESS with the real `Memory` API (`create_node` +
   `save_l2`, 2,000 nodes per transaction; building through the mount runs at about
   60 nodes/s): the known-answer corpus of `contextfs/testing/search_corpus.py` (22 targets,
   240 filler notes) plus generated nodes `user/u0..u3/{preferences,entities}/topic-NNNNNN`.
   Sizes up to `--prose-max` get prose L2s (400-1,500 characters: L0, L1 and one or two L2 chunks);
   larger sizes get one-sentence L2s, for which L0 = L1 = L2 and the indexer keeps one unit.
2. Indexing throughput: `Indexer.rebuild_sync` (what `contextfs reindex` runs) over the N
   nodes, against raw `LocalEmbedder.embed` of exactly the same unit texts (`units_of`
   after the indexer's de-duplication), in the same process: half of the raw pass before
   the rebuild and half after it, so load changes on the machine hit both. Units/s and ratio.
   Above `--synthetic-above` nodes the model is too slow for the time a run can take (100k
   units at about 100 units/s is 17 minutes, twice): the indexer's embedder then embeds the
   first `--real-vectors` unit texts (the corpus first) for real and gives every later unit a
   noisy copy of one of them (cosine about 0.9). That row measures the index pipeline
   without the model and is marked SYNTHETIC in the table and the JSON.
3. Copies the data dir (DuckDB lets one process open a file), mounts the original with
   `contextfs mount`, waits for `.status` to say `index: ready` with queue 0 (the daemon
   opens the pre-built index; a rebuild "from scratch" in the log is reported as an error).
4. Query latency, `--rounds` rounds over about 30 distinct questions (the corpus targets plus
   generic ones; each round asks under a different `@budget=` so every first read is a
   fresh search), alternating per question between:
   - mount: read `.query/@k=10,budget=B/<question>/_context.md` (lookup, search, pack, read);
     then the same file again (cached: the generation did not change);
   - raw floor, in-process on the copy: `embedder.embed([q])` + `VectorIndex.search` +
     `TextIndex.search` at the depths `Searcher.search` uses, no fusion, no daemon;
   - in-process full: `Searcher.search` + `pack_context` on the copy (what the daemon does,
     without FUSE and the daemon's event loop).
5. fsync-to-searchable, `--fsync-trials` times through the mount: `mkdir` a node, write an
   L2 with a unique nonsense word, `fsync`, close, then read `.query/<word>/_results.json`
   and check that the node is the top hit. Counted apart: a node missing from the results
   (fsync is the index barrier: that is a bug) and a node found but ranked below another.
6. Reads the daemon's VmRSS/VmHWM, unmounts (always), scans `contextfs.log` for warnings.

`--compare REF --store DIR` measures no new store: it asks the questions of step 4 of a
store a `--keep` run left (its `data-copy`, indexes included) with REF's `contextfs/`
(extracted with `git archive`) and with this checkout's, in worker processes run
alternately (`--runs` each), each on a fresh copy of the store: in-process (raw floor and
`Searcher.search` + `pack_context`, in alternating order) and, unless `--no-mount`, through
a mount by that side's daemon (first read of `_context.md`, next to its own raw floor). It
prints the p50s and their ratios to the raw floor per side, and exits 1 when a
`_context.md` or `_results.json` differs between the sides or between two runs of one: a
change meant to make search faster must not change what it answers.

It prints a markdown table (metric | N | raw | contextfs | ratio | target | pass/fail) and
writes every number to JSON. Targets: `_context.md` p50 <= 1.5x the raw floor, p99 <= 100 ms
(stated for 100k, checked at every size), fsync-to-searchable p50 <= 100 ms with no misses,
indexing >= 70% of raw embedding throughput. Missed targets are listed; the exit status is
non-zero only when the benchmark itself fails (mount error, a hang, a rebuild at mount).

Run from the repository root:

    .venv/bin/python scripts/bench_search.py                    # 1k, 10k, 100k (~25 min here)
    .venv/bin/python scripts/bench_search.py --quick            # CI smoke: N = 300, ~1 minute
    .venv/bin/python scripts/bench_search.py --sizes 1000,10000 --json /tmp/s.json --keep
    .venv/bin/python scripts/bench_search.py --compare main --store "$KEPT/data-copy"
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from dataclasses import asdict, dataclass
from pathlib import Path

from contextfs.app import load_all_types
from contextfs.config import load_config
from contextfs.index.embed import LocalEmbedder
from contextfs.memory.service import Memory
from contextfs.search.bundle import pack_context, results_json
from contextfs.search.indexer import Indexer, _distinct, units_of
from contextfs.search.retrieval import (
    QueryOptions,
    Searcher,
    keywords,
    unit_depth,
)
from contextfs.store import Store
from contextfs.testing import (
    Progress,
    cli_mount,
    cli_umount,
    daemon_pid,
    log_problems,
    machine_info,
    proc_status,
    say,
    stats,
    wait_index_ready,
    write_json,
    write_synced,
)
from contextfs.testing.bench_embedder import BenchEmbedder
from contextfs.testing.prose import WORDS, sentence
from contextfs.testing.search_corpus import TARGETS, filler

SEED = 20261130
MODEL = "all-MiniLM-L6-v2"
OWNERS = ("u0", "u1", "u2", "u3")
TYPE_DIRS = ("preferences", "entities")
TX_NODES = 2000  # nodes per store transaction while building
READY_TIMEOUT = 900.0  # seconds for the daemon to load the model and open the indexes

TARGET_P50_RATIO = 1.5
TARGET_P99_S = 0.100
TARGET_FSYNC_P50_S = 0.100
TARGET_INDEX_RATIO = 0.70

# Generic questions next to the corpus targets: they hit filler and generated nodes.
EXTRA_QUESTIONS = [
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
]

# --------------------------------------------------------------------------------------
# Text of the generated nodes


def short_text(rng: random.Random, i: int) -> str:
    """One plain sentence under 120 characters (the L0 limit): L0 = L1 = L2, one unit.
    No markup (the summariser strips it, which would make L0 differ from L2)."""
    words = [rng.choice(WORDS) for _ in range(rng.randint(8, 14))]
    words.insert(rng.randrange(len(words)), f"{i % 97} {rng.choice(WORDS)}")
    text = " ".join(words)[:112].rsplit(" ", 1)[0]
    return text[0].upper() + text[1:] + ".\n"


def prose_text(rng: random.Random, i: int) -> str:
    """400-1,500 characters of prose in two to four paragraphs."""
    target = rng.randint(400, 1500)
    paras: list[str] = []
    size = 0
    while size < target:
        para = " ".join(sentence(rng) for _ in range(rng.randint(2, 5)))
        paras.append(para)
        size += len(para) + 2
    return "\n\n".join(paras)[:1500].rstrip() + "\n"


def corpus_nodes() -> list[tuple[str, str]]:
    """(node path, L2) of the known-answer corpus used by the search tests."""
    return [(t.path, t.text + "\n") for t in TARGETS] + filler()


def generated_rel(i: int) -> str:
    owner = OWNERS[i % len(OWNERS)]
    tdir = TYPE_DIRS[(i // len(OWNERS)) % len(TYPE_DIRS)]
    return f"user/{owner}/{tdir}/topic-{i:06d}"


# --------------------------------------------------------------------------------------
# Results


@dataclass
class Row:
    metric: str
    n: int
    raw: float | None
    contextfs: float | None
    unit: str = ""
    target: str = ""
    passed: bool | None = None
    note: str = ""

    @property
    def ratio(self) -> float | None:
        if self.raw is None or self.contextfs is None or self.raw <= 0:
            return None
        return self.contextfs / self.raw


def fmt(x: float | None, unit: str) -> str:
    if x is None:
        return "-"
    if unit == "ms":
        return f"{x * 1000:.1f}"
    if unit == "MiB":
        return f"{x / 2**20:.0f}"
    return f"{x:.3g}" if x < 1000 else f"{x:,.0f}"


def table(rows: list[Row]) -> str:
    lines = [
        "| metric | N | raw | contextfs | ratio | target | pass/fail |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        verdict = "-" if r.passed is None else ("pass" if r.passed else "**FAIL**")
        ratio = "-" if r.ratio is None else f"{r.ratio:.2f}x"
        name = r.metric + (f" ({r.unit})" if r.unit else "") + (f" [{r.note}]" if r.note else "")
        lines.append(
            f"| {name} | {r.n:,} | {fmt(r.raw, r.unit)} | {fmt(r.contextfs, r.unit)} "
            f"| {ratio} | {r.target or '-'} | {verdict} |"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------------------
# Building the store and the indexes, in-process


def build_store(data: Path, n: int, prose: bool) -> dict:
    """N nodes through the real Memory API; returns timings. The store is closed after."""
    cfg = load_config(data)
    data.mkdir(parents=True, exist_ok=True)
    types = load_all_types(cfg)
    store = Store(cfg.db_path)
    try:
        memory = Memory(store, types, data_dir=data)
        nodes = corpus_nodes()
        nodes += [(generated_rel(i), None) for i in range(max(0, n - len(nodes)))]
        nodes = nodes[:n]
        prog = Progress(f"build store N={n} ({'prose' if prose else 'one-sentence'} L2s)", n)
        chars = 0
        for start in range(0, n, TX_NODES):

            def tx(start: int = start) -> None:
                nonlocal chars
                for i in range(start, min(start + TX_NODES, n)):
                    rel, text = nodes[i]
                    kind, owner, tdir, name = rel.split("/")
                    if (kind, owner) not in memory.owners:
                        memory.create_owner(kind, owner)
                    if text is None:
                        rng = random.Random(SEED * 1_000_003 + i)
                        text = prose_text(rng, i) if prose else short_text(rng, i)
                    ctype = memory.types_by_dir[(kind, tdir)]
                    # persist=False: stored with its first version in one insert (mkdir's way)
                    node = memory.create_node((kind, owner), ctype, name, persist=False)
                    memory.save_l2(node, text)
                    chars += len(text)

            with memory.transaction():  # the service's transaction, many nodes per commit
                tx()
            prog.update(min(start + TX_NODES, n))
        elapsed = prog.done()
        return {
            "nodes": len(memory.live),
            "seconds": elapsed,
            "nodes_per_s": n / elapsed,
            "generation": memory.generation,
            "mean_l2_chars": chars / max(n, 1),
        }
    finally:
        store.close()


def node_unit_texts(memory: Memory) -> list[list[str]]:
    """The vector units of every live node, as the indexer makes them, in its order."""
    return [
        [u.text for u in _distinct(units_of(nd))]
        for nd in memory.nodes.values()
        if nd.deleted_at is None
    ]


def build_indexes(data: Path, embedder: LocalEmbedder, synthetic: bool, real_vectors: int) -> dict:
    """Indexer.rebuild_sync over the store. Raw embedding of the same texts is interleaved:
    after each step of the rebuild (64 nodes), the raw pass embeds those nodes' units, so a
    change of load on the machine hits both sides alike."""
    cfg = load_config(data)
    store = Store(cfg.db_path)
    try:
        memory = Memory(store, load_all_types(cfg), data_dir=data)
        per_node = node_unit_texts(memory)
        n = len(per_node)
        n_units = sum(len(t) for t in per_node)
        bench = BenchEmbedder(embedder, real_vectors if synthetic else None)
        indexer = Indexer(memory, cfg.index_dir, lambda: bench, model_name=MODEL)
        label = f"Indexer.rebuild_sync N={n}" + (
            " (synthetic vectors)" if synthetic else " + raw MiniLM on the same units"
        )
        prog = Progress(label, n)
        raw_s = 0.0
        done_nodes = 0

        def step(done: int, _total: int) -> None:
            nonlocal raw_s, done_nodes
            if not synthetic:
                texts = [t for ts in per_node[done_nodes:done] for t in ts]
                t0 = time.perf_counter()
                if texts:
                    embedder.embed(texts)
                raw_s += time.perf_counter() - t0
            done_nodes = done
            prog.update(done)

        total = indexer.rebuild_sync(progress=step)
        rebuild_s = prog.done() - raw_s
        indexer.text.close()  # release tantivy's writer lock before the daemon opens it
        units = len(indexer.digests)
        if units != n_units:
            raise RuntimeError(
                f"the indexer made {units} vector units, the raw pass has "
                f"{n_units}: they must be the same texts"
            )
        out: dict = {
            "nodes": n,
            "units": units,
            "synthetic": synthetic,
            "indexed_nodes": total,
            "rebuild_s": rebuild_s,
            "rebuild_units_per_s": units / rebuild_s,
            "model_s_in_rebuild": bench.model_seconds,
            "model_texts_in_rebuild": bench.model_texts,
            "synthetic_texts": bench.synthetic_texts,
            "pipeline_s_excl_model": rebuild_s - bench.model_seconds,
            "generation": indexer.generation,
        }
        if synthetic:
            # The model's rate on the texts it did embed, for a projection only.
            out["raw_units_per_s"] = bench.model_texts / max(bench.model_seconds, 1e-9)
            out["raw_s"] = None
        else:
            out["raw_s"] = raw_s
            out["raw_units_per_s"] = units / raw_s
        return out
    finally:
        store.close()


class InProcess:
    """The same indexes opened in this process, on a copy of the data dir."""

    def __init__(self, data: Path, embedder: LocalEmbedder) -> None:
        cfg = load_config(data)
        self.store = Store(cfg.db_path)
        self.memory = Memory(self.store, load_all_types(cfg), data_dir=data)
        self.indexer = Indexer(self.memory, cfg.index_dir, lambda: embedder, model_name=MODEL)
        self.indexer.open_sync(embedder)  # the snapshot the rebuild wrote; never rebuilds
        if self.indexer.generation != self.memory.generation:
            raise RuntimeError("the copied index does not match the copied store")
        self.searcher = Searcher(self.memory, self.indexer)
        self.embedder = embedder

    def raw_floor(self, question: str, scope: str, k: int) -> float:
        """Query embedding + hnswlib + tantivy at Searcher's depths; no fusion or packing."""
        ix = self.indexer
        depth = unit_depth(QueryOptions(k=k))
        t0 = time.perf_counter()
        qvec = self.embedder.embed([question])[0]
        ix.vectors.search(qvec, depth)
        ix.text.search(keywords(question), depth, path_prefix=scope or None)
        return time.perf_counter() - t0

    def full(self, question: str, scope: str, opts: QueryOptions) -> tuple[float, str]:
        t0 = time.perf_counter()
        res = self.searcher.search(question, scope, opts)
        text = pack_context(question, scope, res, opts.budget)
        return time.perf_counter() - t0, text

    def close(self) -> None:
        self.indexer.text.close()
        self.store.close()


# --------------------------------------------------------------------------------------
# Through the mount


def qname(question: str) -> str:
    return urllib.parse.quote(question, safe=" ?',")


def qdir(mnt: Path, question: str, scope: str, opts: str) -> Path:
    base = (mnt / scope / ".query") if scope else mnt / ".query"
    return base / opts / qname(question)


_FIRST_HIT = re.compile(r"^## (\S+)(?: · |$)", re.M)


def first_hit(context_md: str, scope: str = "") -> str | None:
    """The node of the bundle's first passage (headings are paths under the scope)."""
    m = _FIRST_HIT.search(context_md)
    if not m:
        return None
    path = m.group(1)
    return f"{scope}/{path}" if scope and not path.startswith(("user/", "agent/")) else path


def questions(limit: int) -> list[tuple[str, str, str | None]]:
    """(question, scope, expected top node path or None)."""
    qs = [(t.question, t.scope, t.path) for t in TARGETS]
    qs += [(q, "", None) for q in EXTRA_QUESTIONS]
    return qs[:limit]


def measure_queries(
    mnt: Path, inproc: InProcess, qs: list[tuple[str, str, str | None]], rounds: int
) -> dict:
    k, budget0 = 10, 2000
    mount_first: list[float] = []
    mount_cached: list[float] = []
    raw: list[float] = []
    full: list[float] = []
    correct_mount = correct_inproc = agree = expected = 0
    prog = Progress("queries (mount, raw floor, in-process)", rounds * len(qs))
    # Warm both sides once (first model call, page cache of the index files): unmeasured.
    inproc.raw_floor("warm up", "", k)
    (qdir(mnt, "warm up", "", "@k=10,budget=1999") / "_context.md").read_bytes()
    for r in range(rounds):
        budget = budget0 + r  # a fresh options dir per round: every first read is a search
        opts_seg = f"@k={k},budget={budget}"
        opts = QueryOptions(k=k, budget=budget)
        for j, (question, scope, want) in enumerate(qs):
            path = qdir(mnt, question, scope, opts_seg) / "_context.md"

            def through_mount(path: Path = path) -> str:
                t0 = time.perf_counter()
                data = path.read_bytes()
                mount_first.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                again = path.read_bytes()
                mount_cached.append(time.perf_counter() - t0)
                if again != data:
                    raise RuntimeError(f"cached re-read of {path} differs")
                return data.decode()

            def in_process(
                question: str = question, scope: str = scope, opts: QueryOptions = opts
            ) -> str:
                raw.append(inproc.raw_floor(question, scope, k))
                t, text = inproc.full(question, scope, opts)
                full.append(t)
                return text

            if (r + j) % 2 == 0:
                got_mount, got_inproc = through_mount(), in_process()
            else:
                got_inproc = in_process()
                got_mount = through_mount()
            top_m, top_i = first_hit(got_mount, scope), first_hit(got_inproc, scope)
            agree += top_m == top_i
            if want is not None and r == 0:
                expected += 1
                correct_mount += top_m == want
                correct_inproc += top_i == want
            prog.update(r * len(qs) + j + 1)
    prog.done()
    return {
        "questions": len(qs),
        "rounds": rounds,
        "mount_first": stats(mount_first),
        "mount_cached": stats(mount_cached),
        "raw_floor": stats(raw),
        "inproc_full": stats(full),
        "top1_expected": expected,
        "top1_correct_mount": correct_mount,
        "top1_correct_inproc": correct_inproc,
        "top1_agree": agree,
        "samples": {
            "mount_first": mount_first,
            "mount_cached": mount_cached,
            "raw_floor": raw,
            "inproc_full": full,
        },
    }


def nonsense_word(rng: random.Random) -> str:
    syll = ("zor", "blax", "quin", "vex", "plo", "trum", "gask", "fid", "wub", "kre", "myr")
    return "".join(rng.choice(syll) for _ in range(4)) + secrets.token_hex(2).translate(
        str.maketrans("0123456789", "ghijklmnop")
    )


def measure_fsync(mnt: Path, trials: int) -> dict:
    rng = random.Random(SEED + 99)
    times: list[float] = []
    phases: dict[str, list[float]] = {"write_fsync": [], "query": []}
    misses: list[str] = []  # not in the results at all: the fsync barrier failed
    not_top: list[str] = []  # searchable, but another node ranked first
    ranks: list[int | None] = []
    prog = Progress("fsync-to-searchable", trials)
    for i in range(trials):
        word = nonsense_word(rng)
        rel = f"user/u0/preferences/fsync-{i:03d}-{secrets.token_hex(3)}"
        t0 = time.perf_counter()
        node = mnt / rel
        node.mkdir()
        write_synced(node / "L2.md", f"She keeps a {word} on the shelf by the window.\n")
        t1 = time.perf_counter()
        hits = json.loads((mnt / ".query" / word / "_results.json").read_text())["hits"]
        t2 = time.perf_counter()
        times.append(t2 - t0)
        phases["write_fsync"].append(t1 - t0)
        phases["query"].append(t2 - t1)
        rank = next((h["rank"] for h in hits if h["path"] == rel), None)
        ranks.append(rank)
        if rank != 1:
            (misses if rank is None else not_top).append(
                f"{word}: expected {rel}, got {[h['path'] for h in hits[:3]]}"
            )
        prog.update(i + 1)
    prog.done()
    return {
        "trials": trials,
        "total": stats(times),
        "phase_p50": {k: statistics.median(v) for k, v in phases.items()},
        "misses": misses,
        "not_top": not_top,
        "ranks": ranks,
        "samples": times,
    }


# --------------------------------------------------------------------------------------
# One size, end to end


def run_size(n: int, args: argparse.Namespace, embedder: LocalEmbedder) -> tuple[dict, list[Row]]:
    prose = n <= args.prose_max
    synthetic = n > args.synthetic_above
    base = Path(tempfile.mkdtemp(prefix=f"bench_search-{n}-"))
    data, copy, mnt = base / "data", base / "data-copy", base / "mnt"
    mnt.mkdir()
    result: dict = {
        "n": n,
        "tmp": str(base),
        "l2": "prose" if prose else "one sentence",
        "synthetic_vectors": synthetic,
    }
    rows: list[Row] = []
    inproc: InProcess | None = None
    try:
        result["build"] = build_store(data, n, prose)
        ix = build_indexes(data, embedder, synthetic, args.real_vectors)
        result["index"] = ix
        say(
            f"N={n}: {ix['units']} units ({ix['units'] / n:.2f}/node); rebuild "
            f"{ix['rebuild_units_per_s']:.0f} units/s (model {ix['model_s_in_rebuild']:.1f}s of "
            f"{ix['rebuild_s']:.1f}s), raw MiniLM {ix['raw_units_per_s']:.0f} units/s"
        )
        shutil.copytree(data, copy)
        say(f"N={n}: mounting {mnt} (data dir {data})")
        t0 = time.monotonic()
        cli_mount(mnt, data, timeout=600)
        ready_s, status = wait_index_ready(mnt, READY_TIMEOUT)
        result["mount_to_ready_s"] = time.monotonic() - t0
        pid = daemon_pid(mnt)
        result["daemon_pid"] = pid
        result["rss_ready"] = proc_status(pid) if pid else None
        say(f"N={n}: index ready {result['mount_to_ready_s']:.1f}s after mount")
        inproc = InProcess(copy, embedder)
        qs = questions(args.questions)
        result["queries"] = measure_queries(mnt, inproc, qs, args.rounds)
        result["fsync"] = measure_fsync(mnt, args.fsync_trials)
        if pid:
            result["rss_after"] = proc_status(pid)
        result["status"] = (mnt / ".status").read_text()
    finally:
        if inproc is not None:
            inproc.close()
        err = cli_umount(mnt)
        if err:
            say(f"N={n}: unmount problem: {err}")
            result["umount_error"] = err
        log = data / "contextfs.log"
        result["log_problems"] = log_problems(log)
        text = log.read_text(errors="replace") if log.exists() else ""
        result["rebuilt_at_mount"] = "from scratch" in text
        if not args.keep and not os.path.ismount(mnt):
            shutil.rmtree(base, ignore_errors=True)
        elif args.keep:
            say(f"N={n}: kept {base}")
    if result["rebuilt_at_mount"]:
        raise RuntimeError(f"N={n}: the daemon rebuilt the index instead of opening it")

    q, f, ix = result["queries"], result["fsync"], result["index"]
    p50_target = f"<= {TARGET_P50_RATIO:g}x raw"
    rows.append(
        Row(
            "_context.md read p50, computed",
            n,
            q["raw_floor"]["p50"],
            q["mount_first"]["p50"],
            "ms",
            p50_target,
            q["mount_first"]["p50"] <= TARGET_P50_RATIO * q["raw_floor"]["p50"],
        )
    )
    rows.append(
        Row(
            "_context.md read p99, computed",
            n,
            q["raw_floor"]["p99"],
            q["mount_first"]["p99"],
            "ms",
            f"<= {TARGET_P99_S * 1000:.0f} ms",
            q["mount_first"]["p99"] <= TARGET_P99_S,
        )
    )
    rows.append(
        Row(
            "_context.md re-read p50, cached",
            n,
            q["raw_floor"]["p50"],
            q["mount_cached"]["p50"],
            "ms",
        )
    )
    rows.append(
        Row(
            "in-process search+pack p50 (no FUSE)",
            n,
            q["raw_floor"]["p50"],
            q["inproc_full"]["p50"],
            "ms",
        )
    )
    rows.append(
        Row(
            "in-process search+pack p99 (no FUSE)",
            n,
            q["raw_floor"]["p99"],
            q["inproc_full"]["p99"],
            "ms",
        )
    )
    fs = f["total"]
    rows.append(
        Row(
            "fsync-to-searchable p50",
            n,
            None,
            fs["p50"],
            "ms",
            f"<= {TARGET_FSYNC_P50_S * 1000:.0f} ms",
            fs["p50"] <= TARGET_FSYNC_P50_S,
        )
    )
    rows.append(Row("fsync-to-searchable p99", n, None, fs["p99"], "ms"))
    rows.append(
        Row(
            "fsync-to-searchable: new node not top hit",
            n,
            None,
            float(len(f["misses"]) + len(f["not_top"])),
            "",
            "0",
            not f["misses"] and not f["not_top"],
        )
    )
    rows.append(
        Row(
            "fsync-to-searchable: new node not found at all",
            n,
            None,
            float(len(f["misses"])),
            "",
            "0",
            not f["misses"],
        )
    )
    if synthetic:
        rows.append(
            Row(
                "index pipeline excl. model",
                n,
                None,
                ix["units"] / max(ix["pipeline_s_excl_model"], 1e-9),
                "units/s",
                note="SYNTHETIC vectors",
            )
        )
    else:
        rows.append(
            Row(
                "bulk indexing throughput",
                n,
                ix["raw_units_per_s"],
                ix["rebuild_units_per_s"],
                "units/s",
                f">= {TARGET_INDEX_RATIO:.0%} raw",
                ix["rebuild_units_per_s"] >= TARGET_INDEX_RATIO * ix["raw_units_per_s"],
            )
        )
    rss = result.get("rss_after") or {}
    rows.append(Row("daemon VmRSS after run", n, None, rss.get("VmRSS"), "MiB"))
    rows.append(Row("daemon VmHWM (peak)", n, None, rss.get("VmHWM"), "MiB"))
    return result, rows


# --------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------
# Two checkouts on one kept store (`--compare`)

REPO = Path(__file__).resolve().parent.parent
SIDES = ("base", "branch")
DEFAULT_JSON = "bench-results/bench_search.json"
COMPARE_JSON = "bench-results/bench_search-compare.json"


def compare_worker(data: Path, out: Path, rounds: int, limit: int, mount: bool) -> None:
    """One side's run of `--compare` (this process imports that side's `contextfs`):
    in-process and (with `mount`) through a mount, each on its own copy of `data`."""
    base = Path(tempfile.mkdtemp(prefix="bench_search-compare-"))
    copy, mdata, mnt = base / "inproc", base / "mounted", base / "mnt"
    shutil.copytree(data, copy)
    embedder = LocalEmbedder()
    inproc = InProcess(copy, embedder)
    qs = questions(limit)
    got: dict = {"raw": [], "full": [], "mount_raw": [], "mount": [], "texts": {}}
    try:
        if mount:
            shutil.copytree(data, mdata)
            mnt.mkdir()
            cli_mount(mnt, mdata, timeout=600)
            wait_index_ready(mnt, 900)
            (qdir(mnt, "warm up", "", "@k=10,budget=1999") / "_context.md").read_bytes()
        for question, scope, _ in qs:  # unmeasured: first model calls, page cache
            inproc.full(question, scope, QueryOptions())
        for r in range(rounds):
            opts = QueryOptions(k=10, budget=2000 + r)
            for j, (question, scope, _) in enumerate(qs):
                key = f"{r}|{scope}|{question}"
                first_raw = (r + j) % 2 == 0  # alternate which of the two goes first
                raw = inproc.raw_floor(question, scope, opts.k) if first_raw else 0.0
                t0 = time.perf_counter()
                res = inproc.searcher.search(question, scope, opts)
                bundle = pack_context(question, scope, res, opts.budget)
                full = time.perf_counter() - t0
                if not first_raw:
                    raw = inproc.raw_floor(question, scope, opts.k)
                got["raw"].append(raw)
                got["full"].append(full)
                texts = {"context": bundle, "results": results_json(question, scope, res)}
                if mount:
                    path = qdir(mnt, question, scope, f"@k={opts.k},budget={opts.budget}")
                    mount_raw = inproc.raw_floor(question, scope, opts.k)
                    t0 = time.perf_counter()
                    texts["mount"] = (path / "_context.md").read_text()
                    got["mount"].append(time.perf_counter() - t0)
                    got["mount_raw"].append(mount_raw)
                got["texts"][key] = texts
    finally:
        inproc.close()
        if mount:
            cli_umount(mnt)
        shutil.rmtree(base, ignore_errors=True)
    out.write_text(json.dumps(got))


def p50_ms(xs: list[float]) -> float:
    return statistics.median(xs) * 1000


def compare(args: argparse.Namespace) -> int:
    """`--compare REF`: the same questions on the kept store `--store`, by REF's
    `contextfs/` (extracted with `git archive`) and by this checkout's, in worker
    processes run alternately (`--runs` each, so a change of load hits both sides). Prints
    the p50s and their ratios to the raw floor per side; 1 when any bundle or
    `_results.json` differs between the sides or between two runs of one."""
    # here, not at the top: the other side runs this script with its own package
    from contextfs.testing.report import checkout_at

    tmp = Path(tempfile.mkdtemp(prefix="bench_search-compare-"))
    try:
        # each side's contextfs/
        src = {"branch": REPO, "base": checkout_at(REPO, args.compare, tmp / "base")}
        runs: dict[str, list[dict]] = {s: [] for s in SIDES}
        for i in range(args.runs):
            for side in SIDES if i % 2 == 0 else SIDES[::-1]:
                out = tmp / f"{side}-{i}.json"
                cmd = [
                    sys.executable,
                    str(Path(__file__).resolve()),
                    "--compare-worker",
                    str(out),
                    "--store",
                    str(args.store.resolve()),
                ]
                cmd += ["--rounds", str(args.rounds), "--questions", str(args.questions)]
                cmd += ["--no-mount"] if args.no_mount else []
                env = os.environ | {"PYTHONPATH": str(src[side])}
                print(f"run {i + 1}/{args.runs}: {side}", file=sys.stderr, flush=True)
                subprocess.run(cmd, env=env, cwd=src[side], check=True)
                runs[side].append(json.loads(out.read_text()))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    reference = runs["base"][0]["texts"]
    differ = [
        f"{side} run {i + 1}: {key} ({kind})"
        for side in SIDES
        for i, run in enumerate(runs[side])
        for key, texts in run["texts"].items()
        for kind, text in texts.items()
        if text != reference[key][kind]
    ]
    print(f"\nbase = {args.compare}, branch = {REPO} (its working tree)")
    print(f"{args.runs} run(s) a side, {len(reference)} searches a run\n")
    print(
        "| side | raw floor p50 | search+pack p50 | ratio | raw (mount) p50 "
        "| _context.md p50 | ratio |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    summary: dict = {}
    for side in SIDES:
        pooled = {
            k: [x for run in runs[side] for x in run[k]]
            for k in ("raw", "full", "mount_raw", "mount")
        }
        row = {k: p50_ms(v) if v else None for k, v in pooled.items()}
        summary[side] = row
        mount = (
            f"{row['mount_raw']:.1f} ms | {row['mount']:.1f} ms | "
            f"{row['mount'] / row['mount_raw']:.2f}x"
            if row["mount"] is not None
            else "- | - | -"
        )
        print(
            f"| {side} | {row['raw']:.1f} ms | {row['full']:.1f} ms | "
            f"{row['full'] / row['raw']:.2f}x | {mount} |"
        )
    print()
    if differ:
        print(f"DIFFERENT answers: {len(differ)}; first ones:")
        for line in differ[:10]:
            print(f"  {line}")
    else:
        kinds = ", ".join(reference[next(iter(reference))])
        print(f"Same answers: every {kinds} identical across both sides and all runs.")
    samples = {s: [{k: v for k, v in r.items() if k != "texts"} for r in runs[s]] for s in SIDES}
    out = {"machine": machine_info(REPO), "args": vars(args), "summary": summary}
    path = write_json(
        COMPARE_JSON if args.json == DEFAULT_JSON else args.json,
        out | {"samples": samples, "differ": differ},
    )
    print(f"\nJSON written to {path}")
    return 1 if differ else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1000,10000,100000", help="comma separated node counts")
    p.add_argument(
        "--quick",
        action="store_true",
        help="CI smoke check: N = 300, 10 questions, 1 round, 10 fsync trials",
    )
    p.add_argument("--rounds", type=int, default=3, help="rounds over the questions")
    p.add_argument("--questions", type=int, default=32, help="distinct questions (at most 32)")
    p.add_argument("--fsync-trials", type=int, default=30)
    p.add_argument(
        "--prose-max",
        type=int,
        default=1000,
        help="sizes up to this get prose L2s; larger ones one-sentence L2s",
    )
    p.add_argument(
        "--synthetic-above",
        type=int,
        default=10000,
        help="sizes above this index synthetic vectors (see the module docstring)",
    )
    p.add_argument(
        "--real-vectors",
        type=int,
        default=2000,
        help="with synthetic vectors: how many unit texts are embedded for real",
    )
    p.add_argument("--json", default=DEFAULT_JSON, help="where to write JSON")
    p.add_argument("--keep", action="store_true", help="keep the temp dirs (mount is undone)")
    p.add_argument(
        "--compare",
        metavar="REF",
        help="instead: search the kept store --store with REF's code and with this "
        "checkout's, alternately, and check that both answer alike",
    )
    p.add_argument(
        "--store",
        type=Path,
        help="with --compare: a data dir with its indexes (the data-copy a --keep run left)",
    )
    p.add_argument("--runs", type=int, default=2, help="with --compare: runs of each side")
    p.add_argument("--no-mount", action="store_true", help="with --compare: in-process only")
    p.add_argument("--compare-worker", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.compare_worker:
        compare_worker(
            args.store, args.compare_worker, args.rounds, args.questions, not args.no_mount
        )
        return 0
    if args.compare:
        if args.store is None:
            p.error("--compare needs --store")
        return compare(args)
    if args.quick:
        sizes = [300]
        args.rounds, args.questions, args.fsync_trials = 1, 10, 10
    else:
        sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()]

    info = machine_info(Path(__file__).parent)
    say(
        f"bench_search: sizes {sizes}, {args.rounds} round(s) of {args.questions} questions, "
        f"{args.fsync_trials} fsync trials; {info.get('cpus')} cpus, "
        f"load {info.get('loadavg_start')}"
    )
    t0 = time.perf_counter()
    embedder = LocalEmbedder()  # one thread, as the daemon's default
    info["model_load_s"] = time.perf_counter() - t0
    results = []
    all_rows: list[Row] = []
    failed = None
    for n in sizes:
        try:
            r, rows = run_size(n, args, embedder)
        except Exception as exc:  # report what failed, keep the JSON of what ran
            failed = f"N={n}: {type(exc).__name__}: {exc}"
            say(f"bench_search: FAILED {failed}")
            break
        all_rows += rows
        results.append(r)

    print()
    print(table(all_rows))
    print()
    for r in results:
        ix, q, f = r["index"], r["queries"], r["fsync"]
        rss = r.get("rss_after") or {}
        print(
            f"N={r['n']:,}: {r['l2']} L2s, {ix['units']:,} vector units; store built at "
            f"{r['build']['nodes_per_s']:.0f} nodes/s; index ready {r['mount_to_ready_s']:.1f}s "
            f"after mount; daemon RSS {rss.get('VmRSS', 0) / 2**20:.0f} MiB "
            f"(peak {rss.get('VmHWM', 0) / 2**20:.0f} MiB)"
        )
        print(
            f"    top-1 on the {q['top1_expected']} corpus targets: mount "
            f"{q['top1_correct_mount']}, in-process {q['top1_correct_inproc']}; mount and "
            f"in-process agree on {q['top1_agree']}/{q['questions'] * q['rounds']} top hits; "
            f"fsync phases p50: write+fsync {f['phase_p50']['write_fsync'] * 1000:.1f} ms, "
            f"query {f['phase_p50']['query'] * 1000:.1f} ms"
        )
        if r["synthetic_vectors"]:
            model_rate = ix["raw_units_per_s"]
            per_unit = ix["pipeline_s_excl_model"] / max(ix["units"], 1)
            projected = (1 / model_rate) / (1 / model_rate + per_unit)
            print(
                f"    SYNTHETIC VECTORS: {ix['model_texts_in_rebuild']:,} unit texts embedded "
                f"by MiniLM ({model_rate:.0f}/s), the other {ix['synthetic_texts']:,} are "
                f"noisy copies of those; the index pipeline without the model ran at "
                f"{ix['units'] / max(ix['pipeline_s_excl_model'], 1e-9):.0f} units/s "
                f"({per_unit * 1000:.2f} ms/unit): with the real model the projected "
                f"indexing ratio is {projected:.0%} (not measured)"
            )
        else:
            print(
                f"    rebuild: {ix['rebuild_s']:.1f}s of which {ix['model_s_in_rebuild']:.1f}s "
                f"in the model; raw MiniLM over the same {ix['units']:,} texts "
                f"{ix['raw_s']:.1f}s"
            )
        for f_miss in f["misses"][:5]:
            print(f"    fsync miss (not found): {f_miss}")
        for f_miss in f["not_top"][:3]:
            print(f"    fsync: found but not first: {f_miss}")
        print(f"    {len(r['log_problems'])} warning/error line(s) in contextfs.log")
        for line in r["log_problems"][:5]:
            print(f"      {line}")
    missed = [r for r in all_rows if r.passed is False]
    if missed:
        print("\nMissed targets:")
        for r in missed:
            ratio = "" if r.ratio is None else f", {r.ratio:.2f}x raw"
            print(
                f"  - {r.metric} at N={r.n:,}: {fmt(r.contextfs, r.unit)} {r.unit}{ratio} "
                f"(target {r.target})"
            )
    elif all_rows:
        print("\nAll targets met.")

    info["loadavg_end"] = os.getloadavg()
    out = {
        "machine": info,
        "sizes": sizes,
        "args": vars(args),
        "targets": {
            "context_p50_ratio": TARGET_P50_RATIO,
            "context_p99_s": TARGET_P99_S,
            "fsync_p50_s": TARGET_FSYNC_P50_S,
            "index_ratio": TARGET_INDEX_RATIO,
        },
        "rows": [asdict(r) | {"ratio": r.ratio} for r in all_rows],
        "results": results,
        "missed": [f"{r.metric} N={r.n}" for r in missed],
        "error": failed,
    }
    path = write_json(args.json, out)
    print(f"\nJSON written to {path}")
    if failed:
        print(f"benchmark failed: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
