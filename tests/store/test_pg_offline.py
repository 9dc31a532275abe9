"""The offline commands on a data dir whose store is PostgreSQL (`--store`, or `store:` in
its config.yaml): import (a restore), status, export, consolidate, reindex — through the
real CLI against a real server. An export restored into a second database exports byte
for byte the same, ids and facts included, and the password is never printed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from contextfs.testing import contextfs_cmd
from contextfs.testing.postgres import PgServer


def cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    return subprocess.run(contextfs_cmd(*args), capture_output=True, text=True, env=env)


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_offline_commands_work_on_a_postgresql_store(tmp_path: Path, pg_server: PgServer) -> None:
    one, two = pg_server.create_database("off1"), pg_server.create_database("off2")
    password = pg_server.password
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "tea.md").write_text("---\ntype: preference\nvalue: green\n---\nGreen tea.\n")
    (vault / "Ann.md").write_text("Ann is my sister. She lives in Oslo.\n")
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    runs = [cli("import", str(vault), str(d1), "--store", one)]
    assert runs[-1].returncode == 0, runs[-1].stderr
    runs.append(cli("status", str(d1), "--store", one))
    assert "nodes=2" in runs[-1].stdout, runs[-1].stdout + runs[-1].stderr
    (d1 / "config.yaml").write_text(f"store: {one}\n")  # the setting instead of the option
    runs.append(cli("export", str(d1), str(tmp_path / "out1"), "--history"))
    assert runs[-1].returncode == 0, runs[-1].stderr
    runs.append(cli("import", str(tmp_path / "out1"), str(d2), "--store", two))
    assert runs[-1].returncode == 0, runs[-1].stderr
    runs.append(cli("export", str(d2), str(tmp_path / "out2"), "--history", "--store", two))
    assert tree(tmp_path / "out1") == tree(tmp_path / "out2")
    assert "    id: " in (tmp_path / "out2/user/default/preferences/tea.md").read_text()
    runs.append(cli("consolidate", str(d2), "--store", two))
    assert runs[-1].returncode == 0 and "consolidated" in runs[-1].stdout, runs[-1].stderr
    runs.append(cli("reindex", str(d2), "--store", two))
    assert runs[-1].returncode == 0 and "reindexed 2 nodes" in runs[-1].stderr, runs[-1].stderr
    for r in runs:
        assert password not in r.stdout + r.stderr
