"""Deterministic, varied markdown prose for generated memories (benchmarks, tests).

Every function takes a seeded `random.Random`, so a tree built twice is the same bytes.
"""

from __future__ import annotations

import random

WORD_TEXT = """
the a an this that our their my your its each every some most few many several
agent user project team meeting release deadline budget editor terminal keyboard coffee tea
morning evening weekend schedule calendar reminder note summary draft report review design
database index query cache latency throughput memory storage backup server client network
python rust typescript shell script test suite benchmark profile trace log metric alert
prefers likes avoids uses needs expects asks writes reads keeps moves sends checks runs
quickly carefully usually rarely always never often sometimes early late again together
small large short long quiet noisy simple detailed formal casual remote local shared private
because although while when before after since unless until whereas so and but or
dark mode light theme tabs spaces vim emacs markdown plain text email chat call video
Berlin Lisbon Tokyo Oslo Nairobi Lima Montreal Kyoto Alice Bob Chen Dana Emeka Farah Goran
"""
WORDS = tuple(WORD_TEXT.split())

HEADINGS = (
    "Context",
    "Details",
    "Background",
    "Notes",
    "Decisions",
    "Open questions",
    "History",
    "Preferences",
    "Constraints",
    "Examples",
    "Follow-ups",
    "Sources",
    "Observations",
)


def sentence(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(7, 22))]
    if rng.random() < 0.15:
        words.insert(rng.randrange(len(words)), f"`{rng.choice(WORDS)}_{rng.randint(1, 99)}`")
    if rng.random() < 0.1:
        words.insert(rng.randrange(len(words)), f"{rng.randint(1, 31)} {rng.choice(WORDS)}")
    text = " ".join(words)
    return text[0].upper() + text[1:] + rng.choice(".....!?")


def prose(rng: random.Random, title: str) -> str:
    """Markdown of 1-6 KB: a title, paragraphs, sub-headings and bullet lists."""
    target = rng.randint(1024, 6 * 1024)
    parts = [f"# {title}\n", " ".join(sentence(rng) for _ in range(rng.randint(1, 3))) + "\n"]
    size = sum(len(p) + 1 for p in parts)
    while size < target:
        r = rng.random()
        if r < 0.2:
            block = f"## {rng.choice(HEADINGS)}\n"
        elif r < 0.45:
            block = "\n".join(f"- {sentence(rng)}" for _ in range(rng.randint(2, 6))) + "\n"
        else:
            block = " ".join(sentence(rng) for _ in range(rng.randint(2, 6))) + "\n"
        parts.append(block)
        size += len(block) + 1
    text = "\n".join(parts)
    return text[: 6 * 1024 - 1].rstrip() + "\n"
