"""Write docs/reliability.md from the reliability campaigns' JSON in bench-results/.

Reads what exists, says "not run" for what does not:

- `stress.json`       scripts/stress.py       (fio, stress-ng, dbench vs native)
- `concurrency.json`  scripts/concurrency.py  (concurrent writers/readers, lost updates)
- `differential.json` differential testing against a reference model:
  {examples, steps, failures, seconds, excluded: [{op, reason}]}
- `differential-disk-full.json` the same with the disk-full step
  (`scripts/campaign_differential.py --disk-full --out ...`), same keys
- `crash.json`        kill -9 (and power-cut) trials:
  {trials, writers, acknowledged, lost, fsck_errors, seconds, power_cut: {run, reason | …}}
- `bad_input.json`    hostile inputs: {cases, passed, failed: [...]}

Only the keys above are relied on; anything else present is ignored or shown as is.

    .venv/bin/python scripts/reliability_report.py [--results DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _load(d: Path, name: str) -> dict | None:
    p = d / name
    if not p.exists():
        return None
    try:
        return json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        return {"_unreadable": str(exc)}


def _n(v) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:,.0f}" if v >= 100 else f"{v:.2f}"
    return str(v)


def _cell(s) -> str:
    return str(s).replace("|", "/").replace("\n", " ")


def _not_run(name: str, d: dict | None) -> list[str] | None:
    if d is None:
        return [f"Not run (no `bench-results/{name}`).", ""]
    if "_unreadable" in d:
        return [f"Not readable: `bench-results/{name}`: {d['_unreadable']}.", ""]
    return None


def summary_table(data: dict[str, dict | None]) -> list[str]:
    out = [
        "| campaign | cases or operations run | passed | failed | excluded | status |",
        "|---|---|---|---|---|---|",
    ]
    s = data["stress.json"]
    if s and "rows" in s:
        rows = s["rows"]
        passed = sum(r["status"] == "PASS" for r in rows)
        failed = sum(r["status"] in ("FAIL", "HANG") for r in rows)
        excl = sum(r["status"] == "EXCLUDED" for r in rows)
        ok = failed == 0 and not s.get("daemon_errors") and not s.get("fsck")
        out.append(
            f"| third-party stress (fio, stress-ng, dbench) | {len(rows)} jobs | {passed} "
            f"| {failed} | {excl} | {'pass' if ok else 'FAIL'} |"
        )
    else:
        out.append("| third-party stress | not run | | | | |")
    c = data["concurrency.json"]
    if c and "writes" in c:
        total = sum(c["writes"].values())
        lost = c.get("lost_total", 0)
        out.append(
            f"| concurrency ({c['writers']} writers) | {total} writes | "
            f"{total - lost if lost <= total else 0} | {lost} lost | 0 | "
            f"{'pass' if c.get('ok') else 'FAIL'} |"
        )
    else:
        out.append("| concurrency | not run | | | | |")
    d = data["differential.json"]
    if d and "examples" in d:
        out.append(
            f"| differential (model vs mount) | {d['examples']} examples, {d.get('steps')} "
            f"steps | {d['examples'] - _count(d.get('failures'))} | "
            f"{_count(d.get('failures'))} | {len(d.get('excluded') or [])} ops | "
            f"{'pass' if not _count(d.get('failures')) else 'FAIL'} |"
        )
    else:
        out.append("| differential | not run | | | | |")
    f = data["differential-disk-full.json"]
    if f and "examples" in f:
        out.append(
            f"| differential with a full disk | {f['examples']} examples, {f.get('steps')} "
            f"steps | {f['examples'] - _count(f.get('failures'))} | "
            f"{_count(f.get('failures'))} | {len(f.get('excluded') or [])} ops | "
            f"{'pass' if not _count(f.get('failures')) else 'FAIL'} |"
        )
    k = data["crash.json"]
    if k and "trials" in k:
        bad = (k.get("lost") or 0) + (k.get("fsck_errors") or 0)
        out.append(
            f"| crash (kill -9) | {k['trials']} trials, {k.get('acknowledged')} "
            f"acknowledged writes | {k['trials'] if not bad else '—'} | {k.get('lost')} "
            f"lost, {k.get('fsck_errors')} fsck | power cut: "
            f"{'run' if (k.get('power_cut') or {}).get('run') else 'not run'} | "
            f"{'pass' if not bad else 'FAIL'} |"
        )
    else:
        out.append("| crash | not run | | | | |")
    b = data["bad_input.json"]
    if b and "cases" in b:
        nf = _count(b.get("failed"))
        out.append(
            f"| bad input | {b['cases']} cases | {b.get('passed')} | {nf} | 0 | "
            f"{'pass' if not nf else 'FAIL'} |"
        )
    else:
        out.append("| bad input | not run | | | | |")
    return out + [""]


def _count(v) -> int:
    if isinstance(v, list):
        return len(v)
    return int(v or 0)


def stress_section(s: dict | None) -> list[str]:
    out = ["## Third-party stress: fio, stress-ng, dbench", ""]
    nr = _not_run("stress.json", s)
    if nr:
        return out + nr
    out += [
        f"`scripts/stress.py{' --quick' if s.get('quick') else ''}`, {s.get('seconds', 0):.0f} s. "
        "Each load ran on a native tmp dir and inside a ContextFS node (attachments; `L2.md` "
        "for the tier jobs). fio verifies with crc32c on attachments and an ASCII pattern on "
        "`L2.md` (tiers must be UTF-8), `direct=1`; the attachment files are verified again "
        "after a remount. Ratio is ContextFS / native (higher is better).",
        "",
        "| tool | job | native | contextfs | ratio | verify errors | status |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in s.get("rows", []):
        ratio = f"{r['ratio']:.2f}×" if r.get("ratio") is not None else "—"
        status = r["status"] + (f" — {r['note']}" if r.get("note") else "")
        out.append(
            f"| {r['tool']} | {_cell(r['job'])} ({r['unit']}) | {_n(r.get('native'))} | "
            f"{_n(r.get('contextfs'))} | {ratio} | {r.get('verify_errors', 0)} | "
            f"{_cell(status)} |"
        )
    out.append("")
    if s.get("excluded"):
        out += ["Excluded (a documented refusal, not a defect):", ""]
        out += [f"- {e['tool']} `{e['job']}`: {_cell(e['reason'])}" for e in s["excluded"]]
        out.append("")
    out.append(f"Refusals listed in `.status` during the run: {s.get('refusal_count', 0)}.")
    for ln in (s.get("refusals") or [])[:5]:
        out.append(f"    {ln[:160]}")
    out += [
        "",
        f"Daemon errors (log and stderr): {len(s.get('daemon_errors') or [])}. "
        f"fsck after unmount: {'clean' if not s.get('fsck') else s['fsck']}.",
        "",
    ]
    for p in s.get("probes") or []:
        out += [
            f"Probe `{p.get('job')}` on a mount of its own: state `{_cell(p.get('state'))}`, "
            f"{len(p.get('daemon_errors') or [])} daemon error lines, "
            f"fsck {'clean' if not p.get('fsck') else p.get('fsck')}.",
            "",
        ]
    return out


def concurrency_section(c: dict | None) -> list[str]:
    out = ["## Concurrency: overlapping writers and readers", ""]
    nr = _not_run("concurrency.json", c)
    if nr:
        return out + nr
    total = sum(c["writes"].values())
    out += [
        f"`scripts/concurrency.py`: {c['writers']} writer threads × {c['writes_per_writer']} "
        f"writes ({total} acknowledged: {c['writes']}) and {c['readers']} readers "
        f"(`ls -R`, `cat`; {c.get('reads', 0)} reads) in {c['seconds']:.1f} s "
        f"({total / c['seconds'] if c['seconds'] else 0:.0f} writes/s). Writes go to 4 "
        "aggregate topics, 4 shared `L2.md` (`>>`) and the event type (one node per write).",
        "",
        "| operation | count | p50 ms | p90 ms | p99 ms | max ms |",
        "|---|---|---|---|---|---|",
    ]
    for k, p in c.get("latency_ms", {}).items():
        if p.get("n"):
            out.append(
                f"| {k} | {p['n']} | {p['p50']:.1f} | {p['p90']:.1f} | {p['p99']:.1f} "
                f"| {p['max']:.1f} |"
            )
    out += ["", "| check | missing |", "|---|---|"]
    for k, v in c.get("lost", {}).items():
        out.append(f"| {k} | {len(v)} |")
    out += [
        "",
        f"Write errors: {len(c.get('write_errors') or [])}; read errors: "
        f"{len(c.get('read_errors') or [])}; daemon errors: "
        f"{len(c.get('daemon_errors') or [])}; fsck: "
        f"{'clean' if not c.get('fsck') else c['fsck']}. Result: "
        f"{'pass' if c.get('ok') else 'FAIL'}.",
        "",
    ]
    return out


def differential_section(d: dict | None, full: dict | None = None) -> list[str]:
    out = ["## Differential testing", ""]
    nr = _not_run("differential.json", d)
    if nr:
        return out + nr
    out += [
        "| run | examples | steps | failures | seconds |",
        "|---|---|---|---|---|",
        f"| on the local disk | {d.get('examples')} | {d.get('steps')} | "
        f"{_count(d.get('failures'))} | {_n(d.get('seconds'))} |",
    ]
    if full and "examples" in full:
        out.append(
            f"| data dir on a 512 MiB tmpfs, with the disk-full step | {full.get('examples')} "
            f"| {full.get('steps')} | {_count(full.get('failures'))} | "
            f"{_n(full.get('seconds'))} |"
        )
    out.append("")
    if isinstance(d.get("failures"), list) and d["failures"]:
        out += ["Failures:", ""] + [f"- {_cell(f)[:300]}" for f in d["failures"][:20]] + [""]
    if d.get("excluded"):
        out += ["| excluded operation | reason |", "|---|---|"]
        out += [f"| {_cell(e.get('op'))} | {_cell(e.get('reason'))} |" for e in d["excluded"]]
        out.append("")
    return out


def crash_section(k: dict | None) -> list[str]:
    out = ["## Crash trials", ""]
    nr = _not_run("crash.json", k)
    if nr:
        return out + nr
    out += [
        "| trials | writers | acknowledged writes | lost | fsck errors | seconds |",
        "|---|---|---|---|---|---|",
        f"| {k.get('trials')} | {k.get('writers')} | {k.get('acknowledged')} | "
        f"{k.get('lost')} | {k.get('fsck_errors')} | {_n(k.get('seconds'))} |",
        "",
    ]
    if k.get("hangs"):
        out += [f"Hangs: {k['hangs']}.", ""]
    if isinstance(k.get("defects"), list) and k["defects"]:
        out += ["Defects reported:", ""] + [f"- {_cell(x)[:400]}" for x in k["defects"]] + [""]
    pc = k.get("power_cut") or {}
    if pc.get("run"):
        figs = ", ".join(f"{a}: {b}" for a, b in pc.items() if a != "run")
        out += [f"Power cut: run — {_cell(figs)}.", ""]
    else:
        out += [f"Power cut: not run — {_cell(pc.get('reason', 'no reason given'))}", ""]
    return out


def bad_input_section(b: dict | None) -> list[str]:
    out = ["## Bad input", ""]
    nr = _not_run("bad_input.json", b)
    if nr:
        return out + nr
    failed = b.get("failed") or []
    out += [
        "| cases | passed | failed |",
        "|---|---|---|",
        f"| {b.get('cases')} | {b.get('passed')} | {_count(failed)} |",
        "",
    ]
    if isinstance(failed, list) and failed:
        out += ["Failed cases:", ""] + [f"- {_cell(f)[:300]}" for f in failed[:30]] + [""]
    return out


FILES = (
    "stress.json",
    "concurrency.json",
    "differential.json",
    "differential-disk-full.json",
    "crash.json",
    "bad_input.json",
)


def render(results: Path) -> str:
    data = {name: _load(results, name) for name in FILES}
    out = [
        "# Reliability",
        "",
        "Generated by `scripts/reliability_report.py` from `bench-results/*.json` "
        f"({dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}); do not edit by hand, "
        "re-run the campaigns and the generator. Figures are from one machine (2 busy "
        "cores); treat ratios as orders of magnitude.",
        "",
        "## Summary",
        "",
        *summary_table(data),
        *stress_section(data["stress.json"]),
        *concurrency_section(data["concurrency.json"]),
        *differential_section(data["differential.json"], data["differential-disk-full.json"]),
        *crash_section(data["crash.json"]),
        *bad_input_section(data["bad_input.json"]),
    ]
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", type=Path, default=REPO / "bench-results")
    ap.add_argument("--out", type=Path, default=REPO / "docs/reliability.md")
    args = ap.parse_args(argv)
    text = render(args.results)
    args.out.write_text(text)
    for name in FILES:
        print(f"{name}: {'read' if (args.results / name).exists() else 'not run'}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
