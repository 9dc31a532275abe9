"""The exported file of a node and how an import reads it back (`contextfs.transfer.vault`, pure).

Whatever L2 looks like (no front matter, `...` as the closing fence, CRLF lines, a body
that itself contains `---`), `read_note(node_markdown(record))` gives back L2 exactly and
the facts; the file stays valid YAML front matter for markdown tools; a note whose
`contextfs:` key was moved by an editor (Obsidian rewrites properties) still reads as
exported, and someone else's `contextfs:` key is just a plain note.
"""

from __future__ import annotations

import pytest
import yaml

from contextfs.memory.document import parse_document
from contextfs.transfer.vault import NodeRecord, node_markdown, read_note

L2S = [
    "She uses vim.\n",
    "",
    "---\ntopic: editor\nvalue: vim\n---\nShe uses vim.\n",
    "---\ntopic: editor\n...\nbody\n\n---\nnot a fence: a rule in the body\n",
    "---\r\ntopic: editor\r\n---\r\nCRLF body\r\n",
    "---\ntopic: editor\nreason: |+\n  kept\n\n---\nbody with trailing blank kept\n",
    "no newline at the end",
]


@pytest.mark.parametrize("l2", L2S)
def test_l2_comes_back_exactly(l2: str) -> None:
    rec = NodeRecord(
        path="user/default/preferences/editor",
        type="preference",
        l2=l2,
        l0="Editor: vim  \n",  # trailing spaces: not a literal block, still exact
        l1=None,
        facts={"id": 7, "version": 3, "created": "2026-12-01T21:05:12Z", "sources": []},
    )
    text = node_markdown(rec)
    note = read_note(text)
    assert note.l2 == l2
    assert note.meta is not None and note.meta["type"] == "preference"
    assert note.meta["l0"] == "Editor: vim  \n" and "l1" not in note.meta
    assert note.meta["facts"]["version"] == 3
    fields = parse_document(text).fields  # any markdown tool reads it as front matter
    assert fields["contextfs"]["type"] == "preference"


def test_a_moved_contextfs_key_still_reads_as_exported() -> None:
    rec = NodeRecord(
        "user/default/preferences/editor",
        "preference",
        "---\ntopic: x\n---\nB\n",
        None,
        None,
        {"id": 1},
    )
    lines = node_markdown(rec).split("\n")
    start = lines.index("contextfs:")
    end = lines.index("---", 1)
    moved = [lines[0], *lines[start:end], *lines[1:start], *lines[end:]]
    note = read_note("\n".join(moved))
    assert note.meta is not None and note.l2 == "---\ntopic: x\n---\nB\n"


@pytest.mark.parametrize(
    "text",
    [
        "---\ncontextfs: a word\n---\nbody\n",
        "---\ncontextfs:\n  version: 2\n---\nbody\n",  # a mapping without a type
        "plain text, no front matter\n",
        "---\ntitle: unclosed front matter\n",
    ],
)
def test_other_notes_are_plain(text: str) -> None:
    note = read_note(text)
    assert note.meta is None and note.l2 == text


def test_the_export_is_yaml_front_matter() -> None:
    rec = NodeRecord("user/u/profile", "profile", "Name: Ada.\n", None, "# Ada\n\n- x\n", {})
    head = node_markdown(rec).split("---\n")[1]
    assert yaml.safe_load(head) == {
        "contextfs": {"type": "profile", "l1": "# Ada\n\n- x\n", "front_matter": False, "facts": {}}
    }
