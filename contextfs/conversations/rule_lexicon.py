"""The rule extractor's vocabulary: sentence helpers, lexicons and the patterns it matches.

Data more than logic: the word lists (topics, languages, jobs, relations), the regular
expressions for first-person statements, decisions, fixes and tasks, and the small helpers
that cut a turn into assertive sentences. `extract.RuleExtractor` reads them; nothing here
knows of candidates or types.
"""

from __future__ import annotations

import re

# --- text helpers -----------------------------------------------------------------------

_SENT_SPLIT_RE = re.compile(r"(?<=[.!?])[\"'”’)]*\s+|\n+")
_QUOTED_RE = re.compile(r"\"[^\"\n]*\"|“[^”\n]*”|(?<![A-Za-z])'[^'\n]{3,}'(?![A-Za-z])")
_HYPOTHETICAL_RE = re.compile(
    r"\b(?:if|unless|whether|suppose|supposing|imagine|hypothetically|pretend|wonder|"
    r"would|could|might|maybe|perhaps|should i|what if|let's say|in theory|"
    r"used to|wish)\b",
    re.I,
)
_CODE_RE = re.compile(r"```.*?```|`[^`\n]*`", re.S)
_WORD_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9+#.'-]*")


def _sentences(text: str) -> list[str]:
    text = _CODE_RE.sub(" ", text)
    out = []
    for s in _SENT_SPLIT_RE.split(text):
        s = s.strip().lstrip("-*>•").strip()
        if s:
            out.append(s)
    return out


def _assertion(sentence: str) -> str | None:
    """The sentence without quotes if it is a plain assertion, None for questions etc."""
    if sentence.rstrip().endswith("?"):
        return None
    bare = _QUOTED_RE.sub(" ", sentence)
    if _HYPOTHETICAL_RE.search(bare):
        return None
    return bare


def _clean_phrase(text: str, max_words: int) -> str | None:
    """A short noun phrase: cut at the first clause break, None if too long or empty."""
    text = re.split(
        r"\s*(?:[,;:()!?]|\.(?:\s|$)| - | — | but | because | since | so that | so | "
        r"and i | and we | when | although | though | which | who | as long as )",
        " " + text + " ",
        maxsplit=1,
        flags=re.I,
    )[0]
    text = text.strip().strip(".").strip()
    text = re.sub(r"^(?:the|a|an|my|our|some)\s+", "", text, flags=re.I)
    words = text.split()
    if not words or len(words) > max_words:
        return None
    return " ".join(words)


def _reason(sentence: str) -> str | None:
    m = re.search(r"\b(?:because|since|as it|as they)\s+(.+?)[.!]?$", sentence, re.I)
    if not m:
        return None
    return m.group(1).strip() or None


_PRONOUNS = {
    "it", "this", "that", "these", "those", "you", "your", "them", "him", "her", "how",
    "what", "when", "where", "why", "which", "who", "to", "being", "having", "doing",
    "there", "here", "one", "ones", "something", "anything", "everything", "nothing",
    "the", "a", "an", "whatever", "myself", "me", "us", "we", "they", "he", "she", "all",
    "both", "either", "neither", "more", "less", "most", "much", "very", "so", "too",
}  # fmt: skip


# --- lexicons ---------------------------------------------------------------------------

# A preferred option names its topic when the owner did not ("I prefer vim" -> editor).
_TOPIC_OF = {
    "editor": ("vim", "neovim", "emacs", "vs code", "vscode", "visual studio code", "sublime",
               "sublime text", "helix", "nano", "intellij", "pycharm", "zed"),
    "indentation": ("tabs", "spaces", "two spaces", "four spaces", "2 spaces", "4 spaces"),
    "theme": ("dark mode", "light mode", "dark theme", "light theme"),
    "shell": ("bash", "zsh", "fish"),
    "test runner": ("pytest", "unittest", "jest", "vitest", "mocha"),
    "package manager": ("uv", "poetry", "pip", "pnpm", "yarn", "npm", "conda"),
    "hot drink": ("tea", "coffee", "green tea", "black coffee"),
    "operating system": ("linux", "macos", "windows"),
    "reply length": ("short answers", "short replies", "concise answers", "brief answers",
                     "long answers", "detailed answers"),
    "seat": ("window seats", "aisle seats", "a window seat", "an aisle seat", "window seat",
             "aisle seat"),
    "units": ("metric units", "imperial units", "metric", "imperial"),
    "date format": ("iso dates", "iso 8601 dates", "iso 8601"),
}  # fmt: skip
_OPTION_TOPIC = {opt: topic for topic, opts in _TOPIC_OF.items() for opt in opts}

_LANGUAGES = {
    "english", "french", "german", "spanish", "italian", "portuguese", "dutch", "polish",
    "russian", "ukrainian", "czech", "swedish", "norwegian", "danish", "finnish", "greek",
    "turkish", "arabic", "hebrew", "hindi", "bengali", "urdu", "tamil", "mandarin",
    "cantonese", "chinese", "japanese", "korean", "vietnamese", "thai", "indonesian",
    "malay", "swahili", "persian", "farsi", "romanian", "hungarian", "catalan", "basque",
    "welsh", "irish", "tagalog", "punjabi", "marathi", "telugu", "serbian", "croatian",
}  # fmt: skip

_JOB_WORDS = {
    "engineer", "developer", "programmer", "designer", "manager", "scientist", "teacher",
    "nurse", "doctor", "physician", "lawyer", "researcher", "analyst", "student", "writer",
    "consultant", "architect", "accountant", "founder", "co-founder", "cto", "ceo", "cfo",
    "editor", "journalist", "professor", "chef", "pharmacist", "administrator", "sre",
    "intern", "lead", "director", "photographer", "artist", "musician", "translator",
    "paramedic", "electrician", "librarian", "economist", "statistician", "mechanic",
    "veterinarian", "vet", "dentist", "surgeon", "therapist", "recruiter", "marketer",
    "technician", "officer", "specialist", "coordinator", "owner", "freelancer",
    "postdoc", "phd student", "tester", "maintainer", "illustrator", "producer",
}  # fmt: skip

_RELATIONS = {
    # relation word -> entity kind
    "dog": "animal", "cat": "animal", "puppy": "animal", "kitten": "animal", "pet": "animal",
    "horse": "animal", "parrot": "animal", "rabbit": "animal",
    "sister": "person", "brother": "person", "mother": "person", "mom": "person",
    "mum": "person", "father": "person", "dad": "person", "wife": "person",
    "husband": "person", "partner": "person", "son": "person", "daughter": "person",
    "friend": "person", "colleague": "person", "coworker": "person", "co-worker": "person",
    "manager": "person", "boss": "person", "cousin": "person", "aunt": "person",
    "uncle": "person", "grandmother": "person", "grandma": "person",
    "grandfather": "person", "grandpa": "person", "grandad": "person", "granddad": "person",
    "gran": "person", "granny": "person", "nan": "person", "niece": "person", "nephew": "person",
    "roommate": "person", "flatmate": "person", "neighbor": "person", "neighbour": "person",
    "teammate": "person", "mentor": "person", "girlfriend": "person",
    "boyfriend": "person", "fiance": "person", "fiancee": "person", "client": "person",
    "landlord": "person", "tech lead": "person", "report": "person", "child": "person",
}  # fmt: skip
# one relation said in other words is one relation: "my mum Ingrid" and "my mother Ingrid"
# make one profile fact `mother: Ingrid` (a wife, husband or partner stays what was said)
_SAME_RELATION = {
    "mum": "mother", "mom": "mother", "dad": "father", "grandma": "grandmother",
    "gran": "grandmother", "granny": "grandmother", "nan": "grandmother",
    "grandpa": "grandfather", "grandad": "grandfather", "granddad": "grandfather",
    "coworker": "colleague", "co-worker": "colleague", "neighbor": "neighbour",
}  # fmt: skip


def _relation(word: str) -> str:
    """A relation word in the one form kept of it ("Mum", "mom": "mother")."""
    word = word.lower()
    return _SAME_RELATION.get(word, word)


_REL_ALT = "|".join(sorted((re.escape(r) for r in _RELATIONS), key=len, reverse=True))
# Capital and small letters of names, the accented and other alphabets' too ("Åsa",
# "Øyvind", "José"), for character classes: `[{_UP}]`, `[{_LO}]`
_UP = "A-ZÀ-ÖØ-Þ" + "".join(c for c in map(chr, range(0x100, 0x530)) if c.isupper())
_LO = "a-zß-öø-ÿ" + "".join(c for c in map(chr, range(0x100, 0x530)) if c.islower())
_NAME = rf"[{_UP}][{_LO}'-]+(?: [{_UP}][{_LO}'-]+)?"
# what "I'm X," says that is not a name
_NOT_SELF_NAMES = {
    "American", "Canadian", "Mexican", "Brazilian", "Argentinian", "British", "English",
    "Scottish", "Welsh", "Irish", "French", "German", "Dutch", "Belgian", "Swiss",
    "Austrian", "Italian", "Spanish", "Portuguese", "Polish", "Czech", "Swedish",
    "Norwegian", "Danish", "Finnish", "Icelandic", "Greek", "Turkish", "Russian",
    "Ukrainian", "Indian", "Pakistani", "Chinese", "Japanese", "Korean", "Vietnamese",
    "Thai", "Filipino", "Indonesian", "Australian", "Nigerian", "Kenyan", "Ghanaian",
    "Egyptian", "Moroccan", "Israeli", "Iranian", "Persian", "European", "African",
    "Asian", "Latino", "Latina", "Catholic", "Christian", "Muslim", "Jewish", "Buddhist",
    "Hindu", "Sikh", "Sorry", "Fine", "Good", "Great", "Okay", "Ok", "Here", "Back",
    "Home", "Done", "Ready", "Sure", "Not", "So", "Just", "Still", "Also", "Really",
}  # fmt: skip
_NOT_NAMES = {
    "I", "The", "A", "An", "He", "She", "They", "We", "It", "This", "That", "My", "Our",
    "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday",
    "Today", "Yesterday", "Tomorrow", "And", "But", "So", "Also", "Then",
}  # fmt: skip

_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august",
           "september", "october", "november", "december")  # fmt: skip
_MONTH_ALT = "|".join(m for m in _MONTHS) + "|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec"

_PAST_IRREGULAR = {
    "had", "went", "met", "got", "gave", "took", "made", "saw", "flew", "drove", "ran",
    "began", "did", "held", "won", "lost", "left", "came", "bought", "sold", "wrote",
    "spent", "found", "broke", "fell", "ate", "caught", "built", "sent", "kept", "paid",
    "threw", "rode", "swam", "sang", "brought", "taught", "heard", "hit", "cut", "quit",
    "shut", "set", "put", "became", "chose", "drank", "forgot", "froze", "hid", "led",
    "sat", "slept", "spoke", "stood", "told", "understood", "woke", "wore",
}  # fmt: skip
_NOT_VERBS_ED = {"red", "bed", "need", "feed", "seed", "speed", "shed", "bred", "wed"}


# --- the rule extractor -----------------------------------------------------------------

_LEAD = (
    r"(?:^|[,;:]\s+|\b(?:and|but|so|also|actually|honestly|personally|oh|btw|fyi)\s+|"
    r"\b(?:[Tt]hese\s+days|[Nn]owadays|[Ll]ately)\s*,?\s+)"
)
_ADV = (
    r"(?:(?:really|absolutely|just|generally|usually|definitely|totally|much|strongly|"
    r"genuinely|honestly|still|also|always|truly|kind of|sort of)\s+)*"
)

_PREF_RES: list[tuple[re.Pattern[str], str]] = [
    (
        re.compile(
            rf"{_LEAD}my\s+(?:absolute\s+)?favou?rite\s+(?P<topic>[a-z][\w -]{{1,40}}?)"
            r"\s+(?:is|are)\s+(?P<value>.+)",
            re.I,
        ),
        "favourite",
    ),
    (
        re.compile(
            rf"^(?P<value>[{_UP}][\w .+#-]{{0,40}}?)\s+(?:is|are)\s+my\s+(?:absolute\s+)?"
            r"favou?rite\s+(?P<topic>[a-z][\w -]{1,40})",
            re.I,
        ),
        "favourite",
    ),
    (re.compile(rf"{_LEAD}I\s+{_ADV}prefer\s+(?P<value>.+)", re.I), "prefer"),
    (
        re.compile(rf"{_LEAD}I\s+{_ADV}(?:can't|cannot|can not)\s+stand\s+(?P<value>.+)", re.I),
        "dislikes",
    ),
    (
        re.compile(rf"{_LEAD}I\s+{_ADV}(?:hate|dislike|detest|loathe)\s+(?P<value>.+)", re.I),
        "dislikes",
    ),
    (
        re.compile(
            rf"{_LEAD}I\s+(?:really\s+)?(?:don't|do not)\s+(?:really\s+)?like\s+"
            r"(?P<value>.+)",
            re.I,
        ),
        "dislikes",
    ),
    (re.compile(rf"{_LEAD}I\s+{_ADV}(?:love|adore)\s+(?P<value>.+)", re.I), "loves"),
    (re.compile(rf"{_LEAD}I\s+{_ADV}(?:like|enjoy)\s+(?P<value>.+)", re.I), "likes"),
    (
        re.compile(
            rf"{_LEAD}I\s+(?:always|only|usually|normally)\s+"
            r"(?:use|take|choose|pick|book|order|drink)\s+(?P<value>.+)",
            re.I,
        ),
        "use",
    ),
    (
        re.compile(rf"{_LEAD}I\s+use\s+(?P<value>[\w .+#-]+?)\s+for\s+(?P<topic>[\w -]+)", re.I),
        "use",
    ),
]
_STANDING_RES: list[tuple[re.Pattern[str], str, str]] = [
    (
        re.compile(
            r"\b(?:keep|make)\s+(?:your\s+|the\s+)?(?:answers|replies|responses)\s+"
            r"(?P<v>short|brief|concise|detailed|long)\b",
            re.I,
        ),
        "reply length",
        "{v}",
    ),
    (
        re.compile(
            r"\b(?:always|please)\s+(?:reply|answer|respond|write)\s+(?:to me\s+)?in\s+"
            rf"(?P<v>[{_UP}][a-z]+)\b"
        ),
        "reply language",
        "{v}",
    ),
    (re.compile(r"\bnever\s+use\s+(?P<v>tabs|spaces|emojis?|semicolons)\b", re.I), "{v}", "never"),
]

_PROFILE_RES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(rf"{_LEAD}my\s+name\s+is\s+(?P<v>(?-i:{_NAME}))\b", re.I), "name"),
    (re.compile(rf"{_LEAD}(?:please\s+)?call\s+me\s+(?P<v>{_NAME})\b"), "name"),
    (re.compile(rf"{_LEAD}I\s+go\s+by\s+(?P<v>{_NAME})\b"), "name"),
    (
        re.compile(
            rf"{_LEAD}I\s+(?:work|am working)\s+as\s+(?:an?\s+|the\s+)?(?P<v>[\w -]+)", re.I
        ),
        "role",
    ),
    (re.compile(rf"{_LEAD}I(?:'m| am)\s+(?:an?|the)\s+(?P<v>[\w -]+)", re.I), "role?"),
    # "I'm Ola, I teach chemistry", "Hi! I'm Ola and I …", "I'm Ola.": a capitalised word
    # alone after "I'm" at the start of a sentence, unless it is a nationality, a language
    # or a faith ("I'm British, so …"; `_NOT_SELF_NAMES`)
    (
        re.compile(rf"(?:^|[.!]\s+)I(?:'m| am)\s+(?P<v>{_NAME})(?=\s*(?:[,.!]|\s+and\s+I\b|$))"),
        "name",
    ),
    # "I teach chemistry (at …, in …)": a teacher of what they teach
    (
        re.compile(
            rf"{_LEAD}I\s+(?:now\s+)?teach\s+(?P<v>(?!(?:them|him|her|it|my|our|the|a|an|"
            r"people|kids|children|students|at|in|for|part|full|online|from)\b)[a-z][a-z -]*)",
        ),
        "teach",
    ),
    # "I'm Cy, a data engineer living in Oslo": a name, then the role and place clauses
    (re.compile(rf"(?:^|[.!]\s+)I(?:'m| am)\s+(?P<v>{_NAME})\s*,\s+(?:an?|the)\s"), "name"),
    (
        re.compile(rf"(?:^|[.!]\s+)I(?:'m| am)\s+{_NAME}\s*,\s+(?:an?|the)\s+(?P<v>[\w -]+)"),
        "role?",
    ),
    # "Being a sous chef at Bluefin Analytics is not as glamorous …": the role at a firm
    (
        re.compile(
            r"(?:^|[.!]\s+)Being\s+(?:an?|the)\s+(?P<v>[\w -]+?\s+at\s+"
            rf"[{_UP}][\w&.-]*(?: [{_UP}][\w&.-]*){{0,3}})"
        ),
        "role?",
    ),
    (
        re.compile(rf",?\s+(?:living|based)\s+in\s+(?P<v>[{_UP}][\w'-]+(?:[ ,]+[{_UP}][\w'-]+)*)"),
        "location",
    ),
    (
        re.compile(
            rf"{_LEAD}I(?:'ve| have)\s+been\s+working\s+as\s+"
            r"(?:an?\s+|the\s+)?(?P<v>[\w -]+)",
            re.I,
        ),
        "role",
    ),
    (
        re.compile(
            rf"{_LEAD}I\s+(?:just\s+|recently\s+)?(?:started|began)\s+(?:a\s+)?(?:new\s+)?"
            r"(?:job|work|position)\s+(?:at|with)\s+"
            rf"(?P<v>[{_UP}][\w&.-]*(?: [{_UP}][\w&.-]*){{0,3}})"
        ),
        "employer",
    ),
    (
        re.compile(
            rf"{_LEAD}I\s+(?:live|reside)\s+in\s+(?P<v>[{_UP}][\w'-]+(?:[ ,]+[{_UP}][\w'-]+)*)"
        ),
        "location",
    ),
    (
        # "I've lived in Leeds since 2019", "we've been living in Didsbury for a month",
        # "I've been in Oslo for six years" (not "for three days": a trip)
        re.compile(
            rf"{_LEAD}(?:I|[Ww]e)(?:'ve| have)\s+(?:now\s+)?(?:lived|been\s+living|been)\s+"
            rf"in\s+(?P<v>[{_UP}][\w'-]+(?:[ ,]+[{_UP}][\w'-]+)*)\s+(?:since\b|for\s+(?:a|an|"
            r"one|two|three|four|five|six|seven|eight|nine|ten|many|several|a\s+few|\d+|"
            r"over\s+a|almost\s+a|nearly\s+a|about\s+a)\s+(?:\w+\s+){0,2}(?:months?|years?|decades?)\b)"
        ),
        "location",
    ),
    (
        re.compile(
            rf"{_LEAD}I(?:'m| am)\s+(?:based|located)\s+in\s+"
            rf"(?P<v>[{_UP}][\w'-]+(?:[ ,]+[{_UP}][\w'-]+)*)"
        ),
        "location",
    ),
    (
        re.compile(
            rf"{_LEAD}(?:I|[Ww]e)(?:'ve| have)?\s+(?:just\s+|finally\s+)?(?:moved|relocated)\s+"
            # "I moved from Oslo to Lisbon": where they live now is where they moved to
            rf"(?:(?:away\s+)?from\s+[{_UP}][\w'-]+(?:\s[{_UP}][\w'-]+)*\s+)?"
            r"(?:in)?to\s+(?:(?:a|the|our|my)\s+(?:new\s+)?(?:flat|house|place|home|apartment)"
            rf"\s+in\s+)?(?P<v>[{_UP}][\w'-]+(?:[ ,]+[{_UP}][\w'-]+)*)"
        ),
        "location",
    ),
    (re.compile(rf"{_LEAD}I\s+{_ADV}speak\s+(?P<v>[A-Za-z ,]+)", re.I), "languages"),
    (
        re.compile(rf"{_LEAD}I(?:'m| am)\s+(?:fluent|native)\s+in\s+(?P<v>[A-Za-z ,]+)", re.I),
        "languages",
    ),
    (
        re.compile(
            rf"{_LEAD}my\s+(?:native|first|mother)\s+(?:language|tongue)\s+is\s+"
            r"(?P<v>[A-Za-z]+)",
            re.I,
        ),
        "languages",
    ),
    (
        re.compile(
            r"\b[Mm]y\s+time\s?zone\s+is\s+(?P<v>[A-Z][A-Za-z]+/[A-Za-z_]+(?:/[A-Za-z_]+)?)"
        ),
        "timezone",
    ),
    (
        re.compile(
            rf"{_LEAD}I\s+(?:work|am working)\s+(?:at|for)\s+"
            rf"(?P<v>[{_UP}][\w&.-]*(?: [{_UP}][\w&.-]*){{0,3}})"
        ),
        "employer",
    ),
]

_DECISION_RE = re.compile(
    r"\b(?:we(?:'ve| have)?\s+decided\s+to\s+(?:use|go with|switch to|adopt|stick with)|"
    r"let's\s+(?:go with|use|switch to|stick with)|let us\s+(?:go with|use)|"
    r"we(?:'ll| will)\s+(?:use|go with|switch to|stick with)|"
    r"(?:the\s+)?decision\s+is\s+to\s+(?:use|go with))\s+"
    r"(?P<x>[\w .+#/-]+?)\s+(?:for|as)\s+(?:the\s+|our\s+|all\s+)?(?P<y>[\w -]+)",
    re.I,
)
_STANDING_MARK_RE = re.compile(
    r"\b(?:from now on|going forward|by default|as a rule|always|every time|in general|"
    r"convention)\b",
    re.I,
)
_CONVENTION_RE = re.compile(
    r"\b(?:in this (?:repo|repository|codebase|project)|our convention is|"
    r"the convention (?:here )?is)\b[, ]*(?:we\s+)?(?P<s>.+)",
    re.I,
)
_TROUBLE_RE = re.compile(
    r"\b(?:error|errors|fails?|failing|failed|broken|crash(?:es|ed|ing)?|exception|"
    r"traceback|doesn't work|does not work|isn't working|not working|won't|can't|cannot|"
    r"times? out|timing out|timeout|hangs?|stuck|segfault|[A-Z]\w+(?:Error|Exception))\b",
    re.I,
)
_FIXED_RE = re.compile(
    r"\b(?:that (?:fixed|solved|did) it|fixed it|works now|it works|working now|"
    r"that worked|problem solved|all green|passes now|passing now|tests pass|"
    r"that did the trick|resolved it|solved it)\b",
    re.I,
)
_NEGATIVE_RE = re.compile(
    r"\b(?:still (?:fails|failing|broken|doesn't|does not|not)|didn't work|did not work|"
    r"doesn't work|no luck|same error|wrong|undo|revert)\b",
    re.I,
)
_TASK_VERBS = (
    "deploy", "release", "publish", "set up", "setup", "install", "configure", "build",
    "run", "fix", "debug", "migrate", "create", "update", "upgrade", "rotate", "back up",
    "backup", "restore", "rename", "clean up", "generate", "bump", "tag", "add", "remove",
    "provision", "rebuild", "ship", "roll back", "rollback", "renew", "archive", "export",
    "import", "sync", "merge", "cut", "prepare", "find",
)  # fmt: skip
_TASK_RE = re.compile(
    r"^(?:(?:hi|hey|hello|ok|okay|so)[,!. ]+)?(?:(?:can|could|would) you\s+|please\s+|"
    r"i need you to\s+|i need to\s+|i want to\s+|help me\s+|let's\s+|go ahead and\s+)*"
    rf"(?:please\s+)?(?P<task>(?:{'|'.join(re.escape(v) for v in _TASK_VERBS)})\b"
    r"(?:[^?.!\n]|\.(?=\S))*)",
    re.I,
)
_DONE_RE = re.compile(
    r"\b(?:done|deployed|released|published|finished|completed|succeeded|successful(?:ly)?|"
    r"is live|is up|all set|is out|are out|went out|installed|configured)\b",
    re.I,
)

# --- what the owner says of themself (`RuleExtractor._self`) ----------------------------

# Breeds said in place of the animal ("my beagle Biscuit", "Biscuit, our beagle"); words
# that are also something else ("boxer", "persian", "pointer") are left out
_BREEDS = {
    "beagle": "dog", "labrador": "dog", "lab": "dog", "spaniel": "dog",
    "cocker spaniel": "dog", "springer spaniel": "dog", "collie": "dog",
    "border collie": "dog", "terrier": "dog", "greyhound": "dog", "whippet": "dog",
    "lurcher": "dog", "dachshund": "dog", "poodle": "dog", "pug": "dog", "husky": "dog",
    "corgi": "dog", "retriever": "dog", "golden retriever": "dog", "labradoodle": "dog",
    "cockapoo": "dog", "cavapoo": "dog", "schnauzer": "dog", "bulldog": "dog",
    "french bulldog": "dog", "frenchie": "dog", "chihuahua": "dog", "alsatian": "dog",
    "german shepherd": "dog", "dalmatian": "dog", "rottweiler": "dog", "shih tzu": "dog",
    "maine coon": "cat", "siamese": "cat", "bengal": "cat", "ragdoll": "cat",
    "british shorthair": "cat", "sphynx": "cat", "tabby": "cat",
}  # fmt: skip
_BREED_ALT = "|".join(sorted((re.escape(b) for b in _BREEDS), key=len, reverse=True))

# Words at the head of a sentence that are no name: "Thanks, my friend, …"
_NOT_NAME_WORDS = {
    "thanks", "thank", "honestly", "anyway", "well", "sorry", "yes", "yeah", "no", "ok",
    "okay", "sure", "hi", "hey", "hello", "plus", "oh", "right", "look", "listen", "morning",
    "evening", "night", "cheers", "please", "still", "actually", "mate", "dear",
}  # fmt: skip

_FEMALE_RELATIONS = {"sister", "mother", "mom", "mum", "wife", "daughter", "aunt",
                     "grandmother", "grandma", "gran", "granny", "nan", "niece", "girlfriend",
                     "fiancee"}  # fmt: skip
_MALE_RELATIONS = {"brother", "father", "dad", "husband", "son", "uncle", "grandfather",
                   "grandpa", "grandad", "granddad", "nephew", "boyfriend", "fiance"}  # fmt: skip
# a relation named bare, as a name ("Mum loves pastry")
_BARE_RELATION_RE = re.compile(r"\b(?P<rel>Mum|Mom|Dad|Grandma|Grandpa)\b")
# "Her name is Rosalind, but everyone calls her Ros": the name of the relation said before
_THEIR_NAME_RE = re.compile(
    rf"(?:^|[,;]\s+(?:and\s+)?|\band\s+)(?:(?P<p>[Hh]er|[Hh]is)\s+name(?:'s|\s+is)|(?P<q>[Ss]he|[Hh]e)(?:'s|\s+is)\s+called)"
    rf"\s+(?P<name>{_NAME})\b"
)
# an animal taken in, named next: "We adopted a kitten last Thursday. … her name is Mochi"
_TAKEN_IN_RE = re.compile(
    r"\b(?:I|[Ww]e)(?:'ve| have)?\s+(?:just\s+|finally\s+)?(?:adopted|got|rescued|bought|"
    r"picked\s+up|brought\s+home)\s+(?:an?|another)\s+(?:[a-z]+\s+){0,2}?"
    r"(?P<rel>kitten|puppy|dog|cat|rabbit|parrot|horse)\b"
)
_CALLED_TOO_RE = re.compile(
    rf"\b(?:everyone|everybody|people|we|friends|they)\s+(?:all\s+)?calls?\s+(?:her|him)\s+"
    rf"(?P<alias>{_NAME})\b|\b(?:she|he)\s+goes\s+by\s+(?P<alias2>{_NAME})\b"
)

_DATE_WORDS = (
    r"(?:\d{1,2}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:[Jj]anuary|[Ff]ebruary|[Mm]arch|[Aa]pril|"
    r"[Mm]ay|[Jj]une|[Jj]uly|[Aa]ugust|[Ss]eptember|[Oo]ctober|[Nn]ovember|[Dd]ecember)|"
    r"(?:January|February|March|April|May|June|July|August|September|October|November|"
    r"December)\s+\d{1,2}(?:st|nd|rd|th)?)\b"
)

_DIETS = r"vegetarian|vegan|pescatarian|pescetarian|flexitarian"
# a diet ends its clause: "I'm vegetarian now", never "I'm a vegetarian chef"
_DIET_END = (
    r"(?=\s*(?:[,.;:!)]|$|\s(?:now|too|and|but|so|since|for|like|as|again|anyway|these|"
    r"nowadays|mostly|at)\b))"
)
_CONDITIONS = (
    r"type\s+[12]\s+diabetes|diabetes|asthma|epilepsy|coeliac\s+disease|celiac\s+disease|"
    r"crohn's(?:\s+disease)?|ADHD|dyslexia|dyspraxia|migraines|arthritis|psoriasis|eczema|"
    r"tinnitus|IBS|long\s+covid|high\s+blood\s+pressure|hypertension"
)
_CONDITION_ADJ = {"diabetic": "diabetes", "asthmatic": "asthma", "epileptic": "epilepsy",
                  "dyslexic": "dyslexia", "coeliac": "coeliac disease",
                  "celiac": "celiac disease"}  # fmt: skip
_INSTRUMENTS = (
    r"piano|guitar|bass|bass\s+guitar|cello|violin|viola|fiddle|drums|ukulele|flute|"
    r"clarinet|saxophone|sax|trumpet|trombone|harp|banjo|mandolin|accordion|oboe|"
    r"bagpipes|harmonica|keyboard|double\s+bass"
)
_SPORTS = (
    r"tennis|football|rugby|cricket|squash|badminton|golf|basketball|netball|hockey|"
    r"volleyball|chess|bridge|padel|table\s+tennis|water\s+polo|ultimate\s+frisbee"
)
_RACES = r"(?:half[\s-]marathon|marathon|ultra(?:marathon)?|triathlon|ironman|duathlon|10k|5k)"

# a time said first ("Since the start of July I've gone fully vegetarian") leads too
_SELF_LEAD = rf"(?:{_LEAD}|\b(?:[Ss]ince|[Aa]s\s+of|[Ff]rom)\s+(?:the\s+)?[\w ]{{1,30}}?,?\s+)"

# (pattern, fact key): what the owner says of themself, a profile fact each. The value is
# group v, cut to a short phrase; `_CONDITION_ADJ` names a condition said as an adjective
_SELF_RES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(rf"{_SELF_LEAD}I(?:'m| am)\s+(?:(?:also|really|very|severely|badly|quite|mildly|"
                r"seriously|deathly)\s+)*allergic\s+to\s+(?P<v>[a-z][\w -]{1,40})", re.I),
     "allergy"),
    (re.compile(r"\b(?P<v>[a-z]+),?\s+which\s+(?:is\s+(?:the\s+(?:one|only)\s+thing\s+)?)?"
                r"I(?:'m| am)\s+(?:(?:really|very|severely|badly)\s+)?allergic\s+to\b"),
     "allergy"),
    (re.compile(rf"{_SELF_LEAD}I(?:'ve| have)\s+(?:got\s+)?an?\s+"
                r"(?:(?:severe|serious|mild|bad)\s+)?(?P<v>[a-z]+)\s+allergy\b", re.I), "allergy"),
    (re.compile(rf"{_SELF_LEAD}I(?:'m| am)\s+(?:now\s+|also\s+|strictly\s+|fully\s+)*(?:an?\s+)?"
                rf"(?P<v>{_DIETS}){_DIET_END}", re.I), "diet"),
    (re.compile(rf"{_SELF_LEAD}I(?:'ve| have)\s+(?:now\s+|just\s+|finally\s+)?"
                rf"(?:gone|become|been|turned)\s+(?:fully\s+|completely\s+|strictly\s+|an?\s+)*(?P<v>{_DIETS}){_DIET_END}",
                re.I), "diet"),
    (re.compile(rf"{_SELF_LEAD}I\s+(?:just\s+|recently\s+|finally\s+)?(?:went|became|turned)\s+"
                rf"(?:fully\s+|completely\s+)?(?P<v>{_DIETS}){_DIET_END}", re.I), "diet"),
    (re.compile(rf"{_SELF_LEAD}I(?:'m| am)\s+(?:on|following)\s+an?\s+"
                r"(?P<v>keto|gluten-free|low-carb|low-fodmap|plant-based|paleo|dairy-free)"
                r"\s+diet\b", re.I), "diet"),
    (re.compile(rf"{_SELF_LEAD}I(?:'ve| have)\s+(?:got\s+|been\s+diagnosed\s+with\s+)?"
                rf"(?P<v>{_CONDITIONS})\b", re.I), "condition"),
    (re.compile(rf"{_SELF_LEAD}I\s+was\s+(?:recently\s+)?diagnosed\s+with\s+(?P<v>{_CONDITIONS})\b",
                re.I), "condition"),
    (re.compile(rf"{_SELF_LEAD}I(?:'m| am)\s+(?:also\s+)?(?:an?\s+)?"
                r"(?P<v>diabetic|asthmatic|epileptic|dyslexic|coeliac|celiac)\b(?![-\w])", re.I),
     "condition"),
    (re.compile(rf"{_SELF_LEAD}I(?:'m| am)\s+"
                r"(?P<v>(?:lactose|gluten)\s+intolerant|colou?r[\s-]blind)\b", re.I), "condition"),
    (re.compile(rf"{_SELF_LEAD}I(?:'m| am)\s+(?P<v>left|right)[\s-]handed\b", re.I), "handedness"),
    (re.compile(rf"{_SELF_LEAD}I\s+(?:also\s+|still\s+)?play\s+(?:the\s+)?(?P<v>{_INSTRUMENTS})\b",
                re.I), "plays"),
    (re.compile(rf"{_SELF_LEAD}I\s+(?:also\s+|still\s+)?play\s+(?P<v>{_SPORTS})\b", re.I), "plays"),
    (re.compile(rf"{_SELF_LEAD}I(?:'ve| have)\s+been\s+learning\s+(?:to\s+play\s+)?(?:the\s+)?"
                rf"(?P<v>{_INSTRUMENTS})\b", re.I), "learning"),
    (re.compile(rf"{_SELF_LEAD}I(?:'m| am)\s+(?:also\s+)?learning\s+(?:to\s+play\s+)?(?:the\s+)?"
                rf"(?P<v>{_INSTRUMENTS})\b", re.I), "learning"),
    (re.compile(rf"{_SELF_LEAD}I(?:'ve| have)\s+been\s+learning\s+(?P<v>[{_UP}][a-z]+)\b"),
     "learning"),
    (re.compile(rf"{_SELF_LEAD}I(?:'m| am)\s+(?:also\s+)?learning\s+(?P<v>[{_UP}][a-z]+)\b"),
     "learning"),
    (re.compile(rf"{_SELF_LEAD}I(?:'m| am)\s+(?:currently\s+|also\s+)?training\s+for\s+"
                rf"(?P<v>(?:an?|the|my\s+first)\s+(?:[\w'-]+\s+){{0,4}}?{_RACES})\b", re.I),
     "training_for"),
    (re.compile(rf"{_SELF_LEAD}[Mm]y\s+birthday\s+is\s+(?:on\s+)?(?P<v>{_DATE_WORDS})"),
     "birthday"),
    (re.compile(rf"{_SELF_LEAD}I\s+was\s+born\s+on\s+(?:the\s+)?(?P<v>{_DATE_WORDS})"), "birthday"),
    (re.compile(rf"{_SELF_LEAD}I\s+turn\s+\d{{1,3}}\s+on\s+(?:the\s+)?(?P<v>{_DATE_WORDS})"),
     "birthday"),
]  # fmt: skip
# facts a person may have several of: one extraction lists them all under the one key
_LISTED_FACTS = {"allergy", "condition", "plays", "learning"}

# "I finally ditched VS Code", "I'm doing all this in Neovim now": a switch of option,
# the new one a preference that replaces the old
_OPTION_ALT = "|".join(sorted((re.escape(o) for o in _OPTION_TOPIC), key=len, reverse=True))
_SWITCH_RES: list[re.Pattern[str]] = [
    re.compile(rf"{_LEAD}I(?:'ve| have)?\s+(?:finally\s+|just\s+|now\s+|recently\s+)?"
               r"(?:switched|moved|migrated|changed)\s+(?:over\s+)?(?:from\s+[\w .+#-]{1,30}?\s+)?"
               rf"to\s+(?P<v>{_OPTION_ALT})\b(?![-\w])", re.I),
    re.compile(rf"{_LEAD}I(?:'ve| have)?\s+(?:finally\s+|just\s+)?(?:ditched|dropped|abandoned|"
               r"gave\s+up|given\s+up|swapped|traded)\s+(?:on\s+)?[\w .+#-]{1,30}?\s+"
               rf"(?:for|in\s+favou?r\s+of)\s+(?P<v>{_OPTION_ALT})\b(?![-\w])", re.I),
    re.compile(rf"{_LEAD}I(?:'m| am)\s+(?:doing\s+(?:all\s+)?(?:this|that|everything|it)|"
               r"working|coding|writing\s+(?:code|everything)|programming)\s+in\s+"
               rf"(?P<v>{_OPTION_ALT})\s+now\b", re.I),
    re.compile(rf"{_LEAD}I(?:'m| am)?\s+(?:only\s+)?us(?:e|ing)\s+(?P<v>{_OPTION_ALT})\s+now\b",
               re.I),
    # "I'm back on coffee": the option taken up again
    re.compile(rf"{_LEAD}I(?:'m| am)\s+(?:now\s+)?back\s+(?:on|to)\s+(?P<v>{_OPTION_ALT})\b"
               r"(?![-\w])", re.I),
]  # fmt: skip

# "I don't drink coffee any more", "The tea phase is over": an option given up, no longer
# the choice on its topic
_GIVEN_UP_RES: list[re.Pattern[str]] = [
    re.compile(rf"{_LEAD}I\s+(?:don't|do\s+not)\s+(?:really\s+)?(?:drink|use|take|have)\s+"
               rf"(?P<v>{_OPTION_ALT})\s+(?:any\s*more|any\s+longer)\b", re.I),
    re.compile(rf"{_LEAD}I\s+no\s+longer\s+(?:drink|use|take|have)\s+(?P<v>{_OPTION_ALT})\b"
               r"(?![-\w])", re.I),
    re.compile(rf"{_LEAD}I(?:'ve| have)?\s+(?:given\s+up|gave\s+up|quit|stopped\s+"
               rf"(?:drinking|using|taking))\s+(?P<v>{_OPTION_ALT})\b(?![-\w])", re.I),
    re.compile(rf"(?:^|[,;]\s+)(?:the|my)\s+(?P<v>{_OPTION_ALT})\s+(?:phase|thing|habit)\s+"
               r"is\s+(?:over|done)\b", re.I),
]  # fmt: skip

# Facts taken back: "Turns out I'm not allergic to penicillin after all", "I'm no longer
# vegetarian", "I don't play the cello any more": (pattern, fact key), the value group v
_UNSAID_RES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\bI(?:'m| am)\s+(?:actually\s+|now\s+)?(?:not|no\s+longer)\s+"
                r"(?:(?:actually|really|even|very)\s+)?allergic\s+to\s+(?P<v>[a-z][\w -]{1,40})",
                re.I), "allergy"),
    (re.compile(rf"\bI(?:'m| am)\s+(?:not|no\s+longer)\s+(?:an?\s+)?(?P<v>{_DIETS})\b", re.I),
     "diet"),
    (re.compile(rf"\bI\s+(?:stopped|quit)\s+being\s+(?:an?\s+)?(?P<v>{_DIETS})\b", re.I), "diet"),
    (re.compile(rf"\bI\s+(?:don't|do\s+not|no\s+longer)\s+play\s+(?:the\s+)?"
                rf"(?P<v>{_INSTRUMENTS}|{_SPORTS})\b", re.I), "plays"),
]  # fmt: skip
# the one taken for it, in the sentence after: "It was the sesame.", "It's actually shellfish."
_INSTEAD_RE = re.compile(
    r"^(?:but\s+)?it(?:'s|\s+is|\s+was)\s+(?:actually\s+|really\s+|just\s+|only\s+)*"
    r"(?:the\s+)?(?P<v>[a-z][\w -]{1,30}?)(?:\s+(?:that|instead|all\s+along))?\s*[.!]?$",
    re.I,
)
# "I used to love jazz, but I can't stand it now": what holds now
_USED_TO_RE = re.compile(
    r"^(?:(?:honestly|actually|well|so|oh)\s*,?\s+)?I\s+used\s+to\s+"
    r"(?:love|like|enjoy|adore|hate|dislike|loathe|can't\s+stand)\s+(?P<x>[^,;.!?]+?)\s*"
    r"(?:,\s*|\s+)(?:but\s+)?(?:now\s*,?\s+)?I\s+(?:now\s+|really\s+|just\s+|actually\s+)*"
    r"(?P<now>love|like|enjoy|adore|hate|dislike|loathe|detest|can't\s+stand|cannot\s+stand|"
    r"don't\s+(?:really\s+)?like|do\s+not\s+like)\s+(?:it|them|that)\b",
    re.I,
)

# "I've renamed mine to Leafline": the thing named before gets a new name
_RENAME_RE = re.compile(
    r"\b(?:I|[Ww]e)(?:'ve| have)?\s+(?:just\s+|finally\s+|now\s+)?renamed\s+"
    r"(?:it|mine|ours|(?:my|our|the)\s+[a-z]+(?:\s+[a-z]+)?)\s+(?:to|as)\s+"
    rf"(?P<name>[{_UP}][\w.-]*[\w])"
)
