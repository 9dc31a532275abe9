"""Chat transcripts: JSONL, markdown or plain text in, a tuple of `Turn`s out, and back.

`parse_transcript` reads what `.inbox/` and `.sessions/<id>/transcript.jsonl` receive: JSON
lines (`role`, `content`, optional `name`, `timestamp`, `id`; tool events as `role: tool`
with `name`, `input`, `output`), a chat app's text export (WhatsApp's line shapes: each
message a turn of its speaker at its time), a markdown or plain-text dialogue (dated by
its title when that names a day), or any other text (one user turn). A malformed line is
reported with its number and skipped; the good lines still count. `render_turns` is the
inverse direction for archiving a session: one readable markdown block per turn, keeping
every word, timestamp, id and tool payload.

Pure (dates by `timeparse`): no I/O, no store, no FUSE. The extractors
(`contextfs.conversations.extract`) consume `Turn`s.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import date, datetime

from contextfs.conversations.timeparse import parse_timestamp, resolve_relative

KNOWN_ROLES = ("user", "assistant", "system", "tool")

# Speaker labels that mean a role in hand-written dialogues ("Me: ...", "AI: ...").
_ROLE_WORDS = {
    "user": "user", "human": "user", "me": "user", "customer": "user",
    "assistant": "assistant", "ai": "assistant", "bot": "assistant", "agent": "assistant",
    "model": "assistant", "chatgpt": "assistant", "gpt": "assistant", "claude": "assistant",
    "system": "system", "tool": "tool",
}  # fmt: skip

_SPEAKER = r"[A-Za-z][A-Za-z0-9_.'-]*(?: [A-Za-z][A-Za-z0-9_.'-]*){0,2}"
# "Speaker: text", "**Speaker:** text", "**Speaker**: text"
_LABEL_RE = re.compile(
    rf"^[ \t]*(?:\*\*(?P<b>{_SPEAKER})(?::\*\*|\*\*:)|(?P<p>{_SPEAKER}):)(?:[ \t]+(?P<text>.*))?$"
)
# "## User", "### Assistant (planner)"
_HEADING_RE = re.compile(rf"^[ \t]{{0,3}}#{{1,6}}[ \t]+(?P<h>{_SPEAKER})[ \t]*#*[ \t]*$")
# The header line `render_turns` writes: "**user** (Ana) · 2026-05-01T10:00:00Z · id m1"
_RENDERED_RE = re.compile(
    r"^\*\*(?P<role>[A-Za-z][\w.-]*)\*\*(?: \((?P<name>[^)\n]*)\))?"
    r"(?P<meta>(?: · [^\n]*)?)[ \t]*$"
)
_TITLE_RE = re.compile(r"^[ \t]{0,3}#{1,6}[ \t]+\S")


@dataclass(frozen=True, slots=True)
class MediaRef:
    """A picture, recording or video a JSONL turn carries or points at (issue 12): an
    OpenAI-style `image_url` part (a `data:` URL, or a path), an `input_audio` part (base64
    data), or a `{"type": "image"|"audio"|"video", "path": ...}` part. Its place in the
    turn's text is the placeholder `[<part type> #<index>]`."""

    index: int  # 1-based among the turn's media parts
    part: str  # the part's type as given: 'image_url', 'input_audio', 'image', ...
    source: str  # 'data' (base64 bytes in the line) | 'path' | 'url' (http(s): not fetched)
    value: str  # the base64 payload, the path or the URL
    mime: str = ""  # of a data URL, or audio/<format> of input_audio

    @property
    def placeholder(self) -> str:
        return f"[{self.part} #{self.index}]"


@dataclass(frozen=True, slots=True)
class Turn:
    """One message or tool event of a conversation."""

    line: int  # 1-based line in the file where the turn starts (0: the whole file is one turn)
    role: str  # "user" | "assistant" | "system" | "tool" (others kept as given)
    content: str
    name: str | None = None  # speaker or tool name
    timestamp: str | None = None
    id: str | None = None
    tool_input: object | None = None  # role tool: input
    tool_output: object | None = None  # role tool: output
    ok: bool | None = None  # role tool: False when the event says the call failed
    media: tuple[MediaRef, ...] = ()  # media parts, in the order of their placeholders

    @property
    def ref(self) -> str:
        """How extracted memories cite this turn: its id, else "L<line>"."""
        return self.id if self.id else f"L{self.line}"


@dataclass(frozen=True, slots=True)
class Transcript:
    turns: tuple[Turn, ...]
    errors: tuple[tuple[int, str], ...]  # (line, reason) for malformed lines
    kind: str  # "jsonl" | "markdown" | "text" | "chat" (a chat app's export)
    # the day a markdown or text transcript says it is of, in its title ("# Chat with
    # Priya — 14 May 2026"), for turns that carry no time; None when it says none
    started: datetime | None = None


def parse_transcript(text: str, filename: str = "") -> Transcript:
    """Turns of a transcript; the format comes from the file name, else from the text.

    `.jsonl`/`.ndjson` files, and text whose first non-empty line is a JSON object and
    most of whose non-empty lines are, are JSON lines. `.md`/`.markdown`/`.txt` files and
    everything else are a dialogue when they clearly are one, otherwise one user turn.
    """
    text = text.removeprefix("\ufeff")
    lower = filename.lower()
    if lower.endswith((".jsonl", ".ndjson")) or (
        not lower.endswith((".md", ".markdown", ".txt")) and _looks_like_jsonl(text)
    ):
        return _parse_jsonl(text)
    kind = "markdown" if lower.endswith((".md", ".markdown")) else "text"
    started = title_date(text)
    chat = _parse_chat_export(text)
    if chat is not None:
        return Transcript(turns=chat, errors=(), kind="chat", started=started)
    turns, markdown = _parse_dialogue(text)
    if markdown:
        kind = "markdown"
    if turns is None:
        stripped = text.strip()
        turns = (Turn(line=0, role="user", content=stripped),) if stripped else ()
    return Transcript(turns=turns, errors=(), kind=kind, started=started)


# --- JSON lines -------------------------------------------------------------------------


def iter_lines(text: str, step: int = 1 << 20) -> Iterator[str]:
    """The lines of `text` as `text.splitlines()` gives them, made about a MiB of text at a
    time: a 50 MB transcript is not held a second time as a list of its lines."""
    start, end = 0, len(text)
    while start < end:
        cut = text.find("\n", start + step)
        stop = end if cut < 0 else cut + 1
        yield from text[start:stop].splitlines()
        start = stop


def _looks_like_jsonl(text: str) -> bool:
    lines = (s for ln in iter_lines(text) if (s := ln.strip()))
    first = next(lines, "")
    if not first.startswith("{") or not isinstance(_try_json(first), dict):
        return False
    good, total = 1, 1
    for ln in lines:
        good += isinstance(_try_json(ln), dict)
        total += 1
    return good * 2 > total


def _try_json(line: str) -> object:
    try:
        return json.loads(line)
    except ValueError:
        return None


def _parse_jsonl(text: str, first: int = 1) -> Transcript:
    turns: list[Turn] = []
    errors: list[tuple[int, str]] = []
    for number, raw in enumerate(iter_lines(text), start=first):
        line = raw.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except ValueError as e:
            errors.append((number, f"not JSON: {e}"))
            continue
        if not isinstance(obj, dict):
            errors.append((number, f"not a JSON object but {type(obj).__name__}"))
            continue
        turn = turn_from_object(number, obj)
        if isinstance(turn, str):
            errors.append((number, turn))
        else:
            turns.append(turn)
    return Transcript(turns=tuple(turns), errors=tuple(errors), kind="jsonl")


def parse_jsonl_from(text: str, first: int) -> Transcript:
    """JSON lines that follow `first - 1` lines of a transcript (`text` starts a line): the
    turns and errors numbered as `parse_transcript` numbers them in the whole text. A live
    session parses each appended line once this way (`Intake.session_turns`)."""
    return _parse_jsonl(text, first)


def turn_from_object(number: int, obj: dict) -> Turn | str:
    """A Turn, or the reason the object is not one (a JSONL line, or a message of an
    OpenAI `messages` list read by `conversations.exports`)."""
    role = obj.get("role")
    if not isinstance(role, str) or not role.strip():
        return "no 'role'" if role is None else "'role' is not a non-empty string"
    role = role.strip()
    # the roles other tools write ("human" and "ai", Gemini's "model") are ours
    role = _ROLE_WORDS.get(role.lower(), role)
    name = _opt_text(obj.get("name"))
    tool_input = obj.get("input")
    tool_output = obj.get("output")
    raw_content = obj.get("content")
    if raw_content is None:
        if role != "tool":
            return "no 'content'"
        if name is None and tool_input is None and tool_output is None:
            return "tool event without 'content', 'name', 'input' or 'output'"
        content = tool_content(name, tool_input, tool_output)
    else:
        media: list[MediaRef] = []
        content_or_error = _content_text(raw_content, media)
        if content_or_error is None:
            return f"'content' is neither text nor a list of text parts: {_short(raw_content)}"
        content = content_or_error
    return Turn(
        line=number,
        role=role,
        content=content,
        name=name,
        timestamp=_opt_text(obj.get("timestamp")),
        id=_opt_text(obj.get("id")),
        tool_input=tool_input,
        tool_output=tool_output,
        ok=_tool_ok(obj) if role == "tool" else None,
        media=tuple(media) if raw_content is not None else (),
    )


def _opt_text(value: object) -> str | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        return value.strip() or None
    if isinstance(value, int | float):
        return str(value)
    return None


def _media_ref(index: int, part: dict) -> MediaRef | None:
    """The media a content part carries or points at, or None for another kind of part."""
    kind = str(part.get("type", ""))
    if kind in ("image_url", "input_image"):
        url = part.get("image_url")
        url = url.get("url") if isinstance(url, dict) else url
        if not isinstance(url, str) or not url.strip():
            return None
        url = url.strip()
        m = re.match(r"data:([\w.+/-]*)(?:;[\w=.-]+)*;base64,", url)
        if m:
            return MediaRef(index, kind, "data", url[m.end() :], m.group(1).lower())
        if re.match(r"https?://", url, re.I):
            return MediaRef(index, kind, "url", url)
        return MediaRef(index, kind, "path", url)
    if kind == "input_audio" and isinstance(part.get("input_audio"), dict):
        audio = part["input_audio"]
        if isinstance(audio.get("data"), str):
            fmt = str(audio.get("format", "wav")).lower()
            return MediaRef(index, kind, "data", audio["data"], f"audio/{fmt}")
    if kind in ("image", "audio", "video", "file") and isinstance(part.get("path"), str):
        return MediaRef(index, kind, "path", part["path"].strip())
    return None


def _content_text(value: object, media: list[MediaRef] | None = None) -> str | None:
    """Text of a `content` value: a string, or a list of parts ({type: text, text} or str).
    Media parts (`_media_ref`) are appended to `media` and stand in the text as their
    placeholder."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("text"), str):
        return value["text"]
    if not isinstance(value, list):
        return None
    parts: list[str] = []
    for part in value:
        if isinstance(part, str):
            parts.append(part)
        elif isinstance(part, dict) and isinstance(part.get("text"), str):
            parts.append(part["text"])
        elif isinstance(part, dict):
            ref = _media_ref(len(media) + 1, part) if media is not None else None
            if ref is not None:
                media.append(ref)  # type: ignore[union-attr]
                parts.append(ref.placeholder)
                continue
            # Another non-text part: say that it was there rather than drop it.
            parts.append(f"[{part.get('type', 'part')}]")
        else:
            return None
    out = ""
    for p in filter(None, parts):
        # a part that ends in a space runs on into the next ("I prefer " + "aisle seats."):
        # one sentence; other parts are blocks of their own
        out += p if not out or out[-1] in " \t" else "\n" + p
    return out


def _tool_ok(obj: dict) -> bool | None:
    """Did the tool call succeed, by the event's own markers (None when it does not say)."""
    for key in ("ok", "success"):
        if isinstance(obj.get(key), bool):
            return obj[key]
    if obj.get("is_error") is True or obj.get("error") not in (None, "", False):
        return False
    status = obj.get("status")
    if isinstance(status, str):
        s = status.strip().lower()
        if s in ("ok", "success", "succeeded", "done", "completed"):
            return True
        if s in ("error", "failed", "failure", "timeout", "cancelled"):
            return False
    out = obj.get("output")
    if isinstance(out, dict):
        code = out.get("exit_code", out.get("returncode"))
        if isinstance(code, int) and not isinstance(code, bool):
            return code == 0
        if out.get("error") not in (None, "", False):
            return False
    return None


def tool_content(name: str | None, tool_input: object, tool_output: object) -> str:
    """The text a tool event stands for when it has no `content` of its own."""
    head = f"called {name}" if name else "tool call"
    parts = [head]
    if tool_input is not None:
        parts.append(f"input: {_compact(tool_input)}")
    if tool_output is not None:
        parts.append(f"output: {_compact(tool_output)}")
    return "; ".join(parts)


def _compact(value: object) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=False)


def _short(value: object) -> str:
    shown = repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."


# --- markdown and plain-text dialogues --------------------------------------------------


def _speaker_role(label: str) -> str | None:
    return _ROLE_WORDS.get(label.strip().lower())


def _parse_dialogue(text: str) -> tuple[tuple[Turn, ...] | None, bool]:
    """(turns, markdown?) when the text clearly is a dialogue, else (None, markdown?)."""
    lines = text.splitlines()
    # Which lines open a turn, and in which style: rendered headers, headings or labels.
    rendered = [(i, m) for i, ln in enumerate(lines) if (m := _RENDERED_RE.match(ln))]
    rendered = [(i, m) for i, m in rendered if m.group("meta") or _speaker_role(m.group("role"))]
    headings = [(i, m) for i, ln in enumerate(lines) if (m := _HEADING_RE.match(ln))]
    labels = [(i, m) for i, ln in enumerate(lines) if (m := _LABEL_RE.match(ln))]
    markdown = bool(rendered or headings) or any(m.group("b") for _, m in labels)

    for style, opens in (("rendered", rendered), ("heading", headings), ("label", labels)):
        speakers = [_label_of(style, m) for _, m in opens]
        # Headings are a dialogue only when they name roles ("## User"), not topics.
        if style == "heading" and not all(_speaker_role(s) for s in speakers):
            continue
        if len(opens) < 2 or len({s.lower() for s in speakers}) < 2:
            continue
        if style == "label" and not _labels_are_dialogue(lines, opens, speakers):
            continue
        preamble = lines[: opens[0][0]]
        if any(ln.strip() and not _TITLE_RE.match(ln) for ln in preamble):
            continue  # prose before the first speaker: not clearly a dialogue
        return _build_turns(lines, opens, style, speakers), True
    return None, markdown


def _label_of(style: str, m: re.Match[str]) -> str:
    if style == "rendered":
        return m.group("role")
    if style == "heading":
        return m.group("h")
    return m.group("b") or m.group("p")


def _labels_are_dialogue(lines: list[str], opens: list, speakers: list[str]) -> bool:
    """ "Speaker: text" lines are a dialogue when speakers alternate and most are names.

    A note like "Note: buy milk\\nTODO: call Ana" has labels too; requiring a known role
    or capitalised speaker names that recur keeps such notes one turn.
    """
    known = sum(1 for s in speakers if _speaker_role(s))
    capitalised = all(s[:1].isupper() or _speaker_role(s) for s in speakers)
    recurring = len(speakers) - len(set(s.lower() for s in speakers)) >= 1
    if not capitalised:
        return False
    return known * 2 >= len(speakers) or recurring


def _build_turns(lines: list[str], opens: list, style: str, speakers: list[str]) -> tuple:
    turns: list[Turn] = []
    bounds = [i for i, _ in opens] + [len(lines)]
    for k, (start, m) in enumerate(opens):
        speaker = speakers[k]
        body_lines = lines[start + 1 : bounds[k + 1]]
        timestamp = ident = None
        name: str | None = None
        if style == "rendered":
            name = m.group("name") or None
            timestamp, ident = _parse_meta(m.group("meta"))
            role = speaker if speaker.lower() not in KNOWN_ROLES else speaker.lower()
        else:
            role_word = _speaker_role(speaker)
            if role_word is not None:
                role = role_word
                if speaker.lower() not in KNOWN_ROLES:
                    name = speaker
            else:
                # a named person (the one beside assistants, or one of several people
                # talking): a user turn under their name, as JSONL gives it with `name`
                role, name = "user", speaker
            if style == "label" and m.group("text"):
                body_lines = [m.group("text"), *body_lines]
        content = "\n".join(body_lines).strip("\n")
        turns.append(
            Turn(line=start + 1, role=role, content=content.strip(), name=name,
                 timestamp=timestamp, id=ident)
        )  # fmt: skip
    return tuple(turns)


def _parse_meta(meta: str) -> tuple[str | None, str | None]:
    timestamp = ident = None
    for part in meta.split(" · "):
        part = part.strip()
        if not part:
            continue
        if part.startswith("id "):
            ident = part[3:].strip() or None
        elif part in ("ok", "failed"):
            continue
        elif timestamp is None:
            timestamp = part
    return timestamp, ident


# --- the day in a title -----------------------------------------------------------------


def title_date(text: str) -> datetime | None:
    """The day the title of a markdown or text transcript names (its first non-empty line,
    when a `#` heading: "# Chat with Priya — 14 May 2026", "## 2026-05-14"), a full date
    with its year; None when there is none."""
    first = next((ln for ln in text[:4096].splitlines() if ln.strip()), "")
    if not _TITLE_RE.match(first):
        return None
    heading = first.strip().lstrip("#").strip()
    for m in resolve_relative(heading, date(1970, 1, 1)):
        if not m.relative and m.start == m.end:
            return datetime(m.start.year, m.start.month, m.start.day)
    return None


# --- chat apps' text exports ------------------------------------------------------------

# "07/09/2026", "7/9/26", "07.09.2026" (day and month in the phone's order), "2026-09-07"
_CHAT_DATE = (
    r"(?:(?P<a>\d{1,2})(?P<sep>[/.-])(?P<b>\d{1,2})(?P=sep)(?P<y>\d{4}|\d{2})"
    r"|(?P<iy>\d{4})-(?P<im>\d{1,2})-(?P<id>\d{1,2}))"
)
# "18:03", "18:03:12", "6:03 PM", "6:03\u202fpm"
_CHAT_TIME = (
    r"(?P<h>\d{1,2})[:.](?P<mi>\d{2})(?:[:.](?P<s>\d{2}))?"
    r"(?:[ \u202f\u00a0]?(?P<ap>[AaPp])\.?[ ]?[Mm]\.?)?"
)
# a message's first line: "[07/09/2026, 18:03] Jonas: text" (WhatsApp on iPhone),
# "07/09/2026, 18:03 - Jonas: text" (WhatsApp on Android), "[2026-09-07 18:03] Jonas:
# text", "[18:03] Jonas: text" (under a line that is a date); a line with no speaker is a
# notice of the app's ("Messages and calls are end-to-end encrypted")
_CHAT_LINE_RE = re.compile(
    rf"^[\u200e\u200f\ufeff \t]*(?P<open>\[)?(?:{_CHAT_DATE},?[ \t]+)?"
    rf"{_CHAT_TIME}(?(open)\][ \t]*|[ \t]+[-–][ \t]+)"
    r"(?:(?P<who>[^:\n\[\]]{1,40}?):(?:[ \t]+(?P<text>.*))?|(?P<notice>.*))$"
)
# a line that is a date alone, heading the messages under it: "## 7 September 2026",
# "--- 2026-09-07 ---", "Monday, 7 September 2026"
_DATE_LINE_RE = re.compile(r"^[ \t#*=_\-\[]*(?P<d>[^#*=_\[\]]*?)[ \t#*=_\-\]]*$")


_MON = r"(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?"
# what a date heading says, all of it: "7 September 2026", "Monday, 7 September 2026",
# "September 7, 2026", "2026-09-07", "07/09/2026"
_DATE_ALONE_RE = re.compile(
    rf"(?:[a-z]+,?\s+)?(?:\d{{1,2}}(?:st|nd|rd|th)?\s+{_MON},?\s+\d{{4}}"
    rf"|{_MON}\s+\d{{1,2}}(?:st|nd|rd|th)?,?\s+\d{{4}}|\d{{4}}-\d{{1,2}}-\d{{1,2}}"
    r"|\d{1,2}[/.]\d{1,2}[/.]\d{2,4})",
    re.I,
)


def _heading_day(line: str) -> date | None:
    if len(line) > 80 or not re.search(r"\d", line):
        return None
    m = _DATE_LINE_RE.match(line)
    if m is None or not _DATE_ALONE_RE.fullmatch(m["d"]):
        return None
    ts = parse_timestamp(m["d"])
    if ts is not None and (ts.hour, ts.minute, ts.second) == (0, 0, 0):
        return ts.date()
    found = resolve_relative(m["d"], date(1970, 1, 1))
    if len(found) == 1 and not found[0].relative and found[0].text.strip(" ,") == m["d"]:
        return found[0].start
    return None


def _parse_chat_export(text: str) -> tuple[Turn, ...] | None:
    """The messages of a chat app's text export (`_CHAT_LINE_RE`), each a turn with its
    speaker and time, a line that opens no message going with the message before; None
    when the text is not one (fewer than two such lines, or prose before the first).

    Day and month: a date written `a/b/yyyy` is read the same way across the file,
    day-first (as WhatsApp writes it in most of the world) unless a first number above 12
    shows it is month-first; two-digit years are 20xx."""
    lines = text.splitlines()
    found: list[tuple[int, re.Match[str]]] = []
    for i, ln in enumerate(lines):
        m = _CHAT_LINE_RE.match(ln)
        if m is None or not (m["open"] or m["a"] or m["iy"]):
            continue  # "10:30 - standup": no bracket, no date
        if m["who"] is not None and len(m["who"].split()) > 5:
            continue  # "Note that the meeting on 12/03/2026, 10:00 - room B: …"
        found.append((i, m))
    pairs = [(int(m["a"]), int(m["b"])) for _, m in found if m["a"]]
    day_first = any(a > 12 for a, _ in pairs) or not any(b > 12 for _, b in pairs)
    said = [(i, m) for i, m in found if m["who"] is not None]
    if len(said) < 2:
        return None
    heading: date | None = None
    for ln in lines[: found[0][0]]:
        if ln.strip() and not _TITLE_RE.match(ln) and _heading_day(ln) is None:
            return None  # prose before the first message: not clearly an export
    opens = {i for i, _ in found}
    turns: list[Turn] = []
    bounds = [i for i, _ in found] + [len(lines)]
    days: dict[int, date | None] = {}  # a message's line: the date heading above it
    headings: set[int] = set()
    for i, ln in enumerate(lines):
        if i in opens:
            days[i] = heading
        elif (d := _heading_day(ln)) is not None:
            heading = d
            headings.add(i)
    for k, (start, m) in enumerate(found):
        body = [lines[j] for j in range(start + 1, bounds[k + 1]) if j not in headings]
        first = m["text"] if m["who"] is not None else m["notice"]
        content = "\n".join([first or "", *body]).strip()
        timestamp = _chat_time(m, day_first, days[start])
        if m["who"] is None:
            turns.append(Turn(line=start + 1, role="system", content=content,
                              timestamp=timestamp))  # fmt: skip
            continue
        who = m["who"].strip().strip("\u200e\u202a\u202c~ ")
        role_word = _speaker_role(who)
        role = role_word or "user"
        name = None if role_word is not None and who.lower() in KNOWN_ROLES else who
        turns.append(
            Turn(line=start + 1, role=role, content=content, name=name, timestamp=timestamp)
        )
    return tuple(turns)


def _chat_time(m: re.Match[str], day_first: bool, heading: date | None) -> str | None:
    """A message's time as ISO 8601 (no zone: the phone's), None when its date is none."""
    try:
        if m["iy"]:
            day = date(int(m["iy"]), int(m["im"]), int(m["id"]))
        elif m["a"]:
            a, b, y = int(m["a"]), int(m["b"]), int(m["y"])
            y += 2000 if y < 100 else 0
            day = date(y, b, a) if day_first else date(y, a, b)
        elif heading is not None:
            day = heading
        else:
            return None
        h, mi, sec = int(m["h"]), int(m["mi"]), int(m["s"] or 0)
        if m["ap"]:
            if not 1 <= h <= 12:
                return None
            h = h % 12 + (12 if m["ap"].lower() == "p" else 0)
        return datetime(day.year, day.month, day.day, h, mi, sec).isoformat()
    except ValueError:
        return None


# --- rendering --------------------------------------------------------------------------


def render_turns(turns: Iterable[Turn]) -> str:
    """Readable markdown of a session: one block per turn, nothing said left out.

    Each block starts with a header line `**role** (name) · timestamp · id X`, then the
    text. Tool turns add their input and output as fenced JSON (fenced text for a string
    output with several lines); their synthesised content is not repeated. Blocks are
    separated by a blank line and the header format is read back by `parse_transcript`.
    """
    blocks: list[str] = []
    for turn in turns:
        header = f"**{turn.role}**"
        if turn.name:
            header += f" ({turn.name})"
        if turn.timestamp:
            header += f" · {turn.timestamp}"
        if turn.id:
            header += f" · id {turn.id}"
        if turn.role == "tool" and turn.ok is not None:
            header += " · ok" if turn.ok else " · failed"
        parts = [header]
        content = turn.content.strip("\n")
        is_tool = turn.tool_input is not None or turn.tool_output is not None
        synthesised = is_tool and content == tool_content(
            turn.name, turn.tool_input, turn.tool_output
        )
        if content and not synthesised:
            parts.append(content)
        if turn.tool_input is not None:
            parts.append("Input:\n" + _fenced(turn.tool_input))
        if turn.tool_output is not None:
            parts.append("Output:\n" + _fenced(turn.tool_output))
        blocks.append("\n\n".join(parts) + "\n")
    return "\n".join(blocks)


def _fenced(value: object) -> str:
    if isinstance(value, str) and "\n" in value:
        lang, text = "text", value.rstrip("\n")
    else:
        lang, text = "json", json.dumps(value, ensure_ascii=False, indent=2)
    fence = "```"
    while fence in text:
        fence += "`"
    return f"{fence}{lang}\n{text}\n{fence}"


# --- reading a rendered archive back, with positions ------------------------------------


@dataclass(frozen=True, slots=True)
class TurnBlock:
    """One turn of a text written by `render_turns`, with where it sits in that text."""

    start: int  # offset of the header line
    end: int  # offset after the turn's last character
    role: str
    name: str | None
    timestamp: str | None
    id: str | None
    content: str  # the turn's text (tool input/output included as rendered)


def turn_blocks(text: str) -> list[TurnBlock]:
    """The turns of a session archive's body (the format `render_turns` writes), in order.

    Only header lines of the rendered form open a turn; everything up to the next header
    is the turn's content. A text with no such header has no blocks.
    """
    heads = [m for m in re.finditer(r"(?m)^\*\*[^\n]*$", text) if _RENDERED_RE.match(m.group(0))]
    blocks: list[TurnBlock] = []
    for i, m in enumerate(heads):
        h = _RENDERED_RE.match(m.group(0))
        assert h is not None
        end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        content = text[m.end() : end].strip()
        timestamp, ident = _parse_meta(h.group("meta"))
        blocks.append(
            TurnBlock(
                m.start(),
                m.start() + len(text[m.start() : end].rstrip()),
                h.group("role"),
                h.group("name") or None,
                timestamp,
                ident,
                content,
            )
        )
    return blocks
