"""Every code block of docs/agents.md, run as written against a real mount (search on).

The page's fenced blocks are read from the file itself, so a recipe edited there is the
recipe tested here. A block is run by its language: `python` is executed (the functions it
defines are then called with small real arguments), a `json` host configuration starts each
of its MCP servers as a host would and lists the mount through it, and `sh`/`bash`/
`console` run in bash. The only changes made to the text are the mountpoint
(`/home/me/memory`, `~/memory`) and the checkout (`/home/me/contextfs`) to this test's, and
the placeholders the page names as such (`MODEL`), given a value. A block that is not
runnable by nature (a drawing, a sample of output) is named in `SAMPLES` by its language and
first line; any other block fails `test_every_block_is_run_or_named`, so a recipe added
later must be runnable (or say why not) to pass.

The one stand-in is for the paid service: the memory-tool recipe's `anthropic.Anthropic()`
talks to `tests.fake_anthropic` through `ANTHROPIC_BASE_URL`, the SDK's own setting.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio

from contextfs.testing import BAD_LOG, Mount, wait_index_ready
from contextfs.testing.agents import REPO
from tests.fake_anthropic import FakeAnthropic

pytestmark = pytest.mark.timeout(180)

DOC = REPO / "docs/agents.md"
MOUNTPOINTS = ("/home/me/memory", "~/memory")
CHECKOUT = "/home/me/contextfs"
# Placeholders the page names as the reader's to fill in, with the value given here.
PLACEHOLDERS = {"MODEL": "claude-sonnet-4-5"}

# Blocks that are not programs: (language, start of the first line) -> what they are.
SAMPLES = {
    ("", "Error executing tool "): "an MCP tool error as the agent sees it (output)",
    ("", "/memories/<name>.md "): "the memory tool's path mapping (a drawing)",
    ("", "OUT/"): "the tree `contextfs export` writes (a drawing)",
    ("yaml", "---"): "an exported node's file, with `...` for facts left out (output)",
}
RUNNERS = ("python", "json", "sh", "bash", "console")


@dataclass(frozen=True, slots=True)
class Block:
    line: int  # of the opening fence, 1-based
    lang: str
    text: str

    @property
    def first(self) -> str:
        return self.text.split("\n", 1)[0]

    @property
    def id(self) -> str:
        return f"line{self.line}-{self.lang or 'plain'}"


def fenced_blocks(path: Path) -> list[Block]:
    blocks: list[Block] = []
    opened: tuple[int, str] | None = None
    body: list[str] = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = re.match(r"^\s*```(\S*)\s*$", line)
        if opened is None and m:
            opened, body = (n, m.group(1)), []
        elif opened is not None and line.strip() == "```":
            blocks.append(Block(opened[0], opened[1], "\n".join(body) + "\n"))
            opened = None
        elif opened is not None:
            body.append(line)
    assert opened is None, f"{path}:{opened[0]}: a fence is never closed"
    return blocks


BLOCKS = fenced_blocks(DOC)


def sample_kind(block: Block) -> str | None:
    for (lang, start), what in SAMPLES.items():
        if block.lang == lang and block.first.startswith(start):
            return what
    return None


def as_written(text: str, mnt: Path) -> str:
    """The recipe with the page's mountpoint and checkout replaced by this test's."""
    for path in MOUNTPOINTS:
        text = text.replace(path, str(mnt))
    return text.replace(CHECKOUT, str(REPO))


def defined_functions(text: str) -> list[str]:
    return [n.name for n in ast.parse(text).body if isinstance(n, ast.FunctionDef)]


def wait_for(check: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (got := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return got


# ---- the mount and the stand-in ---------------------------------------------------------


@pytest.fixture(scope="module")
def mnt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    top = tmp_path_factory.mktemp("recipes")
    (top / "mnt").mkdir()
    m = Mount(top / "mnt", top / "data", search=True)
    m.start()
    try:
        # the recipes' searches use the embedding model too, as a user's do once it is in;
        # waiting also keeps the unmount at the end off the model's loading (an unmount
        # racing it has aborted the daemon)
        wait_index_ready(m.path, timeout=120)
        yield m.path
    finally:
        m.stop()
    assert m.fsck() == []
    assert not BAD_LOG.search(m.log.read_text(errors="replace")), "the daemon logged a problem"


@pytest.fixture(scope="module")
def anthropic_api() -> Iterator[FakeAnthropic]:
    fake = FakeAnthropic()
    yield fake
    fake.close()


@pytest.fixture
def anthropic_env(anthropic_api: FakeAnthropic, monkeypatch: pytest.MonkeyPatch) -> FakeAnthropic:
    """The SDK's own settings, so `anthropic.Anthropic()` stays as the recipe writes it."""
    monkeypatch.setenv("ANTHROPIC_BASE_URL", anthropic_api.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    return anthropic_api


# ---- what runs a block ------------------------------------------------------------------


def exercise_run_session(run_session: Callable[..., None], mnt: Path) -> None:
    """`run_session(session_id, llm, user_messages)` with an `llm` that answers by rote and
    notes what it was given; a long session also compacts (more than 40 messages)."""
    # the preference the same block stores is in the index before the session asks
    wait_for(
        lambda: "user/default/preferences/editor" in hits(mnt, "Which editor do I use?"),
        "the stored preference in .query",
    )
    calls: list[tuple[str, list[str]]] = []
    transcript_lines: list[int] = []

    def llm(*, system: str, messages: list[str]) -> str:
        calls.append((system, list(messages)))
        live = mnt / ".sessions/recipe-long/transcript.jsonl"
        if live.exists():
            transcript_lines.append(len(live.read_text().splitlines()))
        return f"Noted ({len(calls)})."

    run_session("recipe-short", llm, ["Which editor do I use?", "And which shell?"])
    assert len(calls) == 2
    system, messages = calls[0]
    assert system.startswith("You are a helpful assistant.\n\n# Context for session recipe-short")
    assert "neovim" in system  # what the search found for the question, within its budget
    assert messages == ["Which editor do I use?"]
    assert calls[1][1] == ["Which editor do I use?", "Noted (1).", "And which shell?"]
    assert not (mnt / ".sessions/recipe-short").exists()  # disposed
    sessions = mnt / "user/default/sessions"
    archived = wait_for(
        lambda: [p for p in sessions.iterdir() if p.name.endswith("-recipe-short")],
        "the archived session",
    )
    assert "Which editor do I use?" in (archived[0] / "L2.md").read_text()

    calls.clear()
    run_session("recipe-long", llm, [f"Question {i} about deploys." for i in range(22)])
    assert len(calls) == 22 and len(calls[-1][1]) == 43
    # after the 21st turn (42 messages) the transcript was compacted: shorter at the 22nd
    assert transcript_lines[20] == 40 and transcript_lines[21] < 42, transcript_lines
    wait_for(
        lambda: [p for p in sessions.iterdir() if p.name.endswith("-recipe-long")],
        "the long session's archive",
    )


EXERCISE: dict[str, Callable[[Callable[..., Any], Path], None]] = {
    "run_session": exercise_run_session,
}


def hits(mnt: Path, question: str, scope: str = "") -> list[str]:
    results = json.loads((mnt / scope / ".query" / question / "_results.json").read_text())
    return [h["path"] for h in results["hits"]]


def check_owner_client(ns: dict[str, Any], mnt: Path, out: str, fake: FakeAnthropic) -> None:
    assert ns["mem"].base == mnt
    assert ns["alice"].base == mnt / "user/alice" and (mnt / "user/alice").is_dir()
    assert (mnt / "user/alice/preferences").is_dir()  # a real owner, with its type dirs


def check_agent_loop(ns: dict[str, Any], mnt: Path, out: str, fake: FakeAnthropic) -> None:
    assert "not stored" not in out
    assert "value: neovim" in (mnt / "user/default/preferences/editor/L2.md").read_text()


def check_memory_tool(ns: dict[str, Any], mnt: Path, out: str, fake: FakeAnthropic) -> None:
    results = fake.tool_results()
    assert len(results) == 1 and not results[0].get("is_error"), results
    assert "Noted." in out  # the model's last turn, printed by the loop
    node = mnt / "agent/claude/patterns/notes"
    assert (node / "L2.md").read_text() == "Remember that deploys on Friday fail.\n"
    # a memory node like any other: searchable in the agent's owner once indexed
    wait_for(
        lambda: "agent/claude/patterns/notes" in hits(mnt, "deploys on Friday", "agent/claude"),
        "the memory-tool node in .query",
    )


# What a user notices after a Python recipe ran, keyed by a line of the recipe.
CHECKS: dict[str, Callable[[dict[str, Any], Path, str, FakeAnthropic], None]] = {
    'owner="user/alice"': check_owner_client,
    'mem.remember("Prefers neovim."': check_agent_loop,
    "client.beta.messages.tool_runner(": check_memory_tool,
}


def run_python(block: Block, mnt: Path, fake: FakeAnthropic, capsys) -> None:
    code = compile(as_written(block.text, mnt), f"{DOC}:{block.line}", "exec")
    ns: dict[str, Any] = {"__name__": f"recipe_{block.line}"}
    ns.update({k: v for k, v in PLACEHOLDERS.items() if re.search(rf"\b{k}\b", block.text)})
    capsys.readouterr()
    exec(code, ns)
    out = capsys.readouterr().out
    for name in defined_functions(block.text):
        EXERCISE[name](ns[name], mnt)
    for marker, check in CHECKS.items():
        if marker in block.text:
            check(ns, mnt, out, fake)


async def list_through(command: str, args: list[str], mnt: Path) -> str:
    """Start one configured MCP server as a host does and list the mount's root with it."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    # A host passes its environment. The filesystem server's `npx -y <it>@<version>` is run
    # in .node/, where scripts/setup.sh installed that version, and offline: npx takes the
    # installed copy, the way it takes one a project depends on, and never the network.
    env = dict(os.environ, npm_config_offline="true")
    params = StdioServerParameters(command=command, args=args, env=env, cwd=REPO / ".node")
    with tempfile.TemporaryFile("w+") as errlog:
        try:
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                tools = [t.name for t in (await session.list_tools()).tools]
                tool = next((t for t in ("list_directory", "list") if t in tools), None)
                assert tool, f"{command} {args}: no listing tool in {tools}"
                res = await session.call_tool(tool, {"path": str(mnt)})
        except BaseException:
            errlog.seek(0)
            print(f"{command} stderr:\n{errlog.read()}")
            raise
    text = "\n".join(c.text for c in res.content if getattr(c, "type", "") == "text")
    assert not res.is_error, text
    return text


def run_json(block: Block, mnt: Path) -> None:
    config = json.loads(as_written(block.text, mnt))
    servers = config.pop("mcpServers", None)
    assert servers and not config, f"line {block.line}: a JSON block this test cannot run"
    for name, spec in servers.items():
        assert set(spec) <= {"command", "args", "env"}, spec
        env = spec.get("env")
        assert env is None, f"{name}: env is not run here yet"
        listing = trio.run(list_through, spec["command"], spec["args"], mnt)
        assert "[DIR] user" in listing, f"{name}: {listing}"


def run_shell(block: Block, mnt: Path) -> None:
    text = as_written(block.text, mnt)
    if block.lang == "console":  # commands are the `$ ` lines; the rest is their output
        text = "\n".join(ln[2:] for ln in text.splitlines() if ln.startswith("$ "))
    env = dict(os.environ, PATH=f"{REPO / '.venv/bin'}:{os.environ['PATH']}")
    r = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", text],
        cwd=mnt,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, f"line {block.line}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"


# ---- the tests --------------------------------------------------------------------------


def test_every_block_is_run_or_named() -> None:
    """A block is either run by `test_recipe` or named in SAMPLES as not a program; every
    function a Python block defines is called; no SAMPLES entry outlives its block."""
    assert BLOCKS, f"no code blocks found in {DOC}"
    unknown = [
        f"line {b.line}: ```{b.lang} {b.first!r}"
        for b in BLOCKS
        if b.lang not in RUNNERS and sample_kind(b) is None
    ]
    assert not unknown, "blocks neither runnable nor named in SAMPLES:\n" + "\n".join(unknown)
    for (lang, start), what in SAMPLES.items():
        assert any(b.lang == lang and b.first.startswith(start) for b in BLOCKS), (
            f"SAMPLES names a block that is gone: ```{lang} {start!r} ({what})"
        )
    for b in BLOCKS:
        if b.lang == "python":
            missing = [f for f in defined_functions(b.text) if f not in EXERCISE]
            assert not missing, f"line {b.line}: nothing here calls {missing}"


@pytest.mark.parametrize("block", [b for b in BLOCKS if sample_kind(b) is None], ids=lambda b: b.id)
def test_recipe(block: Block, mnt: Path, anthropic_env: FakeAnthropic, capsys) -> None:
    if block.lang == "python":
        run_python(block, mnt, anthropic_env, capsys)
    elif block.lang == "json":
        run_json(block, mnt)
    elif block.lang in ("sh", "bash", "console"):
        run_shell(block, mnt)
    else:
        pytest.fail(f"line {block.line}: no way to run ```{block.lang} (see SAMPLES)")
