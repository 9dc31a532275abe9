"""Memory from conversations (SPEC §5, §6) on a real mount: inbox, sessions, extraction
(rules offline; an LLM through a local OpenAI-compatible server), redaction everywhere."""

from __future__ import annotations

import errno
import json
import os
import random
import re
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from contextfs.testing import Mount, proc_status
from tests.fake_openai import FakeOpenAI

CHAT = [
    {
        "role": "user",
        "content": "Hi, my name is Ada Lovelace and I live in London.",
        "timestamp": "2026-11-20T10:00:00Z",
        "id": "m1",
    },
    {
        "role": "assistant",
        "content": "Nice to meet you, Ada.",
        "timestamp": "2026-11-20T10:00:05Z",
        "id": "m2",
    },
    {
        "role": "user",
        "content": "I prefer tea over coffee. My dog Rex is a golden retriever.",
        "timestamp": "2026-11-20T10:01:00Z",
        "id": "m3",
    },
    {
        "role": "tool",
        "name": "calendar",
        "input": {"q": "next week"},
        "output": {"events": 2},
        "timestamp": "2026-11-20T10:02:00Z",
        "id": "m4",
    },
]


def jsonl(turns: list[dict]) -> str:
    return "".join(json.dumps(t) + "\n" for t in turns)


def wait_for(fn, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def report(inbox: Path, name: str) -> str:
    def done():
        text = (inbox / f"{name}.report.md").read_text()
        return text if "state: done" in text or "refused" in text else None

    return wait_for(done)


def make_mount(tmp_path: Path, config: str) -> Mount:
    data = tmp_path / "data"
    data.mkdir()
    (data / "config.yaml").write_text(config)
    (tmp_path / "mnt").mkdir()
    m = Mount(tmp_path / "mnt", data)
    m.start()
    return m


@pytest.fixture
def convo(tmp_path):
    m = make_mount(tmp_path, "search: false\nsession_extract_every: 3\n")
    yield m
    if m.proc is not None:
        m.stop()
    assert m.fsck() == []


def test_inbox_transcript_is_archived_and_extracted(convo):
    inbox = convo.path / ".inbox"
    text = jsonl(CHAT[:2]) + "this line is not json\n" + jsonl(CHAT[2:])
    (inbox / "chat.jsonl").write_text(text)
    rep = report(inbox, "chat.jsonl")
    assert "state: done (jsonl, 4 turns" in rep
    assert "line 3: not JSON" in rep, "malformed lines are reported by number"
    u = convo.path / "user/default"
    assert "created user/default/entities/rex" in rep
    # the raw record: every turn with its timestamp and id
    [session] = list((u / "sessions").iterdir())
    l2 = (session / "L2.md").read_text()
    for t in CHAT:
        assert t["id"] in l2 and t["timestamp"] in l2
    assert "golden retriever" in l2 and '"events": 2' in l2
    # extracted memories, with provenance
    assert "London" in (u / "profile/L2.md").read_text()
    rex = u / "entities/rex"
    assert "golden retriever" in (rex / "L2.md").read_text()
    assert "inbox:chat.jsonl#m3" in (rex / "meta.yaml").read_text()
    prefs = [p.name for p in (u / "preferences").iterdir()]
    assert prefs and any("tea" in (u / "preferences" / p / "L2.md").read_text() for p in prefs)
    # what was handed in stays readable, and the inbox survives a remount
    assert (inbox / "chat.jsonl").read_text() == text
    convo.remount()
    assert "state: done" in (inbox / "chat.jsonl.report.md").read_text()


def test_what_the_owner_says_of_themself_lands_in_their_profile_and_pets_in_an_entity(convo):
    """Every speaker's own node, through the mount: the owner's allergy and diet in the
    profile; the dog they named an entity of its own, breed and all."""
    chat = [
        {"role": "user", "id": "a1", "timestamp": "2026-11-20T10:00:00Z",
         "content": "I'm allergic to cashews, so please don't suggest cashew sauces."},
        {"role": "assistant", "id": "a2", "timestamp": "2026-11-20T10:00:05Z",
         "content": "Noted, no cashews."},
        {"role": "user", "id": "a3", "timestamp": "2026-11-20T10:01:00Z",
         "content": "I'm vegetarian, by the way. Biscuit, our beagle, stares at me while I cook."},
        {"role": "user", "id": "a4", "timestamp": "2026-11-20T10:02:00Z",
         "content": "Ines is allergic to shellfish."},
    ]  # fmt: skip
    inbox = convo.path / ".inbox"
    (inbox / "self.jsonl").write_text(jsonl(chat))
    assert "state: done" in report(inbox, "self.jsonl")
    u = convo.path / "user/default"
    profile = (u / "profile/L2.md").read_text()
    assert "allergy: cashews" in profile and "diet: vegetarian" in profile, profile
    assert "shellfish" not in profile, profile
    biscuit = (u / "entities/biscuit/L2.md").read_text()
    assert "kind: animal" in biscuit and "breed: beagle" in biscuit, biscuit
    assert "inbox:self.jsonl#a3" in (u / "entities/biscuit/meta.yaml").read_text()
    assert "allergy: shellfish" in (u / "entities/ines/L2.md").read_text()


def test_inbox_per_owner_and_other_formats(convo):
    (convo.path / "user/bob").mkdir()
    inbox = convo.path / "user/bob/.inbox"
    (inbox / "notes.md").write_text("**User:** I live in Oslo.\n\n**Assistant:** Noted.\n")
    rep = report(inbox, "notes.md")
    assert "state: done (markdown" in rep
    assert "Oslo" in (convo.path / "user/bob/profile/L2.md").read_text()
    (inbox / "plain.txt").write_text("I prefer dark chocolate over milk chocolate.\n")
    assert "state: done (text" in report(inbox, "plain.txt")


def test_copiers_that_set_the_mode_after_closing_hand_a_file_in(convo, tmp_path):
    """Python's shutil.copy (copyfile, then chmod) and cp -p into an inbox succeed; the
    item stays read-only."""
    src = tmp_path / "chat.jsonl"
    src.write_text(jsonl(CHAT))
    src.chmod(0o640)
    inbox = convo.path / ".inbox"
    shutil.copy(src, inbox / "a.jsonl")
    subprocess.run(["cp", "-p", str(src), str(inbox / "b.jsonl")], check=True)
    for name in ("a.jsonl", "b.jsonl"):
        assert "state: done (jsonl, 4 turns" in report(inbox, name)
        assert stat.S_IMODE((inbox / name).stat().st_mode) == 0o444
        assert (inbox / name).read_text() == src.read_text()


def test_secret_files_and_unknown_kinds_are_refused_with_reason(convo):
    inbox = convo.path / ".inbox"
    # close() answers the refusal (EACCES for a secret store, EOPNOTSUPP for an unknown
    # kind); the item and its report stay
    with pytest.raises(PermissionError):
        (inbox / ".env").write_text(
            "OPENAI_API_KEY=sk-proj-0123456789abcdefghijklmnopqrstuvwxyzAB\n"
        )
    assert "refused" in report(inbox, ".env") and "environment" in report(inbox, ".env")
    assert (inbox / ".env").read_bytes() == b"", "a secret store is not kept"
    with pytest.raises(PermissionError):
        (inbox / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n")
    assert "refused" in report(inbox, "id_rsa")
    with pytest.raises(OSError) as err:
        (inbox / "data.bin").write_bytes(b"\x00\x01")
    assert err.value.errno == errno.EOPNOTSUPP
    assert "refused" in report(inbox, "data.bin")
    assert "inbox: " in convo.status() and "refused=3" in convo.status()
    # nothing of a secret store was kept: its empty item can go (with its report); an
    # item whose bytes are kept is the record of what was handed in, and stays
    os.unlink(inbox / ".env")
    assert ".env" not in os.listdir(inbox) and ".env.report.md" not in os.listdir(inbox)
    for kept in ("data.bin", "id_rsa.report.md"):
        with pytest.raises(PermissionError):
            os.unlink(inbox / kept)
    assert "inbox items are kept" in convo.status()
    # a name the report of another item takes is refused, not hidden behind that report
    with pytest.raises(OSError) as err:
        (inbox / "a.jsonl.report.md").write_text("my own report\n")
    assert err.value.errno == errno.EINVAL
    assert "names ending in .report.md are the inbox's reports" in convo.status()


def test_session_lifecycle(convo):
    u = convo.path / "user/default"
    (u / "profile/L2.md").write_text("---\nname: Ada\n---\nWorks on the analytical engine.\n")
    (u / "preferences/drink").mkdir()
    (u / "preferences/drink/L2.md").write_text("Prefers green tea in the afternoon.\n")
    s = convo.path / ".sessions/s1"
    s.mkdir()
    assert sorted(os.listdir(s)) == ["context.md", "control", "transcript.jsonl"]
    context = (s / "context.md").read_text()
    assert "## Profile" in context and "analytical engine" in context
    turns = [
        {"role": "user", "content": f"I live in Paris. Note {i}.", "id": f"t{i}"} for i in range(3)
    ]
    with open(s / "transcript.jsonl", "a") as f:
        for t in turns:
            f.write(json.dumps(t) + "\n")
            f.flush()
    assert (s / "transcript.jsonl").read_text() == jsonl(turns)
    # three pending turns: extraction runs in the background
    wait_for(lambda: "Paris" in (u / "profile/L2.md").read_text())
    # rewriting history is refused: the transcript is append-only
    with pytest.raises(OSError):
        (s / "transcript.jsonl").write_text("{}\n")
    (s / "control").write_text("compact\n")
    assert (s / "transcript.jsonl").read_text() == ""
    with open(s / "transcript.jsonl", "a") as f:
        f.write(
            json.dumps({"role": "user", "content": "My sister Emma lives in Seville.", "id": "t9"})
            + "\n"
        )
    subprocess.run(["rmdir", str(s)], check=True)
    assert not s.exists()
    # the compacted turns were archived at the compact, the rest at the end: every turn
    # once, in two parts (`cat` of both reads the whole session)
    parts = sorted(p for p in (u / "sessions").iterdir() if "-s1" in p.name)
    assert [p.name[11:] for p in parts] == ["s1", "s1-part-2"]
    archived = parts[-1]
    l2s = [(p / "L2.md").read_text() for p in parts]
    assert all("summary:" in t for t in l2s)
    assert [t.count("**user** · id t") for t in l2s] == [3, 1] and "id t9" in l2s[1]
    assert (u / "entities/emma").is_dir(), "ending extracts what was pending"
    convo.remount()
    assert archived.is_dir() and not s.exists()


def fake_llm() -> FakeOpenAI:
    """/v1/chat/completions answering with canned memories; one is invalid on purpose."""

    def respond(body: dict) -> dict:
        system = body["messages"][0]["content"]
        if '"l0"' in system:  # a summary request
            memories = {
                "l0": "LLM abstract: a preference about editors",
                "l1": "LLM overview\n- editor: helix",
            }
        else:
            memories = {
                "memories": [
                    {
                        "type": "preference",
                        "fields": {"topic": "editor", "value": "helix"},
                        "body": "Uses the helix editor.",
                        "turns": ["m1"],
                        "confidence": 0.9,
                    },
                    {"type": "nonsense", "fields": {}, "body": "x"},
                ]
            }
        return {
            "id": "c1",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": json.dumps(memories)},
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }

    return FakeOpenAI("/v1/chat/completions", respond)


@pytest.mark.allow_warnings
def test_llm_extraction_through_an_openai_compatible_endpoint(tmp_path, monkeypatch):
    llm = fake_llm()
    monkeypatch.setenv("FAKE_LLM_KEY", "sk-test")
    m = make_mount(
        tmp_path,
        f"search: false\nllm_base_url: {llm.url}\nllm_model: tiny\nllm_api_key_env: FAKE_LLM_KEY\n",
    )
    try:
        inbox = m.path / ".inbox"
        (inbox / "c.jsonl").write_text(
            jsonl([{"role": "user", "content": "I use helix.", "id": "m1"}])
        )
        rep = report(inbox, "c.jsonl")
        assert "extraction: LLMExtractor" in rep
        assert "helix" in (m.path / "user/default/preferences/editor/L2.md").read_text()
        assert llm.bodies and "preference" in json.dumps(llm.bodies[0]["messages"])
        # the LLM also writes L0/L1 in the background
        l0 = m.path / "user/default/preferences/editor/L0.md"
        wait_for(lambda: "LLM abstract" in l0.read_text())
        assert "LLM overview" in (l0.parent / "L1.md").read_text()
        assert "l0_pinned: false" in (l0.parent / "meta.yaml").read_text()
        llm.close()  # the endpoint goes away: rules take over
        llm.server.server_close()
        m.expect_log.append("using rules")
        (inbox / "d.jsonl").write_text(
            jsonl([{"role": "user", "content": "My name is Grace Hopper."}])
        )
        rep = report(inbox, "d.jsonl")
        assert "extraction: rules (the LLM failed" in rep
        assert "Grace Hopper" in (m.path / "user/default/profile/L2.md").read_text()
    finally:
        m.stop()
    assert m.fsck() == []


SECRETS = {
    "openai": "sk-proj-Zq81mVw0xR4tYp2LkJh7Gf6DsA3Qw9EeRr5TtYy1UuIi",
    "anthropic": "sk-ant-api03-Xy7wVb5nM3kL1jH9gF7dS5aQ3wE1rT9yU7iO5pA3sD1fG9hJ7kL5zX3cV1bN",
    "aws": "AKIAQWERTYUIOPASDFGH",
    "github": "ghp_Ab3De5Fg7Hi9Jk1Lm3No5Pq7Rs9Tu1Vw3Xy5Z",
    "stripe": "sk_live_51Hq2Lm3No4Pq5Rs6Tu7Vw8Xy9Za",
    "password": "Tr0ub4dor&3xyz",
}


def test_no_planted_secret_reaches_the_data_dir(tmp_path):
    """Every writer: L2, a routed file, an attachment, a pending drop, a refused write,
    the inbox and a session. Then grep everything on disk: DuckDB, WAL, index files."""
    m = make_mount(tmp_path, "search: true\nsession_extract_every: 1\n")
    u = m.path / "user/default"
    try:
        (u / "preferences/keys").mkdir()
        (u / "preferences/keys/L2.md").write_text(f"Our key is {SECRETS['openai']} for now.\n")
        (u / "preferences/cloud.md").write_text(
            f"---\nvalue: aws\n---\nUse {SECRETS['aws']} in staging.\n"
        )
        (u / "preferences/keys/config.env.txt").write_text(
            f"GITHUB_TOKEN={SECRETS['github']}\npassword={SECRETS['password']}\n"
        )
        fd = os.open(u / "preferences/pending.md", os.O_WRONLY | os.O_CREAT)
        os.write(fd, f"Stripe: {SECRETS['stripe']}\n".encode())
        os.fsync(fd)  # stored as a pending drop before it is routed
        os.close(fd)
        with pytest.raises(OSError):  # refused (bad front matter): its bytes are kept
            (u / "preferences/bad.md").write_text(f"---\nnope: [\n---\n{SECRETS['anthropic']}\n")
        (m.path / ".inbox/chat.jsonl").write_text(
            jsonl([{"role": "user", "content": f"my password={SECRETS['password']} ok", "id": "a"}])
        )
        report(m.path / ".inbox", "chat.jsonl")
        (m.path / ".sessions/s").mkdir()
        with open(m.path / ".sessions/s/transcript.jsonl", "a") as f:
            f.write(json.dumps({"role": "user", "content": f"key {SECRETS['github']}"}) + "\n")
        # what a reader sees is redacted too
        assert SECRETS["openai"] not in (u / "preferences/keys/L2.md").read_text()
        assert "[REDACTED:openai_key]" in (u / "preferences/keys/L2.md").read_text()
        assert SECRETS["github"] not in (u / "preferences/keys/config.env.txt").read_text()
        subprocess.run(["rmdir", str(m.path / ".sessions/s")], check=True)
        status = m.status()
        assert "redactions:" in status and "redactions: 0 this run" not in status
    finally:
        m.stop()
    found = []
    for path in m.data_dir.rglob("*"):
        if path.is_file():
            blob = path.read_bytes()
            found += [
                f"{name} in {path}" for name, secret in SECRETS.items() if secret.encode() in blob
            ]
    assert found == []
    assert m.fsck() == []


def test_contextfs_ingest_command_shows_progress_and_waits(convo, tmp_path):
    files = []
    for i in range(3):
        f = tmp_path / f"t{i}.jsonl"
        f.write_text(jsonl([{"role": "user", "content": f"My colleague Priya{i} is great."}]))
        files.append(str(f))
    cmd = [sys.executable, "-m", "contextfs", "ingest", str(convo.path)]
    r = subprocess.run([*cmd, *files, "--wait"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "ingest [" in r.stderr and "3/3 files" in r.stderr
    assert "ingested 3 file(s), refused 0" in r.stdout
    # a file the inbox refuses at close is counted, not a crash
    (tmp_path / "a.pdf").write_bytes(b"%PDF-1.4\n")
    r = subprocess.run(
        [*cmd, str(tmp_path / "a.pdf"), "--wait"], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 1 and "ingested 0 file(s), refused 1" in r.stdout, r.stderr
    # without --wait too: a file refused when handed in is said, and the exit is 1
    r = subprocess.run([*cmd, str(tmp_path / "a.pdf")], capture_output=True, text=True)
    assert r.returncode == 1 and "refused" in r.stderr and "a.pdf" in r.stderr, r.stderr
    for i in range(3):
        assert "state: done" in (convo.path / f".inbox/t{i}.jsonl.report.md").read_text()


@pytest.mark.allow_warnings
def test_llm_chunks_within_the_window_keyless_and_a_refused_chunk_is_reported(
    tmp_path, monkeypatch
):
    """A transcript longer than the window, through a real mount and a keyless local
    endpoint: every request fits `llm_context_tokens`, the endpoint sees no real key, and
    a chunk the endpoint refuses (HTTP 400, as for a context too long) is extracted by the
    rules, which the report says, with which turns."""
    llm = fake_llm()
    llm.reject = lambda body: (
        (400, {"error": {"message": "context length exceeded", "type": "invalid_request"}})
        if "zebra-marker" in json.dumps(body)
        else None
    )
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    window = 8192  # the built-in types' instructions take about 3,500 tokens
    m = make_mount(
        tmp_path,
        f"search: false\nllm_base_url: {llm.url}\nllm_model: tiny\n"
        f"llm_api_key_env: NO_SUCH_KEY_VAR\nllm_context_tokens: {window}\n",
    )
    try:
        turns = [
            {
                "role": "user" if i % 2 == 0 else "assistant",
                "content": f"Turn {i}: the harbour lanterns were repainted copper and silver "
                "while the orchard meadow waited for thunder. "
                * 3
                + ("zebra-marker" if i == 150 else ""),
                "id": f"m{i}",
            }
            for i in range(300)
        ]
        inbox = m.path / ".inbox"
        (inbox / "long.jsonl").write_text(jsonl(turns))
        rep = report(inbox, "long.jsonl")
        chats = [b for path, _auth, b in llm.requests if path == "/v1/chat/completions"]
        assert len(chats) >= 5, "the transcript went in several chunks"
        for body in chats:
            # the window, in bytes at no more than 4 a token (the estimate is stricter)
            assert len(json.dumps(body["messages"])) < 4 * window
        assert {auth for _path, auth, _b in llm.requests} == {"Bearer contextfs-no-key"}
        assert "## Extraction" in rep and "extracted in" in rep
        assert "rules used for these turns" in rep, rep
        assert "helix" in (m.path / "user/default/preferences/editor/L2.md").read_text()
    finally:
        m.stop()
    assert m.fsck() == []


@pytest.mark.allow_warnings  # the buffer limit grows; the refused append is logged
def test_an_append_that_outgrows_the_store_buffers_leaves_the_mount_writable(tmp_path):
    """An append to a live session's transcript bigger than what the store's buffers hold
    (the least `store_memory_mb`): it is refused with EAGAIN, its bytes kept in refused/,
    and the same append tried again is taken. It used to be taken for store damage: every
    later write of the mount was EROFS until a remount."""
    m = make_mount(tmp_path, "search: false\nstore_memory_mb: 32\nstore_checkpoint_mb: 16\n")
    try:
        (m.path / ".sessions/long").mkdir()
        t = m.path / ".sessions/long/transcript.jsonl"
        with open(t, "a") as f:
            f.write(json.dumps({"role": "user", "content": "The first turn."}) + "\n")
        lines = "".join(
            json.dumps({"role": "user", "content": f"Turn {k} " + "blah words " * 360}) + "\n"
            for k in range(6000)
        )  # 24 MiB in one append
        with pytest.raises(OSError) as err, open(t, "a") as f:
            f.write(lines)
        assert err.value.errno == errno.EAGAIN
        status = (m.path / ".status").read_text()
        assert "state: read-write" in status and "no room in its buffers" in status
        assert any(p.read_text() == lines for p in (m.data_dir / "refused").iterdir())
        with open(t, "a") as f:  # tried again: taken
            f.write(lines)
        assert t.read_text().endswith(lines)
        assert t.read_text().count('"Turn 0 ') == 1
        (m.path / "user/default/preferences/tea.md").write_text("Green tea.\n")
    finally:
        m.stop()


def written_by(pid: int) -> int:
    """Bytes a process has written (to files, pipes, FUSE replies: /proc/PID/io wchar)."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise AssertionError("no wchar in /proc/PID/io")


def test_an_append_to_a_long_transcript_writes_what_it_appends(tmp_path):
    """Forty one-line appends (`>>`, about 1 KB each) to a live transcript of 2 MB: the
    daemon writes about what they append, not the transcript each time, and the file
    reads back as appended with every turn extracted. Each append stored the whole
    transcript again (the daemon wrote 2 MB an append: 80 MB for the forty) and parsed
    all of it, so an append cost more the longer the session."""
    m = make_mount(tmp_path, "search: false\n")
    try:
        (m.path / ".sessions/long").mkdir()
        t = m.path / ".sessions/long/transcript.jsonl"
        said = "".join(
            json.dumps({"role": "user", "content": f"Earlier turn {k}. " + "some words " * 90})
            + "\n"
            for k in range(2000)
        )
        with open(t, "a") as f:
            f.write(said)
        assert m.proc is not None
        before = written_by(m.proc.pid)
        for k in range(40):
            line = json.dumps({"role": "user", "content": f"Turn {k}. " + "more words " * 90})
            with open(t, "a") as f:
                f.write(line + "\n")
            said += line + "\n"
        wrote = written_by(m.proc.pid) - before
        assert wrote < 8 * 2**20, f"the daemon wrote {wrote / 2**20:.0f} MiB for 40 KB of turns"
        assert t.read_bytes() == said.encode()
        os.rmdir(m.path / ".sessions/long")
        turns = sum(
            (p / "L2.md").read_text().count("**user**")
            for p in (m.path / "user/default/sessions").iterdir()
        )
        assert turns == 2040
    finally:
        m.stop()


def test_each_part_of_a_long_sessions_archive_is_summarised_by_its_own_turns(tmp_path):
    """A session too long for one node (`max_tier_size` 16 KiB: parts of 4 KiB) is archived
    in parts at its end, and each part's summary (its front matter, its L1) speaks of its
    own turns only. Each began with an overview of the whole session's turns: part 1's
    named later parts' turns, and later parts' began with part 1's."""
    m = make_mount(tmp_path, "search: false\nmax_tier_size: 16384\n")
    try:
        (m.path / ".sessions/s1").mkdir()
        t = m.path / ".sessions/s1/transcript.jsonl"
        for k in range(100):
            turn = {"role": "user" if k % 2 == 0 else "assistant",
                    "content": f"Turn {k}. We spoke of the garden for a while, long enough "
                    "for a part of the archive to hold only some of the turns said."}  # fmt: skip
            with open(t, "a") as f:
                f.write(json.dumps(turn) + "\n")
        os.rmdir(m.path / ".sessions/s1")
        parts = sorted(
            (m.path / "user/default/sessions").iterdir(), key=lambda p: int(p.name.split("-")[-1])
        )
        assert len(parts) >= 3
        for i, part in enumerate(parts, 1):
            l2 = (part / "L2.md").read_text()
            front, body = l2.split("\n---\n", 1)
            own = set(re.findall(r"Turn (\d+)\.", body))
            summary = front.split("summary:", 1)[1]
            assert f"Part {i} of {len(parts)}" in summary
            spoken = set(re.findall(r"Turn (\d+)\.", summary))
            assert spoken and spoken <= own, (part.name, sorted(spoken - own, key=int))
            l1 = (part / "L1.md").read_text()
            assert set(re.findall(r"Turn (\d+)\.", l1)) <= own, part.name
    finally:
        m.stop()


FILLER = " ".join(f"The sky number {k} was grey." for k in range(800))


def cats(n: int) -> str:
    return "".join(
        json.dumps({"role": "user", "content": f"On 2026-05-0{i % 9 + 1} I adopted a cat "
                    f"named Whiskers{i}. {FILLER}"}) + "\n"
        for i in range(n)
    )  # fmt: skip


def test_an_end_or_compact_during_a_background_extraction_extracts_each_turn_once(tmp_path):
    """rmdir, or `compact`, right after turns that started the background extraction: the
    end waits for it, so each fact is extracted once, turns added after a compact are
    extracted too, and an ended session stays ended after a remount (it came back, and
    its facts twice)."""
    m = make_mount(tmp_path, "search: false\n")
    try:
        events = m.path / "user/default/events"
        (m.path / ".sessions/r1").mkdir()
        with open(m.path / ".sessions/r1/transcript.jsonl", "a") as f:
            f.write(cats(10))
        os.rmdir(m.path / ".sessions/r1")
        assert len([e for e in os.listdir(events) if "whiskers" in e]) == 10
        (m.path / ".sessions/c1").mkdir()
        t = m.path / ".sessions/c1/transcript.jsonl"
        with open(t, "a") as f:
            f.write(cats(10).replace("Whiskers", "Tom"))
        (m.path / ".sessions/c1/control").write_text("compact\n")
        time.sleep(1)
        with open(t, "a") as f:
            for i in range(5):
                f.write(json.dumps({"role": "user", "content": f"On 2026-06-1{i} I bought "
                                    f"a bike called Rocket{i}."}) + "\n")  # fmt: skip
        os.rmdir(m.path / ".sessions/c1")
        names = os.listdir(events)
        assert len([e for e in names if "named-tom" in e]) == 10, names
        assert len([e for e in names if "rocket" in e]) == 5, names
        m.remount()
        assert os.listdir(m.path / ".sessions") == []
    finally:
        m.stop()


def test_a_session_ended_through_the_owners_view_is_gone_from_the_roots(tmp_path):
    """The root's `.sessions` is the default owner's: a session started in one shows in
    the other, and ended through either it is gone from both. A writer that closes after
    the end is refused (ENOENT) and its bytes kept in refused/; the session does not come
    back after a remount (it did, with the line)."""
    m = make_mount(tmp_path, "search: false\n")
    try:
        owner = m.path / "user/default/.sessions"
        assert os.listdir(owner) == []  # listed: the kernel and the daemon hold it
        (m.path / ".sessions/x").mkdir()
        assert os.listdir(owner) == ["x"]
        with open(m.path / ".sessions/x/transcript.jsonl", "a") as f:
            f.write(json.dumps({"role": "user", "content": "hello"}) + "\n")
        late = open(m.path / ".sessions/x/transcript.jsonl", "a")  # noqa: SIM115
        os.rmdir(owner / "x")
        assert os.listdir(m.path / ".sessions") == [] and os.listdir(owner) == []
        late.write(json.dumps({"role": "user", "content": "I adopted a ferret, Bandit."}) + "\n")
        with pytest.raises(FileNotFoundError):
            late.close()
        kept = [p.read_text() for p in (m.data_dir / "refused").iterdir()]
        assert any("Bandit" in k for k in kept), kept
        m.remount()
        assert os.listdir(m.path / ".sessions") == []
    finally:
        m.stop()


def test_compact_keeps_a_line_still_being_written(tmp_path):
    """`compact` between the two halves of one appended line: the finished turns are
    archived, the half line stays in the transcript and, completed, is a turn (it was
    emptied away, and the turn lost)."""
    m = make_mount(tmp_path, "search: false\n")
    try:
        (m.path / ".sessions/pl").mkdir()
        t = m.path / ".sessions/pl/transcript.jsonl"
        with open(t, "a") as f:
            f.write(json.dumps({"role": "user", "content": "First turn is complete."}) + "\n")
        with open(t, "a") as f:
            f.write('{"role":"user","content":"I adopted a parrot named ')
        (m.path / ".sessions/pl/control").write_text("compact\n")
        assert t.read_text() == '{"role":"user","content":"I adopted a parrot named '
        with open(t, "a") as f:
            f.write('Polly on 2026-01-05."}\n')
        os.rmdir(m.path / ".sessions/pl")
        parts = (m.path / "user/default/sessions").iterdir()
        assert sum("Polly" in (p / "L2.md").read_text() for p in parts) == 1
        assert any("polly" in e for e in os.listdir(m.path / "user/default/events"))
    finally:
        m.stop()


def test_writers_appending_to_one_transcript_at_once_are_each_taken_once(tmp_path):
    """Three processes each appending lines to one live transcript (open, write a line,
    close): every append succeeds and every line is there once. A writer whose line
    another writer's close had already recorded got EINVAL, and one that retried would
    have doubled its turn."""
    m = make_mount(tmp_path, "search: false\n")
    try:
        (m.path / ".sessions/cc").mkdir()
        t = m.path / ".sessions/cc/transcript.jsonl"
        code = (
            "import json, sys\n"
            "fails = 0\n"
            "for n in range(100):\n"
            "    try:\n"
            "        with open(sys.argv[1], 'a') as f:\n"
            "            f.write(json.dumps({'role': 'user', "
            "'content': f'writer {sys.argv[2]} line {n}'}) + '\\n')\n"
            "    except OSError:\n"
            "        fails += 1\n"
            "sys.exit(fails)\n"
        )
        procs = [subprocess.Popen([sys.executable, "-c", code, str(t), str(i)]) for i in range(3)]
        assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
        lines = t.read_text().splitlines()
        assert len(lines) == 300 and len(set(lines)) == 300
        assert not (m.data_dir / "refused").exists()
    finally:
        m.stop()


def test_a_bad_append_is_its_writers_refusal_not_another_writers(tmp_path):
    """Two processes append to one live transcript at once: a line that is not a turn,
    written and closed by one (`echo ... >>`: exit 1, EINVAL), is that writer's refusal
    alone, its bytes kept in refused/; the other's close succeeds with its turns recorded,
    a half line it wrote before the other's append included. The writers shared one
    buffer: the good writer's close failed with EINVAL, or succeeded with its lines
    dropped."""
    m = make_mount(tmp_path, "search: false\n")
    try:
        (m.path / ".sessions/two").mkdir()
        t = m.path / ".sessions/two/transcript.jsonl"
        good = open(t, "a")  # noqa: SIM115
        good.write(json.dumps({"role": "user", "content": "I like green tea."}) + "\n")
        good.write('{"role": "user", "content": ')
        good.flush()  # written, not closed
        bad = subprocess.run(
            ["sh", "-c", '/bin/echo "this is no turn" >> "$1"', "sh", str(t)],
            capture_output=True,
            text=True,
        )
        assert bad.returncode == 1 and "Invalid argument" in bad.stderr
        ok = subprocess.run(
            ["sh", "-c", '/bin/echo \'{"role":"assistant","content":"Noted."}\' >> "$1"',
             "sh", str(t)],
            capture_output=True,
        )  # fmt: skip
        assert ok.returncode == 0
        good.write('"I walk to work."}\n')
        good.close()  # no error
        lines = [json.loads(x)["content"] for x in t.read_text().splitlines()]
        assert lines == ["Noted.", "I like green tea.", "I walk to work."]
        assert "this is no turn" not in t.read_text()
        kept = [p.read_text() for p in (m.data_dir / "refused").iterdir()]
        assert kept == ["this is no turn\n"]
        status = (m.path / ".status").read_text()
        assert "appended line 1 is not a turn" in status
        os.rmdir(m.path / ".sessions/two")
        (part,) = (m.path / "user/default/sessions").iterdir()
        said = (part / "L2.md").read_text()
        assert "I walk to work." in said and "no turn" not in said
    finally:
        m.stop()


def test_a_big_inbox_item_read_cold_is_read_back_once_not_at_every_read(tmp_path):
    """A 32 MiB item read after a remount: it is read back once for the open (a spill
    file), so `head -c 1M` costs the daemon what DuckDB reads of it (about 3 times the
    item: the vector of blobs it is in) and `cat` takes a second. Every read (128 KiB)
    loaded the whole item again: `head` grew the daemon by 7 times the item, and `cat`
    took half a minute."""
    mib = 1 << 20
    m = make_mount(tmp_path, "search: false\n")
    try:
        src = tmp_path / "voice.m4a"  # no gate decodes m4a: refused, its bytes kept as they were
        src.write_bytes(random.Random(3).randbytes(32 * mib))
        cp = subprocess.run(["cp", str(src), str(m.path / ".inbox")], capture_output=True)
        assert cp.returncode == 1 and b"not supported" in cp.stderr
        item = m.path / ".inbox/voice.m4a"
        m.stop()
        m.start()
        assert m.proc is not None
        pid = m.proc.pid
        assert item.stat().st_size == 32 * mib and m.status()
        time.sleep(2)  # what a mount does in its first seconds is done
        before = proc_status(pid)["VmRSS"]
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM starts over from VmRSS
        head = subprocess.run(["head", "-c", str(mib), str(item)], capture_output=True)
        grown = proc_status(pid)["VmHWM"] - before
        assert head.stdout == src.read_bytes()[:mib]
        assert grown < 4 * 32 * mib, f"the daemon grew {grown / mib:.0f} MiB for a 1 MiB read"
        t = time.monotonic()
        assert subprocess.run(["cmp", str(src), str(item)], timeout=120).returncode == 0
        assert time.monotonic() - t < 10
    finally:
        m.stop()


def test_a_live_sessions_files_stay_in_it_when_moved(tmp_path):
    """`mv` of a live session's transcript.jsonl (or control) into the inbox or a type
    directory is refused (EPERM, the reason in `.status`) and the session goes on; `cp`
    hands a copy in. The move took the file out of the session: its next append was
    EACCES, and its turns were filed twice, once from the inbox and once at its end."""
    m = make_mount(tmp_path, "search: false\n")
    try:
        s = m.path / ".sessions/mv"
        s.mkdir()
        t = s / "transcript.jsonl"
        with open(t, "a") as f:
            f.write(json.dumps({"role": "user", "content": "I play the cello."}) + "\n")
        for src, dst in (
            (t, m.path / ".inbox/mv.jsonl"),
            (t, m.path / "user/default/preferences/mv.md"),
            (s / "control", m.path / ".inbox/control.txt"),
        ):
            moved = subprocess.run(["mv", str(src), str(dst)], capture_output=True, text=True)
            assert moved.returncode == 1 and "Operation not permitted" in moved.stderr
            assert not dst.exists()
        assert sorted(os.listdir(s)) == ["context.md", "control", "transcript.jsonl"]
        assert "belongs to its live session" in (m.path / ".status").read_text()
        with open(t, "a") as f:
            f.write(json.dumps({"role": "user", "content": "I play it daily."}) + "\n")
        assert t.read_text().count("\n") == 2
        shutil.copy(t, m.path / ".inbox/copy.jsonl")
        assert "state: done" in report(m.path / ".inbox", "copy.jsonl")
    finally:
        m.stop()


def test_a_report_names_each_memory_once(convo):
    """A transcript that tells several facts of one person: the report lists that
    person's node once, as created. It listed "created …/efua" and then "changed …/efua"
    for each further fact."""
    inbox = convo.path / ".inbox"
    (inbox / "studio.md").write_text(
        "**Efua:** I started a new job at Fernhill Studio last week.\n"
        "**Theo:** Congrats! Is it far from home?\n"
        "**Efua:** No, I cycle there. I love cycling in the morning.\n"
    )
    text = report(inbox, "studio.md")
    memories = text.split("## Memories", 1)[1].strip().splitlines()
    efua = [line for line in memories if line.split()[-1].endswith("/entities/efua")]
    assert efua == ["- created user/default/entities/efua"], memories
    assert len(memories) == len({line.split()[2] for line in memories}), memories


TOOL_EVENTS = [
    {"role": "user", "content": "Deploy the app to staging."},
    {"role": "tool", "name": "bash", "input": {"cmd": "make deploy"},
     "output": {"exit_code": 2, "stderr": "missing AWS_PROFILE"}, "id": "t1"},
    {"role": "tool", "name": "bash", "input": {"cmd": "AWS_PROFILE=stg make deploy"},
     "output": {"exit_code": 0}, "id": "t2"},
    {"role": "tool", "name": "http_get", "input": {"url": "https://staging.example.com/x"},
     "is_error": True, "output": "timeout", "id": "t3"},
]  # fmt: skip


def test_tool_events_of_a_session_keep_their_success_and_failure(tmp_path):
    """The same tool events through a live session as through the inbox: each call's
    success or failure counts (the session's extraction saw every call as a success)."""
    m = make_mount(tmp_path, "search: false\n")
    try:
        (m.path / ".sessions/tl").mkdir()
        (m.path / ".sessions/tl/transcript.jsonl").write_text(jsonl(TOOL_EVENTS))
        os.rmdir(m.path / ".sessions/tl")
        tools = m.path / "agent/default/tools"
        assert "1 ok, 1 failed" in (tools / "bash/L2.md").read_text()
        assert "0 ok, 1 failed" in (tools / "http-get/L2.md").read_text()
    finally:
        m.stop()


def test_an_unmount_does_not_wait_for_a_big_sessions_extraction(tmp_path):
    """`contextfs umount` right after a big append to a live session: the daemon exits
    without waiting for the extraction of its turns (which takes minutes), and the session
    is live again after a remount with every turn, still to be extracted. It waited until
    the extraction ended, past the command's 30 s."""
    m = make_mount(tmp_path, "search: false\nstore_memory_mb: 512\n")
    try:
        (m.path / ".sessions/bw").mkdir()
        words = "some words here and there " * 15
        with open(m.path / ".sessions/bw/transcript.jsonl", "a") as f:
            f.write("".join(
                json.dumps({"role": "user", "content": f"Turn {n}. I like tea {n}. {words}"})
                + "\n"
                for n in range(40000)
            ))  # fmt: skip
        time.sleep(2)  # the extraction is under way
        done = subprocess.run(
            [sys.executable, "-m", "contextfs", "umount", str(m.path)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        m.proc.wait(timeout=30)
        m.start()
        lines = (m.path / ".sessions/bw/transcript.jsonl").read_text().splitlines()
        assert len(lines) == 40000
    finally:
        m.stop()


def test_an_append_with_a_line_that_is_not_a_turn_is_refused_and_kept(tmp_path):
    """A session has no report to list what it did not understand: an append holding a
    line that is not a turn is refused whole (EINVAL, the reason in `.status`, its bytes
    in refused/); it was taken with exit 0 and the line vanished at the end. A line split
    across two appends is still one turn."""
    m = make_mount(tmp_path, "search: false\n")
    try:
        (m.path / ".sessions/v").mkdir()
        t = m.path / ".sessions/v/transcript.jsonl"
        first = json.dumps({"role": "user", "content": "ok"}) + "\n"
        with open(t, "a") as f:
            f.write(first)
        f = open(t, "a")  # noqa: SIM115
        f.write(json.dumps({"role": "user", "content": "good"}) + "\nnot json at all\n")
        with pytest.raises(OSError) as err:
            f.close()
        assert err.value.errno == errno.EINVAL
        assert t.read_text() == first
        assert "appended line 2 is not a turn" in (m.path / ".status").read_text()
        kept = [p.read_text() for p in (m.data_dir / "refused").iterdir()]
        assert any("not json at all" in k for k in kept)
        with open(t, "a") as f:
            f.write('{"role":"user",')
        with open(t, "a") as f:
            f.write('"content":"split"}\n')
        assert t.read_text() == first + '{"role":"user","content":"split"}\n'
    finally:
        m.stop()


def test_a_line_a_writer_left_unfinished_does_not_stop_the_session(tmp_path):
    """A writer that died midway left a line that is no turn: the append that ends it is
    taken (that line said in `.status` and kept in refused/), and the appends after it are
    recorded. Every later append was refused, for good."""
    m = make_mount(tmp_path, "search: false\n")
    try:
        (m.path / ".sessions/w1").mkdir()
        t = m.path / ".sessions/w1/transcript.jsonl"
        with open(t, "a") as f:
            f.write("garbage")
        with open(t, "a") as f:
            f.write(json.dumps({"role": "user", "content": "I like tea."}) + "\n")
        with open(t, "a") as f:
            f.write(json.dumps({"role": "user", "content": "I like cake."}) + "\n")
        assert t.read_text().endswith('"I like cake."}\n')
        assert "a line begun by an earlier append is not a turn" in (m.path / ".status").read_text()
    finally:
        m.stop()


def test_two_ends_of_one_session_at_once_archive_it_once(tmp_path):
    """rmdir through the root's `.sessions` and the owner's at the same moment (the kernel
    does not hold one back: two parents): one archive, every turn in it once."""
    m = make_mount(tmp_path, "search: false\n")
    try:
        (m.path / ".sessions/r1").mkdir()
        with open(m.path / ".sessions/r1/transcript.jsonl", "a") as f:
            f.write("".join(
                json.dumps({"role": "user", "content": f"Turn {i}: the sky number {i} was grey."})
                + "\n"
                for i in range(3000)
            ))  # fmt: skip
        os.listdir(m.path / "user/default/.sessions")
        ends = [
            subprocess.Popen(["rmdir", str(p / "r1")], stderr=subprocess.DEVNULL)
            for p in (m.path / ".sessions", m.path / "user/default/.sessions")
        ]
        codes = sorted(p.wait(timeout=120) for p in ends)
        assert codes[0] == 0, codes
        parts = list((m.path / "user/default/sessions").iterdir())
        said = "".join((p / "L2.md").read_text() for p in parts)
        assert said.count("Turn 2999:") == 1 and said.count("Turn 1500:") == 1, [
            p.name for p in parts
        ]
    finally:
        m.stop()
