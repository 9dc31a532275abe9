"""The offline commands run without FUSE: they never import pyfuse3, `contextfs.fs` or the
daemon, so they work on a machine (or in a container) without /dev/fuse and start fast.

Two checks: each command run for real in a fresh interpreter on a small store, then
`sys.modules` inspected; and a static walk of every import statement an offline command
can reach (function-level imports too, so a branch the small store does not take counts).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from contextfs.ctxtypes import builtin_schema_dir, load_types
from contextfs.memory.service import Memory
from contextfs.store import Store
from tests.fake_openai import FakeOpenAI

PKG = Path(__file__).resolve().parents[2] / "contextfs"
FORBIDDEN = ("pyfuse3", "contextfs.fs", "contextfs.daemon")
# cli functions that may reach the daemon: `mount --foreground` is the daemon.
MOUNT_ONLY = {"cmd_mount"}


def _forbidden(module: str) -> bool:
    return any(module == f or module.startswith(f + ".") for f in FORBIDDEN)


# ---- run for real -----------------------------------------------------------------------

RUN = """
import json, sys
import contextfs.cli
try:
    code = contextfs.cli.main(sys.argv[1:])
except SystemExit as exc:  # argparse
    code = exc.code
print(json.dumps({"code": code, "loaded": sorted(sys.modules)}))
"""


@pytest.fixture
def embeddings(monkeypatch) -> Iterator[FakeOpenAI]:
    """An embedding endpoint, so that `reindex` does not load the local model (5-13 s)."""

    def respond(body: dict) -> dict:
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        data = [
            {
                "object": "embedding",
                "index": i,
                "embedding": [float(len(t) % 7 + 1), 1.0, float(i + 1), 0.5],
            }
            for i, t in enumerate(texts)
        ]
        return {
            "object": "list",
            "data": data,
            "model": body["model"],
            "usage": {"prompt_tokens": 1, "total_tokens": 1},
        }

    fake = FakeOpenAI("/v1/embeddings", respond)
    try:
        yield fake
    finally:
        fake.close()


@pytest.fixture
def data_dir(tmp_path: Path, embeddings: FakeOpenAI) -> Path:
    """A small store: one owner, two memories; search through the fake endpoint."""
    d = tmp_path / "data"
    d.mkdir()
    (d / "config.yaml").write_text(
        f"embedder: openai\nembed_base_url: {embeddings.url}\n"
        "embed_model: fake\nembed_api_key_env: CTXFS_TEST_KEY\n"
    )
    store = Store(d / "contextfs.duckdb")
    try:
        m = Memory(store, load_types([builtin_schema_dir()]), data_dir=d)
        m.create_owner("user", "default")
        for name, text in (("editor", "She prefers vim."), ("shell", "Uses zsh.")):
            m.save_l2(m.create_node(("user", "default"), m.type_named("preference"), name), text)
    finally:
        store.close()
    return d


def _run(args: list[str], cwd: Path) -> dict:
    env = {
        "PATH": "/usr/bin:/bin",
        "CTXFS_TEST_KEY": "sk-test",
        "PYTHONPATH": str(PKG.parent),
        "HOME": str(cwd),
    }
    res = subprocess.run(
        [sys.executable, "-c", RUN, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1]) | {"stderr": res.stderr}


@pytest.mark.parametrize(
    "command, code",
    [
        (["fsck", "{data}"], 0),
        (["status", "{data}"], 0),
        (["schema", "check", "{schemas}", "--with-builtins"], 0),
        (["consolidate", "{data}"], 0),
        (["reindex", "{data}"], 0),
        (["search", "{tmp}", "what editor"], 2),  # no mount: a usage error, after its imports
    ],
    ids=lambda v: v[0] if isinstance(v, list) else str(v),
)
def test_offline_command_imports_no_fuse(
    command: list[str], code: int, data_dir: Path, tmp_path: Path
) -> None:
    args = [a.format(data=data_dir, tmp=tmp_path, schemas=builtin_schema_dir()) for a in command]
    out = _run(args, tmp_path)
    assert out["code"] == code, out["stderr"]
    assert [m for m in out["loaded"] if _forbidden(m)] == []
    assert "contextfs.cli" in out["loaded"]


def test_the_probe_sees_fuse_when_it_is_imported(tmp_path: Path) -> None:
    """The check above can fail: the same probe, after importing the daemon (what
    `mount --foreground` does), lists pyfuse3 and the adapter."""
    res = subprocess.run(
        [sys.executable, "-c", "import contextfs.daemon\n" + RUN, "fsck", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(PKG.parent)},
    )
    loaded = json.loads(res.stdout.strip().splitlines()[-1])["loaded"]
    assert "pyfuse3" in loaded and "contextfs.fs.ops" in loaded


# ---- the static import graph ------------------------------------------------------------


def _module_file(module: str, root: Path) -> Path | None:
    """The source of `module` of the package at `root` (named like it), or None."""
    parts = module.split(".")[1:]
    if not parts:
        return root / "__init__.py"
    rel = Path(*parts)
    for candidate in (root / rel.with_suffix(".py"), root / rel / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imported(nodes: list[ast.AST], root: Path) -> set[str]:
    """Modules named by the import statements in `nodes` (at any depth), with their parent
    packages; `from a import b` counts `a.b` too when b is a module."""
    pkg = root.name
    out: set[str] = set()
    for top in nodes:
        for node in ast.walk(top):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [
                    f"{node.module}.{a.name}"
                    for a in node.names
                    if node.module.split(".")[0] == pkg
                ]
            for name in names:
                parts = name.split(".")
                out |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
    return {m for m in out if m.split(".")[0] != pkg or _module_file(m, root) or m == pkg}


def reachable(roots: set[str], root: Path) -> dict[str, str]:
    """Every module reachable from `roots` through any import statement of our package,
    mapped to the module that first imported it (for the failure message)."""
    seen: dict[str, str] = {m: "" for m in roots}
    todo = list(roots)
    while todo:
        mod = todo.pop()
        path = _module_file(mod, root) if mod.split(".")[0] == root.name else None
        if path is None:
            continue
        for dep in _imported([ast.parse(path.read_text())], root):
            if dep not in seen:
                seen[dep] = mod
                todo.append(dep)
    return seen


def offline_roots(cli: Path, root: Path) -> set[str]:
    """What cli.py imports anywhere but in the mount-only functions (cli.py itself is not
    walked again: its mount-only imports are the ones allowed)."""
    tree = ast.parse(cli.read_text())
    keep = [n for n in tree.body if not (isinstance(n, ast.FunctionDef) and n.name in MOUNT_ONLY)]
    return _imported(keep, root) - {f"{root.name}.cli"}


def _path_to(module: str, graph: dict[str, str]) -> str:
    chain = [module]
    while graph.get(chain[-1]):
        chain.append(graph[chain[-1]])
    return " <- ".join(chain)


def test_offline_import_graph_never_reaches_fuse() -> None:
    graph = reachable(offline_roots(PKG / "cli.py", PKG), PKG)
    bad = [_path_to(m, graph) for m in sorted(graph) if _forbidden(m)]
    assert bad == []
    assert {"contextfs.app", "contextfs.store.fsck", "contextfs.search.indexer"} <= set(graph)


def test_the_building_blocks_never_reach_fuse() -> None:
    graph = reachable({"contextfs.app", "contextfs.testing"}, PKG)
    assert [_path_to(m, graph) for m in sorted(graph) if _forbidden(m)] == []


def test_a_fuse_import_in_the_offline_graph_is_detected(tmp_path: Path) -> None:
    """The walker itself can fail: a function-level pyfuse3 import two modules away from
    an offline command is found; the same import in cmd_mount is allowed."""
    pkg = tmp_path / "contextfs"
    (pkg / "memory").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "memory" / "__init__.py").write_text("")
    (pkg / "memory" / "deep.py").write_text("def f():\n    import pyfuse3\n")
    (pkg / "app.py").write_text("from contextfs.memory import deep\n")
    (pkg / "cli.py").write_text(
        "def cmd_fsck():\n    from contextfs.app import x\n\n"
        "def cmd_mount():\n    from contextfs import daemon\n"
    )
    graph = reachable(offline_roots(pkg / "cli.py", pkg), pkg)
    assert "contextfs.daemon" not in graph
    assert _path_to("pyfuse3", graph) == "pyfuse3 <- contextfs.memory.deep <- contextfs.app"
