"""A long differential POSIX campaign: ContextFS attachments against a native directory.

Runs the state machine of contextfs/testing/differential.py (the one the CI test runs with a
small budget) against a fresh mount, in batches with fresh random seeds, so that a failure
found and shrunk in one batch does not end the campaign. Prints the examples and steps run
and every failure found (shrunk steps included), and writes bench-results/differential.json:

    {examples, steps, remounts, failures, distinct_failures, seconds, excluded: [{op, reason}],
     tolerated_known_bugs, outcomes: {"op result": count}, failure_details: [{batch, message}]}

    .venv/bin/python scripts/campaign_differential.py --examples 300 --steps 50

With `--disk-full` (root: it mounts a tmpfs for the data dir), each example may take one
disk-full step (`Differ.disk_full`): the data dir's disk fills, a few path operations run
(refused ones must fail with ENOSPC and change nothing), the disk is freed and the mount
remounted, and it must show what it showed. With `--search`, the mount has search on (a
real mount's default) and must end caught up with every commit, with no `index_error` in
`.status`.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from contextfs.testing import Mount, write_json
from contextfs.testing.differential import EXCLUDED, KNOWN_BUGS, STATS, machine_for
from contextfs.testing.mount import BENIGN_LOG, disk_filler, mount_tmpfs, unmount_tmpfs

REPO = Path(__file__).resolve().parent.parent


# What a full disk makes the daemon say, by design (tests/integration/test_disk_full.py).
FULL_DISK_LOG = ("disk full: writes are refused", "no trace of the refused write")


def _signature(message: str) -> str:
    """What differed, without the steps: groups repeats of one bug."""
    lines = message.strip().splitlines() or [message]
    head = " ".join(lines[:2]) if lines[0].endswith("trees differ:") else lines[0]
    return head[:300]


def _index_errors(mount: Mount) -> list[str]:
    """With search on, after the last step: the index catches up with every commit within
    five minutes (BM25's retry after a full disk waits up to a minute) and `.status`
    shows no `index_error`; what it says otherwise."""
    deadline = time.monotonic() + 300
    while True:
        status = (mount.path / ".status").read_text()
        lines = status.splitlines()
        errors = [ln for ln in lines if ln.startswith("index_error")]
        queue = next((ln for ln in lines if ln.startswith("index_generation")), "")
        caught_up = "index: ready" in status and queue.endswith("queue 0)")
        if (caught_up and not errors) or time.monotonic() > deadline:
            return errors + ([] if caught_up else [f"not caught up: {queue}"])
        time.sleep(0.5)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=300, help="examples (sequences) to run")
    ap.add_argument("--steps", type=int, default=50, help="steps per example")
    ap.add_argument("--batch", type=int, default=25, help="examples per hypothesis run")
    ap.add_argument("--remounts", type=int, default=2, help="most remounts per example")
    ap.add_argument(
        "--max-seconds",
        type=float,
        default=None,
        help="start no new batch after this many seconds (results are kept)",
    )
    ap.add_argument(
        "--tolerate",
        action="append",
        default=[],
        choices=sorted(KNOWN_BUGS),
        help="leave a known ContextFS bug out of the comparison, to look for "
        "others (repeatable; recorded in the JSON)",
    )
    ap.add_argument(
        "--disk-full",
        action="store_true",
        help="put the data dir on a 512 MiB tmpfs and add the disk-full step (root)",
    )
    ap.add_argument(
        "--search",
        action="store_true",
        help="mount with search on (the default of a real mount): the indexer runs beside "
        "every step, and at the end must catch up with no error in .status",
    )
    ap.add_argument("--out", type=Path, default=REPO / "bench-results/differential.json")
    args = ap.parse_args()

    failures: list[dict] = []
    index_errors: list[str] = []
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ctxfs-diff-") as tmp:
        tmp_path = Path(tmp)
        mnt = tmp_path / "mnt"
        mnt.mkdir()
        disk = tmp_path / "disk"
        fill = None
        if args.disk_full:
            if os.geteuid() != 0:
                ap.error("--disk-full mounts a tmpfs: run it as root")
            fill = disk_filler(mount_tmpfs(disk, "512m"))

        mount = Mount(mnt, (disk if args.disk_full else tmp_path) / "data", search=args.search)
        mount.start()
        try:
            machine = machine_for(
                mount,
                tmp_path / "native",
                max_remounts=args.remounts,
                tolerate=frozenset(args.tolerate),
                fill=fill,
            )
            batch = 0
            while STATS.examples < args.examples:
                if args.max_seconds and time.monotonic() - start > args.max_seconds:
                    print("time budget spent: stopping", flush=True)
                    break
                batch += 1
                budget = min(args.batch, args.examples - STATS.examples)
                before = STATS.examples
                conf = settings(
                    max_examples=budget,
                    stateful_step_count=args.steps,
                    deadline=None,
                    database=None,
                    suppress_health_check=list(HealthCheck),
                    print_blob=False,
                )
                try:
                    run_state_machine_as_test(machine, settings=conf)
                except KeyboardInterrupt:  # Ctrl-C / SIGINT: keep what was found so far
                    print("interrupted: stopping", flush=True)
                    break
                except Exception as exc:  # noqa: BLE001 - a failure is a finding, go on
                    # hypothesis groups distinct failures of one run: each is a finding
                    found = exc.exceptions if isinstance(exc, ExceptionGroup) else (exc,)
                    for one in found:
                        msg = f"{type(one).__name__}: {one}"
                        notes = "\n".join(getattr(one, "__notes__", []))
                        failures.append({"batch": batch, "message": msg, "steps": notes})
                        print(f"\n=== failure in batch {batch} ===\n{msg}\n{notes}\n", flush=True)
                    if not mount.path.joinpath(".status").exists():
                        mount.remount()  # keep going even if a failure took the mount down
                print(
                    f"batch {batch}: examples {STATS.examples} steps {STATS.steps} "
                    f"failures {len(failures)} ({time.monotonic() - start:.0f} s)",
                    flush=True,
                )
                if STATS.examples == before:  # hypothesis ran nothing new: avoid a spin
                    break
            if args.search:  # the index caught up, and says nothing failed
                index_errors = _index_errors(mount)
        finally:
            mount.stop()
            problems = mount.fsck()
            log = mount.log.read_text(errors="replace") if mount.log.exists() else ""
            if args.disk_full:
                unmount_tmpfs(disk)
    seconds = round(time.monotonic() - start, 1)
    bad_log = []
    in_traceback = False  # a traceback's lines follow its log line, up to the next record
    for line in log.splitlines():
        if in_traceback and not line[:4].isdigit():
            bad_log.append(line)
            continue
        in_traceback = False
        if (" ERROR " in line or " WARNING " in line) and not any(
            said in line for said in (*FULL_DISK_LOG, *BENIGN_LOG)
        ):
            bad_log.append(line)
            in_traceback = True
    distinct = sorted({_signature(f["message"]) for f in failures})
    result = {
        "examples": STATS.examples,
        "steps": STATS.steps,
        "remounts": STATS.remounts,
        "disk_full": args.disk_full,
        "failures": len(failures),
        "distinct_failures": distinct,
        "seconds": seconds,
        "fsck_problems": problems,
        "search": args.search,
        "index_errors": index_errors,
        "daemon_log_problems": bad_log[:200],
        "excluded": EXCLUDED,
        "tolerated_known_bugs": [{"bug": b, "what": KNOWN_BUGS[b]} for b in args.tolerate],
        "outcomes": {f"{op} {res}": n for (op, res), n in sorted(STATS.outcomes.items())},
        "failure_details": failures,
    }
    write_json(args.out, result)
    print(
        f"\nexamples run: {STATS.examples}  steps run: {STATS.steps}  "
        f"remounts: {STATS.remounts}  failures found: {len(failures)} "
        f"({len(distinct)} distinct)  seconds: {seconds}"
    )
    for d in distinct:
        print(f"  - {d}")
    if args.tolerate:
        print(f"tolerated known bugs: {', '.join(args.tolerate)}")
    print(f"fsck problems: {len(problems)}  daemon log problems: {len(bad_log)}")
    if args.search:
        print(f"index errors at the end: {index_errors or 'none'}")
    print(f"wrote {args.out}")
    return 1 if failures or problems or index_errors else 0


if __name__ == "__main__":
    sys.exit(main())
