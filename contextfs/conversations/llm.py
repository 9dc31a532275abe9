"""The LLM client: extraction and L0/L1 summaries through any OpenAI-compatible chat endpoint.

`LLMExtractor` sends a transcript with each context type's description, fields and
`extraction` instructions, and keeps only the items that validate against their type.
`LLMSummarizer` writes L0/L1 held to the type's limits. Every request fits the model's
context window (`context_tokens`, measured with `memory.tokens.estimate_tokens_upper`):
a long transcript goes in chunks cut on turn boundaries with a few turns of overlap, whose
candidates are merged; a long L2 is condensed part by part first (map, then reduce).
Transport failures raise `LLMUnavailable`, so callers fall back to the rule-based versions
(the extractor falls back per chunk when it was given a rules extractor). No store, no FUSE.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from contextfs.conversations.extract import (
    Candidate,
    Extractor,
    short_text,
    validate_candidate,
)
from contextfs.conversations.transcript import Turn, tool_content
from contextfs.ctxtypes import ContextType
from contextfs.errors import InvalidInput, LLMUnavailable
from contextfs.index.endpoint import api_key
from contextfs.memory.tokens import estimate_tokens_upper

log = logging.getLogger(__name__)

_SYSTEM_PROMPT = """\
You extract long-term memories from a conversation between a user and an AI agent.
Return only a JSON object {"memories": [...]}; each item is
{"type": <type name>, "fields": {<field>: <value>}, "body": <markdown>,
 "turns": [<turn refs in square brackets that support it>], "confidence": <0..1>}.
Rules:
- Use only the types below and only their declared fields; always give the key fields.
- User-scope types hold facts about the user, taken only from what the user said
  (never from what the assistant or a tool said). Agent-scope types hold what the
  agent learned while working (problems solved, patterns, procedures, tools used).
- Skip questions, hypotheticals, jokes and small talk. Prefer fewer, certain memories.
- Dates are YYYY-MM-DD; resolve relative dates against the turn timestamps{today}.
- If nothing is worth remembering, return {"memories": []}.

Types:
"""


def _describe_types(types: Mapping[str, ContextType]) -> str:
    out = []
    for ctype in types.values():
        keys = ", ".join(ctype.key_fields) or "none (one node per owner)"
        lines = [f"## {ctype.name} (scope {ctype.scope}, key fields: {keys})",
                 ctype.description.strip()]  # fmt: skip
        for spec in ctype.fields:
            req = ", required" if spec.required or spec.name in ctype.key_fields else ""
            lines.append(f"- {spec.name} ({spec.type}{req}): {spec.description}".rstrip(": "))
        if ctype.extraction.strip():
            lines.append("Instructions: " + " ".join(ctype.extraction.split()))
        out.append("\n".join(lines))
    return "\n\n".join(out)


DEFAULT_CONTEXT_TOKENS = 16_000  # config `llm_context_tokens`
_FRAME_TOKENS = 32  # a request's roles, separators and chat template, generously
_HEADER_TOKENS = 64  # the line that says which part of the conversation a chunk is
_MIN_ROOM = 256  # a window that leaves less for the text is refused as too small
_TOOL_TEXT_LIMIT = 4000  # characters of a tool event's text (its bulk is rarely memory)
_GIVE_UP_AFTER = 3  # failed chunks in a row, after one succeeded: rules for the rest


def request_tokens(system: str, user: str, max_tokens: int) -> int:
    """What a chat request takes of the context window, counted from above: the system and
    user messages, the chat framing and the room kept for the answer."""
    return estimate_tokens_upper(system) + estimate_tokens_upper(user) + _FRAME_TOKENS + max_tokens


def _turn_head(turn: Turn) -> str:
    who = turn.role + (f" ({turn.name})" if turn.name else "")
    when = f" @ {turn.timestamp}" if turn.timestamp else ""
    return f"[{turn.ref}] {who}{when}: "


def _turn_text(turn: Turn) -> str:
    text = turn.content
    if turn.role == "tool" and (turn.tool_input is not None or turn.tool_output is not None):
        text = tool_content(turn.name, turn.tool_input, turn.tool_output)
        if turn.ok is False:
            text += " [failed]"
        if len(text) > _TOOL_TEXT_LIMIT:
            text = text[:_TOOL_TEXT_LIMIT] + " […]"
    return text


def split_text(text: str, budget: int) -> list[str]:
    """`text` in pieces of at most `budget` tokens (upper estimate), cut at a space in the
    second half of a piece when there is one."""
    budget = max(1, budget)
    out: list[str] = []
    while text:
        n = min(len(text), budget * 3)
        while n > 1 and (est := estimate_tokens_upper(text[:n])) > budget:
            n = max(1, min(n - 1, n * budget // est))
        if n < len(text):
            space = text.rfind(" ", n // 2, n)
            if space > 0:
                n = space
        out.append(text[:n])
        text = text[n:].lstrip(" ")
    return out


@dataclass(frozen=True, slots=True)
class _Unit:
    """One line of a chunk: a turn, or a piece of a turn longer than a chunk."""

    turn: int  # index into the transcript's turns
    text: str
    cost: int  # tokens, with its newline


@dataclass(frozen=True, slots=True)
class Chunk:
    """Consecutive turns (maybe pieces of them) that fit one request."""

    units: tuple[_Unit, ...]
    turns: tuple[Turn, ...]  # the turns the units come from, once each, in order

    @property
    def text(self) -> str:
        return "\n".join(u.text for u in self.units)

    def span(self) -> str:
        first, last = self.turns[0].ref, self.turns[-1].ref
        return f"turn {first}" if first == last else f"turns {first} to {last}"


def chunk_turns(turns: Sequence[Turn], budget: int, overlap: int = 3) -> list[Chunk]:
    """The turns cut into chunks of at most `budget` tokens on turn boundaries, each chunk
    after the first repeating the last `overlap` turns of the one before (never more than
    half a chunk), so that a fact stated across a boundary is seen whole once. A turn
    longer than a chunk is cut into pieces, each headed by its ref."""
    units: list[_Unit] = []
    for i, turn in enumerate(turns):
        head, text = _turn_head(turn), _turn_text(turn)
        line = head + text
        cost = estimate_tokens_upper(line) + 1
        if cost <= budget:
            units.append(_Unit(i, line, cost))
            continue
        cont = f"[{turn.ref}] (continued): "
        room = budget - 1 - max(estimate_tokens_upper(head), estimate_tokens_upper(cont))
        for k, piece in enumerate(split_text(text, room)):
            line = (head if k == 0 else cont) + piece
            units.append(_Unit(i, line, estimate_tokens_upper(line) + 1))
    chunks: list[Chunk] = []
    start = 0
    while start < len(units):
        end, used = start, 0
        while end < len(units) and (end == start or used + units[end].cost <= budget):
            used += units[end].cost
            end += 1
        picked = units[start:end]
        chunks.append(Chunk(tuple(picked), tuple(turns[i] for i in dict.fromkeys(
            u.turn for u in picked))))  # fmt: skip
        if end >= len(units):
            break
        nxt, repeated = end, 0
        while (
            nxt - 1 > start
            and len({u.turn for u in units[nxt - 1 : end]}) <= overlap
            and repeated + units[nxt - 1].cost <= budget // 2
        ):
            nxt -= 1
            repeated += units[nxt].cost
        start = nxt
    return chunks


def _words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def _near_same(a: str, b: str) -> bool:
    """Two bodies that say the same: one's words within the other's, or 80% shared."""
    wa, wb = _words(a), _words(b)
    if not wa or not wb:
        return not wa and not wb
    return wa <= wb or wb <= wa or len(wa & wb) / len(wa | wb) >= 0.8


def merge_candidates(
    candidates: Iterable[Candidate],
    types: Mapping[str, ContextType],
    speakers: Mapping[str, str] | None = None,
) -> list[Candidate]:
    """One candidate per type and node key (a singleton type: one per type), in the order
    they first appear: the chunks' overlaps and a fact restated later fold into one. Lists
    are united, mappings merged, other values taken from the later candidate (a later turn
    is newer); a near-identical body is kept once; the turns of both are its provenance.
    `speakers` (turn ref -> named speaker): two people's facts never fold into one."""
    out: dict[tuple[str, str], Candidate] = {}
    for c in candidates:
        ctype = types.get(c.type)
        try:
            key = "" if ctype is None or ctype.singleton else ctype.node_name(c.fields)
        except InvalidInput:
            key = json.dumps(c.fields, sort_keys=True, default=str)
        who = sorted({speakers[r] for r in c.turns if r in speakers}) if speakers else []
        if who:
            key += "@" + ",".join(who)
        prev = out.get((c.type, key))
        if prev is None:
            out[(c.type, key)] = c
            continue
        fields = dict(prev.fields)
        for name, value in c.fields.items():
            old = fields.get(name)
            if isinstance(value, list) and isinstance(old, list):
                fields[name] = [*old, *(v for v in value if v not in old)]
            elif isinstance(value, dict) and isinstance(old, dict):
                fields[name] = {**old, **value}
            else:
                fields[name] = value
        if _near_same(prev.body, c.body):
            body = c.body if len(c.body) > len(prev.body) else prev.body
        else:
            body = f"{prev.body}\n\n{c.body}".strip()
        out[(c.type, key)] = replace(
            prev,
            fields=fields,
            body=body,
            turns=tuple(dict.fromkeys([*prev.turns, *c.turns])),
            confidence=max(prev.confidence, c.confidence),
        )
    return list(out.values())


@dataclass(frozen=True, slots=True)
class _Answer:
    text: str
    finish: str  # the endpoint's finish_reason ("length": cut at max_tokens)


class _Endpoint:
    """An `openai.OpenAI` client for one base URL and model; errors become LLMUnavailable.

    The key comes from `api_key_env`; a local endpoint may go without one
    (`contextfs.index.endpoint`), a remote one without a key is refused here, at mount time."""

    def __init__(
        self, *, base_url: str, model: str, api_key_env: str, timeout: float, max_retries: int
    ) -> None:
        try:
            from openai import OpenAI
        except ImportError as e:  # pragma: no cover - openai is a dependency
            raise LLMUnavailable(f"the openai client is not installed: {e}") from e
        key = api_key(base_url, api_key_env)
        if key is None:
            raise LLMUnavailable(
                f"no API key for the chat endpoint {base_url}: set ${api_key_env} "
                "(only a local endpoint may go without one)"
            )
        self.base_url = base_url
        self.model = model
        self._client = OpenAI(base_url=base_url, api_key=key, timeout=timeout,
                              max_retries=max_retries)  # fmt: skip

    def ask_json(self, system: str, user: str, max_tokens: int | None = None) -> _Answer:
        """The answer's text (may be anything: the callers validate it)."""
        import openai

        extra: dict[str, Any] = {} if max_tokens is None else {"max_tokens": max_tokens}
        try:
            response: Any = self._client.chat.completions.create(
                model=self.model,
                messages=[{"role": "system", "content": system},
                          {"role": "user", "content": user}],
                response_format={"type": "json_object"},
                temperature=0,
                **extra,
            )  # fmt: skip
        except openai.OpenAIError as e:
            raise LLMUnavailable(f"chat endpoint {self.base_url} failed: {e}") from e
        try:
            choice = response.choices[0]
            return _Answer(choice.message.content or "", str(choice.finish_reason or ""))
        except (AttributeError, IndexError, TypeError):
            return _Answer("", "")


def _json_object(text: str) -> dict | None:
    """The JSON object in a model answer (bare, or inside a ``` fence or prose)."""
    text = text.strip()
    candidates = [text]
    fence = re.search(r"```(?:json)?\s*(.*?)```", text, re.S)
    if fence:
        candidates.append(fence.group(1))
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start : end + 1])
    for c in candidates:
        try:
            obj = json.loads(c)
        except ValueError:
            continue
        if isinstance(obj, dict):
            return obj
    return None


def _refused_request(exc: LLMUnavailable) -> bool:
    """Whether the endpoint refused this request (too long, malformed: HTTP 400, 413,
    422) rather than being down, overloaded or refusing every request."""
    return getattr(exc.__cause__, "status_code", None) in (400, 413, 422)


def _unusable(answer: _Answer) -> str:
    cut = " (cut at max_tokens)" if answer.finish == "length" else ""
    return f"not a JSON object with a 'memories' list{cut}: {short_text(answer.text, 80)!r}"


class LLMExtractor:
    """Extraction by an OpenAI-compatible chat model, in requests that fit its window.

    A transcript whose request would pass `context_tokens` (instructions, type
    descriptions, the turns and `answer_tokens` kept for the answer) goes in chunks
    (`chunk_turns`), and the chunks' candidates are merged (`merge_candidates`). Every
    item of an answer is checked against its type: an unknown type, an unknown or
    ill-typed field, a missing key or required field drops the item and records why in
    `last_dropped`. A chunk whose request fails or whose answer is unusable is extracted by
    `rules` when one was given (and `notes` says so); without `rules` an unusable answer
    yields nothing for that chunk and a failed request raises `LLMUnavailable`. When the
    first requests all fail (the endpoint is down) it raises too, so the caller can fall
    back to rules for the whole transcript.
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        timeout: float = 60.0,
        max_retries: int = 2,
        context_tokens: int = DEFAULT_CONTEXT_TOKENS,
        answer_tokens: int | None = None,
        overlap_turns: int = 3,
        rules: Extractor | None = None,
    ) -> None:
        self._endpoint = _Endpoint(base_url=base_url, model=model, api_key_env=api_key_env,
                                   timeout=timeout, max_retries=max_retries)  # fmt: skip
        self.context_tokens = context_tokens
        self.answer_tokens = answer_tokens or min(4096, max(256, context_tokens // 4))
        self.overlap_turns = overlap_turns
        self.rules = rules
        self.last_dropped: list[str] = []

    def extract(
        self,
        turns: Sequence[Turn],
        types: Mapping[str, ContextType],
        *,
        today: str | None = None,
        notes: list[str] | None = None,
    ) -> list[Candidate]:
        self.last_dropped = []
        allowed = dict(types)
        if not turns or not allowed:
            return []
        system = _SYSTEM_PROMPT.replace("{today}", f" (today is {today})" if today else "")
        system += _describe_types(allowed)
        room = (
            self.context_tokens
            - estimate_tokens_upper(system)
            - _FRAME_TOKENS
            - _HEADER_TOKENS
            - self.answer_tokens
        )
        if room < _MIN_ROOM:
            raise LLMUnavailable(
                f"llm_context_tokens {self.context_tokens:,} leaves no room for the "
                f"conversation: the instructions take {estimate_tokens_upper(system):,} tokens "
                f"and the answer {self.answer_tokens:,}"
            )
        chunks = chunk_turns(turns, room, self.overlap_turns)
        said: list[str] = []
        found: list[Candidate] = []
        answered = ruled = in_a_row = 0
        for i, chunk in enumerate(chunks, 1):
            where = f"chunk {i} of {len(chunks)} ({chunk.span()})"
            if in_a_row >= _GIVE_UP_AFTER:
                said.append(f"{where}: not sent after {in_a_row} failed requests in a row; "
                            "rules used for these turns")  # fmt: skip
                found += self._rules(chunk, types, today)
                ruled += 1
                continue
            head = "Conversation:" if len(chunks) == 1 else (
                f"Conversation, part {i} of {len(chunks)} (the parts are sent one by one; "
                "a part's first turns may repeat the end of the part before):"
            )  # fmt: skip
            try:
                answer = self._endpoint.ask_json(system, f"{head}\n\n{chunk.text}",
                                                 max_tokens=self.answer_tokens)  # fmt: skip
            except LLMUnavailable as exc:
                in_a_row += 1
                # an endpoint that is down (not one refusing this request) before anything
                # was answered: the caller falls back to rules for the whole transcript
                down = answered == 0 and not _refused_request(exc)
                if self.rules is None or (down and in_a_row >= min(2, len(chunks))):
                    raise
                log.info("LLM extraction of %s failed: %s; rules used", where, exc)
                said.append(f"{where}: the LLM failed ({exc}); rules used for these turns")
                found += self._rules(chunk, types, today)
                ruled += 1
                continue
            in_a_row = 0
            obj = _json_object(answer.text)
            if obj is None or not isinstance(obj.get("memories"), list):
                why = _unusable(answer)
                self.last_dropped.append(f"answer: {why}" if len(chunks) == 1 else
                                         f"answer to {where}: {why}")  # fmt: skip
                log.info("LLM extraction answer unusable: %s", self.last_dropped[-1])
                if self.rules is not None:
                    said.append(f"{where}: the LLM's answer was {why}; rules used for "
                                "these turns")  # fmt: skip
                    found += self._rules(chunk, types, today)
                    ruled += 1
                continue
            answered += 1
            refs = {t.ref for t in chunk.turns}
            for k, item in enumerate(obj["memories"]):
                cand = self._candidate(k, item, allowed, refs)
                if isinstance(cand, str):
                    self.last_dropped.append(cand if len(chunks) == 1 else f"{where}: {cand}")
                else:
                    found.append(cand)
        if self.last_dropped:
            log.info("LLM extraction dropped %d item(s): %s", len(self.last_dropped),
                     "; ".join(self.last_dropped))  # fmt: skip
        if len(chunks) > 1 or said:
            summary = (
                f"extracted in {len(chunks)} chunks of at most {self.context_tokens:,} tokens "
                f"(llm_context_tokens), up to {self.overlap_turns} turns repeated between "
                f"chunks; the LLM answered {answered}"
                if len(chunks) > 1
                else "extracted in one request"
            ) + (f", rules took {ruled}" if ruled else "")
            said.insert(0, summary)
            log.info("LLM extraction: %s", summary)
        if ruled:
            log.warning("LLM extraction: rules took %d of %d chunk(s): %s%s", ruled, len(chunks),
                        "; ".join(said[1:4]), "; …" if len(said) > 4 else "")  # fmt: skip
        if notes is not None:
            notes.extend(said)
        return merge_candidates(
            found, allowed, {t.ref: t.name for t in turns if t.role == "user" and t.name}
        )

    def _rules(
        self, chunk: Chunk, types: Mapping[str, ContextType], today: str | None
    ) -> list[Candidate]:
        assert self.rules is not None
        return self.rules.extract(list(chunk.turns), types, today=today)

    @staticmethod
    def _candidate(
        i: int, item: object, types: Mapping[str, ContextType], refs: set[str]
    ) -> Candidate | str:
        where = f"item {i}"
        if not isinstance(item, dict):
            return f"{where}: not an object"
        name = item.get("type")
        ctype = types.get(name) if isinstance(name, str) else None
        if ctype is None:
            return f"{where}: unknown type {name!r}"
        fields = item.get("fields", {})
        if not isinstance(fields, dict):
            return f"{where}: 'fields' is not an object"
        try:
            coerced = validate_candidate(ctype, fields, where=f"{where} ({ctype.name})")
        except InvalidInput as e:
            return e.reason
        body = item.get("body", "")
        if body is None:
            body = ""
        if not isinstance(body, str):
            return f"{where} ({ctype.name}): 'body' is not text"
        raw_turns = item.get("turns", [])
        if not isinstance(raw_turns, list):
            raw_turns = [raw_turns]
        cited = tuple(dict.fromkeys(
            str(r).strip().strip("[]") for r in raw_turns if str(r).strip().strip("[]") in refs
        ))  # fmt: skip
        conf = item.get("confidence", 0.5)
        if isinstance(conf, bool) or not isinstance(conf, int | float):
            try:
                conf = float(str(conf))
            except ValueError:
                conf = 0.5
        if conf != conf:  # NaN
            conf = 0.5
        return Candidate(type=ctype.name, fields=coerced, body=body.strip(), turns=cited,
                         confidence=min(1.0, max(0.0, float(conf))))  # fmt: skip


_MAP_PROMPT = """\
You condense one part of a long memory node of an agent's long-term memory, so that a
summary of the whole can be written from the condensed parts. Return only a JSON object
{{"summary": ...}}: plain text of at most {limit} characters keeping the names, dates,
numbers, decisions and facts of this part. Do not invent facts.
The memory is of type {type}: {description}"""


def split_lines(text: str, budget: int) -> list[str]:
    """`text` in consecutive pieces of at most `budget` tokens, cut between lines (a line
    longer than a piece is cut at a space)."""
    pieces: list[str] = []
    lines: list[str] = []
    used = 0
    for line in text.split("\n"):
        parts = [line] if estimate_tokens_upper(line) < budget else split_text(line, budget - 1)
        for part in parts:
            cost = estimate_tokens_upper(part) + 1
            if lines and used + cost > budget:
                pieces.append("\n".join(lines))
                lines, used = [], 0
            lines.append(part)
            used += cost
    if lines and any(ln.strip() for ln in lines):
        pieces.append("\n".join(lines))
    return pieces


def evenly(n: int, k: int) -> list[int]:
    """`k` indices of `range(n)` spread evenly, the first and the last included."""
    if n <= k:
        return list(range(n))
    if k == 1:
        return [0]
    return sorted({round(j * (n - 1) / (k - 1)) for j in range(k)})


class LLMSummarizer:
    """L0/L1 of an L2 document by the chat model, held to the type's limits.

    Same shape as the extractive `summarize`: L0 is one line ending in a newline, both
    limits count the newline; an overlong answer is cut at a word boundary with '…'. An
    unusable answer or transport failure raises `LLMUnavailable` (fall back to extractive).

    An L2 whose request would not fit `context_tokens` is condensed first, map-reduce: it
    is cut between lines into window-sized parts, each part is condensed by one request,
    and the L0/L1 are written from the condensed parts (condensed again while they do not
    fit). At most `max_parts` parts are read: a longer L2 is read in `max_parts` evenly
    spaced parts, its first and last included, so one summary costs at most
    `max_parts` + 1 requests (plus another round when the condensed parts still overflow).
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        timeout: float = 60.0,
        max_retries: int = 2,
        context_tokens: int = DEFAULT_CONTEXT_TOKENS,
        max_parts: int = 8,
    ) -> None:
        self._endpoint = _Endpoint(base_url=base_url, model=model, api_key_env=api_key_env,
                                   timeout=timeout, max_retries=max_retries)  # fmt: skip
        self.context_tokens = context_tokens
        self.max_parts = max(2, max_parts)
        self.last_parts = 0  # parts read for the last summary (0: it fitted whole)

    def summarize(self, ctype: ContextType, l2: str) -> tuple[str, str]:
        l0_max, l1_max = ctype.l0_max_chars, ctype.l1_max_chars
        system = (
            "You summarise one memory node for an agent's long-term memory. Return only a "
            'JSON object {"l0": ..., "l1": ...}. l0: one line, at most '
            f"{l0_max - 1} characters, saying what the memory is (where to look). l1: at "
            f"most {l1_max - 1} characters of markdown: what it contains and the key facts, "
            "enough to decide whether to read the full text. Do not invent facts.\n"
            f"The memory is of type {ctype.name}: {ctype.description}"
        )
        answer_tokens = min(self.context_tokens // 4, (l0_max + l1_max) // 2 + 256)
        room = self.context_tokens - request_tokens(system, "", answer_tokens) - _HEADER_TOKENS
        if room < _MIN_ROOM:
            raise LLMUnavailable(
                f"llm_context_tokens {self.context_tokens:,} leaves no room for the text "
                "to summarise"
            )
        text, self.last_parts = l2, 0
        for _round in range(4):
            if estimate_tokens_upper(text) <= room:
                break
            text = self._condense(ctype, text, room)
        else:
            text = split_lines(text, room)[0]  # still too long after four rounds: its start
        if self.last_parts:
            text = (
                f"(The memory is too long to read whole: here it is condensed from "
                f"{self.last_parts} parts.)\n\n{text}"
            )
        answer = self._endpoint.ask_json(system, text, max_tokens=answer_tokens)
        obj = _json_object(answer.text)
        if obj is None or not isinstance(obj.get("l0"), str) or not obj["l0"].strip():
            raise LLMUnavailable(
                f"chat endpoint {self._endpoint.base_url} gave no usable summary: "
                f"{short_text(answer.text, 80)!r}"
            )
        l0_text = _cut(" ".join(obj["l0"].split()), l0_max - 1)
        l1 = obj.get("l1")
        l1_raw = l1 if isinstance(l1, str) else ""
        l1_text = "\n".join(ln.rstrip() for ln in l1_raw.strip().splitlines())
        if not l1_text:
            l1_text = l0_text
        l1_text = _cut_lines(l1_text, l1_max - 1)
        return l0_text + "\n", l1_text + "\n"

    def _condense(self, ctype: ContextType, text: str, room: int) -> str:
        """One map round: `text` in window-sized parts (at most `max_parts`, evenly spaced),
        each condensed so that all of them together fit `room` tokens, joined in order."""
        answer_cap = min(self.context_tokens // 4, 2048)
        probe = _MAP_PROMPT.format(limit=99999, type=ctype.name, description=ctype.description)
        part_room = self.context_tokens - request_tokens(probe, "", answer_cap) - _HEADER_TOKENS
        if part_room < _MIN_ROOM:
            raise LLMUnavailable(
                f"llm_context_tokens {self.context_tokens:,} leaves no room for a part of a "
                "long memory"
            )
        parts = split_lines(text, part_room)
        chosen = evenly(len(parts), self.max_parts)
        # the condensed parts, with their headings, must fit the final request: 3 bytes a
        # token, less the headings; never more than the answer's room lets the model write
        limit = (room - 24 * len(chosen)) * 3 // len(chosen)
        limit = max(200, min(limit, (answer_cap - 64) * 2))
        system = _MAP_PROMPT.format(limit=limit, type=ctype.name, description=ctype.description)
        out = []
        for i in chosen:
            head = f"Part {i + 1} of {len(parts)} of the memory:"
            answer = self._endpoint.ask_json(system, f"{head}\n\n{parts[i]}",
                                             max_tokens=answer_cap)  # fmt: skip
            obj = _json_object(answer.text)
            summary = obj.get("summary") if obj is not None else None
            if not isinstance(summary, str) or not summary.strip():
                raise LLMUnavailable(
                    f"chat endpoint {self._endpoint.base_url} gave no usable summary of part "
                    f"{i + 1} of {len(parts)}: {short_text(answer.text, 80)!r}"
                )
            out.append(f"## Part {i + 1} of {len(parts)}\n{_cut(' '.join(summary.split()), limit)}")
        self.last_parts = max(self.last_parts, len(parts))
        log.info("LLM summary: %d part(s) of %d condensed (llm_context_tokens %d)",
                 len(chosen), len(parts), self.context_tokens)  # fmt: skip
        return "\n\n".join(out)


class MediaDescriber:
    """What a picture shows and what a recording says, through the same OpenAI-compatible
    endpoint: a caption by the chat model with the image as a content part, a transcript
    by the transcriptions endpoint (`transcribe_model`; empty: no transcripts). A failure
    raises `LLMUnavailable`; the media node then keeps its derived text."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        transcribe_model: str = "",
        api_key_env: str = "OPENAI_API_KEY",
        timeout: float = 60.0,
        max_retries: int = 2,
    ) -> None:
        self._endpoint = _Endpoint(base_url=base_url, model=model, api_key_env=api_key_env,
                                   timeout=timeout, max_retries=max_retries)  # fmt: skip
        self.model = model
        self.transcribe_model = transcribe_model

    def caption(self, data: bytes, mime: str, name: str) -> str:
        """A few sentences on what the picture shows (its text too, if it holds any)."""
        import base64

        import openai

        url = f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
        prompt = (
            f"Describe this picture ({name}) for an agent's long-term memory in at most four "
            "sentences: what it shows, any text in it word for word, names and dates you can "
            "read. Do not guess what you cannot see."
        )
        try:
            response: Any = self._endpoint._client.chat.completions.create(
                model=self.model,
                messages=[{"role": "user", "content": [
                    {"type": "text", "text": prompt},
                    {"type": "image_url", "image_url": {"url": url}},
                ]}],
                temperature=0,
            )  # fmt: skip
            text = response.choices[0].message.content or ""
        except openai.OpenAIError as e:
            raise LLMUnavailable(f"chat endpoint {self._endpoint.base_url} failed: {e}") from e
        except (AttributeError, IndexError, TypeError):
            text = ""
        text = " ".join(text.split())
        if not text:
            raise LLMUnavailable(f"chat endpoint {self._endpoint.base_url} gave no caption")
        return _cut(text, 2000)

    def transcribe(self, wav: bytes, name: str) -> str:
        """The words of one speech segment (a WAV)."""
        import openai

        if not self.transcribe_model:
            raise LLMUnavailable("no transcription model configured (llm_transcribe_model)")
        try:
            response: Any = self._endpoint._client.audio.transcriptions.create(
                model=self.transcribe_model, file=(name, wav, "audio/wav")
            )
        except openai.OpenAIError as e:
            raise LLMUnavailable(f"transcriptions at {self._endpoint.base_url} failed: {e}") from e
        text = " ".join((getattr(response, "text", "") or "").split())
        return _cut(text, 4000)


def _cut(text: str, limit: int) -> str:
    """At most `limit` characters, cut at a word boundary and marked with '…' if shortened."""
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    space = head.rfind(" ")
    if space >= limit // 2:
        head = head[:space]
    return head.rstrip(" ,;:-") + "…"


def _cut_lines(text: str, limit: int) -> str:
    """At most `limit` characters, preferably at a line boundary."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    nl = head.rfind("\n")
    if nl >= limit // 2:
        return head[:nl]
    return _cut(text.replace("\n", " "), limit)
