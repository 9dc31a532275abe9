"""A machine write (inbox extraction, consolidation) never silently replaces text a person
wrote (SPEC §5): it lands below the person's text and the inbox report says so."""

from __future__ import annotations

from pathlib import Path

from contextfs.memory.consolidate import consolidate
from contextfs.memory.document import Document
from contextfs.memory.service import Memory
from tests.fs.test_virtual_dirs import Mount

U = "user/default"
NOTES = "My own notes: vim, because modal editing keeps my hands on the keys.\n"


async def test_extraction_keeps_a_hand_written_preference_and_says_so(
    memory: Memory, tmp_path: Path
) -> None:
    m = Mount(memory, tmp_path, search=False)
    fs = m.fs
    await fs.mkdir(f"{U}/preferences/editor")
    await fs.write(f"{U}/preferences/editor/L2.md", NOTES.encode())
    line = '{"role":"user","content":"My favorite editor is emacs, I use it every day."}\n'
    await fs.write(".inbox/chat.jsonl", line.encode())
    assert await m.service.step() is True

    l2 = await fs.text(f"{U}/preferences/editor/L2.md")
    assert NOTES.strip() in l2, "the person's text is still the node's text"
    assert "emacs" in l2, "the extracted fact is added, not lost"
    assert l2.index(NOTES.strip()) < l2.index("emacs"), "below the person's text"
    report = await fs.text(".inbox/chat.jsonl.report.md")
    assert f"changed {U}/preferences/editor (kept your text; added" in report, report

    # a hand-written L0 stays over a machine's change of L2 (it has no version to
    # come back from); the person's own next L2 derives it again
    await fs.write(f"{U}/preferences/editor/L0.md", b"Editor: my notes on vim\n")
    await fs.write(".inbox/more.jsonl", line.replace("every day", "at work").encode())
    assert await m.service.step() is True
    assert await fs.text(f"{U}/preferences/editor/L0.md") == "Editor: my notes on vim\n"
    assert await fs.text(f"{U}/preferences/editor/L2.md") != l2
    l2 = await fs.text(f"{U}/preferences/editor/L2.md")
    # the same fact again changes nothing: the section is not added twice
    await fs.write(".inbox/again.jsonl", line.encode())
    assert await m.service.step() is True
    assert await fs.text(f"{U}/preferences/editor/L2.md") == l2
    # a person's own later write replaces as any write of theirs does
    await fs.write(f"{U}/preferences/editor/L2.md", b"helix now\n")
    assert await fs.text(f"{U}/preferences/editor/L2.md") == "helix now\n"
    assert await fs.text(f"{U}/preferences/editor/L0.md") == "helix now\n"


async def test_extraction_still_replaces_what_a_machine_wrote(
    memory: Memory, tmp_path: Path
) -> None:
    m = Mount(memory, tmp_path, search=False)
    fs = m.fs
    for name, editor in (("a.jsonl", "vim"), ("b.jsonl", "emacs")):
        line = f'{{"role":"user","content":"My favorite editor is {editor}."}}\n'
        await fs.write(f".inbox/{name}", line.encode())
        assert await m.service.step() is True
    l2 = await fs.text(f"{U}/preferences/editor/L2.md")
    assert "value: emacs" in l2 and "vim" not in l2, l2
    assert "kept your text" not in await fs.text(".inbox/b.jsonl.report.md")


async def test_a_person_drop_counts_as_person_text_across_a_restart(memory: Memory) -> None:
    """Who wrote a version is stored with it (versions.reason): after a restart a person's
    node is still protected."""
    ctype = memory.types["preference"]
    memory.routing.route(
        ("user", "default"), ctype, "editor.md", b"---\nvalue: vim\n---\nI like vim.\n"
    )
    store = memory.store
    again = Memory(store, memory.types, data_dir=memory.data_dir)
    n = again.live_node(("user", "default"), ctype, "editor")
    assert n is not None and n.person_wrote
    res = again.routing.route_document(
        ("user", "default"),
        ctype,
        Document({"topic": "editor", "value": "emacs"}, "Uses emacs."),
        source="inbox:c.jsonl#m1",
    )
    assert res.kept_person_text and res.changed
    assert "value: vim" in n.l2 and "I like vim." in n.l2 and "emacs" in n.l2


async def test_consolidation_keeps_the_person_text_of_the_node_it_keeps(memory: Memory) -> None:
    ctype = memory.types["preference"]
    owner = ("user", "default")
    mine = "I use vim for all editing, with relative line numbers and no plugins at all."
    memory.routing.route(owner, ctype, "editor.md", f"{mine}\n".encode())
    memory.clock = lambda: 2e9  # the machine's node is newer: the person's is kept
    memory.routing.route_document(
        owner,
        ctype,
        Document({"topic": "text-editor"}, mine.replace("no plugins", "few plugins")),
        source="inbox:c.jsonl#m1",
    )
    report = consolidate(memory, now=2e9)
    assert report.merged == 1, report.details
    kept = memory.live_node(owner, ctype, "editor")
    assert kept is not None and mine in kept.l2
    assert "few plugins" in kept.l2 and "## Added by consolidation" in kept.l2
