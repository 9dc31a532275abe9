"""What an install costs on disk and in memory: venv size, CUDA on disk and mapped, RSS
of an idle mount and of one with the model loaded, model load time, query p50.

Each `--target NAME=CHECKOUT[:PYTHON]` is a source checkout and the interpreter of its venv
(default `CHECKOUT/.venv/bin/python`); targets are measured one after the other in one run
so they compare side by side (e.g. this checkout against a worktree of an older commit with
its own venv). For each target, on a small store (the sample conversation through the inbox
and 200 preference nodes):

- `venv`: the venv's size on disk; `nvidia/`+`triton/`: what of it is CUDA;
- `idle`: a mount with `search: false` (no model, no indexes), VmRSS after browsing the tree;
- `loaded`: a default mount, from start to `.status` saying `index: ready` with an empty
  queue (the model's load and the store indexed), VmRSS then, and after the questions;
- `mapped CUDA`: MiB of the daemon's RSS in files under `nvidia/`, `triton/` or named
  `*cuda*` (from /proc/PID/smaps);
- `query p50`: `cat .query/<question>/_context.md` of 20 new questions, after 3 warm-up ones.

Usage: python scripts/bench_footprint.py --target after=. [--target before=/tmp/before]
       [--json PATH] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from contextfs.testing.report import disk_usage, proc_status

ROOT = Path(__file__).resolve().parent.parent
QUESTIONS = [
    "which editor does Sam use",
    "what language does Sam write",
    "who owns billing",
    "when was the orders database migrated",
    "how to fix the nightly export",
    "tabs or spaces",
    "what city does Sam live in",
    "which database version",
    "who reviews billing changes",
    "what runs before committing",
    "favourite shell",
    "terminal colours",
    "preferred font",
    "coffee or tea",
    "test runner",
    "deploy day",
    "keyboard layout",
    "music while coding",
    "code review style",
    "branch naming",
    "staging key",
    "what happened on 2026-11-18",
    "lock file",
    "make export",
]


def _rss(pid: int) -> dict[str, float]:
    """VmRSS and the part of it in CUDA files, MiB."""
    out = {"VmRSS": proc_status(pid)["VmRSS"] / 2**20, "cuda": 0.0}
    path = ""
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            first = line.split(None, 1)[0]
            if "-" in first and not first.endswith(":"):
                parts = line.split()
                path = parts[5] if len(parts) > 5 else ""
            elif first == "Rss:" and ("/nvidia/" in path or "/triton/" in path or "cuda" in path):
                out["cuda"] += int(line.split()[1]) / 1024
    return out


class Target:
    def __init__(self, name: str, checkout: Path, python: Path) -> None:
        self.name = name
        self.checkout = checkout.resolve()
        self.python = python
        self.venv = python.parent.parent
        self.env = dict(os.environ, PYTHONPATH=str(self.checkout))

    def mount(self, mnt: Path, data: Path, search: bool) -> int:
        data.mkdir(parents=True, exist_ok=True)
        (data / "config.yaml").write_text(f"search: {'true' if search else 'false'}\n")
        res = subprocess.run(
            [
                str(self.python),
                "-m",
                "contextfs",
                "mount",
                str(mnt),
                "--data-dir",
                str(data),
                "--timeout",
                "120",
            ],
            cwd=self.checkout,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=200,
        )
        if res.returncode != 0:
            raise RuntimeError(f"{self.name}: mount failed: {res.stderr[-1000:]}")
        pids = subprocess.run(
            ["pgrep", "-f", f"contextfs mount {mnt} "], capture_output=True, text=True
        ).stdout.split()
        return int(pids[0])

    def umount(self, mnt: Path) -> None:
        subprocess.run(
            [str(self.python), "-m", "contextfs", "umount", str(mnt)],
            cwd=self.checkout,
            env=self.env,
            capture_output=True,
            timeout=200,
        )
        if os.path.ismount(mnt):
            subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True)


def fill(mnt: Path, nodes: int) -> None:
    prefs = mnt / "user" / "default" / "preferences"
    for i in range(nodes):
        node = prefs / f"topic-{i:04d}"
        node.mkdir()
        (node / "L2.md").write_text(
            f"Preference number {i}: uses tool {i % 17} for task {i % 23}, "
            f"prefers option {i % 5} when working on project {i % 11}.\n"
        )
    sample = ROOT / "contextfs" / "samples" / "chat.jsonl"
    shutil.copyfile(sample, mnt / ".inbox" / "chat.jsonl")


def wait_ready(mnt: Path, timeout: float = 300) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        status = (mnt / ".status").read_text()
        gen = next((ln for ln in status.splitlines() if ln.startswith("index_generation")), "")
        if "index: ready" in status and gen.endswith("queue 0)"):
            return time.monotonic() - t0
        time.sleep(0.1)
    raise RuntimeError(f"index not ready after {timeout:.0f} s")


def measure(t: Target, work: Path, nodes: int) -> dict:
    res: dict = {"target": t.name, "checkout": str(t.checkout), "python": str(t.python)}
    res["venv_mib"] = disk_usage(t.venv) / 2**20
    site = next(t.venv.glob("lib/python3*/site-packages"))
    res["cuda_on_disk_mib"] = sum(disk_usage(site / d) for d in ("nvidia", "triton")) / 2**20
    torch = subprocess.run(
        [str(t.python), "-c", "import torch; print(torch.__version__)"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    res["torch"] = torch
    # 1. idle: no model, no indexes
    mnt, data = work / f"{t.name}-mnt", work / f"{t.name}-data"
    mnt.mkdir()
    t0 = time.monotonic()
    pid = t.mount(mnt, data, search=False)
    res["mount_s"] = time.monotonic() - t0
    try:
        fill(mnt, nodes)
        subprocess.run(["ls", "-lR", str(mnt / "user")], capture_output=True)
        time.sleep(3)
        res["idle"] = _rss(pid)
    finally:
        t.umount(mnt)
    # 2. loaded: the default mount over the same store
    t0 = time.monotonic()
    pid = t.mount(mnt, data, search=True)
    try:
        wait_ready(mnt)
        res["ready_s"] = time.monotonic() - t0
        res["loaded"] = _rss(pid)
        for q in QUESTIONS[:3]:
            (mnt / ".query" / f"warm {q}" / "_context.md").read_text()
        times = []
        for q in QUESTIONS[3:]:
            q0 = time.perf_counter()
            (mnt / ".query" / q / "_context.md").read_text()
            times.append((time.perf_counter() - q0) * 1000)
        res["query_p50_ms"] = statistics.median(times)
        res["after_queries"] = _rss(pid)
    finally:
        t.umount(mnt)
    return res


def table(results: list[dict]) -> str:
    rows = [
        ("torch", lambda r: r["torch"]),
        ("venv on disk", lambda r: f"{r['venv_mib']:,.0f} MiB"),
        ("of it CUDA (nvidia/, triton/)", lambda r: f"{r['cuda_on_disk_mib']:,.0f} MiB"),
        ("mount (start to answering)", lambda r: f"{r['mount_s']:.1f} s"),
        ("idle mount VmRSS (search off)", lambda r: f"{r['idle']['VmRSS']:,.0f} MiB"),
        ("start to index ready (model load)", lambda r: f"{r['ready_s']:.1f} s"),
        ("VmRSS, model loaded", lambda r: f"{r['loaded']['VmRSS']:,.0f} MiB"),
        ("VmRSS after 24 questions", lambda r: f"{r['after_queries']['VmRSS']:,.0f} MiB"),
        ("of it mapped CUDA files", lambda r: f"{r['after_queries']['cuda']:,.0f} MiB"),
        ("query _context.md p50", lambda r: f"{r['query_p50_ms']:.1f} ms"),
    ]
    head = ["measure", *[r["target"] for r in results]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, fn in rows:
        lines.append("| " + " | ".join([name, *[fn(r) for r in results]]) + " |")
    if len(results) == 2:
        a, b = results
        lines.append(
            f"| ratio {b['target']}/{a['target']}: venv, loaded RSS, p50 | "
            f"{b['venv_mib'] / a['venv_mib']:.2f}x, "
            f"{b['loaded']['VmRSS'] / a['loaded']['VmRSS']:.2f}x, "
            f"{b['query_p50_ms'] / a['query_p50_ms']:.2f}x | |"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--target",
        action="append",
        required=True,
        help="NAME=CHECKOUT[:PYTHON] (PYTHON default CHECKOUT/.venv/bin/python)",
    )
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--quick", action="store_true", help="20 nodes (CI)")
    ap.add_argument("--json", type=Path, default=ROOT / "bench-results" / "footprint.json")
    args = ap.parse_args()
    targets = []
    for spec in args.target:
        name, _, rest = spec.partition("=")
        checkout, _, python = rest.partition(":")
        py = Path(python) if python else Path(checkout) / ".venv" / "bin" / "python"
        targets.append(Target(name, Path(checkout), py))
    nodes = 20 if args.quick else args.nodes
    results = []
    with tempfile.TemporaryDirectory(prefix="contextfs-footprint-") as tmp:
        for t in targets:
            print(f"measuring {t.name} ({t.checkout}) ...", file=sys.stderr, flush=True)
            results.append(measure(t, Path(tmp), nodes))
    print(table(results))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
