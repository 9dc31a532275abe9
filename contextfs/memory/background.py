"""The shape every background service shares (indexer, intake, summaries, consolidation).

A service's `run()` runs in the daemon's trio nursery until `stop()`; between rounds of
work it sleeps until `wake()` (usually called from a `Transactions.subscribe` callback when a
commit concerns it) or a timeout. `stop()` sets a flag and wakes it, so `run()` returns
at its next check instead of at the end of a sleep. Whoever shows what a service changed
(the tree) `follow`s it.

`BACKGROUND` tells a commit's listeners whether it was made by a background service (the
daemon sets it in each service's task; the threads a task starts inherit it): the indexer
puts what a person or an agent saved through the mount ahead of bulk work (an inbox
import, consolidation), and only that.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar

import trio

BACKGROUND: ContextVar[bool] = ContextVar("contextfs_background", default=False)


class Foreground:
    """The requests someone is waiting on that await a worker thread (an fsync: the node's
    BM25 commit; a question in `.query`: the search). While one is in flight, background
    services do not start their next step (`Service._yield`): on two cores an inbox
    filing conversations on the event loop and a bulk index slice took the CPU and the
    GIL from that thread, and an fsync that takes ~20 ms alone took 80-230 ms. A step
    already running finishes."""

    def __init__(self) -> None:
        self.busy = 0
        # requests in flight that store something (mkdir, create, a commit at close, a
        # rename...): background threads step aside for them too (`step_aside`)
        self.writing = 0
        # until when (time.monotonic) bulk work waits for the models to load: see `loading`
        self.loading_until = 0.0
        self.requests = 0  # requests of the mount in flight (`request`)
        # requests waiting for a background step to end (`awaiting`): it does not step
        # aside for them, or each would wait on the other
        self.awaited = 0
        # when the last one ended (time.monotonic; the daemon sets it when the mount starts
        # answering: `quiet` waits for a pause after that, and never without a mount)
        self.last_request = -float("inf")

    @contextlib.contextmanager
    def serving(self) -> Iterator[None]:
        self.busy += 1
        try:
            yield
        finally:
            self.busy -= 1

    @contextlib.contextmanager
    def request(self, storing: bool) -> Iterator[None]:
        """A request of the mount runs (any: `quiet` waits for none), one that writes to
        the store when `storing` (`step_aside`)."""
        self.requests += 1
        self.writing += storing
        try:
            yield
        finally:
            self.requests -= 1
            self.writing -= storing
            self.last_request = time.monotonic()

    async def quiet(self, seconds: float, most: float) -> None:
        """Until the mount has served no request for `seconds`, or `most` seconds have
        passed. The embedding model's import is two seconds of Python under the GIL, with
        C calls that hold it for up to 280 ms (libtorch's loading): a `find` of a tree
        right after a mount, served beside it, took three times as long as with search
        off; the model loads in the first pause instead."""
        until = time.monotonic() + most
        while True:
            now = time.monotonic()
            idle = now - self.last_request
            if now >= until or (not self.requests and idle >= seconds):
                return
            await trio.sleep(min(until - now, max(seconds - idle, 0.01)))

    def step_aside(self) -> None:
        """In a background service's worker thread, between two pieces of its work: while
        a request someone waits on is in flight, sleep (the GIL let go) for at most
        STEP_ASIDE_MOST seconds. Each store statement of a request lets the GIL go and
        takes it back; beside a thread running Python (rule extraction, cutting passages)
        each taking back waited up to the switch interval: 30 statements took 38 ms
        instead of 10. A no-op outside a background service's context (`BACKGROUND`)."""
        if not (self.busy or self.writing) or self.awaited or not BACKGROUND.get():
            return
        until = time.monotonic() + STEP_ASIDE_MOST
        while (self.busy or self.writing) and not self.awaited and time.monotonic() < until:
            time.sleep(0.0005)

    @contextlib.contextmanager
    def awaiting(self) -> Iterator[None]:
        """A request waits for background work to end (an rmdir of a session for the
        extraction of its turns under way): that work goes at full speed meanwhile."""
        self.awaited += 1
        try:
            yield
        finally:
            self.awaited -= 1

    @contextlib.contextmanager
    def loading(self, most: float) -> Iterator[None]:
        """While the embedding model loads (at most `most` seconds), bulk work
        (`Service._after_models`: an inbox import) does not start its next step. The
        import is torch's, pure Python under the GIL: beside an inbox filing conversations
        on the event loop it took 20-26 s after a remount instead of ~6, and every node
        saved meanwhile waited that long for its vectors."""
        self.loading_until = time.monotonic() + most
        try:
            yield
        finally:
            self.loading_until = 0.0


# how long a background thread steps aside at one point, at most: requests arriving back
# to back must not stop background work for good
STEP_ASIDE_MOST = 0.05

FOREGROUND = Foreground()


class Service:
    def __init__(self) -> None:
        self._wake = trio.Event()
        self._stopping = False
        # the trio run this service sleeps in and its thread: `wake()` may come from any
        # thread (a `Transactions.subscribe` callback runs in the thread that committed), and a
        # trio.Event may only be set from its own run
        self._token: trio.lowlevel.TrioToken | None = None
        self._loop_thread = 0
        self._bind()
        self._followers: list[Callable[..., object]] = []

    def follow(self, follower: Callable[..., object]) -> None:
        """Call `follower` with what this service changed, after each change (the tree,
        to show it; each service says what it passes)."""
        self._followers.append(follower)

    def _tell(self, *what: object) -> None:
        for follower in self._followers:
            follower(*what)

    @property
    def stopping(self) -> bool:
        return self._stopping

    def wake(self) -> None:
        """End the current (or next) `_idle`; safe from any thread."""
        if self._token is None or threading.get_ident() == self._loop_thread:
            self._set_wake()
            return
        with contextlib.suppress(trio.RunFinishedError):  # the mount is going: nothing to wake
            self._token.run_sync_soon(self._set_wake)

    def _set_wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stopping = True
        self.wake()

    def _bind(self) -> None:
        """Remember the trio run we are in (no-op outside one)."""
        try:
            self._token = trio.lowlevel.current_trio_token()
        except RuntimeError:  # built outside trio (tests, offline commands): bound at run()
            return
        self._loop_thread = threading.get_ident()

    def _rearm(self) -> None:
        """Before looking for work: a wake from then on ends the next `_idle`."""
        self._bind()
        self._wake = trio.Event()

    async def _idle(self, timeout: float) -> None:
        """Sleep until woken, stopped, or `timeout` seconds passed."""
        self._bind()
        if self._stopping:
            return
        with trio.move_on_after(timeout):
            await self._wake.wait()

    # how long a service steps aside for requests in flight before going on all the same:
    # requests arriving back to back must not stop background work for good
    YIELD_MOST = 0.5

    async def _yield(self) -> None:
        """Before a step of background work: wait while a request someone waits on is in
        flight (`FOREGROUND`), at most YIELD_MOST seconds."""
        if not FOREGROUND.busy:
            return
        until = time.monotonic() + self.YIELD_MOST
        while FOREGROUND.busy and time.monotonic() < until and not self._stopping:
            await trio.sleep(0.002)

    async def _after_models(self) -> None:
        """Before a step of bulk work: wait while the models load (`Foreground.loading`)."""
        while time.monotonic() < FOREGROUND.loading_until and not self._stopping:
            await trio.sleep(0.05)

    async def _pause(self, seconds: float) -> None:
        """Sleep `seconds` whatever wakes arrive (after a failure: a busy store would
        otherwise retry on every commit); only `stop()` ends it early."""
        self._bind()
        with trio.move_on_after(seconds):
            while not self._stopping:
                self._rearm()
                await self._wake.wait()
