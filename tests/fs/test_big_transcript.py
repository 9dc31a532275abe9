"""Nothing said is lost: a transcript longer than the L2 limit is archived in parts."""

from __future__ import annotations

import gc
import json
import tracemalloc
from pathlib import Path

from contextfs.conversations.inbox import Intake, IntakeService
from contextfs.memory.service import Memory
from contextfs.store import Store


async def test_a_transcript_over_the_tier_limit_is_archived_in_parts(tmp_path: Path, types):
    store = Store(tmp_path / "big.duckdb")
    memory = Memory(store, types, data_dir=tmp_path, max_tier_size=64 * 1024)
    memory.create_owner("user", "default")
    intake = Intake(memory)
    lines = [
        json.dumps({"role": "user", "content": f"turn {i} " + "words " * 60, "id": f"m{i}"})
        for i in range(600)
    ]
    lines.append(json.dumps({"role": "user", "content": "giant " * 40000, "id": "huge"}))
    item = intake.submit(("user", "default"), "long.jsonl", "\n".join(lines).encode())
    assert await IntakeService(intake).step() is True
    assert "state: done" in item.report and "not archived" not in item.report, item.report
    parts = sorted(
        (n for n in memory.nodes.values() if n.type == "session"), key=lambda n: n.created
    )
    assert len(parts) > 4
    archived = item.report.split("## Archived")[1].split("##")[0]
    assert all(memory.node_path(n) in archived for n in parts)
    text = "".join(n.l2 for n in parts)
    assert all(f"turn {i} " in text for i in range(600)), "every turn is in a part"
    said = "".join(ln for ln in text.splitlines(True) if not ln.startswith("# "))  # no heading
    assert said.count("giant") == 40000, "a turn over the limit is cut, not lost"
    assert all(len(n.l2.encode()) <= 64 * 1024 for n in parts)
    assert any(n.name.endswith("part-2") for n in parts)
    store.close()


async def test_a_big_transcript_is_processed_in_a_few_times_its_size_of_memory(
    tmp_path: Path, types
):
    """Processing holds the transcript about twice (its text, then its turns, then its
    archive), not five times over (its bytes, its text, its lines, its turns and its
    archive's documents beside the archive): the Python heap's peak over the whole step
    (read back, parse, extraction, the archive in parts) stays under 3.5 times the file."""
    store = Store(tmp_path / "big.duckdb")
    memory = Memory(store, types, data_dir=tmp_path, max_tier_size=256 * 1024)
    memory.create_owner("user", "default")
    intake = Intake(memory)
    said = "we talked about the harbour, a violin and the winter market " * 30
    lines = [
        json.dumps({"role": ("user", "assistant")[i % 2], "content": f"turn {i}: {said}"})
        for i in range(1100)
    ]
    data = ("\n".join(lines) + "\n").encode()
    del lines
    item = intake.submit(("user", "default"), "long.jsonl", data)
    size = len(data)
    del data
    gc.collect()
    tracemalloc.start()
    try:
        assert await IntakeService(intake).step() is True
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "state: done (jsonl, 1100 turns" in item.report, item.report[:500]
    parts = list(memory.walk(types=("session",)))
    assert len(parts) >= 8 and sum(n.l2.count("turn ") for n in parts) >= 1100
    assert peak < 3.5 * size, f"peak {peak / 2**20:.1f} MiB for a {size / 2**20:.1f} MiB file"
    store.close()
