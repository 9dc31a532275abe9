"""Resolved time in bundles (docs/search.md#dates-a-turn-says-relatively): a turn that
says "yesterday" or "on Saturday" is shown with the day it means, counted from the day
it was said, so a bundle answers "when" in the words an answer uses. A real mount with
the real model, DuckDB, tantivy and hnswlib; the transcript goes in through the inbox."""

from __future__ import annotations

import json
import os
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

from contextfs.testing import Mount
from tests.integration.test_relevance import wait_indexed

pytestmark = pytest.mark.timeout(600)

SAID = "2023-05-09T10:00:00"  # a Tuesday
TURNS = [
    ("Efua", "Okay, so. I did a thing. I handed in my notice yesterday."),
    ("Theo", "Wow! How did the people at Fernhill take the news?"),
    ("Efua", "Better than expected. And Idris proposed on Saturday, on the pier at Clevedon!"),
    ("Theo", "Congratulations to you both, that is wonderful."),
    ("Efua", "We fly out this Monday to see his parents in Accra."),
]


def ask(root: Path, question: str) -> str:
    d = root / ".query" / urllib.parse.quote(question, safe=" ?',")
    return (d / "_context.md").read_text()


def chat_mount(
    base: Path, turns: list[tuple[str, str]], said: str, session: str, user: str
) -> Iterator[Mount]:
    """A mount with search whose default owner's inbox was handed `turns` (speaker, text)
    as one JSONL transcript said at `said`, turn ids `<session>:1`, `<session>:2`, …
    (`user` speaks as role user, the others as assistant), once it is indexed; stopped and
    checked after."""
    lines = "".join(
        json.dumps(
            {
                "role": "user" if who == user else "assistant",
                "name": who,
                "content": text,
                "timestamp": said,
                "id": f"{session}:{i + 1}",
            }
        )
        + "\n"
        for i, (who, text) in enumerate(turns)
    )
    yield from inbox_mount(base, {"chat.jsonl": lines})


def inbox_mount(base: Path, files: dict[str, str]) -> Iterator[Mount]:
    """A mount with search whose default owner's inbox was handed `files` (name, text),
    once they are filed and indexed; stopped and checked after."""
    (base / "mnt").mkdir()
    m = Mount(base / "mnt", base / "data", search=True)
    m.start()
    for name, text in files.items():
        fd = os.open(m.path / "user/default/.inbox" / name, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
    wait_indexed(m)
    yield m
    if m.proc is not None:
        m.stop()
    assert m.fsck() == []


@pytest.fixture(scope="module")
def mnt(tmp_path_factory) -> Mount:
    yield from chat_mount(tmp_path_factory.mktemp("dates"), TURNS, SAID, "S4", "Efua")


def test_a_turn_shows_the_day_its_relative_words_mean(mnt: Mount) -> None:
    context = ask(mnt.path, "When did Efua hand in her notice?")
    # the turn as it was said, then the day "yesterday" was
    line = next(ln for ln in context.splitlines() if "handed in my notice" in ln)
    assert line.endswith("I handed in my notice yesterday. [yesterday = Monday 8 May 2023]"), line


def test_a_past_weekday_is_the_one_before_and_a_coming_one_the_one_after(mnt: Mount) -> None:
    context = ask(mnt.path, "When did Idris propose to Efua?")
    line = next(ln for ln in context.splitlines() if "proposed" in ln)
    assert line.endswith("[on Saturday = Saturday 6 May 2023]"), line
    context = ask(mnt.path, "When does Efua fly to Accra?")
    line = next(ln for ln in context.splitlines() if "fly out" in ln)
    assert line.endswith("[this Monday = Monday 15 May 2023]"), line


def test_a_turn_with_no_time_words_is_shown_as_said(mnt: Mount) -> None:
    context = ask(mnt.path, "How did Fernhill take the news?")
    line = next(ln for ln in context.splitlines() if "people at Fernhill" in ln)
    assert line.endswith("How did the people at Fernhill take the news?"), line


def test_a_memory_a_turn_shown_says_already_is_shown_once(mnt: Mount) -> None:
    # the rules made an event of "I handed in my notice yesterday", dated 8 May 2023; the
    # turn it came from says the same and more (who, when): the bundle shows the turn only
    events = mnt.path / "user/default/events"
    [notice] = [p.name for p in events.iterdir() if "notice" in p.name]
    assert notice.startswith("2023-05-08-"), notice
    d = mnt.path / ".query" / urllib.parse.quote("When did Efua hand in her notice?", safe=" ?',")
    context = (d / "_context.md").read_text()
    hits = json.loads((d / "_results.json").read_text())["hits"]
    assert any(h["path"].endswith(notice) for h in hits), hits  # found, as a hit
    assert context.count("I handed in my notice yesterday.") == 1, context
    assert "[yesterday = Monday 8 May 2023]" in context


# A chat app's text export (WhatsApp on an iPhone), and a markdown chat whose title says
# its day: each message with its speaker and time, relative days counted from those
WHATSAPP = """\
[07/09/2026, 18:03] Jonas: How's Oslo?? I live in Bergen now, you know.
[07/09/2026, 18:04] Kari: Lovely! Lars booked it yesterday.
[07/09/2026, 18:05] Kari: We're flying to Ålesund on 22 December.
[21/10/2026, 09:12] Kari: My dentist appointment is next Tuesday at 10.
[21/10/2026, 09:13] Kari: Sorry, I meant Wednesday, not Tuesday.
[21/10/2026, 09:14] Jonas: Got it, Wednesday at 10.
"""
PRIYA = """\
# Chat with Priya — 14 May 2026

**Priya:** Are you still coming to Lisbon?

**Me:** Yes! I'll book the flights tomorrow.
"""


@pytest.fixture(scope="module")
def chats(tmp_path_factory) -> Iterator[Mount]:
    files = {"WhatsApp Chat with Jonas.txt": WHATSAPP, "priya.md": PRIYA}
    yield from inbox_mount(tmp_path_factory.mktemp("chats"), files)


def test_a_whatsapp_export_is_read_message_by_message(chats: Mount) -> None:
    """Each line a turn of its speaker at its time: the archive is of the day the chat
    began, "yesterday" is the day before the message, Jonas's facts are his."""
    me = chats.path / "user/default"
    report = (me / ".inbox/WhatsApp Chat with Jonas.txt.report.md").read_text()
    assert "state: done (chat, 6 turns" in report, report
    sessions = os.listdir(me / "sessions")
    assert any(s.startswith("2026-09-07-") for s in sessions), sessions
    events = os.listdir(me / "events")
    assert any(e.startswith("2026-09-06-") and "booked" in e for e in events), events
    assert any(e.startswith("2026-12-22-") and "lesund" in e for e in events), events
    jonas = (me / "entities/jonas/L2.md").read_text()
    assert "location: Bergen" in jonas, jonas
    profile = me / "profile/L2.md"
    assert not profile.exists() or "Bergen" not in profile.read_text()


def test_a_weekday_meant_instead_is_the_coming_one(chats: Mount) -> None:
    """Said on Wednesday 21 October: "I meant Wednesday" and "Got it, Wednesday at 10"
    are the 28th, not the Wednesday before."""
    context = ask(chats.path, "When is Kari's dentist appointment?")
    meant = next(ln for ln in context.splitlines() if "I meant Wednesday" in ln)
    assert meant.endswith(
        "[Wednesday = Wednesday 28 October 2026; Tuesday = Tuesday 27 October 2026]"
    ), context
    got = next(ln for ln in context.splitlines() if "Got it, Wednesday" in ln)
    assert got.endswith("[Wednesday = Wednesday 28 October 2026]"), context
    events = os.listdir(chats.path / "user/default/events")
    assert any(e.startswith("2026-10-27-") and "dentist" in e for e in events), events


def test_a_markdown_chat_is_of_the_day_its_title_names(chats: Mount) -> None:
    me = chats.path / "user/default"
    sessions = os.listdir(me / "sessions")
    assert any(s.startswith("2026-05-14-") for s in sessions), sessions
    events = os.listdir(me / "events")
    assert any(e.startswith("2026-05-15-") and "flights" in e for e in events), events
