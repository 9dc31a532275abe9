"""`SpillBuffer`: a big attachment's bytes while it is open, kept in an unlinked temporary
file beside the store instead of the daemon's memory.

An attachment's buffer (`Inode.data`) is a `bytearray` while it is small. Past `SPILL_AT`
it moves to a `SpillBuffer`, which answers the same slicing, assignment, `extend`, tail
`del` and `len` through `pread`/`pwrite`/`ftruncate` of a file opened with `O_TMPFILE`: the
kernel's page cache holds its pages (written back to disk under memory pressure), not the
daemon's heap, so a 200 MiB `dd` does not grow the daemon by 200 MiB. The file has no name:
it is gone when the buffer is closed or the daemon dies. A full disk there is `NoSpace`
(ENOSPC to the writer); the callers that only read fall back to memory.

What does not fit the bytearray model is refused (`TypeError`), not emulated slowly: an
assignment that changes the length inside the file, iteration (`bytearray(buf)` would
read it a byte at a time: use `bytes(buf)`), and the buffer protocol (a `memoryview` of
it): readers take slices, which are `bytes`.
"""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import overload

from contextfs.errors import NoSpace

# An attachment's buffer moves to a file past this size (a smaller one stays a bytearray).
SPILL_AT = 8 * 1024 * 1024

# What a copy or a fill moves per read/write.
_STEP = 4 * 1024 * 1024


class SpillBuffer:
    """A growable byte buffer in an unlinked temporary file in `directory`."""

    __slots__ = ("_fd", "_size", "directory")

    def __init__(self, directory: Path | str, data: bytes | bytearray | memoryview = b"") -> None:
        self.directory = Path(directory)
        self._fd = -1
        self._size = 0
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            try:
                self._fd = os.open(self.directory, os.O_TMPFILE | os.O_RDWR, 0o600)
            except OSError as exc:  # a filesystem without O_TMPFILE: a name, unlinked at once
                if exc.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
                    raise
                self._fd, name = tempfile.mkstemp(dir=self.directory)
                os.unlink(name)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise NoSpace(f"the disk is full: no room for a spill file in {directory}") from exc
            raise
        if data:
            self.extend(data)

    @classmethod
    def filled(
        cls, directory: Path | str, size: int, pieces: Iterable[tuple[int, bytes]]
    ) -> SpillBuffer:
        """A buffer of `size` bytes, each (offset, bytes) piece written at its offset, in
        any order (what no piece covers reads as zeros)."""
        buf = cls(directory)
        try:
            buf.resize(size)
            for off, piece in pieces:
                buf._write(off, piece)
        except BaseException:
            buf.close()
            raise
        return buf

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        self.close()

    def __len__(self) -> int:
        return self._size

    def __bool__(self) -> bool:
        return self._size > 0

    @overload
    def __getitem__(self, key: int) -> int: ...
    @overload
    def __getitem__(self, key: slice) -> bytes: ...
    def __getitem__(self, key: int | slice) -> int | bytes:
        if isinstance(key, int):
            i = key + self._size if key < 0 else key
            if not 0 <= i < self._size:
                raise IndexError("SpillBuffer index out of range")
            return os.pread(self._fd, 1, i)[0]
        start, stop, step = key.indices(self._size)
        if step != 1:
            raise TypeError("a SpillBuffer is sliced with step 1 only")
        return self._read(start, stop)

    def _read(self, start: int, stop: int) -> bytes:
        if stop <= start:
            return b""
        out = os.pread(self._fd, stop - start, start)
        if len(out) == stop - start:
            return out
        parts = [out]  # a short read: the rest, piece by piece
        got = start + len(out)
        while got < stop:
            more = os.pread(self._fd, stop - got, got)
            if not more:
                raise OSError(f"spill file ends at {got}, expected {stop} bytes")
            parts.append(more)
            got += len(more)
        return b"".join(parts)

    def __setitem__(self, key: slice, value: bytes | bytearray | memoryview) -> None:
        """buf[a:b] = value: an overwrite (b - a == len(value)), or a write that replaces
        the tail from a (b at or past the end), as a bytearray does."""
        start, stop, step = key.indices(self._size)
        n = len(value)
        if step != 1 or (stop - start != n and stop < self._size):
            raise TypeError("a SpillBuffer cannot change its length inside the file")
        self._write(start, value)
        end = start + n
        if stop >= self._size and end < self._size:
            os.ftruncate(self._fd, end)  # the tail it replaced was longer
            self._size = end
        self._size = max(self._size, end)

    def _write(self, off: int, value: bytes | bytearray | memoryview) -> None:
        with memoryview(value) as view:
            done = 0
            try:
                while done < len(view):
                    done += os.pwrite(self._fd, view[done:], off + done)
            except OSError as exc:
                if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise NoSpace(
                        f"the disk is full: no room for an open file's bytes in {self.directory}"
                    ) from exc
                raise

    def extend(self, value: bytes | bytearray | memoryview | SpillBuffer) -> None:
        if isinstance(value, SpillBuffer):
            for at in range(0, len(value), _STEP):
                self.extend(value._read(at, min(len(value), at + _STEP)))
            return
        self._write(self._size, value)
        self._size += len(value)

    def __iadd__(self, value: bytes | bytearray | memoryview) -> SpillBuffer:
        self.extend(value)
        return self

    def __delitem__(self, key: slice) -> None:
        """del buf[n:]: the file ends at n (the only deletion a buffer needs)."""
        start, stop, step = key.indices(self._size)
        if step != 1 or (stop < self._size and stop > start):
            raise TypeError("a SpillBuffer can only be cut at an offset")
        self.resize(min(start, self._size))

    def resize(self, size: int) -> None:
        """Cut to size, or extend with zeros (a hole in the file: no bytes are written)."""
        os.ftruncate(self._fd, size)
        self._size = size

    def __bytes__(self) -> bytes:
        return self._read(0, self._size)

    def __iter__(self) -> None:
        raise TypeError("a SpillBuffer is read in slices, not byte by byte (bytes(buf))")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SpillBuffer):
            other = bytes(other)
        if not isinstance(other, bytes | bytearray | memoryview):
            return NotImplemented
        return len(other) == self._size and bytes(self) == bytes(other)

    __hash__ = None  # type: ignore[assignment]

    def copy(self) -> SpillBuffer:
        """Another buffer with the same bytes (the kernel copies them: `copy_file_range`)."""
        out = SpillBuffer(self.directory)
        done = 0
        try:
            while done < self._size:
                n = os.copy_file_range(self._fd, out._fd, self._size - done, done, done)
                if n <= 0:
                    raise OSError(f"copy of a spill file stopped at {done} of {self._size}")
                done += n
        except OSError as exc:
            out.close()
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise NoSpace(f"the disk is full: no room for a copy in {self.directory}") from exc
            out = SpillBuffer(self.directory)
            out.extend(self)
            return out
        out._size = self._size
        return out
