"""VectorIndex over real hnswlib: upsert, replace, delete, search, persistence."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from contextfs.errors import ContextFSError, IndexCorrupt
from contextfs.index.vectors import VectorIndex

DIM = 16


def unit_rows(n: int, seed: int = 0) -> np.ndarray:
    rows = np.random.default_rng(seed).normal(size=(n, DIM)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_empty_index_returns_nothing():
    index = VectorIndex(DIM)
    assert len(index) == 0
    assert index.search(unit_rows(1)[0], 10) == []


def test_each_vector_finds_itself_first_with_similarity_one():
    rows = unit_rows(200)
    index = VectorIndex(DIM)
    index.upsert(range(1000, 1200), rows)
    assert len(index) == 200
    for i in (0, 57, 199):
        hits = index.search(rows[i], 5)
        assert hits[0][0] == 1000 + i
        assert hits[0][1] == pytest.approx(1.0, abs=1e-5)
        sims = [s for _, s in hits]
        assert sims == sorted(sims, reverse=True)
        assert all(-1.0 - 1e-6 <= s <= 1.0 + 1e-6 for s in sims)


def test_opposite_vector_has_similarity_minus_one():
    index = VectorIndex(DIM)
    v = unit_rows(1)[0]
    index.upsert([1, 2], np.stack([v, -v]))
    assert index.search(v, 2) == [
        (1, pytest.approx(1.0, abs=1e-5)),
        (2, pytest.approx(-1.0, abs=1e-5)),
    ]


def test_upsert_replaces_an_existing_label():
    rows = unit_rows(3)
    index = VectorIndex(DIM)
    index.upsert([1, 2], rows[:2])
    index.upsert([1], rows[2:3])
    assert len(index) == 2
    assert index.search(rows[2], 1) == [(1, pytest.approx(1.0, abs=1e-5))]
    old_vector_hits = dict(index.search(rows[0], 2))
    assert old_vector_hits[1] < 0.999  # label 1 no longer holds rows[0]


def test_delete_hides_and_reupsert_revives():
    rows = unit_rows(10)
    index = VectorIndex(DIM)
    index.upsert(range(10), rows)
    index.delete([3, 4, 999])  # unknown labels are ignored
    index.delete([3])  # and so are repeated deletes
    assert len(index) == 8
    assert 3 not in index
    labels = [label for label, _ in index.search(rows[3], 10)]
    assert 3 not in labels and 4 not in labels
    assert len(labels) == 8
    index.upsert([3], rows[3:4])
    assert len(index) == 9
    assert index.search(rows[3], 1)[0][0] == 3


def test_k_larger_than_live_count_is_clipped():
    rows = unit_rows(5)
    index = VectorIndex(DIM)
    index.upsert(range(5), rows)
    index.delete([0, 1])
    hits = index.search(rows[2], 100)
    assert sorted(label for label, _ in hits) == [2, 3, 4]
    index.delete([2, 3, 4])
    assert index.search(rows[2], 100) == []


def test_capacity_grows():
    rows = unit_rows(300)
    index = VectorIndex(DIM, capacity=4)
    for start in range(0, 300, 7):
        index.upsert(range(start, min(start + 7, 300)), rows[start : start + 7])
    assert len(index) == 300
    assert index.search(rows[250], 1)[0][0] == 250


def test_an_empty_index_saved_and_loaded_takes_vectors(tmp_path: Path):
    """hnswlib loads an empty index with room for 0 vectors; the first upsert after it
    grows it (it spun for ever, holding the indexer's lock: every question of the mount
    waited behind it)."""
    path = tmp_path / "vectors.hnsw"
    VectorIndex(DIM).save(path)
    loaded = VectorIndex.load(path, DIM)
    assert loaded._index.get_max_elements() == 0  # what made doubling go nowhere
    rows = unit_rows(3)
    loaded.upsert(range(3), rows)
    assert len(loaded) == 3 and loaded.search(rows[1], 1)[0][0] == 1


def test_allow_filter():
    rows = unit_rows(100)
    index = VectorIndex(DIM)
    index.upsert(range(100), rows)
    hits = index.search(rows[10], 5, allow=lambda label: label % 2 == 1)
    assert len(hits) == 5
    assert all(label % 2 == 1 for label, _ in hits)
    # a filter stricter than k: only what passes comes back, no error
    hits = index.search(rows[10], 10, allow=lambda label: label in (3, 7, 10))
    assert sorted(label for label, _ in hits) == [3, 7, 10]
    assert index.search(rows[10], 10, allow=lambda label: False) == []


def test_bad_shapes_are_refused():
    index = VectorIndex(DIM)
    with pytest.raises(ValueError):
        index.upsert([1, 2], unit_rows(1))
    with pytest.raises(ValueError):
        index.upsert([1, 1], unit_rows(2))
    with pytest.raises(ValueError):
        index.search(np.zeros(DIM + 1, dtype=np.float32), 1)


def test_save_load_round_trip(tmp_path: Path):
    rows = unit_rows(500)
    index = VectorIndex(DIM, capacity=16)
    index.upsert(range(500), rows)
    index.delete(range(0, 500, 5))
    path = tmp_path / "sub" / "vectors.hnsw"
    index.save(path)
    assert sorted(os.listdir(path.parent)) == ["vectors.hnsw"]  # no temporaries left

    loaded = VectorIndex.load(path, DIM, ef=80)
    assert len(loaded) == 400
    assert loaded._index.ef == 80  # hnswlib does not save ef
    for i in (1, 2, 499):
        assert loaded.search(rows[i], 1)[0] == (i, pytest.approx(1.0, abs=1e-5))
    assert 5 not in {label for label, _ in loaded.search(rows[5], 400)}
    # the loaded index keeps working: revive a deleted label, grow, save again
    loaded.upsert([5], rows[5:6])
    loaded.upsert(range(500, 2100), unit_rows(1600, seed=1))
    assert len(loaded) == 2001
    loaded.save(path)
    again = VectorIndex.load(path, DIM)
    assert len(again) == 2001
    assert again.search(rows[5], 1)[0][0] == 5


def test_save_replaces_atomically(tmp_path: Path):
    path = tmp_path / "v.hnsw"
    a = VectorIndex(DIM)
    a.upsert([1], unit_rows(1))
    a.save(path)
    b = VectorIndex(DIM)
    b.upsert([1, 2, 3], unit_rows(3, seed=2))
    b.save(path)
    assert len(VectorIndex.load(path, DIM)) == 3
    assert sorted(os.listdir(tmp_path)) == ["v.hnsw"]


@pytest.mark.parametrize(
    "damage", ["missing", "empty", "garbage", "truncated", "flipped", "trailing", "dim"]
)
def test_unreadable_file_is_index_corrupt(tmp_path: Path, damage: str):
    path = tmp_path / "v.hnsw"
    index = VectorIndex(DIM)
    index.upsert(range(50), unit_rows(50))
    index.delete([7])
    index.save(path)
    raw = path.read_bytes()
    dim = DIM
    if damage == "missing":
        path.unlink()
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "garbage":
        path.write_bytes(os.urandom(len(raw)))
    elif damage == "truncated":
        path.write_bytes(raw[: len(raw) // 2])
    elif damage == "flipped":
        mid = len(raw) // 2
        path.write_bytes(raw[:mid] + bytes([raw[mid] ^ 0xFF]) + raw[mid + 1 :])
    elif damage == "trailing":
        path.write_bytes(raw + b"\0" * 8)
    elif damage == "dim":
        dim = DIM * 2
    with pytest.raises(IndexCorrupt) as info:
        VectorIndex.load(path, dim)
    assert isinstance(info.value, ContextFSError)
    assert [p.name for p in tmp_path.iterdir()] == ([] if damage == "missing" else ["v.hnsw"])


def test_l2_and_ip_spaces_report_similarity():
    rows = unit_rows(20)
    for space in ("l2", "ip"):
        index = VectorIndex(DIM, space=space)
        index.upsert(range(20), rows)
        label, sim = index.search(rows[4], 1)[0]
        assert label == 4
        assert sim == pytest.approx(1.0, abs=1e-5)
    with pytest.raises(ValueError):
        VectorIndex(DIM, space="hamming")


def test_a_snapshot_of_some_labels_ranks_them_exactly_and_skips_deleted_ones():
    rows = unit_rows(300, seed=3)
    index = VectorIndex(DIM)
    index.upsert(range(300), rows * 2.5)  # not unit length: cosine must not care
    index.delete([10, 11])
    wanted = list(range(0, 300, 2)) + [999]  # 999 was never added
    snap = index.snapshot(wanted)
    assert 10 not in snap.labels and 999 not in snap.labels and len(snap.labels) == 149
    query = unit_rows(1, seed=4)[0]
    live = [x for x in wanted if x in index]
    exact = sorted(live, key=lambda x: -float(rows[x] @ query))[:7]
    hits = snap.nearest(query, 7)
    assert [label for label, _ in hits] == exact
    assert hits[0][1] == pytest.approx(float(rows[exact[0]] @ query), abs=1e-5)
    assert len(snap.nearest(query, 1000)) == 149
    assert index.snapshot([999]).nearest(query, 5) == []
