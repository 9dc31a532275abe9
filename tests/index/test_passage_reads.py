"""What a search reads of the store (issue 14, a million nodes): the index says how many
passages each candidate has, so a question reads the texts of the passages its bundle can
show, not of every candidate, and answers as it does with every text in memory.

Real store, real MiniLM, real hnswlib and tantivy, in-process (no kernel): the nodes are
written, indexed, the store closed and reopened so that no text is in memory."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from contextfs.conversations.transcript import Turn, render_turns
from contextfs.memory.service import Memory
from contextfs.memory.texts import LazyNode
from contextfs.search.bundle import pack_context
from contextfs.search.indexer import Indexer, label_node
from contextfs.search.passages import node_passages
from contextfs.search.retrieval import QueryOptions, Searcher, count_passages, keywords
from contextfs.store import Store

OWNER = ("user", "default")

_WORD_TEXT = """
garden tomato basil harbor ferry lantern violin museum bakery sourdough river canoe mountain
trail glacier cabin winter festival market spice lemon olive orchard bicycle library novel
poetry chess puzzle telescope comet rocket engine workshop timber
"""
WORDS = _WORD_TEXT.split()


def sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "."


def prose(rng: random.Random, chars: int) -> str:
    out = ""
    while len(out) < chars:
        out += sentence(rng, rng.randint(6, 14)) + " "
    return out.strip() + "\n"


def open_memory(path: Path, types, hot: int) -> tuple[Store, Memory]:
    store = Store(path / "contextfs.duckdb")
    return store, Memory(store, types, data_dir=path, hot_nodes=hot)


def index(memory: Memory, path: Path, embedder) -> Indexer:
    return Indexer(memory, path / "index", lambda: embedder, model_name=embedder.name)


@pytest.mark.model
def test_the_index_counts_a_nodes_passages_as_its_text_does(tmp_path: Path, types, embedder):
    rng = random.Random(3)
    turns = [
        Turn(0, "user", "Did the ferry leave on time?", name="Maya", id="t1"),
        Turn(0, "assistant", "It left ten minutes late because of the fog.", id="t2"),
        Turn(0, "user", "Then I missed the bakery.", name="Maya", id="t3"),
    ]
    texts = {
        "one-line": "She prefers vim with relative line numbers.\n",
        "short": prose(rng, 600),
        "greek": "Η Μαρία πίνει τσάι με λεμόνι κάθε πρωί στο μπαλκόνι. " * 12 + "\n",
        "two-chunks": prose(rng, 1500),
        "many-chunks": prose(rng, 5000),
        "blank-tail": prose(rng, 820).rstrip() + "\n" * 120,
        "empty": "",
    }
    store, memory = open_memory(tmp_path, types, hot=10_000)
    memory.create_owner(*OWNER)
    ids: dict[str, int] = {}
    for name, text in texts.items():
        n = memory.create_node(OWNER, memory.types["preference"], name)
        if text:
            memory.save_l2(n, text)
        ids[name] = n.id
    session = memory.create_node(OWNER, memory.types["session"], "2024-05-01-s1")
    memory.save_l2(session, render_turns(turns))
    ids["session"] = session.id
    ix = index(memory, tmp_path, embedder)
    assert ix.rebuild_sync() == len(ids)
    ix.text.close()
    store.close()

    store, memory = open_memory(tmp_path, types, hot=10_000)
    try:
        ix = index(memory, tmp_path, embedder)
        ix.open_sync(embedder)
        counts = ix.passage_counts(list(ids.values()))
        # the index holds units of every node with text (an empty node has none: its
        # text, read, says it has no passage)
        assert set(counts) == set(ids.values()) - {ids["empty"]}
        found = {}
        for name, nid in ids.items():
            n = memory.nodes.get(nid)
            assert isinstance(n, LazyNode) and not n.loaded
            found[name] = count_passages(n, counts.get(nid))
            if name != "empty":
                assert not n.loaded, f"{name}: counting its passages read its text"
        truth = {name: len(node_passages(memory.nodes.get(nid))) for name, nid in ids.items()}
        assert found == truth
        assert truth["one-line"] == truth["greek"] == truth["blank-tail"] == 1
        assert truth["empty"] == 0 and truth["session"] == 3 and truth["many-chunks"] >= 5
        ix.text.close()
    finally:
        store.close()


@pytest.mark.model
@pytest.mark.timeout(600)
def test_a_question_reads_the_texts_it_shows_and_answers_as_with_every_text_loaded(
    tmp_path: Path, types, embedder
):
    rng = random.Random(11)
    store, memory = open_memory(tmp_path, types, hot=10_000)
    memory.create_owner(*OWNER)
    with memory.transaction():
        for i in range(240):
            n = memory.create_node(
                OWNER, memory.types["preference"], f"note-{i:03d}", persist=False
            )
            memory.save_l2(n, prose(rng, rng.choice((150, 400, 800, 1400, 2600))))
    ix = index(memory, tmp_path, embedder)
    assert ix.rebuild_sync() == 240
    ix.text.close()
    store.close()

    question = "which bakery near the harbor sells sourdough and lemon olive bread"
    opts = QueryOptions(budget=500)
    store, memory = open_memory(tmp_path, types, hot=10_000)
    try:
        ix = index(memory, tmp_path, embedder)
        ix.open_sync(embedder)
        searcher = Searcher(memory, ix)
        before = memory.texts.loads
        lean = searcher.search(question, "", opts)
        read = memory.texts.loads - before
        # what the rankers handed the fusion: many more nodes than were read
        depth = max(opts.k * 8, min(300, opts.budget // 8))
        qvec = embedder.embed([question])[0]
        candidates = {label_node(label) for label, _ in ix.vectors.search(qvec, depth)}
        candidates |= {h.node_id for h in ix.text.search(keywords(question), depth)}
        assert len(candidates) >= 80, len(candidates)
        assert 0 < read <= 45, f"read the texts of {read} of {len(candidates)} candidates"
        assert lean.passages and lean.hits

        # every text in memory: the passages are counted from the texts themselves
        memory.texts.prefetch(list(memory.nodes.get_many(sorted(candidates)).values()))
        full = searcher.search(question, "", opts)

        def shown(res):
            return [(ph.path, ph.passage.index, ph.score) for ph in res.passages]

        assert [h.path for h in lean.hits] == [h.path for h in full.hits]
        assert [h.snippet for h in lean.hits] == [h.snippet for h in full.hits]
        # the hits BM25 found show the part of their best unit with the question's words
        asked = set(keywords(question).lower().split())
        found = [h for h in lean.hits if h.snippet != h.node.l0.strip()[:300]]
        assert found, [h.snippet for h in lean.hits]
        for h in found:
            assert asked & set(h.snippet.lower().replace(".", " ").split()), h.snippet
        assert shown(lean) == shown(full)
        assert pack_context(question, "", lean, opts.budget) == pack_context(
            question, "", full, opts.budget
        )
        ix.text.close()
    finally:
        store.close()
