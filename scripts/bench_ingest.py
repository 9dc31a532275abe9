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

Run from the repository root:

    .venv/bin/python scripts/bench_ingest.py                  # 50 x 20 turns + 10 paced
    .venv/bin/python scripts/bench_ingest.py --quick          # CI smoke: 5 x 10 + 3 paced
    .venv/bin/python scripts/bench_ingest.py --transcripts 200 --turns 40 --json /tmp/i.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

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
)

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
                "date": (start - dt.timedelta(days=rng.randint(1, 60))).date().isoformat(),
            }
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
    p.add_argument("--json", default="bench-results/bench_ingest.json", help="where to write JSON")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (mount is undone)")
    args = p.parse_args(argv)
    if args.quick:
        args.transcripts, args.turns, args.paced = 5, 10, 3

    info = machine_info(Path(__file__).parent)
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
