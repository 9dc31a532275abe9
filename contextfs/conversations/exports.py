"""Conversations in the JSON shapes people have: chat exports and OpenAI `messages` lists.

`read_conversations` looks at a text the inbox received and, when it is a JSON document
(or JSON lines of `{"messages": [...]}` objects), says which shape it is and returns its
conversations, each with its title, id, start time and `Turn`s:

- an OpenAI chat `messages` list (`[{"role", "content"}, ...]`, `content` a string or a
  list of parts), or an object `{"messages": [...]}` (with `title`, `created`, ...), or
  JSON lines of such objects (one conversation a line, as fine-tuning sets are written);
- the ChatGPT data export's `conversations.json`: a list of conversations whose messages
  form a tree (`mapping`); the branch from the root to `current_node`, the one the user
  saw last, is the conversation (null, empty, system and hidden messages left out);
- the Claude data export's `conversations.json`: a list of conversations with their
  `chat_messages`.

It returns None for a text that is not a JSON document (JSON lines of turns, markdown,
prose: `transcript.parse_transcript` reads those) and refuses (`InvalidInput`, the reason
naming what is expected) valid JSON of any other shape. The elements of a top-level list
are decoded one at a time and dropped once made into turns, so a 500 MB export never
exists as Python objects all at once.

Pure: text in, conversations out; no store, no FUSE.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass

from contextfs.conversations.transcript import Turn, iter_lines, turn_from_object
from contextfs.errors import InvalidInput

EXPECTED = (
    'the inbox takes an OpenAI chat `messages` list (or {"messages": [...]}), a ChatGPT or '
    "Claude data export (conversations.json), or JSON lines with `role` and `content`"
)
KINDS = {
    "chatgpt": "ChatGPT export",
    "claude": "Claude export",
    "openai-messages": "OpenAI messages",
    "openai-messages-lines": "OpenAI messages, one conversation a line",
}
_WS = re.compile(r"[ \t\n\r]*")
# ChatGPT content types that are text the person or the model wrote (or a tool returned)
_CHATGPT_TEXT = ("text", "multimodal_text", "code", "execution_output")


@dataclass(frozen=True, slots=True)
class Conversation:
    title: str  # as the export names it ('' when it has none)
    id: str | None  # the export's conversation id
    started: float | None  # epoch seconds, when the export says
    turns: tuple[Turn, ...]


@dataclass(frozen=True, slots=True)
class Export:
    kind: str  # a key of KINDS
    conversations: tuple[Conversation, ...]  # those with at least one turn, in file order
    notes: tuple[str, ...]  # what was not understood or left out (the rest still counts)

    @property
    def label(self) -> str:
        return KINDS[self.kind]


def read_conversations(text: str) -> Export | None:
    """The conversations of a JSON document of a known shape; None when `text` is not one
    JSON document; `InvalidInput` for valid JSON of a shape this module does not know."""
    text = text.removeprefix("\ufeff")
    start = _WS.match(text).end()  # type: ignore[union-attr]
    first = text[start : start + 1]
    if first == "[":
        return _read_list(text, start)
    if first != "{":
        return None
    try:
        obj = json.loads(text)
    except ValueError:
        return _read_message_lines(text)
    if not isinstance(obj, dict):  # pragma: no cover - json.loads of "{..." is a dict
        return None
    if "role" in obj:
        return None  # one JSON line of a transcript: parse_transcript reads it
    shape = _object_shape(obj)
    if shape is None:
        raise InvalidInput(f"{_describe(obj)} is not a conversation: {EXPECTED}")
    notes: list[str] = []
    conv = _convert(shape, obj, 1, notes)
    kind = "openai-messages" if shape == "openai" else shape
    return Export(kind, (conv,) if conv is not None else (), tuple(notes))


def _object_shape(obj: dict) -> str | None:
    if isinstance(obj.get("mapping"), dict):
        return "chatgpt"
    if isinstance(obj.get("chat_messages"), list):
        return "claude"
    if isinstance(obj.get("messages"), list):
        return "openai"
    return None


def _convert(shape: str, obj: dict, index: int, notes: list[str]) -> Conversation | None:
    conv = {"chatgpt": chatgpt_conversation, "claude": claude_conversation}.get(
        shape, openai_conversation
    )(obj, notes)
    if conv is not None and not conv.turns:
        name = f"{conv.title!r}" if conv.title else f"{index}"
        notes.append(f"conversation {name}: no message with text (left out)")
        return None
    return conv


def _read_list(text: str, start: int) -> Export | None:
    """A top-level JSON list: messages of one conversation, or conversations of an export.
    Not JSON at its first element: None (a text that starts with '[')."""
    items = _list_items(text, start)
    try:
        first = next(items)
    except StopIteration:
        raise InvalidInput(f"an empty JSON list has no conversation: {EXPECTED}") from None
    except ValueError:
        return None
    if not isinstance(first, dict):
        raise InvalidInput(f"a JSON list of {_json_type(first)}s is not a conversation: {EXPECTED}")
    shape: str | None
    if "role" in first:
        shape = "messages"
    else:
        shape = _object_shape(first)
        if shape is None or shape == "openai":
            raise InvalidInput(
                f"a JSON list whose first element is {_describe(first)} is not a "
                f"conversation: {EXPECTED}"
            )
    notes: list[str] = []
    messages: list[dict] = []
    conversations: list[Conversation] = []
    obj: object
    index, obj = 0, first
    while True:
        index += 1
        if shape == "messages":
            messages.append(obj if isinstance(obj, dict) else {"not": obj})
        elif isinstance(obj, dict) and _object_shape(obj) == shape:
            conv = _convert(shape, obj, index, notes)
            if conv is not None:
                conversations.append(conv)
        else:
            notes.append(f"conversation {index}: not a {KINDS[shape]} conversation (left out)")
        try:
            obj = next(items)
        except StopIteration:
            break
        except ValueError as exc:
            what = "messages" if shape == "messages" else "conversations"
            notes.append(f"the JSON is cut or damaged after {index} {what}: {exc}")
            break
    if shape == "messages":
        conv = openai_conversation({"messages": messages}, notes)
        return Export("openai-messages", (conv,) if conv.turns else (), tuple(notes))
    return Export(shape, tuple(conversations), tuple(notes))


def _list_items(text: str, start: int) -> Iterator[object]:
    """The elements of the JSON list at text[start] ('['), decoded one at a time; a
    ValueError where the text stops being that list."""
    decoder = json.JSONDecoder()
    i = _WS.match(text, start + 1).end()  # type: ignore[union-attr]
    if text.startswith("]", i):
        _expect_end(text, i + 1)
        return
    while True:
        obj, i = decoder.raw_decode(text, i)
        yield obj
        i = _WS.match(text, i).end()  # type: ignore[union-attr]
        if text.startswith(",", i):
            i = _WS.match(text, i + 1).end()  # type: ignore[union-attr]
            continue
        if text.startswith("]", i):
            _expect_end(text, i + 1)
            return
        raise ValueError(f"expected ',' or ']' at character {i}")


def _expect_end(text: str, i: int) -> None:
    end = _WS.match(text, i).end()  # type: ignore[union-attr]
    if end != len(text):
        raise ValueError(f"more text after the JSON list, at character {end}")


def _read_message_lines(text: str) -> Export | None:
    """JSON lines whose objects are `{"messages": [...]}` (no `role`): one conversation a
    line. None when the first line is not such an object (a transcript's turns: its lines
    are not split here)."""
    first = next((ln for ln in iter_lines(text, 4096) if ln.strip()), "")
    try:
        head = json.loads(first)
    except ValueError:
        return None
    if not (isinstance(head, dict) and "role" not in head and _object_shape(head) == "openai"):
        return None
    notes: list[str] = []
    conversations: list[Conversation] = []
    for number, raw in enumerate(iter_lines(text), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except ValueError as exc:
            notes.append(f"line {number}: not JSON: {exc}")
            continue
        if not isinstance(obj, dict) or _object_shape(obj) != "openai":
            notes.append(f"line {number}: not an object with `messages` (left out)")
            continue
        line_notes: list[str] = []
        conv = _convert("openai", obj, number, line_notes)
        notes += [f"line {number}: {n}" for n in line_notes]
        if conv is not None:
            conversations.append(conv)
    return Export("openai-messages-lines", tuple(conversations), tuple(notes))


# --- OpenAI chat messages ---------------------------------------------------------------


def openai_conversation(obj: dict, notes: list[str]) -> Conversation:
    """`{"messages": [...], "title"?, "created"?}`: each message a turn (as a JSONL line
    would be, its position as its line); an assistant's `tool_calls` are said in its text."""
    turns: list[Turn] = []
    for number, msg in enumerate(obj.get("messages") or [], start=1):
        if not isinstance(msg, dict):
            notes.append(f"message {number}: not a JSON object but {_json_type(msg)}")
            continue
        if msg.get("content") is None and isinstance(msg.get("tool_calls"), list):
            calls = [_tool_call(c) for c in msg["tool_calls"]]
            msg = {**msg, "content": "\n".join(c for c in calls if c)}
        turn = turn_from_object(number, msg)
        if isinstance(turn, str):
            notes.append(f"message {number}: {turn}")
        elif turn.content.strip() or turn.media:
            turns.append(turn)
    title = _text(obj.get("title")) or _text(obj.get("name")) or ""
    started = _epoch(obj.get("created", obj.get("created_at", obj.get("create_time"))))
    ident = _text(obj.get("id")) or _text(obj.get("conversation_id"))
    return Conversation(title, ident, started, tuple(turns))


def _tool_call(call: object) -> str:
    if not isinstance(call, dict):
        return ""
    fn = _dict(call.get("function"))
    name = fn.get("name") or call.get("name") or "a tool"
    args = fn.get("arguments", call.get("arguments"))
    return f"called {name}" + (f" with {args}" if args not in (None, "", {}) else "")


# --- ChatGPT ----------------------------------------------------------------------------


def chatgpt_conversation(obj: dict, notes: list[str]) -> Conversation:
    """One conversation of a ChatGPT export: the branch of its message tree that ends at
    `current_node` (else the newest leaf), root first."""
    mapping: dict = obj.get("mapping") or {}
    title = _text(obj.get("title")) or ""
    started = _epoch(obj.get("create_time"))
    ident = _text(obj.get("conversation_id")) or _text(obj.get("id"))
    turns: list[Turn] = []
    for node_id in _chatgpt_branch(mapping, obj.get("current_node")):
        node = mapping.get(node_id)
        msg = node.get("message") if isinstance(node, dict) else None
        if isinstance(msg, dict):
            turn = _chatgpt_turn(msg, node_id, len(turns) + 1)
            if turn is not None:
                turns.append(turn)
    if started is None and turns and turns[0].timestamp:
        started = _epoch(turns[0].timestamp)
    return Conversation(title, ident, started, tuple(turns))


def _chatgpt_branch(mapping: dict, current: object) -> list[str]:
    """Node ids from the root to `current` (the branch the user saw last); without a
    usable `current_node`, the branch that always follows the last child."""
    chain: list[str] = []
    if isinstance(current, str) and current in mapping:
        node_id: object = current
        while isinstance(node_id, str) and node_id in mapping and node_id not in chain:
            chain.append(node_id)
            node = mapping[node_id]
            node_id = node.get("parent") if isinstance(node, dict) else None
        chain.reverse()
        return chain
    roots = [
        k
        for k, v in mapping.items()
        if not isinstance(v, dict) or v.get("parent") is None or v.get("parent") not in mapping
    ]
    node_id = roots[0] if roots else None
    while isinstance(node_id, str) and node_id in mapping and node_id not in chain:
        chain.append(node_id)
        node = mapping[node_id]
        children = node.get("children") if isinstance(node, dict) else None
        node_id = children[-1] if isinstance(children, list) and children else None
    return chain


def _chatgpt_turn(msg: dict, node_id: str, line: int) -> Turn | None:
    author = _dict(msg.get("author"))
    role = _text(author.get("role")) or "user"
    metadata = _dict(msg.get("metadata"))
    if role == "system" or metadata.get("is_visually_hidden_from_conversation"):
        return None
    content = _dict(msg.get("content"))
    kind = content.get("content_type", "text")
    pieces: list[str] = []
    if kind not in _CHATGPT_TEXT:
        # what a tool returned (a browsing result, a quote) is kept; the context the user
        # set for every chat and the model's hidden reasoning are not part of this one
        if role != "tool":
            return None
        pieces += [
            content[k] for k in ("title", "result", "text") if isinstance(content.get(k), str)
        ]
    elif isinstance(content.get("text"), str):  # code, execution_output
        pieces.append(content["text"])
    for part in content.get("parts") or []:
        if isinstance(part, str):
            pieces.append(part)
        elif isinstance(part, dict):
            # an uploaded image, a generated one, audio: said where it was
            pieces.append(f"[{part.get('content_type') or part.get('type') or 'part'}]")
    text = "\n".join(p for p in pieces if p).strip()
    if not text:
        return None
    return Turn(
        line=line,
        role=role,
        content=text,
        name=_text(author.get("name")),
        timestamp=_iso(msg.get("create_time")),
        id=_text(msg.get("id")) or node_id,
    )


# --- Claude -----------------------------------------------------------------------------


def claude_conversation(obj: dict, notes: list[str]) -> Conversation:
    """One conversation of a Claude export: its `chat_messages` in order."""
    title = _text(obj.get("name")) or ""
    ident = _text(obj.get("uuid"))
    turns: list[Turn] = []
    for number, msg in enumerate(obj.get("chat_messages") or [], start=1):
        if not isinstance(msg, dict):
            notes.append(f"conversation {title or ident}: message {number} is not an object")
            continue
        sender = _text(msg.get("sender")) or "user"
        role = {"human": "user", "assistant": "assistant"}.get(sender, sender)
        text = _claude_text(msg)
        if not text:
            continue
        turns.append(
            Turn(
                line=number,
                role=role,
                content=text,
                timestamp=_text(msg.get("created_at")),
                id=_text(msg.get("uuid")),
            )
        )
    started = _epoch(obj.get("created_at"))
    if started is None and turns and turns[0].timestamp:
        started = _epoch(turns[0].timestamp)
    return Conversation(title, ident, started, tuple(turns))


def _claude_text(msg: dict) -> str:
    pieces: list[str] = []
    content = msg.get("content")
    if isinstance(content, list) and content:
        for part in content:
            if not isinstance(part, dict):
                continue
            kind = part.get("type")
            if kind == "text" and isinstance(part.get("text"), str):
                pieces.append(part["text"])
            elif kind == "tool_use":
                pieces.append(f"[tool_use: {part.get('name') or 'a tool'}]")
            elif kind in ("thinking", "redacted_thinking"):
                continue  # the model's hidden reasoning is not what was said
            elif kind:
                pieces.append(f"[{kind}]")
    elif isinstance(msg.get("text"), str):
        pieces.append(msg["text"])
    for att in msg.get("attachments") or []:
        if isinstance(att, dict):
            name = _text(att.get("file_name")) or "a file"
            body = att.get("extracted_content")
            pieces.append(f"[attachment: {name}]" + (f"\n{body}" if isinstance(body, str) else ""))
    for f in msg.get("files") or []:
        if isinstance(f, dict):
            pieces.append(f"[file: {_text(f.get('file_name')) or 'a file'}]")
    return "\n".join(p for p in pieces if p).strip()


# --- values -----------------------------------------------------------------------------


def _dict(value: object) -> dict:
    """`value` when it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def _text(value: object) -> str | None:
    if isinstance(value, str):
        return value.strip() or None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return None


def _epoch(value: object) -> float | None:
    """Epoch seconds of an epoch number or an ISO 8601 time (UTC when it has no zone)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str) and value.strip():
        try:
            when = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        return when.timestamp()
    return None


def _iso(value: object) -> str | None:
    """An epoch time as ISO 8601 UTC (what the turns of a transcript carry)."""
    when = _epoch(value) if isinstance(value, int | float) else None
    if when is None:
        return None
    stamp = dt.datetime.fromtimestamp(when, dt.UTC).isoformat(timespec="seconds")
    return stamp.replace("+00:00", "Z")


def _json_type(value: object) -> str:
    return {
        dict: "object",
        list: "list",
        str: "string",
        bool: "boolean",
        type(None): "null",
    }.get(type(value), "number")


def _describe(obj: dict) -> str:
    keys = ", ".join(repr(k) for k in list(obj)[:5])
    more = ", ..." if len(obj) > 5 else ""
    return f"an object with keys {keys}{more}" if obj else "an empty object"
