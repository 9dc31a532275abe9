"""The composition root of a mount: build the object graph, run pyfuse3 and the services.

Role: `run()` builds every object of a mount in constructor order (types, store and memory,
indexes and searcher, intake, then the tree, the background services and the FUSE adapter),
mounts, serves `pyfuse3.main()` and the background services in one trio nursery (S3QL's
`mount.py` shape), and takes everything down in reverse through one exit stack: the mount,
each service's `stop()`, the memory's last writes, the store, the mount record.

Boundary: the only module (with `cli`) that reads configuration, and with `fs.ops` the only
one that imports pyfuse3. What the offline commands share with a mount (types, opening the
store, embedders, `.status`) lives in `contextfs.app`, so `cli` imports this module only
for `contextfs mount`.
"""

from __future__ import annotations

import contextlib
import errno
import faulthandler
import gc
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import TracebackType
from typing import Protocol, TypeVar

import pyfuse3
import trio

from contextfs import greenwait
from contextfs.app import (
    clip_model,
    close_memory,
    describer,
    embedder_factory,
    extractor,
    image_vectors,
    load_all_types,
    media_settings,
    open_memory,
    render_status,
    schema_files,
    summarizer,
)
from contextfs.config import Config, mount_record
from contextfs.conversations.inbox import Intake, IntakeService
from contextfs.errors import (
    ContextFSError,
    MountpointNotEmpty,
    MountRefused,
    StoreUnavailable,
    UsageError,
    VersionConflict,
)
from contextfs.fs.build import Background, FsOptions, build_operations
from contextfs.fs.ops import DIR_HANDLE_IS_INODE, Operations
from contextfs.memory.background import BACKGROUND, FOREGROUND
from contextfs.memory.cluster import ClusterSync
from contextfs.memory.consolidate import ConsolidationService
from contextfs.memory.remote import catch_up
from contextfs.memory.service import Memory
from contextfs.memory.summaries import SummaryService
from contextfs.memory.texts import TextWarmup
from contextfs.model import Refusal
from contextfs.search.indexer import Indexer
from contextfs.search.retrieval import Searcher
from contextfs.status_json import render_status_json

log = logging.getLogger(__name__)


async def _watch_signals(nursery: trio.Nursery) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as sigs:
        async for sig in sigs:
            log.info("signal %s: unmounting", signal.Signals(sig).name)
            pyfuse3.terminate()
            return


def _prepare_mountpoint(mountpoint: Path, *, nonempty: bool) -> None:
    """Make `mountpoint` ready to be mounted on, or refuse it (exit 2) saying why.

    A missing one is created (`contextfs mount ~/memory` on a fresh machine). A daemon
    killed with SIGKILL leaves 'Transport endpoint is not connected': the dead mount still
    looks like a mount point (its root's attributes are cached), so ask for a listing, which
    needs a live daemon, and detach it. A directory with entries (hidden ones count) is
    refused unless `nonempty`: the mount would hide them, and libfuse 3 no longer checks."""
    try:
        os.lstat(mountpoint)
    except (FileNotFoundError, NotADirectoryError):  # the latter: a file on the way to it
        try:
            mountpoint.mkdir(parents=True)
        except OSError as exc:
            raise UsageError(
                f"cannot create the mount point {mountpoint}: {exc.strerror}"
            ) from None
        log.info("created the mount point %s", mountpoint)
    except OSError:
        pass  # a dead mount answers ENOTCONN even to lstat: detached below
    try:
        entries = os.listdir(mountpoint)
    except OSError as exc:
        if exc.errno != errno.ENOTCONN:
            raise _unusable(mountpoint, exc) from None
        log.warning("%s is a dead mount from an earlier run; detaching it", mountpoint)
        subprocess.run(["fusermount3", "-u", "-z", str(mountpoint)], capture_output=True)
        try:
            entries = os.listdir(mountpoint)  # what the dead mount hid
        except OSError as again:
            raise _unusable(mountpoint, again) from None
    else:
        if os.path.ismount(mountpoint):
            raise UsageError(f"{mountpoint} is already a mount point")
    if entries and not nonempty:
        raise MountpointNotEmpty(mountpoint)


def _unusable(mountpoint: Path, exc: OSError) -> UsageError:
    if exc.errno == errno.ENOTDIR and os.path.exists(mountpoint):
        return UsageError(f"mountpoint {mountpoint} is not a directory")
    return UsageError(f"mountpoint {mountpoint}: {exc.strerror}")


def _init_fuse(ops: Operations, mountpoint: Path, fuse_options: set[str]) -> None:
    """`pyfuse3.init`, refused with libfuse's own reason as one line.

    libfuse (and the fusermount3 it runs) print why they refuse to fd 2, and then pyfuse3
    raises a RuntimeError that names only the call that failed. So fd 2 goes to a file
    for the call (the log's stderr handler keeps writing to the real one), and what was
    said there becomes the error: options libfuse does not take are a usage error (exit 2,
    fuse_session_new), a mount the kernel or fusermount3 refuses is exit 1."""
    sys.stderr.flush()
    saved = os.dup(2)
    real = open(saved, "w", closefd=False, errors="backslashreplace")  # noqa: SIM115
    moved = [
        h
        for h in logging.root.handlers
        if isinstance(h, logging.StreamHandler) and h.stream is sys.stderr
    ]
    failed: RuntimeError | None = None
    with tempfile.TemporaryFile() as said:
        os.dup2(said.fileno(), 2)
        for h in moved:
            h.setStream(real)
        try:
            pyfuse3.init(ops, str(mountpoint), fuse_options)
        except RuntimeError as exc:
            failed = exc
        finally:
            for h in moved:
                h.setStream(sys.stderr)  # flushes `real`
            real.close()
            os.dup2(saved, 2)
            os.close(saved)
        said.seek(0)
        text = said.read().decode(errors="replace")
    if failed is None:
        sys.stderr.write(text)  # mounted: any warning of libfuse's is shown as it would be
        return
    reason = " ".join(ln.strip() for ln in text.splitlines() if ln.strip()) or str(failed)
    refused = UsageError if "fuse_session_new" in str(failed) else MountRefused
    raise refused(f"cannot mount {mountpoint}: {reason}") from None


R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Status:
    """`.status` and `.status.json` of a mount: the same facts (`app.render_status`,
    `status_json.render_status_json`), as a caller may see them."""

    memory: Memory
    cfg: Config
    mountpoint: Path
    started: float
    indexer: Indexer | None
    intake: Intake
    summaries: SummaryService | None
    dir_cache: str

    def text(
        self,
        visible: Callable[[Refusal], bool] | None,
        unsettled: Callable[[], int],
        render: Callable[..., str] = render_status,
    ) -> str:
        return render(
            self.memory,
            self.cfg,
            self.mountpoint,
            self.started,
            self.indexer,
            self.intake,
            self.dir_cache,
            unsettled,
            visible,
            summaries=self.summaries,
        )

    def json(self, visible: Callable[[Refusal], bool] | None, unsettled: Callable[[], int]) -> str:
        return self.text(visible, unsettled, render_status_json)


def _waker(*services: Indexer | SummaryService | None) -> Callable[..., None]:
    """A follower that wakes these services, whatever it is told."""

    def wake(*_told: object) -> None:
        for service in services:
            if service is not None:
                service.wake()

    return wake


def _dir_cache(cfg: Config) -> tuple[str, bool]:
    """What `.status` says of directory listings, and whether the kernel keeps them."""
    if cfg.dir_cache and DIR_HANDLE_IS_INODE:
        return "kept by the kernel until they change (no opendir)", True
    if cfg.dir_cache:
        said = (
            f"asked on every read: pyfuse3 {metadata.version('pyfuse3')} is not the "
            "build from scripts/build_pyfuse3.py"
        )
        log.info("directory listings are not cached: %s", said)
        return said, False
    return "asked on every read (dir_cache: false in config.yaml)", False


# Mount options that are ours, not the kernel's: they are removed before pyfuse3.init.
# `nonempty` was libfuse 2's; libfuse 3 refuses it as unknown, and mounts over files anyway.
OWN_OPTIONS = {"ctx_xattr", "nonempty"}


def _read_only(options: list[str]) -> bool:
    """Whether the mount options make the mount read-only (the last of `ro`/`rw` counts,
    as libfuse reads them): the kernel then refuses every write, and the daemon writes
    nothing to the store either (`app.open_memory`)."""
    last = [o for o in options if o in ("ro", "rw")]
    return bool(last) and last[-1] == "ro"


# What a daemon stopped before its mount was ready writes on stderr (daemon.out), after
# `contextfs: `: `contextfs mount`, which stops a daemon that is not mounted in time,
# reads what follows it.
STOPPED_BEFORE_READY = "stopped before the mount was ready: "


class Starting:
    """What the daemon is doing until its mount is ready; said in the log and on stderr
    if it is stopped (SIGTERM, SIGINT, SIGHUP) meanwhile: `contextfs mount` stops a
    daemon not mounted within its --timeout, and before, the daemon died by the signal's
    default action with nothing in its log to say why it never mounted.

    A thread of its own reads the signals (`signal.set_wakeup_fd`): the main thread may be
    inside one long statement of the store, where no Python signal handler runs."""

    def __init__(self) -> None:
        self.began = self.since = time.monotonic()
        self.doing = "starting"
        self._read: socket.socket | None = None
        self._write: socket.socket | None = None
        self._handlers: dict[int, object] = {}
        self._old_fd = -1

    def __call__(self, doing: str) -> None:
        if doing != self.doing:
            log.debug("start: %s", doing)
        self.doing, self.since = doing, time.monotonic()

    def said(self) -> str:
        now = time.monotonic()
        return (
            f"still {self.doing} (for {now - self.since:.1f} s; "
            f"{now - self.began:.1f} s after the daemon began)"
        )

    def watch(self) -> None:
        """From here until `ready`, a stop signal is said, then ends the process."""
        self._read, self._write = socket.socketpair()
        self._write.setblocking(False)
        for sig in _STOPS:  # a handler of Python's own: the wakeup fd is written for it
            self._handlers[sig] = signal.signal(sig, lambda *_: None)
        self._old_fd = signal.set_wakeup_fd(self._write.fileno(), warn_on_full_buffer=False)
        threading.Thread(
            target=self._wait, args=(self._read,), name="starting", daemon=True
        ).start()

    def _wait(self, read: socket.socket) -> None:
        got = read.recv(1)
        if not got:
            read.close()
            return  # ready: the other end closed
        name = signal.Signals(got[0]).name
        line = STOPPED_BEFORE_READY + self.said()
        log.error("%s: %s", name, line)
        print(f"contextfs: {line} ({name})", file=sys.stderr, flush=True)
        logging.shutdown()
        os._exit(128 + got[0])

    def ready(self) -> None:
        """The mount is ready (or the start failed): signals are trio's, or their default."""
        if self._write is None:
            return
        for sig, handler in self._handlers.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]  # what was there
        signal.set_wakeup_fd(self._old_fd)
        self._write.close()  # the thread reads end-of-file and returns
        self._write = None


_STOPS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def run(cfg: Config, mountpoint: Path, options: list[str]) -> int:
    """Mount and serve until unmounted. Returns the process exit code."""
    # Worker threads that run Python (cutting passages, rule extraction) hold the GIL for
    # up to the switch interval each time the event loop wants it back, and one FUSE
    # request hands it over several times: 1 ms instead of 5 keeps a request's wait short
    # while a backlog is indexed (scripts/bench_ingest.py --backlog).
    sys.setswitchinterval(0.001)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    faulthandler.enable(all_threads=True)  # a fatal signal prints every thread's stack
    mountpoint = mountpoint.absolute()
    _prepare_mountpoint(mountpoint, nonempty="nonempty" in options)
    starting = Starting()
    starting.watch()
    with contextlib.ExitStack() as teardown:
        teardown.callback(starting.ready)  # a start that failed
        _mount(cfg, mountpoint, options, teardown, starting)
    if threading.active_count() > 1:
        # Everything is closed (the store, the indexes, the mount record). A worker thread
        # trio abandoned at the unmount (the model still loading: torch's import takes
        # seconds) may be inside native code, and finalising the interpreter under it
        # aborts in C++ (std::terminate, SIGABRT). Leave without finalising.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


def _mount(
    cfg: Config,
    mountpoint: Path,
    options: list[str],
    teardown: contextlib.ExitStack,
    starting: Starting,
) -> None:
    """Build the object graph in constructor order, mount, and serve until unmounted.

    Whatever must be undone is pushed on `teardown` as it is made, so it unwinds in reverse:
    the kernel mount goes first, then each service's stop() (`_run_services`), the memory's
    last writes, the store, and the mount record last (`contextfs umount` waits for it as
    the sign that the store is closed)."""
    announce = teardown.enter_context(_mount_record(mountpoint, cfg))
    starting("loading the context types")
    types = load_all_types(cfg)
    memory = open_memory(cfg, types, read_only=_read_only(options), progress=starting)
    teardown.callback(close_memory, memory, cfg)
    starting("starting the indexer and services")
    started = time.time()
    indexer = searcher = None
    clip = clip_model(cfg)  # one CLIP model for the visual gate and the image vectors
    if cfg.search:
        indexer = Indexer(
            memory,
            cfg.index_dir,
            _then_settle(embedder_factory(cfg)),
            model_name=cfg.model_name,
            images=image_vectors(cfg, clip),
            compact_units=cfg.vector_compact_units,
            shared=memory.store.shared_vectors() if cfg.share_vectors else None,
        )
        searcher = Searcher(memory, indexer, warm_up=True)
    intake = Intake(
        memory,
        extractor=extractor(cfg),
        default_agent=cfg.default_agent,
        extract_every=cfg.session_extract_every,
        media=media_settings(cfg),
        clip=clip,
        describer=describer(cfg),
    )
    consolidation = ConsolidationService(memory, cfg.consolidate_every)
    llm_summaries = summarizer(cfg)
    summaries = SummaryService(memory, llm_summaries) if llm_summaries is not None else None
    cluster = None
    if memory.store.dialect == "postgresql":  # other mounts may share it: docs/scaling.md
        # a statement waits for the network: the loop serves other requests meanwhile
        greenwait.enable()
        cluster = ClusterSync(memory)
        # what another host committed reaches no subscriber here: index it, summarise it
        cluster.follow(_waker(indexer, summaries))
    dir_cache, cache_dirs = _dir_cache(cfg)
    status = Status(memory, cfg, mountpoint, started, indexer, intake, summaries, dir_cache)
    ops, intake_service = build_operations(
        memory,
        FsOptions(
            entry_timeout=cfg.entry_timeout,
            attr_timeout=cfg.attr_timeout,
            xattrs="ctx_xattr" in options,
            cache_dirs=cache_dirs,
            fsync_barrier_timeout=cfg.fsync_barrier_timeout,
            session_budget=cfg.session_context_budget,
        ),
        status=status,
        schema_files=schema_files(types),
        intake=intake,
        searcher=searcher,
        background=Background(indexer, consolidation, summaries, cluster),
    )
    fuse_options = set(pyfuse3.default_options)
    # the kernel checks every access against the owners and modes the tree reports (the
    # stored ones: fs/perms.py); without it, under allow_other anyone could open anything
    fuse_options |= {"fsname=contextfs", "subtype=contextfs", "default_permissions"}
    fuse_options |= set(options) - OWN_OPTIONS
    log.info("mounting %s (data dir %s, %d nodes)", mountpoint, cfg.data_dir, memory.live.count())
    teardown.callback(_last_writes, memory)  # registered before the mount: runs after it goes
    starting("mounting the filesystem")
    _init_fuse(ops, mountpoint, fuse_options)
    teardown.push(_close_fuse)
    announce()
    starting.ready()  # from here, trio's signal receiver unmounts cleanly

    def first_reads() -> None:  # what the first questions would otherwise wait for
        memory.store.read_ahead()
        if searcher is not None:
            searcher.names.refresh()

    warmup = TextWarmup(memory.texts, memory.recent_nodes, also=first_reads)
    services = (indexer, intake_service, consolidation, summaries, cluster, warmup)
    _settle_heap("the memory and the tree")
    trio.run(_run_services, ops, services)


def _settle_heap(what: str) -> None:
    """Exempt what is loaded now and lives as long as the mount from the cyclic collector.

    A full collection walks every tracked object: with the embedding model's import graph
    (torch, transformers) and a node head per node, one took 300-450 ms at 10,000 nodes
    (and grows with the store), stalling whatever request the GIL was serving when it
    struck: those pauses were the query p99. `gc.freeze` moves everything tracked so far
    to a generation the collector never walks; what is made afterwards is collected as
    usual. Called once after each big load (the memory at mount, the model when it has
    loaded), never on a timer: garbage frozen by mistake would stay for good."""
    gc.freeze()
    log.info(
        "heap settled after loading %s (%d objects exempt from collection)",
        what,
        gc.get_freeze_count(),
    )


def _then_settle(factory: Callable[[], R]) -> Callable[[], R]:
    """`factory`, and the heap settled after it returns (the embedder: seconds of imports)."""

    def load() -> R:
        made = factory()
        gc.collect()  # the import's garbage, before it is frozen for good
        _settle_heap("the embedding model")
        return made

    return load


@contextlib.contextmanager
def _mount_record(mountpoint: Path, cfg: Config) -> Iterator[Callable[[], None]]:
    """Yields `announce()`, which writes the record that a daemon serves `mountpoint`; the
    record is removed on the way out, only if it was written."""
    record = mount_record(mountpoint)
    written = False

    def announce() -> None:
        nonlocal written
        record.write_text(
            json.dumps(
                {"pid": os.getpid(), "data_dir": str(cfg.data_dir), "mountpoint": str(mountpoint)}
            )
        )
        written = True

    try:
        yield announce
    finally:
        if written:
            record.unlink(missing_ok=True)
            log.info("unmounted %s", mountpoint)


def _last_writes(memory: Memory) -> None:
    """What the memory keeps only in the daemon until the end, written before the store
    closes (not in failsafe mode: a store that failed fsck is not written to)."""
    if not memory.failsafe:
        try:
            if memory.store.dialect == "postgresql":
                catch_up(memory)  # what other mounts (or a lost commit answer) stored
            memory.persist_pending()  # empty nodes made by mkdir survive a remount
            memory.flush_access_counts()
            memory.attachment_store.flush_touched()
        except (StoreUnavailable, VersionConflict) as exc:  # a shared store's server
            log.warning("the last writes (empty folders, access counts) not stored: %s", exc)


def _close_fuse(
    exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
) -> bool:
    """Let go of /dev/fuse; unmount only after a clean end of `pyfuse3.main()` (after a
    crash the kernel mount stays, answering ENOTCONN, until the next start detaches it)."""
    pyfuse3.close(unmount=exc_type is None)
    return False  # never swallow the exception


class RunningService(Protocol):
    """What the daemon runs in its nursery and stops at the end: a
    `contextfs.memory.background.Service` with its `run` loop."""

    async def run(self) -> None: ...

    def stop(self) -> None: ...


async def _run_services(ops: Operations, services: tuple[RunningService | None, ...]) -> None:
    """`_serve`, then every background service's `stop()`, also when serving failed.

    In reverse order of registration: the services that commit changes first, the indexer
    that consumes them last."""
    FOREGROUND.last_request = time.monotonic()  # the mount answers from now (`quiet`)
    async with contextlib.AsyncExitStack() as stack:
        for service in services:
            if service is not None:
                stack.push_async_callback(_stop, service)
        await _serve(ops, services)


async def _stop(service: RunningService) -> None:
    service.stop()


_NAMES = {
    IntakeService: "intake",
    ConsolidationService: "consolidation",
    SummaryService: "summaries",
    Indexer: "indexer",
    ClusterSync: "cluster sync",
    TextWarmup: "text warm-up",
}


async def _serve(ops: Operations, services: tuple[RunningService | None, ...]) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_guarded, "invalidator", ops.run_invalidator)
        nursery.start_soon(_watch_signals, nursery)
        for service in services:
            if service is not None:
                name = _NAMES.get(type(service), type(service).__name__)
                nursery.start_soon(_guarded, name, service.run)
        await pyfuse3.main()
        nursery.cancel_scope.cancel()


async def _guarded(name: str, run: Callable[[], Awaitable[None]]) -> None:
    """Run a background service; if it raises, log it and start it again after a pause
    that grows to a minute. A service's fault in a nursery would otherwise cancel
    `pyfuse3.main()` and take the mount down with it. What a service commits is
    background work (`BACKGROUND`): the indexer puts it behind what people save."""
    BACKGROUND.set(True)  # this task's context only (and the threads it starts)
    pause = 1.0
    while True:
        try:
            await greenwait.run(run())  # its store waits leave the loop to the requests
            return
        except Exception:
            log.exception("%s failed; starting it again in %.0f s", name, pause)
        await trio.sleep(pause)
        pause = min(60.0, pause * 2)


__all__ = ["run", "ContextFSError"]
