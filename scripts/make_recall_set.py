"""Generate the long-conversation recall set that `scripts/bench_recall.py` measures.

Writes `scripts/recall_data/generated/<id>.json`, one file per conversation, in exactly the
format of the hand-written set (`scripts/recall_data/handwritten/`, see
`scripts/recall_data/README.md`): two named speakers, 20-24 dated sessions of 20+ turns,
facts scattered through small talk, repeated and updated over time (moves, job changes,
pets and their names, partners, hobby progress, trips, relatives' pets that must not be
inverted), relative time expressions ("yesterday", "last Tuesday", "two days ago") that
only the session date resolves, and labelled questions of six kinds (single-hop,
multi-hop, temporal, inference, update, unanswerable) with their evidence turn ids.

Deterministic: a fixed seed per conversation, the standard library only, and the same
bytes on every run (`--check` verifies that the files on disk are up to date). Every
question is validated before anything is written: evidence ids exist, multi-hop evidence
spans two or more sessions, the answer of a single-hop / multi-hop / update question (its
part before " (") appears literally in an evidence turn, temporal answers match the dates
the generator computed, and no "unanswerable" question's subject is ever stated.

Run from the repository root:

    .venv/bin/python scripts/make_recall_set.py            # (re)write the generated set
    .venv/bin/python scripts/make_recall_set.py --check    # exit 1 if the files are stale
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "recall_data" / "generated"
SPLIT_FILE = HERE / "recall_data" / "SPLIT.json"
SEED = 20261210

WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
NUM_WORDS = {
    1: "one",
    2: "two",
    3: "three",
    4: "four",
    5: "five",
    6: "six",
    7: "seven",
    8: "eight",
    9: "nine",
    10: "ten",
    11: "eleven",
    12: "twelve",
    13: "thirteen",
}

# --------------------------------------------------------------------------------------
# The conversations: id, speakers (name, gender), relation, start date

CONVERSATIONS: tuple[tuple[str, tuple[str, str], tuple[str, str], str, str], ...] = (
    ("gen01", ("Maya", "f"), ("Jonah", "m"), "friends", "2022-09-06"),
    ("gen02", ("Daniel", "m"), ("Assistant", "x"), "assistant", "2023-01-10"),
    ("gen03", ("Lucía", "f"), ("Mateo", "m"), "siblings", "2023-04-02"),
    ("gen04", ("Priya", "f"), ("Tom", "m"), "colleagues", "2022-11-14"),
    ("gen05", ("Kwame", "m"), ("Sofia", "f"), "friends", "2023-02-20"),
    ("gen06", ("Hannah", "f"), ("Ravi", "m"), "neighbours", "2023-06-05"),
    ("gen07", ("Aisha", "f"), ("Assistant", "x"), "assistant", "2024-01-08"),
    ("gen08", ("Oliver", "m"), ("Grace", "f"), "siblings", "2022-05-09"),
    ("gen09", ("Mei", "f"), ("Lars", "m"), "colleagues", "2023-08-28"),
    ("gen10", ("Tariq", "m"), ("Ellie", "f"), "friends", "2024-02-12"),
)
# Tuning happens on dev only; held-out is never looked at while changing ContextFS. Each
# half has friends, siblings, colleagues and a user with an assistant.
SPLIT = {
    "generated": {
        "dev": ["gen01", "gen02", "gen03", "gen04", "gen06"],
        "held-out": ["gen05", "gen07", "gen08", "gen09", "gen10"],
    },
    "handwritten": {"dev": ["conv_a1", "conv_b1"], "held-out": ["conv_c1", "conv_c2"]},
}

FEMALE = (
    "Amara",
    "Beth",
    "Chloe",
    "Dina",
    "Esme",
    "Freya",
    "Gita",
    "Holly",
    "Imogen",
    "Jess",
    "Keira",
    "Layla",
    "Martha",
    "Nell",
    "Orla",
    "Poppy",
    "Rosa",
    "Saskia",
    "Tilly",
    "Una",
    "Vera",
    "Willa",
    "Yasmin",
    "Zara",
    "Bronwen",
    "Carys",
    "Delphine",
    "Ines",
    "Leona",
    "Noor",
)
MALE = (
    "Aled",
    "Ben",
    "Callum",
    "Dev",
    "Euan",
    "Felix",
    "Gareth",
    "Hamza",
    "Isaac",
    "Joel",
    "Kieran",
    "Luca",
    "Marcus",
    "Niall",
    "Omar",
    "Pete",
    "Rhys",
    "Sam",
    "Theo",
    "Vikram",
    "Will",
    "Yusuf",
    "Zain",
    "Arjun",
    "Bilal",
    "Cormac",
    "Dominic",
    "Ewan",
    "Fraser",
    "Gus",
)
CITIES = (
    "Leeds",
    "Bristol",
    "Glasgow",
    "Cardiff",
    "Norwich",
    "Sheffield",
    "Brighton",
    "York",
    "Nottingham",
    "Aberdeen",
    "Newcastle",
    "Exeter",
    "Belfast",
    "Bath",
    "Manchester",
    "Dundee",
    "Liverpool",
    "Oxford",
    "Swansea",
    "Edinburgh",
)
ORGS = (
    "Harrow & Finch",
    "Bluefin Analytics",
    "Kestrel Insurance",
    "Oakline Studios",
    "Marlow Health",
    "Copperleaf Games",
    "Northgate Logistics",
    "Saltmarsh Brewing",
    "Larkspur Architects",
    "Tidewell Energy",
    "Fennel & Rye",
    "Quayside Media",
    "Brackenbury Press",
    "Hollin Software",
    "Greywing Labs",
    "Moorcroft Foods",
    "Alder Street Bank",
    "Pennant Travel",
    "Juniper Robotics",
    "Cobalt Lane Design",
)
JOB_PAIRS = (
    ("junior designer", "senior product designer"),
    ("staff nurse", "ward manager"),
    ("software developer", "lead developer"),
    ("marketing assistant", "content strategist"),
    ("sous chef", "head chef"),
    ("paralegal", "trainee solicitor"),
    ("lab technician", "research associate"),
    ("accounts assistant", "financial analyst"),
    ("teaching assistant", "class teacher"),
    ("project coordinator", "project manager"),
    ("copywriter", "creative director"),
    ("data analyst", "analytics lead"),
)
PROJECTS = ("quarterly", "Henderson", "rebrand", "budget", "onboarding", "supplier")
DOG_BREEDS = (
    "beagle",
    "border collie",
    "cockapoo",
    "dachshund",
    "whippet",
    "greyhound",
    "Staffordshire bull terrier",
    "golden retriever",
    "Jack Russell",
)
CAT_BREEDS = ("Siamese", "Maine Coon", "ragdoll", "Bengal", "British Shorthair")
PET_NAMES = (
    "Pickle",
    "Biscuit",
    "Juniper",
    "Moose",
    "Pepper",
    "Olive",
    "Nacho",
    "Bramble",
    "Waffles",
    "Clementine",
    "Scout",
    "Mabel",
    "Otis",
    "Pudding",
    "Crumpet",
    "Fig",
    "Dumpling",
    "Ziggy",
    "Marmite",
    "Basil",
)
REL_PET_NAMES = (
    "Max",
    "Winston",
    "Duchess",
    "Captain",
    "Boris",
    "Lady Grey",
    "Rufus",
    "Sergeant",
    "Princess",
    "Monty",
    "Hercules",
    "Gloria",
)
REL_PETS = (
    ("cat", "nineteen"),
    ("dog", "fourteen"),
    ("parrot", "thirty-one"),
    ("tortoise", "fifty-two"),
    ("cat", "seventeen"),
    ("dog", "twelve"),
)
PET_ITEMS = (
    "a whole sock",
    "half a birthday cake",
    "a tube of lip balm",
    "a corn cob",
    "a pair of reading glasses",
    "a bath sponge",
    "a packet of raisins",
    "a rubber duck",
)
PLACES_NEAR = ("Harrogate", "Stroud", "Hexham", "Ludlow", "Whitby", "Kendal", "Frome", "Malvern")
MEET_PLACES = (
    "a pottery class",
    "a friend's wedding",
    "the climbing wall",
    "a pub quiz",
    "a book club",
    "a salsa class",
    "the allotment open day",
    "a choir rehearsal",
)
PARTNER_JOBS = (
    ("nurse", "a strange rash on their arm"),
    ("electrician", "rewiring the hallway lights"),
    ("accountant", "their self-assessment tax return"),
    ("solicitor", "the small print in a tenancy agreement"),
    ("physiotherapist", "a sore knee after running"),
    ("plumber", "a dripping kitchen tap"),
    ("mechanic", "a grinding noise from the car brakes"),
    ("pharmacist", "which hay fever tablets are safe to combine"),
)
PROPOSE_PLACES = (
    "on the beach at sunset",
    "at the top of Pen y Fan",
    "in the kitchen while we were making pancakes",
    "at the restaurant where we had our first date",
    "on a boat on Loch Lomond",
    "halfway round the Christmas market",
)
REL_WORDS_FAMILY = (("sister", "f"), ("brother", "m"), ("cousin", "f"), ("cousin", "m"))
REL_WORDS_FRIEND = (
    ("best friend", "f"),
    ("old flatmate", "m"),
    ("best friend", "m"),
    ("friend from university", "f"),
)
REL_JOBS = (
    "midwife",
    "firefighter",
    "architect",
    "pilot",
    "dentist",
    "vet",
    "barrister",
    "geologist",
)
PET_OWNER_RELS_FAMILY = ("mother", "grandad", "aunt", "uncle", "grandmother")
PET_OWNER_RELS_OTHER = ("neighbour", "boss", "flatmate", "landlady")
CARS = (
    ("Ford Fiesta", "Kia Niro"),
    ("Vauxhall Corsa", "Skoda Octavia estate"),
    ("Nissan Micra", "Renault Zoe"),
    ("Toyota Yaris", "Mazda MX-5"),
    ("Volkswagen Polo", "Volvo V60"),
    ("Honda Jazz", "Hyundai Kona"),
)
ALLERGIES = (
    ("peanuts", "satay chicken", "satay sauce is made with peanuts"),
    ("shellfish", "a prawn curry", "prawns are shellfish"),
    ("walnuts", "a coffee and walnut cake", "the cake is made with walnuts"),
    ("sesame", "a bowl of hummus", "hummus is made with tahini, a sesame paste"),
    ("kiwi", "a pavlova topped with kiwi", "it is topped with kiwi"),
)
TRIPS = (
    ("Lisbon", ("the tram ride up to the castle", "the custard tarts in Belém")),
    ("Copenhagen", ("cycling round the harbour", "the rollercoaster at Tivoli")),
    ("Seville", ("the tiled courtyards of the Alcázar", "a flamenco show in Triana")),
    ("Kraków", ("the salt mine", "the pierogi at a milk bar")),
    ("Bruges", ("a boat trip on the canals", "the hot chocolate place by the belfry")),
    ("Naples", ("the pizza at a place near the station", "the day trip to Pompeii")),
    ("Reykjavik", ("the Blue Lagoon", "whale watching from the old harbour")),
    ("Porto", ("the port cellars", "the view from the Dom Luís bridge")),
    ("Vienna", ("the Klimt paintings at the Belvedere", "the Sachertorte")),
    ("Ljubljana", ("kayaking on Lake Bled", "the dragon bridge at night")),
)
TRIP_PURPOSES = ("a long weekend", "a friend's wedding", "a birthday treat", "a city break")
KID_THEMES = ("dinosaur", "space", "mermaid", "pirate", "Lego", "football", "unicorn", "superhero")

HOBBIES: tuple[dict[str, object], ...] = (
    {
        "name": "running",
        "club": ("the Riverside Runners", "Thursday evenings"),
        "start": "I've started running with {club} on {when_club}. Did my first 5K yesterday "
        "in {v1}, which nearly killed me.",
        "event": "I ran the {event} {when} in {v2}! My legs are still in pieces.",
        "best": "New personal best at parkrun this morning, {v3} for the 5K.",
        "values": (
            ("34:50", "33:10", "36:05"),
            ("58:12", "55:40", "1:01:33"),
            ("27:45", "28:30", "26:58"),
        ),
        "event_names": ("Castle Park 10K", "Harbourside 10K", "Valley Trail 10K"),
        "q_event": "What was {P}'s time in the {event}?",
        "q_when": "When did {P} run the {event}?",
        "q_best": "What is {P}'s 5K personal best now?",
        "q_start": "Which running club did {P} join?",
        "metric": "5K time",
    },
    {
        "name": "bouldering",
        "club": ("the Cragside climbing gym", "Tuesday nights"),
        "start": "I've started bouldering at {club}, mostly on {when_club}. I can just about get "
        "up the {v1} problems.",
        "event": "Came {v2} in the {event} {when}! Out of about forty people.",
        "best": "I finally topped a {v3} today, after three weeks on it.",
        "values": (("V1", "V2"), ("eleventh", "ninth", "sixth"), ("V4", "V5")),
        "event_names": ("novice bouldering league", "Cragside winter comp"),
        "q_event": "Where did {P} place in the {event}?",
        "q_when": "When was the {event} that {P} took part in?",
        "q_best": "What is the hardest grade {P} has climbed now?",
        "q_start": "Which climbing gym does {P} go to?",
        "metric": "climbing grade",
    },
    {
        "name": "chess",
        "club": ("the Kings Arms chess club", "Wednesday evenings"),
        "start": "I've joined {club}, they meet on {when_club}. My online rating is {v1}, "
        "which is humbling.",
        "event": "Scored {v2} at the {event} {when}. Beat a retired judge in the last round!",
        "best": "My rating went up to {v3} today. Slowly getting less rubbish.",
        "values": (
            ("1140", "1210", "1095"),
            ("3.5 out of 5", "3 out of 5", "4 out of 6"),
            ("1420", "1388", "1456"),
        ),
        "event_names": ("county rapidplay", "Midsummer chess congress"),
        "q_event": "What did {P} score at the {event}?",
        "q_when": "When did {P} play in the {event}?",
        "q_best": "What is {P}'s online chess rating now?",
        "q_start": "Which chess club did {P} join?",
        "metric": "chess rating",
    },
    {
        "name": "swimming",
        "club": ("the Lido Masters group", "Saturday mornings"),
        "start": "I've joined {club}, we swim on {when_club}. I managed {v1} lengths without "
        "stopping.",
        "event": "Did the {event} {when} and finished in {v2}. Cold but amazing.",
        "best": "Swam {v3} lengths without stopping tonight, can you believe it?",
        "values": (
            ("twelve", "fourteen"),
            ("41 minutes", "44 minutes", "39 minutes"),
            ("sixty", "eighty"),
        ),
        "event_names": ("Lake Windermere mile", "Great North Swim mile"),
        "q_event": "What was {P}'s finishing time in the {event}?",
        "q_when": "When did {P} swim the {event}?",
        "q_best": "How many lengths can {P} now swim without stopping?",
        "q_start": "Which swimming group did {P} join?",
        "metric": "distance",
    },
)

# --------------------------------------------------------------------------------------
# Dates and relative expressions


def long_date(d: dt.date) -> str:
    return f"{WEEKDAYS[d.weekday()]} {d.day} {d.strftime('%B')} {d.year}"


def date_answer(d: dt.date) -> str:
    """A temporal answer: the long form and the ISO form the evidence resolves to."""
    return f"{long_date(d)} ({d.isoformat()})"


_A_BEFORE_VOWEL = re.compile(r"\b([Aa]) (?=(?!uni|use|one|eu|Uni|Use|One|Eu)[aeiouAEIOU])")


def articles(text: str) -> str:
    """'a' before a vowel sound made 'an' (templates say "a {job}": "an electrician")."""
    return _A_BEFORE_VOWEL.sub(r"\1n ", text)


def past_expr(
    rng: random.Random, today: dt.date, lo: int = 1, hi: int = 6, workday: bool = False
) -> tuple[str, dt.date]:
    """A phrase for a day `lo`..`hi` days before `today` that only `today` resolves
    (`workday`: a Monday to Friday, when there is one in the range)."""
    ks = list(range(lo, hi + 1))
    if workday:
        ks = [k for k in ks if (today - dt.timedelta(days=k)).weekday() < 5] or ks
    k = rng.choice(ks)
    d = today - dt.timedelta(days=k)
    wd = WEEKDAYS[d.weekday()]
    options = {
        1: ["yesterday"],
        2: ["two days ago", f"on {wd}"],
        3: ["three days ago", f"on {wd}", f"last {wd}"],
        7: [f"last {wd}", "a week ago today"],
    }.get(k, [f"on {wd}", f"last {wd}"])
    return rng.choice(options), d


def future_expr(
    rng: random.Random, today: dt.date, lo: int = 2, hi: int = 6
) -> tuple[str, dt.date]:
    """A phrase for a day `lo`..`hi` days after `today` (future tense in the sentence)."""
    k = rng.randint(lo, hi)
    d = today + dt.timedelta(days=k)
    wd = WEEKDAYS[d.weekday()]
    options = {1: ["tomorrow"], 2: [f"on {wd}", "the day after tomorrow"]}.get(
        k, [f"on {wd}", f"this {wd}"]
    )
    return rng.choice(options), d


# --------------------------------------------------------------------------------------
# Small talk (fact-free on purpose: nothing here is ever asked about)
#
# A topic is a tuple of positions; each position is a tuple of alternative lines ("A: ..."
# is whoever opens the exchange, "B: ..." the other speaker). One alternative is drawn per
# position and the {slots} are filled from the pools below, so a conversation of 500+
# turns rarely says the same thing twice.

SLOTS: dict[str, tuple[str, ...]] = {
    "show": (
        "the Bake Off final",
        "that new detective series",
        "the snooker",
        "Gardeners' World",
        "the Eurovision semi",
        "that documentary about octopuses",
        "Taskmaster",
        "the rugby",
        "that true-crime podcast",
        "the Tour de France highlights",
        "the new season of that hospital drama",
        "University Challenge",
        "that reality show on the island",
        "the film about the submarine",
    ),
    "food": (
        "a jacket potato",
        "leftover chilli",
        "fish finger sandwiches",
        "a veg stir fry",
        "beans on toast",
        "a Thai green curry",
        "cheese on toast",
        "a huge bowl of pasta",
        "soup and crusty bread",
        "a takeaway pizza",
        "shakshuka",
        "a mushroom risotto",
        "halloumi wraps",
        "whatever's left in the freezer",
    ),
    "weather": (
        "raining sideways",
        "weirdly warm",
        "foggy all day",
        "freezing",
        "windy enough to lose an umbrella",
        "glorious",
        "grey and drizzly",
        "hailing, for some reason",
        "so humid my hair has doubled in size",
    ),
    "any_past": (
        "last night",
        "on Friday",
        "last week",
        "at the weekend",
        "the other day",
        "on Sunday",
    ),
    "band": (
        "a Fleetwood Mac tribute band",
        "a brass band in the park",
        "a jazz trio in a tiny pub",
        "a choir doing sea shanties",
        "a ska band I'd never heard of",
    ),
    "book": (
        "a massive fantasy novel",
        "a biography of a Victorian engineer",
        "a thriller set on a train",
        "a book about the history of salt",
        "a very sad novel about a lighthouse keeper",
        "a collection of short ghost stories",
    ),
    "match": (
        "the football",
        "the cricket",
        "the darts final",
        "the tennis",
        "the netball",
        "the rowing",
    ),
    "weekend": (
        "a lot of sofa",
        "a car boot sale",
        "a long walk if it stays dry",
        "batch cooking",
        "finally sorting out the shed",
        "a birthday lunch",
        "absolutely nothing, on purpose",
        "the big supermarket shop",
    ),
    "diy": (
        "the wobbly table",
        "the dripping shower head",
        "the squeaky door",
        "the curtain rail",
        "the loose kitchen cupboard",
        "the bathroom extractor fan",
    ),
    "tech": (
        "decided to update itself in the middle of a call",
        "won't hold a charge past lunchtime",
        "keeps autocorrecting 'okay' to 'Olay'",
        "froze on the bus and played a random podcast at full volume",
        "has a crack right across the camera",
    ),
    "ailment": (
        "a stinking cold",
        "a stiff neck",
        "a headache that won't shift",
        "a twinge in my back from hoovering",
        "hay fever from hell",
    ),
    "cafe": (
        "the new café on the corner",
        "the bakery by the station",
        "that ramen place everyone's been going on about",
        "the pub with the big garden",
        "the Lebanese place near the library",
    ),
    "verdict": (
        "Nice cake, tiny portions, very loud music. Three stars.",
        "Honestly amazing. I'll be going back this week.",
        "Overpriced, but the coffee was good.",
        "Lovely staff, forgettable food.",
        "Queue round the block, not worth it.",
    ),
    "chore": (
        "the ironing",
        "my tax stuff",
        "the gutters",
        "the recycling",
        "the fridge clear-out",
        "a mountain of emails",
    ),
    "snack": (
        "a whole packet of biscuits",
        "half a cheesecake",
        "a bag of crisps the size of a pillow",
        "most of a Toblerone",
    ),
}

FILLER_TOPICS: tuple[tuple[tuple[str, ...], ...], ...] = (
    (
        (
            "A: Have you watched {show} yet?",
            "A: Did you catch {show}?",
            "A: Are you watching {show}?",
        ),
        (
            "B: Two episodes in. I keep falling asleep halfway through.",
            "B: Only when someone else has it on.",
            "B: Yes! I'm hooked, annoyingly.",
            "B: Not yet, everyone keeps telling me to.",
        ),
        (
            "A: Ha, same. No spoilers please.",
            "A: Fair. It's background telly at best.",
            "A: I'll catch up at the weekend.",
        ),
    ),
    (
        ("A: What are you having for dinner?", "A: What's for tea tonight?", "A: Dinner plans?"),
        (
            "B: Probably {food}. Living the dream.",
            "B: {food_cap}, I think.",
            "B: No idea. Probably {food} again.",
        ),
        (
            "A: Honestly that sounds better than what I've got planned.",
            "A: Nice. I'm having {food2}.",
            "A: Solid choice.",
        ),
    ),
    (
        (
            "A: It's {weather} here today.",
            "A: The weather here is ridiculous, {weather}.",
            "A: What's the weather like where you are?",
        ),
        (
            "B: Same here, more or less. I've given up on the forecast.",
            "B: {weather_cap}. Typical.",
            "B: Here it's {weather2}. Can't win.",
        ),
        (
            "A: The forecast apps just guess, I'm convinced of it.",
            "A: Ha, same old.",
            "A: I'm staying in with a blanket.",
        ),
    ),
    (
        (
            "A: Any plans for the weekend?",
            "A: What are you up to this weekend?",
            "A: Doing anything nice at the weekend?",
        ),
        (
            "B: Not much, {weekend}.",
            "B: {weekend_cap}, mostly.",
            "B: Nothing booked. Probably {weekend}.",
        ),
        ("A: Sounds perfect, honestly.", "A: Nice. I'm doing {weekend2}.", "A: That's the dream."),
    ),
    (
        ("A: I went to see {band} {any_past}.", "A: Went to a gig {any_past}, {band}."),
        ("B: Oh fun! Any good?", "B: Ha! How was it?"),
        (
            "A: Brilliant. My ears are still ringing.",
            "A: Better than expected, honestly.",
            "A: Mixed. Great music, terrible beer.",
        ),
    ),
    (
        ("A: I've been reading {book}.", "A: I started {book} {any_past}."),
        ("B: Is it any good?", "B: Ooh, would I like it?"),
        (
            "A: The first hundred pages are slow, then it really gets going.",
            "A: I can't put it down. I'll lend it to you.",
            "A: Not sure yet. Ask me in a week.",
        ),
    ),
    (
        ("A: Did you watch {match} {any_past}?", "A: Were you watching {match}?"),
        (
            "B: I caught the second half. What a finish.",
            "B: No, I missed it completely.",
            "B: I had it on in the background.",
        ),
        (
            "A: I shouted at the telly so much I lost my voice.",
            "A: You missed a classic.",
            "A: Probably for the best, my nerves couldn't take it.",
        ),
    ),
    (
        ("A: I finally fixed {diy}.", "A: I spent all evening on {diy}."),
        (
            "B: Engineering at its finest.",
            "B: Look at you, all handy.",
            "B: Did you have to watch a video?",
        ),
        (
            "A: I'm thinking of retraining.",
            "A: Three videos and a lot of swearing.",
            "A: It lasted a whole day before it broke again.",
        ),
    ),
    (
        ("A: My phone {tech}.", "A: Ugh, my phone {tech}."),
        (
            "B: Time for a new one?",
            "B: Have you tried turning it off and on again?",
            "B: Phones are a conspiracy.",
        ),
        (
            "A: Probably. I just hate setting them up.",
            "A: Four times. It's haunted.",
            "A: I'll limp on till the contract's up.",
        ),
    ),
    (
        ("A: I've got {ailment}.", "A: Woke up with {ailment} today."),
        (
            "B: Oh no. Lemsip and bed?",
            "B: Poor you. Take it easy.",
            "B: There's a lot of it going round.",
        ),
        ("A: That's the plan.", "A: I'll live. Probably.", "A: Everyone at work has it."),
    ),
    (
        ("A: I tried {cafe} {any_past}.", "A: Finally went to {cafe} {any_past}."),
        ("B: Any good?", "B: Ooh, verdict?"),
        ("A: {verdict}",),
    ),
    (
        (
            "A: Is it just me or has this week lasted about a month?",
            "A: How is it only Wednesday?",
            "A: This week is never-ending.",
        ),
        (
            "B: It's not just you. I thought it was Thursday this morning.",
            "B: Don't. I've been counting the hours.",
            "B: Same. My brain is soup.",
        ),
        ("A: Nearly there.", "A: I wish it was Friday."),
    ),
    (
        ("A: I've been putting off {chore} for a week.", "A: Today's plan: {chore}. Send help."),
        (
            "B: Do it now and then reward yourself.",
            "B: I've been avoiding {chore} too.",
            "B: Put a podcast on, it helps.",
        ),
        ("A: Reward first, then {chore}. That's the deal.", "A: Fine. Starting now. Ish."),
    ),
    (
        ("A: I ate {snack} {any_past}.", "A: Confession: {snack}, in one sitting."),
        ("B: Respect.", "B: No judgement here.", "B: Ha! Was it worth it?"),
        ("A: Completely. No regrets.", "A: My stomach says no, my heart says yes."),
    ),
    (
        (
            "A: Sorry for the slow reply, my phone's been in another room all day.",
            "A: Sorry, I've been rubbish at replying this week.",
            "A: Sorry, I only just saw your message.",
        ),
        (
            "B: No worries at all, I'm terrible at replying too.",
            "B: Don't be silly.",
            "B: Same, honestly.",
        ),
    ),
    (
        ("A: We should get a coffee soon.", "A: We need a proper catch-up in person."),
        (
            "B: Yes! Next week maybe?",
            "B: Definitely. I'll check my diary.",
            "B: Agreed. It's been ages.",
        ),
        ("A: I'll message you.", "A: Perfect, let's sort a day."),
    ),
    (
        (
            "A: Do you ever walk into a room and forget why?",
            "A: I put the milk in the cupboard and the cereal in the fridge this morning.",
        ),
        (
            "B: Constantly. I went upstairs for a charger and came back with a towel.",
            "B: That's a classic. We're all doomed.",
        ),
        ("A: Glad it's not just me.",),
    ),
    (
        (
            "A: The traffic was unbelievable {any_past}, forty minutes to go two miles.",
            "A: My train was cancelled {any_past}. Again.",
            "A: The bus just didn't turn up {any_past}.",
        ),
        ("B: Roadworks again?", "B: Of course it was.", "B: Public transport, what a joy."),
        ("A: Every single time.", "A: I ended up walking."),
    ),
    (
        (
            "A: Random question, are you a tea-first or milk-first person?",
            "A: Settle an argument: is a hot dog a sandwich?",
            "A: Important question: crunchy or smooth peanut butter?",
        ),
        (
            "B: Obviously the first one. I'm not a monster.",
            "B: I refuse to answer that.",
            "B: Depends entirely on my mood.",
        ),
        ("A: Correct answer.", "A: Coward.", "A: Ha, fair."),
    ),
    (
        ("A: I made banana bread {any_past}.", "A: I tried baking bread {any_past}."),
        ("B: Save me a slice next time!", "B: How did it turn out?"),
        ("A: Mostly gone already.", "A: Edible. Just."),
    ),
    (
        (
            "A: My neighbour has started learning the trumpet.",
            "A: Someone on our road is learning the drums.",
        ),
        ("B: That's a crime in at least three countries.", "B: Oh no. What time of day?"),
        ("A: Seven in the morning, mostly.", "A: He's getting better, in fairness."),
    ),
    (
        (
            "A: I bought a new plant and I've already overwatered it.",
            "A: My basil plant has died again.",
        ),
        ("B: Plants are so dramatic.", "B: Supermarket basil is designed to die."),
        ("A: It's drooping at me like I've personally wronged it.", "A: I'll try again."),
    ),
)

FILLER_ASSISTANT: tuple[tuple[tuple[str, ...], ...], ...] = (
    (
        (
            "Can you suggest a quick lunch I can make with {ingredient}?",
            "What can I make for lunch with {ingredient}? Something quick.",
        ),
        (
            "Here are three quick ideas with {ingredient}. First, a warm salad with mixed leaves, "
            "a little feta and a lemon dressing. Second, a toasted wrap with hummus and grated "
            "carrot. Third, a simple frittata, which takes about fifteen minutes and keeps well "
            "for the next day.",
        ),
        ("The frittata sounds good. How many eggs?", "I'll try the wrap, thanks."),
        (
            "Four eggs for two people, six if you want leftovers. Cook it gently on the hob and "
            "finish it under the grill.",
            "Enjoy! Add a squeeze of lime if it needs brightening.",
        ),
    ),
    (
        (
            "What's the difference between baking soda and baking powder?",
            "Is baking powder the same as bicarbonate of soda?",
        ),
        (
            "Baking soda is pure sodium bicarbonate and needs an acid, like yoghurt or lemon "
            "juice, to react. Baking powder already contains an acid, so it only needs moisture "
            "and heat. That is why recipes without an acidic ingredient usually use baking "
            "powder.",
        ),
    ),
    (
        (
            "Can you help me word a polite email declining a meeting?",
            "How do I politely say no to a meeting invite?",
        ),
        (
            "Of course. Something like: 'Thanks for the invitation. Unfortunately I can't make "
            "this one, but I'd be glad to read the notes afterwards, or we could find a time next "
            "week if that suits.' It is short, friendly and leaves the door open.",
        ),
        ("Perfect, that's exactly the tone.", "Can you make it a bit less formal?"),
        (
            "Glad it helps.",
            "Sure: 'Thanks for the invite! I can't make this one, but send me "
            "the notes and I'll catch up.'",
        ),
    ),
    (
        (
            "How long should I boil an egg for a runny yolk?",
            "What's the timing for a soft-boiled egg?",
        ),
        (
            "For a large egg straight from the fridge, lower it into boiling water and cook it "
            "for six minutes, then put it in cold water for a minute. Five and a half minutes "
            "gives a softer yolk.",
        ),
    ),
    (
        (
            "Any tips for getting to sleep when my brain won't switch off?",
            "I keep lying awake thinking about work. Any tricks?",
        ),
        (
            "A few things help many people: keep the same wake-up time every day, put screens "
            "away half an hour before bed, and write tomorrow's to-do list down so it is out of "
            "your head. If you are still awake after twenty minutes, get up and read something "
            "dull in dim light until you feel sleepy.",
        ),
        ("The to-do list thing might work. Thanks.", "I'll try the screens one."),
        ("Good luck! Give it a week or so before judging it.", "Fingers crossed. Sleep well!"),
    ),
    (
        ("Is it worth getting a slow cooker?", "Should I buy an air fryer or a slow cooker?"),
        (
            "If you like stews, curries and soups and want dinner ready when you get home, a slow "
            "cooker can be very handy; they use little electricity and suit cheaper cuts and "
            "dried beans. An air fryer is better for quick crispy things like potatoes and "
            "vegetables. Think about which meals you actually cook most often.",
        ),
    ),
    (
        (
            "What's a good stretch for a stiff neck from sitting at a desk?",
            "My neck is stiff from the laptop. Any stretches?",
        ),
        (
            "Try slow chin tucks: sit tall, draw your chin straight back as if making a double "
            "chin, hold for five seconds and repeat ten times. Gentle side bends, ear towards "
            "shoulder, also help. If the stiffness lasts for weeks, it is worth seeing a GP or a "
            "physiotherapist.",
        ),
    ),
    (
        (
            "Can you recommend a few classic novels that aren't too long?",
            "I want to read more classics but I don't have much time. Ideas?",
        ),
        (
            "Some shorter classics: 'Of Mice and Men' by John Steinbeck, 'The Great Gatsby' by "
            "F. Scott Fitzgerald, 'Animal Farm' by George Orwell and 'Breakfast at Tiffany's' by "
            "Truman Capote. Each can be read in a weekend.",
        ),
        ("I've read Animal Farm. Which next?", "Great list, thanks."),
        (
            "Then try The Great Gatsby: it's short, beautifully written and easy to finish in "
            "two evenings.",
            "Happy reading!",
        ),
    ),
    (
        ("How do I get a red wine stain out of a carpet?", "I spilled red wine on a rug. Help!"),
        (
            "Blot it, don't rub. Pour a little cold water on it and keep blotting, then cover it "
            "with a paste of bicarbonate of soda and water, let it dry and vacuum it up. Test any "
            "cleaner on a hidden patch first.",
        ),
    ),
    (
        (
            "What's a nice houseplant that is hard to kill?",
            "I kill every plant I own. Is there one that survives anything?",
        ),
        (
            "A snake plant or a ZZ plant are both very forgiving: they cope with low light and "
            "only need watering every two or three weeks. A pothos is another good choice and "
            "tells you when it is thirsty by drooping.",
        ),
    ),
    (
        (
            "Could you explain what an index fund is, in simple terms?",
            "What actually is an index fund?",
        ),
        (
            "An index fund is an investment fund that buys all, or a sample, of the shares in a "
            "market index, such as the FTSE 100. Instead of someone picking shares, it just "
            "follows the index, so fees are usually low. This is general information, not "
            "financial advice.",
        ),
    ),
    (
        ("Give me a fun fact to cheer me up.", "Tell me something nice, it's been a long day."),
        (
            "Sea otters hold hands while they sleep so they don't drift apart. Some of them even "
            "have a favourite stone that they keep in a pouch of skin under their arm.",
            "Cows have best friends, and studies found they are calmer when they are with them.",
            "Wombats produce cube-shaped droppings, which stop them rolling away. Nature is "
            "strange and wonderful.",
        ),
        ("Ha, love it.", "That did cheer me up."),
        ("Glad to help!", "Any time."),
    ),
    (
        (
            "How do I stop my glasses steaming up when I wear a scarf?",
            "My glasses steam up every time I go outside. Any fix?",
        ),
        (
            "Tuck the top of the scarf under your glasses' nose pads rather than over them, so "
            "the warm air is pushed down. A drop of washing-up liquid rubbed on the lenses and "
            "polished off also leaves a thin anti-fog layer.",
        ),
    ),
    (
        ("What should I put in a basic first aid kit?", "What goes in a first aid kit?"),
        (
            "A sensible basic kit has plasters of different sizes, sterile gauze, a roll of "
            "tape, a crepe bandage, antiseptic wipes, tweezers, scissors, disposable gloves and "
            "some paracetamol. Check the dates once a year.",
        ),
    ),
    (
        (
            "Is there a trick to remembering people's names?",
            "I always forget names straight after I hear them. Tips?",
        ),
        (
            "Say the name back straight away ('Nice to meet you, Sam'), link it to something "
            "memorable about them, and use it once more before you part. Writing it down "
            "afterwards helps it stick.",
        ),
    ),
    (
        ("How long does cooked rice keep in the fridge?", "Is leftover rice safe to eat?"),
        (
            "Cool it quickly, within an hour, and keep it in the fridge for no more than a day. "
            "Reheat it only once, until it is piping hot all the way through.",
        ),
    ),
    (
        (
            "Can you write me a two-line poem about {poem}?",
            "Write me a tiny poem about {poem}, please.",
        ),
        (
            "Here you go: 'Along comes {poem}, without a sound, / and turns the whole day upside "
            "down.'",
        ),
        ("Ha, perfect.", "That's brilliant, thank you."),
        ("Glad you like it!", "Happy to oblige."),
    ),
    (
        ("What's a good board game for two people?", "Any good two-player games?"),
        (
            "Patchwork, Jaipur and 7 Wonders Duel are all made for two players, take under an "
            "hour and are easy to learn. Carcassonne also works very well with two.",
        ),
    ),
    (
        ("How do I descale a kettle?", "My kettle is full of limescale. How do I clean it?"),
        (
            "Fill it halfway with equal parts water and white vinegar, or water with a few "
            "spoons of citric acid, bring it to the boil and leave it for an hour. Empty it, "
            "rinse well and boil fresh water once before using it.",
        ),
    ),
    (
        (
            "What's a good way to start learning to draw?",
            "I want to learn to draw. Where do I start?",
        ),
        (
            "Start small and often: ten minutes a day of simple objects like mugs or shoes, "
            "looking at shapes rather than details. Blind contour drawing, where you don't look "
            "at the page, is a fun exercise that trains your eye.",
        ),
    ),
    (
        ("Can you explain how compound interest works?", "What's compound interest?"),
        (
            "Compound interest means you earn interest on your interest. If you save 1,000 at 5% "
            "a year, after one year you have 1,050, and the next year's 5% is on 1,050, not "
            "1,000. Over many years the growth speeds up.",
        ),
    ),
    (
        ("What can I use instead of eggs in a cake?", "Egg substitute for baking?"),
        (
            "For each egg you can use a mashed half banana, three tablespoons of apple sauce, or a "
            "tablespoon of ground flaxseed mixed with three tablespoons of water and left for "
            "five minutes. Results vary by recipe, so start with simple sponges.",
        ),
    ),
    (
        ("How do I keep cut flowers fresh for longer?", "Tips for making flowers last?"),
        (
            "Trim the stems at an angle every couple of days, change the water, remove any "
            "leaves below the waterline and keep the vase away from sunlight and the fruit bowl, "
            "because ripening fruit releases gas that ages flowers.",
        ),
    ),
    (
        ("Can you suggest a podcast for a long drive?", "I've got a long drive. Podcast ideas?"),
        (
            "It depends on your taste: a narrative history series works well for long drives, "
            "as do comedy panel shows or a serialised true-crime story. Pick something with long "
            "episodes so you are not fiddling with your phone while driving.",
        ),
    ),
)
POEM_SUBJECTS = ("Mondays", "rain", "toast", "the washing machine", "autumn", "a cat")
INGREDIENTS = (
    "chickpeas",
    "a tin of tuna",
    "halloumi",
    "leftover roast vegetables",
    "sweet potatoes",
    "eggs and spinach",
    "a bag of lentils",
    "feta and peppers",
    "a tin of sardines",
    "leftover rice",
)

OPENINGS_HUMAN = (
    ("A: Hey {B}! How's your week going?", "B: Not bad, not bad. Busy. You?"),
    ("A: Morning! Got a minute?", "B: Always, what's up?"),
    ("A: Hiya, are you about?", "B: Here! Just made a cup of tea."),
    ("A: {B}! Long time no chat.", "B: I know, it's been mad. How are you?"),
    ("A: Evening! Are you surviving?", "B: Just about. How about you?"),
    ("A: Hi hi. Quick catch-up?", "B: Go on then, I've got ten minutes."),
)
CLOSINGS_HUMAN = (
    ("A: Right, I'd better go, the washing machine is beeping at me.", "B: Go! Talk soon."),
    ("A: Okay, I need to get some sleep. Night!", "B: Night night!"),
    ("A: Anyway, I've got to run. Speak soon?", "B: Definitely. Take care."),
    ("A: That's my lunch break over. Catch you later!", "B: Later!"),
    ("A: Right, dinner's ready. Chat soon!", "B: Enjoy! Bye!"),
)
OPENINGS_ASSISTANT = (
    ("A: Hi again!", "B: Hello! What can I help you with today?"),
    ("A: Hello, I've got a few things to ask about.", "B: Of course, go ahead."),
    ("A: Hey, quick question or two?", "B: Sure, I'm happy to help."),
)
ANY_PAST = SLOTS["any_past"]
CLOSINGS_ASSISTANT = (
    ("A: That's all for now, thanks!", "B: You're welcome. Good luck with everything!"),
    ("A: Brilliant, thanks for the help.", "B: Any time. Take care!"),
    ("A: Okay, I'll leave it there. Thanks!", "B: Glad I could help."),
)

REACT_GOOD = (
    "That's brilliant news!",
    "No way! Congratulations!",
    "Oh that's amazing.",
    "Yay! So pleased for you.",
    "Amazing, you deserve it.",
    "Get in!",
)
REACT_BAD = (
    "Oh no, that's rubbish.",
    "Ugh, sorry to hear that.",
    "Oh dear. Poor you.",
    "Yikes. Are you okay?",
)
REACT_NEUTRAL = (
    "Ha, fair enough.",
    "Oh really?",
    "Ha, love that.",
    "Makes sense.",
    "Ha! Classic.",
    "Oh nice.",
    "Ha, sounds about right.",
    "Aw.",
    "Fair!",
    "Oh god, ha.",
    "Ha, of course.",
)
ASSIST_GOOD = (
    "Congratulations, that's wonderful news! Let me know if you'd like help "
    "planning the next steps.",
    "That's great to hear. If it would help, I can put together a checklist for the coming weeks.",
    "Congratulations! Big changes can be tiring too, so remember to leave a little time for rest.",
)
ASSIST_BAD = (
    "I'm sorry to hear that. If you'd like, we can work out a plan to make it easier.",
    "That sounds stressful. Take it one step at a time, and tell me if I can "
    "help with anything specific.",
)
ASSIST_NEUTRAL = (
    "Thanks for telling me, I'll keep that in mind.",
    "Good to know. Is there anything you'd like help with around that?",
    "Got it. That's useful context for the suggestions I make.",
)

# --------------------------------------------------------------------------------------
# Building one conversation


@dataclass
class Turn:
    who: int  # 0 or 1: the speaker
    text: str
    key: str | None = None  # a fact that this turn states


@dataclass
class Question:
    kind: str
    question: str
    answer: str
    keys: list[str]
    date: dt.date | None = None  # the date a temporal answer was computed from


@dataclass
class Plan:
    date: dt.datetime
    beats: list[list[Turn]] = field(default_factory=list)


class Conversation:
    """One conversation: sessions with dated beats (facts) and questions about them."""

    def __init__(
        self,
        index: int,
        cid: str,
        a: tuple[str, str],
        b: tuple[str, str],
        relation: str,
        start: str,
    ) -> None:
        self.rng = random.Random(SEED * 1009 + index)
        self.cid = cid
        self.names = (a[0], b[0])
        self.genders = (a[1], b[1])
        self.relation = relation
        self.assistant = relation == "assistant"
        self.used_names: set[str] = {a[0], b[0]}
        self.used: dict[str, set[str]] = {}
        n = self.rng.randint(20, 24)
        day = dt.date.fromisoformat(start)
        self.sessions: list[Plan] = []
        for i in range(n):
            if i:
                day += dt.timedelta(days=self.rng.randint(8, 17))
            hour = self.rng.choice((7, 8, 12, 13, 17, 18, 19, 20, 21))
            self.sessions.append(
                Plan(dt.datetime.combine(day, dt.time(hour, self.rng.randrange(0, 60))))
            )
        self.questions: list[Question] = []
        self.unanswerable: list[tuple[str, str]] = []  # (question, a phrase never said)
        self.fact_turns: dict[str, str] = {}
        self.said: set[str] = set()  # small-talk exchanges used so far

    # ---- helpers -----------------------------------------------------------------------

    @property
    def n(self) -> int:
        return len(self.sessions)

    def day(self, k: int) -> dt.date:
        return self.sessions[k].date.date()

    def pick(self, pool: tuple, group: str | None = None):
        """A random element, distinct within this conversation for a named group."""
        if group is None:
            return self.rng.choice(pool)
        taken = self.used.setdefault(group, set())
        free = [x for x in pool if repr(x) not in taken] or list(pool)
        x = self.rng.choice(free)
        taken.add(repr(x))
        return x

    def person(self, gender: str) -> str:
        pool = FEMALE if gender == "f" else MALE
        free = [x for x in pool if x not in self.used_names]
        name = self.rng.choice(free)
        self.used_names.add(name)
        return name

    def slot(self, lo: float, hi: float, after: int = -1) -> int:
        """A session index in [lo*n, hi*n], strictly after `after`."""
        a = max(int(lo * self.n), after + 1)
        b = max(a, min(self.n - 1, int(hi * self.n)))
        return self.rng.randint(a, b)

    def beat(self, k: int, *turns: Turn) -> None:
        self.sessions[k].beats.append(list(turns))

    def echo(self, who: int, lo: int, hi: int, texts: tuple[str, ...], count: int = 1) -> None:
        """Mention a known fact again in passing, in sessions lo..hi (never asked about:
        real conversations repeat themselves, and the repeats compete in search)."""
        if hi < lo:
            return
        for text in self.rng.sample(texts, min(count, len(texts))):
            k = self.rng.randint(lo, hi)
            self.beat(k, Turn(who, text), Turn(1 - who, self.react("neutral")))

    def react(self, mood: str) -> str:
        if self.assistant:
            pool = {"good": ASSIST_GOOD, "bad": ASSIST_BAD}.get(mood, ASSIST_NEUTRAL)
        else:
            pool = {"good": REACT_GOOD, "bad": REACT_BAD}.get(mood, REACT_NEUTRAL)
        return self.rng.choice(pool)

    def q(
        self, kind: str, question: str, answer: str, keys: list[str], date: dt.date | None = None
    ) -> None:
        self.questions.append(Question(kind, question, answer, keys, date))

    def he(self, who: int) -> str:
        return {"f": "she", "m": "he"}.get(self.genders[who], "they")

    def his(self, who: int) -> str:
        return {"f": "her", "m": "his"}.get(self.genders[who], "their")

    # ---- storylines of the main speaker (0) --------------------------------------------

    def storylines(self) -> None:
        r = self.rng
        P = self.names[0]
        p, o = 0, 1
        family_ok = self.relation != "siblings"  # siblings share parents and cousins
        # -- the relative (sibling or friend) who lives in the city P later moves to
        rel_word, rel_g = r.choice(REL_WORDS_FAMILY if family_ok else REL_WORDS_FRIEND)
        R = self.person(rel_g)
        c1, c2 = self.pick(CITIES, "city"), self.pick(CITIES, "city")
        rjob = self.pick(REL_JOBS, "reljob")
        k_rel = self.slot(0.0, 0.15)
        self.beat(
            k_rel,
            Turn(
                p,
                r.choice(
                    (
                        f"My {rel_word} {R} is coming to stay this weekend, so I've been frantically "
                        "hoovering.",
                        f"I spent most of Sunday on the phone to my {rel_word} {R}. We talked for three "
                        "hours, my ear is still warm.",
                        f"My {rel_word} {R} sent me the funniest video of a goose chasing a postman.",
                    )
                ),
                "rel_intro",
            ),
            Turn(o, self.react("neutral")),
        )
        k_rjob = self.slot(0.2, 0.45, k_rel)
        self.beat(
            k_rjob,
            Turn(
                p,
                r.choice(
                    (
                        f"{R} passed her final exams {past_expr(r, self.day(k_rjob))[0]}, so she's "
                        f"officially a {rjob} now!"
                        if rel_g == "f"
                        else f"{R} passed his final exams {past_expr(r, self.day(k_rjob))[0]}, so he's "
                        f"officially a {rjob} now!",
                        f"{R} has started work as a {rjob}. Proper grown-up job, with a lanyard and "
                        "everything.",
                    )
                ),
                "rel_job",
            ),
            Turn(o, self.react("good")),
        )
        k_rcity = self.slot(0.15, 0.35, k_rel)
        self.beat(
            k_rcity,
            Turn(
                p,
                r.choice(
                    (
                        f"{R} sent photos of the fireworks in {c2} from {self.his_g(rel_g)} balcony, "
                        "they looked incredible.",
                        f"{R} keeps telling me the rent in {c2} is half what I pay. Three years there "
                        f"and {self.he_g(rel_g)} still won't shut up about it.",
                    )
                ),
                "rel_city",
            ),
            Turn(o, self.react("neutral")),
        )
        self.q("single-hop", f"What is the name of {P}'s {rel_word}?", R, ["rel_intro"])
        self.q(
            "multi-hop",
            f"What does {P}'s {rel_word} do for a living?",
            rjob,
            ["rel_intro", "rel_job"],
        )
        self.q(
            "multi-hop", f"Which city does {P}'s {rel_word} live in?", c2, ["rel_intro", "rel_city"]
        )

        # -- home in c1
        k_home = self.slot(0.0, 0.12)
        years = r.choice(("five", "six", "eight", "ten"))
        self.beat(
            k_home,
            Turn(
                p,
                r.choice(
                    (
                        f"It's been raining in {c1} since Sunday. {years.capitalize()} years I've lived "
                        "here and I still don't own a proper coat.",
                        f"The buses in {c1} were on strike again this morning, so I walked in. "
                        f"{years.capitalize()} years living here and I'd never seen half those streets.",
                        f"I love {c1} in the autumn. {years.capitalize()} years here and the park by my "
                        "flat still gets me every time.",
                    )
                ),
                "home1",
            ),
            Turn(o, self.react("neutral")),
        )
        first_month = self.day(k_home).strftime("%B %Y")
        self.q("single-hop", f"Which city did {P} live in in {first_month}?", c1, ["home1"])

        # -- job at org1, interview and new job at org2 in c2, the move
        j1, j2 = self.pick(JOB_PAIRS, "job")
        org1, org2 = self.pick(ORGS, "org"), self.pick(ORGS, "org")
        boss1, boss2 = self.person(r.choice("fm")), self.person(r.choice("fm"))
        project = r.choice(PROJECTS)
        k_job1 = self.slot(0.0, 0.2)
        self.beat(
            k_job1,
            Turn(
                p,
                r.choice(
                    (
                        f"{boss1} wants the {project} report redone by Friday. Four years as a {j1} at "
                        f"{org1} and I still can't guess what {boss1} actually wants.",
                        f"Work is mad. I'm a {j1} at {org1}, which apparently now means I'm also the "
                        f"person who fixes the printer. {boss1} thinks it's hilarious.",
                        f"Long day. {boss1}, my manager, made us redo the whole {project} plan. Being a "
                        f"{j1} at {org1} is not as glamorous as the job advert said.",
                    )
                ),
                "job1",
            ),
            Turn(o, self.react("bad")),
        )
        k_int = self.slot(0.25, 0.4, max(k_job1, k_rcity))
        when, d_int = past_expr(r, self.day(k_int), 2, 6, workday=True)
        self.beat(
            k_int,
            Turn(
                p,
                r.choice(
                    (
                        f"Don't tell anyone, but I had an interview at {org2} {when}. It's for a {j2} "
                        "role.",
                        f"Okay, secret news: I had an interview {when} at {org2}, for a {j2} position. "
                        "I think it went well?",
                    )
                ),
                "job_int",
            ),
            Turn(
                o,
                "Ooh! How did it go?"
                if not self.assistant
                else "Good luck! Waiting to hear back is the hardest part.",
            ),
            Turn(
                p,
                r.choice(
                    (
                        "They asked me to describe a failure and I talked for too long "
                        "about a spreadsheet. But they laughed, so.",
                        "Hard to say. The panel was nice, one of them had a dog in the "
                        "office which helped my nerves.",
                    )
                ),
            ),
        )
        k_offer = k_int + 1
        self.beat(
            k_offer,
            Turn(
                p,
                r.choice(
                    (
                        f"{org2} offered me the job! I said yes before they'd finished the sentence.",
                        f"I got it!! {org2} rang this morning and offered me the job.",
                    )
                ),
                "job_offer",
            ),
            Turn(o, self.react("good")),
            Turn(
                p,
                f"The catch is it's based in {c2}, so we're moving. {R} is thrilled, obviously.",
                "home_plan",
            ),
            Turn(
                o,
                "Moving! That's huge."
                if not self.assistant
                else "That's a big change. I can help you plan the move if you like.",
            ),
        )
        k_move = self.slot(0.0, 1.0, k_offer + 1) if k_offer + 2 >= self.n else k_offer + 2
        when, d_move = past_expr(r, self.day(k_move), 1, 5)
        self.beat(
            k_move,
            Turn(
                p,
                r.choice(
                    (
                        f"We moved into the new flat in {c2} {when}! There are boxes in every room and "
                        "I can't find a single spoon.",
                        f"Writing to you from {c2}! The van came {when} and we've moved into the new "
                        "place. Everything smells of cardboard.",
                    )
                ),
                "home_move",
            ),
            Turn(o, self.react("good")),
        )
        k_start = min(self.n - 1, k_move + 1)
        gap = (self.day(k_start) - d_move).days
        when, d_start = past_expr(r, self.day(k_start), 1, max(1, min(6, gap - 1)), workday=True)
        self.beat(
            k_start,
            Turn(
                p,
                r.choice(
                    (
                        f"First days at {org2} done! I started {when} and I already know where the good "
                        "biscuits are.",
                        f"I started at {org2} {when}. Everyone is very nice and I have a desk by the "
                        "window.",
                    )
                ),
                "job_start",
            ),
            Turn(o, self.react("good")),
        )
        k_boss2 = self.slot(0.0, 1.0, k_start) if k_start + 1 < self.n else k_start
        self.beat(
            k_boss2,
            Turn(
                p,
                r.choice(
                    (
                        f"My new manager, {boss2}, brings homemade flapjacks on Fridays. I may never leave.",
                        f"The best thing about the new job is my manager, {boss2}. Actually listens in "
                        "meetings.",
                    )
                ),
                "job_boss2",
            ),
            Turn(o, self.react("neutral")),
        )
        self.q("single-hop", f"What was {P}'s job at {org1}?", j1, ["job1"])
        self.q("single-hop", f"Who was {P}'s manager at {org1}?", boss1, ["job1"])
        self.q("single-hop", f"What role did {P} interview for at {org2}?", j2, ["job_int"])
        self.q(
            "temporal",
            f"When was {P}'s interview at {org2}?",
            date_answer(d_int),
            ["job_int"],
            d_int,
        )
        self.q(
            "temporal",
            f"When did {P} start working at {org2}?",
            date_answer(d_start),
            ["job_start"],
            d_start,
        )
        self.q("update", f"Where does {P} work now?", org2, ["job1", "job_offer", "job_start"])
        if k_boss2 != k_start:
            self.q(
                "multi-hop",
                f"What is the name of {P}'s manager at {org2}?",
                boss2,
                ["job_start", "job_boss2"],
            )
        else:
            self.q(
                "single-hop", f"What is the name of {P}'s manager at {org2}?", boss2, ["job_boss2"]
            )
        self.q("update", f"Which city does {P} live in now?", c2, ["home1", "home_move"])
        self.q(
            "temporal",
            f"When did {P} move into the new flat in {c2}?",
            date_answer(d_move),
            ["home_move"],
            d_move,
        )
        self.q(
            "inference",
            f"Why did {P} move to {c2}?",
            f"For the new job at {org2} (the job is based in {c2})",
            ["job_offer", "home_plan"],
        )
        self.q(
            "inference",
            f"After the move, does {P} live in the same city as {R}?",
            f"Yes ({R} lives in {c2} too)",
            ["rel_city", "home_move"],
        )
        self.q(
            "temporal",
            f"How many days after the interview at {org2} did {P} move to {c2}?",
            f"{(d_move - d_int).days} days ({long_date(d_int)} to {long_date(d_move)})",
            ["job_int", "home_move"],
        )
        self.unanswerable.append((f"What was {P}'s salary at {org2}?", "salary"))

        # -- partner
        ptn_g = r.choice("fm")
        Ptn = self.person(ptn_g)
        meet = self.pick(MEET_PLACES, "meet")
        pjob, domain = self.pick(PARTNER_JOBS, "pjob")
        k_meet = self.slot(0.05, 0.25)
        self.beat(
            k_meet,
            Turn(
                p,
                r.choice(
                    (
                        f"So... I've been on a few dates with someone. {Ptn}. We met at {meet}.",
                        f"Okay, I have gossip and it's about me. I met someone called {Ptn} at {meet} and "
                        "we've been out three times.",
                    )
                ),
                "ptn_meet",
            ),
            Turn(
                o,
                "Tell me EVERYTHING."
                if not self.assistant
                else "That's lovely news! I hope it goes well.",
            ),
        )
        k_pjob = self.slot(0.3, 0.6, k_meet)
        self.beat(
            k_pjob,
            Turn(
                p,
                r.choice(
                    (
                        f"{Ptn} works as a {pjob}, so I get all the gossip about the job over dinner.",
                        f"{Ptn} had a twelve-hour shift today. Being a {pjob} is no joke.",
                        f"Turns out being a {pjob} means {Ptn} gets asked for free advice at every "
                        "party.",
                    )
                ),
                "ptn_job",
            ),
            Turn(o, self.react("neutral")),
        )
        k_eng = self.slot(0.75, 0.95, k_pjob)
        when, d_eng = past_expr(r, self.day(k_eng), 1, 6)
        where = self.pick(PROPOSE_PLACES, "propose")
        self.beat(
            k_eng,
            Turn(
                p,
                f"I have news. {Ptn} proposed {when}, {where}! I said yes, we're engaged!",
                "ptn_engaged",
            ),
            Turn(o, self.react("good")),
            Turn(
                p,
                r.choice(
                    (
                        "I cried, the waiter cried, it was a lot.",
                        "The ring was too big, so it's on a ribbon round my neck "
                        "until it's resized.",
                    )
                ),
            ),
        )
        self.q("single-hop", f"Where did {P} meet {Ptn}?", meet, ["ptn_meet"])
        self.q(
            "multi-hop", f"What does {P}'s partner do for a living?", pjob, ["ptn_meet", "ptn_job"]
        )
        self.q(
            "temporal",
            f"When did {Ptn} propose to {P}?",
            date_answer(d_eng),
            ["ptn_engaged"],
            d_eng,
        )
        self.q("single-hop", f"Where did {Ptn} propose?", where, ["ptn_engaged"])
        self.q(
            "update",
            f"What is {P}'s relationship with {Ptn} now?",
            "engaged",
            ["ptn_meet", "ptn_engaged"],
        )
        self.q(
            "inference",
            f"Who close to {P} could help with {domain}?",
            f"{Ptn} ({P}'s partner is a {pjob})",
            ["ptn_meet", "ptn_job"],
        )
        self.unanswerable.append((f"What is {Ptn}'s surname?", "surname"))

        # -- pet
        dog = r.random() < 0.6
        species = "dog" if dog else "cat"
        young = "puppy" if dog else "kitten"
        breed = self.pick(DOG_BREEDS if dog else CAT_BREEDS, "breed")
        name = self.pick(PET_NAMES, "pet")
        alt = self.pick(PET_NAMES, "pet")
        near = self.pick(PLACES_NEAR, "near")
        k_pet = self.slot(0.45, 0.65, max(k_meet, k_move))
        when, d_pet = past_expr(r, self.day(k_pet), 1, 6)
        self.beat(
            k_pet,
            Turn(
                p,
                r.choice(
                    (
                        f"We did it. We picked up a {breed} {young} from a {'breeder' if dog else 'rescue'}"
                        f" near {near} {when}.",
                        f"Guess who has a tiny {breed} {young} asleep on their feet? We collected "
                        f"{'him' if r.random() < 0.5 else 'her'} from {near} {when}.",
                    )
                ),
                "pet_adopt",
            ),
            Turn(
                o,
                "Oh my god, pictures please!"
                if not self.assistant
                else f"How exciting! The first weeks with a {young} are busy; a consistent routine "
                "for meals, naps and trips outside helps a lot.",
            ),
            Turn(p, f"No name yet, {Ptn} and I can't agree on anything."),
        )
        k_name = k_pet + 1
        self.beat(
            k_name,
            Turn(
                p,
                r.choice(
                    (
                        f"The {young} finally has a name: {name}. {Ptn} wanted {alt}, but I wasn't having "
                        "it.",
                        f"We've called the {young} {name} in the end. {Ptn} lobbied hard for {alt} and "
                        "lost.",
                    )
                ),
                "pet_name",
            ),
            Turn(o, self.react("neutral")),
        )
        k_inc = self.slot(0.0, 1.0, k_name) if k_name + 1 < self.n else k_name
        item = self.pick(PET_ITEMS, "item")
        when, d_inc = past_expr(r, self.day(k_inc), 1, 5)
        self.beat(
            k_inc,
            Turn(
                p, f"{name} ate {item} {when}, so that was a fun trip to the vet.", "pet_incident"
            ),
            Turn(o, self.react("bad")),
            Turn(p, "All fine in the end. Expensive, but fine."),
        )
        self.q("single-hop", f"What breed is {P}'s {species}?", breed, ["pet_adopt"])
        self.q(
            "multi-hop",
            f"What is the name of the {breed} {young} {P} got?",
            name,
            ["pet_adopt", "pet_name"],
        )
        self.q("single-hop", f"Which name did {Ptn} want for the {young}?", alt, ["pet_name"])
        self.q(
            "temporal",
            f"When did {P} pick up the {young}?",
            date_answer(d_pet),
            ["pet_adopt"],
            d_pet,
        )
        self.q(
            "single-hop",
            f"What did {name} eat that meant a trip to the vet?",
            item,
            ["pet_incident"],
        )
        self.q(
            "inference",
            f"Would {P}'s home suit a guest with a severe {species} allergy?",
            f"No ({P} has a {breed}, {name})",
            ["pet_adopt", "pet_name"],
        )
        self.unanswerable.append((f"What is the name of {name}'s vet?", "vet called"))

        # -- a relative's pet (the owner must not be inverted)
        owner_rel = r.choice(PET_OWNER_RELS_FAMILY if family_ok else PET_OWNER_RELS_OTHER)
        animal, age = self.pick(REL_PETS, "relpet")
        rp = self.pick(REL_PET_NAMES, "relpetname")
        k_rp = self.slot(0.1, 0.5)
        self.beat(
            k_rp,
            Turn(
                p,
                r.choice(
                    (
                        f"I'm looking after my {owner_rel}'s {animal} {rp} this week. Chaos.",
                        f"My {owner_rel}'s {animal} {rp} has taken against me. I brought a present and "
                        "everything.",
                    )
                ),
                "relpet",
            ),
            Turn(o, self.react("neutral")),
        )
        k_rp2 = self.slot(0.55, 0.9, k_rp)
        self.beat(
            k_rp2,
            Turn(
                p,
                f"{rp} is {age} now, can you believe it? My {owner_rel} says that's ancient.",
                "relpet_age",
            ),
            Turn(o, self.react("neutral")),
        )
        self.q("single-hop", f"What is the name of {P}'s {owner_rel}'s {animal}?", rp, ["relpet"])
        self.q(
            "inference",
            f"Is {rp} {P}'s own {animal}?",
            f"No ({rp} belongs to {P}'s {owner_rel})",
            ["relpet"],
        )
        self.q(
            "multi-hop", f"How old is {P}'s {owner_rel}'s {animal}?", age, ["relpet", "relpet_age"]
        )

        # -- hobby progress
        hob = self.pick(HOBBIES, "hobby")
        club, when_club = hob["club"]
        vals = [r.choice(v) for v in hob["values"]]
        event = r.choice(hob["event_names"])
        k_h1 = self.slot(0.05, 0.3)
        self.beat(
            k_h1,
            Turn(p, hob["start"].format(club=club, when_club=when_club, v1=vals[0]), "hob_start"),
            Turn(o, self.react("good")),
        )
        k_h2 = self.slot(0.35, 0.65, k_h1)
        when, d_h = past_expr(r, self.day(k_h2), 1, 6)
        self.beat(
            k_h2,
            Turn(p, hob["event"].format(event=event, when=when, v2=vals[1]), "hob_event"),
            Turn(o, self.react("good")),
        )
        k_h3 = self.slot(0.7, 0.98, k_h2)
        self.beat(
            k_h3, Turn(p, hob["best"].format(v3=vals[2]), "hob_best"), Turn(o, self.react("good"))
        )
        fmt = {"P": P, "event": event}
        self.q("single-hop", hob["q_event"].format(**fmt), vals[1], ["hob_event"])
        self.q("temporal", hob["q_when"].format(**fmt), date_answer(d_h), ["hob_event"], d_h)
        self.q("update", hob["q_best"].format(**fmt), vals[2], ["hob_start", "hob_best"])
        self.q("single-hop", hob["q_start"].format(**fmt), club, ["hob_start"])
        self.q(
            "inference",
            f"Has {P}'s {hob['name']} improved since {self.he(p)} started?",
            f"Yes ({hob['metric']} from {vals[0]} to {vals[2]})",
            ["hob_start", "hob_best"],
        )

        # -- two trips
        for t, (lo, hi) in enumerate(((0.1, 0.4), (0.6, 0.9))):
            self.trip(p, f"trip{t}", lo, hi)

        # -- allergy
        allergen, dish, why = self.pick(ALLERGIES, "allergy")
        k_al = self.slot(0.0, 0.6)
        self.beat(
            k_al,
            Turn(
                p,
                r.choice(
                    (
                        f"Don't order anything with {allergen} for me, I'm allergic. Found out the hard "
                        "way at a wedding buffet.",
                        f"The new canteen labels everything except {allergen}, which is the one thing I'm "
                        "allergic to. Brilliant.",
                    )
                ),
                "allergy",
            ),
            Turn(o, self.react("bad")),
        )
        self.q("single-hop", f"What is {P} allergic to?", allergen, ["allergy"])
        self.q(
            "inference",
            f"Would {dish} be a safe thing to cook for {P}?",
            f"No ({why}, and {P} is allergic to {allergen})",
            ["allergy"],
        )

        # -- car
        car1, car2 = self.pick(CARS, "car")
        k_c1 = self.slot(0.0, 0.3)
        self.beat(
            k_c1,
            Turn(
                p,
                r.choice(
                    (
                        f"My old {car1} failed its MOT again. It's held together with hope at this point.",
                        f"The {car1} wouldn't start this morning. Third time this month.",
                    )
                ),
                "car1",
            ),
            Turn(o, self.react("bad")),
        )
        k_c2 = self.slot(0.5, 0.85, k_c1)
        when, d_car = past_expr(r, self.day(k_c2), 1, 6)
        self.beat(
            k_c2,
            Turn(
                p,
                f"Sold the {car1} {when}! Bought a second-hand {car2} "
                "instead, it has heated seats.",
                "car2",
            ),
            Turn(o, self.react("good")),
        )
        self.q("update", f"What car does {P} drive now?", car2, ["car1", "car2"])
        self.q(
            "single-hop", f"What car did {P} drive before the current one?", car1, ["car1", "car2"]
        )
        self.unanswerable.append((f"What colour is {P}'s {car2}?", "colour"))
        # -- the same facts again in passing, each only while it is true
        self.echo(
            p,
            k_rel + 1,
            self.n - 1,
            (
                f"{R} says hello, by the way.",
                f"{R} rang me {self.rng.choice(ANY_PAST)} for a moan about work.",
                f"I owe {R} a birthday present and I have no ideas.",
            ),
            2,
        )
        self.echo(
            p,
            k_home + 1,
            k_move - 1,
            (
                f"There's a food festival in {c1} this weekend, I'm going purely for the "
                "dumplings.",
                f"They've closed another road in {c1} for roadworks. The whole city is cones.",
            ),
        )
        self.echo(
            p,
            k_move + 1,
            self.n - 1,
            (
                f"{c2} is growing on me. Found a great bakery round the corner.",
                f"Still getting lost in {c2}. My phone's map app is my best friend.",
                f"It's been sunny in {c2} all week, which I'm told never happens.",
            ),
            2,
        )
        self.echo(
            p,
            k_job1 + 1,
            k_start - 1,
            (
                f"Another all-hands at {org1} today. Could have been an email.",
                f"The coffee machine at {org1} is broken again. Morale is low.",
            ),
        )
        self.echo(
            p,
            k_start + 1,
            self.n - 1,
            (
                f"{org2} had a team party on a boat. I won a hamper in the raffle.",
                f"Busy week at {org2}, we had a big deadline on Thursday.",
            ),
        )
        self.echo(
            p,
            k_name + 1,
            self.n - 1,
            (
                f"{name} is asleep on my feet again, so I can't move.",
                f"{name} has worked out how to open the cupboard with the treats in it.",
                f"{name} barked at a leaf for ten minutes this morning."
                if dog
                else f"{name} has decided the laundry basket is a bed now.",
            ),
            2,
        )
        self.echo(
            p,
            k_meet + 1,
            self.n - 1,
            (
                f"{Ptn} and I are doing the big shop later, pray for us.",
                f"{Ptn} made the best lasagne last night.",
                f"{Ptn} says hi!",
            ),
            2,
        )
        self.echo(
            p, k_c1 + 1, k_c2 - 1, (f"The {car1} made a new noise today. A sort of sad whistle.",)
        )
        self.echo(
            p,
            k_c2 + 1,
            self.n - 1,
            (f"The heated seats in the {car2} are life changing, I'm telling you.",),
        )
        self.echo(
            p,
            k_h1 + 1,
            self.n - 1,
            (
                f"Sore arms from {hob['name']} again. Worth it though.",
                f"I'm properly hooked on {hob['name']} now.",
            ),
        )
        self.unanswerable.append((f"What is {P}'s surname?", "surname"))
        self.unanswerable.append((f"What is the name of {P}'s street in {c2}?", "our street"))

    def he_g(self, g: str) -> str:
        return {"f": "she", "m": "he"}.get(g, "they")

    def his_g(self, g: str) -> str:
        return {"f": "her", "m": "his"}.get(g, "their")

    def trip(self, who: int, key: str, lo: float, hi: float) -> None:
        r = self.rng
        X = self.names[who]
        other = 1 - who
        dest, highlights = self.pick(TRIPS, "trip")
        purpose = r.choice(TRIP_PURPOSES)
        companion_g = r.choice("fm")
        companion = self.person(companion_g)
        comp_rel = r.choice(
            (
                "my friend",
                "my cousin" if self.relation != "siblings" else "my friend",
                "my colleague",
            )
        )
        k = self.slot(lo, hi)
        if k + 1 >= self.n:
            k = self.n - 2
        when, d_dep = future_expr(r, self.day(k), 2, 5)
        self.beat(
            k,
            Turn(
                who,
                r.choice(
                    (
                        f"We fly to {dest} {when} for {purpose}, {comp_rel} {companion} is coming too.",
                        f"Only a few sleeps till {dest}! We fly out {when}, me and {comp_rel} "
                        f"{companion}, for {purpose}.",
                    )
                ),
                f"{key}_plan",
            ),
            Turn(
                other,
                "Jealous! What's the plan out there?"
                if not self.assistant
                else f"{dest} is a lovely choice. Pack comfortable shoes, it's a city best seen "
                "on foot.",
            ),
            Turn(
                who,
                r.choice(
                    (
                        "Eat everything, mostly. Maybe a museum if it rains.",
                        "No plan at all. That's the plan.",
                    )
                ),
            ),
        )
        k2 = k + 1
        gap = (self.day(k2) - d_dep).days
        hi_back = max(1, min(4, gap - 2))
        when, d_back = past_expr(r, self.day(k2), 1, hi_back)
        highlight = r.choice(highlights)
        self.beat(
            k2,
            Turn(
                who,
                r.choice(
                    (
                        f"Got back from {dest} {when}. The highlight was {highlight}.",
                        f"We came home from {dest} {when}, absolutely shattered. Best bit by far was "
                        f"{highlight}.",
                    )
                ),
                f"{key}_back",
            ),
            Turn(other, self.react("good")),
        )
        self.q(
            "single-hop",
            f"What was the highlight of {X}'s trip to {dest}?",
            highlight,
            [f"{key}_back"],
        )
        self.q(
            "temporal", f"When did {X} fly to {dest}?", date_answer(d_dep), [f"{key}_plan"], d_dep
        )
        days = (d_back - d_dep).days
        self.q(
            "temporal",
            f"How many days was {X}'s trip to {dest}?",
            f"{days} days ({long_date(d_dep)} to {long_date(d_back)})",
            [f"{key}_plan", f"{key}_back"],
        )
        self.q(
            "multi-hop",
            f"Who went to {dest} with {X}, and what was the highlight?",
            f"{companion} ({comp_rel.removeprefix('my ')}); {highlight}",
            [f"{key}_plan", f"{key}_back"],
        )
        self.unanswerable.append((f"Which hotel did {X} stay at in {dest}?", "hotel"))

    # ---- storylines of the other speaker (1), when it is a person --------------------------

    def other_storylines(self) -> None:
        r = self.rng
        other = self.names[1]
        o, p = 1, 0
        # kids
        kid_g = r.choice("fm")
        kid = self.person(kid_g)
        kid2 = self.person(r.choice("fm"))
        age = r.randint(4, 9)
        k_kids = self.slot(0.0, 0.2)
        self.beat(
            k_kids,
            Turn(
                o,
                f"{kid} is {NUM_WORDS[age]} and {kid2} is {NUM_WORDS[age - 2]}"
                ", and between them they've broken three lamps this month.",
                "o_kids",
            ),
            Turn(p, self.react("neutral")),
        )
        k_bd = self.slot(0.4, 0.8, k_kids)
        theme = self.pick(KID_THEMES, "theme")
        when, d_bd = past_expr(r, self.day(k_bd), 1, 6)
        child = "daughter" if kid_g == "f" else "son"
        self.beat(
            k_bd,
            Turn(
                o,
                f"{kid} turned {NUM_WORDS[age + 1]} {when}. We did a {theme} "
                "party and I'm still finding glitter everywhere.",
                "o_bday",
            ),
            Turn(p, self.react("good")),
        )
        self.q("single-hop", f"What theme was {kid}'s birthday party?", theme, ["o_bday"])
        self.q(
            "temporal",
            f"When did {other}'s {child} {kid} turn {NUM_WORDS[age + 1]}?",
            date_answer(d_bd),
            ["o_bday"],
            d_bd,
        )
        self.q("update", f"How old is {kid} now?", NUM_WORDS[age + 1], ["o_kids", "o_bday"])
        self.q("single-hop", f"How old is {other}'s younger child?", NUM_WORDS[age - 2], ["o_kids"])
        # a pet
        opet = self.pick(PET_NAMES, "pet")
        animal = r.choice(("rabbit", "guinea pig", "tortoise", "hamster"))
        k_op = self.slot(0.1, 0.6)
        when = past_expr(r, self.day(k_op))[0]
        self.beat(
            k_op,
            Turn(
                o,
                f"Our {animal} {opet} escaped again {when}. Found behind the fridge, looking smug.",
                "o_pet",
            ),
            Turn(p, self.react("neutral")),
        )
        self.q("single-hop", f"What kind of animal is {other}'s pet {opet}?", animal, ["o_pet"])
        # a job
        ojob = self.pick(REL_JOBS, "reljob")
        k_oj = self.slot(0.0, 0.5)
        self.beat(
            k_oj,
            Turn(
                o,
                r.choice(
                    (
                        f"Work's been relentless. Being a {ojob} at this time of year is basically survival "
                        "mode.",
                        f"I love being a {ojob} but the paperwork is going to finish me off.",
                    )
                ),
                "o_job",
            ),
            Turn(p, self.react("bad")),
        )
        self.q("single-hop", f"What is {other}'s job?", ojob, ["o_job"])
        self.q(
            "inference", f"Does {other} have children?", f"Yes (two, {kid} and {kid2})", ["o_kids"]
        )
        # a trip
        self.trip(o, "otrip", 0.3, 0.8)
        self.unanswerable.append((f"What is the name of {other}'s partner?", "partner"))
        self.unanswerable.append((f"Which school do {kid} and {kid2} go to?", "school"))

    # ---- rendering ------------------------------------------------------------------------

    def filler(self, first: int, seen: set[int]) -> list[Turn]:
        """A small-talk exchange of a topic not yet used in this session (`seen`), never
        word for word the same as an earlier one in this conversation."""
        r = self.rng
        topics = FILLER_ASSISTANT if self.assistant else FILLER_TOPICS
        for _ in range(50):
            i = r.choice([i for i in range(len(topics)) if i not in seen])
            positions = topics[i]
            if self.assistant:  # user asks, assistant answers, maybe a follow-up
                lines = ["A: " + r.choice(positions[0]), "B: " + r.choice(positions[1])]
                if len(positions) == 4 and r.random() < 0.5:  # the reply fits the follow-up
                    j = r.randrange(len(positions[2]))
                    lines += ["A: " + positions[2][j], "B: " + positions[3][j]]
            else:
                lines = [r.choice(alts) for alts in positions]
            slots = {k: r.choice(v) for k, v in SLOTS.items()}
            slots.update(
                {
                    f"{k}2": r.choice([x for x in SLOTS[k] if x != slots[k]])
                    for k in ("food", "weather", "weekend")
                }
            )
            slots["ingredient"] = r.choice(INGREDIENTS)
            slots["poem"] = r.choice(POEM_SUBJECTS)
            for k in ("food", "weather", "weekend", "poem"):
                slots[f"{k}_cap"] = slots[k][0].upper() + slots[k][1:]
            out = []
            for line in lines:
                tag, text = line.split(": ", 1)
                who = first if tag == "A" else 1 - first
                out.append(Turn(who, text.format(**slots)))
            sig = "|".join(t.text for t in out)
            if sig not in self.said or _ == 49:
                self.said.add(sig)
                seen.add(i)
                return out
        raise AssertionError("unreachable")

    def render(self) -> dict:
        r = self.rng
        sessions = []
        for i, plan in enumerate(self.sessions):
            first = 0 if self.assistant else r.choice((0, 1))
            opening = r.choice(OPENINGS_ASSISTANT if self.assistant else OPENINGS_HUMAN)
            closing = r.choice(CLOSINGS_ASSISTANT if self.assistant else CLOSINGS_HUMAN)

            def lines(pair: tuple[str, ...], first: int = first) -> list[Turn]:
                out = []
                for line in pair:
                    tag, text = line.split(": ", 1)
                    who = first if tag == "A" else 1 - first
                    out.append(Turn(who, text.format(B=self.names[1 - first])))
                return out

            body: list[list[Turn]] = [list(b) for b in plan.beats]
            target = r.randint(20, 27)
            size = sum(len(b) for b in body) + 4
            fillers: list[list[Turn]] = []
            seen: set[int] = set()
            while size < target:
                f = self.filler(r.choice((0, 1)) if not self.assistant else 0, seen)
                fillers.append(f)
                size += len(f)
            # beats keep their order; fillers go in between at random places
            for f in fillers:
                body.insert(r.randint(0, len(body)), f)
            turns = lines(opening) + [t for block in body for t in block] + lines(closing)
            sid = f"S{i + 1}"
            out_turns = []
            for j, t in enumerate(turns):
                tid = f"{sid}:{j + 1}"
                if t.key:
                    if t.key in self.fact_turns:
                        raise AssertionError(f"{self.cid}: fact {t.key} stated twice")
                    self.fact_turns[t.key] = tid
                out_turns.append(
                    {"id": tid, "speaker": self.names[t.who], "text": articles(t.text)}
                )
            sessions.append(
                {"id": sid, "date": plan.date.isoformat(timespec="seconds"), "turns": out_turns}
            )
        questions = []
        allq = list(self.questions)
        allq += [Question("unanswerable", q, "not mentioned", []) for q, _ in self.unanswerable]
        for i, q in enumerate(allq):
            questions.append(
                {
                    "id": f"Q{i + 1}",
                    "question": articles(q.question),
                    "answer": articles(q.answer),
                    "evidence": [self.fact_turns[k] for k in q.keys],
                    "kind": q.kind,
                }
            )
        return {
            "id": self.cid,
            "speakers": list(self.names),
            "sessions": sessions,
            "questions": questions,
        }


# --------------------------------------------------------------------------------------
# Validation

_HEAD = re.compile(r"\s+\(|;\s")


def answer_head(answer: str) -> str:
    return _HEAD.split(answer, maxsplit=1)[0].strip()


def validate(conv: dict, unanswerable_phrases: list[str]) -> list[str]:
    """Problems with one generated conversation (an empty list when it is sound)."""
    problems = []
    turns = {t["id"]: t["text"] for s in conv["sessions"] for t in s["turns"]}
    dates = {s["id"]: s["date"] for s in conv["sessions"]}
    all_text = " ".join(turns.values()).lower()
    if len(conv["sessions"]) < 20:
        problems.append("fewer than 20 sessions")
    for s in conv["sessions"]:
        if len(s["turns"]) < 20:
            problems.append(f"{s['id']} has {len(s['turns'])} turns")
    if sorted(dates.values()) != list(dates.values()):
        problems.append("sessions out of date order")
    kinds: dict[str, int] = {}
    for q in conv["questions"]:
        kinds[q["kind"]] = kinds.get(q["kind"], 0) + 1
        ev = q["evidence"]
        for tid in ev:
            if tid not in turns:
                problems.append(f"{q['id']}: unknown evidence {tid}")
        if q["kind"] == "unanswerable":
            if ev or q["answer"] != "not mentioned":
                problems.append(f"{q['id']}: unanswerable with evidence or an answer")
            continue
        if not ev:
            problems.append(f"{q['id']}: no evidence")
        if q["kind"] == "multi-hop" and len({t.split(":")[0] for t in ev}) < 2:
            problems.append(f"{q['id']}: multi-hop evidence in one session")
        if q["kind"] in ("single-hop", "multi-hop", "update"):
            head = answer_head(q["answer"]).lower()
            if not any(head in turns[t].lower() for t in ev):
                problems.append(f"{q['id']}: answer {head!r} not in its evidence")
        if q["answer"].lower() in q["question"].lower():
            problems.append(f"{q['id']}: the question gives the answer away")
    for phrase in unanswerable_phrases:
        if phrase.lower() in all_text:
            problems.append(f"an unanswerable subject is stated: {phrase!r}")
    if len(conv["questions"]) < 50:
        problems.append(f"only {len(conv['questions'])} questions")
    for kind in ("single-hop", "multi-hop", "temporal", "inference", "update", "unanswerable"):
        if kinds.get(kind, 0) < 3:
            problems.append(f"only {kinds.get(kind, 0)} {kind} questions")
    return problems


def check_temporal(c: Conversation) -> list[str]:
    """Every computed date lies between the session before and the session that states it
    (a past event) or after the stating session (a future one)."""
    problems = []
    session_of = {k: int(v.split(":")[0][1:]) - 1 for k, v in c.fact_turns.items()}
    for q in c.questions:
        if q.date is None:
            continue
        k = session_of[q.keys[-1]]
        here = c.day(k)
        before = c.day(k - 1) if k else dt.date.min
        after = c.day(k + 1) if k + 1 < c.n else dt.date.max
        if not (before < q.date < after):
            problems.append(f"{q.question}: {q.date} outside ({before}, {after}), said {here}")
    return problems


# --------------------------------------------------------------------------------------


def build(index: int, spec: tuple) -> tuple[dict, list[str]]:
    cid, a, b, relation, start = spec
    c = Conversation(index, cid, a, b, relation, start)
    c.storylines()
    if not c.assistant:
        c.other_storylines()
    data = c.render()
    problems = validate(data, [p for _, p in c.unanswerable]) + check_temporal(c)
    return data, problems


def dump(data: dict) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT, help="output folder")
    ap.add_argument(
        "--check",
        action="store_true",
        help="do not write; exit 1 if a file on disk differs from what would be generated",
    )
    args = ap.parse_args(argv)
    failed = False
    stale = []
    total_q = 0
    for i, spec in enumerate(CONVERSATIONS):
        data, problems = build(i, spec)
        for pr in problems:
            print(f"{spec[0]}: {pr}", file=sys.stderr)
            failed = True
        text = dump(data)
        path = args.out / f"{spec[0]}.json"
        n_turns = sum(len(s["turns"]) for s in data["sessions"])
        kinds: dict[str, int] = {}
        for q in data["questions"]:
            kinds[q["kind"]] = kinds.get(q["kind"], 0) + 1
        total_q += len(data["questions"])
        print(
            f"{spec[0]}: {data['speakers'][0]} & {data['speakers'][1]} ({spec[3]}), "
            f"{len(data['sessions'])} sessions, {n_turns} turns, "
            f"{len(data['questions'])} questions "
            + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
        )
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(path.name)
        elif not problems:
            args.out.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    split = (
        json.dumps(
            {
                "about": "dev: used when tuning ContextFS; held-out: never tuned on, reported apart",
                "sets": SPLIT,
            },
            indent=2,
        )
        + "\n"
    )
    if args.check:
        if not SPLIT_FILE.exists() or SPLIT_FILE.read_text() != split:
            stale.append(SPLIT_FILE.name)
    elif not failed and args.out == OUT:
        SPLIT_FILE.write_text(split)
    print(f"{total_q} questions in {len(CONVERSATIONS)} conversations")
    if stale:
        print("stale: " + ", ".join(stale), file=sys.stderr)
    return 1 if failed or stale else 0


if __name__ == "__main__":
    sys.exit(main())
