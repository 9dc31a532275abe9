"""Benchmark recall on long conversations: what a `.query` bundle holds of the turns that
answer a question, through a real ContextFS mount, against a plain retrieval baseline over
the raw turns at the same token budget.

The data (`scripts/recall_data/`, see its README): long two-speaker conversations of dated
sessions with labelled questions (single-hop, multi-hop, temporal, inference, update,
unanswerable), each with the turn ids that hold its answer. `generated/` is written by
`scripts/make_recall_set.py`; `handwritten/` holds hand-written ones. `SPLIT.json` says which
conversations are `dev` (used when tuning ContextFS) and which are `held-out` (never tuned
on): the two halves are reported apart, and the two sets too.

What it does:

1. Baseline indexes, in-process, before anything is mounted: every turn of a conversation is
   a unit `"<speaker> · <date>: <text>"` (the session's date, e.g. "Efua · 14 March 2023:
   ..."), indexed with tantivy BM25 (English stemming; `contextfs.index.text.TextIndex`, the
   question stripped of stopwords as ContextFS does) and MiniLM vectors
   (`contextfs.index.embed.LocalEmbedder` + `contextfs.index.vectors.VectorIndex`, hnswlib).
   Two baselines: `raw` indexes the unit as written (speaker and date included: the issue's
   baseline, and the latency "raw floor"); `raw-text` indexes only the turn's text (the
   bundle still shows speaker and date), because with the prefix indexed a question naming a
   speaker matches every short turn that speaker said, on both sides.
2. Mounts a fresh temp data dir with the embedded defaults (the `Mount` helper of
   `tests/conftest.py`, search on) and waits until the index is ready (the model load is not
   timed as ingest).
3. Ingest, exactly as a user would: per conversation, `mkdir <mnt>/user/<id>`, then every
   session written (open, write, close) to `<mnt>/user/<id>/.inbox/<session id>.jsonl`, one
   line per turn: `{"role": "user" | "assistant", "name", "content", "timestamp": <session
   date>, "id": <turn id>}` (a speaker called "Assistant" is `role: assistant`). Then it
   polls `.status` until no inbox item is pending, reads every `<file>.report.md` (each
   must say `state: done`), and polls `.status` until the index generation has caught up
   with the store (`queue 0`). Timed per conversation. Then, for each named speaker, the
   node that holds what is known of them (`entities/<name>`, or the owner's `profile` when
   they are the one user who speaks) and how many of the facts asked about them (the
   single-hop and update questions that name them) its `L2.md` holds, or only another
   speaker's node holds (`speaker_nodes`).
4. Queries: for every question and every budget B (default 500, 1000, 2000, 4000) it reads
   `<mnt>/user/<id>/.query/@budget=B/<question>/_context.md` ('%' written `%25`, '/'
   `%2F`), timing the read (lookup, search, packing: each (question, budget) is a fresh
   search). Interleaved with it, the baselines for the same question and budget, timed
   in-process (the "raw floor": embed the question, both searches, fusion, packing; the
   ranking is done once per question and its time added to each budget's packing):
   reciprocal-rank fusion (k = 60) of the BM25 and vector rankings of all the turns, packed
   best first into the budget with `contextfs.memory.tokens.estimate_tokens`, whole turns
   only, a turn that does not fit skipped.
5. Metrics per kind x budget, for both systems: evidence coverage (`evidence_covered`: the
   share of a question's evidence turns found in the bundle) and answer-in-bundle
   (`answer_forms`: the answer, or its head, occurs in the bundle). For the questions with
   nothing to find neither applies: `unanswerable` (never stated, about things the
   conversation does mention: "What colour is Maya's Volvo?") and `off-topic` (about
   nothing it mentions, and strings that are no question: `recall_data/offtopic.json`, the
   half's list asked of each conversation of that half; `--no-off-topic` leaves them out).
   For those, the relevance table gives the mean bundle size, the share of the budget used
   and the share of bundles at most 10% of the budget; and, for every kind, how often
   ContextFS's bundle said "Nothing relevant found" or "No answer found" (on answerable
   questions, a wrong floor or a wrong answer check). Each ContextFS record also keeps
   `relevant` and the best `confidence` from the question's `_results.json` (the figures
   a calibration of the floor reads).
   Latency: ContextFS query p50/p99 per budget against the raw floor, and their ratio.
   Table cells read "ContextFS / raw / raw-text".

It prints markdown tables and writes every number (and every per-question record, plus one
example bundle per kind and conversation) to `bench-results/bench_recall.json`. The exit
status is non-zero only when the benchmark itself fails (mount error, an inbox file not
done, a hang); low recall is a result, not a failure.

Run from the repository root:

    .venv/bin/python scripts/bench_recall.py                   # everything (~20 min here)
    .venv/bin/python scripts/bench_recall.py --quick           # CI smoke: ~75 seconds
    .venv/bin/python scripts/bench_recall.py --set handwritten --split dev --budgets 1000
    .venv/bin/python scripts/bench_recall.py --conversations gen01 --limit-questions 20 --keep
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import unicodedata
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from contextfs.ctxtypes import slugify  # how a node is named after a person
from contextfs.index.embed import LocalEmbedder
from contextfs.index.text import TextIndex
from contextfs.index.units import Unit
from contextfs.index.vectors import VectorIndex
from contextfs.memory.tokens import estimate_tokens
from contextfs.search.retrieval import keywords  # the question as BM25 sees it in ContextFS
from contextfs.testing import BENIGN_LOG, Mount, machine_info

ROOT = Path(__file__).resolve().parent.parent

DATA = ROOT / "scripts" / "recall_data"
BUDGETS = (500, 1000, 2000, 4000)
KINDS = ("single-hop", "multi-hop", "temporal", "inference", "update", "unanswerable", "off-topic")
# Kinds with nothing to find: no evidence, no answer; their bundles are measured by size.
NOTHING_KINDS = ("unanswerable", "off-topic")
SMALL_SHARE = 0.10  # a bundle at most this share of its budget counts as short
# What ContextFS's bundle says when nothing found is relevant, or when nothing found holds
# the kind of answer the question asks for (contextfs.search.bundle)
NOTHING_RELEVANT = "Nothing relevant found"
NO_ANSWER = "No answer found"
RRF_K = 60
# The systems compared: ContextFS through the mount; the raw turns with speaker and date
# indexed with the text (the baseline, and the latency "raw floor"); the raw turns
# with only the text indexed (speaker and date still in the bundle).
SYSTEMS = ("contextfs", "raw", "raw-text")
LEGEND = "ContextFS / raw turns / raw turns (text-indexed)"
READY_TIMEOUT = 900.0  # seconds for the daemon to load the model and open the indexes
INGEST_TIMEOUT = 1800.0  # seconds for one conversation's inbox items to be processed
INDEX_TIMEOUT = 1800.0  # seconds for the index to catch up after that
QUICK_SESSIONS = 6
QUICK_QUESTIONS = 10

# --------------------------------------------------------------------------------------
# Matching: what counts as "in the bundle"

_MD_PUNCT = re.compile(r"[*_`#>\[\]|~]")
_QUOTES = str.maketrans(
    {
        "\u2018": "'",
        "\u2019": "'",
        "\u201c": '"',
        "\u201d": '"',
        "\u2013": "-",
        "\u2014": "-",
        "\u00a0": " ",
    }
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_ISO_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
_ANSWER_HEAD = re.compile(r"\s+\(|;\s|:\s|\.\s")
_NOT_A_HEAD = {"yes", "no", "probably", "probably yes", "probably not", "yes and no"}
LONG_TURN = 200  # characters
LONG_TURN_SHARE = 0.8


def normalise(text: str) -> str:
    """Lowercase, typographic quotes and dashes made plain, markdown punctuation
    (`* _ ` # > [ ] | ~`) made spaces, and every run of whitespace one space."""
    text = unicodedata.normalize("NFKC", text).translate(_QUOTES).lower()
    return " ".join(_MD_PUNCT.sub(" ", text).split())


def evidence_covered(turn_text: str, bundle_norm: str) -> bool:
    """Whether one evidence turn is in a bundle (`bundle_norm`: the bundle, `normalise`d).

    A turn counts when its normalised text is a substring of the normalised bundle. A turn
    over `LONG_TURN` (200) characters also counts when at least `LONG_TURN_SHARE` (80%) of
    its sentences (split after . ! or ?) are substrings: a system may cut a long turn into
    chunks or drop a sentence and still deliver what the turn says.
    """
    turn = normalise(turn_text)
    if not turn or turn in bundle_norm:
        return bool(turn)
    if len(turn_text) <= LONG_TURN:
        return False
    sentences = [s for s in _SENTENCE_END.split(turn) if s.strip()]
    found = sum(1 for s in sentences if s in bundle_norm)
    return bool(sentences) and found / len(sentences) >= LONG_TURN_SHARE


def answer_forms(answer: str) -> list[str]:
    """The normalised strings any one of which, found in a bundle, counts as the answer
    being there: the whole answer (a final '.' dropped); its head, the part before the first
    " (", "; ", ": " or ". " (so "Toffee" for "Toffee (the older cat)"), unless the head is
    a bare yes/no; and any ISO date (YYYY-MM-DD) the answer gives."""
    forms = [normalise(answer).rstrip(".!")]
    head = normalise(_ANSWER_HEAD.split(answer, maxsplit=1)[0]).rstrip(".!,")
    if len(head) >= 2 and head not in _NOT_A_HEAD:
        forms.append(head)
    forms += _ISO_DATE.findall(answer)
    return [f for f in dict.fromkeys(forms) if f]


def answer_in(answer: str, bundle_norm: str) -> bool:
    return any(f in bundle_norm for f in answer_forms(answer))


# --------------------------------------------------------------------------------------
# The data


@dataclass
class Conversation:
    set: str  # generated | handwritten
    split: str  # dev | held-out
    id: str
    speakers: list[str]
    sessions: list[dict]
    questions: list[dict]
    turns: dict[str, dict] = field(default_factory=dict)  # turn id -> turn (+ date)

    def __post_init__(self) -> None:
        for s in self.sessions:
            for t in s["turns"]:
                self.turns[t["id"]] = t | {"date": s["date"]}


def load_split() -> dict[str, dict[str, str]]:
    """{set: {conversation id: split}} from SPLIT.json."""
    raw = json.loads((DATA / "SPLIT.json").read_text())
    return {
        name: {cid: split for split, ids in sets.items() for cid in ids}
        for name, sets in raw["sets"].items()
    }


def kind_balanced(questions: list[dict], n: int) -> list[dict]:
    """Up to n questions, taking one of each kind in turn (in file order within a kind)."""
    by_kind: dict[str, list[dict]] = {}
    for q in questions:
        by_kind.setdefault(q["kind"], []).append(q)
    out: list[dict] = []
    while len(out) < n and any(by_kind.values()):
        for kind in list(by_kind):
            if by_kind[kind] and len(out) < n:
                out.append(by_kind[kind].pop(0))
    order = {q["id"]: i for i, q in enumerate(questions)}
    return sorted(out, key=lambda q: order[q["id"]])


def off_topic(conv: Conversation, half: list[dict]) -> list[dict]:
    """The off-topic questions of the conversation's half (`recall_data/offtopic.json`),
    as questions of kind "off-topic"; each one's key words must be absent from every turn
    (whole words, any case), or the data is wrong."""
    said = " ".join(t["text"] for t in conv.turns.values()).lower()
    out = []
    for i, q in enumerate(half, 1):
        for word in q["absent"]:
            if re.search(rf"\b{re.escape(word.lower())}\b", said):
                raise RuntimeError(f"off-topic {q['question']!r}: {word!r} occurs in {conv.id}")
        out.append(
            {
                "id": f"OT{i}",
                "question": q["question"],
                "answer": "not mentioned",
                "evidence": [],
                "kind": "off-topic",
            }
        )
    return out


def load(args: argparse.Namespace) -> list[Conversation]:
    split_of = load_split()
    offtopic = json.loads((DATA / "offtopic.json").read_text())
    sets = ("generated", "handwritten") if args.set == "both" else (args.set,)
    convs = []
    for name in sets:
        for path in sorted((DATA / name).glob("*.json")):
            data = json.loads(path.read_text())
            split = split_of.get(name, {}).get(data["id"])
            if split is None:
                raise RuntimeError(f"{path} is not in SPLIT.json")
            if args.split != "both" and split != args.split:
                continue
            if args.conversations and data["id"] not in args.conversations:
                continue
            conv = Conversation(
                name, split, data["id"], data["speakers"], data["sessions"], data["questions"]
            )
            if not args.no_off_topic:
                conv.questions = conv.questions + off_topic(conv, offtopic[split])
            convs.append(conv)
    if args.quick:  # one small conversation: the first sessions of the first dev one
        c = next(c for c in convs if c.split == "dev")
        sessions = c.sessions[:QUICK_SESSIONS]
        ids = {t["id"] for s in sessions for t in s["turns"]}
        qs = [q for q in c.questions if q["evidence"] and set(q["evidence"]) <= ids]
        qs += [q for q in c.questions if q["kind"] == "unanswerable"][:2]
        qs += [q for q in c.questions if q["kind"] == "off-topic"][:2]
        c = Conversation(
            c.set, c.split, c.id, c.speakers, sessions, kind_balanced(qs, QUICK_QUESTIONS)
        )
        convs = [c]
    elif args.limit_questions:
        for c in convs:
            c.questions = kind_balanced(c.questions, args.limit_questions)
    return convs


def long_date(iso: str) -> str:
    d = datetime.fromisoformat(iso)
    return f"{d.day} {d.strftime('%B')} {d.year}"


def session_jsonl(session: dict) -> bytes:
    lines = []
    for t in session["turns"]:
        role = "assistant" if t["speaker"] == "Assistant" else "user"
        lines.append(
            json.dumps(
                {
                    "role": role,
                    "name": t["speaker"],
                    "content": t["text"],
                    "timestamp": session["date"],
                    "id": t["id"],
                },
                ensure_ascii=False,
            )
        )
    return ("\n".join(lines) + "\n").encode()


# --------------------------------------------------------------------------------------
# Progress, percentiles


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class Progress:
    """A `\\r` line on stderr on a terminal; elsewhere a line every 20 seconds."""

    def __init__(self, label: str, total: int) -> None:
        self.label, self.total = label, total
        self.tty = sys.stderr.isatty()
        self.t0 = self.last = time.perf_counter()

    def update(self, done: int, note: str = "") -> None:
        now = time.perf_counter()
        if self.tty and (now - self.last > 0.2 or done == self.total):
            self.last = now
            sys.stderr.write(f"\r  {self.label}: {done}/{self.total} {note}   ")
            sys.stderr.flush()
        elif not self.tty and now - self.last > 20:
            self.last = now
            say(f"  {self.label}: {done}/{self.total} {note} ({now - self.t0:.0f}s)")

    def done(self, note: str = "") -> float:
        elapsed = time.perf_counter() - self.t0
        if self.tty:
            sys.stderr.write("\n")
        say(f"  {self.label}: {self.total} in {elapsed:.1f}s {note}")
        return elapsed


def percentile(values: list[float], pct: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * pct / 100
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


# --------------------------------------------------------------------------------------
# The baseline: raw turns, BM25 + vectors, RRF, packed into the budget


class Baseline:
    """One conversation's turns as units, searchable in-process.

    Every unit is rendered `"<speaker> · <date>: <text>"`. `indexed` says what the two
    rankers see: "prefixed" (the rendered unit, as the issue describes the baseline) or
    "text" (the turn's text alone; the prefix is only in the bundle). With the prefix
    indexed, a question naming a speaker ("What is Maya's job?") matches every turn that
    speaker said, by BM25 (short turns first) and by vectors alike.
    """

    def __init__(self, conv: Conversation, embedder: LocalEmbedder, indexed: str) -> None:
        self.embedder = embedder
        self.units: list[str] = []
        texts: list[str] = []
        for s in conv.sessions:
            when = long_date(s["date"])
            self.units += [f"{t['speaker']} · {when}: {t['text']}" for t in s["turns"]]
            texts += [t["text"] for t in s["turns"]]
        seen = self.units if indexed == "prefixed" else texts
        self.text = TextIndex(None)
        path = f"baseline/{conv.id}"
        self.text.upsert(
            [Unit(i, "L2", 0, u) for i, u in enumerate(seen)],
            {i: ("user/baseline", "turn", path) for i in range(len(seen))},
        )
        vecs = embedder.embed(seen)
        self.vectors = VectorIndex(embedder.dim, capacity=len(seen))
        self.vectors.upsert(list(range(len(seen))), vecs)

    def rank(self, question: str) -> list[int]:
        n = len(self.units)
        qvec = self.embedder.embed([question])[0]
        by_vec = [label for label, _ in self.vectors.search(qvec, n)]
        by_text = [h.node_id for h in self.text.search(keywords(question), n)]
        score: dict[int, float] = {}
        for ranking in (by_vec, by_text):
            for rank, i in enumerate(ranking):
                score[i] = score.get(i, 0.0) + 1.0 / (RRF_K + rank + 1)
        text_rank = {i: r for r, i in enumerate(by_text)}
        return sorted(score, key=lambda i: (-score[i], text_rank.get(i, n), i))

    def pack(self, ranking: list[int], budget: int) -> str:
        """The ranked turns, whole, best first, within `budget` tokens (a turn that does not
        fit is skipped and the next one tried)."""
        out = ""
        for i in ranking:
            candidate = out + self.units[i] + "\n"
            if estimate_tokens(candidate) <= budget:
                out = candidate
        return out

    def bundle(self, question: str, budget: int) -> str:
        return self.pack(self.rank(question), budget)

    def close(self) -> None:
        self.text.close()


# --------------------------------------------------------------------------------------
# The mount


class RecallMount(Mount):
    """contextfs.testing.Mount with search on and the daemon's output drained continuously
    into `daemon.out` (Mount reads its pipe only at stop(); a long run fills the pipe and
    blocks the daemon)."""

    def __init__(self, path: Path, data_dir: Path) -> None:
        super().__init__(path, data_dir, search=True)
        self.out_path = data_dir.parent / "daemon.out"
        self._reader: threading.Thread | None = None

    def start(self, *extra: str, expect_fail: bool = False) -> subprocess.Popen:
        proc = super().start(*extra, expect_fail=expect_fail)
        self._reader = threading.Thread(target=self._drain, args=(proc,), daemon=True)
        self._reader.start()
        return proc

    def _drain(self, proc: subprocess.Popen) -> None:
        with open(self.out_path, "ab") as out:
            for chunk in iter(lambda: proc.stdout.read1(65536), b""):
                out.write(chunk)
                out.flush()

    def stop(self) -> str:
        subprocess.run(["fusermount3", "-u", str(self.path)], capture_output=True)
        proc = self.proc
        if proc is None:
            return ""
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            subprocess.run(["fusermount3", "-u", "-z", str(self.path)], capture_output=True)
            proc.kill()
            proc.wait(timeout=30)
            raise RuntimeError("daemon did not exit after unmount") from None
        finally:
            if self._reader:
                self._reader.join(timeout=10)
            self.proc = None
        if proc.returncode != 0:
            raise RuntimeError(f"daemon exited {proc.returncode}; see {self.out_path}")
        return self.out_path.read_text(errors="replace") if self.out_path.exists() else ""


_INDEX_LINE = re.compile(r"^index_generation: (\d+) \(committed (\d+), queue (\d+)\)", re.M)
_INBOX_LINE = re.compile(r"^inbox: (.*)$", re.M)
_CREATED = re.compile(r"^- created (\S+)", re.M)


def status(mnt: Path) -> str:
    return (mnt / ".status").read_text()


def index_caught_up(text: str) -> bool:
    m = _INDEX_LINE.search(text)
    return (
        "index: ready" in text and m is not None and m.group(1) == m.group(2) and m.group(3) == "0"
    )


def wait_index(mnt: Path, timeout: float) -> float:
    t0 = time.perf_counter()
    while True:
        text = status(mnt)
        if index_caught_up(text):
            return time.perf_counter() - t0
        if "index: failed" in text or time.perf_counter() - t0 > timeout:
            raise RuntimeError(
                f"index not caught up after {time.perf_counter() - t0:.0f}s:\n{text}"
            )
        time.sleep(0.1)


def wait_inbox(mnt: Path, timeout: float, prog: Progress, total: int) -> float:
    t0 = time.perf_counter()
    while True:
        m = _INBOX_LINE.search(status(mnt))
        line = m.group(1) if m else ""
        pending = re.search(r"pending=(\d+)", line)
        if m and not pending:
            return time.perf_counter() - t0
        prog.update(total - (int(pending.group(1)) if pending else 0), "processed")
        if time.perf_counter() - t0 > timeout:
            raise RuntimeError(f"inbox still busy after {timeout:.0f}s: {line}")
        time.sleep(0.1)


def ingest(mnt: Path, conv: Conversation) -> dict:
    owner = mnt / "user" / conv.id
    owner.mkdir()
    inbox = owner / ".inbox"
    n_turns = sum(len(s["turns"]) for s in conv.sessions)
    prog = Progress(
        f"ingest {conv.id} ({len(conv.sessions)} sessions, {n_turns} turns)", len(conv.sessions)
    )
    t0 = time.perf_counter()
    for s in conv.sessions:
        fd = os.open(inbox / f"{s['id']}.jsonl", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, session_jsonl(s))
        finally:
            os.close(fd)  # stored on close, processed in the background
    write_s = time.perf_counter() - t0
    wait_inbox(mnt, INGEST_TIMEOUT, prog, len(conv.sessions))
    reports_s = time.perf_counter() - t0
    not_done, not_understood, created = [], 0, []
    for s in conv.sessions:
        report = (inbox / f"{s['id']}.jsonl.report.md").read_text()
        if "state: done" not in report:
            not_done.append(f"{s['id']}: {report.strip()[:200]}")
        if "## Lines not understood" in report:
            not_understood += 1
        created += _CREATED.findall(report)
    index_wait = wait_index(mnt, INDEX_TIMEOUT)
    total_s = time.perf_counter() - t0
    prog.done(f"(reports {reports_s:.1f}s, indexed {total_s:.1f}s)")
    by_type: dict[str, int] = {}
    for p in created:
        parts = p.split("/")
        key = parts[2] if len(parts) > 3 else p
        by_type[key] = by_type.get(key, 0) + 1
    if not_done:
        raise RuntimeError(f"{conv.id}: inbox items not done: {not_done[:3]}")
    return {
        "conversation": conv.id,
        "set": conv.set,
        "split": conv.split,
        "sessions": len(conv.sessions),
        "turns": n_turns,
        "write_s": round(write_s, 3),
        "reports_done_s": round(reports_s, 3),
        "index_wait_s": round(index_wait, 3),
        "total_s": round(total_s, 3),
        "turns_per_s": round(n_turns / total_s, 1),
        "files_with_lines_not_understood": not_understood,
        "memories_created": len(created),
        "memories_by_type": by_type,
    }


def query_path(mnt: Path, owner: str, question: str, budget: int) -> Path:
    name = question.replace("%", "%25").replace("/", "%2F")
    return mnt / "user" / owner / ".query" / f"@budget={budget}" / name / "_context.md"


def read_bundle(path: Path) -> tuple[str, float, str | None]:
    t0 = time.perf_counter()
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        return "", time.perf_counter() - t0, f"{type(e).__name__}: {e}"
    return data.decode("utf-8", "replace"), time.perf_counter() - t0, None


# --------------------------------------------------------------------------------------
# Measuring


def read_relevance(path: Path) -> tuple[bool | None, float | None]:
    """`relevant` and the best `confidence` of a `_results.json` (None when absent)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None, None
    return data.get("relevant"), data.get("confidence")


def score(conv: Conversation, q: dict, bundle: str) -> tuple[float | None, bool | None]:
    if q["kind"] in NOTHING_KINDS or not q["evidence"]:
        return None, None
    norm = normalise(bundle)
    ev = [conv.turns[t]["text"] for t in q["evidence"] if t in conv.turns]
    coverage = sum(evidence_covered(t, norm) for t in ev) / len(ev) if ev else 0.0
    return coverage, answer_in(q["answer"], norm)


def run_queries(
    mnt: Path,
    convs: list[Conversation],
    baselines: dict[str, dict[str, Baseline]],
    budgets: list[int],
    all_examples: bool = False,
) -> tuple[list[dict], list[dict], list[str]]:
    """Every question at every budget: the mount's bundle, then each baseline's. A baseline
    ranks once per question (the ranking does not depend on the budget) and packs per
    budget; its time for one (question, budget) is the ranking's plus that packing's."""
    records: list[dict] = []
    examples: list[dict] = []
    errors: list[str] = []
    total = sum(len(c.questions) for c in convs) * len(budgets)
    prog = Progress("queries (mount, then raw turns)", total)
    done = 0
    example_budget = min(budgets, key=lambda b: abs(b - 1000))
    # warm both sides once, unmeasured (first model call, page cache)
    for c in convs[:1]:
        read_bundle(query_path(mnt, c.id, "warm up", budgets[0]))
        for bl in baselines[c.id].values():
            bl.bundle("warm up", budgets[0])
    for c in convs:
        seen_kinds: set[str] = set()
        for q in c.questions:
            rankings = {}
            for name, bl in baselines[c.id].items():
                t0 = time.perf_counter()
                rankings[name] = (bl.rank(q["question"]), time.perf_counter() - t0)
            for b in budgets:
                path = query_path(mnt, c.id, q["question"], b)
                cfs, cfs_s, err = read_bundle(path)
                if err:
                    errors.append(f"{c.id} {q['id']} @{b}: {err}")
                relevant, confidence = read_relevance(path.with_name("_results.json"))
                bundles = {"contextfs": (cfs, cfs_s)}
                for name, bl in baselines[c.id].items():
                    ranking, rank_s = rankings[name]
                    t0 = time.perf_counter()
                    raw = bl.pack(ranking, b)
                    bundles[name] = (raw, rank_s + time.perf_counter() - t0)
                for system, (bundle, secs) in bundles.items():
                    cov, ans = score(c, q, bundle)
                    records.append(
                        {
                            "set": c.set,
                            "split": c.split,
                            "conversation": c.id,
                            "id": q["id"],
                            "kind": q["kind"],
                            "budget": b,
                            "system": system,
                            "coverage": cov,
                            "answer_in": ans,
                            "tokens": estimate_tokens(bundle),
                            "nothing_relevant": NOTHING_RELEVANT in bundle,
                            "no_answer": NO_ANSWER in bundle,
                            "seconds": round(secs, 6),
                            "error": err if system == "contextfs" else None,
                            **(
                                {"relevant": relevant, "confidence": confidence}
                                if system == "contextfs"
                                else {}
                            ),
                        }
                    )
                if b == example_budget and (all_examples or q["kind"] not in seen_kinds):
                    seen_kinds.add(q["kind"])
                    examples.append(
                        {
                            "conversation": c.id,
                            "id": q["id"],
                            "kind": q["kind"],
                            "question": q["question"],
                            "answer": q["answer"],
                            "evidence": {
                                t: c.turns[t]["text"] for t in q["evidence"] if t in c.turns
                            },
                            "budget": b,
                        }
                        | {k: v[0][:6000] for k, v in bundles.items()}
                    )
                done += 1
                prog.update(done)
    prog.done()
    return records, examples, errors


def _mean(xs: list[float]) -> float | None:
    return round(statistics.fmean(xs), 4) if xs else None


def summarise(records: list[dict], budgets: list[int]) -> list[dict]:
    """Aggregate rows: (set, split, kind or 'all answerable', budget, system)."""
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        kinds = [r["kind"]] + (["all answerable"] if r["kind"] not in NOTHING_KINDS else [])
        for kind in kinds:
            groups.setdefault((r["set"], r["split"], kind, r["budget"], r["system"]), []).append(r)
    rows = []
    for (set_, split, kind, budget, system), rs in sorted(groups.items()):
        rows.append(
            {
                "set": set_,
                "split": split,
                "kind": kind,
                "budget": budget,
                "system": system,
                "n": len(rs),
                "coverage": _mean([r["coverage"] for r in rs if r["coverage"] is not None]),
                "full_coverage": _mean(
                    [float(r["coverage"] == 1.0) for r in rs if r["coverage"] is not None]
                ),
                "answer_in": _mean(
                    [float(r["answer_in"]) for r in rs if r["answer_in"] is not None]
                ),
                "tokens": _mean([float(r["tokens"]) for r in rs]),
                # the share of the budget a bundle used, and how often it was short
                "budget_share": _mean([r["tokens"] / budget for r in rs]),
                "short": _mean([float(r["tokens"] <= SMALL_SHARE * budget) for r in rs]),
                # how often the bundle said nothing relevant was found, or no answer
                "said_nothing": _mean(
                    [float(r.get("nothing_relevant") or r.get("no_answer", False)) for r in rs]
                ),
            }
        )
    return rows


def latency(records: list[dict], budgets: list[int]) -> list[dict]:
    out = []
    for b in [*budgets, None]:

        def secs(system: str, b: int | None = b) -> list[float]:
            return [
                r["seconds"]
                for r in records
                if r["system"] == system and (b is None or r["budget"] == b) and not r.get("error")
            ]

        cfs, raw = secs("contextfs"), secs("raw")
        row = {
            "budget": b if b is not None else "all",
            "n": len(cfs),
            "contextfs_p50_ms": percentile(cfs, 50) * 1000,
            "contextfs_p99_ms": percentile(cfs, 99) * 1000,
            "raw_p50_ms": percentile(raw, 50) * 1000,
            "raw_p99_ms": percentile(raw, 99) * 1000,
        }
        row["ratio_p50"] = row["contextfs_p50_ms"] / row["raw_p50_ms"] if raw else None
        out.append({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()})
    return out


# --------------------------------------------------------------------------------------
# Tables


def _cell(rows: dict, key: tuple, metric: str) -> str:
    """'ContextFS / raw / raw-text' for one table cell."""
    out = []
    for system in SYSTEMS:
        r = rows.get(key + (system,))
        v = r[metric] if r else None
        out.append("–" if v is None else f"{v:.0f}" if metric == "tokens" else f"{v:.2f}")
    return " / ".join(out)


def _relevance_rows(rows: dict, set_: str, split: str, budgets: list[int]) -> list[str]:
    """The relevance table of one group: for the kinds with nothing to find, the share of
    the budget their bundles used and the share of short bundles; for answerable
    questions, how often ContextFS said nothing relevant (wrongly)."""
    out = []
    for kind in NOTHING_KINDS:
        some = rows.get((set_, split, kind, budgets[0], "contextfs"))
        if not some:
            continue
        for metric, what in (
            ("tokens", "mean bundle tokens"),
            ("budget_share", "share of the budget used"),
            ("short", f"bundles <= {SMALL_SHARE:.0%} of the budget"),
        ):
            cells = [_cell(rows, (set_, split, kind, b), metric) for b in budgets]
            out.append(f"| {kind}: {what} | {some['n']} | " + " | ".join(cells) + " |")
    for kind in (*NOTHING_KINDS, "all answerable"):
        some = rows.get((set_, split, kind, budgets[0], "contextfs"))
        if not some:
            continue
        cells = []
        for b in budgets:
            r = rows.get((set_, split, kind, b, "contextfs"))
            cells.append(
                "–" if r is None or r["said_nothing"] is None else f"{r['said_nothing']:.2f}"
            )
        label = "**all answerable**" if kind == "all answerable" else kind
        out.append(
            f"| {label}: said nothing relevant or no answer (ContextFS) | {some['n']} | "
            + " | ".join(cells)
            + " |"
        )
    return out


def tables(summary: list[dict], budgets: list[int], convs: list[Conversation]) -> str:
    rows = {(r["set"], r["split"], r["kind"], r["budget"], r["system"]): r for r in summary}
    out = []
    groups = sorted(
        {(r["set"], r["split"]) for r in summary},
        key=lambda g: (g[0] != "generated", g[1] != "dev"),
    )
    head = "| kind | n | " + " | ".join(f"@{b}" for b in budgets) + " |"
    rule = "|---|---:|" + "---:|" * len(budgets)
    for set_, split in groups:
        members = [c for c in convs if c.set == set_ and c.split == split]
        nq = sum(len(c.questions) for c in members)
        out.append(
            f"### {set_} · {split} ({len(members)} conversation(s): "
            f"{', '.join(c.id for c in members)}; {nq} questions)\n"
        )
        kinds = [k for k in KINDS if k != "unanswerable"] + ["all answerable"]
        for metric, title in (
            (
                "coverage",
                "Evidence coverage (mean share of a question's "
                f"evidence turns in the bundle), {LEGEND}",
            ),
            ("answer_in", f"Answer in bundle (share of questions), {LEGEND}"),
        ):
            out += [f"{title}\n", head, rule]
            for kind in kinds:
                some = rows.get((set_, split, kind, budgets[0], "contextfs"))
                if not some:
                    continue
                cells = [_cell(rows, (set_, split, kind, b), metric) for b in budgets]
                label = f"**{kind}**" if kind == "all answerable" else kind
                out.append(f"| {label} | {some['n']} | " + " | ".join(cells) + " |")
            out.append("")
        relevance = _relevance_rows(rows, set_, split, budgets)
        if relevance:
            out += [
                "Relevance: the bundles of questions with nothing to find (unanswerable: "
                "never stated; off-topic: about nothing the conversation mentions), "
                f"{LEGEND}; how often ContextFS said nothing relevant\n",
                head,
                rule,
                *relevance,
                "",
            ]
    return "\n".join(out)


def latency_table(lat: list[dict]) -> str:
    out = [
        "| budget | queries | ContextFS p50 ms | ContextFS p99 ms | raw floor p50 ms | "
        "raw floor p99 ms | p50 ratio |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in lat:
        ratio = f"{r['ratio_p50']:.1f}x" if r["ratio_p50"] else "–"
        out.append(
            f"| {r['budget']} | {r['n']} | {r['contextfs_p50_ms']:.1f} | "
            f"{r['contextfs_p99_ms']:.1f} | {r['raw_p50_ms']:.1f} | "
            f"{r['raw_p99_ms']:.1f} | {ratio} |"
        )
    return "\n".join(out)


def ingest_table(rows: list[dict]) -> str:
    out = [
        "| conversation | set · split | sessions | turns | reports done s | indexed s | "
        "turns/s | memories created |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        out.append(
            f"| {r['conversation']} | {r['set']} · {r['split']} | {r['sessions']} | "
            f"{r['turns']} | {r['reports_done_s']:.1f} | {r['total_s']:.1f} | "
            f"{r['turns_per_s']:.0f} | {r['memories_created']} |"
        )
    if rows:
        turns = sum(r["turns"] for r in rows)
        secs = sum(r["total_s"] for r in rows)
        out.append(
            f"| **all** | | {sum(r['sessions'] for r in rows)} | {turns} | "
            f"{sum(r['reports_done_s'] for r in rows):.1f} | {secs:.1f} | "
            f"{turns / secs:.0f} | {sum(r['memories_created'] for r in rows)} |"
        )
    return "\n".join(out)


# --------------------------------------------------------------------------------------
# Every speaker's own node


def speaker_nodes(mnt: Path, conv: Conversation) -> list[dict]:
    """For each named speaker (not an assistant): the node that holds what is known of
    them (the entity named after them; the owner's profile when they are the one user
    who speaks), and the facts asked about them (single-hop and update questions that
    name them) whose answer that node's L2 holds, or only another speaker's node holds."""
    owner = mnt / "user" / conv.id
    people = [s for s in conv.speakers if s.lower() != "assistant"]
    nodes: dict[str, tuple[str, str]] = {}
    for s in people:
        candidates = [f"entities/{slugify(s)}"] + (["profile"] if len(people) == 1 else [])
        found = next((c for c in candidates if (owner / c / "L2.md").exists()), "")
        text = (owner / found / "L2.md").read_text(errors="replace") if found else ""
        nodes[s] = (found, normalise(text))
    rows = []
    for s, (path, text) in nodes.items():
        facts = [
            q
            for q in conv.questions
            if q["kind"] in ("single-hop", "update")
            and re.search(rf"\b{re.escape(s)}\b", q["question"])
        ]
        held = [q["id"] for q in facts if answer_in(q["answer"], text)]
        elsewhere = [
            q["id"]
            for q in facts
            if q["id"] not in held
            and any(answer_in(q["answer"], t) for o, (_, t) in nodes.items() if o != s)
        ]
        rows.append(
            {
                "conversation": conv.id,
                "set": conv.set,
                "split": conv.split,
                "speaker": s,
                "node": path or None,
                "facts": len(facts),
                "held": len(held),
                "held_ids": held,
                "elsewhere": len(elsewhere),
                "elsewhere_ids": elsewhere,
                "l2_chars": len(text),
            }
        )
    return rows


def speakers_table(rows: list[dict]) -> str:
    out = [
        "| conversation | set · split | speaker | their node | facts asked about them | "
        "held in their node | held only in another speaker's |",
        "|---|---|---|---|---:|---:|---:|",
    ]
    for r in rows:
        out.append(
            f"| {r['conversation']} | {r['set']} · {r['split']} | {r['speaker']} | "
            f"{r['node'] or '(none)'} | {r['facts']} | {r['held']} | {r['elsewhere']} |"
        )
    return "\n".join(out)


# --------------------------------------------------------------------------------------


def run(args: argparse.Namespace, convs: list[Conversation], result: dict) -> None:
    budgets = args.budgets
    t0 = time.perf_counter()
    say("loading the embedding model in-process (baseline)")
    embedder = LocalEmbedder(threads=1)
    baselines: dict[str, dict[str, Baseline]] = {}
    prog = Progress("baseline indexes (raw turns)", len(convs))
    for i, c in enumerate(convs):
        baselines[c.id] = {
            "raw": Baseline(c, embedder, "prefixed"),
            "raw-text": Baseline(c, embedder, "text"),
        }
        prog.update(i + 1)
    result["baseline_build_s"] = round(prog.done(), 2)

    base = Path(tempfile.mkdtemp(prefix="bench_recall."))
    mnt, data = base / "mnt", base / "data"
    mnt.mkdir()
    m = RecallMount(mnt, data)
    result["tmp"] = str(base)
    try:
        say(f"mounting {mnt} (data dir {data})")
        m.start()
        t_ready = time.perf_counter()
        wait_index(mnt, READY_TIMEOUT)
        result["ready_s"] = round(time.perf_counter() - t_ready, 2)
        say(f"  index ready after {result['ready_s']:.1f}s")
        result["ingest"] = [ingest(mnt, c) for c in convs]
        result["status_after_ingest"] = status(mnt)
        result["speakers"] = [row for c in convs for row in speaker_nodes(mnt, c)]
        records, examples, errors = run_queries(mnt, convs, baselines, budgets, args.all_examples)
        result["records"] = records
        result["examples"] = examples
        result["query_errors"] = errors
        result["status_after_queries"] = status(mnt)
    finally:
        for pair in baselines.values():
            for bl in pair.values():
                bl.close()
        if args.keep:
            say(
                f"kept: mount {mnt} (daemon pid {m.proc.pid if m.proc else '?'}; unmount "
                f"with `fusermount3 -u {mnt}`), data {data}"
            )
        else:
            try:
                m.stop()
            except Exception as e:  # report it; the numbers so far still count
                result["umount_error"] = f"{type(e).__name__}: {e}"
                say(f"unmount problem: {e}")
            log = data / "contextfs.log"
            if log.exists():
                result["log_problems"] = [
                    ln
                    for ln in log.read_text(errors="replace").splitlines()
                    if (" ERROR " in ln or "Traceback" in ln)
                    and not any(b in ln for b in BENIGN_LOG)  # a close racing the unmount
                ]
            if not os.path.ismount(mnt):
                shutil.rmtree(base, ignore_errors=True)
    result["elapsed_s"] = round(time.perf_counter() - t0, 1)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"CI smoke: the first {QUICK_SESSIONS} sessions of one dev "
        f"conversation, {QUICK_QUESTIONS} questions, budget 1000",
    )
    p.add_argument("--set", choices=("generated", "handwritten", "both"), default="both")
    p.add_argument("--split", choices=("dev", "held-out", "both"), default="both")
    p.add_argument(
        "--budgets", default=",".join(map(str, BUDGETS)), help="comma-separated token budgets"
    )
    p.add_argument(
        "--limit-questions",
        type=int,
        default=0,
        help="at most N questions per conversation (kinds taken in turn)",
    )
    p.add_argument(
        "--conversations",
        default="",
        help="comma-separated conversation ids (default: all of the set/split)",
    )
    p.add_argument(
        "--no-off-topic",
        action="store_true",
        help="leave out the off-topic questions (recall_data/offtopic.json)",
    )
    p.add_argument(
        "--json", default="bench-results/bench_recall.json", help="where to write the JSON"
    )
    p.add_argument(
        "--all-examples",
        action="store_true",
        help="keep every question's bundles in the JSON (at the budget nearest 1,000), "
        "not one example per kind",
    )
    p.add_argument(
        "--keep",
        action="store_true",
        help="leave the mount and its temp dir in place for debugging",
    )
    args = p.parse_args(argv)
    args.budgets = [int(b) for b in str(args.budgets).split(",") if b.strip()]
    args.conversations = [c for c in args.conversations.split(",") if c]
    if args.quick:
        args.budgets = [1000]
        if args.set == "both":
            args.set = "generated"

    convs = load(args)
    if not convs:
        say("no conversations selected")
        return 2
    info = machine_info()
    nq = sum(len(c.questions) for c in convs)
    say(
        f"bench_recall: {len(convs)} conversation(s), {nq} questions x budgets {args.budgets}; "
        f"{info.get('cpus')} cpus, load {info.get('loadavg_start')}"
    )
    result: dict = {}
    failed = None
    try:
        run(args, convs, result)
    except Exception as exc:  # report what failed, keep the JSON of what ran
        failed = f"{type(exc).__name__}: {exc}"
        say(f"bench_recall: FAILED {failed}")

    records = result.get("records", [])
    summary = summarise(records, args.budgets)
    lat = latency(records, args.budgets) if records else []
    if result.get("ingest"):
        print("## Ingest through the inbox\n")
        print(ingest_table(result["ingest"]))
        print()
    if result.get("speakers"):
        print("## Every speaker's own node\n")
        print(speakers_table(result["speakers"]))
        print()
    if records:
        print("## Recall\n")
        print(tables(summary, args.budgets, convs))
        print(
            "## Query latency (ContextFS: read of _context.md through the mount; raw floor: "
            "the baseline in-process)\n"
        )
        print(latency_table(lat))
        print()
    problems = list(result.get("query_errors", []))[:20]
    problems += [f"contextfs.log: {ln}" for ln in result.get("log_problems", [])[:20]]
    if result.get("umount_error"):
        problems.append(f"unmount: {result['umount_error']}")
    if failed:
        problems.append(f"benchmark failed: {failed}")
    if problems:
        print("Problems:")
        for line in problems:
            print(f"  - {line}")
    info["loadavg_end"] = os.getloadavg()
    out = {
        "machine": info,
        "args": vars(args),
        "conversations": [
            {
                "id": c.id,
                "set": c.set,
                "split": c.split,
                "sessions": len(c.sessions),
                "turns": sum(len(s["turns"]) for s in c.sessions),
                "questions": len(c.questions),
            }
            for c in convs
        ],
        "systems": list(SYSTEMS),
        "summary": summary,
        "latency": lat,
        "problems": problems,
        "error": failed,
    } | result
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1, default=str, ensure_ascii=False) + "\n")
    print(f"\nJSON written to {path} ({result.get('elapsed_s', 0):.0f}s)")
    return 1 if failed or result.get("umount_error") else 0


if __name__ == "__main__":
    sys.exit(main())
