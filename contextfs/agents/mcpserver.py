"""`contextfs mcp MNT`: an MCP server (stdio) over a mounted ContextFS, for agents that
cannot mount a filesystem themselves.

Every tool is a thin facade over paths under MNT, so the mount stays the one
implementation: a search reads `.query/<options>/<question>/_context.md`, remembering
writes a file into a type directory (routed at close) or drops one into an inbox, sessions
are `mkdir`/`cat context.md`/`>> transcript.jsonl`/`rmdir` of `.sessions/<id>`. Nothing here
imports the store, the memory or FUSE; this module is a client of the mount like a shell.

A refused call comes back as an MCP tool error (`is_error`) whose text starts with the
errno name, followed by the reason the mount wrote in `.status` when there is one.
"""

from __future__ import annotations

import builtins
import json
import logging
import os
import re
import secrets
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from contextfs.agents.mountcalls import MountCallError, inside, query_dir, refusal

log = logging.getLogger(__name__)

# The tools' names, in the order `list_tools` shows them (documented in docs/agents.md).
TOOLS = (
    "search",
    "remember",
    "read",
    "list",
    "start_session",
    "add_turns",
    "session_context",
    "end_session",
    "status",
)
TIERS = ("L0", "L1", "L2")
# `remember` tells which node a drop went into by the versions before and after: read for
# every node of a type directory this size or smaller, else for the one its name gives.
VERSIONS_READ = 256
# `read` of a directory that is no node answers EISDIR with its first entries.
LISTED_IN_EISDIR = 50
_SLUG_STRIP = re.compile(r"[^a-z0-9]+")


@dataclass(frozen=True, slots=True)
class MountClient:
    """The tools' behaviour over one mountpoint, without the MCP layer (tested through it)."""

    root: Path

    # ---- paths and errors ----------------------------------------------------------

    def path(self, rel: str) -> Path:
        return inside(self.root, rel)

    def rel(self, p: Path) -> str:
        return os.path.relpath(p, self.root)

    def refused(self, exc: OSError, p: Path, what: str) -> MountCallError:
        return refusal(self.root, exc, p, what)

    def _read(self, p: Path, what: str = "read") -> str:
        try:
            return p.read_text(errors="replace")
        except OSError as exc:
            raise self.refused(exc, p, what) from None

    def _write(self, p: Path, text: str, *, exclusive: bool) -> None:
        flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if exclusive else os.O_TRUNC)
        try:
            fd = os.open(p, flags, 0o644)
        except OSError as exc:
            raise self.refused(exc, p, "create") from None
        try:
            try:
                data = memoryview(text.encode())
                while data:  # a write may take part of it (a big one: 128 KiB at a time)
                    data = data[os.write(fd, data) :]
            finally:
                # The close is the commit: a refused drop or tier answers here.
                os.close(fd)
        except OSError as exc:
            raise self.refused(exc, p, "write") from None

    # ---- the tools -------------------------------------------------------------------

    def search(
        self,
        question: str,
        *,
        budget: int | None = None,
        type: str | None = None,
        k: int | None = None,
        scope: str = "",
        results: bool = False,
    ) -> str:
        try:
            qdir = query_dir(self.path(scope), question, k=k, budget=budget, type=type)
        except ValueError as exc:
            raise MountCallError(f"EINVAL: {exc}") from None
        return self._read(qdir / ("_results.json" if results else "_context.md"), "search")

    def remember(self, text: str, *, path: str = "", owner: str = "", wait: float = 10.0) -> str:
        if not text.strip():
            raise MountCallError("EINVAL: nothing to remember (the text is empty)")
        if path:
            # A file in a type directory: routed by the type's strategy when it is closed.
            p = self.path(path)
            in_node = (p.parent / "meta.yaml").is_file()
            before = {} if in_node else self._nodes(p.parent, p.name)
            self._write(p, text, exclusive=False)
            return self._what_became(p, before)
        inbox = self.path(owner) / ".inbox"
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        p = inbox / f"mcp-{stamp}-{secrets.token_hex(3)}.md"
        self._write(p, text, exclusive=True)
        report = p.with_name(p.name + ".report.md")
        deadline = time.monotonic() + max(0.0, wait)
        while True:
            try:
                body = report.read_text(errors="replace")
            except OSError:
                body = ""
            if "state: done" in body or "state: refused" in body or "state: dropped" in body:
                return f"remembered through {self.rel(p)}:\n{body}"
            if time.monotonic() >= deadline:
                return f"queued: {self.rel(p)}; its report will be {self.rel(report)}"
            time.sleep(0.1)

    def _nodes(self, d: Path, name: str) -> dict[str, int]:
        """The nodes directly in `d` and their versions (from `meta.yaml`): of every node
        in a directory of at most `VERSIONS_READ` nodes, else only of the one the file
        `name` would be routed into by its name (the others are 0)."""
        try:
            names = [
                e.name
                for e in os.scandir(d)
                if e.is_dir(follow_symlinks=False) and not e.name.startswith(".")
            ]
        except OSError:
            return {}
        if len(names) <= VERSIONS_READ:
            return {n: _version(d / n) for n in names}
        slug = _SLUG_STRIP.sub("-", name.rsplit(".", 1)[0].lower()).strip("-")
        return {n: _version(d / n) if n == slug else 0 for n in names}

    def _node_of(self, p: Path) -> Path | None:
        """The node `p` is in (its folder or one above it, below the mount), if any."""
        d = p.parent
        while d != self.root and self.root in d.parents:
            if (d / "meta.yaml").is_file():
                return d
            d = d.parent
        return None

    def _what_became(self, p: Path, before: dict[str, int]) -> str:
        """What the mount made of the file just written at `p`, as the listing shows it:
        a new version of a node's tier, an attachment, a file parked under a scratch or
        temporary name, an inbox drop, or a drop routed into a node (which one)."""
        rel, node = self.rel(p), self._node_of(p)
        try:
            listed = p.name in os.listdir(p.parent)
        except OSError:
            listed = True
        if node is not None and node == p.parent and p.name in ("L2.md", "L0.md", "L1.md"):
            n = _version(node)
            if p.name == "L2.md":
                return f"saved: {rel} is version {n} of the node {self.rel(node)}"
            return (
                f"saved: {rel} of the node {self.rel(node)} is written by hand (pinned: "
                "no longer summarised from L2)"
            )
        if listed and node is not None:
            return (
                f"stored: {rel} is an attachment of the node {self.rel(node)}, kept as "
                "written (attachments are not routed, versioned or searched)"
            )
        if listed and p.parent.name == ".inbox":
            return f"dropped into {self.rel(p.parent)}: its report will be {rel}.report.md"
        if listed:
            return (
                f"parked, not remembered: {rel} was stored as written but not routed (a "
                "scratch or temporary name, or no type directory: it is not memory and is "
                "not searched); write it under a memory name such as <name>.md in a type "
                "directory to route it"
            )
        if node is not None:  # a singleton's node (profile/): its notes are routed into it
            return (
                f"remembered: {rel} was routed by its type into the node {self.rel(node)} "
                f"(version {_version(node)})"
            )
        where = self.rel(p.parent)
        after = self._nodes(p.parent, p.name)
        made = sorted(set(after) - set(before))
        if made:
            return f"remembered: {rel} was routed by its type into the new node " + ", ".join(
                f"{where}/{n}" for n in made
            )
        changed = sorted(n for n, v in after.items() if v > before.get(n, v))
        if changed:
            return f"remembered: {rel} was routed by its type into the node " + ", ".join(
                f"{where}/{n} (version {after[n]})" for n in changed
            )
        return (
            f"remembered: {rel} was routed by its type into an existing node of {where}/ "
            "(the one its key fields or its words name)"
        )

    def read(self, path: str, *, tier: str = "L2") -> str:
        p = self.path(path)
        if p.is_dir():
            if not (p / "meta.yaml").is_file():  # an owner, a type directory, `.query/<q>`
                entries = self.list(path).splitlines()
                if len(entries) > LISTED_IN_EISDIR:
                    more = len(entries) - LISTED_IN_EISDIR
                    entries = [*entries[:LISTED_IN_EISDIR], f"… {more} more (list it)"]
                raise MountCallError(
                    f"EISDIR: {self.rel(p)} is a directory, not a node: only a node has "
                    "tiers to read; it holds:\n" + "\n".join(entries)
                )
            if tier not in TIERS:
                raise MountCallError(f"EINVAL: tier must be one of {', '.join(TIERS)}")
            p = p / f"{tier}.md"
        return self._read(p)

    def list(self, path: str = "") -> str:
        p = self.path(path)
        try:
            entries = sorted(os.scandir(p), key=lambda e: e.name)
        except OSError as exc:
            raise self.refused(exc, p, "list") from None
        out = []
        for e in entries:
            if e.is_symlink():
                try:
                    out.append(f"[LINK] {e.name} -> {os.readlink(e.path)}")
                except FileNotFoundError:
                    continue  # removed since the listing was read: not in it any more
            elif e.is_dir(follow_symlinks=False):
                out.append(f"[DIR] {e.name}")
            else:
                out.append(f"[FILE] {e.name}")
        return "\n".join(out) if out else "(empty)"

    def _session(self, session: str, owner: str) -> Path:
        if not session or "/" in session or "\0" in session or session in (".", ".."):
            raise MountCallError(f"EINVAL: {session!r} is not a session id")
        return self.path(owner) / ".sessions" / session

    def start_session(self, session: str, *, owner: str = "") -> str:
        d = self._session(session, owner)
        try:
            d.mkdir()
        except FileExistsError:
            pass  # a live session is resumed: its context is what the agent wants
        except OSError as exc:
            raise self.refused(exc, d, "mkdir") from None
        return self._read(d / "context.md")

    # builtins.list: in this class `list` is the method above
    def add_turns(self, session: str, turns: builtins.list[dict], *, owner: str = "") -> str:
        for i, t in enumerate(turns):
            # a turn the transcript's reader would skip as a line it does not understand:
            # said now, not "recorded"
            if not isinstance(t, dict) or not isinstance(t.get("role"), str):
                raise MountCallError(
                    f"EINVAL: turn {i + 1} has no role (each turn is an object with role and "
                    "content, or role tool with name, input and output); nothing was recorded"
                )
        d = self._session(session, owner)
        lines = "".join(json.dumps(t, ensure_ascii=False) + "\n" for t in turns)
        p = d / "transcript.jsonl"
        try:
            with open(p, "a", encoding="utf-8") as f:
                f.write(lines)
        except OSError as exc:
            raise self.refused(exc, p, "append") from None
        return f"recorded {len(turns)} turn(s) in {self.rel(p)}"

    def session_context(self, session: str, *, owner: str = "") -> str:
        return self._read(self._session(session, owner) / "context.md")

    def end_session(self, session: str, *, owner: str = "") -> str:
        d = self._session(session, owner)
        try:
            d.rmdir()
        except OSError as exc:
            raise self.refused(exc, d, "rmdir") from None
        return f"ended {self.rel(d)}: remaining turns extracted, session archived"

    def status(self) -> str:
        return self._read(self.root / ".status")


def _version(node: Path) -> int:
    """A node's version as its `meta.yaml` says (0 when it cannot be read)."""
    try:
        with open(node / "meta.yaml", errors="replace") as f:
            for line in f:
                if line.startswith("version: "):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def build_server(mnt: Path, version: str):
    """The MCP server (the `mcp` SDK's MCPServer) with one tool per `MountClient` method;
    `version` (contextfs's, from the command) is what it tells clients it is."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    c = MountClient(Path(mnt))
    server = MCPServer(
        "contextfs",
        version=version,  # the SDK's default is "": clients would show none
        instructions=(
            f"Long-term memory mounted at {mnt}. Paths are relative to it: user/<id>/ and "
            "agent/<id>/ hold one directory per context type, each node a directory with "
            "L0.md (abstract), L1.md (overview), L2.md (full text). Search before you answer; "
            "remember what will matter later."
        ),
    )

    def call(fn, *args, **kwargs) -> str:
        try:
            return fn(*args, **kwargs)
        except MountCallError as exc:
            raise ToolError(str(exc)) from None
        except OSError as exc:  # e.g. the mount went away
            raise ToolError(str(c.refused(exc, c.root, "access"))) from None
        except ValueError as exc:  # an argument no file call takes (a NUL in a name)
            raise ToolError(f"EINVAL: {exc}") from None

    @server.tool()
    def search(
        question: str,
        budget: int | None = None,
        type: str | None = None,
        k: int | None = None,
        scope: str = "",
        results_json: bool = False,
    ) -> str:
        """Search memory: the answer bundle (`_context.md`) of `question`, packed within
        `budget` tokens (50-100000, default 2000), optionally only nodes of context `type`,
        within `scope` (e.g. user/alice), with at most `k` hits; `results_json` returns the
        machine-readable hits instead."""
        return call(
            c.search, question, budget=budget, type=type, k=k, scope=scope, results=results_json
        )

    @server.tool()
    def remember(text: str, path: str = "", owner: str = "", wait_seconds: float = 10.0) -> str:
        """Remember `text`. With `path` (a file in a type directory, e.g.
        user/alice/preferences/editor.md, optional YAML front matter for fields) it is routed
        into a node by the type's strategy; without, it is dropped into the inbox of `owner`
        (default: the default user) and extracted into memories; the inbox report is returned
        once ready (waiting at most `wait_seconds`)."""
        return call(c.remember, text, path=path, owner=owner, wait=wait_seconds)

    @server.tool()
    def read(path: str, tier: str = "L2") -> str:
        """Read a file under the mount; for a node directory, its `tier` (L0, L1 or L2)."""
        return call(c.read, path, tier=tier)

    @server.tool(name="list")
    def list_(path: str = "") -> str:
        """List a directory under the mount ([DIR], [FILE], [LINK] name -> target)."""
        return call(c.list, path)

    @server.tool()
    def start_session(session: str, owner: str = "") -> str:
        """Start (or resume) session `session` and return its context.md to inject."""
        return call(c.start_session, session, owner=owner)

    @server.tool()
    def add_turns(session: str, turns: list[dict], owner: str = "") -> str:
        """Record turns of a live session: objects with `role` and `content` (optional
        `name`, `timestamp`, `id`; tool events as role `tool` with `name`, `input`,
        `output`)."""
        return call(c.add_turns, session, turns, owner=owner)

    @server.tool()
    def session_context(session: str, owner: str = "") -> str:
        """The session's context.md as it is now (rebuilt when memory or turns changed)."""
        return call(c.session_context, session, owner=owner)

    @server.tool()
    def end_session(session: str, owner: str = "") -> str:
        """End the session: its remaining turns are extracted and it is archived."""
        return call(c.end_session, session, owner=owner)

    @server.tool()
    def status() -> str:
        """The mount's .status: state, counts, index, inbox, the newest refusals."""
        return call(c.status)

    return server


def serve(mnt: Path, version: str) -> None:
    """Run the server on stdin/stdout until the client closes it."""
    log.info("MCP server over %s", mnt)
    build_server(mnt, version).run("stdio")
