"""Assembly of the fs layer for one mount: the inode table, the role handlers, the tree, the
adapter.

`build_tree` makes the table, gives each role handler the table, the memory service and
the peers it names, fills the role map the tree dispatches by, and builds the top of the
tree. The daemon calls `build_operations` once with what it built (the memory, the search
and intake services, configuration values) and gets the pyfuse3 `Operations` back, plus
the `IntakeService` it runs in its nursery. This is the one place that ties the sessions'
extraction and the background services (what the inbox, the indexer, consolidation, the
summaries and other mounts change) to the tree: the tree `follow`s each of them.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import ParamSpec, Protocol

from contextfs.conversations.inbox import Intake, IntakeService
from contextfs.fs.buffers import Buffers
from contextfs.fs.inode import Role
from contextfs.fs.ops import Operations
from contextfs.fs.perms import Perms
from contextfs.fs.roles.attachments import Attachments
from contextfs.fs.roles.base import Refusals, RoleMap
from contextfs.fs.roles.inbox import Inbox
from contextfs.fs.roles.nodes import Nodes
from contextfs.fs.roles.query import QueryDirs
from contextfs.fs.roles.rename import Renames
from contextfs.fs.roles.restore import Restore
from contextfs.fs.roles.sessions import (
    SESSION_CONTEXT_BUDGET,
    SESSION_CONTEXT_K,
    Sessions,
    SessionsConfig,
)
from contextfs.fs.roles.static import Static
from contextfs.fs.roles.tiers import Tiers
from contextfs.fs.roles.trash import Trash
from contextfs.fs.searchport import SearchPort
from contextfs.fs.table import InodeTable
from contextfs.fs.tree import Tree
from contextfs.memory.cluster import ClusterSync, Loaded
from contextfs.memory.consolidate import ConsolidationService, Report
from contextfs.memory.service import Memory
from contextfs.memory.summaries import SummaryService
from contextfs.model import Node, Refusal
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


def build_tree(
    memory: Memory,
    *,
    uid: int | None = None,
    gid: int | None = None,
    status: Callable[..., str] | None = None,
    status_json: Callable[..., str] | None = None,
    schema_files: dict[str, bytes] | None = None,
    search: SearchPort | None = None,
    intake: Intake | None = None,
    sessions_config: SessionsConfig | None = None,
) -> Tree:
    """The tree over `memory`: its table, its role handlers, and the top of it built."""
    return _assemble(
        memory, uid, gid, status, status_json, schema_files, search, intake, sessions_config
    )[0]


def _assemble(
    memory: Memory,
    uid: int | None,
    gid: int | None,
    status: Callable[..., str] | None,
    status_json: Callable[..., str] | None,
    schema_files: dict[str, bytes] | None,
    search: SearchPort | None,
    intake: Intake | None,
    sessions_config: SessionsConfig | None,
) -> tuple[Tree, Inbox]:
    """The tree, and the inbox handler the intake service reports its progress to."""
    roles = RoleMap()  # filled below, once every handler exists
    table = InodeTable(
        os.getuid() if uid is None else uid, os.getgid() if gid is None else gid, roles.populate
    )
    refusals = Refusals(memory, table)
    perms = Perms(memory, table.uid, table.gid)
    buffers = Buffers(memory, table, roles, refusals)
    static = Static(
        table,
        status or (lambda visible=None: ""),
        schema_files or {},
        status_json,
        memory=memory,
        perms=perms,
    )
    attachments = Attachments(table, memory, refusals)
    trash = Trash(table)
    sessions = Sessions(table, memory, intake, search, sessions_config, refusals=refusals)
    inbox = Inbox(table, memory, intake, sessions=sessions)
    nodes = Nodes(table, memory, attachments=attachments, trash=trash, inbox=inbox, buffers=buffers)
    tiers = Tiers(
        table,
        memory,
        nodes=nodes,
        attachments=attachments,
        perms=perms,
        refusals=refusals,
        search=search,
    )
    query = QueryDirs(table, search, tiers=tiers, perms=perms)
    restore = Restore(table, memory, nodes, refusals)
    roles.add(static, attachments, nodes, tiers, trash, query, inbox, sessions, restore)
    renames = Renames(
        table,
        memory,
        roles,
        refusals,
        nodes=nodes,
        tiers=tiers,
        attachments=attachments,
        trash=trash,
        inbox=inbox,
    )
    tree = Tree(
        table,
        memory,
        roles,
        buffers=buffers,
        perms=perms,
        renames=renames,
        static=static,
        nodes=nodes,
        tiers=tiers,
        attachments=attachments,
        query=query,
    )
    # the top of the tree, in this order (readdir of the root lists by inode number)
    root = table.new_dir(Role.ROOT, "", None)
    nodes.add_kinds(root)
    static.build(root)
    query.build(root)
    inbox.add_dirs(root, ("user", memory.default_owner))
    restore.build(root)
    nodes.build()
    memory.box_name = nodes.box_name  # a node deleted or archived keeps its name there
    tiers.restore_parked()
    return tree, inbox


P = ParamSpec("P")


def then_flush(show: Callable[P, object], flush: Callable[[], object]) -> Callable[P, None]:
    """What a background service changed, shown in the tree, then sent to the kernel.

    A service changes the memory outside any FUSE handler, so nothing else would send the
    invalidations the tree queued until the next kernel request."""

    def changed(*args: P.args, **kwargs: P.kwargs) -> None:
        show(*args, **kwargs)
        flush()

    return changed


class StatusSource(Protocol):
    """`.status` and `.status.json` of a mount: the facts, as a caller may see them
    (`visible`), with the invalidations the adapter has not sent yet (`unsettled`)."""

    def text(
        self, visible: Callable[[Refusal], bool] | None, unsettled: Callable[[], int]
    ) -> str: ...

    def json(
        self, visible: Callable[[Refusal], bool] | None, unsettled: Callable[[], int]
    ) -> str: ...


@dataclass(frozen=True, slots=True)
class Background:
    """The background services whose changes the tree shows (each optional)."""

    indexer: Indexer | None = None
    consolidation: ConsolidationService | None = None
    summaries: SummaryService | None = None
    cluster: ClusterSync | None = None


def build_operations(
    memory: Memory,
    options: FsOptions,
    *,
    status: StatusSource,
    schema_files: dict[str, bytes],
    intake: Intake,
    searcher: Searcher | None = None,
    background: Background = Background(),
) -> tuple[Operations, IntakeService]:
    """The adapter over a tree over `memory`, and the intake service to run. The tree
    follows the intake and every background service given, to show what they change."""
    indexer = background.indexer
    search = None
    if indexer is not None and searcher is not None:
        search = SearchPort(
            searcher, indexer, frozenset(memory.types), options.fsync_barrier_timeout
        )
    service = IntakeService(intake)

    def unsettled() -> int:  # the adapter wraps the tree: it is made just below
        return ops.unsettled

    tree, inbox = _assemble(
        memory,
        None,
        None,
        lambda visible=None: status.text(visible, unsettled),
        lambda visible=None: status.json(visible, unsettled),
        schema_files,
        search,
        intake,
        SessionsConfig(options.session_budget, options.session_k, service),
    )
    ops = Operations(
        tree,
        entry_timeout=options.entry_timeout,
        attr_timeout=options.attr_timeout,
        xattrs=options.xattrs,
        cache_dirs=options.cache_dirs,
    )
    nodes, flush = tree.nodes, ops.flush_invalidations
    intake.follow(nodes)
    service.follow(then_flush(inbox.changed, flush))
    if indexer is not None:
        indexer.follow(then_flush(nodes.indexed, flush))
    if background.consolidation is not None:

        def consolidated(report: Report) -> None:
            nodes.refresh(report.touched)

        background.consolidation.follow(then_flush(consolidated, flush))
    if background.summaries is not None:

        def summarised(n: Node) -> None:
            nodes.refresh([n])

        background.summaries.follow(then_flush(summarised, flush))
    if background.cluster is not None:
        background.cluster.follow(then_flush(functools.partial(_loaded, memory, nodes), flush))
    return ops, service


def _loaded(memory: Memory, nodes: Nodes, items: Loaded) -> None:
    """What another mount of a shared store committed, loaded here: its new owners and
    nodes shown, the nodes it changed refreshed."""
    owners, memory.new_owners = memory.new_owners, []
    for owner in owners:
        nodes.owner_joined(owner)
    if memory.reaccessed:
        keys, memory.reaccessed = memory.reaccessed, set()
        nodes.access_changed(keys)
    if memory.reattached:
        node_ids, memory.reattached = memory.reattached, set()
        nodes.attachments_changed(node_ids)
    for n, created in items:
        if created:
            nodes.routed(n, True)
    nodes.refresh([n for n, created in items if not created])
