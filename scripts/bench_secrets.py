"""Benchmark secret redaction on the labelled corpus: recall and false positives.

Scores each detector on `tests/corpus/secrets/` (format and rules in its README.md):

- `contextfs`: the redactor of this checkout (`memory.redact.Redactor`, built-in table);
- `contextfs + model`: the same with its learned layer on (`Redactor(model=True)`, config
  key `secret_model`; docs/secrets.md);
- `contextfs@REV`: the redactor of an earlier commit (`--baseline REV`, default the commit
  before the work on issue 11's secrets item): its `contextfs/` is exported with
  `git archive` to a temp dir and run in a child process, so "before" is measured by the
  same corpus and the same scoring;
- `detect-secrets`: Yelp's detect-secrets with its default plugins and filters, each item
  scanned as a `.txt` file, when the package is importable (it is not a dependency; to
  measure it: `pip install --target /tmp/ds detect-secrets` and add `/tmp/ds` to
  PYTHONPATH);
- `contextfs + detect-secrets`: the union of both, what adopting the library on top of
  the table would give.

It prints a markdown table (recall, partly caught, false-positive items, strays, time per
item), the parts apart (the corpus the detectors were built with, `holdout`, and the
natural-language phrasings: `natural_dev`, tuned on, and `natural_holdout`, never tuned
on), recall per corpus file, the items each detector missed or touched, and the
redactions each makes in the prose the project ships (docs, conversations, text corpora:
none holds a secret), per file and per item (a conversation turn, a transcript line, a
paragraph), with the redactor's speed on it; and writes everything to JSON. Exit status 0.

    .venv/bin/python scripts/bench_secrets.py                  # all detectors, timed 5x
    .venv/bin/python scripts/bench_secrets.py --quick          # one pass, no baseline
    .venv/bin/python scripts/bench_secrets.py --baseline HEAD~3 --json /tmp/s.json
    .venv/bin/python scripts/bench_secrets.py --quick --library HEAD~1   # the wider check
    .venv/bin/python scripts/bench_secrets.py --quick --library HEAD~1 --library-part 0/3

`--library REV` also runs this checkout's redactor and REV's over text nobody wrote as a
secret corpus: the `.py`, `.md`, `.rst` and `.txt` files under 200 KB of the Python
standard library, the installed packages and `/usr/share/doc` (about 40,000 files, a few
minutes), each in a child process of its own side by side, and prints how many
redactions each makes there and every value one takes and the other does not.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from contextfs.memory.redact import Redactor
from contextfs.testing import machine_info, write_json
from contextfs.testing.secret_corpus import (
    Item,
    Score,
    Span,
    load,
    prose_items,
    repo_text,
    score,
)

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "corpus" / "secrets"
BASELINE = "292f209"  # main before the work on "secrets in every field" (issue 11)

Detector = tuple[Callable[[str], list[Span]], Callable[[str], str]]

# Run by the child process of a baseline: texts in on stdin, spans and redacted text out.
_CHILD = """
import json, sys
from contextfs.memory.redact import Redactor
r = Redactor()
texts, names = json.load(sys.stdin)
named = getattr(r, "redact_name", None)  # before issue 11, names were stored as given
out = []
for t in texts:
    if t in names and named is None:
        out.append([[], t])
        continue
    res = named(t) if t in names else r.redact(t)
    out.append([[[x.start, x.end] for x in res.redactions], res.text])
json.dump(out, sys.stdout)
"""


def ours(names: set[str], model: bool = False) -> Detector:
    """This checkout's redactor: `redact_name` for the texts of names.txt (as the mount
    checks a name), `redact` for content; `model`: with its learned layer."""
    r = Redactor(model=model)

    def run(t: str):
        return r.redact_name(t) if t in names else r.redact(t)

    return (lambda t: [(x.start, x.end) for x in run(t).redactions]), (lambda t: run(t).text)


def _replace(text: str, spans: list[Span]) -> str:
    out, pos = [], 0
    for s, e in sorted(spans):
        if s < pos:
            s = pos
        out += [text[pos:s], "[REDACTED]"]
        pos = max(pos, e)
    return "".join(out) + text[pos:]


def baseline(rev: str, items: list[Item], extra: list[str]) -> Detector:
    """The redactor of commit `rev`, run in a child process over every text it needs."""
    tmp = _export(rev)
    env = dict(os.environ, PYTHONPATH=str(tmp))
    names = {it.text for it in items if it.group == "names"}  # scanned as a name is

    def run(texts: list[str]) -> dict[str, tuple[list[Span], str]]:
        done = subprocess.run(
            [sys.executable, "-c", _CHILD],
            input=json.dumps([texts, sorted(names)]),
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp,  # not this checkout: `-c` puts the working directory first on sys.path
            check=True,
        )
        return {
            t: ([tuple(s) for s in spans], red)
            for t, (spans, red) in zip(texts, json.loads(done.stdout), strict=True)
        }

    firsts = [it.text[: it.split] for it in items if it.split]
    seen = run([it.text for it in items] + firsts + extra)
    second = [seen[it.text[: it.split]][1] + it.text[it.split :] for it in items if it.split]
    seen.update(run(second))
    return (lambda t: seen[t][0]), (lambda t: seen[t][1])


# Run by the child processes of `--library`: file paths in on stdin, the values redacted
# in each out, as [path, value] pairs.
_LIBRARY_CHILD = """
import json, sys
from contextfs.memory.redact import Redactor
r = Redactor()
out = []
for path in json.load(sys.stdin):
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError):
        continue
    out += [[path, text[x.start:x.end]] for x in r.redact(text).redactions]
json.dump(out, sys.stdout)
"""
LIBRARY_SUFFIXES = (".py", ".md", ".rst", ".txt")
LIBRARY_MAX_BYTES = 200_000


def library_files() -> list[str]:
    """The text files of the wider check (see the module's docstring), sorted."""
    import sysconfig

    roots = {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"], "/usr/share/doc"}
    out = set()
    for root in roots:
        for folder, _dirs, files in os.walk(root):
            for f in files:
                path = os.path.join(folder, f)
                if f.endswith(LIBRARY_SUFFIXES) and not os.path.islink(path):
                    try:
                        if os.path.getsize(path) < LIBRARY_MAX_BYTES:
                            out.add(path)
                    except OSError:
                        continue
    return sorted(out)


def _export(rev: str) -> Path:
    """`contextfs/` of commit rev, in a temp dir of its own."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-secrets-"))
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev, "contextfs"], check=True, capture_output=True
    ).stdout
    tar = tmp / "src.tar"
    tar.write_bytes(archive)
    with tarfile.open(tar) as tf:
        tf.extractall(tmp, filter="data")
    return tmp


def library_check(rev: str, part: tuple[int, int] = (0, 1)) -> dict[str, object]:
    """This checkout's and rev's redactions over the library files, side by side (every
    `part[1]`-th file from the `part[0]`-th: a slice of them on a busy machine)."""
    files = library_files()[part[0] :: part[1]]
    print(
        f"\nthe wider check: {len(files)} files of the standard library, the packages and "
        f"/usr/share/doc, this checkout beside {rev} (a few minutes) ...",
        flush=True,
    )
    procs = {}
    for name, src in (("contextfs", REPO), (f"contextfs@{rev}", _export(rev))):
        procs[name] = subprocess.Popen(
            [sys.executable, "-c", _LIBRARY_CHILD],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=dict(os.environ, PYTHONPATH=str(src)),
            cwd=src,
        )
    found = {}
    for name, proc in procs.items():
        out, _ = proc.communicate(json.dumps(files))
        found[name] = [tuple(pair) for pair in json.loads(out)]
    ours_, theirs = Counter(found["contextfs"]), Counter(found[f"contextfs@{rev}"])
    more, fewer = sorted((ours_ - theirs).elements()), sorted((theirs - ours_).elements())
    print(f"\n| detector | redactions in {len(files)} files |\n|---|---|")
    for name, pairs in found.items():
        print(f"| {name} | {len(pairs)} |")
    for title, pairs in (("only this checkout", more), (f"only {rev}", fewer)):
        print(f"\n{title} ({len(pairs)}):")
        for path, value in pairs:
            print(f"  {value!r} in {path}")
    return {
        "files": len(files),
        "redactions": {name: len(pairs) for name, pairs in found.items()},
        "only_this_checkout": more,
        "only_baseline": fewer,
    }


def detect_secrets() -> Detector | None:
    try:
        from detect_secrets import SecretsCollection
        from detect_secrets.settings import default_settings
    except ImportError:
        return None
    folder = Path(tempfile.mkdtemp(prefix="bench-ds-"))

    def spans(text: str) -> list[Span]:
        path = folder / "item.txt"
        path.write_text(text + "\n", encoding="utf-8")
        found: list[Span] = []
        with default_settings():
            coll = SecretsCollection()
            coll.scan_file(str(path))
            values = {s.secret_value for _, s in coll if s.secret_value}
        for v in values:
            start = text.find(v)
            while start >= 0:
                found.append((start, start + len(v)))
                start = text.find(v, start + 1)
        return found

    return spans, (lambda t: _replace(t, spans(t)))


def union(a: Detector, b: Detector) -> Detector:
    """Both detectors' spans; stored text: `a`'s redaction, then `b`'s on what is left."""

    def spans(t: str) -> list[Span]:
        return a[0](t) + b[0](t)

    def redact(t: str) -> str:
        t = a[1](t)
        return _replace(t, b[0](t))

    return spans, redact


# The parts of the corpus reported apart: (title, the files in it; None: all the others).
PARTS: tuple[tuple[str, tuple[str, ...] | None], ...] = (
    ("built with", None),
    ("holdout", ("holdout",)),
    ("natural dev", ("natural_dev",)),
    ("natural held-out", ("natural_holdout",)),
)
HELD_APART = ("holdout", "natural_dev", "natural_holdout")


def measure(det: Detector, items: list[Item], repeat: int) -> tuple[Score, float]:
    best = float("inf")
    result = Score()
    for _ in range(repeat):
        t = time.perf_counter()
        result = score(items, det[0], det[1])
        best = min(best, time.perf_counter() - t)
    return result, best / max(1, len(items)) * 1e6


def prose_touched(det: Detector, pieces: list[tuple[str, str]], repeat: int) -> tuple[int, float]:
    """How many prose items the detector redacts anything in, and its µs per item (the
    best of `repeat` passes; nan for a baseline, answered from its child's results)."""
    best, touched = float("inf"), 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        touched = sum(1 for _, t in pieces if det[0](t))
        best = min(best, time.perf_counter() - t0)
    return touched, best / max(1, len(pieces)) * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one pass, no baseline")
    ap.add_argument("--baseline", default=BASELINE, help="commit to compare with ('' = none)")
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    ap.add_argument("--json", type=Path, default=REPO / "bench-results" / "bench_secrets.json")
    ap.add_argument("--library", metavar="REV", help="the wider check, beside commit REV")
    ap.add_argument(
        "--library-part",
        metavar="K/N",
        default="0/1",
        help="the wider check on every N-th file from the K-th (default: all)",
    )
    args = ap.parse_args()
    items = load(args.corpus)
    repeat = 1 if args.quick else 5
    detectors: list[tuple[str, Detector]] = []
    if args.baseline and not args.quick:
        texts = repo_text(REPO)
        extra = [t for _, t in texts] + [t for _, t in prose_items(texts)]
        detectors.append((f"contextfs@{args.baseline}", baseline(args.baseline, items, extra)))
    names = {it.text for it in items if it.group == "names"}
    detectors.append(("contextfs", ours(names)))
    detectors.append(("contextfs + model", ours(names, model=True)))
    ds = None if args.quick else detect_secrets()
    if ds is not None:
        detectors += [
            ("detect-secrets", ds),
            ("contextfs + detect-secrets", union(ours(names), ds)),
        ]
    groups = sorted({it.group for it in items})
    rows = []
    for name, det in detectors:
        total, us = measure(det, items, repeat)
        if name.startswith("contextfs@"):
            us = float("nan")  # answered from the child's results: not a timing
        per_group = {g: score([i for i in items if i.group == g], *det) for g in groups}
        rows.append((name, total, us, per_group))
    pos = sum(1 for it in items if it.positive)
    print(f"corpus: {len(items)} items ({pos} with secrets, {len(items) - pos} without)\n")
    print("| detector | recall | caught / secrets | partly | false positives | strays | µs/item |")
    print("|---|---|---|---|---|---|---|")
    for name, s, us, _ in rows:
        print(
            f"| {name} | {s.recall:.1%} | {s.caught} / {s.secrets} | {s.partly} | "
            f"{s.false_positives} / {s.negatives} ({s.fp_rate:.1%}) | {s.strays} | {us:.0f} |"
        )
    texts = repo_text(REPO)
    pieces = prose_items(texts)
    on_prose = {name: prose_touched(det, pieces, repeat) for name, det in detectors}
    print(
        "\nthe corpus the detectors were built with, the holdout written after them, and the"
        " natural-language phrasings (dev: tuned on; held-out: written first, never tuned on):"
        " recall, then false positives on the `-` items; then the items of the project's prose"
        " touched (none holds a secret) and the time per prose item:\n"
    )
    print("| detector | " + " | ".join(title for title, _ in PARTS) + " | prose | µs/item |")
    print("|---|" + "---|" * (len(PARTS) + 2))
    for name, _, _, per in rows:
        cells = []
        for _, files in PARTS:
            part = Score()
            for g, v in per.items():
                if (g in files) if files else (g not in HELD_APART):
                    part.secrets, part.caught = part.secrets + v.secrets, part.caught + v.caught
                    part.negatives += v.negatives
                    part.false_positives += v.false_positives
            cells.append(
                f"{part.caught}/{part.secrets} ({part.recall:.1%}) · "
                f"{part.false_positives}/{part.negatives}"
            )
        touched, us = on_prose[name]
        if name.startswith("contextfs@"):
            us = float("nan")  # answered from the child's results: not a timing
        cells += [f"{touched}/{len(pieces)} ({touched / max(1, len(pieces)):.2%})", f"{us:.0f}"]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print("\nrecall (false positives) per corpus file:\n")
    print("| file | " + " | ".join(name for name, *_ in rows) + " |")
    print("|---|" + "---|" * len(rows))
    for g in groups:
        cells = []
        for *_, per in rows:
            s = per[g]
            cell = f"{s.caught}/{s.secrets}" if s.secrets else "–"
            cells.append(cell + (f" ({s.false_positives}/{s.negatives})" if s.negatives else ""))
        print(f"| {g} | " + " | ".join(cells) + " |")
    for name, s, *_ in rows:
        print(f"\n{name}: missed {', '.join(s.missed) or 'none'}")
        print(f"{name}: touched {', '.join(s.touched) or 'none'}")
    size = sum(len(t) for _, t in texts)
    print(
        f"\nredactions in the project's own prose ({len(texts)} files, {size // 1000} kB; "
        f"{len(pieces)} items: conversation turns, transcript lines, paragraphs):\n"
    )
    print("| detector | redactions | files touched | items touched | where | MB/s |")
    print("|---|---|---|---|---|---|")
    repo_hits = {}
    prose_fp = {}
    for name, det in detectors:
        best = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            hits = [(rel, t[s:e]) for rel, t in texts for s, e in det[0](t)]
            best = min(best, time.perf_counter() - t0)
        mbs = float("nan") if name.startswith("contextfs@") else size / best / 1e6
        repo_hits[name] = [rel for rel, _ in hits]
        touched = on_prose[name][0]
        files = len({rel for rel, _ in hits})
        prose_fp[name] = {"items": len(pieces), "touched": touched, "mb_per_s": round(mbs, 2)}
        where = ", ".join(sorted({rel for rel, _ in hits})[:6]) or "–"
        print(
            f"| {name} | {len(hits)} | {files} / {len(texts)} | {touched} / {len(pieces)} "
            f"({touched / max(1, len(pieces)):.2%}) | {where} | {mbs:.1f} |"
        )
    doc = {
        "machine": machine_info(REPO),
        "corpus": {"items": len(items), "with_secrets": pos},
        "repo_text": {
            "files": len(texts),
            "chars": size,
            "hits": repo_hits,
            "items": prose_fp,
        },
        "detectors": {
            name: {
                **s.as_dict(),
                "us_per_item": round(us, 1),
                "groups": {g: v.as_dict() for g, v in per.items()},
            }
            for name, s, us, per in rows
        },
    }
    if args.library:
        k, n = (int(x) for x in args.library_part.split("/"))
        doc["library"] = library_check(args.library, (k, n))
    print(f"\nwrote {write_json(args.json, doc)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
