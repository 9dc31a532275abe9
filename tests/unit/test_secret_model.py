"""The learned layer of redaction (`Redactor(model=True)`, config key `secret_model`):
secrets told in prose that the rules miss are redacted with it on and kept with it off;
ordinary prose is left alone; and it keeps every promise the redactor makes (markers,
idempotence, byte offsets, the windowed scan of a big text, `vouch`, bytes that are not
text, names). docs/secrets.md ("The learned layer")."""

from __future__ import annotations

import numpy as np
import pytest

from contextfs.errors import InvalidInput
from contextfs.memory import redact as mod
from contextfs.memory import secret_model as sm
from contextfs.memory.redact import MODEL_KIND, Redactor

RULES = Redactor()
MODEL = Redactor(model=True)

# (text, the secret): from tests/corpus/secrets/natural_dev.txt, secrets the rules miss
MISSED_BY_RULES = [
    (
        "wallet seed words are hamster diagram private dutch cause delay private meat "
        "slide toddler razor book",
        "hamster diagram private dutch cause delay private meat slide toddler razor book",
    ),
    (
        "When the bank phones about the clinic account they ask the security question "
        "(first pet) — the answer to give them is Biscuit1987.",
        "Biscuit1987",
    ),
    ("Login details below\nkev_the_dev\nBr0ken-Compass", "Br0ken-Compass"),
    ("send a message to Anna the wifi password is purple monkey 42", "purple monkey 42"),
    ("PIN-ul cardului este 2209", "2209"),
]

PROSE = [
    "The daemon keeps its log in the data dir and rotates it at 1 MiB.",
    "Kari is allergic to peanuts; Jonas cooks on Fridays.",
    "We met in Leeds in 2019 and moved to Rome for three days last spring.",
    "Run `contextfs fsck D` after a crash: it checks every invariant the store keeps.",
    "The password field is required and must be at least 12 characters long.",
    "My favourite book is Dune, and the sequel is on my list for the summer.",
]


@pytest.mark.parametrize(("text", "secret"), MISSED_BY_RULES)
def test_a_secret_the_rules_miss_is_redacted_with_the_model_only(text: str, secret: str) -> None:
    assert RULES.redact(text).text == text  # the rules alone keep it
    res = MODEL.redact(text)
    assert secret not in res.text and not any(w in res.text for w in secret.split()[-1:])
    assert f"[REDACTED:{MODEL_KIND}]" in res.text
    assert MODEL_KIND in res.summary()


@pytest.mark.parametrize("text", PROSE)
def test_ordinary_prose_is_untouched(text: str) -> None:
    assert not MODEL.redact(text).changed


def test_the_rules_find_first_and_the_model_adds() -> None:
    text = "my password is Tr0ub4dor&3 and the wifi password is purple monkey 42"
    rules = RULES.redact(text)
    both = MODEL.redact(text)
    assert {r.kind for r in rules.redactions} <= {r.kind for r in both.redactions}
    assert both.text.startswith(rules.text.split(" and ")[0])  # the rule's find is kept
    assert "purple" not in both.text and "Tr0ub4dor" not in both.text


@pytest.mark.parametrize(("text", "secret"), MISSED_BY_RULES)
def test_redaction_with_the_model_is_idempotent(text: str, secret: str) -> None:
    once = MODEL.redact(text).text
    assert MODEL.redact(once).text == once  # markers are never taken for secrets


def test_byte_offsets_after_non_ascii_text() -> None:
    text = "Café ☕ notes. " + MISSED_BY_RULES[1][0]
    data = text.encode("utf-8")
    out, found = MODEL.redact_bytes(data)
    secret = MISSED_BY_RULES[1][1].encode()
    assert secret not in out
    guess = [r for r in found if r.kind == MODEL_KIND]
    assert [data[r.start : r.end] for r in guess] == [secret]


def test_bytes_that_are_not_text_are_left_to_the_rules() -> None:
    # an archive or a picture: the model reads prose, and a guess would break the file
    text, _ = MISSED_BY_RULES[1]
    data = b"\x89PNG\r\n\x1a\n\xff\xfe" + text.encode() + b"\x00\xff"
    assert MODEL.redact_bytes(data) == RULES.redact_bytes(data)
    assert not MODEL.holds_secret(data)


def test_names_are_left_to_the_rules() -> None:
    name = "the answer to give them is Biscuit1987"
    assert MODEL.redact_name(name) == RULES.redact_name(name)


def test_the_windowed_scan_of_a_big_text_finds_the_same() -> None:
    text, secret = MISSED_BY_RULES[1]
    filler = "Notes on the garden: the roses want water twice a week.\n"
    big = filler * (mod.BIG_TEXT // len(filler) + 10) + text + "\n" + filler * 5
    res = MODEL.redact(big)
    assert secret not in res.text
    assert [big[r.start : r.end] for r in res.redactions] == [secret]
    assert res.redactions[0].line == big.count("\n", 0, res.redactions[0].start) + 1


def test_vouch_covers_the_model() -> None:
    r = Redactor(model=True)
    text, secret = MISSED_BY_RULES[1]
    assert r.vouch(text) is False  # the model finds it: not clean
    assert secret not in r.redact(text).text
    assert r.vouch(PROSE[0]) is True
    assert r.redact(PROSE[0]).text == PROSE[0]


def test_the_model_kind_is_not_a_user_pattern_name() -> None:
    with pytest.raises(InvalidInput):
        Redactor({MODEL_KIND: r"\bX\d{4}\b"})
    assert Redactor(model=True).uses_model and not Redactor().uses_model


def test_fast_scores_equal_the_features_it_is_trained_on() -> None:
    """`SecretModel.token_scores` computes without strings what `token_features` (what
    scripts/train_secret_model.py trains on) sums: the same to rounding."""
    m = sm.shipped()
    texts = [t for t, _ in MISSED_BY_RULES] + PROSE + ["问：wifi密码是多少？\n答：hunter22", ""]
    for text in texts:
        toks, fast = m.token_scores(text)
        feats = sm.token_features(text, toks, m.words)
        slow = np.array([sum(m.weights.get(f, 0.0) for f in fs) for fs in feats])
        assert np.allclose(fast, slow, atol=1e-9), text
