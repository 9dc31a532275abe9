"""The CLIP side of media (docs/media.md): checkpoints load through `media.clip.Clip` (a
config JSON + weights file, or open_clip's folder layout), bad ones are refused with a
reason, and the CLIP gate decides with scores from a model trained on coloured shapes.
`media.clipnet` (the model, preprocessing and tokenizer in plain torch) gives what open_clip
3.3.0 gives: the ids and figures hard-coded here were checked against it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from contextfs.media import clipnet
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
    with pytest.raises(ClipUnavailable, match="does not load.*another architecture"):
        Clip(ClipSpec(model="ViT-S-32", checkpoint=str(weights)))
    # a name clipnet has no architecture for
    with pytest.raises(ClipUnavailable, match="'RN50' is not a built-in CLIP architecture"):
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


# ---- clipnet: open_clip's CLIP without open_clip ------------------------------------------


def test_the_tokenizer_gives_clips_ids() -> None:
    tok = clipnet.Tokenizer()
    rows = tok(["a photo", "a red circle"])
    assert rows.shape == (2, 77) and str(rows.dtype) == "torch.int64"
    assert rows[0, :5].tolist() == [49406, 320, 1125, 49407, 0]
    assert not rows[0, 4:].any()
    # open_clip 3.3.0's SimpleTokenizer on the same strings: lower case, punctuation and
    # digits one token each, HTML entities unescaped, accents through the byte-level BPE
    expected = {
        "a red circle": [49406, 320, 736, 7117, 49407],
        "it's 2024, isn't it?": [49406, 585, 568, 273, 271, 273, 275, 267, 2923, 713, 585, 286]
        + [49407],
        "Tom &amp; Jerry": [49406, 2435, 261, 9164, 49407],
        "café naïve": [49406, 15304, 1097, 35689, 563, 49407],
        "  A   Red\tCIRCLE ": [49406, 320, 736, 7117, 49407],
    }
    for text, ids in expected.items():
        row = tok([text])[0].tolist()
        assert row[: len(ids)] == ids and not any(row[len(ids) :]), text
    # too long: cut to the context, still ending with the end token
    short = clipnet.Tokenizer(context_length=5)
    assert short(["one two three four five six"]).tolist() == [[49406, 637, 1237, 2097, 49407]]


def test_the_built_in_architectures_are_open_clips() -> None:
    import torch

    with torch.device("meta"):  # shapes only: no 600 MB of random weights
        model = clipnet.build(clipnet.builtin_config("ViT-B-32"))
    state = model.state_dict()
    assert sum(v.numel() for v in state.values()) == 151_277_313
    for key in (
        "visual.conv1.weight",
        "visual.class_embedding",
        "visual.transformer.resblocks.11.attn.in_proj_weight",
        "visual.transformer.resblocks.11.mlp.c_proj.bias",
        "visual.proj",
        "token_embedding.weight",
        "transformer.resblocks.0.ln_1.weight",
        "ln_final.bias",
        "text_projection",
        "logit_scale",
    ):
        assert key in state, key
    # every key and shape, as open_clip 3.3.0's CLIP(**ViT-B-32.json) has them
    shapes = repr(sorted((k, tuple(v.shape)) for k, v in state.items()))
    assert hashlib.sha256(shapes.encode()).hexdigest()[:16] == "4a72986a76b4a4d2"
    assert {"ViT-B-16", "ViT-L-14", "ViT-L-14-quickgelu"} <= set(clipnet.BUILTIN)


def test_a_state_dict_round_trips_strictly(tmp_path: Path) -> None:
    import torch

    torch.manual_seed(3)
    model = clipnet.build(tc.TINY_CONFIG).eval()
    path = tmp_path / "w.pt"
    torch.save(model.state_dict(), path)
    again = clipnet.build(tc.TINY_CONFIG).eval()
    clipnet.load_weights(again, clipnet.read_state_dict(path))
    again.load_state_dict(torch.load(path, weights_only=True), strict=True)
    tokens = clipnet.Tokenizer(16)(["a red circle"])
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(model.encode_text(tokens), again.encode_text(tokens))
        assert torch.equal(model.encode_image(images), again.encode_image(images))
    # a DistributedDataParallel save ("module." keys under "state_dict") reads the same
    wrapped = tmp_path / "ddp.pt"
    torch.save({"state_dict": {f"module.{k}": v for k, v in model.state_dict().items()}}, wrapped)
    assert clipnet.read_state_dict(wrapped).keys() == model.state_dict().keys()
    # strict: a key missing, or one too many, is refused by name
    state = model.state_dict()
    del state["visual.proj"]
    with pytest.raises(clipnet.ClipConfigError, match=r"missing 1 \(visual.proj\)"):
        clipnet.load_weights(again, state)
    state = {**model.state_dict(), "visual.attn_pool.query": torch.zeros(1)}
    with pytest.raises(clipnet.ClipConfigError, match="unexpected 1"):
        clipnet.load_weights(again, state)


def test_a_checkpoint_folder_in_open_clips_layout(tmp_path: Path) -> None:
    import torch
    from safetensors.torch import save_file

    folder = tmp_path / "ckpt"
    folder.mkdir()
    model = clipnet.build(tc.TINY_CONFIG)
    save_file(model.state_dict(), folder / "open_clip_model.safetensors")
    config = {"model_cfg": tc.TINY_CONFIG}
    (folder / "open_clip_config.json").write_text(json.dumps(config))
    clip = Clip(ClipSpec(checkpoint=str(folder)))
    assert clip.name == "ckpt from " + str(folder)
    with torch.no_grad():
        want = model.eval().encode_text(clipnet.Tokenizer(16)(["a blue square"]))
    got = clip.embed_texts(["a blue square"])[0]
    assert np.allclose(got, (want / want.norm()).numpy()[0], atol=1e-6)
    picture = tc.shape_image("red", "circle")
    openai = clip.embed_images([picture])[0]
    # the folder's preprocess_cfg is the checkpoint's own normalisation
    config["preprocess_cfg"] = {"mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]}
    (folder / "open_clip_config.json").write_text(json.dumps(config))
    own = Clip(ClipSpec(checkpoint=str(folder))).embed_images([picture])[0]
    assert not np.allclose(own, openai, atol=1e-3)
    # a folder without weights is refused, naming what it looked for
    (folder / "open_clip_model.safetensors").unlink()
    with pytest.raises(ClipUnavailable, match="has no weights"):
        Clip(ClipSpec(checkpoint=str(folder)))


@pytest.mark.allow_warnings
def test_architectures_clipnet_does_not_build_are_refused(untrained, tmp_path: Path) -> None:
    _, weights = untrained
    cases = {
        "resnet": ({"vision_cfg": {"layers": [3, 4, 6, 3], "width": 64}}, "a ResNet image tower"),
        "timm": ({"vision_cfg": {"timm_model_name": "convnext_base"}}, "a timm image tower"),
        "hf-text": ({"text_cfg": {"hf_model_name": "roberta-base"}}, "a Hugging Face text tower"),
        "hf-tok": ({"text_cfg": {"hf_tokenizer_name": "t5-base"}}, "a Hugging Face tokenizer"),
        "coca": ({"multimodal_cfg": {"width": 64}}, "a CoCa model"),
        "siglip-like": ({"custom_text": True}, "a custom text tower"),
        "qk-norm": ({"vision_cfg": {"qk_norm": True}}, "the image tower.s custom attention"),
        "unknown": ({"text_cfg": {"rope": True}}, "unknown text_cfg settings: rope"),
    }
    for name, (change, reason) in cases.items():
        cfg = json.loads(json.dumps(tc.TINY_CONFIG))
        for key, value in change.items():
            if isinstance(value, dict):
                cfg[key] = {**cfg.get(key, {}), **value}
            else:
                cfg[key] = value
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(cfg))
        with pytest.raises(
            ClipUnavailable, match=f"architecture {name} is not supported: {reason}"
        ):
            Clip(ClipSpec(checkpoint=str(weights), model_config=str(path)))
    lazy = LazyClip(ClipSpec(checkpoint=str(weights), model_config=str(tmp_path / "coca.json")))
    assert lazy.get() is None and "CoCa" in lazy.error


def test_preprocessing_is_open_clips_evaluation_transform() -> None:
    from PIL import Image

    pre = clipnet.Preprocess((32, 32))
    # a grey picture of any shape: every pixel is (grey - mean) / std
    for size in ((64, 48), (20, 90), (32, 32), (7, 7)):
        x = pre(Image.new("RGB", size, (128, 128, 128)))
        assert tuple(x.shape) == (3, 32, 32)
        want = (128 / 255 - np.array(clipnet.OPENAI_MEAN)) / np.array(clipnet.OPENAI_STD)
        assert np.allclose(x.numpy().mean(axis=(1, 2)), want, atol=1e-5), size
    # the centre is kept: a wide picture's left and right thirds are cut off
    img = Image.new("RGB", (96, 32), (255, 0, 0))
    img.paste((0, 0, 255), (32, 0, 64, 32))
    x = pre(img).numpy()
    assert x[2].min() > 1.5 and x[0].max() < 0  # all blue, no red
