"""Query directories (SPEC §4): `<dir>/.query/[@options/]<question>/`.

`.query` exists in every directory (only the root lists it, so `find` and `ls -R` never
wander into the others) and searches the subtree it is in. Looking up a question runs the
hybrid search in a worker thread and shows the answer as a read-only directory: numbered
symlinks to the matching nodes, `_context.md` (the hits packed into a token budget) and
`_results.json`. A question's directory is computed once per index generation.

`SearchPort` is what the fs layer needs of search: the searcher, the indexer's generation
and its barrier (fsync waits for it, `fs.tiers`), and the options parser.
"""

from __future__ import annotations

import stat
import urllib.parse
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from contextfs.errors import NotFound
from contextfs.fs.handler import RoleBase
from contextfs.fs.inode import QUERY_DIR, QUERY_ROLES, Handle, Inode, QueryDir, Role
from contextfs.search.bundle import pack_context, results_json
from contextfs.search.indexer import Indexer
from contextfs.search.retrieval import Hit, QueryOptions, Results, Searcher, parse_options

if TYPE_CHECKING:
    from contextfs.fs.tree import Tree


@dataclass(frozen=True, slots=True)
class SearchPort:
    """Search as the fs layer uses it (None in a mount with `search: false`)."""

    searcher: Searcher
    indexer: Indexer
    known_types: frozenset[str]
    barrier_timeout: float = 30.0  # fsync waits at most this long for the index

    @property
    def generation(self) -> int:
        return self.indexer.generation

    def search(self, question: str, scope: str, opts: QueryOptions) -> Results:
        """Worker thread only (embedding, hnswlib, tantivy)."""
        return self.searcher.search(question, scope, opts)

    async def barrier(self, generation: int) -> None:
        """Wait until `generation` is searchable by what is loaded (BM25 alone while the
        model loads; the indexer never makes this wait for the model)."""
        self.indexer.wake()
        await self.indexer.barrier(generation, self.barrier_timeout)


@dataclass(frozen=True, slots=True)
class Answer:
    """A computed question: (node path, its directory name) per hit, and the files."""

    generation: int
    links: list[tuple[str, str]]
    files: dict[str, bytes]
    hits: tuple[Hit, ...] = ()


class QueryDirs(RoleBase):
    roles = QUERY_ROLES

    def __init__(self, tree: Tree, search: SearchPort | None) -> None:
        super().__init__(tree)
        self.search = search
        self._roots: dict[int, Inode] = {}  # directory inode -> its .query
        self._counted: set[int] = set()  # question directories whose reads were counted

    def build(self, root: Inode) -> None:
        if self.search is not None:
            self.root_for(root)

    def shows_query_root(self, d: Inode, name: str) -> bool:
        return name == QUERY_DIR and d.role not in QUERY_ROLES

    def root_for(self, d: Inode) -> Inode:
        """`d/.query`: a virtual child of d, linked (listed) only in the root."""
        root = self._roots.get(d.ino)
        if root is None:
            listed = d is self.tree.root
            root = self.tree.new(
                Role.QUERYROOT,
                stat.S_IFDIR | 0o555,
                QUERY_DIR,
                d if listed else None,
                payload=QueryDir("" if listed else self.tree.path(d)),
            )
            root.parent = d  # its path is d's path + /.query
            self._roots[d.ino] = root
        return root

    def listable(self, d: Inode) -> bool:
        return d.role not in (Role.QUERYROOT, Role.QUERYOPTS)  # asked, never listed

    async def lookup(self, d: Inode, name: str) -> Inode:
        if d.role not in (Role.QUERYROOT, Role.QUERYOPTS):
            return await super().lookup(d, name)  # inside a question's results
        if self.search is None:
            raise NotFound("search is not available in this mount")
        assert d.children is not None
        if d.role == Role.QUERYROOT and name.startswith("@"):
            return d.children.get(name) or self._options_dir(d, name)
        cached = d.children.get(name)
        if cached is not None and cached.query.generation == self.search.generation:
            return cached
        answer = await self._ask(
            d.query.scope, d.query.options or QueryOptions(), urllib.parse.unquote(name)
        )
        return self._install(d, name, answer)

    async def opened(self, h: Handle) -> None:
        """Reading an answer is using memory (SPEC §7): the first open of a question's
        `_context.md` or `_results.json` counts one access for each node it delivers."""
        qd = h.inode.parent
        if h.inode.role == Role.QFILE and qd is not None and qd.ino not in self._counted:
            self._counted.add(qd.ino)
            for hit in qd.query.hits:
                self.tree.tiers.count_access(hit.node)

    def _options_dir(self, d: Inode, name: str) -> Inode:
        assert self.search is not None
        opts = parse_options(name, set(self.search.known_types))
        return self.tree.new(
            Role.QUERYOPTS, stat.S_IFDIR | 0o555, name, d, payload=QueryDir(d.query.scope, opts)
        )

    async def _ask(self, scope: str, opts: QueryOptions, question: str) -> Answer:
        """Search off the event loop; the files are rendered there too."""
        search = self.search
        assert search is not None
        generation = search.generation

        def work() -> Answer:
            res = search.search(question, scope, opts)
            files = {
                "_context.md": pack_context(question, scope, res, opts.budget).encode(),
                "_results.json": results_json(question, scope, res).encode(),
            }
            links = [(h.path, h.path.rsplit("/", 1)[-1]) for h in res.hits]
            return Answer(generation, links, files, tuple(res.hits))

        return await trio.to_thread.run_sync(work)

    def _install(self, d: Inode, name: str, answer: Answer) -> Inode:
        """The directory of a computed question (another lookup may have made it while
        this one searched: the newer generation wins)."""
        t = self.tree
        assert d.children is not None
        old = d.children.get(name)
        if old is not None:
            if old.query.generation == answer.generation:
                return old
            for c in list((old.children or {}).values()):
                t.unlink_inode(c)
            t.unlink_inode(old)
        qd = t.new(
            Role.QUERY,
            stat.S_IFDIR | 0o555,
            name,
            d,
            payload=QueryDir(d.query.scope, d.query.options, answer.generation, answer.hits),
        )
        depth = t.path(qd).count("/") + 1
        for i, (node_path, dirname) in enumerate(answer.links):
            target = ("../" * depth + node_path).encode()
            t.new(Role.QLINK, stat.S_IFLNK | 0o777, f"{i + 1:02d}_{dirname}", qd, target=target)
        for fname, data in answer.files.items():
            t.new(Role.QFILE, stat.S_IFREG | 0o444, fname, qd, data=bytearray(data))
        return qd
