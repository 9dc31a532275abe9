"""People apart: in a conversation between named people, whose fact is whose.

The owner of the memory is one of the speakers; what another speaker says about themself is
about them, not the owner. These functions decide the owner speaker and move other
speakers' self-descriptions from the owner's profile to an entity node per person, and
relate the people another speaker names to that speaker, not to the owner.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence

from contextfs.conversations.extract import Candidate
from contextfs.conversations.rule_lexicon import _UP, _assertion, _relation, _sentences
from contextfs.conversations.transcript import Turn

# a speaker's node: at most this many of their sentences from one conversation file
HUB_LINES = 16
# said of themself or their own: a first-person word ...
_FIRST_PERSON = re.compile(
    r"\b(?:I|I['’](?:m|ve|d|ll)|[Mm]y|[Oo]ur|[Ww]e|[Ww]e['’](?:re|ve|d|ll)|me|us)\b"
)
# ... and something named or counted: a capitalised word past the first, or a number
_NAMED = re.compile(rf"(?<=\w )(?!I\b|I['’])[{_UP}][^\W\d_A-Z]+|\d")


def owner_speaker(turns: Sequence[Turn], *owner_names: str | None) -> str | None:
    """Which named speaker of a conversation is the owner: the one named like the owner
    (the profile's `name`, or the owner directory: `user/efua` is Efua). None when no
    speaker is named so, or when the user turns carry fewer than two names (a plain
    user/assistant transcript: every user turn is the owner's); the facts then stay with
    the owner, as a conversation with one user always did."""
    names = list(dict.fromkeys(t.name for t in turns if t.role == "user" and t.name))
    if len(names) < 2:
        return None
    for owner in (o for o in owner_names if o):
        want = owner.lower().replace("-", " ")
        for n in names:
            if n.lower() == want or n.lower().split()[0] == want:
                return n
    return None


def attribute_speakers(
    candidates: Sequence[Candidate], turns: Sequence[Turn], owner: str | None
) -> list[Candidate]:
    """People apart: a first-person fact said by another named speaker is about that
    speaker, not the owner. Their profile facts and preferences become attributes of an
    entity node named after them (kind person), and their events name them among the
    participants; a person or thing they name ("my brother Kofi") is related to them
    (`_theirs`); everything else stays as it was. When two or more people speak in the
    user turns and none is named like the owner (`owner` None: a conversation between
    others the owner keeps), each one's facts go to their own entity: none of them is
    taken for the owner, and two people's facts never mix in one profile."""
    named = {t.name for t in turns if t.role == "user" and t.name}
    if owner is None and len(named) < 2:
        return list(candidates)
    speaker = {t.ref: t.name for t in turns if t.role == "user"}
    out: list[Candidate] = []
    for c in candidates:
        said_by = {n for ref in c.turns if (n := speaker.get(ref)) is not None}
        if not said_by or owner in said_by:
            out.append(c)
            continue
        if c.type == "event":  # who it happened to: their name among its participants
            had = c.fields.get("participants")
            people = list(had) if isinstance(had, list) else []
            people += [n for n in sorted(said_by) if n not in people]
            out.append(
                Candidate(c.type, {**c.fields, "participants": people}, c.body, c.turns,
                          c.confidence)
            )  # fmt: skip
            continue
        name = sorted(said_by)[0]
        if c.type == "entity":  # "my brother Kofi", said by Efua: Efua's brother
            out.append(_theirs(c, name))
            continue
        if c.type not in ("profile", "preference"):
            out.append(c)
            continue
        topic = str(c.fields.get("topic", "likes"))
        if c.type == "profile":
            attrs = {}
            for k, v in c.fields.items():
                if isinstance(v, dict):  # facts: each its own attribute ("allergy: sesame")
                    attrs.update({str(a): str(b) for a, b in v.items()})
                elif k != "name":
                    attrs[k] = ", ".join(map(str, v)) if isinstance(v, list) else str(v)
        elif "value" in c.fields:
            attrs = {topic: str(c.fields["value"])}
        else:
            attrs = {}
        # what they took back ("I'm not allergic to peanuts after all"): out of their node
        taken = tuple(("attributes", key or (topic if c.type == "preference" else field), v)
                      for field, key, v in c.retracts)  # fmt: skip
        if not attrs and not taken:
            continue
        out.append(
            Candidate(
                "entity",
                {"name": name, "kind": "person", "attributes": attrs},
                c.body,
                c.turns,
                c.confidence,
                taken,
            )
        )
    return out


def _theirs(c: Candidate, speaker: str) -> Candidate:
    """An entity another speaker told of ("my brother Kofi", "I met someone called Sam",
    the firm they work at): its relation and text are the speaker's, not the owner's
    ("Kofi is Efua's brother.")."""
    body = re.sub(r"\bthe owner's\b", f"{speaker}'s", c.body)
    body = re.sub(r"\bthe owner\b", speaker, body)
    fields = dict(c.fields)
    attrs = fields.get("attributes")
    rel = attrs.get("relation") if isinstance(attrs, dict) else None
    if isinstance(attrs, dict) and isinstance(rel, str):
        fields["attributes"] = {**attrs, "relation": f"{speaker}'s {rel}"}
    return Candidate(c.type, fields, body, c.turns, c.confidence)


# relations one has one of at a time: a later "my new manager Amara" replaces Vikram in the
# profile's facts, right; a later "my cousin Theo" would replace Dev, wrong (each stays an
# entity of its own, relation and all)
_ONE_AT_A_TIME = {
    "mother", "father", "wife", "husband", "partner", "girlfriend",
    "boyfriend", "fiance", "fiancee", "manager", "boss", "landlord", "mentor", "tech lead",
}  # fmt: skip


def owner_relations(candidates: Sequence[Candidate]) -> list[Candidate]:
    """The owner's node names the people that are theirs, as a hub names another speaker's
    (`speaker_hubs`): an entity whose relation is the owner's own and one they have one of
    at a time ("my manager Sandra", "my mum … Her name is Rosalind"; not "Efua's brother",
    not "mother's cat", after `attribute_speakers`, nor a cousin, friend or dog, of which
    there may be several) makes a profile fact `manager: Sandra`; two in one conversation
    are both named (`partner: Will, Sam`). Nothing of theirs to show: no body, no turns."""
    facts: dict[str, list[str]] = {}
    for c in candidates:
        attrs = c.fields.get("attributes")
        rel = attrs.get("relation") if isinstance(attrs, dict) else None
        name = c.fields.get("name")
        if c.type != "entity" or not isinstance(rel, str) or not isinstance(name, str):
            continue
        if "'s " in rel:
            continue
        rel = _relation(rel)  # an LLM's "mum" is the rules' "mother": one fact
        if rel not in _ONE_AT_A_TIME:
            continue
        facts.setdefault(rel, [])
        if name not in facts[rel]:
            facts[rel].append(name)
    if not facts:
        return []
    fields: dict[str, object] = {"facts": {r: ", ".join(n) for r, n in facts.items()}}
    # no turns, as a hub: a search that finds the profile must not bring with it every
    # turn that named someone of the owner's (`Searcher._add_linked_turns`); each entity
    # keeps its own
    return [Candidate("profile", fields, "", (), 0.7)]


def speaker_hubs(
    candidates: Sequence[Candidate], turns: Sequence[Turn], owner: str | None
) -> list[Candidate]:
    """Every named speaker but the owner, when two or more people speak in the user turns:
    an entity (kind person) named after them, whatever else the rules found of them. Its
    attributes: who they talk with, and the people they named as theirs by relation
    (`_theirs`: "Efua's partner" makes `partner: Idris`). Its body, appended per
    conversation file: what they said of themself and their own (plain first-person
    assertions that name or count something: "I've signed up for the Tatton Park half
    marathon in October"), at most `HUB_LINES`, each with its day and turn id. Those lines
    quote turns: search finds the turns themselves, where they were said
    (`search.passages.without_quoted_turns`), and the node names no turn as its source."""
    named = list(dict.fromkeys(t.name for t in turns if t.role == "user" and t.name))
    if len(named) < 2:
        return []
    relations: dict[str, dict[str, str]] = {}
    for c in candidates:
        attrs = c.fields.get("attributes")
        rel = attrs.get("relation") if isinstance(attrs, dict) else None
        name = c.fields.get("name")
        if c.type == "entity" and isinstance(rel, str) and isinstance(name, str):
            whose, sep, what = rel.partition("'s ")
            if sep and whose in named and what:
                relations.setdefault(whose, {})[what] = name
    out = []
    for speaker in named:
        if speaker == owner:
            continue
        others = [n for n in named if n != speaker]
        lines: list[str] = []
        for t in turns:
            if t.role != "user" or t.name != speaker:
                continue
            day = _day(t.timestamp)
            for sentence in _sentences(t.content):
                bare = _assertion(sentence)
                if bare is None or len(bare.split()) < 5 or len(lines) >= HUB_LINES:
                    continue
                if _FIRST_PERSON.search(bare) and _NAMED.search(bare):
                    lines.append(f"- {day + ' ' if day else ''}[{t.ref}] {sentence}")
        body = "\n".join(lines)
        attrs = {"talks with": ", ".join(others), **relations.get(speaker, {})}
        fields: dict[str, object] = {"name": speaker, "kind": "person", "attributes": attrs}
        # no turns of its own: its lines cite theirs, and a search that finds this node
        # by the name it asks about must not bring every turn of the person with it
        # (`Searcher._add_linked_turns`)
        out.append(Candidate("entity", fields, body, (), 0.7))
    return out


def _day(timestamp: str | None) -> str:
    """A turn's day in words ("14 March 2023"), or "" when it has no readable one."""
    if not timestamp:
        return ""
    try:
        return dt.datetime.fromisoformat(timestamp.replace("Z", "+00:00")).strftime("%-d %B %Y")
    except ValueError:
        return ""
