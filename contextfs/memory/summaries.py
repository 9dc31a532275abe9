"""L0/L1 by a language model in the background (SPEC §3: derived from L2 whenever it changes).

The extractive summaries (`summarize.py`) are written with every save and stand in until the
model's answer arrives; a failed call leaves them, with a warning (once per node) and a
count in `status_lines()`. The summarizer is any object with `summarize(ctype, l2) -> (l0,
l1)` that raises `ContextFSError` when it cannot answer (`conversations.llm.LLMSummarizer`
is the one the daemon wires in; it fits each request into the model's context window).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import trio

from contextfs.errors import ContextFSError
from contextfs.memory.background import Service
from contextfs.memory.service import Memory
from contextfs.model import Change
from contextfs.store.backend import FeedRows

log = logging.getLogger(__name__)


class SummaryService(Service):
    """With an LLM configured, writes L0/L1 of every node whose L2 changed (SPEC §5): the
    extractive ones stand in until the model's answer arrives; a failed call leaves them.

    Woken by every commit that changed a node (`Transactions.subscribe`); the summaries it
    writes are commits too, published like any other. Its followers get each node it
    summarised."""

    def __init__(self, memory: Memory, summarizer) -> None:
        super().__init__()
        self.memory = memory
        self.feed: FeedRows = memory.store  # the outbox: the nodes that changed
        self.summarizer = summarizer
        self.seq = memory.generation  # nodes that change from now on
        self.done: dict[int, int] = {}  # node id -> version summarised
        self.failures = 0
        self.written = 0
        self.warned: set[int] = set()  # nodes whose failure was logged as a warning
        self.last_failure = ""  # "<path>: <reason>" of the newest failure
        self.unsubscribe = memory.transactions.subscribe(self._committed)

    def _committed(self, changes: Sequence[Change]) -> None:
        if any(c.kind == "node" for c in changes):
            self.wake()

    async def run(self) -> None:
        while not self.stopping:
            self._rearm()
            rows = self.feed.outbox_since(self.seq, 64)
            if not rows:
                await self._idle(30)
                continue
            self.seq = rows[-1][0]
            for nid in dict.fromkeys(r[1] for r in rows):
                if self.stopping:
                    return
                n = self.memory.nodes.get(nid)
                if (
                    n is None
                    or not self.memory.is_live(n)
                    or not n.l2.strip()
                    or self.done.get(nid) == n.version
                    or n.l0_pinned
                    or n.l1_pinned
                ):
                    continue
                ctype = self.memory.types.get(n.type)
                version, l2 = n.version, n.l2
                self.done[nid] = version
                try:
                    l0, l1 = await trio.to_thread.run_sync(self.summarizer.summarize, ctype, l2)
                    if self.memory.set_summaries(n, l0, l1, version):
                        self.written += 1
                        self.done[nid] = n.version
                        self._tell(n)
                except ContextFSError as exc:
                    self.failures += 1
                    path = self.memory.node_path(n)
                    self.last_failure = f"{path}: {exc}"
                    # once per node: a node that keeps failing (its L2 grows in a session)
                    # must not fill the log
                    level = logging.INFO if nid in self.warned else logging.WARNING
                    self.warned.add(nid)
                    log.log(level, "LLM summary of %s failed, extractive L0/L1 kept: %s", path, exc)

    def status_lines(self) -> list[str]:
        """The `.status` line of the LLM summaries (docs/operations.md)."""
        line = f"summaries: LLM, {self.written} written, {self.failures} failed"
        if self.failures:
            line += f" (extractive L0/L1 kept; last: {self.last_failure})"
        return [line]
