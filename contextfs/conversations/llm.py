"""The LLM client: extraction and L0/L1 summaries through any OpenAI-compatible chat endpoint.

`LLMExtractor` sends a transcript with each context type's description, fields and
`extraction` instructions, and keeps only the items that validate against their type.
`LLMSummarizer` writes L0/L1 held to the type's limits. Transport failures raise
`LLMUnavailable`, so callers fall back to the rule-based versions. No store, no FUSE.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from contextfs.conversations.extract import (
    Candidate,
    allowed_types,
    short_text,
    validate_candidate,
)
from contextfs.conversations.transcript import Turn, tool_content
from contextfs.ctxtypes import ContextType
from contextfs.errors import InvalidInput, LLMUnavailable

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


def _turn_line(turn: Turn, limit: int = 4000) -> str:
    who = turn.role + (f" ({turn.name})" if turn.name else "")
    when = f" @ {turn.timestamp}" if turn.timestamp else ""
    text = turn.content
    if turn.role == "tool" and (turn.tool_input is not None or turn.tool_output is not None):
        text = tool_content(turn.name, turn.tool_input, turn.tool_output)
        if turn.ok is False:
            text += " [failed]"
    if len(text) > limit:
        text = text[:limit] + " […]"
    return f"[{turn.ref}] {who}{when}: {text}"


class _Endpoint:
    """An `openai.OpenAI` client for one base URL and model; errors become LLMUnavailable."""

    def __init__(
        self, *, base_url: str, model: str, api_key_env: str, timeout: float, max_retries: int
    ) -> None:
        try:
            from openai import OpenAI
        except ImportError as e:  # pragma: no cover - openai is a dependency
            raise LLMUnavailable(f"the openai client is not installed: {e}") from e
        key = os.environ.get(api_key_env)
        if not key:
            raise LLMUnavailable(f"no API key for the chat endpoint: set ${api_key_env}")
        self.base_url = base_url
        self.model = model
        self._client = OpenAI(base_url=base_url, api_key=key, timeout=timeout,
                              max_retries=max_retries)  # fmt: skip

    def ask_json(self, system: str, user: str) -> str:
        """The answer's text (may be anything: the callers validate it)."""
        import openai

        try:
            response: Any = self._client.chat.completions.create(
                model=self.model,
                messages=[{"role": "system", "content": system},
                          {"role": "user", "content": user}],
                response_format={"type": "json_object"},
                temperature=0,
            )  # fmt: skip
        except openai.OpenAIError as e:
            raise LLMUnavailable(f"chat endpoint {self.base_url} failed: {e}") from e
        try:
            return response.choices[0].message.content or ""
        except (AttributeError, IndexError, TypeError):
            return ""


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


class LLMExtractor:
    """Extraction by an OpenAI-compatible chat model, one request per transcript.

    Every item of the answer is checked against its type: an unknown type, an unknown or
    ill-typed field, a missing key or required field drops the item and records why in
    `last_dropped`. A malformed answer yields no candidates (and a reason); only a
    transport failure raises (`LLMUnavailable`), so the caller can fall back to rules.
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        timeout: float = 60.0,
        max_retries: int = 2,
    ) -> None:
        self._endpoint = _Endpoint(base_url=base_url, model=model, api_key_env=api_key_env,
                                   timeout=timeout, max_retries=max_retries)  # fmt: skip
        self.last_dropped: list[str] = []

    def extract(
        self,
        turns: Sequence[Turn],
        types: Mapping[str, ContextType],
        *,
        owner_kind: str = "user",
        today: str | None = None,
    ) -> list[Candidate]:
        self.last_dropped = []
        allowed = allowed_types(types, owner_kind)
        if not turns or not allowed:
            return []
        system = _SYSTEM_PROMPT.replace("{today}", f" (today is {today})" if today else "")
        system += _describe_types(allowed)
        user = "Conversation:\n\n" + "\n".join(_turn_line(t) for t in turns)
        answer = self._endpoint.ask_json(system, user)
        obj = _json_object(answer)
        if obj is None or not isinstance(obj.get("memories"), list):
            self.last_dropped.append(f"answer: not a JSON object with a 'memories' list: "
                                     f"{short_text(answer, 80)!r}")  # fmt: skip
            log.info("LLM extraction answer unusable: %s", self.last_dropped[-1])
            return []
        refs = {t.ref for t in turns}
        out: list[Candidate] = []
        for i, item in enumerate(obj["memories"]):
            cand = self._candidate(i, item, allowed, refs)
            if isinstance(cand, str):
                self.last_dropped.append(cand)
            else:
                out.append(cand)
        if self.last_dropped:
            log.info("LLM extraction dropped %d item(s): %s", len(self.last_dropped),
                     "; ".join(self.last_dropped))  # fmt: skip
        return out

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


class LLMSummarizer:
    """L0/L1 of an L2 document by the chat model, held to the type's limits.

    Same shape as the extractive `summarize`: L0 is one line ending in a newline, both
    limits count the newline; an overlong answer is cut at a word boundary with '…'. An
    unusable answer or transport failure raises `LLMUnavailable` (fall back to extractive).
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        timeout: float = 60.0,
        max_retries: int = 2,
    ) -> None:
        self._endpoint = _Endpoint(base_url=base_url, model=model, api_key_env=api_key_env,
                                   timeout=timeout, max_retries=max_retries)  # fmt: skip

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
        answer = self._endpoint.ask_json(system, l2)
        obj = _json_object(answer)
        if obj is None or not isinstance(obj.get("l0"), str) or not obj["l0"].strip():
            raise LLMUnavailable(
                f"chat endpoint {self._endpoint.base_url} gave no usable summary: "
                f"{short_text(answer, 80)!r}"
            )
        l0_text = _cut(" ".join(obj["l0"].split()), l0_max - 1)
        l1_raw = obj.get("l1") if isinstance(obj.get("l1"), str) else ""
        l1_text = "\n".join(ln.rstrip() for ln in l1_raw.strip().splitlines())
        if not l1_text:
            l1_text = l0_text
        l1_text = _cut_lines(l1_text, l1_max - 1)
        return l0_text + "\n", l1_text + "\n"


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
