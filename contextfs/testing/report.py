"""What the benchmark and reliability scripts report with: progress, statistics, JSON,
and the code of another commit to measure beside this checkout (`checkout_at`).

Plain Python and /proc only: no store, no FUSE.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def say(msg: str) -> None:
    """A progress line on stderr (stdout is kept for the report itself)."""
    print(msg, file=sys.stderr, flush=True)


class Progress:
    """A `\\r` counter on stderr when it is a terminal; elsewhere (a log file) a line every
    20 seconds, so a long run shows it is alive."""

    def __init__(self, label: str, total: int) -> None:
        self.label, self.total = label, total
        self.tty = sys.stderr.isatty()
        self.t0 = time.perf_counter()
        self.last = 0.0

    def update(self, done: int) -> None:
        now = time.perf_counter()
        due = now - self.last > 0.2 or done == self.total if self.tty else now - self.last > 20
        if due:
            self.last = now
            rate = done / max(now - self.t0, 1e-9)
            line = f"  {self.label}: {done}/{self.total} ({rate:.0f}/s)"
            sys.stderr.write(f"\r{line}   " if self.tty else f"{line}\n")
            sys.stderr.flush()

    def done(self) -> float:
        elapsed = time.perf_counter() - self.t0
        if self.tty:
            sys.stderr.write("\n")
        say(
            f"  {self.label}: {self.total} in {elapsed:.1f}s "
            f"({self.total / max(elapsed, 1e-9):.0f}/s)"
        )
        return elapsed


def percentile(values: list[float], pct: float) -> float:
    """The `pct` (0-100) percentile, linearly interpolated between the closest ranks."""
    s = sorted(values)
    k = (len(s) - 1) * pct / 100
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def rank_percentile(values: list[float], q: float) -> float:
    """The `q` (0-1) quantile by nearest rank: always one of the values measured."""
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def stats(values: list[float]) -> dict[str, float] | None:
    """count, p50, p99, mean, min and max of `values`; None when there are none."""
    if not values:
        return None
    return {
        "count": len(values),
        "p50": statistics.median(values),
        "p99": percentile(values, 99),
        "mean": statistics.fmean(values),
        "min": min(values),
        "max": max(values),
    }


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS / VmHWM of `pid` in bytes, and what VmRSS is made of: RssAnon (the heap, the
    model), RssFile (pages of mapped files: tantivy's, the libraries), RssShmem."""
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"):
                out[key] = int(rest.split()[0]) * 1024
    return out


def disk_usage(path: Path) -> int:
    """Bytes on disk of everything under `path` (allocated blocks, as `du`)."""
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, f)).st_blocks * 512
    return total


def machine_info(repo: Path | None = None) -> dict[str, object]:
    """Date, host, kernel, CPU, load and the git commit of `repo` (default: this checkout),
    recorded next to every benchmark figure."""
    info: dict[str, object] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "tmpdir": tempfile.gettempdir(),
    }
    try:
        from contextfs import __version__

        info["contextfs"] = __version__
    except ImportError:
        pass
    with contextlib.suppress(OSError):
        info["git"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            cwd=repo or Path(__file__).parent,
        ).stdout.strip()
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next(
                (ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), ""
            )
        info["loadavg_start"] = os.getloadavg()
    except OSError:
        pass
    return info


def write_json(path: Path | str, doc: Any, *, ensure_ascii: bool = True) -> Path:
    """Write a result document (indented, newline-terminated), making its directory.
    Values JSON does not know (paths, tuples' elements) are written as their str()."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, default=str, ensure_ascii=ensure_ascii) + "\n")
    return path


def checkout_at(repo: Path, ref: str, dest: Path) -> Path:
    """`contextfs/` and `schemas/` of commit `ref` of `repo`, extracted (`git archive`)
    into dest: the other side of a side-by-side benchmark. Run that side with
    PYTHONPATH=dest and dest as its working directory: its daemon (`python -m contextfs`)
    imports the package of its working directory before PYTHONPATH's."""
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "-C", str(repo), "archive", ref, "contextfs", "schemas"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest
