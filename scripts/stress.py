"""Third-party stress with verification: fio, stress-ng and dbench on ContextFS vs native disk.

Every load runs twice, side by side: on a directory of the local disk (a `tempfile` dir) and
inside a real ContextFS mount (a fresh data dir), where it lands on

- attachments: a directory inside a node (`user/default/preferences/<node>/...`), which
  behaves like an ordinary POSIX filesystem (SPEC §3);
- tiers: `L2.md` of a node (one file per node, under the 4 MiB tier limit), which must stay
  UTF-8 text — so the fio jobs on `L2.md` verify an ASCII pattern (`verify=pattern`), while
  the attachment jobs use `verify=crc32c` (binary block headers; refused on a tier by design).

Loads:

1. fio (`--output-format=json`, `direct=1` so reads reach the daemon): sequential and random
   writes with `numjobs=2` and crc32c verification on attachments, and sequential and random
   writes on two nodes' `L2.md` with pattern verification; then, after an unmount and a new
   mount of the same store, the attachment files are verified again (`verify_only`): the
   bytes came back from DuckDB, not from the daemon's memory.
2. stress-ng filesystem stressors with `--verify`, `--temp-path` inside a node. A stressor
   whose failure on ContextFS is a documented refusal (`fallocate`: EOPNOTSUPP) is listed
   as excluded with the line stress-ng printed; any other failure is a FAIL. `--filename`
   runs with `--filename-opts posix`; the default byte-probing variant
   runs last, on a fresh mount of its own, because it changes what the store accepts.
3. dbench (`-D <dir in a node>`), a mixed client load; MB/s and any error it prints.

Afterwards: the daemon's log file and its captured stderr must hold no ERROR, no Traceback
and no "Logging error"; the refusals in `.status` are summarised; `fsck` of the unmounted
store must return [].

It prints a markdown table (tool | job | native | contextfs | ratio | verify errors |
status) and writes every figure to JSON. Exit status: 0 when every row passed (or was
excluded for its documented reason) and the daemon was clean; 1 otherwise.

    .venv/bin/python scripts/stress.py                         # full: ~10 s per stressor
    .venv/bin/python scripts/stress.py --quick                 # CI smoke (~60 s)
    .venv/bin/python scripts/stress.py --json bench-results/stress.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from contextfs.testing import DrainedMount, write_json

OWNER_DIR = "user/default/preferences"
L2_PATTERN = '"ContextFS L2 fio pattern 0123456789. "'
DBENCH_LOADFILE = "/usr/share/dbench/client.txt"

# stress-ng stressors that apply to attachments, with the options that make them verify.
STRESSORS: list[tuple[str, list[str]]] = [
    ("dir", []),
    ("dentry", []),
    ("rename", []),
    ("filename", ["--filename-opts", "posix"]),
    ("io", []),
    ("iomix", ["--iomix-bytes", "32m"]),  # default 1g: past the 64 MiB attachment limit
    ("hdd", ["--hdd-bytes", "8m", "--hdd-write-size", "16k"]),
    ("seek", ["--seek-size", "8m"]),
    ("readahead", ["--readahead-bytes", "8m"]),
    ("symlink", []),
    ("chmod", []),
    ("utime", []),
    ("fstat", []),
    ("fallocate", ["--fallocate-bytes", "8m"]),
    ("link", []),
]
QUICK_STRESSORS = {
    "dir",
    "rename",
    "filename",
    "iomix",
    "hdd",
    "symlink",
    "chmod",
    "fallocate",
    "link",
}
# Failures that are ContextFS's documented answer, not a defect (docs/operations.md).
BY_DESIGN = {
    "fallocate": ("errno=95", "Operation not supported", "errno=38", "not implemented"),
}


def fallocate_errno(directory: Path) -> str:
    """What fallocate(2) itself answers in directory ('ok' or the errno name)."""
    import ctypes
    import errno as errno_mod

    libc = ctypes.CDLL(None, use_errno=True)
    path = directory / "fallocate-probe.bin"
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        rc = libc.fallocate(fd, 0, ctypes.c_longlong(0), ctypes.c_longlong(4096))
        err = ctypes.get_errno()
    finally:
        os.close(fd)
        os.unlink(path)
    return "ok" if rc == 0 else errno_mod.errorcode.get(err, str(err))


@dataclass
class Row:
    tool: str
    job: str
    unit: str
    native: float | None = None
    contextfs: float | None = None
    verify_errors: int = 0
    status: str = "PASS"  # PASS | FAIL | EXCLUDED | HANG
    note: str = ""

    @property
    def ratio(self) -> float | None:
        if self.native and self.contextfs is not None:
            return self.contextfs / self.native
        return None


@dataclass
class Report:
    quick: bool
    rows: list[Row] = field(default_factory=list)
    excluded: list[dict] = field(default_factory=list)
    daemon_errors: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    refusal_count: int = 0
    fsck: list[str] = field(default_factory=list)
    probes: list[dict] = field(default_factory=list)
    seconds: float = 0.0


# ---- running a tool -----------------------------------------------------------------------


class Hang(Exception):
    pass


def run(cmd: list[str], timeout: float, cwd: Path | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            cmd, capture_output=True, text=True, errors="replace", timeout=timeout, cwd=cwd
        )
    except subprocess.TimeoutExpired as exc:
        raise Hang(f"{' '.join(cmd[:3])}… did not finish in {timeout:.0f} s") from exc


def _fio_json(out: str) -> dict:
    i = out.find("{")
    return json.loads(out[i:]) if i >= 0 else {"jobs": []}


_VERIFY_LINE = re.compile(r"verify|bad magic|bad pattern|crc32c", re.I)


def fio(jobfile: str, workdir: Path, timeout: float, verify_only: bool = False) -> dict:
    """Run one fio job file; return write IOPS/bandwidth, errors and verify errors."""
    path = workdir / "job.fio"
    path.write_text(jobfile)
    cmd = ["fio", "--output-format=json", str(path)]
    if verify_only:
        cmd.insert(1, "--verify_only")
    r = run(cmd, timeout, cwd=workdir)
    data = _fio_json(r.stdout)
    jobs = data.get("jobs", [])
    noise = [ln for ln in (r.stdout[: r.stdout.find("{")] + r.stderr).splitlines() if ln.strip()]
    verify_errors = sum(1 for ln in noise if _VERIFY_LINE.search(ln))
    verify_errors += sum(int(j.get("total_err", 0) or 0) for j in jobs)
    errors = [j["jobname"] + f": error {j['error']}" for j in jobs if j.get("error")]
    return {
        "rc": r.returncode,
        "iops": sum(j["write"]["iops"] for j in jobs),
        "bw_kib": sum(j["write"]["bw"] for j in jobs),
        "read_kib": sum(j["read"]["io_kbytes"] for j in jobs),
        "jobs": len(jobs),
        "verify_errors": verify_errors,
        "errors": errors + noise[:5],
    }


def fio_jobs(quick: bool) -> dict[str, tuple[str, str]]:
    """name -> (kind, job body): kind 'att' (a directory) or 'l2' (two nodes' L2.md)."""
    size = "4m" if quick else "16m"
    common = "ioengine=psync\ndirect=1\ncontinue_on_error=verify\n"
    return {
        "attach seq write 64k x2": (
            "att",
            f"[global]\n{common}verify=crc32c\nrw=write\nbs=64k\nsize={size}\nnumjobs=2\n[seq]\n",
        ),
        "attach rand write 4k x2": (
            "att",
            f"[global]\n{common}verify=crc32c\nrw=randwrite\n"
            f"bs=4k\nsize={size}\nnumjobs=2\n[rand]\n",
        ),
        "L2.md seq write 4k, 2 nodes": (
            "l2",
            f"[global]\n{common}verify=pattern\n"
            f"verify_pattern={L2_PATTERN}\nrw=write\nbs=4k\n"
            "size=1m\n",
        ),
        "L2.md rand write 4k, 2 nodes": (
            "l2",
            f"[global]\n{common}verify=pattern\n"
            f"verify_pattern={L2_PATTERN}\nrw=randwrite\n"
            "bs=4k\nsize=1m\n",
        ),
    }


def stage_fio(rep: Report, m: DrainedMount, native: Path, quick: bool) -> None:
    for i, (name, (kind, body)) in enumerate(fio_jobs(quick).items()):
        res: dict[str, dict] = {}
        for side, base in (("native", native), ("contextfs", m.path / OWNER_DIR)):
            if kind == "att":
                node = base / f"fio-{i}"
                node.mkdir(parents=True, exist_ok=True)
                if side == "contextfs":
                    (node / "L2.md").write_text("fio attachments node\n")
                d = node / "data"
                d.mkdir(exist_ok=True)
                job = body.replace("[seq]", f"[seq]\ndirectory={d}").replace(
                    "[rand]", f"[rand]\ndirectory={d}"
                )
            else:
                job = body
                for k in range(2):
                    node = base / f"fio-{i}-l2-{k}"
                    node.mkdir(parents=True, exist_ok=True)
                    (node / "L2.md").write_text("fio tier node\n")
                    job += f"[node{k}]\nfilename={node / 'L2.md'}\n"
            wd = Path(tempfile.mkdtemp(prefix="fio-"))
            try:
                res[side] = fio(job, wd, timeout=300)
                res[side]["job"] = job
            finally:
                shutil.rmtree(wd, ignore_errors=True)
        row = Row(
            "fio",
            name,
            "write IOPS",
            res["native"]["iops"],
            res["contextfs"]["iops"],
            res["contextfs"]["verify_errors"] + res["native"]["verify_errors"],
        )
        errs = res["contextfs"]["errors"] + res["native"]["errors"]
        if row.verify_errors or errs or res["contextfs"]["rc"]:
            row.status = "FAIL"
            row.note = "; ".join(errs)[:300]
        else:
            row.note = (
                f"bw {res['native']['bw_kib'] / 1024:.1f} vs "
                f"{res['contextfs']['bw_kib'] / 1024:.1f} MiB/s"
            )
        rep.rows.append(row)


def stage_fio_reverify(rep: Report, m: DrainedMount, quick: bool) -> None:
    """After a remount: the attachment files written by fio verify again (from the store)."""
    for i, (name, (kind, body)) in enumerate(fio_jobs(quick).items()):
        if kind != "att":
            continue
        d = m.path / OWNER_DIR / f"fio-{i}" / "data"
        job = body.replace("[seq]", f"[seq]\ndirectory={d}").replace(
            "[rand]", f"[rand]\ndirectory={d}"
        )
        wd = Path(tempfile.mkdtemp(prefix="fio-"))
        try:
            r = fio(job, wd, timeout=300, verify_only=True)
        finally:
            shutil.rmtree(wd, ignore_errors=True)
        row = Row(
            "fio",
            f"{name}: verify after remount",
            "KiB read",
            None,
            r["read_kib"],
            r["verify_errors"],
        )
        if r["verify_errors"] or r["errors"] or r["rc"] or not r["read_kib"]:
            row.status = "FAIL"
            row.note = "; ".join(r["errors"])[:300] or f"rc {r['rc']}"
        rep.rows.append(row)


_NG_PROBLEM = re.compile(
    r"\b(fail|error):|verif|skipping|not allowed|not supported|not implemented"
)


def stress_ng(name: str, opts: list[str], where: Path, seconds: int, workers: int) -> dict:
    where.mkdir(parents=True, exist_ok=True)
    fd, ypath = tempfile.mkstemp(suffix=".yaml")
    os.close(fd)
    cmd = [
        "stress-ng",
        f"--{name}",
        str(workers),
        *opts,
        "--timeout",
        f"{seconds}s",
        "--verify",
        "--temp-path",
        str(where),
        "--metrics-brief",
        "--yaml",
        ypath,
    ]
    try:
        r = run(cmd, timeout=seconds + 90)
        try:
            metrics = (yaml.safe_load(Path(ypath).read_text()) or {}).get("metrics") or []
        except (OSError, yaml.YAMLError):
            metrics = []
    finally:
        os.unlink(ypath)
    ops = next(
        (
            float(x.get("bogo-ops-per-second-real-time", 0))
            for x in metrics
            if x.get("stressor") == name
        ),
        None,
    )
    out = r.stdout + r.stderr
    fails = [ln.strip() for ln in out.splitlines() if _NG_PROBLEM.search(ln) and "metrc" not in ln]
    return {"rc": r.returncode, "ops": ops, "fails": fails, "cmd": " ".join(cmd)}


def stage_stress_ng(rep: Report, m: DrainedMount, native: Path, quick: bool) -> None:
    # quick: the native side only gives the reference rate, one second is enough
    seconds, native_seconds, workers = (3, 1, 1) if quick else (10, 10, 2)
    node = m.path / OWNER_DIR / "stress-ng"
    node.mkdir()
    (node / "L2.md").write_text("stress-ng scratch node\n")
    falloc = fallocate_errno(node)
    for name, opts in STRESSORS:
        if quick and name not in QUICK_STRESSORS:
            continue
        job = name + (" " + " ".join(opts) if opts else "")
        n = stress_ng(name, opts, native / "stress-ng" / name, native_seconds, workers)
        # one bogo op of `filename` is a whole batch of names (about a second here), so a
        # 3 s smoke run could end before the first one: give it room even when quick
        secs = max(seconds, 10) if name == "filename" else seconds
        c = stress_ng(name, opts, node / name, secs, workers)
        row = Row("stress-ng", job, "bogo ops/s", n["ops"], c["ops"])
        row.verify_errors = sum(
            1
            for ln in c["fails"] + n["fails"]
            if re.search(r"verif", ln, re.I) and "fail" in ln.lower()
        )
        if n["rc"] not in (0, 3):  # 3: resource/not-implemented on the native side
            row.note = "native: " + "; ".join(n["fails"])[:200]
        if c["rc"] != 0:
            expected = BY_DESIGN.get(name, ())
            joined = "\n".join(c["fails"])
            if expected and any(e in joined for e in expected) and not row.verify_errors:
                row.status = "EXCLUDED"
                reason = next((ln for ln in c["fails"] if any(e in ln for e in expected)), joined)
                row.note = reason[:300]
                rep.excluded.append({"tool": "stress-ng", "job": job, "reason": reason[:300]})
            else:
                row.status = "FAIL"
                row.note = (f"rc {c['rc']}: " + "; ".join(c["fails"]))[:300]
        elif not c["ops"] and n["ops"]:
            # a "successful" run that made no progress at all
            if name == "fallocate" and falloc != "ok":
                row.status = "EXCLUDED"
                row.note = f"fallocate(2) answers {falloc}; the stressor counts no operation"
                rep.excluded.append({"tool": "stress-ng", "job": job, "reason": row.note})
            else:
                row.status = "FAIL"
                row.note = "0 bogo ops on ContextFS (no progress), exit 0"
        rep.rows.append(row)


_DBENCH_TP = re.compile(r"Throughput ([0-9.]+) MB/sec")


def dbench(where: Path, seconds: int, clients: int) -> dict:
    where.mkdir(parents=True, exist_ok=True)
    r = run(
        ["dbench", "-c", DBENCH_LOADFILE, "-D", str(where), "-t", str(seconds), str(clients)],
        timeout=seconds + 180,
    )
    out = r.stdout + r.stderr
    m = _DBENCH_TP.search(out)
    errors = [
        ln.strip()
        for ln in out.splitlines()
        if re.search(r"error|failed|unexpected|ERROR", ln, re.I)
        # the machine's SysV semaphores, not the filesystem: dbench then starts its
        # clients without the barrier that lines them up, and runs all the same
        and "failed to create barrier semaphore" not in ln
    ]
    return {"rc": r.returncode, "mbs": float(m.group(1)) if m else None, "errors": errors}


def stage_dbench(rep: Report, m: DrainedMount, native: Path, quick: bool) -> None:
    seconds, clients = (3, 2) if quick else (10, 4)
    node = m.path / OWNER_DIR / "dbench"
    node.mkdir()
    (node / "L2.md").write_text("dbench scratch node\n")
    n = dbench(native / "dbench", seconds, clients)
    c = dbench(node / "clients", seconds, clients)
    row = Row("dbench", f"{clients} clients, {seconds} s", "MB/s", n["mbs"], c["mbs"])
    errs = c["errors"] + [f"native: {e}" for e in n["errors"]]
    if c["rc"] or n["rc"] or errs or c["mbs"] is None:
        row.status = "FAIL"
        row.note = (f"rc {c['rc']}/{n['rc']}: " + "; ".join(errs[:5]))[:300]
    rep.rows.append(row)


def probe_filename_bytes(rep: Report, tmp: Path, quick: bool) -> None:
    """stress-ng --filename with its default byte probe, on a mount of its own."""
    mnt, data = tmp / "probe-mnt", tmp / "probe-data"
    mnt.mkdir()
    m = DrainedMount(mnt, data)
    m.start()
    node = mnt / OWNER_DIR / "names"
    row = Row("stress-ng", "filename (all name bytes, own mount)", "bogo ops/s")
    probe: dict = {"job": row.job}
    try:
        node.mkdir()
        (node / "L2.md").write_text("file name probe\n")
        c = stress_ng("filename", [], node / "f", 2 if quick else 5, 1)
        row.contextfs = c["ops"]
        try:
            status = (mnt / ".status").read_text(errors="replace")
            state = next((ln for ln in status.splitlines() if ln.startswith("state:")), "")
        except OSError as exc:
            state = f"cat .status: {exc.strerror} (errno {exc.errno})"
        probe.update(c, state=state)
        if c["rc"] != 0 or "read-write" not in state:
            row.status = "FAIL"
            row.note = f"rc {c['rc']}; {state}; " + "; ".join(c["fails"][:2])
    except Hang as exc:
        row.status, row.note = "HANG", str(exc)
        m.abort()
    finally:
        if m.proc is not None:
            with contextlib.suppress(RuntimeError):
                m.stop()
    probe["daemon_errors"] = m.problems()[:20]
    probe["fsck"] = m.fsck()
    if probe["daemon_errors"] or probe["fsck"]:
        row.status = "FAIL"
        row.note += f"; {len(m.problems())} daemon error line(s)"
    row.note = row.note.strip("; ")[:300]
    rep.rows.append(row)
    rep.probes.append(probe)


# ---- the run -------------------------------------------------------------------------------


def run_all(quick: bool, keep: bool = False) -> Report:
    t0 = time.monotonic()
    rep = Report(quick=quick)
    tmp = Path(tempfile.mkdtemp(prefix="ctxfs-stress-"))
    native = tmp / "native"
    native.mkdir()
    mnt, data = tmp / "mnt", tmp / "data"
    mnt.mkdir()
    m = DrainedMount(mnt, data)
    m.start()
    try:
        stages = [stage_fio, stage_stress_ng, stage_dbench]
        for stage in stages:
            try:
                stage(rep, m, native, quick)
            except Hang as exc:
                rep.rows.append(
                    Row(
                        stage.__name__.removeprefix("stage_"),
                        "(stage)",
                        "",
                        status="HANG",
                        note=str(exc),
                    )
                )
                m.abort()
                break
        if m.proc is not None:
            rep.refusal_count, rep.refusals = m.refusals()
            m.stop()
            m.start()  # the same store again: what fio wrote must verify from DuckDB
            try:
                stage_fio_reverify(rep, m, quick)
            except Hang as exc:
                rep.rows.append(
                    Row("fio", "verify after remount", "", status="HANG", note=str(exc))
                )
                m.abort()
    finally:
        if m.proc is not None:
            try:
                m.stop()
            except RuntimeError as exc:
                rep.daemon_errors.append(str(exc))
        else:
            subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True)
    rep.daemon_errors += m.problems()
    rep.fsck = m.fsck()
    probe_filename_bytes(rep, tmp, quick)
    rep.seconds = time.monotonic() - t0
    if not keep:
        shutil.rmtree(tmp, ignore_errors=True)
    return rep


def _fmt(v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v:,.0f}" if v >= 100 else f"{v:.2f}"


def table(rep: Report) -> str:
    out = [
        "| tool | job | native | contextfs | ratio | verify errors | status |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rep.rows:
        ratio = f"{r.ratio:.2f}×" if r.ratio is not None else "—"
        status = r.status + (f" — {r.note}" if r.note else "")
        out.append(
            f"| {r.tool} | {r.job} ({r.unit}) | {_fmt(r.native)} | "
            f"{_fmt(r.contextfs)} | {ratio} | {r.verify_errors} | "
            f"{status.replace('|', '/')} |"
        )
    return "\n".join(out)


def summary(rep: Report) -> dict:
    return {
        "verify_errors": sum(r.verify_errors for r in rep.rows),
        "failed": [f"{r.tool} {r.job}" for r in rep.rows if r.status in ("FAIL", "HANG")],
        "daemon_errors": len(rep.daemon_errors),
        "fsck_clean": rep.fsck == [],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="CI smoke: short durations")
    ap.add_argument("--json", type=Path, help="write every figure here")
    ap.add_argument("--keep", action="store_true", help="keep the temp dirs")
    args = ap.parse_args(argv)
    for tool in ("fio", "stress-ng", "dbench", "fusermount3"):
        if not shutil.which(tool):
            print(f"{tool} is not installed", file=sys.stderr)
            return 2
    rep = run_all(args.quick, args.keep)
    s = summary(rep)
    print(table(rep))
    print()
    if rep.excluded:
        print("Excluded (documented refusals):")
        for e in rep.excluded:
            print(f"- {e['tool']} {e['job']}: {e['reason']}")
    print(f"\nrefusals in .status: {rep.refusal_count}")
    for ln in rep.refusals[:10]:
        print(f"  {ln[:200]}")
    print(f"daemon errors: {s['daemon_errors']}")
    for ln in rep.daemon_errors[:10]:
        print(f"  {ln[:200]}")
    print(f"fsck: {rep.fsck or 'clean'}")
    print(
        f"verify errors: {s['verify_errors']}; failed: {s['failed'] or 'none'}; {rep.seconds:.0f} s"
    )
    if args.json:
        doc = asdict(rep)
        doc["summary"] = s
        for r, d in zip(rep.rows, doc["rows"], strict=True):
            d["ratio"] = r.ratio
        write_json(args.json, doc, ensure_ascii=False)
    ok = not s["failed"] and not s["verify_errors"] and not s["daemon_errors"] and s["fsck_clean"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
