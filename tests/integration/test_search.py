"""Search is reading (SPEC §4) on a real mount with the real model and real indexes."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path

import pytest
import tantivy

from contextfs.fs.roles.query import RETIRED_FOR
from contextfs.memory.tokens import estimate_tokens
from contextfs.testing import Mount
from contextfs.testing.search_corpus import SCOPED, TARGETS, filler
from tests.fake_openai import FakeOpenAI

pytestmark = pytest.mark.timeout(600)


def write_node(root: Path, rel: str, text: str, *, fsync: bool = False) -> None:
    node = root / rel
    node.mkdir(exist_ok=True)
    fd = os.open(node / "L2.md", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, text.encode())
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def qdir(root: Path, question: str, scope: str = "", opts: str = "") -> Path:
    base = root / scope / ".query" if scope else root / ".query"
    if opts:
        base = base / opts
    return base / urllib.parse.quote(question, safe=" ?',")


def results(root: Path, question: str, scope: str = "", opts: str = "") -> list[dict]:
    return json.loads((qdir(root, question, scope, opts) / "_results.json").read_text())["hits"]


def wait_indexed(m: Mount, timeout: float = 120) -> str:
    """Until .status says the index caught up with every commit."""
    deadline = time.monotonic() + timeout
    while True:
        status = m.status()
        line = next((ln for ln in status.splitlines() if ln.startswith("index_generation")), "")
        if "index: ready" in status and line.endswith("queue 0)"):
            return status
        assert time.monotonic() < deadline, status
        time.sleep(0.2)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Mount:
    base = tmp_path_factory.mktemp("search")
    (base / "mnt").mkdir()
    m = Mount(base / "mnt", base / "data", search=True)
    m.start()
    root = m.path
    for owner in ("user/alice", "user/bob", "agent/helper"):
        (root / owner).mkdir()
    for rel, text in filler():
        write_node(root, rel, text)
    for t in TARGETS:
        write_node(root, t.path, t.text + "\n")
    write_node(root, "user/alice/preferences/last", "The last note.\n", fsync=True)
    wait_indexed(m)  # fsync waits for BM25 only; these tests measure both sides
    yield m
    if m.proc is not None:
        m.stop()
    assert m.fsck() == []


def test_questions_phrased_differently_find_their_node(corpus):
    misses = []
    for t in TARGETS:
        hits = results(corpus.path, t.question, t.scope)
        top = hits[0]["path"] if hits else None
        if top != t.path:
            misses.append(f"{t.question!r}: expected {t.path}, got {[h['path'] for h in hits[:3]]}")
    assert len(TARGETS) >= 20
    assert misses == []


def test_scope_isolates_owners(corpus):
    for scope, question, expected in SCOPED:
        hits = results(corpus.path, question, scope)
        assert hits[0]["path"] == expected
        assert all(h["path"].startswith(scope + "/") for h in hits), hits
    # a node or type directory can be a scope too
    hits = results(corpus.path, "dog", "user/alice/entities")
    assert hits and all(h["path"].startswith("user/alice/entities/") for h in hits)


def test_ls_shows_ranked_links_and_files(corpus):
    d = qdir(corpus.path, "what kind of dog does she own")
    names = sorted(os.listdir(d))
    assert names[-2:] == ["_context.md", "_results.json"]
    links = names[:-2]
    assert links[0] == "01_rex" and links[1].startswith("02_")
    assert os.readlink(d / links[0]).endswith("user/alice/entities/rex")
    assert not os.readlink(d / links[0]).startswith("/"), "relative symlinks"
    assert "golden retriever" in (d / links[0] / "L2.md").read_text()
    hit = results(corpus.path, "what kind of dog does she own")[0]
    assert set(hit) >= {"path", "score", "tiers", "snippet"} and hit["tiers"]


def test_answer_files_size_is_their_bytes_listed_or_read_first(corpus):
    """`_results.json` is rendered when first asked for: `ls -l` (a readdirplus listing) and
    a direct `stat` report the size a read then returns, and `wc -c` equals it."""
    listed = qdir(corpus.path, "which dog breed is rex")
    ls = subprocess.run(["ls", "-ln", str(listed)], capture_output=True, text=True, check=True)
    sizes = {ln.split()[-1]: int(ln.split()[4]) for ln in ls.stdout.splitlines()[1:]}
    assert sizes["_results.json"] == len((listed / "_results.json").read_bytes())
    assert sizes["_context.md"] == len((listed / "_context.md").read_bytes())
    direct = qdir(corpus.path, "what does rex the dog eat") / "_results.json"
    size = os.stat(direct).st_size
    data = direct.read_bytes()
    assert size == len(data) and json.loads(data)["hits"]
    wc = subprocess.run(["wc", "-c", str(direct)], capture_output=True, text=True, check=True)
    assert int(wc.stdout.split()[0]) == size


def test_context_holds_the_matched_passages_within_budget(corpus):
    q = "which text editor does she use for programming"
    for budget in (60, 200, 800, 3000):
        text = (qdir(corpus.path, q, opts=f"@budget={budget}") / "_context.md").read_text()
        assert estimate_tokens(text) <= budget, (budget, estimate_tokens(text))
    d = qdir(corpus.path, q, opts="@budget=200")
    text = (d / "_context.md").read_text()
    # a top hit's matched text comes first, under its path and date (the links rank nodes,
    # the bundle passages: two fusions, which may swap close neighbours)
    top = [os.readlink(d / n).lstrip("./") for n in sorted(os.listdir(d))[:3]]
    first = text.index("\n## ")
    assert any(text[first:].startswith(f"\n## {path}") for path in top), (top, text[:300])
    assert "searched by BM25 + vectors" in text
    text = (qdir(corpus.path, q, opts="@budget=800") / "_context.md").read_text()
    assert "user/alice/preferences/editor · " in text and "Neovim" in text
    default = (qdir(corpus.path, q) / "_context.md").read_text()
    assert estimate_tokens(default) <= 2000


def test_options_and_their_errors(corpus):
    hits = results(corpus.path, "alice", opts="@k=3")
    assert len(hits) == 3
    events = results(corpus.path, "what happened", opts="@type=event,k=5")
    assert events and all("/events/" in h["path"] for h in events)
    for bad in ("@k=0", "@k=abc", "@colour=red", "@type=nosuchtype", "@budget"):
        with pytest.raises(OSError) as err:
            os.listdir(corpus.path / ".query" / bad / "anything")
        assert err.value.errno == errno.EINVAL, bad
    status = corpus.status()
    assert "unknown query option 'colour'" in status and "nosuchtype" in status


def test_percent_encoded_slash_and_percent(corpus):
    write_node(
        corpus.path,
        "user/alice/preferences/ratio",
        "Her ideal work/life balance is 80% focus time and 20% meetings.\n",
        fsync=True,
    )
    d = corpus.path / ".query" / "work%2Flife balance 80%25 focus"
    hits = json.loads((d / "_results.json").read_text())
    assert hits["question"] == "work/life balance 80% focus"
    assert hits["hits"][0]["path"] == "user/alice/preferences/ratio"


def test_query_is_listed_only_at_the_root(corpus):
    assert ".query" in os.listdir(corpus.path)
    assert ".query" not in os.listdir(corpus.path / "user/alice")
    assert os.listdir(corpus.path / ".query") == []
    found = subprocess.run(
        ["find", str(corpus.path / "user")], capture_output=True, text=True, check=True
    ).stdout
    assert "/.query" not in found
    assert (corpus.path / "user/alice/.query").is_dir()


def test_fsync_makes_the_node_searchable_and_its_vectors_follow(corpus):
    write_node(
        corpus.path,
        "user/alice/preferences/kite",
        "She flies a red zephyrkite on windy Sunday afternoons.\n",
        fsync=True,
    )
    assert results(corpus.path, "zephyrkite")[0]["path"] == "user/alice/preferences/kite"
    # fsync promises BM25; the vectors follow through the urgent lane, moments later
    deadline = time.monotonic() + 30
    while "indexed_version: 1\n" not in (
        meta := (corpus.path / "user/alice/preferences/kite/meta.yaml").read_text()
    ):
        assert time.monotonic() < deadline, meta
        time.sleep(0.05)
    assert "version: 1\n" in meta
    write_node(
        corpus.path,
        "user/alice/preferences/kite",
        "She gave up kites for a blue quokkaboard.\n",
        fsync=True,
    )
    assert results(corpus.path, "quokkaboard")[0]["path"] == "user/alice/preferences/kite"
    status = corpus.status()
    assert "embedding_model: all-MiniLM-L6-v2 (384-d)" in status
    assert "index_generation:" in status


def test_search_command_prints_hits(corpus):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "contextfs",
            "search",
            str(corpus.path),
            "what vehicle does she drive",
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0].split()[-2] == "user/alice/entities/car"
    # a question that starts with @, or is a dot, is a question, not options or a folder
    for question in ("@alice what vehicle does she drive", ".", "50% of a/b"):
        r = subprocess.run(
            [sys.executable, "-m", "contextfs", "search", str(corpus.path), question],
            capture_output=True,
            text=True,
        )
        assert r.returncode == 0, (question, r.stdout + r.stderr)


def test_deleted_nodes_leave_the_results(corpus):
    write_node(
        corpus.path, "user/bob/preferences/gone", "Bob collects vintage xylobanjos.\n", fsync=True
    )
    assert results(corpus.path, "xylobanjos")[0]["path"] == "user/bob/preferences/gone"
    subprocess.run(["rm", "-r", str(corpus.path / "user/bob/preferences/gone")], check=True)
    write_node(corpus.path, "user/bob/preferences/other", "Unrelated.\n", fsync=True)
    assert all(h["path"] != "user/bob/preferences/gone" for h in results(corpus.path, "xylobanjos"))


def test_ls_l_of_a_question_while_the_index_moves_on_finds_every_listed_name(corpus):
    """`ls -l` lists, then looks each name up by its path; a write indexed in between
    computes the question again and moves the ranks. Every listed name still resolves."""
    root = corpus.path
    write_node(root, "user/bob/preferences/zither", "Bob tunes a zitherwood zither.\n", fsync=True)
    d = qdir(root, "zitherwood")
    listed = sorted(n for n in os.listdir(d) if not n.startswith("_"))
    assert listed[0] == "01_zither", listed
    write_node(
        root, "user/bob/preferences/bench", "Zitherwood zitherwood bench zitherwood.\n", fsync=True
    )
    now = sorted(n for n in os.listdir(d) if not n.startswith("_"))
    assert now[:2] == ["01_bench", "02_zither"], now  # computed again: the ranks moved
    r = subprocess.run(["ls", "-l", *[str(d / n) for n in listed]], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert os.readlink(d / "01_zither").endswith("user/bob/preferences/zither")
    assert (d / "01_zither" / "L2.md").read_text() == "Bob tunes a zitherwood zither.\n"
    assert "01_zither" not in os.listdir(d), "only the new names are listed"
    time.sleep(RETIRED_FOR + 0.5)  # and a name left out resolves only for a while
    current = os.listdir(d)  # (the vectors of the last write may have moved ranks again)
    gone = [n for n in listed if n not in current]
    assert gone and not any(os.path.lexists(d / n) for n in gone), (gone, current)
    zither = [n for n in current if n.endswith("_zither")]
    assert os.readlink(d / zither[0]).endswith("user/bob/preferences/zither")


def test_inbox_memories_become_searchable_without_other_requests(corpus):
    inbox = corpus.path / ".inbox"
    (inbox / "late.jsonl").write_text(
        json.dumps(
            {
                "role": "user",
                "content": "Also, I prefer the zorblaxquin notebook over the usual ones.",
                "id": "m1",
            }
        )
        + "\n"
    )
    time.sleep(8)  # touch nothing: processing must wake the indexer by itself
    hits = results(corpus.path, "zorblaxquin")
    assert hits and "zorblaxquin" in (corpus.path / hits[0]["path"] / "L2.md").read_text()


@pytest.mark.allow_warnings
def test_kill_9_then_indexes_catch_up_and_corrupt_ones_are_rebuilt(corpus):
    m = corpus
    write_node(m.path, "user/alice/preferences/late", "She adores quinceflumble pie.\n")
    m.kill()  # closed but not fsync()ed: committed, maybe not indexed
    m.start()
    wait_indexed(m)
    assert results(m.path, "quinceflumble")[0]["path"] == "user/alice/preferences/late"
    m.stop()
    index = m.data_dir / "index"
    for snap in index.glob("snap-*"):
        (snap / "vectors.bin").write_bytes(b"garbage")
    m.expect_log.append("index files not usable")
    m.start()
    status = wait_indexed(m)
    assert "index: ready" in status
    assert results(m.path, "what kind of dog does she own")[0]["path"] == "user/alice/entities/rex"


def test_a_text_index_of_the_old_layout_is_rebuilt_at_the_mount(corpus):
    """Before, the unit text was a stored field: such an index does not open with the
    schema of today, and the mount rebuilds it from the store by itself."""
    m = corpus
    m.stop()
    text_dir = m.data_dir / "index" / "text"
    shutil.rmtree(text_dir)
    text_dir.mkdir()
    sb = tantivy.SchemaBuilder()
    sb.add_text_field("key", stored=True, tokenizer_name="raw")
    sb.add_integer_field("node_id", stored=True, indexed=True, fast=True)
    sb.add_text_field("tier", stored=True, tokenizer_name="raw")
    sb.add_integer_field("chunk", stored=True)
    sb.add_text_field("owner", tokenizer_name="raw")
    sb.add_text_field("type", tokenizer_name="raw")
    sb.add_text_field("path", stored=True, tokenizer_name="raw")
    sb.add_text_field("text", stored=True, tokenizer_name="en_stem")
    old = tantivy.Index(sb.build(), str(text_dir), reuse=True)
    writer = old.writer(15_000_000, 1)
    writer.add_document(tantivy.Document(key="1:L0:0", node_id=1, text="nothing of use"))
    writer.commit()
    writer.wait_merging_threads()
    m.new_log()
    m.start()
    wait_indexed(m)
    assert "older layout; rebuilding it" in m.new_log()
    (hit, *_) = results(m.path, "The last note")
    assert hit["path"] == "user/alice/preferences/last" and "last note" in hit["snippet"]


def test_reindex_rebuilds_from_the_store(corpus):
    m = corpus
    m.stop()
    r = subprocess.run(
        [sys.executable, "-m", "contextfs", "reindex", str(m.data_dir)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    assert "reindexed" in r.stderr and "nodes" in r.stderr
    meta = json.loads((m.data_dir / "index/index.json").read_text())
    m.new_log()
    m.start()
    status = wait_indexed(m)
    assert f"index_generation: {meta['generation']} " in status
    assert "from scratch" not in m.new_log(), "the rebuilt index is used as it is"
    assert (
        results(m.path, "root cause of the database outage")[0]["path"]
        == "agent/helper/cases/disk-full"
    )


def fake_embeddings(dim: int = 64, gate: threading.Event | None = None) -> FakeOpenAI:
    """/v1/embeddings with bag-of-words vectors, so equal words make similar vectors;
    with `gate`, every answer waits until it is set (a model that takes long to load)."""
    import hashlib

    import numpy as np

    def vec(text: str) -> list[float]:
        v = np.zeros(dim)
        for w in text.lower().split():
            v[int(hashlib.md5(w.strip(".,?").encode()).hexdigest(), 16) % dim] += 1
        n = np.linalg.norm(v) or 1.0
        return (v / n).tolist()

    def respond(body: dict) -> dict:
        if gate is not None:
            gate.wait(120)
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        data = [
            {"object": "embedding", "index": i, "embedding": vec(t)} for i, t in enumerate(inputs)
        ]
        return {
            "object": "list",
            "data": data,
            "model": body["model"],
            "usage": {"prompt_tokens": 1, "total_tokens": 1},
        }

    return FakeOpenAI("/v1/embeddings", respond)


def openai_mount(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake: FakeOpenAI) -> Mount:
    """A started mount whose embedder is the OpenAI-compatible endpoint `fake`."""
    monkeypatch.setenv("FAKE_EMBED_KEY", "sk-test")
    data = tmp_path / "data"
    data.mkdir()
    (data / "config.yaml").write_text(
        f"embedder: openai\nembed_base_url: {fake.url}\nembed_model: fake-embed\n"
        "embed_api_key_env: FAKE_EMBED_KEY\n"
    )
    (tmp_path / "mnt").mkdir()
    m = Mount(tmp_path / "mnt", data)
    m.start()
    return m


@pytest.mark.allow_warnings
def test_openai_compatible_embedder_and_model_change_rebuilds(tmp_path, monkeypatch):
    fake = fake_embeddings()
    m = openai_mount(tmp_path, monkeypatch, fake)
    data = tmp_path / "data"
    try:
        write_node(
            m.path,
            "user/default/preferences/tea",
            "Green tea with jasmine every afternoon.\n",
            fsync=True,
        )
        write_node(
            m.path,
            "user/default/preferences/bikes",
            "Rides a steel touring bicycle to work.\n",
            fsync=True,
        )
        assert results(m.path, "jasmine tea")[0]["path"] == "user/default/preferences/tea"
        wait_indexed(m)  # fsync waits for what is loaded, not for the model
        assert "embedding_model: fake-embed (64-d)" in m.status()
        assert fake.calls > 0, "the real openai client talked to the endpoint"
        m.stop()
        # the same store with the local model: the 64-d index is rebuilt, never mixed
        (data / "config.yaml").write_text("embedder: local\n")
        m.expect_log.append("index files not usable")
        m.start()
        status = wait_indexed(m)
        assert "all-MiniLM-L6-v2 (384-d)" in status
        meta = json.loads((data / "index/index.json").read_text())
        assert meta["model"] == "all-MiniLM-L6-v2" and meta["dim"] == 384
        assert (
            results(m.path, "what does she cycle on")[0]["path"] == "user/default/preferences/bikes"
        )
    finally:
        if m.proc is not None:
            m.stop()
        fake.close()
    assert m.fsck() == []


def test_bm25_answers_from_the_first_second(tmp_path, monkeypatch):
    """While the embedding model loads, fsync returns and BM25 finds the write; the bundle
    says which side answered; vectors join once the model is in."""
    gate = threading.Event()
    fake = fake_embeddings(gate=gate)
    m = openai_mount(tmp_path, monkeypatch, fake)
    try:
        write_node(
            m.path,
            "user/default/preferences/tea",
            "Green tea with jasmine every afternoon.\n",
            fsync=True,
        )
        status = m.status()
        assert "BM25 answers meanwhile" in status, status
        text = (qdir(m.path, "jasmine tea") / "_context.md").read_text()
        assert "user/default/preferences/tea" in text and "jasmine" in text
        assert "searched by BM25 ·" in text and "vectors not used yet" in text
        # at a tiny budget the note gives way to the hit: the bundle names it, within 50
        # tokens (it held the header and the note alone)
        tiny = qdir(m.path, "which jasmine tea every afternoon", opts="@k=1,budget=50")
        text = (tiny / "_context.md").read_text()
        lines = text.splitlines()
        assert "- user/default/preferences/tea" in lines or any(
            ln.startswith("## user/default/preferences/tea") for ln in lines
        ), text
        assert estimate_tokens(text) <= 50, text
        gate.set()
        wait_indexed(m)
        text = (qdir(m.path, "which tea with jasmine") / "_context.md").read_text()
        assert "searched by BM25 + vectors" in text and "user/default/preferences/tea" in text
    finally:
        gate.set()
        if m.proc is not None:
            m.stop()
        fake.close()
    assert m.fsck() == []


def test_a_failing_index_does_not_take_the_mount_down(tmp_path: Path) -> None:
    """An internal fault of the indexer (here its text index replaced by a file under it)
    is reported in `.status` and the log; the mount keeps serving reads and writes, and a
    remount over a sound index dir indexes what was written meanwhile."""
    (tmp_path / "mnt").mkdir()
    m = Mount(tmp_path / "mnt", tmp_path / "data", search=True)
    m.start()
    try:
        root = m.path
        (root / "user/alice").mkdir(parents=True)
        write_node(root, "user/alice/preferences/tea", "Alice drinks green tea.\n", fsync=True)
        wait_indexed(m)  # nothing is writing the index files when they are replaced
        text_dir = m.data_dir / "index/text"
        shutil.rmtree(text_dir)
        text_dir.write_text("not an index")
        for i in range(3):
            write_node(root, f"user/alice/preferences/n{i}", f"Note {i}: zorblatt coffee.\n")
        deadline = time.monotonic() + 60
        while "index_error: indexing failed" not in m.status():
            assert time.monotonic() < deadline, m.status()
            time.sleep(0.2)
        time.sleep(2)  # the retries fail too: a step that wrote nothing says nothing of it
        assert "index_error: indexing failed" in m.status()
        assert not m.died(), m.post_mortem()
        write_node(root, "user/alice/preferences/after", "Written after the fault.\n", fsync=True)
        assert (
            root / "user/alice/preferences/n2/L2.md"
        ).read_text() == "Note 2: zorblatt coffee.\n"
        assert "after" in os.listdir(root / "user/alice/preferences")
        m.stop()
        text_dir.unlink()
        m.start()
        wait_indexed(m)
        assert {h["path"] for h in results(root, "zorblatt coffee")} >= {
            f"user/alice/preferences/n{i}" for i in range(3)
        }
    finally:
        if m.proc is not None and not m.died():
            m.stop()


def test_search_command_escapes_control_bytes_and_keeps_to_the_mount(corpus):
    """Stored text printed on a terminal: an ESC sequence in a memory (a title change, a
    screen clear) is shown escaped; `--scope` is a folder of the mount, never /etc."""
    write_node(
        corpus.path,
        "user/bob/entities/term",
        "Zanzibarquux terminal \x1b]0;PWNED\x07 and \x1b[2J here.\n",
        fsync=True,
    )
    cmd = [sys.executable, "-m", "contextfs", "search", str(corpus.path)]
    r = subprocess.run([*cmd, "zanzibarquux terminal"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "user/bob/entities/term" in r.stdout and "\x1b" not in r.stdout
    assert "\\x1b]0;PWNED" in r.stdout, r.stdout
    for scope in ("/etc", "../..", "user/../../x"):
        r = subprocess.run([*cmd, "--scope", scope, "passwd"], capture_output=True, text=True)
        assert r.returncode == 2 and "a path inside the mount" in r.stderr, (scope, r.stderr)
    # a link kept in a node (an attachment) that points out of the mount is not a scope:
    # the host's folder it names is never searched nor read
    host = corpus.path.parent / "host-scope"
    (host / ".query/passwd").mkdir(parents=True, exist_ok=True)
    (host / ".query/passwd/_results.json").write_text('{"hits": [{"path": "HOST FILE"}]}')
    (host / ".query/passwd/_context.md").write_text("HOST FILE\n")
    (corpus.path / "user/bob/entities/term/out").symlink_to(host)
    for extra in ([], ["--context"]):
        r = subprocess.run(
            [*cmd, "--scope", "user/bob/entities/term/out", *extra, "passwd"],
            capture_output=True,
            text=True,
        )
        assert r.returncode == 2 and "leads outside the mount" in r.stderr, (extra, r.stderr)
        assert "HOST FILE" not in r.stdout and "Traceback" not in r.stderr, r.stderr


def test_search_command_says_why_a_search_failed(corpus, tmp_path):
    """A refused search prints the reason the mount wrote in `.status`; on a mount with
    `search: false` it says search is off (there is no `.query` to read)."""
    cmd = [sys.executable, "-m", "contextfs", "search", str(corpus.path), "coffee"]
    for extra, reason in (
        (["--budget", "5"], "query option budget must be between 50 and 100000"),
        (["--type", "no_such_type"], "no_such_type"),
    ):
        r = subprocess.run([*cmd, *extra], capture_output=True, text=True)
        assert r.returncode == 1 and "EINVAL" in r.stderr and reason in r.stderr, r.stderr
    (tmp_path / "mnt").mkdir()
    off = Mount(tmp_path / "mnt", tmp_path / "data")  # search: false
    off.start()
    try:
        r = subprocess.run(
            [sys.executable, "-m", "contextfs", "search", str(off.path), "coffee"],
            capture_output=True,
            text=True,
        )
        assert r.returncode == 1 and "search is off on this mount" in r.stderr, r.stderr
        assert f"search: false in {off.data_dir}/config.yaml" in r.stderr, r.stderr
    finally:
        off.stop()
