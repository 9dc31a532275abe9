"""The daemon's log never fails on a name that is not UTF-8 (issue 11): a kernel name
arrives as surrogate escapes, and a log line (or traceback) quoting it is written escaped
instead of being lost to a `UnicodeEncodeError` inside the handler."""

from __future__ import annotations

import logging
from pathlib import Path

from contextfs.cli import _setup_logging


def test_undecodable_names_are_logged_escaped(tmp_path: Path, capsys):
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    log_file = tmp_path / "contextfs.log"
    try:
        _setup_logging("info", log_file)
        name = b"caf\xe9".decode("utf-8", "surrogateescape")
        log = logging.getLogger("contextfs.test")
        log.info("refused lookup .query/%s", name)
        try:
            raise ValueError(f"bad name {name}")
        except ValueError:
            log.exception("internal error in %s", "lookup")
        for h in root.handlers:
            h.flush()
    finally:
        for h in root.handlers:
            h.close()
        root.handlers[:], root.level = saved[0], saved[1]
    text = log_file.read_text(encoding="utf-8")
    assert "refused lookup .query/caf\\udce9" in text
    assert "ValueError: bad name caf\\udce9" in text  # the traceback is kept
    assert "Logging error" not in capsys.readouterr().err
