"""The folders are the architecture: the module table of docs/architecture.md is the data.

Each row of that table names modules (a path under `contextfs/`, or a glob such as
`memory/*.py`) and what they may import of ours. This test parses the table and fails when

- a module under `contextfs/` is not covered by a row,
- a module imports something of ours (at the top, inside a function, or for type checking
  only) that its row does not allow, e.g. `fs/ops.py` importing `contextfs.search`,
- a row names a module, a glob or an allowed import that does not exist.

A module takes the row that names it exactly; a module no row names takes the most specific
glob that matches it (so a new module in an existing folder is covered by its folder's
row). Allowed entries: `errors` is that module, `store` is the package itself (its
`__init__`, what `from contextfs.store import Store` reaches), `store.*` is the package and
everything below it, `contextfs` is the root package (`__version__`). Text in parentheses
is a note, `—` means nothing of ours.
"""

from __future__ import annotations

import ast
import fnmatch
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "contextfs"
DOC = ROOT / "docs" / "architecture.md"
TABLE_HEADING = "### Module table"


# ---- the table ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    paths: tuple[str, ...]  # relative to contextfs/, maybe globs
    allowed: tuple[str, ...]  # dotted, relative to contextfs ("errors", "fs.*", "contextfs")
    line: int

    def __str__(self) -> str:
        return f"row {', '.join(self.paths)} (architecture.md:{self.line})"


_ENTRY = re.compile(r"^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)*(\.\*)?$")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def parse_table(text: str) -> list[Row]:
    """The rows of the first table after the `### Module table` heading."""
    lines = text.splitlines()
    try:
        start = next(i for i, ln in enumerate(lines) if ln.strip() == TABLE_HEADING)
    except StopIteration:
        raise AssertionError(f"docs/architecture.md has no {TABLE_HEADING!r} section") from None
    rows: list[Row] = []
    in_table = False
    for i in range(start + 1, len(lines)):
        ln = lines[i]
        if not ln.lstrip().startswith("|"):
            if in_table:
                break
            if ln.startswith("#"):
                break
            continue
        cells = _cells(ln)
        if not in_table:  # the header, then the separator
            in_table = True
            assert [c.lower() for c in cells] == ["module", "role", "may import (ours)"], (
                f"architecture.md:{i + 1}: unexpected header {cells}"
            )
            continue
        if set("".join(cells)) <= set("-: "):
            continue
        assert len(cells) == 3, f"architecture.md:{i + 1}: a row has three cells: {ln}"
        paths = tuple(re.findall(r"`([^`]+)`", cells[0]))
        assert paths, f"architecture.md:{i + 1}: no `path` in the module cell"
        allowed = parse_allowed(cells[2], where=f"architecture.md:{i + 1}")
        rows.append(Row(paths, allowed, i + 1))
    assert rows, "the module table is empty"
    return rows


def parse_allowed(cell: str, where: str = "") -> tuple[str, ...]:
    bare = re.sub(r"\([^)]*\)", "", cell).replace("`", "")
    out = []
    for part in bare.split(","):
        entry = part.strip()
        if entry in ("", "—", "-"):
            continue
        assert _ENTRY.match(entry), f"{where}: {entry!r} is not a module, package or pkg.*"
        out.append(entry)
    return tuple(out)


def load_rows() -> list[Row]:
    return parse_table(DOC.read_text())


# ---- the code ----------------------------------------------------------------------------


def module_name(path: Path, pkg: Path) -> str:
    parts = list(path.relative_to(pkg.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def module_exists(dotted: str, pkg: Path) -> bool:
    """contextfs.a.b is contextfs/a/b.py or contextfs/a/b/__init__.py."""
    parts = dotted.split(".")
    if parts[0] != pkg.name:
        return False
    base = pkg.parent.joinpath(*parts)
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def imports_of(path: Path, pkg: Path) -> list[tuple[int, str]]:
    """Every module of ours that `path` imports, anywhere in it: (line, dotted name).

    `from contextfs.x import y` is `contextfs.x.y` when y is a module, else `contextfs.x`;
    relative imports are resolved against the module's package."""
    me = module_name(path, pkg)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for a in node.names:
                sub = f"{source}.{a.name}"
                out.append(
                    (node.lineno, sub if a.name != "*" and module_exists(sub, pkg) else source)
                )
    return [(ln, m) for ln, m in out if m == pkg.name or m.startswith(pkg.name + ".")]


def third_party_of(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return {
        n for n in names if n not in sys.stdlib_module_names and n not in (PKG.name, "__future__")
    }


def modules(pkg: Path) -> list[Path]:
    return sorted(p for p in pkg.rglob("*.py") if "__pycache__" not in p.parts)


def rel(path: Path, pkg: Path) -> str:
    return path.relative_to(pkg).as_posix()


# ---- the checker -------------------------------------------------------------------------


def row_for(relpath: str, rows: list[Row]) -> Row | None:
    """The row naming the module exactly, else the most specific glob matching it."""
    best: tuple[int, Row] | None = None
    for row in rows:
        for p in row.paths:
            if p == relpath:
                return row
            if any(ch in p for ch in "*?[") and fnmatch.fnmatchcase(relpath, p):
                specificity = len(p.replace("*", ""))
                if best is None or specificity > best[0]:
                    best = (specificity, row)
    return best[1] if best else None


def allows(entry: str, imported: str, pkg_name: str = "contextfs") -> bool:
    if entry == pkg_name:
        return imported == pkg_name
    if entry.endswith(".*"):
        base = f"{pkg_name}.{entry[:-2]}"
        return imported == base or imported.startswith(base + ".")
    return imported == f"{pkg_name}.{entry}"


def uncovered(pkg: Path, rows: list[Row]) -> list[str]:
    return [rel(p, pkg) for p in modules(pkg) if row_for(rel(p, pkg), rows) is None]


def forbidden_imports(pkg: Path, rows: list[Row]) -> list[str]:
    problems = []
    for path in modules(pkg):
        r = rel(path, pkg)
        row = row_for(r, rows)
        if row is None:
            continue  # reported by uncovered()
        me = module_name(path, pkg)
        for line, imported in imports_of(path, pkg):
            if imported == me:
                continue
            if not any(allows(e, imported, pkg.name) for e in row.allowed):
                problems.append(f"{r}:{line} imports {imported}, not allowed by {row}")
    return problems


def dangling(pkg: Path, rows: list[Row]) -> list[str]:
    """Rows naming a module, glob or allowed import that does not exist."""
    files = [rel(p, pkg) for p in modules(pkg)]
    problems = []
    seen: dict[str, Row] = {}
    for row in rows:
        for p in row.paths:
            if any(ch in p for ch in "*?["):
                if not any(fnmatch.fnmatchcase(f, p) for f in files):
                    problems.append(f"{row}: the glob {p} matches no module")
            elif p not in files:
                problems.append(f"{row}: there is no contextfs/{p}")
            if p in seen:
                problems.append(f"{row}: {p} is also in {seen[p]}")
            seen[p] = row
        for e in row.allowed:
            target = pkg.name if e == pkg.name else f"{pkg.name}.{e.removesuffix('.*')}"
            if not module_exists(target, pkg):
                problems.append(f"{row}: may import {e}, which does not exist")
            elif (
                e.endswith(".*")
                and not (pkg.parent.joinpath(*target.split(".")) / "__init__.py").is_file()
            ):
                problems.append(f"{row}: {e} names a module, not a package")
    return problems


def room_of(dotted: str) -> str:
    """contextfs.memory.service -> memory; contextfs.cli -> cli; contextfs -> contextfs."""
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


# ---- the tests ---------------------------------------------------------------------------


def test_the_table_parses():
    rows = load_rows()
    assert len(rows) >= 20
    assert all(r.allowed is not None for r in rows)


def test_every_module_is_in_the_table():
    assert uncovered(PKG, load_rows()) == []


def test_every_import_is_allowed_by_its_row():
    """Imports inside functions and under TYPE_CHECKING count: a skip-layer import such
    as fs/ops.py importing contextfs.search fails here."""
    assert forbidden_imports(PKG, load_rows()) == []


def test_the_table_names_only_what_exists():
    assert dangling(PKG, load_rows()) == []


def test_the_rooms_import_one_way():
    """What the table allows between folders has no cycle (a room is a top-level module
    or a package)."""
    graph: dict[str, set[str]] = {}
    for row in load_rows():
        for p in row.paths:
            me = room_of("contextfs." + p.removesuffix(".py").replace("/", "."))
            for e in row.allowed:
                other = room_of(e if e == "contextfs" else "contextfs." + e)
                if other != me:
                    graph.setdefault(me, set()).add(other)
    state: dict[str, int] = {}

    def visit(n: str, trail: list[str]) -> None:
        if state.get(n) == 2:
            return
        assert state.get(n) != 1, "cycle between rooms: " + " -> ".join(trail + [n])
        state[n] = 1
        for m in sorted(graph.get(n, ())):
            visit(m, trail + [n])
        state[n] = 2

    for n in sorted(graph):
        visit(n, [])


def test_only_the_adapter_and_the_root_import_pyfuse3():
    users = sorted(module_name(p, PKG) for p in modules(PKG) if "pyfuse3" in third_party_of(p))
    assert users == ["contextfs.daemon", "contextfs.fs.ops"]


def test_the_adapter_is_protocol_only():
    """fs.ops translates: no search, no sessions, no indexer, no memory service. It runs
    each request through greenwait (how requests share the event loop), which imports
    nothing of ours."""
    path = PKG / "fs" / "ops.py"
    ours = [
        m
        for _ln, m in imports_of(path, PKG)
        if not (m.startswith("contextfs.fs.") or m in ("contextfs.errors", "contextfs.greenwait"))
    ]
    assert ours == []
    assert third_party_of(path) == {"pyfuse3", "trio"}


def test_store_and_index_never_import_each_other():
    """...nor anything above them: the store is rows in, rows out; the indexes are
    derived and know nothing of the store (the indexer is where they meet). The store may
    hand a statement's wait to greenwait, which is below it (it imports nothing of ours)."""
    for room, below in (
        ("store", {"contextfs.errors", "contextfs.model", "contextfs.greenwait"}),
        ("index", {"contextfs.errors"}),
    ):
        own = f"contextfs.{room}"
        for path in (PKG / room).rglob("*.py"):
            for _ln, imp in imports_of(path, PKG):
                assert imp in below or imp == own or imp.startswith(own + "."), (
                    f"{room}/{path.name} imports {imp}"
                )


def test_the_bottom_rooms_run_no_event_loop():
    """store, index, ctxtypes, model, errors and config import neither trio nor pyfuse3."""
    bottom = [
        *(PKG / "store").rglob("*.py"),
        *(PKG / "index").rglob("*.py"),
        PKG / "ctxtypes.py",
        PKG / "model.py",
        PKG / "errors.py",
        PKG / "config.py",
    ]
    for path in bottom:
        assert not third_party_of(path) & {"trio", "pyfuse3"}, path


# ---- the checker can fail ----------------------------------------------------------------


def _fake_package(tmp_path: Path, files: dict[str, str]) -> Path:
    pkg = tmp_path / "contextfs"
    for name, text in {
        "__init__.py": "",
        "errors.py": "",
        "fs/__init__.py": "",
        "search/__init__.py": "",
        "search/retrieval.py": "",
        **files,
    }.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(text)
    return pkg


FAKE_TABLE = """
### Module table

| module | role | may import (ours) |
|---|---|---|
| `__init__.py`, `errors.py` | the package, the exceptions | — |
| `fs/ops.py` | the adapter | fs.*, errors (`ContextFSError`, with an errno) |
| `fs/*.py` | the rest of the tree | fs.*, search.*, errors |
| `search/*.py` | search | errors |
"""


def test_a_skip_layer_import_is_flagged(tmp_path):
    """The checker itself can fail: the adapter importing search (inside a function, and
    in the `from package import module` form) is flagged; the same import in a module of
    the room that may make it is not."""
    pkg = _fake_package(
        tmp_path,
        {
            "fs/ops.py": "from contextfs.errors import X\n"
            "def f():\n    from contextfs.search import retrieval\n",
            "fs/query.py": "from contextfs.search.retrieval import Searcher\n",
        },
    )
    rows = parse_table(FAKE_TABLE)
    assert rows[1].allowed == ("fs.*", "errors")
    assert forbidden_imports(pkg, rows) == [
        "fs/ops.py:3 imports contextfs.search.retrieval, not allowed by "
        f"row fs/ops.py (architecture.md:{rows[1].line})"
    ]
    assert uncovered(pkg, rows) == []
    assert dangling(pkg, rows) == []


def test_an_uncovered_module_and_a_dangling_row_are_flagged(tmp_path):
    pkg = _fake_package(tmp_path, {"newroom/x.py": "", "fs/ops.py": ""})
    rows = parse_table(FAKE_TABLE + "| `memory/service.py` | gone | store.* |\n")
    assert uncovered(pkg, rows) == ["newroom/x.py"]
    problems = dangling(pkg, rows)
    assert any("there is no contextfs/memory/service.py" in p for p in problems)
    assert any("may import store.*, which does not exist" in p for p in problems)


def test_an_exact_row_wins_over_a_glob():
    rows = parse_table(FAKE_TABLE)
    assert row_for("fs/ops.py", rows) is rows[1]
    assert row_for("fs/tree.py", rows) is rows[2]
    assert row_for("memory/service.py", rows) is None
    assert allows("fs.*", "contextfs.fs") and allows("fs.*", "contextfs.fs.tree")
    assert not allows("fs", "contextfs.fs.tree") and allows("fs", "contextfs.fs")
    assert not allows("fs.*", "contextfs.fsx")
    assert allows("contextfs", "contextfs") and not allows("contextfs", "contextfs.cli")
