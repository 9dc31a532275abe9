"""Scoring an extractor: candidates against the memories a transcript should yield.

Used by `scripts/extraction_quality.py` and the unit tests (corpus under
`tests/corpus/transcripts/`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from contextfs.conversations.extract import Candidate
from contextfs.ctxtypes import slugify


@dataclass(frozen=True, slots=True)
class Expected:
    """A memory a transcript should yield: type, key values and a phrase in its fields."""

    type: str
    keys: dict[str, object]
    phrase: str = ""


def _words(value: object) -> list[str]:
    return [w for w in slugify(str(value)).split("-") if w]


def key_matches(expected: object, got: object) -> bool:
    """Same slug, or every expected word in the candidate's key with at most 4 more words.

    Free-text keys (an event title, a case title, a skill name) are worded differently by
    every extractor; the expected words are the ones any good title would contain.
    """
    want, have = _words(expected), _words(got)
    if want == have:
        return True
    return bool(want) and set(want) <= set(have) and len(have) <= len(want) + 4


def _field_text(fields: Mapping[str, object]) -> str:
    parts: list[str] = []
    for value in fields.values():
        if isinstance(value, dict):
            parts.extend(f"{k}: {v}" for k, v in value.items())
        elif isinstance(value, list):
            parts.extend(str(v) for v in value)
        else:
            parts.append(str(value))
    return "\n".join(parts).lower()


def candidate_matches(cand: Candidate, exp: Expected) -> bool:
    if cand.type != exp.type:
        return False
    for key, value in exp.keys.items():
        if key not in cand.fields or not key_matches(value, cand.fields[key]):
            return False
    return not exp.phrase or exp.phrase.lower() in _field_text(cand.fields)


@dataclass
class Score:
    tp: int = 0
    fp: int = 0
    fn: int = 0

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 1.0

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 1.0


def score_candidates(
    results: Iterable[tuple[Sequence[Candidate], Sequence[Expected]]],
) -> tuple[dict[str, Score], Score, list[str]]:
    """(per-type scores, overall, mismatch notes) over (candidates, expected) per transcript.

    Matching is one-to-one and greedy in candidate order: a second candidate for an
    already matched memory is a false positive, as is any candidate nothing expected.
    """
    per: dict[str, Score] = {}
    total = Score()
    notes: list[str] = []
    for k, (cands, expected) in enumerate(results):
        left = list(expected)
        for cand in cands:
            hit = next((e for e in left if candidate_matches(cand, e)), None)
            s = per.setdefault(cand.type, Score())
            if hit is not None:
                left.remove(hit)
                s.tp += 1
                total.tp += 1
            else:
                s.fp += 1
                total.fp += 1
                notes.append(f"#{k} false positive {cand.type} {cand.fields}")
        for e in left:
            per.setdefault(e.type, Score()).fn += 1
            total.fn += 1
            notes.append(f"#{k} missed {e.type} {e.keys} {e.phrase!r}")
    return per, total, notes
