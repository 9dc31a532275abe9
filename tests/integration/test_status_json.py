"""`.status.json` on a real mount: the facts of `.status`, parsed by json, for each caller.

After writes and a refused write the two files agree on the state, the generation, the
counts, the types, the consolidation and redaction lines and every refusal shown; a
caller who cannot open an owner directory sees its refusals neither in `.status` nor in
`.status.json` (both count them as hidden), while its owner sees them in both.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

from contextfs.testing import Mount
from tests.integration.test_permissions import ALICE, BOB, _user, as_user


def text_facts(status: str) -> dict[str, str]:
    """`key: value` lines of `.status` (the refusal lines are indented)."""
    out = {}
    for line in status.splitlines():
        if not line.startswith(" ") and ": " in line:
            k, v = line.split(": ", 1)
            out[k] = v
    return out


def test_status_json_agrees_with_status_after_writes_and_a_refusal(mount: Mount) -> None:
    root = mount.path
    node = root / "user/default/preferences/editor"
    node.mkdir()
    (node / "L2.md").write_text("---\ntopic: editor\n---\nvim\n")
    (node / "notes.txt").write_text("an attachment\n")
    with pytest.raises(OSError) as refused:
        (root / "user/default/preferences/tea.md").write_text("---\ncolour: green\n---\nTea.\n")
    assert refused.value.errno == errno.EINVAL

    doc = json.loads((root / ".status.json").read_text())
    text = (root / ".status").read_text()
    facts = text_facts(text)
    assert facts["state"] == "read-write" and doc["read_only"] is False
    assert doc["mountpoint"] == facts["mountpoint"] and doc["data_dir"] == facts["data_dir"]
    assert doc["started"] == facts["started"]
    assert str(doc["generation"]) == facts["generation"] and doc["generation"] >= 1
    assert str(doc["outbox_rows"]) == facts["outbox_rows"]
    counts = dict(kv.split("=") for kv in facts["counts"].split(", "))
    assert {k: int(v) for k, v in counts.items()} == doc["counts"]
    assert doc["counts"]["nodes"] == 1 and doc["counts"]["attachments"] == 1
    types = ", ".join(
        f"{t['name']} ({t['scope']}/{t['directory']}, {t['mode']})" for t in doc["types"]
    )
    assert types == facts["types"]
    assert facts["index"].startswith("off") and doc["index"] is None  # search: false
    assert doc["directory_listings"] == facts["directory listings"]
    assert f"never run (every {doc['consolidation']['every_seconds']:g}s)" in facts["consolidation"]
    assert facts["redactions"].startswith(
        f"{doc['redactions']['this_run']} this run, {doc['redactions']['total']} in all"
    )
    mem = doc["memory"]  # the daemon's own resident set, and the store's buffers in it
    assert mem["rss_bytes"] > mem["anonymous_bytes"] > 0 and mem["node_heads_held"] >= 1
    assert mem["store_buffers_limit_bytes"] == 128 * 2**20  # config.yaml's default
    assert "MiB resident" in facts["memory"] and " of 128 MiB" in facts["memory"]
    assert facts["refusals"] == f"{doc['refusals']['count']} (newest first)"
    assert doc["refusals"]["count"] == 1 and doc["refusals"]["hidden"] == 0
    [r] = doc["refusals"]["recent"]
    assert r["errno"] == "EINVAL" and r["errno_number"] == errno.EINVAL
    assert r["path"] == "user/default/preferences/tea.md" and "colour" in r["reason"]
    lines = [ln.strip() for ln in text.splitlines() if ln.startswith("  ")]
    kept = f" (bytes kept at {r['kept_at']})"
    assert lines == [f"{r['when']} EINVAL {r['path']}: {r['reason']}{kept}"]
    assert Path(r["kept_at"]).read_text() == "---\ncolour: green\n---\nTea.\n"
    st = (root / ".status.json").stat()
    assert st.st_mode & 0o777 == 0o444 and st.st_size == len((root / ".status.json").read_bytes())


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to add users")
def test_status_json_shows_each_caller_what_status_shows_them() -> None:
    _user(ALICE), _user(BOB)
    top = Path(tempfile.mkdtemp(prefix="cfs-statusjson-"))
    top.chmod(0o755)
    (top / "mnt").mkdir(mode=0o755)
    m = Mount(top / "mnt", top / "data")
    m.start("-o", "allow_other")
    try:
        alice = m.path / "user/alice"
        alice.mkdir()
        shutil.chown(alice, ALICE, ALICE)
        alice.chmod(0o700)
        bad = as_user(ALICE, f"mkdir {alice}/preferences/Bad_Name")
        assert "Invalid argument" in bad.stderr
        for who, sees in ((BOB, False), (ALICE, True)):
            doc = json.loads(as_user(who, f"cat {m.path}/.status.json").stdout)
            text = as_user(who, f"cat {m.path}/.status").stdout
            paths = [r["path"] for r in doc["refusals"]["recent"]]
            assert any("Bad_Name" in p for p in paths) is sees, (who, paths)
            assert ("Bad_Name" in text) is sees
            assert doc["refusals"]["hidden"] == (0 if sees else 1)
            hidden = re.search(r"\((\d+) more in owner directories", text)
            assert (int(hidden.group(1)) if hidden else 0) == doc["refusals"]["hidden"]
            assert doc["refusals"]["count"] == 1  # the count itself is no secret
    finally:
        m.stop()
        shutil.rmtree(top, ignore_errors=True)
