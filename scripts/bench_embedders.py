"""Ways to run the local MiniLM, side by side: what each costs to import and load, in RSS,
and per question and per batch, and how far its vectors are from sentence-transformers'.

Candidates (each measured in a fresh subprocess, so its RSS is its own):
- `sentence-transformers`: the reference (torch + transformers + scikit-learn at import);
- `bert-torch`: `contextfs.index.bert.BertEncoder`, the forward pass in plain torch over the
  same files (what the daemon runs);
- `bert-numpy`: the same forward pass in numpy alone (no torch at all), a prototype here:
  would it let a default install leave torch out?
- `onnxruntime`: MiniLM exported to ONNX by torch and run by onnxruntime, when both
  `onnxruntime` and torch's ONNX exporter are importable (else the row says why).

Per candidate: seconds to import and load the model, VmRSS after one question, one
question's latency p50 (one thread), a batch of 32 ~100-word texts (texts/s), and the
largest difference from the reference's unit vectors.

Usage: python scripts/bench_embedders.py [--json PATH]
       [--onnx FILE --extra-path DIR]   (onnxruntime importable from DIR, e.g.
       `pip install --target DIR onnxruntime onnx`; FILE from `--export FILE`)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
QUESTIONS = [f"which editor does person {i} prefer for writing go code" for i in range(30)]
BATCH = [
    " ".join(
        f"word{(i * 7 + j) % 97} about topic {i} and the migration of service {j}"
        for j in range(10)
    )
    for i in range(32)
]
CANDIDATES = ("sentence-transformers", "bert-torch", "bert-numpy", "onnxruntime")


# ---- the numpy prototype -----------------------------------------------------------------


def _erf(x: np.ndarray) -> np.ndarray:
    """Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7): numpy has no erf."""
    s = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    return s * (1.0 - poly * np.exp(-a * a))


class NumpyBert:
    def __init__(self, folder: Path) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        cfg = json.loads((folder / "config.json").read_text())
        self.dim, self.heads = cfg["hidden_size"], cfg["num_attention_heads"]
        self.layers, self.eps = cfg["num_hidden_layers"], cfg["layer_norm_eps"]
        self.w = {
            k: v.astype(np.float32) for k, v in load_file(str(folder / "model.safetensors")).items()
        }
        self.tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tok.enable_truncation(256)
        self.tok.enable_padding()

    def _lin(self, x: np.ndarray, name: str) -> np.ndarray:
        return x @ self.w[name + ".weight"].T + self.w[name + ".bias"]

    def _norm(self, x: np.ndarray, name: str) -> np.ndarray:
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + self.eps) * self.w[name + ".weight"] + self.w[
            name + ".bias"
        ]

    def encode(self, texts: list[str]) -> np.ndarray:
        enc = self.tok.encode_batch(texts)
        ids = np.array([e.ids for e in enc])
        mask = np.array([e.attention_mask for e in enc], dtype=np.float32)
        n, length = ids.shape
        w = self.w
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:length]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        x = self._norm(x, "embeddings.LayerNorm")
        bias = ((1.0 - mask) * np.finfo(np.float32).min)[:, None, None, :]
        hd = self.dim // self.heads
        for i in range(self.layers):
            p = f"encoder.layer.{i}."

            def split(t: np.ndarray) -> np.ndarray:
                return t.reshape(n, length, self.heads, hd).transpose(0, 2, 1, 3)

            q = split(self._lin(x, p + "attention.self.query"))
            k = split(self._lin(x, p + "attention.self.key"))
            v = split(self._lin(x, p + "attention.self.value"))
            s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(hd) + bias
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            ctx = (s @ v).transpose(0, 2, 1, 3).reshape(n, length, self.dim)
            x = self._norm(
                self._lin(ctx, p + "attention.output.dense") + x, p + "attention.output.LayerNorm"
            )
            h = self._lin(x, p + "intermediate.dense")
            h = 0.5 * h * (1.0 + _erf(h / np.sqrt(2.0)))
            x = self._norm(self._lin(h, p + "output.dense") + x, p + "output.LayerNorm")
        pooled = (x * mask[..., None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
        return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


# ---- one candidate in this process ---------------------------------------------------------


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _load(name: str, folder: Path):  # noqa: ANN202 - each candidate its own kind
    """A function texts -> unit rows."""
    if name == "sentence-transformers":
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(1)
        m = SentenceTransformer(str(folder), device="cpu")
        return lambda t: m.encode(t, normalize_embeddings=True, show_progress_bar=False)
    if name == "bert-torch":
        import torch

        from contextfs.index.bert import BertEncoder

        torch.set_num_threads(1)
        e = BertEncoder(folder)
        return e.encode
    if name == "bert-numpy":
        e = NumpyBert(folder)
        return e.encode
    if name == "onnxruntime":
        import os

        model = os.environ.get("BENCH_ONNX", "")
        if not model:
            raise RuntimeError("no exported model: give --onnx FILE (see --export)")
        import onnxruntime as ort
        from tokenizers import Tokenizer

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = opts.inter_op_num_threads = 1
        session = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
        tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
        tok.enable_truncation(256)
        tok.enable_padding()

        def encode(texts: list[str]) -> np.ndarray:
            enc = tok.encode_batch(list(texts))
            feed = {
                "ids": np.array([e.ids for e in enc], dtype=np.int64),
                "mask": np.array([e.attention_mask for e in enc], dtype=np.float32),
                "types": np.array([e.type_ids for e in enc], dtype=np.int64),
            }
            return session.run(None, feed)[0]

        return encode
    raise ValueError(name)


def child(name: str, out: Path) -> None:
    from contextfs.index.embed import local_model_path

    folder = local_model_path()
    t0 = time.perf_counter()
    try:
        encode = _load(name, folder)
    except Exception as exc:  # noqa: BLE001 - reported in the table
        out.write_text(json.dumps({"candidate": name, "error": f"{type(exc).__name__}: {exc}"}))
        return
    encode(["warm up"])
    load_s = time.perf_counter() - t0
    lat = []
    for q in QUESTIONS:
        q0 = time.perf_counter()
        encode([q])
        lat.append((time.perf_counter() - q0) * 1000)
    b0 = time.perf_counter()
    rows = np.asarray(encode(BATCH), dtype=np.float32)
    batch_s = time.perf_counter() - b0
    qrows = np.asarray(encode(QUESTIONS[:5]), dtype=np.float32)
    out.write_text(
        json.dumps(
            {
                "candidate": name,
                "load_s": load_s,
                "rss_mib": _rss_mib(),
                "query_p50_ms": float(np.median(lat)),
                "batch_texts_per_s": len(BATCH) / batch_s,
                "rows": rows.tolist(),
                "qrows": qrows.tolist(),
            }
        )
    )


def export(path: Path) -> None:
    """MiniLM as ONNX, through torch's exporter over `BertEncoder.forward` (needs `onnx`)."""
    import torch

    from contextfs.index.bert import BertEncoder
    from contextfs.index.embed import local_model_path

    enc = BertEncoder(local_model_path())

    class Forward(torch.nn.Module):
        def forward(self, ids, mask, types):  # noqa: ANN001, ANN202
            return enc.forward(ids, mask, types)

    ids = torch.ones((2, 8), dtype=torch.long)
    axes = {"n": 0, "l": 1}
    torch.onnx.export(
        Forward(),
        (ids, torch.ones((2, 8)), torch.zeros((2, 8), dtype=torch.long)),
        str(path),
        input_names=["ids", "mask", "types"],
        output_names=["out"],
        dynamo=False,
        dynamic_axes={k: {v: n for n, v in axes.items()} for k in ("ids", "mask", "types")}
        | {"out": {0: "n"}},
        opset_version=17,
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="(the same: it takes a minute)")
    ap.add_argument("--onnx", type=Path, default=None, help="an exported model for onnxruntime")
    ap.add_argument("--export", type=Path, default=None, help="export MiniLM to this file, exit")
    ap.add_argument("--extra-path", default="", help="folders prepended to sys.path (onnx, ort)")
    ap.add_argument("--json", type=Path, default=ROOT / "bench-results" / "embedders.json")
    args = ap.parse_args()
    if args.extra_path:
        sys.path[:0] = args.extra_path.split(":")
    if args.export:
        export(args.export)
        return 0
    if args.child:
        child(args.child, args.out)
        return 0
    import tempfile

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in CANDIDATES:
            out = Path(tmp) / f"{name}.json"
            cmd = [sys.executable, __file__, "--child", name, "--out", str(out)]
            cmd += ["--extra-path", args.extra_path] if args.extra_path else []
            env = {"OMP_NUM_THREADS": "1", **_env()}
            if args.onnx:
                env["BENCH_ONNX"] = str(args.onnx)
            subprocess.run(cmd, check=True, env=env)
            results.append(json.loads(out.read_text()))
    ref = next(r for r in results if r["candidate"] == "sentence-transformers")
    head = ("candidate", "import + load", "VmRSS after a question", "question p50")
    print("| " + " | ".join((*head, "batch of 32", "max diff")) + " |")
    print("|---|---|---|---|---|---|")
    for r in results:
        if "error" in r:
            print(f"| {r['candidate']} | not measured: {r['error'][:120]} | | | | |")
            continue
        diff = max(
            float(np.abs(np.array(r["rows"]) - np.array(ref["rows"])).max()),
            float(np.abs(np.array(r["qrows"]) - np.array(ref["qrows"])).max()),
        )
        print(
            f"| {r['candidate']} | {r['load_s']:.1f} s | {r['rss_mib']:,.0f} MiB | "
            f"{r['query_p50_ms']:.1f} ms | {r['batch_texts_per_s']:.0f} texts/s | {diff:.1e} |"
        )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    for r in results:
        r.pop("rows", None)
        r.pop("qrows", None)
    args.json.write_text(json.dumps(results, indent=2))
    return 0


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}


if __name__ == "__main__":
    sys.exit(main())
