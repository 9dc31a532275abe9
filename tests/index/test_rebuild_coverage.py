"""While the vectors are built from scratch (a new index over a store that has nodes), a
question is answered by BM25 over every node and by vectors over the part embedded so
far: the bundle says how much of the store the vectors cover, and a node they do not hold
yet is not outranked by their partial view (BM25's exact match stays first, in the links
and in the bundle). Real store,
real MiniLM (slowed down, as on a busy machine), real hnswlib and tantivy, in-process."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from contextfs.index.embed import LocalEmbedder
from contextfs.memory.service import Memory
from contextfs.search.indexer import Indexer
from contextfs.search.retrieval import QueryOptions, Searcher
from tests.index.slowed import Slowed

OWNER = ("user", "default")
PLANTS = ["tomatoes", "beans", "garlic", "basil", "lettuce", "carrots", "peas", "leeks"]


@pytest.mark.model
async def test_a_partial_vector_index_says_so_and_does_not_outrank_the_exact_match(
    memory: Memory, tmp_path: Path, embedder: LocalEmbedder
) -> None:
    ptype = memory.types["preference"]
    # the first the rebuild embeds: near the question on both sides, without its rare word
    near = memory.create_node(OWNER, ptype, "shade-corner")
    memory.save_l2(near, "Ferns and hostas for the shade corner of the garden.\n")
    for i in range(299):
        plant = PLANTS[i % len(PLANTS)]
        n = memory.create_node(OWNER, ptype, f"garden-{i}")
        memory.save_l2(n, f"Garden planting plan {i}: {plant} in the raised beds by the fence.\n")
    last = memory.create_node(OWNER, ptype, "the-exact-one")  # the last the rebuild reaches
    memory.save_l2(last, "The quokkafern goes in the shade corner of the garden.\n")

    indexer = Indexer(
        memory, tmp_path / "index", lambda: Slowed(embedder, 0.4), model_name=embedder.name
    )
    searcher = Searcher(memory, indexer)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(indexer.run)
        with trio.fail_after(120):  # the model is in and part of the store is embedded
            while not (
                indexer.ready
                and (cover := indexer.vector_coverage) is not None
                and 0 < cover[0] < 200
            ):
                await trio.sleep(0.02)
        res = await trio.to_thread.run_sync(
            searcher.search, "quokkafern for the shade corner of the garden", "", QueryOptions()
        )
        assert indexer.vector_rebuilding  # still partial when the answer was computed
        indexer.stop()
    assert res.sides[:2] == ("bm25", "vectors")
    assert res.note.startswith("vectors cover ") and " of 301 nodes (being built)" in res.note
    done = int(res.note.split()[2].replace(",", ""))
    assert 0 < done < 301
    top = [h.path.rsplit("/", 1)[1] for h in res.hits[:2]]
    assert top == ["the-exact-one", "shade-corner"]
    # and the bundle leads with it as the links do: its passage stands on the vector side
    # at its BM25 rank, as its node does
    assert [p.node.name for p in res.passages[:2]] == ["the-exact-one", "shade-corner"]
