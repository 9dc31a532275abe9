"""The labelled secret corpus (tests/corpus/secrets/): the redactor's recall and false
positives stay where docs/secrets.md says they are.

The floors are the figures measured when the corpus was written, so a change that loses
a secret or garbles an ordinary sentence fails here; `scripts/bench_secrets.py` prints
the same figures with the library and the earlier redactor beside them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from contextfs.memory.redact import Redactor
from contextfs.testing.secret_corpus import (
    Item,
    load,
    parse_line,
    prose_items,
    repo_text,
    score,
)

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "corpus" / "secrets"
R = Redactor()
ITEMS = load(CORPUS)
NAMES = {it.text for it in ITEMS if it.group == "names"}
HELD_OUT = ("holdout", "natural_holdout")


def _run(text: str):
    return R.redact_name(text) if text in NAMES else R.redact(text)


def _text(text: str) -> str:
    return _run(text).text


def _score(items: list[Item]):
    return score(items, lambda t: [(r.start, r.end) for r in _run(t).redactions], _text)


def _group(*names: str) -> list[Item]:
    return [it for it in ITEMS if it.group in names]


def test_corpus_is_labelled() -> None:
    groups = {it.group for it in ITEMS}
    assert {"tokens", "keys", "urls_cli", "assignments", "prose", "names", "split"} <= groups
    assert {"ordinary", "holdout", "natural_dev", "natural_holdout"} <= groups
    positives = [it for it in ITEMS if it.positive]
    assert len(positives) >= 100 and len(ITEMS) - len(positives) >= 100
    for it in positives:
        for s, e in it.secrets:
            assert it.text[s:e].strip() == it.text[s:e], f"{it.group}:{it.line}"
    assert all(it.split is not None for it in ITEMS if it.group == "split")
    natural = [it for it in _group("natural_dev", "natural_holdout") if it.positive]
    assert len(natural) >= 600  # hand-written phrasings: dev, then a held-out set
    assert len({it.text for it in natural}) == len(natural)


def test_parse_line_markers() -> None:
    it = parse_line("x", 1, "+ a ⟦gh«»p_1‖23⟧⏎b")
    assert it.text == "a ghp_123\nb"
    assert it.secrets == ((2, 9),) and it.split == 7
    with pytest.raises(ValueError):
        parse_line("x", 2, "+ no secret marked")
    with pytest.raises(ValueError):
        parse_line("x", 3, "- a ⟦secret⟧ in a negative")


def test_recall_and_false_positives_on_the_corpus() -> None:
    s = _score([it for it in ITEMS if it.group not in HELD_OUT])
    # the one false positive and the two partly caught secrets the 9th held-out set
    # measured, the 10th's and the 11th's one stray each (natural_dev now), and one more
    # stray: `Hunter22! not Hunter2!`, a mistyped password that has a password's shape
    assert s.false_positives <= 1, s.touched
    assert s.strays <= 3
    assert s.caught >= 2236, s.missed  # of 2,372 (natural_dev included)
    assert s.partly <= 2, s.missed


def test_holdout_figures() -> None:
    # Written after the detectors and not tuned on: a floor, not a target.
    s = _score(_group("holdout"))
    assert s.false_positives == 0, s.touched
    assert s.recall >= 0.9, s.missed  # 18 of 20


def test_natural_language_secrets_held_out() -> None:
    # Written by someone who saw neither the detectors nor the other files, never tuned
    # on: a floor at what it measured once (the issue asks 0.98; docs/secrets.md says why
    # not)
    s = _score(_group("natural_holdout"))
    assert s.false_positives == 0, s.touched  # of 90
    assert s.strays == 0
    assert s.caught >= 120, s.missed  # of 180
    assert s.partly == 0, s.missed


def test_natural_language_secrets_dev() -> None:
    s = _score(_group("natural_dev"))
    assert (s.caught, s.secrets) == (2119, 2255), s.missed
    assert s.false_positives <= 1, s.touched  # `password123 is one of the most common …`
    assert s.strays <= 3  # `Hunter2!` after `Hunter22! not`, `note2self`, `BT-8XK2`


@pytest.mark.parametrize("group", ["prose", "names", "split", "code"])
def test_issue_cases_by_group(group: str) -> None:
    s = _score(_group(group))
    assert s.false_positives == 0, s.touched
    assert s.recall >= {"prose": 0.96, "names": 1.0, "split": 1.0, "code": 1.0}[group], s.missed


def test_every_stored_copy_of_a_split_token() -> None:
    """The first append is stored (and kept in .history) before the second arrives: it
    must not hold a 4-character piece of the secret either, not even a word that only
    the rest makes a password (`My password is Winter‖Probe2024!`)."""
    leaks = []
    for it in _group("split"):
        first = R.redact(it.text[: it.split]).text
        for s, _ in it.secrets:
            part = it.text[s : it.split]
            if any(part[i : i + 4] in first for i in range(max(1, len(part) - 3))):
                leaks.append(f"split:{it.line}")
    assert leaks == []


def test_false_positives_on_the_project_prose() -> None:
    items = prose_items(repo_text(REPO))
    assert len(items) >= 5000
    touched = [(where, t) for where, t in items if R.redact(t).changed]
    assert len(touched) < len(items) / 100, touched[:5]  # none when written


# The learned layer (`Redactor(model=True)`, docs/secrets.md "The learned layer"). It was
# trained on every part below, so these are floors against a regression of the layer or
# its wiring, not measures of recall on phrasings it never saw (its cross-validated
# figures are in docs/secrets.md; the held-out files are not scored here).
M = Redactor(model=True)


def _score_model(items: list[Item]):
    def run(text: str):
        return M.redact_name(text) if text in NAMES else M.redact(text)

    return score(
        items, lambda t: [(r.start, r.end) for r in run(t).redactions], lambda t: run(t).text
    )


def test_model_layer_on_the_natural_dev_part() -> None:
    s = _score_model(_group("natural_dev"))
    assert s.caught >= 2222, s.missed  # of 2,255; the rules alone: 2,119
    assert s.false_positives <= 1, s.touched  # as the rules
    assert s.strays <= 31 and s.partly <= 15


def test_model_layer_on_the_parts_built_with() -> None:
    s = _score_model([it for it in ITEMS if it.group not in (*HELD_OUT, "natural_dev")])
    assert s.caught == s.secrets, s.missed  # 129
    # `urls_cli:17`, and two lines of Python in code.txt (written after the model was
    # trained): "pass force_zip64", a `pass` statement before `zip64_limit = 5`
    assert s.false_positives <= 3, s.touched
    assert s.strays <= 20


def test_model_layer_on_the_project_prose() -> None:
    items = prose_items(repo_text(REPO))
    touched = [(where, t) for where, t in items if M.redact(t).changed]
    assert len(touched) <= 22, touched[:5]  # of 8,703 (0.25%); the rules alone: none
