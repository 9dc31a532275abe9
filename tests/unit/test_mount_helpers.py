"""The mount integration files: the fstab helper's argument handling, the systemd unit.

The helper is run as a real process (through its shebang, so without contextfs on its
import path) against a fake contextfs that records its argv; nothing is mounted here.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from contextfs.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
HELPER = REPO / "mount" / "mount.contextfs"
UNIT = REPO / "mount" / "contextfs.service"

FAKE_BIN = """#!/bin/sh
printf '%s\\n' "$@" > "$RECORD"
exit "${FAKE_EXIT:-0}"
"""


# ---- the fstab helper ----------------------------------------------------------------------


@pytest.fixture
def fake(tmp_path: Path) -> dict[str, str]:
    """Environment with CONTEXTFS_BIN pointing at a script that records its argv."""
    bin_ = tmp_path / "bin" / "contextfs"
    bin_.parent.mkdir()
    bin_.write_text(FAKE_BIN)
    bin_.chmod(0o755)
    return dict(os.environ, CONTEXTFS_BIN=str(bin_), RECORD=str(tmp_path / "argv"))


def run_helper(env: dict[str, str], *args: str, cwd: Path | None = None):
    return subprocess.run(
        [str(HELPER), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=30
    )


def recorded(env: dict[str, str]) -> list[str]:
    return Path(env["RECORD"]).read_text().splitlines()


def test_helper_is_executable_python_without_contextfs():
    assert HELPER.stat().st_mode & stat.S_IXUSR
    text = HELPER.read_text()
    assert text.startswith("#!/usr/bin/env python3\n")
    assert not re.search(r"^\s*(import|from)\s+contextfs", text, re.M)


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ("rw,noauto", []),
        ("defaults", []),
        ("rw,noauto,allow_other", ["-o", "allow_other"]),
        (
            "defaults,user,users,nofail,_netdev,noauto,auto,comment=memory,"
            "x-systemd.automount,x-systemd.idle-timeout=60,x-gvfs-show",
            [],
        ),
        ("ro,noexec,nosuid", ["-o", "ro,noexec,nosuid"]),
        (
            "allow_other,user=alice,allow_other,default_permissions",
            ["-o", "allow_other,default_permissions"],
        ),
    ],
)
def test_fstab_options_translate(fake, tmp_path, options, expected):
    r = run_helper(fake, "/var/lib/contextfs", str(tmp_path / "mnt"), "-o", options)
    assert r.returncode == 0, r.stderr
    assert recorded(fake) == [
        "mount",
        str(tmp_path / "mnt"),
        "--data-dir",
        "/var/lib/contextfs",
        *expected,
    ]
    assert r.stdout == "" and r.stderr == ""


def test_spec_contextfs_means_the_default_data_dir(fake, tmp_path):
    r = run_helper(fake, "contextfs", str(tmp_path / "mnt"), "-o", "rw,allow_other")
    assert r.returncode == 0, r.stderr
    assert recorded(fake) == ["mount", str(tmp_path / "mnt"), "-o", "allow_other"]


def test_relative_paths_become_absolute(fake, tmp_path):
    r = run_helper(fake, "data", "mnt", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert recorded(fake) == ["mount", str(tmp_path / "mnt"), "--data-dir", str(tmp_path / "data")]


def test_fake_prints_and_runs_nothing(fake, tmp_path):
    r = run_helper(fake, "/srv/mem", "/mnt/mem", "-f", "-o", "rw,noauto,allow_other")
    assert r.returncode == 0, r.stderr
    assert shlex.split(r.stdout) == [
        fake["CONTEXTFS_BIN"],
        "mount",
        "/mnt/mem",
        "--data-dir",
        "/srv/mem",
        "-o",
        "allow_other",
    ]
    assert not Path(fake["RECORD"]).exists()


def test_combined_flags_and_options_in_mount8_order(fake):
    # mount(8): mount.TYPE SPEC DIR [-sfnv] [-N ns] [-o opts] [-t type]
    r = run_helper(fake, "/srv/mem", "/mnt/mem", "-sfnv", "-o", "rw", "-t", "contextfs")
    assert r.returncode == 0, r.stderr
    assert shlex.split(r.stdout) == [
        fake["CONTEXTFS_BIN"],
        "mount",
        "/mnt/mem",
        "--data-dir",
        "/srv/mem",
    ]
    assert not Path(fake["RECORD"]).exists()


def test_verbose_prints_then_runs(fake):
    r = run_helper(
        fake, "-v", "-n", "-s", "/srv/mem", "/mnt/mem", "-o", "noauto", "-o", "allow_other"
    )
    assert r.returncode == 0, r.stderr
    assert recorded(fake) == ["mount", "/mnt/mem", "--data-dir", "/srv/mem", "-o", "allow_other"]
    assert "mount /mnt/mem --data-dir /srv/mem -o allow_other" in r.stderr


def test_exit_status_of_contextfs_is_passed_through(fake):
    env = dict(fake, FAKE_EXIT="4")
    assert run_helper(env, "/srv/mem", "/mnt/mem").returncode == 4


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["/srv/mem"],
        ["/srv/mem", "/mnt/mem", "extra"],
        ["/srv/mem", "/mnt/mem", "-x"],
        ["/srv/mem", "/mnt/mem", "-N", "1234"],
        ["", "/mnt/mem"],
    ],
)
def test_bad_invocation_exits_1(fake, args):
    r = run_helper(fake, *args)
    assert r.returncode == 1
    assert r.stderr.startswith("mount.contextfs: ")
    assert not Path(fake["RECORD"]).exists()


def test_contextfs_bin_may_be_a_command(fake, tmp_path):
    script = tmp_path / "fake.py"
    script.write_text(
        "import pathlib, os, sys\n"
        "pathlib.Path(os.environ['RECORD']).write_text('\\n'.join(sys.argv[1:]))\n"
    )
    env = dict(
        fake,
        CONTEXTFS_BIN=f"{Path(sys.executable).name} {script}",
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    )
    r = run_helper(env, "contextfs", "/mnt/mem")
    assert r.returncode == 0, r.stderr
    assert recorded(env) == ["mount", "/mnt/mem"]


def test_default_finds_contextfs_on_path(fake):
    env = dict(fake, PATH=f"{Path(fake['CONTEXTFS_BIN']).parent}{os.pathsep}/usr/bin:/bin")
    del env["CONTEXTFS_BIN"]
    r = run_helper(env, "/srv/mem", "/mnt/mem", "-f")
    assert r.returncode == 0, r.stderr
    assert shlex.split(r.stdout)[0] == fake["CONTEXTFS_BIN"]


def test_default_falls_back_to_local_bin(fake, tmp_path):
    home = tmp_path / "home"
    (home / ".local" / "bin").mkdir(parents=True)
    shutil.copy(fake["CONTEXTFS_BIN"], home / ".local" / "bin" / "contextfs")
    env = dict(fake, HOME=str(home), PATH="/usr/bin:/bin")
    del env["CONTEXTFS_BIN"]
    r = run_helper(env, "/srv/mem", "/mnt/mem")
    assert r.returncode == 0, r.stderr
    assert recorded(env) == ["mount", "/mnt/mem", "--data-dir", "/srv/mem"]


def test_missing_contextfs_is_reported(fake, tmp_path):
    env = dict(fake, CONTEXTFS_BIN=str(tmp_path / "nowhere" / "contextfs"))
    r = run_helper(env, "/srv/mem", "/mnt/mem")
    assert r.returncode == 1
    assert "CONTEXTFS_BIN" in r.stderr
    only_python = tmp_path / "only-python"
    only_python.mkdir()
    (only_python / "python3").symlink_to(Path(sys.executable).resolve())
    env = dict(fake, HOME=str(tmp_path), PATH=str(only_python))
    del env["CONTEXTFS_BIN"]
    r = run_helper(env, "/srv/mem", "/mnt/mem")
    assert r.returncode == 1
    assert "not on PATH" in r.stderr


# ---- the systemd user unit -----------------------------------------------------------------


def read_unit(path: Path) -> dict[str, list[tuple[str, str]]]:
    """A unit file as {section: [(key, value), ...]}, keeping repeated keys in order."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], [])
            continue
        assert current is not None, f"{raw!r} is outside a section"
        key, sep, value = line.partition("=")
        assert sep, f"{raw!r} is not key=value"
        current.append((key.strip(), value.strip()))
    return sections


def values(unit: dict, section: str, key: str) -> list[str]:
    return [v for k, v in unit.get(section, []) if k == key]


def one(unit: dict, section: str, key: str) -> str:
    found = values(unit, section, key)
    assert len(found) == 1, f"{section}.{key}: {found}"
    return found[0]


def systemd_words(command: str, env: dict[str, str], home: str) -> list[str]:
    """Expand a command line the way systemd does ($VAR splits, ${VAR} does not)."""
    command = command.lstrip("-@:+!")
    words: list[str] = []
    for word in shlex.split(command.replace("%h", home)):
        if re.fullmatch(r"\$[A-Za-z_][A-Za-z0-9_]*", word):
            words += env.get(word[1:], "").split()
            continue
        words.append(
            re.sub(
                r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: env.get(m.group(1), ""), word
            ).replace("$$", "$")
        )
    return words


def unit_env(unit: dict, home: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for assignment in values(unit, "Service", "Environment"):
        for item in shlex.split(assignment):
            k, _, v = item.partition("=")
            env[k] = v.replace("%h", home)
    return env


def test_unit_runs_the_daemon_in_the_foreground():
    unit = read_unit(UNIT)
    assert one(unit, "Service", "Type") == "simple"
    assert one(unit, "Service", "Restart") == "on-failure"
    assert one(unit, "Install", "WantedBy") == "default.target"
    env = unit_env(unit, "/home/alice")
    assert env["CONTEXTFS_MOUNTPOINT"] == "/home/alice/memory"
    words = systemd_words(one(unit, "Service", "ExecStart"), env, "/home/alice")
    assert words[0] == "/home/alice/.local/bin/contextfs"
    args = build_parser().parse_args(words[1:])
    assert args.command == "mount"
    assert args.foreground
    assert args.mountpoint == "/home/alice/memory"
    assert str(args.data_dir) == "/home/alice/.local/share/contextfs"
    assert args.options is None
    # Options given through the documented variable reach the FUSE option list.
    env["CONTEXTFS_OPTIONS"] = "-o allow_other"
    words = systemd_words(one(unit, "Service", "ExecStart"), env, "/home/alice")
    assert build_parser().parse_args(words[1:]).options == ["allow_other"]


def test_unit_stop_unmounts_a_running_daemon_only():
    unit = read_unit(UNIT)
    env = unit_env(unit, "/home/alice")
    words = systemd_words(one(unit, "Service", "ExecStop"), env, "/home/alice")
    assert words[:2] == ["/bin/sh", "-c"]
    script = words[2]
    assert '[ -z "$MAINPID" ] ||' in script
    inner = shlex.split(script.split("exec", 1)[1])
    assert inner[0] == "/home/alice/.local/bin/contextfs"
    args = build_parser().parse_args(inner[1:])
    assert args.command == "umount"
    assert args.mountpoint == "/home/alice/memory"


@pytest.mark.parametrize("mainpid", ["", "4242"])
def test_unit_stop_script_runs_umount_only_with_a_main_pid(tmp_path, mainpid):
    unit = read_unit(UNIT)
    home = str(tmp_path)
    bin_ = tmp_path / ".local" / "bin" / "contextfs"
    bin_.parent.mkdir(parents=True)
    bin_.write_text(FAKE_BIN)
    bin_.chmod(0o755)
    env = unit_env(unit, home)
    words = systemd_words(one(unit, "Service", "ExecStop"), env, home)
    record = tmp_path / "argv"
    r = subprocess.run(
        words, env={"PATH": "/usr/bin:/bin", "MAINPID": mainpid, "RECORD": str(record)}, timeout=30
    )
    assert r.returncode == 0
    if mainpid:
        assert record.read_text().splitlines() == ["umount", f"{home}/memory"]
    else:
        assert not record.exists()


def test_unit_passes_systemd_analyze_verify(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    home = tmp_path / "home"
    (home / ".local" / "bin").mkdir(parents=True)
    (home / ".local" / "bin" / "contextfs").symlink_to(REPO / ".venv" / "bin" / "contextfs")
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    unit_dir = tmp_path / "units"
    unit_dir.mkdir()
    shutil.copy(UNIT, unit_dir / "contextfs.service")
    r = subprocess.run(
        [analyze, "--user", "verify", str(unit_dir / "contextfs.service")],
        env=dict(os.environ, HOME=str(home), XDG_RUNTIME_DIR=str(runtime)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    # Unknown keys and bad values are warnings with exit status 0: there must be none.
    assert "contextfs.service" not in r.stderr, r.stderr
