"""The commands a user runs: mount (daemonised), umount, fsck, schema check, and user types."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from contextfs.testing import Mount, fsck_store
from contextfs.testing.mount import log_problems

CLI = [sys.executable, "-m", "contextfs"]

RECIPE = """\
name: recipe
description: A dish the owner cooks, one node per dish.
scope: user
directory: recipes/{dish}
mode: merge
fields:
  dish: {type: string, required: true, merge: immutable, description: The dish.}
  servings: {type: int, merge: replace, description: How many it feeds.}
body:
  merge: replace
summary:
  l0_max_chars: 100
  l1_max_chars: 800
extraction: |
  Recipes the user cooks.
retention:
  half_life_days: 365
  min_importance: 0.1
"""


def run(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, **kw)


def test_mount_daemonises_returns_ready_and_umount_waits(tmp_path):
    mnt, data = tmp_path / "mnt", tmp_path / "data"
    mnt.mkdir()
    r = run("mount", str(mnt), "--data-dir", str(data))
    assert r.returncode == 0, r.stderr
    try:
        assert os.path.ismount(mnt), "ready when the command returns"
        assert (mnt / "user/default/preferences").is_dir()
        (mnt / "user/default/preferences/x").mkdir()
        (mnt / "user/default/preferences/x/L2.md").write_text("hello\n")
        pid = int(r.stdout.split("pid ")[1].split(",")[0])
        again = run("mount", str(mnt), "--data-dir", str(data))
        assert again.returncode != 0 and "already" in again.stderr
    finally:
        u = run("umount", str(mnt))
    assert u.returncode == 0, u.stderr
    assert not os.path.ismount(mnt)
    # umount returned once the store was closed; the process itself is gone soon after
    stat = Path(f"/proc/{pid}/stat")
    deadline = time.monotonic() + 30
    while stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline, "the daemon did not exit"
        time.sleep(0.1)
    f = run("fsck", str(data))
    assert f.returncode == 0 and "0 problem(s)" in f.stdout, f.stdout + f.stderr
    s = run("status", str(data))
    assert "nodes=1" in s.stdout


def test_sigterm_unmounts_cleanly(tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    m = Mount(mnt, tmp_path / "data")
    proc = m.start()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert not os.path.ismount(mnt)


def test_next_mount_recovers_a_dead_mount_after_kill_9(tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    m = Mount(mnt, tmp_path / "data")
    proc = m.start()
    (mnt / "user/default/preferences/a").mkdir()
    fd = os.open(mnt / "user/default/preferences", os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(fd)  # POSIX: a new directory entry is durable once its parent is fsync()ed
    os.close(fd)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with pytest.raises(OSError):
        os.listdir(mnt)  # "Transport endpoint is not connected"
    m.proc = None
    m.start()
    try:
        assert (mnt / "user/default/preferences/a").is_dir()
    finally:
        m.stop()


def test_a_consolidation_killed_during_its_run_is_said_in_status(tmp_path):
    """The daemon killed (-9) while its first consolidation run is under way: the next
    mount's `.status` (and `.status.json`) says a run began and did not end, and that what
    it merged is kept; then the next run ends and is the last one shown. `.status` said
    `consolidation: never run`."""
    import random

    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    (data / "config.yaml").write_text("search: false\n")
    (tmp_path / "mnt").mkdir()
    m = Mount(tmp_path / "mnt", data)
    pats = m.path / "agent/bot/patterns"
    rng = random.Random(3)
    syllable = lambda: rng.choice("bcdfgklmnprstvz") + rng.choice("aeiou")  # noqa: E731
    words = [syllable() + syllable() + syllable() for _ in range(2000)]
    m.start()
    try:
        (m.path / "agent/bot").mkdir()
        for i in range(100):  # 100 pairs of near-duplicates: a run of about 2 s here
            body = " ".join(rng.choice(words) for _ in range(12))
            for name, text in ((f"rule{i}", f"- {body}.\n"), (f"rule{i}-again", f"- {body}!\n")):
                (pats / name).mkdir()
                (pats / name / "L2.md").write_text(text)
        m.stop()
        (data / "config.yaml").write_text("search: false\nconsolidate_every: 1\n")
        m.start()
        began = time.monotonic()  # the run begins a second after the mount, for ~2 s
        while "a consolidation run begins" not in m.log.read_text():
            if time.monotonic() - began > 1.5:
                break  # no line says so: killed about when it runs
            time.sleep(0.001)
        m.kill()
        (data / "config.yaml").write_text("search: false\n")  # no run at this mount
        m.start()
        status = m.status()
        line = next(ln for ln in status.splitlines() if ln.startswith("consolidation: "))
        assert line.startswith("consolidation: no run ended (every 86400s); the run begun "), line
        assert "did not end (the daemon stopped during it)" in line, line
        doc = json.loads((m.path / ".status.json").read_text())["consolidation"]
        assert doc["runs"] == 0 and doc["unended_run_began"] is not None, doc
        left = len(os.listdir(pats))
        assert 100 <= left <= 200, left  # what it merged before the kill stays merged
        m.stop()
        (data / "config.yaml").write_text("search: false\nconsolidate_every: 1\n")
        m.start()  # the next run does the rest, and ends
        deadline = time.monotonic() + 60
        while "consolidation: 1 run(s)" not in m.status():
            assert time.monotonic() < deadline, m.status()
            time.sleep(0.1)
        assert "did not end" not in m.status()
        assert len(os.listdir(pats)) == 100
    finally:
        if m.proc is not None:
            m.stop()


def test_user_type_appears_on_next_mount_without_code_change(tmp_path):
    data = tmp_path / "data"
    (data / "schemas").mkdir(parents=True)
    (data / "schemas/recipe.yaml").write_text(RECIPE)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    m = Mount(mnt, data)
    m.start()
    try:
        assert (mnt / ".schemas/recipe.yaml").read_text() == RECIPE
        (mnt / "user/default/recipes/ratatouille.md").write_text(
            "---\nservings: 4\n---\nSlow-cooked summer vegetables.\n"
        )
        l2 = (mnt / "user/default/recipes/ratatouille/L2.md").read_text()
        assert "dish: ratatouille" in l2 and "servings: 4" in l2
        assert "recipe (user/recipes, merge)" in m.status()
    finally:
        m.stop()


def test_an_export_of_a_user_type_imports_into_a_new_data_dir_set_up_with_it(tmp_path):
    """A new data dir holding only its config and its own types is a data dir to import
    into (it was refused as "neither a mount nor a data dir", and without the schema every
    node of that type is refused)."""
    data = tmp_path / "data"
    (data / "schemas").mkdir(parents=True)
    (data / "schemas/recipe.yaml").write_text(RECIPE)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    m = Mount(mnt, data)
    m.start()
    try:
        (mnt / "user/default/recipes/ratatouille.md").write_text("Slow-cooked vegetables.\n")
    finally:
        m.stop()
    # its schema gone, the mount says where its nodes went
    (data / "schemas/recipe.yaml").rename(tmp_path / "recipe.yaml")
    m.expect_log.append("stored nodes of types no schema loads are not shown: recipe (1)")
    m.start()
    try:
        assert "types not loaded: recipe (1 node(s)): their nodes are kept" in m.status()
        facts = json.loads((mnt / ".status.json").read_text())
        assert facts["types_not_loaded"] == {"recipe": 1}
    finally:
        m.stop()
    (tmp_path / "recipe.yaml").rename(data / "schemas/recipe.yaml")
    out = tmp_path / "out"
    r = run("export", str(data), str(out))
    assert r.returncode == 0, r.stderr
    new = tmp_path / "new"
    (new / "schemas").mkdir(parents=True)
    (new / "schemas/recipe.yaml").write_text(RECIPE)
    (new / "config.yaml").write_text("search: false\n")
    r = run("import", str(out), str(new))
    assert r.returncode == 0, r.stdout + r.stderr
    r = run("export", str(new), str(tmp_path / "again"))
    assert r.returncode == 0, r.stderr
    again = (tmp_path / "again/user/default/recipes/ratatouille.md").read_text()
    assert "Slow-cooked vegetables." in again
    (tmp_path / "other").mkdir()
    (tmp_path / "other/notes.txt").write_text("mine\n")
    r = run("import", str(out), str(tmp_path / "other"))  # a folder of something else
    assert r.returncode != 0 and "neither inside a live ContextFS mount" in r.stderr


def test_broken_schema_stops_the_mount_with_file_and_line(tmp_path):
    data = tmp_path / "data"
    (data / "schemas").mkdir(parents=True)
    bad = RECIPE.replace("mode: merge", "mode: mingle")
    path = data / "schemas/recipe.yaml"
    path.write_text(bad)
    line = bad.splitlines().index("mode: mingle") + 1
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    m = Mount(mnt, data)
    proc = m.start(expect_fail=True)
    out = proc.stdout.read().decode()
    assert proc.returncode == 3
    assert f"{path}:{line}:" in out and "mingle" in out
    assert not os.path.ismount(mnt)
    # the same check without mounting
    r = run("schema", "check", str(data / "schemas"))
    assert r.returncode == 3 and f"{path}:{line}:" in r.stderr
    path.write_text(RECIPE)
    r = run("schema", "check", "--with-builtins", str(data / "schemas"))
    assert r.returncode == 0 and "ok recipe" in r.stdout and "ok preference" in r.stdout


def test_schema_check_of_a_directory_without_schema_files_says_so(tmp_path):
    """A directory with no `*.yaml`/`*.yml` is a usage error (exit 2) that says so: a
    check that printed nothing and exited 0 read as a pass."""
    empty = tmp_path / "schemas"
    empty.mkdir()
    (empty / "recipe.yaml.bak").write_text(RECIPE)
    for args in ([str(empty)], ["--with-builtins", str(empty)]):
        r = run("schema", "check", *args)
        assert r.returncode == 2, r.stdout + r.stderr
        assert f"{empty} holds no schema files (*.yaml, *.yml): nothing to check" in r.stderr
        assert r.stdout == ""
    (empty / "recipe.yml").write_text(RECIPE)
    r = run("schema", "check", str(empty))
    assert r.returncode == 0 and "ok recipe" in r.stdout, r.stderr


def test_mount_is_usable_within_about_a_second(tmp_path):
    """SPEC §9: not a timing assertion on CI speed, a guard against eager heavy work:
    the daemon must answer a stat before it could possibly have loaded a model."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    m = Mount(mnt, tmp_path / "data")
    t0 = time.monotonic()
    m.start()
    try:
        assert (mnt / ".status").stat().st_mode
        assert time.monotonic() - t0 < 20
    finally:
        m.stop()


def test_readme_documents_the_two_commands():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    ci = (Path(__file__).resolve().parents[2] / ".ci/run").read_text()
    test_cmd = [ln for ln in ci.splitlines() if ln and not ln.startswith(("#", "set ", "cd "))]
    assert test_cmd and test_cmd[-1] in readme, "CI runs exactly the README's test command"


def test_mount_creates_a_missing_mount_point(tmp_path):
    """The README's first command mounts on ~/memory, which a new user does not have."""
    mnt = tmp_path / "new" / "memory"
    r = run("mount", str(mnt), "--data-dir", str(tmp_path / "data"))
    assert r.returncode == 0, r.stderr
    try:
        assert (mnt / ".status").exists() and (mnt / "user/default").is_dir()
    finally:
        assert run("umount", str(mnt)).returncode == 0


def test_a_read_only_mount_writes_nothing_to_the_store(tmp_path):
    """`-o ro`: the kernel refuses every write, and the daemon writes nothing to the store
    either: reading a `.query` answer counts no access (not after a remount either), no
    check, session mark, checkpoint or backup is recorded, and `.status` says why it is
    read-only."""
    (tmp_path / "mnt").mkdir()
    m = Mount(tmp_path / "mnt", tmp_path / "data", search=True)
    m.start()
    try:
        node = m.path / "user/default/entities/rex"
        node.mkdir()
        (node / "L2.md").write_text("Rex is a dog who likes long walks.\n")
    finally:
        m.stop()
    db = tmp_path / "data/contextfs.duckdb"
    before = db.read_bytes()
    kept = sorted(os.listdir(tmp_path / "data/backups"))
    m.start("-o", "ro")
    try:
        status = (m.path / ".status").read_text()
        assert "state: read-only: mounted read-only (-o ro)" in status, status
        for _ in range(3):
            assert "entities/rex" in (m.path / ".query/rex dog/_context.md").read_text()
        assert "access_count: 0\n" in (node / "meta.yaml").read_text()
        with pytest.raises(OSError) as info:
            (node / "L2.md").write_text("changed\n")
        assert info.value.errno == errno.EROFS
    finally:
        m.stop()
    assert db.read_bytes() == before
    assert not db.with_name(db.name + ".wal").exists()
    assert sorted(os.listdir(tmp_path / "data/backups")) == kept
    m.start()
    try:
        assert "access_count: 0\n" in (node / "meta.yaml").read_text()
        assert "state: read-write" in (m.path / ".status").read_text()
    finally:
        m.stop()
    assert log_problems(m.log) == []
    assert fsck_store(db) == []
