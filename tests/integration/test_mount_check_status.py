"""What the mount's fsck checked, as a user sees it in `.status`, across a kill -9: the
first mount checks everything, later ones what changed since; a session killed before it
closed the store is named, and what it wrote is checked at the next mount like any change
(docs/fsck.md says why that is enough)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from contextfs.testing import Mount, log_problems

TEA = "user/default/preferences/tea.md"


def _fsck_line(m: Mount) -> str:
    (line,) = [x for x in m.status().splitlines() if x.startswith("fsck at mount: ")]
    return line


def test_status_says_which_check_the_mount_ran_and_names_a_killed_session(tmp_path: Path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    m = Mount(mnt, tmp_path / "data")
    m.start()
    try:
        assert _fsck_line(m).startswith("fsck at mount: full (every row;"), _fsck_line(m)
        fd = os.open(mnt / TEA, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(fd, b"Green tea, no sugar.\n")
        os.fsync(fd)
        os.close(fd)  # acknowledged: routed to a node at close
        m.kill()

        m.start()
        line = _fsck_line(m)
        assert re.match(r"fsck at mount: since seq \d+ \([1-9]\d* node\(s\) changed", line), line
        assert "never closed" in line, line
        facts = json.loads((mnt / ".status.json").read_text())["fsck_at_mount"]
        assert facts["scope"] == "since" and facts["last_session_closed"] is False, facts
        assert facts["changed_nodes"] >= 1 and facts["problems"] == 0, facts
        assert "Green tea, no sugar." in (mnt / "user/default/preferences/tea/L2.md").read_text()
        assert "state: read-write" in m.status()
        m.stop()

        m.start()
        line = _fsck_line(m)
        assert line.startswith("fsck at mount: since seq") and "never closed" not in line, line
        m.stop()
    finally:
        if m.proc is not None:
            m.stop()
    assert m.fsck() == []
    assert log_problems(m.log) == []
