"""The `contextfs` command: one `cmd_*` function per subcommand, `build_parser()` names them.

A composition root like `daemon`: it reads configuration and turns `ContextFSError` into
one `contextfs: reason` line and an exit code at the top level (`EXIT_CODES`). `contextfs
--help` lists the commands from their parsers, so a new command is listed once it is added
to `build_parser()` (tests/unit/test_cli_help.py holds every command and positional to a
help line).

Every command imports what it needs inside its function, so each pays only for its own
imports. The offline ones (`fsck`, `reindex`, `consolidate`, `schema check`, `status` of a
data dir, `search`) take their building blocks from `contextfs.app` and never import
pyfuse3, `contextfs.fs` or `contextfs.daemon`; only `mount --foreground` imports the daemon
(tests/unit/test_offline.py holds both to it).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from contextfs import __version__
from contextfs.config import Config, load_config, make_private, mount_record
from contextfs.errors import ContextFSError, MountpointNotEmpty, UsageError

if TYPE_CHECKING:  # the store is imported by the commands that open one
    from contextfs.store.fsck import CheckRun

log = logging.getLogger("contextfs")

EXIT_CODES = (
    "exit codes: 0 ok, 1 error, 2 usage (bad arguments, config.yaml or mount point), "
    "3 a context type does not load, 4 the store is in use (mounted elsewhere), "
    "5 fsck found problems"
)


class _EscapingFormatter(logging.Formatter):
    """Names from the kernel may not be UTF-8 (they arrive as surrogate escapes): a log
    line quoting one must never fail in its handler (it would be lost, traceback and all),
    so whatever cannot be encoded is written as a backslash escape."""

    def format(self, record: logging.LogRecord) -> str:
        return super().format(record).encode("utf-8", "backslashreplace").decode("utf-8")


def _setup_logging(level: str, log_file: Path | None, patterns: dict | None = None) -> None:
    from contextfs.memory.redact import RedactingFilter, Redactor

    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(log_file, encoding="utf-8", errors="backslashreplace"))
    try:
        redactor = Redactor(patterns)
    except ContextFSError:  # a bad user pattern refuses the mount later, with its reason
        redactor = Redactor()
    formatter = _EscapingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    for h in handlers:  # no log line carries a secret, whatever the code logged
        h.addFilter(RedactingFilter(redactor))
        h.setFormatter(formatter)
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        handlers=handlers,
        force=True,
    )


def _mount_options(values: list[str] | None) -> list[str]:
    opts: list[str] = []
    for v in values or []:
        opts += [o.strip() for o in v.split(",") if o.strip()]
    return opts


STORE_ENV = "CONTEXTFS_STORE"  # how a DSN reaches the daemon: never on its command line


def _with_store(cfg: Config, args: argparse.Namespace) -> Config:
    """`--store` (or, from the command that started this daemon, $CONTEXTFS_STORE) over
    config.yaml's `store:`."""
    store = getattr(args, "store", None) or os.environ.get(STORE_ENV)
    if not store:
        return cfg
    if not store.startswith(("postgresql://", "postgres://")):
        raise UsageError("--store takes a postgresql:// URL (without it: the DuckDB file)")
    return replace(cfg, store=store)


def _offline_store(cfg: Config, missing: str, *, read_only: bool = False):  # noqa: ANN202
    """The store of a data dir opened by an offline command: config.yaml's (or --store's)
    PostgreSQL database, else the DuckDB file, which must exist."""
    from contextfs.store.backend import open_store

    if not cfg.store and not cfg.db_path.exists():
        raise UsageError(missing)
    return open_store(
        cfg.store_location,
        read_only=read_only,
        checkpoint_mb=cfg.store_checkpoint_mb,
        deadline_s=cfg.store_deadline_s,
    )


DAEMON_OUT_MAX = 1 << 20  # daemon.out is kept as daemon.out.1 past this size


def cmd_mount(args: argparse.Namespace) -> int:
    if args.foreground and args.store:
        # a long-lived process must not show the DSN (and its password) in `ps`: start
        # again with it in the environment, readable only by this user
        argv = [a for a in sys.argv if a != args.store and a != "--store"]
        argv = [a for a in argv if not a.startswith("--store=")]
        os.execve(sys.executable, [sys.executable, "-m", "contextfs", *argv[1:]],
                  dict(os.environ, **{STORE_ENV: args.store}))  # fmt: skip
    cfg = _with_store(load_config(args.data_dir), args)
    mnt = Path(args.mountpoint)
    opts = _mount_options(args.options)
    if not args.foreground:  # said here, not in the daemon's output (it checks again)
        _check_mountpoint(mnt, nonempty="nonempty" in opts)
    make_private(cfg.data_dir)  # before the log file and the daemon's first file
    if args.foreground:
        from contextfs import daemon

        _setup_logging(cfg.log_level, cfg.log_path, cfg.redact_patterns)
        return daemon.run(cfg, mnt, opts)
    # Background: start ourselves in the foreground in a new session, return once mounted.
    cmd = [
        sys.executable,
        "-m",
        "contextfs",
        "mount",
        str(mnt),
        "--foreground",
        "--data-dir",
        str(cfg.data_dir),
    ]
    for o in opts:
        cmd += ["-o", o]
    # The daemon's own stderr goes to a file: it outlives this command. Appended to, never
    # truncated: a daemon already running on this data dir may still be writing it.
    out_path = cfg.data_dir / "daemon.out"
    with contextlib.suppress(OSError):
        if out_path.stat().st_size > DAEMON_OUT_MAX:
            out_path.replace(out_path.with_name("daemon.out.1"))
    env = dict(os.environ, **({STORE_ENV: args.store} if args.store else {}))
    with open(os.devnull, "rb") as devnull, open(out_path, "ab") as out:
        start = out.tell()
        proc = subprocess.Popen(
            cmd, stdin=devnull, stdout=out, stderr=out, start_new_session=True, env=env
        )
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:  # (a mount that answers is this daemon's only then)
            print(_daemon_error(out_path, proc.returncode, start), file=sys.stderr)
            return proc.returncode if proc.returncode > 0 else 1
        if _answers(mnt):
            print(
                f"mounted {mnt.absolute()} (data dir {cfg.data_dir}, pid {proc.pid}, "
                f"log {cfg.log_path})"
            )
            return 0
        time.sleep(0.05)
    # not mounted in time: the daemon is stopped, so that no mount appears after a failure
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    # mounted meanwhile (or left dead by the kill: ismount cannot tell, ENOTCONN)
    subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True)
    doing = _stopped_while(out_path, start)
    print(
        f"contextfs: {mnt} not mounted after {args.timeout}s: the daemon was stopped"
        + (f", {doing}" if doing else "")
        + f"; see {cfg.log_path} (--timeout gives it longer)",
        file=sys.stderr,
    )
    return 1


def _stopped_while(out: Path, start: int) -> str:
    """What a daemon stopped before its mount was ready said it was doing (`daemon.Starting`:
    `still checking the store (...) (for 27.1 s, ...)`), from its output after byte
    `start`; '' if it said nothing (stopped before it could)."""
    marker = "contextfs: stopped before the mount was ready: "  # daemon.STOPPED_BEFORE_READY
    try:
        with open(out, "rb") as f:
            f.seek(start)
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    said = [ln.split(marker, 1)[1].strip() for ln in text.splitlines() if marker in ln]
    return said[-1] if said else ""


def _check_mountpoint(mnt: Path, *, nonempty: bool) -> None:
    """Refuse what the daemon would refuse about `mnt` that can be seen from here: a mount,
    a file, a directory with entries (hidden ones too) without `-o nonempty`. A missing one
    (the daemon creates it) or a dead mount (the daemon detaches it) is left to the daemon."""
    mnt = mnt.absolute()  # as the daemon says it
    try:
        entries = os.listdir(mnt)
    except NotADirectoryError:
        if mnt.exists():
            raise UsageError(f"mountpoint {mnt} is not a directory") from None
        return
    except OSError:
        return
    if os.path.ismount(mnt):
        raise UsageError(f"{mnt} is already a mount point")
    if entries and not nonempty:
        raise MountpointNotEmpty(mnt)


def _daemon_error(out: Path, code: int, start: int = 0) -> str:
    """One line on why a daemon exited before its mount was ready: its own `contextfs:
    reason` line (`main` writes one for every refusal), else the last line it wrote (its
    output begins at byte `start` of `out`)."""
    with open(out, "rb") as f:
        f.seek(start)
        text = f.read().decode(errors="replace")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    said = [ln for ln in lines if ln.startswith("contextfs: ")]
    if said:
        return said[-1]
    last = lines[-1] if lines else "nothing written"
    return f"contextfs: the daemon exited {code} before mounting: {last} (see {out})"


def _answers(mnt: Path) -> bool:
    """A live mount: a dead one (after kill -9) also passes ismount but cannot be read."""
    return os.path.ismount(mnt) and os.path.exists(mnt / ".status")


def cmd_umount(args: argparse.Namespace) -> int:
    mnt = Path(args.mountpoint).absolute()
    record = mount_record(mnt)
    pid = None
    if record.exists():
        try:
            pid = json.loads(record.read_text())["pid"]
        except (ValueError, KeyError):
            pid = None
    res = subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True, text=True)
    if res.returncode != 0:
        raise ContextFSError(f"fusermount3 -u {mnt}: {res.stderr.strip()}")
    if pid is not None:  # wait for the daemon to close the store
        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline:
            if not record.exists() or not _alive(pid):
                break  # the daemon removes its record once the store is closed
            time.sleep(0.05)
        else:
            raise ContextFSError(f"daemon {pid} still running {args.timeout}s after unmount")
    return 0


def _alive(pid: int) -> bool:
    """A running process; an exited one not yet reaped by its parent (a zombie) is not."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def cmd_status(args: argparse.Namespace) -> int:
    target = Path(args.target)
    # a mount, or a data dir that is mounted (the daemon owns its store): the mount's
    # .status, found by the daemon's mount record as export and import find it
    mnt = target if _answers(target) else _mount_of(target)
    if mnt is not None:
        sys.stdout.write((mnt / ".status").read_text())
        return 0
    from contextfs.app import load_all_types
    from contextfs.memory.service import Memory

    cfg = _with_store(load_config(target), args)
    missing = f"{target} is neither a ContextFS mount nor a data dir"
    store = _offline_store(cfg, missing, read_only=True)
    try:
        m = Memory(store, load_all_types(cfg), data_dir=cfg.data_dir)
        c = m.counts()
        print(
            f"data_dir: {cfg.data_dir}\ngeneration: {m.generation}\ncounts: "
            + ", ".join(f"{k}={v}" for k, v in c.items())
        )
    finally:
        store.close()
    return 0


def cmd_fsck(args: argparse.Namespace) -> int:
    from contextfs.store.backend import open_store, shown
    from contextfs.store.fsck import full_check

    cfg = _with_store(load_config(args.data_dir), args)
    if not cfg.store and not cfg.db_path.exists():
        raise UsageError(f"no store at {cfg.db_path}")
    try:
        store = open_store(cfg.store_location, read_only=True, deadline_s=cfg.store_deadline_s)
        try:
            run = full_check(store)
        finally:
            store.close()
    except Exception as exc:  # noqa: BLE001 - a store that cannot be read is fsck's finding
        if not _damaged(exc):
            raise
        print(f"store_readable: {_first_line(exc)}")
        print(f"fsck {shown(cfg.store_location)}: the store cannot be read (damaged?)")
        if not cfg.store:
            print(_what_to_do(cfg))
        return 5
    for p in run.problems:
        print(p)
    print(f"fsck {shown(cfg.store_location)}: {len(run.problems)} problem(s)")
    if run.problems and args.repair:
        run = _repair(cfg)
    if run.passed:  # the next mount checks only what changes after this
        print(_record_fsck(cfg, run))
    return 5 if run.problems else 0


def _what_to_do(cfg: Config) -> str:
    """For a DuckDB store that cannot be read: which backup `contextfs restore` would put
    back (the newest that opens and passes fsck; those passed over, and why), or that
    `contextfs salvage` is what is left."""
    from contextfs.app import checked_backup
    from contextfs.store.backup import BACKUP_DIR, backups, taken_at, when

    have = backups(cfg.data_dir / BACKUP_DIR)
    store, _run, skipped = checked_backup(have, cfg.db_path) if have else (None, None, [])
    lines = [f"  backup passed over: {line}" for line in skipped]
    salvage = f"`contextfs salvage {cfg.data_dir} OUT` copies what the damaged file still holds"
    if store is not None:
        backup = Path(store.location)
        store.close()
        lines.append(
            f"to put back its backup of {when(taken_at(backup))} ({backup}), the newest that "
            f"passes fsck: `contextfs restore {cfg.data_dir}` (the damaged file is kept "
            f"aside); before or after, {salvage} to markdown"
        )
    elif have:
        lines.append(f"none of its {len(have)} backup(s) passes fsck: {salvage} to markdown")
    else:
        lines.append(f"it has no backup in {cfg.data_dir / BACKUP_DIR}: {salvage} to markdown")
    return "\n".join(lines)


def cmd_restore(args: argparse.Namespace) -> int:
    """Put the newest backup that opens and passes fsck (or --from FILE, if it does) in
    place of the store file; the file it replaces is moved aside. Each newer backup
    passed over is named, with why."""
    from contextfs.app import checked_backup
    from contextfs.store.backup import BACKUP_DIR, backups, restore, taken_at, when
    from contextfs.store.db import lock_store, unlock_store

    cfg = load_config(args.data_dir)
    if cfg.store:
        raise UsageError("restore is for the DuckDB store; a PostgreSQL one is the server's")
    # first: a store in use is exit 4 whether or not there is a backup to put back
    key = lock_store(cfg.db_path, False)  # exit 4 while a mount (or anything) holds it
    try:
        have = [Path(args.source)] if args.source else backups(cfg.data_dir / BACKUP_DIR)
        if not have:
            raise UsageError(f"no backup in {cfg.data_dir / BACKUP_DIR}")
        if args.source and not have[0].is_file():
            raise UsageError(f"no backup at {have[0]}")
        store, _run, skipped = checked_backup(have, cfg.db_path)
        for line in skipped:
            print(f"skipped {line}", file=sys.stderr)
        if store is None:
            raise ContextFSError(
                f"no backup passes fsck, nothing restored: {'; '.join(skipped)} "
                f"(`contextfs salvage {cfg.data_dir} OUT` copies what the store still holds)"
            )
        source = Path(store.location)
        store.close()
        aside = restore(cfg.db_path, source)
    finally:
        unlock_store(key)
    why = "the newest backup that passes fsck" if len(have) > 1 else "it passes fsck"
    print(f"restored {cfg.db_path} from {source} (taken {when(taken_at(source))}; {why})")
    print(f"the file it replaced is kept as {aside}; `contextfs salvage` reads what it holds")
    return 0


def cmd_salvage(args: argparse.Namespace) -> int:
    """Copy every node a damaged store still holds readable into a markdown tree."""
    from contextfs.app import load_all_types
    from contextfs.store.db import Store
    from contextfs.transfer.salvage import SalvageSource
    from contextfs.transfer.vault import export_tree

    cfg = load_config(args.data_dir)
    if cfg.store or not cfg.db_path.exists():
        raise UsageError(f"no DuckDB store at {cfg.db_path}")
    t0 = time.monotonic()
    store = Store(cfg.db_path, read_only=True)  # a file DuckDB cannot open: exit 1, one line
    try:
        source = SalvageSource(store.con, load_all_types(cfg))
        report = export_tree(
            source, Path(args.out), history=args.history, progress=_progress_bar("salvage", t0)
        )
    finally:
        store.close()
    sys.stderr.write("\n")
    print(f"{report.summary()}\nto {args.out} in {time.monotonic() - t0:.1f}s")
    for note in source.notes:
        print(f"  written with a caveat: {note}")
    for lost in source.lost:
        print(f"  written to lost+found/, its place lost: {lost}")
    return 1 if report.problems or source.lost else 0


def _repair(cfg: Config) -> CheckRun:
    """`fsck --repair`: mend what the check found (contextfs.store.repair), print what was
    done, check again; returns that check."""
    from contextfs.store.backend import open_store, shown
    from contextfs.store.fsck import full_check
    from contextfs.store.repair import repair_store

    store = open_store(
        cfg.store_location, checkpoint_mb=cfg.store_checkpoint_mb, deadline_s=cfg.store_deadline_s
    )
    try:
        for line in repair_store(store):
            print(f"repaired {line}")
        run = full_check(store)
    finally:
        store.close()
    for p in run.problems:
        print(f"not repaired: {p}")
    print(f"fsck --repair {shown(cfg.store_location)}: {len(run.problems)} problem(s) left")
    return run


def _record_fsck(cfg: Config, run: CheckRun) -> str:
    """Record a passing fsck in the store (opened again, writable); what to print. A
    store that cannot take it (read-only files, a server gone) keeps its last point."""
    from contextfs.store.backend import open_store
    from contextfs.store.fsck import record_passed

    try:
        store = open_store(
            cfg.store_location,
            checkpoint_mb=cfg.store_checkpoint_mb,
            deadline_s=cfg.store_deadline_s,
        )
    except (ContextFSError, OSError) as exc:
        return f"checked up to seq {run.upto}, but could not record it: {exc}"
    try:
        record_passed(store, run)
    except (ContextFSError,) + store.errors as exc:  # not starred: mypy rejects that
        return f"checked up to seq {run.upto}, but could not record it: {exc}"
    finally:
        store.close()
    return f"checked up to seq {run.upto}: a mount checks what changes after it"


def cmd_search(args: argparse.Namespace) -> int:
    """Search through the mount: reading .query/<question>/ is the search."""
    from contextfs.agents.mountcalls import MountCallError, inside, query_dir
    from contextfs.memory.redact import escape_controls

    mnt = Path(args.mountpoint)
    if not _answers(mnt):
        raise UsageError(f"{mnt} is not a live ContextFS mount")
    scope = mnt
    if args.scope:  # a scope is a folder of this mount, not one a link in it leads to
        outside = f"--scope {args.scope!r}: a path inside the mount, such as user/me"
        if Path(args.scope).is_absolute() or ".." in Path(args.scope).parts:
            raise UsageError(outside)
        try:
            scope = inside(mnt, args.scope)
        except MountCallError as exc:
            raise UsageError(f"{outside} ({str(exc).removeprefix('EINVAL: ')})") from None
    try:
        qdir = query_dir(scope, args.question, k=args.k, budget=args.budget, type=args.type)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:
        if args.context:
            sys.stdout.write((qdir / "_context.md").read_text())
            return 0
        results = json.loads((qdir / "_results.json").read_text())
    except OSError as exc:
        raise ContextFSError(_search_failed(mnt, qdir, exc)) from None
    if not results["hits"]:
        print("no hits")
        return 0
    for h in results["hits"]:
        # stored text shown on a terminal: its control characters escaped (an ESC sequence
        # in a memory must not retitle or clear the terminal)
        path = escape_controls(h["path"])
        print(f"{h['rank']:2d}. {h['score']:.4f}  {path}  [{','.join(h['tiers'])}]")
        if h["snippet"]:
            print(f"    {escape_controls(' '.join(h['snippet'].split())[:150])}")
    return 0


def _search_failed(mnt: Path, qdir: Path, exc: OSError) -> str:
    """Why reading the question directory failed: the reason the mount wrote in `.status`
    for it (a bad option, an unknown type), or that search is off on this mount."""
    from contextfs.agents.mountcalls import PLAIN_ERRNOS, REFUSAL, status_reason

    name = errno.errorcode.get(exc.errno or 0, "EIO")
    text = f"search failed: {exc.strerror} ({name})"
    if exc.errno == errno.ENOENT:
        try:
            facts = json.loads((mnt / ".status.json").read_text())
        except (OSError, ValueError):
            facts = {}
        if facts.get("index", {}) is None:  # null when search is off
            data_dir = facts.get("data_dir", "the data dir")
            return (
                f"{text}: search is off on this mount (search: false in "
                f"{data_dir}/config.yaml: there is no .query to read)"
            )
    line = "" if name in PLAIN_ERRNOS else status_reason(mnt, os.path.relpath(qdir, mnt), name)
    m = REFUSAL.match(line)
    return f"{text}: {line[m.end() :]}" if m else f"{text}; see {mnt}/.status"


def cmd_reindex(args: argparse.Namespace) -> int:
    """Rebuild every derived index from DuckDB, with a progress bar."""
    from contextfs.app import clip_model, embedder_factory, image_vectors, load_all_types
    from contextfs.memory.service import Memory
    from contextfs.search.indexer import Indexer

    cfg = _with_store(load_config(args.data_dir), args)
    if not cfg.store and not cfg.db_path.exists():
        raise UsageError(f"no store at {cfg.db_path}")  # before anything is made or changed
    make_private(cfg.data_dir)
    _setup_logging("WARNING", None)
    store = _offline_store(cfg, f"no store at {cfg.db_path}")
    try:
        memory = Memory(store, load_all_types(cfg), data_dir=cfg.data_dir)
        print(f"loading the embedding model ({cfg.model_name}) ...", file=sys.stderr)
        images = image_vectors(cfg, clip_model(cfg))
        indexer = Indexer(
            memory,
            cfg.index_dir,
            embedder_factory(cfg),
            model_name=cfg.model_name,
            images=images,
            compact_units=cfg.vector_compact_units,
            shared=store.shared_vectors() if cfg.share_vectors else None,
        )
        t0 = time.monotonic()
        total = indexer.rebuild_sync(progress=_progress_bar("reindex", t0))
        print(
            f"\nreindexed {total} nodes ({len(indexer.digests)} units"
            + (f", {len(images.digests)} images by CLIP" if images and images.ready else "")
            + ") in "
            f"{time.monotonic() - t0:.1f}s; generation {indexer.generation}",
            file=sys.stderr,
        )
    finally:
        store.close()
    return 0


def cmd_ingest(args: argparse.Namespace) -> int:
    """Hand files to a mount's inbox, with progress; wait until each is processed."""
    import shutil

    mnt = Path(args.mountpoint)
    if not _answers(mnt):
        raise UsageError(f"{mnt} is not a live ContextFS mount")
    inbox = (mnt / args.owner / ".inbox") if args.owner else mnt / ".inbox"
    if not inbox.is_dir():
        raise UsageError(f"{inbox} does not exist (is {args.owner!r} an owner?)")
    files = [Path(f) for f in args.files]
    for f in files:
        if not f.is_file():
            raise UsageError(f"{f} is not a file")
    t0 = time.monotonic()
    show = _progress_bar("ingest", t0, unit="files")
    names = []
    at_once: list[str] = []  # refused when handed in: what their reports say
    for i, f in enumerate(files, 1):
        name = f.name
        while (inbox / name).exists():
            name = f"{f.stem}-{int(time.time() * 1000) % 100000}{f.suffix}"
        try:
            shutil.copyfile(f, inbox / name)
        except OSError as exc:
            # refused at close (a secret store, a kind not understood): the item and its
            # report are there, and the report says why (counted below)
            if exc.errno not in (errno.EACCES, errno.EOPNOTSUPP):
                raise
            if not (inbox / f"{name}.report.md").exists():
                raise
            at_once.append(f"{f}: {exc.strerror}")
        names.append(name)
        show(i, len(files))
    sys.stderr.write("\n")
    if not args.wait:
        for line in at_once:  # the rest are processed in the background
            print(f"contextfs: refused {line} (see {inbox}/<name>.report.md)", file=sys.stderr)
        return 1 if at_once else 0
    refused = dropped = 0
    for i, name in enumerate(names, 1):
        report = inbox / f"{name}.report.md"
        conversations = None  # the bar of an export's conversations, once the report counts
        while True:
            try:
                state = _report_state(report.read_text() if report.exists() else "")
            except OSError:  # a dead mount (ENOTCONN): said below
                state = ""
            under_way = _CONVERSATIONS.match(state)
            if under_way:
                if conversations is None:
                    sys.stderr.write("\n")
                    conversations = _progress_bar(f"{name}:", time.monotonic(), "conversations")
                conversations(int(under_way.group(1)), int(under_way.group(2)))
            elif state.startswith(("state: done", "state: dropped", "state: refused", "refused")):
                break
            elif not state and not _answers(mnt):  # killed, or unmounted meanwhile
                sys.stderr.write("\n")
                raise ContextFSError(
                    f"{mnt} is no longer a live mount: {name} was handed in and is processed "
                    f"when the store is mounted again (its report: .inbox/{name}.report.md)"
                )
            time.sleep(0.1)
        total = re.search(r", (\d+) conversations,", state)  # an export's final count
        if total:
            if conversations is None:
                sys.stderr.write("\n")
                conversations = _progress_bar(f"{name}:", time.monotonic(), "conversations")
            conversations(int(total.group(1)), int(total.group(1)))
        if conversations is not None:
            sys.stderr.write("\n")
        # a media gate that found nothing new is a decision, not a refusal
        if state.startswith("state: dropped"):
            dropped += 1
        else:
            refused += state.startswith(("refused", "state: refused"))
        show(i, len(names))
    sys.stderr.write("\n")
    kept = len(names) - refused - dropped
    print(
        f"ingested {kept} file(s), dropped {dropped} by the media gates, refused {refused}; "
        f"reports in {inbox}"
        if dropped
        else f"ingested {kept} file(s), refused {refused}; reports in {inbox}"
    )
    return 1 if refused else 0


def cmd_consolidate(args: argparse.Namespace) -> int:
    """Decay, merge and archive now (offline; a mount runs it every consolidate_every)."""
    import datetime as dt

    from contextfs.app import load_all_types
    from contextfs.memory.consolidate import consolidate
    from contextfs.memory.service import Memory

    cfg = _with_store(load_config(args.data_dir), args)
    if not cfg.store and not cfg.db_path.exists():
        raise UsageError(f"no store at {cfg.db_path}")
    now = None
    if args.now:
        try:
            at = dt.datetime.fromisoformat(args.now)
            # without an offset, UTC (what `.status` and meta.yaml show); with one, that one
            now = (at if at.tzinfo is not None else at.replace(tzinfo=dt.UTC)).timestamp()
        except ValueError:
            raise UsageError(f"--now {args.now!r} is not an ISO date") from None
    make_private(cfg.data_dir)
    store = _offline_store(cfg, f"no store at {cfg.db_path}")
    try:
        memory = Memory(
            store, load_all_types(cfg), data_dir=cfg.data_dir, default_owner=cfg.default_owner
        )
        bars: dict[str, Callable[[int, int], None]] = {}  # a progress bar a stage

        def progress(stage: str, done: int, total: int) -> None:
            if stage not in bars:
                if bars:
                    sys.stderr.write("\n")
                bars[stage] = _progress_bar(f"consolidate ({stage})", time.monotonic(), stage)
            bars[stage](done, total)

        report = consolidate(memory, now=now, progress=progress if sys.stderr.isatty() else None)
        if bars:
            sys.stderr.write("\n")
    finally:
        store.close()
    for line in report.details:
        print(line)
    print(f"consolidated {cfg.data_dir}: {report.summary()}")
    return 0


# ---- export and import (docs/agents.md): a markdown tree out of a mount or a data dir, any
# markdown folder into a mount through its files ----------------------------------------------


def cmd_export(args: argparse.Namespace) -> int:
    """Write a mount's (or an unmounted data dir's) nodes as a markdown tree."""
    from contextfs.transfer.vault import MountSource, export_tree

    src, out = Path(args.src), Path(args.out)
    t0 = time.monotonic()
    show = _progress_bar("export", t0)
    mnt = src if _answers(src) else _mount_of(src)
    if mnt is not None and _inside(out, mnt):
        # written into the tree it reads, it would export its own copy again
        raise UsageError(f"{out} is inside the mount {mnt}: export to a folder outside it")
    if mnt is not None:  # the daemon owns the store: read through its files
        report = export_tree(MountSource(mnt), out, history=args.history, progress=show)
    else:
        from contextfs.app import load_all_types
        from contextfs.memory.service import Memory
        from contextfs.transfer.vault import StoreSource

        cfg = _with_store(load_config(src), args)
        missing = f"{src} is neither a ContextFS mount nor a data dir"
        store = _offline_store(cfg, missing, read_only=True)
        try:
            memory = Memory(store, load_all_types(cfg), data_dir=cfg.data_dir)
            report = export_tree(StoreSource(memory), out, history=args.history, progress=show)
        finally:
            store.close()
    sys.stderr.write("\n")
    print(f"{report.summary()}\nto {out} in {time.monotonic() - t0:.1f}s")
    return 1 if report.problems else 0


def _inside(path: Path, top: Path) -> bool:
    """Whether path is top or under it (symbolic links of its existing part followed)."""
    try:
        path.resolve().relative_to(top.resolve())
    except ValueError:
        return False
    return True


def _inside_mount(path: Path) -> bool:
    """Whether path is a live mount or inside one."""
    p = path.absolute()
    while True:
        if _answers(p):
            return True
        if p.parent == p:
            return False
        p = p.parent


def _mount_of(data_dir: Path) -> Path | None:
    """The live mount serving `data_dir`, found by the daemons' mount records."""
    from contextfs.config import runtime_dir

    want = str(load_config(data_dir).data_dir)
    for rec in sorted(runtime_dir().glob("*.json")):
        try:
            info = json.loads(rec.read_text())
        except (OSError, ValueError):
            continue
        mnt = Path(info.get("mountpoint", ""))
        if info.get("data_dir") == want and _answers(mnt):
            return mnt
    return None


def cmd_import(args: argparse.Namespace) -> int:
    """Route a markdown tree or vault into a mount, or restore it into an unmounted data
    dir (facts and ids too); a report of what was refused."""
    from contextfs.transfer.vault import import_tree

    folders: dict[str, str] = {}
    for item in args.map:
        folder, sep, type_name = item.partition("=")
        if not sep or not folder.strip() or not type_name.strip():
            raise UsageError(f"--map {item!r}: give FOLDER=TYPE")
        folders[folder.strip()] = type_name.strip()
    t0 = time.monotonic()
    show = _progress_bar("import", t0, unit="files")
    dest = Path(args.dest)
    mnt = None if _inside_mount(dest) else _mount_of(dest)
    if _inside_mount(dest) or mnt is not None:  # the daemon owns the store: its files
        report = import_tree(
            Path(args.dir),
            mnt or dest,
            type_name=args.type,
            folder_types=folders,
            progress=show,
        )
    elif dest.exists() and (
        not dest.is_dir()
        or (
            not load_config(dest).db_path.exists()
            # a new data dir may be set up first: its config and its own types
            and any(p.name not in ("config.yaml", "schemas") for p in dest.iterdir())
        )
    ):
        raise UsageError(
            f"{dest} is neither inside a live ContextFS mount nor a data dir "
            "(give a mount, an owner or type directory in one, or a new or unmounted data dir)"
        )
    else:
        from contextfs.app import close_memory, load_all_types, open_memory
        from contextfs.transfer.vault import store_destination

        cfg = _with_store(load_config(dest), args)
        _setup_logging("WARNING", None)
        memory = open_memory(cfg, load_all_types(cfg))
        try:
            report = import_tree(
                Path(args.dir),
                store_destination(memory),
                type_name=args.type,
                folder_types=folders,
                progress=show,
            )
            memory.persist_pending()
            memory.attachment_store.flush_touched()
        finally:
            close_memory(memory, cfg)
        report.dest = str(cfg.data_dir)
    sys.stderr.write("\n")
    if args.json:
        print(json.dumps(report.as_dict(), indent=2, ensure_ascii=False))
    else:
        print(report.summary())
    return 1 if report.refused else 0


def _transfer_parsers(sub: argparse._SubParsersAction) -> None:
    e = sub.add_parser("export", help="write a mount or data dir as a markdown tree")
    e.add_argument("src", help="a mount point, or a data dir (mounted or not)")
    e.add_argument("out", help="a new (or empty) directory")
    e.add_argument("--history", action="store_true", help="also every version of each node")
    e.add_argument("--store", default=None, help="a postgresql:// URL (default: config.yaml's)")
    e.set_defaults(func=cmd_export)
    im = sub.add_parser(
        "import", help="route a markdown tree or vault into a mount, or restore it in a data dir"
    )
    im.add_argument("dir", help="an exported tree, or any folder of markdown")
    im.add_argument(
        "dest",
        help="the mount, an owner or a type directory in it; or a data dir that is not "
        "mounted (new or existing): the export is restored with its facts and ids",
    )
    im.add_argument("--type", default=None, help="context type of plain notes (default entity)")
    im.add_argument(
        "--map",
        action="append",
        default=[],
        metavar="FOLDER=TYPE",
        help="plain notes in a folder of this name are of this type (repeatable; beside the "
        "defaults: People=entity, Journal=event, …)",
    )
    im.add_argument("--json", action="store_true", help="print the report as JSON")
    im.add_argument("--store", default=None, help="a postgresql:// URL (default: config.yaml's)")
    im.set_defaults(func=cmd_import)


# the state line of an inbox report while an export is processed
_CONVERSATIONS = re.compile(r"state: processing \((\d+) of (\d+) conversations\)")


def _report_state(text: str) -> str:
    """The state line of an inbox report (`state: …` or `refused: …`); '' before it has one."""
    m = re.search(r"^(state: .*|refused: .*)$", text, re.M)
    return m.group(1) if m else ""


def _progress_bar(label: str, t0: float, unit: str = "nodes"):
    """A progress line on stderr. Its rate counts from the first count it is shown (a stage
    may report 10,000 done at its first call: counted from t0 that read 904,404,157/s),
    and is left out until half a second has passed."""
    first: list[tuple[int, float]] = []

    def show(done: int, total: int) -> None:
        now = time.monotonic()
        if not first:
            first.append((done, now if done else t0))
        width = 30
        frac = done / total if total else 1.0
        bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
        base, since = first[0]
        rate = f"  {(done - base) / (now - since):.1f}/s" if now - since >= 0.5 else ""
        sys.stderr.write(f"\r{label} [{bar}] {done}/{total} {unit}{rate}\x1b[K")
        sys.stderr.flush()

    return show


def cmd_schema_check(args: argparse.Namespace) -> int:
    from contextfs.ctxtypes import builtin_schema_dir, load_types

    dirs = [builtin_schema_dir()] if args.with_builtins else []
    dirs += [Path(d) for d in args.dirs]
    for d in dirs:
        if not d.is_dir():
            raise UsageError(f"{d} is not a directory")
    for d in map(Path, args.dirs):  # a check of nothing must not read as a pass
        if not any(p.suffix in (".yaml", ".yml") and p.is_file() for p in d.iterdir()):
            raise UsageError(f"{d} holds no schema files (*.yaml, *.yml): nothing to check")
    types = load_types(dirs)
    for t in sorted(types.values(), key=lambda t: t.name):
        print(
            f"ok {t.name}: {t.scope}/{t.directory} ({t.mode}, {len(t.fields)} fields) "
            f"from {t.source}"
        )
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    """Serve MCP over stdio: tools that read and write paths under the mount."""
    mnt = Path(args.mountpoint)
    if not _answers(mnt):
        raise UsageError(f"{mnt} is not a live ContextFS mount")
    from contextfs.agents.mcpserver import serve

    # stdout carries the protocol: logging goes to stderr only
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    serve(mnt.resolve(), __version__)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Write the sample conversation shipped with the package (the README tour's)."""
    import importlib.resources

    sample = importlib.resources.files("contextfs").joinpath("samples", "chat.jsonl")
    out = Path(args.file)
    data = sample.read_bytes()
    # the same sample again is fine (the tour run twice); anything else is the user's
    if out.exists() and not args.force and out.read_bytes() != data:
        raise UsageError(f"{out} exists (use --force to overwrite it)")
    out.write_bytes(data)
    turns = out.read_text().count("\n")
    print(
        f"wrote {out}: a sample conversation of {turns} turns; hand it to a mount with "
        f"`contextfs ingest MNT {out} --wait` or `cp {out} MNT/.inbox/`"
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="contextfs",
        description="ContextFS mounts an agent's long-term memory as a FUSE filesystem: "
        "mount it, then read, write and search it as files, or with the commands below.",
        epilog=f"`contextfs COMMAND --help` shows a command's arguments. {EXIT_CODES}.",
    )
    p.add_argument("--version", action="version", version=f"contextfs {__version__}")
    sub = p.add_subparsers(dest="command", required=True, title="commands", metavar="COMMAND")

    m = sub.add_parser("mount", help="mount the memory store (daemonises unless --foreground)")
    m.add_argument(
        "mountpoint",
        help="an empty directory (created if missing; one with files needs -o nonempty)",
    )
    m.add_argument(
        "--data-dir",
        type=_path_arg,
        default=None,
        help="store location (default: $XDG_DATA_HOME/contextfs)",
    )
    m.add_argument(
        "--store",
        default=None,
        help="a postgresql:// URL: the shared store (default: config.yaml's store, or the "
        "DuckDB file in the data dir)",
    )
    m.add_argument("--foreground", "-f", action="store_true", help="do not daemonise")
    m.add_argument(
        "-o",
        dest="options",
        action="append",
        help="FUSE mount options, comma separated (e.g. allow_other, ro); nonempty: mount "
        "over a directory that has files (hidden until unmounted); ctx_xattr: nodes answer "
        "getfattr -n user.ctx.{id,type,version,indexed_version,path}",
    )
    m.add_argument(
        "--timeout", type=float, default=30.0, help="seconds to wait for the mount to be ready"
    )
    m.set_defaults(func=cmd_mount)

    u = sub.add_parser("umount", help="unmount and wait for the daemon to finish")
    u.add_argument("mountpoint", help="a ContextFS mount point")
    u.add_argument(
        "--timeout", type=float, default=30.0, help="seconds to wait for the daemon to exit"
    )
    u.set_defaults(func=cmd_umount)

    s = sub.add_parser("status", help="print .status of a mount (or counts of a data dir)")
    s.add_argument("target", help="a mount point, or a data dir that is not mounted")
    s.add_argument("--store", default=None, help="a postgresql:// URL (default: config.yaml's)")
    s.set_defaults(func=cmd_status)

    f = sub.add_parser("fsck", help="check the store's invariants (not while mounted)")
    f.add_argument("data_dir", type=_path_arg, help="the data dir of a store that is not mounted")
    f.add_argument("--store", default=None, help="a postgresql:// URL (default: config.yaml's)")
    f.add_argument(
        "--repair",
        action="store_true",
        help="mend what the check finds (renames duplicates beside each other, deletes nothing)",
    )
    f.set_defaults(func=cmd_fsck)

    b = sub.add_parser(
        "restore", help="put back the newest backup that passes fsck (not while mounted)"
    )
    b.add_argument("data_dir", type=_path_arg, help="the data dir (not mounted)")
    b.add_argument("--from", dest="source", default=None, help="a backup file (default: newest)")
    b.set_defaults(func=cmd_restore)

    v = sub.add_parser("salvage", help="copy what a damaged store still holds to markdown")
    v.add_argument("data_dir", type=_path_arg, help="the data dir of the damaged store")
    v.add_argument("out", type=_path_arg, help="an empty or new directory for the markdown tree")
    v.add_argument("--history", action="store_true", help="also write each node's versions")
    v.set_defaults(func=cmd_salvage)

    q = sub.add_parser("search", help="search through a mount (reads .query/<question>/)")
    q.add_argument("mountpoint", help="a live ContextFS mount")
    q.add_argument("question", help="the question, in words (quote it)")
    q.add_argument("-k", type=int, default=None, help="number of hits")
    q.add_argument("--budget", type=int, default=None, help="token budget of the context")
    q.add_argument("--type", default=None, help="only nodes of this context type")
    q.add_argument("--scope", default="", help="a subtree, e.g. user/alice")
    q.add_argument("--context", action="store_true", help="print _context.md instead")
    q.set_defaults(func=cmd_search)

    r = sub.add_parser("reindex", help="rebuild the search indexes from the store")
    r.add_argument("data_dir", type=_path_arg, help="the data dir (not mounted)")
    r.add_argument("--store", default=None, help="a postgresql:// URL (default: config.yaml's)")
    r.set_defaults(func=cmd_reindex)

    i = sub.add_parser("ingest", help="hand files to a mount's inbox (progress, --wait)")
    i.add_argument("mountpoint", help="a live ContextFS mount")
    i.add_argument("files", nargs="+", help="the files to hand to the inbox")
    i.add_argument("--owner", default="", help="e.g. user/alice (default: the root inbox)")
    i.add_argument("--wait", action="store_true", help="wait until each is processed")
    i.set_defaults(func=cmd_ingest)

    c = sub.add_parser("consolidate", help="decay, merge and archive now (not while mounted)")
    c.add_argument("data_dir", type=_path_arg, help="the data dir (not mounted)")
    c.add_argument(
        "--now",
        default=None,
        help="run as if it were this date (ISO): what would decay below its type's minimum "
        "by then is archived, for real (mv it back from .archive)",
    )
    c.add_argument("--store", default=None, help="a postgresql:// URL (default: config.yaml's)")
    c.set_defaults(func=cmd_consolidate)
    _transfer_parsers(sub)

    mc = sub.add_parser("mcp", help="serve MCP over stdio: tools over the paths of a mount")
    mc.add_argument("mountpoint", help="the live ContextFS mount whose paths the tools use")
    mc.set_defaults(func=cmd_mcp)

    d = sub.add_parser("demo", help="write a sample conversation to try the inbox with")
    d.add_argument("file", help="where to write it (JSONL, the inbox's transcript format)")
    d.add_argument("--force", action="store_true", help="overwrite the file if it exists")
    d.set_defaults(func=cmd_demo)

    sc = sub.add_parser("schema", help="context-type tools")
    scs = sc.add_subparsers(
        dest="schema_command", required=True, title="schema commands", metavar="SUBCOMMAND"
    )
    chk = scs.add_parser("check", help="validate context-type YAML files without mounting")
    chk.add_argument("dirs", nargs="+", help="directories of context-type *.yaml files")
    chk.add_argument(
        "--with-builtins",
        action="store_true",
        help="load the built-in types first, as the mount does",
    )
    chk.set_defaults(func=cmd_schema_check)
    return p


def _damaged(exc: BaseException) -> bool:
    """A DuckDB error that says the store's file cannot be read (a bad block, a cut file)."""
    from contextfs.store.backup import unreadable

    return unreadable(exc)


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"


def _path_arg(text: str) -> Path:
    """A path argument: an empty one (`--data-dir ""`, an unset variable) is refused, not
    taken for the current directory."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path")
    return Path(text)


def _os_error(exc: OSError) -> str:
    """`No such file or directory: '/x/y'`, as the shell's tools say it."""
    if exc.strerror and exc.filename is not None:
        where = repr(os.fsdecode(exc.filename))
        if exc.filename2 is not None:
            where += f" -> {os.fsdecode(exc.filename2)!r}"
        return f"{exc.strerror}: {where}"
    return str(exc) or type(exc).__name__


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)  # --help writes too
        return args.func(args)
    except* ContextFSError as group:
        for exc in group.exceptions:
            print(f"contextfs: {exc}", file=sys.stderr)
        code = max(getattr(e, "exit_code", 1) for e in group.exceptions)
    except* BrokenPipeError:  # `contextfs fsck DIR | head -1`: the reader went, as for cat
        # what is left in stdout's buffer has nowhere to go: not flushed again at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 128 + signal.SIGPIPE
    except* OSError as group:  # a path the system refused (missing, a folder, a file): one line
        for refused in group.exceptions:
            assert isinstance(refused, OSError)
            print(f"contextfs: {_os_error(refused)}", file=sys.stderr)
        code = 1
    except* Exception as group:  # a damaged store: say so in one line, not a traceback
        rest = group.subgroup(lambda e: not isinstance(e, BaseExceptionGroup) and not _damaged(e))
        if rest is not None:
            raise rest from None
        for damaged in group.exceptions:
            print(f"contextfs: the store cannot be read (damaged?): {_first_line(damaged)}",
                  file=sys.stderr)  # fmt: skip
        code = 1
    return code


if __name__ == "__main__":
    sys.exit(main())
