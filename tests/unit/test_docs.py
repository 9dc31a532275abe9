"""The docs point at things that exist.

Every relative markdown link in README.md and docs/*.md names a file of the repository
(and, with `#anchor`, a heading of that file by GitHub's slug rules); every
`scripts/<name>.py` and `contextfs <subcommand>` written in code names a script that exists
and a subcommand the CLI defines. Pure: reads files and the CLI's parser, mounts nothing.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"""<a\s+(?:name|id)\s*=\s*["']([^"']+)["']""", re.I)
SCRIPT = re.compile(r"(?<![\w/.-])scripts/[\w./-]+?\.py\b")
# `contextfs SUB` where a command starts: a code span or line, after `$`, `;`, `&&`, `|`,
# `(` or `sudo`/`exec`/`time`, possibly as a path (`.venv/bin/contextfs`); comments dropped
COMMAND = re.compile(
    r"(?:^|[;&|(]|\$|\bsudo|\bexec|\btime)\s*(?:[\w.~$/-]*/)?contextfs\s+([a-z][a-z0-9-]*)"
)
COMMENT = re.compile(r"(?:^|\s)#.*$")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)  # http:, https:, mailto:, ...


def doc_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def split_code(text: str) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(prose lines, code) of a markdown text: code is fenced blocks and inline spans,
    each with its 1-based line number; prose lines have their code spans blanked."""
    prose: list[tuple[int, str]] = []
    code: list[tuple[int, str]] = []
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            code.append((n, line))
            continue
        code.extend((n, m.group(2)) for m in CODE_SPAN.finditer(line))
        prose.append((n, CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)))
    return prose, code


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: inline markup reduced to its text, lowercased,
    punctuation dropped (word characters, hyphens and spaces stay), spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text)
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor GitHub makes in a markdown file (duplicates get -1, -2, ...)."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    prose, _ = split_code(path.read_text(encoding="utf-8"))
    raw = path.read_text(encoding="utf-8").splitlines()
    for n, _line in prose:
        m = HEADING.match(raw[n - 1])
        if m:
            base = slug(m.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
        found.update(a.lower() for a in HTML_ANCHOR.findall(raw[n - 1]))
    return found


def broken_links(path: Path) -> list[str]:
    """The relative links of one markdown file that name no file or no heading."""
    problems: list[str] = []
    prose, _ = split_code(path.read_text(encoding="utf-8"))
    for n, line in prose:
        for m in LINK.finditer(line):
            target = m.group(1)
            if EXTERNAL.match(target) or target.startswith("/"):
                continue
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(REPO)}:{n}: ({target})"
            if not dest.exists():
                problems.append(f"{where}: no such file {file_part}")
            elif anchor and dest.suffix == ".md" and anchor.lower() not in anchors(dest):
                problems.append(f"{where}: no heading #{anchor} in {file_part or path.name}")
    return problems


def cli_subcommands() -> set[str]:
    """The subcommands `contextfs` defines: from its parser when cli.py builds one in a
    function, else the names cli.py passes to `add_parser`."""
    import contextfs.cli as cli

    build = getattr(cli, "build_parser", None)
    if callable(build):
        parser = build()
        names: set[str] = set()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                names.update(action.choices)
        if names:
            return names
    source = Path(cli.__file__).read_text(encoding="utf-8")
    return set(re.findall(r"add_parser\(\s*[\"']([\w-]+)[\"']", source))


def code_references(path: Path) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(scripts, subcommands) named in the code of one markdown file, with line numbers."""
    _, code = split_code(path.read_text(encoding="utf-8"))
    scripts = [(n, m.group(0)) for n, c in code for m in SCRIPT.finditer(c)]
    commands = [(n, m.group(1)) for n, c in code for m in COMMAND.finditer(COMMENT.sub("", c))]
    return scripts, commands


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_names_a_file_and_a_heading(path: Path) -> None:
    assert broken_links(path) == []


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_script_and_subcommand_named_exists(path: Path) -> None:
    subcommands = cli_subcommands()
    scripts, commands = code_references(path)
    rel = path.relative_to(REPO)
    missing = [f"{rel}:{n}: {s}" for n, s in scripts if not (REPO / s).is_file()]
    missing += [f"{rel}:{n}: contextfs {c}" for n, c in commands if c not in subcommands]
    assert missing == []


def test_the_cli_defines_the_subcommands_the_docs_lean_on() -> None:
    assert {"mount", "umount", "status", "fsck", "reindex"} <= cli_subcommands()


def test_the_checks_fail_on_what_does_not_exist(tmp_path: Path) -> None:
    """A broken link, a missing heading, a missing script and an unknown subcommand are
    each reported (the checks above can fail)."""
    global REPO
    saved, REPO = REPO, tmp_path
    try:
        (tmp_path / "docs").mkdir()
        (tmp_path / "docs" / "other.md").write_text("# Other\n\n## A `code` heading: yes!\n")
        doc = tmp_path / "docs" / "a.md"
        doc.write_text(
            "# A\n\n"
            "[ok](other.md#a-code-heading-yes) [ok](#a) [web](https://example.com)\n"
            "[gone](missing.md) [no heading](other.md#nothing)\n"
            "`[not a link](nowhere.md)`\n\n"
            "```sh\nscripts/none.py\ncontextfs frobnicate\n```\n"
        )
        problems = broken_links(doc)
        assert len(problems) == 2, problems
        assert "missing.md" in problems[0] and "#nothing" in problems[1]
        scripts, commands = code_references(doc)
        assert scripts == [(8, "scripts/none.py")]
        assert commands == [(9, "frobnicate")] and "frobnicate" not in cli_subcommands()
    finally:
        REPO = saved


def test_slugs_follow_github() -> None:
    assert (
        slug("Results, `--quick` (2 MB: 118 conversations)")
        == "results---quick-2-mb-118-conversations"
    )
    assert slug("`scripts/bench_vectors.py`: hnswlib") == "scriptsbench_vectorspy-hnswlib"
    assert slug("DuckDB's buffers") == "duckdbs-buffers"
