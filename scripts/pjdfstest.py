"""pjdfstest, the POSIX syscall suite, inside a ContextFS node with a native directory beside it.

Builds the suite from its source (default `tests/third_party/pjdfstest`, copied to a temp
dir: `autoreconf -ifs`, `./configure`, `make pjdfstest`), mounts a fresh data dir with
`-o allow_other` (the tests switch uids; `contextfs mount --foreground` in a subprocess),
makes a node (`user/default/entities/pjd`, attachments behave like POSIX: SPEC §3) and runs
`prove -v` over each chosen test file there and in a directory of the local disk.

Every failing assertion on ContextFS gets one cause:

- `native too`: the same assertion fails in the native directory;
- `device node`: it also fails natively when the pjdfstest binary refuses block and character
  device nodes with EPERM as ContextFS does (SPEC §8), with the same answer (`got …`);
- `size limit`: likewise with files capped at the attachment size limit (64 MiB, EFBIG);
- `other`: none of these, a bug.

The two emulations are the same pjdfstest linked with `--wrap` shims for mknod/mknodat
(devices) and truncate/ftruncate/posix_fallocate/pwrite (size), run natively only over the
files with unexplained failures. Numbers are per assertion: a `.t` file prints the same
numbered assertions whatever the answers, so a cascade (a device refused, then every stat,
chown and unlink of it failing with ENOENT) lands on the same numbers in the emulation.

Prints a markdown table (test files, assertions, failures by cause; ContextFS beside native),
the failures per directory and every `other` failure with its command line; writes JSON.
After the run the daemon must have logged no ERROR/Traceback and `fsck` of the store must be
clean. Exit status 1 when any failure is `other`, the daemon was not clean or fsck found
something; 2 when the suite cannot be built. Needs root (the suite's requirement), autoconf,
automake, cc, make and perl's `prove` (scripts/setup.sh installs them).

    .venv/bin/python scripts/pjdfstest.py --quick            # CI subset, about 2 min
    .venv/bin/python scripts/pjdfstest.py --json bench-results/pjdfstest.json   # all files
    .venv/bin/python scripts/pjdfstest.py chown/00.t mkfifo  # chosen files or directories
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from contextfs.config import Config
from contextfs.testing import (
    BAD_LOG,
    Mount,
    Progress,
    log_problems,
    machine_info,
    say,
    unmount,
    write_json,
)

REPO = Path(__file__).resolve().parent.parent
# the suite, unchanged, with its licence (COPYING): kept in the repository so that a clone
# builds and runs it with nothing else at hand
SOURCE = REPO / "tests/third_party/pjdfstest"
NODE = "user/default/entities/pjd"
CAUSES = ("device node", "size limit", "native too", "other")
MAX_FILE_SIZE = Config(data_dir=Path(".")).max_file_size

# A few files of each main syscall, chosen for coverage and speed (about 110 s of prove on
# ContextFS here, 4 at a time about 35 s): creation, ownership and modes of every file type
# (chmod/00, chown/07, mkfifo/00, rename/00, unlink/00 make block and char devices too) and
# the size limit (open/25 writes at 2 GiB), so both emulations run.
QUICK = (
    "chmod/00.t",
    "chmod/05.t",
    "chmod/12.t",
    "chown/05.t",
    "chown/07.t",
    "ftruncate/00.t",
    "ftruncate/12.t",
    "link/02.t",
    "link/03.t",
    "link/17.t",
    "mkdir/00.t",
    "mkdir/05.t",
    "mkdir/06.t",
    "mkfifo/00.t",
    "mkfifo/05.t",
    "mknod/00.t",
    "mknod/11.t",
    "open/00.t",
    "open/06.t",
    "open/24.t",
    "open/25.t",
    "posix_fallocate/00.t",
    "rename/00.t",
    "rename/12.t",
    "rename/21.t",
    "rmdir/00.t",
    "rmdir/07.t",
    "rmdir/12.t",
    "symlink/00.t",
    "symlink/05.t",
    "truncate/00.t",
    "truncate/12.t",
    "unlink/00.t",
    "unlink/11.t",
    "utimensat/00.t",
    "utimensat/06.t",
)

# The refusals ContextFS makes, for the emulated native runs: PJD_NO_DEVICES=1 refuses
# block and character devices with EPERM; PJD_MAX_FILE_SIZE=N makes sizes beyond N EFBIG.
SHIM_C = r"""
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

int __real_mknod(const char *, mode_t, dev_t);
int __real_mknodat(int, const char *, mode_t, dev_t);
int __real_truncate(const char *, off_t);
int __real_ftruncate(int, off_t);
int __real_posix_fallocate(int, off_t, off_t);
ssize_t __real_pwrite(int, const void *, size_t, off_t);

static int no_devices(mode_t mode) {
    const char *v = getenv("PJD_NO_DEVICES");
    return v && *v == '1' && (S_ISBLK(mode) || S_ISCHR(mode));
}

/* The kernel resolves the path and checks that the name is free and the parent writable
   before the filesystem sees the request: answer those first, touching nothing (a refused
   device leaves the parent's times alone, as on ContextFS). */
static int refuse_device(int dirfd, const char *p) {
    struct stat st;
    char parent[PATH_MAX];
    const char *slash = strrchr(p, '/');
    if (fstatat(dirfd, p, &st, AT_SYMLINK_NOFOLLOW) == 0) { errno = EEXIST; return -1; }
    if (errno != ENOENT) return -1;
    snprintf(parent, sizeof parent, "%.*s", slash ? (int)(slash - p) + 1 : 1, slash ? p : ".");
    if (fstatat(dirfd, parent, &st, 0) != 0) return -1;
    if (faccessat(dirfd, parent, W_OK | X_OK, AT_EACCESS) != 0) return -1;
    errno = EPERM;
    return -1;
}

static int too_big(long long size) {
    const char *v = getenv("PJD_MAX_FILE_SIZE");
    return v && *v && size > atoll(v);
}

int __wrap_mknod(const char *p, mode_t m, dev_t d) {
    if (no_devices(m)) return refuse_device(AT_FDCWD, p);
    return __real_mknod(p, m, d);
}

int __wrap_mknodat(int fd, const char *p, mode_t m, dev_t d) {
    if (no_devices(m)) return refuse_device(fd, p);
    return __real_mknodat(fd, p, m, d);
}

int __wrap_truncate(const char *p, off_t n) {
    if (too_big(n)) { errno = EFBIG; return -1; }
    return __real_truncate(p, n);
}

int __wrap_ftruncate(int fd, off_t n) {
    if (too_big(n)) { errno = EFBIG; return -1; }
    return __real_ftruncate(fd, n);
}

int __wrap_posix_fallocate(int fd, off_t off, off_t len) {
    if (too_big((long long)off + len)) return EFBIG;
    return __real_posix_fallocate(fd, off, len);
}

ssize_t __wrap_pwrite(int fd, const void *b, size_t n, off_t off) {
    if (too_big((long long)off + (long long)n)) { errno = EFBIG; return -1; }
    return __real_pwrite(fd, b, n, off);
}
"""
WRAPPED = ("mknod", "mknodat", "truncate", "ftruncate", "posix_fallocate", "pwrite")

TAP_LINE = re.compile(r"^(not )?ok (\d+)\b(.*)$")
TAP_PLAN = re.compile(r"^1\.\.(\d+)")


# ---- building ---------------------------------------------------------------------------


def _run(cmd: list[str], cwd: Path) -> None:
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")


def build(source: Path, work: Path) -> tuple[Path, Path]:
    """The suite built in `work`: (its tree, the tree of the emulating binary). Each tree
    holds `pjdfstest` and `tests/` (misc.sh finds the binary above the tests)."""
    for tool in ("autoreconf", "make", "cc", "prove"):
        if not shutil.which(tool):
            raise RuntimeError(f"{tool} is not installed (scripts/setup.sh installs it)")
    tree = work / "pjdfstest"
    shutil.copytree(source, tree, ignore=shutil.ignore_patterns(".git"))
    t0 = time.perf_counter()
    for step in (["autoreconf", "-ifs"], ["./configure"], ["make", "pjdfstest"]):
        say(f"  build: {' '.join(step)}")
        _run(step, tree)
    emu = work / "pjdfstest-emulated"
    shutil.copytree(tree / "tests", emu / "tests")
    (work / "shim.c").write_text(SHIM_C)
    say("  build: the emulating binary (devices refused, files capped)")
    wrap = ",".join(f"--wrap={name}" for name in WRAPPED)
    _run(
        [
            "cc",
            "-DHAVE_CONFIG_H",
            f"-I{tree}",
            "-O2",
            "-o",
            str(emu / "pjdfstest"),
            str(tree / "pjdfstest.c"),
            str(work / "shim.c"),
            f"-Wl,{wrap}",
        ],
        work,
    )
    say(f"  build: done in {time.perf_counter() - t0:.1f}s")
    return tree, emu


def select(tests: Path, names: list[str], quick: bool) -> list[str]:
    """The chosen test files, relative to `tests` (`chmod/00.t`), in the suite's order."""
    every = sorted(str(p.relative_to(tests)) for p in tests.rglob("*.t"))
    if quick:
        return [t for t in every if t in QUICK]
    if not names:
        return every
    chosen = [t for t in every if any(t == n or t.startswith(n.rstrip("/") + "/") for n in names)]
    if not chosen:
        raise SystemExit(f"no test file matches {names}")
    return chosen


# ---- running and parsing ----------------------------------------------------------------


@dataclass(slots=True)
class FileRun:
    """One `.t` file's answers: the planned count and the failed assertions' messages."""

    name: str
    planned: int | None = None
    passed: int = 0
    todo: int = 0
    failed: dict[int, str] = field(default_factory=dict)
    seconds: float = 0.0

    def doc(self) -> dict:
        return {
            "planned": self.planned,
            "passed": self.passed,
            "todo": self.todo,
            "failed": {str(n): m for n, m in sorted(self.failed.items())},
            "seconds": round(self.seconds, 2),
        }


def parse_tap(name: str, text: str) -> FileRun:
    """Assertions of prove's verbose output for one file. A TODO failure is expected (prove
    passes it); an assertion planned but never printed is a failure; so is a missing plan."""
    run = FileRun(name)
    seen: set[int] = set()
    for line in text.splitlines():
        if m := TAP_PLAN.match(line):
            run.planned = int(m.group(1))
        elif m := TAP_LINE.match(line):
            n, rest = int(m.group(2)), m.group(3)
            seen.add(n)
            if "# TODO" in rest:
                run.todo += 1
            elif m.group(1):
                run.failed[n] = rest.lstrip(" -").strip() or "not ok"
            else:
                run.passed += 1
    if run.planned is None:  # `1..0 # SKIP` is a plan; no plan at all is a failure
        run.planned = max(seen, default=1)
        run.failed.setdefault(0, "no TAP plan: " + text.strip()[-300:])
    for n in range(1, run.planned + 1):
        if n not in seen:
            run.failed[n] = "not run: the file stopped before it"
    return run


def run_file(tests: Path, name: str, cwd: Path, env: dict[str, str], timeout: float) -> FileRun:
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        ["prove", "-v", "--merge", str(tests / name)],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # prove's own group: the hung test with it
        out, _ = proc.communicate()
        out += f"\n(killed after {timeout:.0f} s)"
    run = parse_tap(name, out)
    run.seconds = time.perf_counter() - t0
    return run


def run_suite(
    label: str,
    tests: Path,
    names: list[str],
    cwd: Path,
    *,
    jobs: int,
    timeout: float,
    env: dict[str, str] | None = None,
) -> tuple[dict[str, FileRun], float]:
    """Every file of `names` run by `prove` in `cwd`, `jobs` at a time (the tests make
    random names, so files share a directory safely): ({file: run}, seconds)."""
    full_env = dict(os.environ, **(env or {}))
    progress = Progress(label, len(names))
    runs: dict[str, FileRun] = {}
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(run_file, tests, n, cwd, full_env, timeout) for n in names]
        for i, fut in enumerate(futures, 1):
            run = fut.result()
            runs[run.name] = run
            progress.update(i)
    progress.done()
    return runs, time.perf_counter() - t0


# ---- classifying ------------------------------------------------------------------------


TRIED = re.compile(r"^tried '(.*)', expected .*?, got ?(.*)$")
# stat fields whose values differ between any two runs (an inode number, a time)
VOLATILE = {"inode", "atime", "mtime", "ctime", "birthtime", "dev"}


def answer(message: str) -> tuple[str, ...]:
    """What a failed assertion got, comparable across runs: `… expected 0, got EPERM` →
    (EPERM,); a stat's volatile fields (`lstat x inode,uid` → `926,0`) as `*`; the whole
    message when it names no answer (a bare `not ok`, a file stopped)."""
    m = TRIED.match(message)
    if not m:
        return (message,)
    words, values = m.group(1).split(), m.group(2).split(",")
    names = words[-1].split(",") if words else []
    if any("stat" in w for w in words) and len(names) == len(values):
        return tuple(
            "*" if name.split("_")[0] in VOLATILE and not v.startswith("E") else v
            for name, v in zip(names, values, strict=True)
        )
    return tuple(values)


def classify(
    cfs: dict[str, FileRun],
    native: dict[str, FileRun],
    emulated: dict[str, dict[str, FileRun]],
) -> list[dict]:
    """Every failed ContextFS assertion with its cause (see the module docstring)."""
    out = []
    for name, run in cfs.items():
        for n, msg in sorted(run.failed.items()):
            if n in native[name].failed:
                cause = "native too"
            else:
                cause = "other"
                for c in ("device node", "size limit"):
                    emu = emulated.get(c, {}).get(name)
                    if emu and n in emu.failed and answer(emu.failed[n]) == answer(msg):
                        cause = c
                        break
            out.append({"file": name, "n": n, "message": msg, "cause": cause})
    return out


# ---- reporting --------------------------------------------------------------------------


def _fmt(v: int) -> str:
    return f"{v:,}"


def tables(doc: dict) -> str:
    cfs, nat = doc["contextfs"], doc["native"]
    by = Counter(f["cause"] for f in doc["failures"])
    lines = [
        "| | ContextFS (in a node) | native (local disk) |",
        "|---|---|---|",
        f"| test files | {_fmt(cfs['files'])} | {_fmt(nat['files'])} |",
        f"| assertions | {_fmt(cfs['assertions'])} | {_fmt(nat['assertions'])} |",
        f"| passed | {_fmt(cfs['passed'])} | {_fmt(nat['passed'])} |",
        f"| expected failures (TODO on Linux) | {_fmt(cfs['todo'])} | {_fmt(nat['todo'])} |",
        f"| failed | {_fmt(cfs['failed'])} | {_fmt(nat['failed'])} |",
    ]
    lines += [f"| failed: {c} | {_fmt(by[c])} | |" for c in CAUSES]
    lines += [f"| wall time (s) | {cfs['seconds']:.0f} | {nat['seconds']:.0f} |", ""]
    # per syscall directory
    dirs: dict[str, Counter] = {}
    for name, r in doc["runs"]["contextfs"].items():
        c = dirs.setdefault(name.split("/")[0], Counter())
        c["files"] += 1
        c["assertions"] += r["planned"]
        c["native"] += len(doc["runs"]["native"][name]["failed"])
    for f in doc["failures"]:
        dirs[f["file"].split("/")[0]][f["cause"]] += 1
    lines += [
        "| directory | files | assertions | " + " | ".join(CAUSES) + " | native failed |",
        "|---|" + "---|" * (len(CAUSES) + 3),
    ]
    for d, c in sorted(dirs.items()):
        cells = " | ".join(_fmt(c[k]) for k in CAUSES)
        lines.append(
            f"| {d} | {c['files']} | {_fmt(c['assertions'])} | {cells} | {_fmt(c['native'])} |"
        )
    runs_c, runs_n = doc["runs"]["contextfs"], doc["runs"]["native"]
    skipped = [n for n, r in runs_c.items() if r["planned"] == 1 < runs_n[n]["planned"]]
    if skipped:
        lines += [
            "",
            "Skipped by the suite on ContextFS (a property it checks only on EXT4, UFS or ZFS, "
            "`require` in misc.sh): "
            + ", ".join(f"{n} ({runs_n[n]['planned']} assertions natively)" for n in skipped)
            + ".",
        ]
    others = [f for f in doc["failures"] if f["cause"] == "other"]
    if others:
        lines += ["", f"`other` failures ({len(others)}):", ""]
        lines += [f"- {f['file']} #{f['n']}: {f['message']}" for f in others[:60]]
        if len(others) > 60:
            lines.append(f"- … {len(others) - 60} more in the JSON")
    lines += [
        "",
        f"Daemon errors (log and output): {len(doc['daemon_errors'])}; warnings: "
        f"{len(doc['daemon_warnings'])}; fsck after unmount: "
        f"{'clean' if not doc['fsck'] else '; '.join(doc['fsck'])}.",
    ]
    return "\n".join(lines)


def _totals(runs: dict[str, FileRun], seconds: float) -> dict:
    return {
        "files": len(runs),
        "assertions": sum(r.planned for r in runs.values()),
        "passed": sum(r.passed for r in runs.values()),
        "todo": sum(r.todo for r in runs.values()),
        "failed": sum(len(r.failed) for r in runs.values()),
        "seconds": round(seconds, 1),
    }


# ---- the run ----------------------------------------------------------------------------


def measure(
    source: Path, names: list[str], quick: bool, *, jobs: int, timeout: float, work: Path
) -> dict:
    """Build, run on native disk and in a ContextFS node, explain the failures: the report."""
    tree, emu = build(source, work / "build")
    chosen = select(tree / "tests", names, quick)
    say(f"pjdfstest: {len(chosen)} test files, {jobs} at a time")
    # uid 65534 and friends must reach the test directories
    native_dir = work / "native"
    native_dir.mkdir(mode=0o755)
    native_dir.chmod(0o755)
    native, native_s = run_suite(
        "native", tree / "tests", chosen, native_dir, jobs=jobs, timeout=timeout
    )

    (work / "mnt").mkdir(mode=0o755)
    m = Mount(work / "mnt", work / "data")
    m.start("-o", "allow_other")
    output, errors = "", []
    try:
        node = work / "mnt" / NODE
        node.mkdir(mode=0o755)
        node.chmod(0o755)
        cfs, cfs_s = run_suite(
            "contextfs", tree / "tests", chosen, node, jobs=jobs, timeout=timeout
        )
        refusals = re.search(r"^refusals: (\d+)", (work / "mnt/.status").read_text(), re.M)
    finally:
        try:
            output = m.stop()
        except AssertionError as exc:  # the daemon did not exit 0
            errors.append(str(exc)[:2000])
        finally:
            unmount(m.path)
    fsck = m.fsck()
    problems = log_problems(m.log)
    errors += [ln for ln in problems if BAD_LOG.search(ln) or ln.startswith("Traceback")]
    errors += [f"[output] {ln}" for ln in output.splitlines() if BAD_LOG.search(ln)]

    # files with failures native does not explain, run again natively under each emulation
    suspects = [n for n, r in cfs.items() if any(k not in native[n].failed for k in r.failed)]
    emulated: dict[str, dict[str, FileRun]] = {}
    emu_s: dict[str, float] = {}
    for cause, env in (
        ("device node", {"PJD_NO_DEVICES": "1"}),
        ("size limit", {"PJD_MAX_FILE_SIZE": str(MAX_FILE_SIZE)}),
    ):
        if not suspects:
            break
        d = work / f"native-{cause.split()[0]}"
        d.mkdir(mode=0o755)
        d.chmod(0o755)
        emulated[cause], emu_s[cause] = run_suite(
            f"native, {cause} emulated",
            emu / "tests",
            suspects,
            d,
            jobs=jobs,
            timeout=timeout,
            env=env,
        )

    failures = classify(cfs, native, emulated)
    return {
        "machine": machine_info(REPO),
        "source": str(source),
        "mode": "quick" if quick else ("chosen" if names else "full"),
        "node": NODE,
        "max_file_size": MAX_FILE_SIZE,
        "jobs": jobs,
        "contextfs": _totals(cfs, cfs_s),
        "native": _totals(native, native_s),
        "emulated_files": suspects,
        "emulated_seconds": {k: round(v, 1) for k, v in emu_s.items()},
        "causes": {c: sum(f["cause"] == c for f in failures) for c in CAUSES},
        "failures": failures,
        "refusals": int(refusals.group(1)) if refusals else None,
        "daemon_errors": errors,
        "daemon_warnings": [ln for ln in problems if ln not in errors],
        "fsck": fsck,
        "runs": {
            "contextfs": {n: r.doc() for n, r in cfs.items()},
            "native": {n: r.doc() for n, r in native.items()},
            **{
                f"native, {c} emulated": {n: r.doc() for n, r in runs.items()}
                for c, runs in emulated.items()
            },
        },
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tests", nargs="*", help="test files or directories (chmod/00.t, rename)")
    ap.add_argument("--quick", action="store_true", help=f"the CI subset ({len(QUICK)} files)")
    ap.add_argument("--source", type=Path, default=SOURCE, help="pjdfstest's source tree")
    ap.add_argument("--jobs", type=int, default=4, help="test files run at a time")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per test file")
    ap.add_argument("--json", type=Path, default=Path("pjdfstest.json"))
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        say("pjdfstest: needs root (its tests switch uids and chown)")
        return 2
    work = Path(tempfile.mkdtemp(prefix="cfs-pjdfstest-"))
    work.chmod(0o755)
    try:
        try:
            doc = measure(
                args.source.resolve(),
                args.tests,
                args.quick,
                jobs=args.jobs,
                timeout=args.timeout,
                work=work,
            )
        except RuntimeError as exc:
            say(f"pjdfstest: {exc}")
            return 2
    finally:
        if args.keep:
            say(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(tables(doc))
    write_json(args.json, doc)
    say(f"wrote {args.json}")
    bad = doc["causes"]["other"] or doc["daemon_errors"] or doc["fsck"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
