"""Whether what a search found holds the kind of answer its question asks for.

Some questions say what their answer is: a colour ("What colour is Maya's Volvo?"), an
amount of money ("What was her salary at Hollin?", "How much did he pay for the running
shoes?": an amount said of shoes), a time ("What was his finishing time?"), a place in a
ranking ("What finishing position did he achieve?": "came 312th", "out of 2,400"), a
surname, or the name of a named thing ("Which hotel did she stay at in Lisbon?", "What is
the name of Nacho's vet?"). When none of the passages a bundle would
show holds anything of that kind, the memory talks about the subject but never says the
answer, and the bundle says so in a line instead of filling the budget with what is
known of the Volvo (`Results.unanswered`, docs/search.md#relevance).

The test is deliberately narrow: a question whose answer kind is not one of these, or a
named thing outside `NAMED_THINGS` ("Which city …": a city is named without the word), is
never called unanswered. Pure: text in, a verdict out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


COLOURS = _words(
    """
    red orange yellow green blue purple violet pink brown black white grey gray silver gold
    golden beige cream ivory navy teal turquoise cyan magenta maroon burgundy crimson scarlet
    lilac lavender mauve indigo khaki olive lime mint sage emerald jade amber bronze copper
    charcoal tan coral peach mustard ochre plum aubergine rust cobalt azure aqua blonde
    ginger auburn brunette tortoiseshell tabby multicoloured rainbow pastel
    """
)

# Things that are named with their noun near the name ("my cousin Luca", "the Cragside
# climbing gym", "Hotel Avenida"); a question asking for the name of one of them is
# answered by a passage that says the noun (or a word of its group) with a name beside it.
# Not companies, cities or jobs: "Acme Corp employs Alice" names her company without the
# word, so "which company employs her" is never called unanswered.
_PEOPLE_GROUPS = (
    "partner boyfriend girlfriend husband wife fiance fiancé fiancee fiancée spouse",
    "doctor gp dentist surgeon consultant therapist physio",
    "teacher tutor coach instructor",
    "manager boss supervisor colleague",
    "cousin brother sister son daughter nephew niece uncle aunt",
    "grandmother grandfather grandma grandpa gran granny grandad nan",
    "friend neighbour neighbor flatmate housemate roommate landlord landlady",
)
_THING_GROUPS = (
    "hotel hostel inn b&b airbnb guesthouse guest-house resort villa cottage apartment",
    "street road lane avenue drive close crescent terrace way square",
    "school academy college nursery university uni",
    "vet vets veterinary",
    "gym club team band choir group league",
    "restaurant pub bar cafe café bistro bakery shop",
    "dog puppy cat kitten pet rabbit hamster horse pony tortoise parrot",
    "boat car bike",
)
_NAMED_GROUPS = _PEOPLE_GROUPS + _THING_GROUPS
NAMED_THINGS: dict[str, frozenset[str]] = {}
for _group in _NAMED_GROUPS:
    _members = frozenset(_group.split())
    for _w in _members:
        NAMED_THINGS[_w] = _members
# a person "called Morag" may be the colleague asked for
PERSON_NOUNS = _words(" ".join(_PEOPLE_GROUPS))
PERSON_WORDS = _words("woman man guy girl boy lady bloke chap someone person fella kid")
NEAR = 3  # a name at most this many words from its noun ("Gareth, my manager")

_PERSON = r"([A-Z][\w'’-]+)(?:'s|’s)"
_COLOUR_Q = re.compile(r"\b(?:what|which)\s+colou?rs?\b", re.I)
_MONEY_Q = re.compile(
    r"\b(?:salary|salaries|wages?|pay rise|rent|price|fee|how much (?:did|does|do|was|is|were"
    r"|will)\b.*\b(?:cost|costs|pay|paid|earn|earns|earned|charge|charged|spend|spent))\b",
    re.I,
)
_TIME_Q = re.compile(r"\b(?:finishing|finish|race|marathon|lap|personal best)\s+time\b", re.I)
# a place in a ranking: "What finishing position did …", "What place did Theo come in …"
_POSITION_Q = re.compile(
    r"\b(?:finishing|final|overall)\s+(?:position|place|ranking)\b|\bwhat\s+(?:position|place)"
    r"\s+(?:did|does|do|was|were|is)\b[^?]*\b(?:finish|come|place|end|rank)\b",
    re.I,
)
_SURNAME_Q = re.compile(
    rf"\b{_PERSON}\s+(?:surname|last name|family name|maiden name)\b|"
    r"\b(?:surname|last name|family name|maiden name) of ([A-Z][\w'’-]+)"
)
# where a question names the thing whose name it asks for: "the name of [the|X's] … NOUN",
# "which … NOUN", "who is X's … NOUN", "what is X's … NOUN called"; the noun phrase after it
# is read by `_asked_noun`
_NOUN_PHRASE_AT = (
    re.compile(r"\bname of\s+(.*)", re.I),
    re.compile(r"^\s*(?:in |at |to |from )?which\s+(.*)", re.I),
    re.compile(rf"^\s*who (?:is|was|'s)\s+{_PERSON}\s+(.*)", re.I),
    re.compile(rf"^\s*what(?: is|'s| was)\s+{_PERSON}\s+(.*?)(?: called|(?:'s|’s) name)\b", re.I),
)
# words that end a noun phrase
_PHRASE_ENDS = _words(
    """
    of in at on for with that who whom which where when from to by about does do did is are
    was were has have had will would can could should and or
    """
)

_MONEY = re.compile(
    r"[£$€¥]\s?\d|\b\d[\d,.]*\s?(?:k|grand|pounds?|quid|dollars?|euros?|bucks|an hour|a year"
    r"|per hour|per year|p/?h)\b",
    re.I,
)
_NUMBER_WORDS = (
    "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety "
    "hundred half a an"
)
_TIME = re.compile(
    r"\b\d{1,2}:\d{2}\b|\b(?:\d+(?:\.\d+)?|(?:" + "|".join(_NUMBER_WORDS.split()) + r")"
    r"(?:[- ](?:" + "|".join(_NUMBER_WORDS.split()) + r"))*)\s+(?:hours?|hrs?|minutes?|mins?"
    r"|seconds?|secs?)\b",
    re.I,
)
_ORDINAL = (
    r"(?:\d+(?:st|nd|rd|th)|first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth"
    r"|last)"
)
_POSITION = re.compile(
    rf"\b(?:came|come|finished|finish|placed|ranked|was|were|got)\s+(?:in\s+)?(?:joint\s+)?"
    rf"{_ORDINAL}\b|\b{_ORDINAL}\s+(?:place|position|overall|out of|in (?:my|his|her|their|the)"
    r" (?:age group|category|class))\b|\b(?:place|position)\s+\d+\b|\bout of [\d,]{2,}\b",
    re.I,
)
_SENTENCE_END = re.compile(r"(?<=[.!?;\n])\s+|\s+[-–—]\s+")
# a name given as one, whatever it names: "a woman called Morag", "has a name: Nacho"
_GIVEN_NAME = re.compile(
    r"\b(?:called|named|name is|name's|name was|a name:)\s+(?:the )?([A-Z][\w'’-]+)"
)
_WORD = re.compile(r"[\w'’&-]+")
# capitalised words that are not a name
_NOT_NAMES = _words(
    """
    i i'm i've i'll i'd i’m i’ve i’ll i’d ok okay oh yes no mr mrs ms dr monday tuesday
    wednesday thursday friday saturday sunday january february march april may june july
    august september october november december christmas easter
    """
)

# words a sentence often starts with: capitalised there, not names
_STARTERS = _words(
    """
    a an the this that these those there here it its he she we they you his her our their my
    your what when where which who why how if so but and or because as after before since
    while then now just also still yes no not well oh ah hey hi hello thanks thank sorry
    good great nice lovely long short big small new old first last next got had have has was
    were is are been being did do does went came took made said told guess work today
    yesterday tonight tomorrow honestly apparently anyway actually seriously finally
    """
)

# the words of a question that say what kind of answer it wants, not what it is about
_KIND_WORDS = _words(
    """
    colour color colours colors salary salaries wage wages pay rise rent price fee cost costs
    paid earn earns earned charge charged spend spent much
    """
)


@dataclass(frozen=True, slots=True)
class Wanted:
    """What a question's answer is: `kind` (colour, money, time, surname, name) and the
    words the bundle uses for it ("a colour", "a name for the hotel")."""

    kind: str
    what: str
    nouns: frozenset[str] = frozenset()  # a name's noun and the words of its group
    person: str = ""  # a surname's person
    asked: frozenset[str] = frozenset()  # the question's words, lower case: not an answer
    # the words naming what the question is about ("maya", "volvo", "v60"): a colour or an
    # amount counts only in a text that says one of them ("green tea" is not the car's)
    about: frozenset[str] = frozenset()
    # the people and places the question names ("maya", "lisbon"): a name counts only in a
    # sentence that says one of them or was said by one ("my boyfriend Aled", said by
    # Maya, does not name Jonah's partner)
    names: frozenset[str] = frozenset()

    def found_in(self, passages: Iterable[tuple[str, str | None]]) -> bool:
        """Whether any of `passages` (text, speaker or None) holds something of this kind."""
        if self.kind != "name":
            return any(self._in(text) for text, _ in passages)
        said = [(text, speaker) for text, speaker in passages]
        proper = _proper_nouns(text for text, _ in said)
        for text, speaker in said:
            by_named = not self.names or (speaker or "").lower() in self.names
            if any(self._named(s, by_named, proper) for s in _SENTENCE_END.split(text)):
                return True
        return False

    def _in(self, text: str) -> bool:
        if self.kind == "colour":
            words = {_bare(w) for w in _WORD.findall(text)}
            return not words.isdisjoint(COLOURS) and self._says_subject(words)
        if self.kind == "money":
            words = {_bare(w) for w in _WORD.findall(text)}
            return _MONEY.search(text) is not None and self._says_subject(words)
        if self.kind == "time":
            return _TIME.search(text) is not None
        if self.kind == "position":
            return _POSITION.search(text) is not None
        # a surname
        if re.search(r"\b(?:surname|last name|family name|maiden name|née)\b", text, re.I):
            return True
        return any(
            _is_name(m.group(1), self.asked)
            for m in re.finditer(rf"\b{re.escape(self.person)}\s+([A-Z][\w'’-]+)", text)
        )

    def _says_subject(self, words: set[str]) -> bool:
        return not self.about or not words.isdisjoint(self.about)

    def _named(self, sentence: str, by_named: bool, proper: set[str]) -> bool:
        """A sentence that says one of the nouns with a name at most `NEAR` words from it
        ("my cousin Luca", "Gareth, my manager", "the Cragside climbing gym"), or gives a
        name ("a woman called Morag" for a person, "the kitten has a name: Nacho"); and
        says one of the question's names or was said by one of them (`by_named`)."""
        words = _WORD.findall(sentence)
        if not by_named and {_bare(w) for w in words}.isdisjoint(self.names):
            return False
        kinds = [_singular(w.lower()) for w in words]
        nouns_at = [i for i, w in enumerate(kinds) if w in self.nouns]
        if any(_is_name(m.group(1), self.asked) for m in _GIVEN_NAME.finditer(sentence)) and (
            nouns_at or (self.nouns & PERSON_NOUNS and not PERSON_WORDS.isdisjoint(kinds))
        ):
            return True
        names_at = [
            i
            for i, w in enumerate(words)
            if _is_name(w, self.asked) and (i > 0 or _first_is_name(w, sentence, proper))
        ]
        return any(abs(i - j) <= NEAR for i in nouns_at for j in names_at)


def _proper_nouns(texts: Iterable[str]) -> set[str]:
    """The words capitalised inside a sentence somewhere in `texts` (lower case): names."""
    out: set[str] = set()
    for text in texts:
        for sentence in _SENTENCE_END.split(text):
            out.update(_bare(w) for w in _WORD.findall(sentence)[1:] if w[:1].isupper())
    return out


def _first_is_name(word: str, sentence: str, proper: set[str]) -> bool:
    """A sentence's first word is capitalised whatever it is: a name when it is not a word
    sentences start with and is capitalised inside a sentence too, or is set off by a
    comma ("Gareth, my manager, …")."""
    if word.lower() in _STARTERS:
        return False
    return _bare(word) in proper or sentence.lstrip().startswith(word + ",")


def _bare(word: str) -> str:
    return word.lower().removesuffix("'s").removesuffix("’s")


def _singular(word: str) -> str:
    if word in NAMED_THINGS:
        return word
    for end in ("es", "s"):
        if word.endswith(end) and word[: -len(end)] in NAMED_THINGS:
            return word[: -len(end)]
    return word.removesuffix("'s").removesuffix("’s")


def _is_name(word: str, asked: frozenset[str]) -> bool:
    """A capitalised word that is not the question's own, a day or a month, or `I`."""
    if not word[:1].isupper():
        return False
    low = word.lower().removesuffix("'s").removesuffix("’s")
    return low not in _NOT_NAMES and low not in asked


def wanted(question: str, about: str = "") -> Wanted | None:
    """The kind of answer `question` asks for, when it says; None otherwise. `about`: the
    question's topic words (the caller's keywords, its stop words dropped)."""
    words = _WORD.findall(question)
    asked = frozenset(_bare(w) for w in words)
    names = frozenset(_bare(w) for w in words[1:] if _is_name(w, frozenset()))
    subject = frozenset(_bare(w) for w in _WORD.findall(about)) - _KIND_WORDS
    if _COLOUR_Q.search(question):
        return Wanted("colour", "a colour", asked=asked, about=subject)
    if _MONEY_Q.search(question):
        thing = _paid_for(question)  # "pay for the running shoes": an amount said of shoes
        return Wanted("money", "an amount of money", asked=asked, about=thing or subject)
    if _TIME_Q.search(question):
        return Wanted("time", "a time", asked=asked)
    if _POSITION_Q.search(question):
        return Wanted("position", "a place in the ranking", asked=asked)
    m = _SURNAME_Q.search(question)
    if m:
        person = m.group(1) or m.group(2)
        return Wanted("surname", f"{person}'s surname", person=person, asked=asked)
    noun = _asked_noun(question)
    if noun is not None:
        return Wanted(
            "name", f"a name for the {noun}", NAMED_THINGS[noun], asked=asked, names=names
        )
    return None


_PAID_FOR = re.compile(
    r"\b(?:pay|paid|spend|spent|cost|costs)\s+(?:for|on)\s+(?:the|a|an|his|her|their|its|my"
    r"|your|our)\s+(.*)",
    re.I,
)
_PRONOUNS = _words("he she they it we i you him them")
_PAID_NAMES = _words("rent salary salaries wage wages fee fees price prices")


def _paid_for(question: str) -> frozenset[str]:
    """The thing a money question says was paid for ("How much did Callum pay for the
    running shoes he bought?" -> shoes, shoe), as the words an amount must be said beside;
    empty when it does not say."""
    m = _PAID_FOR.search(question)
    if m is None or not _PAID_NAMES.isdisjoint(w.lower() for w in _WORD.findall(question)):
        return frozenset()  # "pay in rent for the flat": the rent is what an amount is of
    head = ""
    for word in _WORD.findall(m.group(1)):
        low = word.lower()
        if low in _PHRASE_ENDS or low in _PRONOUNS:
            break
        head = _bare(word)
    if not head:
        return frozenset()
    return frozenset({head, head[:-1]} if head.endswith("s") else {head, head + "s"})


def _asked_noun(question: str) -> str | None:
    """The named thing a question asks the name of: the last word of the noun phrase after
    `_NOUN_PHRASE_AT` that is one of `NAMED_THINGS` ("the physics teacher Theo hired" ->
    teacher, "Daniel's grandad's cat" -> cat)."""
    for rx in _NOUN_PHRASE_AT:
        m = rx.search(question)
        if m is None:
            continue
        noun = None
        for word in _WORD.findall(m.group(m.lastindex or 0)):
            low = word.lower()
            if low.endswith(("'s", "’s")) or low in ("the", "a", "an", "his", "her", "their"):
                continue  # a determiner: "the", "Maya's", "grandad's"
            if low in _PHRASE_ENDS or (noun is not None and word[:1].isupper()):
                break
            if low in NAMED_THINGS:
                noun = low
        return noun
    return None
