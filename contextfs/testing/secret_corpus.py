"""The labelled secret corpus (`tests/corpus/secrets/`) and how a detector is scored on it.

`load` reads the corpus files into `Item`s (text, secret spans, the split point of a
two-append item); `score` runs a detector over them and counts what was caught, partly
caught and missed, the ordinary items it touched (false positives) and its redactions
that touch no labelled secret (strays). The format and the scoring rules are in the
corpus's README.md. A detector is two plain callables, so this module needs nothing of
the package: `spans(text)` gives the redacted spans of a text, `redact(text)` the stored
text (used only for the split items, which are redacted twice as two appends are).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

OPEN, CLOSE, NEWLINE, JOIN, SPLIT = "⟦", "⟧", "⏎", "«»", "‖"

Span = tuple[int, int]


@dataclass(frozen=True, slots=True)
class Item:
    """One corpus line: the text as written to the store and where its secrets are."""

    group: str  # the corpus file's stem
    line: int
    text: str
    secrets: tuple[Span, ...]
    split: int | None = None  # offset of the end of the first append (split.txt)

    @property
    def positive(self) -> bool:
        return bool(self.secrets)


def parse_line(group: str, line: int, raw: str) -> Item:
    """`+ text with ⟦secret⟧` or `- text`; see the corpus README."""
    sign, body = raw[:2], raw[2:]
    if sign not in ("+ ", "- "):
        raise ValueError(f"{group}:{line}: an item starts with '+ ' or '- '")
    body = body.replace(JOIN, "").replace(NEWLINE, "\n")
    text: list[str] = []
    spans: list[Span] = []
    split: int | None = None
    pos = 0
    start: int | None = None
    for ch in body:
        if ch == OPEN:
            if start is not None:
                raise ValueError(f"{group}:{line}: nested {OPEN}")
            start = pos
        elif ch == CLOSE:
            if start is None or start == pos:
                raise ValueError(f"{group}:{line}: {CLOSE} without a secret before it")
            spans.append((start, pos))
            start = None
        elif ch == SPLIT:
            split = pos
        else:
            text.append(ch)
            pos += 1
    if start is not None:
        raise ValueError(f"{group}:{line}: {OPEN} not closed")
    if (sign == "+ ") != bool(spans):
        raise ValueError(f"{group}:{line}: '+' items have secrets, '-' items have none")
    return Item(group, line, "".join(text), tuple(spans), split)


def load(folder: Path) -> list[Item]:
    items: list[Item] = []
    for path in sorted(folder.glob("*.txt")):
        for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if raw.strip() and not raw.startswith("#"):
                items.append(parse_line(path.stem, n, raw))
    return items


@dataclass
class Score:
    """What one detector did on the corpus (or a group of it)."""

    secrets: int = 0
    caught: int = 0
    partly: int = 0
    negatives: int = 0
    false_positives: int = 0
    strays: int = 0
    missed: list[str] = field(default_factory=list)  # "group:line"
    touched: list[str] = field(default_factory=list)  # negatives redacted, "group:line"

    @property
    def recall(self) -> float:
        return self.caught / self.secrets if self.secrets else 1.0

    @property
    def fp_rate(self) -> float:
        return self.false_positives / self.negatives if self.negatives else 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "secrets": self.secrets,
            "caught": self.caught,
            "partly": self.partly,
            "recall": round(self.recall, 4),
            "negatives": self.negatives,
            "false_positives": self.false_positives,
            "fp_rate": round(self.fp_rate, 4),
            "strays": self.strays,
            "missed": self.missed,
            "touched": self.touched,
        }


def _covered(span: Span, found: Iterable[Span]) -> int:
    """How many characters of span lie inside the found spans."""
    s, e = span
    marks = bytearray(e - s)
    for fs, fe in found:
        for i in range(max(fs, s), min(fe, e)):
            marks[i - s] = 1
    return sum(marks)


def _left(secret: str, stored: str, piece: int = 4) -> bool:
    """Any `piece`-character part of the secret still in the stored text?"""
    if len(secret) <= piece:
        return secret in stored
    return any(secret[i : i + piece] in stored for i in range(len(secret) - piece + 1))


def score(
    items: Iterable[Item],
    spans: Callable[[str], list[Span]],
    redact: Callable[[str], str] | None = None,
) -> Score:
    out = Score()
    for it in items:
        where = f"{it.group}:{it.line}"
        if it.split is not None:
            if redact is None:
                continue
            stored = redact(redact(it.text[: it.split]) + it.text[it.split :])
            for s, e in it.secrets:
                out.secrets += 1
                secret = it.text[s:e]
                halves = [secret[: it.split - s], secret[it.split - s :]]
                left = [h for h in halves if h and _left(h, stored)]
                if not left:
                    out.caught += 1
                else:
                    out.missed.append(where)
                    if len(left) < len(halves):
                        out.partly += 1
            if not it.secrets:
                out.negatives += 1
                if stored != it.text:
                    out.false_positives += 1
                    out.touched.append(where)
            continue
        found = spans(it.text)
        if not it.positive:
            out.negatives += 1
            if found:
                out.false_positives += 1
                out.touched.append(where)
            continue
        for span in it.secrets:
            out.secrets += 1
            got = _covered(span, found)
            if got == span[1] - span[0]:
                out.caught += 1
            else:
                out.missed.append(where)
                if got:
                    out.partly += 1
        out.strays += sum(1 for f in found if not any(_covered(s, [f]) for s in it.secrets))
    return out


# Prose and conversations the project ships, none with a secret: any redaction in them is a
# false positive on real text (docs/secrets.md names the detectors' own pages apart).
REPO_TEXT = ("scripts/recall_data", "tests/corpus/text", "tests/corpus/transcripts", "docs")
REPO_TEXT_SKIP = ("docs/secrets.md",)  # it quotes secrets on purpose


def repo_text(repo: Path) -> list[tuple[str, str]]:
    """(path relative to the checkout, text) of every UTF-8 file under REPO_TEXT."""
    out = []
    for top in REPO_TEXT:
        for p in sorted((repo / top).rglob("*")):
            rel = str(p.relative_to(repo))
            if p.is_file() and rel not in REPO_TEXT_SKIP:
                try:
                    out.append((rel, p.read_text(encoding="utf-8")))
                except UnicodeDecodeError:
                    continue  # the corpus keeps some files that are not UTF-8 on purpose
    return out


def prose_items(texts: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The shipped prose cut into items of three words or more: each string of a JSON file
    (a conversation turn), each line of a JSONL transcript, each paragraph of any other
    file."""

    def strings(o: object) -> list[str]:
        if isinstance(o, str):
            return [o]
        if isinstance(o, dict):
            return [s for v in o.values() for s in strings(v)]
        if isinstance(o, list):
            return [s for v in o for s in strings(v)]
        return []

    out = []
    for rel, text in texts:
        if rel.endswith(".json"):
            parts = strings(json.loads(text))
        elif rel.endswith(".jsonl"):
            parts = text.splitlines()
        else:
            parts = re.split(r"\n[ \t]*\n", text)
        out += [(rel, t) for t in parts if len(t.split()) >= 3]  # not ids, names, dates
    return out
