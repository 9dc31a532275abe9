"""CLIP from a local checkpoint: image and text embeddings, and the CLIP gate.

Role: load a CLIP model from files on this machine (never a hub: nothing is downloaded at
run time) and turn images and questions into unit vectors in one space. The model is
`media.clipnet`'s plain-torch rebuild of open_clip's ViT CLIP (no open_clip, no
torchvision), so open_clip's checkpoints of ViT architectures load as they are.
`ClipGate` is the visual gate over those vectors (cosine similarity); the search side
(`search.images`) embeds image nodes and questions with the same `Clip`.

What a checkpoint is (config.yaml, docs/media.md):
- `clip_checkpoint` a file of weights (a state dict, `.pt`/`.bin`/`.safetensors`) for the
  architecture `clip_model` names: a built-in ViT name (`ViT-B-32`, …, `clipnet.BUILTIN`)
  or the JSON file `clip_model_config` in open_clip's format (a custom architecture; its
  file stem is the name when `clip_model` is empty); or
- `clip_checkpoint` a directory in open_clip's own layout (`open_clip_config.json` beside
  `open_clip_model.safetensors` or `open_clip_pytorch_model.bin`): it names its
  architecture (`model_cfg`) and maybe its preprocessing (`preprocess_cfg`).
An architecture clipnet does not build (ResNet or timm image towers, Hugging Face text
towers or tokenizers, CoCa) is refused with the reason.

Boundary: torch (and safetensors for a `.safetensors` file) is imported only when a `Clip`
is built (seconds); no store, no FUSE, no trio. Calls are serialised by a lock (torch
threads are process-wide).
"""

from __future__ import annotations

import io
import json
import logging
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

    model: str = ""  # a built-in ViT name (open_clip's); empty with a checkpoint directory
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
    """Why no CLIP model can be built on this install (a package missing), or None.
    safetensors is asked for only by a `.safetensors` checkpoint, when it is loaded."""
    try:
        import torch  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - a broken native library raises more than ImportError
        name = getattr(exc, "name", None) or type(exc).__name__
        return f"torch cannot be imported ({name}); install contextfs with scripts/setup.sh"
    return None


# open_clip's names for the weights in its folder layout, the preferred first
_DIR_WEIGHTS = (
    "open_clip_model.safetensors",
    "open_clip_pytorch_model.safetensors",
    "open_clip_pytorch_model.bin",
    "open_clip_pytorch_model.pth",
    "model.safetensors",
    "pytorch_model.bin",
    "pytorch_model.pth",
    "model.pth",
)


def _read_json(path: Path, what: str) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ClipUnavailable(f"the CLIP {what} {path} does not read ({exc})") from None
    if not isinstance(data, dict):
        raise ClipUnavailable(f"the CLIP {what} {path} is not a JSON object")
    return data


def _resolve(spec: ClipSpec, path: Path) -> tuple[str, dict, dict, Path]:
    """(architecture name, open_clip model config, preprocess config, weights file) of a
    spec whose checkpoint exists."""
    from contextfs.media import clipnet

    if path.is_dir():
        config = path / "open_clip_config.json"
        if not config.is_file():
            raise ClipUnavailable(f"the CLIP checkpoint folder {path} has no open_clip_config.json")
        data = _read_json(config, "checkpoint config")
        weights = next((path / n for n in _DIR_WEIGHTS if (path / n).is_file()), None)
        if weights is None:
            raise ClipUnavailable(
                f"the CLIP checkpoint folder {path} has no weights "
                "(open_clip_model.safetensors or open_clip_pytorch_model.bin)"
            )
        model_cfg = data.get("model_cfg", data)
        return path.name, model_cfg, data.get("preprocess_cfg") or {}, weights
    if spec.model_config:
        cfg = Path(spec.model_config).expanduser()
        if not cfg.is_file():
            raise ClipUnavailable(f"the CLIP model config {cfg} does not exist")
        data = _read_json(cfg, "model config")
        # a plain open_clip model config, or the {"model_cfg": …} of its folder layout
        model_cfg = data.get("model_cfg", data)
        return spec.model or cfg.stem, model_cfg, data.get("preprocess_cfg") or {}, path
    if not spec.model:
        raise ClipUnavailable("clip_model names no architecture for the checkpoint")
    model_cfg = clipnet.builtin_config(spec.model)
    if model_cfg is None:
        raise ClipUnavailable(
            f"clip_model {spec.model!r} is not a built-in CLIP architecture (those are "
            "ViTs: ViT-B-32, ViT-B-16, ViT-L-14, … and their -quickgelu variants); give a "
            "plain ViT's open_clip JSON config as clip_model_config (ResNet, timm, CoCa and "
            "Hugging Face text towers are not supported)"
        )
    return spec.model, model_cfg, {}, path


class Clip:
    """A CLIP model on the CPU: `embed_images` and `embed_texts` give unit rows."""

    def __init__(self, spec: ClipSpec) -> None:
        if not spec.checkpoint:
            raise ClipUnavailable("no CLIP checkpoint is configured (clip_checkpoint)")
        path = Path(spec.checkpoint).expanduser()
        if not path.exists():
            raise ClipUnavailable(f"the CLIP checkpoint {path} does not exist")
        missing = clip_missing()
        if missing:
            raise ClipUnavailable(missing)
        import torch

        from contextfs.media import clipnet

        torch.set_num_threads(max(1, spec.threads))
        name, model_cfg, preprocess_cfg, weights = _resolve(spec, path)
        try:
            config = clipnet.parse_config(model_cfg)
            preprocess = clipnet.Preprocess.for_model(config, preprocess_cfg)
        except clipnet.ClipConfigError as exc:
            raise ClipUnavailable(f"the CLIP architecture {name} is not supported: {exc}") from None
        if weights.suffix == ".safetensors":
            try:
                import safetensors.torch  # noqa: F401
            except Exception as exc:  # noqa: BLE001 - as clip_missing
                raise ClipUnavailable(
                    f"{weights.name} needs safetensors, which cannot be imported "
                    f"({getattr(exc, 'name', None) or type(exc).__name__})"
                ) from None
        try:
            model = clipnet.build(config)
            clipnet.load_weights(model, clipnet.read_state_dict(weights))
        except Exception as exc:  # noqa: BLE001 - torch and safetensors raise many kinds
            first = (str(exc).strip().splitlines() or [""])[0][:200]
            raise ClipUnavailable(
                f"the CLIP checkpoint {weights} does not load ({type(exc).__name__}: {first})"
            ) from None
        model.eval()
        tokenizer = clipnet.Tokenizer(config.text.context_length, config.text.clean)
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
        self.logit_scale = float(model.logit_scale.detach().exp())
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
    first (importing torch takes seconds: a mount is usable before). A
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
