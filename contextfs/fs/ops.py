"""The pyfuse3 adapter: inode numbers and EntryAttributes in, FUSEError out.

A protocol adapter only (borg's `fuse.py` says the same of itself): every handler calls
`fs.tree.Tree`, converts `contextfs.errors` into errnos from one table, records refusals
for `.status`, and turns any unexpected exception into EIO so that nothing escapes a
handler and kills the mount.
"""

from __future__ import annotations

import errno
import functools
import inspect
import logging
import math
import os
from collections.abc import Callable
from importlib import metadata
from typing import Any

import pyfuse3
import trio

from contextfs.conversations.inbox import Intake, IntakeService
from contextfs.errors import ContextFSError
from contextfs.fs.tree import Attr, Inode, Invalidation, QueryPending, Role, SessionAction, Tree
from contextfs.search.bundle import pack_context, results_json
from contextfs.search.indexer import Indexer
from contextfs.search.retrieval import QueryOptions, Searcher

log = logging.getLogger(__name__)

# pyfuse3 built by scripts/build_pyfuse3.py hands readdir/fsyncdir the directory's inode
# when the file handle is 0. Only then can opendir answer ENOSYS, which makes Linux skip
# OPENDIR/RELEASEDIR and keep listings in its readdir cache (docs/architecture.md).
DIR_HANDLE_IS_INODE = "+contextfs.dirino" in metadata.version("pyfuse3")

# errnos that are answers, not refusals: they are not recorded in .status.
_QUIET = {errno.ENOENT, errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR,
          errno.ENODATA, errno.ENOSYS}


def _handler(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Run a handler; map domain errors to FUSEError, anything else to EIO."""

    @functools.wraps(fn)
    async def wrapper(self: Operations, *args: Any) -> Any:
        try:
            result = fn(self, *args)
            if inspect.isawaitable(result):
                result = await result
            return result
        except pyfuse3.FUSEError:
            raise
        except ContextFSError as exc:
            if exc.errno not in _QUIET and not getattr(exc, "recorded", False):
                self.tree.memory.refuse(self._where(fn.__name__, args), exc)
            raise pyfuse3.FUSEError(exc.errno) from None
        except Exception as exc:
            log.exception("internal error in %s", fn.__name__)
            self.tree.memory.refuse(
                self._where(fn.__name__, args),
                ContextFSError(f"internal error in {fn.__name__}: {exc!r}"),
            )
            raise pyfuse3.FUSEError(errno.EIO) from None
        finally:
            self._flush_invalidations()
            self._committed()

    return wrapper


class Operations(pyfuse3.Operations):
    enable_writeback_cache = False
    enable_acl = False

    def __init__(self, tree: Tree, *, entry_timeout: float = 60.0,
                 attr_timeout: float = 60.0, indexer: Indexer | None = None,
                 searcher: Searcher | None = None, xattrs: bool = False,
                 fsync_barrier_timeout: float = 30.0, intake: Intake | None = None,
                 intake_service: IntakeService | None = None,
                 session_budget: int = 2000, cache_dirs: bool = False) -> None:
        super().__init__()
        if cache_dirs and not DIR_HANDLE_IS_INODE:
            raise ValueError("kernel directory caching needs pyfuse3 from build_pyfuse3.py")
        self.cache_dirs = cache_dirs
        self.tree = tree
        self.intake = intake
        self.intake_service = intake_service
        self.summaries = None  # the LLM summary service, when one runs
        self.session_budget = session_budget
        self.indexer = indexer
        self.searcher = searcher
        self.xattrs = xattrs
        self.fsync_barrier_timeout = fsync_barrier_timeout
        self._seen_generation = tree.memory.generation
        self.entry_timeout = entry_timeout
        self.attr_timeout = attr_timeout
        self._send, self._recv = trio.open_memory_channel[Invalidation](math.inf)
        self._unsettled: dict[int, int] = {}  # inode -> queued invalidations not yet sent

    # ---- plumbing -----------------------------------------------------------------------

    def _where(self, op: str, args: tuple) -> str:
        try:
            if args and isinstance(args[0], int):
                inode = self.tree.inodes.get(args[0])
                if inode is not None and op in ("lookup", "mkdir", "create", "unlink",
                                                "rmdir", "symlink", "mknod", "rename"):
                    name = args[1] if len(args) > 1 and isinstance(args[1], bytes) else b""
                    base = self.tree.path(inode)
                    name_s = os.fsdecode(name)
                    return f"{op} {name_s if base == '/' else base + '/' + name_s}"
                if inode is not None:
                    return f"{op} {self.tree.path(inode)}"
                if op in ("read", "write", "flush", "fsync", "release"):
                    h = self.tree.handles.get(args[0])
                    if h is not None:
                        return f"{op} {self.tree.path(h.inode)}"
        except Exception:  # noqa: BLE001 - describing a path must never fail a request
            pass
        return op

    def flush_invalidations(self) -> None:
        """After a background change (inbox, consolidation, summaries, the indexer): send
        what the tree wants the kernel to forget, and wake whoever follows commits."""
        self._flush_invalidations()
        self._committed()

    def _committed(self) -> None:
        if self.tree.memory.generation != self._seen_generation:
            self._seen_generation = self.tree.memory.generation
            if self.indexer is not None:
                self.indexer.wake()  # something was committed: index it
            if self.summaries is not None:
                self.summaries.wake()

    def _flush_invalidations(self) -> None:
        if self.tree.invalidations:
            for inv in self.tree.invalidations:
                if inv.listing:
                    self._drop_listing(inv.ino)
                    continue
                if inv.name is None:
                    # until the kernel has dropped it, an open of this file reads past
                    # its page cache (see _info)
                    self._unsettled[inv.ino] = self._unsettled.get(inv.ino, 0) + 1
                self._send.send_nowait(inv)
            self.tree.invalidations.clear()

    def _drop_listing(self, ino: int) -> None:
        """Drop the kernel's cached listing of a directory before the reply goes out, so
        no later `ls` can see the old one. Safe inside a handler, unlike a name
        invalidation: dropping a directory's pages takes no lock a pending request holds."""
        if not self.cache_dirs:
            return
        try:
            pyfuse3.invalidate_inode(ino, False)
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.EBADF, errno.ENOTCONN):
                log.warning("invalidation of directory inode %d failed: %s", ino, exc)

    async def run_invalidator(self) -> None:
        """Tell the kernel what the daemon changed, outside of any request handler: a file's
        pages can be locked by a read that waits for this very daemon, so never inline.
        Whatever queued up meanwhile goes in one thread hop."""
        async for first in self._recv:
            received = [first]
            while len(received) < 512:
                try:
                    received.append(self._recv.receive_nowait())
                except trio.WouldBlock:
                    break
            batch = {(inv.ino, inv.name, inv.attr_only): inv for inv in received}
            inodes = []
            for inv in batch.values():
                if inv.name is not None:
                    self._invalidate_one(inv)
                else:
                    inodes.append(inv)
            if inodes:
                await trio.to_thread.run_sync(self._invalidate_inodes, inodes)
            for inv in received:  # every queued one is sent now, duplicates included
                if inv.name is None:
                    self._settled(inv.ino)

    def _invalidate_inodes(self, invs: list[Invalidation]) -> None:
        for inv in invs:
            self._invalidate_one(inv)

    def _invalidate_one(self, inv: Invalidation) -> None:
        try:
            if inv.name is not None:
                pyfuse3.invalidate_entry_async(inv.ino, os.fsencode(inv.name),
                                               ignore_enoent=True)
            else:
                pyfuse3.invalidate_inode(inv.ino, inv.attr_only)
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.EBADF, errno.ENOTCONN):
                log.warning("invalidation of inode %d failed: %s", inv.ino, exc)
        except Exception:  # noqa: BLE001 - the invalidator must outlive odd failures
            log.exception("invalidation failed")

    @property
    def unsettled(self) -> int:
        """Files the daemon changed whose invalidation has not reached the kernel yet."""
        return len(self._unsettled)

    def _settled(self, ino: int) -> None:
        left = self._unsettled.get(ino, 0) - 1
        if left > 0:
            self._unsettled[ino] = left
        else:
            self._unsettled.pop(ino, None)

    def _attr(self, a: Attr) -> pyfuse3.EntryAttributes:
        e = pyfuse3.EntryAttributes()
        e.st_ino = a.ino
        e.generation = 0
        e.st_mode = a.mode
        e.st_nlink = a.nlink
        e.st_uid = a.uid
        e.st_gid = a.gid
        e.st_rdev = 0
        e.st_size = a.size
        e.st_blksize = 4096
        e.st_blocks = (a.size + 511) // 512
        e.st_atime_ns = a.atime_ns
        e.st_mtime_ns = a.mtime_ns
        e.st_ctime_ns = a.ctime_ns
        timeout = 0 if a.generated or a.volatile else self.attr_timeout
        e.attr_timeout = timeout
        e.entry_timeout = 0 if a.volatile else self.entry_timeout
        return e

    def _entry(self, inode: Inode, *, ref: bool = True) -> pyfuse3.EntryAttributes:
        if ref:
            self.tree.ref(inode)
        return self._attr(self.tree.attr(inode))

    # ---- handlers -----------------------------------------------------------------------

    @_handler
    async def lookup(self, parent_inode, name, ctx=None):
        try:
            inode = self.tree.lookup(parent_inode, os.fsdecode(name))
        except QueryPending as q:
            inode = await self._run_query(q)
        return self._entry(inode)

    async def _run_query(self, q: QueryPending) -> Inode:
        """Search off the event loop, then show the results as a directory."""
        if self.searcher is None or self.indexer is None:
            raise ContextFSError("search is not available in this mount", errno=errno.ENOENT)
        generation = self.indexer.generation
        opts = q.options or QueryOptions()
        searcher = self.searcher

        def work() -> tuple[list, dict[str, bytes]]:
            res = searcher.search(q.question, q.scope, opts)
            files = {
                "_context.md": pack_context(q.question, q.scope, res, opts.budget).encode(),
                "_results.json": results_json(q.question, q.scope, res).encode(),
            }
            links = [(h.path, h.path.rsplit("/", 1)[-1]) for h in res.hits]
            return links, files

        links, files = await trio.to_thread.run_sync(work)
        return self.tree.install_query(q, generation, links, files)

    async def forget(self, inode_list):
        try:
            for ino, n in inode_list:
                self.tree.forget(ino, n)
        except Exception:  # noqa: BLE001 - forget has no reply; never let it escape
            log.exception("forget failed")

    @_handler
    def getattr(self, inode, ctx=None):
        return self._attr(self.tree.attr(self.tree.get(inode)))

    @_handler
    def setattr(self, inode, attr, fields, fh, ctx):
        self.tree.setattr(
            inode,
            size=attr.st_size if fields.update_size else None,
            mode=attr.st_mode if fields.update_mode else None,
            uid=attr.st_uid if fields.update_uid else None,
            gid=attr.st_gid if fields.update_gid else None,
            atime_ns=attr.st_atime_ns if fields.update_atime else None,
            mtime_ns=attr.st_mtime_ns if fields.update_mtime else None,
            fh=fh,
        )
        return self._attr(self.tree.attr(self.tree.get(inode)))

    @_handler
    def readlink(self, inode, ctx):
        return self.tree.readlink(inode)

    @_handler
    def opendir(self, inode, ctx):
        if self.cache_dirs:
            # ENOSYS: from now on the kernel opens directories itself, keeps what it
            # listed, and readdir/fsyncdir receive the inode as their handle
            raise pyfuse3.FUSEError(errno.ENOSYS)
        inode_ = self.tree.get(inode)
        if not inode_.is_dir:
            raise ContextFSError("not a directory", errno=errno.ENOTDIR)
        return inode

    async def readdir(self, fh, start_id, token):
        try:
            for name, child, off in self.tree.listdir(fh, start_id):
                attrs = self._attr(self.tree.attr(child))
                if not pyfuse3.readdir_reply(token, os.fsencode(name), attrs, off):
                    break
                self.tree.ref(child)
        except ContextFSError as exc:
            raise pyfuse3.FUSEError(exc.errno) from None
        except Exception:
            log.exception("internal error in readdir")
            raise pyfuse3.FUSEError(errno.EIO) from None

    async def releasedir(self, fh):
        return None

    @_handler
    def mkdir(self, parent_inode, name, mode, ctx):
        return self._entry(self.tree.mkdir(parent_inode, os.fsdecode(name), mode, ctx.uid,
                                           ctx.gid))

    @_handler
    async def rmdir(self, parent_inode, name, ctx):
        try:
            self.tree.rmdir(parent_inode, os.fsdecode(name))
        except SessionAction as act:
            await self._session_action(act)

    @_handler
    def unlink(self, parent_inode, name, ctx):
        self.tree.unlink(parent_inode, os.fsdecode(name))

    @_handler
    def symlink(self, parent_inode, name, target, ctx):
        return self._entry(self.tree.symlink(parent_inode, os.fsdecode(name), target,
                                             ctx.uid, ctx.gid))

    @_handler
    def rename(self, parent_inode_old, name_old, parent_inode_new, name_new, flags, ctx):
        self.tree.rename(parent_inode_old, os.fsdecode(name_old), parent_inode_new,
                         os.fsdecode(name_new), flags)

    @_handler
    def link(self, inode, new_parent_inode, new_name, ctx):
        self.tree.link()

    @_handler
    def mknod(self, parent_inode, name, mode, rdev, ctx):
        h = self.tree.mknod(parent_inode, os.fsdecode(name), mode, ctx.uid, ctx.gid)
        self.tree.release(h.fh)
        return self._entry(h.inode)

    def _info(self, h) -> pyfuse3.FileInfo:
        # generated per open, or changed by the daemon and the kernel's copy not yet
        # dropped: read from the daemon, past the page cache and the cached size
        uncached = h.snapshot is not None or h.inode.ino in self._unsettled
        return pyfuse3.FileInfo(fh=h.fh, direct_io=uncached, keep_cache=not uncached)

    @_handler
    async def open(self, inode, flags, ctx):
        h = self.tree.open(inode, flags)
        if h.inode.role == Role.SESSION_CONTEXT and self.intake is not None:
            search = None
            if self.searcher is not None:
                searcher = self.searcher
                search = lambda q, scope: searcher.search(q, scope, QueryOptions(k=8)).hits  # noqa: E731
            sess, budget = h.inode.qopts, self.session_budget
            text = await trio.to_thread.run_sync(self.intake.context_for, sess, budget, search)
            h.snapshot = text.encode()
        return self._info(h)

    @_handler
    def create(self, parent_inode, name, mode, flags, ctx):
        h = self.tree.create(parent_inode, os.fsdecode(name), mode, flags, ctx.uid, ctx.gid)
        return self._info(h), self._entry(h.inode)

    @_handler
    def read(self, fh, off, size):
        return self.tree.read(fh, off, size)

    @_handler
    def write(self, fh, off, buf):
        return self.tree.write(fh, off, buf)

    @_handler
    async def flush(self, fh):
        try:
            self.tree.flush(fh)
        except SessionAction as act:
            await self._session_action(act)

    async def _session_action(self, act: SessionAction) -> None:
        """compact / end: extract what is pending (off the event loop), then act."""
        sess = act.session
        if self.intake_service is not None:
            await self.intake_service.extract(sess)
        if act.command == "compact":
            self.intake.compact(sess)
        else:
            self.intake.end_session(sess)
            if act.inode is not None:
                self.tree.session_ended(act.inode)

    @_handler
    async def fsync(self, fh, datasync):
        if self.tree.fsync(fh) and self.indexer is not None and self.indexer.error is None:
            # fsync is an index barrier (SPEC §3): searchable when it returns
            self.indexer.wake()
            await self.indexer.barrier(self.tree.memory.generation,
                                       self.fsync_barrier_timeout)

    @_handler
    def release(self, fh):
        self.tree.release(fh)

    @_handler
    def fsyncdir(self, fh, datasync):
        self.tree.fsyncdir(fh)

    async def statfs(self, ctx):
        s = pyfuse3.StatvfsData()
        s.f_bsize = s.f_frsize = 4096
        s.f_blocks = 1 << 28
        s.f_bfree = s.f_bavail = 1 << 27
        s.f_files = 1 << 24
        s.f_ffree = s.f_favail = (1 << 24) - len(self.tree.inodes)
        s.f_namemax = 255
        return s

    # Extended attributes are off by default (SPEC §3): ENOSYS makes the kernel stop asking,
    # so `ls -l` costs no round trip per file. With `-o ctx_xattr` a node's directory and
    # its files answer user.ctx.* with the facts of meta.yaml.
    def _xattrs(self, inode: int) -> dict[bytes, bytes]:
        node = self.tree.get(inode).node
        if node is None:
            return {}
        facts = {"id": node.id, "type": node.type, "version": node.version,
                 "indexed_version": node.indexed_version,
                 "path": self.tree.memory.node_path(node)}
        return {f"user.ctx.{k}".encode(): str(v).encode() for k, v in facts.items()}

    async def getxattr(self, inode, name, ctx):
        if not self.xattrs:
            raise pyfuse3.FUSEError(errno.ENOSYS)
        try:
            return self._xattrs(inode)[name]
        except (KeyError, ContextFSError):
            raise pyfuse3.FUSEError(pyfuse3.ENOATTR) from None

    async def listxattr(self, inode, ctx):
        if not self.xattrs:
            raise pyfuse3.FUSEError(errno.ENOSYS)
        try:
            return list(self._xattrs(inode))
        except ContextFSError:
            return []

    async def setxattr(self, inode, name, value, ctx):
        raise pyfuse3.FUSEError(errno.ENOSYS)

    async def removexattr(self, inode, name, ctx):
        raise pyfuse3.FUSEError(errno.ENOSYS)
