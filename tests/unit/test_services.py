"""Every background service has the same shape: run() until stop(), woken by the feed."""

from __future__ import annotations

import logging
import time

import pytest
import trio

from contextfs.conversations.inbox import Intake, IntakeService
from contextfs.errors import LLMUnavailable
from contextfs.memory.consolidate import ConsolidationService, Stopped, plan
from contextfs.memory.service import Memory
from contextfs.memory.summaries import SummaryService

OWNER = ("user", "default")


class Summarizer:
    def __init__(self) -> None:
        self.calls = 0

    def summarize(self, ctype, l2: str) -> tuple[str, str]:
        self.calls += 1
        return "short", "longer"


async def test_stop_makes_every_service_return_promptly(memory: Memory) -> None:
    services = [
        ConsolidationService(memory, 3600),
        IntakeService(Intake(memory)),
        SummaryService(memory, Summarizer()),
    ]
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            for s in services:
                nursery.start_soon(s.run)
            await trio.sleep(0.05)
            for s in services:
                s.stop()


async def test_the_feed_wakes_the_summaries(memory: Memory) -> None:
    summarizer = Summarizer()
    service = SummaryService(memory, summarizer)
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(service.run)
            await trio.sleep(0.05)
            n = memory.create_node(OWNER, memory.types["entity"], "x")
            memory.save_l2(n, "A node the model summarises.\n")
            while n.l0 != "short":  # far sooner than the 30 s the service sleeps
                await trio.sleep(0.01)
            service.stop()
    assert summarizer.calls == 1 and n.l1 == "longer"


async def test_a_commit_in_a_worker_thread_wakes_the_summaries(memory: Memory) -> None:
    """The feed calls its subscribers in the thread that committed (a big write is stored
    in a worker thread): the wake must still reach the service sleeping in trio."""
    summarizer = Summarizer()
    service = SummaryService(memory, summarizer)
    n = memory.create_node(OWNER, memory.types["entity"], "x")
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(service.run)
            await trio.sleep(0.05)
            await trio.to_thread.run_sync(memory.save_l2, n, "Saved from a worker thread.\n")
            while n.l0 != "short":  # far sooner than the 30 s the service sleeps
                await trio.sleep(0.01)
            service.stop()
    assert summarizer.calls == 1


async def test_the_feed_wakes_the_intake(memory: Memory) -> None:
    intake = Intake(memory)
    service = IntakeService(intake)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(service.run)
            await trio.sleep(0.05)
            item = intake.submit(OWNER, "notes.md", b"# Notes\n\nI prefer green tea.\n")
            while item.state == "pending":
                await trio.sleep(0.01)
            service.stop()
    assert item.state == "done"


async def test_consolidation_plans_in_a_thread_and_applies_in_the_loop(memory: Memory) -> None:
    ctype = memory.types["pattern"]
    for name, text in (
        ("a", "Run the tests before a push."),
        ("b", "run the tests before a push!"),
    ):
        memory.save_l2(memory.create_node(OWNER, ctype, name), text + "\n")
    reports = []
    service = ConsolidationService(memory, 0.05)
    service.follow(reports.append)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(service.run)
            while not reports:
                await trio.sleep(0.01)
            service.stop()
    assert reports[0].merged == 1 and memory.live.count(OWNER, "pattern") == 1
    assert memory.store.last_consolidation()[2] == 1  # recorded: 1 merged


def test_a_stopping_daemon_does_not_wait_for_a_plan(memory: Memory) -> None:
    memory.save_l2(memory.create_node(OWNER, memory.types["pattern"], "a"), "A rule.\n")
    with pytest.raises(Stopped):
        plan(memory, stopping=lambda: True)
    assert memory.store.last_consolidation() is None  # nothing recorded


class Failing:
    def summarize(self, ctype, l2: str) -> tuple[str, str]:
        raise LLMUnavailable("chat endpoint http://127.0.0.1:9/v1 failed: Error code: 400")


@pytest.mark.allow_warnings
async def test_a_failed_summary_keeps_the_extractive_one_warns_once_and_shows_in_status(
    memory: Memory, caplog: pytest.LogCaptureFixture
) -> None:
    service = SummaryService(memory, Failing())
    n = memory.create_node(OWNER, memory.types["entity"], "x")
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(service.run)
            for text in ("A node the model fails on.\n", "The same node, longer now.\n"):
                memory.save_l2(n, text)
                failures = service.failures
                while service.failures == failures:
                    await trio.sleep(0.01)
            service.stop()
    assert n.l0.startswith("The same node")  # the extractive summary stands
    warned = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warned) == 1 and "extractive L0/L1 kept" in warned[0].getMessage()
    (line,) = service.status_lines()
    assert line.startswith("summaries: LLM, 0 written, 2 failed (extractive L0/L1 kept; last: ")
    assert "user/default/entities/x: chat endpoint" in line


async def test_an_import_does_not_file_the_next_conversation_while_an_fsync_is_in_flight(
    memory: Memory,
) -> None:
    """An export's conversations are filed one at a time; while a request someone waits
    on (an fsync) is in flight, the next one waits for it (at most YIELD_MOST seconds)."""
    from contextfs.memory.background import FOREGROUND

    export = (
        b'[{"title": "one", "mapping": {"a": {"id": "a", "message": {"author": {"role": '
        b'"user"}, "content": {"parts": ["I like green tea."]}}, "parent": null, '
        b'"children": []}}}, {"title": "two", "mapping": {"b": {"id": "b", "message": '
        b'{"author": {"role": "user"}, "content": {"parts": ["I like black coffee."]}}, '
        b'"parent": null, "children": []}}}]'
    )
    intake = Intake(memory)
    service = IntakeService(intake)
    item = intake.submit(OWNER, "conversations.json", export)
    with trio.fail_after(20):
        with FOREGROUND.serving():
            async with trio.open_nursery() as nursery:
                nursery.start_soon(service.step)
                await trio.sleep(service.YIELD_MOST / 2)
                assert item.progress == "" and item.state == "pending"  # nothing filed yet
        # the fsync's wait ran out (it held on past YIELD_MOST): filing went on all the same
        assert item.state == "done", item.report
    assert "2 of 2 conversations archived" in item.report


async def test_an_import_waits_while_the_models_load(memory: Memory) -> None:
    """While the embedding model loads after a mount (`Foreground.loading`, set by the
    indexer), an inbox import files nothing; once it is in, the import goes on."""
    from contextfs.memory.background import FOREGROUND

    export = (
        b'[{"title": "one", "mapping": {"a": {"id": "a", "message": {"author": {"role": '
        b'"user"}, "content": {"parts": ["I like green tea."]}}, "parent": null, '
        b'"children": []}}}]'
    )
    intake = Intake(memory)
    service = IntakeService(intake)
    item = intake.submit(OWNER, "conversations.json", export)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            with FOREGROUND.loading(15):
                nursery.start_soon(service.step)
                await trio.sleep(1.0)
                assert item.state == "pending" and item.progress == ""  # nothing filed
    assert item.state == "done", item.report
    assert "1 of 1 conversations archived" in item.report


async def test_the_models_wait_for_a_pause_in_the_mounts_requests() -> None:
    """`Foreground.quiet`, which the indexer awaits before it loads the embedding model:
    requests back to back (a `find` right after a mount) hold it, it returns once none has
    run for the pause, and it never waits longer than its limit; with no mount (no
    request ever) it does not wait."""
    from contextfs.memory.background import Foreground

    fg = Foreground()
    with trio.fail_after(1):
        await fg.quiet(10, 30)  # in-process: nothing to wait for
    fg.last_request = time.monotonic()  # the mount answers

    async def busy(seconds: float) -> None:  # a request every 10 ms, each taking 5 ms
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            with fg.request(storing=False):
                await trio.sleep(0.005)
            await trio.sleep(0.01)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(busy, 0.8)
        t0 = time.monotonic()
        await fg.quiet(0.15, 30)
        waited = time.monotonic() - t0
    assert 0.9 <= waited < 5, waited  # after the requests (0.8 s) and the pause
    async with trio.open_nursery() as nursery:
        nursery.start_soon(busy, 3)
        await trio.sleep(0.05)  # requests are coming
        t0 = time.monotonic()
        await fg.quiet(0.15, 0.5)
        waited = time.monotonic() - t0
        nursery.cancel_scope.cancel()
    assert 0.5 <= waited < 2, waited  # the limit, requests or not


def test_a_background_thread_steps_aside_while_a_request_stores_something() -> None:
    """Rule extraction and passage cutting run Python in worker threads; while a request
    that stores something is in flight they pause between two turns (the GIL let go), for
    at most STEP_ASIDE_MOST each time, and threads of a request itself never pause."""
    import contextvars
    import threading
    import time

    from contextfs.memory.background import BACKGROUND, FOREGROUND, STEP_ASIDE_MOST

    def paused(background: bool) -> float:
        def run() -> None:
            BACKGROUND.set(background)
            t0 = time.monotonic()
            FOREGROUND.step_aside()
            took.append(time.monotonic() - t0)

        took: list[float] = []
        t = threading.Thread(target=contextvars.copy_context().run, args=(run,))
        t.start()
        t.join()
        return took[0]

    assert paused(True) < STEP_ASIDE_MOST / 2  # nothing in flight: no pause
    with FOREGROUND.request(storing=True):  # a mkdir, a commit at close
        assert paused(True) >= STEP_ASIDE_MOST * 0.9  # in flight: the thread waits
        assert paused(False) < STEP_ASIDE_MOST / 2  # a request's own thread does not
    with FOREGROUND.serving():  # an fsync or a question
        assert paused(True) >= STEP_ASIDE_MOST * 0.9
    holder: list[float] = []

    def release_soon() -> None:
        time.sleep(STEP_ASIDE_MOST / 5)
        FOREGROUND.writing -= 1

    FOREGROUND.writing += 1
    threading.Thread(target=release_soon).start()
    holder.append(paused(True))
    assert holder[0] < STEP_ASIDE_MOST * 0.9  # it goes on as soon as the request is done
