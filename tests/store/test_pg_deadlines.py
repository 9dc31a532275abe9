"""The deadline a mount keeps itself on PostgreSQL statements (`pg.Deadlines`): a call
blocked on a socket that never answers is freed once its time passes, one that was
answered in time is left alone, and the limit is read from config.yaml and checked."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from contextfs.config import load_config
from contextfs.errors import UsageError
from contextfs.store.pg import Deadlines


def test_a_call_waiting_past_its_deadline_is_freed_and_one_in_time_is_not() -> None:
    deadlines = Deadlines()
    mine, server = socket.socketpair()  # the server end never answers
    got: list[object] = []

    def wait() -> None:
        t0 = time.monotonic()
        got.append(mine.recv(10))  # as psycopg waits for a statement's answer
        got.append(time.monotonic() - t0)

    token = deadlines.watch(mine.fileno(), 0.3)
    t = threading.Thread(target=wait, daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), "the deadline did not free the waiting call"
    assert got[0] == b"" and 0.25 < float(got[1]) < 5, got  # type: ignore[arg-type]
    assert deadlines.done(token) is True  # the caller learns it was the deadline
    mine.close()
    server.close()

    mine, server = socket.socketpair()
    token = deadlines.watch(mine.fileno(), 0.3)
    server.sendall(b"answer")
    assert mine.recv(10) == b"answer"
    assert deadlines.done(token) is False
    time.sleep(0.6)  # past the deadline: nothing is cut once the call is done
    server.sendall(b"more")
    assert mine.recv(10) == b"more"
    mine.close()
    server.close()


def test_the_deadline_comes_from_config_and_is_checked(tmp_path: Path) -> None:
    assert load_config(tmp_path).store_deadline_s == 30.0
    (tmp_path / "config.yaml").write_text("store_deadline_s: 5\n")
    assert load_config(tmp_path).store_deadline_s == 5.0
    for bad in ("0", "-1", "yes", "7200"):
        (tmp_path / "config.yaml").write_text(f"store_deadline_s: {bad}\n")
        with pytest.raises(UsageError, match="store_deadline_s"):
            load_config(tmp_path)
