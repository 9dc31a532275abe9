"""CLIP (open_clip) from a local checkpoint: image and text embeddings, and the CLIP gate.

Role: load an open_clip model from files on this machine (never a hub: nothing is
downloaded at run time) and turn images and questions into unit vectors in one space.
`ClipGate` is the visual gate over those vectors (cosine similarity); the search side
(`search.images`) embeds image nodes and questions with the same `Clip`.

What a checkpoint is (config.yaml, docs/media.md):
- `clip_checkpoint` a file of weights (a state dict, `.pt`/`.bin`/`.safetensors`) for the
  architecture `clip_model` names: a built-in open_clip name (`ViT-B-32`, …) or the name of
  the JSON file `clip_model_config` (a custom architecture, registered with
  `open_clip.add_model_config`; the model name is the file's stem); or
- `clip_checkpoint` a directory in open_clip's own layout (`open_clip_config.json` beside
  `open_clip_model.safetensors` or `open_clip_pytorch_model.bin`): it names its architecture.

Boundary: torch and open_clip are imported only when a `Clip` is built (seconds); no store,
no FUSE, no trio. Calls are serialised by a lock (torch threads are process-wide).
"""

from __future__ import annotations

import io
import logging
import os
import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from contextfs.media import BadMedia

log = logging.getLogger(__name__)


class ClipUnavailable(Exception):
    """The configured checkpoint cannot be loaded (the reason says why)."""


@dataclass(frozen=True, slots=True)
class ClipSpec:
    """Where the weights are (config.yaml `clip_*`)."""

    model: str = ""  # an open_clip architecture name; empty with a checkpoint directory
    checkpoint: str = ""  # a weights file, or a directory in open_clip's layout
    model_config: str = ""  # a JSON file with a custom architecture (its stem is the name)
    threads: int = 1

    @property
    def configured(self) -> bool:
        return bool(self.checkpoint)

    def describe(self) -> str:
        name = self.model or Path(self.model_config or self.checkpoint).stem
        return f"{name} from {self.checkpoint}"


def clip_missing() -> str | None:
    """Why no CLIP model can be built on this install (a package missing), or None."""
    try:
        import open_clip  # noqa: F401
        import torch  # noqa: F401
        import torchvision  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - a broken torchvision raises more than ImportError
        name = getattr(exc, "name", None) or type(exc).__name__
        return f"open_clip cannot be imported ({name}); install the media extra (scripts/setup.sh)"
    return None


class Clip:
    """An open_clip model on the CPU: `embed_images` and `embed_texts` give unit rows."""

    def __init__(self, spec: ClipSpec) -> None:
        if not spec.checkpoint:
            raise ClipUnavailable("no CLIP checkpoint is configured (clip_checkpoint)")
        path = Path(spec.checkpoint).expanduser()
        if not path.exists():
            raise ClipUnavailable(f"the CLIP checkpoint {path} does not exist")
        missing = clip_missing()
        if missing:
            raise ClipUnavailable(missing)
        # huggingface_hub reads these at import: a config naming a hub tokenizer must fail
        # here, not wait on a network that is not there
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import open_clip
        import torch

        torch.set_num_threads(max(1, spec.threads))
        try:
            if path.is_dir():
                name = f"local-dir:{path}"
                model, _, preprocess = open_clip.create_model_and_transforms(name)
            else:
                name = spec.model
                if spec.model_config:
                    cfg = Path(spec.model_config).expanduser()
                    if not cfg.is_file():
                        raise ClipUnavailable(f"the CLIP model config {cfg} does not exist")
                    open_clip.add_model_config(cfg)
                    name = name or cfg.stem
                if not name:
                    raise ClipUnavailable("clip_model names no architecture for the checkpoint")
                # a file path, never a tag: a tag would be a download
                model, _, preprocess = open_clip.create_model_and_transforms(
                    name, pretrained=str(path), require_pretrained=True
                )
            tokenizer = open_clip.get_tokenizer(name)
        except ClipUnavailable:
            raise
        except Exception as exc:  # noqa: BLE001 - open_clip/torch raise many kinds
            first = (str(exc).strip().splitlines() or [""])[0][:200]
            raise ClipUnavailable(
                f"the CLIP checkpoint {path} does not load ({type(exc).__name__}: {first})"
            ) from None
        model.eval()
        self.spec = spec
        self.name = spec.describe()
        self._model = model
        self._preprocess = preprocess
        self._tokenizer = tokenizer
        self._torch = torch
        self._lock = threading.Lock()
        with torch.no_grad():
            probe = model.encode_text(tokenizer(["a photo"]))
        self.dim = int(probe.shape[-1])
        self.logit_scale = (
            float(model.logit_scale.detach().exp()) if hasattr(model, "logit_scale") else 1.0
        )
        log.info("CLIP model loaded: %s (%d-d)", self.name, self.dim)

    def _rgb(self, data: bytes):
        from PIL import Image

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                img = Image.open(io.BytesIO(data))
                img.seek(0)
                return img.convert("RGB")
        except Exception as exc:  # noqa: BLE001 - Pillow raises many kinds for bad bytes
            raise BadMedia(f"the image cannot be decoded ({type(exc).__name__})") from None

    def embed_images(self, images: Sequence[bytes]) -> np.ndarray:
        """float32 rows of unit length, one per image (encoded bytes)."""
        if not images:
            return np.zeros((0, self.dim), dtype=np.float32)
        batch = self._torch.stack([self._preprocess(self._rgb(b)) for b in images])
        with self._lock, self._torch.no_grad():
            out = self._model.encode_image(batch)
        return _unit(out.float().numpy())

    def embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        """float32 rows of unit length from the text tower."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        tokens = self._tokenizer(list(texts))
        with self._lock, self._torch.no_grad():
            out = self._model.encode_text(tokens)
        return _unit(out.float().numpy())


def _unit(rows: np.ndarray) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.float32)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return rows / norms


class ClipGate:
    """The visual gate with CLIP: an image's signature is its embedding, the similarity
    of two images their cosine (1.0 for the same picture; what unrelated pictures score
    depends on the model: docs/media.md has the measured spread)."""

    def __init__(self, clip: Clip) -> None:
        self.clip = clip
        self.name = f"CLIP ({clip.name})"

    def signature(self, data: bytes) -> np.ndarray:
        return self.clip.embed_images([data])[0]

    def similarity(self, a: object, b: object) -> float:
        x = np.asarray(a, dtype=np.float32)
        y = np.asarray(b, dtype=np.float32)
        return round(float(np.clip(x @ y, -1.0, 1.0)), 4)


class LazyClip:
    """One `Clip` for a process, built on first use in whichever worker thread asks
    first (importing torch and open_clip takes seconds: a mount is usable before). A
    checkpoint that does not load is remembered with its reason; nothing asks again."""

    def __init__(self, spec: ClipSpec) -> None:
        self.spec = spec
        self._clip: Clip | None = None
        self.error: str | None = None if spec.configured else "no CLIP checkpoint configured"
        self._lock = threading.Lock()

    @property
    def loaded(self) -> Clip | None:
        return self._clip

    def get(self) -> Clip | None:
        if self._clip is not None or self.error is not None:
            return self._clip
        with self._lock:
            if self._clip is None and self.error is None:
                try:
                    self._clip = Clip(self.spec)
                except ClipUnavailable as exc:
                    self.error = str(exc)
                    log.warning("CLIP not available (the perceptual hash gates): %s", exc)
                except Exception as exc:  # noqa: BLE001 - a broken model must not kill the mount
                    self.error = f"the CLIP model failed to load ({type(exc).__name__}: {exc})"
                    log.exception("CLIP not available")
        return self._clip
