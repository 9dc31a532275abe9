"""An editor's save of a NEW node (mkdir; write a temp file; rename it over L2.md) is one
memory transaction: the node is marked persisted, so `persist_pending` does not store it a
second time and the outbox holds exactly one row for that version."""

from __future__ import annotations

import pytest

from contextfs.memory.service import Memory
from tests.fs.conftest import FS

NODE = "user/default/preferences/editor"


@pytest.mark.parametrize("temp", ["L2.md~", "draft.txt"])  # a scratch file, an attachment
async def test_rename_over_l2_of_a_new_node_persists_it_once(
    fs: FS, memory: Memory, temp: str
) -> None:
    await fs.mkdir(NODE)
    await fs.write(f"{NODE}/{temp}", b"She prefers vim.\n")
    await fs.rename(f"{NODE}/{temp}", f"{NODE}/L2.md")
    node = memory.live_node(("user", "default"), memory.types["preference"], "editor")
    assert node is not None and node.version == 1
    assert node.persisted is True
    assert memory.persist_pending() == 0
    rows = [
        r for r in memory.store.outbox_since(0, 1000) if r[1] == node.id and r[2] == node.version
    ]
    assert len(rows) == 1, rows
    assert await fs.listdir(NODE) == [".history", "L0.md", "L1.md", "L2.md", "meta.yaml"]
    assert await fs.text(f"{NODE}/L2.md") == "She prefers vim.\n"
