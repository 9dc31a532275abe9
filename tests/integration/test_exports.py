"""The formats people have, through a real mount: ChatGPT and Claude data exports and
OpenAI `messages` lists in the inbox, each conversation its own dated session, processed
one at a time with progress, and resumed after an unmount without filing any twice."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from contextfs.testing import Mount

EXPORTS = Path(__file__).resolve().parents[1] / "corpus" / "exports"


def wait_for(fn, timeout: float = 60.0, every: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        assert time.monotonic() < deadline, "timed out"
        time.sleep(every)


def finished(inbox: Path, name: str, timeout: float = 60.0) -> str:
    def read():
        text = (inbox / f"{name}.report.md").read_text()
        return text if re.search(r"^(state: done|refused:)", text, re.M) else None

    return wait_for(read, timeout)


def sessions(mnt: Path, owner: str = "user/default") -> dict[str, str]:
    """Session directory name -> its L2 text."""
    d = mnt / owner / "sessions"
    return {p.name: (p / "L2.md").read_text() for p in sorted(d.iterdir())} if d.exists() else {}


def title_of(l2: str) -> str:
    m = re.search(r"^title: (.*)$", l2, re.M)
    assert m, l2[:300]
    return m.group(1).strip().strip("'\"")


@pytest.fixture
def mnt(tmp_path):
    data = tmp_path / "data"
    m = Mount(tmp_path / "mnt", data)
    (tmp_path / "mnt").mkdir()
    m.start()
    yield m
    if m.proc is not None:
        m.stop()
    assert m.fsck() == []


def test_chatgpt_export_each_conversation_its_own_dated_session(mnt):
    inbox = mnt.path / ".inbox"
    shutil.copyfile(EXPORTS / "chatgpt-conversations.json", inbox / "conversations.json")
    rep = finished(inbox, "conversations.json")
    assert "state: done (ChatGPT export, 3 conversations, 10 turns, extraction: " in rep, rep
    assert "3 of 3 conversations archived:" in rep
    got = sessions(mnt.path)
    assert sorted(got) == [
        "2023-03-14-moving-to-lisbon",
        "2023-04-13-rex-at-the-park",
        "2023-11-14-publishing-a-package",
    ], got.keys()
    for name in got:
        assert f"- user/default/sessions/{name}" in rep
    lisbon = got["2023-03-14-moving-to-lisbon"]
    assert title_of(lisbon) == "Moving to Lisbon"
    # the branch the user saw last, every turn with its time and id
    assert "tea over coffee" in lisbon and "coffee over tea" not in lisbon
    assert "2023-03-14T10:00:00Z" in lisbon and "id u2-new" in lisbon
    assert "[image_asset_pointer]" in got["2023-04-13-rex-at-the-park"]
    # extraction ran per conversation, with provenance to the export's turns
    u = mnt.path / "user/default"
    assert "created user/default/entities/rex" in rep
    assert "golden retriever" in (u / "entities/rex/L2.md").read_text()
    assert "inbox:conversations.json#p1" in (u / "entities/rex/meta.yaml").read_text()
    assert "Lisbon" in (u / "profile/L2.md").read_text()
    assert "inbox: done=1" in mnt.status()


def test_claude_export_and_openai_messages(mnt):
    inbox = mnt.path / ".inbox"
    for name in ("claude-conversations.json", "openai-messages.json"):
        shutil.copyfile(EXPORTS / name, inbox / name)
    shutil.copyfile(EXPORTS / "openai-messages-object.json", inbox / "weekend.json")
    rep = finished(inbox, "claude-conversations.json")
    assert "state: done (Claude export, 2 conversations, 5 turns" in rep, rep
    rep = finished(inbox, "openai-messages.json")
    assert "state: done (OpenAI messages, 5 turns, extraction: " in rep, rep
    rep = finished(inbox, "weekend.json")
    assert "state: done (OpenAI messages, 4 turns" in rep, rep
    got = {title_of(l2): name for name, l2 in sessions(mnt.path).items()}
    today = time.strftime("%Y-%m-%d", time.gmtime())
    assert got["Balcony garden"] == "2024-05-02-balcony-garden"
    # a conversation the export leaves untitled is named after the file and its place
    assert got["claude-conversations 2"] == "2024-06-10-claude-conversations-2"
    assert got["Weekend plans"] == "2024-06-01-weekend-plans"  # the object's `created`
    assert got["openai-messages"] == f"{today}-openai-messages"  # no time: the day it came
    u = mnt.path / "user/default"
    assert (u / "entities/emma").is_dir() and (u / "entities/miso").is_dir()
    profile = (u / "profile/L2.md").read_text()
    assert "Pune" in profile and "data engineer" in profile


def test_an_unknown_json_shape_is_refused_with_a_reason(mnt):
    inbox = mnt.path / ".inbox"
    (inbox / "settings.json").write_text(json.dumps({"theme": "dark", "font": 12}, indent=2))
    rep = finished(inbox, "settings.json")
    assert rep.startswith("refused: an object with keys 'theme', 'font' is not a conversation")
    assert "ChatGPT or Claude data export" in rep
    assert "refused=1" in mnt.status()
    assert sessions(mnt.path) == {}


def big_export(n: int, turns: int) -> list[dict]:
    """A ChatGPT export of n conversations, each a chain of `turns` messages."""
    out = []
    for c in range(n):
        start = 1_600_000_000 + c * 86_400
        mapping: dict[str, dict] = {f"c{c}-root": {"message": None, "parent": None}}
        parent = f"c{c}-root"
        for t in range(turns):
            nid = f"c{c}-m{t}"
            role = "user" if t % 2 == 0 else "assistant"
            text = (
                f"In conversation {c} I mention my colleague Person{c}x{t} who likes "
                "long walks by the river, fresh bread and a quiet evening with a book. " * 3
            )
            mapping[nid] = {
                "id": nid,
                "message": {
                    "id": nid,
                    "author": {"role": role},
                    "create_time": start + t,
                    "content": {"content_type": "text", "parts": [text]},
                    "metadata": {},
                },
                "parent": parent,
                "children": [],
            }
            mapping[parent]["children"] = [nid]
            parent = nid
        out.append(
            {
                "title": f"Conversation {c:02d}",
                "create_time": start,
                "mapping": mapping,
                "current_node": parent,
                "conversation_id": f"conv-{c}",
            }
        )
    return out


def test_an_export_resumes_after_an_unmount_with_nothing_filed_twice(mnt, tmp_path):
    n = 40
    src = tmp_path / "export.json"
    src.write_text(json.dumps(big_export(n, 40)))
    inbox = mnt.path / ".inbox"
    shutil.copyfile(src, inbox / "conversations.json")

    def under_way():
        text = (inbox / "conversations.json.report.md").read_text()
        m = re.search(r"^state: processing \((\d+) of (\d+) conversations\)", text, re.M)
        return (int(m.group(1)), text) if m and int(m.group(1)) > 0 else None

    done, text = wait_for(under_way, timeout=120)
    assert f"of {n} conversations" in text
    status = mnt.status()
    assert re.search(rf"inbox: processing conversations.json \(\d+ of {n} conversations\)", status)
    t0 = time.monotonic()
    mnt.stop()  # a clean unmount in the middle of the export: it stops between two
    assert time.monotonic() - t0 < 5
    # the next mount goes on after the last conversation filed
    mnt.start()
    rep = finished(inbox, "conversations.json", timeout=180)
    m = re.search(
        r"conversations.json: resuming after (\d+) of 40 conversations", mnt.log.read_text()
    )
    assert m, mnt.log.read_text()[-3000:]
    assert done <= int(m.group(1)) < n
    assert f"state: done (ChatGPT export, {n} conversations, {n * 40} turns" in rep, rep
    assert f"{n} of {n} conversations archived:" in rep
    assert f"- … and {n - 20} more" in rep  # thousands are listed compactly
    titles = sorted(title_of(l2) for l2 in sessions(mnt.path).values())
    assert titles == [f"Conversation {c:02d}" for c in range(n)]  # none twice, none lost


def test_ingest_wait_shows_the_conversations_of_an_export(mnt, tmp_path):
    src = tmp_path / "conversations.json"
    src.write_text(json.dumps(big_export(12, 40)))
    r = subprocess.run(
        [sys.executable, "-m", "contextfs", "ingest", str(mnt.path), str(src), "--wait"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert r.returncode == 0, r.stderr
    assert re.search(r"conversations.json: \[#+\] 12/12 conversations", r.stderr), r.stderr
    assert "ingested 1 file(s), refused 0" in r.stdout
    assert len(sessions(mnt.path)) == 12


@pytest.mark.timeout(600)
def test_a_big_export_is_redacted_off_the_event_loop_and_an_oversize_one_is_refused(mnt, tmp_path):
    """A file of megabytes handed in is redacted in a worker thread at its close and
    stored a few MiB a transaction (the mount answers meanwhile), whole and without its
    secret; one past `max_inbox_size` is refused with EFBIG and nothing is stored."""
    key = "sk-proj-Zq81mVw0xR4tYp2LkJh7Gf6DsA3Qw9EeRr5TtYy1UuIi"
    convs = [
        {
            "title": f"Chat {i}",
            "create_time": 1_700_000_000 + i * 86_400,
            "mapping": {
                "a": {"id": "a", "message": None, "parent": None, "children": ["b"]},
                "b": {
                    "id": "b",
                    "parent": "a",
                    "children": [],
                    "message": {
                        "author": {"role": "user"},
                        "create_time": 1_700_000_000 + i * 86_400,
                        "content": {
                            "content_type": "text",
                            "parts": [
                                "Notes on the harbour lanterns. " * 420
                                + (f"My key is {key}." if i == 399 else "")
                            ],
                        },
                    },
                },
            },
            "current_node": "b",
        }
        for i in range(400)
    ]
    raw = json.dumps(convs).encode()
    assert len(raw) > 4 * 1024 * 1024  # past BIG_INBOX_FILE, and stored in several steps
    inbox = mnt.path / ".inbox"
    (inbox / "conversations.json").write_bytes(raw)
    stored = (inbox / "conversations.json").read_bytes()
    assert key.encode() not in stored
    half = len(raw) // 2  # the key is in the last conversation: the first half is as sent
    assert stored[:half] == raw[:half] and stored.count(b"harbour") == raw.count(b"harbour")
    # 400 archives filed: 75 s in one process here, past 120 s on two busy workers
    assert "state: done" in finished(inbox, "conversations.json", timeout=480)
    assert "redactions: 1 this run" in (mnt.path / ".status").read_text()

    mnt.stop()
    (mnt.data_dir / "config.yaml").write_text("search: false\nmax_inbox_size: 100000\n")
    mnt.start()
    with pytest.raises(OSError) as err:
        (inbox / "big.json").write_bytes(raw)
    assert err.value.errno == 27  # EFBIG
    assert not (inbox / "big.json.report.md").exists()  # never handed in
