"""Nodes through the Operations handlers: tiers, pins, meta, history, mv, rm -r, restore."""

from __future__ import annotations

import errno

import pytest

from contextfs.store.fsck import check_store

P = "user/default/preferences"


async def test_tree_shape(fs, memory):
    assert await fs.listdir("") == [
        ".restore",
        ".schemas",
        ".status",
        ".status.json",
        "agent",
        "user",
    ]
    user_types = sorted(t.type_dir for t in memory.types.values() if t.scope == "user")
    assert await fs.listdir("user/default") == sorted([".archive", ".trash", *user_types])
    assert await fs.listdir("agent") == []
    await fs.mkdir("agent/claude")
    agent_types = sorted(t.type_dir for t in memory.types.values() if t.scope == "agent")
    assert await fs.listdir("agent/claude") == sorted([".archive", ".trash", *agent_types])


async def test_owner_names_are_checked(fs):
    assert await fs.errno_of(fs.mkdir("user/bad name")) == errno.EINVAL
    assert await fs.errno_of(fs.mkdir("user/default")) == errno.EEXIST
    assert await fs.errno_of(fs.mkdir("user/default/notatype")) == errno.EACCES


async def test_new_node_derives_l0_l1_and_counts_versions(fs, memory):
    await fs.mkdir(f"{P}/editor")
    # tiers, meta.yaml and .history exist once written (so `cp -r` of a copied node can
    # create them with O_EXCL: docs/reference.md, "Copying nodes with cp, rsync and tar")
    assert await fs.listdir(f"{P}/editor") == []
    text = "# Editor\n\nShe prefers vim with relative numbers. Nano is too simple for her.\n"
    await fs.write(f"{P}/editor/L2.md", text.encode())
    assert await fs.text(f"{P}/editor/L2.md") == text
    l0 = await fs.text(f"{P}/editor/L0.md")
    assert l0.endswith("\n") and l0.count("\n") == 1 and "Editor" in l0
    assert len(l0) <= memory.types["preference"].l0_max_chars + 1
    assert "vim" in await fs.text(f"{P}/editor/L1.md")
    meta = await fs.text(f"{P}/editor/meta.yaml")
    assert "version: 1\n" in meta and "type: preference\n" in meta
    assert await fs.listdir(f"{P}/editor/.history") == ["v1.md"]
    # An unchanged save makes no version; a changed one makes exactly one.
    await fs.write(f"{P}/editor/L2.md", text.encode())
    assert await fs.listdir(f"{P}/editor/.history") == ["v1.md"]
    await fs.write(f"{P}/editor/L2.md", b"Uses emacs now.\n", append=True)
    assert await fs.listdir(f"{P}/editor/.history") == ["v1.md", "v2.md"]
    assert await fs.text(f"{P}/editor/.history/v1.md") == text
    assert "version: 2\n" in await fs.text(f"{P}/editor/meta.yaml")


async def test_hand_written_l0_is_pinned_until_l2_changes(fs):
    await fs.mkdir(f"{P}/tea")
    await fs.write(f"{P}/tea/L2.md", b"Green tea in the morning, never coffee.\n")
    await fs.write(f"{P}/tea/L0.md", b"Tea person.\n")
    await fs.write(f"{P}/tea/L2.md", b"Green tea in the morning, never coffee.\n")  # unchanged
    assert await fs.text(f"{P}/tea/L0.md") == "Tea person.\n"
    assert "l0_pinned: true" in await fs.text(f"{P}/tea/meta.yaml")
    await fs.write(f"{P}/tea/L2.md", b"Oolong in the afternoon.\n")
    assert await fs.text(f"{P}/tea/L0.md") != "Tea person.\n"
    assert "Oolong" in await fs.text(f"{P}/tea/L0.md")


async def test_derived_files_are_read_only(fs, memory):
    await fs.mkdir(f"{P}/x")
    await fs.write(f"{P}/x/L2.md", b"text\n")
    for path in (
        f"{P}/x/meta.yaml",
        f"{P}/x/.history/v1.md",
        ".status",
        ".status.json",
        ".schemas/preference.yaml",
    ):
        assert await fs.errno_of(fs.write(path, b"nope")) == errno.EACCES, path
    assert any("meta.yaml" in r.path for r in memory.refusals)


async def test_mv_renames_and_retypes_with_validation(fs, memory):
    await fs.mkdir(f"{P}/old")
    await fs.write(f"{P}/old/L2.md", b"Likes dark roast.\n")
    await fs.rename(f"{P}/old", f"{P}/coffee")
    assert await fs.text(f"{P}/coffee/L2.md") == "Likes dark roast.\n"
    assert not await fs.exists(f"{P}/old")
    # re-type into entities (user scope): the name fits entities/{name}
    await fs.rename(f"{P}/coffee", "user/default/entities/coffee")
    assert "type: entity" in await fs.text("user/default/entities/coffee/meta.yaml")
    # events/{date}-{title} does not accept this name
    code = await fs.errno_of(
        fs.rename("user/default/entities/coffee", "user/default/events/coffee")
    )
    assert code == errno.EPERM  # a refused rename is never EINVAL (see fs.rename)
    assert await fs.exists("user/default/entities/coffee")
    # a node cannot become an attachment of another node
    await fs.mkdir(f"{P}/other")
    code = await fs.errno_of(fs.rename("user/default/entities/coffee", f"{P}/other/coffee"))
    assert code == errno.EPERM


async def test_rm_r_soft_deletes_and_mv_restores(fs, memory):
    node = f"{P}/keep"
    await fs.mkdir(node)
    await fs.write(f"{node}/L2.md", b"v1 text\n")
    await fs.write(f"{node}/L2.md", b"v2 text\n")
    await fs.write(f"{node}/script.sh", b"#!/bin/sh\necho hi\n")
    await fs.mkdir(f"{node}/docs")
    await fs.write(f"{node}/docs/a.txt", b"attached")
    await fs.rm_r(node)
    assert not await fs.exists(node)
    trash = "user/default/.trash/preferences/keep"
    assert await fs.text(f"{trash}/L2.md") == "v2 text\n"
    assert "deleted_at:" in await fs.text(f"{trash}/meta.yaml")
    assert await fs.errno_of(fs.write(f"{trash}/L2.md", b"x")) == errno.EACCES
    await fs.rename(trash, node)
    assert await fs.text(f"{node}/L2.md") == "v2 text\n"
    assert await fs.listdir(f"{node}/.history") == ["v1.md", "v2.md"]
    assert await fs.text(f"{node}/script.sh") == "#!/bin/sh\necho hi\n"
    assert await fs.text(f"{node}/docs/a.txt") == "attached"
    await fs.write(f"{node}/L2.md", b"v3 text\n")
    assert "version: 3" in await fs.text(f"{node}/meta.yaml")


async def test_a_restore_brings_back_each_name_once_as_it_was_last(fs, memory):
    """A file removed, written again under its name, then the node removed with `rm -r`:
    the restore brings back the file's last content, one row per name (two live rows of
    one name left the store failing fsck, and every later mount read-only)."""
    node = f"{P}/notes"
    await fs.mkdir(node)
    await fs.write(f"{node}/L2.md", b"notes\n")
    await fs.write(f"{node}/att.txt", b"one\n")
    await fs.unlink(f"{node}/att.txt")
    await fs.write(f"{node}/att.txt", b"two\n")
    await fs.mkdir(f"{node}/d")
    await fs.write(f"{node}/d/f.txt", b"in the first d\n")
    await fs.rm_r(f"{node}/d")
    await fs.mkdir(f"{node}/d")  # a folder of the same name, empty
    await fs.rm_r(node)
    trash = "user/default/.trash/preferences/notes"
    assert sorted(await fs.listdir(trash)) == [
        ".history", "L0.md", "L1.md", "L2.md", "att.txt", "d", "meta.yaml"
    ]  # fmt: skip
    await fs.rename(trash, node)
    assert await fs.text(f"{node}/att.txt") == "two\n"
    assert await fs.listdir(f"{node}/d") == []
    assert check_store(memory.store) == []


async def test_an_editors_temp_file_saved_over_l2_stays_gone_after_a_restore(fs, memory):
    """`sed -i` and atomic writers save through a temp file renamed over L2.md: that file
    is not one a user deleted, so restoring the node from the trash brings back L2 and
    the user's files, not the temp file (found by scripts/crash_trials.py's restores)."""
    node = f"{P}/saved"
    await fs.mkdir(node)
    await fs.write(f"{node}/L2.md", b"first\n")
    await fs.write(f"{node}/keep.txt", b"a user's file\n")
    await fs.write(f"{node}/sedAb12Cd", b"second\n")
    await fs.rename(f"{node}/sedAb12Cd", f"{node}/L2.md")
    await fs.rm_r(node)
    await fs.rename("user/default/.trash/preferences/saved", node)
    names = await fs.listdir(node)
    assert "sedAb12Cd" not in names and "keep.txt" in names, names
    assert await fs.text(f"{node}/L2.md") == "second\n"
    assert check_store(memory.store) == []


async def test_a_long_rm_r_is_restored_whole(fs, memory):
    """`rm -r` of a big node can take minutes: every file it removed comes back, as long
    as no two of its deletions are further apart than the restore window."""
    now = [1_000_000.0]
    memory.clock = lambda: now[0]
    node = f"{P}/deep"
    await fs.mkdir(node)
    await fs.write(f"{node}/L2.md", b"deep\n")
    path = node
    for i in range(8):
        path += f"/d{i}"
        await fs.mkdir(path)
        await fs.write(f"{path}/f.txt", f"level {i}\n".encode())
    await fs.write(f"{node}/gone-before.txt", b"removed long before\n")
    await fs.unlink(f"{node}/gone-before.txt")
    now[0] += 600  # ten minutes later, an rm -r of 13 minutes
    real_unlink, real_rmdir = fs.unlink, fs.rmdir

    async def slow_unlink(p: str) -> None:  # each file of the tree: 50 s
        now[0] += 50 if "/deep/d" in p else 0
        await real_unlink(p)

    async def slow_rmdir(p: str) -> None:
        now[0] += 50 if "/deep/d" in p else 0
        await real_rmdir(p)

    fs.unlink, fs.rmdir = slow_unlink, slow_rmdir
    await fs.rm_r(node)
    fs.unlink, fs.rmdir = real_unlink, real_rmdir
    await fs.rename("user/default/.trash/preferences/deep", node)
    assert await fs.text(f"{path}/f.txt") == "level 7\n"
    assert await fs.text(f"{node}/d0/f.txt") == "level 0\n"
    assert not await fs.exists(f"{node}/gone-before.txt")
    assert check_store(memory.store) == []


async def test_rmdir_of_a_full_node_is_refused(fs):
    await fs.mkdir(f"{P}/full")
    await fs.write(f"{P}/full/L2.md", b"text\n")
    assert await fs.errno_of(fs.rmdir(f"{P}/full")) == errno.ENOTEMPTY
    await fs.mkdir(f"{P}/fresh")  # never written: empty
    assert await fs.errno_of(fs.rmdir(f"{P}/fresh")) == 0
    assert await fs.errno_of(fs.rmdir("user/default/events")) == errno.EPERM


async def test_singleton_profile(fs, memory):
    prof = "user/default/profile"
    assert await fs.listdir(prof) == []
    await fs.write(f"{prof}/L2.md", b"---\nname: Ada\n---\nWorks on compilers.\n")
    assert await fs.listdir(prof) == [".history", "L0.md", "L1.md", "L2.md", "meta.yaml"]
    # a markdown file dropped into the singleton is merged into it (body: append)
    await fs.write(f"{prof}/more.md", b"---\nlocation: Paris\n---\nPlays chess.\n")
    text = await fs.text(f"{prof}/L2.md")
    assert "name: Ada" in text and "location: Paris" in text
    assert "Works on compilers." in text and "Plays chess." in text
    assert "more.md" not in await fs.listdir(prof)


async def test_a_singleton_never_written_takes_attachments(fs, memory):
    """A fresh `profile/` routes only `*.md`, `*.markdown` and `*.txt` into the node: any
    other file is an attachment and mkdir makes an attachment folder (`git init` there),
    as once it has an L2; its first L2.md after them is the node's first version."""
    prof = "user/default/profile"
    await fs.write(f"{prof}/settings.ini", b"key=value\n")
    assert await fs.listdir(prof) == ["settings.ini"]
    assert await fs.text(f"{prof}/settings.ini") == "key=value\n"
    assert await fs.mkdir(f"{prof}/scripts")
    await fs.write(f"{prof}/scripts/run.sh", b"echo hi\n")
    p, _ = await fs.parent(f"{prof}/link")
    await fs.ops.symlink(p, b"link", b"settings.ini", fs.ctx)
    assert await fs.listdir(prof) == ["link", "scripts", "settings.ini"]
    n = next(iter(memory.walk(types=("profile",))))
    assert n.version == 0 and n.l2 == ""
    await fs.write(f"{prof}/notes.md", b"Plays chess.\n")  # still routed into the node
    assert "Plays chess." in await fs.text(f"{prof}/L2.md")
    assert "notes.md" not in await fs.listdir(prof)
    assert await fs.text(f"{prof}/scripts/run.sh") == "echo hi\n"
    # a tier name is no folder, in a singleton never written too
    await fs.rm_r(prof)
    assert await fs.errno_of(fs.mkdir(f"{prof}/L2.md")) == errno.EACCES


@pytest.mark.parametrize("name", ["a" * 256])
async def test_long_names(fs, name):
    assert await fs.errno_of(fs.mkdir(f"{P}/{name}")) == errno.ENAMETOOLONG


async def test_deleted_singleton_is_restored_with_mv(fs):
    prof = "user/default/profile"
    await fs.write(f"{prof}/L2.md", b"---\nname: Ada\n---\nMe.\n")
    await fs.rm_r(prof)
    assert await fs.listdir(prof) == []
    assert await fs.listdir("user/default/.trash/profile") == ["profile"]
    await fs.rename("user/default/.trash/profile/profile", prof)
    assert "name: Ada" in await fs.text(f"{prof}/L2.md")
    assert await fs.listdir("user/default/.trash/profile") == []


async def test_a_node_moves_only_into_a_type_directory(fs):
    await fs.mkdir(f"{P}/a")
    await fs.mkdir(f"{P}/b")
    # EPERM, not EINVAL: mv reads any EINVAL from rename as "into a subdirectory of itself"
    assert await fs.errno_of(fs.rename(f"{P}/a", f"{P}/b/a")) == errno.EPERM
    assert await fs.errno_of(fs.rename(f"{P}/a", "user/a")) == errno.EPERM
    assert await fs.exists(f"{P}/a")


@pytest.mark.allow_warnings
async def test_a_store_fault_turns_the_mount_read_only_without_killing_it(fs, memory):
    await fs.mkdir(f"{P}/x")
    await fs.write(f"{P}/x/L2.md", b"kept\n")
    memory.store.con.close()  # the database goes away under the daemon
    code = await fs.errno_of(fs.write(f"{P}/x/L2.md", b"lost?\n"))
    assert code == errno.EROFS
    assert memory.failsafe and "read-only" in memory.refusals[-1].reason
    assert await fs.text(f"{P}/x/L2.md") == "kept\n", "reads still work"
    assert await fs.errno_of(fs.mkdir(f"{P}/y")) == errno.EROFS


async def test_a_hand_made_name_no_key_could_reach_is_refused(fs):
    """mkdir of a node whose key part is longer than a slug, or whose date is not a day:
    a memory of that key would never find it (docs/reference.md, "Keys")."""
    long = "-".join(["word"] * 17)  # 84 characters
    assert await fs.errno_of(fs.mkdir(f"{P}/{long}")) == errno.EINVAL
    assert await fs.errno_of(fs.mkdir(f"{P}/{long[:79]}")) == 0
    events = "user/default/events"
    assert await fs.errno_of(fs.mkdir(f"{events}/2026-13-45-party")) == errno.EINVAL
    assert await fs.errno_of(fs.mkdir(f"{events}/2026-02-30-party")) == errno.EINVAL
    assert await fs.errno_of(fs.mkdir(f"{events}/2028-02-29-party")) == 0
