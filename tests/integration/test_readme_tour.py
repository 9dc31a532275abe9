"""The README's tour, run literally: its mount command, then every line of the tour block in
one bash (`set -e`), as a new user pastes them, with an empty HOME.

A listing the tour shows in a comment (`ls x   # a  b  c`) is checked against what `ls`
printed: the same names, or at least those names where the comment has `…`. So the tour
cannot drift from what the mount shows, and a recipe that stops working fails here.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from contextfs.testing.mount import fsck_store, unmount

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"

pytestmark = pytest.mark.timeout(600)


def tour_lines() -> list[str]:
    """The logical lines of the tour's sh block (continuations joined, comments kept)."""
    text = README.read_text()
    start = text.index("## A two-minute tour")
    block = text[text.index("```sh\n", start) + 6 :]
    block = block[: block.index("```")]
    lines: list[str] = []
    pending = ""
    for raw in block.splitlines():
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        line = pending + raw
        pending = ""
        if line.strip() and not line.lstrip().startswith("#"):
            lines.append(line)
    return lines


def mount_command() -> str:
    """The README's mount line of its 'Two commands' (after set-up, which CI has run)."""
    text = README.read_text()
    line = next(ln for ln in text.splitlines() if "contextfs mount ~/memory" in ln)
    return line.split("&&", 1)[1].strip()


def expected_listing(line: str) -> tuple[list[str], bool] | None:
    """The names an `ls` line's comment promises, and whether that is all of them."""
    if not line.startswith(("ls ", "ls  ")) or "#" not in line:
        return None
    comment = line.rsplit("#", 1)[1].strip()
    names = [w for w in re.split(r"\s+", comment) if w and w != "…"]
    return names, "…" not in comment


def test_the_readme_tour_runs_as_written(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "CONTEXTFS_"))}
    env["HOME"] = str(home)
    mnt = home / "memory"
    mnt.mkdir()
    lines = tour_lines()
    script = ["set -e"]
    for i, line in enumerate(lines):
        script.append(f"echo '@@{i}'")
        script.append(line)
    res = subprocess.run(
        ["bash", "-c", mount_command()], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    try:
        run = subprocess.run(
            ["bash", "-c", "\n".join(script)],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=500,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        outputs: dict[int, str] = {}
        current = -1
        for out_line in run.stdout.splitlines():
            m = re.fullmatch(r"@@(\d+)", out_line)
            if m:
                current = int(m.group(1))
                outputs[current] = ""
            elif current >= 0:
                outputs[current] += out_line + "\n"
        assert run.returncode == 0, f"the tour stopped at: {lines[current]!r}\n{run.stderr[-3000:]}"
        for i, line in enumerate(lines):
            promised = expected_listing(line)
            if promised is None:
                continue
            names, complete = promised
            shown = outputs[i].split()
            if complete:
                assert sorted(shown) == sorted(names), f"{line!r} printed {shown}"
            else:
                assert set(names) <= set(shown), f"{line!r} printed {shown}"
        report = next(o for i, o in outputs.items() if lines[i].startswith("cat .inbox/"))
        assert "state: done" in report
        assert "sk-live-4f9a2c7e" not in report
        context = next(o for i, o in outputs.items() if lines[i].startswith('cat ".query/'))
        assert "neovim" in context
        l2 = (mnt / "user/default/preferences/editor/L2.md").read_text()
        assert l2 == "She prefers neovim with relative line numbers. Tabs, never spaces.\n"
        assert (mnt / "user/default/preferences/shell/L2.md").exists()
        assert "unit tests" in (mnt / "agent/claude/patterns/testing/L2.md").read_text()
    finally:
        res = subprocess.run(
            [str(ROOT / ".venv/bin/contextfs"), "umount", str(mnt)],
            env=env, capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        unmount(mnt)
    assert res.returncode == 0, res.stderr
    assert fsck_store(home / ".local/share/contextfs/contextfs.duckdb") == []
