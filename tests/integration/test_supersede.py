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
