"""`.status.json`: the facts of `.status` as one JSON document, for programs.

Role: the machine-readable twin of `app.render_status`. It takes the same arguments (the
mount's `Memory`, its `Config`, the indexer and intake when they run, and `visible`, the
filter of refusals a caller may see) and reads the same sources, so a reader of either
file learns the same things; docs/reference.md lists every field. The text stays the
human's; numbers here are numbers and times are ISO 8601 UTC strings.

Boundary: a composition-root helper like `app` (no pyfuse3, no `contextfs.fs`); the tree
serves what it returns through `fs.roles.static` as it serves `.status`.
"""

from __future__ import annotations

import datetime as dt
import errno
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contextfs import __version__

if TYPE_CHECKING:  # annotations only: the daemon passes the live objects in
    from contextfs.config import Config
    from contextfs.conversations.inbox import Intake
    from contextfs.memory.service import Memory
    from contextfs.memory.summaries import SummaryService
    from contextfs.model import Refusal
    from contextfs.search.indexer import Indexer

# Bumped when a field changes meaning or goes away (adding a field does not bump it).
FORMAT = 1


def _iso(t: float | None) -> str | None:
    if t is None:
        return None
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _index(indexer: Indexer | None, committed: int) -> dict[str, Any] | None:
    if indexer is None:
        return None
    emb = indexer.embedder
    return {
        "state": indexer.shown_state,  # "ready" only when nothing is queued
        "generation": indexer.generation,
        "queue": max(0, committed - indexer.generation),
        "text_generation": indexer.text_generation,
        # changes behind each cursor, units being embedded, rate, estimated seconds left
        "backlog": indexer.backlog(),
        "embedding_model": emb.name if emb else indexer.model_name,
        "dimensions": emb.dim if emb else None,  # None until the model has loaded
        "indexed_units": len(indexer.digests),
        "vector_index": indexer.vector_kind,  # hnswlib, compact (large stores) or None
        # units run through the model by this mount, and (a shared store) those whose
        # vectors another mount had embedded; None: vectors are not shared
        "embedded_here": indexer.embedded_here,
        "taken_from_store": indexer.shared_taken if indexer.shared is not None else None,
        "error": indexer.error or None,
    }


def memory_facts(memory: Memory) -> dict[str, int | None]:
    """Where the daemon's memory goes: its resident set (anonymous and file-backed, from
    /proc), the store's buffers and their limit, the node heads and texts it holds."""
    proc: dict[str, int] = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
                    proc[key] = int(value.split()[0]) * 1024
    except OSError:  # not Linux: the process figures are unknown
        pass
    buffers = memory.store.buffer_memory()
    return {
        "rss_bytes": proc.get("VmRSS"),
        "anonymous_bytes": proc.get("RssAnon"),
        "file_bytes": proc.get("RssFile"),
        "store_buffers_bytes": buffers[0] if buffers else None,
        "store_buffers_limit_bytes": buffers[1] if buffers else None,
        "node_heads_held": memory.nodes.held(),
        "texts_held": len(memory.texts),
    }


def memory_line(memory: Memory) -> str:
    """`memory_facts` as the line `.status` shows."""
    m = memory_facts(memory)

    def mib(key: str) -> str:
        value = m[key]
        return "?" if value is None else f"{value / 2**20:,.0f}"

    store = (
        f"store buffers {mib('store_buffers_bytes')} of {mib('store_buffers_limit_bytes')} MiB"
        if m["store_buffers_bytes"] is not None
        else "store buffers: the server's"
    )
    return (
        f"memory: {mib('rss_bytes')} MiB resident ({mib('anonymous_bytes')} anonymous, "
        f"{mib('file_bytes')} mapped files); {store}; {m['node_heads_held']:,} node heads "
        f"and {m['texts_held']:,} texts held"
    )


def _intake(intake: Intake | None) -> dict[str, Any] | None:
    if intake is None:
        return None
    states: dict[str, int] = {}
    for item in intake.items.values():
        states[item.state] = states.get(item.state, 0) + 1
    return {
        "inbox": dict(sorted(states.items())),
        "live_sessions": len(intake.sessions),
        "media": intake.media.status_line() if intake.media is not None else None,
        "media_refused": intake.media_missing,
    }


def status_facts(
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
) -> dict[str, Any]:
    """The document `.status.json` serves (arguments as `app.render_status`)."""
    last = memory.store.last_consolidation()
    begun = memory.store.consolidation_begun()
    if begun is not None and last is not None and begun <= last[0]:
        begun = None  # the run that began then ended
    refusals, hidden = memory.recent_refusals(visible)
    shown = [
        {
            "when": _iso(r.when),
            "errno": errno.errorcode.get(r.errno, str(r.errno)),
            "errno_number": r.errno,
            "path": r.path,
            "reason": r.reason,
            "kept_at": r.kept_at,
        }
        for r in refusals
    ]
    return {
        "format": FORMAT,
        "version": __version__,
        "mountpoint": str(mountpoint),
        "data_dir": str(cfg.data_dir),
        "default_owner": memory.default_owner,
        "started": _iso(started),
        "read_only": memory.failsafe is not None,
        "failsafe_reason": memory.failsafe,
        "disk_full_since": memory.disk_full[0] if memory.disk_full else None,
        "fsck_at_mount": memory.mount_check.as_dict() if memory.mount_check else None,
        "generation": memory.generation,
        "outbox_rows": memory.store.outbox_depth(),
        "counts": memory.counts(),
        "types": [
            {"name": t.name, "scope": t.scope, "directory": t.type_dir, "mode": t.mode}
            for t in sorted(memory.types.values(), key=lambda t: t.name)
        ],
        # stored nodes of types no schema loads: kept, not shown
        "types_not_loaded": dict(sorted(memory.untyped.items())),
        "directory_listings": dir_cache or None,
        "invalidations_pending": unsettled() if unsettled is not None else None,
        "index": _index(indexer, memory.generation),
        "intake": _intake(intake),
        # LLM summaries (None without a chat endpoint): written, failed, the last failure
        "summaries": None
        if summaries is None
        else {
            "written": summaries.written,
            "failed": summaries.failures,
            "last_failure": summaries.last_failure or None,
        },
        "consolidation": {
            "every_seconds": cfg.consolidate_every,
            "runs": last[5] if last else 0,
            "last": _iso(last[0]) if last else None,
            "last_summary": last[4].splitlines()[0] if last else None,
            # a run that began after the last one ended, and never recorded its end
            "unended_run_began": _iso(begun) if begun is not None else None,
        },
        "memory": memory_facts(memory),
        "redactions": {
            "this_run": memory.redaction_count,
            "total": memory.store.redaction_total(),
            # the learned layer (secret_model in config.yaml; docs/secrets.md)
            "secret_model": memory.redactor is not None and memory.redactor.uses_model,
        },
        "refusals": {"count": memory.refusal_count, "recent": shown, "hidden": hidden},
    }


def render_status_json(*args: Any, **kwargs: Any) -> str:
    """`status_facts` as the bytes of the file: indented, one trailing newline."""
    return json.dumps(status_facts(*args, **kwargs), indent=2, ensure_ascii=False) + "\n"
