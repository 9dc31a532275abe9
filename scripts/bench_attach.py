"""Benchmark big attachments: random 4 KiB writes with an fsync after each, native vs mount.

In one run, on a directory of the local disk (a `tempfile` dir) and inside a node of a
fresh ContextFS mount (temp mountpoint, temp data dir, `search: false`):

1. writes a 32 MiB file of random bytes (1 MiB writes, one fsync at the end);
2. makes N random 4 KiB `pwrite`s at 4 KiB-aligned offsets, each followed by `fsync`
   (the same seeded offsets and bytes on both sides): ops/s, and the p50/p90/p99 of the
   fsync and of the whole write + fsync;
3. checks that both files hold the same bytes (sha256), unmounts, mounts again and
   checks once more, timing the first full read (the file comes back from the store's
   chunks);
4. runs `stress-ng --iomix 1 --iomix-bytes 32m --verify` on both sides (bogo ops/s, exit
   status and any line stress-ng printed about a failure);
5. big file (a `dd` in and out): on a second fresh mount with `max_file_size` raised to
   hold it, writes `--big-mib` MiB (200; 40 with --quick) in 1 MiB writes and one fsync,
   native and mount side by side, then reads it back after a remount (native: its pages
   dropped first with `posix_fadvise`), checks the bytes, and reads the daemon's RSS at
   idle and its peak during the write (VmHWM, reset first through `clear_refs`). The
   bytes have the high bit set, so the secret redactor finds no printable run to take a
   secret from and the bytes stored are the bytes written.

It prints a markdown table and writes every figure to JSON. Exit status: 1 when the bytes
differ, stress-ng fails on the mount, or the daemon logged an error; 0 otherwise.

    .venv/bin/python scripts/bench_attach.py                 # 2000 writes, iomix 20 s
    .venv/bin/python scripts/bench_attach.py --quick         # 300 writes, iomix 5 s
    .venv/bin/python scripts/bench_attach.py --json /tmp/a.json
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from contextfs.testing import DrainedMount, rank_percentile, write_json

FILE_SIZE = 32 << 20
BLOCK = 4096
SEED = 20261130
_NG_PROBLEM = re.compile(r"\b(fail|error):|verif|skipping|not allowed|not supported")


def sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def create(path: Path) -> float:
    rnd = random.Random(SEED)
    t = time.perf_counter()
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    try:
        for _ in range(FILE_SIZE >> 20):
            os.write(fd, rnd.randbytes(1 << 20))
        os.fsync(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - t


def random_writes(path: Path, n: int) -> dict:
    rnd = random.Random(SEED + 1)
    fsyncs: list[float] = []
    totals: list[float] = []
    fd = os.open(path, os.O_RDWR)
    t0 = time.perf_counter()
    try:
        for _ in range(n):
            off = rnd.randrange(FILE_SIZE // BLOCK) * BLOCK
            buf = rnd.randbytes(BLOCK)
            t = time.perf_counter()
            os.pwrite(fd, buf, off)
            s = time.perf_counter()
            os.fsync(fd)
            e = time.perf_counter()
            fsyncs.append(e - s)
            totals.append(e - t)
    finally:
        os.close(fd)
    wall = time.perf_counter() - t0
    return {
        "ops": n,
        "seconds": wall,
        "ops_per_s": n / wall,
        "fsync_p50_ms": rank_percentile(fsyncs, 0.5) * 1e3,
        "fsync_p90_ms": rank_percentile(fsyncs, 0.9) * 1e3,
        "fsync_p99_ms": rank_percentile(fsyncs, 0.99) * 1e3,
        "op_p50_ms": rank_percentile(totals, 0.5) * 1e3,
        "op_mean_ms": statistics.mean(totals) * 1e3,
    }


def timed_read(path: Path) -> float:
    t = time.perf_counter()
    with open(path, "rb") as f:
        while f.read(1 << 20):
            pass
    return time.perf_counter() - t


def iomix(where: Path, seconds: int) -> dict:
    where.mkdir(parents=True, exist_ok=True)
    fd, ypath = tempfile.mkstemp(suffix=".yaml")
    os.close(fd)
    cmd = [
        "stress-ng",
        "--iomix",
        "1",
        "--iomix-bytes",
        "32m",
        "--verify",
        "--timeout",
        f"{seconds}s",
        "--temp-path",
        str(where),
        "--metrics-brief",
        "--yaml",
        ypath,
    ]
    try:
        r = subprocess.run(
            cmd, capture_output=True, text=True, errors="replace", timeout=seconds + 180
        )
        metrics = (yaml.safe_load(Path(ypath).read_text()) or {}).get("metrics") or []
    finally:
        os.unlink(ypath)
    row = next((x for x in metrics if x.get("stressor") == "iomix"), {})
    out = r.stdout + r.stderr
    return {
        "cmd": " ".join(cmd),
        "rc": r.returncode,
        "bogo_ops": row.get("bogo-ops"),
        "bogo_ops_per_s": row.get("bogo-ops-per-second-real-time"),
        "fails": [ln.strip() for ln in out.splitlines() if _NG_PROBLEM.search(ln)][:10],
    }


def _rss(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of a process, in bytes."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(rest.split()[0]) * 1024
    return out


def _big_write(path: Path, mib: int) -> tuple[float, str]:
    """mib MiB in 1 MiB writes, then fsync (`dd bs=1M conv=fsync`): (seconds, sha256)."""
    block = bytes(b | 0x80 for b in random.Random(SEED + 2).randbytes(1 << 20))
    h = hashlib.sha256()
    t = time.perf_counter()
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    try:
        for i in range(mib):
            piece = block[i:] + block[:i]  # every MiB differs: no blob is shared
            os.write(fd, piece)
            h.update(piece)
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # native: read back from disk
    finally:
        os.close(fd)
    return time.perf_counter() - t, h.hexdigest()


def big_file(tmp: Path, mib: int) -> dict:
    """Phase 5: a big file in and out, native and through a mount of its own."""
    data = tmp / "data-big"
    data.mkdir()
    (data / "config.yaml").write_text(f"search: false\nmax_file_size: {(mib + 1) << 20}\n")
    (tmp / "mnt-big").mkdir()
    m = DrainedMount(tmp / "mnt-big", data)
    out: dict = {"mib": mib}
    try:
        m.start()
        node = m.path / "user/default/preferences/bench-big"
        node.mkdir()
        (node / "L2.md").write_text("A node that keeps one very big file.\n")
        native = tmp / "native" / "huge.bin"
        nat_s, nat_sha = _big_write(native, mib)
        assert m.proc is not None
        pid = m.proc.pid
        idle = _rss(pid)["VmRSS"]
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS
        ours_s, ours_sha = _big_write(node / "huge.bin", mib)
        peak = _rss(pid)["VmHWM"]
        status = (m.path / ".status").read_text()
        m.remount()
        assert m.proc is not None
        pid = m.proc.pid
        read_idle = _rss(pid)["VmRSS"]
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        read_s = {"native": timed_read(native), "contextfs": timed_read(node / "huge.bin")}
        read_peak = _rss(pid)["VmHWM"]
        out.update(
            write_s={"native": nat_s, "contextfs": ours_s},
            read_s=read_s,
            identical=sha(node / "huge.bin") == ours_sha == nat_sha,
            read_write="state: read-write" in status,
            rss_idle=idle,
            rss_peak=peak,
            rss_read_idle=read_idle,
            rss_read_peak=read_peak,
        )
    finally:
        if m.proc is not None:
            m.stop()
        out["daemon_problems"] = m.problems()[:20]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="300 writes, iomix for 5 s")
    p.add_argument("--writes", type=int, help="random 4 KiB writes (default 2000)")
    p.add_argument("--iomix-seconds", type=int, help="stress-ng --timeout (default 20)")
    p.add_argument("--big-mib", type=int, help="the big file's size (default 200; 40 quick)")
    p.add_argument("--json", default="bench-results/bench_attach.json")
    args = p.parse_args(argv)
    big_mib = args.big_mib or (40 if args.quick else 200)
    n = args.writes or (300 if args.quick else 2000)
    secs = args.iomix_seconds or (5 if args.quick else 20)

    tmp = Path(tempfile.mkdtemp(prefix="bench-attach-"))
    native = tmp / "native"
    native.mkdir()
    (tmp / "mnt").mkdir()
    m = DrainedMount(tmp / "mnt", tmp / "data")
    out: dict = {
        "quick": args.quick,
        "file_bytes": FILE_SIZE,
        "write_bytes": BLOCK,
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    ok = True
    try:
        m.start()
        node = m.path / "user/default/preferences/bench-attach"
        node.mkdir()
        (node / "L2.md").write_text("A node that keeps a big attachment.\n")
        ours, theirs = node / "big.bin", native / "big.bin"
        out["create_s"] = {"native": create(theirs), "contextfs": create(ours)}
        out["random_4k_fsync"] = {
            "native": random_writes(theirs, n),
            "contextfs": random_writes(ours, n),
        }
        same = sha(ours) == sha(theirs)
        m.remount()
        out["read_after_remount_s"] = {"native": timed_read(theirs), "contextfs": timed_read(ours)}
        same_after = sha(ours) == sha(theirs)
        out["identical"] = {"before_remount": same, "after_remount": same_after}
        ok &= same and same_after
        out["iomix"] = {
            "native": iomix(native / "iomix", secs),
            "contextfs": iomix(node / "iomix", secs),
        }
        c = out["iomix"]["contextfs"]
        ok &= c["rc"] == 0 and bool(c["bogo_ops"]) and not c["fails"]
        big = out["big_file"] = big_file(tmp, big_mib)
        ok &= big["identical"] and big["read_write"] and not big["daemon_problems"]
    finally:
        if m.proc is not None:
            try:
                m.stop()
            except Exception as exc:  # noqa: BLE001 - report, then clean up
                print(f"unmount failed: {exc}", file=sys.stderr)
                subprocess.run(["fusermount3", "-u", "-z", str(m.path)], capture_output=True)
                ok = False
        out["daemon_problems"] = m.problems()[:20]
        db = m.data_dir / "contextfs.duckdb"
        out["store_mib"] = (
            sum(f.stat().st_size for f in (db, db.with_suffix(".duckdb.wal")) if f.exists()) / 2**20
        )
        ok &= not out["daemon_problems"]
        shutil.rmtree(tmp, ignore_errors=True)

    rw = out.get("random_4k_fsync", {})
    rows = [
        (
            "create 32 MiB (1 MiB writes + fsync)",
            "s",
            out["create_s"]["native"],
            out["create_s"]["contextfs"],
        )
    ]
    if rw:
        rows += [
            (
                "4 KiB random pwrite + fsync",
                "ops/s",
                rw["native"]["ops_per_s"],
                rw["contextfs"]["ops_per_s"],
            ),
            ("  fsync p50", "ms", rw["native"]["fsync_p50_ms"], rw["contextfs"]["fsync_p50_ms"]),
            ("  fsync p90", "ms", rw["native"]["fsync_p90_ms"], rw["contextfs"]["fsync_p90_ms"]),
            ("  fsync p99", "ms", rw["native"]["fsync_p99_ms"], rw["contextfs"]["fsync_p99_ms"]),
            ("  pwrite + fsync p50", "ms", rw["native"]["op_p50_ms"], rw["contextfs"]["op_p50_ms"]),
            (
                "read 32 MiB after remount (native: page cache)",
                "s",
                out["read_after_remount_s"]["native"],
                out["read_after_remount_s"]["contextfs"],
            ),
        ]
    if "iomix" in out:
        rows.append(
            (
                f"stress-ng iomix 32m --verify {secs} s",
                "bogo ops/s",
                out["iomix"]["native"]["bogo_ops_per_s"] or 0.0,
                out["iomix"]["contextfs"]["bogo_ops_per_s"] or 0.0,
            )
        )
    print(f"\n{n} random 4 KiB writes into a {FILE_SIZE >> 20} MiB file, fsync after each\n")
    print("| measure | unit | native | contextfs | ratio |")
    print("|---|---|---:|---:|---:|")
    for name, unit, a, b in rows:
        ratio = f"{b / a:.2f}" if a else "-"
        print(f"| {name} | {unit} | {a:.2f} | {b:.2f} | {ratio} |")
    print(
        f"\nidentical bytes: {out.get('identical')}; store after the run: "
        f"{out['store_mib']:.1f} MiB (the 32 MiB file, and iomix's file as it was when "
        "stress-ng unlinked it: a soft-deleted attachment)"
    )
    if "iomix" in out:
        for side in ("native", "contextfs"):
            r = out["iomix"][side]
            print(
                f"iomix {side}: rc {r['rc']}, bogo ops {r['bogo_ops']}"
                + (f", problems: {r['fails']}" if r["fails"] else "")
            )
    big = out.get("big_file")
    if big and "write_s" in big:
        w, r = big["write_s"], big["read_s"]
        size = big["mib"] << 20
        print(f"\nA {big['mib']} MiB file, 1 MiB writes + fsync, then read after a remount\n")
        print("| measure | native | contextfs | contextfs / native speed |")
        print("|---|---:|---:|---:|")
        for name, d in (("write + fsync", w), ("read after remount", r)):
            print(
                f"| {name}, MB/s | {size / d['native'] / 1e6:.0f} | "
                f"{size / d['contextfs'] / 1e6:.1f} | {d['native'] / d['contextfs']:.3f} |"
            )
        print(
            f"\ndaemon RSS: idle {big['rss_idle'] / 2**20:.0f} MiB, peak during the write "
            f"{big['rss_peak'] / 2**20:.0f} MiB (+{(big['rss_peak'] - big['rss_idle']) / 2**20:.0f}"
            f" MiB); during the read after the remount: idle {big['rss_read_idle'] / 2**20:.0f}"
            f" MiB, peak {big['rss_read_peak'] / 2**20:.0f} MiB"
            f" (+{(big['rss_read_peak'] - big['rss_read_idle']) / 2**20:.0f} MiB)"
            f"; bytes identical: {big['identical']}; read-write after: {big['read_write']}"
        )
    if out["daemon_problems"]:
        print("daemon problems:\n  " + "\n  ".join(out["daemon_problems"]))
    path = write_json(args.json, out)
    print(f"\nJSON: {path}  ({'PASS' if ok else 'FAIL'})")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
