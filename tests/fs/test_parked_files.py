"""A save that returned 0 survives a remount (SPEC §8): temporary and scratch names in a
type directory are not memories, but they are kept (parked) as they were closed."""

from __future__ import annotations

from contextfs.fs.build import build_tree
from contextfs.fs.ops import Operations
from contextfs.memory.service import Memory
from tests.fs.conftest import FS

T = "user/default/preferences"
NAMES = ["2024", "123", "notes.tmp", ".draft.md", "draft~", "tmpab12cd34"]


def remount(memory: Memory) -> tuple[Memory, FS]:
    again = Memory(memory.store, memory.types, data_dir=memory.data_dir)
    assert again.routing.recover_drops() == [], "a parked file is never routed"
    return again, FS(Operations(build_tree(again, status=lambda: "status\n")))


async def test_temp_and_scratch_names_in_a_type_dir_survive_a_remount(fs, memory):
    for name in NAMES:
        await fs.write(f"{T}/{name}", f"kept {name}\n".encode())
    await fs.write("user/default/profile/draft~", b"profile scratch\n")
    assert set(await fs.listdir(T)) == set(NAMES)
    memory, fs = remount(memory)
    assert set(await fs.listdir(T)) == set(NAMES), "still there after a remount"
    for name in NAMES:
        assert await fs.text(f"{T}/{name}") == f"kept {name}\n"
    assert await fs.text("user/default/profile/draft~") == "profile scratch\n"
    assert not [n for n in memory.nodes.values() if n.type == "preference"], "not memories"

    # renamed to a memory name: routed, and the parked copy is gone
    await fs.rename(f"{T}/notes.tmp", f"{T}/editor.md")
    await fs.unlink(f"{T}/123")
    await fs.rename(f"{T}/2024", f"{T}/.2024.swp")  # renamed among scratch names
    memory, fs = remount(memory)
    assert set(await fs.listdir(T)) == (set(NAMES) - {"notes.tmp", "123", "2024"}) | {
        "editor",
        ".2024.swp",
    }
    assert await fs.text(f"{T}/.2024.swp") == "kept 2024\n"
    assert "kept notes.tmp" in await fs.text(f"{T}/editor/L2.md")


async def test_an_empty_file_made_in_a_type_dir_is_kept_too(fs, memory):
    p, name = await fs.parent(f"{T}/.keep")
    fi, _ = await fs.ops.create(p, name, 0o644, 0o100 | 1, fs.ctx)  # O_CREAT|O_WRONLY
    await fs.ops.release(fi.fh)
    memory, fs = remount(memory)
    assert await fs.listdir(T) == [".keep"]
