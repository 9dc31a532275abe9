"""`contextfs mcp MNT` on a real mount, driven by the official `mcp` SDK's stdio client:
each tool does what the same path call does on the mount, and a refusal comes back as an
MCP tool error with the errno name and the reason `.status` gives."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import trio

from contextfs.agents.mcpserver import TOOLS
from contextfs.testing import Mount, contextfs_cmd, log_problems, wait_index_ready
from contextfs.testing.agents import Session, contextfs_server, mcp_session

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def mnt(tmp_path_factory) -> Mount:
    base = tmp_path_factory.mktemp("mcpsrv")
    (base / "mnt").mkdir()
    m = Mount(base / "mnt", base / "data", search=True)
    m.start()
    root = m.path
    (root / "agent/helper").mkdir()
    for rel, text in (
        (
            "agent/helper/patterns/flaky-tests",
            "The integration suite flakes when the disk is full.",
        ),
        ("user/default/preferences/shell", "The owner uses fish as the login shell."),
        ("user/default/entities/marguerite", "Marguerite maintains the flaky build farm."),
    ):
        (root / rel).mkdir()
        with open(root / rel / "L2.md", "w") as f:
            f.write(text + "\n")
            f.flush()
            os.fsync(f.fileno())  # searchable once fsync returns
    yield m
    if m.proc is not None:
        m.stop()
    assert log_problems(m.log) == []
    assert m.fsck() == []


def server(m: Mount):
    command, args, env = contextfs_server(m.path)
    return mcp_session(command, args, env=env)


async def ok(s: Session, tool: str, **args: object) -> str:
    r = await s.call(tool, **args)
    assert not r.is_error, f"{tool} {args}: {r.text}"
    return r.text


async def test_search_reads_the_query_directory_with_budget_type_and_scope(mnt):
    # the two reads compared must see the same index: after the fsyncs BM25 has the nodes
    # and their vectors follow, so a bundle's note can change between the two
    await trio.to_thread.run_sync(wait_index_ready, mnt.path, 120.0)
    async with server(mnt) as s:
        assert await s.tools() == list(TOOLS)
        bundle = await ok(s, "search", question="flaky")
        assert bundle == (mnt.path / ".query/flaky/_context.md").read_text()
        assert "agent/helper/patterns/flaky-tests" in bundle
        assert "user/default/entities/marguerite" in bundle
        only = await ok(s, "search", question="flaky", type="entity", budget=300)
        assert only == (mnt.path / ".query/@budget=300,type=entity/flaky/_context.md").read_text()
        assert "marguerite" in only and "flaky-tests" not in only
        assert len(only) <= 300 * 4
        hits = json.loads(
            await ok(s, "search", question="flaky", scope="agent/helper", k=5, results_json=True)
        )
        assert [h["path"] for h in hits["hits"]] == ["agent/helper/patterns/flaky-tests"]
        # a slash in a question is escaped for the path, not a directory
        await ok(s, "search", question="fish/shell 50%")


async def test_remember_routes_a_typed_write_or_drops_into_the_inbox(mnt):
    root = mnt.path
    async with server(mnt) as s:
        said = await ok(
            s,
            "remember",
            text="---\nvalue: tabs\n---\nThe owner indents with tabs.\n",
            path="user/default/preferences/indentation.md",
        )
        assert "user/default/preferences/indentation.md" in said
        node = root / "user/default/preferences/indentation"
        assert "The owner indents with tabs." in (node / "L2.md").read_text()
        assert "value: tabs" in await ok(s, "read", path="user/default/preferences/indentation")
        assert "indentation.md" not in os.listdir(root / "user/default/preferences")
        # a path inside a node is that file: L2.md is a new version (how a node is edited)
        await ok(
            s,
            "remember",
            text="The owner indents with two spaces now.\n",
            path="user/default/preferences/indentation/L2.md",
        )
        assert (node / "L2.md").read_text() == "The owner indents with two spaces now.\n"
        assert sorted(os.listdir(node / ".history")) == ["v1.md", "v2.md"]
        report = await ok(s, "remember", text="Marguerite adopted a greyhound named Quokka.")
        assert "state: done" in report and ".inbox/mcp-" in report
        # a fact about someone else is a memory about them
        report = await ok(s, "remember", text="Maya's favourite tea is genmaicha.")
        assert "created user/default/entities/maya" in report, report
        maya = (root / "user/default/entities/maya/L2.md").read_text()
        assert "favourite tea: genmaicha" in maya, maya
        # the inbox item is an archived conversation: searchable like any other memory
        deadline = time.monotonic() + 30
        while "Quokka" not in (found := await ok(s, "search", question="greyhound Quokka")):
            assert time.monotonic() < deadline, found
            await trio.sleep(0.3)


async def test_remember_says_what_became_of_the_write(mnt):
    prefs = "user/default/preferences"
    async with server(mnt) as s:
        said = await ok(s, "remember", text="Tea: green.\n", path=f"{prefs}/tea.md")
        assert f"tea.md was routed by its type into the new node {prefs}/tea" in said, said
        said = await ok(
            s, "remember", text="---\ntopic: tea\n---\nSencha.\n", path=f"{prefs}/other.md"
        )
        assert f"routed by its type into the node {prefs}/tea (version 2)" in said, said
        said = await ok(s, "remember", text="Tea: black.\n", path=f"{prefs}/tea/L2.md")
        assert said == f"saved: {prefs}/tea/L2.md is version 3 of the node {prefs}/tea", said
        said = await ok(s, "remember", text="notes\n", path=f"{prefs}/tea/notes.txt")
        assert f"is an attachment of the node {prefs}/tea," in said, said
        for scratch in ("tea.md.swp", ".tea.md"):  # an editor's names: parked, never routed
            said = await ok(s, "remember", text="Tea: oolong.\n", path=f"{prefs}/{scratch}")
            assert said.startswith(f"parked, not remembered: {prefs}/{scratch}"), said
            assert scratch in os.listdir(mnt.path / prefs)
        assert "oolong" not in (mnt.path / prefs / "tea/L2.md").read_text()


async def test_read_and_list_are_the_files_of_the_mount(mnt):
    async with server(mnt) as s:
        node = "agent/helper/patterns/flaky-tests"
        assert await ok(s, "read", path=node) == (mnt.path / node / "L2.md").read_text()
        assert await ok(s, "read", path=node, tier="L0") == (mnt.path / node / "L0.md").read_text()
        assert "type: pattern" in await ok(s, "read", path=f"{node}/meta.yaml")
        listing = (await ok(s, "list", path=node)).splitlines()
        assert "[DIR] .history" in listing and "[FILE] L2.md" in listing
        q = (await ok(s, "list", path=".query/flaky")).splitlines()
        assert any(ln.startswith("[LINK] 0") and "-> ../../" in ln for ln in q)
        assert "[DIR] agent" in (await ok(s, "list")).splitlines()
        # a directory that is no node has no tiers: said so, with what it holds
        for d in ("user/default", "agent/helper/patterns", ""):
            r = await s.call("read", path=d)
            assert r.is_error and "EISDIR" in r.text and "is a directory, not a node" in r.text
            assert "L2.md" not in r.text, r.text
        r = await s.call("read", path="user/default")
        assert "[DIR] preferences" in r.text.splitlines(), r.text


async def test_a_session_from_start_to_archive(mnt):
    root = mnt.path
    async with server(mnt) as s:
        ctx = await ok(s, "start_session", session="mcp1")
        assert ctx.startswith("# Context for session mcp1")
        assert (root / ".sessions/mcp1").is_dir()
        turns = [
            {"role": "user", "content": "My sister Ottilie lives in Tromso."},
            {"role": "assistant", "content": "Noted: Ottilie lives in Tromso."},
        ]
        assert "recorded 2 turn(s)" in await ok(s, "add_turns", session="mcp1", turns=turns)
        assert "Ottilie" in (root / ".sessions/mcp1/transcript.jsonl").read_text()
        assert (await ok(s, "session_context", session="mcp1")).startswith("# Context")
        await ok(s, "end_session", session="mcp1")
        assert not (root / ".sessions/mcp1").exists()
        archived = [p for p in (root / "user/default/sessions").iterdir() if "mcp1" in p.name]
        assert archived and "Ottilie" in (archived[0] / "L2.md").read_text()
        assert "state: read-write" in await ok(s, "status")


async def test_refusals_are_tool_errors_with_errno_and_status_reason(mnt):
    async with server(mnt) as s:
        r = await s.call("search", question="flaky", budget=5)
        assert r.is_error and "EINVAL" in r.text
        assert "query option budget must be between 50 and 100000" in r.text
        r = await s.call(
            "remember", text="---\ncolour: red\n---\nRed.\n", path="user/default/preferences/c.md"
        )
        assert r.is_error and "EINVAL" in r.text
        assert "unknown field 'colour' for type preference" in r.text and "bytes kept at" in r.text
        r = await s.call("remember", text="x", path="agent/helper/meta.yaml")
        assert r.is_error and "EACCES" in r.text and "cannot create here" in r.text
        r = await s.call("read", path="../../etc/passwd")
        assert r.is_error and "EINVAL" in r.text and "outside the mount" in r.text
        # a symbolic link kept in a node leads out of the mount: never followed
        node = mnt.path / "user/default/preferences/links"
        node.mkdir()
        (node / "L2.md").write_text("Links.\n")
        (node / "esc").symlink_to("/etc")
        for call, args in (
            ("read", {"path": "user/default/preferences/links/esc/hostname"}),
            ("list", {"path": "user/default/preferences/links/esc"}),
            ("remember", {"text": "x", "path": "user/default/preferences/links/esc/cfs.txt"}),
        ):
            r = await s.call(call, **args)
            assert r.is_error and "leads outside the mount" in r.text, (call, r.text)
        assert not Path("/etc/cfs.txt").exists()
        # more than a tier holds: the write is refused (it took 4 MiB and said "remembered")
        r = await s.call(
            "remember", text="lorem ipsum dolor. " * 250_000, path="user/default/preferences/h.md"
        )
        assert r.is_error and "EFBIG" in r.text, r.text
        assert not (mnt.path / "user/default/preferences/h").exists()
        r = await s.call("read", path="user/nobody/profile")
        assert r.is_error and "ENOENT" in r.text
        r = await s.call("end_session", session="never-started")
        assert r.is_error and "ENOENT" in r.text
        r = await s.call("start_session", session="bad id")
        assert r.is_error and "EINVAL" in r.text and "session id" in r.text
        await ok(s, "start_session", session="turns")
        r = await s.call("add_turns", session="turns", turns=[{"bad": "x"}])
        assert r.is_error and "EINVAL" in r.text and "turn 1 has no role" in r.text
        assert (mnt.path / ".sessions/turns/transcript.jsonl").read_text() == ""
        await ok(s, "end_session", session="turns")
    # the server stays usable after errors, and the mount is unharmed
    assert "state: read-write" in mnt.status()


async def test_search_options_and_scope_stay_in_the_mount(mnt):
    # a host file where a `type` of `..` would lead: never read
    host = mnt.path.parent / "outside"
    host.mkdir(exist_ok=True)
    (host / "_context.md").write_text("HOST FILE OUTSIDE THE MOUNT\n")
    node = mnt.path / "user/default/preferences/scoped"
    node.mkdir()
    (node / "L2.md").write_text("Scoped.\n")
    (node / "out").symlink_to(host)
    async with server(mnt) as s:
        for args in (
            {"question": "outside", "type": "preference/../../.."},
            {"question": "flaky", "type": "preference,k=1"},  # no options of its own
            {"question": "flaky", "type": "Preference"},
        ):
            r = await s.call("search", **args)
            assert r.is_error and "EINVAL" in r.text, (args, r.text)
            assert "type must be a type name" in r.text and "HOST FILE" not in r.text, r.text
        r = await s.call("search", question="x", scope="user/default/preferences/scoped/out")
        assert r.is_error and "leads outside the mount" in r.text, r.text
        assert "marguerite" in await ok(s, "search", question="flaky", type="entity")


async def test_a_nul_in_an_argument_is_einval_saying_so(mnt):
    async with server(mnt) as s:
        for tool, args in (
            ("read", {"path": "user/\0x"}),
            ("list", {"path": "user/\0"}),
            ("remember", {"text": "x", "path": "user/default/preferences/a\0b.md"}),
            ("remember", {"text": "x", "owner": "user/\0"}),
            ("search", {"question": "tea\0time"}),
        ):
            r = await s.call(tool, **args)
            assert r.is_error and "EINVAL" in r.text and "NUL character" in r.text, (tool, r)
        r = await s.call("start_session", session="s\0")
        assert r.is_error and "EINVAL" in r.text and "is not a session id" in r.text, r.text
        assert "state: read-write" in await ok(s, "status")  # and the server goes on


def test_mcp_refuses_a_path_that_is_not_a_mount(tmp_path):
    r = subprocess.run(contextfs_cmd("mcp", str(tmp_path)), capture_output=True, text=True)
    assert r.returncode == 2 and "is not a live ContextFS mount" in r.stderr
