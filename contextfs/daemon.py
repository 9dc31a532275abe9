"""The composition root: open the store, load the types, build the tree, run pyfuse3.

The only module (with `cli`) that reads configuration. Background services start in one
trio nursery next to `pyfuse3.main()` (S3QL's `mount.py` shape). Later services (the
indexer, inbox, sessions, consolidation) are started here too.
"""

from __future__ import annotations

import datetime as dt
import errno
import faulthandler
import json
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

import pyfuse3
import trio

from contextfs import __version__
from contextfs.config import Config, mount_record
from contextfs.conversations.extract import Extractor, RuleExtractor
from contextfs.conversations.inbox import Intake, IntakeService
from contextfs.conversations.llm import LLMExtractor, LLMSummarizer
from contextfs.ctxtypes import ContextType, builtin_schema_dir, load_types
from contextfs.errors import ContextFSError, UsageError
from contextfs.fs.build import FsOptions, build_operations
from contextfs.fs.ops import DIR_HANDLE_IS_INODE, Operations
from contextfs.index.embed import Embedder, LocalEmbedder, OpenAIEmbedder
from contextfs.memory.consolidate import ConsolidationService
from contextfs.memory.redact import Redactor
from contextfs.memory.service import Memory
from contextfs.memory.summaries import SummaryService
from contextfs.search.indexer import Indexer
from contextfs.search.retrieval import Searcher
from contextfs.store import Store
from contextfs.store.fsck import check_store

log = logging.getLogger(__name__)


def load_all_types(cfg: Config) -> dict[str, ContextType]:
    """Built-in types, then the data dir's `schemas/` (which may add or override)."""
    dirs = [builtin_schema_dir()]
    if cfg.user_schema_dir.is_dir():
        dirs.append(cfg.user_schema_dir)
    return load_types(dirs)


def schema_files(types: dict[str, ContextType]) -> dict[str, bytes]:
    return {f"{t.name}.yaml": Path(t.source).read_bytes() for t in types.values()}


def open_memory(cfg: Config, types: dict[str, ContextType]) -> Memory:
    cfg.data_dir.mkdir(parents=True, exist_ok=True)
    redactor = Redactor(cfg.redact_patterns)  # bad user patterns refuse the mount
    store = Store(cfg.db_path)
    memory = Memory(store, types, data_dir=cfg.data_dir, max_file_size=cfg.max_file_size,
                    max_tier_size=cfg.max_tier_size, redactor=redactor,
                    default_owner=cfg.default_owner)
    problems = check_store(store)
    if problems:
        memory.failsafe = f"fsck found {len(problems)} problem(s): {problems[0]}"
        log.error("store failed its checks, mounting read-only: %s", "; ".join(problems))
    owner = ("user", cfg.default_owner)
    if owner not in memory.owners and not memory.failsafe:
        memory.create_owner(*owner)
    if not memory.failsafe:
        for path, res in memory.recover_drops():
            log.info("routed a file left pending by the last run: %s -> %s", path, res)
    return memory


def _ts(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def extractor(cfg: Config) -> Extractor:
    """An LLM extracts when an endpoint is configured; rules otherwise (offline)."""
    if cfg.llm_base_url and cfg.llm_model:
        return LLMExtractor(base_url=cfg.llm_base_url, model=cfg.llm_model,
                            api_key_env=cfg.llm_api_key_env)
    return RuleExtractor()


def render_status(memory: Memory, cfg: Config, mountpoint: Path, started: float,
                  indexer: Indexer | None = None, intake: Intake | None = None,
                  dir_cache: str = "", unsettled: Callable[[], int] | None = None) -> str:
    c = memory.counts()
    state = "read-only: " + memory.failsafe if memory.failsafe else "read-write"
    lines = [
        f"contextfs {__version__}",
        f"mountpoint: {mountpoint}",
        f"data_dir: {cfg.data_dir}",
        f"started: {_ts(started)}",
        f"state: {state}",
        f"generation: {memory.generation}",
        f"outbox_rows: {memory.store.outbox_depth()}",
        "counts: " + ", ".join(f"{k}={v}" for k, v in c.items()),
        "types: " + ", ".join(
            f"{t.name} ({t.scope}/{t.type_dir}, {t.mode})"
            for t in sorted(memory.types.values(), key=lambda t: t.name)),
    ]
    if dir_cache:
        lines.append(f"directory listings: {dir_cache}")
    if unsettled is not None:
        lines.append(f"kernel cache invalidations pending: {unsettled()}")
    if indexer is not None:
        lines += indexer.status_lines()
    else:
        lines.append("index: off (search: false in config.yaml)")
    if intake is not None:
        lines += intake.status_lines()
    last = memory.store.last_consolidation()
    if last is None:
        lines.append(f"consolidation: never run (every {cfg.consolidate_every:g}s)")
    else:
        lines.append(f"consolidation: {last[5]} run(s); last {_ts(last[0])}: "
                     + last[4].splitlines()[0])
    lines.append(f"redactions: {memory.redaction_count} this run, "
                 f"{memory.store.redaction_total()} in all (kinds and places in the store's "
                 "redaction log; never the secrets)")
    lines.append(f"refusals: {memory.refusal_count} (newest first)")
    for r in reversed(memory.refusals):
        name = errno.errorcode.get(r.errno, str(r.errno))
        kept = f" (bytes kept at {r.kept_at})" if r.kept_at and r.kept_at not in r.reason else ""
        lines.append(f"  {_ts(r.when)} {name} {r.path}: {r.reason}{kept}")
    return "\n".join(lines) + "\n"


async def _watch_signals(nursery: trio.Nursery) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as sigs:
        async for sig in sigs:
            log.info("signal %s: unmounting", signal.Signals(sig).name)
            pyfuse3.terminate()
            return


def _clear_stale_mount(mountpoint: Path) -> None:
    """A daemon killed with SIGKILL leaves 'Transport endpoint is not connected'.

    The dead mount still looks like a mount point (its root's attributes are cached),
    so ask for a listing, which needs a live daemon."""
    try:
        os.lstat(mountpoint)
    except FileNotFoundError:
        mountpoint.mkdir(parents=True)  # `contextfs mount ~/memory` on a fresh machine
        log.info("created the mount point %s", mountpoint)
    except OSError:
        pass  # a dead mount answers ENOTCONN even to lstat: detached below
    try:
        os.listdir(mountpoint)
    except OSError as exc:
        if exc.errno != errno.ENOTCONN:
            raise UsageError(f"mountpoint {mountpoint}: {exc.strerror}") from None
        log.warning("%s is a dead mount from an earlier run; detaching it", mountpoint)
        subprocess.run(["fusermount3", "-u", "-z", str(mountpoint)], capture_output=True)
    else:
        if os.path.ismount(mountpoint):
            raise UsageError(f"{mountpoint} is already a mount point")
    if not mountpoint.is_dir():
        raise UsageError(f"mountpoint {mountpoint} is not a directory")


def embedder_factory(cfg: Config) -> Callable[[], Embedder]:
    """The embedder the configuration asks for, built lazily (the local model takes
    5-13 s to import: the mount is usable before it is ready)."""
    if cfg.embedder == "openai":
        return lambda: OpenAIEmbedder(base_url=cfg.embed_base_url, model=cfg.embed_model,
                                      api_key_env=cfg.embed_api_key_env)
    return lambda: LocalEmbedder(threads=cfg.embed_threads)


# Mount options that are ours, not the kernel's: they are removed before pyfuse3.init.
OWN_OPTIONS = {"ctx_xattr"}


def run(cfg: Config, mountpoint: Path, options: list[str]) -> int:
    """Mount and serve until unmounted. Returns the process exit code."""
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    mountpoint = mountpoint.absolute()
    _clear_stale_mount(mountpoint)
    types = load_all_types(cfg)
    memory = open_memory(cfg, types)
    started = time.time()
    indexer = searcher = None
    if cfg.search:
        indexer = Indexer(memory, cfg.index_dir, embedder_factory(cfg),
                          model_name=cfg.model_name)
        searcher = Searcher(memory, indexer)
    intake = Intake(memory, extractor=extractor(cfg), default_agent=cfg.default_agent,
                    extract_every=cfg.session_extract_every)
    cache_dirs = cfg.dir_cache and DIR_HANDLE_IS_INODE
    if cache_dirs:
        dir_cache = "kept by the kernel until they change (no opendir)"
    elif cfg.dir_cache:
        dir_cache = (f"asked on every read: pyfuse3 {metadata.version('pyfuse3')} is not the "
                     "build from scripts/build_pyfuse3.py")
        log.info("directory listings are not cached: %s", dir_cache)
    else:
        dir_cache = "asked on every read (dir_cache: false in config.yaml)"
    status = lambda: render_status(memory, cfg, mountpoint, started, indexer,  # noqa: E731
                                   intake, dir_cache, lambda: ops.unsettled)
    summaries: SummaryService | None = None

    def committed() -> None:  # something was stored: index it, summarise it
        if indexer is not None:
            indexer.wake()
        if summaries is not None:
            summaries.wake()

    ops, intake_service = build_operations(
        memory, FsOptions(entry_timeout=cfg.entry_timeout, attr_timeout=cfg.attr_timeout,
                          xattrs="ctx_xattr" in options, cache_dirs=cache_dirs,
                          fsync_barrier_timeout=cfg.fsync_barrier_timeout,
                          session_budget=cfg.session_context_budget),
        status=status, schema_files=schema_files(types), intake=intake, indexer=indexer,
        searcher=searcher, on_commit=committed)
    tree = ops.tree

    def consolidated(report) -> None:
        tree.refresh_nodes(report.touched)
        ops.flush_invalidations()

    consolidation = ConsolidationService(memory, cfg.consolidate_every, consolidated)
    if cfg.llm_base_url and cfg.llm_model:
        def summarised(n) -> None:
            tree.refresh_nodes([n])
            ops.flush_invalidations()

        summaries = SummaryService(
            memory, LLMSummarizer(base_url=cfg.llm_base_url, model=cfg.llm_model,
                                  api_key_env=cfg.llm_api_key_env), on_change=summarised)

    def indexed(node_ids: list[int]) -> None:
        tree.nodes_indexed(node_ids)
        ops.flush_invalidations()

    if indexer is not None:
        indexer.on_indexed = indexed
    fuse_options = set(pyfuse3.default_options)
    fuse_options |= {"fsname=contextfs", "subtype=contextfs"}
    fuse_options |= set(options) - OWN_OPTIONS
    record = mount_record(mountpoint)
    log.info("mounting %s (data dir %s, %d nodes)", mountpoint, cfg.data_dir,
             len(memory.live))
    pyfuse3.init(ops, str(mountpoint), fuse_options)
    record.write_text(json.dumps({"pid": os.getpid(), "data_dir": str(cfg.data_dir),
                                  "mountpoint": str(mountpoint)}))
    clean = False
    try:
        trio.run(_serve, ops, indexer, intake_service, consolidation, summaries)
        clean = True
    finally:
        pyfuse3.close(unmount=clean)
        try:
            if not memory.failsafe:
                memory.persist_pending()  # empty nodes made by mkdir survive a remount
                memory.flush_access_counts()
                memory.flush_touched()
        finally:
            memory.store.close()
        record.unlink(missing_ok=True)
        log.info("unmounted %s", mountpoint)
    return 0


async def _serve(ops: Operations, indexer: Indexer | None,
                 intake_service: IntakeService, consolidation: ConsolidationService,
                 summaries: SummaryService | None) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ops.run_invalidator)
        nursery.start_soon(_watch_signals, nursery)
        nursery.start_soon(intake_service.run)
        nursery.start_soon(consolidation.run)
        if summaries is not None:
            nursery.start_soon(summaries.run)
        if indexer is not None:
            nursery.start_soon(indexer.run)
        await pyfuse3.main()
        nursery.cancel_scope.cancel()


__all__ = ["run", "open_memory", "load_all_types", "ContextFSError"]
