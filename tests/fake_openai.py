"""A small local OpenAI-compatible HTTP server: the one stand-in the tests allow, for a paid
external service. The real `openai` client in the daemon talks to it over HTTP.

`respond(path, body)` returns the JSON answer for a POST to `path` (`/v1/embeddings`,
`/v1/chat/completions`); every request body is kept in `requests`.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Callable


class FakeOpenAI:
    def __init__(self, respond: Callable[[str, dict], dict]) -> None:
        self.requests: list[dict] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(body)
                out = json.dumps(respond(self.path, body)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def calls(self) -> int:
        return len(self.requests)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
