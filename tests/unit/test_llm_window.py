"""The LLM path within a context window: chunked extraction with merged candidates,
map-reduce summaries, a failed chunk extracted by rules (and said so), keyless local
endpoints. Against the local OpenAI-compatible server of tests/fake_openai.py, which
records every request: each one is measured with the same conservative estimator."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator

import pytest

from contextfs.config import load_config
from contextfs.conversations.extract import RuleExtractor
from contextfs.conversations.llm import (
    LLMExtractor,
    LLMSummarizer,
    MediaDescriber,
    chunk_turns,
    merge_candidates,
)
from contextfs.conversations.transcript import Turn
from contextfs.ctxtypes import builtin_schema_dir, load_types
from contextfs.errors import LLMUnavailable, UsageError
from contextfs.index.endpoint import NO_KEY, api_key, is_local
from contextfs.memory.tokens import estimate_tokens_upper
from tests.fake_openai import FakeOpenAI

TYPES = {k: t for k, t in load_types([builtin_schema_dir()]).items() if k != "session"}
WINDOW = 16_000
FILLER = (
    "We went through the quarterly numbers again and the spreadsheet still has the old "
    "column layout, so the totals are off by a few rows here and there. "
)
FACT = re.compile(r"\[(m\d+)\] user[^\n]*?: I prefer (tool\d+) for (task\d+)")


def chat_answer(content: str, finish: str = "stop") -> dict:
    return {
        "id": "c1", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "finish_reason": finish,
                     "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }  # fmt: skip


def extraction(body: dict) -> dict:
    """A model that finds every 'I prefer toolN for taskN' of the conversation it is sent."""
    prompt = body["messages"][1]["content"]
    memories = [
        {"type": "preference", "fields": {"topic": task, "value": tool},
         "body": f"Prefers {tool} for {task}.", "turns": [ref], "confidence": 0.9}
        for ref, tool, task in FACT.findall(prompt)
    ]  # fmt: skip
    return chat_answer(json.dumps({"memories": memories}))


@pytest.fixture
def chat(monkeypatch) -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI("/v1/chat/completions", extraction)
    monkeypatch.setenv("CONTEXTFS_TEST_KEY", "sk-test")
    try:
        yield fake
    finally:
        fake.close()


def transcript(n: int, fact_every: int = 1, size: int = 1000) -> list[Turn]:
    turns = []
    for i in range(n):
        fact = f"I prefer tool{i} for task{i}. " if i % fact_every == 0 else ""
        text = fact + (FILLER * (size // len(FILLER) + 1))[:size]
        role = "user" if i % 2 == 0 else "assistant"
        turns.append(Turn(line=i + 1, role=role, content=text, id=f"m{i}",
                          timestamp="2026-05-08T10:00:00Z"))  # fmt: skip
    return turns


def prompts(fake: FakeOpenAI) -> list[tuple[str, str, int]]:
    return [
        (b["messages"][0]["content"], b["messages"][1]["content"], b["max_tokens"])
        for b in fake.bodies
    ]


def assert_within(fake: FakeOpenAI, window: int) -> None:
    """Every request: system + user + the answer's room within the window by the
    conservative estimator, and its serialized messages under 4 bytes a token."""
    assert fake.requests
    for body in fake.bodies:
        system, user = body["messages"][0]["content"], body["messages"][1]["content"]
        assert (
            estimate_tokens_upper(system) + estimate_tokens_upper(user) + body["max_tokens"]
            <= window
        )
        assert len(json.dumps(body["messages"]).encode()) < 4 * window


def refs_of(prompt: str) -> list[str]:
    return list(dict.fromkeys(re.findall(r"^\[(m\d+)\]", prompt, re.M)))


# --- extraction in chunks -------------------------------------------------------------------


def test_a_2mb_transcript_goes_in_overlapping_chunks_that_fit_the_window(chat: FakeOpenAI):
    turns = transcript(2000)  # about 2 MB of turns
    assert sum(len(t.content) for t in turns) > 2_000_000
    ex = LLMExtractor(base_url=chat.url, model="m", api_key_env="CONTEXTFS_TEST_KEY",
                      context_tokens=WINDOW, rules=RuleExtractor())  # fmt: skip
    notes: list[str] = []
    cands = ex.extract(turns, TYPES, today="2026-05-08", notes=notes)
    assert chat.calls > 10
    assert_within(chat, WINDOW)
    chunks = [refs_of(user) for _s, user, _m in prompts(chat)]
    assert chunks[0][0] == "m0" and chunks[-1][-1] == "m1999"
    for before, after in zip(chunks, chunks[1:], strict=False):
        shared = set(before) & set(after)
        assert 1 <= len(shared) <= 3, "a few turns of overlap"
        assert after[: len(shared)] == before[-len(shared) :]
    # every turn was sent, and the overlaps' facts are merged: one candidate per fact
    assert set().union(*map(set, chunks)) == {t.ref for t in turns}
    topics = [c.fields["topic"] for c in cands]
    assert len(topics) == len(set(topics)) == 1000  # the user's turns: 0, 2, 4, …
    assert {"task0", "task1998"} <= set(topics)  # from the first and the last chunk
    assert all(len(c.turns) == 1 for c in cands)
    assert notes[0].startswith(f"extracted in {len(chunks)} chunks of at most 16,000 tokens")
    assert "the LLM answered" in notes[0]


def test_one_turn_longer_than_a_chunk_is_cut_into_pieces(chat: FakeOpenAI):
    turns = [Turn(line=1, role="user", content="I prefer tool7 for task7. " + FILLER * 2000,
                  id="m7")]  # fmt: skip
    ex = LLMExtractor(base_url=chat.url, model="m", api_key_env="CONTEXTFS_TEST_KEY",
                      context_tokens=8000)  # fmt: skip
    cands = ex.extract(turns, TYPES)
    assert chat.calls >= 3
    assert_within(chat, 8000)
    users = [user for _s, user, _m in prompts(chat)]
    assert "[m7] user: I prefer tool7" in users[0]
    assert all("[m7] (continued): " in u for u in users[1:])
    sent = " ".join(u.split("\n\n", 1)[1] for u in users)
    assert sent.count("spreadsheet") >= 2000  # nothing of the turn was left out
    assert [(c.fields, c.turns) for c in cands] == [({"topic": "task7", "value": "tool7"},
                                                     ("m7",))]  # fmt: skip


def test_a_small_transcript_is_one_request_with_room_for_the_answer(chat: FakeOpenAI):
    ex = LLMExtractor(base_url=chat.url, model="m", api_key_env="CONTEXTFS_TEST_KEY")
    notes: list[str] = []
    cands = ex.extract(transcript(4), TYPES, notes=notes)
    assert chat.calls == 1 and notes == []
    assert chat.bodies[0]["max_tokens"] == 4000
    assert chat.bodies[0]["messages"][1]["content"].startswith("Conversation:\n\n[m0] user @")
    assert sorted(c.fields["topic"] for c in cands) == ["task0", "task2"]


def test_a_window_too_small_for_the_instructions_is_refused(chat: FakeOpenAI):
    ex = LLMExtractor(base_url=chat.url, model="m", api_key_env="CONTEXTFS_TEST_KEY",
                      context_tokens=2048)  # fmt: skip
    with pytest.raises(LLMUnavailable, match="leaves no room"):
        ex.extract(transcript(2), TYPES)
    assert chat.calls == 0


def test_chunks_cover_every_turn_once_plus_the_overlap():
    turns = transcript(50, size=300)
    chunks = chunk_turns(turns, 1000, overlap=2)
    assert len(chunks) > 3
    for c in chunks:
        assert sum(estimate_tokens_upper(u.text) + 1 for u in c.units) <= 1000
    seen = [t.ref for c in chunks for t in c.turns]
    assert set(seen) == {t.ref for t in turns}
    assert len(seen) - len(turns) <= 2 * (len(chunks) - 1)


def test_merge_folds_near_identical_candidates_and_keeps_every_turn(chat: FakeOpenAI):
    ex = RuleExtractor()
    a = ex.extract([Turn(line=1, role="user", content="I prefer vim over emacs.", id="a")],
                   TYPES)  # fmt: skip
    b = ex.extract([Turn(line=9, role="user", content="I prefer vim over emacs!", id="b")],
                   TYPES)  # fmt: skip
    merged = merge_candidates([*a, *b], TYPES)
    assert len(merged) == 1
    assert merged[0].turns == ("a", "b") and merged[0].body.count("vim") == 1


def test_merge_never_folds_two_speakers_facts_into_one():
    ex = RuleExtractor()
    a = ex.extract([Turn(line=1, role="user", content="I live in Bergen.", id="a")], TYPES)
    b = ex.extract([Turn(line=2, role="user", content="I live in Oslo.", id="b")], TYPES)
    assert len(merge_candidates([*a, *b], TYPES)) == 1  # one person: the later value
    merged = merge_candidates([*a, *b], TYPES, {"a": "Ola", "b": "Mina"})
    assert sorted(c.fields["location"] for c in merged) == ["Bergen", "Oslo"]


# --- a failing chunk: rules for it, and the notes say so --------------------------------------


def context_length_exceeded(marker: str) -> Callable[[dict], tuple[int, dict] | None]:
    def reject(body: dict) -> tuple[int, dict] | None:
        if marker in body["messages"][1]["content"]:
            return 400, {
                "error": {
                    "message": "This model's maximum context length is 16000 tokens",
                    "type": "invalid_request_error",
                    "code": "context_length_exceeded",
                }
            }
        return None

    return reject  # fmt: skip


@pytest.mark.allow_warnings
def test_a_failing_chunk_is_extracted_by_rules_and_the_notes_say_so(chat: FakeOpenAI):
    turns = transcript(400)
    turns[200] = Turn(line=201, role="user", id="m200",
                      content="My name is Grace Hopper. MARKER-500 " + FILLER * 6)  # fmt: skip
    chat.reject = context_length_exceeded("MARKER-500")
    ex = LLMExtractor(base_url=chat.url, model="m", api_key_env="CONTEXTFS_TEST_KEY",
                      context_tokens=WINDOW, max_retries=0, rules=RuleExtractor())  # fmt: skip
    notes: list[str] = []
    cands = ex.extract(turns, TYPES, notes=notes)
    failed = [n for n in notes if "the LLM failed" in n]
    assert failed and all("rules used for these turns" in n for n in failed)
    assert re.match(r"chunk \d+ of \d+ \(turns m\d+ to m\d+\): the LLM failed \(.*400", failed[0])
    assert "context length" in failed[0]
    assert "rules took" in notes[0] and notes[0].startswith("extracted in ")
    # the rules found the name in that chunk; the LLM's facts of the others are there
    assert {"name": "Grace Hopper"} in [c.fields for c in cands if c.type == "profile"]
    topics = {c.fields.get("topic") for c in cands if c.type == "preference"}
    assert {"task0", "task398"} <= topics
    assert len(topics) == len([c for c in cands if c.type == "preference"])


def test_an_endpoint_down_from_the_start_raises_for_the_caller_to_use_rules(chat: FakeOpenAI):
    chat.fail = True
    ex = LLMExtractor(base_url=chat.url, model="m", api_key_env="CONTEXTFS_TEST_KEY",
                      max_retries=0, rules=RuleExtractor())  # fmt: skip
    with pytest.raises(LLMUnavailable, match="failed"):
        ex.extract(transcript(400), TYPES, notes=[])
    assert chat.calls == 2  # not one request per chunk of a dead endpoint


@pytest.mark.allow_warnings
def test_after_three_failures_in_a_row_the_rest_is_left_to_rules(chat: FakeOpenAI):
    chat.reject = lambda body: None if "[m0]" in body["messages"][1]["content"] else (
        500, {"error": {"message": "overloaded", "type": "server_error"}})  # fmt: skip
    ex = LLMExtractor(base_url=chat.url, model="m", api_key_env="CONTEXTFS_TEST_KEY",
                      max_retries=0, rules=RuleExtractor())  # fmt: skip
    notes: list[str] = []
    ex.extract(transcript(400), TYPES, notes=notes)
    assert chat.calls == 4
    assert any("not sent after 3 failed requests in a row" in n for n in notes)


@pytest.mark.allow_warnings
@pytest.mark.parametrize("finish", ["stop", "length"])
def test_an_unusable_chunk_answer_is_extracted_by_rules(chat: FakeOpenAI, finish: str):
    chat.reject = lambda body: (200, chat_answer('{"memories": [', finish))
    ex = LLMExtractor(base_url=chat.url, model="m", api_key_env="CONTEXTFS_TEST_KEY",
                      rules=RuleExtractor())  # fmt: skip
    notes: list[str] = []
    cands = ex.extract([Turn(line=1, role="user", content="My name is Ada Lovelace.")], TYPES,
                       notes=notes)  # fmt: skip
    assert [c.fields for c in cands] == [{"name": "Ada Lovelace"}]
    assert "answer was not a JSON object" in notes[1]
    assert ("cut at max_tokens" in notes[1]) == (finish == "length")


def test_the_rule_extractor_takes_notes_and_leaves_them_alone():
    notes: list[str] = []
    turn = Turn(line=1, role="user", content="My name is Ada Lovelace.")
    assert RuleExtractor().extract([turn], TYPES, notes=notes)
    assert notes == []


# --- summaries of a long L2 -----------------------------------------------------------------


def summaries(part_summary: str) -> Callable[[dict], dict]:
    def respond(body: dict) -> dict:
        system, user = body["messages"][0]["content"], body["messages"][1]["content"]
        if '"summary"' in system:  # one part: condense it (too long: the caller cuts it)
            head = re.search(r"Part (\d+) of (\d+)", user)
            assert head is not None
            text = f"part {head.group(1)}: {part_summary}"
            return chat_answer(json.dumps({"summary": text}))
        return chat_answer(json.dumps({"l0": "A long diary.", "l1": "Parts: " + user[:200]}))

    return respond


@pytest.mark.parametrize("window", [4096, 16_000])
def test_a_long_l2_is_summarised_part_by_part_within_the_window(monkeypatch, window: int):
    fake = FakeOpenAI("/v1/chat/completions", summaries("numbers and names " * 400))
    monkeypatch.setenv("CONTEXTFS_TEST_KEY", "sk-test")
    try:
        s = LLMSummarizer(base_url=fake.url, model="m", api_key_env="CONTEXTFS_TEST_KEY",
                          context_tokens=window)  # fmt: skip
        l2 = "\n\n".join(f"## Day {i}\n{FILLER * 8}" for i in range(1000))  # about 1.3 MB
        l0, l1 = s.summarize(TYPES["event"], l2)
        assert l0 == "A long diary.\n"
        assert_within(fake, window)
        parts = [u for sys, u, _m in prompts(fake) if '"summary"' in sys]
        assert 2 <= len(parts) <= 8  # at most max_parts parts are read
        total = s.last_parts
        # the first and the last part are read, the rest evenly between
        assert parts[0].startswith(f"Part 1 of {total} ")
        assert parts[-1].startswith(f"Part {total} of {total} ")
        final = fake.bodies[-1]["messages"][1]["content"]
        assert f"condensed from {total} parts" in final and "## Part 1 of" in final
    finally:
        fake.close()


def test_condensed_parts_that_still_overflow_are_condensed_again(monkeypatch):
    # a model that answers in a script of three bytes a character: the parts, cut to their
    # character limit, still take too many tokens together, so a second round runs
    fake = FakeOpenAI("/v1/chat/completions", summaries("日記の要約" * 2000))
    monkeypatch.setenv("CONTEXTFS_TEST_KEY", "sk-test")
    try:
        s = LLMSummarizer(base_url=fake.url, model="m", api_key_env="CONTEXTFS_TEST_KEY",
                          context_tokens=4096)  # fmt: skip
        s.summarize(TYPES["event"], FILLER * 20_000)
        assert_within(fake, 4096)
        rounds = [u for sys, u, _m in prompts(fake) if '"summary"' in sys]
        assert any("日記" in u for u in rounds), "the condensed parts were condensed again"
    finally:
        fake.close()


def test_a_short_l2_is_one_request(monkeypatch):
    fake = FakeOpenAI("/v1/chat/completions", summaries("x"))
    monkeypatch.setenv("CONTEXTFS_TEST_KEY", "sk-test")
    try:
        s = LLMSummarizer(base_url=fake.url, model="m", api_key_env="CONTEXTFS_TEST_KEY")
        s.summarize(TYPES["event"], "Shipped billing 2.3.\n")
        assert fake.calls == 1 and s.last_parts == 0
        assert fake.bodies[0]["messages"][1]["content"] == "Shipped billing 2.3.\n"
    finally:
        fake.close()


# --- keyless local endpoints ----------------------------------------------------------------


def test_a_keyless_local_endpoint_works_with_a_placeholder_key(chat: FakeOpenAI, monkeypatch):
    monkeypatch.delenv("CONTEXTFS_UNSET_KEY", raising=False)
    ex = LLMExtractor(base_url=chat.url, model="m", api_key_env="CONTEXTFS_UNSET_KEY")
    cands = ex.extract(transcript(2), TYPES)
    assert [c.fields["topic"] for c in cands] == ["task0"]
    ((_path, auth, _body),) = chat.requests
    assert auth == f"Bearer {NO_KEY}"
    MediaDescriber(base_url=chat.url, model="m", api_key_env="CONTEXTFS_UNSET_KEY")
    LLMSummarizer(base_url=chat.url, model="m", api_key_env="CONTEXTFS_UNSET_KEY")


def test_a_set_key_is_sent_to_a_local_endpoint_too(chat: FakeOpenAI):
    LLMExtractor(base_url=chat.url, model="m", api_key_env="CONTEXTFS_TEST_KEY").extract(
        transcript(1), TYPES
    )
    assert chat.requests[0][1] == "Bearer sk-test"


@pytest.mark.parametrize("make", [LLMExtractor, LLMSummarizer, MediaDescriber])
def test_a_remote_endpoint_without_a_key_is_refused(monkeypatch, make):
    monkeypatch.delenv("CONTEXTFS_UNSET_KEY", raising=False)
    with pytest.raises(LLMUnavailable, match=r"\$CONTEXTFS_UNSET_KEY.*local endpoint"):
        make(base_url="https://api.openai.com/v1", model="m", api_key_env="CONTEXTFS_UNSET_KEY")


@pytest.mark.parametrize(
    ("url", "local"),
    [
        ("http://localhost:8080/v1", True),
        ("http://127.0.0.1:11434/v1", True),
        ("http://127.8.9.10/v1", True),
        ("http://[::1]:8000/v1", True),
        ("http://[::ffff:192.168.1.5]/v1", True),
        ("http://10.0.0.7:8000/v1", True),
        ("http://172.20.1.2/v1", True),
        ("http://192.168.1.20:1234/v1", True),
        ("http://169.254.3.4/v1", True),
        ("http://[fd12:3456::1]/v1", True),
        ("http://ollama:11434/v1", True),
        ("http://gpu-box.local:8080/v1", True),
        ("http://vllm.internal/v1", True),
        ("https://api.openai.com/v1", False),
        ("https://8.8.8.8/v1", False),
        ("http://172.32.0.1/v1", False),
        ("https://localhost.example.com/v1", False),
        ("not a url", False),
        ("", False),
    ],
)
def test_which_endpoints_are_local(url: str, local: bool, monkeypatch):
    monkeypatch.delenv("CONTEXTFS_UNSET_KEY", raising=False)
    assert is_local(url) is local
    assert api_key(url, "CONTEXTFS_UNSET_KEY") == (NO_KEY if local else None)


# --- configuration --------------------------------------------------------------------------


def test_llm_context_tokens_in_config_yaml(tmp_path):
    assert load_config(tmp_path).llm_context_tokens == 16_000
    (tmp_path / "config.yaml").write_text("llm_context_tokens: 131072\n")
    assert load_config(tmp_path).llm_context_tokens == 131_072
    (tmp_path / "config.yaml").write_text("llm_context_tokens: 512\n")
    with pytest.raises(UsageError, match="at least 2048"):
        load_config(tmp_path)
