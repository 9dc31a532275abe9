"""Extraction quality: the RuleExtractor over the transcript corpus, precision and recall.

Each transcript under tests/corpus/transcripts/ (any file but *.expected.yaml) has a
<name>.expected.yaml listing the memories a careful reader would take from it:

    today: 2026-05-04          # optional reference day for "yesterday" etc.
    memories:
      - {type: preference, keys: {topic: editor}, phrase: vim}

A candidate matches an expected memory when the type is the same, every listed key field
matches (same slug, or all expected words present with at most 4 extra: see
`contextfs.conversations.scoring.key_matches`) and the phrase occurs in the candidate's field
values (case-insensitive). Matching is one-to-one. Prints a table per type, overall and per
split, and writes bench-results/extraction_quality.json. `split: heldout` marks transcripts
written after the rules were last tuned (never tuned on); the rest ("tuned") were used
while writing the rules, so their numbers are optimistic.

    .venv/bin/python scripts/extraction_quality.py [--verbose]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from contextfs.conversations.extract import Candidate, RuleExtractor
from contextfs.conversations.scoring import Expected, Score, score_candidates
from contextfs.conversations.transcript import parse_transcript
from contextfs.ctxtypes import builtin_schema_dir, load_types
from contextfs.testing import write_json

REPO = Path(__file__).resolve().parent.parent

CORPUS = REPO / "tests" / "corpus" / "transcripts"
OUT = REPO / "bench-results" / "extraction_quality.json"


def load_corpus(corpus: Path = CORPUS) -> list[tuple[Path, dict]]:
    """(transcript path, expected document) for every transcript, sorted by name."""
    out = []
    for path in sorted(corpus.iterdir()):
        if path.name.endswith(".expected.yaml") or not path.is_file():
            continue
        expected_path = path.with_name(path.name.rsplit(".", 1)[0] + ".expected.yaml")
        doc = yaml.safe_load(expected_path.read_text()) or {}
        out.append((path, doc))
    return out


def run_corpus(corpus: Path = CORPUS) -> dict:
    """Extract from every transcript and score; the report as a JSON-able dict."""
    types = load_types([builtin_schema_dir()])
    extractor = RuleExtractor()
    pairs: list[tuple[list[Candidate], list[Expected]]] = []
    splits: dict[str, list[tuple[list[Candidate], list[Expected]]]] = {}
    files = []
    for path, doc in load_corpus(corpus):
        transcript = parse_transcript(path.read_text(), path.name)
        today = doc.get("today")
        cands = extractor.extract(
            transcript.turns, types, today=str(today) if today is not None else None
        )
        expected = [
            Expected(m["type"], dict(m.get("keys") or {}), str(m.get("phrase", "")))
            for m in doc.get("memories") or []
        ]
        pairs.append((cands, expected))
        split = str(doc.get("split", "tuned"))
        splits.setdefault(split, []).append((cands, expected))
        files.append(
            {
                "file": path.name,
                "split": split,
                "kind": transcript.kind,
                "turns": len(transcript.turns),
                "malformed_lines": [line for line, _ in transcript.errors],
                "candidates": len(cands),
                "expected": len(expected),
            }
        )
    per, total, notes = score_candidates(pairs)
    names = [f["file"] for f in files]
    notes = [_name_note(n, names) for n in notes]

    def row(s: Score) -> dict:
        return {"tp": s.tp, "fp": s.fp, "fn": s.fn,
                "precision": round(s.precision, 3), "recall": round(s.recall, 3)}  # fmt: skip

    return {
        "extractor": "RuleExtractor",
        "transcripts": len(files),
        "per_type": {t: row(s) for t, s in sorted(per.items())},
        "overall": row(total),
        "per_split": {name: row(score_candidates(p)[1]) for name, p in sorted(splits.items())},
        "files": files,
        "notes": notes,
    }


def _name_note(note: str, names: list[str]) -> str:
    head, _, rest = note.partition(" ")
    return f"{names[int(head[1:])]}: {rest}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--verbose", action="store_true", help="list every miss and false hit")
    args = parser.parse_args()
    report = run_corpus()
    print(f"RuleExtractor on {report['transcripts']} transcripts ({CORPUS.relative_to(REPO)})")
    print(f"{'type':<12} {'tp':>4} {'fp':>4} {'fn':>4} {'precision':>10} {'recall':>8}")
    for name, r in [*report["per_type"].items(), ("overall", report["overall"])]:
        print(f"{name:<12} {r['tp']:>4} {r['fp']:>4} {r['fn']:>4} "
              f"{r['precision']:>10.2f} {r['recall']:>8.2f}")  # fmt: skip
    for name, r in report["per_split"].items():
        print(f"split {name:<6} {r['tp']:>4} {r['fp']:>4} {r['fn']:>4} "
              f"{r['precision']:>10.2f} {r['recall']:>8.2f}")  # fmt: skip
    if args.verbose:
        print()
        for note in report["notes"]:
            print(note)
    write_json(OUT, report)
    print(f"wrote {OUT.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
