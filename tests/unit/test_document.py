"""Front matter parsing and rendering, field merge ops, and aggregation of body items."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextfs.ctxtypes import ContextType, FieldSpec, builtin_schema_dir, load_types
from contextfs.errors import InvalidInput
from contextfs.memory.document import (
    Document,
    aggregate_documents,
    body_items,
    is_near_duplicate,
    merge_documents,
    normalize_item,
    parse_document,
    render_document,
    superseded,
)
from contextfs.memory.strategies import combine_keeping_person_text

TYPES = load_types([builtin_schema_dir()])


def make_type(body_merge: str = "replace", mode: str = "merge", **ops: tuple[str, str]):
    return ContextType(
        name="thing",
        description="test",
        scope="user",
        directory="things/{key}",
        mode=mode,
        fields=(
            FieldSpec("key", "string", required=True, merge="immutable"),
            *(FieldSpec(name, ftype, merge=op) for name, (ftype, op) in ops.items()),
        ),
        body_merge=body_merge,
        l0_max_chars=120,
        l1_max_chars=1500,
        extraction="",
        half_life_days=None,
        min_importance=0.0,
        source="test",
    )


# --- parse -----------------------------------------------------------------------------


def test_parse_without_front_matter() -> None:
    text = "# Title\n\nJust text.\n"
    assert parse_document(text) == Document(fields={}, body=text)
    assert parse_document("") == Document(fields={}, body="")
    assert parse_document("--- not a fence\n") == Document({}, "--- not a fence\n")


def test_parse_front_matter() -> None:
    doc = parse_document("---\ntopic: editor\nvalue: vim\n---\n\nI like vim.\n")
    assert doc.fields == {"topic": "editor", "value": "vim"}
    assert doc.body == "I like vim.\n"  # one blank line after the fence is not body
    doc = parse_document("---\ntopic: x\n...\nbody")
    assert doc == Document({"topic": "x"}, "body")
    assert parse_document("---\n---\n") == Document({}, "")
    assert parse_document("---\ndate: 2024-01-02\n---\n\n\nx").body == "\nx"
    assert parse_document("---\ndate: 2024-01-02\n---\n").fields == {"date": dt.date(2024, 1, 2)}


def test_parse_keeps_words_that_yaml11_calls_booleans() -> None:
    doc = parse_document("---\nanswer: no\ncountry: NO\nflag: true\n---\n")
    assert doc.fields == {"answer": "no", "country": "NO", "flag": True}


def test_parse_crlf_and_bom() -> None:
    doc = parse_document("\ufeff---\r\ntopic: a\r\n---\r\n\r\nbody\r\n")
    assert doc.fields == {"topic": "a"}
    assert doc.body == "body\r\n"


@pytest.mark.parametrize(
    ("text", "line", "needle"),
    [
        ("---\ntopic: a\n", 1, "never closed"),
        ("---\ntopic: a\nvalue: [x\n---\nbody\n", 4, ""),
        ("---\ntopic: a\n  bad: indent\n---\n", 3, ""),
        ("---\n- a\n- b\n---\n", 2, "must be a mapping"),
        ("---\n\n# c\njust a string\n---\n", 4, "must be a mapping"),
        ("---\ntopic: a\n1: x\n---\n", 3, "field names must be text"),
        ("---\ntopic: a\nvalue: b\ntopic: c\n---\n", 4, "duplicate key 'topic'"),
        ("---\ntopic: a\nwhen: 2024-13-45\n---\n", 3, "when: month"),
        ("---\nwhen: 2024-02-30\ntopic: a\n---\n", 2, "when: day is out of range"),
        ("---\ntopic: a\nvalue: \x01\n---\n", 3, "control characters"),
        ("---\ntopic: !!python/object:os.system x\n---\n", 2, "constructor"),
    ],
)
def test_parse_errors_have_file_lines(text: str, line: int, needle: str) -> None:
    with pytest.raises(InvalidInput) as err:
        parse_document(text)
    assert err.value.reason.startswith(f"front matter line {line}: "), err.value.reason
    assert needle in err.value.reason


# --- render ----------------------------------------------------------------------------


def test_render_orders_fields_by_type() -> None:
    pref = TYPES["preference"]
    doc = Document({"zeta": 1, "value": "vim", "alpha": 2, "topic": "editor"}, "Body.\n")
    assert render_document(pref, doc) == (
        "---\ntopic: editor\nvalue: vim\nalpha: 2\nzeta: 1\n---\nBody.\n"
    )
    assert render_document(None, Document({}, "plain\n")) == "plain\n"


def test_render_multiline_and_unicode() -> None:
    doc = Document({"reason": "line one\nline two\n", "name": "Zoë", "tags": ["a", "b"]}, "")
    text = render_document(None, doc)
    assert "reason: |\n  line one\n  line two\n" in text
    assert "name: Zoë" in text
    assert "tags:\n- a\n- b\n" in text
    assert parse_document(text) == doc


def test_render_protects_a_body_that_looks_like_front_matter() -> None:
    doc = Document({}, "---\nnot: fields\n---\n")
    assert parse_document(render_document(None, doc)) == doc


def test_render_round_trips_shared_values_without_anchors() -> None:
    shared = ["a", "b"]
    text = render_document(None, Document({"x": shared, "y": shared}, ""))
    assert "&" not in text and "*" not in text


_tricky = st.sampled_from(
    ["...\n", "---\n", "a\n...\n", "x\n\n\n", "|", "- x", "yes", "No", "null", "~", "1e3",
     "2024-01-01", "\ufeff", " lead", "trail \n", "#c", "a: b", "\x85", "\u2028"]
)  # fmt: skip
_scalars = st.one_of(
    _tricky,
    st.text(max_size=30),
    st.integers(min_value=-(10**12), max_value=10**12),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.dates(),
)
_values = st.one_of(
    _scalars,
    st.lists(st.text(max_size=15), max_size=4),
    st.dictionaries(st.text(min_size=1, max_size=8), _scalars, max_size=3),
)


@given(
    fields=st.dictionaries(st.text(min_size=1, max_size=12), _values, max_size=5),
    body=st.text(max_size=200),
)
def test_parse_render_round_trip(fields: dict, body: str) -> None:
    doc = Document(fields=fields, body=body)
    assert parse_document(render_document(None, doc)) == doc


@given(body=st.text(max_size=300))
def test_render_parse_round_trip_of_plain_text(body: str) -> None:
    try:
        doc = parse_document(body)
    except InvalidInput:
        return
    again = parse_document(render_document(None, doc))
    assert again == doc


# --- merge -----------------------------------------------------------------------------


def test_merge_replace_and_body_replace() -> None:
    pref = TYPES["preference"]
    old = Document({"topic": "editor", "value": "emacs"}, "Old text.\n")
    new = Document({"topic": "editor", "value": "vim"}, "New text.\n")
    assert merge_documents(pref, old, new) == Document(
        {"topic": "editor", "value": "vim"}, "New text.\n"
    )
    # An empty new body keeps the old one; a field the write omits stays.
    kept = merge_documents(pref, old, Document({"reason": "fast"}, "  \n"))
    assert kept.body == "Old text.\n"
    assert kept.fields == {"topic": "editor", "value": "emacs", "reason": "fast"}


def test_merge_patch() -> None:
    entity = TYPES["entity"]
    old = Document({"name": "ada", "attributes": {"email": "a@x", "city": "London"}}, "")
    new = Document({"attributes": {"city": "Paris", "email": None, "born": 1815}}, "")
    merged = merge_documents(entity, old, new)
    assert merged.fields["attributes"] == {"city": "Paris", "born": 1815}
    # patch on a scalar replaces
    ctype = make_type(kind=("string", "patch"))
    assert (
        merge_documents(ctype, Document({"kind": "a"}, ""), Document({"kind": "b"}, "")).fields[
            "kind"
        ]
        == "b"
    )


def test_merge_append_list_and_text() -> None:
    entity, tool = TYPES["entity"], TYPES["tool"]
    merged = merge_documents(
        entity,
        Document({"aliases": ["Ada", "AL"]}, ""),
        Document({"aliases": ["AL", "Countess", "Countess"]}, ""),
    )
    assert merged.fields["aliases"] == ["Ada", "AL", "Countess"]
    notes = merge_documents(
        tool, Document({"notes": "Needs --force."}, ""), Document({"notes": "Slow on NFS."}, "")
    )
    assert notes.fields["notes"] == "Needs --force.\n\nSlow on NFS."
    same = merge_documents(tool, notes, Document({"notes": "Slow on NFS."}, ""))
    assert same.fields["notes"] == notes.fields["notes"]
    ctype = make_type(label=("string", "append"))
    one_line = merge_documents(ctype, Document({"label": "a"}, ""), Document({"label": "b"}, ""))
    assert one_line.fields["label"] == "a; b"


def test_merge_sum() -> None:
    tool = TYPES["tool"]
    old = Document({"name": "rg", "success_count": 3}, "")
    merged = merge_documents(tool, old, Document({"success_count": 2, "failure_count": 1}, ""))
    assert merged.fields["success_count"] == 5
    assert merged.fields["failure_count"] == 1
    # values read back from a hand-edited file are compared in their coerced form
    again = merge_documents(tool, merged, Document({"success_count": "1"}, ""))
    assert again.fields["success_count"] == 6
    with pytest.raises(InvalidInput, match="success_count"):
        merge_documents(tool, merged, Document({"success_count": "lots"}, ""))


def test_merge_immutable() -> None:
    pref = TYPES["preference"]
    old = Document({"topic": "editor"}, "")
    assert merge_documents(pref, old, Document({"topic": "editor"}, "")).fields == old.fields
    assert merge_documents(pref, Document({}, ""), old).fields == {"topic": "editor"}
    with pytest.raises(InvalidInput) as err:
        merge_documents(pref, old, Document({"topic": "shell"}, ""))
    assert "topic" in err.value.reason
    assert "'editor'" in err.value.reason and "'shell'" in err.value.reason
    # the same key written another way (what routing found the node by) keeps the old
    for same in ("Editor", " editor ", "EDITOR"):
        assert merge_documents(pref, old, Document({"topic": same}, "")).fields == old.fields
    runner = Document({"topic": "test-runner"}, "")
    assert merge_documents(pref, runner, Document({"topic": "test runner"}, "")).fields == {
        "topic": "test-runner"
    }
    with pytest.raises(InvalidInput):  # no letters of a slug: compared as written
        merge_documents(pref, Document({"topic": "日本語"}, ""), Document({"topic": "中文"}, ""))


def test_merge_immutable_compares_coerced_dates() -> None:
    event = TYPES["event"]
    old = parse_document("---\ndate: 2024-01-02\ntitle: sync\n---\n")
    merged = merge_documents(event, old, Document({"date": "2024-01-02"}, ""))
    assert merged.fields["date"] == "2024-01-02"


def test_body_append_and_immutable() -> None:
    entity = TYPES["entity"]
    old = Document({}, "Works at ACME.\n")
    merged = merge_documents(entity, old, Document({}, "Likes tea.\n"))
    assert merged.body == "Works at ACME.\n\nLikes tea.\n"
    assert merge_documents(entity, merged, Document({}, "Likes tea.")).body == merged.body
    frozen = make_type(body_merge="immutable")
    assert merge_documents(frozen, Document({}, ""), Document({}, "v1\n")).body == "v1\n"
    assert merge_documents(frozen, Document({}, "v1\n"), Document({}, "v1")).body == "v1\n"
    with pytest.raises(InvalidInput, match="immutable"):
        merge_documents(frozen, Document({}, "v1\n"), Document({}, "v2\n"))


def test_merge_without_type_replaces() -> None:
    merged = merge_documents(None, Document({"a": 1, "b": [1]}, "x"), Document({"b": [2]}, "y"))
    assert merged == Document({"a": 1, "b": [2]}, "y")


# --- items and near-duplicates ---------------------------------------------------------


def test_body_items() -> None:
    body = (
        "# Case\n"
        "Intro paragraph\nwrapped here.\n\n"
        "- first item\n  continued\n"
        "* second item\n"
        "  - nested\n"
        "1. numbered\n\n"
        "   indented paragraph of numbered\n"
        "\n"
        "Closing paragraph.\n"
        "---\n"
        "```\ncode\n\nmore code\n```\n"
    )
    assert body_items(body) == [
        "# Case",
        "Intro paragraph\nwrapped here.",
        "first item\ncontinued",
        "second item\n- nested",
        "numbered\n indented paragraph of numbered",
        "Closing paragraph.",
        "```\ncode\n\nmore code\n```",
    ]
    assert body_items("") == []
    assert body_items("\n\n  \n") == []


def test_normalize_item() -> None:
    assert normalize_item("- **Use** the  cache, always!") == "use the cache always"
    assert normalize_item("## Heading") == "heading"
    assert normalize_item("1. First.\n2. Second") == "first second"


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("Restart the daemon.", "- restart the daemon", True),
        ("Clear the build cache before retrying", "Clear the build caches before retrying", True),
        (
            "the flaky test passes after warming the cache first",
            "after warming the cache first the flaky test passes",
            True,
        ),
        ("Use tabs", "Use spaces", False),
        ("Retry 3 times", "Retry 5 times", False),
        ("Clear the cache", "Deploy on Friday", False),
        ("", "x", False),
    ],
)
def test_is_near_duplicate(a: str, b: str, same: bool) -> None:
    assert is_near_duplicate(a, b) is same
    assert is_near_duplicate(b, a) is same


# --- aggregate -------------------------------------------------------------------------


def test_aggregate_first_write_is_kept_verbatim() -> None:
    case = TYPES["case"]
    new = Document({"title": "flaky ci"}, "## Problem\nCI fails on cold cache.\n")
    doc, folded = aggregate_documents(case, Document({}, ""), new)
    assert doc == new and folded == 0


def test_aggregate_folds_duplicates_and_keeps_distinct_items() -> None:
    case = TYPES["case"]
    old = Document(
        {"title": "flaky ci", "tags": ["ci"]},
        "## Problem\nCI fails on cold cache.\n\n- Restart the runner.\n- Clear the build cache\n",
    )
    new = Document(
        {"title": "flaky ci", "tags": ["ci", "cache"], "outcome": "solved"},
        "## Problem\n\n"
        "- restart the runner\n"  # exact after normalisation
        "- Clear the build caches\n"  # near duplicate
        "- Pin the cache key to the lockfile hash\n"  # new
        "- Pin the cache key to the lockfile hash.\n"  # duplicate within the write
        "\nWarm the cache in a setup job.\n",  # a paragraph becomes a bullet
    )
    doc, folded = aggregate_documents(case, old, new)
    assert folded == 3
    assert doc.body == (
        "## Problem\nCI fails on cold cache.\n\n- Restart the runner.\n- Clear the build cache\n"
        "- Pin the cache key to the lockfile hash\n"
        "- Warm the cache in a setup job.\n"
    )
    assert doc.fields == {"title": "flaky ci", "tags": ["ci", "cache"], "outcome": "solved"}
    again, folded_again = aggregate_documents(case, doc, new)
    assert again.body == doc.body and folded_again == 5


def test_aggregate_after_paragraph_separates_list() -> None:
    pattern = TYPES["pattern"]
    old = Document({}, "Deploys fail on Fridays.\n")
    doc, folded = aggregate_documents(pattern, old, Document({}, "Multi\nline item"))
    assert doc.body == "Deploys fail on Fridays.\n\n- Multi\n  line item\n"
    assert folded == 0
    assert body_items(doc.body)[-1] == "Multi\nline item"


def test_aggregate_immutable_conflict() -> None:
    case = TYPES["case"]
    with pytest.raises(InvalidInput, match="title"):
        aggregate_documents(case, Document({"title": "a"}, "x"), Document({"title": "b"}, "y"))


def test_a_replaced_value_takes_the_paragraphs_that_state_it_out_of_the_body() -> None:
    profile = TYPES["profile"]
    old = Document(
        {"location": "Oslo", "role": "data engineer"},
        "I live in Oslo.\n\nI work as a data engineer.\n\nOslo or Lisbon, I speak Norwegian.\n",
    )
    new = Document({"location": "Lisbon"}, "I moved to Lisbon last month.")
    merged = merge_documents(profile, old, new)
    assert merged.fields == {"location": "Lisbon", "role": "data engineer"}
    # the paragraph naming both stays: it does not state the older value alone
    assert merged.body == (
        "I work as a data engineer.\n\nOslo or Lisbon, I speak Norwegian.\n\n"
        "I moved to Lisbon last month.\n"
    )
    assert superseded(profile, old.fields, merged.fields) == [("location", "Oslo", "Lisbon")]
    # the same value in other words of case is no change; a list field is never superseded
    same = merge_documents(profile, old, Document({"location": "oslo"}, ""))
    assert "I live in Oslo." in same.body
    assert superseded(profile, {"languages": ["nb"]}, {"languages": ["pt"]}) == []


def test_a_person_s_paragraph_is_kept_when_extraction_replaces_its_value() -> None:
    profile = TYPES["profile"]
    mine = Document({"location": "Oslo"}, "I live in Oslo, by the fjord.\n")
    merged, _ = combine_keeping_person_text(
        profile, mine, Document({"location": "Lisbon"}, "I moved to Lisbon."), "inbox:a.jsonl"
    )
    assert merged.body.startswith("I live in Oslo, by the fjord.\n"), merged.body
    assert "## Added by extraction (inbox:a.jsonl)" in merged.body
    assert "- location: Lisbon" in merged.body and merged.fields["location"] == "Oslo"
