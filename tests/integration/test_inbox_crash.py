"""kill -9 while the inbox files conversations, then the retry a user makes: `contextfs
ingest` of the same files again (the names taken, so handed in under new ones). Through a
real mount: every conversation is archived once, with every turn, and the reports of the
copies say they were archived before."""

from __future__ import annotations

import json
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from contextfs.testing.mount import Mount, contextfs_cmd, wait_for

pytestmark = pytest.mark.slow

TRANSCRIPTS = 8  # JSONL files, one conversation each
EXPORTED = 30  # conversations in the ChatGPT export
TURNS = 24

TOPICS = ["the harbour", "a violin", "the orchard", "copper pans", "the winter market"]


def _text(c: int, t: int) -> str:
    return f"Conversation {c}, turn {t}: we talked about {TOPICS[(c + t) % len(TOPICS)]}. " * 4


def _transcript(c: int) -> str:
    lines = [
        json.dumps(
            {
                "role": "user" if t % 2 == 0 else "assistant",
                "content": _text(c, t),
                "id": f"c{c}t{t}",
                "timestamp": f"2024-03-{c + 1:02d}T10:{t:02d}:00Z",
            }
        )
        for t in range(TURNS)
    ]
    return "\n".join(lines) + "\n"


def _export(first: int, n: int) -> str:
    """A ChatGPT data export: n conversations, each a chain of TURNS messages."""
    out = []
    for c in range(first, first + n):
        start = 1_700_000_000 + c * 86_400
        mapping: dict[str, dict] = {f"c{c}-root": {"message": None, "parent": None}}
        parent = f"c{c}-root"
        for t in range(TURNS):
            nid = f"c{c}t{t}"
            mapping[nid] = {
                "id": nid,
                "message": {
                    "id": nid,
                    "author": {"role": "user" if t % 2 == 0 else "assistant"},
                    "create_time": start + t,
                    "content": {"content_type": "text", "parts": [_text(c, t)]},
                },
                "parent": parent,
                "children": [],
            }
            mapping[parent]["children"] = [nid]
            parent = nid
        out.append(
            {
                "title": f"Chat {c:02d}",
                "create_time": start,
                "mapping": mapping,
                "current_node": parent,
            }
        )
    return json.dumps(out)


def _turn_ids(mnt: Path) -> Counter[str]:
    """How many times each turn id is archived among the default user's sessions."""
    ids: Counter[str] = Counter()
    for d in sorted((mnt / "user/default/sessions").iterdir()):
        ids.update(re.findall(r" · id (c\d+t\d+)$", (d / "L2.md").read_text(), re.M))
    return ids


def _report(inbox: Path, name: str) -> str:
    try:
        return (inbox / f"{name}.report.md").read_text()
    except OSError:
        return ""


@pytest.mark.timeout(300)
def test_kill_9_while_filing_then_the_retry_archives_each_conversation_once(
    mount: Mount, tmp_path: Path
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    files = []
    for c in range(TRANSCRIPTS):
        files.append(src / f"chat-{c}.jsonl")
        files[-1].write_text(_transcript(c))
    files.append(src / "conversations.json")
    files[-1].write_text(_export(TRANSCRIPTS, EXPORTED))
    want = {f"c{c}t{t}" for c in range(TRANSCRIPTS + EXPORTED) for t in range(TURNS)}
    inbox = mount.path / ".inbox"
    ingest = contextfs_cmd("ingest", str(mount.path), *map(str, files), "--wait")

    first = subprocess.Popen(ingest, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        # the transcripts are filed and the export is part way: kill -9 while it files
        under_way = re.compile(r"^state: processing \((\d+) of \d+ conversations\)", re.M)

        def filing() -> bool:
            m = under_way.search(_report(inbox, "conversations.json"))
            return m is not None and int(m.group(1)) >= 3

        assert wait_for(filing, 120), _report(inbox, "conversations.json")
        mount.kill()
        # its mount went away under it: it says so and exits, it does not wait forever
        _out, raw = first.communicate(timeout=60)
        err = raw.decode(errors="replace")
        assert first.returncode == 1, err
        assert "is no longer a live mount" in err and "Traceback" not in err, err
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(timeout=60)

    mount.start()
    filed = _turn_ids(mount.path)
    assert filed and not want <= set(filed), "the kill came after everything was filed"
    # the retry: the same files again, under new names since theirs are taken
    r = subprocess.run(ingest, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr
    assert f"ingested {len(files)} file(s), refused 0" in r.stdout
    # the interrupted export is finished by the mount that came back
    assert "state: done" in _report(inbox, "conversations.json")

    ids = _turn_ids(mount.path)
    assert set(ids) == want, f"missing: {sorted(want - set(ids))[:10]}"
    twice = sorted(i for i, n in ids.items() if n > 1)
    assert not twice, f"{len(twice)} turns archived more than once, e.g. {twice[:10]}"
    sessions = list((mount.path / "user/default/sessions").iterdir())
    assert len(sessions) == TRANSCRIPTS + EXPORTED

    copies = [p for p in inbox.iterdir() if re.fullmatch(r"chat-\d+-\d+\.jsonl", p.name)]
    assert len(copies) == TRANSCRIPTS
    for copy in copies:
        report = _report(inbox, copy.name)
        assert "archived before with the same turns, not filed again" in report, report
    export_copy = [p for p in inbox.iterdir() if re.fullmatch(r"conversations-\d+\.json", p.name)]
    assert len(export_copy) == 1
    report = _report(inbox, export_copy[0].name)
    assert f"0 of {EXPORTED} conversations archived" in report, report
    assert f"{EXPORTED} of {EXPORTED} conversations archived before" in report, report
