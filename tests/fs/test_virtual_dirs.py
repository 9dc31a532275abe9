"""The virtual directories' handlers, through the real Operations, without a kernel:
`.query` (a real Indexer and Searcher over a small deterministic embedder), `.inbox` and
`.sessions` (the real Intake and IntakeService, rule extraction). The store is checked
with fsck by the `memory` fixture."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyfuse3
import pytest
import trio

from contextfs.conversations.inbox import Intake
from contextfs.fs.build import Background, FsOptions, build_operations
from contextfs.fs.inode import Role
from contextfs.memory.service import Memory
from contextfs.search.indexer import Indexer
from contextfs.search.retrieval import Searcher
from tests.fs.conftest import FS, FixedStatus

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "transcripts"


class WordEmbedder:
    """Bag of hashed words: deterministic, instant, and good enough to rank by topic."""

    name = "test-words"
    dim = 64

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        rows = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for w in re.findall(r"[a-z]+", text.lower()):
                rows[i, int(hashlib.md5(w.encode()).hexdigest(), 16) % self.dim] += 1.0
            rows[i, 0] += 1e-3  # never an all-zero row
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)


class Mount:
    def __init__(self, memory: Memory, tmp_path: Path, *, search: bool) -> None:
        self.indexer = (
            Indexer(memory, tmp_path / "index", WordEmbedder, model_name="test-words")
            if search
            else None
        )
        searcher = Searcher(memory, self.indexer) if self.indexer else None
        self.intake = Intake(memory, extract_every=1000)
        self.ops, self.service = build_operations(
            memory,
            FsOptions(fsync_barrier_timeout=20.0),
            status=FixedStatus(),
            schema_files={},
            intake=self.intake,
            searcher=searcher,
            background=Background(indexer=self.indexer),
        )
        self.fs = FS(self.ops)


@pytest.fixture
async def searching(memory: Memory, tmp_path: Path, nursery: trio.Nursery) -> Mount:
    m = Mount(memory, tmp_path, search=True)
    assert m.indexer is not None
    nursery.start_soon(m.indexer.run)
    return m


@pytest.fixture
def plain(memory: Memory, tmp_path: Path) -> Mount:
    return Mount(memory, tmp_path, search=False)


# ---- .query ----------------------------------------------------------------------------------


async def test_query_lists_numbered_links_and_the_answer_files(searching: Mount) -> None:
    fs = searching.fs
    for name, text in (
        ("editor", "She prefers vim with relative line numbers."),
        ("tea", "Green tea in the morning, never coffee."),
    ):
        await fs.mkdir(f"user/default/preferences/{name}")
        # fsync of a tier returns once BM25 finds that node (never after other work)
        await fs.write(f"user/default/preferences/{name}/L2.md", text.encode(), fsync=True)
    assert searching.indexer is not None

    q = ".query/which editor does she use with vim"
    names = await fs.listdir(q)
    assert names[0] == "01_editor"
    assert {"_context.md", "_results.json"} <= set(names)
    link = await fs.ino(f"{q}/01_editor")
    target = await fs.ops.readlink(link, fs.ctx)
    assert target == b"../../user/default/preferences/editor"
    context = await fs.text(f"{q}/_context.md")
    assert "user/default/preferences/editor" in context and "vim" in context
    results = json.loads(await fs.text(f"{q}/_results.json"))
    assert results["hits"][0]["path"] == "user/default/preferences/editor"
    # questions are asked by name, never listed; .query is listed only at the root
    assert await fs.listdir(".query") == []
    assert ".query" in await fs.listdir("")
    assert ".query" not in await fs.listdir("user/default")
    # scoped: .query in a directory searches that subtree only
    scoped = await fs.listdir("user/default/preferences/.query/green tea")
    assert scoped[0] == "01_tea"
    # options segment; bad options are EINVAL
    assert len([n for n in await fs.listdir(".query/@k=1/tea or vim") if n[0].isdigit()]) == 1
    assert await fs.errno_of(fs.ino(".query/@k=zero/x")) == errno.EINVAL
    assert await fs.errno_of(fs.ino(".query/@k=2,k=3/x")) == errno.EINVAL  # which one?


async def test_scoped_vector_search_sees_a_node_written_after_the_last_question(
    searching: Mount,
) -> None:
    """A scope's vectors are kept between questions; a write in between must show. The
    question shares no word with any node, so only the vector side (where every unit has
    a small similarity) can list a node: BM25 finds nothing."""
    fs = searching.fs
    assert searching.indexer is not None
    with trio.fail_after(20):
        while not searching.indexer.ready:  # the embedder loads in the background
            await trio.sleep(0.01)
    await fs.mkdir("user/default/preferences/editor")
    await fs.write("user/default/preferences/editor/L2.md", b"She prefers vim.", fsync=True)
    assert await searching.indexer.wait_settled(20)  # fsync promises BM25; vectors follow
    question = "user/default/.query/@k=50/zzqx wvvy"
    assert [n for n in await fs.listdir(question) if n[0].isdigit()] == ["01_editor"]
    await fs.mkdir("user/default/preferences/tea")
    await fs.write("user/default/preferences/tea/L2.md", b"Green tea, never coffee.", fsync=True)
    assert await searching.indexer.wait_settled(20)
    listed = [n for n in await fs.listdir(f"{question} again") if n[0].isdigit()]
    assert sorted(n[3:] for n in listed) == ["editor", "tea"]


async def test_a_model_that_loads_slowly_does_not_race_the_first_rebuild(
    plain: Mount, memory: Memory, tmp_path: Path, nursery: trio.Nursery
) -> None:
    """The model loads for longer than the checkpoint interval over a store that already
    has nodes (a busy CI machine: 17 s). There the first rebuild and the loop's checkpoint
    once saved at the same moment through one `index.json.tmp`, and the loser's error ended
    the mount. That race needs a precise timing this test does not force; it checks what
    the rebuild, now run by the loop alone, must give: every node indexed, no error, and a
    snapshot that `index.json` names."""
    fs = plain.fs
    for i in range(300):
        await fs.mkdir(f"user/default/preferences/n{i:03d}")
        await fs.write(f"user/default/preferences/n{i:03d}/L2.md", f"note {i} on tea".encode())

    def slow_model() -> WordEmbedder:
        time.sleep(1.0)  # worker thread: the loop meanwhile indexes BM25 alone
        return WordEmbedder()

    ix = Indexer(memory, tmp_path / "slow-index", slow_model, model_name="test-words")
    ix.CHECKPOINT_SECONDS = 0.05
    nursery.start_soon(ix.run)
    with trio.fail_after(60):
        while not (ix.state == "ready" and ix.generation == memory.generation):
            await trio.sleep(0.01)
    assert ix.error is None
    assert len(ix.vectors) == 300
    meta = json.loads((tmp_path / "slow-index/index.json").read_text())
    assert (tmp_path / "slow-index" / meta["snapshot"] / "vectors.bin").is_file()
    ix.stop()


async def test_query_without_search_is_enoent(plain: Mount) -> None:
    fs = plain.fs
    assert ".query" not in await fs.listdir("")
    assert await fs.errno_of(fs.ino(".query/anything")) == errno.ENOENT


# ---- .inbox ----------------------------------------------------------------------------------


async def test_inbox_file_is_stored_at_close_and_reported_after_processing(
    plain: Mount, memory: Memory
) -> None:
    fs = plain.fs
    await fs.write(".inbox/chat.jsonl", (CORPUS / "architecture.jsonl").read_bytes())
    assert await fs.listdir(".inbox") == ["chat.jsonl", "chat.jsonl.report.md"]
    assert "waiting to be processed" in await fs.text(".inbox/chat.jsonl.report.md")
    assert await fs.errno_of(fs.write(".inbox/chat.jsonl", b"x")) == errno.EACCES
    # `.status` says what the file is: what was handed in, not a derived file
    assert "handed in to the inbox" in memory.refusals[-1].reason, memory.refusals[-1]
    assert await fs.errno_of(fs.unlink(".inbox/chat.jsonl")) == errno.EACCES

    assert await plain.service.step() is True  # the background service processes it
    report = await fs.text(".inbox/chat.jsonl.report.md")
    assert "state: done" in report and "## Archived" in report
    archived = [n for n in memory.nodes.values() if n.type == "session"]
    assert len(archived) == 1 and "Postgres" in archived[0].l2
    assert any(n.type == "case" for n in memory.nodes.values()), report
    assert memory.node_path(archived[0]).split("/")[-1] in await fs.listdir("user/default/sessions")


async def test_inbox_editor_temp_names_stay_scratch(plain: Mount) -> None:
    fs = plain.fs
    await fs.write(".inbox/.chat.md.swp", b"scratch")
    assert await fs.listdir(".inbox") == [".chat.md.swp"]
    await fs.rename(".inbox/.chat.md.swp", ".inbox/note.md")  # an atomic writer's rename
    assert await fs.listdir(".inbox") == ["note.md", "note.md.report.md"]


# ---- .sessions -------------------------------------------------------------------------------


def _turn(role: str, content: str, ref: str) -> bytes:
    return (json.dumps({"role": role, "content": content, "id": ref}) + "\n").encode()


async def test_session_records_turns_builds_context_and_ends_as_a_node(
    plain: Mount, memory: Memory
) -> None:
    fs = plain.fs
    await fs.write("user/default/profile/L2.md", b"---\nname: Ada\n---\nAda writes Rust.\n")
    await fs.mkdir(".sessions/s1")
    assert await fs.listdir(".sessions/s1") == ["context.md", "control", "transcript.jsonl"]
    await fs.write(
        ".sessions/s1/transcript.jsonl",
        _turn("user", "We should use Postgres for the job queue.", "t1"),
        append=True,
    )
    await fs.write(
        ".sessions/s1/transcript.jsonl",
        _turn("assistant", "Agreed, Postgres it is.", "t2"),
        append=True,
    )
    assert (await fs.text(".sessions/s1/transcript.jsonl")).count("\n") == 2
    context = await fs.text(".sessions/s1/context.md")
    assert context.startswith("# Context for session s1") and "## Profile" in context
    # append-only; unknown commands are refused
    assert await fs.errno_of(fs.write(".sessions/s1/transcript.jsonl", b"{}\n")) == errno.EINVAL
    assert await fs.errno_of(fs.write(".sessions/s1/control", b"pause\n")) == errno.EINVAL
    # `.status` names the file refused (a file handle's number was once read as an inode's,
    # and the line named whatever file had that inode number)
    assert memory.refusals[-1].path.endswith(" .sessions/s1/control"), memory.refusals[-1]

    await fs.write(".sessions/s1/control", b"end\n")
    assert await fs.listdir(".sessions") == []
    assert not plain.intake.sessions
    (node,) = [n for n in memory.nodes.values() if n.type == "session"]
    assert "Postgres" in node.l2 and node.persisted


async def test_session_compact_and_rmdir(plain: Mount, memory: Memory) -> None:
    fs = plain.fs
    await fs.mkdir(".sessions/s2")
    await fs.write(
        ".sessions/s2/transcript.jsonl",
        _turn("user", "I always indent with tabs.", "a"),
        append=True,
    )
    await fs.write(".sessions/s2/control", b"compact")
    assert await fs.text(".sessions/s2/transcript.jsonl") == ""
    assert plain.intake.sessions[("user", "default", "s2")].summary
    # the turns compacted away are in the archive already, not only in a summary
    (first,) = [n for n in memory.nodes.values() if n.type == "session"]
    assert "I always indent with tabs." in first.l2 and first.persisted
    await fs.write(
        ".sessions/s2/transcript.jsonl",
        _turn("user", "My terminal font is Iosevka.", "b"),
        append=True,
    )
    await fs.write(".sessions/s2/control", b"compact")
    await fs.write(
        ".sessions/s2/transcript.jsonl",
        _turn("user", "The build runs on Fridays.", "c"),
        append=True,
    )
    await fs.rmdir(".sessions/s2")  # rmdir ends it too
    assert await fs.listdir(".sessions") == []
    parts = sorted((n for n in memory.nodes.values() if n.type == "session"), key=lambda n: n.id)
    # every turn once, in three parts titled by the session; no part without turns
    assert [memory.node_path(n).rsplit("/", 1)[1][11:] for n in parts] == [
        "s2",
        "s2-part-2",
        "s2-part-3",
    ]
    said = [ref for ref in "abc" for n in parts if f"**user** · id {ref}\n" in n.l2]
    assert said == ["a", "b", "c"]
    assert "1 turn by user." in parts[0].l2
    assert parts[0].l0.strip().endswith(" · I always indent with tabs."), parts[0].l0
    assert all("turns: 1" in n.l2 for n in parts), [n.l2[:200] for n in parts]
    assert await fs.errno_of(fs.ino(".sessions/s2")) == errno.ENOENT
    # a later session reusing the id starts its own archive, titled by the id again
    await fs.mkdir(".sessions/s2")
    await fs.write(".sessions/s2/transcript.jsonl", _turn("user", "Hello again.", "d"), append=True)
    await fs.rmdir(".sessions/s2")
    again = [n for n in memory.nodes.values() if n.type == "session" and "Hello again" in n.l2]
    assert len(again) == 1 and "part" not in memory.node_path(again[0])


async def test_session_context_uses_search_when_there_is_one(searching: Mount) -> None:
    fs = searching.fs
    await fs.mkdir("user/default/preferences/editor")
    await fs.write(
        "user/default/preferences/editor/L2.md",
        b"She prefers vim with relative line numbers.",
        fsync=True,
    )
    await fs.mkdir(".sessions/s3")
    await fs.write(
        ".sessions/s3/transcript.jsonl",
        _turn("user", "Which editor should I configure, vim?", "q"),
        append=True,
    )
    context = await fs.text(".sessions/s3/context.md")
    assert "## Relevant memories" in context
    assert "user/default/preferences/editor" in context
    # the sessions handler takes its k from configuration (default documented there)
    assert fs.ops.tree.roles[Role.SESSION].config.k == 8
    fi = await fs.ops.open(await fs.ino(".sessions/s3/context.md"), os.O_RDONLY, fs.ctx)
    assert fi.direct_io, "generated per open: never from the page cache"
    await fs.ops.release(fi.fh)
    assert isinstance(fi, pyfuse3.FileInfo)


async def test_conversations_answer_with_turns_and_entity_hubs(
    searching: Mount, memory: Memory
) -> None:
    """Transcripts in the inbox are searched turn by turn: `_context.md` shows the matched
    turns with their ids and the conversation's date; an entity named in the question is a
    hub that brings the turns it was gathered from, in every session that spoke of it."""
    fs = searching.fs
    sessions = {
        "s1.jsonl": (
            "2023-03-14T18:05:00",
            [
                "We spent the morning repainting the fence.",
                "My sister's dog Biscuit chewed the sofa.",
                "The weather was grim all weekend.",
            ],
        ),
        "s2.jsonl": (
            "2023-05-02T09:00:00",
            [
                "Work has been hectic with the audit.",
                "We looked after my sister's dog Biscuit again.",
                "The lunch place by the office closed.",
            ],
        ),
    }
    for name, (when, texts) in sessions.items():
        lines = [
            json.dumps(
                {
                    "role": "user",
                    "name": "Ana",
                    "content": t,
                    "timestamp": when,
                    "id": f"{name[:2].upper()}:{i + 1}",
                }
            )
            for i, t in enumerate(texts)
        ]
        await fs.write(f".inbox/{name}", "\n".join(lines).encode())
        assert await searching.service.step() is True
    hub = memory.live_node(("user", "default"), memory.types["entity"], "biscuit")
    assert hub is not None and len(hub.sources) == 2, "one entity gathered over two sessions"
    await fs.mkdir("user/default/preferences/sync")  # an fsync is an index barrier
    await fs.write("user/default/preferences/sync/L2.md", b"Nothing.", fsync=True)
    q = ".query/@budget=300/how is Biscuit doing"
    text = await fs.text(f"{q}/_context.md")
    assert "\n## user/default/sessions/2023-03-14-s1\n" in text, text  # the name has the date
    assert "- [S1:2] Ana: My sister's dog Biscuit chewed the sofa." in text
    assert "- [S2:2] Ana: We looked after my sister's dog Biscuit again." in text
    hits = json.loads(await fs.text(f"{q}/_results.json"))["hits"]
    assert "user/default/entities/biscuit" in [h["path"] for h in hits]
    turns = {t for h in hits for p in h["passages"] for t in p.get("turns", [])}
    assert {"S1:2", "S2:2"} <= turns


async def _conversation(
    searching: Mount, sessions: dict[str, tuple[str, list[tuple[str, str]]]]
) -> None:
    """Each session into the inbox as JSONL (speaker, text), processed, then an fsync
    barrier so everything is searchable."""
    fs = searching.fs
    for name, (when, turns) in sessions.items():
        lines = [
            json.dumps(
                {
                    "role": "user",
                    "name": who,
                    "content": text,
                    "timestamp": when,
                    "id": f"{name[:2].upper()}:{i + 1}",
                }
            )
            for i, (who, text) in enumerate(turns)
        ]
        await fs.write(f".inbox/{name}", "\n".join(lines).encode())
        assert await searching.service.step() is True
    assert searching.indexer is not None
    with trio.fail_after(20):
        while not searching.indexer.ready:
            await trio.sleep(0.01)
    await fs.mkdir("user/default/preferences/sync")
    await fs.write("user/default/preferences/sync/L2.md", b"Nothing.", fsync=True)
    # fsync promises BM25 for its own node; the archives' vectors come with the backlog
    assert await searching.indexer.wait_settled(20)


async def test_a_question_naming_a_speaker_is_not_answered_by_greetings(
    searching: Mount,
) -> None:
    """A participant's name in a turn is mostly a greeting ("Maya! Long time no chat."):
    the name is left out of both searches, and what the named person said comes first."""
    greet = ("Jonah", "Maya! Long time no chat.")
    await _conversation(
        searching,
        {
            f"s{i}.jsonl": (f"2023-0{i}-10T10:00:00", [greet, ("Maya", f"Busy week {i}.")])
            for i in range(1, 6)
        }
        | {
            "s6.jsonl": (
                "2023-06-10T10:00:00",
                [
                    ("Jonah", "Any news?"),
                    ("Maya", "It has rained in Bath all week; ten years I have lived here."),
                ],
            )
        },
    )
    results = json.loads(
        await searching.fs.text(".query/@budget=200/which city does Maya live in/_results.json")
    )
    top = [
        (p["turns"], h["path"]) for h in results["hits"] for p in h["passages"] if p.get("turns")
    ]
    assert top and top[0][0] == ["S6:2"], top  # Maya's own answer, not a greeting
    text = await searching.fs.text(".query/@budget=120/which city does Maya live in/_context.md")
    assert "ten years I have lived here" in text, text
    assert "Long time no chat" not in text, text


async def test_a_question_about_a_relation_reaches_the_turns_naming_that_entity(
    searching: Mount, memory: Memory
) -> None:
    """Two hops: "my cousin" finds the entity Luca (extracted from one session); the turns
    of other sessions that name Luca, which the entity was not gathered from, join."""
    await _conversation(
        searching,
        {
            "s1.jsonl": ("2023-01-10T10:00:00", [("Maya", "My cousin Luca is coming to stay.")]),
            "s2.jsonl": (
                "2023-02-10T10:00:00",
                [
                    ("Maya", "The bus was late again this morning."),
                    ("Maya", "Luca passed his final exams, he is officially a vet now!"),
                ],
            ),
            # turns that share some of the question's words: without the hop they come
            # before the turn that answers (which shares none), and fill a small budget
            "s3.jsonl": (
                "2023-03-10T10:00:00",
                [("Jonah", f"My job is dull, day {i} of the audit.") for i in range(4)]
                + [("Jonah", f"What a day, {i} of them.") for i in range(8)],
            ),
        },
    )
    hub = memory.live_node(("user", "default"), memory.types["entity"], "luca")
    assert hub is not None and not any("S2:2" in s for s in hub.sources), hub.sources
    text = await searching.fs.text(
        ".query/@budget=200/what does my cousin do for a job/_context.md"
    )
    assert "[S2:2] Maya: Luca passed his final exams, he is officially a vet now!" in text, text


async def test_a_turn_naming_an_entity_brings_the_turns_that_introduced_it(
    searching: Mount, memory: Memory
) -> None:
    """Two hops from a turn, not from a hub: "who works night shifts as a nurse" finds the
    turn "Ada had a twelve-hour night shift..."; Ada is a known entity (introduced in
    another session as "dates with someone. Ada."), so the turns naming Ada join, and the
    introduction answers "who is close to her"."""
    await _conversation(
        searching,
        {
            "s1.jsonl": (
                "2023-01-10T10:00:00",
                [("Maya", "So... I've been on a few dates with someone. Ada. We met at a gig.")],
            ),
            "s2.jsonl": (
                "2023-02-10T10:00:00",
                [("Maya", "Ada had a twelve-hour night shift. Being a nurse is no joke.")],
            ),
            # turns that share the question's words and fill a small budget
            "s3.jsonl": (
                "2023-03-10T10:00:00",
                [("Maya", f"Close call {i}: the old printer works again.") for i in range(30)],
            ),
        },
    )
    hub = memory.live_node(("user", "default"), memory.types["entity"], "ada")
    assert hub is not None, "the introduction made an entity"
    question = "who close to Maya works night shifts as a nurse"
    text = await searching.fs.text(f"user/default/.query/@budget=300/{question}/_context.md")
    assert "Ada had a twelve-hour night shift" in text, text
    assert "been on a few dates with someone. Ada." in text, text


async def test_what_a_named_speaker_said_comes_before_what_others_said(
    searching: Mount,
) -> None:
    """ "Does Mateo have a dog?" is answered by what Mateo said, though another speaker's
    shorter line matches the words better."""
    await _conversation(
        searching,
        {
            "s1.jsonl": (
                "2023-04-02T10:00:00",
                [
                    ("Efua", "A dog barked."),
                    ("Mateo", "We adopted a rescue dog in the spring, a collie called Rolo."),
                ],
            )
        },
    )
    results = json.loads(await searching.fs.text(".query/does Mateo have a dog/_results.json"))
    ranked = sorted(
        ((p["score"], p["turns"]) for h in results["hits"] for p in h["passages"] if "turns" in p),
        reverse=True,
    )
    assert ranked[0][1] == ["S1:2"], ranked


# ---- sizes and accesses (what a bulk reader such as rsync sees) -----------------------------


async def test_session_context_reports_its_true_size(plain: Mount) -> None:
    fs = plain.fs
    await fs.mkdir(".sessions/s1")
    turn = '{"role": "user", "content": "I moved to Paris and I prefer green tea."}\n'
    await fs.write(".sessions/s1/transcript.jsonl", turn.encode(), append=True)
    ino = await fs.ino(".sessions/s1/context.md")
    size = (await fs.ops.getattr(ino, fs.ctx)).st_size
    data = await fs.read(".sessions/s1/context.md")
    assert size == len(data) > 0, "rsync copies st_size bytes"
    await fs.write(".sessions/s1/transcript.jsonl", turn.encode(), append=True)
    assert (await fs.ops.getattr(ino, fs.ctx)).st_size == len(
        await fs.read(".sessions/s1/context.md")
    )


async def test_reads_are_not_accesses_query_answers_are(searching: Mount, memory: Memory) -> None:
    fs = searching.fs
    await fs.mkdir("user/default/preferences/tea")
    await fs.write("user/default/preferences/tea/L2.md", b"Green tea, never coffee.\n", fsync=True)
    assert searching.indexer is not None
    assert await searching.indexer.wait_settled(20)  # meta.yaml's indexed version is in
    n = next(iter(memory.nodes.values()))
    meta = await fs.read("user/default/preferences/tea/meta.yaml")
    for _ in range(12):  # cat, grep -r, rsync: nothing changes
        await fs.read("user/default/preferences/tea/L2.md")
        await fs.read("user/default/preferences/tea/L0.md")
    assert n.access_count == 0
    assert await fs.read("user/default/preferences/tea/meta.yaml") == meta
    q = ".query/green tea"
    assert "01_tea" in await fs.listdir(q)
    await fs.read(f"{q}/_context.md")
    await fs.read(f"{q}/_results.json")
    await fs.read(f"{q}/_context.md")
    assert n.access_count == 1, "one read answer, one access per hit"
    assert "access_count: 1" in await fs.text("user/default/preferences/tea/meta.yaml")


async def test_session_context_shows_typed_memories_and_earlier_sessions_turns(
    searching: Mount,
) -> None:
    """Archives of earlier sessions outnumber typed memories among the hits: context.md
    still lists the typed memory, then the best turns of earlier sessions with their ids
    (it dropped the archives, and with them most of what it found)."""
    fs = searching.fs
    for i in range(12):
        await fs.mkdir(f".sessions/old{i}")
        said = f"Bramble the beagle ate sock number {i} and the vet visit {i} went fine."
        await fs.write(
            f".sessions/old{i}/transcript.jsonl", _turn("user", said, f"b{i}"), append=True
        )
        await fs.rmdir(f".sessions/old{i}")
    await fs.mkdir("user/default/entities/bramble")
    await fs.write("user/default/entities/bramble/L2.md", b"Bramble is our beagle.\n", fsync=True)
    await fs.mkdir(".sessions/now")
    await fs.write(
        ".sessions/now/transcript.jsonl",
        _turn("user", "How is Bramble the beagle after the vet visit?", "q"),
        append=True,
    )
    context = await fs.text(".sessions/now/context.md")
    relevant = context.split("## Relevant memories", 1)[1]
    assert "user/default/entities/bramble: " in relevant, context
    assert relevant.count("user/default/sessions/") >= 2, context
    assert "(b" in relevant and "Bramble the beagle ate sock" in relevant, context


async def test_the_roots_inbox_and_sessions_are_the_default_owners(plain: Mount) -> None:
    """`.inbox` and `.sessions` at the root are the default owner's: what is handed in or
    started through one shows in the other, also when that one was listed before (it
    showed only where it was made until a remount)."""
    fs = plain.fs
    assert await fs.listdir("user/default/.inbox") == []
    assert await fs.listdir("user/default/.sessions") == []
    await fs.write(".inbox/rain.md", b"I prefer rain to sun.\n")
    assert await fs.listdir("user/default/.inbox") == ["rain.md", "rain.md.report.md"]
    await fs.mkdir(".sessions/s1")
    assert await fs.listdir("user/default/.sessions") == ["s1"]
    await fs.rmdir("user/default/.sessions/s1")
    assert await fs.listdir(".sessions") == []
