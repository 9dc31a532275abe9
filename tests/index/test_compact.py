"""The compact vector index (index.compact): real faiss, a real float16 file, real MiniLM
vectors for recall; the indexer moving a store past its size threshold into it; and the
indexer's unit digests (index.digests), kept as arrays for the same reason.

The recall test embeds real conversation turns and questions (scripts/recall_data) with the
local model and hides them among noisy copies, so the coarse lists and the PQ codes do the
work they do at scale (a few hundred vectors alone would be searched exhaustively)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import trio

from contextfs.config import load_config
from contextfs.errors import IndexCorrupt, UsageError
from contextfs.index.compact import CompactVectorIndex, load_vectors
from contextfs.index.digests import UnitDigests
from contextfs.index.vectors import VectorIndex
from contextfs.memory.service import Memory
from contextfs.search.indexer import Indexer, label_node
from contextfs.search.retrieval import QueryOptions, Searcher

DIM = 384
RECALL_DATA = Path(__file__).resolve().parents[2] / "scripts" / "recall_data" / "generated"
OWNER = ("user", "default")


def unit_rows(n: int, seed: int = 0) -> np.ndarray:
    rows = np.random.default_rng(seed).normal(size=(n, DIM)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def real_texts(turns: int, questions: int) -> tuple[list[str], list[str]]:
    """Distinct turns and questions of the generated conversations, in file order."""
    seen_t: dict[str, None] = {}
    seen_q: dict[str, None] = {}
    for f in sorted(RECALL_DATA.glob("*.json")):
        conv = json.loads(f.read_text())
        for s in conv["sessions"]:
            for t in s["turns"]:
                seen_t.setdefault(t["text"], None)
        for q in conv["questions"]:
            seen_q.setdefault(q["question"], None)
    return list(seen_t)[:turns], list(seen_q)[:questions]


@pytest.fixture(scope="module")
def real(embedder) -> tuple[np.ndarray, np.ndarray, list[str], list[str]]:
    turns, questions = real_texts(400, 40)
    return embedder.embed(turns), embedder.embed(questions), turns, questions


def build(tmp_path: Path, labels, vectors, **kw) -> CompactVectorIndex:
    return CompactVectorIndex.build(DIM, tmp_path / "vectors.f16", labels, vectors, **kw)


# ---- quality ------------------------------------------------------------------------------


@pytest.mark.model
def test_recall_at_10_against_exact_search_on_real_minilm_vectors(real, tmp_path: Path):
    turns, questions, _t, _q = real
    rng = np.random.default_rng(7)
    # 20k distractors: a turn plus half of another plus noise (cosine about 0.85 to the
    # nearest turn), so a question's exact top 10 mixes turns and near copies
    i, j = rng.integers(0, len(turns), (2, 20_000))
    noise = rng.standard_normal((20_000, DIM)).astype(np.float32) * (0.5 / np.sqrt(DIM))
    extra = turns[i] + 0.5 * turns[j] + noise
    extra /= np.linalg.norm(extra, axis=1, keepdims=True)
    rows = np.concatenate([turns, extra])
    index = build(tmp_path, range(len(rows)), rows)
    exact = questions @ rows.T
    kth = -np.sort(-exact, axis=1)[:, 9]
    found = 0
    for q, vec in enumerate(questions):
        hits = index.search(vec, 10)
        assert len(hits) == 10
        # ties (equal vectors) count as found: either is a right answer
        found += sum(exact[q, label] >= kth[q] - 1e-4 for label, _ in hits)
        # similarities are exact cosines (from the float16 rows), best first
        assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)
        assert hits[0][1] == pytest.approx(float(exact[q].max()), abs=2e-3)
    recall = found / (10 * len(questions))
    assert recall >= 0.95, recall
    # the point of it: far less RAM a unit than hnswlib's float32 vector alone (1.5 KB)
    assert index.nbytes / len(index) < 300


# ---- writes -------------------------------------------------------------------------------


def test_upsert_replaces_and_delete_hides_and_reupsert_revives(tmp_path: Path):
    rows = unit_rows(600)
    index = build(tmp_path, range(1000, 1500), rows[:500])
    assert len(index) == 500 and 1000 in index and 999 not in index
    assert index.search(rows[3], 1)[0] == (1003, pytest.approx(1.0, abs=2e-3))

    index.upsert([1003], rows[550:551])  # replace: the old vector no longer answers
    assert len(index) == 500
    assert index.search(rows[550], 1)[0] == (1003, pytest.approx(1.0, abs=2e-3))
    assert 1003 not in [label for label, _ in index.search(rows[3], 5)]

    index.delete([1004, 1005, 4242])  # an unknown label is ignored
    assert len(index) == 498 and 1004 not in index
    assert all(label not in (1004, 1005) for label, _ in index.search(rows[4], 50))
    index.upsert([1004], rows[4:5])
    assert index.search(rows[4], 1)[0] == (1004, pytest.approx(1.0, abs=2e-3))

    with pytest.raises(ValueError):
        index.upsert([1, 1], rows[:2])
    with pytest.raises(ValueError):
        index.upsert([1], rows[:2])


def test_k_is_clipped_and_allow_filters_and_scopes_are_exact(tmp_path: Path):
    rows = unit_rows(300)
    index = build(tmp_path, range(300), rows)
    assert len(index.search(rows[0], 1000)) == 300
    odd = index.search(rows[0], 10, allow=lambda label: label % 2 == 1)
    assert len(odd) == 10 and all(label % 2 == 1 for label, _ in odd)
    only = index.search(rows[0], 10, allow=lambda label: label == 123)
    assert only == [(123, pytest.approx(float(rows[0] @ rows[123]), abs=2e-3))]
    among = index.search_among(rows[7], [7, 8, 9, 100_000], 2)
    assert [label for label, _ in among] == [7, max((8, 9), key=lambda x: rows[7] @ rows[x])]
    snap = index.snapshot([9, 8, 100_000])
    assert snap.labels == (9, 8)  # the live ones, in the order asked; unknown skipped
    assert np.allclose(snap.vectors, rows[[9, 8]], atol=2e-3)


# ---- persistence --------------------------------------------------------------------------


def test_save_load_round_trip_and_saved_rows_are_never_overwritten(tmp_path: Path):
    rows = unit_rows(700)
    index = build(tmp_path, range(500), rows[:500])
    index.delete([10])
    index.save(tmp_path / "a.bin")
    # after the save: a delete and new units; the saved file must still load as it was
    index.delete([11])
    index.upsert(range(500, 700), rows[500:700])
    loaded = CompactVectorIndex.load(tmp_path / "a.bin", DIM, tmp_path / "vectors.f16")
    assert len(loaded) == 499 and 10 not in loaded and 11 in loaded and 600 not in loaded
    for i in (0, 11, 499):
        assert loaded.search(rows[i], 1)[0] == (i, pytest.approx(1.0, abs=2e-3))
    # the live index goes on, saves again, and that loads too (through load_vectors)
    index.save(tmp_path / "b.bin")
    index.upsert(range(700), rows)  # rows freed by the saves are written again
    index.save(tmp_path / "c.bin")
    again = load_vectors(tmp_path / "c.bin", DIM, tmp_path / "vectors.f16")
    assert isinstance(again, CompactVectorIndex) and len(again) == 700
    for i in (10, 11, 650):
        assert again.search(rows[i], 1)[0] == (i, pytest.approx(1.0, abs=2e-3))
    hnsw = VectorIndex(DIM)
    hnsw.upsert([1], rows[:1])
    hnsw.save(tmp_path / "h.bin")
    assert isinstance(load_vectors(tmp_path / "h.bin", DIM, tmp_path / "x.f16"), VectorIndex)


def test_a_row_is_reused_only_when_neither_of_the_last_two_saves_names_it(tmp_path: Path):
    """The indexer names a save in index.json a moment after `save` returns: until then a
    crash loads the save before, whose rows must still hold what it says."""
    rows = unit_rows(400)
    data = tmp_path / "vectors.f16"
    index = build(tmp_path, range(300), rows[:300])
    index.save(tmp_path / "a.bin")
    index.delete([7])  # live in a, dropped by b
    index.save(tmp_path / "b.bin")
    size = data.stat().st_size
    index.upsert(range(300, 301), rows[300:301])  # no free row yet: appended
    assert data.stat().st_size > size
    older = CompactVectorIndex.load(tmp_path / "a.bin", DIM, data)
    assert older.search(rows[7], 1)[0] == (7, pytest.approx(1.0, abs=2e-3))
    index.save(tmp_path / "c.bin")  # now a is two saves back: 7's row may be written
    size = data.stat().st_size
    index.upsert(range(301, 302), rows[301:302])
    assert data.stat().st_size == size  # the freed row was used, the file did not grow
    latest = CompactVectorIndex.load(tmp_path / "c.bin", DIM, data)
    assert 7 not in latest and latest.search(rows[300], 1)[0][0] == 300


@pytest.mark.parametrize(
    "damage", ["truncate", "flip", "foreign", "dim", "data-truncated", "data-missing", "rebuilt"]
)
def test_a_damaged_index_or_data_file_is_index_corrupt(tmp_path: Path, damage: str):
    rows = unit_rows(300)
    index = build(tmp_path, range(300), rows)
    path, data = tmp_path / "v.bin", tmp_path / "vectors.f16"
    index.save(path)
    dim = DIM
    if damage == "truncate":
        os.truncate(path, path.stat().st_size - 10)
    elif damage == "flip":
        raw = bytearray(path.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        path.write_bytes(bytes(raw))
    elif damage == "foreign":
        hnsw = VectorIndex(DIM)
        hnsw.upsert([1], rows[:1])
        hnsw.save(path)
    elif damage == "dim":
        dim = 2 * DIM
    elif damage == "data-truncated":
        os.truncate(data, data.stat().st_size - 2 * DIM)
    elif damage == "data-missing":
        data.unlink()
    else:  # another build took the data file over: its rows are not this index's
        build(tmp_path, range(300), rows)
    with pytest.raises(IndexCorrupt):
        CompactVectorIndex.load(path, dim, data)


# ---- the indexer past its threshold -------------------------------------------------------


@pytest.mark.model
def test_the_indexer_moves_past_its_threshold_to_the_compact_index_and_still_finds(
    memory: Memory, embedder, real, tmp_path: Path
):
    _t, _q, turns, _questions = real
    entity = memory.types["entity"]
    nodes = []
    for i, text in enumerate(turns[:40]):
        n = memory.create_node(OWNER, entity, f"turn-{i}")
        memory.save_l2(n, text + "\n")
        nodes.append(n)
    index_dir = tmp_path / "index"

    ix = Indexer(memory, index_dir, lambda: embedder, model_name=embedder.name, compact_units=30)
    assert ix.rebuild_sync() == 40  # what `contextfs reindex` runs
    assert isinstance(ix.vectors, CompactVectorIndex)
    assert "vector_index: compact" in "\n".join(ix.status_lines())
    target = nodes[17]
    question = turns[17]
    hits = ix.vectors.search(embedder.embed([question])[0], 3)
    assert label_node(hits[0][0]) == target.id
    res = Searcher(memory, ix).search(question, "", QueryOptions())
    assert "vectors" in res.sides, res.sides
    assert res.hits[0].path == memory.node_path(target)
    ix.text.close()

    # a restart loads the compact snapshot; the outbox after it is applied on top. Its
    # digests are in the JSON an older snapshot has: they are read all the same.
    snap = index_dir / json.loads((index_dir / "index.json").read_text())["snapshot"]
    table = UnitDigests.load(snap / "digests.npy")
    old = {str(k): f"{table.get(k):016x}" for k in table.labels().tolist()}
    (snap / "digests.json").write_text(json.dumps(old))
    (snap / "digests.npy").unlink()
    ix2 = Indexer(memory, index_dir, lambda: embedder, model_name=embedder.name, compact_units=30)
    ix2.open_sync(embedder)
    try:
        assert isinstance(ix2.vectors, CompactVectorIndex) and len(ix2.vectors) >= 40
        assert len(ix2.digests) == len(table) == len(ix2.vectors)
        memory.delete_node(target)
        fresh = memory.create_node(OWNER, entity, "fresh")
        memory.save_l2(fresh, "The lighthouse keeper repainted the spiral stairs bright orange.\n")
        trio.run(ix2.drain_once)
        qvec = embedder.embed(["who painted the lighthouse stairs orange"])[0]
        assert label_node(ix2.vectors.search(qvec, 1)[0][0]) == fresh.id
        gone = ix2.vectors.search(embedder.embed([question])[0], 10)
        assert target.id not in [label_node(label) for label, _ in gone]
        res = Searcher(memory, ix2).search("lighthouse stairs painted orange", "", QueryOptions())
        assert res.hits[0].path == memory.node_path(fresh)
    finally:
        ix2.text.close()


# ---- the indexer's unit digests (index.digests) ---------------------------------------------


def test_unit_digests_are_sorted_arrays_that_round_trip_and_refuse_a_torn_file(tmp_path: Path):
    table = UnitDigests()
    table.set_many([8192 * 5 + 1, 8192 * 5, 8192 * 2], [11, 10, 20])
    table.set_many([8192 * 5], [99])  # replace
    assert len(table) == 3 and table.get(8192 * 5) == 99 and table.get(7) is None
    assert table.in_range(8192 * 5, 8192 * 6) == [8192 * 5, 8192 * 5 + 1]
    assert table.in_ranges([8192 * 2, 8192 * 5], 8192, most=10) == [8192 * 2, 8192 * 5, 40961]
    assert table.in_ranges([8192 * 2, 8192 * 5], 8192, most=2) is None
    table.remove([8192 * 5 + 1, 12345])
    assert table.in_range(8192 * 5, 8192 * 6) == [8192 * 5]
    table.save(tmp_path / "d.npy")
    again = UnitDigests.load(tmp_path / "d.npy")
    assert again.labels().tolist() == [8192 * 2, 8192 * 5] and again.get(8192 * 2) == 20
    assert again.get(8192 * 5) == 99
    big = 0xFFFF_FFFF_FFFF_FFFF  # a digest with the top bit set survives as uint64
    again.set_many([1], [big])
    again.save(tmp_path / "d.npy")
    assert UnitDigests.load(tmp_path / "d.npy").get(1) == big
    os.truncate(tmp_path / "d.npy", (tmp_path / "d.npy").stat().st_size - 8)
    with pytest.raises(ValueError):
        UnitDigests.load(tmp_path / "d.npy")


@pytest.mark.parametrize(
    ("value", "error"),
    [("250000", None), ("0", "at least 1"), ("-5", "at least 1"), ("lots", "must be int")],
)
def test_vector_compact_units_in_config_yaml(tmp_path: Path, value: str, error: str | None):
    (tmp_path / "config.yaml").write_text(f"vector_compact_units: {value}\n")
    if error is None:
        assert load_config(tmp_path).vector_compact_units == 250_000
    else:
        with pytest.raises(UsageError, match=error):
            load_config(tmp_path)
