"""The project's exceptions: every refusal carries an errno and a readable reason.

Domain code raises these; only `fs.ops` turns them into `pyfuse3.FUSEError`, and only
`cli` turns them into exit codes. Nothing here imports anything of ours.
"""

from __future__ import annotations

import errno as _errno


class ContextFSError(Exception):
    """A refusal or fault with an errno for the shell and a reason for `.status`."""

    errno: int = _errno.EIO
    exit_code: int = 1

    def __init__(self, reason: str, *, errno: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        if errno is not None:
            self.errno = errno


class InvalidInput(ContextFSError):
    """Unknown type, missing key, malformed front matter, a field of the wrong type."""

    errno = _errno.EINVAL


class ReadOnly(ContextFSError):
    """A write to something that is derived or read-only (meta.yaml, .history, .schemas)."""

    errno = _errno.EACCES


class TooBig(ContextFSError):
    errno = _errno.EFBIG


class NameTooLong(ContextFSError):
    errno = _errno.ENAMETOOLONG


class NotSupported(ContextFSError):
    """Hard links, device nodes, FIFOs and sockets."""

    errno = _errno.EPERM


class NotAccepted(ContextFSError):
    """Content this place does not take (yet): media or an unknown format in an inbox."""

    errno = _errno.EOPNOTSUPP


class NotFound(ContextFSError):
    errno = _errno.ENOENT


class Exists(ContextFSError):
    errno = _errno.EEXIST


class NotEmpty(ContextFSError):
    errno = _errno.ENOTEMPTY


class NotADirectory(ContextFSError):
    errno = _errno.ENOTDIR


class IsADirectory(ContextFSError):
    errno = _errno.EISDIR


class CrossDevice(ContextFSError):
    """A move the tree cannot do in place (an attachment out of its nodes): `mv` copies."""

    errno = _errno.EXDEV


class Forbidden(ContextFSError):
    """Something this place never holds or gives up (a file in the root, an inbox item)."""

    errno = _errno.EACCES


class NotPermitted(ContextFSError):
    """The fixed structure: owners, type directories and the trash cannot be renamed or
    removed, and their permissions are fixed."""

    errno = _errno.EPERM


class BadHandle(ContextFSError):
    """A file handle that is unknown, or not open for what was asked of it."""

    errno = _errno.EBADF


class StoreDamaged(ContextFSError):
    """The canonical store failed an integrity check; the mount goes read-only."""

    errno = _errno.EROFS


class StoreBusy(ContextFSError):
    """The store had no room in its buffers for a change (DuckDB under `store_memory_mb`):
    nothing of it was stored, the buffers grew, and the same write fits when tried again;
    the mount stays writable."""

    errno = _errno.EAGAIN


class NoSpace(ContextFSError):
    """The disk under the store is full: the write is refused, nothing of it stored; the
    mount stays writable and takes writes again once there is room."""

    errno = _errno.ENOSPC


def disk_full(exc: BaseException) -> bool:
    """Whether a store's or the system's error says the disk is full (DuckDB's message,
    PostgreSQL's SQLSTATE 53100, an OSError's ENOSPC)."""
    if isinstance(exc, OSError) and exc.errno == _errno.ENOSPC:
        return True
    return "No space left on device" in str(exc) or getattr(exc, "sqlstate", None) == "53100"


class SchemaError(InvalidInput):
    """A context-type YAML file that does not load: reported as `file:line: reason`."""

    exit_code = 3

    def __init__(self, file: str, line: int, reason: str) -> None:
        super().__init__(f"{file}:{line}: {reason}")
        self.file = file
        self.line = line


class LLMUnavailable(ContextFSError):
    """The chat endpoint cannot be used (no key, unreachable, an HTTP error, no answer)."""


class EmbedderUnavailable(ContextFSError):
    """The embedding model or endpoint cannot be used (missing package, key, or answer)."""


class IndexCorrupt(ContextFSError):
    """A derived index that cannot be read: the caller deletes it and rebuilds."""


class IndexBusy(ContextFSError):
    """Another writer (in this process or another) holds a search index's lock."""

    errno = _errno.EBUSY


class StoreLocked(ContextFSError):
    """The store file is open in another process (another mount, or a CLI command)."""

    exit_code = 4


class UsageError(ContextFSError):
    """Bad command-line usage."""

    exit_code = 2


class MountRefused(ContextFSError):
    """libfuse, fusermount3 or the kernel refused the mount: the reason is what they said."""


class MountpointNotEmpty(UsageError):
    """A mount over files would hide them (libfuse 3 no longer refuses it): the user must
    say so with `-o nonempty`."""

    def __init__(self, mountpoint: object) -> None:
        super().__init__(
            f"{mountpoint} is not empty (its files would be hidden under the mount); "
            "mount over it with -o nonempty"
        )


class StoreUnavailable(ContextFSError):
    """The store's server cannot be reached (PostgreSQL stopped or the network gone): the
    write is refused, nothing of it stored; the mount reconnects by itself."""

    errno = _errno.EIO


class VersionConflict(ContextFSError):
    """Another mount changed the node since this one loaded it (optimistic concurrency):
    nothing was written; the caller re-applies on the latest version or keeps both."""

    errno = _errno.EAGAIN

    def __init__(self, reason: str, *, node_id: int | None = None) -> None:
        super().__init__(reason)
        self.node_id = node_id
