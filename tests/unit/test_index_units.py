"""Units and chunking: pure functions, no model and no index."""

from __future__ import annotations

import random
import re

import pytest
import xxhash

from contextfs.index.units import Unit, chunk_spans, chunk_text
from contextfs.model import Node
from contextfs.search.indexer import (
    SLOTS,
    label_chunk,
    label_node,
    label_tier,
    label_unit,
    units_of,
)


def sample_text(n_paragraphs: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    words = [
        "alpha",
        "beta",
        "gamma",
        "delta",
        "epsilon",
        "zeta",
        "eta",
        "theta",
        "iota",
        "kappa",
        "lambda",
        "mu",
    ]
    paragraphs = []
    for _ in range(n_paragraphs):
        sentences = []
        for _ in range(rng.randint(1, 12)):
            sentence = " ".join(rng.choice(words) for _ in range(rng.randint(3, 30)))
            sentences.append(sentence.capitalize() + rng.choice([".", "!", "?"]))
        paragraphs.append(" ".join(sentences))
    return "\n\n".join(paragraphs)


def test_unit_key_and_digest():
    u = Unit(42, "L2", 3, "some text")
    assert u.key == "42:L2:3"
    assert u.digest == xxhash.xxh64(b"some text").hexdigest()
    assert Unit(42, "L2", 3, "other").digest != u.digest
    with pytest.raises(AttributeError):
        u.text = "changed"  # frozen


def test_short_text_is_one_chunk():
    assert chunk_text("Hello world.") == ["Hello world."]
    text = "x" * 1000
    assert chunk_text(text) == [text]
    assert chunk_text("  padded \n") == ["padded"]


@pytest.mark.parametrize("text", ["", "   ", "\n\n\t"])
def test_empty_text_has_no_chunks(text: str):
    assert chunk_text(text) == []


@pytest.mark.parametrize("max_chars,overlap", [(1000, 100), (300, 50), (120, 0), (200, 150)])
@pytest.mark.parametrize("seed", range(5))
def test_chunks_respect_limits_and_lose_nothing(max_chars: int, overlap: int, seed: int):
    text = sample_text(12, seed)
    chunks = chunk_text(text, max_chars, overlap)
    assert len(chunks) > 1
    assert all(0 < len(c) <= max_chars for c in chunks)
    assert all(c == c.strip() for c in chunks)
    # every chunk is a piece of the text, and the bodies tile it exactly
    assert all(c in text for c in chunks)
    spans = chunk_spans(text, max_chars, overlap)
    assert "".join(text[start:end] for _, start, end in spans) == text
    assert [text[ov:end].strip() for ov, _, end in spans] == chunks
    # the words come back in order once the overlaps are dropped
    bodies = " ".join(text[start:end] for _, start, end in spans)
    assert bodies.split() == text.split()


def test_chunks_prefer_paragraph_then_sentence_boundaries():
    para = "Sentence one is here. Sentence two is here too."  # 47 chars
    text = "\n\n".join([para] * 10)
    for chunk in chunk_text(text, 120, 0):
        assert chunk.startswith("Sentence one") and chunk.endswith("here too.")
    long_para = " ".join(f"This is sentence number {i}." for i in range(40))
    for chunk in chunk_text(long_para, 200, 0):
        assert chunk.startswith("This is") and chunk.endswith(".")


def test_overlap_repeats_the_end_of_the_previous_chunk():
    text = " ".join(f"word{i}" for i in range(400))
    chunks = chunk_text(text, 200, 40)
    for prev, nxt in zip(chunks, chunks[1:], strict=False):
        first = nxt.split()[0]
        assert first in prev.split()  # the next chunk starts inside the previous one
        assert re.fullmatch(r"word\d+", first)  # and never mid-word


def test_text_without_spaces_is_cut_hard():
    text = "x" * 2500
    chunks = chunk_text(text, 1000, 100)
    assert all(len(c) <= 1000 for c in chunks)
    assert "".join(text[s:e] for _, s, e in chunk_spans(text, 1000, 100)) == text


def test_bad_max_chars():
    with pytest.raises(ValueError):
        chunk_text("abc", 0)


def _node(l0: str, l1: str, l2: str) -> Node:
    return Node(
        id=7,
        owner_kind="user",
        owner_id="x",
        type="preference",
        name="editor",
        version=1,
        l0=l0,
        l1=l1,
        l2=l2,
        l0_pinned=False,
        l1_pinned=False,
        content_hash="",
    )


def test_units_of_tiers_and_prefix():
    long = sample_text(20, seed=3)
    units = units_of(_node("Editor choice", "Uses vim.", long), prefix="preference editor: ")
    assert [u.tier for u in units[:2]] == ["L0", "L1"]
    assert units[0] == Unit(7, "L0", 0, "preference editor: Editor choice")
    assert units[1].text == "preference editor: Uses vim."
    l2 = units[2:]
    assert len(l2) > 1
    assert [u.chunk for u in l2] == list(range(len(l2)))
    assert all(u.tier == "L2" and u.node_id == 7 for u in l2)
    assert all(u.text.startswith("preference editor: ") for u in units)
    assert len({u.key for u in units}) == len(units)


def test_units_of_skips_empty_tiers():
    assert units_of(_node("", "  ", "")) == []
    assert [u.tier for u in units_of(_node("", "", "body"))] == ["L2"]
    assert [u.tier for u in units_of(_node("abstract", "", ""))] == ["L0"]


def test_a_label_taken_apart_at_once_is_its_node_tier_and_chunk():
    for nid in (0, 1, 7, 123_456_789):
        for slot in (0, 1, 2, 3, 40, SLOTS - 1):
            label = nid * SLOTS + slot
            assert label_unit(label) == (label_node(label), label_tier(label), label_chunk(label))
