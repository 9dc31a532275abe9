"""The answer kinds a question asks for, and whether a text holds one (search.answers):
what lets a bundle say "No answer found" when the memories talk about the subject but
never say what was asked."""

from __future__ import annotations

import pytest

from contextfs.search.answers import wanted


@pytest.mark.parametrize(
    ("question", "kind", "what"),
    [
        ("What colour is Maya's Volvo V60?", "colour", "a colour"),
        ("What was Maya's salary at Hollin Software?", "money", "an amount of money"),
        ("How much did the new boiler cost?", "money", "an amount of money"),
        ("What was Theo's finishing time at the Edinburgh Marathon?", "time", "a time"),
        ("What is Aled's surname?", "surname", "Aled's surname"),
        (
            "What finishing position did Callum achieve in the half marathon?",
            "position",
            "a place in the ranking",
        ),
        ("What place did Theo come in the pub quiz?", "position", "a place in the ranking"),
        ("What is the name of Nacho's vet?", "name", "a name for the vet"),
        ("Which hotel did Maya stay at in Lisbon?", "name", "a name for the hotel"),
        ("Which climbing gym does Maya go to?", "name", "a name for the gym"),
        ("What is the name of Daniel's grandad's cat?", "name", "a name for the cat"),
        ("What is the name of the physics teacher Theo hired?", "name", "a name for the teacher"),
        ("Who was Maya's manager at Fennel & Rye?", "name", "a name for the manager"),
    ],
)
def test_a_question_that_says_what_it_wants(question, kind, what):
    w = wanted(question)
    assert w is not None and (w.kind, w.what) == (kind, what)


@pytest.mark.parametrize(
    "question",
    [
        "Which city does Maya's cousin live in?",  # a city is named without the word
        "What does Maya's partner do for a living?",
        "Which name did Aled want for the kitten?",
        "How much coffee does Theo drink now?",
        "Where did Idris propose to Efua?",
        "When did Maya fly to Lisbon?",
        "What is Theo's sourdough starter called?",
        "What place did they visit first in Lisbon?",  # a place, not a ranking
        "zzzqqq xylophone",
    ],
)
def test_a_question_that_does_not_say_is_never_called_unanswered(question):
    assert wanted(question) is None


@pytest.mark.parametrize(
    ("question", "answered", "not_answered"),
    [
        (
            "What colour is Maya's Volvo V60?",
            "The Volvo V60 is dark blue, with heated seats.",
            "Bought a second-hand Volvo V60, it has heated seats.",
        ),
        (
            "What was Maya's salary at Hollin Software?",
            "Hollin offered me £42k, which is more than I hoped.",
            "I got the job at Hollin Software! Start in February.",
        ),
        (
            "What was Theo's finishing time at the Edinburgh Marathon?",
            "Finished Edinburgh in 3:58, legs are destroyed.",
            "Ran the Edinburgh Marathon yesterday, legs are destroyed.",
        ),
        (
            "What finishing position did Callum achieve in the half marathon?",
            "Finished the half in 1:57:48, 312th out of 2,400, chuffed.",
            "I finished the half marathon on Sunday in 1:57:48, booked for the 16th of May.",
        ),
        (
            "What is Aled's surname?",
            "Aled Pritchard, the solicitor, proposed on a boat.",
            "Aled proposed on a boat on Loch Lomond!",
        ),
        (
            "What is the name of Nacho's vet?",
            "Nacho ate my glasses, so off to Dr Patel at the vets again.",
            "Nacho ate a pair of reading glasses, so that was a fun trip to the vet.",
        ),
        (
            "Which hotel did Maya stay at in Lisbon?",
            "In Lisbon we stayed at the Hotel Avenida, right by the tram.",
            "Lisbon was lovely; the tram ride up to the castle was the highlight.",
        ),
        (
            "Who was Maya's manager at Fennel & Rye?",
            "Long day. Gareth, my manager, made us redo the onboarding plan.",
            "Long day. My manager made us redo the onboarding plan.",
        ),
        (
            "What is the name of the long-serving colleague Efua sits next to?",
            "I sit next to a woman called Morag who has been there 25 years.",
            "My colleague has been there 25 years and knows where everything is.",
        ),
    ],
)
def test_a_text_that_holds_the_kind_of_answer_and_one_that_does_not(
    question, answered, not_answered
):
    w = wanted(question)
    assert w is not None
    said_by = "Maya" if "Maya" in question else "Theo" if "Theo" in question else "Efua"
    assert w.found_in([(answered, said_by)])
    assert not w.found_in([(not_answered, said_by)])
    assert w.found_in([(not_answered, said_by), (answered, said_by)])  # any of them


def test_the_questions_own_names_are_not_an_answer():
    # "Maya" and "Lisbon" are capitalised beside the word hotel, but they are what was asked
    w = wanted("Which hotel did Maya stay at in Lisbon?")
    assert w is not None
    said = "Maya says the hotel in Lisbon was fine. On Monday she flew home."
    assert not w.found_in([(said, None)])


def test_a_name_counts_when_said_of_whom_the_question_names():
    # "my boyfriend Aled", said by Maya, names Maya's partner, not Jonah's
    w = wanted("What is the name of Jonah's partner?")
    assert w is not None
    assert not w.found_in([("My boyfriend Aled proposed on a boat!", "Maya")])
    assert w.found_in([("Jonah's girlfriend Priya is moving in.", "Maya")])
    assert w.found_in([("My girlfriend Priya is moving in.", "Jonah")])
    vet = wanted("What is the name of Nacho's vet?")
    assert vet is not None
    assert not vet.found_in([("Luca passed his exams, so he's officially a vet now!", "Maya")])


def test_a_colour_or_an_amount_counts_only_beside_what_the_question_is_about():
    # a small store's bundle holds every memory: "golden" said of a dog, or a price said
    # of the tea, is not the car's colour or the salary
    w = wanted("What colour is Maya's Volvo V60?", "colour Maya's Volvo V60?")
    assert w is not None
    assert not w.found_in([("Rex is her golden retriever; he loves the beach.", "Maya")])
    assert w.found_in([("The Volvo is dark blue.", None), ("Rex is golden.", None)])
    q = "How much did Callum pay for the running shoes he bought in January?"
    shoes = wanted(q, "much Callum pay running shoes bought January?")
    assert shoes is not None
    assert not shoes.found_in([("The race entry was £38, I'm running it in January.", "Callum")])
    assert shoes.found_in([("The new shoes were £120 but they're worth it.", "Callum")])
    # a rent is what its amount is of, whatever the flat is called in the text
    rent = wanted("How much rent does Maya pay for the flat?", "rent Maya pay flat?")
    assert rent is not None and rent.found_in([("Rent is £950 a month, Maya says.", None)])
    pay = wanted("What was Maya's salary at Hollin?", "Maya's salary Hollin?")
    assert pay is not None
    assert not pay.found_in([("Genmaicha at £4 a bag, loose leaf.", "Maya")])
    assert pay.found_in([("Hollin pays £42k, more than I hoped.", "Maya")])


@pytest.mark.parametrize(
    ("question", "said", "speaker"),
    [
        # a sentence's first word is capitalised whatever it is
        (
            "What is the name of Maya's street in Sheffield?",
            "Someone on our road is learning the drums.",
            "Maya",
        ),
        (
            "What is the name of the physics teacher Theo hired?",
            "One of my physics teachers left with a week's notice.",
            "Theo",
        ),
        # a name given to something else
        (
            "What is the name of Maya's street in Sheffield?",
            "The kitten finally has a name: Nacho.",
            "Maya",
        ),
        # a name far from the noun belongs to someone else
        (
            "What is the name of Nacho's vet?",
            "Nacho is Maya's Bengal kitten, who ate her glasses and went to the vet.",
            None,
        ),
    ],
)
def test_a_capitalised_word_that_is_not_the_things_name(question, said, speaker):
    w = wanted(question)
    assert w is not None
    assert not w.found_in([(said, speaker)])


def test_a_name_that_starts_a_sentence_counts_when_it_is_a_name_elsewhere():
    w = wanted("Who was Maya's manager at Fennel & Rye?")
    assert w is not None
    said = "Gareth is my manager now."
    assert not w.found_in([(said, "Maya")])
    assert w.found_in([(said, "Maya"), ("I told Gareth it was fine.", "Maya")])


def test_a_company_is_named_without_the_word_so_it_is_not_asked_for():
    # "Acme Corp employs Alice" answers "which company employs her" with no "company" in it
    assert wanted("which company employs her") is None
    assert wanted("What is the name of the firm Maya works for?") is None
