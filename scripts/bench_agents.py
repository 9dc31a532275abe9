"""Benchmark a typical agent turn through each agent path against plain file calls.

One fresh mount (search on, the index ready) holding the known-answer search corpus
(`contextfs.testing.search_corpus`: the targets and 240 filler nodes). Every turn is timed
on every path in the same loop, interleaved (turn i on each path, in an order shuffled per
turn, then turn i + 1), so the machine's load and any warm cache favour no path; each
turn asks a question no other turn asked (a query directory is built once per question)
and edits its own node.

| turn | path | what one turn is |
|---|---|---|
| search + read | plain files | read `.query/<q>/_context.md`, read a node's `L2.md` |
| search + read | ContextFS MCP server | `search(q)`, `read(node)` over stdio (`contextfs mcp`) |
| search + read | MCP filesystem server | `read_text_file` of the same two paths (Node server) |
| read + write | plain files | read `L2.md`, write it back with one more line |
| read + write | MCP filesystem server | `read_text_file`, `write_file` (temp file + rename) |
| view + str_replace | plain files | read `L2.md`, write it back with one string replaced |
| view + str_replace | memory tool, ContextFS adapter | `view`, `str_replace` (SDK dispatch) |
| view + str_replace | memory tool, SDK local files | the same, SDK's own tool on a node |
| compose + after_turn | plain files | read `.sessions/<id>/context.md`, `>>` two JSON lines |
| compose + after_turn | Python API | `compose(id)`, `after_turn(id, [user, assistant])` |

Each session of a compose turn holds one user turn already (its own question), so its
`context.md` runs the search of relevant memories as in a live conversation.

It prints a markdown table (p50 and mean per turn, and the ratio of each path's p50 to
the plain-file p50 of the same turn) and writes JSON (bench-results/agents.json).

    .venv/bin/python scripts/bench_agents.py             # 60 turns per path
    .venv/bin/python scripts/bench_agents.py --quick     # 15 turns per path
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio

from contextfs.agents.client import ContextFS, Turn
from contextfs.agents.memorytool import MemoryDirectory, anthropic_memory_tool
from contextfs.testing import DrainedMount, machine_info, say, stats, write_json
from contextfs.testing.agents import contextfs_server, filesystem_server, mcp_session
from contextfs.testing.mount import wait_index_ready
from contextfs.testing.search_corpus import TARGETS, filler

REPO = Path(__file__).resolve().parent.parent
WORDS = ["amber", "basalt", "cinder", "delta", "ember", "fjord", "garnet", "harbor"]


def write(path: Path, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


async def run(args: argparse.Namespace) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="bench-agents-"))
    (tmp / "mnt").mkdir()
    m = DrainedMount(tmp / "mnt", tmp / "data", search=True)
    m.start()
    root = m.path
    try:
        for owner in ("user/alice", "user/bob", "agent/helper", "agent/claude"):
            (root / owner).mkdir()
        corpus = filler() + [(t.path, t.text + "\n") for t in TARGETS]
        for rel, text in corpus:
            (root / rel).mkdir(exist_ok=True)
            write(root / rel / "L2.md", text)
        # one node per path and turn for the writing turns (no path edits another's node)
        pats = root / "agent/claude/patterns"
        n = args.turns
        for i in range(n):
            for side in ("plain-w", "fs-w", "plain-m", "tool-m"):
                d = pats / f"{side}-{i:03d}"
                d.mkdir()
                write(d / "L2.md", f"Lesson {i}: keep the {WORDS[i % 8]} cache warm.\n")
        sdk_node = root / "agent/claude/skills/memory-files"
        sdk_node.mkdir()
        from anthropic.lib.tools._beta_builtin_memory_tool import BetaLocalFilesystemMemoryTool

        sdk_tool = BetaLocalFilesystemMemoryTool(base_path=str(sdk_node))
        for i in range(n):
            sdk_tool.call(
                {
                    "command": "create",
                    "path": f"/memories/sdk-{i:03d}.md",
                    "file_text": f"Lesson {i}: keep the {WORDS[i % 8]} cache warm.\n",
                }
            )
        say(f"corpus: {len(corpus)} nodes + {4 * n} turn nodes; waiting for the index")
        waited, _ = wait_index_ready(root, timeout=600)
        say(f"index ready after {waited:.1f}s")

        def question(i: int, side: str) -> str:
            # a new question per turn and path: the target's question plus a tag word
            return f"{TARGETS[i % len(TARGETS)].question} {side}{i}"

        tool = anthropic_memory_tool(MemoryDirectory(root, pats))
        api = ContextFS(root)
        for i in range(n):  # one live session per compose turn and path, one turn in it
            for side in ("plain-s", "api-s"):
                d = root / ".sessions" / f"{side}-{i:03d}"
                d.mkdir()
                line = json.dumps({"role": "user", "content": question(i, side)})
                with open(d / "transcript.jsonl", "a") as f:
                    f.write(line + "\n")
        nodes = [t.path for t in TARGETS]

        t0 = time.perf_counter()
        fs_cmd, fs_args = filesystem_server(root)
        cf_cmd, cf_args, cf_env = contextfs_server(root)
        async with mcp_session(fs_cmd, fs_args) as fs:
            fs_start = time.perf_counter() - t0
            t1 = time.perf_counter()
            async with mcp_session(cf_cmd, cf_args, env=cf_env) as cf:
                cf_start = time.perf_counter() - t1

                async def plain_search(i: int) -> None:
                    (root / ".query" / question(i, "p") / "_context.md").read_text()
                    (root / nodes[i % len(nodes)] / "L2.md").read_text()

                async def cf_search(i: int) -> None:
                    for r in (
                        await cf.call("search", question=question(i, "c")),
                        await cf.call("read", path=nodes[i % len(nodes)]),
                    ):
                        assert not r.is_error, r.text

                async def fs_search(i: int) -> None:
                    q = root / ".query" / question(i, "f") / "_context.md"
                    for r in (
                        await fs.call("read_text_file", path=str(q)),
                        await fs.call(
                            "read_text_file", path=str(root / nodes[i % len(nodes)] / "L2.md")
                        ),
                    ):
                        assert not r.is_error, r.text

                async def plain_rw(i: int) -> None:
                    p = pats / f"plain-w-{i:03d}/L2.md"
                    write(p, p.read_text() + "Checked again.\n")

                async def fs_rw(i: int) -> None:
                    p = str(pats / f"fs-w-{i:03d}/L2.md")
                    r = await fs.call("read_text_file", path=p)
                    assert not r.is_error, r.text
                    r = await fs.call("write_file", path=p, content=r.text + "Checked again.\n")
                    assert not r.is_error, r.text

                async def plain_mem(i: int) -> None:
                    p = pats / f"plain-m-{i:03d}/L2.md"
                    write(p, p.read_text().replace("cache warm", "cache cold"))

                async def tool_mem(i: int) -> None:
                    f = f"/memories/tool-m-{i:03d}.md"
                    tool.call({"command": "view", "path": f})
                    tool.call(
                        {
                            "command": "str_replace",
                            "path": f,
                            "old_str": "cache warm",
                            "new_str": "cache cold",
                        }
                    )

                async def sdk_mem(i: int) -> None:
                    f = f"/memories/sdk-{i:03d}.md"
                    sdk_tool.call({"command": "view", "path": f})
                    sdk_tool.call(
                        {
                            "command": "str_replace",
                            "path": f,
                            "old_str": "cache warm",
                            "new_str": "cache cold",
                        }
                    )

                def reply(i: int) -> list[dict[str, str]]:
                    return [
                        {"role": "user", "content": f"And the {WORDS[i % 8]} one?"},
                        {"role": "assistant", "content": f"The {WORDS[i % 8]} one is noted."},
                    ]

                async def plain_session(i: int) -> None:
                    d = root / ".sessions" / f"plain-s-{i:03d}"
                    (d / "context.md").read_text()
                    with open(d / "transcript.jsonl", "a") as f:
                        f.write("".join(json.dumps(t) + "\n" for t in reply(i)))

                async def api_session(i: int) -> None:
                    api.compose(f"api-s-{i:03d}")
                    api.after_turn(f"api-s-{i:03d}", [Turn(**t) for t in reply(i)])

                paths: list[tuple[str, str, Callable[[int], Awaitable[None]]]] = [
                    ("search + read", "plain files", plain_search),
                    ("search + read", "ContextFS MCP server", cf_search),
                    ("search + read", "MCP filesystem server", fs_search),
                    ("read + write", "plain files", plain_rw),
                    ("read + write", "MCP filesystem server", fs_rw),
                    ("view + str_replace", "plain files", plain_mem),
                    ("view + str_replace", "memory tool (ContextFS adapter, nodes)", tool_mem),
                    ("view + str_replace", "memory tool (SDK local files, attachments)", sdk_mem),
                    ("compose + after_turn", "plain files", plain_session),
                    ("compose + after_turn", "Python API", api_session),
                ]
                times: dict[tuple[str, str], list[float]] = {(t, p): [] for t, p, _ in paths}
                rng = random.Random(20261201)
                for i in range(n):
                    for turn, path, fn in rng.sample(paths, len(paths)):
                        s = time.perf_counter()
                        await fn(i)
                        times[(turn, path)].append(time.perf_counter() - s)
                    if sys.stderr.isatty():
                        sys.stderr.write(f"\r  turns: {i + 1}/{n}   ")
                if sys.stderr.isatty():
                    sys.stderr.write("\n")
        # what the writing turns did is in the store: one new version per turn and path
        for side in ("plain-w", "fs-w", "plain-m", "tool-m"):
            meta = (pats / f"{side}-000/meta.yaml").read_text()
            assert "version: 2" in meta, (side, meta)
        for side in ("plain-s", "api-s"):  # and each session holds its three turns
            got = (root / ".sessions" / f"{side}-000/transcript.jsonl").read_text()
            assert len(got.splitlines()) == 3, (side, got)
        problems = m.problems()
    finally:
        if m.proc is not None:
            m.stop()
    rows = []
    for (turn, path), ts in times.items():
        base = statistics.median(times[(turn, "plain files")])
        rows.append(
            {
                "turn": turn,
                "path": path,
                "stats": stats(ts),
                "ratio_p50": statistics.median(ts) / base,
            }
        )
    return {
        "machine": machine_info(REPO),
        "turns_per_path": n,
        "server_start_s": {"MCP filesystem server": fs_start, "ContextFS MCP server": cf_start},
        "rows": rows,
        "daemon_problems": problems,
    }


def table(doc: dict) -> str:
    out = [
        f"{doc['turns_per_path']} turns per path; each row's ratio is its p50 over the "
        "plain-file p50 of the same turn",
        "",
        "| turn | path | p50 ms | mean ms | ratio (p50) |",
        "|---|---|---:|---:|---:|",
    ]
    for r in doc["rows"]:
        s = r["stats"]
        out.append(
            f"| {r['turn']} | {r['path']} | {s['p50'] * 1e3:.1f} | {s['mean'] * 1e3:.1f} "
            f"| {r['ratio_p50']:.2f}× |"
        )
    starts = ", ".join(f"{k} {v:.2f} s" for k, v in doc["server_start_s"].items())
    out += ["", f"server start (spawn + initialize, once per agent): {starts}"]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="15 turns per path")
    p.add_argument("--turns", type=int, default=None)
    p.add_argument("--json", default=str(REPO / "bench-results/agents.json"))
    args = p.parse_args(argv)
    args.turns = args.turns or (15 if args.quick else 60)
    os.environ.setdefault("PYTHONPATH", str(REPO))
    doc = anyio.run(run, args)
    print(table(doc))
    say(f"wrote {write_json(args.json, doc)}")
    if doc["daemon_problems"]:
        say("daemon problems:\n" + "\n".join(doc["daemon_problems"]))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
