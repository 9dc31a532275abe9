"""What fsync stages in BM25 across a crash: found at once, committed within a second,
and never covered by a checkpoint's cursor before tantivy's files hold it.

fsync's node goes into the BM25 index without a tantivy commit (searched from memory,
`TextIndex` staging); a checkpoint (`index.json`) that said the cursor had passed it
while tantivy's files did not hold it would lose it for good at a crash: the next mount
resumes after the cursor. Real store, real MiniLM, real hnswlib and tantivy, in-process;
the crash is the index directory as it is on disk at that moment, copied."""

from __future__ import annotations

import shutil
from collections.abc import Callable
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


async def _until(done: Callable[[], bool], timeout: float) -> None:
    with trio.fail_after(timeout):
        while not done():
            await trio.sleep(0.05)


@pytest.mark.model
async def test_a_staged_node_survives_a_crash_after_a_checkpoint(
    memory: Memory, tmp_path: Path, embedder: LocalEmbedder
) -> None:
    index_dir = tmp_path / "index"
    first = Indexer(memory, index_dir, lambda: embedder, model_name=embedder.name)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(first.run)
        await _until(lambda: first.ready, 60)
        assert await first.wait_settled(60)
        nid = _save(memory, "lamps", "She collects vintage grobblewick lamps.\n")
        assert await first.sync_nodes([nid], 10)  # fsync's promise
        assert first.text is not None and first.text.staged_units > 0  # not committed yet
        assert [h.node_id for h in first.search_text("grobblewick", 5)][:1] == [nid]
        await trio.to_thread.run_sync(first._save)  # a checkpoint now, then a kill -9:
        crashed = tmp_path / "crashed"
        shutil.copytree(index_dir, crashed)  # what the disk holds at this moment
        # and, left running, the indexer commits it within TEXT_COMMIT_SECONDS
        staged = first.text
        await _until(lambda: staged.staged_since is None, TEXT_COMMIT_SECONDS + 10)
        first.stop()
    second = Indexer(memory, crashed, lambda: embedder, model_name=embedder.name)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(second.run)
        await _until(lambda: second.ready, 120)
        assert await second.wait_settled(120)
        assert [h.node_id for h in second.search_text("grobblewick", 5)][:1] == [nid]
        second.stop()


@pytest.mark.model
@pytest.mark.allow_warnings
async def test_a_failed_bm25_commit_is_reported_until_the_change_is_written_again(
    memory: Memory, tmp_path: Path, embedder: LocalEmbedder
) -> None:
    """The index folder is taken away after fsync staged a node: the commit fails, and
    tantivy's rollback takes the staged node with it. `.status`'s error stays while the
    index cannot be written (a cursor slice that wrote nothing must not clear it), and
    once the folder is back the node is written again and committed, without a remount."""
    index_dir = tmp_path / "index"
    indexer = Indexer(memory, index_dir, lambda: embedder, model_name=embedder.name)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(indexer.run)
        await _until(lambda: indexer.ready, 60)
        _save(memory, "tea", "She drinks genmaicha.\n")  # the writer is open from here on
        assert await indexer.wait_settled(60)
        assert indexer.text is not None
        text = indexer.text
        await _until(lambda: text.staged_since is None, TEXT_COMMIT_SECONDS + 10)
        text_dir = index_dir / "text"
        text_dir.rename(index_dir / "text.away")
        text_dir.write_text("not an index")
        nid = _save(memory, "lamps", "She collects vintage grobblewick lamps.\n")
        assert await indexer.sync_nodes([nid], 10)  # staged in the writer, searched at once
        await _until(lambda: (indexer.error or "").startswith("indexing failed"), 30)
        await trio.sleep(TEXT_COMMIT_SECONDS + 1.5)  # the cursor and its retry ran meanwhile
        assert (indexer.error or "").startswith("indexing failed"), "the fault was forgotten"
        text_dir.unlink()
        (index_dir / "text.away").rename(text_dir)
        # the retry's pause grows to a minute at most
        await _until(lambda: indexer.error is None and text.staged_since is None, 90)
        assert [h.node_id for h in indexer.search_text("grobblewick", 5)][:1] == [nid]
        indexer.stop()
    reopened = Indexer(memory, index_dir, lambda: embedder, model_name=embedder.name)
    async with trio.open_nursery() as nursery:  # in tantivy's files, not only in memory
        nursery.start_soon(reopened.run)
        await _until(lambda: reopened.text is not None and not reopened._text_rebuilding, 60)
        assert [h.node_id for h in reopened.search_text("grobblewick", 5)][:1] == [nid]
        reopened.stop()


@pytest.mark.allow_warnings
def test_a_batch_failed_for_a_store_away_is_one_warning_line(caplog) -> None:
    """A PostgreSQL server away is expected (the store reconnects by itself): the indexer
    says so in one warning, not an ERROR with a traceback at every retry; anything else
    that fails a batch keeps its traceback."""
    import logging

    from contextfs.errors import StoreUnavailable
    from contextfs.search.indexer import _log_failure

    caplog.set_level(logging.INFO, logger="contextfs.search.indexer")
    try:
        raise StoreUnavailable("the server at /tmp/pg is not answering")
    except StoreUnavailable as exc:
        _log_failure(exc, "indexer: a batch failed; retrying in %.0f s", 2.0)
    try:
        raise RuntimeError("a real fault")
    except RuntimeError as exc:
        _log_failure(exc, "indexer: a batch failed; retrying in %.0f s", 4.0)
    away, fault = caplog.records[-2:]
    assert (away.levelname, away.exc_info) == ("WARNING", None)
    assert "the store is away: the server at /tmp/pg is not answering" in away.getMessage()
    assert fault.levelname == "ERROR" and fault.exc_info is not None
