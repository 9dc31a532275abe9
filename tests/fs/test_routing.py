"""Routed writes (SPEC §5, first bullet): files written into a type directory."""

from __future__ import annotations

import errno
import os
from pathlib import Path

U = "user/default"


async def test_merge_by_file_name_then_fields_merge(fs):
    await fs.write(f"{U}/preferences/editor.md", b"---\nvalue: vim\n---\nShe likes vim.\n")
    assert await fs.listdir(f"{U}/preferences") == ["editor"], "the drop file does not stay"
    l2 = await fs.text(f"{U}/preferences/editor/L2.md")
    assert "topic: editor" in l2 and "value: vim" in l2 and "She likes vim." in l2
    # preference: value replace, body replace
    await fs.write(f"{U}/preferences/editor.md", b"---\nvalue: emacs\n---\nSwitched to emacs.\n")
    l2 = await fs.text(f"{U}/preferences/editor/L2.md")
    assert "value: emacs" in l2 and "value: vim" not in l2
    assert "Switched to emacs." in l2 and "She likes vim." not in l2
    assert await fs.listdir(f"{U}/preferences/editor/.history") == ["v1.md", "v2.md"]
    meta = await fs.text(f"{U}/preferences/editor/meta.yaml")
    assert "editor.md" in meta  # provenance


async def test_explicit_key_in_front_matter_wins_over_file_name(fs):
    await fs.write(f"{U}/preferences/whatever.txt", b"---\ntopic: Color Scheme\n---\nDark.\n")
    assert await fs.listdir(f"{U}/preferences") == ["color-scheme"]


async def test_merge_ops_append_patch_and_immutable(fs, memory):
    e = f"{U}/entities"
    await fs.write(
        f"{e}/ada.md",
        b"---\nkind: person\naliases: [Ada L]\nattributes: {born: '1815'}\n---\nMathematician.\n",
    )
    await fs.write(
        f"{e}/ada.md",
        b"---\naliases: [Countess]\nattributes: {field: maths}\n---\nWrote the first program.\n",
    )
    l2 = await fs.text(f"{e}/ada/L2.md")
    assert "Ada L" in l2 and "Countess" in l2, "list append keeps both"
    assert "born" in l2 and "field: maths" in l2, "map patch keeps both keys"
    assert "Mathematician." in l2 and "Wrote the first program." in l2, "body append"
    # name is immutable: a conflicting explicit value is refused, the node is unchanged
    code = await fs.errno_of(fs.write(f"{e}/ada.md", b"---\nname: Grace\n---\nx\n"))
    assert code == 0  # key 'Grace' routes to a different node, not a conflict
    assert sorted(await fs.listdir(e)) == ["ada", "grace"]
    # the key written another way routes to the node it names and is no conflict
    p = f"{U}/preferences"
    await fs.write(f"{p}/editor.md", b"Uses neovim.\n")
    await fs.write(f"{p}/note.md", b"---\ntopic: Editor\n---\nWith a dark theme.\n")
    await fs.write(f"{p}/Editor.md", b"Relative line numbers.\n")
    await fs.write(f"{p}/a.md", b"---\ntopic: test runner\n---\nUses pytest.\n")
    await fs.write(f"{p}/test-runner.md", b"With xdist.\n")
    assert sorted(await fs.listdir(p)) == ["editor", "test-runner"]
    l2 = await fs.text(f"{p}/editor/L2.md")  # a preference's body is replaced
    assert l2 == "---\ntopic: editor\n---\nRelative line numbers.\n"
    assert "topic: test runner\n---\nWith xdist." in await fs.text(f"{p}/test-runner/L2.md")
    assert not memory.refusals


async def test_sum_op_counts(fs):
    await fs.mkdir("agent/bot")
    t = "agent/bot/tools"
    await fs.write(f"{t}/grep.md", b"---\nsuccess_count: 2\n---\nSearch text.\n")
    await fs.write(f"{t}/grep.md", b"---\nsuccess_count: 3\nfailure_count: 1\n---\n")
    l2 = await fs.text(f"{t}/grep/L2.md")
    assert "success_count: 5" in l2 and "failure_count: 1" in l2


async def test_aggregate_accumulates_and_folds_duplicates(fs):
    await fs.mkdir("agent/bot")
    p = "agent/bot/patterns"
    await fs.write(f"{p}/testing.md", b"- Run the unit tests before pushing.\n")
    await fs.write(f"{p}/testing.md", b"- Run the unit tests before pushing.\n")  # exact
    await fs.write(f"{p}/testing.md", b"- run the unit tests before pushing!\n")  # near
    await fs.write(f"{p}/testing.md", b"- Keep integration tests under ten minutes.\n")
    body = await fs.text(f"{p}/testing/L2.md")
    assert body.lower().count("run the unit tests") == 1
    assert "integration tests under ten minutes" in body
    # no explicit key and an unknown file name: similar items find the topic node
    await fs.write(f"{p}/misc-note.md", b"- Keep integration tests under ten minutes, always.\n")
    assert await fs.listdir(p) == ["testing"]


async def test_append_makes_a_new_node_per_write(fs):
    ev = f"{U}/events"
    drop = b"---\ndate: 2026-05-01\ntitle: Team offsite\n---\nWe met in Lyon.\n"
    await fs.write(f"{ev}/x.md", drop)
    await fs.write(f"{ev}/x.md", drop)
    assert await fs.listdir(ev) == ["2026-05-01-team-offsite", "2026-05-01-team-offsite-2"]
    # without a date the day of writing is used, the title comes from the file name
    await fs.write(f"{ev}/dentist.md", b"Check-up went fine.\n")
    names = await fs.listdir(ev)
    assert any(n.endswith("-dentist") and n[:4].isdigit() for n in names)


async def test_bad_front_matter_is_refused_and_kept(fs, memory):
    bad = b"---\ntopic: [unclosed\n---\nbody\n"
    code = await fs.errno_of(fs.write(f"{U}/preferences/broken.md", bad))
    assert code == errno.EINVAL
    # no memory; the refused file stays visible as a trace (tests/fs/test_refused_trace.py)
    assert await fs.listdir(f"{U}/preferences") == ["broken.md.refused"]
    r = memory.refusals[-1]
    assert "front matter line 3" in r.reason and r.kept_at
    assert Path(r.kept_at).read_bytes() == bad
    code = await fs.errno_of(fs.write(f"{U}/preferences/x.md", b"---\nnope: 1\n---\nb\n"))
    assert code == errno.EINVAL and "nope" in memory.refusals[-1].reason
    code = await fs.errno_of(fs.write(f"{U}/preferences/y.md", b"\xff\xfe binary"))
    assert code == errno.EINVAL and "UTF-8" in memory.refusals[-1].reason


async def test_scratch_and_temp_names_are_not_routed(fs):
    names = [".editor.md.swp", "editor.md~", "4913", ".#editor.md", "tmpab12cd34", ".rsync.tmp"]
    for name in names:
        await fs.write(f"{U}/preferences/{name}", b"not a memory\n")
    assert await fs.listdir(f"{U}/preferences") == sorted(names), "kept as plain files"
    assert not fs.ops.tree.memory.live, "no node was made"
    # a temporary file renamed to a real name is routed at the rename
    await fs.rename(f"{U}/preferences/tmpab12cd34", f"{U}/preferences/shell.md")
    assert "shell" in await fs.listdir(f"{U}/preferences")
    assert "not a memory" in await fs.text(f"{U}/preferences/shell/L2.md")


async def test_empty_drop_is_not_a_memory(fs):
    p, name = await fs.parent(f"{U}/preferences/touched.md")
    fi, _ = await fs.ops.create(p, name, 0o644, os.O_WRONLY | os.O_CREAT, fs.ctx)
    await fs.ops.flush(fi.fh)
    await fs.ops.release(fi.fh)
    assert await fs.listdir(f"{U}/preferences") == []


async def test_flush_before_write_does_not_route_empty(fs):
    """A shell closes the original fd after dup2 (a flush) before writing."""
    p, name = await fs.parent(f"{U}/preferences/late.md")
    fi, _ = await fs.ops.create(p, name, 0o644, os.O_WRONLY | os.O_CREAT, fs.ctx)
    await fs.ops.flush(fi.fh)
    await fs.ops.write(fi.fh, 0, b"---\nvalue: late\n---\nWritten after a flush.\n")
    await fs.ops.flush(fi.fh)
    await fs.ops.release(fi.fh)
    assert "Written after a flush." in await fs.text(f"{U}/preferences/late/L2.md")
