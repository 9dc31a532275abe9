"""A vendor memory tool's `/memories` on a real mount, through the `anthropic` SDK's own
memory-tool dispatch (`BetaAbstractMemoryTool.call` with the command objects the model
sends): the SDK's `BetaLocalFilesystemMemoryTool` pointed at a node, and ContextFS's
adapter that makes each memory file a node (`contextfs.agents.memorytool`)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from anthropic.lib.tools import ToolError
from anthropic.lib.tools._beta_builtin_memory_tool import BetaLocalFilesystemMemoryTool

from contextfs.agents.memorytool import MemoryDirectory, anthropic_memory_tool
from contextfs.testing import Mount, log_problems

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def mnt(tmp_path_factory) -> Mount:
    base = tmp_path_factory.mktemp("memtool")
    (base / "mnt").mkdir()
    m = Mount(base / "mnt", base / "data", search=True)
    m.start()
    (m.path / "agent/claude").mkdir()
    yield m
    if m.proc is not None:
        m.stop()
    assert log_problems(m.log) == []
    assert m.fsck() == []


def tool(m: Mount):
    return anthropic_memory_tool(MemoryDirectory(m.path, m.path / "agent/claude/patterns"))


def hits(m: Mount, question: str) -> list[str]:
    res = json.loads((m.path / ".query" / question / "_results.json").read_text())
    return [h["path"] for h in res["hits"]]


def wait_for_hit(m: Mount, question: str, path: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while path not in (found := hits(m, question)):
        assert time.monotonic() < deadline, found
        time.sleep(0.2)


def test_each_command_is_a_node_operation_and_becomes_searchable_memory(mnt):
    t = tool(mnt)
    patterns = mnt.path / "agent/claude/patterns"
    empty = t.call({"command": "view", "path": "/memories"})
    assert empty.endswith("\n4K\t/memories")

    said = t.call(
        {
            "command": "create",
            "path": "/memories/deploy-lessons.md",
            "file_text": "Deploy on Tuesdays.\nUse blue-green switching.\n",
        }
    )
    assert said == "File created successfully at: /memories/deploy-lessons.md"
    node = patterns / "deploy-lessons"
    assert (node / "L2.md").read_text() == "Deploy on Tuesdays.\nUse blue-green switching.\n"
    assert "type: pattern" in (node / "meta.yaml").read_text()

    said = t.call(
        {
            "command": "str_replace",
            "path": "/memories/deploy-lessons.md",
            "old_str": "Tuesdays",
            "new_str": "Wednesdays after the marmoset review",
        }
    )
    assert "     1\tDeploy on Wednesdays after the marmoset review." in said
    t.call(
        {
            "command": "insert",
            "path": "/memories/deploy-lessons.md",
            "insert_line": 1,
            "insert_text": "Never on Fridays.\n",
        }
    )
    view = t.call({"command": "view", "path": "/memories/deploy-lessons.md"})
    assert view == (
        "Here's the content of /memories/deploy-lessons.md with line numbers:\n"
        "     1\tDeploy on Wednesdays after the marmoset review.\n"
        "     2\tNever on Fridays.\n"
        "     3\tUse blue-green switching.\n"
        "     4\t"
    )
    part = t.call({"command": "view", "path": "/memories/deploy-lessons.md", "view_range": [2, 3]})
    assert part.splitlines()[1:] == [
        "     2\tNever on Fridays.",
        "     3\tUse blue-green switching.",
    ]
    # every command that changed the file saved one version of the node
    assert sorted(os.listdir(node / ".history")) == ["v1.md", "v2.md", "v3.md"]
    wait_for_hit(mnt, "marmoset review", "agent/claude/patterns/deploy-lessons")

    t.call(
        {
            "command": "rename",
            "old_path": "/memories/deploy-lessons.md",
            "new_path": "/memories/release-lessons.md",
        }
    )
    assert not node.exists() and (patterns / "release-lessons/L2.md").exists()
    listing = t.call({"command": "view", "path": "/memories"})
    size = (patterns / "release-lessons/L2.md").stat().st_size
    assert listing.splitlines()[1:] == ["4K\t/memories", f"{size}B\t/memories/release-lessons.md"]
    wait_for_hit(mnt, "marmoset review", "agent/claude/patterns/release-lessons")

    assert t.call({"command": "delete", "path": "/memories/release-lessons.md"}) == (
        "Successfully deleted /memories/release-lessons.md"
    )
    # a soft delete: the node is in the owner's trash, restorable with mv
    trashed = mnt.path / "agent/claude/.trash/patterns/release-lessons"
    assert "Never on Fridays." in (trashed / "L2.md").read_text()
    assert t.call({"command": "view", "path": "/memories"}).endswith("\n4K\t/memories")


def test_a_memory_written_elsewhere_is_a_file_of_the_tool(mnt):
    """A pattern a conversation or another agent stored is there for the tool to view."""
    node = mnt.path / "agent/claude/patterns/code-review"
    node.mkdir()
    (node / "L2.md").write_text("Reviewers ask for tests first.\n")
    t = tool(mnt)
    assert "/memories/code-review.md" in t.call({"command": "view", "path": "/memories"})
    assert "     1\tReviewers ask for tests first." in t.call(
        {"command": "view", "path": "/memories/code-review.md"}
    )


def test_refusals_come_back_as_tool_errors_that_say_why(mnt):
    t = tool(mnt)
    patterns = mnt.path / "agent/claude/patterns"

    def refused(command: dict) -> str:
        with pytest.raises(ToolError) as info:
            t.call(command)
        return str(info.value)

    text = refused({"command": "create", "path": "/memories/User_Prefs.md", "file_text": "x"})
    assert text.startswith("EINVAL") and "lower-case letters and digits" in text
    text = refused({"command": "create", "path": "/memories/a/b.md", "file_text": "x"})
    assert text.startswith("EINVAL")
    text = refused(
        {
            "command": "create",
            "path": "/memories/colours.md",
            "file_text": "---\ncolour: red\n---\nRed.\n",
        }
    )
    assert text.startswith("EINVAL") and "unknown field 'colour' for type pattern" in text
    assert "bytes kept at" in text
    assert not (patterns / "colours").exists()  # no empty memory left behind

    t.call({"command": "create", "path": "/memories/once.md", "file_text": "a a\n"})
    assert refused({"command": "create", "path": "/memories/once.md", "file_text": "b"}).startswith(
        "EEXIST"
    )
    text = refused(
        {"command": "str_replace", "path": "/memories/once.md", "old_str": "a", "new_str": "b"}
    )
    assert "Multiple occurrences" in text and "lines: 1, 1" in text
    text = refused(
        {"command": "str_replace", "path": "/memories/once.md", "old_str": "z", "new_str": "b"}
    )
    assert "did not appear verbatim" in text
    text = refused(
        {"command": "insert", "path": "/memories/once.md", "insert_line": 9, "insert_text": "x"}
    )
    assert "[0, 1]" in text
    assert refused({"command": "view", "path": "/memories/none.md"}).startswith("ENOENT")
    assert refused({"command": "delete", "path": "/memories"}).startswith("EPERM")
    assert refused(
        {"command": "rename", "old_path": "/memories/none.md", "new_path": "/memories/x.md"}
    ).startswith("ENOENT")
    assert (patterns / "once/L2.md").read_text() == "a a\n"  # refused edits changed nothing

    # a secret is redacted at the write boundary, like any write
    t.call(
        {
            "command": "create",
            "path": "/memories/tokens.md",
            "file_text": "CI token ghp_abcdefghijklmnopqrstuvwxyz0123456789 expires soon\n",
        }
    )
    shown = t.call({"command": "view", "path": "/memories/tokens.md"})
    assert "[REDACTED:github_token]" in shown and "ghp_" not in shown
    # an edit's snippet shows what was stored, the secret redacted as in the file
    said = t.call(
        {
            "command": "str_replace",
            "path": "/memories/tokens.md",
            "old_str": "expires soon",
            "new_str": "expires soon\npassword: Hunter2!Secret99",
        }
    )
    assert "Hunter2!Secret99" not in said and "[REDACTED:" in said, said
    assert "Hunter2" not in (mnt.path / "agent/claude/patterns/tokens/L2.md").read_text()


def test_the_sdks_own_filesystem_tool_on_a_node_keeps_attachments_not_memories(mnt):
    """`BetaLocalFilesystemMemoryTool` pointed at a node works command by command (its
    temp-file + rename writes, its 0700 mkdir) and survives a remount, but what it writes are
    attachments of that node: stored, not searched. This is why the adapter exists."""
    node = mnt.path / "agent/claude/skills/memory-files"
    node.mkdir(parents=False)
    sdk = BetaLocalFilesystemMemoryTool(base_path=str(node))
    sdk.call(
        {"command": "create", "path": "/memories/notes.md", "file_text": "Use the okapi cache.\n"}
    )
    sdk.call(
        {
            "command": "str_replace",
            "path": "/memories/notes.md",
            "old_str": "okapi",
            "new_str": "capybara",
        }
    )
    sdk.call(
        {
            "command": "insert",
            "path": "/memories/notes.md",
            "insert_line": 0,
            "insert_text": "# Notes",
        }
    )
    sdk.call(
        {"command": "rename", "old_path": "/memories/notes.md", "new_path": "/memories/cache.md"}
    )
    sdk.call({"command": "create", "path": "/memories/gone.md", "file_text": "x\n"})
    sdk.call({"command": "delete", "path": "/memories/gone.md"})
    assert "/memories/cache.md" in sdk.call({"command": "view", "path": "/memories"})
    mnt.remount()
    assert (node / "memories/cache.md").read_text() == "# Notes\nUse the capybara cache.\n"
    assert sorted(os.listdir(node / "memories")) == ["cache.md"]
    assert (Path(node / "memories").stat().st_mode & 0o777) == 0o700
    assert "agent/claude/skills/memory-files" not in hits(mnt, "capybara cache")
