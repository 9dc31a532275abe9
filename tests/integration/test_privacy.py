"""Privacy of the data dir: another local user must not read memory text off the disk."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from contextfs.testing import Mount

CLI = [sys.executable, "-m", "contextfs"]


def _open_to_others(root: Path) -> list[str]:
    """Everything under root (root included) that group or others can touch."""
    found = []
    for path in [root, *root.rglob("*")]:
        st = path.lstat()
        if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o077:
            found.append(f"{path.relative_to(root.parent)} {stat.filemode(st.st_mode)}")
    return found


def test_data_dir_is_0700_and_its_files_0600_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)  # the daemon inherits the usual umask
    try:
        data = tmp_path / "data"
        # a data dir as an earlier version left it: 0755, files 0644
        data.mkdir(mode=0o755)
        (data / "config.yaml").write_text("search: false\n")
        (data / "refused").mkdir(mode=0o755)
        (data / "refused" / "old.md").write_text("refused under an earlier version\n")
        (data / "contextfs.log").write_text("logged by an earlier version\n")
        assert _open_to_others(data)
        mnt = tmp_path / "mnt"
        mnt.mkdir()
        m = Mount(mnt, data)
        m.start()
        try:
            node = mnt / "user" / "default" / "preferences" / "diary"
            node.mkdir()
            (node / "L2.md").write_text("A private diary line: I fear the dentist.\n")
            # refused bytes are kept in the data dir too
            with pytest.raises(OSError):
                (mnt / "user" / "default" / "preferences" / "bad.md").write_text(
                    "---\n: [unclosed\n---\nMy private note.\n"
                )
            assert list((data / "refused").iterdir())
            assert _open_to_others(data) == []
        finally:
            m.stop()
        assert _open_to_others(data) == []  # the WAL, the log and the checkpoint too
        # offline commands that write the data dir keep it private as well
        done = subprocess.run(
            [*CLI, "consolidate", str(data)], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        assert _open_to_others(data) == []
        assert (data / "contextfs.log").stat().st_size > 0
    finally:
        os.umask(old)


def test_a_directory_given_by_mistake_keeps_the_modes_of_what_it_held(tmp_path: Path) -> None:
    """`contextfs reindex ~` or a mount on a web root by mistake: the files that were there
    keep their modes (only what ContextFS keeps in a data dir is made private), and a
    command that needs a store refuses before it changes anything."""
    site = tmp_path / "www"
    (site / "html").mkdir(parents=True)
    (site / "html" / "index.html").write_text("<p>hi</p>\n")
    site.chmod(0o755)
    (site / "html").chmod(0o755)
    (site / "html" / "index.html").chmod(0o644)
    modes = {p: p.stat().st_mode for p in (site, site / "html", site / "html" / "index.html")}
    done = subprocess.run([*CLI, "reindex", str(site)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "no store at" in done.stderr, done.stderr
    assert {p: p.stat().st_mode for p in modes} == modes
    assert not (tmp_path / "none").exists()
    done = subprocess.run(
        [*CLI, "reindex", str(tmp_path / "none" / "data")], capture_output=True, text=True
    )
    assert done.returncode == 2 and not (tmp_path / "none").exists()
    (site / "config.yaml").write_text("search: false\n")
    (tmp_path / "mnt").mkdir()
    m = Mount(tmp_path / "mnt", site)
    m.start()
    try:
        (m.path / "user/default/preferences/tea.md").write_text("Green tea.\n")
    finally:
        m.stop()
    assert (site / "html" / "index.html").stat().st_mode == modes[site / "html" / "index.html"]
    assert (site / "html").stat().st_mode == modes[site / "html"]
    assert _open_to_others(site / "html") != []
    assert (site / "contextfs.duckdb").stat().st_mode & 0o077 == 0
