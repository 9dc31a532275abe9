"""A mount that cannot be made says why in one line and an exit code, never a traceback:
options libfuse refuses, a mount point with files in it (unless `-o nonempty`), a file or
an impossible path as the mount point. Through the real CLI, daemonised (as a user runs
it) and in the foreground (as systemd runs it)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from contextfs.testing import contextfs_cmd, unmount

pytestmark = pytest.mark.timeout(180)

MODES = {"daemonised": (), "foreground": ("--foreground",)}


def mount(mnt: Path, data: Path, *extra: str) -> subprocess.CompletedProcess:
    """`contextfs mount MNT` over its own data dir (no search: no model to load). A
    foreground daemon that mounted after all is unmounted, so the test fails, not hangs."""
    data.mkdir(exist_ok=True)
    (data / "config.yaml").write_text("search: false\n")
    cmd = contextfs_cmd("mount", str(mnt), "--data-dir", str(data), *extra)
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    except subprocess.TimeoutExpired:
        unmount(mnt)
        raise


def umount(mnt: Path) -> None:
    r = subprocess.run(contextfs_cmd("umount", str(mnt)), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def said(r: subprocess.CompletedProcess, mode: str) -> str:
    """The one error line: all of stderr when daemonised; in the foreground the daemon's
    log lines go to stderr too, and the error is its one `contextfs:` line."""
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.splitlines()
    if mode == "foreground":
        lines = [ln for ln in lines if ln.startswith("contextfs:")]
    assert len(lines) == 1, r.stderr
    return lines[0]


@pytest.mark.parametrize("mode", MODES)
def test_an_option_libfuse_refuses_is_one_line(tmp_path, mode):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = mount(mnt, tmp_path / "data", "-o", "bogus", *MODES[mode])
    assert r.returncode == 2, r.stderr
    line = said(r, mode)
    assert line == f"contextfs: cannot mount {mnt}: fuse: unknown option(s): `-o bogus'", line
    assert not os.path.ismount(mnt)


@pytest.mark.parametrize("mode", MODES)
def test_a_mount_point_with_files_is_refused(tmp_path, mode):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    (mnt / ".hidden").write_text("a dotfile counts\n")
    r = mount(mnt, tmp_path / "data", *MODES[mode])
    assert r.returncode == 2, r.stderr
    assert said(r, mode) == (
        f"contextfs: {mnt} is not empty (its files would be hidden under the mount); "
        "mount over it with -o nonempty"
    )
    assert not os.path.ismount(mnt)
    assert os.listdir(mnt) == [".hidden"]


def test_nonempty_mounts_over_files_which_come_back_after(tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    (mnt / "notes.txt").write_text("mine\n")
    r = mount(mnt, tmp_path / "data", "-o", "nonempty,noatime")
    assert r.returncode == 0, r.stderr
    try:
        assert os.path.ismount(mnt)
        assert (mnt / ".status").exists() and not (mnt / "notes.txt").exists()
    finally:
        umount(mnt)
    assert (mnt / "notes.txt").read_text() == "mine\n"


@pytest.mark.parametrize("mode", MODES)
def test_a_mount_point_that_cannot_be_made_is_one_line(tmp_path, mode):
    """A missing mount point is created (test_daemon.py); one under a file cannot be."""
    (tmp_path / "afile").write_text("")
    mnt = tmp_path / "afile" / "mnt"
    r = mount(mnt, tmp_path / "data", *MODES[mode])
    assert r.returncode == 2, r.stderr
    assert said(r, mode) == f"contextfs: cannot create the mount point {mnt}: Not a directory"


@pytest.mark.parametrize("mode", MODES)
def test_a_file_as_mount_point_is_one_line(tmp_path, mode):
    mnt = tmp_path / "afile"
    mnt.write_text("")
    r = mount(mnt, tmp_path / "data", *MODES[mode])
    assert r.returncode == 2, r.stderr
    assert said(r, mode) == f"contextfs: mountpoint {mnt} is not a directory"


def test_an_existing_mount_is_refused(tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = mount(mnt, tmp_path / "data")
    assert r.returncode == 0, r.stderr
    try:
        again = mount(mnt, tmp_path / "data2")
        assert again.returncode == 2
        assert said(again, "daemonised") == f"contextfs: {mnt} is already a mount point"
    finally:
        umount(mnt)


def test_a_mount_not_ready_in_time_is_stopped_and_a_second_keeps_the_firsts_output(tmp_path):
    """`--timeout` too short: the command fails and no mount appears later (its daemon is
    stopped). A second mount of a data dir in use fails with its own reason, and leaves
    what the running daemon wrote to daemon.out whole."""
    mnt, data = tmp_path / "mnt", tmp_path / "data"
    mnt.mkdir()
    r = mount(mnt, data, "--timeout", "0.05")
    assert r.returncode == 1 and "the daemon was stopped" in said(r, "daemonised"), r.stderr
    time.sleep(3)
    assert not os.path.ismount(mnt)
    r = mount(mnt, data)
    assert r.returncode == 0, r.stderr
    try:
        time.sleep(1)
        before = (data / "daemon.out").read_bytes()
        other = tmp_path / "other"
        other.mkdir()
        again = mount(other, data)
        assert again.returncode == 4, again.stderr
        assert "store in use" in said(again, "daemonised")
        after = (data / "daemon.out").read_bytes()
        assert after.startswith(before) and b"\0" not in after
        assert not os.path.ismount(other)
    finally:
        umount(mnt)


def test_a_path_the_system_refuses_is_one_line_not_a_traceback(tmp_path):
    """A folder where a file is wanted, a missing folder, a file as data dir: the reason in
    one line, exit 1."""
    (tmp_path / "afile").write_text("")
    (tmp_path / "mnt").mkdir()
    for args, want in (
        (("demo", str(tmp_path)), "Is a directory"),
        (("demo", str(tmp_path / "none" / "x.jsonl")), "No such file or directory"),
        (("mount", str(tmp_path / "mnt"), "--data-dir", str(tmp_path / "afile")), "afile"),
    ):
        r = subprocess.run(contextfs_cmd(*args), capture_output=True, text=True, timeout=60)
        assert r.returncode in (1, 2) and "Traceback" not in r.stderr, (args, r.stderr)
        assert said(r, "daemonised").startswith("contextfs: ") and want in r.stderr, r.stderr
    assert not os.path.ismount(tmp_path / "mnt")


def test_an_empty_data_dir_is_refused_not_taken_for_the_current_one(tmp_path):
    """`--data-dir ""` (an unset variable in a script): refused, and the current directory
    is left as it was (it became the data dir: made 0700, a store made in it)."""
    (tmp_path / "mnt").mkdir()
    work = tmp_path / "work"
    work.mkdir()
    for args in (("mount", str(tmp_path / "mnt"), "--data-dir", ""), ("fsck", "")):
        r = subprocess.run(contextfs_cmd(*args), capture_output=True, text=True, cwd=work)
        assert r.returncode == 2 and "an empty path" in r.stderr, r.stderr
    assert os.listdir(work) == [] and not os.path.ismount(tmp_path / "mnt")
