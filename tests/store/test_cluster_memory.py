"""Two hosts' Memory objects over one PostgreSQL database, with no notice between them:
what optimistic concurrency does when one of them writes from a stale copy. Real server,
real Memory; the stale copy is simply a second Memory that has not caught up yet."""

from __future__ import annotations

import pytest

from contextfs.errors import VersionConflict
from contextfs.memory.remote import catch_up
from contextfs.memory.service import Memory
from contextfs.store.fsck import check_store
from contextfs.store.pg import PgStore

OWNER = ("user", "default")


@pytest.fixture
def two(pg_dsn, types, tmp_path):
    a = Memory(PgStore(pg_dsn), types, data_dir=tmp_path / "a")
    a.create_owner(*OWNER)
    b = Memory(PgStore(pg_dsn), types, data_dir=tmp_path / "b")
    yield a, b
    a.store.close()
    b.store.close()
    store = PgStore(pg_dsn, read_only=True)
    assert check_store(store) == []
    store.close()


def _node(m: Memory, name: str):
    return next(n for n in m.nodes.values() if n.name == name and m.is_live(n))


@pytest.mark.allow_warnings  # a write conflict is logged as a warning
def test_a_stale_whole_file_save_keeps_both_versions(two, types):
    a, b = two
    n = a.create_node(OWNER, types["preference"], "tea")
    a.save_l2(n, "Green tea.\n")
    catch_up(b)
    nb = _node(b, "tea")
    a.save_l2(n, "Green tea, no sugar.\n")  # a wins; b has not heard of it
    assert nb.version == 1
    assert b.save_l2(nb, "Black tea.\n")
    # the newer save stays current, b's text is a version of its own, and .status says so
    assert (nb.version, nb.l2) == (4, "Green tea, no sugar.\n")
    assert b.store.version_text(nb.id, 3) == "Black tea.\n"
    assert b.store.version_text(nb.id, 2) == "Green tea, no sugar.\n"
    assert len(b.conflicts) == 1 and "version 3 in .history" in b.conflicts[0]
    catch_up(a)
    assert (n.version, n.l2) == (4, "Green tea, no sugar.\n")
    assert [v for v, _t, _s in n.history] == [1, 2, 3, 4]


@pytest.mark.allow_warnings  # b's write conflict is logged as a warning
def test_a_save_after_the_others_kept_both_stays_current(two, types):
    """a saves A1, b saves B1 from the version before (kept both: B1 in .history, A1
    stored again on top), then a saves A2 from its A1 before it loaded those: A2 is the
    newest version, not A1 once more, and a lists no conflict."""
    a, b = two
    n = a.create_node(OWNER, types["preference"], "tea")
    a.save_l2(n, "start\n")
    catch_up(b)
    nb = _node(b, "tea")
    a.save_l2(n, "A1\n")
    assert b.save_l2(nb, "B1\n")
    assert (nb.version, nb.l2) == (4, "A1\n") and len(b.conflicts) == 1
    assert n.version == 2  # a has not heard of versions 3 and 4
    assert a.save_l2(n, "A2-LAST\n")
    assert (n.version, n.l2) == (5, "A2-LAST\n") and not a.conflicts
    catch_up(b)
    assert (nb.version, nb.l2) == (5, "A2-LAST\n")
    assert [a.store.version_text(n.id, v) for v in (3, 4)] == ["B1\n", "A1\n"]


def test_a_stale_append_is_appended_to_the_newest_version(two, types):
    """b appends a line to the text it holds after a appended one it has not loaded: b's
    line goes after a's in a new version, with no conflict (as two appends on one
    mount)."""
    a, b = two
    n = a.create_node(OWNER, types["preference"], "log")
    a.save_l2(n, "start\n")
    catch_up(b)
    nb = _node(b, "log")
    a.save_l2(n, "start\nA line\n", appended_to="start\n")
    assert b.save_l2(nb, "start\nB line\n", appended_to="start\n")
    assert (nb.version, nb.l2) == (3, "start\nA line\nB line\n") and not b.conflicts
    catch_up(a)
    assert n.l2 == "start\nA line\nB line\n"


def test_a_stale_routed_write_is_reapplied_on_the_newest_version(two, types):
    a, b = two
    pattern = types["pattern"]
    owner = ("agent", "default")
    a.create_owner(*owner)
    a.routing.route(owner, pattern, "retries.md", b"---\ntopic: retries\n---\n- flaky network\n")
    catch_up(b)
    a.routing.route(owner, pattern, "retries.md", b"---\ntopic: retries\n---\n- slow disk\n")
    # b still holds the first version; its evidence is added to the newest one
    b.routing.route(owner, pattern, "retries.md", b"---\ntopic: retries\n---\n- full queue\n")
    nb = _node(b, "retries")
    for item in ("flaky network", "slow disk", "full queue"):
        assert item in nb.l2, nb.l2
    assert nb.version == 3
    catch_up(a)
    assert _node(a, "retries").l2 == nb.l2


def test_a_stale_rename_is_refused_not_applied(two, types):
    a, b = two
    n = a.create_node(OWNER, types["preference"], "tea")
    a.save_l2(n, "Green tea.\n")
    catch_up(b)
    a.save_l2(n, "Green tea, no sugar.\n")
    nb = _node(b, "tea")
    with pytest.raises(VersionConflict):
        b.rename_node(nb, OWNER, types["preference"], "coffee")
    assert nb.name == "tea"  # rolled back in memory too
    catch_up(b)
    b.rename_node(nb, OWNER, types["preference"], "coffee")  # on the newest version: fine
    catch_up(a)
    assert n.name == "coffee" and n.l2 == "Green tea, no sugar.\n"


def test_two_hosts_creating_one_path_do_not_both_commit(two, types):
    a, b = two
    catch_up(b)
    pattern = types["pattern"]
    owner = ("agent", "default")
    a.create_owner(*owner)
    b.create_owner(*owner)
    a.routing.route(owner, pattern, "cache.md", b"---\ntopic: cache\n---\n- stale reads\n")
    b.routing.route(owner, pattern, "cache.md", b"---\ntopic: cache\n---\n- cold start\n")
    nb = _node(b, "cache")
    assert "stale reads" in nb.l2 and "cold start" in nb.l2
    assert len([n for n in b.nodes.values() if n.name == "cache" and b.is_live(n)]) == 1
