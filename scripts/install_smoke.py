"""Install ContextFS as a user would (a wheel into a clean venv) and use it through a mount.

What a `pip install .`, `pipx` or `pip --user` user gets is the wheel, not this checkout:
package data must be in it and found from site-packages. This script builds the wheel,
installs it into a new venv made by the machine's `python3` (with the CPU torch pin, as
docs/operations.md#installing says), and from a folder outside the checkout, with an empty
HOME, runs:

- `contextfs --version` and `contextfs mount MNT` on the embedded defaults;
- `.status` lists every built-in type; `ls user/default` shows their folders;
- a node written with `mkdir` + `echo > L2.md`, then found by `.query/<question>/`;
- `contextfs demo` writes the README's sample conversation; dropped into `.inbox/`, its
  report says `done`;
- `contextfs umount MNT` exits 0 and the daemon has closed the store.

Prints a table of the steps with their times and writes JSON (`--json`). Exit 1 on any
failure. CI runs it after the tests (.ci/run); about 2-3 minutes, most of it pip.

Usage: python scripts/install_smoke.py [--keep DIR] [--json PATH] [--python python3]
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
import zipfile
from pathlib import Path

from contextfs.testing.report import disk_usage

ROOT = Path(__file__).resolve().parent.parent
TORCH_PIN = "torch==2.13.0"  # the CPU build (docs/operations.md#installing)
BUILTIN_TYPES = ("profile", "preference", "entity", "event", "case", "pattern", "skill", "tool")


class Smoke:
    def __init__(self, work: Path, python: str) -> None:
        self.work = work
        self.python = python
        self.rows: list[dict] = []
        self.home = work / "home"
        self.home.mkdir(parents=True, exist_ok=True)
        self.venv = work / "venv"
        self.mnt = self.home / "memory"
        # a user's environment: an empty HOME, no XDG overrides, no PYTHONPATH, and a
        # working directory outside the checkout (`python -m` would import from the cwd)
        self.env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("XDG_", "PYTHON", "CONTEXTFS_", "VIRTUAL_ENV"))
        }
        self.env["HOME"] = str(self.home)
        self.env["PATH"] = f"{self.venv / 'bin'}:{self.env.get('PATH', '/usr/bin:/bin')}"

    def step(self, name: str, fn) -> object:  # noqa: ANN001
        started = time.monotonic()
        try:
            result = fn()
        except Exception as exc:
            self.rows.append(
                {"step": name, "ok": False, "seconds": _since(started), "detail": str(exc)[-2000:]}
            )
            raise
        detail = result if isinstance(result, str) else ""
        self.rows.append({"step": name, "ok": True, "seconds": _since(started), "detail": detail})
        return result

    def run(self, *cmd: str, timeout: float = 900, check: bool = True, cwd: Path | None = None):
        res = subprocess.run(
            list(cmd),
            cwd=cwd or self.home,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        if check and res.returncode != 0:
            raise RuntimeError(
                f"{' '.join(cmd)} exited {res.returncode}:\n"
                f"{res.stdout[-1500:]}{res.stderr[-1500:]}"
            )
        return res

    # the steps

    def build_wheel(self) -> Path:
        dist = self.work / "dist"
        self.run(
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "-q",
            "-w",
            str(dist),
            str(ROOT),
            cwd=self.work,
        )
        wheel = next(dist.glob("contextfs-*.whl"))
        names = zipfile.ZipFile(wheel).namelist()
        for t in BUILTIN_TYPES:
            if f"contextfs/builtin_schemas/{t}.yaml" not in names:
                raise RuntimeError(f"{wheel.name} lacks contextfs/builtin_schemas/{t}.yaml")
        if "contextfs/samples/chat.jsonl" not in names:
            raise RuntimeError(f"{wheel.name} lacks the sample conversation")
        return wheel

    def install(self, wheel: Path) -> str:
        self.run(self.python, "-m", "venv", str(self.venv))
        pip = str(self.venv / "bin" / "pip")
        self.run(pip, "install", "-q", "--disable-pip-version-check", str(wheel), TORCH_PIN)
        where = self.run(
            str(self.venv / "bin" / "python"), "-c", "import contextfs; print(contextfs.__file__)"
        ).stdout.strip()
        if not where.startswith(str(self.venv)):
            raise RuntimeError(f"contextfs imported from {where}, not from the venv")
        return f"{disk_usage(self.venv) / 2**20:,.0f} MiB venv"

    def mount(self) -> str:
        self.mnt.mkdir()
        version = self.run("contextfs", "--version").stdout.strip()
        self.run("contextfs", "mount", str(self.mnt), timeout=120)
        return version

    def types(self) -> str:
        status = (self.mnt / ".status").read_text()
        line = next((ln for ln in status.splitlines() if ln.startswith("types:")), "")
        missing = [t for t in BUILTIN_TYPES if t not in line]
        if missing:
            raise RuntimeError(f".status lacks types {missing}: {line!r}")
        folders = sorted(os.listdir(self.mnt / "user" / "default"))
        for d in ("preferences", "entities", "events", "profile"):
            if d not in folders:
                raise RuntimeError(f"ls user/default lacks {d}: {folders}")
        return " ".join(folders)

    def write_and_ask(self) -> str:
        node = self.mnt / "user" / "default" / "preferences" / "editor"
        node.mkdir()
        (node / "L2.md").write_text("She prefers vim with relative line numbers.\n")
        answer = ""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            answer = (
                self.mnt / ".query" / "what editor does she prefer" / "_context.md"
            ).read_text()
            if "relative line numbers" in answer:
                return "found by .query"
            time.sleep(0.5)
        raise RuntimeError(f"the node was not found by .query: {answer[:500]!r}")

    def inbox(self) -> str:
        sample = self.home / "chat.jsonl"
        self.run("contextfs", "demo", str(sample))
        shutil.copyfile(sample, self.mnt / ".inbox" / "chat.jsonl")
        report = self.mnt / ".inbox" / "chat.jsonl.report.md"
        text = ""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            text = report.read_text()
            if "state: done" in text:
                if "sk-live" in text:
                    raise RuntimeError("the sample's key is in the report unredacted")
                return "report: done"
            time.sleep(0.5)
        raise RuntimeError(f"the inbox report is not done: {text[:500]!r}")

    def umount(self) -> str:
        self.run("contextfs", "umount", str(self.mnt), timeout=120)
        if os.path.ismount(self.mnt):
            raise RuntimeError(f"{self.mnt} is still mounted")
        return "exit 0"


def _since(t: float) -> float:
    return round(time.monotonic() - t, 2)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--python",
        default=shutil.which("python3") or sys.executable,
        help="the interpreter that makes the clean venv (default: python3)",
    )
    ap.add_argument("--keep", type=Path, default=None, help="work here and keep it")
    ap.add_argument("--json", type=Path, default=ROOT / "bench-results" / "install_smoke.json")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="contextfs-install-"))
    smoke = Smoke(work, args.python)
    ok = True
    try:
        wheel = smoke.step("build the wheel", smoke.build_wheel)
        smoke.step("pip install the wheel into a clean venv", lambda: smoke.install(wheel))
        smoke.step("contextfs mount (empty HOME, default data dir)", smoke.mount)
        smoke.step("built-in types in .status and user/default", smoke.types)
        smoke.step("write a node, answer a question", smoke.write_and_ask)
        smoke.step("the sample conversation through .inbox/", smoke.inbox)
        smoke.step("contextfs umount", smoke.umount)
    except Exception:  # noqa: BLE001 - the table says which step failed and why
        ok = False
    finally:
        if os.path.ismount(smoke.mnt):
            subprocess.run(["fusermount3", "-u", "-z", str(smoke.mnt)], capture_output=True)
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"{'step':<50} {'ok':<4} {'s':>7}  detail")
    for r in smoke.rows:
        detail = r["detail"].replace("\n", " | ")[:300]
        print(f"{r['step']:<50} {'yes' if r['ok'] else 'NO':<4} {r['seconds']:>7.1f}  {detail}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"ok": ok, "steps": smoke.rows}, indent=2))
    print(f"install smoke: {'passed' if ok else 'FAILED'} ({args.json})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
