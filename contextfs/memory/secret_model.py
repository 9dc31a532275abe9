"""The learned layer of secret redaction: a token tagger for secrets told in prose.

An opt-in second layer under `memory.redact.Redactor` (`Redactor(model=True)`, config
key `secret_model`): the rule table finds secrets by their format and by the phrasings
written down for it; this tags the tokens of a text whose shape and context (the words
around them) a logistic regression, trained on the labelled corpus, scores above a
threshold, and returns their spans. Docs: docs/secrets.md ("The learned layer").

Boundary: pure, no I/O but reading its own weights (package data, `secret_model.json.gz`:
the weights, the threshold and the word list the "common English word" feature uses, so
nothing is downloaded); it knows nothing of markers, offsets in bytes or priorities (the
redactor resolves those). `scripts/train_secret_model.py` rebuilds the weights;
`token_features` is the one definition of the features it trains on, and `SecretModel`
computes the same scores without building a string per feature.

Design notes:
- Tokens are runs between blanks and hard delimiters (quotes, brackets, `,;=|`, CJK
  punctuation); a trailing `.?:…` is trimmed, a trailing `!#$` kept (passwords end so).
  Tagged tokens on one line separated only by up to 3 non-alphanumeric characters merge
  into one span: a passphrase or a seed phrase is one redaction.
- Context words that are values rather than words are replaced by their class
  (`<mix>`), so the model does not memorise values.
"""

from __future__ import annotations

import bisect
import gzip
import json
import logging
import re
from functools import lru_cache
from importlib import resources
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

Span = tuple[int, int]

WEIGHTS_FILE = "secret_model.json.gz"

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
_DELIM = "\\s\"'“”‘’«»„‚()\\[\\]{}<>`,;=|" + "、。，：；「」『』（）【】！？\u3000"
_TOKEN_RE = re.compile(f"[{_CJK}]+|[^{_DELIM}{_CJK}]+")
_CJK_RE = re.compile(f"[{_CJK}]")
_LETTERS_RE = re.compile(r"[^a-z]+")
_TRIM_END = ".?:…"
_TRIM_START = ":*~"
# the classes of a token, in the order of the context vectors' class blocks
CLASSES = (
    "cjk",
    "d4-",
    "d5-8",
    "d9+",
    "vocab",
    "Vocab",
    "alpha",
    "Alpha",
    "mixS",
    "wordnum",
    "mix",
    "wordsym",
    "sym",
    "other",
)
_WORDISH = frozenset(("vocab", "Vocab", "alpha", "Alpha", "cjk"))
_RUN_CLASSES = frozenset(("vocab", "alpha"))
_RUN_CI = frozenset(CLASSES.index(c) for c in _RUN_CLASSES)
_RUN_BUCKETS = ("0", "1-2", "3-6", "7-12", "13+")


def tokens(text: str) -> list[Span]:
    """The candidate tokens of text, as (start, end)."""
    out = []
    for m in _TOKEN_RE.finditer(text):
        s, e = m.span()
        while e > s and text[e - 1] in _TRIM_END:
            e -= 1
        while s < e and text[s] in _TRIM_START:
            s += 1
        if e > s:
            out.append((s, e))
    return out


def _shape(w: str) -> str:
    out: list[str] = []
    for c in w:
        k = "A" if c.isupper() else "a" if c.islower() else "9" if c.isdigit() else "#"
        if not out or out[-1] != k:
            out.append(k)
    return "".join(out)


def _lenb(n: int) -> str:
    if n <= 10:
        return str(n)
    return "11-12" if n <= 12 else "13-16" if n <= 16 else "17-24" if n <= 24 else "25+"


def _is_cjk(w: str) -> bool:
    return bool(_CJK_RE.match(w))


def _run_bucket(run: int) -> int:
    return 0 if run == 0 else 1 if run <= 2 else 2 if run <= 6 else 3 if run <= 12 else 4


def coarse(w: str, words: frozenset[str]) -> str:
    """A token's coarse class (one of CLASSES); `words` are the common English words."""
    if _is_cjk(w):
        return "cjk"
    if w.isdigit():
        return "d4-" if len(w) <= 4 else "d5-8" if len(w) <= 8 else "d9+"
    lw = w.lower()
    if w.isalpha():
        if lw in words:
            return "vocab" if w.islower() else "Vocab"
        return "alpha" if w.islower() else "Alpha"
    hasd = any(c.isdigit() for c in w)
    hasa = any(c.isalpha() for c in w)
    hass = any(not c.isalnum() for c in w)
    if hasa and hasd and hass:
        return "mixS"
    if hasa and hasd:
        return "wordnum" if lw.rstrip("0123456789") in words else "mix"
    if hass and hasa:
        parts = [p for p in _LETTERS_RE.split(lw) if p]
        return "wordsym" if parts and all(p in words for p in parts) else "sym"
    return "other"


def _context_word(w: str, c: str) -> str:
    """How a token reads as another token's context: a word as itself, a value by class."""
    return w.lower() if (c in _WORDISH or len(w) <= 2) else "<" + c + ">"


def _own_features(w: str, c: str, words: frozenset[str]) -> list[str]:
    lw = w.lower()
    f = [
        "bias",
        "c=" + c,
        "len=" + _lenb(len(w)),
        "sh=" + _shape(w)[:6],
        "c|len=" + c + _lenb(len(w)),
    ]
    if (len(w) <= 3 and w.isalpha()) or (lw in words and len(lw) <= 12):
        f.append("w=" + lw)
    nd = sum(ch.isdigit() for ch in w)
    if nd:
        f.append("nd=" + _lenb(nd))
    if _is_cjk(w):
        f += ["cjkhead=" + w[:2], "cjktail=" + w[-2:]]
    return f


def _edge(ch: str) -> str:
    return "x" if ch.isalnum() else ch


def _lines(text: str, toks: list[Span]) -> list[int]:
    if "\n" not in text:
        return [0] * len(toks)
    starts = [0] + [m.end() for m in re.finditer("\n", text)]
    return [bisect.bisect_right(starts, s) - 1 for s, _ in toks]


def token_features(text: str, toks: list[Span], words: frozenset[str]) -> list[list[str]]:
    """Each token's binary features, as strings: what the model is trained on
    (`scripts/train_secret_model.py`). `SecretModel.token_scores` is the same sum."""
    ws = [text[s:e] for s, e in toks]
    classes = [coarse(w, words) for w in ws]
    lows = [_context_word(w, c) for w, c in zip(ws, classes, strict=True)]
    lines = _lines(text, toks)
    n = len(toks)
    feats = []
    run = 0
    for i, (s, e) in enumerate(toks):
        w, c = ws[i], classes[i]
        f = _own_features(w, c, words)
        cb = _edge(text[s - 1]) if s else "^"
        ca = _edge(text[e]) if e < len(text) else "$"
        f += ["cb=" + cb, "ca=" + ca, "cb|c=" + cb + c, "ca|c=" + ca + c]
        ln = lines[i]
        if i == 0 or lines[i - 1] != ln:
            f.append("first|c=" + c)
        if i == n - 1 or lines[i + 1] != ln:
            f.append("last|c=" + c)
        for d in range(1, 7):  # left context: distance 1-3, then a bag of the six before
            j = i - d
            if j < 0:
                f.append(f"p{d}=<s>")
                break
            pw = lows[j]
            if d <= 3:
                f += [f"p{d}={pw}", f"p{d}={pw}|{c}", f"pc{d}={classes[j]}"]
            f += [f"pb={pw}", f"pb={pw}|{c}"]
            if _is_cjk(pw):
                f += [f"pbcjk={pw[k : k + 2]}" for k in range(max(0, len(pw) - 4), len(pw) - 1)]
            elif len(pw) >= 5:
                f.append(f"pb5={pw[:5]}")  # a keyword's stem in an inflected language
        if i >= 1:
            f.append(f"p2p1={lows[i - 2] if i >= 2 else '<s>'}_{lows[i - 1]}")
        f.append("run=" + _RUN_BUCKETS[_run_bucket(run)] + "|" + c)
        run = run + 1 if c in _RUN_CLASSES else 0
        f += ["pfar=" + lows[j] for j in range(max(0, i - 30), max(0, i - 6))]  # seed phrases
        for d in range(1, 4):  # right context
            j = i + d
            if j >= n:
                f.append(f"n{d}=</s>")
                break
            f += [f"n{d}={lows[j]}", f"nb={lows[j]}|{c}"]
            if _is_cjk(lows[j]):
                f.append(f"ncjk={lows[j][:2]}")
        if i + 1 < n:
            f.append(f"n1n2={lows[i + 1]}_{lows[i + 2] if i + 2 < n else '</s>'}")
        if ln > 0:  # the previous line's last words: a question and its answer
            k = 0
            for j in range(i - 1, -1, -1):
                if lines[j] == ln - 1:
                    f.append("pl=" + lows[j])
                    k += 1
                    if k >= 8:
                        break
                elif lines[j] < ln - 1:
                    break
        feats.append(f)
    return feats


def merge(text: str, toks: list[Span]) -> list[Span]:
    """Tagged tokens as spans: neighbours on one line with at most 3 non-alphanumeric
    characters between them are one span."""
    out: list[list[int]] = []
    for s, e in toks:
        if out and s - out[-1][1] <= 3:
            gap = text[out[-1][1] : s]
            if "\n" not in gap and not any(ch.isalnum() for ch in gap):
                out[-1][1] = e
                continue
        out.append([s, e])
    return [(a, b) for a, b in out]


# columns of a context word's vector: eleven scalars, then five blocks of one per class
_P1, _P2, _P3, _PB, _PB5, _PFAR, _N1, _N2, _N3, _NCJK, _PL = range(11)
_K = len(CLASSES)
_P1C, _P2C, _P3C, _PBC, _NBC = (11 + k * _K for k in range(5))
_WIDTH = 11 + 5 * _K
_CI = {c: i for i, c in enumerate(CLASSES)}
_CACHE = 50_000  # words whose compiled vectors are kept


def _bigrams(weights: dict[str, float], prefix: str) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for f, w in weights.items():
        if f.startswith(prefix):
            a, _, b = f[len(prefix) :].rpartition("_")
            out.setdefault(a, {})[b] = w
    return out


_SCALARS = {"p1": _P1, "p2": _P2, "p3": _P3, "pb": _PB, "pfar": _PFAR}
_SCALARS |= {"n1": _N1, "n2": _N2, "n3": _N3, "pl": _PL}
_BLOCKS = {"p1": _P1C, "p2": _P2C, "p3": _P3C, "pb": _PBC, "nb": _NBC}


def _context_vectors(weights: dict[str, float]) -> dict[str, np.ndarray]:
    """The columns of every context word some weight names (`p1=word`, `pb=word|class`,
    …), built once: a word no weight names has zeros there, and a new word costs a
    lookup or two (its prefix, its CJK bigrams) instead of one per column."""
    out: dict[str, np.ndarray] = {}
    for f, w in weights.items():
        key, sep, rest = f.partition("=")
        if not sep:
            continue
        col = None
        if key in _BLOCKS and "|" in rest:
            word, _, c = rest.rpartition("|")
            if c in _CI:
                col = _BLOCKS[key] + _CI[c]
        if col is None and key in _SCALARS:
            word, col = rest, _SCALARS[key]
        if col is not None:
            if word not in out:
                out[word] = np.zeros(_WIDTH)
            out[word][col] = w
    return out


class SecretModel:
    """Scores tokens as `token_features` + weights would, without the strings: each
    context word's weights are compiled once into a vector (`_ctx`, cached), and the
    windowed sums of the context bags are cumulative sums."""

    def __init__(self, weights: dict[str, float], threshold: float, words: frozenset[str]):
        self.weights = weights
        self.threshold = threshold
        self.words = words
        g = weights.get
        self._pc = [np.array([g(f"pc{d}={c}", 0.0) for c in CLASSES]) for d in (1, 2, 3)]
        self._first = [g("first|c=" + c, 0.0) for c in CLASSES]
        self._last = [g("last|c=" + c, 0.0) for c in CLASSES]
        self._runs = [[g(f"run={b}|{c}", 0.0) for c in CLASSES] for b in _RUN_BUCKETS]
        self._ps = [g(f"p{d}=<s>", 0.0) for d in range(1, 7)]
        self._ns = [g(f"n{d}=</s>", 0.0) for d in range(1, 4)]
        # bigram weights as word -> word -> weight: most words start none
        self._p2p1 = _bigrams(weights, "p2p1=")
        self._n1n2 = _bigrams(weights, "n1n2=")
        self._known = _context_vectors(weights)
        self._ctx_cache: dict[str, np.ndarray] = {}
        self._word_cache: dict[str, tuple[int, float, str, np.ndarray]] = {}
        self._edge_cache: dict[tuple[str, str, int], float] = {}

    def _ctx(self, pw: str) -> np.ndarray:
        """A context word's weights, by column (see _P1 … _NBC)."""
        v = self._ctx_cache.get(pw)
        if v is not None:
            return v
        g = self.weights.get
        known = self._known.get(pw)
        v = np.zeros(_WIDTH) if known is None else known.copy()
        if _is_cjk(pw):
            ks = range(max(0, len(pw) - 4), len(pw) - 1)
            v[_PB5] = sum(g("pbcjk=" + pw[k : k + 2], 0.0) for k in ks)
            v[_NCJK] = g("ncjk=" + pw[:2], 0.0)
        elif len(pw) >= 5:
            v[_PB5] = g("pb5=" + pw[:5], 0.0)
        if len(self._ctx_cache) > _CACHE:
            self._ctx_cache.clear()
        self._ctx_cache[pw] = v
        return v

    def _word(self, w: str) -> tuple[int, float, str, np.ndarray]:
        """A token's class (index), the weights of its own features, how it reads as
        context, and that context word's weights."""
        o = self._word_cache.get(w)
        if o is None:
            c = coarse(w, self.words)
            g = self.weights.get
            low = _context_word(w, c)
            own = sum(g(x, 0.0) for x in _own_features(w, c, self.words))
            o = (_CI[c], own, low, self._ctx(low))
            if len(self._word_cache) > _CACHE:
                self._word_cache.clear()
            self._word_cache[w] = o
        return o

    def token_scores(self, text: str) -> tuple[list[Span], np.ndarray]:
        """The tokens of text and each one's score (a logit)."""
        toks = tokens(text)
        n = len(toks)
        if not n:
            return toks, np.zeros(0)
        g = self.weights.get
        info = [self._word(text[s:e]) for s, e in toks]
        cil = [x[0] for x in info]
        lows = [x[2] for x in info]
        m = np.array([x[3] for x in info])
        lines = _lines(text, toks)
        size = len(text)
        acc = [x[1] for x in info]
        edges = self._edge_cache
        runs, first, last = self._runs, self._first, self._last
        p2p1, n1n2 = self._p2p1, self._n1n2
        run = 0
        prev_low = "<s>"  # lows[i - 2]
        for i, (s, e) in enumerate(toks):
            k = cil[i]
            key = (text[s - 1] if s else "^", text[e] if e < size else "$", k)
            v = edges.get(key)
            if v is None:
                cb, ca = _edge(key[0]), _edge(key[1])
                c = CLASSES[k]
                v = g("cb=" + cb, 0.0) + g("ca=" + ca, 0.0)
                v += g("cb|c=" + cb + c, 0.0) + g("ca|c=" + ca + c, 0.0)
                edges[key] = v
            v += runs[_run_bucket(run)][k]
            run = run + 1 if k in _RUN_CI else 0
            ln = lines[i]
            if i == 0 or lines[i - 1] != ln:
                v += first[k]
            if i == n - 1 or lines[i + 1] != ln:
                v += last[k]
            if i >= 1:
                after = p2p1.get(prev_low)
                if after is not None:
                    v += after.get(lows[i - 1], 0.0)
                prev_low = lows[i - 1]
            if i + 1 < n:
                after = n1n2.get(lows[i + 1])
                if after is not None:
                    v += after.get(lows[i + 2] if i + 2 < n else "</s>", 0.0)
            acc[i] += v
        sc = np.array(acc)
        ci = np.array(cil)
        ar = np.arange(n)
        for i in range(min(n, 6)):  # the text's start within six tokens back
            sc[i] += self._ps[i]
        for d in range(1, min(n, 3) + 1):  # its end within three ahead
            sc[n - d] += self._ns[d - 1]
        for d, (base, cb_) in enumerate(((_P1, _P1C), (_P2, _P2C), (_P3, _P3C)), 1):
            if n > d:
                src = ar[:-d]
                sc[d:] += m[src, base] + m[src, cb_ + ci[d:]] + self._pc[d - 1][ci[:-d]]
        cs = np.empty((n + 1, _WIDTH))
        cs[0] = 0.0
        np.cumsum(m, axis=0, out=cs[1:])
        lo = np.maximum(ar - 6, 0)
        sc += cs[ar, _PB] - cs[lo, _PB] + cs[ar, _PB5] - cs[lo, _PB5]
        sc += cs[ar, _PBC + ci] - cs[lo, _PBC + ci]
        lo2 = np.maximum(ar - 30, 0)
        sc += cs[lo, _PFAR] - cs[lo2, _PFAR]  # tokens 7..30 back
        for d, base in ((1, _N1), (2, _N2), (3, _N3)):
            if n > d:
                src = ar[d:]
                sc[:-d] += m[src, base] + m[src, _NBC + ci[:-d]] + m[src, _NCJK]
        if lines[-1] > 0:
            by_line: dict[int, list[int]] = {}
            for i, ln in enumerate(lines):
                by_line.setdefault(ln, []).append(i)
            for ln, idx in by_line.items():
                prev = by_line.get(ln - 1)
                if prev:
                    sc[idx] += m[prev[-8:], _PL].sum()
        return toks, sc

    def spans(self, text: str) -> list[Span]:
        """The spans of text the model takes for secrets."""
        toks, sc = self.token_scores(text)
        t = self.threshold
        return merge(text, [tk for tk, s in zip(toks, sc.tolist(), strict=True) if s > t])


def load_file(data: bytes) -> SecretModel:
    """A model from the bytes of a weights file (gzipped JSON: weights, threshold, words)."""
    doc: dict[str, Any] = json.loads(gzip.decompress(data))
    return SecretModel(
        {str(k): float(v) for k, v in doc["weights"].items()},
        float(doc["threshold"]),
        frozenset(doc["words"]),
    )


@lru_cache(maxsize=1)
def shipped() -> SecretModel:
    """The model shipped with the package (read once per process)."""
    data = resources.files("contextfs.memory").joinpath(WEIGHTS_FILE).read_bytes()
    model = load_file(data)
    log.info("secret model loaded: %d weights, threshold %.2f", len(model.weights), model.threshold)
    return model
