"""Memory from conversations: the inbox and live sessions (SPEC §5 second bullet, §6).

A file dropped into an `.inbox/` is stored as it arrived (secrets redacted) the moment it
is closed, then processed in the background: a transcript is archived whole as a
`session` node (every turn, with its timestamp and id), and extraction (an LLM when one is
configured, rules otherwise) turns it into candidate memories, each routed by its type's
strategy with provenance. What a file did, or why it was refused, is kept with it.

An export (a ChatGPT or Claude `conversations.json`, read by `conversations.exports`) is
processed one conversation at a time: each is archived as its own session and its
memories routed in one transaction that also stores how many are done
(`inbox_items.progress`), so a mount that stops resumes after the last one filed and
none is filed twice; the report says `processing (K of N conversations)` meanwhile.

A session (`mkdir .sessions/<id>`) records turns appended to its `transcript.jsonl`,
extracts in the background once enough turns are pending, compacts on request, and when
it ends is archived as a `session` node with its summary.

No FUSE here: the tree calls these methods; the daemon runs `IntakeService`. Every row
is written through the memory service (`Memory.add_inbox_item`, `put_session`, …), so it
commits with whatever else the caller's transaction holds and reaches the change feed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import functools
import json
import logging
import re
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import trio
import xxhash

from contextfs.conversations import episodes, exports, turn_media
from contextfs.conversations.exports import Conversation
from contextfs.conversations.extract import (
    Candidate,
    Extractor,
    RuleExtractor,
    validate_candidate,
)
from contextfs.conversations.media import (
    VIDEO_SUFFIXES,
    MediaIntake,
    MediaSettings,
    media_missing,
    video_missing,
)
from contextfs.conversations.people import (
    attribute_speakers,
    owner_relations,
    owner_speaker,
    speaker_hubs,
)
from contextfs.conversations.transcript import (
    Transcript,
    Turn,
    parse_jsonl_from,
    parse_transcript,
    render_turns,
)
from contextfs.errors import (
    ContextFSError,
    Exists,
    Forbidden,
    InvalidInput,
    NotFound,
    StoreDamaged,
    StoreUnavailable,
)
from contextfs.memory.background import FOREGROUND, Service
from contextfs.memory.document import Document, decode_text, parse_document, render_document
from contextfs.memory.redact import Redaction, secret_filename_reason
from contextfs.memory.service import Memory
from contextfs.memory.spill import SpillBuffer
from contextfs.memory.strategies import strategy_for
from contextfs.memory.summarize import summarize
from contextfs.memory.tokens import estimate_tokens
from contextfs.model import Change, Node

log = logging.getLogger(__name__)

TEXT_SUFFIXES = (".jsonl", ".json", ".md", ".markdown", ".txt", "")
MEDIA_SUFFIXES = (
    *(".png", ".jpg", ".jpeg", ".gif", ".webp"),
    *(".wav", ".mp3", ".ogg", ".flac", ".m4a"),
    *(".mp4", ".webm", ".mkv"),
)
# media no gate takes yet (no decoder): refused with this reason
MEDIA_NOT_YET = {".m4a": "m4a (AAC) audio is not decoded yet; WAV, FLAC, OGG and MP3 are"}


@dataclass(slots=True)
class InboxItem:
    id: int
    owner: tuple[str, str]
    filename: str
    created: float
    state: str  # 'pending' | 'done' | 'dropped' (by a media gate) | 'refused'
    report: str
    size: int = 0
    progress: str = ""  # JSON of a `Progress` while an export is processed, else ''

    @classmethod
    def from_row(cls, row: tuple) -> InboxItem:
        """An item as `Store.inbox_items` / `inbox_item` give its row."""
        item = cls(row[0], (row[1], row[2]), row[3], row[4], row[5], row[6], row[7])
        item.progress = row[8] if len(row) > 8 else ""
        return item


@dataclass(frozen=True, slots=True)
class Parsed:
    """What a text item of the inbox holds: one transcript, or the conversations of an
    export (`conversations.exports`), each to be archived as its own session."""

    kind: str  # 'jsonl' | 'markdown' | 'text' | a key of exports.KINDS
    conversations: tuple[Conversation, ...]
    notes: tuple[str, ...]  # what was not understood ("line 3: not JSON: ..."); the rest counts
    export: bool  # several conversations, processed one at a time and resumable

    @property
    def label(self) -> str:
        return exports.KINDS.get(self.kind, self.kind)

    @property
    def turns(self) -> int:
        return sum(len(c.turns) for c in self.conversations)

    def without_turns(self) -> Parsed:
        """What the report of a one-conversation item needs once its conversation is
        prepared: the archive's documents hold what is filed, and the turns (as big as
        the file) are let go before the archive's transaction."""
        return dataclasses.replace(self, conversations=())


def each_node_once(changed: Sequence[str]) -> list[str]:
    """A report's memory lines (`created <path>`, `changed <path> (location: Oslo →
    Lisbon)`, as `Intake.route_candidates` gives them) with each node once, where it first
    came: with the strongest of what happened to it (created, changed, unchanged) and each
    of its notes. Five facts of one person read "created …/efua" once, not followed by
    "changed …/efua" four times."""
    rank = {"unchanged": 0, "changed": 1, "created": 2}
    nodes: dict[str, tuple[str, list[str]]] = {}
    for line in changed:
        verb, _, rest = line.partition(" ")
        path, _, note = rest.partition(" ")
        was, notes = nodes.get(path, (verb, []))
        if rank.get(verb, 1) > rank.get(was, 1):
            was = verb
        if note and note not in notes:
            notes.append(note)
        nodes[path] = (was, notes)
    return [" ".join([verb, path, *notes]) for path, (verb, notes) in nodes.items()]


def parse_item(data: bytes, filename: str) -> Parsed:
    """Worker thread: the bytes of a text item as conversations (`parse_text`)."""
    return parse_text(decode_text(data, filename), filename)


def parse_text(text: str, filename: str) -> Parsed:
    """Worker thread: the text of an item as conversations. A JSON document is read by
    `exports` (refused, `InvalidInput`, when its shape is unknown); anything else is a
    transcript (`parse_transcript`). Markdown and text files are never read as JSON."""
    if not filename.lower().endswith((".md", ".markdown", ".txt")):
        found = exports.read_conversations(text)
        if found is not None:
            if not found.conversations:
                why = "; ".join(found.notes[:3]) or "it has no conversation"
                raise InvalidInput(f"no conversation with text in this {found.label}: {why}")
            export = found.kind in ("chatgpt", "claude", "openai-messages-lines")
            return Parsed(found.kind, found.conversations, found.notes, export)
    t = parse_transcript(text, filename)
    # a markdown chat titled "# Chat with Priya — 14 May 2026" is of that day
    started = t.started.replace(tzinfo=dt.UTC).timestamp() if t.started else None
    conv = Conversation("", None, started, t.turns)
    return Parsed(t.kind, (conv,), tuple(f"line {n}: {why}" for n, why in t.errors), False)


# The provenance an archive of a conversation handed to the inbox carries besides
# `inbox:<file>`: `conversation:<key>`, the key of its turns (`conversation_key`).
KEY_SOURCE = "conversation:"


def conversation_key(turns: Sequence[Turn]) -> str:
    """Any thread (pure): the content key of a conversation, xxh3-128 of its turns as said
    (role, speaker, time, id, text, tool input and output, the media they carry). The same
    conversation handed in again, under another name or in another file, has the same key;
    the name of the file and the title it gives do not count."""
    h = xxhash.xxh3_128()
    for t in turns:
        head = [t.role, t.name, t.timestamp, t.id, len(t.content), t.ok]
        h.update(json.dumps(head, ensure_ascii=False).encode())
        h.update(t.content.encode("utf-8", "surrogatepass"))
        if t.tool_input is not None or t.tool_output is not None:
            tool = [t.tool_input, t.tool_output]
            h.update(json.dumps(tool, ensure_ascii=False, sort_keys=True, default=str).encode())
        for m in t.media:
            h.update(f"\x1f{m.part}\x1f{m.source}\x1f{m.mime}\x1f".encode())
            h.update(m.value.encode("utf-8", "surrogatepass"))
        h.update(b"\x1e")
    return h.hexdigest()


@dataclass(frozen=True, slots=True)
class Prepared:
    """A conversation of an inbox item made ready in a worker thread (`Intake.prepare`):
    its archive's documents and its candidate memories; the event loop only stores them.
    One already archived (`already`: its archive's paths) is not filed again."""

    index: int  # in Parsed.conversations
    title: str
    turns: int
    # the session archive, one a part; taken out as they are stored (`Intake.archive`)
    documents: list[Document]
    candidates: tuple[Candidate, ...]
    how: str  # the extractor that ran
    notes: tuple[str, ...] = ()  # what the extractor said (chunks, a chunk left to rules)
    key: str = ""  # conversation_key of its turns
    already: tuple[str, ...] = ()  # the archive of the same turns, filed before


# How long one transaction of a filing routes memories before it commits and the mount
# serves the requests that waited (`Intake._file`). A conversation's memories in one
# transaction held the event loop for as long as they took: the 1,000 preferences of one
# markdown file, 7 s, and every other write of the mount waited that long.
FILING_STEP_SECONDS = 0.1
# the pause in the mount's requests the next step waits for (`IntakeService._between`)
STEP_QUIET_SECONDS = 0.05


def _candidate_json(c: Candidate) -> dict[str, Any]:
    return {
        "type": c.type,
        "fields": c.fields,
        "body": c.body,
        "turns": list(c.turns),
        "confidence": c.confidence,
    }


def _candidate_of(data: dict[str, Any]) -> Candidate:
    return Candidate(
        str(data["type"]),
        dict(data["fields"]),
        str(data["body"]),
        tuple(str(t) for t in data["turns"]),
        float(data["confidence"]),
    )


@dataclass(slots=True)
class Filing:
    """A conversation being filed (`Intake._file`): its archive stored in the first step,
    its memories routed a batch a transaction from there on, each step storing what it
    did (`inbox_steps`, in its transaction). A mount that stops in the middle goes on with
    the memories not routed yet: the archive is not made again, no memory is routed
    twice, none is lost. The extractor does not run again (an LLM's answer would differ):
    step 0 keeps the candidates as they came."""

    index: int  # in Parsed.conversations
    title: str
    turns: int
    how: str  # the extractor that ran
    key: str  # conversation_key of its turns
    notes: list[str]  # what the extractor said
    media: list[str]  # the report's lines on the turns' media
    candidates: list[Candidate]  # all of them, in order (never changed)
    done: int = 0  # candidates routed (or refused) so far
    archived: list[str] | None = None  # the archive's paths; None: not archived (`why`)
    why: str | None = None
    changed: list[str] = field(default_factory=list)  # route_candidates' lines so far
    refused: list[str] = field(default_factory=list)
    steps: int = 0  # steps stored
    # (done, changed, refused) as the last stored step left them: what the next one adds
    mark: tuple[int, int, int] = (0, 0, 0)

    @classmethod
    def of(cls, ready: Prepared, media: Sequence[str], route: bool) -> Filing:
        """A prepared conversation, not filed yet (`route`: its memories are to be routed;
        not when it was archived before)."""
        return cls(
            ready.index,
            ready.title,
            ready.turns,
            ready.how,
            ready.key,
            list(ready.notes),
            list(media),
            list(ready.candidates) if route else [],
        )

    @property
    def left(self) -> int:
        return len(self.candidates) - self.done

    def copy(self) -> Filing:
        return dataclasses.replace(
            self,
            archived=None if self.archived is None else list(self.archived),
            changed=list(self.changed),
            refused=list(self.refused),
        )

    def step_data(self) -> str:
        """What was done since the last stored step, as `inbox_steps.data`; step 0 with
        the conversation as it was extracted."""
        done, changed, refused = self.mark
        data: dict[str, Any] = {
            "routed": self.done - done,
            "changed": self.changed[changed:],
            "refused": self.refused[refused:],
        }
        if not self.steps:
            data["conversation"] = {
                "index": self.index,
                "title": self.title,
                "turns": self.turns,
                "how": self.how,
                "key": self.key,
                "notes": self.notes,
                "media": self.media,
                "archived": self.archived,
                "why": self.why,
                "candidates": [_candidate_json(c) for c in self.candidates],
            }
        return json.dumps(data, ensure_ascii=False, default=str)

    def stored(self) -> None:
        """Its step was stored (`step_data`)."""
        self.steps += 1
        self.mark = (self.done, len(self.changed), len(self.refused))

    @classmethod
    def resume(cls, rows: Sequence[str]) -> Filing | None:
        """The filing the stored steps of a conversation left; None when they do not read
        as steps (the conversation is then prepared again)."""
        try:
            c = json.loads(rows[0])["conversation"]
            filing = cls(
                int(c["index"]),
                str(c["title"]),
                int(c["turns"]),
                str(c["how"]),
                str(c["key"]),
                list(c["notes"]),
                list(c["media"]),
                [_candidate_of(x) for x in c["candidates"]],
                archived=None if c["archived"] is None else list(c["archived"]),
                why=c["why"],
            )
            for row in rows:
                step = json.loads(row)
                filing.done += int(step["routed"])
                filing.changed += step["changed"]
                filing.refused += step["refused"]
                filing.stored()
        except (IndexError, KeyError, TypeError, ValueError) as exc:
            log.warning("the stored steps of an inbox filing do not read (%s)", exc)
            return None
        return filing


# how much of an export's work a report lists (the counts are always complete)
LIST_ARCHIVED = 20
LIST_MEMORIES = 200
LIST_OTHER = 50


@dataclass(slots=True)
class Progress:
    """How far processing of an export got, and what its report says so far. Stored as JSON
    in the inbox item (`inbox_items.progress`) with each conversation's archive and
    routing, in their transaction: `done` conversations are filed, none twice."""

    total: int
    done: int = 0
    turns: int = 0
    sessions: int = 0  # conversations archived
    archived: list[str] = field(default_factory=list)  # the first LIST_ARCHIVED nodes
    archived_n: int = 0  # session nodes (a long conversation is archived in parts)
    not_archived: list[str] = field(default_factory=list)
    not_archived_n: int = 0
    already: list[str] = field(default_factory=list)  # "<title>: <its archive>", the first
    already_n: int = 0  # conversations archived before (the same turns): not filed again
    memories: dict[str, str] = field(default_factory=dict)  # path -> created|changed|unchanged
    memories_more: int = 0  # memory writes to nodes beyond those listed
    writes: dict[str, int] = field(default_factory=dict)  # verb -> memory writes
    refused: list[str] = field(default_factory=list)
    refused_n: int = 0
    media: list[str] = field(default_factory=list)
    how: list[str] = field(default_factory=list)  # the extractors that ran
    notes: list[str] = field(default_factory=list)  # the extractors' notes, the first ones
    notes_n: int = 0

    @classmethod
    def load(cls, text: str, total: int) -> Progress | None:
        """The stored progress (a fresh one when none is stored); None when it was stored
        for another count of conversations than the file reads as now."""
        try:
            data = json.loads(text) if text else {"total": total}
        except ValueError:
            data = None
        if not isinstance(data, dict) or data.get("total") != total:
            return None
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def dumps(self) -> str:
        return json.dumps(dataclasses.asdict(self), ensure_ascii=False)

    def copy(self) -> Progress:
        return dataclasses.replace(
            self,
            archived=list(self.archived),
            not_archived=list(self.not_archived),
            already=list(self.already),
            memories=dict(self.memories),
            writes=dict(self.writes),
            refused=list(self.refused),
            media=list(self.media),
            how=list(self.how),
            notes=list(self.notes),
        )

    def filed(
        self,
        turns: int,
        archived: Sequence[str],
        not_archived: str | None,
        changed: Sequence[str],
        refused: Sequence[str],
        media: Sequence[str],
        how: str,
        notes: Sequence[str] = (),
        already: str | None = None,
    ) -> None:
        """One more conversation archived (or not, and why) and its memories routed; or,
        `already` ("<title>: <its archive>"), found archived before and not filed again."""
        self.done += 1
        self.turns += turns
        if already is not None:
            self.already_n += 1
            if len(self.already) < LIST_OTHER:
                self.already.append(already)
            return
        if not_archived is None:
            self.sessions += 1
        else:
            self.not_archived_n += 1
            if len(self.not_archived) < LIST_OTHER:
                self.not_archived.append(not_archived)
        self.archived_n += len(archived)
        self.archived += list(archived[: max(0, LIST_ARCHIVED - len(self.archived))])
        rank = {"unchanged": 0, "changed": 1, "created": 2}
        for line in changed:
            verb, _, path = line.partition(" ")
            self.writes[verb] = self.writes.get(verb, 0) + 1
            if path in self.memories:
                if rank.get(verb, 1) > rank.get(self.memories[path], 1):
                    self.memories[path] = verb
            elif len(self.memories) < LIST_MEMORIES:
                self.memories[path] = verb
            else:
                self.memories_more += 1
        self.refused_n += len(refused)
        self.refused += list(refused[: max(0, LIST_OTHER - len(self.refused))])
        self.media += list(media[: max(0, LIST_OTHER - len(self.media))])
        if how not in self.how:
            self.how.append(how)
        self.notes_n += len(notes)
        self.notes += list(notes[: max(0, LIST_OTHER - len(self.notes))])


class _ArchiveRefused(Exception):
    """The archive of a conversation was refused: its transaction is rolled back, and the
    conversation filed again without it (the reason in the report)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# context.md's relevant memories: typed ones, then turns of earlier sessions (each cut)
CONTEXT_MEMORIES = 8
CONTEXT_PASSAGES = 4
CONTEXT_PASSAGE_CHARS = 300


@dataclass(slots=True)
class Session:
    owner: tuple[str, str]
    id: str
    created: float
    processed: int = 0  # turns already extracted
    summary: str = ""  # compacted earlier turns
    appends: int = 0  # appends stored after the stored transcript: the next one's idx
    extracting: bool = False
    ended: bool = False  # archived and removed: nothing of it is stored again
    touched: list[str] = field(default_factory=list)  # node paths extraction changed
    # (turn line, turn ref, media index) -> what the gates did with a medium of a turn
    media_notes: dict[tuple[int, str, int], str] = field(default_factory=dict)
    # the transcript, JSONL as recorded (redacted): the texts appended, joined when it is
    # read (`transcript`), so that an append costs what it appends
    pieces: list[str] = field(default_factory=list)
    size: int = 0  # its UTF-8 bytes (st_size)
    changes: int = 0  # how many times it changed (what context.md was built from)
    # what `Intake.session_turns` has parsed: the turns of the whole lines before `fresh`,
    # their number of lines, and the text after them (a line still being written in it)
    turns_parsed: list[Turn] = field(default_factory=list)
    lines_parsed: int = 0
    fresh: str = ""
    _data: bytes | None = None  # the transcript encoded, as read; made again after a change

    @classmethod
    def stored(
        cls,
        owner: tuple[str, str],
        sid: str,
        created: float,
        transcript: str,
        processed: int,
        summary: str,
        appends: int,
    ) -> Session:
        s = cls(owner, sid, created, processed, summary, appends)
        s.reset(transcript)
        return s

    @property
    def transcript(self) -> str:
        if len(self.pieces) != 1:
            self.pieces[:] = ["".join(self.pieces)]
        return self.pieces[0]

    def tail(self) -> str:
        """The line an earlier append began and did not end ("" after a newline)."""
        return self.fresh[self.fresh.rfind("\n") + 1 :]

    def data(self) -> bytes:
        """The transcript as a read returns it (encoded once per change, not per read)."""
        if self._data is None:
            self._data = self.transcript.encode()
        return self._data

    def extend(self, text: str) -> None:
        """`text` appended: the lines parsed so far stay parsed."""
        self.pieces.append(text)
        self.fresh += text
        self.size += len(text.encode())
        self.changes += 1
        self._data = None

    def reset(self, transcript: str) -> None:
        """Another transcript (a compact): parsed again from its start when asked."""
        self.pieces[:] = [transcript]
        self.size, self._data = len(transcript.encode()), None
        self.changes += 1
        self.turns_parsed, self.lines_parsed, self.fresh = [], 0, transcript


def _profile_name(l2: str) -> str | None:
    """The `name` field of the owner's profile, if it has one."""
    try:
        name = parse_document(l2).fields.get("name")
    except ContextFSError:
        return None
    return str(name) if name else None


def _suffix(name: str) -> str:
    m = re.search(r"(\.[A-Za-z0-9]+)$", name)
    return m.group(1).lower() if m else ""


def _title(name: str) -> str:
    stem = re.sub(r"\.[A-Za-z0-9]+$", "", name)
    return stem or "conversation"


def conversation_title(item: InboxItem, parsed: Parsed, index: int) -> str:
    """A conversation's title as the export gives it, else after the file (and its place
    in an export)."""
    conv = parsed.conversations[index]
    title = conv.title or _title(item.filename)
    if not conv.title and parsed.export:
        title += f" {index + 1}"
    return title


def _cut(text: str, limit: int) -> list[str]:
    """text in pieces of at most limit / 8 characters (4 bytes each at most, room for a
    turn's header), cut after a space where there is one in the second half."""
    step = max(limit // 8, 1)
    pieces, start = [], 0
    while start < len(text):
        end = min(start + step, len(text))
        if end < len(text):
            space = text.rfind(" ", start + step // 2, end)
            end = space + 1 if space >= 0 else end
        pieces.append(text[start:end])
        start = end
    return pieces


def split_turns(turns: Sequence[Turn], limit: int) -> list[list[Turn]]:
    """Consecutive turns in parts whose rendered text stays under `limit` bytes (one part
    when it all fits); a single turn longer than that is cut into pieces of its text."""
    parts: list[list[Turn]] = [[]]
    size = 0
    for turn in turns:
        block = len(render_turns([turn]).encode("utf-8")) + 1
        pieces = [turn]
        if block > limit and turn.content:
            pieces = [dataclasses.replace(turn, content=c) for c in _cut(turn.content, limit)]
        for piece in pieces:
            block = len(render_turns([piece]).encode("utf-8")) + 1
            if parts[-1] and size + block > limit:
                parts.append([])
                size = 0
            parts[-1].append(piece)
            size += block
    return parts


class IntakeFollower(Protocol):
    """Who shows what the intake changed (fs.roles.nodes.Nodes)."""

    def routed(self, n: Node, created: bool) -> None: ...
    def add_owner(self, owner: tuple[str, str]) -> object: ...


class Intake:
    """Inbox items and sessions over a Memory. Methods run in the daemon's trio thread,
    except `analyse`, which is pure and runs in a worker thread."""

    def __init__(
        self,
        memory: Memory,
        *,
        extractor: Extractor | None = None,
        default_agent: str = "default",
        extract_every: int = 10,
        clock: Callable[[], float] | None = None,
        media: MediaSettings | None = None,
        clip=None,
        describer=None,
    ) -> None:
        self.memory = memory
        self.extractor: Extractor = extractor or RuleExtractor()
        self.rules = RuleExtractor()
        self.default_agent = default_agent
        self.extract_every = extract_every
        self.clock = clock or memory.clock
        # images and audio: the gates, when their packages are installed
        self.media_missing = media_missing()
        self.media = (
            MediaIntake(memory, media, clock=self.clock, clip=clip, describer=describer)
            if self.media_missing is None
            else None
        )
        self.items: dict[int, InboxItem] = {}
        for row in memory.inbox_items():
            if row[5] == "receiving":  # its close never returned (a crash): not handed in
                log.info("inbox %s: dropping an item that did not finish arriving", row[3])
                if not memory.failsafe:
                    memory.drop_inbox_item(row[0])
                continue
            item = InboxItem.from_row(row)
            self.items[item.id] = item
        # the export being processed: item id -> (conversations done, conversations)
        self.processing: dict[int, tuple[int, int]] = {}
        # who shows what the intake changed (`follow`), and what they are told once a
        # conversation's transaction commits (`_filing`)
        self._followers: list[IntakeFollower] = []
        self._held: list[tuple[str, tuple]] | None = None
        self.sessions: dict[tuple[str, str, str], Session] = {}
        for kind, oid, sid, created, transcript, processed, summary, appends in memory.sessions():
            self.sessions[(kind, oid, sid)] = Session.stored(
                (kind, oid), sid, created, transcript, processed, summary, appends
            )
        # set by IntakeService: a session has enough new turns to extract
        self.wake: Callable[[], None] = lambda: None
        # (owner kind, owner id, conversation key) -> ids of the session nodes archived
        # with that key (`KEY_SOURCE`), deleted ones included; read once (`load_keys`)
        self._keys: dict[tuple[str, str, str], list[int]] | None = None

    # ---- the inbox ------------------------------------------------------------------------

    def submit(
        self,
        owner: tuple[str, str],
        filename: str,
        data: bytes,
        redacted: tuple[Redaction, ...] | None = None,
    ) -> InboxItem:
        """close() of a file in an .inbox: store it (redacted) now, process it later.
        `redacted`: what a redaction of `data` done already (in a worker thread) found."""
        item, data = self._admit(owner, filename, data, redacted)
        # the change feed wakes IntakeService for a pending item
        self.memory.add_inbox_item(
            item.id, owner, filename, data, item.created, item.state, item.report
        )
        return self._admitted(item)

    def receive(
        self,
        owner: tuple[str, str],
        filename: str,
        data: bytes,
        redacted: tuple[Redaction, ...] | None = None,
    ) -> Iterator[InboxItem | None]:
        """`submit` for a big file: stored a few MiB a transaction
        (`Memory.receive_inbox_item`); yields None between steps (the caller serves other
        requests meanwhile), then the item."""
        item, data = self._admit(owner, filename, data, redacted)
        yield from self.memory.receive_inbox_item(
            item.id, owner, filename, data, item.created, item.state, item.report
        )
        yield self._admitted(item)

    def remove(self, item: InboxItem) -> None:
        """`rm` of an item: only one refused with nothing kept (a secret store handed in,
        `.env`: its bytes were never stored) may go; every other item is the record of
        what the memory was given, and stays."""
        if item.state != "refused" or item.size:
            raise Forbidden(
                f"{item.filename}: inbox items are kept (only one refused with nothing "
                "stored can be removed)"
            )
        self.memory.drop_inbox_item(item.id)
        self.items.pop(item.id, None)

    def _admitted(self, item: InboxItem) -> InboxItem:
        self.items[item.id] = item
        if item.state != "pending":
            log.info("inbox refused %s: %s", item.filename, item.report.strip())
        return item

    def _admit(
        self,
        owner: tuple[str, str],
        filename: str,
        data: bytes,
        redacted: tuple[Redaction, ...] | None,
    ) -> tuple[InboxItem, bytes]:
        """A file handed in as its item (pending, or refused with the reason) and the bytes
        to store (redacted; none for a secret store)."""
        self.memory.check_writable()
        item = InboxItem(
            self.memory.new_id(), owner, filename, self.clock(), "pending", "", len(data)
        )
        reason = secret_filename_reason(filename)
        suffix = _suffix(filename)
        why = ""
        if reason:
            data = b""  # a secret store is not kept at all
            why = reason
        elif suffix in MEDIA_SUFFIXES and not data:
            why = "the file is empty (0 bytes)"
        elif suffix in MEDIA_SUFFIXES and self.media_refusal(suffix):
            why = f"{self.media_refusal(suffix)}; the file is kept as it was"
        elif suffix not in TEXT_SUFFIXES and suffix not in MEDIA_SUFFIXES:
            why = (
                f"{suffix} files are not understood; the inbox takes markdown, text and "
                "JSONL transcripts"
            )
        if why:  # headed as every report is
            item.state, item.report = "refused", f"# {filename}\n\nstate: refused: {why}\n"
        path = f"{owner[0]}/{owner[1]}/.inbox/{filename}"
        if data and redacted is None:
            data = self.memory.redact_bytes(data, path)
        elif data and redacted:
            self.memory.record_redactions(path, redacted)
        item.size = len(data)
        return item, data

    def media_refusal(self, suffix: str) -> str | None:
        """Why media of this suffix are refused on this mount, or None when they are taken."""
        if suffix in MEDIA_NOT_YET:
            return MEDIA_NOT_YET[suffix]
        if self.media is None:
            return f"images, audio and video are not taken: {self.media_missing}"
        if suffix in VIDEO_SUFFIXES:
            return video_missing()
        return None

    def is_media(self, item: InboxItem) -> bool:
        return self.media is not None and self.media.handles(item.filename)

    def finish_media(self, item: InboxItem, data: bytes, analysis) -> None:
        """Trio thread: the gate's decision for an analysed media item, in its report."""
        assert self.media is not None
        try:
            state, lines, node = self.media.finish(
                item.owner, item.filename, data, item.created, analysis
            )
        except ContextFSError as exc:
            state, lines, node = (
                "refused",
                [f"# {item.filename}", "", f"state: refused: {exc.reason}", ""],
                None,
            )
        if node is not None:
            self.node_changed(node, True)
        lines.append(f"(analysed in {analysis.seconds * 1000:.0f} ms)")
        self._set_state(item, state, "\n".join(lines) + "\n")

    def item_data(self, item: InboxItem) -> bytes:
        return self.memory.inbox_data(item.id)

    def item_buffer(self, item: InboxItem) -> bytes | SpillBuffer:
        """Worker thread: an item's bytes for reads through the mount (a big one in a
        spill file: `Memory.inbox_buffer`)."""
        return self.memory.inbox_buffer(item.id, item.size)

    def parse(self, item: InboxItem) -> Parsed:
        """Worker thread: a text item read back and parsed (`parse_text`); its bytes are let
        go once decoded, so a big transcript is not held as bytes, text and turns at once."""
        return parse_text(self._item_text(item), item.filename)

    def _item_text(self, item: InboxItem) -> str:
        return decode_text(self.memory.inbox_data(item.id), item.filename)

    def inbox_file(self, owner: tuple[str, str], name: str) -> bytes | None:
        """The bytes of the latest file of this name closed in the owner's inbox (what a
        transcript's media path names), or None."""
        found = [
            i
            for i in self.items.values()
            if i.owner == owner and i.filename == name and i.size and i.state != "refused"
        ]
        return self.memory.inbox_data(max(found, key=lambda i: i.id).id) if found else None

    def pending(self) -> list[InboxItem]:
        return [i for i in self.items.values() if i.state == "pending"]

    def analyse(
        self,
        text: str,
        filename: str,
        today: str,
        owner: tuple[str, str] | None = None,
    ) -> tuple[Transcript, list[Candidate], str]:
        """Worker thread: parse and extract (the LLM may take seconds); facts other named
        speakers say about themselves land on their entity, not on the owner."""
        transcript = parse_transcript(text, filename)
        candidates, how, _notes = self.extract_turns(
            transcript.turns, today, self.owner_names(owner)
        )
        return transcript, candidates, how

    def owner_names(self, owner: tuple[str, str] | None) -> tuple[str | None, str | None]:
        """How the owner may be named in a conversation: its profile's `name`, its id."""
        profile = self.memory.types.get("profile")
        me = self.memory.live_node(owner, profile, "") if profile and owner else None
        return (_profile_name(me.l2) if me is not None else None, owner[1] if owner else None)

    def extract_turns(
        self,
        turns: Sequence[Turn],
        today: str,
        names: tuple[str | None, str | None] = (None, None),
    ) -> tuple[list[Candidate], str, list[str]]:
        """Worker thread (no store access): candidate memories of the turns, by the
        extractor (rules when it fails), facts of other named speakers on their entity;
        and the extractor's notes for the report (its chunks, a chunk left to the rules)."""
        # sessions are archived by ContextFS itself, never extracted
        types = {k: t for k, t in self.memory.types.items() if k != "session"}
        notes: list[str] = []
        try:
            candidates = self.extractor.extract(turns, types, today=today, notes=notes)
            how = type(self.extractor).__name__
        except ContextFSError as exc:  # the LLM endpoint failed: rules instead
            log.warning(
                "extraction by %s failed (%s); using rules", type(self.extractor).__name__, exc
            )
            candidates = self.rules.extract(turns, types, today=today)
            how = f"rules (the LLM failed: {exc})"
        owner = owner_speaker(turns, *names)
        candidates = attribute_speakers(candidates, turns, owner)
        if "profile" in types:
            candidates += owner_relations(candidates)
        candidates += speaker_hubs(candidates, turns, owner)
        return candidates, how, notes

    @contextlib.contextmanager
    def _filing(self) -> Iterator[None]:
        """One store transaction for a conversation's archive, memories and the item's
        state; the tree hears of the nodes (`node_changed`, `owner_created`) once it has
        committed, never of a node a rollback took back."""
        held: list[tuple[str, tuple]] = []
        self._held = held
        try:
            with self.memory.transaction():
                yield
        finally:
            self._held = None
        for name, args in held:
            getattr(self, name)(*args)

    def _hook(self, name: str, *args: object) -> None:
        if self._held is not None:
            self._held.append((name, args))
        else:
            getattr(self, name)(*args)

    def prepare(
        self,
        item: InboxItem,
        parsed: Parsed,
        index: int,
        notes: dict[tuple[int, str, int], str],
        names: tuple[str | None, str | None] = (None, None),
        key: str = "",
    ) -> Prepared:
        """Worker thread (no store access): conversation `index` of an item made ready to
        be filed: its candidate memories (`extract_turns`; relative dates resolve against
        the turns' times, else the conversation's start, else the day the item arrived)
        and its archive's documents (`notes`: what the gates did with the turns' media),
        with its key (`conversation_key`, computed when not given)."""
        conv = parsed.conversations[index]
        title = conversation_title(item, parsed, index)
        when = conv.started if conv.started is not None else item.created
        today = dt.datetime.fromtimestamp(when, dt.UTC).date().isoformat()
        candidates, how, said = self.extract_turns(conv.turns, today, names)
        documents = self.session_documents(
            turn_media.annotate(conv.turns, notes),
            title,
            source=f"inbox:{item.filename}",
            when=when,
        )
        self._vouch(documents)
        return Prepared(
            index,
            title,
            len(conv.turns),
            documents,
            tuple(candidates),
            how,
            tuple(said),
            key or conversation_key(conv.turns),
        )

    def _vouch(self, documents: Sequence[Document]) -> None:
        """Worker thread: each archive part's L2 as it will be saved (a new node of the
        session type) scanned for secrets here, so that its save on the event loop finds
        it vouched for and does not scan it again (`Redactor.vouch`): the scan of a 30 MB
        transcript's parts held every other request for seconds."""
        redactor, ctype = self.memory.redactor, self.memory.types.get("session")
        if redactor is None or ctype is None:
            return
        for doc in documents:
            redactor.vouch(render_document(ctype, strategy_for(ctype).start(ctype, doc)[0]))

    def already_filed(
        self, item: InboxItem, parsed: Parsed, index: int, key: str, paths: Sequence[str]
    ) -> Prepared:
        """Conversation `index` of an item, found archived before (`archived_as`): ready to
        be reported as such, with nothing to archive or route."""
        conv = parsed.conversations[index]
        title = conversation_title(item, parsed, index)
        return Prepared(index, title, len(conv.turns), [], (), "", (), key, tuple(paths))

    # ---- the content keys of archived conversations --------------------------------------

    def load_keys(self) -> None:
        """Any thread: the keys of the conversations the session archives hold (their
        `conversation:` provenance), read from the store once (the heads of the session
        nodes, not their texts); `archive` adds those it files after."""
        keys: dict[tuple[str, str, str], list[int]] = {}
        for n in self.memory.walk(types=("session",), live=None):
            for src in n.sources:
                if src.startswith(KEY_SOURCE):
                    key = (n.owner_kind, n.owner_id, src[len(KEY_SOURCE) :])
                    keys.setdefault(key, []).append(n.id)
        if self._keys is None:
            self._keys = keys

    @property
    def keys_read(self) -> bool:
        return self._keys is not None

    def archived_as(self, owner: tuple[str, str], key: str) -> list[str]:
        """The paths of the archive (all its parts) of the conversation with this key among
        the owner's sessions, a deleted one left out; [] when there is none."""
        if not key:
            return []
        if self._keys is None:
            self.load_keys()
        assert self._keys is not None
        ids = self._keys.get((*self._archive_owner(owner), key), [])
        found = [n for nid in ids if (n := self.memory.nodes.get(nid)) is not None]
        return [self.memory.node_path(n) for n in found if n.deleted_at is None]

    def _keyed(self, owner: tuple[str, str], key: str, ids: list[int]) -> None:
        """After the commit of an archive: its key is known (when the keys were read)."""
        if self._keys is not None:
            self._keys.setdefault((owner[0], owner[1], key), []).extend(ids)

    def _archive_owner(self, owner: tuple[str, str]) -> tuple[str, str]:
        """Whose sessions hold an owner's archives: agents' are kept under the default
        user."""
        ctype = self.memory.types.get("session")
        if ctype is not None and owner[0] != ctype.scope:
            return ("user", self.memory.default_owner)
        return owner

    def stored_filing(self, item: InboxItem, index: int) -> Filing | None:
        """The filing of conversation `index` of an item that a mount began and did not
        finish (its stored steps), or None."""
        rows = self.memory.inbox_steps(item.id, index)
        filing = Filing.resume(rows) if rows else None
        if filing is not None and filing.index != index:
            return None
        return filing

    def _file(
        self,
        item: InboxItem,
        ready: Prepared | Filing,
        media_lines: Sequence[str],
        write: Callable[[Filing, list[str]], tuple[str, str, str]],
        pending: Callable[[Filing], tuple[str, str] | None],
    ) -> Generator[None, None, None]:
        """Archive a prepared conversation and route its candidates, in steps: the first
        transaction stores the archive, and each routes memories for at most
        FILING_STEP_SECONDS, storing what it did (`Filing.step_data`, `inbox_steps`) and,
        when `pending(filing)` gives them, the item's progress and report. With the last
        memory, `write(filing, already)` gives the item's (state, progress, report), and
        the steps are deleted. Yields between two steps: the caller serves the mount
        meanwhile (`IntakeService._drive`). A conversation with few memories is one step,
        one transaction. `ready` a `Filing` (`stored_filing`): one a mount began, filed on
        from where its last step left it.

        An archive refused (too big, no session type: all its parts or none) is said in
        the report and the memories are routed all the same. A memory the store refuses
        takes its step's transaction with it (a store transaction cannot go on past a
        refused statement): that step's memories are routed again one a transaction, and
        the refused one is reported. A conversation archived before (the same key: a file
        handed in again after a crash, under another name) is neither archived nor routed
        again: `already` names its archive."""
        source = f"inbox:{item.filename}"
        documents: list[Document] | None = None
        already: list[str] = []
        if isinstance(ready, Filing):
            filing = ready
        else:
            already = list(ready.already) or self.archived_as(item.owner, ready.key)
            filing = Filing.of(ready, media_lines, route=not already)
            documents = None if already else ready.documents
        alone = 0  # candidates still to route one a transaction
        while True:
            step = filing.copy()  # what this step changes, taken once it committed
            most = 1 if alone else step.left
            routed = 0
            try:
                with self._filing():
                    if documents is not None:
                        # an archive of parts is a step of its own, its documents let go
                        # as each part is stored (a big conversation's text is not held
                        # twice); one part is kept until the step commits, for a step the
                        # store refuses for one of its memories is made again
                        parts = len(documents) > 1
                        step.archived, step.why = self._archive_of(
                            item, ready, documents if parts else list(documents)
                        )
                        most = 0 if parts else most
                    until = time.monotonic() + FILING_STEP_SECONDS
                    while routed < most and (not routed or time.monotonic() < until):
                        changed, refused = self.route_candidates(
                            item.owner, step.candidates[step.done : step.done + 1], source
                        )
                        step.changed += changed
                        step.refused += refused
                        step.done += 1
                        routed += 1
                    state, progress, report = item.state, item.progress, item.report
                    if step.left:
                        self.memory.add_inbox_step(
                            item.id, step.index, step.steps, step.step_data()
                        )
                        step.stored()
                        shown = pending(step)
                        if shown is not None:
                            progress, report = shown
                            self.memory.set_inbox_state(
                                item.id, item.owner, item.filename, state, report, progress
                            )
                    else:
                        if step.steps:
                            self.memory.clear_inbox_steps(item.id)
                        state, progress, report = write(step, already)
                        self.memory.set_inbox_state(
                            item.id, item.owner, item.filename, state, report, progress
                        )
            except _ArchiveRefused as exc:  # nothing of the step stored: again without it
                filing = dataclasses.replace(filing, archived=None, why=exc.reason)
                documents = None
                continue
            except (Exists, InvalidInput) as exc:
                if routed > 1:  # which memory it was: routed again one a transaction
                    log.warning("%s: filed again memory by memory (%s)", item.filename, exc.reason)
                    alone = routed
                    continue
                if routed == 0:
                    raise
                # the one memory of this step: refused, said in the report (stored with
                # the next step)
                c = filing.candidates[filing.done]
                filing = filing.copy()
                filing.done += 1
                filing.refused.append(f"{c.type} {c.fields}: {exc.reason}")
                alone = max(alone - 1, 0)
                continue
            item.state, item.report, item.progress = state, report, progress
            filing, documents = step, None
            alone = max(alone - routed, 0)
            if not filing.left:
                return
            yield

    def _archive_of(
        self, item: InboxItem, ready: Prepared | Filing, documents: list[Document]
    ) -> tuple[list[str], None]:
        """Inside a filing's first transaction: the conversation's archive stored, its
        paths; `_ArchiveRefused` when the store refuses it."""
        assert isinstance(ready, Prepared)
        try:
            nodes = self.archive(
                item.owner,
                (),
                ready.title,
                source=f"inbox:{item.filename}",
                when=item.created,
                documents=documents,
                key=ready.key,
            )
        except (StoreDamaged, StoreUnavailable):
            raise
        except ContextFSError as exc:
            raise _ArchiveRefused(exc.reason) from exc
        return [self.memory.node_path(n) for n in nodes], None

    def finish_item(
        self,
        item: InboxItem,
        parsed: Parsed,
        ready: Prepared | Filing,
        media_lines: Sequence[str] = (),
    ) -> Generator[None, None, None]:
        """Trio thread: archive a one-conversation item, route its candidates and write its
        report, in steps (`_file`; each yield a step committed, the next to come).
        `media_lines`: what the gates did with the turns' media. `ready` a stored
        `Filing`: the rest of one a stopped mount began."""
        kind = parsed.kind if parsed.kind in ("jsonl", "markdown", "text") else parsed.label

        def head(f: Filing) -> list[str]:
            lines = [
                f"# {item.filename}",
                "",
                f"state: done ({kind}, {f.turns} turns, extraction: {f.how})",
                "",
            ]
            if parsed.notes:
                lines.append(
                    "## Lines not understood (the other lines still count)"
                    if parsed.kind == "jsonl"
                    else "## Not understood (the rest still counts)"
                )
                lines += [f"- {n}" for n in parsed.notes] + [""]
            if f.media:
                lines += ["## Media in the turns", *f.media, ""]
            if f.notes:
                lines += ["## Extraction", *(f"- {n}" for n in f.notes), ""]
            return lines

        def write(f: Filing, already: list[str]) -> tuple[str, str, str]:
            lines = head(f)
            if already:
                lines[2] = f"state: done ({kind}, {f.turns} turns, archived before)"
                lines += [
                    "## Archived",
                    "- archived before with the same turns, not filed again:",
                    *(f"  - {p}" for p in already),
                    "",
                    "## Memories",
                    "- none: they were extracted when it was archived",
                ]
                return "done", "", "\n".join(lines) + "\n"
            if f.archived is not None:
                lines += ["## Archived", *(f"- {p}" for p in f.archived), ""]
            else:
                lines += ["## Archived", f"- not archived: {f.why}", ""]
            lines.append("## Memories")
            lines += [f"- {c}" for c in each_node_once(f.changed)] or ["- none found"]
            if f.refused:
                lines += ["", "## Candidates refused"] + [f"- {r}" for r in f.refused]
            return "done", "", "\n".join(lines) + "\n"

        def pending(f: Filing) -> tuple[str, str]:
            lines = head(f)
            lines[2] = f"state: processing ({f.done} of {len(f.candidates)} memories routed)"
            archived = f.archived if f.archived is not None else [f"not archived: {f.why}"]
            lines += ["## Archived", *(f"- {p}" for p in archived)]
            return "", "\n".join(lines) + "\n"

        yield from self._file(item, ready, media_lines, write, pending)

    # ---- exports: one conversation at a time ----------------------------------------------

    def export_progress(self, item: InboxItem, parsed: Parsed) -> Progress:
        """Where processing of an export starts: after the conversations a stopped mount
        already filed (the item's stored progress), else at the first. Its report says so."""
        progress = Progress.load(item.progress, len(parsed.conversations))
        if progress is None:  # stored by a version that read the file otherwise
            log.warning(
                "inbox %s: its stored progress does not fit the %d conversations it reads "
                "as now; starting over (those archived already are known by their key and "
                "not filed again)",
                item.filename,
                len(parsed.conversations),
            )
            progress = Progress(len(parsed.conversations))
        if progress.done:
            log.info(
                "inbox %s: resuming after %d of %d conversations",
                item.filename,
                progress.done,
                progress.total,
            )
        else:  # the report says how many there are before the first is done
            self._set_state(item, "pending", self.export_report(item, parsed, progress))
        self.processing[item.id] = (progress.done, progress.total)
        return progress

    def file_conversation(
        self,
        item: InboxItem,
        parsed: Parsed,
        progress: Progress,
        ready: Prepared | Filing,
        media_lines: Sequence[str] = (),
    ) -> Generator[None, None, Progress]:
        """Trio thread: conversation `progress.done` of an export (prepared, or the stored
        `Filing` of one a stopped mount began) archived as its own session, its candidates
        routed, and the item's progress and report stored, in steps (`_file`): the last
        one counts it done. Returns the new progress."""
        assert ready.index == progress.done
        after = progress

        def write(f: Filing, already: list[str]) -> tuple[str, str, str]:
            nonlocal after
            after = progress.copy()
            if already:
                more = f" (+{len(already) - 1} parts)" if len(already) > 1 else ""
                after.filed(f.turns, [], None, [], [], [], "", (), f"{f.title}: {already[0]}{more}")
            else:
                shown = None if f.archived is not None else f"{f.title}: {f.why}"
                said = [f"{f.title}: {n}" for n in f.notes]
                after.filed(
                    f.turns, f.archived or [], shown, f.changed, f.refused, f.media, f.how, said
                )
            if after.done == after.total:
                return "done", "", self.export_report(item, parsed, after)
            return "pending", after.dumps(), self.export_report(item, parsed, after)

        def pending(f: Filing) -> None:  # the export's progress and report stay as they are
            return None

        yield from self._file(item, ready, media_lines, write, pending)
        if after.done == after.total:
            self.processing.pop(item.id, None)
        else:
            self.processing[item.id] = (after.done, after.total)
        return after

    def export_report(self, item: InboxItem, parsed: Parsed, p: Progress) -> str:
        """The report of an export, while it is processed and once it is done: counts in
        full, the nodes listed compactly (the first ones, then how many more)."""
        if p.done < p.total:
            state = f"state: processing ({p.done} of {p.total} conversations)"
        else:
            state = (
                f"state: done ({parsed.label}, {p.total} conversations, {p.turns} turns, "
                f"extraction: {', '.join(p.how) or 'none'})"
            )
        lines = [f"# {item.filename}", "", state, ""]
        if parsed.notes:
            lines += ["## Not understood (the rest still counts)"]
            lines += [f"- {n}" for n in parsed.notes[:LIST_OTHER]]
            if len(parsed.notes) > LIST_OTHER:
                lines.append(f"- … and {len(parsed.notes) - LIST_OTHER} more")
            lines.append("")
        if p.media:
            lines += ["## Media in the turns", *p.media, ""]
        if p.notes:
            lines += ["## Extraction", *(f"- {n}" for n in p.notes)]
            if p.notes_n > len(p.notes):
                lines.append(f"- … and {p.notes_n - len(p.notes)} more")
            lines.append("")
        lines.append("## Archived")
        parts = f", as {p.archived_n} session nodes" if p.archived_n != p.sessions else ""
        lines.append(f"{p.sessions} of {p.done} conversations archived{parts}:")
        lines += [f"- {a}" for a in p.archived]
        if p.archived_n > len(p.archived):
            lines.append(f"- … and {p.archived_n - len(p.archived)} more")
        if p.not_archived_n:
            lines += [f"- not archived: {w}" for w in p.not_archived]
            if p.not_archived_n > len(p.not_archived):
                lines.append(f"- … and {p.not_archived_n - len(p.not_archived)} more not archived")
        if p.already_n:
            lines.append(
                f"{p.already_n} of {p.done} conversations archived before with the same turns, "
                "not filed again:"
            )
            lines += [f"- {a}" for a in p.already]
            if p.already_n > len(p.already):
                lines.append(f"- … and {p.already_n - len(p.already)} more")
        lines += ["", "## Memories"]
        if p.writes:
            lines.append(", ".join(f"{n} {verb}" for verb, n in sorted(p.writes.items())) + ":")
        lines += [f"- {verb} {path}" for path, verb in p.memories.items()] or ["- none found"]
        if p.memories_more:
            lines.append(f"- … and {p.memories_more} more writes to other nodes")
        if p.refused_n:
            lines += ["", "## Candidates refused", *(f"- {r}" for r in p.refused)]
            if p.refused_n > len(p.refused):
                lines.append(f"- … and {p.refused_n - len(p.refused)} more")
        return "\n".join(lines) + "\n"

    def claim(self, item: InboxItem) -> bool:
        """Take a pending item for this mount. False when another mount of a shared store
        is processing it, or finished it meanwhile: its state, report and progress are
        then taken as stored. A taken export goes on after the conversations filed before
        (its progress as stored: another mount may have stopped in the middle of it)."""
        if not self.memory.claim("inbox", item.id):
            return False
        row = self.memory.inbox_item(item.id)
        stored = InboxItem.from_row(row) if row is not None else None
        if stored is not None and stored.state == "pending":
            item.progress = stored.progress
            return True
        self.memory.release("inbox", item.id)
        self.processing.pop(item.id, None)
        if stored is None:
            self.items.pop(item.id, None)
        else:
            item.state, item.report, item.progress = stored.state, stored.report, stored.progress
        return False

    def release(self, item: InboxItem) -> None:
        self.memory.release("inbox", item.id)

    def fail_item(self, item: InboxItem, reason: str) -> None:
        self._set_state(item, "refused", f"refused: {reason}\n")

    def _set_state(self, item: InboxItem, state: str, report: str, progress: str = "") -> None:
        self.memory.set_inbox_state(item.id, item.owner, item.filename, state, report, progress)
        item.state, item.report, item.progress = state, report, progress
        if state != "pending":
            self.processing.pop(item.id, None)

    # ---- shared by both -------------------------------------------------------------------

    def archive(
        self,
        owner: tuple[str, str],
        turns: Sequence[Turn],
        title: str,
        *,
        source: str,
        when: float,
        summary: str = "",
        documents: list[Document] | None = None,
        key: str = "",
        overview: bool = False,
    ) -> list[Node]:
        """The raw record: every turn in L2, as a `session` node — or, for a conversation
        longer than a part (a quarter of the tier limit), as consecutive parts, nodes
        titled `<title> part <i>`, so nothing said is lost to the L2 size limit.
        `documents`: those `session_documents` made of the same arguments (in a worker
        thread, so the event loop only stores them), taken out of the list as each part is
        stored: a big conversation's text is not held as documents and as nodes at once.
        `key` (`conversation_key`) is stored with each part's provenance, in the same
        transaction (`archived_as` finds it)."""
        ctype = self.memory.types.get("session")
        if ctype is None:
            raise InvalidInput("no 'session' context type is loaded")
        owner = self._archive_owner(owner)
        if documents is None:
            documents = self.session_documents(
                turns, title, source=source, when=when, summary=summary, overview=overview
            )
        nodes = []
        with self.memory.transaction():  # all parts or none
            documents.reverse()
            while documents:
                res = self.memory.routing.route_document(
                    owner, ctype, documents.pop(), source=source
                )
                if key:
                    self._keep_key(res.node, key)
                nodes.append(res)
        for res in nodes:
            self._hook("node_changed", res.node, res.created)
        if key:
            self._hook("_keyed", owner, key, [res.node.id for res in nodes])
        return [res.node for res in nodes]

    def _keep_key(self, n: Node, key: str) -> None:
        """Inside the archive's transaction: `conversation:<key>` joins the provenance of a
        part just routed (`inbox:<file>`, which search follows from a memory to the turns
        it came from, stays as it is)."""
        self.memory.add_sources(n, [KEY_SOURCE + key])

    def session_documents(
        self,
        turns: Sequence[Turn],
        title: str,
        *,
        source: str,
        when: float,
        summary: str = "",
        overview: bool = False,
    ) -> list[Document]:
        """Any thread (pure): the documents of a conversation's archive, one a part, named
        and dated by when the conversation happened, else by `when` (it arrived). Each
        part's `summary` is of its own turns (with `overview`, their extractive L1 first,
        as a live session's parts have it), the first part's after `summary`, what came
        before the turns."""
        happened = episodes.started(turns)
        day = (
            happened.date()
            if happened is not None
            else dt.datetime.fromtimestamp(when, dt.UTC).date()
        ).isoformat()
        parts = split_turns(turns, max(self.memory.max_tier_size // 4, 4096))
        documents = []
        for i, part in enumerate(parts, 1):
            FOREGROUND.step_aside()  # a worker thread: a request in flight goes first
            lines = [summary] if summary and i == 1 else []
            if overview and part:
                ctype = self.memory.types.get("session")
                lines.append(summarize(ctype, render_turns(part))[1].strip())
            part_summary = "\n".join([*lines, episodes.summary(part)])
            if len(parts) > 1:
                part_summary += f"\nPart {i} of {len(parts)} of the conversation."
            fields: dict[str, object] = {
                "date": day,
                "title": title if len(parts) == 1 else f"{title} part {i}",
                "source": source,
                "turns": len(part),
                "summary": part_summary,
            }
            head = episodes.heading(part, dt.date.fromisoformat(day))
            body = f"# {head}\n\n{render_turns(part)}" if part else ""
            documents.append(Document(fields, body))
        return documents

    def route_candidates(
        self, owner: tuple[str, str], candidates: Sequence[Candidate], source: str
    ) -> tuple[list[str], list[str]]:
        changed, refused = [], []
        for c in candidates:
            ctype = self.memory.types.get(c.type)
            if ctype is None:
                refused.append(f"{c.type}: unknown type")
                continue
            target = (
                owner
                if ctype.scope == owner[0]
                else (
                    ("agent", self.default_agent)
                    if ctype.scope == "agent"
                    else ("user", self.memory.default_owner)
                )
            )
            try:
                if target not in self.memory.owners:
                    self.memory.create_owner(*target)
                    self._hook("owner_created", target)
                fields = validate_candidate(ctype, c.fields, where=c.type)
                if c.retracts and set(fields) <= set(ctype.key_fields) and not c.body.strip():
                    # only a value taken back: nothing to take it from, no node made
                    name = "" if ctype.singleton else ctype.node_name(fields)
                    if self.memory.live_node(target, ctype, name) is None:
                        continue
                res = self.memory.routing.route_document(
                    target,
                    ctype,
                    Document(dict(fields), c.body),
                    source=f"{source}#{','.join(c.turns)}" if c.turns else source,
                    retracts=c.retracts,
                )
            except ContextFSError as exc:
                refused.append(f"{c.type} {c.fields}: {exc.reason}")
                continue
            path = self.memory.node_path(res.node)
            verb = "created" if res.created else ("changed" if res.changed else "unchanged")
            if res.kept_person_text:  # SPEC §5: never silently over a person's text
                path += " (kept your text; added the extracted facts below it)"
            elif res.superseded:  # a newer statement replaced an older one, or took it back
                path += " (" + "; ".join(f"{f}: {a} → {b}" if b else f"{f}: {a} taken back"
                                         for f, a, b in res.superseded) + ")"  # fmt: skip
            changed.append(f"{verb} {path}")
            self._hook("node_changed", res.node, res.created)
        return changed, refused

    def follow(self, follower: IntakeFollower) -> None:
        """Tell `follower` (the tree) of the nodes and owners the intake made or changed,
        once they are committed, so they show up in the mount."""
        self._followers.append(follower)

    def node_changed(self, n: Node, created: bool) -> None:
        for f in self._followers:
            f.routed(n, created)

    def owner_created(self, owner: tuple[str, str]) -> None:
        for f in self._followers:
            f.add_owner(owner)

    # ---- sessions (SPEC §6) ---------------------------------------------------------------

    def start_session(self, owner: tuple[str, str], sid: str) -> Session:
        key = (owner[0], owner[1], sid)
        if key in self.sessions:
            raise Exists(f"session {sid} exists")
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", sid):
            raise InvalidInput(
                "a session id uses letters, digits and . _ - (start with a letter or digit)"
            )
        s = Session(owner, sid, self.clock())
        self.memory.put_session(owner, sid, s.created, "", 0, "", created_now=True)
        self.sessions[key] = s
        return s

    def record(self, s: Session, appended: bytes) -> int:
        """Bytes appended to transcript.jsonl: stored (redacted); returns pending turns.
        What it costs is the append's: the lines appended are checked, redacted, stored
        (`Memory.append_session`) and parsed, not the transcript before them."""
        text = decode_text(appended, "transcript.jsonl")
        # A line may come in several appends: its stored start (already redacted) is
        # redacted again with the new bytes, so a keyword and its value, or the rest of a
        # token glued to the marker of its first part, are seen together.
        tail = s.tail()  # a line begun by an earlier append
        done = (tail + text).rpartition("\n")[0]  # its lines now whole
        path = f"{s.owner[0]}/{s.owner[1]}/.sessions/{s.id}/transcript.jsonl"
        if done.strip():
            bad = parse_transcript(done + "\n", "t.jsonl").errors
            if tail and bad and bad[0][0] == 1:
                # the line begun earlier (a writer that died midway) is not this append's
                # to answer for, or every append after it would be refused: it is taken
                # and said, its bytes kept
                line = done.split("\n", 1)[0]
                self.memory.refuse(
                    path,
                    InvalidInput(f"a line begun by an earlier append is not a turn "
                                 f"({bad[0][1]}); kept here, not in the session"),
                    line.encode(),
                )  # fmt: skip
                bad = bad[1:]
            if bad:  # refused whole, its bytes kept: a session has no report to list it in
                line_no, reason = bad[0]
                raise InvalidInput(
                    f"transcript.jsonl: appended line {line_no} is not a turn ({reason}); "
                    "nothing of this append was recorded"
                )
        text = self.memory.redact(tail + text, f"{s.owner[0]}/{s.owner[1]}/.sessions/{s.id}")
        if text.startswith(tail):  # the line begun earlier stays as stored
            self._append(s, text[len(tail) :])
        else:  # a secret across the two appends: the begun line is stored again, redacted
            whole = s.transcript
            self._put(s, transcript=whole[: len(whole) - len(tail)] + text)
        pending = len(self.session_turns(s)) - s.processed
        if pending >= self.extract_every:
            self.wake()
        return pending

    def session_turns(self, s: Session) -> tuple[Turn, ...]:
        """The turns of the live transcript, as `parse_transcript` reads it whole; each
        whole line is parsed once (kept in the session), a line still being written each
        time."""
        whole = s.fresh.rfind("\n") + 1
        if whole:
            new = s.fresh[:whole] if s.lines_parsed else s.fresh[:whole].removeprefix("\ufeff")
            s.turns_parsed += parse_jsonl_from(new, s.lines_parsed + 1).turns
            s.lines_parsed += len(new.splitlines())
            s.fresh = s.fresh[whole:]
        turns = tuple(s.turns_parsed)
        tail = s.fresh if s.lines_parsed else s.fresh.removeprefix("\ufeff")
        if tail.strip():
            turns += parse_jsonl_from(tail, s.lines_parsed + 1).turns
        return turns

    def extract_session(self, s: Session, candidates: Sequence[Candidate], upto: int) -> list[str]:
        if s.ended:  # its end archived and extracted every turn
            return []
        changed, _refused = self.route_candidates(s.owner, candidates, f"session:{s.id}")
        s.touched += changed
        self._put(s, processed=max(s.processed, upto))
        return changed

    def compact(self, s: Session) -> None:
        """Shorten the live transcript into a summary (after extracting what is pending).
        The turns compacted away are archived at once, as the next part of the session's
        archive, in the transaction that shortens the transcript: the live file gets
        short, the record keeps every turn. A line still being written (its end not
        appended yet) stays in the transcript, to be completed."""
        keep = s.transcript.rfind("\n") + 1
        tail = s.transcript[keep:]
        if tail and parse_transcript(tail, "t.jsonl").turns:
            tail = ""  # a whole turn without its newline: compacted with the others
        turns = self.session_turns(s)
        if not turns:
            return
        l1 = summarize(self.memory.types.get("session"), render_turns(turns))[1].strip()
        summary = (s.summary + "\n" + l1).strip() if s.summary else l1
        saved = (s.transcript, s.processed, s.summary, s.appends)
        try:
            with self._filing():
                self._archive_part(s, turns, self._unarchived(s))
                self._put(s, transcript=tail, processed=0, summary=summary)
        except BaseException:  # rolled back: the session as the store still has it
            s.reset(saved[0])
            s.processed, s.summary, s.appends = saved[1:]
            raise

    def _unarchived(self, s: Session) -> str:
        """What the first part archived next begins its summary with: the summary of
        turns a compaction made before compactions archived them (a session compacted by
        an older version), which is all there is of those; else nothing."""
        if s.summary and not self.archived_as(s.owner, self._session_key(s)):
            return s.summary
        return ""

    def _session_key(self, s: Session) -> str:
        """The key the parts of this live session's archive share (`archived_as`): the
        id alone would gather a later session that reuses it."""
        return f"session:{s.id}@{s.created:.6f}"

    def _archive_part(self, s: Session, turns: Sequence[Turn], summary: str) -> list[Node]:
        """Archive `turns` as the session's next part: titled by the session id, the
        second and later ones `<id> part <n>`; each node (turns longer than a part are
        several) summarised by its own turns, the first after `summary`."""
        done = len(self.archived_as(s.owner, self._session_key(s)))
        return self.archive(
            s.owner,
            turn_media.annotate(turns, self.session_media_notes(s, turns)),
            s.id if not done else f"{s.id} part {done + 1}",
            source=f"session:{s.id}",
            when=s.created,
            summary=summary,
            key=self._session_key(s),
            overview=True,
        )

    def _put(
        self,
        s: Session,
        *,
        transcript: str | None = None,
        processed: int | None = None,
        summary: str | None = None,
    ) -> None:
        """Store the session with these values; the object follows once it is stored. An
        ended session is not stored again (a writer closing after the end): refused.
        Without a transcript only the extraction's progress and the summary are stored;
        with one, it is stored whole (its appends replaced)."""
        if s.ended:
            raise NotFound(f".sessions/{s.id} has ended: nothing more is recorded in it")
        processed = s.processed if processed is None else processed
        summary = s.summary if summary is None else summary
        if transcript is None:
            self.memory.set_session_state(s.owner, s.id, processed, summary)
        else:
            self.memory.put_session(s.owner, s.id, s.created, transcript, processed, summary)
            s.reset(transcript)
            s.appends = 0
        s.processed, s.summary = processed, summary

    def _append(self, s: Session, text: str) -> None:
        """`text` appended to the session's stored transcript, as its next append."""
        if s.ended:
            raise NotFound(f".sessions/{s.id} has ended: nothing more is recorded in it")
        if not text:
            return
        self.memory.append_session(s.owner, s.id, s.appends, text)
        s.appends += 1
        s.extend(text)

    def end_session(self, s: Session) -> Node | None:
        """rmdir / `end`: archive the session (summary + remaining turns) as memory; the
        last part of its archive, or None when it has none (or it ended already: two ends
        at once, through the root's view and the owner's)."""
        if s.ended:
            return None
        turns = self.session_turns(s)
        node = None
        if turns:  # each part is summarised by its own turns
            node = self._archive_part(s, turns, self._unarchived(s))[-1]
        elif s.summary and not self.archived_as(s.owner, self._session_key(s)):
            # compacted before compaction archived its turns: the summary is all there is
            node = self._archive_part(s, (), s.summary)[0]
        self.memory.delete_session(s.owner, s.id)
        s.ended = True
        self.sessions.pop((s.owner[0], s.owner[1], s.id), None)
        return node

    def session_media_notes(
        self, s: Session, turns: Sequence[Turn]
    ) -> dict[tuple[int, str, int], str]:
        """What became of each medium of the session's turns: noted when the service took
        it; after a restart, found again by its bytes' hash among the owner's media."""
        notes = dict(s.media_notes)
        missing = [t for t in turns if any((t.line, t.ref, m.index) not in notes for m in t.media)]
        if not missing or self.media is None:
            return notes
        owner = s.owner if s.owner[0] == "user" else ("user", self.memory.default_owner)
        for tm in turn_media.collect(missing, s.id, None):
            key = (tm.turn.line, tm.turn.ref, tm.ref.index)
            if key in notes or not tm.data:
                continue
            digest = xxhash.xxh3_128_hexdigest(tm.data)
            for kind in ("image", "audio", "video"):
                same = self.media.duplicate_of(owner, kind, digest)
                if same is not None:
                    notes[key] = f"{kind} kept as {self.memory.node_path(same)}"
                    break
        return notes

    def context_for(
        self, s: Session, budget: int, search: Callable[[str, str], list] | None
    ) -> str:
        """context.md: profile, recent session summaries, then memories relevant to the
        latest turns, highest priority first, within `budget` tokens (4 chars each)."""
        owner = s.owner
        parts: list[str] = [f"# Context for session {s.id}\n"]
        profile = (
            self.memory.live_node(owner, self.memory.types["profile"], "")
            if "profile" in self.memory.types and owner[0] == "user"
            else None
        )
        if profile is not None and profile.l2.strip():
            parts.append("## Profile\n\n" + (profile.l1 or profile.l0).strip() + "\n")
        # a worker thread (the open of context.md): streamed from the store (memory.heads)
        recent = sorted(
            self.memory.walk(owner=owner, types=("session",)),
            key=lambda n: n.created,
            reverse=True,
        )[:5]
        if recent:
            parts.append(
                "## Recent sessions\n\n"
                + "".join(f"- {self.memory.node_path(n)}: {n.l0.strip()}\n" for n in recent)
            )
        turns = self.session_turns(s)
        latest = " ".join(t.content for t in turns[-3:] if t.role == "user")[-500:]
        if latest and search is not None:
            hits = [
                h
                for h in search(latest, f"{owner[0]}/{owner[1]}")
                if h.confidence is None or h.confidence > 0  # nothing unrelated
            ]
            # the typed memories first (archives of long conversations outnumber them
            # among the hits), then what was said in earlier sessions: their best turns
            typed = [h for h in hits if h.node.type != "session"][:CONTEXT_MEMORIES]
            said = [
                f"- {h.path} ({p.passage.label}): "
                f"{' '.join(p.passage.text.split())[:CONTEXT_PASSAGE_CHARS]}\n"
                for h in hits
                if h.node.type == "session"
                for p in h.passages[:1]
            ][:CONTEXT_PASSAGES]
            if typed or said:
                parts.append(
                    "## Relevant memories\n\n"
                    + "".join(f"- {h.path}: {h.node.l0.strip()}\n" for h in typed)
                    + "".join(said)
                )
        out = ""
        for p in parts:  # highest priority first; stop before the budget is crossed
            if estimate_tokens(out + p + "\n") > budget:
                break
            out += p + "\n"
        return out or parts[0][: budget * 4]

    def status_lines(self) -> list[str]:
        states: dict[str, int] = {}
        for i in self.items.values():
            states[i.state] = states.get(i.state, 0) + 1
        busy = [
            f"inbox: processing {item.filename} ({done} of {total} conversations)"
            for iid, (done, total) in self.processing.items()
            if (item := self.items.get(iid)) is not None and item.state == "pending"
        ]
        return [
            "inbox: " + (", ".join(f"{k}={v}" for k, v in sorted(states.items())) or "empty"),
            *busy,
            f"sessions: {len(self.sessions)} live",
            self.media.status_line()
            if self.media is not None
            else f"media: refused ({self.media_missing})",
        ]


class IntakeService(Service):
    """Processes pending inbox items and session extractions in the background.

    Woken by the change feed when an inbox item is stored, and by `Intake.record` when a
    session has enough new turns. Its followers are told (with no argument) after each
    item or extraction it finished, and as an export's report moves; what they stored is
    published by the change feed as well."""

    def __init__(self, intake: Intake) -> None:
        super().__init__()
        self.intake = intake
        intake.wake = self.wake
        self.elsewhere = False  # a pending item was left to another mount last step
        # when a report's progress was last shown, and live sessions last looked at (trio
        # time), during a long filing (`_now_and_then`)
        self._shown = self._sessions_checked = -float("inf")
        self.unsubscribe = intake.memory.transactions.subscribe(self._committed)

    def _committed(self, changes: Sequence[Change]) -> None:
        if any(c.kind == "inbox" and c.op == "created" for c in changes):
            self.wake()

    def _changed(self) -> None:
        self._tell()

    async def run(self) -> None:
        while not self.stopping:
            self._rearm()
            try:
                worked = await self.step()
            except Exception:  # noqa: BLE001 - one bad item must not stop the service
                log.exception("intake step failed")
                worked = False
            if not worked:
                # an item another mount holds is asked for again each second: its report
                # follows that mount's, and this mount takes it over if that one dies
                await self._idle(1 if self.elsewhere else 30)

    async def step(self) -> bool:
        intake = self.intake
        self.elsewhere = False
        for item in intake.pending():
            if not intake.claim(item):  # another mount of a shared store has it
                if item.state == "pending":
                    self.elsewhere = True
                else:  # it finished it: its report is shown here too
                    self._changed()
                continue
            try:
                return await self._process(item)
            finally:
                intake.release(item)
        return await self._extract_sessions()

    async def _process(self, item: InboxItem) -> bool:
        """One pending item, claimed: processed, its report written."""
        intake = self.intake
        await self._after_models()  # an import waits for the model (`Foreground.loading`)
        # a worker thread reads what is committed: an export of 100 MB takes seconds
        if intake.is_media(item):
            data = await trio.to_thread.run_sync(intake.item_data, item, abandon_on_cancel=True)
            assert intake.media is not None
            media = intake.media
            analysis = await trio.to_thread.run_sync(media.analyse, data, item.filename)
            if media.needs_words(item.owner, analysis, item.created):  # a caption, speech
                analysis = await trio.to_thread.run_sync(
                    media.add_words, analysis, data, item.filename
                )
            intake.finish_media(item, data, analysis)
            self._changed()
            return True
        try:
            # a read and a pure parse: an unmount need not wait for a big export's
            parsed = await trio.to_thread.run_sync(intake.parse, item, abandon_on_cancel=True)
        except ContextFSError as exc:
            intake.fail_item(item, exc.reason)
            self._changed()
            return True
        if parsed.export:
            await self.process_export(item, parsed)
        else:
            resumed = intake.stored_filing(item, 0)
            ready: Prepared | Filing
            media_lines: list[str] = []
            if resumed is None:
                ready, media_lines = await self._prepare(item, parsed, 0)
            else:
                log.info(
                    "inbox %s: resuming its filing after %d of %d memories",
                    item.filename,
                    resumed.done,
                    len(resumed.candidates),
                )
                ready = resumed
            parsed = parsed.without_turns()
            await self._yield()
            if not await self._drive(intake.finish_item(item, parsed, ready, media_lines)):
                log.info("inbox %s: stopped part way; the next mount goes on", item.filename)
        self._changed()
        return True

    async def _drive(self, steps: Generator[None, None, Any]) -> Any:
        """Run the steps of a filing (`Intake._file`), serving the mount between two
        (`_between`). Returns what the steps return (True when they return nothing); False
        when the mount is being unmounted: what is filed is stored with how far it got, and
        the next mount goes on from there."""
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return True if done.value is None else done.value
            if self.stopping:
                steps.close()
                return False
            await self._between()

    async def _between(self) -> None:
        """Between two steps of a filing: the requests that waited for the step go first,
        a request in flight that someone waits on (an fsync, a question: `FOREGROUND`)
        ends, and a writer's next request, which follows its last at once (a mkdir, then
        the create, the write, the fsync of its file), is not kept waiting for a whole
        step each time: the next step waits for a pause of STEP_QUIET_SECONDS in the
        mount's requests (`Foreground.quiet`), at most YIELD_MOST."""
        # a timer, not a bare checkpoint: a request that arrived during the step is read
        # and begun (`Foreground.request`) before `quiet` looks, whatever order the
        # scheduler runs the tasks woken together in (else the next step could start first
        # and the request wait for it too)
        await trio.sleep(0.001)
        await self._yield()
        await FOREGROUND.quiet(STEP_QUIET_SECONDS, self.YIELD_MOST)
        await self._now_and_then()

    async def _now_and_then(self) -> None:
        """During a long filing: the reports show how far it got (at most twice a second),
        and a live session with turns waiting is extracted (each second at most)."""
        now = trio.current_time()
        if now - self._shown >= 0.5:
            self._changed()
            self._shown = now
        if now - self._sessions_checked >= 1.0:
            await self._extract_sessions()
            self._sessions_checked = trio.current_time()

    async def _extract_sessions(self) -> bool:
        """Extract the turns of one live session that has enough of them pending."""
        intake = self.intake
        for s in list(intake.sessions.values()):
            turns = intake.session_turns(s)
            if len(turns) - s.processed >= intake.extract_every and not s.extracting:
                await self.extract(s)
                return True
        return False

    async def _prepare(
        self, item: InboxItem, parsed: Parsed, index: int
    ) -> tuple[Prepared, list[str]]:
        """Conversation `index` of an item through the media gates (the media its turns
        carry), then extracted and its archive made in a worker thread that touches no
        store: an unmount does not wait for it (nor for an LLM's answer); what was not
        filed is done again by the next mount. Returns it and the report's media lines.
        A conversation archived before (its key, `Intake.archived_as`) is not extracted."""
        intake = self.intake
        conv = parsed.conversations[index]
        key = await trio.to_thread.run_sync(conversation_key, conv.turns, abandon_on_cancel=True)
        if not intake.keys_read:  # read once, off the event loop
            await trio.to_thread.run_sync(intake.load_keys)
        same = intake.archived_as(item.owner, key)
        if same:
            return intake.already_filed(item, parsed, index, key, same), []
        notes, media_lines = await self.turn_media(
            item.owner,
            conv.turns,
            item.filename,
            f"inbox:{item.filename}",
            functools.partial(intake.inbox_file, item.owner),
        )
        ready = await trio.to_thread.run_sync(
            intake.prepare,
            item,
            parsed,
            index,
            notes,
            intake.owner_names(item.owner),
            key,
            abandon_on_cancel=True,
        )
        return ready, media_lines

    async def process_export(self, item: InboxItem, parsed: Parsed) -> None:
        """The conversations of an export one at a time: each extracted in a worker thread,
        then archived and routed in its own transaction with the item's progress, so other
        requests are served in between, an unmount stops it between two conversations, and
        the next mount goes on after the last one filed. The report is refreshed at most
        twice a second."""
        intake = self.intake
        progress = intake.export_progress(item, parsed)
        self._changed()
        self._shown = self._sessions_checked = trio.current_time()
        first = True
        while progress.done < progress.total:
            if self.stopping:
                log.info(
                    "inbox %s: stopped after %d of %d conversations; the next mount goes on",
                    item.filename,
                    progress.done,
                    progress.total,
                )
                return
            await self._after_models()  # a remount's model load goes first
            await self._yield()  # an fsync in flight goes first (`FOREGROUND`)
            # a stopped mount may have left the first conversation part way filed
            resumed = intake.stored_filing(item, progress.done) if first else None
            first = False
            ready: Prepared | Filing
            media_lines: list[str] = []
            if resumed is None:
                ready, media_lines = await self._prepare(item, parsed, progress.done)
            else:
                ready = resumed
            await self._yield()
            after = await self._drive(
                intake.file_conversation(item, parsed, progress, ready, media_lines)
            )
            if after is False:  # stopped: the loop says so at its next turn
                continue
            progress = after
            await self._now_and_then()
            await trio.sleep(0)  # a user's request (an fsync, a read) goes first

    async def turn_media(
        self,
        owner: tuple[str, str],
        turns: Sequence[Turn],
        conversation: str,
        source: str,
        read_inbox: Callable[[str], bytes | None] | None,
    ) -> tuple[dict[tuple[int, str, int], str], list[str]]:
        """The media the turns carry or point at, through the same gates as the inbox's
        (analysis in a worker thread), in the conversation's own stream; each kept one a
        node whose source is `<source>#<turn>`. Returns the notes for the turns' text and
        the report's lines."""
        from contextfs.conversations.media import Origin

        intake = self.intake
        notes: dict[tuple[int, str, int], str] = {}
        lines: list[str] = []
        for tm in turn_media.collect(turns, conversation, read_inbox):
            key = (tm.turn.line, tm.turn.ref, tm.ref.index)
            where = f"turn {tm.turn.ref} {tm.ref.placeholder}"
            if tm.error or intake.media is None:
                why = tm.error or (intake.media_missing or "media are not taken")
                notes[key] = f"not taken: {why}"
                lines.append(f"- {where}: not taken: {why}")
                continue
            refusal = intake.media_refusal(turn_media.suffix_of(tm.filename))
            if refusal:
                notes[key] = f"not taken: {refusal}"
                lines.append(f"- {where}: not taken: {refusal}")
                continue
            analysis = await trio.to_thread.run_sync(intake.media.analyse, tm.data, tm.filename)
            origin = Origin(
                f"{source}#{tm.turn.ref}",
                source,
                f"Carried by turn {tm.turn.ref} ({tm.turn.role}"
                + (f", {tm.turn.timestamp}" if tm.turn.timestamp else "")
                + f") of the conversation {source} as {tm.ref.placeholder}.",
            )
            try:
                _state, rlines, node = intake.media.finish(
                    owner, tm.filename, tm.data, intake.clock(), analysis, origin
                )
            except ContextFSError as exc:
                _state, rlines, node = "refused", [f"state: refused: {exc.reason}"], None
            if node is not None:
                intake.node_changed(node, True)
            state_line = next((x for x in rlines if x.startswith("state: ")), "state: ?")
            notes[key] = turn_media.note_of(state_line)
            lines.append(f"- {where} ({tm.filename}): {notes[key]}")
            lines += [f"  {x}" for x in rlines if x.startswith("- ")]
        return notes, lines

    async def extract(self, s: Session) -> list[str]:
        intake = self.intake
        with FOREGROUND.awaiting():  # a compact or an end waits for the one under way
            while s.extracting:
                await trio.sleep(0.05)
        if s.ended:
            return []
        turns = intake.session_turns(s)
        new = turns[s.processed :]
        if not new:
            return []
        s.extracting = True
        try:
            notes, _lines = await self.turn_media(s.owner, new, s.id, f"session:{s.id}", None)
            s.media_notes.update(notes)
            today = dt.datetime.fromtimestamp(intake.clock(), dt.UTC).date().isoformat()
            names = intake.owner_names(s.owner)  # (read here: the thread reads no store)
            # the turns as parsed, tool calls and results with them; an unmount does not
            # wait for the extractor (nor an LLM's answer): the turns stay pending
            candidates, _how, _notes = await trio.to_thread.run_sync(
                intake.extract_turns, new, today, names, abandon_on_cancel=True
            )
            changed = intake.extract_session(s, candidates, len(turns))
        finally:
            s.extracting = False
        self._changed()
        return changed
