"""Extractive L0/L1: content chosen, limits respected on long and odd inputs."""

from __future__ import annotations

import dataclasses
import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextfs.ctxtypes import builtin_schema_dir, load_types
from contextfs.memory.summarize import summarize

TYPES = load_types([builtin_schema_dir()])


def check_limits(l0: str, l1: str, l0_max: int, l1_max: int) -> None:
    assert l0.endswith("\n")
    assert len(l0.splitlines()) == 1
    assert len(l0) <= l0_max
    assert len(l1) <= l1_max
    assert l1 == "" or l1.endswith("\n")


def test_heading_becomes_l0() -> None:
    l0, l1 = summarize(None, "# Deploying the API service\n\nRun make deploy. Then wait.\n")
    assert l0 == "Deploying the API service\n"
    assert l1 == "Deploying the API service\nRun make deploy.\n"


def test_short_heading_is_completed_by_the_next_sentence() -> None:
    l0, _ = summarize(TYPES["case"], "## Problem\nCI fails on a cold cache. It is slow.\n")
    assert l0 == "Problem: CI fails on a cold cache.\n"


def test_first_sentence_without_markup() -> None:
    text = "I use **vim** for [everything](http://x). It is fast.\n\nSecond paragraph.\n"
    l0, l1 = summarize(None, text)
    assert l0 == "I use vim for everything.\n"
    assert l1 == "I use vim for everything.\nSecond paragraph.\n"


def test_l1_lists_fields_headings_and_items() -> None:
    text = (
        "---\n"
        "value: vim\n"
        "topic: editor\n"
        "reason: |\n  Modal editing.\n  Everywhere.\n"
        "extra: [a, b]\n"
        "---\n"
        "# Editor\n\n"
        "Prefers vim over everything else. Has for years.\n\n"
        "## Plugins\n"
        "- fzf for files. Fast.\n"
        "- fugitive\n\n"
        "```\n:wq\n```\n"
    )
    l0, l1 = summarize(TYPES["preference"], text)
    assert l0 == "Editor: Prefers vim over everything else.\n"
    assert l1 == (
        "Editor: Prefers vim over everything else.\n"
        "- topic: editor\n"
        "- value: vim\n"
        "- reason: Modal editing. Everywhere.\n"
        "- extra: a, b\n"
        "## Plugins\n"
        "- fzf for files.\n"
        "- fugitive\n"
    )


def test_empty_body_uses_key_fields() -> None:
    l0, l1 = summarize(TYPES["preference"], "---\ntopic: editor\nvalue: vim\n---\n")
    assert l0 == "preference: editor = vim\n"
    assert l1 == "preference: editor = vim\n- topic: editor\n- value: vim\n"
    l0, _ = summarize(TYPES["profile"], "---\nname: Ada\nlanguages: [en, fr]\n---\n")
    assert l0 == "profile: name = Ada, languages = en, fr\n"
    l0, _ = summarize(TYPES["entity"], "---\nname: Ada\nkind: person\naliases: [AL]\n---\n")
    assert l0 == "entity: Ada (kind = person, aliases = AL)\n"


def test_never_empty_for_non_empty_input() -> None:
    assert summarize(None, "   \n")[0] == "(empty)\n"
    assert summarize(None, "---\n")[0] == "---\n"  # unclosed front matter is just text
    assert summarize(None, "***\n")[0] == "***\n"
    assert summarize(None, "") == ("", "")


def test_long_sentence_is_cut_at_a_word_boundary() -> None:
    text = "word " * 100
    l0, l1 = summarize(None, text)
    assert l0.endswith("…\n")
    assert len(l0) <= 120
    assert l0[:-2].endswith("word")
    one_word = "x" * 500
    l0, _ = summarize(None, one_word)
    assert l0 == "x" * 118 + "…\n"


def test_l1_is_cut_at_a_line_boundary() -> None:
    text = "\n\n".join(f"Paragraph number {i} says something. More." for i in range(200))
    l0, l1 = summarize(TYPES["case"], text)
    assert len(l1) <= 1500
    assert all(line.startswith("Paragraph number") for line in l1.splitlines())
    assert l1.splitlines()[-1].endswith("says something.")


def test_custom_limits() -> None:
    small = dataclasses.replace(TYPES["case"], l0_max_chars=20, l1_max_chars=50)
    l0, l1 = summarize(small, "# A rather long heading that will not fit\n\n" + "Text. " * 50)
    check_limits(l0, l1, 20, 50)
    assert l0 == "A rather long…\n"


def test_deterministic() -> None:
    text = "# T\n\n" + "\n".join(f"- item {i}. tail" for i in range(300))
    assert summarize(None, text) == summarize(None, text)


_markdown_bits = st.sampled_from(
    ["# ", "## ", "- ", "* ", "1. ", "> ", "```", "---", "...", "**", "`", "[a](b)", "\n",
     "\n\n", "\r\n", " ", "\t", "é", "…", "\u2028", "\x85", "\x1c", ". ", "A", "word"]
)  # fmt: skip
_odd_text = st.lists(st.one_of(_markdown_bits, st.text(max_size=20)), max_size=60).map("".join)


@settings(max_examples=300, deadline=None)
@given(
    text=st.one_of(_odd_text, st.text(max_size=3000)),
    front=st.one_of(
        st.just(""),
        st.just("---\ntopic: x\n---\n"),
        st.just("---\nvalue: |\n  multi\n  line\n---\n"),
    ),
    l0_max=st.integers(20, 200),
    l1_extra=st.integers(1, 600),
)
def test_limits_hold_for_any_input(text: str, front: str, l0_max: int, l1_extra: int) -> None:
    l1_max = max(50, l0_max + l1_extra)
    ctype = dataclasses.replace(TYPES["preference"], l0_max_chars=l0_max, l1_max_chars=l1_max)
    l2 = front + text
    l0, l1 = summarize(ctype, l2)
    if not l2:
        assert (l0, l1) == ("", "")
        return
    check_limits(l0, l1, l0_max, l1_max)
    assert l0.strip()
    assert l1.startswith(l0)


@pytest.mark.timeout(60)
def test_fast_enough() -> None:
    paragraph = "The agent retried the build with a warm cache and it passed. " * 3
    text = (
        "---\ntitle: flaky ci\ntags: [ci, cache]\n---\n# Flaky CI\n\n"
        + "\n\n".join(f"{paragraph}\n- item {i} with **markup**. more" for i in range(20))
    )[:4096]
    # Against a yardstick measured beside it (one regex pass over the same text), so a
    # busy or slow machine slows both alike: a summary costs about 2 such passes.
    start = time.process_time()
    for _ in range(2000):
        re.findall(r"\w+", text)
    yardstick = time.process_time() - start
    start = time.process_time()
    for _ in range(2000):
        summarize(TYPES["case"], text)
    spent = time.process_time() - start
    assert spent < 8 * yardstick, f"{spent:.3f}s for 2,000 summaries, yardstick {yardstick:.3f}s"
