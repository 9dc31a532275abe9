"""A tiny CLIP model for tests and benchmarks, and a way to teach it shapes and colours.

No registry package ships CLIP weights, so the cross-modal tests make their own: a custom
architecture of about 3.3M parameters (most of them the token embedding of CLIP's BPE
vocabulary), built by `media.clipnet` (open_clip's ViT CLIP in plain torch), trained for a
few hundred steps on generated pictures of coloured shapes with captions like "a red
circle". The result is saved as a config JSON plus a weights file, which the daemon loads
through `media.clip.Clip` like any checkpoint.

Boundary: test support only; imports torch and `media.clipnet` inside the functions.
"""

from __future__ import annotations

import io
import json
import random
import time
from pathlib import Path

TINY_NAME = "contextfs-tiny-clip"
TINY_CONFIG = {
    "embed_dim": 64,
    "vision_cfg": {"image_size": 32, "layers": 2, "width": 64, "patch_size": 4, "head_width": 32},
    "text_cfg": {"context_length": 16, "vocab_size": 49408, "width": 64, "heads": 2, "layers": 2},
}
COLOURS = {
    "red": (220, 30, 30),
    "green": (30, 170, 40),
    "blue": (30, 60, 220),
    "yellow": (235, 210, 20),
}
SHAPES = ("circle", "square", "triangle")


def write_config(folder: Path) -> Path:
    """The tiny architecture as a model config file in open_clip's format (its stem is the
    name)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{TINY_NAME}.json"
    path.write_text(json.dumps(TINY_CONFIG, indent=2))
    return path


def shape_image(
    colour: str, shape: str, *, size: int = 96, seed: int = 0, fmt: str = "PNG"
) -> bytes:
    """A `colour` `shape` at a random place and size on a light, slightly noisy ground."""
    from PIL import Image, ImageDraw

    rng = random.Random(f"{colour}-{shape}-{seed}")
    ground = tuple(rng.randint(215, 255) for _ in range(3))
    img = Image.new("RGB", (size, size), ground)
    d = ImageDraw.Draw(img)
    r = rng.randint(size // 4, size * 2 // 5)
    cx, cy = rng.randint(r, size - r), rng.randint(r, size - r)
    fill = tuple(max(0, min(255, c + rng.randint(-25, 25))) for c in COLOURS[colour])
    if shape == "circle":
        d.ellipse((cx - r, cy - r, cx + r, cy + r), fill=fill)
    elif shape == "square":
        d.rectangle((cx - r, cy - r, cx + r, cy + r), fill=fill)
    else:
        d.polygon([(cx, cy - r), (cx - r, cy + r), (cx + r, cy + r)], fill=fill)
    out = io.BytesIO()
    img.save(out, fmt)
    return out.getvalue()


def caption(colour: str, shape: str) -> str:
    return f"a {colour} {shape}"


def train(
    folder: Path,
    *,
    steps: int = 400,
    batch: int = 48,
    seed: int = 0,
    lr: float = 1e-3,
    log=None,
) -> tuple[Path, Path]:
    """Train the tiny model on generated captioned shapes (CLIP's contrastive loss, one
    thread) and save it: (config JSON, weights file). About 20-40 s on one busy core."""
    import torch
    import torch.nn.functional as F

    from contextfs.media import clipnet

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    config = write_config(folder)
    arch = clipnet.parse_config(TINY_CONFIG)
    model = clipnet.build(arch)
    preprocess = clipnet.Preprocess.for_model(arch)
    tokenizer = clipnet.Tokenizer(arch.text.context_length)
    classes = [(c, s) for c in COLOURS for s in SHAPES]
    from PIL import Image

    # a fixed pool of pictures, preprocessed once: 24 of each class
    pool_x, pool_y = [], []
    for k, (c, s) in enumerate(classes):
        for i in range(24):
            img = Image.open(io.BytesIO(shape_image(c, s, seed=1000 + i)))
            pool_x.append(preprocess(img.convert("RGB")))
            pool_y.append(k)
    xs = torch.stack(pool_x)
    ys = torch.tensor(pool_y)
    tokens = tokenizer([caption(c, s) for c, s in classes])
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    model.train()
    rng = torch.Generator().manual_seed(seed)
    started = time.monotonic()
    for step in range(steps):
        idx = torch.randperm(len(xs), generator=rng)[:batch]
        img_f = F.normalize(model.encode_image(xs[idx]), dim=-1)
        txt_f = F.normalize(model.encode_text(tokens), dim=-1)
        logits = model.logit_scale.exp() * img_f @ txt_f.T  # (batch, classes)
        target = ys[idx]
        # image -> caption over every class; caption -> image over the batch's images of it
        loss = F.cross_entropy(logits, target)
        present = torch.unique(target)
        col = logits[:, present].T  # (present classes, batch)
        mask = target.unsqueeze(0) == present.unsqueeze(1)
        loss_t = -(col.log_softmax(dim=1) * mask).sum(1) / mask.sum(1)
        loss = loss + loss_t.mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            model.logit_scale.clamp_(0, 4.6052)
        if log is not None and (step % 50 == 0 or step == steps - 1):
            log(
                f"tiny CLIP step {step + 1}/{steps}: loss {loss.item():.3f} "
                f"({time.monotonic() - started:.0f} s)"
            )
    model.eval()
    weights = folder / f"{TINY_NAME}.pt"
    torch.save(model.state_dict(), weights)
    return config, weights


def random_weights(folder: Path, name: str = TINY_NAME) -> tuple[Path | None, Path]:
    """An untrained checkpoint: (config JSON or None for a built-in name, weights file).
    For benchmarks (speed does not depend on what the weights mean)."""
    import torch

    from contextfs.media import clipnet

    config = None
    arch: dict[str, object] | None
    if name == TINY_NAME:
        config = write_config(folder)
        arch = TINY_CONFIG
    else:
        arch = clipnet.builtin_config(name)
        if arch is None:
            raise ValueError(f"{name} is not a built-in CLIP architecture")
    model = clipnet.build(arch)
    weights = folder / f"{name}.pt"
    torch.save(model.state_dict(), weights)
    return config, weights
