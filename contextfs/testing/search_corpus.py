"""A corpus with known answers for the search tests and scripts/bench_search.py.

TARGETS are memories with one distinctive fact each and a question phrased differently
from the node's text; FILLER adds a few hundred plausible, unrelated nodes across types
and two owners, so the right answer has to beat real competition.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    path: str  # node directory, relative to the mount
    text: str  # L2
    question: str
    scope: str = ""  # the subtree the question is asked in ('' = everything)


TARGETS = [
    Target(
        "user/alice/preferences/editor",
        "Alice edits code in Neovim with relative line numbers and the gruvbox theme.",
        "which text editor does alice use for programming",
    ),
    Target(
        "user/alice/preferences/coffee",
        "Alice drinks her coffee black: a double espresso before nine, never with sugar.",
        "how does alice take her caffeine",
    ),
    Target(
        "user/alice/entities/rex",
        "Rex is Alice's dog, a golden retriever adopted in 2019 from a shelter in Lyon.",
        "what kind of dog does she own",
    ),
    Target(
        "user/alice/events/2026-03-14-marathon",
        "Alice finished the Paris marathon in 3 hours 41 minutes on a rainy morning.",
        "how long did the race in Paris take her",
    ),
    Target(
        "user/alice/preferences/music",
        "Listens to Bach cello suites while working and dislikes loud pop music.",
        "what music does she put on to concentrate",
    ),
    Target(
        "user/alice/entities/acme-corp",
        "Acme Corp employs Alice as a staff engineer on the payments team.",
        "which company employs her",
    ),
    Target(
        "user/alice/preferences/flight-seat",
        "Always books an aisle seat on flights longer than three hours.",
        "where does she prefer to sit on long flights",
    ),
    Target(
        "user/alice/events/2025-11-02-kitchen-fire",
        "A small kitchen fire damaged the oven; the insurance paid for a new one.",
        "what damaged her kitchen",
    ),
    Target(
        "user/alice/preferences/diet",
        "Vegetarian since 2015, eats fish now and then, allergic to peanuts.",
        "does she have any food allergies",
    ),
    Target(
        "user/alice/entities/grandma-rose",
        "Rose, Alice's grandmother, lives in Porto and turns ninety in May.",
        "how old is her grandmother turning",
    ),
    Target(
        "user/alice/preferences/sleep",
        "Goes to bed at 23:00 and wakes at 6:30 without an alarm clock.",
        "at what hour does she wake up",
    ),
    Target(
        "user/alice/entities/car",
        "Her car is a white Tesla Model 3 she bought second-hand in 2022.",
        "what vehicle does she drive",
    ),
    Target(
        "user/alice/events/2026-06-20-sister-wedding",
        "Alice's sister Emma got married in Seville; Alice gave a speech.",
        "who got married in Spain",
    ),
    Target(
        "user/alice/preferences/programming-language",
        "Prefers Rust for systems work and Python for quick scripts; avoids Java.",
        "favourite language for low-level software",
    ),
    Target(
        "user/alice/preferences/newsletter",
        "Reads the Morning Brew newsletter every day over breakfast.",
        "which daily email digest does she read",
    ),
    Target(
        "agent/helper/cases/flaky-ci",
        "CI failed intermittently because two integration test suites shared one TCP "
        "port; fixed by allocating ephemeral ports.",
        "why did the CI builds break at random",
    ),
    Target(
        "agent/helper/patterns/code-review",
        "- Ask for small pull requests under 400 lines so reviews stay thorough.",
        "how big should a pull request be",
    ),
    Target(
        "agent/helper/skills/deploy-staging",
        "Run make build, push the image tag, then kubectl rollout restart on staging.",
        "how do I deploy a build to staging",
    ),
    Target(
        "agent/helper/tools/ripgrep",
        "rg is the fastest way to search text across the repository; -tpy restricts "
        "it to Python files.",
        "fastest tool to search text in the repository",
    ),
    Target(
        "agent/helper/cases/disk-full",
        "The database crashed because the disk filled up with old logs; added logrotate "
        "with a seven day retention.",
        "root cause of the database outage",
    ),
    Target(
        "user/bob/preferences/editor",
        "Bob writes code in VS Code with the Vim keybindings extension.",
        "which editor does he code in",
        scope="user/bob",
    ),
    Target(
        "user/bob/entities/cat",
        "Bob's cat Miso is a grey British shorthair who hates the vacuum cleaner.",
        "what pet does he have",
        scope="user/bob",
    ),
]

# The scope-isolation pair: the same question asked in two owners finds each one's node.
SCOPED = [
    ("user/alice", "which code editor is used", "user/alice/preferences/editor"),
    ("user/bob", "which code editor is used", "user/bob/preferences/editor"),
]

_SUBJECTS = [
    "gardening",
    "tomato plants",
    "chess openings",
    "board games",
    "the weather in Berlin",
    "bicycle maintenance",
    "sourdough bread",
    "jazz concerts",
    "museum visits",
    "hiking boots",
    "tax returns",
    "the dentist",
    "birthday presents",
    "photography",
    "the balcony",
    "podcasts about history",
    "learning Spanish",
    "yoga classes",
    "houseplants",
    "a new sofa",
    "train timetables",
    "recycling rules",
    "the neighbours",
    "winter jackets",
    "pottery",
    "science fiction novels",
    "crossword puzzles",
    "a leaking tap",
    "film festivals",
    "bird watching",
    "camping gear",
    "the library",
    "electric scooters",
    "tea ceremonies",
]
_TEMPLATES = [
    "Mentioned {s} briefly; no strong opinion either way.",
    "Talked about {s} with a friend last week and plans to look into it later.",
    "Has a mild interest in {s}, mostly on weekends.",
    "Asked for a summary of articles about {s}.",
    "Finds {s} relaxing when the week has been busy.",
    "Wants to spend less money on {s} this year.",
]


def filler(n: int = 240, seed: int = 7) -> list[tuple[str, str]]:
    """(node path, L2 text) pairs across both owners and several types."""
    rng = random.Random(seed)
    places = [
        ("user/alice", "preferences"),
        ("user/alice", "entities"),
        ("user/bob", "preferences"),
        ("user/bob", "entities"),
        ("agent/helper", "patterns"),
        ("agent/helper", "cases"),
    ]
    out = []
    for i in range(n):
        owner, tdir = places[i % len(places)]
        subject = rng.choice(_SUBJECTS)
        text = rng.choice(_TEMPLATES).format(s=subject)
        if tdir == "patterns":
            text = "- " + text
        out.append((f"{owner}/{tdir}/note-{i:04d}", text + "\n"))
    return out
