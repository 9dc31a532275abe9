"""One markdown file of many memories handed to the inbox, through a real mount: it is
filed in steps (its archive, then its memories a batch a transaction), and the mount
serves other writes between them. Filed as one transaction, 1,000 preferences held every
other write of the mount for 7-10 s: a mkdir and an fsync beside it waited for the whole
item. A kill -9 part way leaves a filing the next mount finishes, each memory once."""

from __future__ import annotations

import re
import shutil
import threading
import time
from pathlib import Path

import pytest

from contextfs.testing.mount import Mount, wait_for, write_synced
from tests.fs.test_inbox_steps import notes

N = 600  # lines of notes: a preference and a dated event each, 1,200 memories


def _state(report: Path) -> str:
    try:
        text = report.read_text()
    except OSError:
        return ""
    m = re.search(r"^state: .*$", text, re.M)
    return m.group(0) if m else ""


def _hand_in(mount: Mount, tmp_path: Path) -> Path:
    src = tmp_path / "notes.md"
    src.write_bytes(notes(N))
    shutil.copyfile(src, mount.path / ".inbox" / "notes.md")
    return mount.path / ".inbox" / "notes.md.report.md"


def _filed_once(mount: Mount, report: Path) -> None:
    text = report.read_text()
    assert text.count("- created user/default/preferences/wqz-") == N, text[:2000]
    assert text.count("- created user/default/events/") == N, text[:2000]
    u = mount.path / "user/default"
    prefs = {p.name for p in (u / "preferences").iterdir() if p.name.startswith("wqz-")}
    assert prefs == {f"wqz-{i}" for i in range(N)}
    events = [p.name for p in (u / "events").iterdir()]
    assert len(events) == N and not [e for e in events if e.endswith("-2")], "routed twice"
    assert len(list((u / "sessions").iterdir())) == 1, "archived once"


class Writer(threading.Thread):
    """Beside the item, from before it is handed in: a node made and its file saved
    (mkdir, write, fsync) every 0.1 s, each timed."""

    def __init__(self, mount: Mount) -> None:
        super().__init__(daemon=True)
        self.base, self.took, self.done = mount.path / "user/default/preferences", [], False

    def run(self) -> None:
        i = 0
        while not self.done:
            d = self.base / f"beside-{i}"
            t = time.monotonic()
            d.mkdir()
            write_synced(d / "L2.md", f"I like probe {i}.\n")
            self.took.append(time.monotonic() - t)
            i += 1
            time.sleep(0.1)


@pytest.mark.timeout(600)
def test_a_write_beside_an_item_being_filed_completes_before_it_is_done(
    mount: Mount, tmp_path: Path
) -> None:
    writer = Writer(mount)
    writer.start()
    t0 = time.monotonic()
    probe = mount.path / "user/default/preferences/probe"
    try:
        report = _hand_in(mount, tmp_path)
        assert wait_for(
            lambda: _state(report).startswith(("state: processing", "state: done")), 300
        )
        seen = after = _state(report)
        took = 0.0
        if seen.startswith("state: processing"):  # a write issued while it is filed
            t = time.monotonic()
            probe.mkdir()
            write_synced(probe / "L2.md", "I like probes.\n")
            took = time.monotonic() - t
            after = _state(report)
        assert wait_for(lambda: _state(report).startswith("state: done"), 300), _state(report)
        filing = time.monotonic() - t0
    finally:
        writer.done = True
        writer.join(timeout=120)
    # as one transaction, the item held the writer beside it for nearly all its filing
    longest = max(writer.took)
    assert longest < filing / 4, f"a write beside it waited {longest:.1f} s of {filing:.1f} s"
    assert seen.startswith("state: processing"), (
        f"no filing under way was seen: each read of the report waited for all of it ({seen})"
    )
    assert after.startswith("state: processing"), (
        f"a mkdir and a saved file issued while the item was filed waited for all of it "
        f"({took:.1f} s): {after}"
    )
    _filed_once(mount, report)
    assert "I like probes." in (probe / "L2.md").read_text()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_kill_9_part_way_through_a_filing_then_each_memory_is_filed_once(
    mount: Mount, tmp_path: Path
) -> None:
    report = _hand_in(mount, tmp_path)
    routed = re.compile(r"^state: processing \((\d+) of \d+ memories routed\)")

    def part_way() -> bool:
        m = routed.match(_state(report))
        return m is not None and int(m.group(1)) >= 100

    assert wait_for(part_way, 300), _state(report)
    mount.kill()
    mount.start()
    assert wait_for(lambda: _state(report).startswith("state: done"), 300), _state(report)
    _filed_once(mount, report)
    assert "resuming its filing after" in mount.log.read_text()
