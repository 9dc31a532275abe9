"""The progress line of the offline commands (`contextfs consolidate`, `reindex`, …): its
rate is what a user can believe."""

from __future__ import annotations

import time

from contextfs.cli import _progress_bar


def test_a_stage_that_reports_much_done_at_once_shows_no_impossible_rate(capsys) -> None:
    """A stage whose first report says 10,000 done (the work ran before the first call)
    showed `904404157.2/s`; the rate now counts from the first report, shown once half a
    second has passed."""
    show = _progress_bar("consolidate (nodes)", time.monotonic(), "nodes")
    show(10_000, 11_009)
    first = capsys.readouterr().err
    assert "10000/11009 nodes" in first and "/s" not in first, first
    time.sleep(0.6)
    show(11_009, 11_009)
    line = capsys.readouterr().err
    rate = float(line.rsplit("  ", 1)[1].split("/s")[0])
    assert 0 < rate < 1_009 / 0.6 + 1, line


def test_a_rate_from_zero_counts_from_the_start(capsys) -> None:
    t0 = time.monotonic()
    show = _progress_bar("reindex", t0)
    show(0, 100)
    time.sleep(0.6)
    show(60, 100)
    line = capsys.readouterr().err.rsplit("\r", 1)[1]
    rate = float(line.rsplit("  ", 1)[1].split("/s")[0])
    assert 60 / (time.monotonic() - t0) <= rate <= 60 / 0.6, line
