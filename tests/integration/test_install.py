"""The package as installed from its wheel, not as this checkout: package data found there.

A wheel install (`pip install .`, pipx, `pip --user`) has no `schemas/` beside the code;
the built-in types must come from the installed `contextfs.builtin_schemas`. The full
install-and-mount run from a clean venv is `scripts/install_smoke.py` (CI runs it).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from contextfs.testing.mount import contextfs_cmd

ROOT = Path(__file__).resolve().parents[2]
BUILTINS = {"profile", "preference", "entity", "event", "case", "pattern", "skill", "tool"}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from this checkout, installed (without dependencies) into a folder."""
    work = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(work), str(ROOT)],
        check=True,
        capture_output=True,
        cwd=work,
    )
    wheel = next(work.glob("contextfs-*.whl"))
    target = work / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        capture_output=True,
        cwd=work,
    )
    return target


def _python(site: Path, code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(site))
    return subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True
    )


def test_an_installed_wheel_finds_its_builtin_types(installed: Path, tmp_path: Path) -> None:
    res = _python(
        installed,
        "import contextfs; from contextfs.ctxtypes import builtin_schema_dir, load_types\n"
        "d = builtin_schema_dir(); print(contextfs.__file__); print(d)\n"
        "print(' '.join(sorted(load_types([d]))))",
        tmp_path,
    )
    assert res.returncode == 0, res.stderr
    module, folder, names = res.stdout.splitlines()
    assert module.startswith(str(installed)), "the test must run the installed copy"
    assert folder.startswith(str(installed))
    assert set(names.split()) >= BUILTINS


def test_an_install_without_its_types_refuses_to_mount(installed: Path, tmp_path: Path) -> None:
    """A broken install (type files missing) is an error at mount, exit 3, not an empty tree."""
    broken = tmp_path / "site"
    subprocess.run(["cp", "-a", str(installed), str(broken)], check=True)
    for f in (broken / "contextfs" / "builtin_schemas").glob("*.yaml"):
        f.unlink()
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    env = dict(os.environ, PYTHONPATH=str(broken))
    res = subprocess.run(
        contextfs_cmd("mount", str(mnt), "--foreground", "--data-dir", str(tmp_path / "data")),
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert not os.path.ismount(mnt)
    assert res.returncode == 3, res.stderr
    assert "built-in context types are not installed" in res.stderr
    assert "Traceback" not in res.stderr


def _mapped(pid: int) -> set[str]:
    with open(f"/proc/{pid}/maps") as f:
        return {line.split()[-1] for line in f if line.rstrip().endswith(".so") or ".so." in line}


def test_a_mount_loads_no_media_library_and_no_cuda(mount) -> None:  # noqa: ANN001
    """An idle mount (search off, no media handed to it) maps neither torch nor a media
    library; no install of ours maps CUDA (docs/operations.md#installing)."""
    (mount.path / "user" / "default" / "preferences" / "editor").mkdir()
    (mount.path / "user" / "default" / "preferences" / "editor" / "L2.md").write_text("vim\n")
    assert os.listdir(mount.path / "user" / "default")
    libs = _mapped(mount.proc.pid)
    heavy = [
        lib
        for lib in libs
        if any(s in lib for s in ("libtorch", "/av.libs/", "/PIL/", "webrtcvad", "sndfile",
                                  "nvidia", "cuda"))
    ]  # fmt: skip
    assert heavy == [], heavy
    assert any("duckdb" in lib for lib in libs), "the check must see the daemon's libraries"
