"""Consolidation (SPEC §7): decay with age, access counts, merging near-duplicates,
archiving visibly and reversibly."""

from __future__ import annotations

import errno
import json
import random
import subprocess
import sys

import pytest

from contextfs.memory.consolidate import consolidate, importance, plan
from contextfs.memory.document import is_near_duplicate

DAY = 86400.0
P = "user/default/preferences"


async def test_importance_decays_by_half_life_and_rises_with_reads(fs, memory):
    await fs.write(f"{P}/tea.md", b"Green tea in the morning.\n")
    n = memory.nodes[next(iter(memory.live.values()))]
    half_life = memory.types["preference"].half_life_days * DAY
    assert importance(memory, n, n.updated) == 0.5
    assert abs(importance(memory, n, n.updated + half_life) - 0.25) < 1e-6
    await fs.read(f"{P}/tea/L2.md")  # a plain read is not an access (docs: reference)
    assert n.access_count == 0
    for _ in range(7):  # what a .query answer that is read counts for each of its hits
        fs.ops.tree.tiers.count_access(n)
    assert n.access_count == 7
    assert importance(memory, n, n.updated + half_life) > 0.25 + 0.2


async def test_old_unread_nodes_are_archived_and_restored_with_mv(fs, memory):
    await fs.write(f"{P}/old.md", b"An opinion nobody read again.\n")
    await fs.write(f"{P}/fresh.md", b"Something from today.\n")
    await fs.write("user/default/profile/L2.md", b"---\nname: Ada\n---\nMe.\n")
    old = memory.nodes[memory.live[("user", "default", "preference", "old")]]
    old.updated -= 2000 * DAY  # long ago: well below preference's min_importance
    report = consolidate(memory)
    assert report.archived == 1 and "archived user/default/preferences/old" in report.details[0]
    fs.ops.tree.nodes.refresh(report.touched)
    assert await fs.listdir(P) == ["fresh"]
    assert await fs.listdir("user/default/.archive/preferences") == ["old"]
    assert "An opinion" in await fs.text("user/default/.archive/preferences/old/L2.md")
    assert await fs.exists("user/default/profile/L2.md"), "profile never decays"
    await fs.rename("user/default/.archive/preferences/old", f"{P}/old")
    assert "An opinion" in await fs.text(f"{P}/old/L2.md")
    assert memory.is_live(old) and old.archived_at is None
    runs = memory.store.con.execute("SELECT count(*) FROM consolidation_runs").fetchone()[0]
    assert runs == 1


async def test_near_duplicates_merge_into_the_older_node(fs, memory):
    await fs.mkdir("agent/bot")
    await fs.write(
        "agent/bot/patterns/testing.md", b"- Run the unit tests before every push to main.\n"
    )
    await fs.write(
        "agent/bot/patterns/tests.md",
        b"---\ntopic: tests\n---\n- run the unit tests before every push to main!\n",
    )
    await fs.write("agent/bot/patterns/deploys.md", b"- Deploy on Tuesdays only.\n")
    report = consolidate(memory)
    assert report.merged == 1
    fs.ops.tree.nodes.refresh(report.touched)
    assert await fs.listdir("agent/bot/patterns") == ["deploys", "testing"]
    assert await fs.listdir("agent/bot/.trash/patterns") == ["tests"]
    meta = await fs.text("agent/bot/patterns/testing/meta.yaml")
    assert "merged:agent/bot/patterns/tests" in meta


def test_contextfs_consolidate_command(tmp_path, memory, types):
    n = memory.create_node(("user", "default"), types["preference"], "ancient")
    memory.save_l2(n, "Very old.\n")
    memory.store.close()
    r = subprocess.run(
        [sys.executable, "-m", "contextfs", "consolidate", str(tmp_path), "--now", "2040-01-01"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    assert "archived user/default/preferences/ancient" in r.stdout
    assert "1 archived" in r.stdout
    # the run is recorded when it ran, as of the day asked: a later real run is the last
    r = subprocess.run(
        [sys.executable, "-m", "contextfs", "consolidate", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    from contextfs.store import Store

    store = Store(tmp_path / "contextfs.duckdb")
    try:
        last = store.last_consolidation()
        assert last is not None and last[-1] == 2 and not last[4].startswith("as of")
        first = store.con.execute("SELECT min(ts), max(ts) FROM consolidation_runs").fetchone()
        assert first[1] - first[0] < 3600  # both ran now, not one in 2040
        said = [
            r[0] for r in store.con.execute("SELECT summary FROM consolidation_runs").fetchall()
        ]
        assert any(x.startswith("as of 2040-01-01T00:00:00Z: ") for x in said), said
    finally:
        store.close()  # the fixture then runs fsck on the store


def _group(memory, rng: random.Random, count: int) -> None:
    """`count` pattern nodes: unrelated sentences, and near-duplicates of some of them by
    the two tests of `is_near_duplicate` (a few characters changed: the ratio; the words
    shuffled: the Jaccard), and a variant whose number differs (not a duplicate)."""
    words = [f"{a}{b}" for a in ("ka", "lo", "mi", "nu", "po", "ri", "su", "te") for b in "aeiou"]
    ctype = memory.types["pattern"]
    bases: list[str] = []
    for i in range(count):
        roll = rng.random()
        if bases and roll < 0.2:  # a typo or two
            text = list(rng.choice(bases))
            for _ in range(2):
                text[rng.randrange(len(text))] = rng.choice("aeiou")
            text = "".join(text)
        elif bases and roll < 0.35:  # the same words in another order
            ws = rng.choice(bases).split()
            rng.shuffle(ws)
            text = " ".join(ws)
        elif bases and roll < 0.45:  # another number
            text = rng.choice(bases).replace(" 7 ", f" {rng.randrange(8, 99)} ")
        else:
            text = " ".join(rng.choice(words) for _ in range(rng.randint(3, 30)))
            text = f"{text[:9]} 7 {text[9:]}" if rng.random() < 0.3 else text
            bases.append(text)
        n = memory.create_node(("user", "default"), ctype, f"p{i:03d}")
        memory.save_l2(n, text + "\n")


def _every_pair(memory, nodes) -> list[tuple[int, int]]:
    """What comparing every pair in order finds (the keeper compared as it is, as `plan`
    does): the oracle the candidate search must agree with."""
    nodes = sorted(nodes, key=lambda n: (n.created, n.id))
    bodies = [" ".join(n.l2.split()) for n in nodes]
    gone: set[int] = set()
    out = []
    for i in range(len(nodes)):
        if i in gone:
            continue
        for j in range(i + 1, len(nodes)):
            if j not in gone and is_near_duplicate(bodies[i], bodies[j]):
                gone.add(j)
                out.append((nodes[i].id, nodes[j].id))
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_plan_finds_exactly_what_comparing_every_pair_finds(memory, seed):
    _group(memory, random.Random(seed), 150)
    nodes = list(memory.walk(types=("pattern",)))
    expected = _every_pair(memory, nodes)
    assert len(expected) >= 10  # the group holds duplicates by both tests
    found = plan(memory)
    assert found.merges == expected
    # and far fewer pairs were looked at than the 11,175 of the whole group
    assert found.pairs < 2000


def test_a_second_run_compares_only_what_changed_since_the_first(memory):
    _group(memory, random.Random(4), 100)
    first = consolidate(memory)
    assert first.merged >= 5
    again = plan(memory)
    assert (again.groups, again.pairs, again.merges) == (0, 0, [])
    survivors = sorted(memory.walk(types=("pattern",)), key=lambda n: (n.created, n.id))
    target = survivors[len(survivors) // 2]
    n = memory.create_node(("user", "default"), memory.types["pattern"], "late")
    memory.save_l2(n, target.l2.replace(".", "!") + "\n")
    found = plan(memory)
    assert found.groups == 1 and found.merges == [(target.id, n.id)]
    # the new node against its few candidates: not against the whole group
    assert len(survivors) > 60 and found.pairs < 20
    report = consolidate(memory)
    assert report.merged == 1 and not memory.is_live(n)
    assert "merged:user/default/patterns/late" in memory.nodes[target.id].sources


async def test_an_archived_node_leaves_its_name_free_and_the_mount_writable(fs, memory):
    """An archived node held its name in the store while the mount showed it free: a new
    memory of that name (a drop, mkdir, an inbox transcript's candidate) failed its commit,
    and the inbox's transaction around it then failed as store damage, read-only at every
    mount. Now the archived node keeps its place in .archive and the name is taken anew."""
    from contextfs.conversations.inbox import Intake, IntakeService
    from contextfs.store.fsck import check_store

    await fs.write(f"{P}/hot-drink.md", b"Prefers tea over coffee.\n")
    await fs.write(f"{P}/editor.md", b"Uses vim.\n")
    for n in list(memory.walk(types=("preference",))):
        memory.nodes[n.id].updated -= 2000 * DAY
    report = consolidate(memory)
    assert report.archived == 2
    fs.ops.tree.nodes.refresh(report.touched)
    assert await fs.listdir(P) == []
    # an inbox transcript routes a preference to the archived name
    intake = Intake(memory)
    line = {"role": "user", "content": "I prefer green tea over coffee these days."}
    item = intake.submit(("user", "default"), "b.jsonl", (json.dumps(line) + "\n").encode())
    assert await IntakeService(intake).step() is True
    assert "state: done" in item.report, item.report
    assert memory.failsafe is None
    new = memory.live_node(("user", "default"), memory.types["preference"], "hot-drink")
    assert new is not None
    fs.ops.tree.nodes.refresh([new])
    assert "green tea" in await fs.text(f"{P}/hot-drink/L2.md")
    # a drop and an explicit node take the other archived name
    await fs.mkdir(f"{P}/editor")
    await fs.write(f"{P}/editor/L2.md", b"Uses helix now.\n")
    assert await fs.listdir(P) == ["editor", "hot-drink"]
    assert await fs.listdir("user/default/.archive/preferences") == ["editor", "hot-drink"]
    assert "tea over coffee" in await fs.text("user/default/.archive/preferences/hot-drink/L2.md")
    # moving an archived node back onto a name in use is refused; beside it, it comes back
    err = await fs.errno_of(fs.rename("user/default/.archive/preferences/editor", f"{P}/editor"))
    assert err in (errno.EEXIST, errno.ENOTEMPTY)
    await fs.rename("user/default/.archive/preferences/editor", f"{P}/old-editor")
    assert "Uses vim." in await fs.text(f"{P}/old-editor/L2.md")
    assert check_store(memory.store) == []


async def test_nodes_whose_names_say_two_things_are_not_merged(fs, memory):
    """Bodies alike under names that say otherwise are two memories: a sister and a
    brother, two settings of one prefix, two friends. Only a name that can name the same
    thing (a plural, an -ing, a separator, a word more) lets two near-duplicates merge."""
    e = "user/default/entities"
    await fs.write(f"{e}/maria.md", b"Sister of the owner, lives in Lisbon.\n")
    await fs.write(f"{e}/joao.md", b"Brother of the owner, lives in Lisbon.\n")
    await fs.write(f"{e}/alice.md", b"A friend from university.\n")
    await fs.write(f"{e}/bob.md", b"A friend from university.\n")
    await fs.write(f"{P}/reply-length.md", b"Replies short and in English.\n")
    await fs.write(f"{P}/reply-language.md", b"Replies short and in French.\n")
    await fs.write(f"{P}/proj-x.md", b"The storage rewrite project started in March.\n")
    await fs.write(f"{P}/projx.md", b"The storage rewrite project started in March!\n")
    report = consolidate(memory)
    assert report.merged == 1, report.details
    fs.ops.tree.nodes.refresh(report.touched)
    assert await fs.listdir(e) == ["alice", "bob", "joao", "maria"]
    assert await fs.listdir(P) == ["proj-x", "reply-language", "reply-length"]


def test_names_that_name_one_thing():
    from contextfs.memory.consolidate import same_subject

    same = [("tests", "testing"), ("space", "spaces"), ("class", "classes"), ("code", "coding"),
            ("code-style", "code-styles"), ("proj-x", "projx"), ("tea", "green-tea")]  # fmt: skip
    other = [("maria", "joao"), ("reply-length", "reply-language"), ("tabs", "spaces"),
             ("alice", "bob")]  # fmt: skip
    assert [same_subject(a, b) for a, b in same] == [True] * len(same)
    assert [same_subject(a, b) for a, b in other] == [False] * len(other)


def test_consolidate_now_takes_the_offset_it_is_given(tmp_path, memory, types):
    """`--now` with an offset is that moment (it was read as the same clock time in UTC);
    without one, UTC."""
    n = memory.create_node(("user", "default"), types["preference"], "ancient")
    memory.save_l2(n, "Very old.\n")
    memory.store.close()
    r = subprocess.run(
        [sys.executable, "-m", "contextfs", "consolidate", str(tmp_path),
         "--now", "2040-01-01T00:30:00+02:00"],
        capture_output=True,
        text=True,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    from contextfs.store import Store

    store = Store(tmp_path / "contextfs.duckdb")
    try:
        last = store.last_consolidation()
        assert last is not None and last[4].startswith("as of 2039-12-31T22:30:00Z"), last
    finally:
        store.close()


def test_a_group_too_big_to_compare_is_named_in_the_line_status_shows(memory, monkeypatch):
    """A group left uncompared (too many pairs) is named in the run's one-line summary,
    which `.status` shows: it said only "100 re-weighted, 0 merged, 0 archived", and near
    duplicates there were never looked for."""
    import contextfs.memory.consolidate as consolidation

    _group(memory, random.Random(5), 100)
    monkeypatch.setattr(consolidation, "MAX_GROUP_PAIRS", 10)  # the limit, made small
    report = consolidate(memory)
    assert report.merged == 0
    line = memory.store.last_consolidation()[4].splitlines()[0]
    assert "not compared (too many pairs): user/default/pattern (" in line, line
