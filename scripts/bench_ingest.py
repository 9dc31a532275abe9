"""Benchmark transcript ingest through a ContextFS mount: turns/s end to end, and the time
until the memories extracted from a transcript are searchable.

What it measures, on one fresh mount with the embedded defaults (no config file: rule
extraction offline, search on with the local MiniLM model):

1. Mounts a temp data dir with `contextfs mount` and waits for `.status` to say
   `index: ready` with queue 0 before anything is timed (the model load is not ingest).
2. Generates transcripts deterministically (seeded): `--transcripts` N of `--turns` T turns
   (default 50 x 20; `--quick` 5 x 10), JSONL `{"role","content","id","timestamp"}` lines.
   Turns are templated first-person facts with varied names, places, jobs, relations, dates
   and preferences (so the rule extractor routes profile, entity, event and preference
   memories, with collisions across transcripts as a real user repeats themself), assistant
   replies, and verbatim runs of turns from `tests/corpus/transcripts/` (tool traces,
   decisions, questions that must extract nothing). Every transcript carries one UNIQUE
   FACT: a preference naming a made-up word ("Also, I prefer the zorblaxquin notebook over
   the usual ones."), which extraction turns into its own `preferences/<word>-...` node.
3. Stream phase (what the issue asks): the N files are written into `.inbox/` one after
   the other (open, write, close; no waiting in between). Then one polling loop, every
   `--poll` (50 ms): `.status` (the index generation, kept as a timeline), the `.report.md`
   of every file not done yet, and for every file whose report is done but whose fact is not
   yet the top hit, `.query/<made-up word>/_results.json`. Reading a query directory is a
   search, but the daemon reuses a result directory while the index generation has not
   changed, so a new search happens only after the index moved; reads and new searches are
   both counted (the searches compete with ingest for the CPU). The node expected on top is
   the one the report lists with the made-up word in its path.
   Measured: turns/s from the first write to the last report showing done; per-file
   latency close -> report done (queueing included: files arrive faster than they are
   processed); close -> top hit and report done -> top hit, capped at `--cap` (60 s) after
   the close. A fact that missed the cap is asked once more after the index settled, to
   tell "late" from "never".
4. Paced phase: `--paced` K more transcripts, each dropped only when the previous one is
   done and searchable (or given up), so close -> done and close -> searchable are the
   latencies without a queue. Same polling.
5. Reads the daemon's VmRSS/VmHWM (at ready, after each phase), counts the nodes the reports
   say were created (sessions and memories) and the node directories in the tree before and
   after, unmounts (always), scans `contextfs.log` for warnings and errors.

It prints a markdown table (metric | value | notes) and writes every number and sample to
JSON (every per-file sample, the index timelines). The exit status is non-zero when the
benchmark fails or ContextFS did: a report that never reaches done, a unique fact not
extracted or not the top hit within the cap, an unmount error, or a warning/error line in
`contextfs.log`.

`--backlog` measures instead whether a real-sized import stalls the mount (issue 24):

1. Generates (seeded) a ChatGPT data export `conversations.json` of `--export-mb` (60, under
   the inbox's 64 MiB `max_inbox_size`;
   `--quick` 2): conversations with unique titles over two years, each a chain root (no
   message) -> system (empty) -> 4-40 user/assistant turns in the vocabulary above. The
   ground truth is the conversations and their turns.
2. Mounts a fresh data dir (embedded defaults), waits for the index to be ready, and starts
   a probe thread: every second a new node `user/default/preferences/probe-<i>` whose L2
   says `probe zq<i>xv`, written open -> write -> fsync -> close (fsync timed); then its
   `.query/zq<i>xv/_results.json` every 50 ms until the probe is the top hit (write ->
   BM25, with the `searched_by` and `note` of that answer), and its meta.yaml until
   `indexed_version` equals `version` (write -> vectors: the urgent lane embedded it, or
   the cursor passed it); each capped at `--cap` s. No question sharing no word with the
   probe is asked: a made-up word has no reliable semantic neighbour.
3. Copies the export into `.inbox/` and samples `.status.json` and the report every 0.5 s
   (the timeline of both cursors, `index.backlog`, the report's state line). When the
   report says `processing (K of N conversations)` with K at 25, 50 and 75 % of N (or,
   if the report is done first, the vector cursor that far from where it was at the copy
   to the store generation when the report was done), `contextfs umount` (timed) and a
   mount of the same data dir; the probe waits meanwhile, and the probes pending across
   an unmount are left out of the latencies.
4. Once the report is done and the index drained (ready, queue 0, no backlog), stops the
   probe and reads the title and `turns` of the front matter of every
   `user/default/sessions/*/L2.md` (a long conversation is archived as `<title> part <i>`):
   conversations missing, archived twice, turns kept against generated.
5. Prints a table (metric | value | target | ok) with the daemon's peak VmHWM over its
   four lives, and writes every sample to JSON. Targets: probe fsync p99 <= 100 ms, write
   -> BM25 p99 <= 1 s, write -> vectors p99 <= 10 s, each umount <= 5 s, every conversation
   archived once with all its turns. Lost or duplicated conversations, a failed unmount, a
   report never done, an index not drained in `--drain-timeout`, a probe never the BM25 top
   hit or a warning in `contextfs.log` exit non-zero; a missed timing target only with
   `--strict`.

Run from the repository root:

    .venv/bin/python scripts/bench_ingest.py                  # 50 x 20 turns + 10 paced
    .venv/bin/python scripts/bench_ingest.py --quick          # CI smoke: 5 x 10 + 3 paced
    .venv/bin/python scripts/bench_ingest.py --transcripts 200 --turns 40 --json /tmp/i.json
    .venv/bin/python scripts/bench_ingest.py --backlog        # 100 MB ChatGPT export
    .venv/bin/python scripts/bench_ingest.py --backlog --quick --json /tmp/b.json  # 2 MB
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from contextfs.testing import (
    Progress,
    cli_mount,
    cli_umount,
    contextfs_cmd,
    daemon_pid,
    log_problems,
    machine_info,
    proc_status,
    say,
    stats,
    wait_index_ready,
    write_json,
)
from contextfs.testing.prose import sentence

ROOT = Path(__file__).resolve().parent.parent
SEED = 20261201
CORPUS = ROOT / "tests" / "corpus" / "transcripts"
READY_TIMEOUT = 900.0  # seconds for the daemon to load the model and open the indexes
REPORT_TIMEOUT = 600.0  # seconds after the last close for every report to reach done
SETTLE_TIMEOUT = 120.0  # seconds for the index queue to drain at the end

# --------------------------------------------------------------------------------------
# Deterministic transcripts

FIRST = (
    "Ada",
    "Bruno",
    "Chen",
    "Dana",
    "Emeka",
    "Farah",
    "Goran",
    "Hana",
    "Ines",
    "Jonas",
    "Kofi",
    "Lena",
    "Mateo",
    "Nadia",
    "Oskar",
    "Priya",
    "Quentin",
    "Rosa",
    "Sami",
    "Tara",
)
LAST = (
    "Whitfield",
    "Okafor",
    "Lindqvist",
    "Moreau",
    "Tanaka",
    "Haddad",
    "Novak",
    "Ferreira",
    "Kowalski",
    "Ibrahim",
    "Schulz",
    "Castillo",
    "Andersen",
    "Rossi",
    "Mehta",
)
CITIES = (
    "Lyon",
    "Porto",
    "Oslo",
    "Nairobi",
    "Lima",
    "Montreal",
    "Kyoto",
    "Seville",
    "Tallinn",
    "Ghent",
    "Bologna",
    "Krakow",
    "Valparaiso",
    "Leeds",
    "Aarhus",
)
JOBS = (
    "data engineer",
    "product designer",
    "nurse",
    "physics teacher",
    "backend developer",
    "research scientist",
    "accountant",
    "site reliability engineer",
    "translator",
    "chef",
)
ORGS = (
    "Northwind Logistics",
    "Bluefin Analytics",
    "Harbor Health",
    "Quillmark Press",
    "Tessellate Labs",
    "Granite Bank",
    "Orbit Foods",
    "Lumen Schools",
)
RELATIONS = ("sister", "brother", "cousin", "manager", "neighbour", "friend", "colleague")
PETS = (("dog", ("golden retriever", "beagle", "whippet")), ("cat", ("tabby", "siamese")))
PET_NAMES = ("Rex", "Biscuit", "Pepper", "Mochi", "Juniper", "Olive", "Tofu", "Ziggy")
LOVES = (
    "Thai food",
    "Ethiopian food",
    "hiking",
    "jazz records",
    "board games",
    "sea swimming",
    "Korean food",
    "bouldering",
    "crossword puzzles",
    "gardening",
)
DISLIKES = (
    "cilantro",
    "mushrooms",
    "olives",
    "early meetings",
    "loud restaurants",
    "long flights",
    "spreadsheets with merged cells",
)
PREFERS = (
    "tabs",
    "spaces",
    "vim",
    "emacs",
    "tea",
    "coffee",
    "dark mode",
    "light mode",
    "window seats",
    "aisle seats",
    "metric units",
    "short answers",
)
DESSERTS = ("mango sticky rice", "tiramisu", "pastel de nata", "baklava", "cheesecake")
EVENTS = (
    "team offsite",
    "quarterly planning meeting",
    "product launch",
    "farewell lunch",
    "security review",
    "hackathon",
)
PLACES = ("Canal Street", "Harbour Road", "Market Square", "Old Mill", "Station Hill")
SYLLABLES = (
    "zor",
    "blax",
    "quin",
    "vex",
    "plo",
    "trum",
    "gask",
    "fid",
    "wub",
    "kre",
    "myr",
    "dax",
    "lun",
    "spro",
    "thek",
)

USER_FACTS = (
    "Hi! Quick intro so you stop asking: my name is {first} {last} and I work as a {job} at {org}.",
    "I live in {city}, so my mornings are usually quiet.",
    "My {relation} {other} lives in {city2} and visits every few months.",
    "My {pet} {pet_name} is a {breed}, and {pet_name} hates thunderstorms.",
    "I love {love}, and my favourite dessert is {dessert}.",
    "I can't stand {dislike}, so please keep that out of any plan.",
    "Also I prefer {prefer} over the alternatives.",
    "On {date} we held the {event} at the {place} office.",
    "{other} {last2} is my {relation}, and {other} wants the summary by Friday.",
    "I really dislike {dislike}.",
)
UNIQUE_FACT = (
    "Also, I prefer the {word} notebook over the usual ones.",
    "Honestly I prefer {word} over every other brand of pens.",
    "By the way, I prefer the {word} editor over anything else for drafts.",
    "I really prefer {word} tea over coffee in the afternoon.",
)
ASSISTANT_REPLIES = (
    "Noted, I'll keep that in mind.",
    "Thanks for telling me. Anything else I should remember?",
    "Got it. I'll take that into account from now on.",
    "Understood.",
    "Nice! What would you like to do next?",
    "Okay. I've made a note of it.",
    "That helps, thanks. Shall we continue with the plan?",
)


def corpus_runs() -> list[list[dict]]:
    """Contiguous runs of turns from the JSONL corpus transcripts. Malformed lines and turns
    without content, which some hold on purpose, are skipped (the parser's robustness is
    tested elsewhere; here every turn written must count)."""
    runs: list[list[dict]] = []
    for path in sorted(CORPUS.glob("*.jsonl")):
        turns = []
        for line in path.read_text().splitlines():
            try:
                t = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not isinstance(t, dict):
                continue
            if (
                t.get("role") in ("user", "assistant")
                and isinstance(t.get("content"), str)
                or t.get("role") == "tool"
                and "name" in t
            ):
                turns.append(t)
        if turns:
            runs.append(turns)
    if not runs:
        raise RuntimeError(f"no transcripts found in {CORPUS}")
    return runs


def made_up_word(rng: random.Random, taken: set[str]) -> str:
    while True:
        word = "".join(rng.choice(SYLLABLES) for _ in range(4))
        if word not in taken:
            taken.add(word)
            return word


@dataclass
class Transcript:
    name: str
    word: str  # the made-up word of its unique fact
    turns: int
    data: bytes
    # measured
    close: float = 0.0  # perf_counter after close()
    write_s: float = 0.0
    done: float | None = None
    report: str = ""
    expected: str | None = None  # the node path the report lists with the word
    searchable: float | None = None
    first_hit_seen: float | None = None  # the node was in the hits (any rank)
    reads: int = 0  # reads of its .query/<word>/_results.json
    searches: int = 0  # of those, reads after the index generation changed (a new search)
    last_gen: int = -1
    last_hits: list[str] = field(default_factory=list)
    late: bool = False  # not the top hit within the cap, but once the index settled


def make_transcript(
    i: int, n_turns: int, runs: list[list[dict]], taken: set[str], prefix: str
) -> Transcript:
    rng = random.Random(SEED * 1_000_003 + i * 7 + len(prefix))
    word = made_up_word(rng, taken)
    start = dt.datetime(2026, 5, 1, 9, 0, tzinfo=dt.UTC) + dt.timedelta(
        days=i, minutes=rng.randrange(600)
    )
    # One user wrote every transcript (the inbox's owner): the name stays, the rest varies.
    persona = random.Random(SEED)
    me = {"first": persona.choice(FIRST), "last": persona.choice(LAST)}
    facts = list(USER_FACTS)
    rng.shuffle(facts)  # each template at most once per cycle: no three intros in a row
    body: list[dict] = []
    k = 0
    while len(body) < n_turns - 1:
        if rng.random() < 0.35:  # a run of corpus turns, verbatim
            run = rng.choice(runs)
            a = rng.randrange(len(run))
            for t in run[a : a + rng.randint(2, 5)]:
                body.append({key: v for key, v in t.items() if key not in ("id", "timestamp")})
        else:
            slots = _slots(rng, me, start, topic=False)
            body.append({"role": "user", "content": facts[k % len(facts)].format(**slots)})
            body.append({"role": "assistant", "content": rng.choice(ASSISTANT_REPLIES)})
            k += 1
    body = body[: n_turns - 1]
    fact = {"role": "user", "content": rng.choice(UNIQUE_FACT).format(word=word)}
    body.insert(rng.randrange(len(body) + 1), fact)
    lines = []
    when = start
    for j, t in enumerate(body):
        when += dt.timedelta(seconds=rng.randint(3, 90))
        turn = {"role": t["role"]}
        turn.update({k: v for k, v in t.items() if k != "role"})
        turn["id"] = f"m{j + 1}"
        turn["timestamp"] = when.strftime("%Y-%m-%dT%H:%M:%SZ")
        lines.append(json.dumps(turn, ensure_ascii=False) + "\n")
    return Transcript(f"{prefix}-{i:04d}.jsonl", word, len(body), "".join(lines).encode())


def make_set(
    count: int, n_turns: int, runs: list[list[dict]], taken: set[str], prefix: str
) -> list[Transcript]:
    return [make_transcript(i, n_turns, runs, taken, prefix) for i in range(count)]


# --------------------------------------------------------------------------------------
# Through the mount

_REPORT_NODE = re.compile(r"^- (?:created|changed|unchanged) (\S+)$", re.M)
_REPORT_CREATED = re.compile(r"^- created (\S+)$", re.M)


def drop(inbox: Path, t: Transcript) -> None:
    t0 = time.perf_counter()
    fd = os.open(inbox / t.name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, t.data)
    finally:
        os.close(fd)  # the file is stored on close, processed in the background
    t.close = time.perf_counter()
    t.write_s = t.close - t0


def check_report(inbox: Path, t: Transcript) -> bool:
    text = (inbox / f"{t.name}.report.md").read_text()
    if "state: done" in text or "refused" in text:
        t.done = time.perf_counter()
        t.report = text
        paths = [p for p in _REPORT_NODE.findall(text) if t.word in p]
        t.expected = paths[0] if paths else None
        return True
    return False


def check_query(mnt: Path, t: Transcript, generation: int) -> bool:
    """One read of `.query/<word>/_results.json`. The daemon searches again only when the
    index generation changed since this question was last asked (else the result directory
    is reused), so a read counts as a search when `generation` (read from `.status` just
    before) differs from the last one. True when the expected node is the top hit."""
    hits = json.loads((mnt / ".query" / t.word / "_results.json").read_text())["hits"]
    now = time.perf_counter()
    t.reads += 1
    if generation != t.last_gen:
        t.searches += 1
        t.last_gen = generation
    t.last_hits = [h["path"] for h in hits[:3]]
    if t.first_hit_seen is None and any(h["path"] == t.expected for h in hits):
        t.first_hit_seen = now
    if hits and hits[0]["path"] == t.expected:
        t.searchable = now
        return True
    return False


def poll(
    mnt: Path,
    items: list[Transcript],
    label: str,
    poll_s: float,
    cap: float,
    prog: Progress | None,
    timeline: list[tuple[float, int, int, int]],
    t_origin: float,
) -> None:
    """Every `poll_s`: `.status` (index generation, for the timeline), the reports of files
    not done yet, then the query of every done file whose fact is not yet the top hit, until
    each file is settled: searchable, given up after `cap` s from its close, or its fact
    not extracted. Reading `.status` or a report is itself a FUSE request, and the daemon
    wakes its indexer after any request once something was committed (see the docs)."""
    inbox = mnt / ".inbox"
    waiting = [t for t in items if t.done is None]
    searching = [
        t for t in items if t.done is not None and t.searchable is None and t.expected is not None
    ]
    last_close = max(t.close for t in items)
    while waiting or searching:
        tick = time.perf_counter()
        gen, committed, queue = index_state(mnt)
        if not timeline or timeline[-1][1:] != (gen, committed, queue):
            timeline.append((tick - t_origin, gen, committed, queue))
        for t in list(waiting):
            if check_report(inbox, t):
                waiting.remove(t)
                if t.expected is not None:
                    searching.append(t)
        for t in list(searching):
            if check_query(mnt, t, gen):
                searching.remove(t)
            elif time.perf_counter() - t.close > cap:
                say(
                    f"  {label}: {t.name}: '{t.word}' not the top hit {cap:.0f}s after "
                    f"close; expected {t.expected}, last hits {t.last_hits}; {index_status(mnt)}"
                )
                searching.remove(t)
        if waiting and time.perf_counter() - last_close > REPORT_TIMEOUT:
            raise RuntimeError(
                f"{label}: {len(waiting)} report(s) not done "
                f"{REPORT_TIMEOUT:.0f}s after the last close, e.g. "
                f"{waiting[0].name}"
            )
        if prog is not None:
            prog.update(len(items) - len(waiting) - len(searching))
        rest = poll_s - (time.perf_counter() - tick)
        if rest > 0 and (waiting or searching):
            time.sleep(rest)


def stream_phase(mnt: Path, items: list[Transcript], poll_s: float, cap: float) -> dict:
    inbox = mnt / ".inbox"
    timeline: list[tuple[float, int, int, int]] = []
    turns = sum(t.turns for t in items)
    say(f"stream: dropping {len(items)} transcripts ({turns} turns) into .inbox/ back to back")
    t0 = time.perf_counter()
    for t in items:
        drop(inbox, t)
    dropped = time.perf_counter()
    prog = Progress("stream: files settled (report done, fact searchable)", len(items))
    poll(mnt, items, "stream", poll_s, cap, prog, timeline, t0)
    prog.done()
    last_done = max(t.done or 0.0 for t in items)
    settled = [t.searchable for t in items if t.searchable is not None]
    # the index caught up with everything the stream committed (timeline is from t0)
    caught_up = next(
        (at for at, _g, _c, queue in timeline if queue == 0 and at >= last_done - t0), None
    )
    return {
        "transcripts": len(items),
        "turns": turns,
        "bytes": sum(len(t.data) for t in items),
        "drop_all_s": dropped - t0,
        "first_write_to_last_done_s": last_done - t0,
        "turns_per_s": turns / (last_done - t0),
        "transcripts_per_s": len(items) / (last_done - t0),
        "first_write_to_last_searchable_s": (max(settled) - t0) if settled else None,
        "first_write_to_index_caught_up_s": caught_up,
        "indexed_turns_per_s": turns / caught_up if caught_up else None,
        "query_reads": sum(t.reads for t in items),
        "searches": sum(t.searches for t in items),
        "index_timeline": timeline,
    }


def paced_phase(mnt: Path, items: list[Transcript], poll_s: float, cap: float) -> dict:
    inbox = mnt / ".inbox"
    prog = Progress("paced: one transcript at a time", len(items))
    timeline: list[tuple[float, int, int, int]] = []
    t0 = time.perf_counter()
    for k, t in enumerate(items):
        drop(inbox, t)
        poll(mnt, [t], "paced", poll_s, cap, None, timeline, t0)
        prog.update(k + 1)
    prog.done()
    return {
        "transcripts": len(items),
        "turns": sum(t.turns for t in items),
        "query_reads": sum(t.reads for t in items),
        "searches": sum(t.searches for t in items),
        "index_timeline": timeline,
    }


def count_nodes(mnt: Path) -> int:
    """Node directories (a dir holding L2.md) under user/ and agent/, dot dirs skipped."""
    n = 0
    for top in ("user", "agent"):
        for _dirpath, dirnames, filenames in os.walk(mnt / top):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            n += "L2.md" in filenames
    return n


def index_status(mnt: Path) -> str:
    status = (mnt / ".status").read_text()
    return next((ln for ln in status.splitlines() if ln.startswith("index_generation")), "")


_INDEX_RE = re.compile(r"index_generation: (\d+) \(committed (\d+), queue (\d+)\)")


def index_state(mnt: Path) -> tuple[int, int, int]:
    """(indexed generation, committed generation, queue) from `.status`."""
    m = _INDEX_RE.search(index_status(mnt))
    if not m:
        raise RuntimeError(f"cannot read the index state from .status: {index_status(mnt)!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def recheck_late(mnt: Path, items: list[Transcript]) -> None:
    """After the index settled: is a fact that missed the cap the top hit now?"""
    gen = index_state(mnt)[0]
    for t in items:
        if t.expected is not None and t.searchable is None:
            hits = json.loads((mnt / ".query" / t.word / "_results.json").read_text())["hits"]
            t.last_hits = [h["path"] for h in hits[:3]]
            t.late = bool(hits) and hits[0]["path"] == t.expected
            if t.late and t.first_hit_seen is None:
                t.first_hit_seen = float("nan")
            say(
                f"  after the index settled (generation {gen}): '{t.word}' "
                f"{'IS' if t.late else 'is NOT'} the top hit ({t.last_hits})"
            )


# --------------------------------------------------------------------------------------
# Results


def latencies(items: list[Transcript]) -> dict:
    done = [t for t in items if t.done is not None]
    return {
        "close_to_done": stats([t.done - t.close for t in done]),
        "close_to_searchable": stats(
            [t.searchable - t.close for t in items if t.searchable is not None]
        ),
        "done_to_searchable": stats(
            [
                t.searchable - t.done
                for t in items
                if t.searchable is not None and t.done is not None
            ]
        ),
        "write_close": stats([t.write_s for t in items]),
        "searches_per_fact": stats([float(t.searches) for t in items if t.expected]),
        "reads_per_fact": stats([float(t.reads) for t in items if t.expected]),
    }


def per_item(t: Transcript) -> dict:
    return {
        "name": t.name,
        "word": t.word,
        "turns": t.turns,
        "bytes": len(t.data),
        "write_s": t.write_s,
        "close_to_done_s": None if t.done is None else t.done - t.close,
        "close_to_searchable_s": None if t.searchable is None else t.searchable - t.close,
        "close_to_in_hits_s": None
        if t.first_hit_seen is None
        else t.first_hit_seen - t.close,  # NaN: only seen after the cap
        "expected": t.expected,
        "reads": t.reads,
        "searches": t.searches,
        "late": t.late,
        "last_hits": t.last_hits,
        "created": _REPORT_CREATED.findall(t.report),
        "report_state": t.report.splitlines()[2] if t.report.count("\n") > 2 else t.report,
    }


def ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1000:,.0f} ms"


def table(rows: list[tuple[str, str, str]]) -> str:
    lines = ["| metric | value | notes |", "|---|---:|---|"]
    lines += [f"| {m} | {v} | {n} |" for m, v, n in rows]
    return "\n".join(lines)


def build_rows(r: dict) -> list[tuple[str, str, str]]:
    s, ls, lp = r["stream"], r["stream_latency"], r["paced_latency"]
    rows: list[tuple[str, str, str]] = []
    rows.append(
        (
            "ingest throughput, end to end",
            f"{s['turns_per_s']:.1f} turns/s",
            f"{s['transcripts']} transcripts, {s['turns']} turns: first write to last "
            f"report done {s['first_write_to_last_done_s']:.1f}s "
            f"({s['transcripts_per_s']:.2f} transcripts/s)",
        )
    )
    rows.append(
        (
            "stream: drop every file into .inbox/",
            f"{s['drop_all_s']:.2f} s",
            f"open+write+close, p50 / p99 {ms(ls['write_close']['p50'])} / "
            f"{ms(ls['write_close']['p99'])} per file",
        )
    )
    n = s["transcripts"]
    for key, name, note in (
        ("close_to_done", "close -> report done", "queue included"),
        ("close_to_searchable", "close -> unique fact top hit", "queue included"),
        ("done_to_searchable", "report done -> fact top hit", "under ingest load"),
    ):
        st = ls[key]
        if st:
            within = "" if st["count"] == n else f"; only the {st['count']} of {n} within the cap"
            rows.append(
                (
                    f"stream: {name} p50 / p99",
                    f"{ms(st['p50'])} / {ms(st['p99'])}",
                    f"{note}; max {ms(st['max'])}{within}",
                )
            )
    if s["first_write_to_index_caught_up_s"] is not None:
        rows.append(
            (
                "ingest + indexing throughput",
                f"{s['indexed_turns_per_s']:.1f} turns/s",
                f"first write to index queue 0 after the stream: "
                f"{s['first_write_to_index_caught_up_s']:.1f}s; {r['outbox_rows']:,} "
                f"index rows ({r['outbox_rows'] / s['transcripts']:.1f} per transcript)",
            )
        )
    if s["first_write_to_last_searchable_s"] is not None:
        rows.append(
            (
                "stream: first write -> last fact top hit",
                f"{s['first_write_to_last_searchable_s']:.1f} s",
                f"of those within the cap; {s['query_reads']:,} query reads while "
                f"polling, {s['searches']:,} of them new searches",
            )
        )
    for key, name in (
        ("close_to_done", "close -> report done"),
        ("close_to_searchable", "close -> unique fact top hit"),
        ("done_to_searchable", "report done -> fact top hit"),
    ):
        st = lp[key]
        if st:
            rows.append(
                (
                    f"paced: {name} p50 / p99",
                    f"{ms(st['p50'])} / {ms(st['p99'])}",
                    f"no queue, {st['count']} of {r['paced']['transcripts']} "
                    f"transcripts; max {ms(st['max'])}",
                )
            )
    f = r["facts"]
    rows.append(
        (
            f"unique facts top hit within {r['cap']:.0f} s of close",
            f"{f['searchable']} / {f['total']}",
            f"must be all; {len(f['late'])} more once the index settled; not "
            f"extracted {len(f['not_extracted'])}, never first {len(f['never_top'])}",
        )
    )
    rows.append(
        (
            "nodes created (reports)",
            f"{r['nodes']['created']:,}",
            f"{r['nodes']['sessions']} sessions + {r['nodes']['created_memories']} "
            f"memories; routes: {r['nodes']['changed']} changed, "
            f"{r['nodes']['unchanged']} unchanged",
        )
    )
    rows.append(
        (
            "node directories in the tree",
            f"{r['nodes']['tree_after']:,}",
            f"{r['nodes']['tree_before']} before ingest",
        )
    )
    rss = r.get("rss_after") or {}
    rss0 = r.get("rss_ready") or {}
    rows.append(
        (
            "daemon VmRSS after the run",
            f"{rss.get('VmRSS', 0) / 2**20:.0f} MiB",
            f"{rss0.get('VmRSS', 0) / 2**20:.0f} MiB at index ready; peak (VmHWM) "
            f"{rss.get('VmHWM', 0) / 2**20:.0f} MiB",
        )
    )
    rows.append(
        (
            "index settle after the last phase",
            f"{r['settle_s']:.1f} s",
            "until .status shows queue 0",
        )
    )
    rows.append(("mount -> index ready", f"{r['mount_to_ready_s']:.1f} s", "not timed as ingest"))
    rows.append(("warnings/errors in contextfs.log", str(len(r["log_problems"])), "must be 0"))
    return rows


# --------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict:
    runs = corpus_runs()
    taken: set[str] = set()
    stream_items = make_set(args.transcripts, args.turns, runs, taken, "stream")
    paced_items = make_set(args.paced, args.turns, runs, taken, "paced")
    base = Path(tempfile.mkdtemp(prefix="bench_ingest-"))
    data, mnt = base / "data", base / "mnt"
    mnt.mkdir()
    result: dict = {"tmp": str(base), "data_dir": str(data), "cap": args.cap}
    try:
        say(f"mounting {mnt} (data dir {data}, embedded defaults)")
        t0 = time.monotonic()
        cli_mount(mnt, data, timeout=600)
        wait_index_ready(mnt, READY_TIMEOUT)
        result["mount_to_ready_s"] = time.monotonic() - t0
        pid = daemon_pid(mnt)
        result["daemon_pid"] = pid
        result["rss_ready"] = proc_status(pid) if pid else None
        say(f"index ready {result['mount_to_ready_s']:.1f}s after mount ({index_status(mnt)})")
        tree_before = count_nodes(mnt)

        gen0 = index_state(mnt)[1]
        result["stream"] = stream_phase(mnt, stream_items, args.poll, args.cap)
        result["outbox_rows"] = index_state(mnt)[1] - gen0
        result["rss_after_stream"] = proc_status(pid) if pid else None
        say(f"stream: {result['stream']['turns_per_s']:.1f} turns/s; {index_status(mnt)}")
        result["paced"] = paced_phase(mnt, paced_items, args.poll, args.cap)

        t0 = time.monotonic()
        while index_state(mnt)[2] != 0:
            if time.monotonic() - t0 > SETTLE_TIMEOUT:
                raise RuntimeError(
                    f"index queue not empty after {SETTLE_TIMEOUT:.0f}s: {index_status(mnt)}"
                )
            time.sleep(0.2)
        result["settle_s"] = time.monotonic() - t0
        result["index_after"] = index_status(mnt)
        recheck_late(mnt, stream_items + paced_items)
        tree_after = count_nodes(mnt)
        if pid:
            result["rss_after"] = proc_status(pid)
        result["status"] = (mnt / ".status").read_text()
    finally:
        err = cli_umount(mnt)
        if err:
            say(f"unmount problem: {err}")
            result["umount_error"] = err
        result["log_problems"] = log_problems(data / "contextfs.log")
        if not args.keep and not os.path.ismount(mnt):
            shutil.rmtree(base, ignore_errors=True)
        elif args.keep:
            say(f"kept {base}")

    everything = stream_items + paced_items
    reports = [t.report for t in everything]
    created = [p for rep in reports for p in _REPORT_CREATED.findall(rep)]
    sessions = sum(
        len(re.findall(r"^## Archived\n- (?!not archived)", rep, re.M)) for rep in reports
    )
    result["nodes"] = {
        "created": len(created) + sessions,
        "sessions": sessions,
        "created_memories": len(created),
        "changed": sum(rep.count("\n- changed ") for rep in reports),
        "unchanged": sum(rep.count("\n- unchanged ") for rep in reports),
        "tree_before": tree_before,
        "tree_after": tree_after,
        "created_by_type": _by_type(created),
    }
    result["facts"] = {
        "total": len(everything),
        "searchable": sum(t.searchable is not None for t in everything),
        "not_extracted": [t.name for t in everything if t.done and t.expected is None],
        "late": [t.name for t in everything if t.late],
        "never_top": [
            t.name for t in everything if t.expected and t.searchable is None and not t.late
        ],
        "not_found": [t.name for t in everything if t.expected and t.first_hit_seen is None],
    }
    result["stream_latency"] = latencies(stream_items)
    result["paced_latency"] = latencies(paced_items)
    result["items"] = [per_item(t) for t in everything]
    return result


def _by_type(paths: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for p in paths:
        parts = p.split("/")
        key = parts[2] if len(parts) > 2 else p
        out[key] = out.get(key, 0) + 1
    return out


# --------------------------------------------------------------------------------------
# --backlog: a real-sized ChatGPT export imported while a probe keeps writing

FRACTIONS = (0.25, 0.5, 0.75)  # where the import is interrupted by an unmount + mount
PROBE_EVERY = 1.0  # seconds between probe writes
PROBE_POLL = 0.05  # seconds between reads of a pending probe's .query/<word>/_results.json
# Its meta.yaml is read PROBE_POLL s apart at first, then a tenth of the probe's age apart
# (at most 1 s): dozens of probes may wait for their vectors at once, and reading them all
# every 50 ms would load the daemon being measured. The error stays under 10 %.
META_BACKOFF = (PROBE_POLL, 0.1, 1.0)  # (shortest, fraction of the age, longest)
STATUS_POLL = 0.5  # seconds between samples of .status.json and the inbox report
EXPORT_NAME = "conversations.json"
# targets (timings: a miss is printed, and fails the exit status only with --strict)
FSYNC_P99 = 0.100
BM25_P99 = 1.0
VECTORS_P99 = 10.0
UMOUNT_MAX = 5.0

TITLES = (
    "Trip planning for {city}",
    "Weekend in {city2} with my {relation}",
    "{job} interview prep",
    "Cover letter for {org}",
    "Recipe ideas with {dessert}",
    "Training {pet_name} the {breed}",
    "Getting better at {love}",
    "Switching to {prefer}",
    "Agenda for the {event}",
    "Email to {other} about the {event}",
    "Budget questions at {org}",
    "Moving from {city} to {city2}",
    "Gift ideas for my {relation}",
    "How to avoid {dislike}",
    "Debugging {topic}",
    "Explain {topic} simply",
    "{topic} best practices",
    "Meeting notes from {place}",
)
TOPICS = (
    "python packaging",
    "DuckDB queries",
    "shell scripts",
    "git rebases",
    "flaky unit tests",
    "async code",
    "CSV parsing",
    "regular expressions",
    "Docker builds",
    "SQL joins",
    "memory leaks",
    "cron jobs",
)
QUESTIONS = (
    "Can you help me with {topic}?",
    "What is the best way to handle {topic} for the {event}?",
    "Could you draft a short plan for {title_lc}?",
    "How would you explain this to {other}?",
    "Any tips before the {event} at {org}?",
    "Is it a good idea to do this in {city}?",
    "What should I ask {other} about {topic}?",
)
OPENERS = (
    "Sure, here is how I would approach it.",
    "Good question.",
    "Here's a short plan.",
    "A few things to keep in mind.",
    "Happy to help with that.",
    "Let me break it down.",
) + ASSISTANT_REPLIES


@dataclass
class GenConversation:
    title: str
    turns: int  # non-empty user/assistant messages


@dataclass
class GeneratedExport:
    path: Path
    bytes: int
    conversations: list[GenConversation]

    @property
    def turns(self) -> int:
        return sum(c.turns for c in self.conversations)


def _uuid(rng: random.Random) -> str:
    h = f"{rng.getrandbits(128):032x}"
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:]}"


def _slots(
    rng: random.Random, me: dict[str, str], when: dt.datetime, *, topic: bool = True
) -> dict[str, str]:
    """The fillers of the fact templates (`topic` too: the backlog's conversations), drawn
    in one order so a seed gives the same transcripts."""
    pet, breeds = rng.choice(PETS)
    slots = me | {
        "last2": rng.choice(LAST),
        "job": rng.choice(JOBS),
        "org": rng.choice(ORGS),
        "city": rng.choice(CITIES),
        "city2": rng.choice(CITIES),
        "relation": rng.choice(RELATIONS),
        "other": rng.choice(FIRST),
        "pet": pet,
        "pet_name": rng.choice(PET_NAMES),
        "breed": rng.choice(breeds),
        "love": rng.choice(LOVES),
        "dessert": rng.choice(DESSERTS),
        "dislike": rng.choice(DISLIKES),
        "prefer": rng.choice(PREFERS),
        "event": rng.choice(EVENTS),
        "place": rng.choice(PLACES),
    }
    if topic:
        slots["topic"] = rng.choice(TOPICS)
    slots["date"] = (when - dt.timedelta(days=rng.randint(1, 60))).date().isoformat()
    return slots


def _user_turn(rng: random.Random, slots: dict[str, str]) -> str:
    r = rng.random()
    if r < 0.45:
        text = rng.choice(USER_FACTS).format(**slots)
        if rng.random() < 0.5:
            text += " " + rng.choice(QUESTIONS).format(**slots)
        return text
    if r < 0.8:
        return rng.choice(QUESTIONS).format(**slots)
    return " ".join(sentence(rng) for _ in range(rng.randint(1, 3)))


def _assistant_turn(rng: random.Random) -> str:
    parts = [rng.choice(OPENERS) + " " + " ".join(sentence(rng) for _ in range(rng.randint(1, 4)))]
    for _ in range(rng.randint(0, 3)):
        if rng.random() < 0.35:
            parts.append("\n".join(f"- {sentence(rng)}" for _ in range(rng.randint(2, 5))))
        else:
            parts.append(" ".join(sentence(rng) for _ in range(rng.randint(2, 5))))
    return "\n\n".join(parts)


def chatgpt_conversation(
    rng: random.Random, me: dict[str, str], titles: dict[str, int]
) -> tuple[dict, GenConversation]:
    """One conversation of a ChatGPT data export: a linear chain root (no message) ->
    system (empty) -> user/assistant alternating, 4-40 turns, over two years."""
    start = 1_704_067_200.0 + rng.uniform(0, 2 * 365 * 86400)  # 2024-01-01 + 2 years
    when = dt.datetime.fromtimestamp(start, dt.UTC)
    slots = _slots(rng, me, when)
    title = rng.choice(TITLES).format(**slots)
    slots["title_lc"] = title[0].lower() + title[1:]
    seen = titles.get(title, 0)
    titles[title] = seen + 1
    if seen:  # titles are what the archives are matched by: keep them unique
        title = f"{title} ({seen + 1})"
        titles[title] = 1
    n = rng.randint(4, 40)
    root, system = _uuid(rng), _uuid(rng)
    mapping: dict[str, dict] = {
        root: {"id": root, "message": None, "parent": None, "children": [system]},
        system: {
            "id": system,
            "message": {
                "id": system,
                "author": {"role": "system"},
                "create_time": None,
                "content": {"content_type": "text", "parts": [""]},
                "metadata": {},
            },
            "parent": root,
            "children": [],
        },
    }
    prev, t = system, start
    for j in range(n):
        mid = _uuid(rng)
        t += rng.uniform(5, 300)
        role = "user" if j % 2 == 0 else "assistant"
        if role == "user":
            slots.update(_slots(rng, me, when) | {"title_lc": slots["title_lc"]})
        text = _user_turn(rng, slots) if role == "user" else _assistant_turn(rng)
        mapping[mid] = {
            "id": mid,
            "message": {
                "id": mid,
                "author": {"role": role},
                "create_time": t,
                "content": {"content_type": "text", "parts": [text]},
                "metadata": {},
            },
            "parent": prev,
            "children": [],
        }
        mapping[prev]["children"].append(mid)
        prev = mid
    conv = {
        "title": title,
        "create_time": start,
        "update_time": t,
        "conversation_id": _uuid(rng),
        "current_node": prev,
        "mapping": mapping,
    }
    return conv, GenConversation(title, n)


def make_export(path: Path, target_bytes: int) -> GeneratedExport:
    """A ChatGPT `conversations.json` of about `target_bytes` (seeded: the same bytes every
    run), written as it is generated; the ground truth is what it holds."""
    rng = random.Random(SEED + 24)
    persona = random.Random(SEED)
    me = {"first": persona.choice(FIRST), "last": persona.choice(LAST)}
    titles: dict[str, int] = {}
    convs: list[GenConversation] = []
    size = 0
    with path.open("w", encoding="utf-8") as f:
        f.write("[")
        size += 1
        while size < target_bytes or not convs:
            conv, gen = chatgpt_conversation(rng, me, titles)
            chunk = ("\n" if not convs else ",\n") + json.dumps(conv, ensure_ascii=False)
            f.write(chunk)
            size += len(chunk.encode())
            convs.append(gen)
        f.write("\n]\n")
    return GeneratedExport(path, path.stat().st_size, convs)


@dataclass
class ProbeSample:
    i: int
    word: str
    path: str  # node path under the mount
    t_start: float  # perf_counter before mkdir
    phase: str  # quiet (before the copy), import (until the report is done), index
    mkdir_s: float = 0.0
    write_s: float = 0.0  # open -> write -> fsync -> close
    fsync_s: float = 0.0
    bm25: float | None = None  # perf_counter when the probe was first the top hit
    vectors: float | None = None  # ... when meta.yaml showed indexed_version == version
    searched_by: list[str] = field(default_factory=list)  # sides of that first top hit
    note: str = ""  # and its note (vectors behind, ...)
    in_hits_not_top: int = 0  # reads where it was a hit but not the first
    reads: int = 0
    remounted: bool = False  # an unmount happened while it was pending
    error: str = ""
    next_meta: float = 0.0  # perf_counter of the next read of its meta.yaml

    def as_dict(self) -> dict:
        return {
            "i": self.i,
            "phase": self.phase,
            "word": self.word,
            "path": self.path,
            "mkdir_s": self.mkdir_s,
            "write_s": self.write_s,
            "fsync_s": self.fsync_s,
            "write_to_bm25_s": None if self.bm25 is None else self.bm25 - self.t_start,
            "write_to_vectors_s": None if self.vectors is None else self.vectors - self.t_start,
            "searched_by": self.searched_by,
            "note": self.note,
            "in_hits_not_top": self.in_hits_not_top,
            "reads": self.reads,
            "remounted": self.remounted,
            "error": self.error,
        }


_META_VERSION = re.compile(r"^version: (\d+)$", re.M)
_META_INDEXED = re.compile(r"^indexed_version: (\d+)$", re.M)


class Probe(threading.Thread):
    """Every `PROBE_EVERY` s: a new node `user/default/preferences/probe-<i>` whose L2
    holds a made-up word, written with open/write/fsync/close; then, every `PROBE_POLL`
    s, its `.query/<word>/_results.json` until it is the top hit and its meta.yaml until
    `indexed_version` equals `version` (its vectors are in), each capped at `cap` s.
    The main thread holds `gate` while the mount is down: no probe I/O then."""

    def __init__(self, mnt: Path, cap: float, gate: threading.Lock) -> None:
        super().__init__(name="probe", daemon=True)
        self.mnt, self.cap, self.gate = mnt, cap, gate
        self.samples: list[ProbeSample] = []
        self.pending: list[ProbeSample] = []
        self.stopping = threading.Event()
        self.errors: list[str] = []
        self.phase = "quiet"  # set by the main thread: the phase new probes belong to

    def mark_remount(self) -> None:
        for s in self.pending:
            s.remounted = True

    def run(self) -> None:
        next_at = time.perf_counter()
        while True:
            with self.gate:
                now = time.perf_counter()
                if not self.stopping.is_set() and now >= next_at:
                    self._write(len(self.samples))
                    next_at = max(next_at + PROBE_EVERY, now)
                for s in list(self.pending):
                    self._check(s)
            if self.stopping.is_set() and not self.pending:
                return
            time.sleep(PROBE_POLL)

    def _write(self, i: int) -> None:
        word = f"zq{i}xv"
        rel = f"user/default/preferences/probe-{i}"
        s = ProbeSample(i, word, rel, time.perf_counter(), self.phase)
        self.samples.append(s)
        try:
            node = self.mnt / rel
            node.mkdir()
            t1 = time.perf_counter()
            fd = os.open(node / "L2.md", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, f"probe {word}\n".encode())
                t2 = time.perf_counter()
                os.fsync(fd)
                s.fsync_s = time.perf_counter() - t2
            finally:
                os.close(fd)
            s.mkdir_s, s.write_s = t1 - s.t_start, time.perf_counter() - t1
            self.pending.append(s)
        except OSError as exc:
            s.error = f"write: {exc}"
            self.errors.append(f"probe {i}: {s.error}")

    def _check(self, s: ProbeSample) -> None:
        """One look at a pending probe: its question until it is the top hit, its
        meta.yaml (when due, see META_BACKOFF) until its vectors are in."""
        try:
            if s.bm25 is None:
                doc = json.loads((self.mnt / ".query" / s.word / "_results.json").read_text())
                now = time.perf_counter()
                s.reads += 1
                paths = [h["path"] for h in doc["hits"]]
                if paths and paths[0] == s.path:
                    s.bm25 = now
                    s.searched_by, s.note = list(doc.get("searched_by", [])), doc.get("note", "")
                elif s.path in paths:
                    s.in_hits_not_top += 1
            if s.vectors is None and time.perf_counter() >= s.next_meta:
                text = (self.mnt / s.path / "meta.yaml").read_text()
                now = time.perf_counter()
                lo, frac, hi = META_BACKOFF
                s.next_meta = now + min(hi, max(lo, frac * (now - s.t_start)))
                v, iv = _META_VERSION.search(text), _META_INDEXED.search(text)
                if v and iv and int(v.group(1)) == int(iv.group(1)):
                    s.vectors = now
        except (OSError, ValueError, KeyError) as exc:
            s.error = f"check: {exc}"
            self.errors.append(f"probe {s.i}: {s.error}")
            self.pending.remove(s)
            return
        waited = time.perf_counter() - s.t_start
        if (s.bm25 is not None and s.vectors is not None) or waited > self.cap:
            self.pending.remove(s)


def _status_json(mnt: Path) -> dict:
    return json.loads((mnt / ".status.json").read_text())


def _report_state(mnt: Path) -> str:
    try:
        text = (mnt / ".inbox" / f"{EXPORT_NAME}.report.md").read_text()
    except FileNotFoundError:
        return ""
    return next((ln for ln in text.splitlines() if ln.startswith("state: ")), "")


_PROCESSING = re.compile(r"processing \((\d+) of (\d+) conversations\)")


def _drained(st: dict) -> bool:
    ix = st.get("index") or {}
    b = ix.get("backlog") or {}
    return (
        ix.get("state") == "ready"
        and ix.get("queue") == 0
        and not any(b.get(k) for k in ("text_changes", "vector_changes", "urgent_nodes"))
    )


def _hwm(pid: int | None) -> int:
    if not pid:
        return 0
    try:
        return proc_status(pid).get("VmHWM", 0)
    except OSError:
        return 0


class Backlog:
    """The run of `--backlog`: one data dir, mounted, interrupted three times, drained."""

    def __init__(self, args: argparse.Namespace, base: Path, export: GeneratedExport) -> None:
        self.args, self.export = args, export
        self.data, self.mnt = base / "data", base / "mnt"
        self.gate = threading.Lock()
        self.pid: int | None = None
        self.hwm: dict[int, int] = {}  # daemon pid -> VmHWM seen last
        self.timeline: list[dict] = []
        self.interrupts: list[dict] = []

    def sample_rss(self) -> None:
        if self.pid:
            self.hwm[self.pid] = max(self.hwm.get(self.pid, 0), _hwm(self.pid))

    def mount(self) -> float:
        t0 = time.perf_counter()
        cli_mount(self.mnt, self.data, timeout=600)
        self.pid = daemon_pid(self.mnt)
        return time.perf_counter() - t0

    def interrupt(self, fraction: float, basis: str, progress: str, t_origin: float) -> None:
        """Unmount with `contextfs umount` (timed) and mount the same data dir again, the
        probe held off meanwhile."""
        rec: dict = {"fraction": fraction, "basis": basis, "progress": progress}
        with self.gate:
            self.sample_rss()
            rec["at_s"] = time.perf_counter() - t_origin
            t0 = time.perf_counter()
            try:
                res = subprocess.run(
                    contextfs_cmd("umount", str(self.mnt), "--timeout", "120"),
                    capture_output=True,
                    text=True,
                    timeout=180,
                )
                rec["umount_rc"] = res.returncode
                rec["umount_error"] = res.stderr.strip()
            except subprocess.TimeoutExpired:
                rec["umount_rc"], rec["umount_error"] = None, "timed out after 180 s"
            rec["umount_s"] = time.perf_counter() - t0
            if os.path.ismount(self.mnt):  # a failed unmount: do not leave it behind
                subprocess.run(["fusermount3", "-u", "-z", str(self.mnt)], capture_output=True)
                time.sleep(2)
            self.probe.mark_remount()
            rec["remount_s"] = self.mount()
            rec["pid"] = self.pid
        self.interrupts.append(rec)
        self.pending_open = rec
        say(
            f"  interrupt at {fraction:.0%} ({basis} {progress}): umount "
            f"{rec['umount_s']:.2f}s (rc {rec['umount_rc']}), mount again "
            f"{rec['remount_s']:.2f}s"
        )

    def run(self) -> dict:
        args, mnt = self.args, self.mnt
        self.mnt.mkdir()
        result: dict = {}
        say(f"mounting {mnt} (data dir {self.data}, embedded defaults)")
        t0 = time.monotonic()
        self.mount()
        wait_index_ready(mnt, READY_TIMEOUT)
        result["mount_to_ready_s"] = time.monotonic() - t0
        st = _status_json(mnt)
        result["status_ready"] = st.get("index")
        self.probe = Probe(mnt, args.cap, self.gate)
        self.pending_open: dict | None = None
        self.probe.start()
        time.sleep(3 * PROBE_EVERY)  # a few probes on the quiet mount first
        idle_probes = len(self.probe.samples)

        say(f"copying the export ({self.export.bytes / 2**20:.1f} MiB) into .inbox/")
        origin = time.perf_counter()
        self.probe.phase = "import"
        vec_start = st["index"]["generation"]
        shutil.copyfile(self.export.path, mnt / ".inbox" / EXPORT_NAME)
        result["copy_s"] = time.perf_counter() - origin
        say(f"  copied in {result['copy_s']:.1f}s")

        inbox_done_at: float | None = None
        inbox_done_gen: int | None = None
        drained_at: float | None = None
        report_forms: set[str] = set()
        nxt = 0
        total = self.export.conversations
        prog = Progress("conversations filed", len(total))
        while True:
            tick = time.perf_counter()
            if tick - origin > args.drain_timeout:
                say(f"  not drained {args.drain_timeout:.0f}s after the copy: {self.timeline[-1]}")
                result["drain_timed_out"] = True
                break
            with self.gate:
                st = _status_json(mnt)
                state = _report_state(mnt)
                self.sample_rss()
            ix = st.get("index") or {}
            row = {
                "t": round(tick - origin, 3),
                "generation": st.get("generation"),
                "vector": ix.get("generation"),
                "text": ix.get("text_generation"),
                "index_state": ix.get("state"),
                "backlog": ix.get("backlog"),
                "report": state,
                "rss": (st.get("memory") or {}).get("rss_bytes"),
            }
            self.timeline.append(row)
            if self.pending_open is not None and not str(ix.get("state", "")).startswith(
                ("opening", "loading")
            ):
                self.pending_open["index_open_s"] = tick - origin - self.pending_open["at_s"]
                self.pending_open = None
            m = _PROCESSING.search(state)
            if m:
                report_forms.add("processing")
                prog.update(int(m.group(1)))
            done = state.startswith("state: done")
            if state.startswith("state: refused"):
                raise RuntimeError(f"the export was refused: {state}")
            if done and inbox_done_at is None:
                inbox_done_at, inbox_done_gen = tick, st["generation"]
                self.probe.phase = "index"
                prog.done()
                say(f"  inbox done {tick - origin:.1f}s after the copy: {state}")
            if nxt < len(FRACTIONS):
                f = FRACTIONS[nxt]
                hit = None
                if m and not done:
                    k, n = int(m.group(1)), int(m.group(2))
                    if k >= f * n:
                        hit = ("inbox", f"{k} of {n} conversations")
                elif done and inbox_done_gen is not None:
                    goal = vec_start + f * (inbox_done_gen - vec_start)
                    vec = ix.get("generation") or 0
                    if vec >= goal or _drained(st):
                        hit = ("vectors", f"cursor {vec} of {vec_start}..{inbox_done_gen}")
                if hit:
                    self.interrupt(f, hit[0], hit[1], origin)
                    nxt += 1
                    continue
            if done and nxt == len(FRACTIONS) and _drained(st):
                drained_at = tick
                break
            rest = STATUS_POLL - (time.perf_counter() - tick)
            if rest > 0:
                time.sleep(rest)
        if drained_at is not None:
            say(f"drained {drained_at - origin:.1f}s after the copy; stopping the probe")
        self.probe.stopping.set()
        self.probe.join(timeout=args.cap + 30)

        result["inbox_done_s"] = inbox_done_at - origin if inbox_done_at else None
        result["drained_s"] = None if drained_at is None else drained_at - origin
        result["interrupted_at"] = nxt
        result["report_forms"] = sorted(report_forms)
        result["report_state"] = state
        with self.gate:
            result["report"] = (mnt / ".inbox" / f"{EXPORT_NAME}.report.md").read_text()
            result["status_end"] = (mnt / ".status").read_text()
            result["sessions"] = self.count_sessions()
            self.sample_rss()
        result["probe_idle"] = idle_probes
        return result

    def count_sessions(self) -> dict:
        """The session archives against the generated conversations, by the title and
        `turns` in each archive's L2 front matter (a long conversation is archived as
        nodes titled `<title> part <i>`)."""
        want = {c.title: c.turns for c in self.export.conversations}
        found: dict[str, list[tuple[int | None, int, str]]] = {}
        other: list[str] = []
        sessions = self.mnt / "user" / "default" / "sessions"
        names = sorted(os.listdir(sessions))
        for name in names:
            l2 = sessions / name / "L2.md"
            if not l2.exists():
                continue
            front = _front_matter(l2)
            title = str(front.get("title", ""))
            turns = int(front.get("turns", 0) or 0)
            part: int | None = None
            if title not in want:
                pm = re.fullmatch(r"(.*) part (\d+)", title)
                if pm and pm.group(1) in want:
                    title, part = pm.group(1), int(pm.group(2))
                else:
                    other.append(f"{name}: {title!r}")
                    continue
            found.setdefault(title, []).append((part, turns, name))
        missing = [t for t in want if t not in found]
        duplicates = []
        turn_mismatch = []
        for title, nodes in found.items():
            parts = [p for p, _, _ in nodes]
            if len(parts) != len(set(parts)) or (None in parts and len(parts) > 1):
                duplicates.append({"title": title, "nodes": [n for _, _, n in nodes]})
            got = sum(t for _, t, _ in nodes)
            if got != want[title]:
                turn_mismatch.append({"title": title, "generated": want[title], "archived": got})
        return {
            "generated": len(want),
            "archive_nodes": len(names),
            "titles_archived": len(found),
            "split_in_parts": sum(1 for nodes in found.values() if len(nodes) > 1),
            "missing": missing,
            "duplicates": duplicates,
            "not_generated": other,
            "turns_generated": self.export.turns,
            "turns_archived": sum(t for nodes in found.values() for _, t, _ in nodes),
            "turn_mismatch": turn_mismatch,
        }


def _front_matter(path: Path) -> dict:
    with path.open("rb") as f:
        head = f.read(8192)
    text = head.decode("utf-8", errors="replace")
    if not text.startswith("---\n"):
        return {}
    end = text.find("\n---", 4)
    if end < 0:
        text, end = path.read_text(), -1
        end = text.find("\n---", 4)
    try:
        doc = yaml.safe_load(text[4:end])
    except yaml.YAMLError:
        return {}
    return doc if isinstance(doc, dict) else {}


def probe_summary(samples: list[ProbeSample], by_phase: bool = True) -> dict:
    ok = [s for s in samples if not s.error]
    clean = [s for s in ok if not s.remounted]
    phases = {}
    if by_phase:
        for name in ("quiet", "import", "index"):
            phases[name] = probe_summary([s for s in samples if s.phase == name], False)
    return {
        "by_phase": phases,
        "count": len(samples),
        "errors": [s.error for s in samples if s.error],
        "remounted": sum(s.remounted for s in samples),
        "fsync": stats([s.fsync_s for s in ok]),
        "write": stats([s.write_s for s in ok]),
        "mkdir": stats([s.mkdir_s for s in ok]),
        # the latencies leave out probes pending while the mount was down
        "to_bm25": stats([s.bm25 - s.t_start for s in clean if s.bm25 is not None]),
        "to_vectors": stats([s.vectors - s.t_start for s in clean if s.vectors is not None]),
        "bm25_missed": [s.i for s in ok if s.bm25 is None],
        "vectors_missed": [s.i for s in ok if s.vectors is None],
        "not_top_reads": sum(s.in_hits_not_top for s in ok),
        "first_hit_sides": _count(
            "+".join(s.searched_by) + (" (note)" if s.note else "") for s in ok if s.bm25
        ),
    }


def _count(keys) -> dict[str, int]:
    out: dict[str, int] = {}
    for k in keys:
        out[k] = out.get(k, 0) + 1
    return out


def backlog_rows(r: dict) -> list[tuple[str, str, str, str]]:
    """(metric, value, target, ok) rows; ok is "pass", "FAIL" or "-"."""
    p, s = r["probes"], r["sessions"]

    def pf(good: bool | None) -> str:
        return "-" if good is None else ("pass" if good else "**FAIL**")

    def pct(st: dict | None, key: str) -> float | None:
        return None if st is None else st[key]

    rows: list[tuple[str, str, str, str]] = []
    e = r["export"]
    rows.append(
        (
            "export imported",
            f"{e['bytes'] / 2**20:.1f} MiB, {e['conversations']:,} conversations, "
            f"{e['turns']:,} turns",
            "-",
            "-",
        )
    )
    rows.append(("copy into .inbox/", f"{r['copy_s']:.1f} s", "-", "-"))
    if r.get("inbox_done_s") is not None:
        rows.append(("copy -> inbox report done", f"{r['inbox_done_s']:.1f} s", "-", "-"))
    drained = r.get("drained_s")
    rows.append(
        (
            "copy -> drained (index ready, queue 0)",
            f"{drained:.1f} s" if drained is not None else "not drained",
            f"within {r['drain_timeout']:.0f} s",
            pf(drained is not None),
        )
    )
    rows.append(("daemon RSS peak (VmHWM)", f"{r['rss_peak_bytes'] / 2**20:,.0f} MiB", "-", "-"))
    f99 = pct(p["fsync"], "p99")
    rows.append(
        (
            "probe fsync p50 / p99 / max",
            f"{ms(pct(p['fsync'], 'p50'))} / {ms(f99)} / {ms(pct(p['fsync'], 'max'))}",
            f"p99 <= {FSYNC_P99 * 1000:.0f} ms",
            pf(None if f99 is None else f99 <= FSYNC_P99),
        )
    )
    b99 = pct(p["to_bm25"], "p99")
    rows.append(
        (
            "probe write -> BM25 top hit p50 / p99",
            f"{ms(pct(p['to_bm25'], 'p50'))} / {ms(b99)}",
            f"p99 <= {BM25_P99:.0f} s; all",
            pf(b99 is not None and b99 <= BM25_P99 and not p["bm25_missed"]),
        )
    )
    v99 = pct(p["to_vectors"], "p99")
    rows.append(
        (
            "probe write -> vectors (indexed_version) p50 / p99",
            f"{ms(pct(p['to_vectors'], 'p50'))} / {ms(v99)}",
            f"p99 <= {VECTORS_P99:.0f} s; all",
            pf(v99 is not None and v99 <= VECTORS_P99 and not p["vectors_missed"]),
        )
    )
    rows.append(
        (
            "probes (missed BM25 / vectors within the cap)",
            f"{p['count']} ({len(p['bm25_missed'])} / {len(p['vectors_missed'])})",
            "0 / 0 missed",
            pf(not p["bm25_missed"] and not p["vectors_missed"] and not p["errors"]),
        )
    )
    for it in r["interrupts"]:
        good = it["umount_rc"] == 0 and it["umount_s"] <= UMOUNT_MAX
        rows.append(
            (
                f"umount at {it['fraction']:.0%} ({it['basis']}: {it['progress']})",
                f"{it['umount_s']:.2f} s (rc {it['umount_rc']}); mount again "
                f"{it['remount_s']:.2f} s",
                f"<= {UMOUNT_MAX:.0f} s, rc 0",
                pf(good),
            )
        )
    rows.append(
        (
            "sessions archived / conversations",
            f"{s['titles_archived']:,} / {s['generated']:,} ({s['archive_nodes']:,} nodes)",
            "equal",
            pf(s["titles_archived"] == s["generated"] and not s["missing"]),
        )
    )
    rows.append(
        (
            "conversations missing / archived twice",
            f"{len(s['missing'])} / {len(s['duplicates'])}",
            "0 / 0",
            pf(not s["missing"] and not s["duplicates"]),
        )
    )
    rows.append(
        (
            "turns archived / generated",
            f"{s['turns_archived']:,} / {s['turns_generated']:,}",
            "equal",
            pf(s["turns_archived"] == s["turns_generated"] and not s["turn_mismatch"]),
        )
    )
    rows.append(
        (
            "warnings/errors in contextfs.log",
            str(len(r["log_problems"])),
            "0",
            pf(not r["log_problems"]),
        )
    )
    return rows


def backlog_table(rows: list[tuple[str, str, str, str]]) -> str:
    lines = ["| metric | value | target | ok |", "|---|---:|---|---|"]
    lines += [f"| {m} | {v} | {t} | {o} |" for m, v, t, o in rows]
    return "\n".join(lines)


def run_backlog(args: argparse.Namespace) -> dict:
    base = Path(tempfile.mkdtemp(prefix="bench_backlog-"))
    result: dict = {
        "tmp": str(base),
        "data_dir": str(base / "data"),
        "cap": args.cap,
        "drain_timeout": args.drain_timeout,
    }
    t0 = time.perf_counter()
    export = make_export(base / EXPORT_NAME, int(args.export_mb * 2**20))
    result["export"] = {
        "bytes": export.bytes,
        "conversations": len(export.conversations),
        "turns": export.turns,
        "generate_s": time.perf_counter() - t0,
    }
    say(
        f"export: {export.bytes / 2**20:.1f} MiB, {len(export.conversations):,} conversations, "
        f"{export.turns:,} turns (generated in {result['export']['generate_s']:.1f}s)"
    )
    bl = Backlog(args, base, export)
    try:
        result.update(bl.run())
    finally:
        probe = getattr(bl, "probe", None)
        if probe is not None:
            probe.stopping.set()
            probe.join(timeout=args.cap + 30)
            result["probes"] = probe_summary(probe.samples)
            result["probe_samples"] = [s.as_dict() for s in probe.samples]
            result["probe_errors"] = probe.errors
        bl.sample_rss()
        t1 = time.perf_counter()
        err = cli_umount(bl.mnt)
        result["final_umount_s"] = time.perf_counter() - t1
        if err:
            say(f"unmount problem: {err}")
            result["umount_error"] = err
        result["interrupts"] = bl.interrupts
        result["timeline"] = bl.timeline
        result["rss_peak_bytes"] = max(bl.hwm.values(), default=0)
        result["rss_by_daemon"] = bl.hwm
        result["log_problems"] = log_problems(bl.data / "contextfs.log")
        if not args.keep and not os.path.ismount(bl.mnt):
            shutil.rmtree(base, ignore_errors=True)
        elif args.keep:
            say(f"kept {base}")
    return result


def backlog_main(args: argparse.Namespace, info: dict) -> int:
    say(
        f"bench_ingest --backlog: {args.export_mb:g} MiB ChatGPT export, probe every "
        f"{PROBE_EVERY:g}s, interrupts at {', '.join(f'{f:.0%}' for f in FRACTIONS)}; "
        f"{info.get('cpus')} cpus, load {info.get('loadavg_start')}"
    )
    result: dict = {}
    failed = None
    try:
        result = run_backlog(args)
    except Exception as exc:  # report what failed, keep the JSON of what ran
        failed = f"{type(exc).__name__}: {exc}"
        say(f"bench_ingest --backlog: FAILED {failed}")

    problems: list[str] = []  # the benchmark or ContextFS failed
    missed: list[str] = []  # a timing target missed
    rows: list[tuple[str, str, str, str]] = []
    if "sessions" in result and "probes" in result:
        rows = backlog_rows(result)
        print()
        print(backlog_table(rows))
        s, p = result["sessions"], result["probes"]
        for name, what in (
            ("quiet", "before the copy"),
            ("import", "while the inbox imported"),
            ("index", "after the import, until drained"),
        ):
            ph = p["by_phase"].get(name) or {}
            if ph.get("count"):
                f, b, v = ph["fsync"] or {}, ph["to_bm25"] or {}, ph["to_vectors"] or {}
                print(
                    f"probes {what}: {ph['count']}; fsync p50/p99 {ms(f.get('p50'))} / "
                    f"{ms(f.get('p99'))}; -> BM25 p50/p99 {ms(b.get('p50'))} / "
                    f"{ms(b.get('p99'))}; -> vectors p50/p99 {ms(v.get('p50'))} / "
                    f"{ms(v.get('p99'))} ({len(ph['vectors_missed'])} not within the cap)"
                )
        print()
        if s["missing"]:
            problems.append(
                f"{len(s['missing'])} conversation(s) not archived, e.g. {s['missing'][:3]}"
            )
        if s["duplicates"]:
            problems.append(
                f"{len(s['duplicates'])} conversation(s) archived twice, e.g. {s['duplicates'][:3]}"
            )
        if s["turn_mismatch"]:
            problems.append(
                f"{len(s['turn_mismatch'])} archive(s) with other turn counts, "
                f"e.g. {s['turn_mismatch'][:3]}"
            )
        if p["bm25_missed"]:
            problems.append(
                f"probe(s) never the BM25 top hit within {args.cap:.0f}s: {p['bm25_missed'][:10]}"
            )
        for k, st in (("to_bm25", BM25_P99), ("to_vectors", VECTORS_P99), ("fsync", FSYNC_P99)):
            v = (p[k] or {}).get("p99")
            if v is None or v > st:
                missed.append(f"probe {k} p99 {ms(v)} > {ms(st)}")
        if p["vectors_missed"]:
            missed.append(
                f"probe(s) without vectors within {args.cap:.0f}s: {p['vectors_missed'][:10]}"
            )
    for e in result.get("probe_errors", []):
        problems.append(e)
    if "drained_s" in result:
        if result.get("inbox_done_s") is None:
            problems.append(f"the inbox report never said done: {result.get('report_state')}")
        if result["drained_s"] is None:
            problems.append(
                f"the index did not drain within {args.drain_timeout:.0f}s of the copy: "
                f"{result['timeline'][-1] if result.get('timeline') else ''}"
            )
    for it in result.get("interrupts", []):
        if it["umount_rc"] != 0:
            problems.append(
                f"umount at {it['fraction']:.0%}: rc {it['umount_rc']} {it['umount_error']}"
            )
        elif it["umount_s"] > UMOUNT_MAX:
            missed.append(f"umount at {it['fraction']:.0%} took {it['umount_s']:.2f}s")
    if result.get("interrupts") is not None and len(result["interrupts"]) != len(FRACTIONS):
        problems.append(f"{len(result['interrupts'])} interrupts, not {len(FRACTIONS)}")
    for line in result.get("log_problems", []):
        problems.append(f"contextfs.log: {line}")
    if result.get("umount_error"):
        problems.append(f"unmount: {result['umount_error']}")
    if failed:
        problems.append(f"benchmark failed: {failed}")
    if missed:
        print("Targets missed (timing):")
        for line in missed:
            print(f"  - {line}")
    if problems:
        print("\nProblems:")
        for line in problems[:40]:
            print(f"  - {line}")
    elif not missed:
        print("\nNothing lost or duplicated, every target met, no warnings in the log.")

    info["loadavg_end"] = os.getloadavg()
    out = {
        "machine": info,
        "args": vars(args),
        "result": result,
        "rows": [{"metric": m, "value": v, "target": t, "ok": o} for m, v, t, o in rows],
        "problems": problems,
        "targets_missed": missed,
        "error": failed,
    }
    path = write_json(args.json, out)
    print(f"\nJSON written to {path}")
    return 1 if problems or (missed and args.strict) else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--quick", action="store_true", help="CI smoke check: 5 transcripts of 10 turns, 3 paced"
    )
    p.add_argument("--transcripts", type=int, default=50, help="transcripts in the stream")
    p.add_argument("--turns", type=int, default=20, help="turns per transcript")
    p.add_argument(
        "--paced", type=int, default=10, help="transcripts dropped one at a time after the stream"
    )
    p.add_argument("--poll", type=float, default=0.05, help="polling interval, seconds")
    p.add_argument(
        "--cap",
        type=float,
        default=60.0,
        help="seconds after a report is done to wait for its fact's top hit",
    )
    p.add_argument(
        "--backlog",
        action="store_true",
        help="import a ChatGPT export of --export-mb while a probe writes, interrupted by "
        "three unmounts (see the module docstring)",
    )
    p.add_argument(
        "--export-mb", type=float, default=None, help="--backlog: export size (100; --quick 2)"
    )
    p.add_argument(
        "--drain-timeout",
        type=float,
        default=None,
        help="--backlog: seconds after the copy for the import and the index to drain",
    )
    p.add_argument(
        "--strict", action="store_true", help="--backlog: a missed timing target fails too"
    )
    p.add_argument(
        "--json",
        default=None,
        help="where to write JSON (bench-results/bench_ingest.json, "
        "bench_ingest_backlog.json with --backlog)",
    )
    p.add_argument("--keep", action="store_true", help="keep the temp dir (mount is undone)")
    args = p.parse_args(argv)
    if args.quick:
        args.transcripts, args.turns, args.paced = 5, 10, 3
    if args.export_mb is None:
        args.export_mb = 2.0 if args.quick else 100.0
    if args.drain_timeout is None:  # generous: a 2 MB import drains in minutes here
        args.drain_timeout = max(1200.0, 120.0 * args.export_mb)
    if args.json is None:
        name = "bench_ingest_backlog.json" if args.backlog else "bench_ingest.json"
        args.json = f"bench-results/{name}"

    info = machine_info(Path(__file__).parent)
    if args.backlog:
        return backlog_main(args, info)
    say(
        f"bench_ingest: {args.transcripts} transcripts x {args.turns} turns + {args.paced} paced; "
        f"poll {args.poll * 1000:.0f} ms, cap {args.cap:.0f}s; {info.get('cpus')} cpus, "
        f"load {info.get('loadavg_start')}"
    )
    result: dict = {}
    failed = None
    try:
        result = run(args)
    except Exception as exc:  # report what failed, keep the JSON of what ran
        failed = f"{type(exc).__name__}: {exc}"
        say(f"bench_ingest: FAILED {failed}")

    problems: list[str] = []
    if result.get("facts"):
        print()
        print(table(build_rows(result)))
        print()
        f = result["facts"]
        for key, what in (
            ("not_extracted", "unique fact not extracted"),
            (
                "late",
                f"unique fact not the top hit within {args.cap:.0f}s of "
                "close (it was once the index settled)",
            ),
            ("never_top", "unique fact never the top hit"),
        ):
            for name in f[key]:
                item = next(i for i in result["items"] if i["name"] == name)
                problems.append(
                    f"{what}: {name} ('{item['word']}', expected "
                    f"{item['expected']}, last hits {item['last_hits']})"
                )
        print(
            "created by type: "
            + ", ".join(f"{k} {v}" for k, v in sorted(result["nodes"]["created_by_type"].items()))
        )
        print(f"index at the end: {result.get('index_after')}")
    for line in result.get("log_problems", []):
        problems.append(f"contextfs.log: {line}")
    if result.get("umount_error"):
        problems.append(f"unmount: {result['umount_error']}")
    if failed:
        problems.append(f"benchmark failed: {failed}")
    if problems:
        print("\nProblems:")
        for line in problems[:40]:
            print(f"  - {line}")
    else:
        print("\nEvery report done, every unique fact searchable, no warnings in the log.")

    info["loadavg_end"] = os.getloadavg()
    out = {
        "machine": info,
        "args": vars(args),
        "result": result,
        "problems": problems,
        "error": failed,
    }
    if result.get("facts"):
        out["rows"] = [{"metric": m, "value": v, "notes": n} for m, v, n in build_rows(result)]
    path = write_json(args.json, out)
    print(f"\nJSON written to {path}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
