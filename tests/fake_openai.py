"""A small local OpenAI-compatible HTTP server: the one stand-in the tests allow, for a paid
external service. The real `openai` client in our code talks to it over HTTP.

`respond(body)` returns the JSON answer for a POST to `path` (`/v1/embeddings`,
`/v1/chat/completions`); `more` maps further paths to their own `respond`. A body that is
not JSON (the multipart form of `/v1/audio/transcriptions`) reaches `respond` as
`{"_raw": bytes, "_content_type": str}`. A POST elsewhere, or any POST while `fail` is
set, gets a 500 error; a POST for which `reject(body)` (None by default) returns
(status, payload) gets that answer instead (an endpoint refusing some requests, e.g. a 400
"context length exceeded"). Every request is kept in `requests` as (path, Authorization
header, body).
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Callable

ERROR = {"error": {"message": "boom", "type": "server_error"}}


class JsonHandler(http.server.BaseHTTPRequestHandler):
    """A request handler that answers JSON and logs nothing (the fake servers' base)."""

    def _reply(self, status: int, payload: dict) -> None:
        out = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


class FakeOpenAI:
    def __init__(
        self,
        path: str,
        respond: Callable[[dict], dict],
        more: dict[str, Callable[[dict], dict]] | None = None,
    ) -> None:
        routes = {path: respond, **(more or {})}
        self.requests: list[tuple[str, str | None, dict]] = []
        self.fail = False
        self.reject: Callable[[dict], tuple[int, dict] | None] | None = None
        outer = self

        class Handler(JsonHandler):
            def do_POST(self):  # noqa: N802
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                kind = self.headers.get("Content-Type", "")
                if kind.startswith("application/json"):
                    body = json.loads(raw)
                else:
                    body = {"_raw": raw, "_content_type": kind}
                outer.requests.append((self.path, self.headers.get("Authorization"), body))
                refused = outer.reject(body) if outer.reject is not None else None
                if self.path not in routes or outer.fail:
                    self._reply(500, ERROR)
                elif refused is not None:
                    self._reply(*refused)
                else:
                    self._reply(200, routes[self.path](body))

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/v1"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def calls(self) -> int:
        return len(self.requests)

    @property
    def bodies(self) -> list[dict]:
        return [body for _path, _auth, body in self.requests]

    def close(self) -> None:
        """Stop answering: afterwards nothing listens at `url`."""
        self.server.shutdown()
        self.server.server_close()
        self._thread.join()


def dead_url() -> str:
    """An address where nothing listens."""
    fake = FakeOpenAI("/v1/none", lambda body: {})
    fake.close()
    return fake.url
