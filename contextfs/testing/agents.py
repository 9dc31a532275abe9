"""Agent clients for tests and benchmarks: a real MCP client session over stdio.

`mcp_session` starts an MCP server as a subprocess (the reference filesystem server under
Node, or `contextfs mcp`) and drives it with the official `mcp` SDK's stdio client, the
way an MCP host does; `Call` is what one tool call answered. Works under trio and asyncio
(the SDK is written on anyio).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Installed by scripts/setup.sh (pinned there): npm's layout under .node/
FS_SERVER = REPO / ".node/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"


@dataclass(frozen=True, slots=True)
class Call:
    """One tool call's answer: `is_error` and its text content joined."""

    is_error: bool
    text: str


class Session:
    """An initialised MCP client session; `call(tool, **arguments)`."""

    def __init__(self, session) -> None:
        self.session = session

    async def tools(self) -> list[str]:
        return [t.name for t in (await self.session.list_tools()).tools]

    async def call(self, tool: str, **arguments: object) -> Call:
        res = await self.session.call_tool(tool, arguments)
        text = "\n".join(c.text for c in res.content if getattr(c, "type", "") == "text")
        return Call(bool(res.is_error), text)


@asynccontextmanager
async def mcp_session(
    command: str, args: list[str], *, env: dict[str, str] | None = None
) -> AsyncIterator[Session]:
    """An MCP server `command args` on stdio and an initialised client session to it."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=command, args=args, env=env)
    # The servers' stderr (banners, logs) stays out of the test output unless it fails.
    with open(os.devnull, "w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield Session(session)


def filesystem_server(mnt: Path) -> tuple[str, list[str]]:
    """The command of the reference MCP filesystem server allowed `mnt`."""
    node = shutil.which("node")
    if node is None or not FS_SERVER.exists():
        raise RuntimeError("node or the MCP filesystem server is missing: run scripts/setup.sh")
    return node, [str(FS_SERVER), str(mnt)]


def contextfs_server(mnt: Path) -> tuple[str, list[str], dict[str, str]]:
    """The command of `contextfs mcp MNT` with this interpreter and this checkout."""
    env = {"PYTHONPATH": os.environ.get("PYTHONPATH", str(REPO))}
    return sys.executable, ["-m", "contextfs", "mcp", str(mnt)], env
