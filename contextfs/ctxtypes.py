"""Context types: YAML declarations in, frozen `ContextType` values out.

A context type says where its nodes live under an owner (`directory`), how a new write
combines with an existing node (`mode`, per-field `merge` ops, `body.merge`), how long its
summaries may be, what an extractor should look for, and how it ages. This module only
loads and validates those declarations and offers the pure helpers that follow from them
(node names from key fields, field coercion). It knows nothing of the store, the tree or
FUSE; everything it refuses is an `InvalidInput` (a value) or a `SchemaError` (a file, with
the 1-based line of the offending key or value). It stays one module over 600 lines on
purpose: the loader (about half of it) exists to guarantee what the `ContextType` helpers
above it assume, and the two are read side by side.
"""

from __future__ import annotations

import datetime as _dt
import functools
import importlib.resources
import logging
import math
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from contextfs.errors import InvalidInput, SchemaError

log = logging.getLogger(__name__)

FIELD_TYPES = ("string", "text", "int", "float", "bool", "date", "datetime", "list", "map")
MERGE_OPS = ("replace", "patch", "append", "sum", "immutable")
SCOPES = ("user", "agent")
MODES = ("merge", "aggregate", "append")
BODY_MERGES = ("replace", "append", "immutable")

# Names a type directory may never take: they are node files or hidden machinery.
RESERVED_DIR_NAMES = frozenset({"L0.md", "L1.md", "L2.md", "meta.yaml"})

SLUG_MAX = 80
NAME_MAX = 255  # bytes in a path component on Linux

L0_RANGE = (20, 1000)
L1_RANGE = (50, 20000)
DEFAULT_L0 = 120
DEFAULT_L1 = 1500

_TYPE_NAME_RE = re.compile(r"[a-z][a-z0-9_]{0,63}")
_FIELD_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_TYPE_DIR_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_LITERAL_RE = re.compile(r"[A-Za-z0-9_.-]*")
_VAR_RE = re.compile(r"\{([^{}]*)\}")
_DATE_RE = re.compile(r"\d{4}-\d{2}-\d{2}")
_INT_RE = re.compile(r"[+-]?\d+")
_SLUG_STRIP_RE = re.compile(r"[^a-z0-9]+")
_BOOL_WORDS = {
    "true": True, "yes": True, "on": True, "1": True,
    "false": False, "no": False, "off": False, "0": False,
}  # fmt: skip

# A node-name variable matches exactly what `slugify` produces, so the names this module
# makes always match and a hand-made `mkdir "My Topic"` does not (the tree may slugify it).
_SLUG_PATTERN = r"[a-z0-9]+(?:-[a-z0-9]+)*"
_DATE_PATTERN = r"\d{4}-\d{2}-\d{2}"


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One declared front-matter field of a context type."""

    name: str
    type: str
    description: str = ""
    required: bool = False
    merge: str = "replace"


@dataclass(frozen=True, slots=True)
class _Template:
    """The compiled node segment of a `directory` template."""

    segment: str
    variables: tuple[str, ...]
    pattern: re.Pattern[str] | None


@dataclass(frozen=True, slots=True)
class ContextType:
    """A loaded context type. Built by `load_type_file`; never mutated."""

    name: str
    description: str
    scope: str
    directory: str
    mode: str
    fields: tuple[FieldSpec, ...]
    body_merge: str
    l0_max_chars: int
    l1_max_chars: int
    extraction: str
    half_life_days: float | None
    min_importance: float
    source: str

    @property
    def type_dir(self) -> str:
        """The first segment of `directory`: the folder under an owner, e.g. "preferences"."""
        return self.directory.split("/", 1)[0]

    @property
    def singleton(self) -> bool:
        """True when the type has one node per owner (`directory` has no node segment)."""
        return "/" not in self.directory

    @property
    def key_fields(self) -> tuple[str, ...]:
        """The template's variables, in the order they appear."""
        return self._template().variables

    def _template(self) -> _Template:
        return _compile_template(self.directory, self._date_vars())

    def _date_vars(self) -> frozenset[str]:
        return frozenset(f.name for f in self.fields if f.type == "date")

    def field(self, name: str) -> FieldSpec | None:
        for spec in self.fields:
            if spec.name == name:
                return spec
        return None

    def node_name(self, values: Mapping[str, object]) -> str:
        """The node directory name for these key values ("" for a singleton).

        Each variable is coerced to its field type, then slugified (lowercase ASCII letters,
        digits and single '-', at most 80 characters); dates are written YYYY-MM-DD.
        """
        template = self._template()
        if not template.variables:
            return ""
        parts: dict[str, str] = {}
        for var in template.variables:
            raw = values.get(var)
            if raw is None or (isinstance(raw, str) and not raw.strip()):
                raise InvalidInput(
                    f"missing key field '{var}' for type {self.name} (directory {self.directory})"
                )
            spec = self.field(var)
            value = _coerce(spec, raw, where=f"type {self.name}") if spec else raw
            if spec is not None and spec.type == "date":
                parts[var] = str(value)
                continue
            slug = slugify(_scalar_text(value))
            if not slug:
                raise InvalidInput(
                    f"key field '{var}' of type {self.name} has no Latin letters or digits "
                    f"to name a node with: {raw!r} (node names are ASCII: give the key in "
                    "Latin letters, in the file name or the front matter)"
                )
            parts[var] = slug
        return _VAR_RE.sub(lambda m: parts[m.group(1)], template.segment)

    def matches_node_name(self, name: str) -> bool:
        """Does a directory name fit the template as `node_name` would write it?

        Variables of type date match `\\d{4}-\\d{2}-\\d{2}`; other variables match a slug
        (`[a-z0-9]+(-[a-z0-9]+)*`). Strict on purpose: every name `node_name` produces
        matches, hand-typed names with capitals or spaces do not. A singleton matches only "".
        """
        template = self._template()
        if template.pattern is None:
            return name == ""
        return template.pattern.fullmatch(name) is not None

    def name_problem(self, name: str) -> str | None:
        """Why a hand-made node name cannot be this type's (`mkdir`, `mv`), or None: it
        must fit the template, its dates be days of the calendar and each other part at
        most SLUG_MAX characters (what `node_name` makes: a longer one would never be
        found again by its key)."""
        values = self.parse_node_name(name)
        if values is None:
            return f"{name!r} does not fit the {self.name} template {self.directory!r}"
        dates = self._date_vars()
        for var, value in values.items():
            if var in dates:
                try:
                    _dt.date.fromisoformat(value)
                except ValueError:
                    return f"{name!r}: {value} is not a day of the calendar ({var})"
            elif len(value) > SLUG_MAX:
                return (
                    f"{name!r}: its {var} has {len(value)} characters; a node name's key "
                    f"is at most {SLUG_MAX}"
                )
        return None

    def parse_node_name(self, name: str) -> dict[str, str] | None:
        """The key values a matching node name carries (as slugs), or None if it does not fit.

        When a template is ambiguous (two slug variables joined by '-'), the earlier variable
        takes the longest possible part.
        """
        template = self._template()
        if template.pattern is None:
            return {} if name == "" else None
        match = template.pattern.fullmatch(name)
        if match is None:
            return None
        return {var: match.group(f"v{i}") for i, var in enumerate(template.variables)}

    def coerce_fields(self, values: Mapping[str, object], *, where: str = "") -> dict[str, object]:
        """Validate and coerce values to their declared field types.

        Dates become "YYYY-MM-DD" strings, datetimes ISO 8601 strings, "3" becomes 3 for an
        int, a lone string becomes a one-item list. A value of None is dropped (treated as
        absent). Unknown fields and values of the wrong type raise `InvalidInput`; required
        fields are not checked here (see `missing_required`).
        """
        prefix = f"{where}: " if where else ""
        out: dict[str, object] = {}
        for key, raw in values.items():
            spec = self.field(key) if isinstance(key, str) else None
            if spec is None:
                known = ", ".join(f.name for f in self.fields) or "none"
                raise InvalidInput(
                    f"{prefix}unknown field {key!r} for type {self.name} (known fields: {known})"
                )
            if raw is None:
                continue
            out[key] = _coerce(spec, raw, where=where)
        return out

    def missing_required(self, values: Mapping[str, object]) -> list[str]:
        """Required fields that are absent, None or empty, in declaration order."""
        missing = []
        for spec in self.fields:
            if not spec.required:
                continue
            if _is_blank(values.get(spec.name)):
                missing.append(spec.name)
        return missing


# --- values -----------------------------------------------------------------------------


# Latin letters with no ASCII decomposition: without these, "Đorđe" would be "ore"
_LATIN_LETTERS = str.maketrans(
    {"đ": "d", "Đ": "D", "ł": "l", "Ł": "L", "ß": "ss", "ẞ": "SS", "æ": "ae", "Æ": "AE",
     "ø": "o", "Ø": "O", "þ": "th", "Þ": "TH", "ð": "d", "Ð": "D", "œ": "oe", "Œ": "OE",
     "ı": "i", "ħ": "h", "Ħ": "H", "ŧ": "t", "Ŧ": "T", "ŋ": "ng", "Ŋ": "NG"}
)  # fmt: skip


def slugify(text: str) -> str:
    """Lowercase ASCII letters and digits joined by single '-', at most 80 characters."""
    ascii_text = (
        unicodedata.normalize("NFKD", text.translate(_LATIN_LETTERS))
        .encode("ascii", "ignore")
        .decode("ascii")
        .lower()
    )
    slug = _SLUG_STRIP_RE.sub("-", ascii_text).strip("-")
    if len(slug) > SLUG_MAX:
        slug = slug[:SLUG_MAX].rstrip("-")
    return slug


def _is_blank(value: object) -> bool:
    if isinstance(value, str):
        return not value.strip()
    return value is None or (isinstance(value, list | tuple | dict) and not value)


def _scalar_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return " ".join(_scalar_text(v) for v in value)
    return str(value)


def _type_error(spec: FieldSpec, value: object, expected: str, where: str) -> InvalidInput:
    prefix = f"{where}: " if where else ""
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return InvalidInput(
        f"{prefix}field '{spec.name}' must be {expected} (type {spec.type}), got {shown}"
    )


def _coerce(spec: FieldSpec, value: object, *, where: str) -> object:
    kind = spec.type
    if kind in ("string", "text"):
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, str | int | float | _dt.date):
            text = value.isoformat() if isinstance(value, _dt.date) else str(value)
        else:
            raise _type_error(spec, value, "a string", where)
        if kind == "string":
            text = text.strip()
            if "\n" in text or "\r" in text:
                raise _type_error(spec, value, "a single line (use type text for more)", where)
        return text
    if kind == "int":
        if isinstance(value, bool):
            raise _type_error(spec, value, "an integer", where)
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str) and _INT_RE.fullmatch(value.strip()):
            return int(value.strip())
        raise _type_error(spec, value, "an integer", where)
    if kind == "float":
        if isinstance(value, bool):
            raise _type_error(spec, value, "a number", where)
        number: float | None = None
        if isinstance(value, int | float):
            number = float(value)
        elif isinstance(value, str):
            try:
                number = float(value.strip())
            except ValueError:
                number = None
        if number is None or not math.isfinite(number):
            raise _type_error(spec, value, "a finite number", where)
        return number
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in _BOOL_WORDS:
            return _BOOL_WORDS[value.strip().lower()]
        raise _type_error(spec, value, "true or false", where)
    if kind == "date":
        if isinstance(value, _dt.datetime):
            raise _type_error(spec, value, "a date YYYY-MM-DD without a time", where)
        if isinstance(value, _dt.date):
            return value.isoformat()
        if isinstance(value, str) and _DATE_RE.fullmatch(value.strip()):
            try:
                return _dt.date.fromisoformat(value.strip()).isoformat()
            except ValueError:
                pass
        raise _type_error(spec, value, "a date YYYY-MM-DD", where)
    if kind == "datetime":
        if isinstance(value, _dt.datetime):
            return value.isoformat()
        if isinstance(value, _dt.date):
            return _dt.datetime(value.year, value.month, value.day).isoformat()
        if isinstance(value, str):
            try:
                return _dt.datetime.fromisoformat(value.strip()).isoformat()
            except ValueError:
                pass
        raise _type_error(spec, value, "an ISO 8601 date-time", where)
    if kind == "list":
        items = list(value) if isinstance(value, list | tuple) else [value]
        out: list[str] = []
        for item in items:
            if item is None:
                continue
            if isinstance(item, dict | list | tuple | set):
                raise _type_error(spec, value, "a list of strings", where)
            text = _scalar_text(item.isoformat() if isinstance(item, _dt.date) else item)
            text = text.strip()
            if text:
                out.append(text)
        return out
    if kind == "map":
        if not isinstance(value, Mapping):
            raise _type_error(spec, value, "a mapping of names to values", where)
        result: dict[str, object] = {}
        for key, item in value.items():
            if isinstance(item, Mapping | list | tuple | set):
                raise _type_error(spec, value, "a mapping of names to plain values", where)
            if isinstance(item, _dt.date):
                item = item.isoformat()
            result[str(key)] = item
        return result
    raise _type_error(spec, value, "a known type", where)  # unreachable for loaded types


# --- templates --------------------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def _compile_template(directory: str, date_vars: frozenset[str]) -> _Template:
    if "/" not in directory:
        return _Template(segment="", variables=(), pattern=None)
    segment = directory.split("/", 1)[1]
    variables = tuple(m.group(1) for m in _VAR_RE.finditer(segment))
    regex = []
    pos = 0
    for i, match in enumerate(_VAR_RE.finditer(segment)):
        regex.append(re.escape(segment[pos : match.start()]))
        body = _DATE_PATTERN if match.group(1) in date_vars else _SLUG_PATTERN
        regex.append(f"(?P<v{i}>{body})")
        pos = match.end()
    regex.append(re.escape(segment[pos:]))
    return _Template(segment=segment, variables=variables, pattern=re.compile("".join(regex)))


# --- loading ----------------------------------------------------------------------------


_TOP_KEYS = (
    "name", "description", "scope", "directory", "mode", "fields",
    "body", "summary", "extraction", "retention",
)  # fmt: skip
_REQUIRED_TOP = ("name", "description", "scope", "directory", "mode")
_FIELD_KEYS = ("type", "description", "required", "merge")


class _Reader:
    """Walks a composed YAML document, keeping the file name for error messages."""

    def __init__(self, file: str, loader: yaml.SafeLoader) -> None:
        self.file = file
        self.loader = loader

    def error(self, node: yaml.Node | None, reason: str) -> SchemaError:
        line = node.start_mark.line + 1 if node is not None else 1
        return SchemaError(self.file, line, reason)

    def value(self, node: yaml.Node) -> object:
        try:
            return self.loader.construct_object(node, deep=True)
        except (ValueError, TypeError, OverflowError) as exc:  # e.g. a timestamp 2024-13-45
            raise self.error(node, f"invalid value: {exc}") from None

    def mapping(
        self, node: yaml.Node, what: str, allowed: Sequence[str] | None
    ) -> dict[str, tuple[yaml.Node, yaml.Node]]:
        """Key -> (key node, value node); refuses non-mappings, duplicates, unknown keys."""
        if not isinstance(node, yaml.MappingNode):
            raise self.error(node, f"{what} must be a mapping")
        out: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        for key_node, value_node in node.value:
            key = self.value(key_node)
            if not isinstance(key, str):
                raise self.error(key_node, f"{what}: keys must be strings, got {key!r}")
            if key in out:
                raise self.error(key_node, f"{what}: duplicate key '{key}'")
            if allowed is not None and key not in allowed:
                raise self.error(
                    key_node, f"{what}: unknown key '{key}' (allowed: {', '.join(allowed)})"
                )
            out[key] = (key_node, value_node)
        return out

    def string(self, node: yaml.Node, what: str, *, allow_null: bool = False) -> str:
        value = self.value(node)
        if value is None and allow_null:
            return ""
        if not isinstance(value, str):
            raise self.error(node, f"{what} must be a string, got {value!r}")
        return value

    def choice(self, node: yaml.Node, what: str, choices: Sequence[str]) -> str:
        value = self.value(node)
        if value not in choices:
            raise self.error(node, f"{what} must be one of {', '.join(choices)}, got {value!r}")
        return str(value)

    def integer(self, node: yaml.Node, what: str, lo: int, hi: int) -> int:
        value = self.value(node)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(node, f"{what} must be an integer, got {value!r}")
        if not lo <= value <= hi:
            raise self.error(node, f"{what} must be between {lo} and {hi}, got {value}")
        return value

    def number(self, node: yaml.Node, what: str) -> float:
        value = self.value(node)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(node, f"{what} must be a number, got {value!r}")
        if not math.isfinite(value):
            raise self.error(node, f"{what} must be finite, got {value!r}")
        return float(value)


def _parse_field(reader: _Reader, name: str, node: yaml.Node) -> FieldSpec:
    what = f"field '{name}'"
    if isinstance(node, yaml.ScalarNode):  # shorthand `topic: string`
        return FieldSpec(name=name, type=reader.choice(node, f"{what} type", FIELD_TYPES))
    keys = reader.mapping(node, what, _FIELD_KEYS)
    if "type" not in keys:
        raise reader.error(node, f"{what}: missing required key 'type'")
    ftype = reader.choice(keys["type"][1], f"{what} type", FIELD_TYPES)
    description = ""
    if "description" in keys:
        description = reader.string(keys["description"][1], f"{what} description", allow_null=True)
    required = False
    if "required" in keys:
        value = reader.value(keys["required"][1])
        if not isinstance(value, bool):
            raise reader.error(keys["required"][1], f"{what} required must be true or false")
        required = value
    merge = "replace"
    if "merge" in keys:
        merge_node = keys["merge"][1]
        merge = reader.choice(merge_node, f"{what} merge", MERGE_OPS)
        if merge == "sum" and ftype not in ("int", "float"):
            raise reader.error(
                merge_node, f"{what}: merge sum needs a numeric field (int or float), not {ftype}"
            )
        if merge == "append" and ftype not in ("list", "text", "string"):
            raise reader.error(
                merge_node, f"{what}: merge append needs a list, text or string field, not {ftype}"
            )
    return FieldSpec(
        name=name, type=ftype, description=description.strip(), required=required, merge=merge
    )


def _check_directory(
    reader: _Reader, node: yaml.Node, directory: str, fields: Mapping[str, FieldSpec]
) -> None:
    segments = directory.split("/")
    if len(segments) > 2:
        raise reader.error(
            node, f"directory '{directory}': at most two segments, '<type-dir>/<node template>'"
        )
    type_dir = segments[0]
    if not type_dir:
        raise reader.error(node, f"directory '{directory}': the type directory is empty")
    if "{" in type_dir or "}" in type_dir:
        raise reader.error(
            node, f"directory '{directory}': template variables belong in the second segment"
        )
    if type_dir.startswith(".") or type_dir in RESERVED_DIR_NAMES:
        raise reader.error(node, f"directory '{directory}': '{type_dir}' is a reserved name")
    if not _TYPE_DIR_RE.fullmatch(type_dir):
        raise reader.error(
            node,
            f"directory '{directory}': the type directory '{type_dir}' must be one path segment "
            "of letters, digits, '_', '-' and '.' (at most 128)",
        )
    if len(segments) == 1:
        return
    segment = segments[1]
    variables = [m.group(1) for m in _VAR_RE.finditer(segment)]
    if not variables:
        raise reader.error(
            node, f"directory '{directory}': the node segment needs at least one {{variable}}"
        )
    literals = _VAR_RE.split(segment)[::2]
    for literal in literals:
        if not _LITERAL_RE.fullmatch(literal):
            raise reader.error(
                node,
                f"directory '{directory}': text between variables may only use letters, digits, "
                f"'_', '-' and '.', got {literal!r}",
            )
    if segment.startswith("."):
        raise reader.error(node, f"directory '{directory}': node names may not start with '.'")
    seen: set[str] = set()
    for var in variables:
        if not _FIELD_NAME_RE.fullmatch(var):
            raise reader.error(node, f"directory '{directory}': bad template variable {{{var}}}")
        if var in seen:
            raise reader.error(node, f"directory '{directory}': variable {{{var}}} used twice")
        seen.add(var)
        spec = fields.get(var)
        if spec is None:
            raise reader.error(
                node,
                f"directory '{directory}': template variable {{{var}}} is not a declared field",
            )
        if var == "date" and spec.type != "date":
            raise reader.error(
                node,
                f"directory '{directory}': {{date}} must be a field of type date, "
                f"'{var}' is {spec.type}",
            )
        if spec.type in ("list", "map", "text"):
            raise reader.error(
                node,
                f"directory '{directory}': {{{var}}} is a {spec.type} field; "
                "key fields must be single values",
            )
    longest = sum(len(lit) for lit in literals) + SLUG_MAX * len(variables)
    if longest > NAME_MAX:
        raise reader.error(
            node, f"directory '{directory}': node names could exceed {NAME_MAX} characters"
        )


def _load(path: Path) -> tuple[ContextType, int, int]:
    """Load one file; also return the lines of its `name` and `directory` values."""
    file = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise SchemaError(file, 1, f"not UTF-8 text: {exc.reason}") from None
    except OSError as exc:
        raise SchemaError(file, 1, f"cannot read: {exc.strerror or exc}") from None
    try:
        loader = yaml.SafeLoader(text)
    except yaml.reader.ReaderError as exc:  # a control character the YAML reader refuses
        line = text.count("\n", 0, exc.position) + 1
        raise SchemaError(file, line, f"YAML error: {exc.reason}") from None
    try:
        try:
            root = loader.get_single_node()
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            line = mark.line + 1 if mark is not None else 1
            reason = exc.problem or exc.context or "invalid YAML"
            raise SchemaError(file, line, f"YAML syntax error: {reason}") from None
        except yaml.YAMLError as exc:
            raise SchemaError(file, 1, f"YAML error: {exc}") from None
        if root is None:
            raise SchemaError(file, 1, "empty file: a context type needs at least a name")
        reader = _Reader(file, loader)
        try:
            return _build(reader, root, file)
        except yaml.MarkedYAMLError as exc:  # a constructor failure, e.g. a bad timestamp
            mark = exc.problem_mark or exc.context_mark
            line = mark.line + 1 if mark is not None else 1
            raise SchemaError(file, line, exc.problem or "invalid value") from None
    finally:
        loader.dispose()


def _build(reader: _Reader, root: yaml.Node, file: str) -> tuple[ContextType, int, int]:
    top = reader.mapping(root, "context type", _TOP_KEYS)
    for key in _REQUIRED_TOP:
        if key not in top:
            raise reader.error(root, f"missing required key '{key}'")

    name_node = top["name"][1]
    name = reader.string(name_node, "name")
    if not _TYPE_NAME_RE.fullmatch(name):
        raise reader.error(
            name_node,
            f"name {name!r} must be a lowercase identifier (a-z, digits, '_'; at most 64)",
        )
    description = reader.string(top["description"][1], "description").strip()
    if not description:
        raise reader.error(top["description"][1], "description must not be empty")
    scope = reader.choice(top["scope"][1], "scope", SCOPES)
    mode = reader.choice(top["mode"][1], "mode", MODES)

    fields: dict[str, FieldSpec] = {}
    if "fields" in top:
        fields_node = top["fields"][1]
        if not (isinstance(fields_node, yaml.ScalarNode) and reader.value(fields_node) is None):
            for fname, (key_node, value_node) in reader.mapping(
                fields_node, "fields", None
            ).items():
                if not _FIELD_NAME_RE.fullmatch(fname):
                    raise reader.error(
                        key_node, f"field name {fname!r} must be an identifier (at most 64)"
                    )
                fields[fname] = _parse_field(reader, fname, value_node)

    dir_node = top["directory"][1]
    directory = reader.string(dir_node, "directory").strip()
    _check_directory(reader, dir_node, directory, fields)

    body_merge = "append" if mode == "aggregate" else "replace"
    if "body" in top:
        body = reader.mapping(top["body"][1], "body", ("merge",))
        if "merge" in body:
            merge_node = body["merge"][1]
            body_merge = reader.choice(merge_node, "body merge", BODY_MERGES)
            if mode == "aggregate" and body_merge != "append":
                raise reader.error(
                    merge_node,
                    "body merge: an aggregate type accumulates body items, so it must be append",
                )

    l0, l1 = DEFAULT_L0, DEFAULT_L1
    if "summary" in top:
        summary_node = top["summary"][1]
        summary = reader.mapping(summary_node, "summary", ("l0_max_chars", "l1_max_chars"))
        if "l0_max_chars" in summary:
            l0 = reader.integer(summary["l0_max_chars"][1], "summary l0_max_chars", *L0_RANGE)
        if "l1_max_chars" in summary:
            l1 = reader.integer(summary["l1_max_chars"][1], "summary l1_max_chars", *L1_RANGE)
        if l0 >= l1:
            where = summary.get("l1_max_chars", summary.get("l0_max_chars", (None, summary_node)))
            raise reader.error(
                where[1], f"summary: l0_max_chars ({l0}) must be less than l1_max_chars ({l1})"
            )

    extraction = ""
    if "extraction" in top:
        extraction = reader.string(top["extraction"][1], "extraction", allow_null=True)

    half_life: float | None = None
    min_importance = 0.0
    if "retention" in top:
        retention = reader.mapping(
            top["retention"][1], "retention", ("half_life_days", "min_importance")
        )
        if "half_life_days" in retention:
            hl_node = retention["half_life_days"][1]
            if reader.value(hl_node) is not None:
                half_life = reader.number(hl_node, "retention half_life_days")
                if half_life <= 0:
                    raise reader.error(
                        hl_node, "retention half_life_days must be positive (null: no decay)"
                    )
        if "min_importance" in retention:
            mi_node = retention["min_importance"][1]
            min_importance = reader.number(mi_node, "retention min_importance")
            if not 0.0 <= min_importance <= 1.0:
                raise reader.error(mi_node, "retention min_importance must be between 0 and 1")

    ctype = ContextType(
        name=name,
        description=description,
        scope=scope,
        directory=directory,
        mode=mode,
        fields=tuple(fields.values()),
        body_merge=body_merge,
        l0_max_chars=l0,
        l1_max_chars=l1,
        extraction=extraction.strip() + "\n" if extraction.strip() else "",
        half_life_days=half_life,
        min_importance=min_importance,
        source=file,
    )
    return ctype, name_node.start_mark.line + 1, dir_node.start_mark.line + 1


def load_type_file(path: Path) -> ContextType:
    """Load and validate one context-type YAML file; `SchemaError(file, line, reason)`."""
    return _load(Path(path))[0]


def builtin_schema_dir() -> Path:
    """The folder of the built-in types (package data of `contextfs.builtin_schemas`).

    The same lookup in every install kind (editable, wheel, sdist): the package is a
    regular one, so `files()` is its folder on disk. A folder without the type files (a
    broken install) is a `SchemaError`, never a silently empty set of types.
    """
    root = importlib.resources.files("contextfs.builtin_schemas")
    folder = Path(str(root))
    if not folder.is_dir() or not any(folder.glob("*.yaml")):
        raise SchemaError(
            str(root), 1, "the built-in context types are not installed (no *.yaml here)"
        )
    return folder


def load_types(dirs: Sequence[Path]) -> dict[str, ContextType]:
    """Load `*.yaml`/`*.yml` from each directory in order; later directories override.

    A missing directory is skipped (a data dir need not have `schemas/`). Two files in one
    directory declaring the same name, or two types of one scope sharing a type directory
    (after overrides), raise `SchemaError` pointing at the later file.
    """
    types: dict[str, ContextType] = {}
    lines: dict[str, tuple[int, int]] = {}
    for directory in dirs:
        directory = Path(directory)
        if not directory.is_dir():
            log.debug("schema directory %s does not exist; skipped", directory)
            continue
        seen_here: dict[str, str] = {}
        files = sorted(
            p for p in directory.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file()
        )
        for path in files:
            ctype, name_line, dir_line = _load(path)
            if ctype.name in seen_here:
                raise SchemaError(
                    str(path),
                    name_line,
                    f"type '{ctype.name}' is already declared in {seen_here[ctype.name]}",
                )
            seen_here[ctype.name] = str(path)
            if ctype.name in types:
                log.info(
                    "context type %s from %s overrides %s",
                    ctype.name, path, types[ctype.name].source,
                )  # fmt: skip
            types[ctype.name] = ctype
            lines[ctype.name] = (name_line, dir_line)

    owners: dict[tuple[str, str], ContextType] = {}
    # Report against the file loaded last, which is the one a user most likely just added.
    ordered = sorted(types.values(), key=lambda t: _load_order(t, dirs))
    for ctype in ordered:
        key = (ctype.scope, ctype.type_dir)
        other = owners.get(key)
        if other is not None:
            raise SchemaError(
                ctype.source,
                lines[ctype.name][1],
                f"type directory '{ctype.type_dir}' of scope {ctype.scope} is already used by "
                f"type '{other.name}' ({other.source})",
            )
        owners[key] = ctype
    return types


def _load_order(ctype: ContextType, dirs: Sequence[Path]) -> tuple[int, str]:
    source = Path(ctype.source)
    for i, directory in enumerate(dirs):
        if source.parent == Path(directory):
            return (i, source.name)
    return (len(dirs), source.name)
