"""What the fs layer needs of search: `SearchPort`.

The searcher, the indexer's epoch (it moves whenever an index changed) and fsync's promise
(`sync`, awaited by `fs.roles.tiers`). Used by `.query` (`fs.roles.query`), a session's
`context.md` (`fs.roles.sessions`) and a tier's fsync; None in a mount with
`search: false`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from contextfs.model import Node
from contextfs.search.indexer import Indexer
from contextfs.search.retrieval import QueryOptions, Results, Searcher


@dataclass(frozen=True, slots=True)
class SearchPort:
    """Search as the fs layer uses it (None in a mount with `search: false`)."""

    searcher: Searcher
    indexer: Indexer
    known_types: frozenset[str]
    barrier_timeout: float = 30.0  # fsync waits at most this long for the index

    @property
    def generation(self) -> tuple[int, int]:
        """Moves whenever either index changed, or who may read what (a chmod, a chown,
        here or on another mount): an answer computed at another is stale."""
        return self.indexer.epoch, self.indexer.memory.access.version

    def search(
        self,
        question: str,
        scope: str,
        opts: QueryOptions,
        readable: Callable[[Node], bool] | None = None,
        reader_key: str = "",
    ) -> Results:
        """Worker thread only (embedding, hnswlib, tantivy)."""
        return self.searcher.search(question, scope, opts, readable, reader_key)

    async def sync(self, node_ids: list[int]) -> None:
        """fsync's promise (SPEC §3): these nodes, as stored, are found by BM25 when this
        returns, whatever the indexer's backlog; their vectors follow ahead of it."""
        await self.indexer.sync_nodes(node_ids, self.barrier_timeout)
