"""Peak RSS and time of processing one big inbox transcript, in process (no mount).

    PYTHONPATH=. .venv/bin/python scripts/big_transcript.py [MiB]

Writes a JSONL transcript of about MiB mebibytes (default 50) into a temporary data dir,
hands it to the inbox and runs one processing step (archive in parts + rule extraction),
then prints the peak RSS after each stage, the time, and the archive's parts.
"""

from __future__ import annotations

import json
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

import trio

from contextfs.conversations.inbox import Intake, IntakeService
from contextfs.ctxtypes import builtin_schema_dir, load_types
from contextfs.memory.service import Memory
from contextfs.store import Store

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


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def transcript(mib: int) -> bytes:
    rng = random.Random(1)
    lines, size, i = [], 0, 0
    while size < mib * 2**20:
        text = " ".join(rng.choice(WORDS) for _ in range(80))
        if i % 97 == 0:
            text = "I prefer vim for editing. " + text
        role = "user" if i % 2 == 0 else "assistant"
        line = json.dumps({"role": role, "content": text, "id": f"m{i}"}) + "\n"
        lines.append(line)
        size += len(line)
        i += 1
    return "".join(lines).encode()


def main() -> None:
    mib = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    tmp = Path(tempfile.mkdtemp())
    memory = Memory(
        Store(tmp / "contextfs.duckdb"),
        load_types([builtin_schema_dir()]),
        data_dir=tmp,
        max_file_size=64 * 2**20,
    )
    memory.create_owner("user", "default")
    intake = Intake(memory)
    data = transcript(mib)
    print(f"transcript: {len(data) / 2**20:.1f} MiB; peak RSS {peak_mib():.0f} MiB")
    item = intake.submit(("user", "default"), "big.jsonl", data)
    del data
    print(f"stored in the inbox: peak RSS {peak_mib():.0f} MiB")
    t = time.monotonic()
    trio.run(IntakeService(intake).step)
    print(f"processed in {time.monotonic() - t:.0f} s: peak RSS {peak_mib():.0f} MiB")
    archived = item.report.split("## Archived")[1].split("##")[0].strip().splitlines()
    print(f"archived in {len(archived)} part(s): {archived[0]} … {archived[-1]}")


if __name__ == "__main__":
    main()
