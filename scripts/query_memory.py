"""The daemon's memory as distinct questions are asked through a mount (issue 11).

Every distinct `.query/<question>/` used to stay in the inode tree for the life of the
mount (its links and its `_context.md`/`_results.json` bytes), so the daemon grew with
every question. This script measures it: it mounts a fresh data dir (`search: true`, the
local embedding model), writes `--nodes` prose nodes, waits for the index, then reads
`.query/<question i>/_context.md` for `--warmup` questions (what every later question
uses is loaded by then), then for `--questions` distinct questions, and samples the
daemon's VmRSS every `--every` questions. It prints a table and writes the samples to
JSON; the exit status is 1 when the daemon logged a warning or an error.

    .venv/bin/python scripts/query_memory.py                     # 5,000 questions, the model
    .venv/bin/python scripts/query_memory.py --quick             # CI smoke: 300 questions
    .venv/bin/python scripts/query_memory.py --questions 2000 --json /tmp/q.json
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from contextfs.testing import Mount, machine_info, write_json
from contextfs.testing.mount import log_problems, wait_index_ready
from contextfs.testing.prose import WORDS, prose
from contextfs.testing.report import proc_status


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--questions", type=int, default=5000)
    ap.add_argument("--nodes", type=int, default=60)
    ap.add_argument("--every", type=int, default=500)
    ap.add_argument("--warmup", type=int, default=300, help="questions asked before sampling")
    ap.add_argument("--quick", action="store_true", help="300 questions over 20 nodes")
    ap.add_argument("--json", type=Path, default=Path("query_memory.json"))
    ap.add_argument("--keep", action="store_true", help="keep the data dir")
    args = ap.parse_args()
    if args.quick:
        args.questions, args.every, args.nodes, args.warmup = 300, 100, 20, 100
    base = Path(tempfile.mkdtemp(prefix="cfs-qmem-"))
    data, mnt = base / "data", base / "mnt"
    data.mkdir()
    mnt.mkdir()
    (data / "config.yaml").write_text("search: true\n")
    m = Mount(mnt, data)
    rng = random.Random(11)
    samples: list[dict[str, float]] = []
    try:
        m.start()
        assert m.proc is not None
        pid = m.proc.pid
        for i in range(args.nodes):
            node = mnt / f"user/default/preferences/topic-{i}"
            node.mkdir()
            (node / "L2.md").write_text(prose(rng, f"topic {i}"))
        wait_index_ready(mnt, 600)
        t0 = time.monotonic()  # set again after the warm-up

        def sample(asked: int) -> None:
            st = proc_status(pid)
            row = {"questions": asked, "rss_mb": st["VmRSS"] / 2**20, "s": time.monotonic() - t0}
            samples.append(row)
            print(f"{asked:>9} {row['rss_mb']:>9.1f} {row['s']:>8.1f}", flush=True)

        # the first questions load what every later one uses (tokenizer, torch's buffers)
        for i in range(args.warmup):
            words = " ".join(rng.choice(WORDS) for _ in range(4))
            (mnt / f".query/warm {words} {i}/_context.md").read_bytes()
        t0 = time.monotonic()
        print(f"{'questions':>9} {'RSS MB':>9} {'seconds':>8}")
        sample(0)
        for i in range(1, args.questions + 1):
            words = " ".join(rng.choice(WORDS) for _ in range(4))
            (mnt / f".query/{words} {i}/_context.md").read_bytes()
            if i % args.every == 0:
                sample(i)
        problems = log_problems(m.log)
    finally:
        if m.proc is not None:
            m.stop()
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    # from the first sample after 0: RSS right after the warm-up still holds what the
    # model load and the index build freed (it fell by up to 150 MB in the next block here)
    first, last = samples[1], samples[-1]
    asked = last["questions"] - first["questions"]
    growth = last["rss_mb"] - first["rss_mb"]
    per_q = growth * 1024 / asked if asked else 0.0
    second_half = last["rss_mb"] - samples[len(samples) // 2]["rss_mb"]
    print(
        f"growth: {growth:.1f} MB over questions {first['questions']}..{last['questions']} "
        f"({per_q:.1f} KB a question); {second_half:.1f} MB over the second half"
    )
    write_json(
        args.json,
        {
            "machine": machine_info(),
            "questions": args.questions,
            "samples": samples,
            "growth_mb": growth,
            "growth_kb_per_question": per_q,
            "second_half_growth_mb": second_half,
            "log_problems": problems,
        },
    )
    for p in problems:
        print("log:", p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
