"""Concurrent writers and readers on overlapping nodes of a real mount: no lost update.

W writer threads (default 8) each make N writes (default 1,000), cycling through three
kinds, all aimed at a few shared nodes so that writers overlap:

- aggregate: a drop file `agent/bot/patterns/w<W>-i<I>.md` whose front matter names one of
  a few topics (`topic: topic-<k>`) and whose body is one bullet
  `- writer W item I <uuid>`. The pattern type aggregates: every distinct item must end up
  in the topic node's `L2.md` (the uuid keeps items distinct for near-duplicate folding;
  the drop names are unique because two writers sharing one drop file name would be two
  writers of one file, which loses bytes on any filesystem).
- append: `>>` (O_APPEND, one write, close) of `line W I <uuid>` to one of a few shared
  `user/default/preferences/shared-<k>/L2.md`; every line must be present.
- event: a drop file `user/default/events/e-w<W>-i<I>.md`; the event type appends, so the
  number of event nodes must equal the number of event writes.

R reader threads (default 2) loop meanwhile: `ls -R` of the owner directories and `cat` of a
random node's `L2.md`. Afterwards every check runs on the live mount and again after a
remount (from the store); then the daemon log must hold no ERROR/Traceback and `fsck` of
the unmounted store must be clean. Latency percentiles (p50/p90/p99/max, ms) of each kind
of write and of the reads are printed as a markdown table and written to JSON.

    .venv/bin/python scripts/concurrency.py                      # 8 x 1,000
    .venv/bin/python scripts/concurrency.py --writes 50          # CI size
    .venv/bin/python scripts/concurrency.py --json bench-results/concurrency.json

Exit status 0 when nothing was lost and the daemon was clean, 1 otherwise.
"""

from __future__ import annotations

import argparse
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from contextfs.testing import DrainedMount, rank_percentile, write_json

TOPICS = 4
SHARED = 4
KINDS = ("aggregate", "append", "event")


@dataclass
class Result:
    writers: int
    writes_per_writer: int
    readers: int
    seconds: float = 0.0
    writes: dict[str, int] = field(default_factory=dict)
    write_errors: list[str] = field(default_factory=list)
    read_errors: list[str] = field(default_factory=list)
    reads: int = 0
    latency_ms: dict[str, dict[str, float]] = field(default_factory=dict)
    lost: dict[str, list[str]] = field(default_factory=dict)  # check -> missing items
    event_nodes: int = 0
    daemon_errors: list[str] = field(default_factory=list)
    fsck: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (
            self.write_errors
            or self.read_errors
            or any(self.lost.values())
            or self.daemon_errors
            or self.fsck
        )


def percentiles(xs: list[float]) -> dict[str, float]:
    """Nearest-rank p50/p90/p99 and the maximum, in milliseconds."""
    if not xs:
        return {"n": 0}

    def p(q: float) -> float:
        return rank_percentile(xs, q) * 1000

    return {"n": len(xs), "p50": p(0.50), "p90": p(0.90), "p99": p(0.99), "max": max(xs) * 1000}


class Load:
    def __init__(self, mnt: Path, writers: int, writes: int, readers: int) -> None:
        self.mnt = mnt
        self.patterns = mnt / "agent/bot/patterns"
        self.events = mnt / "user/default/events"
        self.prefs = mnt / "user/default/preferences"
        self.n_writers, self.n_writes, self.n_readers = writers, writes, readers
        self.lock = threading.Lock()
        self.expected: dict[str, list[tuple[int, str]]] = {k: [] for k in KINDS}
        self.lat: dict[str, list[float]] = {k: [] for k in (*KINDS, "ls -R", "cat")}
        self.write_errors: list[str] = []
        self.read_errors: list[str] = []
        self.stop_readers = threading.Event()

    def setup(self) -> None:
        (self.mnt / "agent/bot").mkdir()
        for k in range(TOPICS):  # the topic nodes exist before the race starts
            (self.patterns / f"topic-{k}.md").write_text(f"- seed item for topic {k}\n")
        for k in range(SHARED):
            node = self.prefs / f"shared-{k}"
            node.mkdir()
            (node / "L2.md").write_text(f"# shared {k}\n")

    def writer(self, w: int) -> None:
        rnd = random.Random(w)
        for i in range(self.n_writes):
            kind = KINDS[(i + w) % 3]
            tag = uuid.uuid4().hex
            k = rnd.randrange(TOPICS if kind == "aggregate" else SHARED)
            t0 = time.perf_counter()
            try:
                if kind == "aggregate":
                    text = f"---\ntopic: topic-{k}\n---\n- writer {w} item {i} {tag}\n"
                    with open(self.patterns / f"w{w}-i{i}.md", "w") as f:
                        f.write(text)
                elif kind == "append":
                    with open(self.prefs / f"shared-{k}" / "L2.md", "a") as f:
                        f.write(f"line {w} {i} {tag}\n")
                else:
                    with open(self.events / f"e-w{w}-i{i}.md", "w") as f:
                        f.write(f"event from writer {w} number {i} {tag}\n")
            except OSError as exc:
                with self.lock:
                    self.write_errors.append(f"{kind} w{w} i{i}: {exc}")
                continue
            dt = time.perf_counter() - t0
            with self.lock:
                self.lat[kind].append(dt)
                self.expected[kind].append((k, tag))

    def reader(self, r: int) -> None:
        rnd = random.Random(1000 + r)
        roots = [str(self.mnt / "agent/bot"), str(self.mnt / "user/default")]
        while not self.stop_readers.is_set():
            t0 = time.perf_counter()
            p = subprocess.run(
                ["ls", "-R", *roots], capture_output=True, text=True, errors="replace", timeout=120
            )
            dt = time.perf_counter() - t0
            # a name routed away between readdir and stat is fine; anything else is not
            errs = [ln for ln in p.stderr.splitlines() if "No such file" not in ln]
            with self.lock:
                self.lat["ls -R"].append(dt)
                self.read_errors += [f"ls -R: {e}" for e in errs[:3]]
            node = (
                self.patterns / f"topic-{rnd.randrange(TOPICS)}"
                if rnd.random() < 0.5
                else self.prefs / f"shared-{rnd.randrange(SHARED)}"
            )
            t0 = time.perf_counter()
            try:
                (node / "L2.md").read_bytes()
            except OSError as exc:
                with self.lock:
                    self.read_errors.append(f"cat {node.name}/L2.md: {exc}")
                continue
            with self.lock:
                self.lat["cat"].append(time.perf_counter() - t0)

    def run(self) -> float:
        threads = [threading.Thread(target=self.writer, args=(w,)) for w in range(self.n_writers)]
        readers = [threading.Thread(target=self.reader, args=(r,)) for r in range(self.n_readers)]
        t0 = time.monotonic()
        for t in readers + threads:
            t.start()
        for t in threads:
            t.join()
        self.stop_readers.set()
        for t in readers:
            t.join()
        return time.monotonic() - t0

    def check(self, where: str) -> tuple[dict[str, list[str]], int]:
        """Every acknowledged write is visible: {check: missing}, event node count."""
        lost: dict[str, list[str]] = {}
        texts = {k: (self.patterns / f"topic-{k}" / "L2.md").read_text() for k in range(TOPICS)}
        lost[f"aggregate items ({where})"] = [
            f"topic-{k} {tag}" for k, tag in self.expected["aggregate"] if tag not in texts[k]
        ]
        texts = {k: (self.prefs / f"shared-{k}" / "L2.md").read_text() for k in range(SHARED)}
        lost[f">> lines ({where})"] = [
            f"shared-{k} {tag}" for k, tag in self.expected["append"] if tag not in texts[k]
        ]
        events = [d for d in self.events.iterdir() if d.is_dir()]
        bodies = "".join((d / "L2.md").read_text() for d in events)
        lost[f"event nodes ({where})"] = [
            f"event {tag}" for _k, tag in self.expected["event"] if tag not in bodies
        ]
        if len(events) != len(self.expected["event"]):
            lost[f"event nodes ({where})"].append(
                f"{len(events)} event nodes for {len(self.expected['event'])} event writes"
            )
        leftovers = [p.name for p in self.patterns.iterdir() if p.is_file()]
        leftovers += [p.name for p in self.events.iterdir() if p.is_file()]
        lost[f"drop files left in type dirs ({where})"] = leftovers
        return lost, len(events)


def run(writers: int, writes: int, readers: int, keep: bool = False) -> Result:
    res = Result(writers, writes, readers)
    tmp = Path(tempfile.mkdtemp(prefix="ctxfs-conc-"))
    mnt = tmp / "mnt"
    mnt.mkdir()
    m = DrainedMount(mnt, tmp / "data")
    m.start()
    load = Load(mnt, writers, writes, readers)
    try:
        load.setup()
        res.seconds = load.run()
        res.writes = {k: len(v) for k, v in load.expected.items()}
        res.write_errors, res.read_errors = load.write_errors, load.read_errors
        res.reads = len(load.lat["cat"]) + len(load.lat["ls -R"])
        res.latency_ms = {k: percentiles(v) for k, v in load.lat.items()}
        lost, res.event_nodes = load.check("live mount")
        res.lost.update(lost)
        m.stop()
        m.start()
        lost, _ = load.check("after remount")
        res.lost.update(lost)
    finally:
        if m.proc is not None:
            try:
                m.stop()
            except RuntimeError as exc:
                res.daemon_errors.append(str(exc))
        subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True)
    res.daemon_errors += m.problems()
    res.fsck = m.fsck()
    if not keep:
        shutil.rmtree(tmp, ignore_errors=True)
    return res


def table(res: Result) -> str:
    out = ["| operation | count | p50 ms | p90 ms | p99 ms | max ms |", "|---|---|---|---|---|---|"]
    for k, p in res.latency_ms.items():
        if p.get("n"):
            out.append(
                f"| {k} | {p['n']} | {p['p50']:.1f} | {p['p90']:.1f} | {p['p99']:.1f} | "
                f"{p['max']:.1f} |"
            )
    out += ["", "| check | missing |", "|---|---|"]
    for k, v in res.lost.items():
        out.append(f"| {k} | {len(v)}{' — ' + ', '.join(v[:3]) if v else ''} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--writers", type=int, default=8)
    ap.add_argument("--writes", type=int, default=1000, help="writes per writer")
    ap.add_argument("--readers", type=int, default=2)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args(argv)
    res = run(args.writers, args.writes, args.readers, args.keep)
    total = sum(res.writes.values())
    print(
        f"{args.writers} writers x {args.writes} writes ({total} acknowledged: {res.writes}), "
        f"{args.readers} readers ({res.reads} reads), {res.seconds:.1f} s, "
        f"{total / res.seconds if res.seconds else 0:.0f} writes/s"
    )
    print(table(res))
    print(f"\nwrite errors: {len(res.write_errors)} {res.write_errors[:3]}")
    print(f"read errors: {len(res.read_errors)} {res.read_errors[:3]}")
    print(f"daemon errors: {len(res.daemon_errors)} {res.daemon_errors[:3]}")
    print(f"fsck: {res.fsck or 'clean'}")
    print("PASS" if res.ok else "FAIL")
    if args.json:
        doc = asdict(res)
        doc["ok"] = res.ok
        doc["lost_total"] = sum(len(v) for v in res.lost.values())
        write_json(args.json, doc)
    return 0 if res.ok else 1


if __name__ == "__main__":
    sys.exit(main())
