"""Query directories (SPEC §4): `<dir>/.query/[@options/]<question>/`.

`.query` exists in every directory (only the root lists it, so `find` and `ls -R` never
wander into the others) and searches the subtree it is in. Looking up a question runs the
hybrid search in a worker thread and shows the answer as a read-only directory: numbered
symlinks to the matching nodes, `_context.md` (the hits packed into a token budget) and
`_results.json`. A question's directory is computed once per index generation.

What it needs of search is `fs.searchport.SearchPort`; a question's first read counts an
access to each node it delivers (`fs.roles.tiers`).
"""

from __future__ import annotations

import os
import stat
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import trio

from contextfs.errors import InvalidInput, NotFound
from contextfs.fs.inode import QUERY_DIR, QUERY_ROLES, Handle, Inode, Invalidation, QueryDir, Role
from contextfs.fs.perms import Caller, Perms
from contextfs.fs.roles.base import RoleBase
from contextfs.fs.roles.tiers import Tiers
from contextfs.fs.searchport import SearchPort
from contextfs.fs.table import InodeTable
from contextfs.memory.background import FOREGROUND
from contextfs.search.bundle import pack_context, results_json
from contextfs.search.retrieval import Hit, QueryOptions, parse_options


def _check_utf8(name: str) -> None:
    """A question is text: bytes that are not UTF-8 cannot be searched (the tokenizers
    and the bundle are text). EINVAL, as for creating such a name anywhere else; the
    reason shows the bytes escaped, and how to ask for them."""
    raw = os.fsencode(name)
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        shown = raw.decode("utf-8", "backslashreplace")
        raise InvalidInput(
            f"a question must be UTF-8 text (invalid byte at offset {exc.start} of "
            f"'{shown}'); write other bytes as %XX"
        ) from None


@dataclass(frozen=True, slots=True)
class Answer:
    """A computed question: (node path, its directory name) per hit, and the files: their
    bytes, or what renders them when first asked for (`_results.json`: most readers read
    `_context.md` only, and its JSON was 1.75 ms of each question's Python)."""

    generation: tuple[int, int]  # SearchPort.generation when it was computed
    links: list[tuple[str, str]]
    files: dict[str, bytes | Callable[[], bytes]]
    hits: tuple[Hit, ...] = ()


# Question and options directories kept in the tree; the least recently looked up goes
# first. A question asked again after it went is searched again.
QUERY_DIRS_KEPT = 256
# How long a name a question's directory listed still resolves after a new computation
# of the question left it out (`QueryDirs._retired_link`)
RETIRED_FOR = 5.0


class QueryDirs(RoleBase):
    roles = QUERY_ROLES

    def __init__(
        self,
        table: InodeTable,
        search: SearchPort | None,
        *,
        tiers: Tiers,
        perms: Perms,
        kept: int = QUERY_DIRS_KEPT,
    ) -> None:
        super().__init__(table)
        self.search = search
        self.tiers = tiers  # counts a read answer as an access to its nodes
        self.perms = perms  # what a caller who is not root may read
        self.kept = kept
        # (directory inode, reader's key or "") -> its .query
        self._roots: dict[tuple[int, str], Inode] = {}
        # question and options directories by inode number, least recently used first
        self._recent: OrderedDict[int, Inode] = OrderedDict()
        self._counted: set[int] = set()  # question directories whose reads were counted
        # question directory inode -> the links earlier computations listed and it does
        # not, by name: (target, when the name left the listing); see _retired_link
        self._retired: dict[int, dict[str, tuple[bytes, float]]] = {}
        # the inodes made for those names when looked up, freed with their directory
        self._retired_inodes: dict[int, dict[str, Inode]] = {}
        # answer file inode -> what renders its bytes, until it is first looked up or read
        self._unrendered: dict[int, Callable[[], bytes]] = {}

    def build(self, root: Inode) -> None:
        if self.search is not None:
            self.root_for(root)

    def shows_query_root(self, d: Inode, name: str) -> bool:
        return name == QUERY_DIR and d.role not in QUERY_ROLES

    def root_for(self, d: Inode, reader: Caller | None = None) -> Inode:
        """`d/.query`: a virtual child of d, linked (listed) only in the root. One per
        caller who is not root or the daemon's user: its answers hold only what that
        caller may read (the kernel looks `.query` up again on every path walk: it is
        never cached, so each caller reaches their own)."""
        key = (d.ino, reader.key if reader is not None else "")
        root = self._roots.get(key)
        if root is None:
            listed = d is self.table.root and reader is None
            root = self.table.new(
                Role.QUERYROOT,
                stat.S_IFDIR | 0o555,
                QUERY_DIR,
                d if listed else None,
                payload=QueryDir("" if d is self.table.root else self.table.path(d), reader=reader),
            )
            root.parent = d  # its path is d's path + /.query
            self._roots[key] = root
        return root

    def listable(self, d: Inode) -> bool:
        return d.role not in (Role.QUERYROOT, Role.QUERYOPTS)  # asked, never listed

    async def lookup(self, d: Inode, name: str) -> Inode:
        if d.role == Role.QUERY:
            try:
                found = await super().lookup(d, name)
            except NotFound:
                return self._retired_link(d, name)
            render = self._unrendered.pop(found.ino, None)
            if render is not None:  # its size is asked next: render it off the event loop
                with FOREGROUND.serving():
                    found.data = bytearray(await trio.to_thread.run_sync(render))
            return found
        if d.role not in (Role.QUERYROOT, Role.QUERYOPTS):
            return await super().lookup(d, name)  # inside a question's files
        if self.search is None:
            raise NotFound("search is not available in this mount")
        _check_utf8(name)
        assert d.children is not None
        if d.role == Role.QUERYROOT and name.startswith("@"):
            return self._used(d.children.get(name) or self._options_dir(d, name))
        cached = d.children.get(name)
        if cached is not None and cached.query.generation == self.search.generation:
            return self._used(cached)
        answer = await self._ask(
            d.query.scope,
            d.query.options or QueryOptions(),
            urllib.parse.unquote(name),
            d.query.reader,
        )
        return self._used(self._install(d, name, answer))

    async def opened(self, h: Handle) -> None:
        """Reading an answer is using memory (SPEC §7): the first open of a question's
        `_context.md` or `_results.json` counts one access for each node it delivers."""
        qd = h.inode.parent
        if h.inode.role == Role.QFILE and qd is not None and qd.ino not in self._counted:
            self._counted.add(qd.ino)
            for hit in qd.query.hits:
                self.tiers.count_access(hit.node)

    def _options_dir(self, d: Inode, name: str) -> Inode:
        assert self.search is not None
        opts = parse_options(name, set(self.search.known_types))
        return self.table.new(
            Role.QUERYOPTS,
            stat.S_IFDIR | 0o555,
            name,
            d,
            payload=QueryDir(d.query.scope, opts, reader=d.query.reader),
        )

    def _retired_link(self, qd: Inode, name: str) -> Inode:
        """A link an earlier computation of the question listed, looked up by a name that
        is no longer listed. `ls -l` reads a listing, then looks each name up by its path;
        the question's directory is computed again when the index moved on in between
        (every path walk asks again: a write indexed, its vectors after it), and ranks
        may move. Such a name still leads where it led for RETIRED_FOR seconds after it
        left the listing; only the current names are listed."""
        target, left = self._retired.get(qd.ino, {}).get(name, (b"", 0.0))
        if not target or time.monotonic() - left > RETIRED_FOR:
            raise NotFound(f"{self.table.child_path(qd, name)} does not exist")
        made = self._retired_inodes.setdefault(qd.ino, {})
        link = made.get(name)
        if link is not None:
            return link
        link = self.table.new(Role.QLINK, stat.S_IFLNK | 0o777, name, None, target=target)
        link.parent = qd  # its path is under the question; it is never listed
        made[name] = link
        return link

    # ---- bounded: every distinct question would otherwise stay for the life of the mount --

    def _used(self, qd: Inode) -> Inode:
        """qd was looked up: the most recent now; the least recent beyond `kept` go."""
        self._recent[qd.ino] = qd
        self._recent.move_to_end(qd.ino)
        opts = qd.parent
        if opts is not None and opts.role == Role.QUERYOPTS and opts.ino in self._recent:
            # never older than its questions (an options directory that already went,
            # looked up through a cwd inside it, is not brought back)
            self._recent.move_to_end(opts.ino)
        while len(self._recent) > self.kept:
            _ino, old = self._recent.popitem(last=False)
            self._drop(old)
        return qd

    def content(self, inode: Inode) -> bytes:
        """An answer file not looked up yet (its attributes in a `readdirplus` listing):
        rendered here, on the event loop."""
        render = self._unrendered.pop(inode.ino, None)
        if render is None:
            return b""
        inode.data = bytearray(render())
        return bytes(inode.data)

    def _drop(self, qd: Inode) -> None:
        """Take a question's (or an options segment's) directory out of the tree: its
        names go, and so do the answer's bytes unless a file is open. The inodes the
        kernel still holds stay in the table until it forgets them (InodeTable.maybe_free);
        a lookup through them answers ENOENT, as in a removed directory. The kernel is
        told to drop the directory's name, so it forgets them now: it keeps an unused
        name until memory is short, and each kept a dozen inodes (~14 KB) in the table."""
        self._recent.pop(qd.ino, None)
        self._retired.pop(qd.ino, None)
        for link in self._retired_inodes.pop(qd.ino, {}).values():
            link.parent = None
            self.table.maybe_free(link)
        if qd.parent is not None:
            self.table.invalidations.append(Invalidation(qd.parent.ino, name=qd.name))
        for c in list((qd.children or {}).values()):
            if c.role in (Role.QUERY, Role.QUERYOPTS):
                self._drop(c)
                continue
            self.table.unlink_inode(c)
            self._unrendered.pop(c.ino, None)
            if c.opened <= 0:
                c.data = None
        if qd.parent is not None and (qd.parent.children or {}).get(qd.name) is qd:
            self.table.unlink_inode(qd)

    def release(self, h: Handle) -> None:
        if h.inode.parent is None:  # its question went while the file was open
            h.inode.data = None

    async def _ask(
        self, scope: str, opts: QueryOptions, question: str, reader: Caller | None
    ) -> Answer:
        """Search off the event loop; the files are rendered there too. A reader sees
        only the nodes they could read through the mount."""
        search = self.search
        assert search is not None
        generation = search.generation
        perms = self.perms
        readable = None if reader is None else (lambda n: perms.may_read(reader, n))
        reader_key = "" if reader is None else reader.key

        def work() -> Answer:
            res = search.search(question, scope, opts, readable, reader_key)
            files: dict[str, bytes | Callable[[], bytes]] = {
                "_context.md": pack_context(question, scope, res, opts.budget).encode(),
                "_results.json": lambda: results_json(question, scope, res).encode(),
            }
            links = [(h.path, h.path.rsplit("/", 1)[-1]) for h in res.hits]
            return Answer(generation, links, files, tuple(res.hits))

        with FOREGROUND.serving():  # someone waits: background services step aside
            return await trio.to_thread.run_sync(work)

    def _install(self, d: Inode, name: str, answer: Answer) -> Inode:
        """The directory of a computed question (another lookup may have made it while
        this one searched: the newer generation wins)."""
        t = self.table
        assert d.children is not None
        old = d.children.get(name)
        retired: dict[str, tuple[bytes, float]] = {}
        if old is not None:
            if old.query.generation == answer.generation:
                return old
            now = time.monotonic()
            for n, (target, left) in self._retired.get(old.ino, {}).items():
                if now - left <= RETIRED_FOR:
                    retired[n] = (target, left)
            for c in (old.children or {}).values():
                if c.role == Role.QLINK and c.target is not None:
                    retired[c.name] = (c.target, now)
            self._drop(old)
        qd = t.new(
            Role.QUERY,
            stat.S_IFDIR | 0o555,
            name,
            d,
            payload=QueryDir(
                d.query.scope,
                d.query.options,
                answer.generation,
                answer.hits,
                reader=d.query.reader,
            ),
        )
        depth = t.path(qd).count("/") + 1
        for i, (node_path, dirname) in enumerate(answer.links):
            target = ("../" * depth + node_path).encode()
            t.new(Role.QLINK, stat.S_IFLNK | 0o777, f"{i + 1:02d}_{dirname}", qd, target=target)
        for fname, data in answer.files.items():
            if callable(data):
                f = t.new(Role.QFILE, stat.S_IFREG | 0o444, fname, qd)
                self._unrendered[f.ino] = data
            else:
                t.new(Role.QFILE, stat.S_IFREG | 0o444, fname, qd, data=bytearray(data))
        for n in qd.children or {}:
            retired.pop(n, None)  # listed again: the new link
        if retired:
            self._retired[qd.ino] = retired
        return qd
