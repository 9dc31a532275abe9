"""Context-type loading: the built-ins, user overrides, and schema errors with file and line."""

from __future__ import annotations

import datetime as dt
import textwrap
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextfs.ctxtypes import (
    FIELD_TYPES,
    MERGE_OPS,
    ContextType,
    builtin_schema_dir,
    load_type_file,
    load_types,
    slugify,
)
from contextfs.errors import InvalidInput, SchemaError

# The eight types of SPEC §2, plus session: the archived record of a conversation (§5, §6).
BUILTINS = (
    "profile",
    "preference",
    "entity",
    "event",
    "case",
    "pattern",
    "skill",
    "tool",
    "session",
    "image",
    "audio",
    "video",
)

RECIPE = """\
name: recipe
description: A dish the owner cooks.
scope: user
directory: recipes/{title}
mode: merge
fields:
  title: {type: string, required: true, merge: immutable}
  servings: {type: int, merge: replace}
  tags: list
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def builtins() -> dict[str, ContextType]:
    return load_types([builtin_schema_dir()])


# --- built-ins -------------------------------------------------------------------------


def test_all_builtins_load(builtins: dict[str, ContextType]) -> None:
    assert sorted(builtins) == sorted(BUILTINS)
    for ctype in builtins.values():
        assert ctype.description
        assert ctype.extraction.strip()
        assert ctype.source.endswith(f"{ctype.name}.yaml")
        assert all(f.type in FIELD_TYPES and f.merge in MERGE_OPS for f in ctype.fields)
        for key in ctype.key_fields:
            spec = ctype.field(key)
            assert spec is not None and spec.required


def test_builtins_cover_every_mode_and_op(builtins: dict[str, ContextType]) -> None:
    assert {t.mode for t in builtins.values()} == {"merge", "aggregate", "append"}
    ops = {f.merge for t in builtins.values() for f in t.fields}
    assert ops == set(MERGE_OPS)
    assert {t.scope for t in builtins.values()} == {"user", "agent"}


def test_builtin_shapes(builtins: dict[str, ContextType]) -> None:
    profile = builtins["profile"]
    assert profile.singleton and profile.type_dir == "profile" and profile.key_fields == ()
    assert profile.half_life_days is None
    event = builtins["event"]
    assert event.type_dir == "events" and event.key_fields == ("date", "title")
    assert event.mode == "append"
    tool = builtins["tool"]
    assert tool.field("success_count").merge == "sum"
    assert tool.field("nope") is None
    assert builtins["case"].body_merge == "append"
    assert builtins["preference"].body_merge == "replace"


# --- loading from several directories --------------------------------------------------


def test_user_type_in_second_dir_is_added(tmp_path: Path) -> None:
    write(tmp_path, "recipe.yaml", RECIPE)
    types = load_types([builtin_schema_dir(), tmp_path])
    recipe = types["recipe"]
    assert len(types) == len(BUILTINS) + 1
    assert recipe.directory == "recipes/{title}"
    assert recipe.field("tags").type == "list"  # shorthand form
    assert recipe.field("tags").merge == "replace"
    assert (recipe.l0_max_chars, recipe.l1_max_chars) == (120, 1500)
    assert recipe.half_life_days is None and recipe.min_importance == 0.0
    assert recipe.body_merge == "replace"


def test_later_dir_overrides_builtin(tmp_path: Path, builtins) -> None:
    text = (builtin_schema_dir() / "preference.yaml").read_text()
    write(tmp_path, "mine.yml", text.replace("half_life_days: 180", "half_life_days: 30"))
    types = load_types([builtin_schema_dir(), tmp_path])
    assert types["preference"].half_life_days == 30
    assert types["preference"].source == str(tmp_path / "mine.yml")
    assert types["profile"] == builtins["profile"]


def test_missing_dir_is_skipped(tmp_path: Path) -> None:
    types = load_types([builtin_schema_dir(), tmp_path / "absent"])
    assert sorted(types) == sorted(BUILTINS)


def test_type_dir_clash_in_one_scope(tmp_path: Path) -> None:
    write(
        tmp_path,
        "prefs.yaml",
        """\
        name: prefs
        description: clashes with preference
        scope: user
        mode: merge
        directory: preferences/{topic}
        fields:
          topic: string
        """,
    )
    with pytest.raises(SchemaError) as err:
        load_types([builtin_schema_dir(), tmp_path])
    assert err.value.file == str(tmp_path / "prefs.yaml")
    assert err.value.line == 5
    assert "preferences" in err.value.reason


def test_same_type_dir_in_other_scope_is_fine(tmp_path: Path) -> None:
    text = RECIPE.replace("recipes/", "preferences/").replace("name: recipe", "name: agent_prefs")
    write(tmp_path, "agent_prefs.yaml", text.replace("scope: user", "scope: agent"))
    types = load_types([builtin_schema_dir(), tmp_path])
    assert types["agent_prefs"].type_dir == "preferences"


def test_same_name_twice_in_one_dir(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", RECIPE)
    write(tmp_path, "b.yaml", "\n" + RECIPE)
    with pytest.raises(SchemaError) as err:
        load_types([tmp_path])
    assert (err.value.file, err.value.line) == (str(tmp_path / "b.yaml"), 2)


# --- schema errors: file and line ------------------------------------------------------

BASE = {
    "name": "recipe",
    "description": "A dish.",
    "scope": "user",
    "directory": "recipes/{title}",
    "mode": "merge",
}


def _schema(**overrides: str) -> str:
    lines = []
    for key, value in {**BASE, **overrides}.items():
        if value is not None:
            lines.append(f"{key}: {value}")
    return "\n".join(lines) + "\n"


FIELDS = "\nfields:\n  title: {type: string, required: true}\n"


@pytest.mark.parametrize(
    ("text", "line", "needle"),
    [
        ("name: a\n  b: [\n", 2, "YAML syntax"),
        ("name: recipe\ndescription: [unclosed\n", 3, "YAML syntax"),
        ("- just\n- a list\n", 1, "must be a mapping"),
        ("name: a\n---\nname: b\n", 2, "another document"),
        ("name: recipe\ndescription: x\x01\n", 2, "special characters"),
        (_schema(description="2024-13-45") + FIELDS, 2, "invalid value"),
        ("", 1, "empty"),
        ("# comment\n\nname: recipe\nscope: user\n", 3, "missing required key 'description'"),
        (_schema() + "colour: red\n" + FIELDS, 6, "unknown key 'colour'"),
        (_schema(scope="world") + FIELDS, 3, "scope must be one of"),
        (_schema(mode="stack") + FIELDS, 5, "mode must be one of"),
        (_schema(name="Recipe") + FIELDS, 1, "lowercase identifier"),
        (_schema(name="2cool") + FIELDS, 1, "lowercase identifier"),
        (_schema(directory="recipes/{slug}") + FIELDS, 4, "{slug} is not a declared field"),
        (_schema(directory=".recipes/{title}") + FIELDS, 4, "reserved"),
        (_schema(directory="L2.md/{title}") + FIELDS, 4, "reserved"),
        (_schema(directory="meta.yaml") + FIELDS, 4, "reserved"),
        (_schema(directory="a b/{title}") + FIELDS, 4, "one path segment"),
        (_schema(directory="a/b/{title}") + FIELDS, 4, "at most two segments"),
        (_schema(directory="'{title}/x'") + FIELDS, 4, "second segment"),
        (_schema(directory="recipes/fixed") + FIELDS, 4, "at least one {variable}"),
        (_schema(directory="recipes/{title}-{title}") + FIELDS, 4, "used twice"),
        (
            _schema(directory="recipes/{date}-{title}") + FIELDS + "  date: {type: string}\n",
            4,
            "{date} must be a field of type date",
        ),
        (_schema() + FIELDS + "  n: {type: string, merge: sum}\n", 9, "merge sum"),
        (_schema() + FIELDS + "  n: {type: bool, merge: append}\n", 9, "merge append"),
        (_schema() + FIELDS + "  n: {type: decimal}\n", 9, "type must be one of"),
        (_schema() + FIELDS + "  n: {type: int, merge: add}\n", 9, "merge must be one of"),
        (_schema() + FIELDS + "  n: {type: int, colour: red}\n", 9, "unknown key 'colour'"),
        (_schema() + FIELDS + "  n: {merge: replace}\n", 9, "missing required key 'type'"),
        (_schema() + FIELDS + "  n: {type: int, required: maybe}\n", 9, "true or false"),
        (_schema() + FIELDS + "  title: {type: text}\n", 9, "duplicate key 'title'"),
        (_schema() + FIELDS + "body:\n  merge: sum\n", 10, "body merge must be one of"),
        (
            _schema(mode="aggregate") + FIELDS + "body:\n  merge: replace\n",
            10,
            "must be append",
        ),
        (_schema() + FIELDS + "summary:\n  l0_max_chars: 10\n", 10, "between 20 and 1000"),
        (_schema() + FIELDS + "summary:\n  l1_max_chars: 30000\n", 10, "between 50 and 20000"),
        (
            _schema() + FIELDS + "summary:\n  l0_max_chars: 500\n  l1_max_chars: 400\n",
            11,
            "less than",
        ),
        (_schema() + FIELDS + "summary:\n  l0_max_chars: abc\n", 10, "must be an integer"),
        (_schema() + FIELDS + "retention:\n  half_life_days: -3\n", 10, "positive"),
        (_schema() + FIELDS + "retention:\n  min_importance: 2\n", 10, "between 0 and 1"),
        (_schema() + FIELDS + "retention:\n  decay: fast\n", 10, "unknown key 'decay'"),
    ],
)
def test_schema_error_reports_file_and_line(
    tmp_path: Path, text: str, line: int, needle: str
) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SchemaError) as err:
        load_type_file(path)
    assert err.value.file == str(path)
    assert err.value.line == line, str(err.value)
    assert needle in err.value.reason
    assert str(err.value).startswith(f"{path}:{line}: ")
    # The same error surfaces when the file is one of a directory's types.
    with pytest.raises(SchemaError) as again:
        load_types([builtin_schema_dir(), tmp_path])
    assert again.value.line == line


def test_schema_error_is_invalid_input(tmp_path: Path) -> None:
    path = write(tmp_path, "x.yaml", "name: [\n")
    with pytest.raises(InvalidInput):
        load_type_file(path)


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "bin.yaml"
    path.write_bytes(b"name: \xff\xfe\n")
    with pytest.raises(SchemaError) as err:
        load_type_file(path)
    assert err.value.line == 1


# --- node names ------------------------------------------------------------------------


def test_node_name_slugifies(builtins) -> None:
    pref = builtins["preference"]
    assert pref.node_name({"topic": "Test Runner!"}) == "test-runner"
    assert pref.node_name({"topic": "  Crème brûlée  "}) == "creme-brulee"
    assert len(pref.node_name({"topic": "x" * 300})) == 80
    event = builtins["event"]
    assert event.node_name({"date": dt.date(2024, 3, 5), "title": "Q2 Planning"}) == (
        "2024-03-05-q2-planning"
    )
    assert event.node_name({"date": "2024-03-05", "title": "x"}) == "2024-03-05-x"
    assert builtins["profile"].node_name({}) == ""


def test_node_name_errors(builtins) -> None:
    event = builtins["event"]
    with pytest.raises(InvalidInput, match="missing key field 'title'"):
        event.node_name({"date": "2024-03-05"})
    with pytest.raises(InvalidInput, match="'date'"):
        event.node_name({"date": "March 5th", "title": "x"})
    with pytest.raises(InvalidInput, match="no Latin letters or digits"):
        builtins["preference"].node_name({"topic": "!!!"})


def test_matches_node_name(builtins) -> None:
    event, pref = builtins["event"], builtins["preference"]
    assert event.matches_node_name("2024-03-05-standup")
    assert not event.matches_node_name("standup")
    assert not event.matches_node_name("2024-3-5-standup")
    assert pref.matches_node_name("editor")
    assert not pref.matches_node_name("Editor")
    assert not pref.matches_node_name("my topic")
    assert not pref.matches_node_name("-x")
    assert builtins["profile"].matches_node_name("")
    assert not builtins["profile"].matches_node_name("x")
    assert event.parse_node_name("2024-03-05-team-sync") == {
        "date": "2024-03-05",
        "title": "team-sync",
    }
    assert pref.parse_node_name("Nope") is None


@given(
    title=st.text(min_size=1, max_size=120).filter(lambda s: any(c.isalnum() for c in s)),
    day=st.dates(min_value=dt.date(1000, 1, 1), max_value=dt.date(9999, 12, 31)),
)
def test_node_name_round_trip(title: str, day: dt.date) -> None:
    event = _EVENT
    try:
        name = event.node_name({"date": day, "title": title})
    except InvalidInput:
        return  # letters that have no ASCII form (e.g. only CJK) make no slug
    assert event.matches_node_name(name)
    parsed = event.parse_node_name(name)
    assert parsed is not None and parsed["date"] == day.isoformat()
    assert event.node_name(parsed) == name


_EVENT = load_types([builtin_schema_dir()])["event"]


# --- field coercion --------------------------------------------------------------------


def test_coerce_fields_converts(builtins) -> None:
    tool, event = builtins["tool"], builtins["event"]
    assert tool.coerce_fields({"success_count": "3", "failure_count": 2.0}) == {
        "success_count": 3,
        "failure_count": 2,
    }
    out = event.coerce_fields(
        {
            "date": dt.date(2024, 1, 2),
            "time": "2024-01-02T10:00:00Z",
            "participants": "bob",
            "title": 2024,
            "location": None,
        }
    )
    assert out == {
        "date": "2024-01-02",
        "time": "2024-01-02T10:00:00+00:00",
        "participants": ["bob"],
        "title": "2024",
    }
    pattern = builtins["pattern"]
    assert pattern.coerce_fields({"confidence": "0.5"}) == {"confidence": 0.5}
    profile = builtins["profile"]
    assert profile.coerce_fields({"facts": {"pets": 2, "since": dt.date(2020, 1, 1)}}) == {
        "facts": {"pets": 2, "since": "2020-01-01"}
    }


@pytest.mark.parametrize(
    ("type_name", "values", "needle"),
    [
        ("tool", {"colour": "red"}, "unknown field 'colour'"),
        ("tool", {"success_count": "many"}, "field 'success_count' must be an integer"),
        ("tool", {"success_count": True}, "field 'success_count' must be an integer"),
        ("tool", {"success_count": 1.5}, "field 'success_count' must be an integer"),
        ("pattern", {"confidence": "high"}, "field 'confidence' must be a finite number"),
        ("pattern", {"confidence": float("nan")}, "finite number"),
        ("event", {"date": "2024-02-30"}, "field 'date' must be a date"),
        ("event", {"date": dt.datetime(2024, 1, 1, 9)}, "without a time"),
        ("event", {"time": "tomorrow"}, "field 'time' must be an ISO 8601"),
        ("event", {"participants": [["a"]]}, "field 'participants' must be a list"),
        ("profile", {"facts": ["a"]}, "field 'facts' must be a mapping"),
        ("profile", {"facts": {"a": {"b": 1}}}, "plain values"),
        ("preference", {"topic": "two\nlines"}, "single line"),
        ("preference", {"value": {"a": 1}}, "field 'value' must be a string"),
    ],
)
def test_coerce_fields_errors(builtins, type_name: str, values: dict, needle: str) -> None:
    with pytest.raises(InvalidInput) as err:
        builtins[type_name].coerce_fields(values, where="user/me/x.md")
    assert needle in err.value.reason
    assert err.value.reason.startswith("user/me/x.md: ")


def test_missing_required(builtins) -> None:
    event = builtins["event"]
    assert event.missing_required({}) == ["date", "title"]
    assert event.missing_required({"date": "2024-01-01", "title": "  "}) == ["title"]
    assert event.missing_required({"date": "2024-01-01", "title": "x"}) == []
    assert builtins["profile"].missing_required({}) == []


@pytest.mark.parametrize(
    ("text", "slug"),
    [("Đorđe", "dorde"), ("Łódź", "lodz"), ("Straße", "strasse"), ("Æsir", "aesir"),
     ("Ore", "ore"), ("Ørsted", "orsted"), ("Café Müller", "cafe-muller")],
)  # fmt: skip
def test_latin_letters_keep_a_letter_in_slugs(text: str, slug: str) -> None:
    """A letter with no ASCII decomposition is not dropped: "Đorđe" and "Ore" are two
    people, not one node."""
    assert slugify(text) == slug


def test_a_key_in_another_script_is_refused_with_why(builtins) -> None:
    with pytest.raises(InvalidInput, match="no Latin letters or digits"):
        builtins["entity"].node_name({"name": "Москва"})


def test_a_hand_made_name_says_why_no_key_could_reach_it(builtins) -> None:
    types = builtins
    assert "is at most 80" in types["preference"].name_problem("-".join(["word"] * 17))
    assert "2026-13-45 is not a day" in types["event"].name_problem("2026-13-45-party")
    assert "does not fit" in types["event"].name_problem("party")
    assert types["event"].name_problem("2028-02-29-party") is None
