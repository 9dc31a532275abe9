"""Tier texts on demand on both backends (issue 14, a million nodes): a reopened store
reads each node's L1/L2 when first used, from the store's own thread and from a worker
thread (search reads nodes there), and closing the store closes the worker's connection."""

from __future__ import annotations

import threading

from contextfs.memory.service import Memory
from contextfs.memory.texts import LazyNode


def text_of(i: int) -> str:
    return f"Tea note {i}: sencha, gyokuro — naïve about matcha {i}.\n"


async def test_texts_load_on_demand_from_any_thread(opener, types, tmp_path):
    store = opener()
    m = Memory(store, types, data_dir=tmp_path)
    m.create_owner("user", "default")
    ctype = m.types["preference"]
    with m.transaction():
        for i in range(12):
            n = m.create_node(("user", "default"), ctype, f"t{i}", persist=False)
            m.save_l2(n, text_of(i))
    store.close()

    store = opener()
    m = Memory(store, types, data_dir=tmp_path, hot_nodes=3)
    nodes = [m.live_node(("user", "default"), ctype, f"t{i}") for i in range(12)]
    assert all(isinstance(n, LazyNode) and not n.loaded for n in nodes)
    assert [n.tier_size("L2") for n in nodes] == [len(text_of(i).encode()) for i in range(12)]
    seen: list[str] = []
    worker = threading.Thread(target=lambda: seen.extend(n.l2 for n in nodes[6:]))
    worker.start()
    worker.join()
    assert seen == [text_of(i) for i in range(6, 12)]
    assert [n.l2 for n in nodes[:6]] == [text_of(i) for i in range(6)]
    assert sum(n.loaded for n in nodes) <= 3
    # the worker's connection (DuckDB: its own; PostgreSQL: the shared readers')
    assert store.__dict__.get("_readers") or store.__dict__.get("_pool")
    store.close()
    assert not store.__dict__.get("_readers") and "_pool" not in store.__dict__
