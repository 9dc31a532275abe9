"""Every speaker (docs/conversations.md#extraction, people apart): a conversation between
two named people that the owner keeps puts each one's facts on their own entity node and
names them on their events; a conversation with the owner keeps the owner's facts in the
profile and the other's on theirs. A real mount; transcripts through the inbox, the
offline rule extractor."""

from __future__ import annotations

import json
import os

import pytest

from contextfs.testing import Mount
from tests.integration.test_relevance import wait_indexed

pytestmark = pytest.mark.timeout(600)

WHEN = "2023-05-09T10:00:00"  # a Tuesday


def drop(m: Mount, owner: str, name: str, turns: list[tuple[str, str]], when: str = WHEN) -> None:
    """A transcript of named user turns, all said at `when`, into an owner's inbox; back
    once the inbox has filed it and the indexes hold it."""
    lines = "".join(
        json.dumps(
            {"role": "user", "name": who, "content": text, "timestamp": when, "id": f"S1:{i}"}
        )
        + "\n"
        for i, (who, text) in enumerate(turns)
    )
    fd = os.open(m.path / f"user/{owner}/.inbox/{name}", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, lines.encode())
    finally:
        os.close(fd)
    wait_indexed(m)


@pytest.fixture(scope="module")
def mnt(tmp_path_factory) -> Mount:
    base = tmp_path_factory.mktemp("speakers")
    (base / "mnt").mkdir()
    m = Mount(base / "mnt", base / "data", search=True)
    m.start()
    (m.path / "user/ola").mkdir()
    yield m
    if m.proc is not None:
        m.stop()
    assert m.fsck() == []


def test_two_other_people_each_get_their_own_facts(mnt: Mount) -> None:
    drop(
        mnt,
        "default",
        "chat.jsonl",
        [
            ("Ola", "I live in Bergen."),
            ("Mina", "I live in Oslo."),
            ("Mina", "I love climbing."),
            ("Ola", "I ran the fjord marathon yesterday."),
        ],
    )
    me = mnt.path / "user/default"
    assert not (me / "profile/L2.md").exists() or "Bergen" not in (me / "profile/L2.md").read_text()
    ola = (me / "entities/ola/L2.md").read_text()
    mina = (me / "entities/mina/L2.md").read_text()
    assert "location: Bergen" in ola and "Oslo" not in ola, ola
    assert "location: Oslo" in mina and "climbing: loves" in mina and "Bergen" not in mina, mina
    [run] = [p for p in (me / "events").iterdir() if "marathon" in p.name]
    event = (run / "L2.md").read_text()
    assert "2023-05-08" in event and "participants:\n- Ola" in event, event


def test_the_owner_s_facts_stay_in_the_profile(mnt: Mount) -> None:
    drop(mnt, "ola", "chat.jsonl", [("Ola", "I live in Bergen."), ("Mina", "I live in Oslo.")])
    profile = (mnt.path / "user/ola/profile/L2.md").read_text()
    assert "location: Bergen" in profile and "Oslo" not in profile, profile
    assert "location: Oslo" in (mnt.path / "user/ola/entities/mina/L2.md").read_text()


def test_a_fact_about_someone_else_is_theirs_and_a_newer_one_replaces_it(mnt: Mount) -> None:
    drop(
        mnt,
        "default",
        "march.jsonl",
        [("Cy", "Noor lives in Bergen."), ("Cy", "Noor loves climbing.")],
    )
    drop(mnt, "default", "june.jsonl", [("Cy", "Noor moved to Lisbon in May.")])
    noor = (mnt.path / "user/default/entities/noor/L2.md").read_text()
    assert "location: Lisbon" in noor and "climbing: loves" in noor, noor
    assert "Bergen" not in noor and "Noor moved to Lisbon in May." in noor, noor
    report = (mnt.path / "user/default/.inbox/june.jsonl.report.md").read_text()
    assert "changed user/default/entities/noor (location: Bergen → Lisbon)" in report, report
    assert (
        not (mnt.path / "user/default/profile/L2.md").exists()
        or "Lisbon" not in (mnt.path / "user/default/profile/L2.md").read_text()
    )


def test_someone_another_speaker_names_is_related_to_them_not_to_the_owner(mnt: Mount) -> None:
    # "my brother Kofi", said by Efua in a conversation the owner keeps, is Efua's brother:
    # the owner is not made anyone's sibling
    drop(
        mnt,
        "default",
        "move.jsonl",
        [
            ("Efua", "My brother Kofi is coming to help with the lifting."),
            ("Theo", "Good luck with the stairs."),
        ],
    )
    kofi = (mnt.path / "user/default/entities/kofi/L2.md").read_text()
    assert "relation: Efua's brother" in kofi and "Kofi is Efua's brother." in kofi, kofi
    assert "owner" not in kofi, kofi


def test_every_speaker_gets_a_node_with_what_they_said_of_themself(mnt: Mount) -> None:
    """No rule reads "I've signed up for the Tatton Park half marathon" as a fact of a
    kind, yet it is Theo's: each named speaker has a node saying who they talk with, the
    people they named as theirs, and their own dated sentences with the turn they came
    from."""
    (mnt.path / "user/hubs").mkdir()
    drop(
        mnt,
        "hubs",
        "chat.jsonl",
        [
            ("Theo", "I've signed up for the Tatton Park half marathon in October."),
            ("Efua", "Fernhill Studio is eight people and somehow I'm now the butter consultant."),
            ("Theo", "My wife Ruth says it's a midlife crisis."),
            ("Efua", "Haha, respect for the honesty."),
        ],
    )
    me = mnt.path / "user/hubs"
    theo = (me / "entities/theo/L2.md").read_text()
    efua = (me / "entities/efua/L2.md").read_text()
    assert "talks with: Efua" in theo and "talks with: Theo" in efua, theo
    assert "- 9 May 2023 [S1:0] I've signed up for the Tatton Park half marathon" in theo, theo
    assert "wife: Ruth" in theo, theo
    assert "butter consultant" not in theo and "Tatton" not in efua, efua
    assert "- 9 May 2023 [S1:1] Fernhill Studio is eight people" in efua, efua
    assert "honesty" not in efua  # small talk names nothing of her own
    # a search finds the turn where it was said, once: the node's quote of it is not
    # indexed or shown again
    context = (me / ".query/Tatton Park half marathon/_context.md").read_text()
    assert context.count("signed up for the Tatton Park half marathon") == 1, context
    assert "[S1:0] Theo: I've signed up" in context, context


def test_a_speaker_who_introduces_themself_and_an_event_told_by_what_it_is(mnt: Mount) -> None:
    """The issue's own examples: the second speaker's "I'm Kofi, I teach chemistry" reaches
    Kofi's node, "I moved from Oslo to Lisbon" makes Lisbon where they live, and "The vet
    appointment is on …" is an event of that day."""
    drop(
        mnt,
        "default",
        "intro.jsonl",
        [
            ("Hedda", "Hi Kofi, good to meet you."),
            ("Kofi", "I'm Kofi, I teach chemistry in Bergen. I moved from Oslo to Lisbon."),
            ("Hedda", "The vet appointment is on 12 May."),
        ],
    )
    me = mnt.path / "user/default"
    kofi = (me / "entities/kofi/L2.md").read_text()
    assert "teaches: chemistry" in kofi and "location: Lisbon" in kofi, kofi
    assert "location: Oslo" not in kofi, kofi
    [vet] = [p for p in (me / "events").iterdir() if "vet-appointment" in p.name]
    assert vet.name.startswith("2023-05-12"), vet.name


@pytest.mark.parametrize(
    ("name", "text"),
    [
        (
            "t3.txt",
            "Kari: I live in Tromsø and I'm allergic to cats.\nJonas: Cool. I work as a nurse.\n"
            "Kari: Nice.\nJonas: I moved to Bergen last year.\n",
        ),
        (
            "t3.md",
            "**Kari:** I live in Tromsø and I'm allergic to cats.\n\n**Jonas:** Cool. I work "
            "as a nurse.\n\n**Kari:** Nice.\n\n**Jonas:** I moved to Bergen last year.\n",
        ),
    ],
)
def test_a_plain_text_or_markdown_dialogue_keeps_each_speaker_s_facts(
    mnt: Mount, name: str, text: str
) -> None:
    """`Name: text` lines (and `**Name:**`) are turns of their own: the owner's facts in
    the owner's profile, the other speaker's on their node, whoever spoke last."""
    owner = {"t3.txt": "kari", "t3.md": "marit"}[name]
    (mnt.path / f"user/{owner}").mkdir()
    fd = os.open(mnt.path / f"user/{owner}/.inbox/{name}", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, text.replace("Kari", owner.capitalize()).encode())
    finally:
        os.close(fd)
    wait_indexed(mnt)
    me = mnt.path / f"user/{owner}"
    profile = (me / "profile/L2.md").read_text()
    assert "location: Tromsø" in profile and "allergy: cats" in profile, profile
    assert "nurse" not in profile and "Bergen" not in profile, profile
    jonas = (me / "entities/jonas/L2.md").read_text()
    assert "location: Bergen" in jonas and "nurse" in jonas, jonas
    assert "cats" not in jonas and "Tromsø" not in jonas, jonas


def test_a_question_naming_the_owner_leads_with_the_owner_s_profile(mnt: Mount) -> None:
    """ "Where does Noa live?" is asked of Noa's profile (`location: Oslo`): it leads the
    bundle and the links, ahead of other people's turns about where they live and of
    Noa's own questions ("Where do you live now?")."""
    (mnt.path / "user/noa").mkdir()
    chats = [
        [("Noa", "Hi Priya! How's Edinburgh treating you?"),
         ("Priya", "We moved from Glasgow to Edinburgh in March and I love it."),
         ("Noa", "I live in Oslo, been here for six years. Still love it.")],
        [("Noa", "Hilde, do you still live in Trondheim?"),
         ("Hilde", "Yes, we live near the river now. Erik loves it."),
         ("Noa", "I'd love to live by a river.")],
        [("Erik", "We live in a small flat, but it's cosy."),
         ("Noa", "Where do your parents live these days?"),
         ("Erik", "They live in Stavanger, by the harbour.")],
        [("Priya", "Tom and I finally live together!"),
         ("Noa", "Congrats! Where do you live now?"),
         ("Priya", "We live in Leith, by the docks.")],
        [("Marek", "We live in Krakow, old town."),
         ("Noa", "Do you live close to the square?"),
         ("Marek", "Ten minutes' walk from where we live.")],
    ]  # fmt: skip
    for i, turns in enumerate(chats):
        drop(mnt, "noa", f"live{i}.jsonl", turns, when=f"2023-0{i + 5}-09T10:00:00")
    q = mnt.path / "user/noa/.query/Where does Noa live?"
    context = (q / "_context.md").read_text()
    sections = [ln for ln in context.splitlines() if ln.startswith("## ")]
    assert sections[0].startswith("## profile"), context
    assert "location: Oslo" in context.split("\n## ")[1], context
    assert sorted(os.listdir(q))[0] == "01_profile"


def test_a_speaker_takes_a_fact_back_and_names_beyond_ascii_are_kept(mnt: Mount) -> None:
    drop(mnt, "default", "marek-1.jsonl",
         [("Marek", "I'm allergic to peanuts."), ("Jonas", "Noted.")])  # fmt: skip
    drop(mnt, "default", "marek-2.jsonl", [
        ("Marek", "I'm not allergic to peanuts after all. It was the sesame."),
        ("Jonas", "My friend Åsa lives in Tromsø."),
    ])  # fmt: skip
    me = mnt.path / "user/default"
    marek = (me / "entities/marek/L2.md").read_text()
    assert "allergy: sesame" in marek and "allergy: peanuts" not in marek, marek
    report = (me / ".inbox/marek-2.jsonl.report.md").read_text()
    assert "changed user/default/entities/marek (allergy: peanuts → sesame)" in report, report
    asa = (me / "entities/asa/L2.md").read_text()
    assert "name: Åsa" in asa and "location: Tromsø" in asa and "Jonas's friend" in asa, asa
    session = next(p for p in (me / "sessions").iterdir() if "marek-2" in p.name)
    assert "Tromsø" in (session / "L0.md").read_text()


def test_the_owner_s_mum_and_mother_are_one_relation(mnt: Mount) -> None:
    drop(mnt, "ola", "family-1.jsonl", [("Ola", "My mother Ingrid is visiting in June.")])
    drop(mnt, "ola", "family-2.jsonl", [("Ola", "My mum Ingrid loves the fjords.")])
    profile = (mnt.path / "user/ola/profile/L2.md").read_text()
    assert "mother: Ingrid" in profile and "mum:" not in profile, profile
    ingrid = (mnt.path / "user/ola/entities/ingrid/L2.md").read_text()
    assert "the owner's mother." in ingrid and "the owner's mum" not in ingrid, ingrid
