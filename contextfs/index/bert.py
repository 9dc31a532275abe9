"""A BERT sentence encoder in plain torch: the forward pass of a sentence-transformers model
of the kind `Transformer -> mean Pooling -> Normalize` (all-MiniLM-L6-v2 and its kin).

Why not sentence-transformers: importing it (with transformers, scikit-learn, scipy) took
10-27 s here and 430 MiB of RSS before any weight was read; torch alone is 220 MiB. This
module reads the same files (`config.json`, `model.safetensors`, `tokenizer.json`,
`sentence_bert_config.json`, `1_Pooling/config.json`) with `safetensors` and `tokenizers`
and computes the same vectors (tests/index/test_embed.py compares them with
sentence-transformers' to 1e-5).

Boundary: torch, safetensors and tokenizers are imported by `BertEncoder`'s constructor,
never at module import; no store, no index, no trio.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from torch import Tensor


class ModelFilesError(Exception):
    """The model folder is not a BERT sentence encoder this module can run (says why)."""


class BertEncoder:
    """Texts in, mean-pooled unit rows out (float32), batch by batch on the CPU."""

    def __init__(self, folder: Path) -> None:
        import torch
        from safetensors.torch import load_file
        from tokenizers import Tokenizer

        self._torch = torch
        try:
            cfg = json.loads((folder / "config.json").read_text())
            st = _json_or(folder / "sentence_bert_config.json", {})
            pooling = _json_or(folder / "1_Pooling" / "config.json", {})
            tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
            weights = load_file(str(folder / "model.safetensors"))
        except Exception as exc:  # noqa: BLE001 - json, tokenizers, safetensors: each its own
            raise ModelFilesError(f"cannot read the model files in {folder}: {exc}") from None
        if cfg.get("model_type") != "bert" or cfg.get("hidden_act", "gelu") != "gelu":
            raise ModelFilesError(f"{folder}: not a BERT model with gelu ({cfg.get('model_type')})")
        if pooling and not pooling.get("pooling_mode_mean_tokens", True):
            raise ModelFilesError(f"{folder}: only mean pooling is supported")
        self.dim = int(cfg["hidden_size"])
        self.heads = int(cfg["num_attention_heads"])
        self.layers = int(cfg["num_hidden_layers"])
        self.eps = float(cfg.get("layer_norm_eps", 1e-12))
        self.max_len = int(st.get("max_seq_length") or cfg.get("max_position_embeddings", 512))
        self.lower = bool(st.get("do_lower_case", False))
        prefix = "bert." if "bert.embeddings.word_embeddings.weight" in weights else ""
        self._w = {k[len(prefix) :]: v.float() for k, v in weights.items()}
        missing = [
            name
            for name in ("embeddings.word_embeddings.weight", "embeddings.LayerNorm.weight",
                         f"encoder.layer.{self.layers - 1}.output.dense.weight")
            if name not in self._w
        ]  # fmt: skip
        if missing:
            raise ModelFilesError(f"{folder}: weights lack {', '.join(missing)}")
        tokenizer.enable_truncation(self.max_len)
        tokenizer.enable_padding(pad_id=int(cfg.get("pad_token_id", 0)))
        self._tok = tokenizer

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """Unit rows, one per text. Texts are batched by length (less padding computed)."""
        texts = [t.lower() if self.lower else t for t in texts]
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        with self._torch.inference_mode():
            for start in range(0, len(order), batch_size):
                idx = order[start : start + batch_size]
                out[idx] = self._batch([texts[i] for i in idx])
        return out

    def _batch(self, texts: list[str]) -> np.ndarray:
        torch = self._torch
        enc = self._tok.encode_batch(texts)
        ids = torch.tensor([e.ids for e in enc], dtype=torch.long)
        mask = torch.tensor([e.attention_mask for e in enc], dtype=torch.float32)
        types = torch.tensor([e.type_ids for e in enc], dtype=torch.long)
        return self.forward(ids, mask, types).numpy()

    def forward(self, ids, mask, types):  # noqa: ANN001, ANN201 - torch tensors
        """Token ids, attention mask (float) and token types, (n, length) each, to unit rows."""
        torch = self._torch
        F = torch.nn.functional
        w = self._w
        n, length = ids.shape
        pos = torch.arange(length).unsqueeze(0)
        x = (
            F.embedding(ids, w["embeddings.word_embeddings.weight"])
            + F.embedding(pos, w["embeddings.position_embeddings.weight"])
            + F.embedding(types, w["embeddings.token_type_embeddings.weight"])
        )
        x = self._norm(x, "embeddings.LayerNorm")
        # padding keys get -inf before the softmax: a padded batch gives each text's own vector
        bias = ((1.0 - mask) * torch.finfo(torch.float32).min)[:, None, None, :]
        head = self.dim // self.heads
        for i in range(self.layers):
            p = f"encoder.layer.{i}."

            def split(t: Tensor) -> Tensor:
                return t.view(n, length, self.heads, head).transpose(1, 2)

            q = split(self._linear(x, p + "attention.self.query"))
            k = split(self._linear(x, p + "attention.self.key"))
            v = split(self._linear(x, p + "attention.self.value"))
            scores = q @ k.transpose(-1, -2) / math.sqrt(head) + bias
            ctx = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(n, length, self.dim)
            x = self._norm(self._linear(ctx, p + "attention.output.dense") + x,
                           p + "attention.output.LayerNorm")  # fmt: skip
            h = F.gelu(self._linear(x, p + "intermediate.dense"))
            x = self._norm(self._linear(h, p + "output.dense") + x, p + "output.LayerNorm")
        summed = (x * mask.unsqueeze(-1)).sum(dim=1)
        pooled = summed / mask.sum(dim=1, keepdim=True).clamp(min=1e-9)
        return F.normalize(pooled, p=2, dim=1)

    def _linear(self, x, name: str):  # noqa: ANN001, ANN202 - torch tensors
        w = self._w
        return self._torch.nn.functional.linear(x, w[name + ".weight"], w[name + ".bias"])

    def _norm(self, x, name: str):  # noqa: ANN001, ANN202
        return self._torch.nn.functional.layer_norm(
            x, (self.dim,), self._w[name + ".weight"], self._w[name + ".bias"], self.eps
        )


def _json_or(path: Path, default: dict) -> dict:
    return json.loads(path.read_text()) if path.is_file() else default
