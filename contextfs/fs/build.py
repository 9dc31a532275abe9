"""Assembly of the fs layer for one mount: the tree, its role handlers' services, the adapter.

The daemon calls `build_operations` once with what it built (the memory, the search and
intake services, configuration values) and gets the pyfuse3 `Operations` back, plus the
`IntakeService` it runs in its nursery. This is the one place that ties the sessions'
extraction and the background hooks (new nodes and owners from the inbox) to the tree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from contextfs.conversations.inbox import Intake, IntakeService
from contextfs.fs.ops import Operations
from contextfs.fs.query import SearchPort
from contextfs.fs.sessions import SESSION_CONTEXT_BUDGET, SESSION_CONTEXT_K, SessionsConfig
from contextfs.fs.tree import Tree
from contextfs.memory.service import Memory
from contextfs.search.indexer import Indexer
from contextfs.search.retrieval import Searcher


@dataclass(frozen=True, slots=True)
class FsOptions:
    """The configuration values the fs layer reads (config.yaml, mount options)."""

    entry_timeout: float = 60.0
    attr_timeout: float = 60.0
    xattrs: bool = False
    cache_dirs: bool = False
    fsync_barrier_timeout: float = 30.0
    session_budget: int = SESSION_CONTEXT_BUDGET
    session_k: int = SESSION_CONTEXT_K


def build_operations(
    memory: Memory,
    options: FsOptions,
    *,
    status: Callable[..., str],
    status_json: Callable[..., str] | None = None,
    schema_files: dict[str, bytes],
    intake: Intake,
    indexer: Indexer | None = None,
    searcher: Searcher | None = None,
) -> tuple[Operations, IntakeService]:
    """The adapter over a tree over `memory`, and the intake service to run."""
    search = None
    if indexer is not None and searcher is not None:
        search = SearchPort(
            searcher, indexer, frozenset(memory.types), options.fsync_barrier_timeout
        )

    def intake_changed() -> None:
        tree.inbox_changed()
        ops.flush_invalidations()

    service = IntakeService(intake, on_change=intake_changed)
    tree = Tree(
        memory,
        status=status,
        status_json=status_json,
        schema_files=schema_files,
        search=search,
        intake=intake,
        sessions_config=SessionsConfig(options.session_budget, options.session_k, service),
    )
    intake.node_changed = tree.node_routed  # type: ignore[method-assign]
    intake.owner_created = tree.add_owner  # type: ignore[method-assign,assignment]
    ops = Operations(
        tree,
        entry_timeout=options.entry_timeout,
        attr_timeout=options.attr_timeout,
        xattrs=options.xattrs,
        cache_dirs=options.cache_dirs,
    )
    return ops, service
