"""A turn between two of a bundle's best turns is shown with them (docs/search.md, the
answer bundle): the reply in the middle of an exchange often says the answer in words the
question does not use ("It came to £19,400 …" between the question about the kitchen's
cost and the remark that it went over budget). A real mount with the real model, DuckDB,
tantivy and hnswlib; the transcript goes in through the inbox."""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path

import pytest

from contextfs.testing import Mount
from tests.integration.test_resolved_dates import chat_mount

pytestmark = pytest.mark.timeout(600)

SAID = "2024-07-30T19:00:00"
TURNS = [
    ("Callum", "The garden is next, but that can wait until spring."),
    ("Assistant", "How did the kitchen renovation cost compare with the kitchen budget?"),
    ("Callum", "It came to £19,400 with the joists and some extra sockets."),
    ("Assistant", "So the kitchen renovation cost went over the £18,000 kitchen budget."),
    ("Callum", "The kitchen tap drips again, by the way."),
    ("Assistant", "A washer usually fixes that."),
    ("Callum", "My sister's budget is tight this month."),
    ("Assistant", "Maybe she could plan meals for the week."),
    ("Callum", "The renovation of the library in town starts soon."),
    ("Assistant", "That will be nice once it reopens."),
    ("Callum", "Train tickets cost a fortune now."),
    ("Assistant", "A railcard could help with that."),
    ("Callum", "We compared three electricity tariffs last night."),
    ("Assistant", "Fixed tariffs are calmer if prices rise."),
    ("Callum", "Dev left his ladder in the kitchen."),
    ("Assistant", "He will probably pick it up on Monday."),
]


@pytest.fixture(scope="module")
def mnt(tmp_path_factory) -> Mount:
    yield from chat_mount(tmp_path_factory.mktemp("exchange"), TURNS, SAID, "S11", "Callum")


def ask(root: Path, budget: int, question: str) -> str:
    d = root / ".query" / f"@budget={budget}" / urllib.parse.quote(question, safe=" ?")
    return (d / "_context.md").read_text()


def shown_turns(context: str) -> list[str]:
    return re.findall(r"\[(S11:\d+)\]", context)


def test_the_reply_between_two_of_the_best_turns_is_shown(mnt: Mount) -> None:
    # the question and the remark after the reply say kitchen, renovation, cost and
    # budget; the reply says none of them, and the turns that say one of them outrank it
    context = ask(
        mnt.path / "user/default",
        150,
        "What did the kitchen renovation cost compared to the budget?",
    )
    assert {"S11:2", "S11:3", "S11:4"} <= set(shown_turns(context)), context
    assert "It came to £19,400" in context, context


def test_a_bigger_budget_still_shows_each_turn_once(mnt: Mount) -> None:
    context = ask(mnt.path / "user/default", 2000, "kitchen renovation budget")
    turns = shown_turns(context)
    assert len(turns) == len(set(turns)), context
    assert "S11:3" in turns, context
