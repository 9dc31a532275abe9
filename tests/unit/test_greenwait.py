"""greenwait: a coroutine run in a greenlet whose synchronous code hands a wait to trio.

What it promises the mount: while one request's statement waits, requests that only read
are served; no other request's code runs between two awaits of the waiting one; one
coroutine at a time is in the store; values, errors and context variables pass through as
with a plain await.
"""

from __future__ import annotations

import contextvars

import pytest
import trio

from contextfs import greenwait

WHO = contextvars.ContextVar("WHO", default="nobody")


@pytest.fixture(autouse=True)
def enabled():
    greenwait.enable()
    yield
    greenwait.enable(False)


def statement(log: list[str], name: str, answer: trio.Event) -> str:
    """Synchronous code deep in a request: enters the store, waits for the 'server'."""
    greenwait.enter_store()
    log.append(f"{name} sent")
    greenwait.suspend(answer.wait)
    log.append(f"{name} answered")
    return f"{name} done"


async def test_values_errors_and_context_pass_through():
    async def work() -> str:
        await trio.sleep(0)
        return WHO.get()

    async def fails() -> None:
        await trio.sleep(0)
        raise KeyError("lost")

    WHO.set("alice")
    assert await greenwait.run(work()) == "alice"
    with pytest.raises(KeyError):
        await greenwait.run(fails())
    assert await greenwait.run(work(), reader=True) == "alice"


async def test_a_reader_is_served_while_a_writer_waits_and_a_writer_is_not():
    log: list[str] = []
    server = trio.Event()

    async def writer(name: str) -> None:
        log.append(f"{name} starts")
        statement(log, name, server)
        log.append(f"{name} ends its section")
        await trio.sleep(0)

    async def reader() -> None:
        log.append("reader reads")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(greenwait.run, writer("w1"))
        await trio.sleep(0.05)
        assert log == ["w1 starts", "w1 sent"]  # the loop is free: we are here
        nursery.start_soon(greenwait.task, writer, "w2")
        nursery.start_soon(lambda: greenwait.run(reader(), reader=True))
        await trio.sleep(0.05)
        assert log == ["w1 starts", "w1 sent", "reader reads"]  # w2 waits for w1's section
        server.set()
    assert log == [
        "w1 starts",
        "w1 sent",
        "reader reads",
        "w1 answered",
        "w1 ends its section",
        "w2 starts",
        "w2 sent",
        "w2 answered",
        "w2 ends its section",
    ]


async def test_a_reader_that_needs_the_store_waits_for_its_turn():
    log: list[str] = []
    first, second = trio.Event(), trio.Event()
    second.set()

    async def writer() -> None:
        statement(log, "writer", first)
        log.append("writer section ends")
        await trio.sleep(0)

    async def reader() -> None:
        log.append("reader looks")
        statement(log, "reader", second)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(greenwait.run, writer())
        await trio.sleep(0.05)
        nursery.start_soon(lambda: greenwait.run(reader(), reader=True))
        await trio.sleep(0.05)
        assert log == ["writer sent", "reader looks"]  # in the store only after the writer
        first.set()
    assert log == ["writer sent", "reader looks", "writer answered", "writer section ends"] + [
        "reader sent",
        "reader answered",
    ]


async def test_the_store_on_the_loop_outside_run_is_refused_while_a_coroutine_is_in_it():
    server = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(greenwait.run, _in_store(server))
        await trio.sleep(0.05)
        with pytest.raises(RuntimeError, match="outside greenwait.run"):
            greenwait.enter_store()  # it would wait for a connection that one holds
        server.set()
    greenwait.enter_store()  # nobody in the store: a plain statement, as before


async def _in_store(server: trio.Event) -> None:
    statement([], "in", server)


async def test_off_it_is_a_plain_await():
    greenwait.enable(False)

    async def where() -> bool:
        return greenwait.inside()

    assert await greenwait.run(where()) is False
