"""The memory's heads on demand (issue 14, a million nodes): a reopened store reads no node
at open, holds a bounded number of them however many directories are used, and every
answer (lookup, listing, read, write, rename, delete, counts) stays the store's.

The store is built through the real Memory (several owners, two type directories each),
closed, and reopened with a small `hot_nodes` and few hot type directories; everything
then goes through the real Operations handlers (no kernel), and `forget` is called for
what the "kernel" looked up, as it does under memory pressure. Closed with an fsck."""

from __future__ import annotations

import errno
import json
import random
import threading
from pathlib import Path

import pytest
import trio

from contextfs.conversations.inbox import Intake
from contextfs.ctxtypes import builtin_schema_dir, load_types
from contextfs.fs.build import Background, FsOptions, build_operations, build_tree
from contextfs.fs.ops import Operations
from contextfs.memory.service import Memory
from contextfs.search.indexer import Indexer
from contextfs.search.retrieval import Searcher
from contextfs.store import Store
from contextfs.testing import fsck_store
from tests.fs.conftest import FS, FixedStatus
from tests.fs.test_virtual_dirs import WordEmbedder

OWNERS = [f"u{i}" for i in range(6)]
DIRS = {"preferences": "preference", "entities": "entity"}
PER_DIR = 80  # 6 owners x 2 type dirs x 80 = 960 nodes
HOT = 20


def l2_of(owner: str, d: str, i: int) -> str:
    return f"{d} {i} of {owner}: {'some words ' * (i % 5)}end.\n"


def nodes() -> list[tuple[str, str, int]]:
    return [(o, d, i) for o in OWNERS for d in DIRS for i in range(PER_DIR)]


def path(o: str, d: str, i: int, name: str = "") -> str:
    p = f"user/{o}/{d}/n{i:03d}"
    return f"{p}/{name}" if name else p


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """The store every test copies: 960 nodes, and one deleted."""
    types = load_types([builtin_schema_dir()])
    folder = tmp_path_factory.mktemp("heads")
    store = Store(folder / "contextfs.duckdb")
    m = Memory(store, types, data_dir=folder)
    with m.transaction():
        for o in OWNERS:
            m.create_owner("user", o)
        for o, d, i in nodes():
            n = m.create_node(("user", o), m.types[DIRS[d]], f"n{i:03d}", persist=False)
            m.save_l2(n, l2_of(o, d, i))
    gone = m.create_node(("user", "u0"), m.types["preference"], "gone")
    m.save_l2(gone, "deleted before the reopen\n")
    m.delete_node(gone)
    store.close()
    return folder / "contextfs.duckdb"


class Mounted:
    """A copy of the built store, reopened with `hot` nodes held."""

    def __init__(self, built: Path, tmp_path: Path, types, hot: int = HOT) -> None:
        self.path = tmp_path / "contextfs.duckdb"
        if not self.path.exists():
            self.path.write_bytes(built.read_bytes())
        self.types = types
        self.tmp = tmp_path
        self.store = Store(self.path)
        self.memory = Memory(self.store, types, data_dir=tmp_path, hot_nodes=hot)
        self.tree = build_tree(self.memory, status=lambda: "status\n")
        self.tree.nodes.hot_type_dirs = 2
        self.fs = FS(Operations(self.tree))

    async def forget_all(self) -> None:
        """What the kernel does under memory pressure: forget every inode it looked up."""
        held = [(i.ino, i.lookups) for i in self.tree.table.inodes.values() if i.lookups > 0]
        await self.fs.ops.forget(held)

    async def churn(self, rounds: int = 4) -> None:
        """List and read in many directories, forgetting after each."""
        rng = random.Random(rounds)
        for o in OWNERS[:rounds]:
            for d in DIRS:
                # looked up by name first (each reads its node by path), then listed
                for i in rng.sample(range(PER_DIR), 8):
                    assert await self.fs.text(path(o, d, i, "L2.md")) == l2_of(o, d, i)
                assert len(await self.fs.listdir(f"user/{o}/{d}")) >= PER_DIR - 1
                await self.forget_all()

    def close(self) -> None:
        self.memory.persist_pending()
        self.store.close()
        assert fsck_store(self.path) == []


@pytest.fixture
def mounted(built, tmp_path, types):
    m = Mounted(built, tmp_path, types)
    yield m
    m.close()


def bound() -> int:
    """Nodes a mount may hold here: the LRU of heads, the LRU of texts, the folders of
    the hot type directories, and the deleted node in its owner's trash."""
    return HOT + HOT + 2 * PER_DIR + 1


async def test_a_reopened_store_reads_no_node_and_counts_by_sql(mounted):
    m = mounted.memory
    # only the trashed node is read at open (its folder is in the trash, built at mount)
    assert m.nodes.held() == 1 and m.nodes.loads == 0
    counts = m.counts()
    assert counts["nodes"] == len(nodes()) and counts["deleted_nodes"] == 1
    assert counts["versions"] == len(nodes()) + 1 and counts["owners"] == len(OWNERS)
    # the type directories' link counts come from the store, nothing is built for them
    attr = await mounted.fs.ops.getattr(await mounted.fs.ino("user/u3/entities"), mounted.fs.ctx)
    assert attr.st_nlink == 2 + PER_DIR
    assert m.nodes.held() == 1


async def test_many_directories_used_hold_a_bounded_number_of_nodes(mounted):
    fs, m = mounted.fs, mounted.memory
    for o in OWNERS:
        for d in DIRS:
            names = await fs.listdir(f"user/{o}/{d}")
            assert names == [f"n{i:03d}" for i in range(PER_DIR)]
            for i in random.Random(o + d).sample(range(PER_DIR), 10):
                assert (await fs.text(path(o, d, i, "L0.md"))).strip()
                assert await fs.text(path(o, d, i, "L2.md")) == l2_of(o, d, i)
            await mounted.forget_all()
            assert m.nodes.held() <= bound(), (o, d, m.nodes.held())
    assert m.nodes.held() < len(nodes()) // 4  # today's code held every node
    assert m.counts()["nodes"] == len(nodes())


async def test_an_evicted_node_shows_its_latest_text_and_history(mounted):
    fs, m = mounted.fs, mounted.memory
    target = path("u5", "entities", 42)
    await fs.write(f"{target}/L2.md", b"A second version of forty-two.\n")
    nid = m.live_node(("user", "u5"), m.types["entity"], "n042").id
    await mounted.forget_all()
    await mounted.churn()
    assert m.nodes.peek(nid) is None, "let go: nothing holds it"
    assert await fs.text(f"{target}/L2.md") == "A second version of forty-two.\n"
    assert "second version" in await fs.text(f"{target}/L1.md")
    assert await fs.listdir(f"{target}/.history") == ["v1.md", "v2.md"]
    assert await fs.text(f"{target}/.history/v1.md") == l2_of("u5", "entities", 42)
    assert "version: 2" in await fs.text(f"{target}/meta.yaml")


async def test_find_reads_the_versions_of_a_directory_in_one_query(mounted):
    """`find` lists every node's `.history` after a reopen: the version lists of a type
    directory come from the store together, and each still lists its own versions."""
    fs, m = mounted.fs, mounted.memory
    await fs.write(path("u2", "preferences", 3, "L2.md"), b"three, rewritten\n")
    await mounted.forget_all()
    await mounted.churn()
    before = m.texts.history_reads
    assert len(await fs.listdir("user/u2/preferences")) == PER_DIR  # find lists it first
    for i in range(PER_DIR):
        want = ["v1.md", "v2.md"] if i == 3 else ["v1.md"]
        assert await fs.listdir(f"{path('u2', 'preferences', i)}/.history") == want, i
    assert m.texts.history_reads - before <= 2  # one query for the directory, not 80
    assert await fs.text(f"{path('u2', 'preferences', 3)}/.history/v1.md") == l2_of(
        "u2", "preferences", 3
    )


async def test_writes_to_cold_and_evicted_nodes_are_not_lost(built, tmp_path, types):
    r = Mounted(built, tmp_path, types)
    fs = r.fs
    # never read since the reopen, then written: its row is read, then changed
    await fs.write(path("u4", "preferences", 7, "L2.md"), b"seven, rewritten\n")
    # made by mkdir and not written: stored with its first commit, so it is pinned
    await fs.mkdir("user/u1/entities/fresh")
    await r.forget_all()
    await r.churn()
    assert "fresh" in await fs.listdir("user/u1/entities")
    assert await fs.text(path("u4", "preferences", 7, "L2.md")) == "seven, rewritten\n"
    # an access count is kept in memory until flushed: its node is pinned meanwhile
    n = r.memory.live_node(("user", "u2"), r.memory.types["preference"], "n003")
    count = n.access_count
    r.memory.record_access(n)
    nid = n.id
    del n
    await r.churn()
    assert r.memory.nodes.peek(nid) is not None
    r.memory.flush_access_counts()
    r.close()
    again = Mounted(built, tmp_path, types)
    assert await again.fs.text(path("u4", "preferences", 7, "L2.md")) == "seven, rewritten\n"
    assert "fresh" in await again.fs.listdir("user/u1/entities")
    n = again.memory.live_node(("user", "u2"), again.memory.types["preference"], "n003")
    assert n.access_count == count + 1
    again.close()


async def test_rename_and_delete_of_cold_nodes_and_the_counts(mounted):
    fs, m = mounted.fs, mounted.memory
    await fs.rename(path("u2", "preferences", 10), path("u2", "preferences", 900))
    await fs.rm_r(path("u3", "entities", 11))
    await mounted.forget_all()
    await mounted.churn()
    assert await fs.errno_of(fs.ino(path("u2", "preferences", 10))) == errno.ENOENT
    assert await fs.text(path("u2", "preferences", 900, "L2.md")) == l2_of("u2", "preferences", 10)
    assert await fs.errno_of(fs.ino(path("u3", "entities", 11))) == errno.ENOENT
    assert "n011" not in await fs.listdir("user/u3/entities")
    assert len(await fs.listdir("user/u3/.trash")) == 1
    counts = m.counts()
    assert (counts["nodes"], counts["deleted_nodes"]) == (len(nodes()) - 1, 2)
    # a name taken by a live node, held or not, is refused
    assert await fs.errno_of(fs.mkdir(path("u0", "entities", PER_DIR - 1))) == errno.EEXIST


async def test_one_object_per_node_across_threads_and_walks(mounted):
    m = mounted.memory
    nid = m.live_node(("user", "u1"), m.types["entity"], "n005").id
    held = m.nodes.get(nid)
    seen: list = []
    worker = threading.Thread(target=lambda: seen.append(m.nodes.get(nid)))
    worker.start()
    worker.join()
    assert seen == [held] and seen[0] is held
    walked = [n for n in m.walk(owner=("user", "u1"), types=("entity",)) if n.id == nid]
    assert walked[0] is held
    # a change made through the held object is what the next reader sees
    m.save_l2(held, "changed through the held node\n")
    assert next(n for n in m.walk(owner=("user", "u1")) if n.id == nid).l2.startswith("changed")


async def test_search_over_a_store_larger_than_the_cache(built, tmp_path, types, nursery):
    """The index is rebuilt from the store node by node through the cache, a search finds
    a node whatever is held, and follows it through a rename and a delete."""
    (tmp_path / "contextfs.duckdb").write_bytes(built.read_bytes())
    store = Store(tmp_path / "contextfs.duckdb")
    m = Memory(store, types, data_dir=tmp_path, hot_nodes=HOT)
    indexer = Indexer(m, tmp_path / "index", WordEmbedder, model_name="test-words")
    ops, _service = build_operations(
        m,
        FsOptions(fsync_barrier_timeout=30.0),
        status=FixedStatus(),
        schema_files={},
        intake=Intake(m, extract_every=1000),
        searcher=Searcher(m, indexer),
        background=Background(indexer=indexer),
    )
    fs = FS(ops)
    nursery.start_soon(indexer.run)
    with trio.fail_after(60):
        while indexer.searchable_generation < m.generation:
            await trio.sleep(0.05)
    assert m.nodes.held() <= bound()  # the rebuild read every node, and let them go
    target = path("u3", "entities", 50)
    await fs.write(f"{target}/L2.md", b"The bicycle chain needs oiling every spring.\n", fsync=True)
    await mounted_forget(fs)

    async def top(question: str) -> str:
        hits = json.loads(await fs.text(f".query/{question}/_results.json"))["hits"]
        return hits[0]["path"] if hits else ""

    assert await top("bicycle chain oiling spring") == target
    scoped = json.loads(await fs.text("user/u3/.query/bicycle chain oiling/_results.json"))
    assert scoped["hits"][0]["path"] == target
    await fs.rename(target, path("u4", "entities", 950))
    with trio.fail_after(30):
        while await top("bicycle chain oiling spring") != path("u4", "entities", 950):
            await trio.sleep(0.05)
    await fs.rm_r(path("u4", "entities", 950))
    with trio.fail_after(30):
        while (await top("bicycle chain oiling spring")).startswith("user/u4/entities/n950"):
            await trio.sleep(0.05)
    indexer.stop()
    store.close()
    assert fsck_store(tmp_path / "contextfs.duckdb") == []


async def mounted_forget(fs: FS) -> None:
    tree = fs.ops.tree
    await fs.ops.forget([(i.ino, i.lookups) for i in tree.table.inodes.values() if i.lookups > 0])
