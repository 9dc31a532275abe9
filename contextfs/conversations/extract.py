"""Extraction: conversation turns in, candidate memories (typed, validated) out.

Two `Extractor`s: `RuleExtractor` (here) works offline from a handful of conservative patterns
(first-person preferences and profile facts, dated events, named relations, decisions,
tool traces); it prefers missing a memory to inventing one. `LLMExtractor` (`llm.py`) asks any
OpenAI-compatible chat endpoint, with each context type's description, fields and
`extraction` instructions, and keeps only the items that validate against their type.
The LLM side lives in `llm.py` (which also writes L0/L1); `scoring.py` measures an extractor
against expected memories (the corpus under `tests/corpus/transcripts/`).

The rules and their helpers stay in one module (about 700 lines) because each rule method
feeds the same collector and reads the same lexicon (`rule_lexicon.py`); split per type they
would be read apart from the checks they share.

Candidates are values: every one carries fields already coerced for its type, including
the key fields, so routing them (the memory service's job, not this module's) cannot fail
on a field. Nothing here touches the store, the tree or FUSE.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from contextfs.conversations.rule_lexicon import (
    _BARE_RELATION_RE,
    _BREED_ALT,
    _BREEDS,
    _CALLED_TOO_RE,
    _CONDITION_ADJ,
    _CONVENTION_RE,
    _DATE_WORDS,
    _DECISION_RE,
    _DIET_END,
    _DIETS,
    _DONE_RE,
    _FEMALE_RELATIONS,
    _FIXED_RE,
    _GIVEN_UP_RES,
    _HYPOTHETICAL_RE,
    _INSTEAD_RE,
    _JOB_WORDS,
    _LANGUAGES,
    _LISTED_FACTS,
    _MALE_RELATIONS,
    _NAME,
    _NEGATIVE_RE,
    _NOT_NAME_WORDS,
    _NOT_NAMES,
    _NOT_SELF_NAMES,
    _NOT_VERBS_ED,
    _OPTION_TOPIC,
    _PAST_IRREGULAR,
    _PREF_RES,
    _PROFILE_RES,
    _PRONOUNS,
    _REL_ALT,
    _RELATIONS,
    _RENAME_RE,
    _SELF_RES,
    _STANDING_MARK_RE,
    _STANDING_RES,
    _SWITCH_RES,
    _TAKEN_IN_RE,
    _TASK_RE,
    _THEIR_NAME_RE,
    _TROUBLE_RE,
    _UNSAID_RES,
    _UP,
    _USED_TO_RE,
    _WORD_RE,
    _assertion,
    _clean_phrase,
    _reason,
    _relation,
    _sentences,
)
from contextfs.conversations.timeparse import DateMention, parse_timestamp, resolve_relative
from contextfs.conversations.transcript import Turn
from contextfs.ctxtypes import ContextType
from contextfs.errors import InvalidInput
from contextfs.memory.background import FOREGROUND
from contextfs.memory.document import Retraction, without_retracted

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A memory an extractor proposes; fields are valid for `type`, keys included."""

    type: str
    fields: dict[str, object]
    body: str
    turns: tuple[str, ...]  # Turn.ref of the evidence
    confidence: float  # 0..1
    # (field, key, value) of each value said no longer to hold: a map's entry ("facts",
    # "allergy", "peanuts") or a plain field's ("value", "", "coffee"); routing takes it
    # out of the node's current view (`memory.document.without_retracted`)
    retracts: tuple[Retraction, ...] = ()


class Extractor(Protocol):
    """Turns in, candidate memories out. `notes`, when given, collects human-readable lines
    on how the extraction went (chunks, fallbacks) for the caller's report."""

    def extract(
        self,
        turns: Sequence[Turn],
        types: Mapping[str, ContextType],
        *,
        today: str | None = None,
        notes: list[str] | None = None,
    ) -> list[Candidate]: ...


def validate_candidate(
    ctype: ContextType, fields: Mapping[str, object], *, where: str = ""
) -> dict[str, object]:
    """Fields coerced for the type, or `InvalidInput` (unknown/ill-typed/missing/bad key)."""
    coerced = ctype.coerce_fields(fields, where=where)
    missing = ctype.missing_required(coerced)
    if missing:
        raise InvalidInput(f"{where + ': ' if where else ''}missing {', '.join(missing)}")
    missing_keys = [k for k in ctype.key_fields if k not in coerced]
    if missing_keys:
        raise InvalidInput(
            f"{where + ': ' if where else ''}missing key field {', '.join(missing_keys)}"
        )
    ctype.node_name(coerced)  # raises on a key without letters or digits
    return coerced


# Words that say when a statement holds, not what it is about: "I can't stand genmaicha
# tea any more" is about genmaicha tea (the node of the older "I love genmaicha tea"),
# "I work as a product manager now" makes the role "product manager"
_WHEN_WORDS = re.compile(
    r"(?:[\s,]+(?:now|any\s*more|any\s+longer|these\s+days|nowadays|at\s+the\s+moment|"
    r"right\s+now|lately|again|too|as\s+well|still))+\s*$",
    re.I,
)


def _what(value: object) -> object:
    """A field's text without the words that only say when it holds."""
    if not isinstance(value, str):
        return value
    trimmed = _WHEN_WORDS.sub("", value).strip()
    return trimmed or value


# what only says how much or when, after a liked thing: "I don't like true crime at all",
# "I prefer coffee in the morning"
_TRAILING_ADJUNCT = re.compile(
    r"(?:\s+(?:at\s+all|very\s+much|so\s+much|that\s+much|a\s+lot|much|"
    r"in\s+the\s+(?:morning|afternoon|evening)s?|at\s+night|first\s+thing|"
    r"on\s+(?:weekends|weekdays|[a-z]+days)|every\s+(?:day|morning|evening|night)|"
    r"at\s+(?:work|home)|these\s+days|nowadays|now))+$",
    re.I,
)
# a thing of a kind, named by the kind: "I prefer folk music" is about music
_KINDS_OF_THING = {"music", "films", "movies", "books", "novels", "podcasts", "food",
                   "cuisine", "beer", "wine", "games", "shows", "series", "sports"}  # fmt: skip
# said in irony: "Oh great, I just love Mondays."
_IRONY_RE = re.compile(r"\s*(?:oh,?\s+)?(?:great|wonderful|fantastic|brilliant|perfect|"
                       r"lovely|marvellous|joy|just\s+great)\s*[,!.…]", re.I)  # fmt: skip

# words that introduce a name: "That's Biscuit, my beagle", "This is Rex, our dog"
_INTRO = r"\b(?:[Tt]his\s+is|[Tt]hat['’]s|[Ii]t['’]s|[Hh]ere['’]s|[Mm]eet)\s+"


def _introduced(name: str) -> str:
    """A name without the words that introduced it ("That's Biscuit": Biscuit)."""
    return re.sub(r"^(?:That|It|Here|There|This|Meet)['’]s\s+(?=\S)", "", name)


# Verbs that tell no deed of a named subject: no event of its own
_NOT_DEEDS = {"was", "were", "is", "are", "said", "says", "told", "thought", "felt", "seemed",
              "looked", "sounded", "asked", "mentioned", "wanted", "needed"}  # fmt: skip

# Words that point at something said before: a topic holding one names nothing by itself
_POINTING = {"it", "them", "this", "that", "these", "those", "him", "her", "one", "ones"}

# Someone else's fact, named at the head of a sentence (`RuleExtractor._third_person`)
_THIRD_PERSON_RES = [
    (re.compile(rf"(?P<n>{_NAME})['’]s\s+favou?rite\s+(?P<t>[a-z][a-z ]{{1,30}}?)\s+"
                r"(?:is|are|was)\s+(?P<v>[^.;!?]{2,60})"), "favourite"),
    (re.compile(rf"(?P<n>{_NAME})\s+(?:now\s+)?(?:lives|is\s+living|is\s+based|has\s+moved|"
                rf"moved|relocated)\s+(?:in|to)\s+(?P<v>[{_UP}][\w'-]+(?:\s[{_UP}][\w'-]+)*)"),
     "location"),
    (re.compile(rf"(?P<n>{_NAME})\s+(?:works|is\s+working)\s+as\s+(?:an?\s+)?"
                r"(?P<v>[a-z][a-z -]{2,60})"), "role"),
    (re.compile(rf"(?P<n>{_NAME})\s+(?:really\s+)?(?:loves|adores)\s+(?P<v>[a-z][\w -]{{2,40}})"),
     "loves"),
    (re.compile(rf"(?P<n>{_NAME})\s+(?:really\s+)?likes\s+(?P<v>[a-z][\w -]{{2,40}})"), "likes"),
    (re.compile(rf"(?P<n>{_NAME})\s+(?:(?:really|much|generally|always|still)\s+)?prefers\s+"
                r"(?P<v>[a-z][\w -]{2,40})"), "prefers"),
    (re.compile(rf"(?P<n>{_NAME})\s+(?:now\s+)?(?:works|is\s+working)\s+(?:at|for)\s+"
                rf"(?P<v>[{_UP}][\w&.-]*(?: [{_UP}][\w&.-]*){{0,3}})"), "employer"),
    (re.compile(rf"(?P<n>{_NAME})\s+is\s+(?:now\s+)?(?:an?|the)\s+(?P<v>[a-z][a-z -]{{2,40}})"),
     "role?"),
    (re.compile(rf"(?P<n>{_NAME})\s+(?:is|comes)\s+(?:originally\s+)?from\s+"
                rf"(?P<v>[{_UP}][\w'-]+(?:\s[{_UP}][\w'-]+)*)"), "from"),
    (re.compile(rf"(?P<n>{_NAME})\s+grew\s+up\s+in\s+(?P<v>[{_UP}][\w'-]+(?:\s[{_UP}][\w'-]+)*)"),
     "from"),
    (re.compile(rf"(?P<n>{_NAME})\s+(?:really\s+)?(?:hates|dislikes|can['’]t\s+stand)\s+"
                r"(?P<v>[a-z][\w -]{2,40})"), "dislikes"),
    (re.compile(rf"(?P<n>{_NAME})\s+is\s+(?:(?:also|really|very|severely|badly|mildly)\s+)*"
                r"allergic\s+to\s+(?P<v>[a-z][\w -]{1,40})"), "allergy"),
    (re.compile(rf"(?P<n>{_NAME})\s+is\s+(?:now\s+|also\s+|strictly\s+|fully\s+)*(?:an?\s+)?"
                rf"(?P<v>{_DIETS}){_DIET_END}"), "diet"),
    (re.compile(rf"(?P<n>{_NAME})\s+turns\s+\d{{1,3}}\s+on\s+(?:the\s+)?(?P<v>{_DATE_WORDS})"),
     "birthday"),
    (re.compile(rf"(?P<n>{_NAME})['’]s\s+birthday\s+is\s+(?:on\s+)?(?:the\s+)?"
                rf"(?P<v>{_DATE_WORDS})"), "birthday"),
]  # fmt: skip


@dataclass
class _Collector:
    types: Mapping[str, ContextType]
    out: dict[tuple[str, str], Candidate] = field(default_factory=dict)
    # turn ref -> its named speaker: one person's facts never merge into another's
    speakers: Mapping[str, str] = field(default_factory=dict)

    def add(
        self,
        type_name: str,
        fields: dict[str, object],
        body: str,
        turns: Iterable[str],
        confidence: float,
        retracts: Sequence[Retraction] = (),
    ) -> None:
        ctype = self.types.get(type_name)
        if ctype is None:
            return
        fields = {name: _what(value) for name, value in fields.items()}
        try:
            coerced = validate_candidate(ctype, fields, where=f"rule {type_name}")
        except InvalidInput as e:
            log.debug("rule candidate dropped: %s", e.reason)
            return
        key = ctype.node_name(coerced)
        if ctype.singleton:
            # One profile candidate per field: each fact stands or falls on its own.
            key = ",".join(sorted({*coerced, *(r[0] for r in retracts)}))
        refs = tuple(dict.fromkeys(turns))
        who = sorted({self.speakers[r] for r in refs if r in self.speakers})
        if who:  # "I live in Bergen" (Ola) and "I live in Oslo" (Mina) stay two facts
            key += "@" + ",".join(who)
        prev = self.out.get((type_name, key))
        # a value said again holds again; one taken back goes from what was said before
        taken = [*(r for r in (prev.retracts if prev else ()) if not _asserts(coerced, r)),
                 *retracts]  # fmt: skip
        if prev is not None:
            merged = without_retracted(prev.fields, retracts)
            for name, value in coerced.items():
                old = merged.get(name)
                if isinstance(value, list) and isinstance(old, list):
                    merged[name] = list(dict.fromkeys([*old, *value]))
                elif isinstance(value, dict) and isinstance(old, dict):
                    both = {**old, **value}
                    for k in _LISTED_FACTS & old.keys() & value.keys():
                        # "allergic to cashews" and "to penicillin": both stand
                        said = [*str(old[k]).split(", "), str(value[k])]
                        both[k] = ", ".join(dict.fromkeys(said))
                    merged[name] = both
                else:
                    merged[name] = value
            text = prev.body if body in prev.body else f"{prev.body}\n\n{body}".strip()
            refs = tuple(dict.fromkeys([*prev.turns, *refs]))
            coerced, body = merged, text
            confidence = max(confidence, prev.confidence)
        self.out[(type_name, key)] = Candidate(
            type=type_name, fields=coerced, body=body, turns=refs,
            confidence=round(min(1.0, max(0.0, confidence)), 3),
            retracts=tuple(dict.fromkeys(taken)),
        )  # fmt: skip

    def retract(
        self,
        type_name: str,
        keys: dict[str, object],
        what: Retraction,
        turns: Iterable[str],
    ) -> None:
        """A value said no longer to hold ("I'm not allergic to peanuts after all"): taken
        out of what this conversation said before, and out of the node when routed."""
        self.add(type_name, keys, "", turns, 0.75, retracts=(what,))


def _asserts(fields: Mapping[str, object], what: Retraction) -> bool:
    """Whether `fields` say the value `what` takes back."""
    name, key, value = what
    said = fields.get(name)
    if key:
        said = said.get(key) if isinstance(said, Mapping) else None
    return isinstance(said, str) and value.lower() in said.lower().split(", ")


class RuleExtractor:
    """Offline extraction by conservative patterns: precision over recall.

    User-scope memories (preference, profile, event, entity) come only from the user's
    own assertions in `user` turns: questions, hypotheticals ("if", "would", "maybe"),
    quoted speech and code are skipped. Agent-scope memories (case, pattern, skill, tool)
    come from the whole exchange: decisions, confirmed fixes and tool traces.
    """

    def extract(
        self,
        turns: Sequence[Turn],
        types: Mapping[str, ContextType],
        *,
        today: str | None = None,
        notes: list[str] | None = None,  # nothing to say: the rules read every turn at once
    ) -> list[Candidate]:
        col = _Collector(
            dict(types),
            speakers={t.ref: t.name for t in turns if t.role == "user" and t.name},
        )
        # per speaker: their last turn's sentences, and the things they named
        last_said: dict[str | None, list[str]] = {}
        things: dict[str | None, list[tuple[str, str]]] = {}
        for turn in turns:
            if turn.role != "user":
                continue
            FOREGROUND.step_aside()  # a worker thread: a request in flight goes first
            ref_day = _reference_day(today, turn.timestamp)
            sentences = _sentences(turn.content)
            before = last_said.get(turn.name, [])
            last_said[turn.name] = sentences
            for i, sentence in enumerate(sentences):
                bare = _assertion(sentence)
                if bare is None:
                    self._used_to(col, turn, sentence)
                    continue
                self._their_name(col, turn, sentence, bare, [*before, *sentences[:i]][-3:])
                self._renamed(col, turn, sentence, bare, things.setdefault(turn.name, []))
                self._preferences(col, turn, sentence, bare)
                self._profile(col, turn, sentence, bare)
                self._self(col, turn, sentence, bare, [*before, *sentences[:i]][-1:])
                self._switch(col, turn, sentence, bare)
                self._entities(col, turn, sentence, bare)
                self._third_person(col, turn, sentence, bare)
                self._event(col, turn, sentence, bare, ref_day)
            self._someone(col, turn)
        self._decisions(col, turns)
        self._case(col, turns)
        self._tools(col, turns)
        return list(col.out.values())

    # user scope

    def _preferences(self, col: _Collector, turn: Turn, sentence: str, bare: str) -> None:
        for rx, kind in _PREF_RES:
            m = rx.search(bare)
            if not m:
                continue
            raw_value = m.group("value")
            if kind == "prefer":
                head = raw_value.split()[0].lower() if raw_value.split() else ""
                if head in ("to", "not", "that", "it", "this", "when", "if", "you"):
                    continue
            if kind == "prefer":
                raw_value = re.split(r"\s+(?:over|to|rather than|instead of)\s+", raw_value,
                                     maxsplit=1)[0]  # fmt: skip
            value = _clean_phrase(raw_value, 7)
            value = _TRAILING_ADJUNCT.sub("", value) if value else value
            if value is None or len(value.split()) > 5 or value.split()[0].lower() in _PRONOUNS:
                continue
            if kind in ("likes", "loves") and re.match(r"(?:to|the idea|how|that)\b", raw_value):
                continue
            if kind in ("likes", "loves") and _IRONY_RE.match(sentence):
                continue  # "Oh great, I just love Mondays."
            topic: str | None = None
            if "topic" in m.groupdict() and m.group("topic"):
                topic = _clean_phrase(m.group("topic"), 4)
            if topic is None:
                m_for = re.search(
                    r"\b(?:for|as my|as the|when it comes to)\s+(?:my\s+|the\s+)?"
                    r"(?P<t>[a-z][\w -]+)",
                    raw_value,
                    re.I,
                )
                if m_for and kind in ("prefer", "use"):
                    topic = _clean_phrase(m_for.group("t"), 3)
                    value = _clean_phrase(raw_value[: m_for.start()], 5) or value
            m_my = re.match(r"my\s+(?P<t>[a-z]+)\s+(?P<v>[a-z][\w -]*)", raw_value, re.I)
            if topic is None and kind in ("likes", "loves") and m_my:
                topic, value = m_my.group("t"), _clean_phrase(m_my.group("v"), 3)
                if value is None:
                    continue
            elif topic is None and kind in ("prefer", "use"):
                topic = _OPTION_TOPIC.get(value.lower())
                if topic is None and value.split()[-1].lower() in _KINDS_OF_THING:
                    topic = value.split()[-1].lower()  # "folk music": music
                if topic is None:
                    if kind == "use":
                        continue  # "I always use X" says nothing about which topic
                    # "I prefer jazz to rock": jazz is preferred, over rock
                    over = re.search(r"\s(?:over|to|rather than|instead of)\s+(?P<o>.+)",
                                     m.group("value"))  # fmt: skip
                    other = _clean_phrase(over.group("o"), 4) if over else None
                    topic, value = value, f"prefers over {other}" if other else "prefers"
            elif topic is None and kind in ("likes", "loves") and value.lower() in _OPTION_TOPIC:
                # "I love coffee": the option liked is the choice on its topic, which a
                # later "I switched to tea" replaces
                topic = _OPTION_TOPIC[value.lower()]
            elif topic is None:
                topic, value = value, kind  # "I hate cilantro": topic cilantro, dislikes
                option = _OPTION_TOPIC.get(topic.lower())
                if kind == "dislikes" and option is not None:
                    # "I can't stand coffee now": no longer the choice on its topic
                    col.retract("preference", {"topic": option}, ("value", "", topic), [turn.ref])
            if not topic or topic.split()[0].lower() in _PRONOUNS:
                continue
            if _POINTING & set(topic.lower().split()):
                continue  # "I just hate setting them up": what "them" is, the turn never says
            fields: dict[str, object] = {"topic": topic.lower(), "value": value}
            reason = _reason(sentence)
            if reason:
                fields["reason"] = reason
            col.add("preference", fields, sentence, [turn.ref], 0.8)
        for rx, topic_t, value_t in _STANDING_RES:
            m = rx.search(bare)
            if m:
                v = m.group("v")
                col.add("preference",
                        {"topic": topic_t.format(v=v.lower()), "value": value_t.format(v=v)},
                        sentence, [turn.ref], 0.75)  # fmt: skip

    def _profile(self, col: _Collector, turn: Turn, sentence: str, bare: str) -> None:
        # each fact is its field, with no body: the sentence is the turn's, found where it
        # was said; quoted in the profile too it crowds a bundle that shows both
        for rx, what in _PROFILE_RES:
            m = rx.search(bare)
            if not m:
                continue
            raw = m.group("v").strip()
            if what == "name":
                first = raw.split()[0]
                if first in _NOT_NAMES or first in _NOT_SELF_NAMES or first.lower() in _LANGUAGES:
                    continue
                col.add("profile", {"name": raw}, "", [turn.ref], 0.9)
            elif what == "teach":
                # "I teach chemistry in Bergen": the subject, up to where or for whom
                where = (r"\s+(?:at|in|to|for|with|and|but|so|because|since|on|here|there|now|"
                         r"these\s+days)(?:\s+|$)")  # fmt: skip
                subject = _clean_phrase(re.split(where, raw)[0], 3)
                if subject is None or subject.split()[0].lower() in _PRONOUNS:
                    continue
                # a standing fact, not the role: "I work as a nurse. I teach piano on
                # weekends." keeps the role nurse
                col.add("profile", {"facts": {"teaches": subject}}, "", [turn.ref], 0.75)
            elif what in ("role", "role?"):
                role = _clean_phrase(
                    re.split(r"\s+(?:at|for|in|with|on|living|based|who|and)\s+", raw)[0], 4
                )
                if role is None or re.match(r"(?:former|ex)\b", role, re.I):
                    continue  # "I'm a former nurse": no role now
                # "I'm the new maths teacher": the role is maths teacher
                role = re.sub(r"^(?:new|current|newly\s+\w+)\s+(?=\w)", "", role, flags=re.I)
                head = role.lower().split()[-1]
                if what == "role?" and head not in _JOB_WORDS and role.lower() not in _JOB_WORDS:
                    continue
                if what == "role" and role.split()[0].lower() in _PRONOUNS:
                    continue
                col.add("profile", {"role": role}, "", [turn.ref], 0.8)
                m_org = re.search(
                    rf"\s(?:at|for)\s+(?P<o>[{_UP}][\w&.-]*(?: [{_UP}][\w&.-]*){{0,3}})", raw
                )
                if m_org and m_org.group("o").split()[0] not in _NOT_NAMES:
                    org = m_org.group("o")
                    col.add("profile", {"facts": {"employer": org}}, "", [turn.ref], 0.8)
                    col.add("entity", {"name": org, "kind": "organisation"},
                            f"{org} is where the owner works.", [turn.ref], 0.7)  # fmt: skip
            elif what == "location":
                place = _clean_phrase(raw, 4) if "," not in raw else raw.split(",")[0].strip()
                if not place or place.split()[0] in _NOT_NAMES:
                    continue
                col.add("profile", {"location": place}, "", [turn.ref], 0.85)
            elif what == "languages":
                words = re.findall(r"[A-Za-z]+", raw)
                langs = []
                for w in words:
                    if w.lower() in _LANGUAGES:
                        langs.append(w.capitalize())
                    elif w.lower() not in (
                        "and",
                        "or",
                        "some",
                        "a",
                        "little",
                        "bit",
                        "fluent",
                        "also",
                        "both",
                        "well",
                        "basic",
                        "native",
                    ):
                        break
                if langs:
                    col.add("profile", {"languages": langs}, "", [turn.ref], 0.85)
            elif what == "timezone":
                col.add("profile", {"timezone": raw}, "", [turn.ref], 0.9)
            elif what == "employer":
                org = raw.rstrip(".")
                if org.split()[0] in _NOT_NAMES:
                    continue
                col.add("profile", {"facts": {"employer": org}}, "", [turn.ref], 0.8)
                col.add("entity", {"name": org, "kind": "organisation"},
                        f"{org} is where the owner works.", [turn.ref], 0.7)  # fmt: skip

    def _self(
        self, col: _Collector, turn: Turn, sentence: str, bare: str, prior: Sequence[str] = ()
    ) -> None:
        """What the owner says of themself, a standing fact each (`_SELF_RES`): "I'm
        allergic to cashews", "I've gone fully vegetarian", "I have type 1 diabetes",
        "I'm left-handed", "I play the cello", "I've been learning Portuguese", "I'm
        training for a marathon", "my birthday is 3 March". A fact taken back ("Turns out
        I'm not allergic to penicillin after all", `_UNSAID_RES`) is retracted, and what
        the next sentence names in its place ("It was the sesame.") is the fact."""
        for rx, key in _UNSAID_RES:
            m = rx.search(bare)
            if m is None:
                continue
            raw = re.split(r"\s+(?:after\s+all|at\s+all|any\s*more|any\s+longer|either|"
                           r"though|and|but|so|it|in|on|at)\b", m.group("v"))[0]  # fmt: skip
            value = _clean_phrase(raw, 4)
            if value is not None and value.split()[0].lower() not in _PRONOUNS:
                col.retract("profile", {}, ("facts", key, value.lower()), [turn.ref])
            return
        for before in prior:
            said = next((key for rx, key in _UNSAID_RES if rx.search(before)), None)
            m = _INSTEAD_RE.match(bare.strip())
            if said == "allergy" and m is not None:
                value = _clean_phrase(m.group("v"), 3)
                if value is not None and value.split()[0].lower() not in _PRONOUNS | {"not"}:
                    col.add("profile", {"facts": {said: value.lower()}}, "", [turn.ref], 0.7)
                return
        for rx, key in _SELF_RES:
            m = rx.search(bare)
            if m is None:
                continue
            raw = " ".join(m.group("v").split())
            if key == "learning" and raw[:1].isupper() and raw.lower() not in _LANGUAGES:
                continue  # "I'm learning Rust", "I'm learning French": only the latter
            if key in ("allergy", "training_for"):
                value = _clean_phrase(re.split(r"\s+(?:and\s+(?:so|it|that)|so|in|on|at|"
                                               r"this|next|last)\s+", raw)[0], 4)  # fmt: skip
                if value is None or value.split()[0].lower() in _PRONOUNS:
                    continue
                if key == "allergy":  # "penicillin and cats": each its own, taken back alone
                    value = re.sub(r"\s+(?:and|&)\s+", ", ", value)
            elif key == "handedness":
                value = f"{raw.lower()}-handed"
            elif key == "birthday" or raw.lower() in _LANGUAGES:
                value = raw.capitalize() if key != "birthday" else raw
            else:
                value = _CONDITION_ADJ.get(raw.lower(), raw if raw.isupper() else raw.lower())
            col.add("profile", {"facts": {key: value}}, "", [turn.ref], 0.8)  # as `_profile`

    def _switch(self, col: _Collector, turn: Turn, sentence: str, bare: str) -> None:
        """A switch to a known option ("I finally ditched VS Code for Neovim", "I'm doing
        all this in Neovim now", "I'm back on coffee"): the new option is the preference
        on its topic, which replaces the old one. An option given up ("I don't drink
        coffee any more", "The tea phase is over") is no longer the choice on its topic."""
        for rx in _GIVEN_UP_RES:
            for given_up in rx.finditer(bare):
                value = given_up.group("v")
                col.retract("preference", {"topic": _OPTION_TOPIC[value.lower()]},
                            ("value", "", value), [turn.ref])  # fmt: skip
        for rx in _SWITCH_RES:
            m = rx.search(bare)
            if m is None:
                continue
            value = m.group("v")
            topic = _OPTION_TOPIC.get(value.lower())
            if topic is not None:
                col.add("preference", {"topic": topic, "value": value}, sentence, [turn.ref],
                        0.75)  # fmt: skip
            return

    def _entities(self, col: _Collector, turn: Turn, sentence: str, bare: str) -> None:
        found: list[tuple[str, str]] = []
        # "my mother's cat Max" / "Max is my mother's cat": Max is the cat, never the mother
        possessors: set[str] = set()
        for m in re.finditer(
            rf"\b[Mm]y\s+(?P<own>{_REL_ALT})['’]s\s+(?P<rel>{_REL_ALT})(?:\s*,?\s+(?P<name>{_NAME}))?",
            bare,
        ):
            possessors.add(m.group("own").lower())
            name = m.group("name")
            if name is None:
                before = re.search(rf"(?P<name>{_NAME})(?:,)?\s+(?:is|was)\s+$", bare[: m.start()])
                name = before.group("name") if before else None
            if name:
                found.append((name, f"{m.group('own').lower()}'s {m.group('rel').lower()}"))
        for m in re.finditer(
            rf"\b(?:[Mm]y|[Oo]ur)\s+(?:(?:older|younger|little|big|new|old|best)\s+)?"
            rf"(?P<rel>{_REL_ALT})\s*,?\s+(?P<name>{_NAME})\b",
            bare,
        ):
            found.append((m.group("name"), m.group("rel").lower()))
        # "Biscuit, our dog, stares at me": a name, then who it is between two commas
        for m in re.finditer(
            rf"(?:^|[,;]\s+|\band\s+|{_INTRO})(?P<name>{_NAME}),\s+(?:my|our)\s+"
            rf"(?:(?:older|younger|little|big|new|old|best)\s+)?(?P<rel>{_REL_ALT}),",
            bare,
        ):
            if m.group("name").split()[0].lower() not in _NOT_NAME_WORDS:
                found.append((m.group("name"), m.group("rel").lower()))
        # a breed for the animal: "my beagle Biscuit", "Biscuit, our beagle,", "Biscuit is
        # our beagle"
        breeds: dict[str, str] = {}
        for m in re.finditer(
            rf"\b(?:[Mm]y|[Oo]ur)\s+(?:(?:old|little|new|rescue)\s+)?(?P<breed>(?i:{_BREED_ALT}))"
            rf"\s*,?\s+(?P<name>{_NAME})\b"
            rf"|(?:^|[,;]\s+|\band\s+|{_INTRO})(?P<name2>{_NAME})(?:,|\s+is)\s+(?:my|our)\s+"
            rf"(?:(?:old|little|new|rescue)\s+)?(?P<breed2>(?i:{_BREED_ALT}))\b"
            r"(?:,|[.!]?\s*$|\s+and\b)",
            bare,
        ):
            name = _introduced(m.group("name") or m.group("name2"))
            if not name[:1].isupper() or name.split()[0].lower() in _NOT_NAME_WORDS:
                continue
            breed = (m.group("breed") or m.group("breed2")).lower()
            found.append((name, _BREEDS[breed]))
            breeds[name] = breed
        for m in re.finditer(
            rf"(?:^|[,;]\s+|\band\s+)(?P<name>{_NAME})(?:,)?\s+(?:is|was)\s+"
            rf"my\s+(?:(?:older|younger|little|big|new|old|best)\s+)?"
            rf"(?P<rel>{_REL_ALT})\b",
            bare,
        ):
            found.append((m.group("name"), m.group("rel").lower()))
        # "my kids are Elsie and Sam", "our two daughters, Ada and Mo"
        for m in re.finditer(
            rf"\b(?:[Mm]y|[Oo]ur)\s+(?:\w+\s+)?(?P<rel>kids|children|sons|daughters)\s*"
            rf"(?:,|are|:)?\s+(?P<names>{_NAME}(?:(?:,\s*|\s+and\s+){_NAME})+)",
            bare,
        ):
            rel = {"kids": "child", "children": "child", "sons": "son", "daughters": "daughter"}[
                m.group("rel")
            ]
            for name in re.split(r",\s*|\s+and\s+", m.group("names")):
                found.append((name, rel))
        found = [(n, r) for n, r in found if r not in possessors]
        for name, rel in found:
            # "my wife Sara's birthday": the wife is Sara, not "Sara's"
            name = re.sub(r"['’]s$", "", name)
            name = _introduced(name)
            if name.split()[0] in _NOT_NAMES:
                continue
            # "my manager Priya Patel" keeps both words; "my dog Rex Today" would not.
            if " " in name and name.split()[1] in _NOT_NAMES:
                name = name.split()[0]
            kind = _RELATIONS[rel.split("'s ")[-1]]
            rel = "'s ".join(_relation(w) for w in rel.split("'s "))  # "mum's": "mother's"
            body = f"{name} is the owner's {rel}."
            attrs = {"relation": rel}
            if name in breeds:
                body = f"{name} is the owner's {rel}, a {breeds[name]}."
                attrs["breed"] = breeds[name]
            if len(sentence.split()) > 5:
                body += f"\n\n{sentence}"
            col.add("entity", {"name": name, "kind": kind, "attributes": attrs},
                    body, [turn.ref], 0.8)  # fmt: skip
        for name, kind, _ in _things_called(bare):
            col.add("entity", {"name": name, "kind": kind}, sentence, [turn.ref], 0.75)

    def _renamed(
        self, col: _Collector, turn: Turn, sentence: str, bare: str, things: list[tuple[str, str]]
    ) -> None:
        """ "I've renamed mine to Leafline", after the app was called SproutLog (this
        sentence or an earlier one of the speaker's, `things`): the new name is an entity
        with the old one among its aliases, and the old one's node says its new name."""
        said = [(at, name, kind) for name, kind, at in _things_called(bare)]
        said += [(m.start(), m.group("name"), "") for m in _RENAME_RE.finditer(bare)]
        for _, name, kind in sorted(said):
            if kind:
                things.append((name, kind))
                continue
            if not things or things[-1][0] == name:
                continue  # renamed from what, the speaker never said
            old, old_kind = things[-1]
            col.add(
                "entity",
                {"name": name, "kind": old_kind, "aliases": [old]},
                f"{name} is the new name of {old}.\n\n{sentence}",
                [turn.ref],
                0.75,
            )
            col.add("entity", {"name": old, "attributes": {"renamed to": name}},
                    f"{old} was renamed {name}.", [turn.ref], 0.75)  # fmt: skip
            things.append((name, old_kind))

    def _their_name(
        self, col: _Collector, turn: Turn, sentence: str, bare: str, before: Sequence[str]
    ) -> None:
        """ "My mum is visiting next month. … Her name is Rosalind, but everyone calls her
        Ros.": the name of the one relation the speaker's sentences just before spoke of
        (`before`: the last few of this turn and the speaker's turn before), when the
        pronoun fits it; the other name an alias."""
        m = _THEIR_NAME_RE.search(bare.strip())
        if m is None:
            return
        name = m.group("name")
        if name.split()[0] in _NOT_NAMES or name.split()[0].lower() in _NOT_NAME_WORDS:
            return
        if " " in name and name.split()[1] in _NOT_NAMES:
            name = name.split()[0]
        female = (m.group("p") or m.group("q")).lower() in ("her", "she")
        unfit = _MALE_RELATIONS if female else _FEMALE_RELATIONS
        rels: dict[str, str] = {}
        for s in before:
            for r in re.finditer(
                rf"\b(?:[Mm]y|[Oo]ur)\s+(?:(?:older|younger|little|big|new|old|best)\s+)?"
                rf"(?P<rel>{_REL_ALT})\b(?!['’]s|\s*,?\s+[{_UP}])",
                s,
            ):
                rels[r.group("rel").lower()] = s
            for r in _BARE_RELATION_RE.finditer(s):
                rels[r.group("rel").lower()] = s
            for r in _TAKEN_IN_RE.finditer(s):
                rels[r.group("rel").lower()] = s
        fit = {_relation(r): r for r in rels if r not in unfit}
        if len(fit) != 1:
            return  # none, or two the pronoun may be of
        [said] = fit.values()
        rel = _relation(said)
        fields: dict[str, object] = {"name": name, "kind": _RELATIONS[said],
                                     "attributes": {"relation": rel}}  # fmt: skip
        alias = _CALLED_TOO_RE.search(bare)
        if alias is not None:
            other = alias.group("alias") or alias.group("alias2")
            if other != name and other.split()[0] not in _NOT_NAMES:
                fields["aliases"] = [other]
        body = f"{name} is the owner's {rel}.\n\n{rels[said]}\n{sentence}"
        col.add("entity", fields, body, [turn.ref], 0.75)

    def _used_to(self, col: _Collector, turn: Turn, sentence: str) -> None:
        """ "I used to love jazz, but I can't stand it now": what holds now is the
        preference, replacing the older one ("used to" alone says nothing of now)."""
        m = _USED_TO_RE.match(sentence.strip())
        if m is None or _HYPOTHETICAL_RE.search(sentence.replace(m.group(0), " ")):
            return
        if _HYPOTHETICAL_RE.search(re.sub(r"\bused\s+to\b", " ", m.group(0))):
            return
        self._preferences(col, turn, sentence, f"I {m.group('now')} {m.group('x')}")

    def _third_person(self, col: _Collector, turn: Turn, sentence: str, bare: str) -> None:
        """A fact about someone else, named at the head of the sentence: "Maya's favourite
        tea is genmaicha", "Ola lives in Bergen" / "moved to Lisbon", "Ola works as a
        chemistry teacher", "Ola loves climbing": an attribute of their entity node."""
        # "My sister Emma prefers tea": the fact is Emma's
        rel = re.match(rf"(?:[Mm]y|[Oo]ur)\s+(?P<rel>{_REL_ALT})\s+(?={_NAME})", bare.strip())
        head = bare.strip()[rel.end() :] if rel else bare.strip()
        kind = _RELATIONS.get(rel.group("rel").lower(), "person") if rel else "person"
        for rx, what in _THIRD_PERSON_RES:
            m = rx.match(head)
            if m is None:
                continue
            name = m.group("n")
            if name.split()[0] in _NOT_NAMES or name.split()[0].lower() in _PRONOUNS:
                continue
            if what == "favourite":
                topic, value = _clean_phrase(m.group("t"), 3), _clean_phrase(m.group("v"), 5)
                attrs = {f"favourite {topic.lower()}": value} if topic and value else {}
            elif what == "location":
                place = m.group("v").strip()
                attrs = {"location": place} if place.split()[0] not in _NOT_NAMES else {}
            elif what in ("role", "role?"):
                role = _clean_phrase(re.split(r"\s+(?:at|for|in|with|on)\s+", m.group("v"))[0], 4)
                if role and what == "role?" and role.lower().split()[-1] not in _JOB_WORDS:
                    continue  # "Ola is a good friend", "Ola is a bit tired"
                attrs = {"role": role} if role else {}
            elif what in ("employer", "from"):
                place = m.group("v").strip().rstrip(".")
                if place.split()[0] in _NOT_NAMES:
                    continue
                attrs = {what: place}
            elif what in ("allergy", "diet", "birthday"):
                value = _clean_phrase(m.group("v"), 4)
                if value is None or value.split()[0].lower() in _PRONOUNS:
                    continue
                attrs = {what: value.lower() if what == "diet" else value}
                # no kind: "Biscuit is allergic to chicken" may be of a dog; no body, as
                # for the owner's facts (`_self`)
                col.add("entity", {"name": name, "attributes": attrs}, "", [turn.ref], 0.7)
                continue
            else:
                thing = _clean_phrase(m.group("v"), 4)
                if thing is None or thing.split()[0].lower() in _PRONOUNS:
                    continue
                attrs = {str(_what(thing)).lower(): what}
            if attrs:
                col.add("entity", {"name": name, "kind": kind, "attributes": attrs},
                        sentence, [turn.ref], 0.7)  # fmt: skip

    def _someone(self, col: _Collector, turn: Turn) -> None:
        """A person introduced as "someone" across a sentence break: "I've been on a few
        dates with someone. Will.", "I met someone called Sam", "I'm seeing someone, Ada".
        Per sentence the name stands alone, so this reads the whole turn."""
        m = re.search(
            rf"\b(?P<how>dates?\s+with|dating|seeing|met|going\s+out\s+with)\s+someone"
            rf"(?:\s+(?:new|special))?(?:\s+(?:called|named)\s+|\s*[.,:;!…—–-]+\s*)"
            rf"(?P<name>{_NAME})\b",
            turn.content,
        )
        if m is None:
            return
        name = m.group("name").rstrip(".")
        if name.split()[0] in _NOT_NAMES:
            return
        if " " in name and name.split()[1] in _NOT_NAMES:
            name = name.split()[0]
        dating = re.search(r"\bdat(?:e|es|ing)\b|\bbeen out\b|\bgoing out\b|\bseeing\b",
                           turn.content)  # fmt: skip
        rel = "partner" if dating else "acquaintance"
        body = (
            f"{name} is someone the owner is seeing."
            if rel == "partner"
            else (f"{name} is someone the owner met.")
        )
        col.add("entity", {"name": name, "kind": "person", "attributes": {"relation": rel}},
                f"{body}\n\n{turn.content.strip()}", [turn.ref], 0.75)  # fmt: skip

    def _event(
        self, col: _Collector, turn: Turn, sentence: str, bare: str, ref_day: _dt.date | None
    ) -> None:
        mentions = resolve_relative(bare, ref_day or _dt.date(1970, 1, 1))
        days = _days(mentions, ref_day)
        carried = not days
        if carried:
            # "Next Tuesday, period 3. We're doing titrations.": a day said alone just
            # before is the day of what this sentence says
            days = _fragment_days(turn, sentence, ref_day)
            if not days:
                return
        masked = _blank_times(_blank(bare, [m.span for m in mentions]))
        rest = re.sub(r"\s+", " ", masked).strip(" ,.!")
        m = _SUBJECT_RE.search(rest)
        someone = None
        if not m:
            noun = _NOUN_EVENT_RE.match(rest) or _THERE_EVENT_RE.match(rest)
            if noun is not None:  # "The vet appointment is on 3 December"
                self._noun_event(col, turn, sentence, noun, days)
                return
        if not m:  # "Idris proposed on Saturday": someone named, at the head of the sentence
            m = re.match(rf"(?P<subj>{_NAME})(?P<rest>\s+.+)", rest)
            if not m or m.group("subj").split()[0] in _NOT_NAMES:
                return
            someone = m.group("subj")
        text = m.group("rest")
        for short, full in (("'m", " am"), ("'re", " are"), ("'ll", " will"), ("'ve", " have")):
            if text.startswith(short):
                text = full + text[len(short) :]
        words = text.split()
        while words and words[0].lower() in _EVENT_FILLERS:  # "I finally handed in …"
            words.pop(0)
        if not words:
            return
        verb = words[0].lower().strip(",")
        if someone is not None and verb in _NOT_DEEDS:
            return  # "Lisbon was lovely on Saturday", "Jonah said on Friday that …"
        going = re.match(r"(?:are|am)\s+going\s+to\s+", text.strip()) is not None
        progressive = (verb in ("am", "are") and len(words) > 1 and words[1].endswith("ing")
                       and not going)  # fmt: skip
        future = verb == "will" or going or progressive
        past = verb in _PAST_IRREGULAR or (verb.endswith("ed") and verb not in _NOT_VERBS_ED)
        perfect = verb in ("have", "has") and _participle(words[1:])
        found = _event_date(masked, days, done=past or perfect, ahead=future)
        if found is None:
            return
        day, tense = found
        has = verb in ("have", "has") and tense != "past"
        # "We fly to Ålesund on the 22nd": the present tense of a plan, of a day ahead
        scheduled = (verb in _SCHEDULED and tense == "future" and not carried
                     and not _HABIT_RE.search(bare))  # fmt: skip
        if not (past or future or has or scheduled):
            return
        title_text = re.sub(r"^(?:will|are going to|am going to|am|are)\s+", "", " ".join(words))
        participants = []
        m_with = re.search(rf"\bwith\s+(?P<p>{_NAME}(?:(?:,\s*|\s+and\s+){_NAME})*)", title_text)
        if m_with:
            participants = [p for p in re.split(r",\s*|\s+and\s+", m_with.group("p"))
                            if p.split()[0] not in _NOT_NAMES]  # fmt: skip
        location = None
        m_at = re.search(r"\b(?:at|in)\s+(?:the\s+)?(?P<l>[A-Z][\w'-]+(?: [A-Z][\w'-]+){0,2})",
                         title_text)  # fmt: skip
        if m_at and m_at.group("l").split()[0] not in _NOT_NAMES:
            location = m_at.group("l")
        # "in" starts a place ("in Portobello"), not a verb's particle ("handed in my notice")
        # "and I'm still dreaming about …" starts another clause
        title = re.split(r"\s+(?:with|at|in(?=\s+(?:the\s+)?[A-Z])|because|since|after|before|"
                         r"and then|and(?=\s+(?:I|we)\b)|so|but|to discuss|where|which)\s+|"
                         r"[,;]|:(?!\d)", title_text, maxsplit=1)[0]  # fmt: skip
        title = re.sub(r"^(?:had|have|has)\s+(?:(?:just|actually|finally|already|also)\s+)*"
                       r"(?:got\s+)?(?:a|an|the|our|my)\s+", "", title, flags=re.I)  # fmt: skip
        head = title.split(maxsplit=2)
        if len(head) > 1 and head[0].lower() in ("have", "has") and _participle(head[1:]):
            title = title.split(maxsplit=1)[1]  # "have booked the registry office"
        title_list = [
            w
            for w in title.split()
            if w.lower()
            not in (
                "a",
                "an",
                "the",
                "our",
                "my",
                "today",
                "tonight",
                "yesterday",
                "morning",
                "afternoon",
                "evening",
                "night",
            )  # fmt: skip
        ]
        title_list = _title_words(title_list)
        rest_words = {w.lower().strip(".!?") for w in title_list[1:]}
        if someone is None and rest_words & _PRONOUN_OBJECTS and rest_words <= _EMPTY_OBJECTS:
            return  # "picked it up", "thinking of doing": a deed that names nothing
        if someone is not None:
            title_list = [someone, *title_list][:8]
            if someone not in participants:
                participants.insert(0, someone)
        if len(title_list) == 1 and title_list[0].lower() in _EVENT_NOUNS:
            # "I have a meeting with Sara on Friday": the thing had, with whom
            title_list += ["with", " and ".join(participants[:2])] if participants else []
        elif len(title_list) < 2:
            return
        fields: dict[str, object] = {"date": day.isoformat(), "title": " ".join(title_list)}
        if participants:
            fields["participants"] = participants
        if location:
            fields["location"] = location
        col.add("event", fields, sentence, [turn.ref], 0.7)

    def _noun_event(
        self,
        col: _Collector,
        turn: Turn,
        sentence: str,
        noun: re.Match[str],
        days: Sequence[_Day],
    ) -> None:
        """An event told by what it is, not by who did it: "The vet appointment is on 3
        December", "My sister's wedding was on Saturday", "Idris's interview is
        tomorrow". Its day is the sentence's first; said in the past, never one ahead,
        said ahead, never one gone by (an explicit date is either)."""
        said = noun.group("verb").lower()
        gone = said == "was"
        fits = [d for d, _span, tense in days
                if not (gone and tense == "future" or not gone and tense == "past")]  # fmt: skip
        if not fits:
            return
        day = fits[0]
        whose = noun.group("whose")
        what = " ".join(noun.group("what").split())
        participants: list[str] = []
        if whose and whose[0].isupper() and whose.split("'")[0] not in _NOT_NAMES:
            participants.append(whose.split("'")[0])  # "Idris's interview"
        title = (
            what
            if not whose or whose.lower() in ("the", "our", "my", "a", "an")
            else f"{whose} {what}"
        )
        if noun.group("with"):
            participants.append(noun.group("with"))
            title += f" with {noun.group('with')}"
        place = noun.group("place")
        if place and place.split()[0] not in _NOT_NAMES:
            title += f" to {place}" if what.split()[-1] in ("trip", "move", "flight") else ""
        fields: dict[str, object] = {"date": day.isoformat(), "title": title}
        if participants:
            fields["participants"] = participants
        if place and place.split()[0] not in _NOT_NAMES:
            fields["location"] = place
        col.add("event", fields, sentence, [turn.ref], 0.65)

    # agent scope

    def _decisions(self, col: _Collector, turns: Sequence[Turn]) -> None:
        for turn in turns:
            if turn.role not in ("user", "assistant"):
                continue
            FOREGROUND.step_aside()
            for sentence in _sentences(turn.content):
                bare = _assertion(sentence)
                if bare is None:
                    continue
                m = _DECISION_RE.search(bare)
                if m:
                    what = _clean_phrase(m.group("x"), 5)
                    about = _clean_phrase(m.group("y"), 5)
                    if not what or not about or what.split()[0].lower() in _PRONOUNS:
                        continue
                    if _STANDING_MARK_RE.search(bare):
                        col.add("pattern", {"topic": about.lower(), "statement": sentence},
                                f"- {sentence}", [turn.ref], 0.6)  # fmt: skip
                    else:
                        col.add("case", {"title": f"choosing {about.lower()}",
                                         "solution": sentence, "outcome": "decided"},
                                f"- {sentence}", [turn.ref], 0.6)  # fmt: skip
                    continue
                m = _CONVENTION_RE.search(bare)
                if m:
                    statement = m.group("s").strip().rstrip(".")
                    topic = _convention_topic(statement)
                    if topic:
                        col.add("pattern", {"topic": topic, "statement": sentence},
                                f"- {sentence}", [turn.ref], 0.6)  # fmt: skip

    def _case(self, col: _Collector, turns: Sequence[Turn]) -> None:
        """A problem the user reported that a later user turn confirms fixed."""
        problem: Turn | None = None
        problem_sentence = ""
        attempts: list[Turn] = []
        for turn in turns:
            if turn.role == "user":
                sentences = [s for s in _sentences(turn.content) if not s.endswith("?")]
                if (
                    problem is not None
                    and any(_FIXED_RE.search(s) for s in sentences)
                    and not any(_NEGATIVE_RE.search(s) for s in sentences)
                ):
                    self._emit_case(col, problem, problem_sentence, attempts, turn)
                    problem, attempts = None, []
                    continue
                if problem is None:
                    for s in _sentences(turn.content):
                        if _TROUBLE_RE.search(s) and not _HYPOTHETICAL_RE.search(s):
                            problem, problem_sentence = turn, s
                            break
            elif problem is not None and turn.role in ("assistant", "tool"):
                attempts.append(turn)

    def _emit_case(
        self, col: _Collector, problem: Turn, sentence: str, attempts: list[Turn], confirm: Turn
    ) -> None:
        title = _case_title(sentence)
        if title is None:
            return
        fix = next((t for t in reversed(attempts) if t.role == "assistant" and t.content.strip()),
                   None)  # fmt: skip
        fields: dict[str, object] = {"title": title, "problem": problem.content.strip(),
                                     "outcome": "solved"}  # fmt: skip
        bullets = [f"- Problem: {sentence}"]
        if fix is not None:
            solution = " ".join(_sentences(fix.content)[:3])
            fields["solution"] = solution
            bullets.append(f"- Fix: {solution}")
        tools = [t.name for t in attempts if t.role == "tool" and t.name]
        if tools:
            fields["tags"] = list(dict.fromkeys(tools))
        refs = [problem.ref, *(t.ref for t in attempts), confirm.ref]
        col.add("case", fields, "\n".join(bullets), refs, 0.65)

    def _tools(self, col: _Collector, turns: Sequence[Turn]) -> None:
        stats: dict[str, dict[str, Any]] = {}
        for turn in turns:
            if turn.role != "tool" or not turn.name:
                continue
            st = stats.setdefault(turn.name, {"ok": 0, "fail": 0, "last": None,
                                              "notes": [], "refs": [], "usage": []})  # fmt: skip
            ok = _succeeded(turn)
            st["ok" if ok else "fail"] += 1
            st["refs"].append(turn.ref)
            if turn.timestamp:
                st["last"] = turn.timestamp
            if ok and turn.tool_input is not None:
                call = f"{turn.name} {short_text(_compact(turn.tool_input), 200)}"
                if call not in st["usage"] and len(st["usage"]) < 3:
                    st["usage"].append(call)
            if not ok:
                st["notes"].append(f"Failed: {short_text(_compact(turn.tool_output), 200)}")
        for name, st in stats.items():
            fields: dict[str, object] = {"name": name, "success_count": st["ok"],
                                         "failure_count": st["fail"]}  # fmt: skip
            if st["usage"]:
                fields["usage"] = "\n".join(st["usage"])
            if st["last"] and _is_datetime(st["last"]):
                fields["last_used"] = st["last"]
            if st["notes"]:
                fields["notes"] = "\n".join(dict.fromkeys(st["notes"]))
            body = f"Called {st['ok'] + st['fail']} time(s): {st['ok']} ok, {st['fail']} failed."
            col.add("tool", fields, body, st["refs"], 0.9)
        self._skills(col, turns)

    def _skills(self, col: _Collector, turns: Sequence[Turn]) -> None:
        """A user task followed by successful tool calls and no complaint: a procedure."""
        i = 0
        while i < len(turns):
            turn = turns[i]
            m = _TASK_RE.match(turn.content.strip()) if turn.role == "user" else None
            if not m:
                i += 1
                continue
            calls: list[Turn] = []
            said: list[Turn] = []
            j = i + 1
            while j < len(turns) and turns[j].role != "user":
                if turns[j].role == "tool":
                    calls.append(turns[j])
                elif turns[j].role == "assistant":
                    said.append(turns[j])
                j += 1
            follow = turns[j] if j < len(turns) else None
            good = [c for c in calls if _succeeded(c)]
            complaint = follow is not None and _NEGATIVE_RE.search(follow.content) is not None
            finished = calls and _succeeded(calls[-1]) and (
                any(_DONE_RE.search(t.content) for t in said[-1:])
                or (follow is not None and _FIXED_RE.search(follow.content) is not None)
                or (follow is not None and re.search(r"\b(?:thanks|thank you|great|perfect)\b",
                                                     follow.content, re.I) is not None)
            )  # fmt: skip
            if len(good) >= 2 and finished and not complaint:
                task = _clean_phrase(_skill_name(m.group("task")), 8)
                if task:
                    steps = "\n".join(
                        f"{k}. `{c.name}` {short_text(_compact(c.tool_input), 160)}".rstrip()
                        for k, c in enumerate(good, start=1)
                    )
                    col.add("skill", {
                        "name": task.lower(), "purpose": turn.content.strip().splitlines()[0],
                        "steps": steps, "prerequisites": list(dict.fromkeys(c.name for c in good
                                                                           if c.name)),
                    }, steps, [turn.ref, *(c.ref for c in calls)], 0.6)  # fmt: skip
            i = j


# an event title names the deed: no adverb that only colours it, no word left hanging at
# its end ("landed just", "booked the registry office for")
# words that name nothing after an event's verb ("picked it up", "thinking of doing it");
# a particle alone ("moved in", "flying out") completes the verb and names the deed
_PRONOUN_OBJECTS = frozenset({
    "it", "them", "this", "that", "these", "those", "one", "ones", "thing", "things",
    "stuff", "do", "doing", "did", "done", "him", "her", "me", "us",
})  # fmt: skip
_EMPTY_OBJECTS = _PRONOUN_OBJECTS | {
    "up", "out", "off", "in", "on", "of", "to", "over", "back", "so", "too", "again",
    "there", "here",
}  # fmt: skip
# what an event is called when it is told by what it is ("the vet appointment is on …")
_EVENT_NOUNS = frozenset({
    "olympiad", "competition", "contest", "quiz", "test", "assembly", "lecture", "seminar",
    "webinar", "rehearsal", "audition", "fair", "parade", "tour", "hackathon", "meetup",
    "appointment", "meeting", "wedding", "party", "interview", "exam", "flight", "trip",
    "concert", "birthday", "surgery", "operation", "match", "game", "race", "ceremony",
    "dinner", "lunch", "visit", "deadline", "launch", "conference", "holiday", "funeral",
    "graduation", "recital", "viewing", "checkup", "check-up", "presentation", "gig",
    "festival", "barbecue", "bbq", "picnic", "hearing", "scan", "demo", "retreat",
    "workshop", "reunion", "christening", "baptism", "housewarming", "tournament",
    "marathon", "anniversary", "performance", "premiere", "move", "session", "class",
    "lesson", "review", "date", "show", "call", "vacation", "exhibition", "opening",
})  # fmt: skip
_NOUN_EVENT_RE = re.compile(
    rf"(?P<whose>[Tt]he|[Mm]y|[Oo]ur|{_NAME}'s)\s+"
    rf"(?P<what>(?:(?:[\w-]+'s|[a-z][\w-]*)\s+){{0,3}}?(?:{'|'.join(sorted(_EVENT_NOUNS))}))"
    rf"(?:\s+(?:to|in|at)\s+(?P<place>{_NAME}))?(?:\s+with\s+(?P<with>{_NAME}))?"
    r"\s+(?P<verb>is|was|will\s+be|'s)\b(?:\s+(?:now|finally|still))?(?:\s+(?:on|at|for))?\s*$"
)
# "There's a department lunch next Friday", "There will be an assembly on Monday"
_THERE_EVENT_RE = re.compile(
    r"[Tt]here(?P<verb>'s|\s+is|\s+will\s+be)\s+(?P<whose>a|an|the|our|my)\s+"
    rf"(?P<what>(?:(?:[\w-]+'s|[a-z][\w-]*)\s+){{0,3}}?(?:{'|'.join(sorted(_EVENT_NOUNS))}))"
    rf"(?:\s+(?:to|in|at)\s+(?P<place>{_NAME}))?(?:\s+with\s+(?P<with>{_NAME}))?"
    r"(?:\s+(?:on|at|for))?\s*$"
)
# verbs whose present tense tells a plan when the day is ahead ("we fly on the 22nd")
_SCHEDULED = frozenset({
    "fly", "flies", "leave", "leaves", "start", "starts", "go", "goes", "arrive", "arrives",
    "begin", "begins", "head", "heads", "travel", "travels", "move", "moves", "meet", "meets",
    "drive", "drives", "visit", "visits", "finish", "finishes", "land", "lands", "return",
    "returns", "sail", "sails", "play", "plays", "sit", "sits", "take", "takes",
})  # fmt: skip
# what is done again and again, not once: "I play football most weekends"
_HABIT_RE = re.compile(
    r"\b(?:every|each|most|usually|always|often|normally|generally|sometimes|never)\b", re.I
)
# a time of day, which says nothing of the event's day or title: "at 10", "at 9:30", "3pm",
# "at noon" (not "at 10 Downing Street")
_TIME_OF_DAY_RE = re.compile(
    r"\b(?:at|from|by|around|about|until|till)\s+(?:\d{1,2}(?:[:.]\d{2})?(?:\s*[ap]\.?m\b\.?)?"
    r"(?![\w:])(?!\s+[A-Z])|noon|midday|midnight)"
    r"|\b\d{1,2}(?::\d{2})?\s*[ap]\.?m\b\.?"
    r"|,?\s*\bperiod\s+\d\b",  # a school's lesson: "next Tuesday, period 3"
    re.I,
)
_EVENT_FILLERS = frozenset({"just", "finally", "actually", "really", "also", "already", "even"})
_EVENT_DANGLING = frozenset({
    "for", "in", "on", "at", "to", "of", "from", "by", "with", "and", "or", "but", "then",
    "now", "about", "into", "the", "a", "an", "my", "our", "his", "her", "their", "it",
    "was", "is", "be", "been",
})  # fmt: skip


def _blank(text: str, spans: Iterable[tuple[int, int]]) -> str:
    """`text` with each span blanked, keeping every position."""
    for a, b in spans:
        text = text[:a] + " " * (b - a) + text[b:]
    return text


def _blank_times(text: str) -> str:
    """`text` with its times of day blanked (`_TIME_OF_DAY_RE`), keeping every position."""
    return _blank(text, [m.span() for m in _TIME_OF_DAY_RE.finditer(text)])


def _fragment_days(turn: Turn, sentence: str, ref_day: _dt.date | None) -> list[_Day]:
    """The days of the sentence before `sentence` in its turn when that one says a day and
    next to nothing else ("Next Tuesday, period 3.", "The 12th."), each with no place in
    this sentence (span (0, 0)); [] otherwise."""
    sentences = _sentences(turn.content)
    if sentence not in sentences or sentences.index(sentence) == 0:
        return []
    before = _assertion(sentences[sentences.index(sentence) - 1])
    if before is None:
        return []
    mentions = resolve_relative(before, ref_day or _dt.date(1970, 1, 1))
    left = _blank_times(_blank(before, [m.span for m in mentions]))
    if len(re.findall(r"[^\W\d_]+", left)) > 1:  # more than "so" or "then": a sentence
        return []
    return [(day, (0, 0), tense) for day, _span, tense in _days(mentions, ref_day)]


def _title_words(words: Sequence[str]) -> list[str]:
    """At most eight words of an event's title, without fillers, ending on a word that
    names something."""
    kept = [w for w in words if w.lower() not in _EVENT_FILLERS][:8]
    # a particle that completes the verb stays ("moved in"): two words at least
    while len(kept) > 2 and kept[-1].lower().strip(".!?") in _EVENT_DANGLING:
        kept.pop()
    return kept


_THING_WORDS = {"project": "project", "app": "product", "startup": "organisation",
                "company": "organisation", "library": "product", "band": "organisation",
                "team": "organisation", "podcast": "product"}  # fmt: skip
# "an app called SproutLog", "a Flask app to track when I water my plants, called SproutLog"
_THING_CALLED_RE = re.compile(
    rf"\b(?P<word>{'|'.join(_THING_WORDS)})\b(?P<between>[^.;!?]{{0,50}}?)\s+(?:called|named)\s+"
    rf"(?P<name>[{_UP}][\w.-]*(?: [{_UP}][\w.-]*)?)"
)


def _things_called(text: str) -> list[tuple[str, str, int]]:
    """(name, kind, position) of each project, app, company … named "called X" in `text`;
    words between the thing and its name may say what it does, never for or with whom
    ("an app for my sister called Sam" names no app)."""
    out = []
    for m in _THING_CALLED_RE.finditer(text):
        between = m.group("between")
        if re.search(rf"\b(?:for|with|by|from|{_REL_ALT})\b", between, re.I):
            continue
        out.append((m.group("name").rstrip("."), _THING_WORDS[m.group("word")], m.start()))
    return out


def _succeeded(turn: Turn) -> bool:
    if turn.ok is not None:
        return turn.ok
    out = turn.tool_output
    if isinstance(out, dict):
        code = out.get("exit_code", out.get("returncode"))
        if isinstance(code, int) and not isinstance(code, bool):
            return code == 0
        return not out.get("error")
    if isinstance(out, str):
        return re.match(r"\s*(?:error|fatal|traceback|exception)\b", out, re.I) is None
    return True


def _compact(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def short_text(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _is_datetime(text: str) -> bool:
    try:
        _dt.datetime.fromisoformat(text)
    except ValueError:
        return False
    return True


_TITLE_FILLERS = {
    "the", "a", "an", "my", "our", "has", "have", "had", "been", "is", "was", "are", "were",
    "keeps", "keep", "i", "i'm", "we", "we're", "getting", "get", "seeing", "see", "hi",
    "hey", "hello", "so", "ok", "okay", "help", "ugh", "still", "now", "suddenly", "again",
    "it", "this", "that", "there", "there's", "just", "when", "and", "but", "with",
}  # fmt: skip


def _case_title(sentence: str) -> str | None:
    """ "<subject> <trouble>: <error>", e.g. "pytest fails: ModuleNotFoundError"."""
    m = _TROUBLE_RE.search(sentence)
    if m is None:
        return None
    subject = [w for w in _WORD_RE.findall(sentence[: m.start()])
               if w.lower() not in _TITLE_FILLERS][-4:]  # fmt: skip
    trouble = m.group(0)
    exc = re.search(r"\b([A-Z]\w+(?:Error|Exception))\b", sentence)
    quoted = re.search(r"'([^'\n]{3,60})'|\"([^\"\n]{3,60})\"", sentence)
    error = None
    if exc and exc.group(1) != trouble:
        error = exc.group(1)
    elif quoted:
        error = quoted.group(1) or quoted.group(2)
    words = [*subject, trouble]
    if len(words) < 2 and error is None:
        return None
    title = " ".join(words)
    if error:
        title += f": {error}"
    return title


def _skill_name(task: str) -> str:
    """A task as a reusable name: versions, articles and "for me" dropped."""
    task = re.sub(r"\b(?:version\s+)?v?\d+(?:\.\d+)+\S*", " ", task, flags=re.I)
    task = re.sub(r"\b(?:for me|please|now|today|again)\b", " ", task, flags=re.I)
    task = re.sub(r"\b(?:of\s+)?(?:the|a|an|our|my)\b", " ", task, flags=re.I)
    return " ".join(task.split())


def _convention_topic(statement: str) -> str | None:
    words = [w.lower() for w in _WORD_RE.findall(statement)]
    words = [w for w in words if w not in _PRONOUNS and w not in ("always", "never", "we")]
    if not words:
        return None
    return " ".join(words[:3])


# --- dates ------------------------------------------------------------------------------


def _reference_day(today: str | None, timestamp: str | None) -> _dt.date | None:
    """The day a turn's relative dates count from: the turn's own time, else `today`."""
    for raw in (timestamp, today):
        if raw:
            ts = parse_timestamp(raw)
            if ts is not None:
                return ts.date()
    return None


_Day = tuple[_dt.date, tuple[int, int], str]  # day, span of its phrase, "past" | "future" | ""


def _days(mentions: Iterable[DateMention], ref: _dt.date | None) -> list[_Day]:
    """The single days among a text's date `mentions` (resolved against `ref`, or any day
    when there is none), with where each phrase is and whether the day is before or after
    `ref` ("" for an explicit date or `ref` itself)."""
    out = []
    for m in mentions:
        if m.start != m.end:
            continue  # a range ("last week") is not the day of an event
        if ref is None and m.relative:
            continue  # only absolute dates can be read without a reference day
        if not m.relative or ref is None:
            out.append((m.start, m.span, ""))
        else:
            out.append((m.start, m.span, "past" if m.start < ref else
                        "future" if m.start > ref else ""))  # fmt: skip
    return out


# The subject of a user's event, "I" or "we": at the head, after a comma, or opening a
# clause ("… and I've booked", "… so we're aiming to move")
_SUBJECT_RE = re.compile(r"(?:^\s*|[,;]\s*|\b(?P<conj>and|so|then|on|in)\s+)(?P<subj>I|[Ww]e)"
                         r"(?P<rest>(?:'m|'re|'ll|'ve)?\s+.+)")  # fmt: skip

# past participles that do not end in -ed ("got" is left out: "I've got" is "I have")
_PARTICIPLES = {"been", "done", "gone", "seen", "given", "taken", "written", "eaten", "spoken",
                "chosen", "driven", "flown", "begun", "broken", "ridden", "sung", "swum",
                "thrown", "worn", "woken", "forgotten", "hidden", "fallen", "grown", "known",
                "shown", "drawn", "run", "come", "become"}  # fmt: skip


def _participle(words: Sequence[str]) -> bool:
    """Whether `words` (what follows "have") open with a past participle, after adverbs:
    "booked flights", "just finished", "finally handed in" (a perfect: a deed done)."""
    for word in words[:3]:
        w = word.lower().strip(",")
        if w.endswith("ly") or w in ("just", "already", "finally", "now", "also", "never",
                                     "ever", "since", "recently"):  # fmt: skip
            continue
        if w == "got":
            return False
        return w in _PARTICIPLES | _PAST_IRREGULAR or (w.endswith("ed") and w not in _NOT_VERBS_ED)
    return False


def _event_date(
    masked: str, days: Sequence[_Day], *, done: bool, ahead: bool
) -> tuple[_dt.date, str] | None:
    """The day of the event a sentence tells, when it names several or names one in
    another clause. `masked` is the sentence with its date phrases blanked (same length).

    A date before the event's subject with nothing else before it ("Last Monday we held
    …", "On Friday, we …") is the event's: the first such. Otherwise the first date after
    the subject, in the event's own clause ("It's free from 1 November, so we're aiming to
    move on Saturday 2 November": the move is the 2nd). Otherwise a date before the
    subject: when the event opens a clause of its own ("Ines turns 30 on 16 May and I've
    booked flights"), it is that other clause's and dates the event only when it agrees
    with the event's tense — a deed `done` (past or perfect) is not dated ahead, one
    `ahead` (will, going to, am …ing) not behind; else there is no date for the event.
    """
    m = _SUBJECT_RE.search(masked)
    if m is None:  # someone named at the head ("Idris proposed on Saturday"): the first
        return days[0][0], days[0][2]
    at = m.start("subj")
    lead = re.sub(r"\b(?:and|so|then|on|in)\b|[\s,;.!?:-]", "", masked[:at])
    before = [d for d in days if d[1][1] <= at]
    after = [d for d in days if d[1][0] >= at]
    if before and not lead:
        return before[0][0], before[0][2]
    if after:
        return after[0][0], after[0][2]
    if m["conj"] not in ("and", "so"):
        return before[0][0], before[0][2]
    for day, _span, tense in before:
        if not (done and tense == "future" or ahead and tense == "past"):
            return day, tense
    return None
