"""What fsync stages in BM25 across a crash: found at once, committed within a second,
and never covered by a checkpoint's cursor before tantivy's files hold it.

fsync's node goes into the BM25 index without a tantivy commit (searched from memory,
`TextIndex` staging); a checkpoint (`index.json`) that said the cursor had passed it
while tantivy's files did not hold it would lose it for good at a crash: the next mount
resumes after the cursor. Real store, real MiniLM, real hnswlib and tantivy, in-process;
the crash is the index directory as it is on disk at that moment, copied."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import trio

from contextfs.index.embed import LocalEmbedder
from contextfs.memory.service import Memory
from contextfs.search.indexer import TEXT_COMMIT_SECONDS, Indexer

OWNER = ("user", "default")


def _save(memory: Memory, name: str, text: str) -> int:
    n = memory.create_node(OWNER, memory.types["preference"], name)
    memory.save_l2(n, text)
    return n.id


@pytest.mark.model
async def test_a_staged_node_survives_a_crash_after_a_checkpoint(
    memory: Memory, tmp_path: Path, embedder: LocalEmbedder
) -> None:
    index_dir = tmp_path / "index"
    first = Indexer(memory, index_dir, lambda: embedder, model_name=embedder.name)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(first.run)
        with trio.fail_after(60):
            while not first.ready:
                await trio.sleep(0.05)
        assert await first.wait_settled(60)
        nid = _save(memory, "lamps", "She collects vintage grobblewick lamps.\n")
        assert await first.sync_nodes([nid], 10)  # fsync's promise
        assert first.text is not None and first.text.staged_units > 0  # not committed yet
        assert [h.node_id for h in first.search_text("grobblewick", 5)][:1] == [nid]
        await trio.to_thread.run_sync(first._save)  # a checkpoint now, then a kill -9:
        crashed = tmp_path / "crashed"
        shutil.copytree(index_dir, crashed)  # what the disk holds at this moment
        # and, left running, the indexer commits it within TEXT_COMMIT_SECONDS
        with trio.fail_after(TEXT_COMMIT_SECONDS + 10):
            while first.text.staged_since is not None:
                await trio.sleep(0.05)
        first.stop()
    second = Indexer(memory, crashed, lambda: embedder, model_name=embedder.name)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(second.run)
        with trio.fail_after(120):
            while not second.ready:
                await trio.sleep(0.05)
        assert await second.wait_settled(120)
        assert [h.node_id for h in second.search_text("grobblewick", 5)][:1] == [nid]
        second.stop()
