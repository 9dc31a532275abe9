"""ClusterSync: the background service that keeps a mount on a shared store up to date
with the other mounts' commits (docs/scaling.md).

Role: a worker thread waits on PostgreSQL's LISTEN for the commit notices every mount
sends (`store.pg.PgListener`); on each (and once a second in any case, for a notice missed
while the server was away) the service reads what changed in another worker thread
(`memory.remote.fetch`: the event loop goes on serving while the server is slow or
frozen), loads it into memory on the loop (`memory.remote.apply`) and
hands the nodes (`Loaded`) to its followers: the tree (kernel caches invalidated) and the
daemon, which wakes the indexer (the local indexes are fed from the shared outbox).
Boundary: run()/stop() in the daemon's nursery like the other services; no FUSE.
"""

from __future__ import annotations

import contextlib
import logging

import trio

from contextfs.errors import StoreUnavailable
from contextfs.memory.background import Service
from contextfs.memory.remote import apply, catch_up, fetch
from contextfs.memory.service import Memory
from contextfs.model import Node

log = logging.getLogger(__name__)

MISSES = 3  # reads off the loop that memory moved past, before one on it
Loaded = list[tuple[Node, bool]]  # nodes loaded from other mounts' commits: (node, created)


class ClusterSync(Service):
    """Loads other mounts' commits into `memory` as their notices arrive."""

    def __init__(self, memory: Memory, *, poll: float = 1.0) -> None:
        super().__init__()
        self.memory = memory
        self.poll = poll
        self.rounds = 0
        self._told = memory.generation  # the generation the followers last heard of

    async def run(self) -> None:
        listener = self.memory.store.listener()  # type: ignore[attr-defined]
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._listen, listener)
                while not self.stopping:
                    self._rearm()
                    await self.sync_once()
                    await self._idle(self.poll)
                nursery.cancel_scope.cancel()
        finally:
            listener.close()

    async def _catch_up(self) -> None:
        """Read in a worker thread, load on the loop; read again when this mount's own
        writes moved memory meanwhile, and after `MISSES` such reads in a row catch up on
        the loop (a mount writing without pause then waits for the server as its writes
        do, and never falls behind the others)."""
        memory = self.memory
        misses = 0
        while misses < MISSES:
            got = await trio.to_thread.run_sync(fetch, memory, abandon_on_cancel=True)
            loaded = apply(memory, got)
            if loaded is None:
                misses += 1
            elif got.complete:
                return
        if memory.transactions.journal is None:
            catch_up(memory)

    async def _listen(self, listener) -> None:  # noqa: ANN001 - store.pg.PgListener
        while not self.stopping:
            if await trio.to_thread.run_sync(listener.wait, 0.5, abandon_on_cancel=True):
                self.wake()

    async def sync_once(self) -> None:
        """Load what the others committed, then tell the followers what was loaded (also
        the nodes a re-applied write loaded meanwhile), and that the generation moved."""
        self.rounds += 1
        # while the server is away its reconnection says so in .status; the next round
        # retries
        with contextlib.suppress(StoreUnavailable):
            await self._catch_up()
        # the generation moves without a node reloaded when the tree read the node first
        # (a lookup loads it as stored): the indexer must hear of that commit all the same
        memory = self.memory
        moved = memory.generation != self._told
        if memory.reloaded or memory.new_owners or memory.reaccessed or memory.reattached or moved:
            self._told = memory.generation
            items, memory.reloaded = memory.reloaded, []
            self._tell(items)
