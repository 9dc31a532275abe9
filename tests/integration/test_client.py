"""The Python API (`contextfs.agents.client`) driving a real mount, search on, as an agent would.

One agent loop: remember a preference (routed by its type), compose a session's context,
record turns, search within a budget and a type, compact and dispose of the session (it
becomes a session node), drop a note into the inbox; and every failure an agent can meet
comes back as a typed exception carrying the errno and the mount's own reason.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from contextfs.agents.client import (
    ContextFS,
    InvalidInput,
    NotFound,
    NotMounted,
    Refused,
    Turn,
)
from contextfs.testing import BAD_LOG, Mount


@pytest.fixture(scope="module")
def searchable(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mount]:
    top = tmp_path_factory.mktemp("client")
    (top / "mnt").mkdir()
    m = Mount(top / "mnt", top / "data", search=True)
    m.start()
    try:
        yield m
    finally:
        m.stop()
    assert m.fsck() == []
    assert not BAD_LOG.search(m.log.read_text(errors="replace")), "the daemon logged a problem"


def wait_for(check, what: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_an_agent_loop_through_the_client(searchable: Mount) -> None:
    root = searchable.path
    c = ContextFS(root)
    (root / "user/default/profile/L2.md").write_text("Name: Ada. Lives in Lisbon.\n")
    written = c.remember(
        "She edits everything in neovim.",
        type="preference",
        name="editor",
        fields={"value": "neovim"},
    )
    assert written == root / "user/default/preferences/editor.md"
    node = root / "user/default/preferences/editor"
    assert "value: neovim" in (node / "L2.md").read_text()  # routed into the keyed node
    assert written.name not in os.listdir(written.parent)  # the drop file does not stay
    c.remember("Prefers tea to coffee.", type="preferences", name="drink")
    assert (root / "user/default/preferences/drink/L2.md").exists()

    ctx = c.compose("s1")
    assert ctx.startswith("# Context for session s1") and "## Profile\n\nName: Ada." in ctx
    assert c.start("s1") is False  # already live: compose started it
    n = c.after_turn(
        "s1",
        [
            Turn("user", "Which editor do I use again?", id="m1"),
            {"role": "assistant", "content": "neovim"},
        ],
        sync=True,
    )
    assert n == 2
    lines = (root / ".sessions/s1/transcript.jsonl").read_text().splitlines()
    assert lines[0] == '{"role": "user", "content": "Which editor do I use again?", "id": "m1"}'
    assert "user/default/preferences/editor" in c.compose("s1")  # relevant to the turns

    found = c.search("which editor does she use", budget=200, type="preference")
    assert found.hits and found.hits[0].path == "user/default/preferences/editor"
    assert all(h.type == "preference" for h in found.hits)
    assert "neovim" in found.context and len(found.context) <= 200 * 4
    assert found.directory.name == "which editor does she use"
    assert c.search("a%b/c question").question == "a%b/c question"  # escaped, not split

    c.compact("s1")
    c.dispose("s1")
    assert not (root / ".sessions/s1").exists()
    archived = wait_for(
        lambda: [p for p in (root / "user/default/sessions").iterdir() if p.name.endswith("-s1")],
        "the session archive",
    )
    assert "editor" in c.read(f"user/default/sessions/{archived[0].name}")

    dropped = c.remember("Met Tom at the climbing gym on Friday.")
    assert dropped.parent == root / ".inbox"
    report = Path(f"{dropped}.report.md")
    wait_for(lambda: "state: done" in report.read_text(), "the inbox report")
    status = c.status()
    assert status["counts"]["nodes"] >= 4 and status["refusals"]["count"] == 0


def test_errors_come_back_typed_with_the_mounts_reason(searchable: Mount, tmp_path) -> None:
    root = searchable.path
    with pytest.raises(NotMounted):
        ContextFS(tmp_path)
    with pytest.raises(NotFound):
        ContextFS(root, owner="user/nobody", create=False)
    assert not (root / "user/nobody").exists()
    assert ContextFS(root, owner="user/nobody").base.is_dir()  # made, as `mkdir` makes one
    with pytest.raises(InvalidInput) as bad_owner:
        ContextFS(root, owner="user/no body")  # the mount's rule for owner ids
    assert bad_owner.value.errno == errno.EINVAL
    c = ContextFS(root)
    with pytest.raises(InvalidInput) as bad:
        c.remember("Tea.", type="preference", name="tea", fields={"colour": "green"})
    assert bad.value.errno == errno.EINVAL
    assert "unknown field 'colour'" in bad.value.reason  # from .status.json
    assert "unknown field 'colour'" in str(bad.value)
    with pytest.raises(InvalidInput) as bad_type:
        c.search("anything", type="no_such_type")
    assert bad_type.value.errno == errno.EINVAL and "no_such_type" in bad_type.value.reason
    # a type that is no type name, a scope or node a link leads out of: refused here
    for call in (
        lambda: c.search("anything", type="preference/../../.."),
        lambda: c.search("anything", type="preference,k=1"),
        lambda: c.search("anything", scope="../.."),
        lambda: c.read("../../etc"),
    ):
        with pytest.raises(InvalidInput):
            call()
    # a type that is a path would write the memory outside the mount
    with pytest.raises(InvalidInput):
        c.remember("escaped", type="../../..", name="planted")
    assert not (root.parent / "planted.md").exists()
    with pytest.raises(NotFound):
        c.dispose("never-started")
    with pytest.raises(InvalidInput):
        c.compose("../escape")  # refused before any file call
    with pytest.raises(Refused) as ro:
        c._write(root / ".status", b"x")  # a read-only file of the mount
    assert ro.value.errno == errno.EACCES
    with pytest.raises(InvalidInput):
        c.remember("x", type="no-such-type")


def test_an_owner_scoped_client_stays_in_its_owner(searchable: Mount) -> None:
    root = searchable.path
    (root / "user/carol").mkdir()
    carol = ContextFS(root, owner="user/carol")
    carol.remember("Carol drinks rooibos every evening.", type="preference", name="evening-drink")
    assert (root / "user/carol/preferences/evening-drink/L2.md").exists()
    assert not (root / "user/default/preferences/evening-drink").exists()
    assert carol.compose("c1").startswith("# Context for session c1")
    assert (root / "user/carol/.sessions/c1").is_dir() and not (root / ".sessions/c1").exists()
    # a write without fsync is searchable once the indexer has taken it (BM25 first)
    deadline = time.monotonic() + 30
    while not (hits := carol.search("rooibos evening drink").hits):
        assert time.monotonic() < deadline, "the new preference was never found"
        time.sleep(0.2)
    assert all(h.path.startswith("user/carol/") for h in hits)
    carol.dispose("c1")
