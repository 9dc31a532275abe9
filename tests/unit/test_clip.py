"""The CLIP side of media (docs/media.md): checkpoints load through `media.clip.Clip` (a
config JSON + weights file, or open_clip's folder layout), bad ones are refused with a
reason, and the CLIP gate decides with scores from a model trained on coloured shapes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from contextfs.media.clip import Clip, ClipGate, ClipSpec, ClipUnavailable, LazyClip
from contextfs.media.visual import decide
from contextfs.testing import tiny_clip as tc


@pytest.fixture(scope="module")
def untrained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return tc.random_weights(tmp_path_factory.mktemp("untrained"))


def test_a_saved_checkpoint_loads_with_its_weights(untrained, tmp_path: Path) -> None:
    import torch

    config, weights = untrained
    clip = Clip(ClipSpec(checkpoint=str(weights), model_config=str(config)))
    assert clip.dim == tc.TINY_CONFIG["embed_dim"]
    # the weights are the saved ones, not a fresh random model
    saved = torch.load(weights, weights_only=True)
    got = clip._model.state_dict()
    assert all(torch.equal(saved[k], got[k]) for k in saved)
    rows = clip.embed_images([tc.shape_image("red", "circle"), tc.shape_image("blue", "square")])
    assert rows.shape == (2, clip.dim)
    assert np.allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-5)
    text = clip.embed_texts(["a red circle"])
    assert text.shape == (1, clip.dim)
    # open_clip's own folder layout names its architecture itself
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "open_clip_config.json").write_text(json.dumps({"model_cfg": tc.TINY_CONFIG}))
    torch.save(saved, folder / "open_clip_pytorch_model.bin")
    again = Clip(ClipSpec(checkpoint=str(folder)))
    assert np.allclose(again.embed_images([tc.shape_image("red", "circle")])[0], rows[0], atol=1e-5)


@pytest.mark.allow_warnings  # the refusal is logged
def test_bad_checkpoints_are_refused_with_a_reason(untrained, tmp_path: Path) -> None:
    config, weights = untrained
    with pytest.raises(ClipUnavailable, match="does not exist"):
        Clip(ClipSpec(checkpoint=str(tmp_path / "nope.pt"), model_config=str(config)))
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a checkpoint at all")
    with pytest.raises(ClipUnavailable, match="does not load"):
        Clip(ClipSpec(checkpoint=str(junk), model_config=str(config)))
    # the tiny weights under another architecture's name: refused, nothing loaded loosely
    with pytest.raises(ClipUnavailable, match="does not load"):
        Clip(ClipSpec(model="RN50", checkpoint=str(weights)))
    lazy = LazyClip(ClipSpec(checkpoint=str(junk), model_config=str(config)))
    assert lazy.get() is None and "does not load" in lazy.error
    assert lazy.get() is None  # remembered: not tried again on every image


def test_the_clip_gate_drops_copies_and_keeps_other_pictures(tiny_clip) -> None:
    config, weights = tiny_clip
    gate = ClipGate(Clip(ClipSpec(checkpoint=str(weights), model_config=str(config))))
    assert gate.name.startswith("CLIP (")
    red = gate.signature(tc.shape_image("red", "circle", seed=1))
    scores = {
        "its JPEG": gate.similarity(
            red, gate.signature(tc.shape_image("red", "circle", seed=1, fmt="JPEG"))
        ),
        "another red circle": gate.similarity(
            red, gate.signature(tc.shape_image("red", "circle", seed=2))
        ),
        "a blue circle": gate.similarity(
            red, gate.signature(tc.shape_image("blue", "circle", seed=1))
        ),
        "a green triangle": gate.similarity(
            red, gate.signature(tc.shape_image("green", "triangle", seed=1))
        ),
    }
    decisions = {k: decide(v, 0.99, 0.85) for k, v in scores.items()}
    assert not decisions["its JPEG"].kept, scores
    assert decisions["a blue circle"].kept and decisions["a blue circle"].reason == "new", scores
    assert decisions["a green triangle"].reason == "new", scores
    assert scores["another red circle"] > scores["a blue circle"], scores


def test_the_text_tower_finds_the_picture_a_caption_describes(tiny_clip) -> None:
    config, weights = tiny_clip
    clip = Clip(ClipSpec(checkpoint=str(weights), model_config=str(config)))
    classes = [(c, s) for c in tc.COLOURS for s in tc.SHAPES]
    pictures = clip.embed_images([tc.shape_image(c, s, seed=77) for c, s in classes])
    captions = clip.embed_texts([tc.caption(c, s) for c, s in classes])
    best = (captions @ pictures.T).argmax(axis=1)
    right = int((best == np.arange(len(classes))).sum())
    assert right >= len(classes) - 1, f"{right} of {len(classes)} captions find their picture"
