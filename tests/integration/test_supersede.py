"""Updates supersede (docs/conversations.md#updates-supersede): a newer statement of a
fact replaces the older one in the memory's current view, the older stays in `.history`,
and the inbox report says what was replaced. A real mount; the transcripts go in through
the inbox and the offline rule extractor reads them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from contextfs.testing import Mount
from tests.integration.test_speakers import drop

pytestmark = pytest.mark.timeout(600)


def versions(node: Path) -> list[str]:
    hist = node / ".history"
    return [(hist / v).read_text() for v in sorted(os.listdir(hist), key=lambda v: int(v[1:-3]))]


@pytest.fixture(scope="module")
def mnt(tmp_path_factory) -> Mount:
    base = tmp_path_factory.mktemp("supersede")
    (base / "mnt").mkdir()
    m = Mount(base / "mnt", base / "data", search=True)
    m.start()
    march = ["I live in Oslo.", "I work as a data engineer.", "I love genmaicha tea."]
    drop(m, "default", "march.jsonl", [("Cy", t) for t in march], "2023-03-01T10:00:00")
    september = [
        "I moved to Lisbon last month.",
        "I work as a product manager now.",
        "I can't stand genmaicha tea any more.",
    ]
    drop(m, "default", "september.jsonl", [("Cy", t) for t in september], "2023-09-01T10:00:00")
    yield m
    if m.proc is not None:
        m.stop()
    assert m.fsck() == []


def test_the_profile_shows_the_newer_fact_and_history_keeps_the_older(mnt: Mount) -> None:
    profile = mnt.path / "user/default/profile"
    now = (profile / "L2.md").read_text()
    assert "location: Lisbon" in now and "role: product manager\n" in now, now
    # a profile fact is its field alone: the sentence is the turn's, found where it was said
    assert "I moved to Lisbon" not in now, now
    # the older statements are out of the current view, kept in its versions
    assert "Oslo" not in now and "data engineer" not in now, now
    older = versions(profile)
    assert any("location: Oslo" in v and "role: data engineer" in v for v in older), older


def test_a_changed_preference_replaces_the_older_in_the_same_node(mnt: Mount) -> None:
    prefs = mnt.path / "user/default/preferences"
    assert [n for n in os.listdir(prefs) if "genmaicha" in n] == ["genmaicha-tea"]
    now = (prefs / "genmaicha-tea/L2.md").read_text()
    assert "value: dislikes" in now and "I love" not in now, now
    assert any("value: loves" in v for v in versions(prefs / "genmaicha-tea"))


def test_the_inbox_report_says_what_was_replaced(mnt: Mount) -> None:
    report = (mnt.path / "user/default/.inbox/september.jsonl.report.md").read_text()
    assert "changed user/default/profile (location: Oslo → Lisbon)" in report, report
    assert "(role: data engineer → product manager)" in report, report
    assert "changed user/default/preferences/genmaicha-tea (value: loves → dislikes)" in report
    first = (mnt.path / "user/default/.inbox/march.jsonl.report.md").read_text()
    assert "→" not in first, first


def test_a_fact_taken_back_leaves_the_current_view_and_the_report_says_so(mnt: Mount) -> None:
    profile = mnt.path / "user/default/profile"
    drop(mnt, "default", "allergy-1.jsonl", [("Cy", "I'm allergic to penicillin and cats.")])
    drop(mnt, "default", "allergy-2.jsonl",
         [("Cy", "Turns out I'm not allergic to penicillin after all.")])  # fmt: skip
    now = (profile / "L2.md").read_text()
    assert "allergy: cats" in now and "penicillin" not in now, now
    assert any("allergy: penicillin, cats" in v for v in versions(profile))
    report = (mnt.path / "user/default/.inbox/allergy-2.jsonl.report.md").read_text()
    assert "changed user/default/profile (allergy: penicillin, cats → cats)" in report, report
    drop(mnt, "default", "allergy-3.jsonl", [("Cy", "I'm not allergic to cats either.")])
    assert "allergy" not in (profile / "L2.md").read_text()
    report = (mnt.path / "user/default/.inbox/allergy-3.jsonl.report.md").read_text()
    assert "changed user/default/profile (allergy: cats taken back)" in report, report


def test_a_changed_taste_replaces_the_older_one_in_one_node(mnt: Mount) -> None:
    prefs = mnt.path / "user/default/preferences"
    drop(mnt, "default", "taste-1.jsonl", [("Cy", "I love jazz."), ("Cy", "I love coffee.")])
    drop(mnt, "default", "taste-2.jsonl", [
        ("Cy", "I used to love jazz, but I can't stand it now."),
        ("Cy", "I don't drink coffee anymore, I switched to tea."),
    ])  # fmt: skip
    assert "value: dislikes" in (prefs / "jazz/L2.md").read_text()
    assert "coffee" not in os.listdir(prefs)
    drink = (prefs / "hot-drink/L2.md").read_text()
    assert "value: tea" in drink and "value: coffee" not in drink, drink
    report = (mnt.path / "user/default/.inbox/taste-2.jsonl.report.md").read_text()
    assert "changed user/default/preferences/jazz (value: loves → dislikes)" in report, report
    assert "changed user/default/preferences/hot-drink (value: coffee → tea)" in report, report
    # given up with nothing in its place: the value goes, no node is made for it
    drop(mnt, "default", "taste-3.jsonl", [("Cy", "The tea phase is over."),
                                           ("Cy", "I don't use zsh any more.")])  # fmt: skip
    assert "value:" not in (prefs / "hot-drink/L2.md").read_text()
    assert "shell" not in os.listdir(prefs)
    report = (mnt.path / "user/default/.inbox/taste-3.jsonl.report.md").read_text()
    assert "changed user/default/preferences/hot-drink (value: tea taken back)" in report, report
