"""`_results.json` is written by `search.bundle.indented_json`, which must give exactly the
bytes of `json.dumps(value, indent=2)` (its stand-in, for speed): checked on random
values of every kind the file holds, and the edge cases of each."""

from __future__ import annotations

import json
import math
import random

import pytest

from contextfs.search.bundle import indented_json

LEAVES: list[object] = [
    None,
    True,
    False,
    0,
    -5,
    2**70,
    1.5,
    0.1,
    1e-7,
    1e300,
    -0.0,
    12.000001,
    math.nan,
    math.inf,
    -math.inf,
    "",
    "plain",
    'quote " backslash \\ newline \n tab \t',
    "é€ 😀 \x00 \x1f \u2028",
]


def _value(rng: random.Random, depth: int) -> object:
    pick = rng.random()
    if depth > 3 or pick < 0.5:
        return rng.choice(LEAVES)
    if pick < 0.75:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    if pick < 0.85:
        return tuple(_value(rng, depth + 1) for _ in range(rng.randrange(3)))
    keys = ["k", "é", "a b", '"', "", "\n"]
    return {rng.choice(keys) + str(i): _value(rng, depth + 1) for i in range(rng.randrange(4))}


def test_random_values_match_json_dumps() -> None:
    rng = random.Random(25)
    for _ in range(5000):
        value = _value(rng, 0)
        assert indented_json(value) == json.dumps(value, indent=2), value


@pytest.mark.parametrize("value", [{}, [], (), {"a": {}}, {"a": []}, [[], {}], {"x": [1, [2]]}])
def test_empty_and_nested_containers(value: object) -> None:
    assert indented_json(value) == json.dumps(value, indent=2)


def test_what_json_cannot_hold_is_refused() -> None:
    with pytest.raises(TypeError):
        indented_json({"a": {1, 2}})
