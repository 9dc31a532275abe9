"""The test and benchmark harness of ContextFS (like `trio.testing`): for tests/ and
scripts/, never for the filesystem itself (nothing in `contextfs` imports it).

- `contextfs.testing.mount`: a real mount in a subprocess (`Mount`, `DrainedMount`), the
  daemonising `cli_mount`/`cli_umount`, `fsck_store`, the daemon's pid and log problems;
- `contextfs.testing.report`: progress lines, percentiles and `stats`, `machine_info`,
  `write_json` of a result document;
- data for the checks, imported by name when wanted: `search_corpus` (known-answer search
  corpus), `secret_corpus` (the labelled secret corpus of tests/corpus/secrets and how a
  detector is scored on it), `prose` (seeded markdown), `differential` (the differential
  POSIX machine; its `machine_for` needs hypothesis, a test dependency).
- shared by the benchmarks in scripts/ (no script imports another): `bench_store` (the
  big synthetic store built in-process, its paths, a foreground `Daemon` over it),
  `bench_embedder` (the timed embedder with synthetic vectors past a budget) and `ref`
  (another commit's code in a git worktree, and rounds alternating between the two).

Importing it loads no FUSE code: the daemon only ever runs in a subprocess, so a test or a
script never serves kernel requests from its own loop (tests/unit/test_offline.py checks).
Scripts import it as an installed package (`scripts/setup.sh` installs this checkout in
editable mode), with no `sys.path` edits.
"""

from __future__ import annotations

from contextfs.testing.mount import (
    BAD_LOG,
    BENIGN_LOG,
    DrainedMount,
    Mount,
    cli_mount,
    cli_umount,
    close_after_kill,
    contextfs_cmd,
    daemon_pid,
    errno_of,
    fsck_store,
    log_problems,
    unmount,
    wait_index_ready,
    write_synced,
)
from contextfs.testing.report import (
    Progress,
    machine_info,
    percentile,
    proc_status,
    rank_percentile,
    say,
    stats,
    write_json,
)

__all__ = [
    "BAD_LOG",
    "BENIGN_LOG",
    "DrainedMount",
    "close_after_kill",
    "errno_of",
    "Mount",
    "Progress",
    "cli_mount",
    "cli_umount",
    "contextfs_cmd",
    "daemon_pid",
    "fsck_store",
    "log_problems",
    "machine_info",
    "percentile",
    "proc_status",
    "rank_percentile",
    "say",
    "stats",
    "unmount",
    "wait_index_ready",
    "write_json",
    "write_synced",
]
