"""CLIP in plain torch: open_clip's ViT CLIP, its image preprocessing and its BPE tokenizer.

Role: build the model a CLIP checkpoint was trained as, without open_clip or torchvision
(open_clip needs torchvision, whose wheels pull a CUDA torch of several GB). The modules
and parameters carry open_clip's names (`visual.conv1.weight`,
`transformer.resblocks.0.attn.in_proj_weight`, `text_projection`, …), so a state dict
saved by open_clip 3.x (or OpenAI's CLIP) for a ViT architecture loads strictly, and the
same tensors give the same embeddings (docs/media.md has the measured difference).

What is built: open_clip's `CLIP` class with a ViT image tower and its own text
transformer, from a config in open_clip's JSON format (`embed_dim`, `vision_cfg`,
`text_cfg`, `quick_gelu`, …); the built-in ViT names (`ViT-B-32`, `ViT-L-14`, …) are in
`BUILTIN`. Anything else (ResNet or timm image towers, Hugging Face text towers or
tokenizers, CoCa, custom attention blocks) is refused with `ClipConfigError`, naming what
is missing, never approximated.

Preprocessing is open_clip's evaluation transform in Pillow and numpy: the shortest side
resized (bicubic) to the model's input size, a centre crop, OpenAI's mean and std (or a
checkpoint folder's own `preprocess_cfg`). The tokenizer is open_clip's `SimpleTokenizer`
over OpenAI's BPE vocabulary (shipped beside this module) except for ftfy's repair of
mis-decoded text, which is not installed: the text is HTML-unescaped and its whitespace
collapsed.

Boundary: torch, numpy and Pillow (safetensors for a `.safetensors` file); nothing of
ours, no files but the ones asked for and the vocabulary, no network.
"""

from __future__ import annotations

import functools
import gzip
import html
import math
import re
import string
import unicodedata
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

VOCAB = Path(__file__).with_name("bpe_simple_vocab_16e6.txt.gz")
OPENAI_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_STD = (0.26862954, 0.26130258, 0.27577711)


class ClipConfigError(ValueError):
    """An architecture or checkpoint this module does not build or load (the message says
    what)."""


# ---- configuration -----------------------------------------------------------------------

# open_clip 3.3.0's model_configs/ViT-*.json that this module builds: name -> (embed_dim,
# image_size, vision layers, vision width, patch_size, head_width, vision mlp_ratio, text
# width, text heads, text layers). Every one has a 77-token context, a 49408-token
# vocabulary and a text mlp_ratio of 4; the "-quickgelu" variants (OpenAI's activation)
# are derived below.
_VITS: dict[str, tuple[int, int, int, int, int, int, float, int, int, int]] = {
    "ViT-S-32": (384, 224, 12, 384, 32, 64, 4.0, 384, 6, 12),
    "ViT-S-32-alt": (256, 224, 12, 384, 32, 64, 4.0, 256, 4, 10),
    "ViT-S-16": (384, 224, 12, 384, 16, 64, 4.0, 384, 6, 12),
    "ViT-S-16-alt": (256, 224, 12, 384, 16, 64, 4.0, 256, 4, 10),
    "ViT-M-32": (512, 224, 12, 512, 32, 64, 4.0, 512, 8, 12),
    "ViT-M-32-alt": (384, 224, 12, 512, 32, 64, 4.0, 384, 6, 12),
    "ViT-M-16": (512, 224, 12, 512, 16, 64, 4.0, 512, 8, 12),
    "ViT-M-16-alt": (384, 224, 12, 512, 16, 64, 4.0, 384, 6, 12),
    "ViT-B-32": (512, 224, 12, 768, 32, 64, 4.0, 512, 8, 12),
    "ViT-B-32-256": (512, 256, 12, 768, 32, 64, 4.0, 512, 8, 12),
    "ViT-B-32-plus-256": (640, 256, 12, 896, 32, 64, 4.0, 640, 10, 12),
    "ViT-B-16": (512, 224, 12, 768, 16, 64, 4.0, 512, 8, 12),
    "ViT-B-16-plus": (640, 224, 12, 896, 16, 64, 4.0, 640, 10, 12),
    "ViT-B-16-plus-240": (640, 240, 12, 896, 16, 64, 4.0, 640, 10, 12),
    "ViT-L-14": (768, 224, 24, 1024, 14, 64, 4.0, 768, 12, 12),
    "ViT-L-14-280": (768, 280, 24, 1024, 14, 64, 4.0, 768, 12, 12),
    "ViT-L-14-336": (768, 336, 24, 1024, 14, 64, 4.0, 768, 12, 12),
    "ViT-L-16": (768, 224, 24, 1024, 16, 64, 4.0, 768, 12, 12),
    "ViT-L-16-320": (768, 320, 24, 1024, 16, 64, 4.0, 768, 12, 12),
    "ViT-H-14": (1024, 224, 32, 1280, 14, 80, 4.0, 1024, 16, 24),
    "ViT-H-14-378": (1024, 378, 32, 1280, 14, 80, 4.0, 1024, 16, 24),
    "ViT-H-16": (1024, 224, 32, 1280, 16, 80, 4.0, 1024, 16, 24),
    "ViT-g-14": (1024, 224, 40, 1408, 14, 88, 4.3637, 1024, 16, 24),
    "ViT-bigG-14": (1280, 224, 48, 1664, 14, 104, 4.9231, 1280, 20, 32),
    "ViT-e-14": (1280, 224, 56, 1792, 14, 112, 8.5715, 1280, 20, 36),
}
_QUICKGELU = (
    "ViT-B-32",
    "ViT-B-16",
    "ViT-L-14",
    "ViT-L-14-336",
    "ViT-H-14",
    "ViT-H-14-378",
    "ViT-bigG-14",
)


def _builtin_table() -> dict[str, dict[str, Any]]:
    table: dict[str, dict[str, Any]] = {}
    for name, (dim, size, vl, vw, patch, hw, vmlp, tw, th, tl) in _VITS.items():
        table[name] = {
            "embed_dim": dim,
            "vision_cfg": {
                "image_size": size,
                "layers": vl,
                "width": vw,
                "patch_size": patch,
                "head_width": hw,
                "mlp_ratio": vmlp,
            },
            "text_cfg": {
                "context_length": 77,
                "vocab_size": 49408,
                "width": tw,
                "heads": th,
                "layers": tl,
            },
        }
    table["ViT-M-16-alt"]["vision_cfg"]["ls_init_value"] = 1e-4  # its one setting apart
    for name in _QUICKGELU:
        table[f"{name}-quickgelu"] = {**table[name], "quick_gelu": True}
    return table


BUILTIN: dict[str, dict[str, Any]] = _builtin_table()


def builtin_config(name: str) -> dict[str, Any] | None:
    """open_clip's JSON config of a built-in ViT architecture (a fresh copy), or None."""
    cfg = BUILTIN.get(name)
    if cfg is None:
        return None
    return {k: dict(v) if isinstance(v, dict) else v for k, v in cfg.items()}


@dataclass(frozen=True, slots=True)
class VisionConfig:
    image_size: tuple[int, int]
    patch_size: tuple[int, int]
    layers: int
    width: int
    heads: int
    mlp_ratio: float = 4.0
    ls_init_value: float | None = None
    no_ln_pre: bool = False
    final_ln_after_pool: bool = False
    pool_type: str = "tok"  # "tok": the class token; "avg": the mean of the patch tokens
    act_kwargs: dict[str, Any] = field(default_factory=dict)
    norm_kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TextConfig:
    context_length: int = 77
    vocab_size: int = 49408
    width: int = 512
    heads: int = 8
    layers: int = 12
    mlp_ratio: float = 4.0
    ls_init_value: float | None = None
    causal: bool = True
    pool_type: str = "argmax"  # the end-of-text token: the highest id of each row
    eos_id: int = 2  # for pool_type "eos" only
    projection: str = "matrix"  # "matrix" (a parameter), "linear" (with a bias) or "none"
    clean: str = "lower"  # the tokenizer's text cleaning
    act_kwargs: dict[str, Any] = field(default_factory=dict)
    norm_kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ClipConfig:
    embed_dim: int
    vision: VisionConfig
    text: TextConfig
    quick_gelu: bool = False
    init_logit_scale: float = math.log(1 / 0.07)
    init_logit_bias: float | None = None
    nonscalar_logit_scale: bool = False


# settings that change nothing at inference (dropout, what a training run returned, the
# knobs of a tower that is not there): accepted and ignored
_IGNORED_VISION = {
    "patch_dropout",
    "output_tokens",
    "attn_pooler_queries",
    "attn_pooler_heads",
    "timm_model_pretrained",
    "timm_pool",
    "timm_proj",
    "timm_proj_bias",
    "timm_drop",
    "timm_drop_path",
}
_IGNORED_TEXT = {
    "output_tokens",
    "pad_id",
    "final_ln_after_pool",  # open_clip's CLIP never passes it to its text tower
    "hf_model_pretrained",
    "hf_proj_type",
    "hf_pooler_type",
}
_CUSTOM_BLOCK = (
    "qk_norm",
    "scaled_cosine_attn",
    "scale_heads",
    "scale_attn_inner",
    "scale_attn",
    "scale_fc",
)


def _pair(value: Any, what: str) -> tuple[int, int]:
    if isinstance(value, int):
        return (value, value)
    if (
        isinstance(value, (list, tuple))
        and len(value) == 2
        and all(isinstance(v, int) for v in value)
    ):
        return (int(value[0]), int(value[1]))
    raise ClipConfigError(f"{what} is {value!r}, not a size")


def _refuse_custom_blocks(cfg: dict[str, Any], tower: str) -> None:
    custom = [k for k in _CUSTOM_BLOCK if cfg.get(k)]
    if custom or cfg.get("block_type") not in (None, "default"):
        what = ", ".join(custom) or f"block_type {cfg.get('block_type')!r}"
        raise ClipConfigError(f"the {tower} tower's custom attention blocks ({what})")


def parse_config(cfg: dict[str, Any]) -> ClipConfig:
    """open_clip's JSON model config → a `ClipConfig`, or `ClipConfigError` for what this
    module does not build (the message names it) and for settings it does not know."""
    if not isinstance(cfg, dict):
        raise ClipConfigError("the model config is not a JSON object")
    cfg = dict(cfg)
    if "multimodal_cfg" in cfg:
        raise ClipConfigError("a CoCa model (multimodal_cfg): only CLIP is supported")
    for key in ("embed_dim", "vision_cfg", "text_cfg"):
        if key not in cfg:
            raise ClipConfigError(f"the model config has no {key}")
    vision_cfg = dict(cfg.pop("vision_cfg") or {})
    text_cfg = dict(cfg.pop("text_cfg") or {})
    vision = _parse_vision(vision_cfg)
    text = _parse_text(text_cfg)
    if cfg.pop("custom_text", False):
        raise ClipConfigError(
            "a custom text tower (custom_text: the weights are under text.*, as SigLIP's)"
        )
    top = {
        "embed_dim": int(cfg.pop("embed_dim")),
        "quick_gelu": bool(cfg.pop("quick_gelu", False)),
        "init_logit_scale": float(cfg.pop("init_logit_scale", math.log(1 / 0.07))),
        "init_logit_bias": cfg.pop("init_logit_bias", None),
        "nonscalar_logit_scale": bool(cfg.pop("nonscalar_logit_scale", False)),
    }
    if cfg:
        raise ClipConfigError(f"unknown model config settings: {', '.join(sorted(cfg))}")
    if top["init_logit_bias"] is not None:
        top["init_logit_bias"] = float(top["init_logit_bias"])
    return ClipConfig(vision=vision, text=text, **top)


def _parse_vision(v: dict[str, Any]) -> VisionConfig:
    if v.get("timm_model_name"):
        raise ClipConfigError(f"a timm image tower ({v['timm_model_name']}): only ViT is supported")
    if isinstance(v.get("layers"), (list, tuple)):
        raise ClipConfigError("a ResNet image tower (vision_cfg.layers is a list): only ViT")
    if v.get("attentional_pool"):
        raise ClipConfigError("attentional pooling in the image tower (CoCa-style)")
    _refuse_custom_blocks(v, "image")
    for key in (*_CUSTOM_BLOCK, "block_type", "attentional_pool", "timm_model_name"):
        v.pop(key, None)
    pos = v.pop("pos_embed_type", "learnable")
    if pos not in ("learnable", "sin_cos_2d"):  # both are a parameter the checkpoint holds
        raise ClipConfigError(f"image positional embedding {pos!r}")
    pool = v.pop("pool_type", "tok")
    if pool not in ("tok", "avg"):
        raise ClipConfigError(f"image pooling {pool!r} (tok and avg are supported)")
    for key in _IGNORED_VISION:
        v.pop(key, None)
    try:
        width = int(v.pop("width", 768))
        head_width = int(v.pop("head_width", 64))
        out = VisionConfig(
            image_size=_pair(v.pop("image_size", 224), "vision_cfg.image_size"),
            patch_size=_pair(v.pop("patch_size", 16), "vision_cfg.patch_size"),
            layers=int(v.pop("layers", 12)),
            width=width,
            heads=width // head_width,
            mlp_ratio=float(v.pop("mlp_ratio", 4.0)),
            ls_init_value=_opt_float(v.pop("ls_init_value", None)),
            no_ln_pre=bool(v.pop("no_ln_pre", False)),
            final_ln_after_pool=bool(v.pop("final_ln_after_pool", False)),
            pool_type=pool,
            act_kwargs=dict(v.pop("act_kwargs", None) or {}),
            norm_kwargs=dict(v.pop("norm_kwargs", None) or {}),
        )
    except (TypeError, ValueError, ZeroDivisionError) as exc:
        raise ClipConfigError(f"vision_cfg does not parse ({exc})") from None
    if v:
        raise ClipConfigError(f"unknown vision_cfg settings: {', '.join(sorted(v))}")
    if out.width % out.heads:
        raise ClipConfigError("vision_cfg.width is not a multiple of head_width")
    return out


def _parse_text(t: dict[str, Any]) -> TextConfig:
    if t.get("hf_model_name"):
        raise ClipConfigError(
            f"a Hugging Face text tower ({t['hf_model_name']}): only CLIP's own transformer"
        )
    if t.get("hf_tokenizer_name") or t.get("tokenizer_mode"):
        name = t.get("hf_tokenizer_name") or t.get("tokenizer_mode")
        raise ClipConfigError(f"a Hugging Face tokenizer ({name}): only CLIP's own BPE")
    if t.get("embed_cls"):
        raise ClipConfigError("a text class token (embed_cls, CoCa-style)")
    _refuse_custom_blocks(t, "text")
    for key in (*_CUSTOM_BLOCK, "block_type", "embed_cls", "hf_model_name"):
        t.pop(key, None)
    t.pop("hf_tokenizer_name", None)
    t.pop("tokenizer_mode", None)
    tok_kwargs = dict(t.pop("tokenizer_kwargs", None) or {})
    clean = tok_kwargs.pop("clean", "lower")
    if clean not in ("lower", "whitespace", "canonicalize"):
        raise ClipConfigError(f"tokenizer cleaning {clean!r}")
    if tok_kwargs:
        raise ClipConfigError(f"tokenizer settings {', '.join(sorted(tok_kwargs))}")
    pool = t.pop("pool_type", "argmax")
    if pool not in ("argmax", "eos", "first", "last"):
        raise ClipConfigError(f"text pooling {pool!r}")
    proj_type = t.pop("proj_type", "linear")
    proj_bias = bool(t.pop("proj_bias", False))
    if proj_type not in ("linear", "none"):
        raise ClipConfigError(f"text projection {proj_type!r}")
    projection = "none" if proj_type == "none" else "linear" if proj_bias else "matrix"
    for key in _IGNORED_TEXT:
        t.pop(key, None)
    try:
        out = TextConfig(
            context_length=int(t.pop("context_length", 77)),
            vocab_size=int(t.pop("vocab_size", 49408)),
            width=int(t.pop("width", 512)),
            heads=int(t.pop("heads", 8)),
            layers=int(t.pop("layers", 12)),
            mlp_ratio=float(t.pop("mlp_ratio", 4.0)),
            ls_init_value=_opt_float(t.pop("ls_init_value", None)),
            causal=not t.pop("no_causal_mask", False),
            pool_type=pool,
            eos_id=int(t.pop("eos_id", 2)),
            projection=projection,
            clean=clean,
            act_kwargs=dict(t.pop("act_kwargs", None) or {}),
            norm_kwargs=dict(t.pop("norm_kwargs", None) or {}),
        )
    except (TypeError, ValueError) as exc:
        raise ClipConfigError(f"text_cfg does not parse ({exc})") from None
    if t:
        raise ClipConfigError(f"unknown text_cfg settings: {', '.join(sorted(t))}")
    if out.vocab_size < 49408:
        raise ClipConfigError(
            f"a text vocabulary of {out.vocab_size} tokens (CLIP's BPE has 49408)"
        )
    if out.width % out.heads:
        raise ClipConfigError("text_cfg.width is not a multiple of heads")
    return out


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


# ---- the model ----------------------------------------------------------------------------
# Module and attribute names are open_clip's (model.py, transformer.py): they are the keys
# of the state dict. Parameters are created in open_clip's order, so a seed gives the same
# random weights as open_clip's own constructor.


class QuickGELU(nn.Module):
    """OpenAI's GELU approximation (the "-quickgelu" architectures)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(1.702 * x)


class LayerScale(nn.Module):
    def __init__(self, dim: int, init_values: float) -> None:
        super().__init__()
        self.gamma = nn.Parameter(init_values * torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gamma


def _layers(
    act_kwargs: dict[str, Any], norm_kwargs: dict[str, Any], quick_gelu: bool
) -> tuple[Callable[[], nn.Module], Callable[[int], nn.Module]]:
    act = QuickGELU if quick_gelu else nn.GELU
    return (
        functools.partial(act, **act_kwargs),
        functools.partial(nn.LayerNorm, **norm_kwargs),
    )


class ResidualAttentionBlock(nn.Module):
    def __init__(
        self,
        width: int,
        heads: int,
        mlp_ratio: float,
        ls_init_value: float | None,
        act: Callable[[], nn.Module],
        norm: Callable[[int], nn.Module],
    ) -> None:
        super().__init__()
        self.ln_1 = norm(width)
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.ls_1 = LayerScale(width, ls_init_value) if ls_init_value is not None else nn.Identity()
        self.ln_2 = norm(width)
        hidden = int(width * mlp_ratio)
        self.mlp = nn.Sequential(
            OrderedDict(
                [
                    ("c_fc", nn.Linear(width, hidden)),
                    ("gelu", act()),
                    ("c_proj", nn.Linear(hidden, width)),
                ]
            )
        )
        self.ls_2 = LayerScale(width, ls_init_value) if ls_init_value is not None else nn.Identity()

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        mask = attn_mask.to(x.dtype) if attn_mask is not None else None
        y = self.ln_1(x)
        x = x + self.ls_1(self.attn(y, y, y, need_weights=False, attn_mask=mask)[0])
        return x + self.ls_2(self.mlp(self.ln_2(x)))


class Transformer(nn.Module):
    def __init__(
        self,
        width: int,
        layers: int,
        heads: int,
        mlp_ratio: float,
        ls_init_value: float | None,
        act: Callable[[], nn.Module],
        norm: Callable[[int], nn.Module],
    ) -> None:
        super().__init__()
        self.width = width
        self.layers = layers
        self.resblocks = nn.ModuleList(
            ResidualAttentionBlock(width, heads, mlp_ratio, ls_init_value, act, norm)
            for _ in range(layers)
        )

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        for block in self.resblocks:
            x = block(x, attn_mask=attn_mask)
        return x


class VisionTransformer(nn.Module):
    def __init__(self, cfg: VisionConfig, output_dim: int, quick_gelu: bool) -> None:
        super().__init__()
        act, norm = _layers(cfg.act_kwargs, cfg.norm_kwargs, quick_gelu)
        self.image_size = cfg.image_size
        self.patch_size = cfg.patch_size
        self.grid_size = (
            cfg.image_size[0] // cfg.patch_size[0],
            cfg.image_size[1] // cfg.patch_size[1],
        )
        self.pool_type = cfg.pool_type
        self.final_ln_after_pool = cfg.final_ln_after_pool
        self.output_dim = output_dim
        width = cfg.width
        self.conv1 = nn.Conv2d(
            3, width, kernel_size=cfg.patch_size, stride=cfg.patch_size, bias=False
        )
        scale = width**-0.5
        self.class_embedding = nn.Parameter(scale * torch.randn(width))
        tokens = self.grid_size[0] * self.grid_size[1] + 1
        self.positional_embedding = nn.Parameter(scale * torch.randn(tokens, width))
        self.ln_pre = nn.Identity() if cfg.no_ln_pre else norm(width)
        self.transformer = Transformer(
            width, cfg.layers, cfg.heads, cfg.mlp_ratio, cfg.ls_init_value, act, norm
        )
        self.ln_post = norm(width)
        self.proj = nn.Parameter(scale * torch.randn(width, output_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv1(x)  # (batch, width, grid, grid)
        x = x.reshape(x.shape[0], x.shape[1], -1).permute(0, 2, 1)  # (batch, patches, width)
        cls = self.class_embedding.view(1, 1, -1).expand(x.shape[0], -1, -1).to(x.dtype)
        x = torch.cat([cls, x], dim=1) + self.positional_embedding.to(x.dtype)
        x = self.ln_pre(x)
        x = self.transformer(x)
        if self.final_ln_after_pool:
            pooled = self.ln_post(self._pool(x))
        else:
            pooled = self._pool(self.ln_post(x))
        return pooled @ self.proj

    def _pool(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, 1:].mean(dim=1) if self.pool_type == "avg" else x[:, 0]


class CLIP(nn.Module):
    """open_clip's `CLIP` with a ViT image tower: `encode_image`, `encode_text`."""

    def __init__(self, cfg: ClipConfig) -> None:
        super().__init__()
        self.config = cfg
        self.visual = VisionTransformer(cfg.vision, cfg.embed_dim, cfg.quick_gelu)
        t = cfg.text
        act, norm = _layers(t.act_kwargs, t.norm_kwargs, cfg.quick_gelu)
        self.context_length = t.context_length
        self.vocab_size = t.vocab_size
        self.token_embedding = nn.Embedding(t.vocab_size, t.width)
        self.positional_embedding = nn.Parameter(torch.empty(t.context_length, t.width))
        self.transformer = Transformer(
            t.width, t.layers, t.heads, t.mlp_ratio, t.ls_init_value, act, norm
        )
        self.ln_final = norm(t.width)
        self.text_projection: nn.Parameter | nn.Linear | None
        if t.projection == "none":
            self.text_projection = None
        elif t.projection == "linear":
            self.text_projection = nn.Linear(t.width, cfg.embed_dim)
        else:
            self.text_projection = nn.Parameter(torch.empty(t.width, cfg.embed_dim))
        self.text_pool_type = t.pool_type
        self.text_eos_id = t.eos_id
        mask = None
        if t.causal:
            mask = torch.full((t.context_length, t.context_length), float("-inf")).triu_(1)
        self.register_buffer("attn_mask", mask, persistent=False)
        shape = [1] if cfg.nonscalar_logit_scale else []
        self.logit_scale = nn.Parameter(torch.ones(shape) * cfg.init_logit_scale)
        self.logit_bias = (
            nn.Parameter(torch.ones(shape) * cfg.init_logit_bias)
            if cfg.init_logit_bias is not None
            else None
        )
        self._init_text()

    def _init_text(self) -> None:
        # open_clip's TextTransformer.init_parameters, in its order
        nn.init.normal_(self.token_embedding.weight, std=0.02)
        nn.init.normal_(self.positional_embedding, std=0.01)
        width, layers = self.transformer.width, self.transformer.layers
        proj_std = (width**-0.5) * ((2 * layers) ** -0.5)
        for block in self.transformer.resblocks:
            # what Transformer builds (an nn.ModuleList and an nn.Sequential type as Module)
            assert isinstance(block, ResidualAttentionBlock)
            c_fc, c_proj = block.mlp.c_fc, block.mlp.c_proj
            assert isinstance(c_fc, nn.Linear) and isinstance(c_proj, nn.Linear)
            nn.init.normal_(block.attn.in_proj_weight, std=width**-0.5)
            nn.init.normal_(block.attn.out_proj.weight, std=proj_std)
            nn.init.normal_(c_fc.weight, std=(2 * width) ** -0.5)
            nn.init.normal_(c_proj.weight, std=proj_std)
        if isinstance(self.text_projection, nn.Linear):
            nn.init.normal_(self.text_projection.weight, std=width**-0.5)
            nn.init.zeros_(self.text_projection.bias)
        elif self.text_projection is not None:
            nn.init.normal_(self.text_projection, std=width**-0.5)

    def encode_image(self, image: torch.Tensor) -> torch.Tensor:
        return self.visual(image)

    def encode_text(self, text: torch.Tensor) -> torch.Tensor:
        x = self.token_embedding(text) + self.positional_embedding
        x = self.transformer(x, attn_mask=self.attn_mask)
        x = self.ln_final(x)
        rows = torch.arange(x.shape[0], device=x.device)
        if self.text_pool_type == "argmax":  # the end-of-text token has the highest id
            x = x[rows, text.argmax(dim=-1)]
        elif self.text_pool_type == "eos":
            x = x[rows, (text == self.text_eos_id).int().argmax(dim=-1)]
        elif self.text_pool_type == "first":
            x = x[:, 0]
        else:
            x = x[:, -1]
        if isinstance(self.text_projection, nn.Linear):
            return self.text_projection(x)
        if self.text_projection is not None:
            return x @ self.text_projection
        return x


def build(cfg: ClipConfig | dict[str, Any]) -> CLIP:
    """A model with random weights (open_clip's initialisation) for `cfg`."""
    return CLIP(cfg if isinstance(cfg, ClipConfig) else parse_config(cfg))


# ---- checkpoints --------------------------------------------------------------------------


def read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a weights file: a `.safetensors` file, or a `torch.save` of a state
    dict (tensors only: `weights_only`), maybe under "state_dict", maybe with the "module."
    prefix of a DistributedDataParallel run (open_clip's `load_state_dict`)."""
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        obj: Any = load_file(str(path), device="cpu")
    else:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(obj, dict) and isinstance(obj.get("state_dict"), dict):
        obj = obj["state_dict"]
    if not isinstance(obj, dict) or not obj:
        raise ClipConfigError(f"{path.name} holds no state dict ({type(obj).__name__})")
    if not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in obj.items()):
        raise ClipConfigError(f"{path.name} is not a state dict of tensors")
    if all(k.startswith("module.") for k in obj):
        obj = {k[len("module.") :]: v for k, v in obj.items()}
    return obj


def load_weights(model: CLIP, state: dict[str, torch.Tensor]) -> None:
    """Load `state` strictly: every parameter of `model` from the checkpoint with its shape,
    nothing left over. A mismatch is a `ClipConfigError` naming a few keys."""
    state = dict(state)
    for key in ("logit_scale", "logit_bias"):  # scalar or 1-d: open_clip accepts both
        target = getattr(model, key)
        if key in state and target is not None and state[key].ndim != target.ndim:
            state[key] = state[key].reshape(target.shape)
    if model.logit_bias is not None and "logit_bias" not in state:
        state["logit_bias"] = torch.zeros_like(model.logit_bias)
    own = model.state_dict()
    missing = [k for k in own if k not in state]
    extra = [k for k in state if k not in own]
    if missing or extra:
        raise ClipConfigError(
            "the weights are for another architecture: "
            + "; ".join(
                f"{what} {len(keys)} ({', '.join(keys[:3])}{', …' if len(keys) > 3 else ''})"
                for what, keys in (("missing", missing), ("unexpected", extra))
                if keys
            )
        )
    wrong = [k for k, v in own.items() if tuple(state[k].shape) != tuple(v.shape)]
    if wrong:
        k = wrong[0]
        raise ClipConfigError(
            f"the weights are for another architecture: {len(wrong)} shapes differ "
            f"({k}: {tuple(state[k].shape)} in the checkpoint, {tuple(own[k].shape)} here)"
        )
    model.load_state_dict(state, strict=True)


# ---- preprocessing ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Preprocess:
    """open_clip's evaluation transform: PIL image → float32 tensor (3, height, width)."""

    size: tuple[int, int]  # (height, width)
    mean: tuple[float, float, float] = OPENAI_MEAN
    std: tuple[float, float, float] = OPENAI_STD
    interpolation: str = "bicubic"  # or "bilinear"
    # "shortest": scaled to cover the size, centre-cropped; "longest": scaled to fit in it,
    # padded with fill_color; "squash": both sides to the size
    resize_mode: str = "shortest"
    fill_color: int = 0

    @classmethod
    def for_model(cls, cfg: ClipConfig, preprocess_cfg: dict[str, Any] | None = None) -> Preprocess:
        """The transform of a model, with a checkpoint's `preprocess_cfg` (open_clip's
        folder layout) over the defaults; the size is always the model's."""
        if not isinstance(preprocess_cfg or {}, dict):
            raise ClipConfigError("preprocess_cfg is not a JSON object")
        p = dict(preprocess_cfg or {})
        p.pop("size", None)
        mode = p.pop("mode", "RGB")
        mean = _triple(p.pop("mean", None) or OPENAI_MEAN, "mean")
        std = _triple(p.pop("std", None) or OPENAI_STD, "std")
        interpolation = p.pop("interpolation", None) or "bicubic"
        resize_mode = p.pop("resize_mode", None) or "shortest"
        fill = p.pop("fill_color", 0)
        if mode != "RGB":
            raise ClipConfigError(f"preprocess mode {mode!r}")
        if interpolation == "random":  # open_clip's evaluation takes bicubic for it
            interpolation = "bicubic"
        if interpolation not in ("bicubic", "bilinear"):
            raise ClipConfigError(f"preprocess interpolation {interpolation!r}")
        if resize_mode not in ("shortest", "longest", "squash"):
            raise ClipConfigError(f"preprocess resize_mode {resize_mode!r}")
        if not isinstance(fill, int):
            raise ClipConfigError(f"preprocess fill_color {fill!r}")
        if p:
            raise ClipConfigError(f"unknown preprocess_cfg settings: {', '.join(sorted(p))}")
        return cls(cfg.vision.image_size, mean, std, interpolation, resize_mode, fill)

    def array(self, img: Any) -> np.ndarray:
        """The transform in numpy: (3, height, width) float32."""
        from PIL import Image

        bicubic = Image.Resampling.BICUBIC
        resample = Image.Resampling.BILINEAR if self.interpolation == "bilinear" else bicubic
        img = img.convert("RGB")
        height, width = self.size
        if self.resize_mode == "squash":
            img = _resize(img, (width, height), resample)
        elif self.resize_mode == "longest":
            img = _resize(img, _keep_ratio(img.size, self.size, longest=True), resample)
            img = _center_crop(img, self.size, self.fill_color)
        else:
            if height == width:  # torchvision's Resize(n): the longer side truncated
                w, h = img.size
                long = int(height * max(w, h) / min(w, h))
                new = (height, long) if w <= h else (long, height)
                img = _resize(img, new, resample)
            else:  # open_clip's ResizeKeepRatio, which is always bicubic
                img = _resize(img, _keep_ratio(img.size, self.size, longest=False), bicubic)
            img = _center_crop(img, self.size, 0)
        x: np.ndarray = np.asarray(img, dtype=np.float32) / np.float32(255.0)
        x = (x - np.asarray(self.mean, dtype=np.float32)) / np.asarray(self.std, dtype=np.float32)
        return np.ascontiguousarray(x.transpose(2, 0, 1))

    def __call__(self, img: Any) -> torch.Tensor:
        return torch.from_numpy(self.array(img))


def _triple(value: Any, what: str) -> tuple[float, float, float]:
    if isinstance(value, (int, float)):
        return (float(value),) * 3
    if isinstance(value, (list, tuple)) and len(value) == 3:
        return (float(value[0]), float(value[1]), float(value[2]))
    raise ClipConfigError(f"preprocess {what} is {value!r}")


def _resize(img: Any, new: tuple[int, int], resample: Any) -> Any:
    return img if tuple(img.size) == tuple(new) else img.resize(new, resample)


def _keep_ratio(wh: tuple[int, int], size: tuple[int, int], *, longest: bool) -> tuple[int, int]:
    """(width, height) scaled by one ratio to cover (`longest` False) or fit in `size`."""
    w, h = wh
    ratios = (h / size[0], w / size[1])
    ratio = max(ratios) if longest else min(ratios)
    return (round(w / ratio), round(h / ratio))


def _center_crop(img: Any, size: tuple[int, int], fill: int) -> Any:
    """torchvision's CenterCrop on a PIL image, padding with `fill` where it is smaller."""
    from PIL import Image

    height, width = size
    w, h = img.size
    if w < width or h < height:
        padded = Image.new("RGB", (max(w, width), max(h, height)), (fill, fill, fill))
        padded.paste(img, ((max(w, width) - w) // 2, (max(h, height) - h) // 2))
        img = padded
        w, h = img.size
    top = int(round((h - height) / 2.0))
    left = int(round((w - width) / 2.0))
    return img.crop((left, top, left + width, top + height))


# ---- the tokenizer ------------------------------------------------------------------------


@functools.cache
def _bytes_to_unicode() -> dict[int, str]:
    """CLIP's reversible map of the 256 bytes onto printable characters (no whitespace or
    control characters, which the BPE cannot hold)."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    bs += range(ord("®"), ord("ÿ") + 1)
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs), strict=True))


@functools.cache
def _vocabulary(path: Path) -> tuple[dict[str, int], dict[tuple[str, str], int]]:
    """(token → id, merge → rank) of a BPE vocabulary file (open_clip's format: a header
    line, then one merge a line; 48894 merges are used)."""
    lines = gzip.decompress(path.read_bytes()).decode("utf-8").split("\n")
    merges = [tuple(line.split()) for line in lines[1 : 49152 - 256 - 2 + 1]]
    base = list(_bytes_to_unicode().values())
    vocab = [*base, *(b + "</w>" for b in base), *("".join(m) for m in merges)]
    vocab += ["<start_of_text>", "<end_of_text>"]
    return {t: i for i, t in enumerate(vocab)}, {m: i for i, m in enumerate(merges)}  # type: ignore[misc]


_PUNCTUATION = str.maketrans("", "", string.punctuation)


def _category_class(major: str) -> str:
    """A character class of every code point whose Unicode category starts with `major`
    ("L": letters, "N": numbers), as ranges; planes 4 and up hold none."""
    parts: list[str] = []
    start = None
    for cp in range(0x40001):
        inside = cp < 0x40000 and unicodedata.category(chr(cp))[0] == major
        if inside and start is None:
            start = cp
        elif not inside and start is not None:
            a, b = re.escape(chr(start)), re.escape(chr(cp - 1))
            parts.append(a if start == cp - 1 else f"{a}-{b}")
            start = None
    return "".join(parts)


@functools.cache
def _pretokenizer() -> re.Pattern[str]:
    """open_clip's split of a text before BPE: its special tokens, English contractions,
    runs of letters, single digits, runs of anything else but whitespace. open_clip writes
    the letters and digits as the `regex` package's Unicode properties; here they are
    spelled out from unicodedata (about 0.1 s, once) for the stdlib `re`, so no package is
    needed. The cleaned text has no whitespace but single spaces: the two packages' ideas
    of whitespace cannot differ on it."""
    letters, numbers = _category_class("L"), _category_class("N")
    return re.compile(
        r"<start_of_text>|<end_of_text>|'s|'t|'re|'ve|'m|'ll|'d"
        rf"|[{letters}]+|[{numbers}]|[^\s{letters}{numbers}]+",
        re.IGNORECASE,
    )


class Tokenizer:
    """open_clip's `SimpleTokenizer`: text → rows of `context_length` token ids (start,
    the BPE tokens, end, zeros; a text too long is cut and still ends with the end token)."""

    def __init__(self, context_length: int = 77, clean: str = "lower", vocab: Path = VOCAB) -> None:
        self.encoder, self.bpe_ranks = _vocabulary(vocab)
        self.byte_encoder = _bytes_to_unicode()
        self.sot_token_id = self.encoder["<start_of_text>"]
        self.eot_token_id = self.encoder["<end_of_text>"]
        self.context_length = context_length
        self.clean = clean
        self.cache: dict[str, str] = {"<start_of_text>": "<start_of_text>"}
        self.cache["<end_of_text>"] = "<end_of_text>"
        self.pat = _pretokenizer()

    def _clean(self, text: str) -> str:
        # open_clip runs ftfy.fix_text first (repairing mojibake); ftfy is not installed
        text = html.unescape(html.unescape(text)).strip()
        if self.clean == "canonicalize":
            text = text.replace("_", " ").translate(_PUNCTUATION).lower()
            return " ".join(text.split()).strip()
        text = " ".join(text.split()).strip()
        return text.lower() if self.clean == "lower" else text

    def bpe(self, token: str) -> str:
        cached = self.cache.get(token)
        if cached is not None:
            return cached
        word: tuple[str, ...] = (*token[:-1], token[-1] + "</w>")
        pairs = _pairs(word)
        if not pairs:
            return token + "</w>"
        while True:
            bigram = min(pairs, key=lambda p: self.bpe_ranks.get(p, math.inf))
            if bigram not in self.bpe_ranks:
                break
            first, second = bigram
            merged: list[str] = []
            i = 0
            while i < len(word):
                try:
                    j = word.index(first, i)
                except ValueError:
                    merged.extend(word[i:])
                    break
                merged.extend(word[i:j])
                i = j
                if i < len(word) - 1 and word[i + 1] == second:
                    merged.append(first + second)
                    i += 2
                else:
                    merged.append(word[i])
                    i += 1
            word = tuple(merged)
            if len(word) == 1:
                break
            pairs = _pairs(word)
        out = " ".join(word)
        self.cache[token] = out
        return out

    def encode(self, text: str) -> list[int]:
        """The BPE ids of `text`, without start and end tokens."""
        ids: list[int] = []
        for token in self.pat.findall(self._clean(text)):
            token = "".join(self.byte_encoder[b] for b in token.encode("utf-8"))
            ids.extend(self.encoder[t] for t in self.bpe(token).split(" "))
        return ids

    def __call__(self, texts: str | Sequence[str]) -> torch.Tensor:
        if isinstance(texts, str):
            texts = [texts]
        out = torch.zeros(len(texts), self.context_length, dtype=torch.long)
        for row, text in enumerate(texts):
            ids = [self.sot_token_id, *self.encode(text), self.eot_token_id]
            if len(ids) > self.context_length:
                ids = ids[: self.context_length]
                ids[-1] = self.eot_token_id
            out[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        return out


def _pairs(word: tuple[str, ...]) -> set[tuple[str, str]]:
    return set(zip(word, word[1:], strict=False))
