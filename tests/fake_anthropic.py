"""A small local stand-in for Anthropic's Messages API (`POST /v1/messages`): the one
stand-in the tests allow, for a paid external service. The real `anthropic` SDK talks to it
over HTTP (`ANTHROPIC_BASE_URL`), tool runner and all.

It plays a model that has the memory tool (`memory_20250818`): asked something with that
tool offered, it answers with one `tool_use` of the memory tool (`command(user_text)` gives
its input, a `create` of a file by default); given the `tool_result` back, it ends the turn
with a short text. Without the memory tool it ends the turn at once. Every request body is
kept in `requests`; a non-streaming request only (`stream` is refused with a 400 error).
"""

from __future__ import annotations

import http.server
import itertools
import json
import threading
from collections.abc import Callable
from typing import Any

from tests.fake_openai import JsonHandler

MEMORY_TOOL = "memory_20250818"


def remember_command(user_text: str) -> dict[str, Any]:
    """What the fake model does with a message: store it as one memory file."""
    return {"command": "create", "path": "/memories/notes.md", "file_text": user_text + "\n"}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") for b in content if b.get("type") == "text")


class FakeAnthropic:
    def __init__(self, command: Callable[[str], dict[str, Any]] = remember_command) -> None:
        self.requests: list[dict[str, Any]] = []
        ids = itertools.count(1)
        outer = self

        def answer(body: dict[str, Any]) -> dict[str, Any]:
            n = next(ids)
            messages = body["messages"]
            last = messages[-1]["content"]
            results = (
                [] if isinstance(last, str) else [b for b in last if b["type"] == "tool_result"]
            )
            tools = [t.get("type") for t in body.get("tools", ())]
            if results:
                failed = [r for r in results if r.get("is_error")]
                content = [{"type": "text", "text": "That failed." if failed else "Noted."}]
                stop = "end_turn"
            elif MEMORY_TOOL in tools:
                user = _text(messages[-1]["content"])
                content = [
                    {
                        "type": "tool_use",
                        "id": f"toolu_{n:04d}",
                        "name": "memory",
                        "input": command(user),
                    }
                ]
                stop = "tool_use"
            else:
                content, stop = [{"type": "text", "text": "I have no memory tool."}], "end_turn"
            return {
                "id": f"msg_{n:04d}",
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": content,
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": {"input_tokens": 10, "output_tokens": 5},
            }

        class Handler(JsonHandler):
            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(body)
                if self.path.split("?")[0] != "/v1/messages":
                    self._reply(404, _error("not_found_error", f"no route {self.path}"))
                elif body.get("stream"):
                    self._reply(400, _error("invalid_request_error", "streaming: not here"))
                else:
                    self._reply(200, answer(body))

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # the SDK appends /v1/messages itself
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def tool_results(self) -> list[dict[str, Any]]:
        """Every `tool_result` block the client sent back."""
        return [
            b
            for body in self.requests
            for b in (body["messages"][-1]["content"] or ())
            if isinstance(b, dict) and b.get("type") == "tool_result"
        ]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join()


def _error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}
