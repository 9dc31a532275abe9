"""Another commit beside this checkout, for the benchmarks that compare the two side by
side (`scripts/bench_pg_writes.py`, `scripts/bench_fsync_ref.py`): its code in a `git
worktree`, and rounds that alternate which side goes first, with the daemon a `Mount`
starts running the side's code (`PYTHONPATH`: `python -m contextfs` imports that tree)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

SIDES = ("this", "ref")


@contextlib.contextmanager
def ref_worktree(repo: Path, ref: str, where: Path) -> Iterator[Path]:
    """The tree of commit `ref` of the git checkout `repo`, at `where` until the end."""
    git = ["git", "-C", str(repo), "worktree"]
    subprocess.run([*git, "add", "-q", "--detach", str(where), ref], check=True)
    try:
        yield where
    finally:
        subprocess.run([*git, "remove", "--force", str(where)], check=False)


def alternating(rounds: int, other: Path) -> Iterator[tuple[int, str]]:
    """(round, side) for each side of each round, "this" first in even rounds and "ref"
    in odd ones; while a "ref" side is out, a daemon started runs the code in `other`."""
    try:
        for r in range(rounds):
            for side in SIDES if r % 2 == 0 else SIDES[::-1]:
                if side == "ref":
                    os.environ["PYTHONPATH"] = str(other)
                else:
                    os.environ.pop("PYTHONPATH", None)
                yield r, side
    finally:
        os.environ.pop("PYTHONPATH", None)
