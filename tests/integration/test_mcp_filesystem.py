"""The reference MCP filesystem server (npm `@modelcontextprotocol/server-filesystem`, pinned
in scripts/setup.sh) on a real mount, driven by the official `mcp` SDK's stdio client as an
MCP host would: every tool it has works on nodes, attachments, `.query` and `.inbox`, its
writes are memories like any other, and a refusal reaches the agent as an errno."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import trio

from contextfs.testing import Mount, log_problems
from contextfs.testing.agents import Session, filesystem_server, mcp_session

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def mnt(tmp_path_factory) -> Mount:
    base = tmp_path_factory.mktemp("mcpfs")
    (base / "mnt").mkdir()
    m = Mount(base / "mnt", base / "data", search=True)
    m.start()
    root = m.path
    (root / "agent/helper").mkdir()
    node = root / "agent/helper/patterns/deploys"
    node.mkdir()
    (node / "L2.md").write_text("Deploys on Friday afternoons fail more often.\n")
    (node / "runbook.txt").write_text("1. drain\n2. switch\n")
    yield m
    if m.proc is not None:
        m.stop()
    assert log_problems(m.log) == []
    assert m.fsck() == []


def fs(m: Mount):
    command, args = filesystem_server(m.path)
    return mcp_session(command, args)


def hits(m: Mount, question: str) -> list[str]:
    q = question.replace("%", "%25").replace("/", "%2F")
    return [
        h["path"] for h in json.loads((m.path / ".query" / q / "_results.json").read_text())["hits"]
    ]


def wait_for_hit(m: Mount, question: str, path: str, timeout: float = 30) -> list[str]:
    """A write without fsync is searchable once the indexer has drained it (BM25 at once)."""
    deadline = time.monotonic() + timeout
    while path not in (found := hits(m, question)):
        assert time.monotonic() < deadline, found
        time.sleep(0.2)
    return found


async def ok(s: Session, tool: str, **args: object) -> str:
    r = await s.call(tool, **args)
    assert not r.is_error, f"{tool} {args}: {r.text}"
    return r.text


async def test_reads_lists_tree_search_and_info_on_nodes_attachments_and_query(mnt):
    root = mnt.path
    node = root / "agent/helper/patterns/deploys"
    async with fs(mnt) as s:
        assert {"edit_file", "directory_tree", "search_files", "get_file_info"} <= set(
            await s.tools()
        )
        listing = await ok(s, "list_directory", path=str(node))
        for entry in ("[FILE] L0.md", "[FILE] L1.md", "[FILE] L2.md", "[FILE] meta.yaml"):
            assert entry in listing
        assert "[DIR] .history" in listing and "[FILE] runbook.txt" in listing
        text = await ok(s, "read_text_file", path=str(node / "L2.md"))
        assert text == "Deploys on Friday afternoons fail more often.\n"
        assert await ok(s, "read_text_file", path=str(node / "runbook.txt"), head=1) == "1. drain"
        both = await ok(
            s, "read_multiple_files", paths=[str(node / "L0.md"), str(node / "meta.yaml")]
        )
        assert "type: pattern" in both and "Deploys on Friday" in both
        info = await ok(s, "get_file_info", path=str(node / "L2.md"))
        assert f"size: {(node / 'L2.md').stat().st_size}" in info and "isFile: true" in info
        assert "permissions: 444" in await ok(s, "get_file_info", path=str(node / "meta.yaml"))
        tree = json.loads(await ok(s, "directory_tree", path=str(root / "agent/helper/patterns")))
        assert tree[0]["name"] == "deploys"
        assert {c["name"] for c in tree[0]["children"]} >= {"L2.md", "runbook.txt", ".history"}
        found = await ok(s, "search_files", path=str(root / "agent"), pattern="**/runbook.txt")
        assert str(node / "runbook.txt") in found.splitlines()
        # .query: the question directory, its answer bundle, and a node through its link
        q = root / ".query" / "friday afternoons"
        qlist = await ok(s, "list_directory", path=str(q))
        assert "01_deploys" in qlist and "[FILE] _context.md" in qlist
        bundle = await ok(s, "read_text_file", path=str(q / "_context.md"))
        assert "agent/helper/patterns/deploys" in bundle and "fail more often" in bundle
        via_link = await ok(s, "read_text_file", path=str(q / "01_deploys" / "L2.md"))
        assert via_link == text


async def test_write_and_diff_edit_of_a_tier_are_versions_and_searchable(mnt):
    node = mnt.path / "agent/helper/patterns/rollbacks"
    async with fs(mnt) as s:
        await ok(s, "create_directory", path=str(node))
        # a new file: the server creates it exclusively ('wx')
        await ok(s, "write_file", path=str(node / "L2.md"), content="Rollback takes ten minutes.\n")
        # an existing file: the server writes L2.md.<hex>.tmp and renames it over L2.md
        await ok(
            s,
            "write_file",
            path=str(node / "L2.md"),
            content="Rollback takes ten minutes.\nPage the on-call first.\n",
        )
        diff = await ok(
            s,
            "edit_file",
            path=str(node / "L2.md"),
            edits=[{"oldText": "ten minutes", "newText": "four minutes with zanzibar"}],
        )
        assert "-Rollback takes ten minutes." in diff
        assert "+Rollback takes four minutes with zanzibar." in diff
        preview = await ok(
            s,
            "edit_file",
            path=str(node / "L2.md"),
            edits=[{"oldText": "on-call", "newText": "owner"}],
            dryRun=True,
        )
        assert "+Page the owner first." in preview
    assert (node / "L2.md").read_text() == (
        "Rollback takes four minutes with zanzibar.\nPage the on-call first.\n"
    )
    # one save, one version; no temporary file left in the node
    assert sorted(os.listdir(node / ".history")) == ["v1.md", "v2.md", "v3.md"]
    assert sorted(os.listdir(node)) == [".history", "L0.md", "L1.md", "L2.md", "meta.yaml"]
    assert "version: 3" in (node / "meta.yaml").read_text()
    wait_for_hit(mnt, "zanzibar", "agent/helper/patterns/rollbacks")


async def test_attachments_and_moves(mnt):
    node = mnt.path / "agent/helper/patterns/deploys"
    async with fs(mnt) as s:
        await ok(s, "write_file", path=str(node / "checklist.md"), content="- tag\n- deploy\n")
        await ok(
            s,
            "edit_file",
            path=str(node / "checklist.md"),
            edits=[{"oldText": "- tag", "newText": "- tag\n- changelog"}],
        )
        await ok(s, "create_directory", path=str(node / "scripts"))
        await ok(
            s,
            "move_file",
            source=str(node / "checklist.md"),
            destination=str(node / "scripts/checklist.md"),
        )
        sizes = await ok(s, "list_directory_with_sizes", path=str(node / "scripts"))
        assert "checklist.md" in sizes
        # a node renamed through move_file is a `mv` of the node
        await ok(
            s,
            "move_file",
            source=str(node),
            destination=str(mnt.path / "agent/helper/patterns/friday-deploys"),
        )
        # the server refuses to move onto an existing name itself
        r = await s.call(
            "move_file",
            source=str(mnt.path / "agent/helper/patterns/friday-deploys/runbook.txt"),
            destination=str(mnt.path / "agent/helper/patterns/friday-deploys/L2.md"),
        )
        assert r.is_error and "already exists" in r.text
    moved = mnt.path / "agent/helper/patterns/friday-deploys"
    assert not node.exists()
    assert (moved / "scripts/checklist.md").read_text() == "- tag\n- changelog\n- deploy\n"
    assert 'path: "agent/helper/patterns/friday-deploys"' in (moved / "meta.yaml").read_text()
    mnt.remount()
    assert (moved / "scripts/checklist.md").read_text() == "- tag\n- changelog\n- deploy\n"


async def test_writes_into_a_type_directory_and_the_inbox_become_memories(mnt):
    root = mnt.path
    prefs = root / "user/default/preferences"
    async with fs(mnt) as s:
        await ok(
            s,
            "write_file",
            path=str(prefs / "editor.md"),
            content="I prefer helix with soft wrap.\n",
        )
        # the drop was routed at close: a node, not a file, is what the directory holds
        assert "[DIR] editor" in await ok(s, "list_directory", path=str(prefs))
        l2 = await ok(s, "read_text_file", path=str(prefs / "editor/L2.md"))
        assert "I prefer helix with soft wrap." in l2 and "topic: editor" in l2
        await ok(
            s,
            "write_file",
            path=str(root / ".inbox/trip.md"),
            content="Alice flies to Lisbon on 3 May.\n",
        )
        report = root / ".inbox/trip.md.report.md"
        deadline = time.monotonic() + 30
        while "state: done" not in (report.read_text() if report.exists() else ""):
            assert time.monotonic() < deadline
            await trio.sleep(0.2)
        assert "[FILE] trip.md.report.md" in await ok(
            s, "list_directory", path=str(root / ".inbox")
        )
    wait_for_hit(mnt, "helix soft wrap", "user/default/preferences/editor")


async def test_refusals_reach_the_agent_as_errnos_with_the_reason_in_status(mnt):
    root = mnt.path
    node = root / "agent/helper/patterns/friday-deploys"
    if not node.exists():  # run alone: the moves test made this name
        node = root / "agent/helper/patterns/deploys"
    async with fs(mnt) as s:
        r = await s.call("write_file", path=str(node / "meta.yaml"), content="version: 99\n")
        assert r.is_error and r.text.startswith("EACCES")
        r = await s.call(
            "write_file",
            path=str(root / "user/default/preferences/colour.md"),
            content="---\ncolour: red\n---\nRed.\n",
        )
        assert r.is_error and r.text.startswith("EINVAL")
        q = root / ".query/friday/_context.md"
        r = await s.call("edit_file", path=str(q), edits=[{"oldText": "a", "newText": "b"}])
        assert r.is_error and r.text.startswith("EACCES")
        # the server's mkdir is recursive, and Node's recursive mkdir reports a refused
        # last component as ENOENT: the agent sees ENOENT, .status the EINVAL and why
        r = await s.call("create_directory", path=str(root / "agent/helper/patterns/Bad Name"))
        assert r.is_error and r.text.startswith("ENOENT")
        await ok(s, "write_file", path=str(root / ".inbox/once.md"), content="First.\n")
        r = await s.call("write_file", path=str(root / ".inbox/once.md"), content="Second.\n")
        assert r.is_error and r.text.startswith("EACCES")
        r = await s.call("read_text_file", path="/etc/hostname")
        assert r.is_error and "outside allowed directories" in r.text
    # nothing left behind by the refused temp-file-and-rename writes
    assert not [n for n in os.listdir(node) if n.endswith(".tmp")]
    assert not [n for n in os.listdir(root / ".inbox") if n.endswith(".tmp")]
    status = mnt.status()
    assert "meta.yaml is derived and read-only" in status
    assert "unknown field 'colour' for type preference" in status
    assert "once.md is read-only" in status
    assert "EINVAL mkdir agent/helper/patterns/Bad Name: 'Bad Name' does not fit" in status
    kept = list(Path(mnt.data_dir, "refused").glob("*colour.md"))
    assert kept and "Red." in kept[0].read_text()
