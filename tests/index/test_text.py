"""TextIndex over real tantivy: stemming, replace, delete, free-text queries, scoping."""

from __future__ import annotations

from pathlib import Path

import pytest

from contextfs.errors import ContextFSError, IndexBusy, IndexCorrupt
from contextfs.index.text import TextHit, TextIndex
from contextfs.index.units import Unit

META = {
    1: ("user/alice", "preference", "user/alice/preferences/editor"),
    2: ("user/alice", "preference", "user/alice/preferences/editor-font"),
    3: ("user/alice", "fact", "user/alice/facts/birthday"),
    4: ("user/bob", "preference", "user/bob/preferences/editor"),
}


def node_units(node_id: int, l0: str, l1: str, l2: str) -> list[Unit]:
    """A node's L0 and L1 units as the indexer makes them (`search.indexer.units_of`)."""
    assert not l2  # these tests index short tiers only
    return [
        Unit(node_id, tier, 0, text.strip())
        for tier, text in (("L0", l0), ("L1", l1))
        if text.strip()
    ]


def fill(index: TextIndex) -> None:
    index.upsert(
        node_units(1, "Editor", "Alice would prefer vim with relative line numbers.", ""), META
    )
    index.upsert(node_units(2, "Font", "She likes a large monospace font in editors.", ""), META)
    index.upsert(node_units(3, "Birthday", "Alice was born on the fourth of July.", ""), META)
    index.upsert(node_units(4, "Editor", "Bob prefers emacs, and org-mode for notes.", ""), META)


@pytest.fixture
def index() -> TextIndex:
    ix = TextIndex(None)
    fill(ix)
    yield ix
    ix.close()


def nodes(hits: list[TextHit]) -> list[int]:
    return [h.node_id for h in hits]


def test_stemming_finds_other_forms(index: TextIndex):
    hits = index.search("preferences", 10)
    assert set(nodes(hits)) == {1, 4}  # "prefer" and "prefers"
    assert all(h.tier == "L1" and h.chunk == 0 for h in hits)
    assert set(nodes(index.search("EDITORS", 10))) == {1, 2, 4}  # "Editor", "editors"


def test_hits_are_ranked_with_scores_and_snippets(index: TextIndex):
    hits = index.search("alice vim", 10)
    assert hits[0].node_id == 1
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert all(h.score > 0 for h in hits)
    assert len(index.search("alice", 1)) == 1


def test_a_snippet_is_the_short_part_of_a_text_that_matches():
    ix = TextIndex(None)
    long = (
        "Filler sentence about nothing in particular. " * 40
        + "The secret word is aardvark. "
        + "More filler text follows here. " * 40
    )
    ix.upsert([Unit(9, "L2", 0, long)], {9: ("user/x", "note", "user/x/notes/n")})
    (hit,) = ix.search("aardvark", 5)
    snippet = ix.snippet("the AARDVARKS", long)  # its words as indexed: stemmed, any case
    assert "aardvark" in snippet and len(snippet) <= 200
    head = ix.snippet("zebra", long)  # no word of it in the text: its head
    assert head.endswith("…") and long.startswith(head[:-1]) and len(head) <= 200


def test_upsert_replaces_a_nodes_documents(index: TextIndex):
    before = index.count()
    index.upsert(node_units(1, "Editor", "Alice now uses helix.", ""), META)
    assert index.count() == before
    assert 1 not in nodes(index.search("vim", 10))
    assert nodes(index.search("helix", 10)) == [1]
    # a node that shrinks from many chunks to one loses the extra chunks
    many = [Unit(1, "L2", i, f"chunk {i} of the zebra story") for i in range(5)]
    index.upsert(many, META)
    assert index.count() == before - 2 + 5
    index.upsert([Unit(1, "L0", 0, "zebra")], META)
    assert index.count() == before - 2 + 1
    assert len(index.search("zebra", 10)) == 1


def test_delete_nodes_really_deletes(index: TextIndex):
    index.delete_nodes([1, 3, 12345])
    assert index.count() == 4
    assert nodes(index.search("vim alice birthday", 10)) == []
    assert set(nodes(index.search("editor", 10))) == {2, 4}
    index.delete_nodes([])
    assert index.count() == 4


def test_upsert_needs_meta_for_every_node(index: TextIndex):
    with pytest.raises(ValueError):
        index.upsert([Unit(77, "L0", 0, "x")], META)
    assert index.count() == 8  # nothing half-written


@pytest.mark.parametrize(
    "query",
    [
        '"unbalanced',
        "a:b",
        "text:vim",
        "(vim",
        "vim)",
        "-vim",
        "+vim",
        "*",
        "vim*",
        "?",
        "~2",
        "^3",
        "vim^",
        "[a TO b]",
        "{x}",
        "AND",
        "OR vim",
        "NOT",
        "vim AND",
        "a && b || !c",
        "\\",
        "/regex/",
        "'",
        "ünïcödé 日本語 🙂",
        "",
        "   ",
        "\x00\udc80",
        "IN [a b]",
        "node_id:1",
        "path:user/alice",
        "é" * 100,
        "x" * 10_000,
        "vim " * 500,
    ],
)
def test_free_text_queries_never_raise(index: TextIndex, query: str):
    hits = index.search(query, 5)
    assert isinstance(hits, list)


def test_special_characters_still_match_words(index: TextIndex):
    assert nodes(index.search('"vim":(relative) -numbers*', 10))[0] == 1
    assert nodes(index.search("org-mode?", 10)) == [4]


def test_path_prefix_scopes_hits(index: TextIndex):
    assert set(nodes(index.search("editor", 10, path_prefix="user/alice/"))) == {1, 2}
    assert nodes(index.search("editor", 10, path_prefix="user/bob/")) == [4]
    # a node path as prefix also matches its siblings that extend the name...
    assert set(nodes(index.search("editor", 10, path_prefix="user/alice/preferences/editor"))) == {
        1,
        2,
    }
    # ...and one ending in "/" does not match the node itself
    assert nodes(index.search("editor", 10, path_prefix="user/carol/")) == []
    assert nodes(index.search("alice", 10, path_prefix="user/alice/facts/")) == [3]
    # prefixes with regex or query syntax in them are plain strings
    assert index.search("editor", 10, path_prefix="user/.*") == []
    assert index.search("editor", 10, path_prefix='user/(a"*') == []
    assert len(index.search("editor", 10, path_prefix="")) == 3


@pytest.mark.parametrize(
    "prefix,expected",
    [
        ("user/a.b (x)/", {10, 11}),
        ("user/a.b (x)/[n]*", {10}),
        ("user/a.b (x)/[n]", {10}),
        ("user/a.b (x)/[", {10}),
        ("user/a.b (x)/ü", {11}),
        ("user/a.b (x)/üñ\\", {11}),
        ("user/a.b", {10, 11}),
        ("user/a.b (x)/\udc80", {10, 11}),
        ("user/a", {10, 11}),
        ("user/a.", {10, 11}),
        ("user/aXb", set()),
        ("user/a.b (x)/[n]*.md", {10}),
        ("user/a.b (x)/[n]*.mdx", set()),
        ("user/a.b (x)/[n]X", set()),
    ],
)
def test_path_prefix_is_literal(prefix: str, expected: set[int]):
    ix = TextIndex(None)
    ix.upsert(
        [Unit(10, "L0", 0, "kiwi"), Unit(11, "L0", 0, "kiwi"), Unit(12, "L0", 0, "kiwi")],
        {
            10: ("user/a", "t", "user/a.b (x)/[n]*.md"),
            11: ("user/a", "t", "user/a.b (x)/üñ\\$^|{1}"),
            12: ("user/q", "t", "user/q\nline/x"),
        },
    )
    assert set(nodes(ix.search("kiwi", 10, path_prefix=prefix))) == expected
    assert set(nodes(ix.search("kiwi", 10, path_prefix="user/q\nl"))) == {12}


def test_scoped_scores_equal_unscoped_scores(index: TextIndex):
    everywhere = {h.node_id: h.score for h in index.search("editor", 10)}
    scoped = index.search("editor", 10, path_prefix="user/bob/")
    assert scoped[0].score == pytest.approx(everywhere[4])


def test_persistence_across_reopen(tmp_path: Path):
    path = tmp_path / "text"
    ix = TextIndex(path)
    fill(ix)
    ix.delete_nodes([3])
    ix.close()
    ix.close()  # idempotent
    again = TextIndex(path)
    try:
        assert again.count() == 6
        assert set(nodes(again.search("prefer", 10))) == {1, 4}
        again.upsert(
            node_units(5, "New", "A new note about kayaks.", ""),
            {5: ("user/alice", "note", "user/alice/notes/kayak")},
        )
        assert nodes(again.search("kayak", 10)) == [5]
    finally:
        again.close()


def test_one_writer_per_index(tmp_path: Path):
    path = tmp_path / "text"
    first = TextIndex(path)
    first.upsert([Unit(1, "L0", 0, "hello")], {1: META[1]})
    second = TextIndex(path)  # readers are fine
    try:
        assert second.count() == 1
        with pytest.raises(IndexBusy):
            second.delete_nodes([1])
    finally:
        second.close()
        first.close()


def _damage_meta(path: Path) -> None:
    (path / "meta.json").write_text("garbage{")


def _damage_segments(path: Path) -> None:
    for f in path.iterdir():
        if f.suffix in (".store", ".term", ".idx"):
            with open(f, "r+b") as fh:
                fh.truncate(3)


def _damage_schema(path: Path) -> None:
    import tantivy

    path.joinpath("meta.json").unlink()
    for f in path.iterdir():
        f.unlink()
    sb = tantivy.SchemaBuilder()
    sb.add_text_field("something_else", stored=True)
    other = tantivy.Index(sb.build(), str(path))
    w = other.writer(15_000_000, 1)
    w.add_document(tantivy.Document(something_else="x"))
    w.commit()
    w.wait_merging_threads()


@pytest.mark.parametrize("damage", [_damage_meta, _damage_segments, _damage_schema])
def test_unreadable_dir_is_index_corrupt(tmp_path: Path, damage):
    path = tmp_path / "text"
    ix = TextIndex(path)
    fill(ix)
    ix.close()
    damage(path)
    with pytest.raises(IndexCorrupt) as info:
        TextIndex(path)
    assert isinstance(info.value, ContextFSError)


def test_fresh_dir_and_in_memory_start_empty(tmp_path: Path):
    on_disk = TextIndex(tmp_path / "new" / "text")
    assert on_disk.count() == 0
    assert on_disk.search("anything", 5) == []
    on_disk.close()
    with TextIndex(None) as mem:
        assert mem.count() == 0


def test_a_batch_left_uncommitted_is_searchable_after_commit(tmp_path: Path):
    """A rebuild adds its batches uncommitted and commits every few thousand nodes: what
    waits is not yet found, and after `commit()` it is, on disk too (a reopened index)."""
    ix = TextIndex(tmp_path / "text")
    ix.upsert(node_units(1, "Editor", "Alice would prefer vim.", ""), META)
    ix.upsert(node_units(4, "Editor", "Bob prefers emacs and org-mode.", ""), META, commit=False)
    assert nodes(ix.search("emacs", 10)) == []
    assert nodes(ix.search("vim", 10)) == [1]
    ix.commit()
    assert nodes(ix.search("emacs", 10)) == [4]
    ix.close()
    again = TextIndex(tmp_path / "text")
    assert nodes(again.search("emacs", 10)) == [4] and again.count() == 4
    again.close()


def test_a_staged_write_is_searchable_at_once_and_ranked_as_after_its_commit(tmp_path: Path):
    """fsync stages its node (a tantivy commit costs 8-20 ms whatever it holds): it is
    found before the commit, ranked among committed units by the same BM25, and a staged
    replacement or deletion hides what the committed index still holds of the node."""
    ix = TextIndex(tmp_path / "text")
    fill(ix)
    more = {5: ("user/alice", "preference", "user/alice/preferences/shell")}
    shell = node_units(5, "Shell", "Alice uses vim keys in zsh, like in her editor.", "")
    ix.upsert(shell, more, commit=False, stage=True)
    assert ix.staged_units == 2 and ix.staged_since is not None
    staged = ix.search("alice editor vim", 10)
    assert 5 in nodes(staged)
    # the filters hold for staged units as for committed ones
    assert nodes(ix.search("zsh", 10, path_prefix="user/bob/")) == []
    assert nodes(ix.search("zsh", 10, types=("fact",))) == []
    assert nodes(ix.search("editor", 10, require="zsh")) == [5]
    ix.commit()
    assert ix.staged_units == 0 and ix.staged_since is None
    committed = ix.search("alice editor vim", 10)
    assert [(h.node_id, h.tier) for h in committed] == [(h.node_id, h.tier) for h in staged]
    for a, b in zip(staged, committed, strict=True):  # the same statistics and formula
        assert a.score == pytest.approx(b.score, rel=0.25)
    # replaced: the committed "vim" of node 1 is no longer its text
    ix.upsert(node_units(1, "Editor", "Alice moved to helix last spring.", ""), META, stage=True)
    assert 1 not in nodes(ix.search("vim", 10)) and nodes(ix.search("helix", 10)) == [1]
    ix.delete_nodes([4], stage=True)  # deleted: the committed emacs is gone
    assert nodes(ix.search("emacs", 10)) == []
    ix.commit()
    assert 1 not in nodes(ix.search("vim", 10)) and nodes(ix.search("emacs", 10)) == []
    ix.close()


def test_units_of_equal_score_come_older_node_first_whatever_the_segments(tmp_path: Path):
    """Eight nodes of the same words, each committed in a segment of its own and in no
    order: tantivy lists equal scores by where their documents are, which a merge changes
    (the same question listed its ties in another order after the next commit). The older
    node (lower id) goes first, staged or committed."""
    ix = TextIndex(tmp_path / "text")
    meta = {i: ("user/alice", "preference", f"user/alice/preferences/n{i}") for i in range(1, 10)}
    for i in (3, 1, 7, 2, 8, 5, 4, 6):
        ix.upsert(node_units(i, "Same", "Alice likes green tea.", ""), {i: meta[i]})
    hits = ix.search("alice green tea", 20)
    assert [(h.node_id, h.tier) for h in hits if h.tier == "L1"] == [
        (i, "L1") for i in (1, 2, 3, 4, 5, 6, 7, 8)
    ]
    ix.upsert(node_units(9, "Same", "Alice likes green tea.", ""), {9: meta[9]}, stage=True)
    staged = [h.node_id for h in ix.search("alice green tea", 20) if h.tier == "L1"]
    assert 9 in staged and [i for i in staged if i != 9] == [1, 2, 3, 4, 5, 6, 7, 8]
    ix.commit()
    committed = [h.node_id for h in ix.search("alice green tea", 20) if h.tier == "L1"]
    assert committed == [1, 2, 3, 4, 5, 6, 7, 8, 9]
    ix.close()


def test_close_commits_what_is_staged_and_a_failed_write_keeps_it(tmp_path: Path):
    ix = TextIndex(tmp_path / "text")
    fill(ix)
    more = {5: ("user/alice", "preference", "user/alice/preferences/shell")}
    ix.upsert(node_units(5, "Shell", "She uses fish.", ""), more, stage=True)
    with pytest.raises(ValueError):  # no meta for node 6: nothing of this call is written
        ix.upsert(node_units(6, "Pager", "less -R.", ""), more, stage=True)
    assert nodes(ix.search("fish", 10)) == [5]
    ix.close()
    again = TextIndex(tmp_path / "text")
    assert nodes(again.search("fish", 10)) == [5]
    again.close()


def test_a_staged_node_committed_before_is_found_and_scored_as_tantivy_scores_it(
    tmp_path: Path,
):
    """An fsync of a node the index committed before: its old units are deleted but not
    merged away yet, and tantivy still counts them in a term's frequency and in the unit
    count (not in `num_docs`). Scored with `num_docs`, "release" in the staged units got
    a negative weight and a question right after the fsync found nothing."""
    ix = TextIndex(tmp_path / "text")
    meta = {9: ("user/default", "preference", "user/default/preferences/release")}
    question = "release pipeline ci runner"
    text = "Release pipeline notes for the ci runner."
    for n in range(4):  # each version committed beside another note, then replaced
        meta[n] = ("user/default", "case", f"user/default/cases/c{n}")
        ix.upsert(node_units(9, text, text, "") + node_units(n, f"Case {n}", "", ""), meta)
    ix.upsert(node_units(9, text, text, ""), meta, stage=True)
    assert set(nodes(ix.search(question, 10))) == {9}
    assert set(nodes(ix.search("pipeline", 10, require="release runner"))) == {9}
    ix.commit()
    # among a hundred other notes, two of them about pipelines: the staged units score
    # as they do once committed
    others = {n: ("user/default", "case", f"user/default/cases/c{n}") for n in range(100, 200)}
    ix.upsert(
        [
            u
            for n in others
            for u in node_units(n, f"Case {n}", f"Note {n} on the build pipeline." * (n < 102), "")
        ],
        others,
    )
    ix.upsert(node_units(9, "Release", "Release notes for the ci runner pipeline.", ""), meta)
    ix.upsert(node_units(9, text, text, ""), meta, stage=True)
    staged = ix.search(question, 10)
    ix.commit()
    committed = ix.search(question, 10)
    assert [(h.node_id, h.tier) for h in staged] == [(h.node_id, h.tier) for h in committed]
    for a, b in zip(staged, committed, strict=True):  # the statistics tantivy would use
        assert a.score == pytest.approx(b.score, rel=0.25)
    ix.close()


def test_a_rust_panic_in_tantivy_is_raised_as_an_ordinary_error() -> None:
    """pyo3 raises a Rust panic as PanicException, a BaseException, which the indexer's
    and the daemon's `except Exception` would let through up to the mount's nursery;
    TextIndex's writes and searches raise it as a RuntimeError (`_panics_raised`)."""
    from contextfs.index.text import _panics_raised

    class PanicException(BaseException):  # pyo3_runtime.PanicException's shape
        pass

    @_panics_raised
    def panics() -> None:
        raise PanicException("index out of bounds")

    with pytest.raises(RuntimeError, match="tantivy panicked: index out of bounds"):
        panics()

    @_panics_raised
    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):  # never swallowed or turned into an error
        interrupted()
