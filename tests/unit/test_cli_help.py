"""`contextfs --help` is generated from the parsers: every command is listed with its one
line, and every positional of every command says what it takes. A command or a positional
added without help fails here."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator

import pytest

from contextfs import __version__
from contextfs.cli import build_parser


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser, argparse._SubParsersAction | None]]:
    """(command words, its parser, its subcommands' action) for the top level and every
    command under it, however deep."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    yield path, parser, (subs[0] if subs else None)
    for action in subs:
        for name, child in action.choices.items():
            yield from _commands(child, (*path, name))


def _positionals(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [
        a
        for a in parser._actions
        if not a.option_strings and not isinstance(a, argparse._SubParsersAction)
    ]


def test_the_walk_sees_every_command():
    names = {" ".join(path) for path, _, _ in _commands(build_parser())}
    assert {"mount", "umount", "status", "fsck", "search", "reindex", "ingest"} <= names
    assert {"consolidate", "export", "import", "mcp", "schema", "schema check"} <= names


@pytest.mark.parametrize("path", [p for p, _, _ in _commands(build_parser())], ids=" ".join)
def test_every_positional_has_help(path):
    parser = dict((p, c) for p, c, _ in _commands(build_parser()))[path]
    for action in _positionals(parser):
        assert action.help and action.help != argparse.SUPPRESS, (
            f"`contextfs {' '.join(path)}`: positional {action.dest!r} has no help"
        )


def test_every_command_is_listed_with_its_help():
    for path, parser, subs in _commands(build_parser()):
        if subs is None:
            continue
        text = parser.format_help()
        described = {a.dest: a.help for a in subs._choices_actions}
        for name in subs.choices:
            assert described.get(name), f"`contextfs {' '.join((*path, name))}` has no help"
            lines = text.splitlines()
            start = " ".join(described[name].split()[:2])  # a long name has it on the next line
            at = [i for i, ln in enumerate(lines) if ln.split()[:1] == [name]]
            assert any(start in " ".join(lines[i : i + 2]) for i in at), (
                f"{name} not listed with its help in `contextfs {' '.join(path)} --help`"
            )


def test_help_and_version_from_the_command_line():
    cmd = [sys.executable, "-m", "contextfs"]
    out = subprocess.run([*cmd, "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    first = out.stdout.splitlines()[0]
    assert first.startswith("usage: contextfs"), first
    listed = {ln.split()[0] for ln in out.stdout.splitlines() if ln.startswith("    ")}
    for path, _, _ in _commands(build_parser()):
        if len(path) == 1:
            assert path[0] in listed, f"{path[0]} missing from `contextfs --help`"
    assert "mounts an agent's long-term memory" in out.stdout
    assert "exit codes:" in out.stdout
    v = subprocess.run([*cmd, "--version"], capture_output=True, text=True, timeout=60)
    assert v.returncode == 0 and v.stdout.strip() == f"contextfs {__version__}"


def test_output_to_a_reader_that_went_says_nothing_more(tmp_path):
    """`contextfs fsck DIR | head -1`: the reader is gone when the rest is written. The
    command stops as `cat` does (128 + SIGPIPE), without a traceback on stderr."""
    from contextfs.store import Store

    Store(tmp_path / "contextfs.duckdb").close()
    p = subprocess.Popen(
        [sys.executable, "-m", "contextfs", "fsck", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()  # before the command has written anything
    err = p.stderr.read()
    assert (p.wait(timeout=60), err) == (141, b"")


def test_the_mcp_server_reports_the_version(tmp_path):
    from contextfs.agents.mcpserver import build_server

    assert build_server(tmp_path, __version__).version == __version__
