"""The urgent lane across a restart: what a checkpoint kept of it goes after what people
save once the mount is back.

A checkpoint keeps the nodes the urgent lane has not finished (and those whose
`indexed_version` it must show again), and the next mount does them first of all. After
the remounts of a 100 MB import (scripts/bench_ingest.py --backlog) that was 235-365 nodes
saved before the unmount, and a node saved just after it waited 20-37 s for its vectors
behind them. Real store, real MiniLM (slowed down for the first mount, as on a busy
machine), real hnswlib and tantivy, in-process."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import trio

from contextfs.index.embed import LocalEmbedder
from contextfs.memory.service import Memory
from contextfs.search.indexer import URGENT_NODES, Indexer
from tests.index.slowed import Slowed

OWNER = ("user", "default")


def _save(memory: Memory, name: str) -> int:
    n = memory.create_node(OWNER, memory.types["preference"], name)
    memory.save_l2(n, f"A note about {name.replace('-', ' ')} saved through the mount.\n")
    return n.id


@pytest.mark.model
async def test_a_node_saved_after_a_restart_gets_its_vectors_before_the_resumed_ones(
    memory: Memory, tmp_path: Path, embedder: LocalEmbedder
) -> None:
    index_dir = tmp_path / "index"
    first = Indexer(memory, index_dir, lambda: Slowed(embedder, 0.3), model_name=embedder.name)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(first.run)
        with trio.fail_after(60):
            while not first.ready:
                await trio.sleep(0.05)
        earlier = [_save(memory, f"earlier-{i}") for i in range(4 * URGENT_NODES)]
        await trio.sleep(0.5)  # BM25 has them; the (slow) vectors of a few at most
        first.stop()
    kept = json.loads((index_dir / "index.json").read_text())["urgent"]
    assert len(set(kept) & set(earlier)) > 2 * URGENT_NODES  # the checkpoint kept them

    def loading() -> LocalEmbedder:  # the model takes a second to load after the mount
        time.sleep(1.0)
        return embedder

    second = Indexer(memory, index_dir, loading, model_name=embedder.name)
    told: list[int] = []
    second.follow(told.extend)  # the nodes whose vectors are in, in order
    async with trio.open_nursery() as nursery:
        nursery.start_soon(second.run)
        with trio.fail_after(60):  # BM25 is open, the model still loading: a save now
            while second.text is None:
                await trio.sleep(0.01)
        fresh = _save(memory, "saved-after-the-restart")
        assert not second.ready
        with trio.fail_after(120):
            while fresh not in told:
                await trio.sleep(0.02)
        resumed_before = [nid for nid in told[: told.index(fresh)] if nid in earlier]
        # at most the batch the lane had taken when the fresh node came
        assert len(resumed_before) <= URGENT_NODES, (len(resumed_before), len(kept))
        # and the resumed ones are done all the same
        assert await second.wait_settled(120)
        assert second.backlog()["urgent_nodes"] == 0
        second.stop()
