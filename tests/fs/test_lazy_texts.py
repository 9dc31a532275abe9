"""Tier texts on demand (issue 14, a million nodes): a reopened store keeps every node's L1
and L2 in DuckDB until something reads them, and only a bounded number stay loaded.

Each test builds nodes through the real Memory, closes the store, and reopens it with a
small `hot_nodes` so that eviction happens after a handful of reads; the reads and writes
then go through the real Operations handlers (no kernel)."""

from __future__ import annotations

import errno
import random
import threading
from pathlib import Path

import pytest

from contextfs.fs.build import build_tree
from contextfs.fs.ops import Operations
from contextfs.memory.service import Memory
from contextfs.memory.texts import LazyNode
from contextfs.store import Store
from contextfs.testing import fsck_store
from tests.fs.conftest import FS

N = 30


def l2_of(i: int) -> str:
    # non-ASCII, so a size in characters would differ from the size stat must show
    return f"Note {i}: café au lait, naïve résumé — über {'déjà vu ' * (i % 7)}end {i}.\n"


def build(tmp_path: Path, types, n: int = N) -> None:
    store = Store(tmp_path / "contextfs.duckdb")
    m = Memory(store, types, data_dir=tmp_path)
    m.create_owner("user", "default")
    ctype = m.types["preference"]
    with m.transaction():
        for i in range(n):
            node = m.create_node(("user", "default"), ctype, f"n{i:02d}", persist=False)
            m.save_l2(node, l2_of(i))
    store.close()


class Reopened:
    """The store reopened with `hot` nodes' texts kept loaded; closed with an fsck."""

    def __init__(self, tmp_path: Path, types, hot: int) -> None:
        self.path = tmp_path / "contextfs.duckdb"
        self.store = Store(self.path)
        self.memory = Memory(self.store, types, data_dir=tmp_path, hot_nodes=hot)
        self.fs = FS(Operations(build_tree(self.memory, status=lambda: "status\n")))

    def node(self, i: int) -> LazyNode:
        n = self.memory.live_node(("user", "default"), self.memory.types["preference"], f"n{i:02d}")
        assert isinstance(n, LazyNode)
        return n

    def loaded(self) -> int:
        return sum(1 for n in self.memory.nodes.values() if n.loaded)

    def close(self) -> None:
        self.store.close()
        assert fsck_store(self.path) == []


@pytest.fixture
def reopened(tmp_path: Path, types):
    build(tmp_path, types)
    r = Reopened(tmp_path, types, hot=4)
    yield r
    r.close()


def path(i: int, tier: str = "L2.md") -> str:
    return f"user/default/preferences/n{i:02d}/{tier}"


async def test_stat_shows_sizes_without_reading_the_texts(reopened):
    assert reopened.loaded() == 0
    fs = reopened.fs
    for i in range(N):
        attr = await fs.ops.getattr(await fs.ino(path(i)), fs.ctx)
        assert attr.st_size == len(l2_of(i).encode("utf-8"))
        # `ls -l` of a node: L0 is held, L1's size is known, meta.yaml shows no text
        for name in ("L0.md", "L1.md", "meta.yaml"):
            assert (await fs.ops.getattr(await fs.ino(path(i, name)), fs.ctx)).st_size > 0
        assert await fs.text(path(i, "L0.md"))
    assert reopened.loaded() == 0 and reopened.memory.texts.loads == 0


async def test_every_text_reads_back_and_only_a_few_stay_loaded(reopened):
    for i in random.Random(1).sample(range(N), N):
        assert await reopened.fs.text(path(i)) == l2_of(i)
        assert reopened.loaded() <= 4
    assert reopened.memory.texts.evictions >= N - 4
    # L1 is derived from L2 and read on demand too; its size was known before it was read
    ino = await reopened.fs.ino(path(7, "L1.md"))
    size = (await reopened.fs.ops.getattr(ino, reopened.fs.ctx)).st_size
    assert len(await reopened.fs.read(path(7, "L1.md"))) == size > 0


async def test_a_write_to_a_node_whose_text_was_let_go_is_kept(tmp_path, types):
    build(tmp_path, types)
    r = Reopened(tmp_path, types, hot=2)
    await r.fs.write(path(3), b"A new text for three.\n")
    for i in range(10, 20):  # push node 3 out of the hot set
        await r.fs.text(path(i))
    assert not r.node(3).loaded
    assert await r.fs.text(path(3)) == "A new text for three.\n"
    assert "new text for three" in await r.fs.text(path(3, "L1.md"))
    r.close()
    again = Reopened(tmp_path, types, hot=2)
    assert await again.fs.text(path(3)) == "A new text for three.\n"
    assert await again.fs.text(path(4)) == l2_of(4)
    again.close()


async def test_a_rolled_back_write_shows_the_stored_text_again(reopened):
    m = reopened.memory
    n = reopened.node(5)
    with pytest.raises(RuntimeError), m.transaction():
        m.save_l2(n, "never stored\n")
        raise RuntimeError("the caller failed")
    for i in range(10, 20):
        await reopened.fs.text(path(i))
    assert await reopened.fs.text(path(5)) == l2_of(5)


def test_search_threads_read_while_the_main_thread_writes(reopened):
    """Search reads nodes in worker threads: they see a whole old or a whole new text,
    never an empty or another node's, while texts are loaded, changed and let go."""
    m = reopened.memory
    nodes = [reopened.node(i) for i in range(N)]
    stop = threading.Event()
    bad: list[str] = []

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            i = rng.randrange(N)
            text = nodes[i].l2
            if text not in (l2_of(i), f"rewritten {i}\n"):
                bad.append(f"node {i}: {text!r}")

    threads = [threading.Thread(target=reader, args=(s,)) for s in (1, 2)]
    for t in threads:
        t.start()
    try:
        for i in range(N):
            with m.transaction():
                m.save_l2(nodes[i], f"rewritten {i}\n")
            for j in random.Random(i).sample(range(N), 6):  # loads that evict
                _ = nodes[j].l1
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert bad == []
    assert [n.l2 for n in nodes] == [f"rewritten {i}\n" for i in range(N)]


# ---- type directories built on first use ------------------------------------------------


async def test_a_reopened_tree_builds_a_type_directory_when_first_used(reopened):
    tree = reopened.fs.ops.tree
    node_dirs = [
        i for i in tree.table.inodes.values() if i.role.name == "NODE" and i.node is not None
    ]
    assert not [d for d in node_dirs if not d.ctype.singleton]  # nothing built at mount
    td = await reopened.fs.ino("user/default/preferences")
    attr = await reopened.fs.ops.getattr(td, reopened.fs.ctx)
    assert attr.st_nlink == 2 + N  # `find` counts on it before the listing is built
    assert await reopened.fs.listdir("user/default/preferences") == [f"n{i:02d}" for i in range(N)]
    assert (await reopened.fs.ops.getattr(td, reopened.fs.ctx)).st_nlink == 2 + N


async def test_names_in_an_unbuilt_type_directory_are_taken(reopened):
    fs = reopened.fs
    assert await fs.errno_of(fs.mkdir("user/default/preferences/n03")) == errno.EEXIST
    await fs.mkdir("user/default/preferences/fresh")
    await fs.write("user/default/preferences/fresh/L2.md", b"fresh text\n")
    names = await fs.listdir("user/default/preferences")
    assert len(names) == N + 1 and "fresh" in names and "n03" in names


async def test_a_rename_into_an_unbuilt_type_directory_sees_its_nodes(tmp_path, types):
    build(tmp_path, types)
    r = Reopened(tmp_path, types, hot=4)
    fs = r.fs
    await fs.mkdir("user/default/entities/moved")
    await fs.write("user/default/entities/moved/L2.md", b"an entity\n")
    # the target directory has not been listed or looked into since the reopen
    over = fs.rename("user/default/entities/moved", "user/default/preferences/n04")
    assert await fs.errno_of(over) == errno.ENOTEMPTY
    assert await fs.text(path(4)) == l2_of(4)
    await fs.rename("user/default/entities/moved", "user/default/preferences/moved")
    names = await fs.listdir("user/default/preferences")
    assert len(names) == N + 1 and "moved" in names
    assert await fs.text("user/default/preferences/moved/L2.md") == "an entity\n"
    r.close()


async def test_cold_type_directories_let_their_nodes_go_and_come_back(reopened):
    fs, tree = reopened.fs, reopened.fs.ops.tree
    tree.nodes.hot_type_dirs = 1
    prefs = "user/default/preferences"
    assert len(await fs.listdir(prefs)) == N
    built = {i.ino for i in tree.table.inodes.values() if i.role.name == "NODE" and i.node}
    assert len(built) == N
    await fs.listdir("user/default/entities")  # one more built: preferences is cold
    assert tree.nodes.evicted == 1
    assert not built & set(tree.table.inodes)
    assert await fs.listdir(prefs) == [f"n{i:02d}" for i in range(N)]
    assert await fs.text(path(9)) == l2_of(9)


async def test_a_type_directory_the_kernel_holds_is_kept_until_forgotten(reopened):
    fs, tree = reopened.fs, reopened.fs.ops.tree
    tree.nodes.hot_type_dirs = 1
    node = await fs.ino("user/default/preferences/n05")  # the kernel looked it up
    await fs.listdir("user/default/entities")
    assert tree.nodes.evicted == 0
    assert tree.get(node).node is reopened.node(5)
    await fs.ops.forget([(node, 1)])  # the kernel lets it go
    await fs.listdir("user/default/events")
    assert tree.nodes.evicted == 2  # preferences now, and entities (empty, cold)
    assert node not in tree.table.inodes
    assert await fs.text(path(5)) == l2_of(5)


async def test_looking_up_one_node_builds_its_directory_only(reopened):
    fs, tree = reopened.fs, reopened.fs.ops.tree

    def built() -> int:
        return sum(1 for i in tree.table.inodes.values() if i.role.name == "NODE" and i.node)

    assert await fs.text(path(3)) == l2_of(3)
    assert built() == 1
    assert await fs.errno_of(fs.ino("user/default/preferences/nope")) == errno.ENOENT
    assert built() == 1
    assert len(await fs.listdir("user/default/preferences")) == N
    assert built() == N


async def test_after_a_mount_the_most_recent_texts_are_read_in_the_background(tmp_path, types):
    """The warm-up a mount starts reads the texts of the most recently changed nodes, up to
    the hot capacity, while a write goes on: those nodes are then loaded with the store's
    text (or the newer one written meanwhile), the others are not."""
    from contextfs.memory.texts import TextWarmup

    build(tmp_path, types)
    r = Reopened(tmp_path, types, hot=12)
    try:
        warm = TextWarmup(r.memory.texts, list(r.memory.nodes.values()))
        await r.fs.write(path(0), l2_of(0).replace("end", "changed at the mount").encode())
        newest = sorted(r.memory.nodes.values(), key=lambda n: n.updated)[-12:]  # n00 too
        await warm.run()
        assert 11 <= warm.loaded <= 12  # n00, written meanwhile, may already be loaded
        assert {n.id for n in r.memory.nodes.values() if n.loaded} >= {n.id for n in newest}
        assert r.loaded() == 12
        for n in newest:
            i = int(n.name[1:])
            expected = l2_of(i) if i else l2_of(0).replace("end", "changed at the mount")
            assert n.l2 == expected
    finally:
        r.close()
