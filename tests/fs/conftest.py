"""FS-layer fixtures: the real Operations handlers over a real store, no kernel.

`FS` walks paths with `lookup` and drives create/open/write/flush/release the way the
kernel would for a shell command, so these tests run in milliseconds.
"""

from __future__ import annotations

import errno
import os

import pyfuse3
import pytest

from contextfs.fs.ops import Operations


class FixedStatus:
    """A mount's `.status` for trees built without a daemon (`build_operations`)."""

    def text(self, visible: object, unsettled: object) -> str:
        return "status\n"

    def json(self, visible: object, unsettled: object) -> str:
        return "{}\n"


class FS:
    def __init__(self, ops: Operations) -> None:
        self.ops = ops
        self.ctx = pyfuse3.RequestContext()

    async def ino(self, path: str) -> int:
        ino = pyfuse3.ROOT_INODE
        for part in [p for p in path.split("/") if p]:
            ino = (await self.ops.lookup(ino, os.fsencode(part), self.ctx)).st_ino
        return ino

    async def parent(self, path: str) -> tuple[int, bytes]:
        head, _, tail = path.rstrip("/").rpartition("/")
        return await self.ino(head), os.fsencode(tail)

    async def exists(self, path: str) -> bool:
        try:
            await self.ino(path)
        except pyfuse3.FUSEError as exc:
            if exc.errno == errno.ENOENT:
                return False
            raise
        return True

    async def mkdir(self, path: str) -> int:
        p, name = await self.parent(path)
        return (await self.ops.mkdir(p, name, 0o755, self.ctx)).st_ino

    async def write(
        self, path: str, data: bytes, *, append: bool = False, fsync: bool = False
    ) -> None:
        """open(O_CREAT|O_TRUNC or O_APPEND), write, [fsync], close — like `>`/`>>`."""
        p, name = await self.parent(path)
        flags = os.O_WRONLY | (os.O_APPEND if append else os.O_TRUNC)
        try:
            ino = (await self.ops.lookup(p, name, self.ctx)).st_ino
            fi = await self.ops.open(ino, flags, self.ctx)
        except pyfuse3.FUSEError as exc:
            if exc.errno != errno.ENOENT:
                raise
            fi, _ = await self.ops.create(p, name, 0o644, flags | os.O_CREAT, self.ctx)
        try:
            await self.ops.write(fi.fh, 0, data)
            if fsync:
                await self.ops.fsync(fi.fh, False)
            await self.ops.flush(fi.fh)
        finally:
            await self.ops.release(fi.fh)

    async def read(self, path: str) -> bytes:
        ino = await self.ino(path)
        fi = await self.ops.open(ino, os.O_RDONLY, self.ctx)
        try:
            return await self.ops.read(fi.fh, 0, 1 << 24)
        finally:
            await self.ops.release(fi.fh)

    async def text(self, path: str) -> str:
        return (await self.read(path)).decode()

    def ls(self, ino: int) -> list[str]:
        return sorted(name for name, _c, _o in self.ops.tree.listdir(ino, 0))

    async def listdir(self, path: str) -> list[str]:
        return self.ls(await self.ino(path))

    async def unlink(self, path: str) -> None:
        p, name = await self.parent(path)
        await self.ops.unlink(p, name, self.ctx)

    async def rmdir(self, path: str) -> None:
        p, name = await self.parent(path)
        await self.ops.rmdir(p, name, self.ctx)

    async def rm_r(self, path: str) -> None:
        """What `rm -r` does: unlink every file, rmdir every folder, bottom up, in
        readdir order."""
        ino = await self.ino(path)
        inode = self.ops.tree.get(ino)
        for name in [name for name, _c, _o in self.ops.tree.listdir(ino, 0)]:
            child = self.ops.tree.table.child(inode, name)
            if child.is_dir:
                await self.rm_r(f"{path}/{name}")
            else:
                await self.unlink(f"{path}/{name}")
        assert inode.is_dir
        await self.rmdir(path)

    async def rename(self, old: str, new: str, flags: int = 0) -> None:
        p1, n1 = await self.parent(old)
        p2, n2 = await self.parent(new)
        await self.ops.rename(p1, n1, p2, n2, flags, self.ctx)

    async def errno_of(self, coro) -> int:
        try:
            await coro
        except pyfuse3.FUSEError as exc:
            return exc.errno
        return 0


@pytest.fixture
def fs(tree) -> FS:
    return FS(Operations(tree))
