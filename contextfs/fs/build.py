"""Assembly of the fs layer for one mount: the inode table, the role handlers, the tree, the
adapter.

`build_tree` makes the table, gives each role handler the table, the memory service and
the peers it names, fills the role map the tree dispatches by, and builds the top of the
tree. The daemon calls `build_operations` once with what it built (the memory, the search
and intake services, configuration values) and gets the pyfuse3 `Operations` back, plus
the `IntakeService` it runs in its nursery. This is the one place that ties the sessions'
extraction and the background hooks (new nodes and owners from the inbox) to the tree.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

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
    roles.add(static, attachments, nodes, tiers, trash, query, inbox, sessions)
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
    nodes.build()
    tiers.restore_parked()
    return tree, inbox


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
        inbox.changed()
        ops.flush_invalidations()

    service = IntakeService(intake, on_change=intake_changed)
    tree, inbox = _assemble(
        memory,
        None,
        None,
        status,
        status_json,
        schema_files,
        search,
        intake,
        SessionsConfig(options.session_budget, options.session_k, service),
    )
    intake.node_changed = tree.nodes.routed  # type: ignore[method-assign]
    intake.owner_created = tree.nodes.add_owner  # type: ignore[method-assign,assignment]
    ops = Operations(
        tree,
        entry_timeout=options.entry_timeout,
        attr_timeout=options.attr_timeout,
        xattrs=options.xattrs,
        cache_dirs=options.cache_dirs,
    )
    return ops, service
