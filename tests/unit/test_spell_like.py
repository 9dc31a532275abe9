"""The key a renamed node's front matter gets: its new slug spelled as the key it replaces."""

from __future__ import annotations

import pytest

from contextfs.memory.service import spell_like


@pytest.mark.parametrize(
    ("held", "part", "spelled"),
    [
        ("Ana Lima", "ana-maria", "Ana Maria"),
        ("Ana Lima", "ana-lima-souza", "Ana Lima Souza"),
        ("Ana de Souza", "ana-maria-de-souza", "Ana Maria de Souza"),
        ("São Paulo", "sao-paulo-city", "São Paulo City"),
        ("Conan O'Brien", "conan-o-brien-show", "Conan O'Brien Show"),
        ("ACME Corp", "acme-labs", "ACME Labs"),
        ("NASA", "nasa-jpl", "NASA JPL"),
        ("my_project", "my-thing", "my_thing"),
        ("tea", "coffee", "coffee"),  # a key written as its slug shows no spelling
        ("espresso-bar", "coffee-bar", "coffee-bar"),
    ],
)
def test_a_new_slug_is_spelled_as_the_key_it_replaces(held: str, part: str, spelled: str) -> None:
    assert spell_like(held, part) == spelled
