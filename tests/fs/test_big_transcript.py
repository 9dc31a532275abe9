"""Nothing said is lost: a transcript longer than the L2 limit is archived in parts."""

from __future__ import annotations

import json
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
    assert text.count("giant") == 40000, "a turn over the limit is cut, not lost"
    assert all(len(n.l2.encode()) <= 64 * 1024 for n in parts)
    assert any(n.name.endswith("part-2") for n in parts)
    store.close()
