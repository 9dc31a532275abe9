"""SPEC §5 and §10 on a real mount: secrets are redacted in every field.

A token written in two `>>` appends, a password told in a sentence, and names, symlink
targets, inbox file names, session and owner ids that carry a secret: none of it is left
in L2, `.query`, `.status`, the log, the daemon's output, what was sent to the embedding
endpoint, or any file of the data dir (the DuckDB store, the indexes, the log).

The fake secrets are assembled from pieces so that this file does not itself look like a
leaked credential to a repository scanner.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
from pathlib import Path

import pytest

from contextfs.testing import Mount, errno_of
from tests.integration.test_search import fake_embeddings, openai_mount

FIRST, REST = "Zq8Xw7Ec6R", "v5Tb4Yn3Um2Ik1"  # one token, written in two appends
PROSE_PW = "Winter" + "Probe2024!"
GITHUB = "ghp" + "_" + "Lm3Nq5Rs7Tu9Vw1Xy3Za5Bc7De9Fg1Hi3Jk5"
SLACK = "xoxb" + "-" + "111122223333-444455556666-AbCdEfGhIjKlMnOpQrStUvWx"
AWS_ID = "AKIA" + "M2N3B4V5C6X7Z8L9"


def append(path: Path, text: str) -> None:
    """`printf … >> path`, as a shell does it: open(O_APPEND), write, close."""
    subprocess.run(["sh", "-c", 'printf %s "$1" >> "$2"', "sh", text, str(path)], check=True)


def leaks(folder: Path, needles: list[str]) -> list[str]:
    """Files under folder whose bytes hold any of the needles."""
    found = []
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            data = p.read_bytes()
            found += [f"{p}: {n}" for n in needles if n.encode() in data]
    return found


_errno = errno_of


@pytest.mark.allow_warnings  # the embedder stand-in logs its model the first time
def test_token_split_across_two_appends_and_prose_password_are_gone(tmp_path, monkeypatch):
    fake = fake_embeddings()
    m = openai_mount(tmp_path, monkeypatch, fake)
    try:
        node = m.path / "user/default/preferences/deploy"
        node.mkdir()
        l2 = node / "L2.md"
        l2.write_text("Deploy notes for the staging box.\n")
        append(l2, f"deploy token={FIRST}")
        append(l2, f"{REST}\n")
        vpn = m.path / "user/default/preferences/vpn"
        vpn.mkdir()
        (vpn / "L2.md").write_text(f"My password is {PROSE_PW} for the VPN\n")
        for p in (l2, vpn / "L2.md"):
            with open(p, "ab") as f:
                os.fsync(f.fileno())  # the index barrier: searchable once it returns

        text = l2.read_text()
        assert text == (
            "Deploy notes for the staging box.\ndeploy token=[REDACTED:password_assignment]\n"
        )
        assert (
            vpn / "L2.md"
        ).read_text() == "My password is [REDACTED:keyword_secret] for the VPN\n"
        history = "".join(p.read_text() for p in (node / ".history").iterdir())
        assert FIRST not in history and REST not in history

        for question, path in (
            ("deploy token staging", "user/default/preferences/deploy"),
            ("vpn password", "user/default/preferences/vpn"),
        ):
            q = m.path / ".query" / question
            results = json.loads((q / "_results.json").read_text())
            assert path in [h["path"] for h in results["hits"]]
            served = (q / "_context.md").read_text() + (q / "_results.json").read_text()
            assert "[REDACTED:" in served
            for secret in (FIRST, REST, PROSE_PW):
                assert secret not in served

        sent = json.dumps([body for _, _, body in fake.requests])
        assert FIRST not in sent and REST not in sent and PROSE_PW not in sent
        assert "1 split_token" in m.new_log()
        out = m.stop()
        assert FIRST not in out and REST not in out
    finally:
        if m.proc is not None:
            m.stop()
        fake.close()
    assert leaks(tmp_path / "data", [FIRST, REST, PROSE_PW]) == []
    assert m.fsck() == []


@pytest.mark.allow_warnings  # the embedder stand-in logs its model the first time
def test_token_cut_by_two_appends_without_a_keyword_leaves_no_piece(tmp_path, monkeypatch):
    """`printf 'ghp_…' >> L2.md; printf '…\\n' >> L2.md`: nothing names the first part a
    secret, and it is stored as a version before the rest arrives. No piece of the token
    is in L2.md, in any `.history` version, in search results, in what was sent to the
    embedding endpoint, or in the data dir."""
    fake = fake_embeddings()
    m = openai_mount(tmp_path, monkeypatch, fake)
    head, rest = GITHUB[:14], GITHUB[14:]  # `ghp_` and 10 characters, then the other 26
    pieces = [GITHUB[i : i + 4] for i in range(len(GITHUB) - 3)]
    try:
        node = m.path / "user/default/preferences/release"
        node.mkdir()
        l2 = node / "L2.md"
        l2.write_text("Release pipeline notes for the ci runner.\n")
        append(l2, head)
        assert l2.read_text() == (
            "Release pipeline notes for the ci runner.\n[REDACTED:github_token]"
        )
        append(l2, rest + "\n")
        with open(l2, "ab") as f:
            os.fsync(f.fileno())  # the index barrier: searchable once it returns

        assert l2.read_text() == (
            "Release pipeline notes for the ci runner.\n[REDACTED:github_token]\n"
        )
        versions = sorted((node / ".history").iterdir())
        assert len(versions) == 3  # the write and both appends
        stored = [l2.read_text()] + [v.read_text() for v in versions]
        q = m.path / ".query" / "release pipeline ci runner"
        results = json.loads((q / "_results.json").read_text())
        assert "user/default/preferences/release" in [h["path"] for h in results["hits"]]
        stored += [(q / "_context.md").read_text(), (q / "_results.json").read_text()]
        stored.append(json.dumps([body for _, _, body in fake.requests]))
        assert [p for p in pieces if any(p in text for text in stored)] == []
        out = m.stop()
        assert head[4:] not in out and rest not in out
    finally:
        if m.proc is not None:
            m.stop()
        fake.close()
    assert leaks(tmp_path / "data", [head[4:], rest]) == []
    assert m.fsck() == []


def test_a_password_split_across_appends_is_redacted_in_earlier_versions(mount: Mount):
    """`printf 'The door code is 48'` then `printf '21.'` to L2.md: two digits are no
    code by themselves, so the first version is stored as written; the second save finds
    the code, and its first part goes from every version that holds it, a `.history`
    file already read (its pages cached by the kernel) included, and after a remount.
    (DuckDB's file may keep the bytes it overwrote in free pages until it reuses them:
    docs/secrets.md.)"""
    node = mount.path / "user/default/preferences/router"
    node.mkdir()
    l2 = node / "L2.md"
    l2.write_text("Router notes.\n")
    append(l2, "The door code is 48")
    assert l2.read_text().endswith("The door code is 48")
    v2 = node / ".history/v2.md"
    assert v2.read_text().endswith("48")  # read: the kernel keeps its pages
    append(l2, "21.\n")
    assert "4821" not in l2.read_text() and "[REDACTED:" in l2.read_text()
    versions = sorted((node / ".history").iterdir())
    assert [v.name for v in versions] == ["v1.md", "v2.md", "v3.md"]
    assert [v for v in versions if "is 48" in v.read_text()] == []
    assert v2.read_text() == "Router notes.\nThe door code is [REDACTED:keyword_secret]"
    assert (node / ".history/v1.md").read_text() == "Router notes.\n"
    mount.stop()
    mount.start()
    assert v2.read_text() == "Router notes.\nThe door code is [REDACTED:keyword_secret]"


def test_names_that_carry_a_secret_are_refused_and_never_shown(mount: Mount):
    u = mount.path / "user/default"
    node = u / "preferences/editor"
    node.mkdir()
    (node / "L2.md").write_text("vim\n")
    (node / "notes.txt").write_text("ordinary notes\n")
    cases = [
        (open, node / f"{GITHUB}.txt", "w"),
        (os.mkdir, node / f"keys-{GITHUB}"),
        (os.symlink, f"../../{AWS_ID}", node / "link"),
        (os.rename, node / "notes.txt", node / f"my password is {PROSE_PW}"),
        (open, mount.path / ".inbox" / f"chat-{SLACK}.md", "w"),
        (os.mkdir, mount.path / ".sessions" / f"s-{SLACK}"),
        (os.mkdir, mount.path / "user" / f"x-{GITHUB}"),
        (os.mkdir, u / "preferences" / f"token=Zq8Xw7Ec6R{REST}"),
    ]
    for fn, *args in cases:
        # a refused rename answers EPERM (EINVAL makes mv say "subdirectory of itself")
        expected = errno.EPERM if fn is os.rename else errno.EINVAL
        assert _errno(fn, *args) == expected, (fn.__name__, args)

    # Ordinary names next to them still work, and nothing refused shows in a listing.
    (node / "password-reset-flow.md").write_text("steps\n")
    os.symlink("notes.txt", node / "link-to-notes")
    assert sorted(os.listdir(node)) == [
        ".history",
        "L0.md",
        "L1.md",
        "L2.md",
        "link-to-notes",
        "meta.yaml",
        "notes.txt",
        "password-reset-flow.md",
    ]
    assert os.listdir(mount.path / ".sessions") == []

    status = mount.status()
    for kind in ("github_token", "aws_access_key", "keyword_secret", "slack_token"):
        assert f"[REDACTED:{kind}]" in status, kind
    assert status.count("must not carry a secret") >= len(cases) - 1
    secrets = [GITHUB, SLACK, AWS_ID, PROSE_PW, REST]
    for secret in secrets:
        assert secret not in status
    out = mount.stop()
    for secret in secrets:
        assert secret not in out
    assert leaks(mount.data_dir, secrets) == []


def test_token_split_across_two_appends_to_a_session_transcript(mount: Mount):
    s = mount.path / ".sessions/s1"
    s.mkdir()
    transcript = s / "transcript.jsonl"
    append(transcript, '{"role": "user", "content": "hello"}\n')
    append(transcript, f'{{"role": "user", "content": "deploy token={FIRST}')
    append(transcript, f'{REST} for staging"}}\n')
    lines = transcript.read_text().splitlines()
    assert json.loads(lines[1])["content"] == (
        "deploy token=[REDACTED:password_assignment] for staging"
    )
    os.rmdir(s)  # end: extracted and archived as a session node
    archived = mount.path / "user/default/sessions"
    texts = "".join(p.read_text() for p in archived.rglob("L2.md"))
    assert "[REDACTED:password_assignment]" in texts
    mount.stop()
    assert leaks(mount.data_dir, [FIRST, REST]) == []


def test_secret_model_in_config_redacts_what_the_rules_miss(tmp_path: Path):
    """`secret_model: true` in config.yaml: a password told in a phrasing the rules miss
    is redacted as `[REDACTED:secret_guess]` in what is read back and in `.history`, and
    `.status` and `.status.json` say the model is on (docs/secrets.md)."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "config.yaml").write_text("search: false\nsecret_model: true\n")
    m = Mount(tmp_path / "mnt", data)
    m.path.mkdir()
    m.start()
    try:
        node = m.path / "user/default/preferences/bank"
        node.mkdir()
        said = (
            "When the bank phones about the clinic account they ask the security question "
            "(first pet) — the answer to give them is Biscuit" + "1987.\n"
        )
        (node / "L2.md").write_text("Bank notes.\n" + said)
        text = (node / "L2.md").read_text()
        assert "Biscuit" not in text
        assert text.endswith("the answer to give them is [REDACTED:secret_guess].\n")
        assert not [v for v in (node / ".history").iterdir() if "Biscuit" in v.read_text()]
        status = (m.path / ".status").read_text()
        assert "secret model: on (secret_model: true in config.yaml)" in status
        assert json.loads((m.path / ".status.json").read_text())["redactions"]["secret_model"]
    finally:
        m.stop()
    assert leaks(data, ["Biscuit1987"]) == []
    assert m.fsck() == []


# Source code and markup as it ships (lines of /usr/share/perl, the Python standard
# library and a texinfo HTML page of /usr/share/doc): a keyword next to code, not a secret.
CODE_FILES = {
    "PullParser.pm": (
        "package Pod::Simple::PullParser;\n"
        "my $pass = 1;\n"
        "my %args = (\n    pass => 1,\n    max_token => 10_000,\n"
        "    'Pod::Simple::PullParserToken'=> '2.02',\n);\n"
        '$DEBUG and print STDERR "Token: ", $token->dump, "\\n";\n'
        'my $out = $as->{pass} ? "PASS" : "FAIL";\n'
        '# smaller than "1E$scale", we can stop\n'
    ),
    "shlex_part.py": (
        "if self.token == self.eof:\n    token=EOF\n"
        "try:\n    import zlib\nexcept ImportError:\n    pass\n"
        '"""Pass force_zip64 to use the ZIP64 format; pass force_zip64 to open()."""\n'
        "config = {'HAVE_STRUCT_PASSWD_PW_PASSWD': 1}\n"
    ),
    "Introduction.html": (
        '<a href="Introduction.html" accesskey="n" rel="next">Introduction</a>, '
        '<a href="index.html" accesskey="p" rel="prev">Top</a>, '
        '<a href="index.html" accesskey="u" rel="up">Top</a> '
        '[<a href="Index.html" title="Index" rel="index" accesskey="h">Index</a>]\n'
        '<assemblyIdentity name="Microsoft.VC90.CRT" publicKeyToken="1fc8b3b9a1e18e3b"/>\n'
    ),
}


def test_source_code_copied_into_a_node_is_kept_byte_for_byte(mount: Mount, tmp_path: Path):
    """`cp` of Perl, Python and HTML into a node keeps every byte (`cmp` says so): `pass =>
    1`, `token=EOF`, `accesskey="n"`, `max_token => 10_000` are code, not secrets; a
    config file copied beside them still has its password redacted."""
    src = tmp_path / "src"
    src.mkdir()
    for name, text in CODE_FILES.items():
        (src / name).write_text(text)
    password = "s3cr3t" + "P@ss"
    (src / "app.env").write_text(f"DB_HOST=db.internal\nDB_PASSWORD={password}\n")
    node = mount.path / "user/default/preferences/sources"
    node.mkdir()
    (node / "L2.md").write_text("Sources kept for reference.\n")
    subprocess.run(["cp", *sorted(str(p) for p in src.iterdir()), str(node)], check=True)
    for name in CODE_FILES:
        done = subprocess.run(["cmp", str(src / name), str(node / name)], capture_output=True)
        assert done.returncode == 0, done.stdout
    assert (node / "app.env").read_text() == (
        "DB_HOST=db.internal\nDB_PASSWORD=[REDACTED:password_assignment]\n"
    )
