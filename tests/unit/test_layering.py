"""The folders are the architecture: an import that points upward fails here."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "contextfs"

# Lower ranks never import higher ones (STYLE.md: cli > daemon > fs.ops > fs.tree >
# memory > {store, ctxtypes} > {model, errors}). config is read by the roots only.
RANKS = {
    "contextfs.errors": 0,
    "contextfs.model": 0,
    "contextfs.store": 1,
    "contextfs.index": 1,
    "contextfs.ctxtypes": 1,
    "contextfs.memory": 2,
    "contextfs.search": 3,
    "contextfs.conversations": 3,
    "contextfs.fs": 4,  # the tree and its role handlers
    "contextfs.fs.ops": 5,  # the pyfuse3 adapter
    "contextfs.fs.build": 5,  # assembles the tree and the adapter for the daemon
    "contextfs.config": 6,
    "contextfs.daemon": 6,
    "contextfs.cli": 7,
}


def _rank(module: str) -> int | None:
    best = None
    for prefix, rank in RANKS.items():
        if (module == prefix or module.startswith(prefix + ".")) and (
            best is None or len(prefix) > len(best[0])
        ):
            best = (prefix, rank)
    return best[1] if best else None


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append(node.module)
    return [m for m in out if m.startswith("contextfs")]


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def test_no_import_points_upward():
    problems = []
    for path in sorted(PKG.rglob("*.py")):
        me = _module_name(path)
        my_rank = _rank(me)
        if my_rank is None:
            continue
        for imp in _imports(path):
            r = _rank(imp)
            if r is not None and r > my_rank:
                problems.append(f"{me} (rank {my_rank}) imports {imp} (rank {r})")
    assert problems == []


def test_only_the_adapter_imports_pyfuse3():
    users = sorted(
        _module_name(p) for p in PKG.rglob("*.py")
        if any(n == "pyfuse3" for n in _raw_imports(p))
    )
    assert users == ["contextfs.daemon", "contextfs.fs.ops"]


def test_the_adapter_is_protocol_only():
    """fs.ops translates: no search, no sessions, no indexer, no memory service."""
    path = PKG / "fs" / "ops.py"
    ours = [m for m in _imports(path)
            if not (m.startswith("contextfs.fs.") or m == "contextfs.errors")]
    assert ours == []
    import sys
    third = {n for n in _raw_imports(path)
             if n not in sys.stdlib_module_names and n not in ("contextfs", "__future__")}
    assert third == {"pyfuse3", "trio"}


def test_store_knows_nothing_of_types_or_fuse():
    for path in (PKG / "store").rglob("*.py"):
        for imp in _imports(path):
            assert not imp.startswith(("contextfs.ctxtypes", "contextfs.memory",
                                       "contextfs.fs", "contextfs.index")), \
                f"{path.name} imports {imp}"


def test_store_and_index_never_import_each_other():
    for path in (PKG / "index").rglob("*.py"):
        for imp in _imports(path):
            assert imp.startswith("contextfs.errors") or imp.startswith("contextfs.index"), \
                f"index/{path.name} imports {imp}"


def _raw_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module.split(".")[0])
    return names


def test_an_upward_import_is_detected(tmp_path):
    """The checker itself can fail: a store module importing the tree is flagged."""
    fake = tmp_path / "x.py"
    fake.write_text("from contextfs.fs.tree import Tree\n")
    assert _rank(_imports(fake)[0]) > _rank("contextfs.store.db")
