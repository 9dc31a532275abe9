"""Several real mounts on one real PostgreSQL server: each sees the others' writes (read
within 1 s, searchable within 2 s), and a server that goes away refuses writes clearly,
keeps reads working and comes back by itself."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from contextfs.store.fsck import check_store
from contextfs.store.pg import PgStore
from contextfs.testing import Mount
from contextfs.testing.mount import contextfs_cmd
from contextfs.testing.postgres import PgServer
from tests.integration.test_search import qdir, results, wait_indexed, write_node

pytestmark = pytest.mark.timeout(300)
PREFS = Path("user/default/preferences")


def _mount(tmp_path: Path, name: str, dsn: str, *, search: bool = False, config: str = "") -> Mount:
    data = tmp_path / f"data-{name}"
    data.mkdir()
    (data / "config.yaml").write_text(f"search: {str(search).lower()}\nstore: {dsn}\n{config}")
    mnt = tmp_path / f"mnt-{name}"
    mnt.mkdir()
    m = Mount(mnt, data, search=search)
    m.start()
    return m


def _until(what, timeout: float, step: float = 0.01):
    """Poll `what()` until it returns something true; (value, seconds it took)."""
    t0 = time.monotonic()
    while True:
        try:
            got = what()
        except FileNotFoundError:
            got = None
        if got:
            return got, time.monotonic() - t0
        assert time.monotonic() - t0 < timeout, f"not within {timeout} s"
        time.sleep(step)


def _written_once_back(m: Mount, name: str, text: str, timeout: float = 15) -> None:
    """Write node `name` until the mount takes it (EIO while its server is not back)."""

    def write_ok() -> bool:
        try:
            write_node(m.path / PREFS, name, text, fsync=True)
        except OSError as e:
            assert e.errno == errno.EIO
            return False
        return True

    _until(write_ok, timeout, 0.2)


def _stop_and_check(mounts: list[Mount], dsn: str) -> None:
    """Unmount (each daemon must exit cleanly), then fsck the shared store."""
    for m in mounts:
        m.stop()
    store = PgStore(dsn, read_only=True)
    try:
        assert check_store(store) == []
    finally:
        store.close()


@pytest.fixture
def stopped(request) -> Iterator[list[Mount]]:
    mounts: list[Mount] = []
    yield mounts
    for m in mounts:
        if m.proc is not None:
            m.stop()


def test_a_write_on_one_mount_is_read_and_found_on_another(tmp_path, pg_dsn, stopped):
    a = _mount(tmp_path, "a", pg_dsn)
    b = _mount(tmp_path, "b", pg_dsn, search=True)
    stopped += [a, b]
    wait_indexed(b)
    l2 = PREFS / "tea" / "L2.md"
    # b looks first: its kernel caches the answer, which a's write must invalidate
    # the old name leaves the kernel's name cache by an invalidation sent after the
    # listing's: a few milliseconds later at most
    _until(lambda: not (b.path / PREFS / "tea").exists(), 1)
    write_node(a.path / PREFS, "tea", "Sencha green tea, brewed at 70 degrees.\n", fsync=True)
    text, took = _until(lambda: (b.path / l2).read_text(), 5)
    assert text.endswith("brewed at 70 degrees.\n") and took < 1.0, took
    hits, took = _until(lambda: results(b.path, "which green tea and how hot"), 5, 0.1)
    assert hits[0]["path"].startswith("user/default/preferences/tea") and took < 2.0, took

    # a second version: b read the first, its cached bytes must not be served
    write_node(a.path / PREFS, "tea", "Gyokuro now, brewed at 60 degrees.\n", fsync=True)
    text, took = _until(
        lambda: "Gyokuro" in (t := (b.path / l2).read_text()) and t, 5
    )  # fmt: skip
    assert took < 1.0, took
    assert (b.path / PREFS / "tea" / ".history").is_dir()
    # and the other way round
    write_node(b.path / PREFS, "coffee", "Espresso, no sugar.\n", fsync=True)
    _text, took = _until(lambda: (a.path / PREFS / "coffee" / "L2.md").read_text(), 5)
    assert took < 1.0, took
    _stop_and_check([a, b], pg_dsn)


def test_an_owner_made_on_one_mount_appears_on_another_with_its_nodes(tmp_path, pg_dsn, stopped):
    """An agent that starts on host A (mkdir agent/<id>, then its first memory): host B,
    which listed agent/ before, lists the new owner and reads its node within a second."""
    a = _mount(tmp_path, "a", pg_dsn)
    b = _mount(tmp_path, "b", pg_dsn)
    stopped += [a, b]
    assert "scout" not in os.listdir(b.path / "agent")  # b's kernel caches this listing
    (a.path / "agent/scout").mkdir()
    write_node(a.path / "agent/scout/skills", "triage", "Read the log tail first.\n", fsync=True)
    names, took = _until(lambda: "scout" in os.listdir(b.path / "agent"), 5)
    assert took < 1.0, took
    text, _ = _until(lambda: (b.path / "agent/scout/skills/triage/L2.md").read_text(), 5)
    assert text == "Read the log tail first.\n"
    assert "triage" in os.listdir(b.path / "agent/scout/skills")


def test_concurrent_writers_on_two_mounts_lose_nothing(tmp_path, pg_dsn, stopped):
    """Both mounts add evidence to one aggregate node at once: every item ends up in it."""
    a = _mount(tmp_path, "a", pg_dsn)
    stopped.append(a)
    (a.path / "agent" / "default").mkdir()  # the owner, before b starts
    b = _mount(tmp_path, "b", pg_dsn)
    stopped.append(b)
    # distinct words: an aggregate folds items that say the same thing
    items = {m: [f"- {secrets.token_hex(6)} {m.path.name}\n" for _i in range(15)] for m in (a, b)}
    import threading

    def writer(m: Mount) -> None:
        d = m.path / "agent" / "default" / "patterns"
        for i, item in enumerate(items[m]):
            (d / f"drop-{i}.md").write_text(f"---\ntopic: flaky tests\n---\n{item}")

    threads = [threading.Thread(target=writer, args=(m,)) for m in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for m in (a, b):
        text, _took = _until(
            lambda m=m: all(
                i.strip() in (t := (m.path / "agent/default/patterns/flaky-tests/L2.md")
                              .read_text()) for i in items[a] + items[b]) and t,
            5,
        )  # fmt: skip
    # every write is a version of its own: none replaced another
    history = a.path / "agent/default/patterns/flaky-tests/.history"
    assert len(os.listdir(history)) == 30, os.listdir(history)
    _stop_and_check([a, b], pg_dsn)


def test_nodes_both_mounts_make_at_once_are_listed_on_both(tmp_path, pg_dsn, stopped):
    """Each round, both mounts drop a memory on one new topic at the same moment: one of
    them makes the node, the other adds to it (its write retried, or its lookup finding
    the node first). Every topic is listed and read with both items on both mounts,
    whichever mount's write saw the node first (a node a mount only added to was never
    shown there)."""
    a = _mount(tmp_path, "a", pg_dsn)
    stopped.append(a)
    (a.path / "agent" / "default").mkdir()
    b = _mount(tmp_path, "b", pg_dsn)
    stopped.append(b)
    rounds = 60
    # b's shell has listed the type directory (the tree holds its listing), a's has not
    assert os.listdir(b.path / "agent/default/patterns") == []
    import threading

    together = threading.Barrier(2)

    def writer(m: Mount, who: str) -> None:
        d = m.path / "agent" / "default" / "patterns"
        for i in range(rounds):
            together.wait()
            (d / "drop.md").write_text(f"---\ntopic: round {i}\n---\n- {who} {i}\n")

    threads = [threading.Thread(target=writer, args=mw) for mw in ((a, "alpha"), (b, "beta"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    topics = sorted(f"round-{i}" for i in range(rounds))
    for m in (a, b):
        d = m.path / "agent" / "default" / "patterns"
        for i in range(rounds):
            l2 = d / f"round-{i}" / "L2.md"
            _until(lambda l2=l2: "alpha" in (t := l2.read_text()) and "beta" in t, 5)
        assert sorted(os.listdir(d)) == topics
    _stop_and_check([a, b], pg_dsn)


def test_a_node_both_mounts_make_with_mkdir_at_once_ends_as_one_node_on_both(
    tmp_path, pg_dsn, stopped
):
    """Both mounts `mkdir` one new node and write its L2 at the same moment: one write
    makes the node, the other is refused with EAGAIN or goes into it. Within a second
    both mounts show that one node (its files, its text), the write done again on either
    is taken and seen on the other, `rm -r` works, and a folder the losing mount made
    with `mkdir` only is still there after a remount (its last writes are stored)."""
    a = _mount(tmp_path, "a", pg_dsn)
    b = _mount(tmp_path, "b", pg_dsn)
    stopped += [a, b]
    together = threading.Barrier(2)
    got: dict[str, str] = {}

    def make(m: Mount, name: str) -> None:
        d = m.path / PREFS / name
        d.mkdir()
        together.wait()
        try:
            (d / "L2.md").write_text(f"from {m.path.name}\n")
            got[m.path.name] = "ok"
        except OSError as e:
            got[m.path.name] = errno.errorcode[e.errno]

    files = ["L0.md", "L1.md", "L2.md", "meta.yaml"]
    for i in range(3):
        name = f"race{i}"
        threads = [threading.Thread(target=make, args=(m, name)) for m in (a, b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert set(got.values()) <= {"ok", "EAGAIN"} and "ok" in got.values(), got

        def same(name: str = name) -> str | None:
            texts = {(m.path / PREFS / name / "L2.md").read_text() for m in (a, b)}
            listings = [set(os.listdir(m.path / PREFS / name)) for m in (a, b)]
            if len(texts) == 1 and all(set(files) <= ls for ls in listings):
                return texts.pop()
            return None

        text, took = _until(same, 5)
        assert text in ("from mnt-a\n", "from mnt-b\n") and took < 1.0, (text, took)
        # the write done again, on the mount that lost, is taken and seen on the other
        loser = a if got["mnt-a"] == "EAGAIN" else b
        other = b if loser is a else a
        again, there = f"again {i}\n", other.path / PREFS / name / "L2.md"
        (loser.path / PREFS / name / "L2.md").write_text(again)
        _until(lambda there=there, again=again: there.read_text() == again, 5)
        got.clear()
    subprocess.run(["rm", "-r", str(a.path / PREFS / "race0")], check=True)
    _until(lambda: not (b.path / PREFS / "race0").exists(), 5)
    # a node made by mkdir while another mount makes the same one: it becomes theirs
    (a.path / PREFS / "only-made").mkdir()
    write_node(b.path / PREFS, "only-made", "Made on b.\n", fsync=True)
    _until(lambda: (a.path / PREFS / "only-made" / "L2.md").read_text() == "Made on b.\n", 1)
    (a.path / PREFS / "empty").mkdir()  # stored at the unmount
    for m in (a, b):
        m.remount()
    assert sorted(os.listdir(a.path / PREFS)) == ["empty", "only-made", "race1", "race2"]
    _stop_and_check([a, b], pg_dsn)


def test_a_mounts_last_save_is_not_lost_to_a_copy_of_its_own_older_text(tmp_path, pg_dsn, stopped):
    """A saves A1 and B saves B1 at once (one of them loses and keeps both), then A saves
    A2: A2 is current on both mounts, never A1 again, however the pair went. (B's save
    that lost stores A1 again on top of its own; A, saving A2 from its copy of A1 before
    it loaded that version, found a conflict and kept A1 current, a text no one saved
    last.)"""
    a = _mount(tmp_path, "a", pg_dsn)
    b = _mount(tmp_path, "b", pg_dsn)
    stopped += [a, b]
    together = threading.Barrier(2)
    finals = []
    for r in range(10):
        name = f"race{r}"
        write_node(a.path / PREFS, name, "start\n", fsync=True)
        _until(lambda name=name: (b.path / PREFS / name / "L2.md").read_text() == "start\n", 5)

        def save(m: Mount, text: str, name: str = name) -> None:
            together.wait()
            (m.path / PREFS / name / "L2.md").write_text(text)

        threads = [threading.Thread(target=save, args=mt) for mt in ((a, "A1\n"), (b, "B1\n"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        (a.path / PREFS / name / "L2.md").write_text("A2-LAST\n")
        l2s = [m.path / PREFS / name / "L2.md" for m in (a, b)]
        time.sleep(0.5)  # a conflict of B's is kept both by then
        text, _took = _until(
            lambda l2s=l2s: len({p.read_text() for p in l2s}) == 1 and l2s[0].read_text(), 5
        )
        finals.append(text)
        # B1, when B stored it from A1 without a conflict and A saved A2 from A1 before
        # it loaded B1: then A2 is kept in .history (and named in .status)
        assert text in ("A2-LAST\n", "B1\n"), (r, text, finals)
    assert finals.count("A2-LAST\n") >= 8, finals
    _stop_and_check([a, b], pg_dsn)


def test_appends_from_two_mounts_at_once_all_end_in_the_current_text(tmp_path, pg_dsn, stopped):
    """`>>` to one L2.md from both mounts at once, 20 lines each: every close succeeds,
    and every line is in the current text on both mounts, each mount's in its order (an
    append that lost to the other mount's newer version is appended to that one, as two
    appends on one mount are), with a version for each."""
    a = _mount(tmp_path, "a", pg_dsn)
    b = _mount(tmp_path, "b", pg_dsn)
    stopped += [a, b]
    write_node(a.path / PREFS, "log", "start\n", fsync=True)
    _until(lambda: (b.path / PREFS / "log" / "L2.md").read_text() == "start\n", 5)
    together = threading.Barrier(2)

    def appender(m: Mount, tag: str) -> None:
        together.wait()
        for i in range(20):
            with open(m.path / PREFS / "log" / "L2.md", "a") as f:
                f.write(f"{tag} line {i}\n")

    threads = [threading.Thread(target=appender, args=mt) for mt in ((a, "A"), (b, "B"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    want = {f"{tag} line {i}" for tag in "AB" for i in range(20)}
    for m in (a, b):
        l2 = m.path / PREFS / "log" / "L2.md"
        text, _took = _until(lambda l2=l2: want <= set((t := l2.read_text()).splitlines()) and t, 5)
        lines = text.splitlines()
        assert lines[0] == "start" and len(lines) == 41, lines
        for tag in "AB":
            assert [x for x in lines if x.startswith(tag)] == [f"{tag} line {i}" for i in range(20)]
    assert len(os.listdir(a.path / PREFS / "log" / ".history")) == 41
    assert "write conflicts" not in a.status() + b.status()
    _stop_and_check([a, b], pg_dsn)


def test_an_inbox_item_is_processed_by_one_mount(tmp_path, pg_dsn, stopped):
    """A mount that starts while another processes an export in the inbox leaves it to
    that mount (it is claimed): every conversation is archived once, and the report of
    the item on the mount that left it says done once the other is. Without the claim
    both processed it and archived conversations twice."""
    from tests.integration.test_inbox_crash import TURNS, _export, _turn_ids

    conversations = 60
    a = _mount(tmp_path, "a", pg_dsn)
    stopped.append(a)
    (a.path / ".inbox" / "conversations.json").write_text(_export(0, conversations))
    b = _mount(tmp_path, "b", pg_dsn)  # it reads the inbox while a files the export
    stopped.append(b)
    report = a.path / ".inbox" / "conversations.json.report.md"
    assert "state: done" not in report.read_text()  # b started in time to take it too
    _until(lambda: "state: done" in report.read_text(), 120)
    ids = _turn_ids(a.path)
    assert set(ids) == {f"c{c}t{t}" for c in range(conversations) for t in range(TURNS)}
    assert max(ids.values()) == 1, [i for i, k in ids.items() if k > 1][:5]
    b_report = b.path / ".inbox" / "conversations.json.report.md"
    _until(lambda: "state: done" in b_report.read_text(), 5)
    _stop_and_check([a, b], pg_dsn)


def test_one_mount_leads_the_consolidation_and_another_takes_over(tmp_path, pg_dsn, stopped):
    """Two mounts with consolidation due every second: only one runs it (the leader);
    once the leader unmounts, the other runs it."""
    mounts = []
    for name in ("a", "b"):
        data = tmp_path / f"data-{name}"
        data.mkdir()
        (data / "config.yaml").write_text(f"search: false\nstore: {pg_dsn}\nconsolidate_every: 1\n")
        (tmp_path / f"mnt-{name}").mkdir()
        m = Mount(tmp_path / f"mnt-{name}", data)
        m.start()
        stopped.append(m)
        mounts.append(m)

    def runs(m: Mount) -> int:
        return m.log.read_text().count("consolidation: ")

    _until(lambda: sum(map(runs, mounts)) >= 4, 30)
    leader, other = sorted(mounts, key=runs, reverse=True)
    assert runs(other) == 0, (runs(leader), runs(other))
    leader.stop()
    _until(lambda: runs(other) >= 2, 30)
    _stop_and_check([other], pg_dsn)


def test_a_rename_and_a_delete_on_one_mount_are_seen_on_another(tmp_path, pg_dsn, stopped):
    """A node renamed on mount A is listed and read under its new name on mount B within
    a second, and its old name is gone there, though B's shell had looked it up (the
    kernel keeps names for a minute); a node deleted on A goes from B as fast."""
    a = _mount(tmp_path, "a", pg_dsn)
    b = _mount(tmp_path, "b", pg_dsn)
    stopped += [a, b]
    write_node(a.path / PREFS, "tea", "Green tea, no sugar.\n", fsync=True)
    write_node(a.path / PREFS, "coffee", "Black coffee.\n", fsync=True)
    _until(lambda: (b.path / PREFS / "tea" / "L2.md").read_text(), 5)
    _until(lambda: (b.path / PREFS / "coffee" / "L2.md").read_text(), 5)
    assert sorted(os.listdir(b.path / PREFS)) == ["coffee", "tea"]
    os.rename(a.path / PREFS / "tea", a.path / PREFS / "green-tea")
    _, took = _until(lambda: sorted(os.listdir(b.path / PREFS)) == ["coffee", "green-tea"], 5)
    assert took < 1.0, took
    assert (b.path / PREFS / "green-tea" / "L2.md").read_text().endswith("Green tea, no sugar.\n")
    # the old name leaves the kernel's name cache by an invalidation sent after the
    # listing's: a few milliseconds later at most
    _until(lambda: not (b.path / PREFS / "tea").exists(), 1)
    subprocess.run(["rm", "-r", str(a.path / PREFS / "coffee")], check=True)
    _, took = _until(lambda: not (b.path / PREFS / "coffee").exists(), 5)
    assert took < 1.0, took
    assert os.listdir(b.path / PREFS) == ["green-tea"]
    # moved to another type, and to another owner: gone from where B showed it
    ents = "user/default/entities"
    os.rename(a.path / PREFS / "green-tea", a.path / ents / "green-tea")
    _until(lambda: (b.path / ents / "green-tea" / "L2.md").exists(), 5)
    _until(lambda: os.listdir(b.path / PREFS) == [], 5)
    (a.path / "user/alice").mkdir()
    _until(lambda: (b.path / "user/alice/entities").is_dir(), 5)
    os.listdir(b.path / "user/alice/entities")
    os.rename(a.path / ents / "green-tea", a.path / "user/alice/entities/green-tea")
    _until(lambda: (b.path / "user/alice/entities/green-tea/L2.md").exists(), 5)
    _until(lambda: "green-tea" not in os.listdir(b.path / ents), 5)
    # deleted on A, restored on B: the trash entry on A goes
    subprocess.run(["rm", "-r", str(a.path / "user/alice/entities/green-tea")], check=True)
    trash = "user/alice/.trash/entities"
    _until(lambda: (b.path / trash / "green-tea").is_dir(), 5)
    _until(lambda: (a.path / trash / "green-tea").is_dir(), 5)
    os.rename(b.path / trash / "green-tea", b.path / "user/alice/entities/green-tea")
    _until(lambda: (a.path / "user/alice/entities/green-tea/L2.md").exists(), 5)
    _until(lambda: os.listdir(a.path / trash) == [], 5)
    _stop_and_check([a, b], pg_dsn)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to add users")
def test_a_permission_change_on_one_mount_holds_on_another_at_once(pg_dsn, stopped):
    """Alice's notes are readable by bob through mount B until she closes them through
    mount A (chmod 600 on a note, chmod 700 on her directory): within a second bob is
    refused on B too, though B's kernel had the old modes cached (`default_permissions`
    checks those); and when she opens her directory again, he may list it again."""
    import shutil
    import tempfile

    from tests.integration.test_permissions import ALICE, BOB, _user, as_user

    _user(ALICE), _user(BOB)
    top = Path(tempfile.mkdtemp(prefix="cfs-cluster-perm-"))
    top.chmod(0o755)
    try:
        mounts = []
        for name in ("a", "b"):
            data = top / f"data-{name}"
            data.mkdir()
            search = str(name == "b").lower()  # bob asks mount B's .query too
            (data / "config.yaml").write_text(f"search: {search}\nstore: {pg_dsn}\n")
            (top / f"mnt-{name}").mkdir(mode=0o755)
            (top / f"mnt-{name}").chmod(0o755)
            m = Mount(top / f"mnt-{name}", data)
            m.start("-o", "allow_other")
            stopped.append(m)
            mounts.append(m)
        a, b = mounts
        alice = a.path / "user" / "alice"
        alice.mkdir()
        shutil.chown(alice, ALICE, ALICE)
        diary = alice / "preferences" / "diary"
        done = as_user(ALICE, f"mkdir {diary} && echo 'Dear diary.' > {diary}/L2.md")
        assert done.returncode == 0, done.stderr
        note_b = b.path / "user/alice/preferences/diary/L2.md"
        seen = _until(lambda: as_user(BOB, f"cat {note_b}").stdout, 5)[0]
        assert seen == "Dear diary.\n"
        assert as_user(BOB, f"ls {b.path}/user/alice/preferences").stdout == "diary\n"
        ask = f"cat {b.path}/.query/diary/_context.md"
        _until(lambda: "Dear diary." in as_user(BOB, ask).stdout, 60)  # once B indexed it
        # alice closes the note, then her directory, through mount A
        assert as_user(ALICE, f"chmod 600 {diary}/L2.md").returncode == 0
        _, took = _until(lambda: as_user(BOB, f"cat {note_b}").returncode != 0, 5)
        assert took < 1.0, took
        assert "Permission denied" in as_user(BOB, f"cat {note_b}").stderr
        assert "Dear diary." not in as_user(BOB, ask).stdout  # nor through his search
        assert as_user(ALICE, f"chmod 700 {alice}").returncode == 0
        listing = f"ls {b.path}/user/alice/preferences"
        _, took = _until(lambda: as_user(BOB, listing).returncode != 0, 5)
        assert took < 1.0, took
        assert as_user(ALICE, f"chmod 755 {alice}").returncode == 0
        _until(lambda: as_user(BOB, listing).stdout == "diary\n", 5)
        assert as_user(BOB, f"cat {note_b}").returncode != 0  # the note stays closed
        _stop_and_check([a, b], pg_dsn)
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_a_mount_stopped_before_its_commit_holds_no_one_up(tmp_path, pg_dsn, stopped):
    """A mount frozen (SIGSTOP, a paused VM, a slow link) in the middle of a write, its
    rows written and its outbox row waiting for the COMMIT, holds no lock another
    mount's write of another node needs: the outbox lock is taken only inside the one
    message that ends a transaction. Another mount's write is acknowledged at its usual
    speed, and the frozen write, once it goes on, commits after it, in order."""
    import threading

    from contextfs.model import Access

    b = _mount(tmp_path, "b", pg_dsn)
    stopped.append(b)
    write_node(b.path / PREFS, "coffee", "Black coffee.\n", fsync=True)  # warm
    frozen = PgStore(pg_dsn)  # a mount's store, with the same session deadlines
    paused, go_on, failed = threading.Event(), threading.Event(), []

    def frozen_write() -> None:
        try:
            with frozen.atomic():
                frozen.add_owner("user", "zoe")
                frozen.set_access("owner", "user/zoe", Access(1000, 1000, 0o700, 0o600))
                paused.set()
                go_on.wait(30)
        except BaseException as exc:  # reported by the assertion below
            failed.append(exc)

    writer = threading.Thread(target=frozen_write, daemon=True)
    writer.start()
    try:
        assert paused.wait(10)
        t0 = time.monotonic()
        write_node(b.path / PREFS, "tea", "Green tea.\n", fsync=True)
        took = time.monotonic() - t0
        assert took < 1.5, f"the write waited {took:.1f} s for the stopped mount"
    finally:
        go_on.set()
        writer.join(30)
    assert not failed, failed
    seqs = frozen.con.execute("SELECT seq, node_id, op FROM outbox ORDER BY seq").fetchall()
    assert seqs[-1][1:] == (0, "access"), seqs[-3:]  # the frozen write came last
    assert [s for s, _n, _o in seqs] == list(range(seqs[0][0], seqs[-1][0] + 1))  # no gaps
    frozen.close()
    assert (b.path / PREFS / "tea" / "L2.md").read_text().endswith("Green tea.\n")
    _until(lambda: os.path.isdir(b.path / "user" / "zoe"), 5)  # b loaded the frozen write
    _stop_and_check([b], pg_dsn)


@pytest.mark.allow_warnings  # the frozen store's own warning: its session was ended
def test_a_session_stopped_holding_the_outbox_lock_is_ended(tmp_path, pg_dsn, stopped):
    """A session frozen while it holds the lock that orders every mount's commits (a
    mount of an older version, which took it at its first outbox row; an administrator's
    `pg_advisory_xact_lock`). The server ends its session once it has been idle in the
    transaction for IDLE_IN_TRANSACTION_MS, so another mount's write waits that long at
    most, instead of until the frozen one wakes; the frozen one's transaction is rolled
    back (it never acknowledged anything) and its next statement says so."""
    import threading

    from contextfs.errors import StoreUnavailable
    from contextfs.store.pg import IDLE_IN_TRANSACTION_MS, OUTBOX_LOCK

    b = _mount(tmp_path, "b", pg_dsn)
    stopped.append(b)
    frozen = PgStore(pg_dsn)  # a mount's connection, with the same session deadlines
    try:
        frozen.con.begin()
        frozen.con.execute("SELECT pg_advisory_xact_lock(?)", [OUTBOX_LOCK])  # mid-commit
        done = threading.Event()

        def write() -> None:
            write_node(b.path / PREFS, "tea", "Green tea.\n", fsync=True)
            done.set()

        t0 = time.monotonic()
        threading.Thread(target=write, daemon=True).start()
        assert done.wait(IDLE_IN_TRANSACTION_MS / 1000 + 5), "the write waited for the frozen mount"
        took = time.monotonic() - t0
        assert took > IDLE_IN_TRANSACTION_MS / 1000 - 1, took  # it did wait for the lock
        with pytest.raises(StoreUnavailable):
            frozen.con.execute("SELECT 1")
    finally:
        with contextlib.suppress(Exception):
            frozen.con.rollback()
        frozen.close()
    assert (b.path / PREFS / "tea" / "L2.md").read_text().endswith("Green tea.\n")
    _stop_and_check([b], pg_dsn)


def test_attachment_changes_on_one_mount_are_seen_on_another(tmp_path, pg_dsn, stopped):
    """A file in a node written, rewritten, renamed, chmod-ed and removed on mount A: mount
    B, which has listed the node and read the file (its kernel keeps both), shows each
    change within a second."""
    a = _mount(tmp_path, "a", pg_dsn)
    b = _mount(tmp_path, "b", pg_dsn)
    stopped += [a, b]
    write_node(a.path / PREFS, "tea", "Green tea.\n", fsync=True)
    (a.path / PREFS / "tea" / "notes.txt").write_text("one\n")
    on_b = b.path / PREFS / "tea"
    _, took = _until(lambda: (on_b / "notes.txt").read_text() == "one\n", 5)
    assert took < 1.0, took
    assert "notes.txt" in os.listdir(on_b)
    (a.path / PREFS / "tea" / "notes.txt").write_text("two, longer\n")
    _, took = _until(lambda: (on_b / "notes.txt").read_text() == "two, longer\n", 5)
    assert took < 1.0, took
    os.rename(a.path / PREFS / "tea" / "notes.txt", a.path / PREFS / "tea" / "old.txt")
    _, took = _until(lambda: "old.txt" in os.listdir(on_b), 5)
    assert took < 1.0, took
    _until(lambda: not (on_b / "notes.txt").exists(), 1)
    assert (on_b / "old.txt").read_text() == "two, longer\n"
    os.chmod(a.path / PREFS / "tea" / "old.txt", 0o600)
    _, took = _until(lambda: (on_b / "old.txt").stat().st_mode & 0o777 == 0o600, 5)
    assert took < 1.0, took
    os.unlink(a.path / PREFS / "tea" / "old.txt")
    _, took = _until(lambda: not (on_b / "old.txt").exists(), 5)
    assert took < 1.0, took
    assert "old.txt" not in os.listdir(on_b)
    assert (on_b / "L2.md").read_text().endswith("Green tea.\n")
    _stop_and_check([a, b], pg_dsn)


def test_a_file_added_to_a_node_another_mount_has_not_looked_at_is_seen_there(
    tmp_path, pg_dsn, stopped
):
    """Mount B starts after node `kettle` exists and never looks at it; A then adds a file
    to it. When B is first asked for the file, it is there: B built its view of the
    node's files when it started, and a change of them it loads for a node it shows
    nothing of yet must not leave that view as it was (bench_cluster found such a file
    missing for good on one of three mounts)."""
    a = _mount(tmp_path, "a", pg_dsn)
    stopped.append(a)
    write_node(a.path / PREFS, "kettle", "Kettle descaled in March.\n", fsync=True)
    write_node(a.path / PREFS, "marker", "Marker one.\n", fsync=True)
    b = _mount(tmp_path, "b", pg_dsn)
    stopped.append(b)
    marker = b.path / PREFS / "marker" / "L2.md"
    assert marker.read_text().endswith("Marker one.\n")  # B holds marker, not kettle
    (a.path / PREFS / "kettle" / "notes.txt").write_text("citric acid, 2 spoons\n")
    # B has loaded the change once A's later change of a node B holds is shown there
    # (a held node changes only with A's notices, which B loads in order)
    write_node(a.path / PREFS, "marker", "Marker two.\n", fsync=True)
    _until(lambda: marker.read_text().endswith("Marker two.\n"), 5)
    assert (b.path / PREFS / "kettle" / "notes.txt").read_text() == "citric acid, 2 spoons\n"
    assert sorted(os.listdir(b.path / PREFS / "kettle")) == [
        ".history",
        "L0.md",
        "L1.md",
        "L2.md",
        "meta.yaml",
        "notes.txt",
    ]
    _stop_and_check([a, b], pg_dsn)


@pytest.fixture(scope="module")
def own_server() -> Iterator[PgServer]:
    """A server of this module's own: the fault test stops and starts it."""
    with PgServer() as server:
        yield server


@pytest.mark.allow_warnings
def test_a_server_that_goes_away_refuses_writes_and_comes_back(tmp_path, own_server, stopped):
    dsn = own_server.create_database("faults")
    m = _mount(tmp_path, "a", dsn)
    stopped.append(m)
    write_node(m.path / PREFS, "tea", "Green tea.\n", fsync=True)
    own_server.stop()
    try:
        # reads keep working from what the mount holds
        assert (m.path / PREFS / "tea" / "L2.md").read_text().endswith("Green tea.\n")
        # a write is refused with EIO, and .status says why (without the password)
        with pytest.raises(OSError) as exc:
            write_node(m.path / PREFS, "tea", "Black tea.\n", fsync=True)
        assert exc.value.errno == errno.EIO
        status = m.status()
        assert "unreachable" in status and own_server.password not in status
        assert "state: read-write" in status  # not turned read-only for good
        assert (m.path / PREFS / "tea" / "L2.md").read_text().endswith("Green tea.\n")
    finally:
        own_server.start()

    # it comes back by itself (backoff of at most 2 s between tries)
    _written_once_back(m, "tea", "Oolong.\n")
    assert "(connected)" in m.status()
    m.stop()
    m.start()
    text = (m.path / PREFS / "tea" / "L2.md").read_text()
    assert text.endswith("Oolong.\n")
    assert not any(
        "Black tea" in p.read_text() for p in (m.path / PREFS / "tea" / ".history").iterdir()
    )
    log = m.log.read_text()
    assert own_server.password not in log
    m.stop()


def test_sessions_the_server_ended_are_replaced_without_an_error(tmp_path, pg_dsn, stopped):
    """A server restart, a failover or an administrator ends every idle session of the
    mounts. The first write, the first read of a stored file and a new question after it
    succeed at once, without EIO, and no mount says the server was unreachable: each
    finds its ended connection before sending a statement down it."""
    a = _mount(tmp_path, "a", pg_dsn)
    b = _mount(tmp_path, "b", pg_dsn, search=True)
    stopped += [a, b]
    write_node(a.path / PREFS, "tea", "Genmaicha, green tea with toasted rice.\n", fsync=True)
    (a.path / PREFS / "tea" / "notes.txt").write_text("brew at 80 degrees\n")
    _until(lambda: "notes.txt" in os.listdir(b.path / PREFS / "tea"), 5)
    wait_indexed(b)
    assert results(b.path, "toasted rice")[0]["path"].startswith(f"{PREFS}/tea")
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 5000)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
    assert row is not None and row[0] >= 4, row  # each mount's store, listener and readers

    write_node(a.path / PREFS, "coffee", "A flat white, no sugar.\n", fsync=True)
    assert (b.path / PREFS / "tea" / "notes.txt").read_text() == "brew at 80 degrees\n"
    assert results(b.path, "green tea with toasted rice")[0]["path"].startswith(f"{PREFS}/tea")
    write_node(b.path / PREFS, "juice", "Orange juice in the morning.\n", fsync=True)
    _until(lambda: (a.path / PREFS / "juice" / "L2.md").exists(), 5)
    assert (b.path / PREFS / "coffee" / "L2.md").read_text().endswith("no sugar.\n")
    for m in (a, b):
        assert "unreachable" not in m.status()
    _stop_and_check([a, b], pg_dsn)


def test_every_node_written_on_two_busy_mounts_is_read_on_both(tmp_path, pg_dsn, stopped):
    """Three writers on each of two mounts make nodes without pause for three seconds:
    each mount catches up with the other while its own writes go on (what it reads off
    the event loop may be overtaken by its own commits and is read again). Every
    acknowledged node is then read, byte for byte, on both."""
    import threading

    mounts = [_mount(tmp_path, "a", pg_dsn), _mount(tmp_path, "b", pg_dsn)]
    stopped += mounts
    acked: dict[str, str] = {}
    until = time.monotonic() + 3

    def writer(m: Mount, tag: str) -> None:
        i = 0
        while time.monotonic() < until:
            name, text = f"{tag}-{i}", f"Note {tag} {i}.\n"
            write_node(m.path / PREFS, name, text, fsync=True)
            acked[name] = text
            i += 1

    threads = [
        threading.Thread(target=writer, args=(m, f"w{k}{t}"))
        for k, m in enumerate(mounts)
        for t in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(acked) > 60, len(acked)

    def missing() -> list[str]:
        return [
            f"{m.path.name}:{name}"
            for m in mounts
            for name, text in acked.items()
            if not (m.path / PREFS / name / "L2.md").exists()
            or (m.path / PREFS / name / "L2.md").read_text() != text
        ]

    _until(lambda: not missing(), 10, 0.2)
    assert sorted(os.listdir(mounts[0].path / PREFS)) == sorted(os.listdir(mounts[1].path / PREFS))
    _stop_and_check(mounts, pg_dsn)


def test_a_frozen_server_does_not_hold_up_reads_of_what_a_mount_holds(
    tmp_path, own_server, stopped
):
    """The server stops answering (SIGSTOP of its processes: a paused VM, a host gone
    silent) while two mounts are idle. Reading what each holds (files and listings read
    before, `meta.yaml`) goes on at its usual speed on both: catching up with the other
    mounts waits for the server in a worker thread, not on the loop that serves reads.
    Once the server answers again, a write on one is read on the other."""

    dsn = own_server.create_database("frozen")
    a = _mount(tmp_path, "a", dsn)
    b = _mount(tmp_path, "b", dsn)
    stopped += [a, b]
    for i in range(5):
        write_node(a.path / PREFS, f"n{i}", f"Note {i}.\n", fsync=True)
    (a.path / PREFS / "n0" / "notes.txt").write_text("attached\n")
    _until(lambda: "notes.txt" in os.listdir(b.path / PREFS / "n0"), 5)
    held = [
        m.path / PREFS / f"n{i}" / name
        for m in (a, b)
        for i in range(5)
        for name in ("L2.md", "L0.md", "meta.yaml")
    ]
    before = {p: p.read_bytes() for p in held}
    listed = {p.parent.parent: sorted(os.listdir(p.parent.parent)) for p in held}
    worst: list[float] = []
    wrong: list[Path] = []

    def read_all(until: float) -> None:
        while time.monotonic() < until:
            for p in held:
                t0 = time.monotonic()
                if p.read_bytes() != before[p]:
                    wrong.append(p)
                if sorted(os.listdir(p.parent.parent)) != listed[p.parent.parent]:
                    wrong.append(p.parent.parent)
                worst.append(time.monotonic() - t0)
            time.sleep(0.05)

    stuck = own_server.while_frozen(lambda: read_all(time.monotonic() + 3))
    assert stuck is None, "a read of what the mount holds waited for the frozen server"
    assert not wrong, wrong
    assert len(worst) > 2 * len(held) and max(worst) < 1.0, max(worst)

    write_node(a.path / PREFS, "tea", "Green tea.\n", fsync=True)
    text, _ = _until(lambda: (b.path / PREFS / "tea" / "L2.md").read_text(), 10)
    assert text.endswith("Green tea.\n")
    _stop_and_check([a, b], dsn)


@pytest.mark.allow_warnings
def test_a_write_while_the_server_is_frozen_is_refused_by_its_deadline(
    tmp_path, own_server, stopped
):
    """The server stops answering (SIGSTOP) with a write on its way: no server-side
    timeout can fire and the kernel still acknowledges the bytes, so only the mount's own
    deadline (`store_deadline_s`) ends the wait. The write is refused with EIO once it
    passes, `.status` says why, what the mount holds is still read, and once the server
    answers again the next write is stored and read by the other mount."""

    dsn = own_server.create_database("deadline")
    a = _mount(tmp_path, "a", dsn, config="store_deadline_s: 2\n")
    b = _mount(tmp_path, "b", dsn)
    stopped += [a, b]
    write_node(a.path / PREFS, "tea", "Green tea.\n", fsync=True)
    outcome: dict[str, object] = {}

    def write() -> None:
        t0 = time.monotonic()
        try:
            write_node(a.path / PREFS, "coffee", "A flat white.\n", fsync=True)
            outcome["write"] = "stored"
        except OSError as e:
            outcome["write"] = e.errno
        outcome["took"] = time.monotonic() - t0

    def read() -> None:  # after the refusal: what the mount holds, and why it refused
        outcome["tea"] = (a.path / PREFS / "tea" / "L2.md").read_text()
        outcome["status"] = a.status()

    stuck = own_server.while_frozen(write, read)  # each in a thread: one that hangs fails
    assert stuck is None, f"{stuck} waited for the frozen server past its deadline"
    assert outcome["write"] == errno.EIO, outcome
    assert 1.5 < float(outcome["took"]) < 15, outcome  # type: ignore[arg-type]
    assert str(outcome["tea"]).endswith("Green tea.\n")
    status = str(outcome["status"])
    assert "no answer within 3 s" in status and own_server.password not in status, status
    assert "state: read-write" in status

    _written_once_back(a, "juice", "Orange juice.\n")
    text, _ = _until(lambda: (b.path / PREFS / "juice" / "L2.md").read_text(), 10)
    assert text.endswith("Orange juice.\n")
    _stop_and_check([a, b], dsn)


@pytest.mark.allow_warnings
def test_a_write_waiting_for_a_frozen_server_does_not_hold_up_the_mounts_reads(
    tmp_path, own_server, stopped
):
    """The server stops answering while a write of this same mount is on its way. Until
    its deadline refuses it, the mount's other requests go on: what it holds is read at
    its usual speed, because the write's statement waits on the event loop's terms
    (greenwait), not by blocking it (before: every read waited for the write, 6 s here)."""

    dsn = own_server.create_database("waiting")
    a = _mount(tmp_path, "a", dsn, config="store_deadline_s: 6\n")
    stopped.append(a)
    for i in range(3):
        write_node(a.path / PREFS, f"n{i}", f"Note {i}.\n", fsync=True)
    held = [a.path / PREFS / f"n{i}" / name for i in range(3) for name in ("L2.md", "L0.md")]
    held.append(a.path / PREFS / "n0" / "meta.yaml")
    before = {p: p.read_bytes() for p in held}
    outcome: dict[str, object] = {}

    def write() -> None:
        try:
            write_node(a.path / PREFS, "coffee", "A flat white.\n", fsync=True)
            outcome["write"] = "stored"
        except OSError as e:
            outcome["write"] = e.errno

    def read_while_writing() -> None:
        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        time.sleep(1.0)  # its statement is sent and waits for the frozen server
        took: list[float] = []
        wrong: list[Path] = []
        until = time.monotonic() + 2.0
        while time.monotonic() < until:
            for p in held:
                t0 = time.monotonic()
                if p.read_bytes() != before[p]:
                    wrong.append(p)
                took.append(time.monotonic() - t0)
            names = os.listdir(a.path / PREFS)
            if not {"n0", "n1", "n2"} <= set(names):
                wrong.append(a.path / PREFS)
            time.sleep(0.02)
        outcome.update(took=took, wrong=wrong, writing=writer.is_alive())
        writer.join(20)

    stuck = own_server.while_frozen(read_while_writing, timeout=30)
    assert stuck is None, "the write outlived its deadline"
    took = outcome["took"]
    assert isinstance(took, list) and took
    assert max(took) < 0.5, f"a read waited {max(took):.1f} s behind the write"
    assert len(took) > 3 * len(held), len(took)
    assert outcome["writing"], "the write did not wait for the server: nothing was tested"
    assert not outcome["wrong"], outcome["wrong"]
    assert outcome["write"] == errno.EIO, outcome  # refused by its deadline, as before

    _written_once_back(a, "juice", "Orange juice.\n")
    assert (a.path / PREFS / "juice" / "L2.md").read_text().endswith("Orange juice.\n")
    _stop_and_check([a], dsn)


def test_a_listing_read_from_the_store_waits_for_a_write_in_the_store(
    tmp_path, own_server, stopped
):
    """A type directory this mount has never listed is read from the store; when its own
    write is in the store meanwhile (here: waiting for a frozen server), the listing
    waits its turn and lists every node (before: `ls` failed with EIO, and the log had
    'a store call on the event loop outside greenwait.run')."""
    dsn = own_server.create_database("listing")
    b = _mount(tmp_path, "b", dsn)
    stopped.append(b)
    for i in range(3):
        write_node(b.path / PREFS, f"n{i}", f"Note {i}.\n", fsync=True)
    a = _mount(tmp_path, "a", dsn)  # started after: it has listed nothing
    stopped.append(a)
    outcome: dict[str, object] = {}

    def write() -> None:
        try:
            write_node(a.path / "user/default/entities", "ana", "Ana, a friend.\n", fsync=True)
            outcome["write"] = "stored"
        except OSError as e:
            outcome["write"] = e.errno

    def listing() -> None:
        try:
            outcome["listing"] = sorted(os.listdir(a.path / PREFS))
        except OSError as e:
            outcome["listing"] = errno.errorcode[e.errno]

    writer = threading.Thread(target=write)
    lister = threading.Thread(target=listing)
    own_server.freeze()
    try:
        writer.start()
        time.sleep(1.0)  # its statement is sent and waits for the frozen server
        lister.start()
        time.sleep(1.0)
    finally:
        own_server.thaw()
    writer.join(30)
    lister.join(30)
    assert outcome["listing"] == ["n0", "n1", "n2"], outcome
    assert outcome["write"] == "stored", outcome
    _until(lambda: (b.path / "user/default/entities/ana/L2.md").exists(), 5)
    _stop_and_check([a, b], dsn)


def test_a_mount_killed_loses_no_acknowledged_write(tmp_path, pg_dsn, stopped):
    a = _mount(tmp_path, "a", pg_dsn)
    b = _mount(tmp_path, "b", pg_dsn)
    stopped += [a, b]
    write_node(a.path / PREFS, "tea", "Genmaicha.\n", fsync=True)
    a.kill()  # kill -9: the write was acknowledged, so it is in PostgreSQL
    text, _took = _until(lambda: (b.path / PREFS / "tea" / "L2.md").read_text(), 5)
    assert text.endswith("Genmaicha.\n")
    a.start()
    assert (a.path / PREFS / "tea" / "L2.md").read_text().endswith("Genmaicha.\n")


def test_fsck_of_a_shared_store_from_the_command_line(tmp_path, pg_dsn, stopped):
    a = _mount(tmp_path, "a", pg_dsn)
    stopped.append(a)
    write_node(a.path / PREFS, "tea", "Genmaicha.\n", fsync=True)
    # PostgreSQL serves many clients: fsck runs while the mount is up
    r = subprocess.run(
        contextfs_cmd("fsck", str(tmp_path / "data-a")), capture_output=True, text=True
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 problem(s)" in r.stdout and "postgresql://postgres@/" in r.stdout
    password = pg_dsn.split(":", 2)[2].split("@", 1)[0]
    assert password not in r.stdout + r.stderr


def test_a_file_still_open_on_one_mount_outlives_another_mounts_change_to_its_node(
    tmp_path, pg_dsn, stopped
):
    """A new file's row waits for its first commit (reference.md, commit points). While
    it waits, mount B changes another file of the same node, and A reads that node's
    files again: the waiting file stays, and its close stores it for both mounts."""
    a = _mount(tmp_path, "a", pg_dsn)
    b = _mount(tmp_path, "b", pg_dsn)
    stopped += [a, b]
    write_node(a.path / PREFS, "tea", "Green tea.\n", fsync=True)
    on_a, on_b = a.path / PREFS / "tea", b.path / PREFS / "tea"
    with open(on_a / "draft.txt", "w") as draft:
        _until(lambda: (on_b / "L2.md").exists(), 5)
        (on_b / "from-b.txt").write_text("written on b\n")
        _until(lambda: (on_a / "from-b.txt").read_text() == "written on b\n", 5)
        assert "draft.txt" in os.listdir(on_a)
        draft.write("drafted on a\n")
    assert (on_a / "draft.txt").read_text() == "drafted on a\n"
    _until(lambda: (on_b / "draft.txt").read_text() == "drafted on a\n", 5)
    _stop_and_check([a, b], pg_dsn)


def test_a_big_file_written_on_one_mount_is_read_and_patched_on_another(tmp_path, pg_dsn, stopped):
    """A file past the 8 MiB that moves an open file's bytes to a spill file, written on
    mount A, reads back byte for byte on mount B (loaded from the shared store a few
    chunks at a time); a patch in its middle made on B is what A shows next."""
    a = _mount(tmp_path, "a", pg_dsn)
    b = _mount(tmp_path, "b", pg_dsn)
    stopped += [a, b]
    write_node(a.path / PREFS, "tea", "Green tea.\n", fsync=True)
    body = bytearray(os.urandom(12 << 20))
    with open(a.path / PREFS / "tea" / "big.bin", "wb") as f:
        f.write(body)
        os.fsync(f.fileno())
    on_b = b.path / PREFS / "tea" / "big.bin"
    # this test is about the bytes, not the latency (the small-file tests above hold that
    # to 5 s): one CI run under a full suite's load took more than 5 s to show the file
    _until(lambda: on_b.stat().st_size == len(body), 30)
    assert on_b.read_bytes() == body
    with open(on_b, "r+b") as f:
        f.seek(9 << 20)
        f.write(b"patched on b")
        os.fsync(f.fileno())
    body[9 << 20 : (9 << 20) + 12] = b"patched on b"
    on_a = a.path / PREFS / "tea" / "big.bin"
    _until(lambda: on_a.read_bytes() == body, 30)
    _stop_and_check([a, b], pg_dsn)


TEAS = {
    "sencha": "Sencha is a steamed green tea, grassy and bright, brewed at 70 degrees.",
    "hojicha": "Hojicha is roasted green tea with a nutty, toasty taste and little caffeine.",
    "darjeeling": "Darjeeling black tea from the Himalayan foothills, muscatel and floral.",
    "rooibos": "Rooibos is a red herbal infusion from South Africa, naturally sweet.",
    "matcha": "Matcha is stone-ground green tea powder, whisked into a frothy bowl.",
    "earl-grey": "Earl Grey is black tea scented with bergamot orange oil.",
}


def _index_facts(m: Mount) -> dict:
    return json.loads((m.path / ".status.json").read_text())["index"]


def test_a_new_mount_takes_the_vectors_another_embedded_and_answers_by_meaning(
    tmp_path, pg_dsn, stopped
):
    """Each text is embedded once across the mounts of a shared store: a mount that starts
    on it with an empty index takes the vectors the first one made from the store (none
    through its own model) and answers a question by meaning with them; a mount with
    `share_vectors: false` embeds everything itself."""
    a = _mount(tmp_path, "a", pg_dsn, search=True)
    stopped.append(a)
    for name, text in TEAS.items():
        write_node(a.path / PREFS, name, text + "\n")
    wait_indexed(a)
    facts_a = _index_facts(a)
    units = facts_a["indexed_units"]
    assert units >= len(TEAS), facts_a
    assert facts_a["embedded_here"] >= units and facts_a["taken_from_store"] == 0, facts_a
    assert "shared_vectors: 0 unit(s) taken from the store" in a.status()

    b = _mount(tmp_path, "b", pg_dsn, search=True)
    stopped.append(b)
    wait_indexed(b)
    facts_b = _index_facts(b)
    assert facts_b["indexed_units"] == units, facts_b
    assert facts_b["embedded_here"] == 0, f"b ran the model over the store: {facts_b}"
    assert facts_b["taken_from_store"] >= units, facts_b
    question = "a drink made from dried red bush leaves"
    hits = results(b.path, question)
    assert hits and hits[0]["path"] == "user/default/preferences/rooibos", hits[:3]
    assert "searched by BM25 + vectors" in (qdir(b.path, question) / "_context.md").read_text()

    # a mount that shares nothing embeds every unit itself, to the same answer
    data_c = tmp_path / "data-c"
    data_c.mkdir()
    (data_c / "config.yaml").write_text(f"search: true\nstore: {pg_dsn}\nshare_vectors: false\n")
    (tmp_path / "mnt-c").mkdir()
    c = Mount(tmp_path / "mnt-c", data_c, search=True)
    c.start()
    stopped.append(c)
    wait_indexed(c)
    facts_c = _index_facts(c)
    assert facts_c["embedded_here"] >= units and facts_c["taken_from_store"] is None, facts_c
    # b's vectors are the ones c's model made: the same hits, the same scores
    for q in (question, "roasted and toasty", "a citrus scented black tea", "whisked powder"):
        got_b, got_c = results(b.path, q), results(c.path, q)
        assert [h["path"] for h in got_b] == [h["path"] for h in got_c], q
        assert [round(h["score"], 4) for h in got_b] == [round(h["score"], 4) for h in got_c], q
    _stop_and_check([a, b, c], pg_dsn)
