"""Building blocks of the composition roots: what `cli` and `daemon` both assemble.

Role: turn a `Config` into the objects a command needs (the context types, an opened and
checked `Memory`, the `.schemas/` files, the embedder and extractor the configuration asks
for) and render the `.status` text. The offline commands (`fsck`, `reindex`,
`consolidate`, `schema check`, `status`, `search`) take their pieces from here, so they
run on a machine without FUSE and never pay for importing it.

Boundary: no pyfuse3, no `contextfs.fs`, no `contextfs.daemon`, and no trio task of its
own (tests/unit/test_offline.py walks the import graph). Reading configuration stays with
the roots: everything here receives a `Config`, nothing loads one.
"""

from __future__ import annotations

import datetime as dt
import errno
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from contextfs import __version__
from contextfs.config import Config, make_private
from contextfs.conversations.extract import Extractor, RuleExtractor
from contextfs.conversations.llm import LLMExtractor, LLMSummarizer, MediaDescriber
from contextfs.conversations.media import MediaSettings
from contextfs.ctxtypes import ContextType, builtin_schema_dir, load_types
from contextfs.errors import LLMUnavailable, NoSpace, SchemaError, StoreDamaged
from contextfs.index.embed import Embedder, LocalEmbedder, OpenAIEmbedder
from contextfs.media.clip import ClipSpec, LazyClip
from contextfs.memory.redact import Redactor
from contextfs.memory.service import Memory
from contextfs.model import Refusal
from contextfs.search.images import ImageVectors
from contextfs.status_json import memory_line
from contextfs.store import Store
from contextfs.store.backend import open_store
from contextfs.store.backup import BACKUP_DIR, BackupPolicy, backups, taken_at, unreadable, when
from contextfs.store.fsck import (
    CheckRun,
    close_session,
    full_check,
    mount_check,
    open_session,
    record_passed,
)
from contextfs.store.schema import SCHEMA_VERSION

if TYPE_CHECKING:  # annotations only: render_status never needs the classes themselves
    from contextfs.conversations.inbox import Intake
    from contextfs.memory.summaries import SummaryService
    from contextfs.search.indexer import Indexer

log = logging.getLogger("contextfs.daemon")  # the name these lines always had in the log


def load_all_types(cfg: Config) -> dict[str, ContextType]:
    """Built-in types, then the data dir's `schemas/` (which may add or override)."""
    dirs = [builtin_schema_dir()]
    if cfg.user_schema_dir.is_dir():
        dirs.append(cfg.user_schema_dir)
    types = load_types(dirs)
    if not types:  # a mount without types has no tree to write into: refuse it
        raise SchemaError(str(dirs[0]), 1, "no context type loaded")
    return types


def schema_files(types: dict[str, ContextType]) -> dict[str, bytes]:
    return {f"{t.name}.yaml": Path(t.source).read_bytes() for t in types.values()}


# `.status` of a mount made read-only by its option (`state: read-only: ...`)
READ_ONLY_MOUNT = "mounted read-only (-o ro): nothing is written to the store"


def _quiet(_doing: str) -> None:
    pass


def open_memory(
    cfg: Config,
    types: dict[str, ContextType],
    *,
    read_only: bool = False,
    progress: Callable[[str], object] = _quiet,
) -> Memory:
    """The store of a mount, opened read-write and checked; failsafe when fsck objects.
    A DuckDB file that cannot be read mounts its newest backup read-only instead, and
    says so (contextfs.store.backup). read_only (`-o ro`): opened read-only, so that
    the mount writes nothing to it (`_read_only_memory`). `progress` is told what it
    does as each step begins (`daemon.Starting`: what a mount stopped meanwhile says)."""
    make_private(cfg.data_dir)
    # bad user patterns refuse the mount
    redactor = Redactor(cfg.redact_patterns, model=cfg.secret_model)
    if read_only:
        return _read_only_memory(cfg, types, redactor)
    store = None
    progress("opening the store")
    try:
        store = open_store(
            cfg.store_location,
            memory_mb=cfg.store_memory_mb,
            checkpoint_mb=cfg.store_checkpoint_mb,
            deadline_s=cfg.store_deadline_s,
        )
        memory = _memory(store, cfg, types, redactor)
        # since the last check that passed (docs/fsck.md); the full one only once
        run = mount_check(store, lambda step: progress(f"checking the store ({step})"))
    except Exception as exc:
        if cfg.store or not unreadable(exc):
            raise
        if store is not None:
            store.close()
        return _backup_memory(cfg, types, redactor, exc)
    if run.problems:
        memory.failsafe = f"fsck found {len(run.problems)} problem(s): {run.problems[0]}"
        log.error("store failed its checks, mounting read-only: %s", "; ".join(run.problems))
    else:
        progress("recording the check")
        try:
            # a session the mount never closed changes nothing in what it checks: every
            # write committed with its outbox seq, so what it wrote is after the point
            left = open_session(store, _session_key(cfg))
            if left is not None:
                run = replace(run, left_open=float(left))
                log.info("the last session of this mount did not close the store (killed?)")
            record_passed(store, run)
        except NoSpace as exc:  # a full disk: the mount reads, and writes once there is room
            memory.disk_full = (time.time(), exc.reason)
            log.warning("disk full at mount: writes are refused until there is room (%s)", exc)
        if not cfg.store:  # a checked store is copied when it closes, if one is due
            store.backup = BackupPolicy(
                cfg.data_dir / BACKUP_DIR, cfg.backup_keep, cfg.backup_interval_hours * 3600
            )
    memory.mount_check = run
    log.info("fsck at mount: %s", run.describe())
    progress("loading the owners and routing files left pending")
    for (_owner, type_name), (count, _live) in store.node_counts_by_dir().items():
        if type_name not in types:
            memory.untyped[type_name] = memory.untyped.get(type_name, 0) + count
    if memory.untyped:
        log.warning(
            "stored nodes of types no schema loads are not shown: %s",
            ", ".join(f"{t} ({n})" for t, n in sorted(memory.untyped.items())),
        )
    owner = ("user", cfg.default_owner)
    if not memory.failsafe and not memory.disk_full:
        try:
            if owner not in memory.owners:
                memory.create_owner(*owner)
            for path, res in memory.routing.recover_drops():
                log.info("routed a file left pending by the last run: %s -> %s", path, res)
        except NoSpace as exc:
            memory.disk_full = (time.time(), exc.reason)
            log.warning("disk full at mount: writes are refused until there is room (%s)", exc)
    return memory


def _memory(store, cfg: Config, types: dict[str, ContextType], redactor: Redactor) -> Memory:
    return Memory(
        store,
        types,
        data_dir=cfg.data_dir,
        max_file_size=cfg.max_file_size,
        max_inbox_size=cfg.max_inbox_size,
        max_tier_size=cfg.max_tier_size,
        redactor=redactor,
        default_owner=cfg.default_owner,
    )


def _read_only_memory(cfg: Config, types: dict[str, ContextType], redactor: Redactor) -> Memory:
    """The store of a `-o ro` mount, opened read-only: no access counts, consolidation,
    recorded check, session mark, checkpoint or backup reach it (the mount is failsafe,
    which every writer of the store obeys, with `READ_ONLY_MOUNT` as its reason). A DuckDB
    file is locked as a writer would lock it, so no other mount or `restore` changes it
    under this one. Only a store that does not exist yet, or one of an older schema, is
    made current first, as any mount would (there is nothing to show otherwise)."""
    if cfg.store:
        store = open_store(cfg.store_location, read_only=True, deadline_s=cfg.store_deadline_s)
    else:
        if not cfg.db_path.exists() or _schema_behind(cfg.db_path):
            log.info("bringing the store to the current schema before mounting it read-only")
            open_store(cfg.db_path, memory_mb=cfg.store_memory_mb).close()
        try:
            store = Store(
                cfg.db_path, read_only=True, memory_mb=cfg.store_memory_mb, lock_as=cfg.db_path
            )
        except Exception as exc:
            if not unreadable(exc):
                raise
            return _backup_memory(cfg, types, redactor, exc)  # read-only as well
    try:
        memory = _memory(store, cfg, types, redactor)
        memory.failsafe = READ_ONLY_MOUNT
        run = mount_check(store)
    except BaseException:
        store.close()
        raise
    memory.mount_check = run
    if run.problems:
        log.error("store failed its checks (mounted read-only): %s", "; ".join(run.problems))
    log.info("mounted read-only by -o ro; fsck at mount: %s", run.describe())
    return memory


def _schema_behind(db: Path) -> bool:
    """Whether the DuckDB store at db is of a schema older than this version's."""
    store = Store(db, read_only=True)
    try:
        found = store.meta("schema_version")
    finally:
        store.close()
    return found is None or int(found) < SCHEMA_VERSION


def _backup_memory(
    cfg: Config, types: dict[str, ContextType], redactor: Redactor, why: BaseException
) -> Memory:
    """The newest backup of a store whose file cannot be read that opens and passes a
    full check, opened read-only: what the mount shows, in failsafe mode, until
    `contextfs restore` puts it back. The backups it passed over are named, with why."""
    reason = first_line(why)
    have = backups(cfg.data_dir / BACKUP_DIR)
    if not have:
        raise StoreDamaged(
            f"the store cannot be read (damaged?): {reason}; there is no backup to mount "
            f"read-only (`contextfs salvage {cfg.data_dir} OUT` copies what it still holds)"
        ) from why
    store, run, skipped = checked_backup(have, cfg.db_path, cfg.store_memory_mb)
    for line in skipped:
        log.error("backup passed over: %s", line)
    if store is None or run is None:
        raise StoreDamaged(
            f"the store cannot be read (damaged?): {reason}; nor does any of its "
            f"{len(have)} backup(s) pass fsck ({'; '.join(skipped)}); "
            f"`contextfs salvage {cfg.data_dir} OUT` copies what the store still holds"
        ) from why
    backup = Path(store.location)
    memory = _memory(store, cfg, types, redactor)
    passed_over = f"; newer backups passed over: {'; '.join(skipped)}" if skipped else ""
    memory.failsafe = (
        f"the store file cannot be read ({reason}); this is its backup of "
        f"{when(taken_at(backup))}, read-only: unmount and run `contextfs restore "
        f"{cfg.data_dir}` to put it back (the damaged file is kept aside){passed_over}"
    )
    log.error("store file damaged, mounting its backup %s read-only: %s", backup, reason)
    memory.mount_check = run
    return memory


def checked_backup(
    candidates: list[Path], lock_as: Path, memory_mb: int = 0
) -> tuple[Store | None, CheckRun | None, list[str]]:
    """The first of `candidates` (backups, newest first) that opens and passes a full
    check (a backup can be damaged too, and a bad block in it shows only when read),
    opened read-only holding the lock of the store `lock_as`; its check; and one line for
    each candidate passed over, saying why. (None, None, lines) when none passes."""
    skipped: list[str] = []
    for backup in candidates:
        name = f"{backup} (taken {when(taken_at(backup))})"
        try:
            store = Store(backup, read_only=True, memory_mb=memory_mb, lock_as=lock_as)
        except Exception as exc:
            if not unreadable(exc):
                raise
            skipped.append(f"{name}: it cannot be read ({first_line(exc)})")
            continue
        try:
            run = full_check(store)
        except Exception as exc:
            store.close()
            if not unreadable(exc):
                raise
            skipped.append(f"{name}: a part of it cannot be read ({first_line(exc)})")
            continue
        if run.problems:
            store.close()
            skipped.append(f"{name}: fsck found {len(run.problems)} problem(s): {run.problems[0]}")
            continue
        return store, run, skipped
    return None, None, skipped


def first_line(exc: BaseException) -> str:
    """An error's first line, for a one-line reason."""
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def consolidation_line(memory: Memory, cfg: Config) -> str:
    """`.status`'s consolidation line: the last run that ended, and a later one that began
    but never recorded its end (the daemon killed or stopped during it)."""
    last = memory.store.last_consolidation()
    begun = memory.store.consolidation_begun()
    cut = begun is not None and (last is None or begun > last[0])
    if last is None:
        line = "consolidation: no run ended" if cut else "consolidation: never run"
        line += f" (every {cfg.consolidate_every:g}s)"
    else:
        line = f"consolidation: {last[5]} run(s); last {_ts(last[0])}: " + last[4].splitlines()[0]
    if cut:
        assert begun is not None
        line += (
            f"; the run begun {_ts(begun)} did not end (the daemon stopped during it): "
            "what it merged or archived is kept, the next run does the rest"
        )
    return line


def _session_key(cfg: Config) -> str:
    """Which mount a session is (many mounts may share one PostgreSQL store)."""
    return f"{socket.gethostname()}:{cfg.data_dir}"


def close_memory(memory: Memory, cfg: Config) -> None:
    """Close the store of a mount, marking its session as ended cleanly (not in failsafe
    mode: a store that failed fsck is not written to)."""
    if memory.failsafe:
        memory.store.backup = None  # a store that failed is not what a backup should hold
    else:
        try:
            close_session(memory.store, _session_key(cfg))
        # concatenated, not starred: mypy rejects a starred tuple of exception classes
        except (StoreDamaged,) + memory.store.errors + memory.store.unavailable as exc:
            log.warning("could not mark the session closed (%s): the next mount says so", exc)
    memory.store.close()


def extractor(cfg: Config) -> Extractor:
    """An LLM extracts when an endpoint is configured, in chunks that fit its window, with
    rules for a chunk it fails on; rules otherwise (offline). A remote endpoint without its
    key raises `LLMUnavailable` (the mount is refused); a local one needs no key."""
    if cfg.llm_base_url and cfg.llm_model:
        return LLMExtractor(
            base_url=cfg.llm_base_url,
            model=cfg.llm_model,
            api_key_env=cfg.llm_api_key_env,
            context_tokens=cfg.llm_context_tokens,
            rules=RuleExtractor(),
        )
    return RuleExtractor()


def summarizer(cfg: Config) -> LLMSummarizer | None:
    """L0/L1 by the chat endpoint when one is configured, within its window; None otherwise
    (the extractive summaries stay)."""
    if not (cfg.llm_base_url and cfg.llm_model):
        return None
    return LLMSummarizer(
        base_url=cfg.llm_base_url,
        model=cfg.llm_model,
        api_key_env=cfg.llm_api_key_env,
        context_tokens=cfg.llm_context_tokens,
    )


def describer(cfg: Config) -> MediaDescriber | None:
    """Captions of pictures and transcripts of speech for media nodes, when a chat
    endpoint is configured (the same one as extraction); None otherwise."""
    if not (cfg.llm_base_url and cfg.llm_model):
        return None
    try:
        return MediaDescriber(
            base_url=cfg.llm_base_url,
            model=cfg.llm_model,
            transcribe_model=cfg.llm_transcribe_model,
            api_key_env=cfg.llm_api_key_env,
        )
    except LLMUnavailable as exc:
        log.warning("media nodes keep derived text: %s", exc)
        return None


def embedder_factory(cfg: Config) -> Callable[[], Embedder]:
    """The embedder the configuration asks for, built lazily (the local model takes
    5-13 s to import: the mount is usable before it is ready)."""
    if cfg.embedder == "openai":
        return lambda: OpenAIEmbedder(
            base_url=cfg.embed_base_url, model=cfg.embed_model, api_key_env=cfg.embed_api_key_env
        )
    return lambda: LocalEmbedder(threads=cfg.embed_threads)


def _ts(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def media_settings(cfg: Config) -> MediaSettings:
    """The media gates' settings from config.yaml."""
    return MediaSettings(
        drop_above=cfg.media_drop_above,
        new_below=cfg.media_new_below,
        max_pixels=cfg.media_max_pixels,
        stream_gap=cfg.media_stream_gap,
        vad_frame_ms=cfg.vad_frame_ms,
        vad_aggressiveness=cfg.vad_aggressiveness,
        vad_energy_floor_db=cfg.vad_energy_floor_db,
        vad_min_modulation_db=cfg.vad_min_modulation_db,
        max_audio_seconds=cfg.media_max_audio_seconds,
        clip_drop_above=cfg.clip_drop_above,
        clip_new_below=cfg.clip_new_below,
        video_frame_interval=cfg.video_frame_interval,
    )


def clip_model(cfg: Config) -> LazyClip | None:
    """The CLIP model of a checkpoint in config.yaml, loaded on first use (one per process:
    the visual gate and the image vectors share it); None when none is configured."""
    if not cfg.clip_checkpoint:
        return None
    spec = ClipSpec(
        model=cfg.clip_model,
        checkpoint=cfg.clip_checkpoint,
        model_config=cfg.clip_model_config,
        threads=cfg.embed_threads,
    )
    return LazyClip(spec)


def image_vectors(cfg: Config, clip: LazyClip | None) -> ImageVectors | None:
    """The CLIP side of search, when a checkpoint is configured."""
    if clip is None:
        return None
    return ImageVectors(clip, min_similarity=cfg.clip_query_min)


def secret_model_line(memory: Memory) -> str:
    """`.status`'s line on the learned layer of redaction (docs/secrets.md)."""
    if memory.redactor is not None and memory.redactor.uses_model:
        return (
            "secret model: on (secret_model: true in config.yaml): what it takes for a "
            "secret in prose is redacted as [REDACTED:secret_guess]"
        )
    return "secret model: off (the rules alone; secret_model: true in config.yaml adds it)"


def render_status(
    memory: Memory,
    cfg: Config,
    mountpoint: Path,
    started: float,
    indexer: Indexer | None = None,
    intake: Intake | None = None,
    dir_cache: str = "",
    unsettled: Callable[[], int] | None = None,
    visible: Callable[[Refusal], bool] | None = None,
    summaries: SummaryService | None = None,
) -> str:
    """The text of a mount's `.status` (docs/operations.md describes every line).
    `visible` keeps the refusals the reader may see (None: all)."""
    c = memory.counts()
    state = "read-only: " + memory.failsafe if memory.failsafe else "read-write"
    if memory.disk_full and not memory.failsafe:
        state += (
            f" (disk full since {_ts(memory.disk_full[0])}: writes refused with ENOSPC "
            f"until there is room; reads go on: {memory.disk_full[1]})"
        )
    lines = [
        f"contextfs {__version__}",
        f"mountpoint: {mountpoint}",
        f"data_dir: {cfg.data_dir}",
        f"store: {memory.store.describe()}",
        f"started: {_ts(started)}",
        f"state: {state}",
        "fsck at mount: "
        + (memory.mount_check.describe() if memory.mount_check else "none (not a mount)"),
        f"generation: {memory.generation}",
        f"outbox_rows: {memory.store.outbox_depth()}",
        "counts: " + ", ".join(f"{k}={v}" for k, v in c.items()),
        "types: "
        + ", ".join(
            f"{t.name} ({t.scope}/{t.type_dir}, {t.mode})"
            for t in sorted(memory.types.values(), key=lambda t: t.name)
        ),
    ]
    if memory.untyped:
        lines.append(
            "types not loaded: "
            + ", ".join(f"{t} ({n} node(s))" for t, n in sorted(memory.untyped.items()))
            + ": their nodes are kept but not shown; put the type's YAML back in "
            "DATA_DIR/schemas/ (or `contextfs export DATA_DIR OUT` unmounted)"
        )
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
    if summaries is not None:
        lines += summaries.status_lines()
    lines.append(consolidation_line(memory, cfg))
    lines.append(
        f"redactions: {memory.redaction_count} this run, "
        f"{memory.store.redaction_total()} in all (kinds and places in the store's "
        "redaction log; never the secrets)"
    )
    lines.append(secret_model_line(memory))
    lines.append(memory_line(memory))
    if memory.conflicts:  # a shared store: saves that lost to another mount's, kept
        lines.append(f"write conflicts: {len(memory.conflicts)} (newest first)")
        lines += [f"  {c}" for c in reversed(memory.conflicts)]
    lines.append(f"refusals: {memory.refusal_count} (newest first)")
    shown, hidden = memory.recent_refusals(visible)
    for r in shown:
        name = errno.errorcode.get(r.errno, str(r.errno))
        kept = f" (bytes kept at {r.kept_at})" if r.kept_at and r.kept_at not in r.reason else ""
        lines.append(f"  {_ts(r.when)} {name} {r.path}: {r.reason}{kept}")
    if hidden:
        lines.append(f"  ({hidden} more in owner directories you cannot open)")
    return "\n".join(lines) + "\n"
