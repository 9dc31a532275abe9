"""Waits for the shared store that leave the event loop free: a request's code is plain
Python that calls the store synchronously, deep in the tree and the memory; with
PostgreSQL each statement waits for the network, and a statement waiting on the event
loop held up every other request of the mount (a read of a cached file waited for a
write's statement to a frozen server until its deadline, 31 s).

`run(coro)` drives a coroutine (a FUSE request, a background service) inside a greenlet.
Its awaits go to trio as they would without it. When its synchronous code reaches a
statement that must wait for the server, `suspend` hands the wait to trio (the socket's
readiness, `fd_ready`) and the loop serves other requests meanwhile; the statement goes
on once the server answers.

What stays as before: a coroutine's code between two of its own awaits ran with nothing
else in between, and code that changes the tree or the memory relies on that. So a
coroutine that entered the store (`enter_store`) holds the gate until its next await of
its own (or its end), and no other coroutine run here is resumed meanwhile, except
readers: a request that only reads (`reader=True`), which may run while a writer's
statement is in flight, and waits for the gate only if it needs the store itself. Only
one coroutine at a time is ever inside the store, so a connection is never used by two.

Off (`enable` not called: DuckDB, whose statements do not wait on a network), `run` is a
plain await. Boundary: greenlet and trio only; no store, no tree.
"""

from __future__ import annotations

import contextvars
import select
import types
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import greenlet
import trio

T = TypeVar("T")

_on = False


def enable(on: bool = True) -> None:
    """The store's statements wait on a network: run requests and services in greenlets
    (the composition root calls this for PostgreSQL)."""
    global _on
    _on = on


class _Child(greenlet.greenlet):
    """A coroutine driven inside a greenlet; its parent is the trio task that runs it."""

    def __init__(self, coro: Coroutine[Any, Any, Any], reader: bool) -> None:
        super().__init__()
        self.coro = coro
        self.reader = reader

    def run(self) -> tuple[str, Any]:
        coro, sent = self.coro, None
        while True:
            try:
                trap = coro.send(sent)
            except StopIteration as stop:
                return ("done", stop.value)
            assert self.parent is not None
            sent = self.parent.switch(("trap", trap))


class _Gate:
    """Which coroutine is inside the store: from its first statement to its next await.
    Those waiting to enter get it in turn, handed over as it is left (a coroutine that
    enters again at once does not pass the ones waiting)."""

    def __init__(self) -> None:
        self.holder: _Child | None = None
        self._queue: deque[tuple[_Child, trio.Event]] = deque()
        self._freed: trio.Event | None = None

    def leave(self, child: _Child) -> None:
        if self.holder is not child:
            return
        self.holder = None
        if self._queue:
            self.holder, entered = self._queue.popleft()
            entered.set()
        elif self._freed is not None:
            self._freed.set()
            self._freed = None

    async def enter(self, child: _Child) -> None:
        """Until child holds the gate (shielded, as every wait here: a coroutine is never
        left between a trap and its answer; the holder's statements have deadlines)."""
        if self.holder is None and not self._queue:
            self.holder = child
            return
        entered = trio.Event()
        self._queue.append((child, entered))
        with trio.CancelScope(shield=True):
            await entered.wait()

    async def wait_free_of(self, child: _Child) -> None:
        """Until no other coroutine holds the gate or waits to enter it."""
        with trio.CancelScope(shield=True):
            while (self.holder is not None and self.holder is not child) or self._queue:
                if self._freed is None:
                    self._freed = trio.Event()
                await self._freed.wait()


_GATE = _Gate()


@types.coroutine
def _yield(trap: Any) -> Any:
    """Hand a trap of the coroutine's to trio as this task's own; trio's answer back."""
    return (yield trap)


async def run(coro: Awaitable[T], *, reader: bool = False) -> T:
    """Await coro; while enabled, inside a greenlet whose store waits leave the loop free."""
    if not _on or isinstance(greenlet.getcurrent(), _Child) or not isinstance(coro, Coroutine):
        return await coro
    child = _Child(coro, reader)
    child.gr_context = contextvars.copy_context()
    try:
        if not reader:
            await _GATE.wait_free_of(child)
        msg = child.switch()
        while True:
            kind, what = msg
            if kind == "done":
                return what
            if kind == "trap":
                _GATE.leave(child)  # its own await: others may go on now, as before
                sent = await _yield(what)
                if not reader:
                    await _GATE.wait_free_of(child)
                msg = child.switch(sent)
                continue
            afn, args = what  # a store wait: trio waits, other requests are served
            with trio.CancelScope(shield=True):  # its statement has a deadline of its own
                try:
                    got: tuple[str, Any] = ("ok", await afn(*args))
                except Exception as exc:  # handed to the statement's own code
                    got = ("err", exc)
            msg = child.switch(got)
    finally:
        _GATE.leave(child)


async def task(fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
    """`nursery.start_soon(task, fn, ...)`: a task whose code may reach the store."""
    await run(fn(*args))


def inside() -> bool:
    """Whether this code runs in a coroutine `run` drives (its waits can be handed over)."""
    return isinstance(greenlet.getcurrent(), _Child)


def suspend(afn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """From synchronous code inside `run`: await afn(*args) on the loop, then go on."""
    me = greenlet.getcurrent()
    if not isinstance(me, _Child) or me.parent is None:
        raise RuntimeError("suspend outside a coroutine run by greenwait.run")
    kind, got = me.parent.switch(("wait", (afn, args)))
    if kind == "err":
        raise got
    return got


def off_loop(fn: Callable[..., T], *args: Any) -> T:
    """fn(*args), in a worker thread when called inside `run` (the loop goes on meanwhile:
    a connection being made, whose waits psycopg keeps to itself), else right here."""
    if not isinstance(greenlet.getcurrent(), _Child):
        return fn(*args)
    return suspend(trio.to_thread.run_sync, lambda: fn(*args))


def enter_store() -> None:
    """Before a statement: take the gate (waiting, inside `run`, while another coroutine
    is in the store). Outside `run`, on a thread of its own or before the mount serves,
    a statement waits as it always did; on the loop while a coroutine is in the store it
    would wait for a connection that coroutine holds, forever: refused."""
    me = greenlet.getcurrent()
    if isinstance(me, _Child):
        if _GATE.holder is not me:
            suspend(_GATE.enter, me)
    elif _GATE.holder is not None and _on_loop():
        raise RuntimeError("a store call on the event loop outside greenwait.run")


def _on_loop() -> bool:
    try:
        trio.lowlevel.current_trio_token()
    except RuntimeError:
        return False
    return True


async def fd_ready(fd: int, want: int) -> int:
    """Wait until fd is readable (1), writable (2) or either (3); what it is, as 1|2."""
    if want == 1:
        await trio.lowlevel.wait_readable(fd)
    elif want == 2:
        await trio.lowlevel.wait_writable(fd)
    else:
        r, w, _x = select.select([fd], [fd], [], 0)
        if not (r or w):
            async with trio.open_nursery() as nursery:

                async def one(wait: Callable[[int], Awaitable[None]]) -> None:
                    await wait(fd)
                    nursery.cancel_scope.cancel()

                nursery.start_soon(one, trio.lowlevel.wait_readable)
                nursery.start_soon(one, trio.lowlevel.wait_writable)
    r, w, _x = select.select([fd], [fd], [], 0)
    return (1 if r else 0) | (2 if w else 0) if want == 3 else want
