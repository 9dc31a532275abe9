"""The fstab helper mounts for real: mount(8)'s argument shape in, a ContextFS mount out."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from contextfs.testing.mount import log_problems

REPO = Path(__file__).resolve().parents[2]
HELPER = REPO / "mount" / "mount.contextfs"
CONTEXTFS = REPO / ".venv" / "bin" / "contextfs"


def _force_unmount(mnt: Path) -> None:
    if os.path.ismount(mnt):
        r = subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True)
        if r.returncode != 0:
            subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True)


def test_fstab_helper_mounts_and_contextfs_umount_unmounts(tmp_path):
    data, mnt = tmp_path / "data", tmp_path / "mnt"
    mnt.mkdir()
    env = dict(os.environ, CONTEXTFS_BIN=str(CONTEXTFS))
    try:
        r = subprocess.run(
            [str(HELPER), str(data), str(mnt), "-o", "rw,noauto"],
            env=env,
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert r.returncode == 0, r.stdout + r.stderr
        assert os.path.ismount(mnt)
        assert "user" in os.listdir(mnt)
        assert (mnt / "user" / "default").is_dir()
        assert f"data_dir: {data}" in (mnt / ".status").read_text()
        r = subprocess.run(
            [str(CONTEXTFS), "umount", str(mnt)], capture_output=True, text=True, timeout=90
        )
        assert r.returncode == 0, r.stderr
        assert not os.path.ismount(mnt)
    finally:
        _force_unmount(mnt)
    assert (data / "contextfs.duckdb").exists()
    bad = log_problems(data / "contextfs.log")
    assert not bad, "\n".join(bad)
    r = subprocess.run(
        [str(CONTEXTFS), "fsck", str(data)], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stdout + r.stderr
