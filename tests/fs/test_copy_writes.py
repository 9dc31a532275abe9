"""What copiers write into a node, through the handlers (docs/reference.md, "Copying nodes
with cp, rsync and tar"): a new node's versions written before its L2.md (cp) or after it
(rsync) are kept in order, meta.yaml and versions take back the bytes they show, other
bytes are EACCES. The real tools run in tests/integration/test_copy_tools.py."""

from __future__ import annotations

import errno

P = "user/default/preferences"
V1, V2, V3 = b"Green tea.\n", b"Green tea, no sugar.\n", b"Green tea, no sugar, at noon.\n"


async def versions(fs, node: str) -> dict[str, bytes]:
    return {n: await fs.read(f"{node}/.history/{n}") for n in await fs.listdir(f"{node}/.history")}


async def test_a_new_node_shows_nothing_and_keeps_versions_written_before_its_l2(fs):
    node = f"{P}/tea"
    await fs.mkdir(node)
    assert await fs.listdir(node) == []
    await fs.mkdir(f"{node}/.history")  # what cp -r does first
    await fs.write(f"{node}/.history/v1.md", V1)
    await fs.write(f"{node}/.history/v2.md", V2)
    await fs.write(f"{node}/L0.md", b"My tea.\n")  # a hand-written abstract
    await fs.write(f"{node}/L2.md", V2)  # the last version: no further one
    assert await versions(fs, node) == {"v1.md": V1, "v2.md": V2}
    meta = await fs.text(f"{node}/meta.yaml")
    assert "version: 2\n" in meta and "l0_pinned: true\n" in meta
    assert await fs.read(f"{node}/L0.md") == b"My tea.\n"


async def test_versions_written_after_the_l2_of_a_copy_go_before_it(fs, memory):
    node = f"{P}/tea"
    await fs.mkdir(node)
    await fs.write(f"{node}/L2.md", V3)  # rsync: the files first
    await fs.write(
        f"{node}/meta.yaml", (await fs.read(f"{P}/tea/meta.yaml")).replace(b"id: ", b"id: 9")
    )  # another node's meta.yaml: a copy, not kept
    for name, text in (("v1.md", V1), ("v3.md", V3), ("v2.md", V2)):  # then .history
        await fs.write(f"{node}/.history/{name}", text)
    assert await versions(fs, node) == {"v1.md": V1, "v2.md": V2, "v3.md": V3}
    assert await fs.read(f"{node}/L2.md") == V3
    assert "version: 3\n" in await fs.text(f"{node}/meta.yaml")


async def test_the_bytes_shown_go_back_and_other_bytes_are_refused(fs):
    await fs.write(f"{P}/coffee.md", b"Black coffee.\n")  # routed: not made by mkdir
    node = f"{P}/coffee"
    meta = await fs.read(f"{node}/meta.yaml")
    v1 = await fs.read(f"{node}/.history/v1.md")
    await fs.write(f"{node}/meta.yaml", meta)
    await fs.write(f"{node}/.history/v1.md", v1)
    l0 = await fs.read(f"{node}/L0.md")
    await fs.write(f"{node}/L0.md", l0)
    assert "l0_pinned: false\n" in await fs.text(f"{node}/meta.yaml")
    edited = meta.replace(b"version: 1", b"version: 2")
    assert await fs.errno_of(fs.write(f"{node}/meta.yaml", edited)) == errno.EACCES
    assert await fs.errno_of(fs.write(f"{node}/.history/v1.md", b"Tea.\n")) == errno.EACCES
    assert await fs.errno_of(fs.write(f"{node}/.history/v2.md", b"Tea.\n")) == errno.EACCES
    assert await fs.errno_of(fs.unlink(f"{node}/meta.yaml")) == errno.EACCES
    assert await fs.read(f"{node}/meta.yaml") == meta
    assert await versions(fs, node) == {"v1.md": v1}
