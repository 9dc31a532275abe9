"""A TCP proxy that adds network latency in front of a server on a unix socket, for the
benchmarks that measure many hosts over a slow link (scripts/bench_cluster.py).

`LatencyProxy(unix_path, one_way_s)` listens on 127.0.0.1 (an ephemeral port); each
connection it accepts is joined to a new connection to `unix_path`, and every chunk of
bytes, in either direction, is passed on `one_way_s` after it arrived, in order: a round
trip takes 2 x one_way_s longer, as across a WAN link, while the bandwidth stays the
machine's. Boundary: sockets and threads only; no import of ours.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
import time
from urllib.parse import quote


class LatencyProxy:
    """127.0.0.1:`port` -> `unix_path`, each direction delayed by `one_way_s`."""

    def __init__(self, unix_path: str, one_way_s: float) -> None:
        self.unix_path = unix_path
        self.delay = one_way_s
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                server.connect(self.unix_path)
            except OSError:
                client.close()
                continue
            for s in (client, server):
                s.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._socks += [client, server]
            self._pipe(client, server)
            self._pipe(server, client)

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        """src's bytes to dst, each chunk `delay` after it arrived."""
        chunks: queue.Queue[tuple[float, bytes]] = queue.Queue()

        def read() -> None:
            while True:
                try:
                    data = src.recv(65536)
                except OSError:
                    data = b""
                chunks.put((time.monotonic() + self.delay, data))
                if not data:
                    return

        def write() -> None:
            while True:
                due, data = chunks.get()
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                try:
                    if not data:
                        dst.shutdown(socket.SHUT_WR)
                        return
                    dst.sendall(data)
                except OSError:
                    return

        threading.Thread(target=read, daemon=True).start()
        threading.Thread(target=write, daemon=True).start()

    def dsn(self, password: str, dbname: str, user: str = "postgres") -> str:
        """A postgresql:// URL to `dbname` through the proxy."""
        return f"postgresql://{user}:{quote(password)}@127.0.0.1:{self.port}/{dbname}"

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            for s in self._socks:
                with contextlib.suppress(OSError):
                    s.close()
            self._socks.clear()

    def __enter__(self) -> LatencyProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
