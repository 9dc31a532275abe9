"""`_results.json` is written by a JSON writer of its own (`bundle.dumps_indented`): the
standard library's encoder with an indent is pure Python and took 1.4 ms of a question.
Its text must be exactly `json.dumps(value, indent=2)`'s, for any value."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextfs.search.bundle import dumps_indented

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text()  # any code point: escapes, surrogates, control characters
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=40,
)


@settings(max_examples=400, deadline=None)
@given(values)
def test_the_text_is_json_dumps_with_an_indent_of_two(value: object) -> None:
    assert dumps_indented(value) == json.dumps(value, indent=2)


def test_keys_that_are_not_strings_and_values_json_refuses_are_refused() -> None:
    with pytest.raises(TypeError):  # json would write 1 as "1"; no answer has such a key
        dumps_indented({1: "a key that is not a string"})
    with pytest.raises(TypeError):
        dumps_indented({"a": object()})
    assert dumps_indented([math.inf, -math.inf, 1e300, 0.1, True, 1]) == json.dumps(
        [math.inf, -math.inf, 1e300, 0.1, True, 1], indent=2
    )
