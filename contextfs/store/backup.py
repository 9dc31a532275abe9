"""Backups of the DuckDB store file, and putting one back (`contextfs restore`).

A mount whose store passed its check at start and took no fault copies the store file,
once it is closed (checkpointed by DuckDB, whole) and before it lets go of the store's
lock, to `backups/contextfs-<UTC time>.duckdb` in the data dir, at most once per
`backup_interval_hours`, keeping the newest `backup_keep`. The copy is written beside,
flushed, then renamed into place: a crash leaves a `.tmp` file, never a half backup.
A store whose file cannot be read is mounted read-only from the newest backup that opens
and passes a full check (`contextfs.app.checked_backup`: a bad block in a backup shows only
when it is read), and `contextfs restore` puts that backup back, moving the damaged file
aside (never deleting it: `contextfs salvage` reads what it still holds).

Boundary: files only (the store's file and its WAL); no connection. A PostgreSQL store is
the server's to back up (`pg_dump`, its WAL archive): none of this applies to it.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from contextfs.errors import StoreDamaged, UsageError

log = logging.getLogger(__name__)

BACKUP_DIR = "backups"
_PREFIX, _SUFFIX = "contextfs-", ".duckdb"
_STAMP = "%Y%m%dT%H%M%SZ"


@dataclass(frozen=True, slots=True)
class BackupPolicy:
    """Where backups go, how many are kept, how long between two (seconds)."""

    directory: Path
    keep: int = 2
    interval: float = 86400.0


def backups(directory: Path) -> list[Path]:
    """The backups in `directory`, newest first."""
    if not directory.is_dir():
        return []
    found = [
        p
        for p in directory.iterdir()
        if p.name.startswith(_PREFIX) and p.name.endswith(_SUFFIX) and p.is_file()
    ]
    return sorted(found, key=_order, reverse=True)


def _order(backup: Path) -> tuple[str, int]:
    """A backup's place in time: its stamp, then its number among those of one second
    (`contextfs-<stamp>.1.duckdb` was taken after `contextfs-<stamp>.duckdb`)."""
    stamp, _, n = backup.name.removeprefix(_PREFIX).removesuffix(_SUFFIX).partition(".")
    return stamp, int(n) if n.isdigit() else 0


def taken_at(backup: Path) -> float:
    """When a backup was taken (from its name; its mtime if the name says nothing)."""
    stamp = backup.name.removeprefix(_PREFIX).removesuffix(_SUFFIX).split(".")[0]
    try:
        return time.mktime(time.strptime(stamp, _STAMP)) - time.timezone
    except ValueError:
        return backup.stat().st_mtime


def when(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _copy(src: Path, dst: Path) -> None:
    """src to dst through `dst.tmp`: flushed, renamed, the folder flushed."""
    tmp = dst.with_name(dst.name + ".tmp")
    try:
        with open(src, "rb") as fin, open(tmp, "wb") as fout:
            shutil.copyfileobj(fin, fout, 1 << 20)
            fout.flush()
            os.fsync(fout.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)  # a full disk: the part copied would keep it full
        raise
    os.chmod(tmp, 0o600)
    os.replace(tmp, dst)
    fd = os.open(dst.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def take(db: Path, policy: BackupPolicy, now: float | None = None) -> Path | None:
    """Copy the closed store file `db` if a backup is due; drop the oldest beyond
    `policy.keep`. Returns the new backup, None when none was due."""
    now = time.time() if now is None else now
    if policy.keep <= 0:
        return None
    have = backups(policy.directory)
    if have and now - taken_at(have[0]) < policy.interval:
        return None
    wal = db.with_name(db.name + ".wal")
    if wal.exists() and wal.stat().st_size:  # not checkpointed: no whole copy to take
        log.warning("no backup: %s still has a write-ahead log", db)
        return None
    policy.directory.mkdir(mode=0o700, exist_ok=True)
    dst = policy.directory / f"{_PREFIX}{time.strftime(_STAMP, time.gmtime(now))}{_SUFFIX}"
    n = 1
    while dst.exists():  # two in one second (tests, a quick remount)
        dst = dst.with_name(f"{_PREFIX}{time.strftime(_STAMP, time.gmtime(now))}.{n}{_SUFFIX}")
        n += 1
    _copy(db, dst)
    for old in backups(policy.directory)[policy.keep :]:
        old.unlink()
    log.info("backup of the store: %s (%d kept)", dst, min(policy.keep, len(have) + 1))
    return dst


def restore(db: Path, source: Path) -> Path:
    """Put the backup `source` in place of the store file `db` (the store not open);
    the file it replaces, and its WAL, are moved aside, not deleted (its commit mark,
    which says what the replaced file held, goes). Returns where."""
    if not source.is_file():
        raise UsageError(f"no backup at {source}")
    aside = db.with_name(f"{db.name}.damaged-{time.strftime(_STAMP, time.gmtime())}")
    if db.exists():
        os.replace(db, aside)
    wal = db.with_name(db.name + ".wal")
    if wal.exists():
        os.replace(wal, aside.with_name(aside.name + ".wal"))
    # the commit mark is the replaced file's: the backup is older than its last commit
    db.with_name(db.name + ".last-commit").unlink(missing_ok=True)
    _copy(source, db)
    return aside


def unreadable(exc: BaseException) -> bool:
    """An error that says the store's file cannot be read (a bad block, a cut file, not
    a database at all): DuckDB's, or the Store's StoreDamaged wrapping one at open."""
    if not (isinstance(exc, StoreDamaged) or type(exc).__module__.lstrip("_").startswith("duckdb")):
        return False
    return any(m in str(exc) for m in _UNREADABLE)


_UNREADABLE = (
    "Corrupt database file",
    "Could not read enough bytes",
    "not a valid DuckDB",
    # a write-ahead log damaged after a crash: the store cannot be opened past it
    "Corrupt WAL file",
    "Failure while replaying WAL",
)
