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
        (data / "notes").mkdir(mode=0o755)
        (data / "notes" / "old.txt").write_text("left by an earlier version\n")
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
