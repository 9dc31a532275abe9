"""Benchmark `contextfs import` and `contextfs export` against copying the same files.

In one run, with fresh mounts (temp mountpoints, temp data dirs, `search: false`):

1. generates a vault of N markdown notes in nested folders (front matter with tags and
   aliases, wikilinks) and imports it into an empty mount with the real CLI: every note
   is routed into an `entity` node. Compared with `cp -r` of the same vault to the local
   disk and into a node of the mount as attachments (plain file writes, no routing);
2. exports that mount (through its files) and, once unmounted, its data dir (offline):
   nodes/s, compared with `cp -r` of the exported tree;
3. imports the export into a second empty mount (each node made again with its facts
   through the mount's `.restore`) and exports that again: byte for byte the first
   export, facts and ids too (docs/agents.md);
4. restores the export into a new data dir (offline import: facts and ids too) and
   exports that: byte for byte the first export.

It prints a markdown table and writes every figure to JSON. Exit status 1 when the round
trip differs or a command fails.

    .venv/bin/python scripts/bench_vault.py            # 1000 notes
    .venv/bin/python scripts/bench_vault.py --quick    # 200 notes
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from contextfs.testing import DrainedMount, contextfs_cmd, machine_info, say, write_json


def make_vault(root: Path, n: int) -> None:
    for i in range(n):
        folder = root / f"area-{i % 7}" / f"topic-{i % 13}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"Note {i:05d}.md").write_text(
            f"---\ntags: [vault, t{i % 13}]\naliases: [N{i}]\n---\n# Note {i}\n\n"
            f"Links to [[Note {(i + 1) % n:05d}]]. " + "Some prose about the topic. " * 12 + "\n"
        )


def run(*args: str) -> tuple[float, subprocess.CompletedProcess]:
    t = time.perf_counter()
    r = subprocess.run(contextfs_cmd(*args), capture_output=True, text=True)
    dt = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(f"contextfs {' '.join(args)} failed ({r.returncode}):\n{r.stderr[-2000:]}")
    return dt, r


def cp(src: Path, dst: Path) -> float:
    t = time.perf_counter()
    subprocess.run(["cp", "-r", str(src), str(dst)], check=True)
    return time.perf_counter() - t


def timed(cmd: list[str]) -> float:
    """Seconds a tool took; a tool that fails fails the benchmark (its errors shown)."""
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    took = time.perf_counter() - t
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:2])} exited {r.returncode}: {r.stderr[-2000:]}")
    return took


def node_texts(owner: Path) -> dict[str, bytes]:
    """Each node of an owner in a mount (type dir/name) and its L2, hand-written L0 aside."""
    return {
        f"{td.name}/{node.name}": (node / "L2.md").read_bytes()
        for td in sorted(owner.iterdir())
        if not td.name.startswith(".") and td.is_dir()
        for node in sorted(td.iterdir())
        if (node / "L2.md").exists()
    }


def tree_bytes(tree: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(tree)): p.read_bytes() for p in sorted(tree.rglob("*")) if p.is_file()
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="200 notes instead of 1000")
    p.add_argument("-n", type=int, default=None, help="number of notes")
    p.add_argument("--json", default="bench-results/bench_vault.json")
    args = p.parse_args()
    n = args.n or (200 if args.quick else 1000)
    top = Path(tempfile.mkdtemp(prefix="cfs-bench-vault-"))
    rows: list[tuple[str, float, float, str]] = []
    ok = True
    try:
        vault = top / "vault"
        make_vault(vault, n)
        mounts = []
        for name in ("a", "b"):
            (top / name).mkdir()
            m = DrainedMount(top / name, top / f"data-{name}")
            m.start()
            mounts.append(m)
        a, b = mounts
        say(f"importing {n} notes ...")
        t_import, r = run("import", str(vault), str(a.path), "--json")
        report = json.loads(r.stdout)
        t_native = cp(vault, top / "native-copy")
        rows += [
            ("import a vault (routed, one node per note)", t_import, n / t_import, "notes/s"),
            ("cp -r the vault to local disk", t_native, n / t_native, "files/s"),
        ]
        nodes = report["nodes_after"]
        say(f"exporting {nodes} nodes ...")
        t_export, _ = run("export", str(a.path), str(top / "out1"))
        t_cp_out = cp(top / "out1", top / "out1-copy")
        t_reimport, r2 = run("import", str(top / "out1"), str(b.path), "--json")
        t_export2, _ = run("export", str(b.path), str(top / "out2"))
        a.stop()
        t_offline, _ = run("export", str(top / "data-a"), str(top / "out3"))
        say(f"restoring {nodes} nodes into a new data dir ...")
        t_restore, r3 = run("import", str(top / "out1"), str(top / "data-c"), "--json")
        run("export", str(top / "data-c"), str(top / "out4"))
        rows += [
            ("export through the mount", t_export, nodes / t_export, "nodes/s"),
            ("export of the data dir (offline)", t_offline, nodes / t_offline, "nodes/s"),
            ("cp -r the exported tree", t_cp_out, nodes / t_cp_out, "nodes/s"),
            ("import the export into a mount", t_reimport, nodes / t_reimport, "nodes/s"),
            ("restore the export into a data dir", t_restore, nodes / t_restore, "nodes/s"),
        ]
        same = tree_bytes(top / "out1") == tree_bytes(top / "out2")
        offline_same = tree_bytes(top / "out1") == tree_bytes(top / "out3")
        restored_same = tree_bytes(top / "out1") == tree_bytes(top / "out4")
        ok = (
            same
            and offline_same
            and restored_same
            and not report["refused"]
            and not json.loads(r2.stdout)["refused"]
            and not json.loads(r3.stdout)["refused"]
        )
        # the export copied into a mount with ordinary tools, beside the same to local disk
        say(f"copying the export of {nodes} nodes in with rsync -a and tar x ...")
        src = top / "out1/user/default"
        subprocess.run(["tar", "-C", str(src), "-cf", str(top / "export.tar"), "."], check=True)
        copies = {}
        for tool in ("rsync", "tar"):
            for side, dest in (("local disk", top / f"{tool}-native"), ("a mount", b.path)):
                where = dest / "user" / f"{tool}-copy" if side == "a mount" else dest
                where.mkdir(parents=True)
                cmd = (
                    ["rsync", "-a", f"{src}/", f"{where}/"]
                    if tool == "rsync"
                    else ["tar", "-C", str(where), "-xf", str(top / "export.tar")]
                )
                secs = timed(cmd)
                verb = "rsync -a" if tool == "rsync" else "tar x"
                rows.append((f"{verb} the export into {side}", secs, nodes / secs, "nodes/s"))
            copies[tool] = node_texts(b.path / "user" / f"{tool}-copy")
        imported = node_texts(b.path / "user/default")
        copied_same = all(c == imported for c in copies.values()) and len(imported) == nodes
        ok = ok and copied_same
        # the same files written as plain attachments of one node: no routing, no summary
        (b.path / "user/default/preferences/copy").mkdir()
        t_attach = cp(vault, b.path / "user/default/preferences/copy/vault")
        rows.insert(
            2, ("cp -r the vault into a node (attachments)", t_attach, n / t_attach, "files/s")
        )
        b.stop()
        del t_export2
    finally:
        for m in locals().get("mounts", []):
            if m.proc is not None:
                m.stop()
        shutil.rmtree(top, ignore_errors=True)

    print(f"\n## contextfs import/export, {n} notes ({os.cpu_count()} CPUs)\n")
    print("| step | seconds | rate | unit | vs cp -r to local disk |")
    print("|---|---:|---:|---|---:|")
    base = {"notes/s": rows[1][2], "files/s": rows[1][2], "nodes/s": rows[5][2]}  # cp -r
    for step, secs, rate, unit in rows:
        print(f"| {step} | {secs:.2f} | {rate:.0f} | {unit} | {rate / base[unit]:.3f}× |")
    print(
        f"\nround trip export → import into a mount → export byte for byte, facts and ids too: "
        f"{same}; offline export = mount "
        f"export: {offline_same}; export → restore into a data dir → export byte for byte, "
        f"facts and ids too: {restored_same}; rsync -a and tar x of the export into a mount "
        f"give every node its L2: {copied_same}"
    )
    doc = {
        "machine": machine_info(),
        "notes": n,
        "rows": [{"step": s, "seconds": t, "rate": r, "unit": u} for s, t, r, u in rows],
        "round_trip_same": same,
        "offline_export_same": offline_same,
        "restore_same_bytes": restored_same,
        "tools_copy_same": copied_same,
    }
    say(f"wrote {write_json(args.json, doc)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
