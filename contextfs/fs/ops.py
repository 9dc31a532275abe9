"""The pyfuse3 adapter: inode numbers and EntryAttributes in, FUSEError out.

A protocol adapter only (borg's `fuse.py` says the same of itself): every handler decodes
names, awaits `fs.tree.Tree`, converts the result to `EntryAttributes`/`FileInfo`, turns a
`contextfs.errors` exception into its errno (the errno table is the exception classes
themselves), records refusals for `.status`, and turns any unexpected exception into EIO
so that nothing escapes a handler and kills the mount. It also tells the kernel what the
daemon changed (the invalidation task), which is kernel protocol too. No search, no
sessions, no indexer here: those are the tree's role handlers.

On a shared store each request runs in `contextfs.greenwait`: while one waits for the
server, the others are served; requests that only read (`_READERS`) may run in the middle
of another's statement.

Imports: pyfuse3, trio, the standard library, `contextfs.fs.*`, `contextfs.greenwait` and
`contextfs.errors`.
"""

from __future__ import annotations

import errno
import functools
import logging
import math
import os
import stat
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from importlib import metadata
from typing import Any, Concatenate, ParamSpec, TypeVar

import pyfuse3
import trio

from contextfs import greenwait
from contextfs.errors import ContextFSError
from contextfs.fs.inode import Attr, Handle, Inode, Invalidation
from contextfs.fs.tree import Tree

log = logging.getLogger(__name__)

# pyfuse3 built by scripts/build_pyfuse3.py hands readdir/fsyncdir the directory's inode
# when the file handle is 0. Only then can opendir answer ENOSYS, which makes Linux skip
# OPENDIR/RELEASEDIR and keep listings in its readdir cache (docs/architecture.md).
DIR_HANDLE_IS_INODE = "+contextfs.dirino" in metadata.version("pyfuse3")
# The same build sets FOPEN_NOFLUSH on request: a descriptor opened read-only has nothing
# to commit at close(), so the kernel need not send (and close() wait for) a FLUSH.
NOFLUSH = hasattr(pyfuse3.FileInfo(), "noflush")

# extended attributes of POSIX ACLs: not supported, and not a refusal worth a reason
ACL_XATTRS = ("system.posix_acl_access", "system.posix_acl_default")

# errnos that are answers, not refusals: they are not recorded in .status.
_QUIET = {
    errno.ENOENT,
    errno.EEXIST,
    errno.ENOTEMPTY,
    errno.ENOTDIR,
    errno.EISDIR,
    errno.ENODATA,
    errno.ENOSYS,
}


# Requests that only read what the tree holds (or the store, which they wait their turn
# for): they may be served while another request's statement waits for the server
# (greenwait). `open` is one when it opens for reading only, without O_TRUNC.
_READERS = frozenset(
    {"lookup", "getattr", "readlink", "opendir", "readdir", "read", "statfs", "access"}
    | {"getxattr", "listxattr"}
)


def _reads_only(op: str, args: Sequence[object]) -> bool:
    if op in _READERS:
        return True
    if op == "open" and len(args) > 1 and isinstance(args[1], int):
        flags = args[1]
        return flags & os.O_ACCMODE == os.O_RDONLY and not flags & os.O_TRUNC
    return False


P = ParamSpec("P")
R = TypeVar("R")


def _handler(
    fn: Callable[Concatenate[Operations, P], Awaitable[R]],
) -> Callable[Concatenate[Operations, P], Coroutine[Any, Any, R]]:
    """Run a handler; map domain errors to FUSEError, anything else to EIO."""

    @functools.wraps(fn)
    async def wrapper(self: Operations, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            with self.tree.request(fn.__name__):
                return await greenwait.run(
                    fn(self, *args, **kwargs), reader=_reads_only(fn.__name__, args)
                )
        except pyfuse3.FUSEError:
            raise
        except ContextFSError as exc:
            if exc.errno not in _QUIET and not getattr(exc, "recorded", False):
                self.tree.memory.refuse(self._where(fn.__name__, args), exc, uid=_uid(args))
            raise pyfuse3.FUSEError(exc.errno) from None
        except Exception as exc:
            log.exception("internal error in %s", fn.__name__)
            self.tree.memory.refuse(
                self._where(fn.__name__, args),
                ContextFSError(f"internal error in {fn.__name__}: {exc!r}"),
                uid=_uid(args),
            )
            raise pyfuse3.FUSEError(errno.EIO) from None
        finally:
            self._flush_invalidations()

    return wrapper


# the handlers whose first argument is a file handle (`Operations.open`'s), not an inode
_HANDLE_OPS = frozenset({"read", "write", "flush", "fsync", "release"})


def _uid(args: Sequence[object]) -> int | None:
    """The caller's uid, from the request context a handler was given (None without)."""
    ctx = next((a for a in args if isinstance(a, pyfuse3.RequestContext)), None)
    return ctx.uid if ctx is not None else None


class Operations(pyfuse3.Operations):
    enable_writeback_cache = False
    enable_acl = False

    def __init__(
        self,
        tree: Tree,
        *,
        entry_timeout: float = 60.0,
        attr_timeout: float = 60.0,
        xattrs: bool = False,
        cache_dirs: bool = False,
    ) -> None:
        super().__init__()
        if cache_dirs and not DIR_HANDLE_IS_INODE:
            raise ValueError("kernel directory caching needs pyfuse3 from build_pyfuse3.py")
        self.cache_dirs = cache_dirs
        self.tree = tree
        self.xattrs = xattrs
        self.entry_timeout = entry_timeout
        self.attr_timeout = attr_timeout
        self._send, self._recv = trio.open_memory_channel[Invalidation](math.inf)
        self._unsettled: dict[int, int] = {}  # inode -> queued invalidations not yet sent

    # ---- plumbing -----------------------------------------------------------------------

    def _where(self, op: str, args: Sequence[object]) -> str:
        try:
            if args and isinstance(args[0], int) and op in _HANDLE_OPS:
                # a file handle, not an inode: as an inode number it named another file
                # (a refused session command was shown as `flush agent/default/.archive`)
                h = self.tree.table.handles.get(args[0])
                return f"{op} {self.tree.table.path(h.inode)}" if h is not None else op
            if args and isinstance(args[0], int):
                inode = self.tree.table.inodes.get(args[0])
                if inode is not None and op in (
                    "lookup",
                    "mkdir",
                    "create",
                    "unlink",
                    "rmdir",
                    "symlink",
                    "mknod",
                    "rename",
                ):
                    name = args[1] if len(args) > 1 and isinstance(args[1], bytes) else b""
                    base = self.tree.table.path(inode)
                    name_s = os.fsdecode(name)
                    return f"{op} {name_s if base == '/' else base + '/' + name_s}"
                if inode is not None:
                    return f"{op} {self.tree.table.path(inode)}"
        except Exception:  # noqa: BLE001 - describing a path must never fail a request
            pass
        return op

    def flush_invalidations(self) -> None:
        """After a background change (inbox, consolidation, summaries, the indexer): send
        what the tree wants the kernel to forget."""
        self._flush_invalidations()

    def _flush_invalidations(self) -> None:
        if self.tree.table.invalidations:
            for inv in self.tree.table.invalidations:
                if inv.listing:
                    self._drop_listing(inv.ino)
                    continue
                if inv.name is None:
                    # until the kernel has dropped it, an open of this file reads past
                    # its page cache (see _info)
                    self._unsettled[inv.ino] = self._unsettled.get(inv.ino, 0) + 1
                self._send.send_nowait(inv)
            self.tree.table.invalidations.clear()

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
            inodes: list[Invalidation] = []
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
                pyfuse3.invalidate_entry_async(inv.ino, os.fsencode(inv.name), ignore_enoent=True)
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
    async def lookup(
        self,
        parent_inode: pyfuse3.InodeT,
        name: pyfuse3.FileNameT,
        ctx: pyfuse3.RequestContext | None = None,
    ) -> pyfuse3.EntryAttributes:
        caller = (ctx.uid, ctx.gid, ctx.pid) if ctx is not None else None
        return self._entry(await self.tree.lookup(parent_inode, os.fsdecode(name), caller))

    async def forget(self, inode_list: Sequence[tuple[pyfuse3.InodeT, int]]) -> None:
        try:
            for ino, n in inode_list:
                self.tree.forget(ino, n)
        except Exception:  # noqa: BLE001 - forget has no reply; never let it escape
            log.exception("forget failed")

    @_handler
    async def getattr(
        self, inode: pyfuse3.InodeT, ctx: pyfuse3.RequestContext | None = None
    ) -> pyfuse3.EntryAttributes:
        return self._attr(self.tree.attr(self.tree.get(inode)))

    @_handler
    async def setattr(
        self,
        inode: pyfuse3.InodeT,
        attr: pyfuse3.EntryAttributes,
        fields: pyfuse3.SetattrFields,
        fh: pyfuse3.FileHandleT | None,
        ctx: pyfuse3.RequestContext,
    ) -> pyfuse3.EntryAttributes:
        changed = self.tree.setattr(
            inode,
            size=attr.st_size if fields.update_size else None,
            mode=attr.st_mode if fields.update_mode else None,
            uid=attr.st_uid if fields.update_uid else None,
            gid=attr.st_gid if fields.update_gid else None,
            atime_ns=attr.st_atime_ns if fields.update_atime else None,
            mtime_ns=attr.st_mtime_ns if fields.update_mtime else None,
            fh=fh,
        )
        return self._attr(self.tree.attr(changed))

    @_handler
    async def readlink(
        self, inode: pyfuse3.InodeT, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.FileNameT:
        return pyfuse3.FileNameT(self.tree.readlink(inode))

    @_handler
    async def opendir(
        self, inode: pyfuse3.InodeT, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.FileHandleT:
        if self.cache_dirs:
            # ENOSYS: from now on the kernel opens directories itself, keeps what it
            # listed, and readdir/fsyncdir receive the inode as their handle
            raise pyfuse3.FUSEError(errno.ENOSYS)
        if not self.tree.get(inode).is_dir:
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        return pyfuse3.FileHandleT(inode)

    async def readdir(
        self, fh: pyfuse3.FileHandleT, start_id: int, token: pyfuse3.ReaddirToken
    ) -> None:
        try:
            with self.tree.request("readdir"):
                # a listing built from the store (a type directory's first) waits its turn
                # for the store like any reader, not on the loop (greenwait)
                await greenwait.run(self._readdir(fh, start_id, token), reader=True)
        except ContextFSError as exc:
            raise pyfuse3.FUSEError(exc.errno) from None
        except Exception:
            log.exception("internal error in readdir")
            raise pyfuse3.FUSEError(errno.EIO) from None

    async def _readdir(
        self, fh: pyfuse3.FileHandleT, start_id: int, token: pyfuse3.ReaddirToken
    ) -> None:
        for name, child, off in self.tree.listdir(fh, start_id):
            attrs = self._attr(self.tree.attr(child))
            if not pyfuse3.readdir_reply(token, os.fsencode(name), attrs, off):
                break
            self.tree.ref(child)

    async def releasedir(self, fh: pyfuse3.FileHandleT) -> None:
        return None

    @_handler
    async def mkdir(
        self,
        parent_inode: pyfuse3.InodeT,
        name: pyfuse3.FileNameT,
        mode: int,
        ctx: pyfuse3.RequestContext,
    ) -> pyfuse3.EntryAttributes:
        return self._entry(self.tree.mkdir(parent_inode, os.fsdecode(name), mode, ctx.uid, ctx.gid))

    @_handler
    async def rmdir(
        self, parent_inode: pyfuse3.InodeT, name: pyfuse3.FileNameT, ctx: pyfuse3.RequestContext
    ) -> None:
        await self.tree.rmdir(parent_inode, os.fsdecode(name))

    @_handler
    async def unlink(
        self, parent_inode: pyfuse3.InodeT, name: pyfuse3.FileNameT, ctx: pyfuse3.RequestContext
    ) -> None:
        self.tree.unlink(parent_inode, os.fsdecode(name))

    @_handler
    async def symlink(
        self,
        parent_inode: pyfuse3.InodeT,
        name: pyfuse3.FileNameT,
        target: pyfuse3.FileNameT,
        ctx: pyfuse3.RequestContext,
    ) -> pyfuse3.EntryAttributes:
        return self._entry(
            self.tree.symlink(parent_inode, os.fsdecode(name), target, ctx.uid, ctx.gid)
        )

    @_handler
    async def rename(
        self,
        parent_inode_old: pyfuse3.InodeT,
        name_old: pyfuse3.FileNameT,
        parent_inode_new: pyfuse3.InodeT,
        name_new: pyfuse3.FileNameT,
        flags: int,
        ctx: pyfuse3.RequestContext,
    ) -> None:
        self.tree.rename(
            parent_inode_old, os.fsdecode(name_old), parent_inode_new, os.fsdecode(name_new), flags
        )

    @_handler
    async def link(
        self,
        inode: pyfuse3.InodeT,
        new_parent_inode: pyfuse3.InodeT,
        new_name: pyfuse3.FileNameT,
        ctx: pyfuse3.RequestContext,
    ) -> pyfuse3.EntryAttributes:
        return self._entry(self.tree.link(inode, new_parent_inode, os.fsdecode(new_name)))

    @_handler
    async def mknod(
        self,
        parent_inode: pyfuse3.InodeT,
        name: pyfuse3.FileNameT,
        mode: int,
        rdev: int,
        ctx: pyfuse3.RequestContext,
    ) -> pyfuse3.EntryAttributes:
        return self._entry(
            await self.tree.mknod(parent_inode, os.fsdecode(name), mode, ctx.uid, ctx.gid)
        )

    def _info(self, h: Handle) -> pyfuse3.FileInfo:
        # generated per open, or changed by the daemon and the kernel's copy not yet
        # dropped: read from the daemon, past the page cache and the cached size
        uncached = h.snapshot is not None or h.inode.ino in self._unsettled
        info = pyfuse3.FileInfo(
            fh=pyfuse3.FileHandleT(h.fh), direct_io=uncached, keep_cache=not uncached
        )
        if NOFLUSH and not h.writable:  # close() of a reader: no FLUSH (Tree.flush: no-op)
            info.noflush = True  # type: ignore[attr-defined]  # only our pyfuse3 build has it
        return info

    @_handler
    async def open(
        self, inode: pyfuse3.InodeT, flags: int, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.FileInfo:
        caller = (ctx.uid, ctx.gid, ctx.pid) if ctx is not None else None
        return self._info(await self.tree.open(inode, flags, caller))

    @_handler
    async def create(
        self,
        parent_inode: pyfuse3.InodeT,
        name: pyfuse3.FileNameT,
        mode: int,
        flags: int,
        ctx: pyfuse3.RequestContext,
    ) -> tuple[pyfuse3.FileInfo, pyfuse3.EntryAttributes]:
        h = await self.tree.create(
            parent_inode, os.fsdecode(name), mode, flags, ctx.uid, ctx.gid, ctx.pid
        )
        return self._info(h), self._entry(h.inode)

    @_handler
    async def read(self, fh: pyfuse3.FileHandleT, off: int, size: int) -> bytes:
        return self.tree.read(fh, off, size)

    @_handler
    async def write(self, fh: pyfuse3.FileHandleT, off: int, buf: bytes, pid: int = 0) -> int:
        # pid: the writer's, from the build of scripts/build_pyfuse3.py (0 from a stock one)
        return self.tree.write(fh, off, buf, pid)

    @_handler
    async def flush(self, fh: pyfuse3.FileHandleT, pid: int = 0) -> None:
        await self.tree.flush(fh, pid)

    @_handler
    async def fsync(self, fh: pyfuse3.FileHandleT, datasync: bool) -> None:
        await self.tree.fsync(fh)

    @_handler
    async def release(self, fh: pyfuse3.FileHandleT) -> None:
        self.tree.release(fh)

    @_handler
    async def fsyncdir(self, fh: pyfuse3.FileHandleT, datasync: bool) -> None:
        self.tree.fsyncdir(fh)

    async def statfs(self, ctx: pyfuse3.RequestContext) -> pyfuse3.StatvfsData:
        """`df` shows the filesystem the data dir is on: everything stored (the DuckDB
        file, refused bytes, the indexes) takes its space there, so its size, free space
        and inodes are the mount's."""
        try:
            v = os.statvfs(self.tree.memory.data_dir)
        except OSError as exc:
            log.warning("statfs of the data dir failed: %s", exc)
            raise pyfuse3.FUSEError(exc.errno or errno.EIO) from None
        s = pyfuse3.StatvfsData()
        s.f_bsize, s.f_frsize = v.f_bsize, v.f_frsize
        s.f_blocks, s.f_bfree, s.f_bavail = v.f_blocks, v.f_bfree, v.f_bavail
        s.f_files, s.f_ffree, s.f_favail = v.f_files, v.f_ffree, v.f_favail
        s.f_namemax = 255  # NAME_MAX of the tree, whatever the disk allows
        return s

    # Extended attributes are off by default (SPEC §3): ENOSYS makes the kernel stop asking,
    # so `ls -l` costs no round trip per file. With `-o ctx_xattr` a node's directory and
    # its files answer user.ctx.* with the facts of meta.yaml. Linux allows user.* only on
    # regular files and directories (a symlink's or FIFO's read is ENODATA whatever the
    # filesystem says), so those list none: `rsync -X` would fail to copy names it listed.
    def _xattrs(self, inode: int) -> dict[bytes, bytes]:
        i = self.tree.get(inode)
        node = i.node
        if node is None or not (stat.S_ISREG(i.mode) or stat.S_ISDIR(i.mode)):
            return {}
        facts = {
            "id": node.id,
            "type": node.type,
            "version": node.version,
            "indexed_version": node.indexed_version,
            "path": self.tree.memory.node_path(node),
        }
        return {f"user.ctx.{k}".encode(): str(v).encode() for k, v in facts.items()}

    async def getxattr(
        self, inode: pyfuse3.InodeT, name: pyfuse3.XAttrNameT, ctx: pyfuse3.RequestContext
    ) -> bytes:
        if not self.xattrs:
            raise pyfuse3.FUSEError(errno.ENOSYS)
        try:
            return self._xattrs(inode)[name]
        except (KeyError, ContextFSError):
            raise pyfuse3.FUSEError(pyfuse3.ENOATTR) from None

    async def listxattr(
        self, inode: pyfuse3.InodeT, ctx: pyfuse3.RequestContext
    ) -> Sequence[pyfuse3.XAttrNameT]:
        if not self.xattrs:
            raise pyfuse3.FUSEError(errno.ENOSYS)
        try:
            return [pyfuse3.XAttrNameT(n) for n in self._xattrs(inode)]
        except ContextFSError:
            return []

    # Setting or removing one is refused with ENOTSUP and its reason in .status, every
    # time: ENOSYS would make the kernel answer later calls itself, with no reason given.
    # An ACL is refused quietly, as a filesystem without ACLs does: `cp -a`, `sed -i` and
    # editors copy a file's ACL as a matter of course and go on when it is not supported
    # (a `cp -a` of 2,000 files filled `.status` with 2,181 refusals).
    @_handler
    async def setxattr(
        self,
        inode: pyfuse3.InodeT,
        name: pyfuse3.XAttrNameT,
        value: bytes,
        ctx: pyfuse3.RequestContext,
    ) -> None:
        self._refuse_xattr(inode, os.fsdecode(name), "set")

    @_handler
    async def removexattr(
        self, inode: pyfuse3.InodeT, name: pyfuse3.XAttrNameT, ctx: pyfuse3.RequestContext
    ) -> None:
        self._refuse_xattr(inode, os.fsdecode(name), "removed")

    def _refuse_xattr(self, inode: int, name: str, what: str) -> None:
        if name.startswith(ACL_XATTRS):
            self.tree.get(inode)  # a stale inode is ENOENT, as for any call
            raise pyfuse3.FUSEError(errno.ENOTSUP)
        self.tree.refuse_xattr(inode, name, what, shown=self.xattrs)
