"""Image vectors (search.images) in the indexer, without a kernel: pictures taken by the
inbox's CLIP gate are embedded into their own hnswlib index by `reindex`, saved with the
indexer's snapshot and used as saved after a restart, and a question in words finds the
picture it describes through the fusion. Real MiniLM, real hnswlib and tantivy, and the
tiny CLIP model (media.clipnet) trained by the `tiny_clip` fixture."""

from __future__ import annotations

from pathlib import Path

import pytest

from contextfs.conversations.media import MediaIntake, MediaSettings
from contextfs.media.clip import ClipSpec, LazyClip
from contextfs.memory.service import Memory
from contextfs.search.images import ImageVectors
from contextfs.search.indexer import Indexer
from contextfs.search.retrieval import QueryOptions, Searcher
from contextfs.testing import tiny_clip as tc

PICTURES = [("red", "circle"), ("blue", "circle"), ("red", "square"), ("green", "triangle")]


def _take(intake: MediaIntake, name: str, data: bytes, when: float) -> str:
    a = intake.analyse(data, name)
    state, lines, _node = intake.finish(("user", "default"), name, data, when, a)
    return "\n".join(lines)


@pytest.mark.model
@pytest.mark.timeout(600)
def test_reindex_embeds_pictures_and_a_restart_uses_the_saved_vectors(
    memory: Memory, embedder, tiny_clip, tmp_path: Path
) -> None:
    config, weights = tiny_clip
    clip = LazyClip(ClipSpec(checkpoint=str(weights), model_config=str(config)))
    intake = MediaIntake(
        memory, MediaSettings(clip_drop_above=0.99, clip_new_below=0.85), clip=clip
    )
    assert intake.gate_name().startswith("CLIP (contextfs-tiny-clip from ")
    paths = {}
    for i, (colour, shape) in enumerate(PICTURES):
        report = _take(
            intake, f"img{i}.png", tc.shape_image(colour, shape, seed=30 + i), 1000.0 + i
        )
        assert "image kept" in report and "visual gate (CLIP (" in report, report
        paths[(colour, shape)] = report.split("image kept: ")[1].split(")")[0]
    assert "visual gate: CLIP (contextfs-tiny-clip" in intake.status_line()

    index_dir = tmp_path / "index"
    images = ImageVectors(clip, min_similarity=0.3)
    ix = Indexer(memory, index_dir, lambda: embedder, model_name=embedder.name, images=images)
    assert ix.rebuild_sync() == len(PICTURES)
    assert len(images.digests) == len(PICTURES)
    ix.text.close()

    # a restart: the saved image vectors are used as they are, nothing is embedded again
    again = ImageVectors(clip, min_similarity=0.3)
    ix2 = Indexer(memory, index_dir, lambda: embedder, model_name=embedder.name, images=again)
    ix2.open_sync(embedder)
    try:
        assert again.digests == images.digests and len(again.index) == len(PICTURES)
        assert "image_vectors: 4 images" in "\n".join(ix2.status_lines())
        searcher = Searcher(memory, ix2)
        for colour, shape in PICTURES:
            res = searcher.search(tc.caption(colour, shape), "", QueryOptions())
            assert "clip" in res.sides
            assert res.hits[0].path == paths[(colour, shape)], [h.path for h in res.hits]
            assert res.hits[0].media == paths[(colour, shape)] + "/original.png"
    finally:
        ix2.text.close()


@pytest.mark.allow_warnings  # the checkpoint's refusal is logged
def test_a_checkpoint_that_does_not_load_leaves_the_hash_gate_saying_why(
    memory: Memory, tmp_path: Path
) -> None:
    broken = tmp_path / "broken.pt"
    broken.write_bytes(b"\x00" * 64)
    clip = LazyClip(ClipSpec(model="ViT-B-32", checkpoint=str(broken)))
    intake = MediaIntake(memory, MediaSettings(), clip=clip)
    report = _take(intake, "a.png", tc.shape_image("red", "circle"), 1000.0)
    assert "image kept" in report
    assert "visual gate (perceptual hash (the CLIP checkpoint did not load))" in report
    line = intake.status_line()
    assert "perceptual hash (the CLIP checkpoint did not load: the CLIP checkpoint" in line
    assert "does not load" in line and "drop at >= 0.9," in line
