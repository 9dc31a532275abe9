"""Extraction: the rule extractor per rule (and its refusals), the LLM extractor and
summarizer against a local OpenAI-compatible server, and the corpus quality bar."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from contextfs.conversations.extract import Candidate, RuleExtractor
from contextfs.conversations.llm import LLMExtractor, LLMSummarizer
from contextfs.conversations.scoring import Expected, candidate_matches, key_matches
from contextfs.conversations.transcript import Turn
from contextfs.ctxtypes import builtin_schema_dir, load_types
from contextfs.errors import ContextFSError, LLMUnavailable
from tests.fake_openai import FakeOpenAI, dead_url

REPO = Path(__file__).resolve().parents[2]
TYPES = load_types([builtin_schema_dir()])


def user(text: str, i: int = 1, ts: str | None = "2026-05-08T10:00:00Z") -> Turn:
    return Turn(line=i, role="user", content=text, timestamp=ts)


def extract(*turns: Turn, today: str | None = None) -> list[Candidate]:
    cands = RuleExtractor().extract(list(turns), TYPES, today=today)
    for c in cands:  # every candidate is valid for the real built-in type, keys included
        ctype = TYPES[c.type]
        assert ctype.coerce_fields(c.fields) == c.fields
        assert ctype.missing_required(c.fields) == []
        ctype.node_name(c.fields)
        assert 0.0 <= c.confidence <= 1.0
        assert c.turns
    return cands


def of(cands: list[Candidate], type_name: str) -> list[dict]:
    return [c.fields for c in cands if c.type == type_name]


# --- rules: someone else's facts -----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "name", "attrs"),
    [
        ("Maya's favourite tea is genmaicha.", "Maya", {"favourite tea": "genmaicha"}),
        ("Ola lives in Bergen.", "Ola", {"location": "Bergen"}),
        ("Ola moved to Lisbon last month.", "Ola", {"location": "Lisbon"}),
        ("Ola works as a chemistry teacher at a school.", "Ola", {"role": "chemistry teacher"}),
        ("Mina loves climbing.", "Mina", {"climbing": "loves"}),
        ("Mina can't stand olives any more.", "Mina", {"olives": "dislikes"}),
        ("Alice prefers dark roast coffee.", "Alice", {"dark roast coffee": "prefers"}),
        ("Alice works at Google.", "Alice", {"employer": "Google"}),
        ("Alice is a nurse.", "Alice", {"role": "nurse"}),
        ("Alice grew up in Porto.", "Alice", {"from": "Porto"}),
        ("Alice is originally from Porto.", "Alice", {"from": "Porto"}),
        ("My sister Emma prefers tea.", "Emma", {"relation": "sister", "tea": "prefers"}),
    ],
)
def test_a_fact_about_someone_named_is_an_attribute_of_their_entity(text, name, attrs):
    [got] = of(extract(user(text)), "entity")
    assert got == {"name": name, "kind": "person", "attributes": attrs}
    assert of(extract(user(text)), "profile") == []


@pytest.mark.parametrize(
    "text",
    [
        "She loves climbing.",
        "The team loves it.",
        "Monday works as a start date.",
        "Does Maya live in Bergen?",
        "If Ola moved to Lisbon, I would visit.",
        "Will proposed on Saturday.",
        "Alice is a good friend.",  # no job
        "Biscuit is a beagle.",
    ],
)
def test_no_third_person_fact_without_a_named_person_stating_it(text):
    assert not [f for f in of(extract(user(text)), "entity") if "attributes" in f], text


@pytest.mark.parametrize(
    ("text", "title", "day", "participants"),
    [
        ("I handed in my notice yesterday.", "handed in notice", "2026-05-07", None),
        ("We moved in on Saturday after the longest drive.", "moved in", "2026-05-02", None),
        ("Idris proposed on Saturday!", "Idris proposed", "2026-05-02", ["Idris"]),
        ("I gave up coffee two weeks ago today.", "gave up coffee", "2026-04-24", None),
        # its title names the deed: no filler adverb, nothing left hanging at its end
        ("I finally handed in my notice yesterday.", "handed in notice", "2026-05-07", None),
        ("We have booked the registry office for 14 June.", "booked registry office",
         "2026-06-14", None),
        ("I finished the half marathon in 1:57:48 on Sunday.",
         "finished half marathon in 1:57:48", "2026-05-03", None),
        # no part of the date phrase, no auxiliary, no second clause in the title
        ("Verdigris called me on Friday afternoon with an offer.", "Verdigris called me",
         "2026-05-01", ["Verdigris"]),
        ("I'll try the dal tomorrow night and report back.", "try dal and report back",
         "2026-05-09", None),
        ("We flew home on Sunday and I'm still dreaming about the pastries.", "flew home",
         "2026-05-03", None),
        ("I've actually got an interview tomorrow for a product analyst role.",
         "interview for product analyst role", "2026-05-09", None),
    ],
)  # fmt: skip
def test_an_event_keeps_its_verb_and_who_did_it(text, title, day, participants):
    [ev] = of(extract(user(text)), "event")  # said on Friday 8 May 2026
    assert (ev["title"], str(ev["date"]), ev.get("participants")) == (title, day, participants)


@pytest.mark.parametrize(
    "text",
    [
        "Lisbon was lovely on Saturday.",
        "Jonah said on Friday that he was tired.",
        "Monday was awful.",
        # a deed that names nothing done: which "it" is not known here
        "Yes, I picked it up last Thursday.",
        "I'm thinking of doing it on the 14th.",
    ],
)
def test_no_event_of_a_named_subject_without_a_deed(text):
    assert of(extract(user(text)), "event") == [], text


# --- rules: preferences ------------------------------------------------------------------


def test_preference_prefer_with_a_known_option_names_the_topic():
    cands = extract(user("I prefer vim over emacs because the keybindings stick."))
    assert of(cands, "preference") == [
        {"topic": "editor", "value": "vim", "reason": "the keybindings stick"}
    ]
    assert cands[0].turns == ("L1",)


def test_preference_likes_dislikes_and_favourites():
    cands = extract(user("I hate cilantro. I love Thai food, and my favourite dessert is "
                         "mango sticky rice. I can't stand mushrooms."))  # fmt: skip
    got = {f["topic"]: f["value"] for f in of(cands, "preference")}
    assert got == {"cilantro": "dislikes", "thai food": "loves", "dessert": "mango sticky rice",
                   "mushrooms": "dislikes"}  # fmt: skip


def test_preference_for_topic_and_standing_instructions():
    cands = extract(user("I prefer tabs for indentation and I use pytest for tests. "
                         "Please keep your answers short."))  # fmt: skip
    got = {f["topic"]: f["value"] for f in of(cands, "preference")}
    assert got == {"indentation": "tabs", "tests": "pytest", "reply length": "short"}


@pytest.mark.parametrize("text", [
    "Do you prefer tabs or spaces?",
    "If I liked Go, I would use it everywhere.",
    "Maybe I'd enjoy skiing.",
    "I wonder whether I prefer the city.",
    "I used to love jazz.",
    'My brother keeps saying "I love Rust".',
    "My team lead prefers Go.",
    "I like it.",
    "I'd like to book a table.",
    "I like how you explained that.",
    "I just hate setting them up.",
    "I love watching it grow.",
])  # fmt: skip
def test_questions_hypotheticals_and_others_statements_are_not_preferences(text):
    assert of(extract(user(text)), "preference") == []


def test_assistant_statements_are_not_user_preferences_or_facts():
    turn = Turn(line=1, role="assistant", content="I prefer vim. My name is Ada. I live in Rome.")
    assert extract(turn) == []


# --- rules: profile, entities, events -----------------------------------------------------


def test_profile_facts():
    cands = extract(user("My name is Dana Whitfield and I work as a data engineer at Northwind. "
                         "I live in Lyon, France. My time zone is Europe/Paris. "
                         "I speak French, English and a little German."))  # fmt: skip
    profile = of(cands, "profile")
    assert {"name": "Dana Whitfield"} in profile
    assert {"role": "data engineer"} in profile
    assert {"location": "Lyon"} in profile
    assert {"timezone": "Europe/Paris"} in profile
    assert {"languages": ["French", "English", "German"]} in profile
    assert {"facts": {"employer": "Northwind"}} in profile
    assert {"name": "Northwind", "kind": "organisation"} in of(cands, "entity")


@pytest.mark.parametrize(("text", "name"), [
    ("My name is Dana and I live in Oslo.", "Dana"),
    ("my name is Dana but friends say Dee.", "Dana"),
    ("my name is not important.", None),
    ("My name is on the list.", None),
    ("I'm Ola, I teach chemistry in Bergen.", "Ola"),
    ("Hi! I'm Ola and I run the bakery.", "Ola"),
    ("I'm Ola.", "Ola"),
    ("I'm British, so tea matters.", None),
    ("I'm Sorry, that was me.", None),
    ("I'm Jewish and I keep kosher.", None),
    ("I'm Sam's mum.", None),
])  # fmt: skip
def test_a_name_is_the_capitalised_words_only(text, name):
    """`my name is` is matched in any case; the name it gives is capitalised words, never
    the lower-case words after it ("Dana and", "not important")."""
    names = [c["name"] for c in of(extract(user(text)), "profile") if "name" in c]
    assert names == ([name] if name else [])


@pytest.mark.parametrize("text", [
    "I'm a bit tired today.",
    "I'm a huge fan of jazz.",
    "I speak at conferences sometimes.",
    "If I lived in Berlin I'd cycle.",
    "We've been in Rome for three days and the food is great.",
    "Suppose my name was Alex.",
    "I teach them to swim.",
    "I teach at a school in Leeds.",
])  # fmt: skip
def test_profile_negatives(text):
    assert of(extract(user(text)), "profile") == []


@pytest.mark.parametrize(("text", "fields"), [
    ("I moved from Oslo to Lisbon.", {"location": "Lisbon"}),
    ("We relocated from New York to Lisbon last year.", {"location": "Lisbon"}),
    ("I teach chemistry in Bergen.", {"facts": {"teaches": "chemistry"}}),
    ("I teach piano on weekends.", {"facts": {"teaches": "piano"}}),
    ("I've lived in Leeds since 2019.", {"location": "Leeds"}),
    ("We've been living in Didsbury for a few months.", {"location": "Didsbury"}),
    ("I've been in New York for a couple of years now.", {"location": "New York"}),
])  # fmt: skip
def test_where_one_moved_to_and_what_one_teaches_are_profile_facts(text, fields):
    """ "I moved from Oslo to Lisbon" lives in Lisbon (not nowhere); what one teaches is a
    standing fact beside the role, never replacing it."""
    assert of(extract(user(text)), "profile") == [fields]


def test_entities_from_relations_both_ways():
    cands = extract(user("My sister Emma lives in Porto. Priya Raman is my manager. "
                         "My dog Rex loves the beach."))  # fmt: skip
    got = {f["name"]: (f["kind"], f["attributes"]["relation"]) for f in of(cands, "entity")}
    assert got == {"Emma": ("person", "sister"), "Priya Raman": ("person", "manager"),
                   "Rex": ("animal", "dog")}  # fmt: skip
    emma = next(c for c in cands if c.type == "entity" and c.fields["name"] == "Emma")
    assert "Emma is the owner's sister." in emma.body and "Porto" in emma.body
    # a possessive after the name is not part of it
    cands = extract(user("Remember that my wife Sara's birthday is on 14 May."))
    got = {f["name"]: f["attributes"]["relation"] for f in of(cands, "entity")}
    assert got == {"Sara": "wife"}


@pytest.mark.parametrize(
    ("text", "name", "relation"),
    [
        ("So... I've been on a few dates with someone. Will. We met at a book club.",
         "Will", "partner"),
        ("I met someone called Sam at the allotment open day and we've been out three times.",
         "Sam", "partner"),
        ("I'm seeing someone new, Ada! It's early days.", "Ada", "partner"),
        ("I met someone named Priya at the conference.", "Priya", "acquaintance"),
    ],
)  # fmt: skip
def test_someone_introduced_across_a_sentence_break_is_an_entity(text, name, relation):
    ents = of(extract(user(text)), "entity")
    assert [(f["name"], f["attributes"]["relation"]) for f in ents] == [(name, relation)]


@pytest.mark.parametrize(
    "text", ["I met someone. It was odd.", "We are seeing someone about the roof."]
)
def test_someone_without_a_name_is_no_entity(text):
    assert of(extract(user(text)), "entity") == []


# --- rules: what the owner says of themself -----------------------------------------------


@pytest.mark.parametrize(
    ("text", "facts"),
    [
        ("Nice. One thing though, I'm allergic to cashews, so please don't suggest any.",
         {"allergy": "cashews"}),
        ("I have a severe peanut allergy.", {"allergy": "peanut"}),
        ("Everything is labelled except sesame, which is the one thing I'm allergic to.",
         {"allergy": "sesame"}),
        ("I'm allergic to cats. I'm also allergic to penicillin.",
         {"allergy": "cats, penicillin"}),
        ("Since the start of July I've gone fully vegetarian, like Ines.",
         {"diet": "vegetarian"}),
        ("I'm vegetarian.", {"diet": "vegetarian"}),
        ("I'm a vegan now.", {"diet": "vegan"}),
        ("I'm on a gluten-free diet.", {"diet": "gluten-free"}),
        ("I have type 1 diabetes, so I carry snacks.", {"condition": "type 1 diabetes"}),
        ("I was diagnosed with ADHD last year.", {"condition": "ADHD"}),
        ("I'm asthmatic.", {"condition": "asthma"}),
        ("I'm lactose intolerant.", {"condition": "lactose intolerant"}),
        ("I'm left-handed.", {"handedness": "left-handed"}),
        ("I play the cello in an orchestra.", {"plays": "cello"}),
        ("I also play squash on Tuesdays.", {"plays": "squash"}),
        ("I've been learning Portuguese.", {"learning": "Portuguese"}),
        ("I'm learning the piano.", {"learning": "piano"}),
        ("I'm training for a marathon in October.", {"training_for": "marathon"}),
        ("I'm training for the Manchester half marathon.",
         {"training_for": "Manchester half marathon"}),
        ("My birthday is on 3 March.", {"birthday": "3 March"}),
    ],
)  # fmt: skip
def test_what_the_owner_says_of_themself_is_a_profile_fact(text, facts):
    assert of(extract(user(text)), "profile") == [{"facts": facts}]


@pytest.mark.parametrize("text", [
    "Am I allergic to cashews?",
    "If I'm allergic to cashews, what then?",
    "Maybe I'll go vegan.",
    "I'm not vegetarian.",
    "I'm a vegetarian chef.",
    "My friend said \"I'm allergic to nuts\" once.",
    "I used to play the piano.",
    "I play it safe.",
    "I'm learning Rust.",
    "I'm learning a lot.",
    "I had asthma as a kid.",
    "Ines is allergic to cashews.",
    "Would you say I'm left-handed?",
])  # fmt: skip
def test_no_profile_fact_from_a_question_a_hypothetical_or_someone_else(text):
    assert [f for f in of(extract(user(text)), "profile") if "facts" in f] == []


@pytest.mark.parametrize(
    ("text", "name", "attrs"),
    [
        ("Ines is allergic to shellfish.", "Ines", {"allergy": "shellfish"}),
        ("Ines is vegetarian, like me.", "Ines", {"diet": "vegetarian"}),
        ("Ines turns 30 on 16 May and I've booked flights.", "Ines", {"birthday": "16 May"}),
        ("Tom's birthday is on the 4th of June.", "Tom", {"birthday": "4th of June"}),
    ],
)
def test_someone_elses_allergy_diet_birthday_is_theirs(text, name, attrs):
    cands = extract(user(text))
    assert [f for f in of(cands, "profile") if "facts" in f] == []
    assert [(f["name"], f["attributes"]) for f in of(cands, "entity")] == [(name, attrs)]


@pytest.mark.parametrize(
    ("text", "name", "attrs"),
    [
        ("Biscuit, our beagle, stares at me the entire time I cook.", "Biscuit",
         {"relation": "dog", "breed": "beagle"}),
        ("Our dog Biscuit hates the rain.", "Biscuit", {"relation": "dog", "rain": "dislikes"}),
        ("My beagle Biscuit hates the rain.", "Biscuit", {"relation": "dog", "breed": "beagle"}),
        ("Miso, my cat, is asleep.", "Miso", {"relation": "cat"}),
        ("Nacho is our Maine Coon.", "Nacho", {"relation": "cat", "breed": "maine coon"}),
        ("Yes, Sandra, my manager, approved it.", "Sandra", {"relation": "manager"}),
    ],
)  # fmt: skip
def test_pets_by_name_and_breed_and_appositions(text, name, attrs):
    [got] = of(extract(user(text)), "entity")
    assert (got["name"], got["attributes"]) == (name, attrs)


@pytest.mark.parametrize("text", [
    "Thanks, my friend, that helps.",
    "Honestly, my dog, he is silly.",
    "Is Biscuit, our beagle, allowed lentils?",
    "The beagle Biscuit next door barks.",
])  # fmt: skip
def test_no_pet_or_person_from_an_interjection_a_question_or_someone_elses(text):
    assert of(extract(user(text)), "entity") == []


def test_a_role_at_a_firm_said_as_being_and_a_move_we_made():
    cands = extract(user("Being a sous chef at Bluefin Analytics is not as glamorous as it "
                         "sounds. We moved into the new flat in Norwich yesterday!"))  # fmt: skip
    profile = of(cands, "profile")
    assert {"role": "sous chef"} in profile and {"location": "Norwich"} in profile
    assert {"facts": {"employer": "Bluefin Analytics"}} in profile
    assert of(extract(user("Being a parent at Christmas is hard.")), "profile") == []


def test_her_name_after_a_turn_about_my_relation():
    cands = extract(
        user("My mum is visiting from Penzance next month.", 1),
        user("The Wellington, definitely, Mum loves pastry. "
             "Her name is Rosalind, but everyone calls her Ros.", 2),
    )  # fmt: skip
    [got] = of(cands, "entity")
    assert got == {"name": "Rosalind", "kind": "person", "aliases": ["Ros"],
                   "attributes": {"relation": "mother"}}  # fmt: skip
    puppy = of(extract(user("Our new puppy arrived today. His name is Pip.")), "entity")
    assert puppy == [{"name": "Pip", "kind": "animal", "attributes": {"relation": "puppy"}}]
    kitten = extract(user("We adopted a kitten from a rescue! She's black, tiny and slightly "
                          "feral, and her name is Mochi."))  # fmt: skip
    assert {"name": "Mochi", "kind": "animal", "attributes": {"relation": "kitten"}} in of(
        kitten, "entity"
    )


@pytest.mark.parametrize("text", [
    "Her name is Ada.",  # of whom, no sentence said
    "My brother came round. Her name is Jo.",  # the pronoun fits no relation named
    "My sister and my wife came. Her name is Jo.",  # two it may be of
    "My sister Freya came round. Her name is Jo.",  # the sister has her name
    "My mother's cat was ill. Her name is Tibbles.",  # the cat is not the mother
    "My mum rang. Is her name Rosalind?",
])  # fmt: skip
def test_no_name_for_an_unclear_relation(text):
    assert [f for f in of(extract(user(text)), "entity") if f["name"] in ("Ada", "Jo",
            "Tibbles", "Rosalind")] == []  # fmt: skip


def test_a_switch_of_option_is_the_new_preference():
    for text in ("I'm doing all this in Neovim now, by the way, I finally ditched VS Code.",
                 "I finally ditched VS Code for Neovim.", "I switched from VS Code to Neovim.",
                 "I've moved over to Neovim."):  # fmt: skip
        assert of(extract(user(text)), "preference") == [{"topic": "editor", "value": "Neovim"}]
    for text in ("Should I switch to Neovim?", "I switched to a new job.",
                 "Maybe I'm using Neovim now."):  # fmt: skip
        assert of(extract(user(text)), "preference") == []


def test_a_renamed_project_gets_its_new_name():
    cands = extract(
        user("It's a Flask app to track when I water my plants, called SproutLog.", 1),
        user("There's already an app called SproutLog, so I've renamed mine to Leafline.", 2),
    )
    got = {f["name"]: f for f in of(cands, "entity")}
    assert got["Leafline"] == {"name": "Leafline", "kind": "product", "aliases": ["SproutLog"]}
    assert got["SproutLog"]["attributes"] == {"renamed to": "Leafline"}
    assert of(extract(user("I've renamed it to Leafline.")), "entity") == []
    sister = extract(user("I'm building an app for my sister called Sam."))
    assert [f for f in of(sister, "entity") if f.get("kind") == "product"] == []


def test_events_resolve_relative_dates_against_today_or_the_timestamp():
    # 2026-05-08 is a Friday
    cands = extract(
        user("Yesterday we shipped version 2.3 of the billing service.", 1),
        user("Last Monday we held the quarterly planning meeting with Priya and Jonas.", 2),
        user("Next Tuesday I will present the migration plan to the board.", 3),
        user("On 2026-06-05 we celebrated Tom's farewell at the Canal Street office.", 4),
    )
    got = {f["date"]: f for f in of(cands, "event")}
    assert set(got) == {"2026-05-07", "2026-05-04", "2026-05-12", "2026-06-05"}
    assert got["2026-05-04"]["participants"] == ["Priya", "Jonas"]
    assert "quarterly planning meeting" in got["2026-05-04"]["title"]
    assert got["2026-06-05"]["location"] == "Canal Street"
    later = extract(user("Yesterday we shipped the app.", ts=None), today="2026-01-01")
    assert of(later, "event")[0]["date"] == "2025-12-31"


@pytest.mark.parametrize(
    ("text", "event"),
    [
        # 2026-05-08 is a Friday
        ("The vet appointment is on 2026-05-13.",
         {"date": "2026-05-13", "title": "vet appointment"}),
        ("Idris's interview was yesterday.",
         {"date": "2026-05-07", "title": "Idris's interview", "participants": ["Idris"]}),
        ("The meeting with Sara was on Monday.",
         {"date": "2026-05-04", "title": "meeting with Sara", "participants": ["Sara"]}),
        ("Our trip to Rome was on 2 May.",
         {"date": "2026-05-02", "title": "trip to Rome", "location": "Rome"}),
        ("I have a meeting with Sara on Friday.",
         {"date": "2026-05-15", "title": "meeting with Sara", "participants": ["Sara"]}),
        ("I have an interview on Monday.", {"date": "2026-05-11", "title": "interview"}),
    ],
)  # fmt: skip
def test_an_event_told_by_what_it_is_is_dated(text, event):
    """An event named by the thing it is ("the vet appointment is on …") or had ("I have
    a meeting with Sara on Friday") is an event of its day, not nothing."""
    assert of(extract(user(text)), "event") == [event]


@pytest.mark.parametrize("text", [
    "The weather was lovely on Saturday.",  # no event noun
    "The meeting was tomorrow.",  # told as gone by, of a day ahead
    "The interview is yesterday.",  # told as ahead, of a day gone by
])  # fmt: skip
def test_a_thing_told_without_an_event_noun_or_in_another_tense_is_no_event(text):
    assert of(extract(user(text)), "event") == []


@pytest.mark.parametrize("text", [
    "What would happen if we shipped on 2026-05-01?",
    "If we ship on Friday we might regret it.",
    "Yesterday was rainy.",
    "My brother shipped it yesterday.",
])  # fmt: skip
def test_event_negatives(text):
    assert of(extract(user(text)), "event") == []


WED_21_OCT = "2026-10-21T18:00:00"  # a Wednesday


@pytest.mark.parametrize(
    ("texts", "event"),
    [
        # a time of day after the day
        (["The dentist appointment is next Tuesday at 10."],
         {"date": "2026-10-27", "title": "dentist appointment"}),
        (["The vet appointment is on 3 November at 9:30."],
         {"date": "2026-11-03", "title": "vet appointment"}),
        (["The test is on Friday at 9am."], {"date": "2026-10-23", "title": "test"}),
        # planned, and of a kind the rules knew nothing of
        (["Next Tuesday, period 3. We're doing titrations."],
         {"date": "2026-10-27", "title": "doing titrations"}),
        (["The chemistry olympiad is on 14 November."],
         {"date": "2026-11-14", "title": "chemistry olympiad"}),
        (["The job interview is on Thursday the 29th."],
         {"date": "2026-10-29", "title": "job interview"}),
        (["There's a department lunch next Friday."],
         {"date": "2026-10-30", "title": "department lunch"}),
        (["We fly to Ålesund on the 22nd."], {"date": "2026-10-22", "title": "fly to Ålesund"}),
        # a weekday no past tense governs: the coming one
        (["Sorry, I meant Wednesday, not Tuesday.", "The dentist appointment is on Wednesday."],
         {"date": "2026-10-28", "title": "dentist appointment"}),
    ],
)  # fmt: skip
def test_a_planned_event_is_made_with_its_day(texts, event):
    """What the owner has coming, said the way people say it — with a time of day, a day
    of the month alone, "there's a …", a day said just before — is an event of its day."""
    turns = [user(t, i, ts=WED_21_OCT) for i, t in enumerate(texts, 1)]
    assert of(extract(*turns), "event") == [event]


@pytest.mark.parametrize("text", [
    "The 12th. I play football most weekends.",  # a habit, not a plan
    "I usually fly home on the 22nd.",
    "I go to the gym on Mondays.",
    "She lives on the 3rd floor.",
    "For the 2nd time, we fly economy.",
])  # fmt: skip
def test_a_habit_or_a_counted_thing_is_no_planned_event(text):
    assert of(extract(user(text, ts=WED_21_OCT)), "event") == []


def test_relative_dates_need_a_reference():
    assert of(extract(user("Yesterday we shipped the app.", ts=None)), "event") == []


# --- rules: agent scope -------------------------------------------------------------------


def test_decision_is_a_case_and_a_standing_decision_a_pattern():
    cands = extract(
        user("Let's go with Postgres for the job queue."),
        Turn(line=2, role="assistant", content="From now on we'll use ruff for linting."),
    )
    assert of(cands, "case")[0]["title"] == "choosing job queue"
    assert "Postgres" in of(cands, "case")[0]["solution"]
    assert of(cands, "pattern")[0]["topic"] == "linting"


def test_confirmed_fix_is_a_case():
    cands = extract(
        user("pytest fails with ModuleNotFoundError: No module named 'billing'.", 1),
        Turn(line=2, role="assistant", content="Add pythonpath = ['src'] to the pytest config."),
        Turn(
            line=3,
            role="tool",
            content="",
            name="bash",
            tool_input={"command": "pytest"},
            tool_output={"exit_code": 0},
        ),  # fmt: skip
        user("That fixed it, thanks!", 4),
    )
    (case,) = of(cands, "case")
    assert case["title"] == "pytest fails: ModuleNotFoundError"
    assert case["outcome"] == "solved" and "pythonpath" in case["solution"]


def test_unconfirmed_problem_is_not_a_case():
    cands = extract(
        user("The build fails with a linker error.", 1),
        Turn(line=2, role="assistant", content="Try a clean build."),
        user("Still failing, same error.", 3),
    )
    assert of(cands, "case") == []


def _tool(i: int, name: str, inp: object, out: object, ok: bool | None = None) -> Turn:
    return Turn(line=i, role="tool", content="", name=name, tool_input=inp, tool_output=out,
                timestamp=f"2026-04-20T14:0{i}:00Z", ok=ok)  # fmt: skip


def test_tool_trace_gives_tool_counts_and_a_skill():
    turns = [
        user("Can you deploy the api service to staging?", 0),
        _tool(1, "bash", {"command": "make test"}, {"exit_code": 0}),
        _tool(2, "docker_push", {"image": "api:1"}, {"error": "denied"}, ok=False),
        _tool(3, "docker_push", {"image": "api:1"}, {"digest": "sha256:9"}, ok=True),
        _tool(4, "kubectl", {"args": ["rollout", "status"]}, {"exit_code": 0}),
        Turn(line=5, role="assistant", content="Done: the api is deployed to staging."),
    ]
    cands = extract(*turns)
    tools = {f["name"]: f for f in of(cands, "tool")}
    assert (tools["docker_push"]["success_count"], tools["docker_push"]["failure_count"]) == (1, 1)
    assert "denied" in tools["docker_push"]["notes"]
    assert tools["kubectl"]["last_used"] == "2026-04-20T14:04:00+00:00"
    (skill,) = of(cands, "skill")
    assert skill["name"] == "deploy api service to staging"
    assert skill["steps"].splitlines()[0].startswith("1. `bash`")
    assert len(skill["steps"].splitlines()) == 3  # the failed call is not a step
    assert skill["prerequisites"] == ["bash", "docker_push", "kubectl"]


def test_no_skill_when_the_user_complains_or_a_single_call():
    complained = [user("Please deploy the docs.", 0), _tool(1, "bash", "a", {"exit_code": 0}),
                  _tool(2, "bash", "b", {"exit_code": 0}),
                  Turn(line=3, role="assistant", content="Deployed."),
                  user("That didn't work, the page is blank.", 4)]  # fmt: skip
    assert of(extract(*complained), "skill") == []
    single = [user("Please deploy the docs.", 0), _tool(1, "bash", "a", {"exit_code": 0}),
              Turn(line=2, role="assistant", content="Deployed.")]  # fmt: skip
    assert of(extract(*single), "skill") == []


def test_only_types_given_are_emitted():
    """Whoever's inbox the turns came to, every type given is found (the caller routes a
    user-scope memory from an agent's conversation to the default user)."""
    turns = [user("I prefer vim. My sister Emma is great."), _tool(2, "bash", "x", "ok")]
    only = {"preference": TYPES["preference"]}
    assert {c.type for c in RuleExtractor().extract(turns, only)} == {"preference"}
    assert {c.type for c in extract(*turns)} == {"preference", "entity", "tool"}


# --- scoring ------------------------------------------------------------------------------


def test_key_matching_rules():
    assert key_matches("Thai food", "thai-food")
    assert key_matches("present migration plan", "present migration plan to architecture board")
    assert not key_matches("present migration plan", "present the migration plan to the board now")
    assert not key_matches("editor", "theme")
    c = Candidate("preference", {"topic": "editor", "value": "vim"}, "I prefer vim", ("L1",), 0.8)
    assert candidate_matches(c, Expected("preference", {"topic": "editor"}, "VIM"))
    assert not candidate_matches(c, Expected("preference", {"topic": "editor"}, "prefer"))


def _load_script():
    spec = importlib.util.spec_from_file_location(
        "extraction_quality", REPO / "scripts" / "extraction_quality.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_corpus_precision_is_at_least_0_8():
    report = _load_script().run_corpus()
    assert report["transcripts"] >= 12
    assert report["overall"]["precision"] >= 0.8, report["notes"]
    assert report["per_split"]["heldout"]["precision"] >= 0.8, report["notes"]


# --- the LLM extractor and summarizer against a local OpenAI-compatible server -------------


CANNED = {"memories": [
    {"type": "preference", "fields": {"topic": "editor", "value": "vim"},
     "body": "Uses vim daily.", "turns": ["m1", "nope"], "confidence": 0.9},
    {"type": "event", "fields": {"date": "2026-05-07", "title": "Billing 2.3 release"},
     "body": "Shipped.", "turns": ["m2"], "confidence": "0.7"},
    {"type": "preference", "fields": {"value": "tabs"}, "body": "", "turns": ["m1"]},
    {"type": "recipe", "fields": {"title": "soup"}},
    {"type": "event", "fields": {"date": "yesterday", "title": "x"}},
    {"type": "tool", "fields": {"name": "bash", "success_count": 2}, "confidence": 7},
    "not an object",
]}  # fmt: skip


@pytest.fixture
def endpoint(monkeypatch) -> Iterator[FakeOpenAI]:
    """/v1/chat/completions answering `endpoint.answer` as the assistant's message."""

    def respond(body: dict) -> dict:
        message = {"role": "assistant", "content": fake.answer}
        return {
            "id": "chatcmpl-1", "object": "chat.completion", "created": 0,
            "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }  # fmt: skip

    fake = FakeOpenAI("/v1/chat/completions", respond)
    fake.answer = json.dumps(CANNED)
    monkeypatch.setenv("CONTEXTFS_TEST_KEY", "sk-test")
    try:
        yield fake
    finally:
        fake.close()


def _url(server: FakeOpenAI) -> str:
    return server.url


TURNS = [
    Turn(line=1, role="user", content="I use vim every day.", id="m1",
         timestamp="2026-05-08T10:00:00Z"),
    Turn(line=2, role="user", content="Yesterday we shipped billing 2.3.", id="m2"),
]  # fmt: skip


def test_llm_extractor_keeps_valid_items_and_drops_invalid_ones(endpoint: FakeOpenAI):
    ex = LLMExtractor(base_url=_url(endpoint), model="fake-chat", api_key_env="CONTEXTFS_TEST_KEY")
    cands = ex.extract(TURNS, TYPES, today="2026-05-08")
    assert [(c.type, c.fields) for c in cands] == [
        ("preference", {"topic": "editor", "value": "vim"}),
        ("event", {"date": "2026-05-07", "title": "Billing 2.3 release"}),
        ("tool", {"name": "bash", "success_count": 2}),
    ]
    assert cands[0].turns == ("m1",)  # a ref the transcript does not have is dropped
    assert cands[0].body == "Uses vim daily."
    assert cands[1].confidence == 0.7 and cands[2].confidence == 1.0
    reasons = ex.last_dropped
    assert len(reasons) == 4
    assert "missing topic" in reasons[0]
    assert "unknown type 'recipe'" in reasons[1]
    assert "date" in reasons[2]
    assert "not an object" in reasons[3]
    # the request: one call, JSON mode, every type's fields and extraction instructions
    ((path, _auth, body),) = endpoint.requests
    assert path == "/v1/chat/completions"
    assert body["model"] == "fake-chat"
    assert body["response_format"] == {"type": "json_object"}
    system, prompt = body["messages"][0]["content"], body["messages"][1]["content"]
    for ctype in TYPES.values():
        assert f"## {ctype.name} (scope {ctype.scope}" in system
        assert " ".join(ctype.extraction.split())[:60] in system
    assert "- topic (string, required)" in system
    assert "today is 2026-05-08" in system
    assert "[m1] user @ 2026-05-08T10:00:00Z: I use vim every day." in prompt


@pytest.mark.parametrize("answer", ["", "sorry, I cannot do that", '{"memories": 3}', "[1, 2]"])
def test_llm_extractor_survives_a_bad_answer(endpoint: FakeOpenAI, answer: str):
    endpoint.answer = answer
    ex = LLMExtractor(base_url=_url(endpoint), model="m", api_key_env="CONTEXTFS_TEST_KEY")
    assert ex.extract(TURNS, TYPES) == []
    assert len(ex.last_dropped) == 1 and "answer" in ex.last_dropped[0]


def test_llm_extractor_reads_json_inside_a_fence(endpoint: FakeOpenAI):
    endpoint.answer = (
        "Here you go:\n```json\n" + json.dumps({"memories": CANNED["memories"][:1]}) + "\n```"
    )
    ex = LLMExtractor(base_url=_url(endpoint), model="m", api_key_env="CONTEXTFS_TEST_KEY")
    assert [c.fields["topic"] for c in ex.extract(TURNS, TYPES)] == ["editor"]


def test_llm_transport_failure_raises(endpoint: FakeOpenAI):
    endpoint.fail = True
    ex = LLMExtractor(base_url=_url(endpoint), model="m", api_key_env="CONTEXTFS_TEST_KEY",
                      timeout=5, max_retries=0)  # fmt: skip
    with pytest.raises(LLMUnavailable, match="failed") as info:
        ex.extract(TURNS, TYPES)
    assert isinstance(info.value, ContextFSError)
    gone = LLMExtractor(base_url=dead_url(), model="m",
                        api_key_env="CONTEXTFS_TEST_KEY", timeout=2, max_retries=0)  # fmt: skip
    with pytest.raises(LLMUnavailable):
        gone.extract(TURNS, TYPES)


def test_llm_needs_its_key_for_a_remote_endpoint(monkeypatch):
    monkeypatch.delenv("CONTEXTFS_NO_SUCH_KEY", raising=False)
    with pytest.raises(LLMUnavailable, match="CONTEXTFS_NO_SUCH_KEY"):
        LLMExtractor(base_url="https://llm.example.com/v1", model="m",
                     api_key_env="CONTEXTFS_NO_SUCH_KEY")  # fmt: skip


def test_llm_summarizer_holds_the_type_limits(endpoint: FakeOpenAI):
    ctype = TYPES["preference"]
    endpoint.answer = json.dumps({"l0": "Editor:\nvim " + "very " * 60, "l1": "- x\n" * 1000})
    s = LLMSummarizer(base_url=_url(endpoint), model="m", api_key_env="CONTEXTFS_TEST_KEY")
    l0, l1 = s.summarize(ctype, "---\ntopic: editor\nvalue: vim\n---\nUses vim.\n")
    assert l0.endswith("…\n") and l0.count("\n") == 1 and len(l0) <= ctype.l0_max_chars
    assert l0.startswith("Editor: vim very")
    assert len(l1) <= ctype.l1_max_chars and l1.endswith("- x\n")
    system = endpoint.bodies[0]["messages"][0]["content"]
    assert f"at most {ctype.l0_max_chars - 1} characters" in system
    endpoint.answer = json.dumps({"l0": "Prefers vim.", "l1": "Prefers vim for editing."})
    assert s.summarize(ctype, "x") == ("Prefers vim.\n", "Prefers vim for editing.\n")


def test_llm_summarizer_bad_answer_or_failure_raises(endpoint: FakeOpenAI):
    s = LLMSummarizer(base_url=_url(endpoint), model="m", api_key_env="CONTEXTFS_TEST_KEY",
                      max_retries=0, timeout=5)  # fmt: skip
    endpoint.answer = "no json here"
    with pytest.raises(LLMUnavailable, match="no usable summary"):
        s.summarize(TYPES["profile"], "x")
    endpoint.fail = True
    with pytest.raises(LLMUnavailable, match="failed"):
        s.summarize(TYPES["profile"], "x")


# --- which of a sentence's dates an event takes ---------------------------------------------


def on_wednesday(text: str) -> list[dict]:
    return of(extract(user(text, ts="2024-03-27T10:00:00Z")), "event")  # a Wednesday


@pytest.mark.parametrize(
    ("text", "title", "day"),
    [
        ("It's free from 1 November, so we're aiming to move on Saturday 2 November, a few "
         "weeks after the race.", "aiming to move", "2024-11-02"),
        ("After the party on Friday, we drove home on Saturday.", "drove home", "2024-03-23"),
        ("Last Monday, after a long day, we held the planning meeting.",
         "held planning meeting", "2024-03-25"),
        ("My brother came over on Friday and we watched a film.", "watched film",
         "2024-03-22"),
        ("I've actually got an interview a week tomorrow for a product analyst role.",
         "interview for product analyst role", "2024-04-04"),
        ("We're flying out on Tuesday week.", "flying out", "2024-04-09"),
        ("I started a new job a fortnight ago.", "started new job", "2024-03-13"),
    ],
)  # fmt: skip
def test_an_event_takes_the_date_of_its_own_clause(text, title, day):
    [ev] = on_wednesday(text)
    assert (ev["title"], str(ev["date"])) == (title, day)


def test_a_date_of_another_clause_does_not_date_a_deed_done():
    # 16 May is Ines's birthday, ahead; the booking is done: it has no date of its own
    text = ("I need help planning a surprise. Ines turns 30 on 16 May and I've booked "
            "flights to Lisbon from the 14th to the 19th.")  # fmt: skip
    assert on_wednesday(text) == []
    # the same date in the deed's own clause still dates it
    [ev] = on_wednesday("I've booked flights to Lisbon for 16 May.")
    assert str(ev["date"]) == "2024-05-16"


# --- facts taken back, preferences changed, names in any alphabet (docs/conversations.md) --


def _retracts(cands: list[Candidate], type_name: str) -> list[tuple[str, str, str]]:
    return [r for c in cands if c.type == type_name for r in c.retracts]


def test_a_fact_taken_back_is_retracted_and_what_replaces_it_is_the_fact():
    cands = extract(user("I'm allergic to penicillin and cats. Turns out I'm not allergic to "
                         "penicillin after all."))  # fmt: skip
    assert of(cands, "profile") == [{"facts": {"allergy": "cats"}}]
    assert _retracts(cands, "profile") == [("facts", "allergy", "penicillin")]
    alone = extract(user("Turns out I'm not allergic to penicillin after all."))
    assert _retracts(alone, "profile") == [("facts", "allergy", "penicillin")]
    instead = extract(user("I'm not allergic to peanuts after all. It was the sesame."))
    assert of(instead, "profile") == [{"facts": {"allergy": "sesame"}}]
    assert _retracts(extract(user("I'm no longer vegetarian.")), "profile") == [
        ("facts", "diet", "vegetarian")
    ]
    # said again after it was taken back, it holds
    again = extract(user("I'm not allergic to cats.", 1), user("I'm allergic to cats.", 2))
    assert of(again, "profile") == [{"facts": {"allergy": "cats"}}]
    assert _retracts(again, "profile") == []


@pytest.mark.parametrize("text", [
    "Am I not allergic to peanuts after all?",
    "If I'm not allergic to peanuts, I'll have the satay.",
    "It was the sesame.",
])  # fmt: skip
def test_no_fact_taken_back_from_a_question_or_a_condition(text):
    cands = extract(user(text))
    assert _retracts(cands, "profile") == [] and of(cands, "profile") == []


def test_a_changed_preference_is_the_newer_one_on_the_same_topic():
    def prefs(text: str) -> dict:
        return {f["topic"]: f.get("value") for f in of(extract(user(text)), "preference")}

    assert prefs("I love jazz. I used to love jazz, but I can't stand it now.") == {
        "jazz": "dislikes"
    }
    assert prefs("I love coffee. I don't drink coffee anymore, I switched to tea.") == {
        "hot drink": "tea"
    }
    assert prefs("I prefer coffee in the morning. I switched from coffee to green tea.") == {
        "hot drink": "green tea"
    }
    assert prefs("The tea phase is over, I'm back on coffee.") == {"hot drink": "coffee"}
    assert prefs("These days I prefer folk music.") == {"music": "folk music"}
    assert prefs("I switched to green tea in January.") == {"hot drink": "green tea"}
    # given up alone: taken back from its topic, no value said
    gone = extract(user("I don't drink coffee any more."))
    assert _retracts(gone, "preference") == [("value", "", "coffee")]
    assert of(gone, "preference") == [{"topic": "hot drink"}]


@pytest.mark.parametrize("text", [
    "I used to love jazz.",
    "I used to love jazz, but would I still like it?",
    "If I used to love jazz, I can't stand it now.",
])  # fmt: skip
def test_used_to_alone_or_in_a_question_says_nothing_of_now(text):
    assert of(extract(user(text)), "preference") == []


def test_names_with_a_capital_beyond_ascii_are_names():
    cands = extract(user("My friend Åsa lives in Tromsø. My cat Øyvind hates the vacuum "
                         "cleaner. José moved to Kraków."))  # fmt: skip
    got = {f["name"]: f["attributes"] for f in of(cands, "entity")}
    assert got == {
        "Åsa": {"relation": "friend", "location": "Tromsø"},
        "Øyvind": {"relation": "cat", "vacuum cleaner": "dislikes"},
        "José": {"location": "Kraków"},
    }


def test_node_names_and_values_without_the_words_around_them():
    cands = extract(user("That's Biscuit, my beagle. I don't like true crime at all. "
                         "I prefer jazz to rock. I teach chemistry here. "
                         "I'm the new maths teacher."))  # fmt: skip
    assert of(cands, "entity") == [
        {"name": "Biscuit", "kind": "animal", "attributes": {"relation": "dog", "breed": "beagle"}}
    ]
    prefs = {f["topic"]: f["value"] for f in of(cands, "preference")}
    assert prefs == {"true crime": "dislikes", "jazz": "prefers over rock"}
    assert {"facts": {"teaches": "chemistry"}} in of(cands, "profile")
    assert {"role": "maths teacher"} in of(cands, "profile")
    assert of(extract(user("I prefer coffee in the morning.")), "preference") == [
        {"topic": "hot drink", "value": "coffee"}
    ]
    assert of(extract(user("I'm a former nurse.")), "profile") == []


def test_irony_is_no_preference():
    assert of(extract(user("Oh great, I just love Mondays.")), "preference") == []
    assert of(extract(user("Great, I love it when the train is late.")), "preference") == []
    assert of(extract(user("I just love Mondays.")), "preference") == [
        {"topic": "mondays", "value": "loves"}
    ]


def test_one_relation_said_in_two_words_is_one_relation():
    from contextfs.conversations.people import owner_relations

    cands = extract(user("My mother Ingrid is visiting.", 1), user("My mum Ingrid loves tea.", 2))
    [ingrid] = [c for c in cands if c.type == "entity"]
    assert ingrid.fields["attributes"]["relation"] == "mother"
    assert ingrid.body.count("is the owner's") == 1, ingrid.body
    [profile] = owner_relations(cands)
    assert profile.fields == {"facts": {"mother": "Ingrid"}}
    dad = extract(user("My dad Bo is here."), user("My father Bo called.", 2))
    assert owner_relations(dad)[0].fields == {"facts": {"father": "Bo"}}
    # a wife and a partner stay what was said
    both = owner_relations(extract(user("My wife Sara and my partner Ann came.")))
    assert both[0].fields == {"facts": {"wife": "Sara", "partner": "Ann"}}
