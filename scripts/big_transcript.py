"""Peak memory and time of processing one big inbox transcript.

    .venv/bin/python scripts/big_transcript.py [MiB] [--json PATH]
    .venv/bin/python scripts/big_transcript.py 50 --mount [--search] [--json PATH]
    .venv/bin/python scripts/big_transcript.py 50 --cold-read [--json PATH]
    .venv/bin/python scripts/big_transcript.py --session [TURNS] [--json PATH]
    .venv/bin/python scripts/big_transcript.py --notes 1000 [--search] [--json PATH]

Writes a seeded JSONL transcript of about MiB mebibytes (default 50; one conversation,
80-word turns, a preference every 97th turn) to a temporary file, then:

- in process (default): opens a store in a temporary data dir as the daemon does (DuckDB's
  buffers limited to the default `store_memory_mb`), hands the file's bytes to the inbox as
  a mount does with a big file (redacted, then stored 4 MiB a transaction: `Intake.receive`)
  and runs one processing step of `IntakeService` (read back, parse, rule extraction, the
  archive in parts and the memories in one transaction). No FUSE, no embedding model.
  Prints, for each stage, the process's RSS after it and its peak (VmHWM) during it (the
  high-water mark is reset between stages through /proc/self/clear_refs), and the seconds.
- `--mount`: the same file copied into `.inbox/` of a real mount (`--search` loads the
  embedding model and indexes the archive as it comes); prints the daemon's VmRSS when the
  mount is ready, its VmHWM after the copy and when the report says done, and, with
  `--search`, what the model accounts for (VmRSS once the index is ready on an empty
  store, against the same mount without search); a probe beside it saves and fsyncs a
  file every 0.2 s, and its fsync p50 / p99 / max say how long filing the transcript
  held the mount.

- `--cold-read`: the same file copied into `.inbox/` of a real mount (search off) and
  processed; then the mount is stopped and started again (and left 10 s to settle), and
  the item is read back cold (`head -c 1M`, then `cat` of all of it): prints the daemon's
  VmRSS before each read and its VmHWM during it (reset before each through
  /proc/PID/clear_refs), and the seconds.

- `--session [TURNS]` (default 3000): a live session of a real mount (search off) fed
  the way an agent feeds it, one `>>` of one turn (a 900-character line) at a time, the
  file opened, written and closed each time: prints the appends per second of each 250
  (with the transcript's size when they began), then the `rmdir` that archives it.

- `--notes N`: not a transcript but markdown notes of N lines, each a preference and a
  dated event ("I prefer wq 7 for wqz 7. I have a meeting with Sara on 8 January 2020."):
  one item of 2N memories, copied into `.inbox/` of a real mount (`--search` with the
  embedding model, the embedded defaults). A probe beside it, every 0.2 s, makes a node
  and saves its file (mkdir, create, write, fsync, close: timed as a whole and each);
  prints the filing's seconds and memories/s, the probe's p50 / p99 / max before, while
  and after the item is filed, and the longest probe's steps. Exits 1 unless every
  memory was created once (a node each, none `-2`) and the session archived once.
  `--notes 200` is the quick run.

`--json PATH` writes the table's figures and the machine's description.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import itertools
import json
import os
import random
import re
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import trio

from contextfs.config import Config
from contextfs.conversations.inbox import Intake, IntakeService
from contextfs.ctxtypes import builtin_schema_dir, load_types
from contextfs.memory.redact import Redactor
from contextfs.memory.service import Memory
from contextfs.store import Store
from contextfs.testing import Mount, machine_info, proc_status, wait_index_ready, write_json

WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "lazy",
    "dog",
    "we",
    "talked",
    "about",
    "postgres",
    "vim",
    "tea",
    "coffee",
    "paris",
    "project",
    "deadline",
    "meeting",
]
MIB = 2**20
DEFAULTS = {f.name: f.default for f in dataclasses.fields(Config)}


def write_transcript(path: Path, mib: int) -> int:
    """A seeded JSONL transcript of about `mib` MiB at `path`, written a line at a time;
    returns its turns."""
    rng = random.Random(1)
    size, i = 0, 0
    with path.open("w") as f:
        while size < mib * MIB:
            text = " ".join(rng.choice(WORDS) for _ in range(80))
            if i % 97 == 0:
                text = "I prefer vim for editing. " + text
            role = "user" if i % 2 == 0 else "assistant"
            line = json.dumps({"role": role, "content": text, "id": f"m{i}"}) + "\n"
            f.write(line)
            size += len(line)
            i += 1
    return i


def own_status() -> tuple[float, float]:
    """This process's VmRSS and VmHWM, in MiB."""
    got = proc_status(int(Path("/proc/self").resolve().name))
    return got["VmRSS"] / MIB, got["VmHWM"] / MIB


def reset_peak() -> None:
    """Start VmHWM over at the current RSS (Linux: clear_refs 5)."""
    Path("/proc/self/clear_refs").write_text("5")


class Stages:
    def __init__(self) -> None:
        self.rows: list[dict] = []
        self.t = time.monotonic()
        reset_peak()

    def mark(self, stage: str) -> None:
        rss, hwm = own_status()
        now = time.monotonic()
        self.rows.append(
            {"stage": stage, "rss_mib": round(rss), "peak_mib": round(hwm), "s": now - self.t}
        )
        self.t = now
        reset_peak()


def in_process(src: Path, tmp: Path) -> dict:
    stages = Stages()
    memory = Memory(
        Store(tmp / "contextfs.duckdb", memory_mb=DEFAULTS["store_memory_mb"]),
        load_types([builtin_schema_dir()]),
        data_dir=tmp,
        max_file_size=64 * MIB,
        redactor=Redactor({}),  # the built-in patterns, as a config without redact_patterns
    )
    memory.create_owner("user", "default")
    intake = Intake(memory)
    stages.mark("open the store")
    data = src.read_bytes()  # what the mount holds of a file written into .inbox/
    stages.mark("the file's bytes")
    assert memory.redactor is not None
    redacted, found = memory.redactor.redact_bytes(data)
    del data
    stages.mark("redacted")
    item = None
    for step in intake.receive(("user", "default"), src.name, redacted, found):
        item = step
    del redacted
    assert item is not None
    stages.mark("stored in the inbox")
    trio.run(IntakeService(intake).step)
    stages.mark("processed (parse, extract, archive)")
    archived = item.report.split("## Archived")[1].split("##")[0].strip().splitlines()
    state = re.search(r"^state: .*$", item.report, re.M)
    return {
        "stages": stages.rows,
        "peak_mib": max(r["peak_mib"] for r in stages.rows),
        "report_state": state.group(0) if state else item.report[:200],
        "parts": len(archived),
        "first_part": archived[0].removeprefix("- "),
    }


def through_mount(src: Path, tmp: Path, search: bool) -> dict:
    mnt = tmp / "mnt"
    mnt.mkdir()
    m = Mount(mnt, tmp / "data", search=search)
    m.start()
    try:
        assert m.proc is not None
        pid = m.proc.pid
        if search:  # the model is loaded and the (empty) index ready
            deadline = time.monotonic() + 300
            while "index: ready" not in m.status() and time.monotonic() < deadline:
                time.sleep(0.5)
        ready = proc_status(pid)
        probe = Probe(mnt / "user/default/preferences/probe.md")
        probe.start()
        t0 = time.monotonic()
        shutil.copyfile(src, mnt / ".inbox" / src.name)
        copied = proc_status(pid)
        copy_s = time.monotonic() - t0
        report = mnt / ".inbox" / f"{src.name}.report.md"
        while "state: done" not in report.read_text():
            time.sleep(1)
        done = proc_status(pid)
        done_s = time.monotonic() - t0
        probe.stop()
        text = report.read_text()
    finally:
        m.stop()
    state = re.search(r"^state: .*$", text, re.M)
    return {
        "search": search,
        "ready_rss_mib": round(ready["VmRSS"] / MIB),
        "after_copy_hwm_mib": round(copied["VmHWM"] / MIB),
        "copy_s": copy_s,
        "done_hwm_mib": round(done["VmHWM"] / MIB),
        "done_rss_mib": round(done["VmRSS"] / MIB),
        "done_s": done_s,
        "report_state": state.group(0) if state else text[:200],
        "probe_fsync_ms": probe.figures(),
    }


def cold_read(src: Path, tmp: Path) -> dict:
    """The item read back through a fresh mount: what a read costs the daemon when
    nothing of the item is in its memory or the kernel's page cache."""
    mnt = tmp / "mnt"
    mnt.mkdir()
    m = Mount(mnt, tmp / "data")
    m.start()
    try:
        shutil.copyfile(src, mnt / ".inbox" / src.name)
        report = mnt / ".inbox" / f"{src.name}.report.md"
        while "state: done" not in report.read_text():
            time.sleep(1)
        m.stop()
        m.start()
        assert m.proc is not None
        pid = m.proc.pid
        item = mnt / ".inbox" / src.name
        m.status()
        time.sleep(10)  # what a mount does in its first seconds (texts read, fsck) is done
        rows = []
        for what, argv in (
            ("head -c 1M", ["head", "-c", str(MIB), str(item)]),
            ("cat (all of it)", ["cat", str(item)]),
        ):
            before = proc_status(pid)
            Path(f"/proc/{pid}/clear_refs").write_text("5")
            t = time.monotonic()
            with open(os.devnull, "wb") as out:
                subprocess.run(argv, stdout=out, check=True)
            s = time.monotonic() - t
            after = proc_status(pid)
            rows.append(
                {
                    "read": what,
                    "rss_before_mib": round(before["VmRSS"] / MIB),
                    "peak_mib": round(after["VmHWM"] / MIB),
                    "rss_after_mib": round(after["VmRSS"] / MIB),
                    "s": s,
                }
            )
        same = subprocess.run(["cmp", str(src), str(item)], capture_output=True)
    finally:
        m.stop()
    return {"reads": rows, "same_bytes": same.returncode == 0}


SESSION_BATCH = 250  # appends a row of the --session table


def session_appends(turns: int, tmp: Path) -> dict:
    """One turn appended at a time to a live session's transcript, timed per 250."""
    mnt = tmp / "mnt"
    mnt.mkdir()
    m = Mount(mnt, tmp / "data")
    m.start()
    rng = random.Random(1)
    rows, expected = [], bytearray()
    try:
        sess = mnt / ".sessions" / "s1"
        sess.mkdir()
        path = sess / "transcript.jsonl"
        t0 = time.monotonic()
        for start in range(0, turns, SESSION_BATCH):
            size, t = len(expected), time.monotonic()
            for i in range(start, min(start + SESSION_BATCH, turns)):
                words = " ".join(rng.choice(WORDS) for _ in range(200))[:880]
                role = "user" if i % 2 == 0 else "assistant"
                line = json.dumps({"role": role, "content": f"Turn {i} {words}"}) + "\n"
                with open(path, "a") as f:  # what `printf ... >> transcript.jsonl` does
                    f.write(line)
                expected += line.encode()
            s = time.monotonic() - t
            n = min(start + SESSION_BATCH, turns) - start
            rows.append(
                {"from_turn": start, "at_mib": size / MIB, "appends": n, "s": s,
                 "per_s": n / s, "ms_each": 1000 * s / n}
            )  # fmt: skip
        append_s = time.monotonic() - t0
        same = path.read_bytes() == bytes(expected)
        t = time.monotonic()
        sess.rmdir()
        end_s = time.monotonic() - t
        parts = sorted(p.name for p in (mnt / "user/default/sessions").iterdir())
    finally:
        m.stop()
    return {
        "batches": rows,
        "append_s": append_s,
        "same_bytes": same,
        "transcript_bytes": len(expected),
        "end_s": end_s,
        "parts": parts,
    }


def print_session(r: dict) -> None:
    print("\n| turns | transcript at start (MiB) | appends/s | ms each |")
    print("|---|---:|---:|---:|")
    for b in r["batches"]:
        print(
            f"| {b['from_turn']}-{b['from_turn'] + b['appends'] - 1} | {b['at_mib']:.2f} | "
            f"{b['per_s']:.0f} | {b['ms_each']:.1f} |"
        )
    print(
        f"\n{len(r['batches'])} batches in {r['append_s']:.1f} s; the transcript reads back "
        f"as appended: {r['same_bytes']} ({r['transcript_bytes'] / MIB:.2f} MiB); "
        f"rmdir {r['end_s']:.1f} s, archived as {len(r['parts'])} part(s)"
    )


def print_cold(r: dict) -> None:
    print("\n| cold read of the item | VmRSS before (MiB) | VmHWM during | VmRSS after | s |")
    print("|---|---:|---:|---:|---:|")
    for row in r["reads"]:
        print(
            f"| {row['read']} | {row['rss_before_mib']} | {row['peak_mib']} | "
            f"{row['rss_after_mib']} | {row['s']:.1f} |"
        )
    print(f"\nthe bytes read are the file's: {r['same_bytes']}")


class Probe(threading.Thread):
    """A writer beside the import: every 0.2 s a file saved and fsynced in a type directory
    (timed), so a stall of the mount while the transcript is filed shows as a slow fsync."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path, self.times, self._done = path, [], threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            t = time.monotonic()
            with open(self.path, "w") as f:
                f.write("I like probes.\n")
                f.flush()
                os.fsync(f.fileno())
            self.times.append(time.monotonic() - t)
            self._done.wait(0.2)

    def stop(self) -> None:
        self._done.set()
        self.join()

    def figures(self) -> dict:
        ms = sorted(t * 1000 for t in self.times)
        if not ms:
            return {}
        return {
            "n": len(ms),
            "p50": round(ms[len(ms) // 2], 1),
            "p99": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 1),
            "max": round(ms[-1], 1),
        }


def write_notes(path: Path, lines: int) -> int:
    """Markdown notes of `lines` lines at `path`, each a preference and a dated event;
    returns the memories they hold."""
    day = dt.date(2020, 1, 1)
    with path.open("w") as f:
        for i in range(lines):
            d = day + dt.timedelta(days=i)
            f.write(
                f"I prefer wq {i} for wqz {i}. I have a meeting with Sara on {d.day} {d:%B %Y}.\n"
            )
    return 2 * lines


class NodeProbe(threading.Thread):
    """A writer beside the import: every 0.2 s a new node made and its file saved (mkdir,
    create, write, fsync, close), each step timed."""

    STEPS = ("mkdir", "create", "write", "fsync", "close")

    def __init__(self, base: Path) -> None:
        super().__init__(daemon=True)
        self.base, self._done = base, threading.Event()
        self.samples: list[tuple[float, float, list[float]]] = []  # start, seconds, steps

    def run(self) -> None:
        i = 0
        while not self._done.is_set():
            d = self.base / f"probe-{i}"
            t = [time.monotonic()]
            os.mkdir(d)
            t.append(time.monotonic())
            fd = os.open(d / "L2.md", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            t.append(time.monotonic())
            os.write(fd, f"I like probe {i}.\n".encode())
            t.append(time.monotonic())
            os.fsync(fd)
            t.append(time.monotonic())
            os.close(fd)
            t.append(time.monotonic())
            self.samples.append((t[0], t[-1] - t[0], [b - a for a, b in itertools.pairwise(t)]))
            i += 1
            self._done.wait(0.2)

    def stop(self) -> None:
        self._done.set()
        self.join()

    def figures(self, start: float, end: float) -> dict:
        """p50 / p99 / max (ms) of the probes begun in [start, end)."""
        ms = sorted(s * 1000 for t, s, _ in self.samples if start <= t < end)
        if not ms:
            return {"n": 0}
        return {
            "n": len(ms),
            "p50": round(ms[len(ms) // 2], 1),
            "p99": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 1),
            "max": round(ms[-1], 1),
        }


def notes_through_mount(tmp: Path, lines: int, search: bool) -> dict:
    """One markdown item of many memories filed beside a writer (`--notes`)."""
    src = tmp / "notes.md"
    memories = write_notes(src, lines)
    mnt = tmp / "mnt"
    mnt.mkdir()
    m = Mount(mnt, tmp / "data", search=search)
    m.start()
    try:
        if search:  # the model is loaded and the (empty) index ready
            deadline = time.monotonic() + 300
            while "index: ready" not in m.status() and time.monotonic() < deadline:
                time.sleep(0.5)
        probe = NodeProbe(mnt / "user/default/preferences")
        probe.start()
        time.sleep(2)  # probes before the copy: the mount alone
        t0 = time.monotonic()
        shutil.copyfile(src, mnt / ".inbox" / src.name)
        copied = time.monotonic()
        report = mnt / ".inbox" / f"{src.name}.report.md"
        while "state: done" not in report.read_text():
            time.sleep(0.1)
        done = time.monotonic()
        time.sleep(2)  # and after it, the indexer busy with what was filed
        probe.stop()
        drained = done + wait_index_ready(mnt, 600)[0] if search else done
        text = report.read_text()
        u = mnt / "user/default"
        prefs = [p.name for p in (u / "preferences").iterdir() if p.name.startswith("wqz-")]
        events = [p.name for p in (u / "events").iterdir()]
        sessions = len(list((u / "sessions").iterdir()))
    finally:
        m.stop()
    state = re.search(r"^state: .*$", text, re.M)
    worst = max((x for x in probe.samples if t0 <= x[0] < done), key=lambda x: x[1], default=None)
    filed_once = (
        len(set(prefs)) == lines
        and len(events) == lines
        and not [e for e in events if e.endswith("-2")]
        and sessions == 1
        and text.count("- created ") >= memories
    )
    return {
        "search": search,
        "lines": lines,
        "memories": memories,
        "copy_s": copied - t0,
        "filing_s": done - t0,
        "drained_s": drained - t0,
        "memories_per_s": memories / (done - t0),
        "report_state": state.group(0) if state else text[:200],
        "filed_once": filed_once,
        "probe_ms": {
            "before": probe.figures(-float("inf"), t0),
            "while filed": probe.figures(t0, done),
            "after": probe.figures(done, float("inf")),
        },
        "worst_probe_ms": (
            {
                "total": round(worst[1] * 1000, 1),
                **{k: round(v * 1000, 1) for k, v in zip(NodeProbe.STEPS, worst[2], strict=True)},
            }
            if worst
            else {}
        ),
    }


def print_notes(r: dict) -> None:
    print(
        f"\n{r['lines']} lines of notes, {r['memories']} memories, search "
        f"{'on' if r['search'] else 'off'}: filed in {r['filing_s']:.1f} s after the copy "
        f"({r['memories_per_s']:.0f} memories/s); every memory created once and the "
        f"session archived once: {r['filed_once']}"
    )
    if r["search"]:
        print(f"the index drained (ready, queue 0) {r['drained_s']:.1f} s after the copy")
    print("\n| probe (mkdir + create + write + fsync + close, every 0.2 s) | n | p50 ms "
          "| p99 ms | max ms |")  # fmt: skip
    print("|---|---:|---:|---:|---:|")
    for when, f in r["probe_ms"].items():
        if f["n"]:
            print(f"| {when} | {f['n']} | {f['p50']} | {f['p99']} | {f['max']} |")
    w = r["worst_probe_ms"]
    if w:
        steps = ", ".join(f"{k} {w[k]}" for k in NodeProbe.STEPS)
        print(f"\nthe longest probe while filed: {w['total']} ms ({steps})")
    print(f"\n{r['report_state']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mib", nargs="?", type=int, help="MiB (default 50); with --session: turns")
    ap.add_argument("--notes", type=int, metavar="N", help="markdown notes of N lines instead")
    ap.add_argument("--mount", action="store_true", help="through a real mount")
    ap.add_argument("--search", action="store_true", help="with --mount: load the model")
    ap.add_argument("--cold-read", action="store_true", help="read the item after a remount")
    ap.add_argument("--session", action="store_true", help="appends to a live session")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="big-transcript-"))
    if args.notes:
        try:
            result = notes_through_mount(tmp, args.notes, args.search)
            print_notes(result)
            if args.json:
                write_json(args.json, {"machine": machine_info(), **result})
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        raise SystemExit(0 if result["filed_once"] else 1)
    if args.session:
        try:
            turns = args.mib or 3000
            result = session_appends(turns, tmp)
            print_session(result)
            if args.json:
                write_json(args.json, {"machine": machine_info(), "turns": turns, **result})
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return
    args.mib = args.mib or 50
    try:
        src = tmp / "big.jsonl"
        turns = write_transcript(src, args.mib)
        size = src.stat().st_size
        print(f"transcript: {size / MIB:.1f} MiB, {turns} turns")
        if args.cold_read:
            result = cold_read(src, tmp)
            print_cold(result)
        elif args.mount:
            result = through_mount(src, tmp, args.search)
            if args.search:
                bare = through_mount(write_small(tmp), tmp / "bare", False)
                result["without_model_ready_rss_mib"] = bare["ready_rss_mib"]
            print_mount(result)
        else:
            result = in_process(src, tmp)
            print_stages(result)
        result = {"mib": args.mib, "bytes": size, "turns": turns, **result}
        if args.json:
            write_json(args.json, {"machine": machine_info(), **result})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_small(tmp: Path) -> Path:
    (tmp / "bare").mkdir()
    path = tmp / "bare" / "small.jsonl"
    path.write_text(json.dumps({"role": "user", "content": "hello", "id": "m0"}) + "\n")
    return path


def print_stages(r: dict) -> None:
    print("\n| stage | RSS after (MiB) | peak during (MiB) | s |")
    print("|---|---:|---:|---:|")
    for row in r["stages"]:
        print(f"| {row['stage']} | {row['rss_mib']} | {row['peak_mib']} | {row['s']:.1f} |")
    print(f"\npeak RSS {r['peak_mib']} MiB; {r['report_state']}")
    print(f"archived in {r['parts']} part(s), the first {r['first_part']}")


def print_mount(r: dict) -> None:
    print(f"\n| daemon (search: {'on' if r['search'] else 'off'}) | MiB | s |")
    print("|---|---:|---:|")
    print(f"| VmRSS at ready | {r['ready_rss_mib']} | - |")
    if "without_model_ready_rss_mib" in r:
        model = r["ready_rss_mib"] - r["without_model_ready_rss_mib"]
        print(f"| of which the model and the search (ready RSS minus search off) | {model} | - |")
    print(f"| VmHWM after the copy into .inbox/ | {r['after_copy_hwm_mib']} | {r['copy_s']:.1f} |")
    print(f"| VmHWM when the report says done | {r['done_hwm_mib']} | {r['done_s']:.1f} |")
    print(f"| VmRSS when the report says done | {r['done_rss_mib']} | - |")
    p = r["probe_fsync_ms"]
    if p:
        print(
            f"\nprobe beside it (save + fsync every 0.2 s): {p['n']} fsyncs, p50 {p['p50']} ms, "
            f"p99 {p['p99']} ms, max {p['max']} ms"
        )
    print(f"\n{r['report_state']}")


if __name__ == "__main__":
    main()
