"""scripts/bench_recall.py --quick runs end to end and writes sane JSON.

The script mounts its own store, hands the first sessions of one generated conversation to
the inbox, asks ten labelled questions through `.query` and through the in-process
baselines, and writes every number to JSON. Recall itself is not asserted (it is what the
benchmark measures); that the run completes and the numbers are well-formed is.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_script

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_bench_recall_quick(tmp_path):
    out = tmp_path / "bench_recall.json"
    p = run_script("bench_recall.py", "--quick", "--json", str(out), timeout=580)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert out.exists(), p.stderr[-3000:]
    rep = json.loads(out.read_text())
    assert rep["error"] is None, rep["error"]
    assert rep["problems"] == [], rep["problems"]
    assert rep["ingest"] and all(i["turns"] > 0 for i in rep["ingest"])

    records = rep["records"]
    systems = {r["system"] for r in records}
    assert {"contextfs", "raw"} <= systems, systems
    questions = {r["id"] for r in records}
    assert 5 <= len(questions) <= 10, questions
    for r in records:
        assert r["budget"] == 1000
        if r["system"] != "contextfs":  # the baselines pack within the budget by construction
            assert r["tokens"] <= 1000, r
        assert r["seconds"] >= 0
        if r["kind"] in ("unanswerable", "off-topic"):  # nothing to find
            assert r["coverage"] is None and r["answer_in"] is None
        else:
            assert 0.0 <= r["coverage"] <= 1.0, r
            assert isinstance(r["answer_in"], bool), r
    # every question has one record per system, and ContextFS returned a bundle for each
    for system in systems:
        assert {r["id"] for r in records if r["system"] == system} == questions
    assert all(r["tokens"] > 0 for r in records if r["system"] == "contextfs")

    for row in rep["summary"]:
        for key in ("coverage", "full_coverage", "answer_in", "budget_share", "short"):
            assert row[key] is None or 0.0 <= row[key] <= 1.0, row
    assert any(
        row["kind"] == "all answerable" and row["system"] == "contextfs" for row in rep["summary"]
    )
    # the off-topic questions are asked, and ContextFS says whether each was relevant
    off = [r for r in records if r["kind"] == "off-topic" and r["system"] == "contextfs"]
    assert off and all(r["relevant"] in (True, False) for r in off), off
    lat = {row["budget"]: row for row in rep["latency"]}
    assert lat["all"]["contextfs_p50_ms"] > 0 and lat["all"]["raw_p50_ms"] > 0
    assert "## Recall" in p.stdout
