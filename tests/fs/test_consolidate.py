"""Consolidation (SPEC §7): decay with age, access counts, merging near-duplicates,
archiving visibly and reversibly."""

from __future__ import annotations

import subprocess
import sys

from contextfs.memory.consolidate import consolidate, importance

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
    fs.ops.tree.refresh_nodes(report.touched)
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
    fs.ops.tree.refresh_nodes(report.touched)
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
    assert "1 archived" in r.stdout  # the fixture then runs fsck on the store
