"""A session's context.md is built in a worker thread (`Intake.context_for`, called through
`trio.to_thread`) while the trio thread keeps adding nodes: it must never see the node
table change size under it (the open answered EIO)."""

from __future__ import annotations

import sys
import threading
import time

from contextfs.conversations.inbox import Intake
from contextfs.memory.service import Memory

OWNER = ("user", "default")


def test_context_for_in_a_thread_while_nodes_are_created(memory: Memory) -> None:
    entity = memory.types["entity"]
    for i in range(2000):  # enough that one pass over the nodes outlasts a thread switch
        memory.create_node(OWNER, entity, f"seed-{i}", persist=False)
    intake = Intake(memory)
    session = intake.start_session(OWNER, "s1")
    errors: list[BaseException] = []
    stop = threading.Event()
    passes = 0

    def reader() -> None:
        nonlocal passes
        while not stop.is_set():
            try:
                intake.context_for(session, 2000, None)
                passes += 1
            except BaseException as exc:  # noqa: BLE001 - reported by the main thread
                errors.append(exc)
                return

    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often, as a busy daemon would
    thread = threading.Thread(target=reader)
    thread.start()
    try:
        deadline = time.monotonic() + 3.0
        i = 0
        while time.monotonic() < deadline and not errors:
            memory.create_node(OWNER, entity, f"new-{i}", persist=False)
            i += 1
    finally:
        stop.set()
        thread.join(timeout=30)
        sys.setswitchinterval(old_interval)
    assert not errors, f"context_for failed after {passes} passes: {errors[0]!r}"
    assert passes > 0
