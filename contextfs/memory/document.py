"""L2 documents: YAML front matter plus a markdown body, and how two of them combine.

`parse_document`/`render_document` convert between the text of an `L2.md` (or a file
dropped into a type directory) and a `Document`; `merge_documents` and
`aggregate_documents` apply a context type's write strategy to an existing node and a new
write. Everything here is pure: no store, no tree, no I/O. Values are not coerced to their
field types here — callers run `ContextType.coerce_fields` first — except that merges
compare and add values in their coerced form so that `2024-01-01` and "2024-01-01" agree.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import yaml
from rapidfuzz.distance import Indel

from contextfs.ctxtypes import ContextType, FieldSpec, slugify
from contextfs.errors import InvalidInput

_Loader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_Dumper: type = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

_BOOL_TAG = "tag:yaml.org,2002:bool"
_MERGE_TAG = "tag:yaml.org,2002:merge"


# A refused write stays visible beside where it was written as `NAME.refused`
# (fs.roles.tiers: `leave_trace`): this note with the reason, then the bytes as written. The
# note is an HTML comment (markdown shows nothing of it) that `strip_trace` takes off again
# whenever such bytes are written back as memory (renamed to NAME, copied, cat into L2.md), so
# "fix the bytes, then `mv NAME.refused NAME`" is a retry.
TRACE_SUFFIX = ".refused"
_TRACE_OPEN = b"<!-- contextfs refused this write: "
_TRACE_CLOSE = b" -->\n"


def trace_name(name: str) -> str:
    """The name a refused write of `name` stays visible under."""
    return name + TRACE_SUFFIX


def trace_bytes(reason: str, name: str, data: bytes) -> bytes:
    """What `NAME.refused` holds: a note with the reason and what to do, then `data`
    exactly (the caller redacts secrets first)."""
    reason = " ".join(reason.split())  # one line
    original = name.removesuffix(TRACE_SUFFIX)
    note = (
        f"{reason}\n"
        "Your bytes follow this note, exactly as written. Fix them and rename this file "
        f"to {original!r} to try again (this note is dropped then); rm {name!r} to "
        "discard them. This file is never memory: not routed, indexed or searched."
    ).replace("-->", "-- >")  # nothing in it ends the comment early
    return _TRACE_OPEN + note.encode("utf-8", "backslashreplace") + _TRACE_CLOSE + data


def strip_trace(data: bytes) -> bytes:
    """`data` without the note `trace_bytes` put at its start (as it is if it has none)."""
    if not data.startswith(_TRACE_OPEN):
        return data
    end = data.find(_TRACE_CLOSE)
    return data[end + len(_TRACE_CLOSE) :] if end >= 0 else data


def decode_text(data: bytes, what: str) -> str:
    """The bytes of a memory file as text: they must be UTF-8 (binaries are attachments).
    A refused write's note (`trace_bytes`), written back with its bytes, is taken off."""
    data = strip_trace(data)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(
            f"{what} must be UTF-8 text (invalid byte at offset {exc.start}); "
            "keep binary files as attachments inside a node"
        ) from None


class _FrontMatterLoader(_Loader):
    """Safe YAML with YAML 1.2 booleans and refused duplicate keys.

    Only true/false are booleans: in a memory, `answer: no` or `country: NO` are words, and
    YAML 1.1 would silently turn them into False.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set[tuple[str, str]] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != _MERGE_TAG:
                key = (key_node.tag, key_node.value)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key_node.value!r}", key_node.start_mark
                    )
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


_FrontMatterLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != _BOOL_TAG]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_FrontMatterLoader.add_implicit_resolver(
    _BOOL_TAG, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


class _RenderDumper(_Dumper):
    """Block style, multi-line strings as literal blocks, never anchors/aliases."""

    def ignore_aliases(self, data: object) -> bool:
        return True


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    if "\n" in data:
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", data)


_RenderDumper.add_representer(str, _represent_str)


@dataclass(frozen=True, slots=True)
class Document:
    """Front-matter fields (in the order written) and the markdown body."""

    fields: dict[str, object]
    body: str


# --- parsing and rendering -------------------------------------------------------------


def _is_fence(line: str, closing: bool = False) -> bool:
    stripped = line.rstrip(" \t\r")
    return stripped == "---" or (closing and stripped == "...")


def _first_line(text: str) -> str:
    end = text.find("\n")
    return text if end < 0 else text[:end]


def has_front_matter(text: str) -> bool:
    """Does the text open with a front-matter fence (a first line that is exactly '---')?"""
    return _is_fence(_first_line(text.removeprefix("\ufeff")))


def parse_document(text: str) -> Document:
    """Split optional YAML front matter from the body.

    Front matter opens with a first line '---' and closes with a line '---' or '...'; it
    must be a mapping with string keys. One blank line after the closing fence is not part
    of the body. Errors are `InvalidInput("front matter line N: reason")`, N counted in the
    whole text from 1.
    """
    if text.startswith("\ufeff") and has_front_matter(text):
        text = text[1:]  # a byte-order mark must not hide the front matter
    if not _is_fence(_first_line(text)):
        return Document(fields={}, body=text)
    lines = text.split("\n")
    close = next((i for i in range(1, len(lines)) if _is_fence(lines[i], closing=True)), None)
    if close is None:
        raise InvalidInput("front matter line 1: the opening '---' is never closed by '---'")
    # Keep the newline before the closing fence: a `|+` block scalar counts it.
    yaml_text = "".join(line + "\n" for line in lines[1:close])
    body = "\n".join(lines[close + 1 :])
    if body.startswith("\r\n"):
        body = body[2:]
    elif body.startswith("\n"):
        body = body[1:]

    try:
        data = yaml.load(yaml_text, Loader=_FrontMatterLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 2 if mark is not None else 2
        reason = exc.problem or exc.context or "invalid YAML"
        raise InvalidInput(f"front matter line {line}: {reason}") from None
    except yaml.reader.ReaderError as exc:
        line = yaml_text.count("\n", 0, max(exc.position, 0)) + 2
        raise InvalidInput(f"front matter line {line}: {exc.reason}") from None
    except yaml.YAMLError as exc:
        raise InvalidInput(f"front matter line 2: {exc}") from None
    except (ValueError, TypeError, OverflowError) as exc:  # e.g. a timestamp 2024-13-45
        line, key = _bad_value(yaml_text)
        where = f"{key}: " if key else ""
        raise InvalidInput(f"front matter line {line}: {where}{exc}") from None

    if data is None:
        return Document(fields={}, body=body)
    if not isinstance(data, dict):
        raise InvalidInput(
            f"front matter line {_first_content_line(yaml_text)}: must be a mapping of "
            f"field: value, got a {type(data).__name__}"
        )
    for key in data:
        if not isinstance(key, str):
            raise InvalidInput(
                f"front matter line {_key_line(yaml_text, key)}: field names must be text, "
                f"got {key!r}"
            )
    return Document(fields=dict(data), body=body)


def _first_content_line(yaml_text: str) -> int:
    for i, line in enumerate(yaml_text.split("\n")):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            return i + 2
    return 2


def _bad_value(yaml_text: str) -> tuple[int, str]:
    """The file line and the field of the first top-level value that YAML parses but cannot
    make a value of (a date 2024-13-45), for the error message (slow path)."""
    loader = _FrontMatterLoader(yaml_text)
    try:
        root = loader.get_single_node()
        if isinstance(root, yaml.MappingNode):
            for key_node, value_node in root.value:
                try:
                    loader.construct_object(value_node, deep=True)
                except (ValueError, TypeError, OverflowError):
                    return value_node.start_mark.line + 2, str(key_node.value)
    except yaml.YAMLError:
        pass
    finally:
        loader.dispose()
    return _first_content_line(yaml_text), ""


def _key_line(yaml_text: str, key: object) -> int:
    """The file line of a top-level key (slow path, only for error messages)."""
    try:
        root = yaml.compose(yaml_text, Loader=_FrontMatterLoader)
    except yaml.YAMLError:
        return 2
    if isinstance(root, yaml.MappingNode):
        for key_node, _ in root.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.value == str(key):
                return key_node.start_mark.line + 2
    return _first_content_line(yaml_text)


def _ordered_fields(ctype: ContextType | None, fields: Mapping[str, object]) -> dict:
    ordered: dict[str, object] = {}
    if ctype is not None:
        for spec in ctype.fields:
            if spec.name in fields:
                ordered[spec.name] = fields[spec.name]
    for key in sorted((k for k in fields if k not in ordered), key=str):
        ordered[key] = fields[key]
    return ordered


def render_document(ctype: ContextType | None, doc: Document) -> str:
    """The canonical L2 text: front matter in the type's field order, then the body.

    Fields the type does not declare follow in name order. `parse_document` of the result
    gives `doc` back.
    """
    if not doc.fields:
        if has_front_matter(doc.body):  # keep a leading '---' from reading as a fence
            return "---\n---\n" + doc.body
        return doc.body
    front = yaml.dump(
        _ordered_fields(ctype, doc.fields),
        Dumper=_RenderDumper,
        sort_keys=False,
        allow_unicode=True,
        default_flow_style=False,
        width=4096,
    )
    # After a `|+` scalar the emitter ends the document with '...', which reads as our fence.
    if front.endswith("\n...\n"):
        front = front[:-4]
    gap = "\n" if doc.body.startswith(("\n", "\r\n")) else ""
    return "---\n" + front + "---\n" + gap + doc.body


# --- merging ---------------------------------------------------------------------------


def _preview(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _normal(ctype: ContextType | None, name: str, value: object) -> object:
    """The coerced form of a value when the type declares the field, else the value."""
    if ctype is None or value is None or ctype.field(name) is None:
        return value
    try:
        return ctype.coerce_fields({name: value}).get(name, value)
    except InvalidInput:
        return value


def _is_empty(value: object) -> bool:
    if value is None:
        return True
    if isinstance(value, str):
        return not value.strip()
    return isinstance(value, list | tuple | dict) and not value


def _append_text(old: str, new: str, sep: str) -> str:
    new = new.strip()
    if not new or new in old:
        return old
    if not old.strip():
        return new
    return old.rstrip() + sep + new


def _merge_value(spec: FieldSpec | None, name: str, old: object, new: object) -> object:
    op = spec.merge if spec is not None else "replace"
    if old is None:
        if op == "patch" and isinstance(new, dict):
            return {k: v for k, v in new.items() if v is not None}
        return new
    if op == "replace":
        return new
    if op == "patch":
        if isinstance(old, dict) and isinstance(new, dict):
            merged = dict(old)
            for key, value in new.items():
                if value is None:  # JSON merge patch: null removes the key
                    merged.pop(key, None)
                else:
                    merged[key] = value
            return merged
        return new
    if op == "append":
        if isinstance(old, list) or isinstance(new, list):
            result = list(old) if isinstance(old, list) else [old]
            for item in new if isinstance(new, list) else [new]:
                if item not in result:
                    result.append(item)
            return result
        if isinstance(old, str) and isinstance(new, str):
            single_line = spec is not None and spec.type == "string"
            return _append_text(old, new, "; " if single_line else "\n\n")
        return new
    if op == "sum":
        for value in (old, new):
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InvalidInput(
                    f"field '{name}' adds up numbers (merge sum), got {_preview(value)}"
                )
        return old + new  # type: ignore[operator]
    if op == "immutable":
        if _is_empty(old) or old == new:
            return old if not _is_empty(old) else new
        if isinstance(old, str) and isinstance(new, str) and slugify(old) == slugify(new) != "":
            return old  # `Editor`, `test runner` for `editor`, `test-runner`: the same key
        raise InvalidInput(
            f"field '{name}' is immutable: it is {_preview(old)}, refusing {_preview(new)}"
        )
    raise InvalidInput(f"field '{name}': unknown merge op {op!r}")


def _merge_fields(
    ctype: ContextType | None, old: Mapping[str, object], new: Mapping[str, object]
) -> dict[str, object]:
    merged = dict(old)
    for name, value in new.items():
        if value is None:  # an empty key in front matter says nothing
            continue
        spec = ctype.field(name) if ctype is not None else None
        old_value = _normal(ctype, name, merged.get(name))
        merged[name] = _merge_value(spec, name, old_value, _normal(ctype, name, value))
    return merged


def _merge_body(ctype: ContextType | None, old: str, new: str) -> str:
    mode = ctype.body_merge if ctype is not None else "replace"
    if not new.strip():
        return old
    if mode == "replace" or not old.strip():
        return new
    if mode == "append":
        if new.strip() in old:
            return old
        return old.rstrip() + "\n\n" + new.strip() + "\n"
    if mode == "immutable":
        if new.strip() == old.strip():
            return old
        raise InvalidInput(
            f"the body of a {ctype.name if ctype else ''} node is immutable: it is "
            f"{_preview(old.strip())}, refusing {_preview(new.strip())}"
        )
    raise InvalidInput(f"unknown body merge {mode!r}")


def merge_documents(ctype: ContextType | None, old: Document, new: Document) -> Document:
    """Mode merge: each field present in `new` combines with `old` by its merge op.

    replace: the new value wins. patch: maps are updated key by key (a null value removes
    the key); other values are replaced. append: lists are extended without exact
    duplicates; text gains a paragraph (a single-line string gains "; part") unless it
    already contains it. sum: numbers are added. immutable: set once; a different later
    value raises `InvalidInput` naming the field and both values. The body follows
    `ctype.body_merge` (replace: a non-empty new body replaces; append: a new paragraph
    unless already contained, and a paragraph that states a value the write replaced is
    dropped, `superseded`: "I live in Oslo." goes once `location` is Lisbon, the older
    version keeps it; immutable: a different non-empty body is refused). Without a type
    every field and the body are replaced.
    """
    fields = _merge_fields(ctype, old.fields, new.fields)
    gone = superseded(ctype, old.fields, fields)
    body = _merge_body(ctype, _without_stated(old.body, gone) if gone else old.body, new.body)
    return Document(fields=fields, body=body)


Retraction = tuple[str, str, str]  # (field, key of a map's entry or "", value)


def _said(a: str, b: str) -> bool:
    """Whether two values say the same thing ("Peanuts", "peanut")."""

    def norm(text: str) -> str:
        text = " ".join(text.lower().split())
        return text[:-1] if text.endswith("s") and len(text) > 3 else text

    return norm(a) == norm(b)


def without_retracted(
    fields: Mapping[str, object], retracts: Sequence[Retraction]
) -> dict[str, object]:
    """`fields` without each value said no longer to hold: a map's entry (`facts`,
    `allergy`, `peanuts`: "peanuts, sesame" keeps sesame, "peanuts" goes with its key) or
    a plain field's value (`value`, "", `coffee`: gone only while it is coffee)."""
    out = dict(fields)
    for name, key, value in retracts:
        current = out.get(name)
        if key and isinstance(current, Mapping):
            entry = current.get(key)
            if not isinstance(entry, str):
                continue
            kept = [part for part in entry.split(", ") if not _said(part, value)]
            if len(kept) == len(entry.split(", ")):
                continue
            rest = {k: v for k, v in current.items() if k != key}
            if kept:
                rest[key] = ", ".join(kept)
            out[name] = rest
        elif not key and isinstance(current, str) and _said(current, value):
            del out[name]
    return out


def superseded(
    ctype: ContextType | None, old: Mapping[str, object], merged: Mapping[str, object]
) -> list[tuple[str, str, str]]:
    """(field, old value, new value) of each single-valued text field a merge replaced
    (`location: Oslo` by `Lisbon`), and of each text entry of a patched map (an entity's
    `attributes`, named by its key): what a newer statement made out of date. A value
    taken back ("I'm not allergic to penicillin after all") has "" for its new value."""
    if ctype is None:
        return []
    out: list[tuple[str, str, str]] = []

    def check(name: str, before: object, after: object) -> None:
        if isinstance(before, str) and before.strip() and after is None:
            out.append((name, before.strip(), ""))  # taken back
        elif (
            isinstance(before, str)
            and isinstance(after, str)
            and before.strip()
            and after.strip()
            and before.strip().lower() != after.strip().lower()
        ):
            out.append((name, before.strip(), after.strip()))

    for name, before in old.items():
        spec = ctype.field(name)
        after = merged.get(name)
        if spec is not None and spec.merge == "replace":
            check(name, before, after)
        elif (
            spec is not None
            and spec.merge == "patch"
            and isinstance(before, Mapping)
            and isinstance(after, Mapping)
        ):
            for key, value in before.items():
                check(str(key), value, after.get(key))
    return out


def _without_stated(body: str, gone: list[tuple[str, str, str]]) -> str:
    """The body without its paragraphs that state a replaced value and not its new one."""

    def says(text: str, value: str) -> bool:
        return re.search(rf"(?<!\w){re.escape(value)}(?!\w)", text, re.I) is not None

    kept = [
        para
        for para in re.split(r"\n[ \t]*\n", body)
        if not any(
            after and says(para, before) and not says(para, after) for _n, before, after in gone
        )
    ]
    return "\n\n".join(p.strip("\n") for p in kept if p.strip()) + ("\n" if kept else "")


# --- aggregation -----------------------------------------------------------------------

_BULLET_RE = re.compile(r"^( {0,3})([-*+]|\d{1,9}[.)])(?:[ \t]+(.*)|[ \t]*)$")
_HEADING_RE = re.compile(r"^ {0,3}#{1,6}(?:[ \t]|$)")
_FENCE_RE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_BREAK_RE = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_MARKER_RE = re.compile(r"(?m)^[ \t]*(?:[-*+]|\d{1,9}[.)]|#{1,6}|>+)(?=\s)")
_NON_WORD_RE = re.compile(r"[\W_]+")
_NUMBER_RE = re.compile(r"\d+")


def body_items(body: str) -> list[str]:
    """Split a markdown body into items.

    A bullet ("- ", "* ", "+ ", "1. ", "1) ") starts an item that runs over its
    continuation lines (lazy lines, indented lines, nested bullets, and indented
    paragraphs after a blank line); the marker is not part of the item. Other text splits
    into blank-line-separated paragraphs. A heading is an item of its own (with its '#'),
    a fenced code block is one item, thematic breaks are dropped.
    """
    items: list[str] = []
    current: list[str] = []
    kind = ""  # "", "bullet", "para"
    blank_after_bullet = False
    fence = ""

    def flush() -> None:
        nonlocal current, kind, blank_after_bullet
        if current:
            text = "\n".join(current).strip("\n")
            if text.strip():
                items.append(text)
        current, kind, blank_after_bullet = [], "", False

    for line in body.splitlines():
        if fence:
            current.append(line)
            if line.strip().startswith(fence):
                fence = ""
                flush()
            continue
        if not line.strip():
            if kind == "bullet":
                blank_after_bullet = True
            else:
                flush()
            continue
        indented = line.startswith(("  ", "\t"))
        fence_match = _FENCE_RE.match(line)
        if fence_match and not (kind == "bullet" and indented):
            flush()
            fence = fence_match.group(1)[0] * 3
            current = [line.strip()]
            continue
        if _BREAK_RE.match(line):
            flush()
            continue
        if _HEADING_RE.match(line):
            flush()
            items.append(line.strip())
            continue
        bullet = _BULLET_RE.match(line)
        if kind == "bullet" and (indented or (not bullet and not blank_after_bullet)):
            current.append(_dedent_continuation(line) if indented else line.strip())
            blank_after_bullet = False
            continue
        if bullet:
            flush()
            kind = "bullet"
            current = [bullet.group(3) or ""]
            continue
        if kind != "para":
            flush()
            kind = "para"
        current.append(line.strip())
    flush()
    return items


def _dedent_continuation(line: str) -> str:
    line = line.rstrip()
    return line[1:] if line.startswith("\t") else line[2:]


def normalize_item(text: str) -> str:
    """Lowercase, bullet and heading markers and punctuation removed, whitespace collapsed."""
    text = _MARKER_RE.sub(" ", text.lower())
    return _NON_WORD_RE.sub(" ", text).strip()


RATIO_MIN = 0.9  # difflib ratio of two near-duplicates
JACCARD_MIN = 0.85  # token-set Jaccard of two near-duplicates (four tokens or more each)
JACCARD_TOKENS = 4


@dataclass(frozen=True, slots=True)
class Comparable:
    """A text as `near_duplicate` compares it, worked out once: consolidation compares
    each node's body with every other of its group."""

    norm: str  # normalize_item(text)
    numbers: tuple[str, ...]  # the numbers in it, sorted
    words: frozenset[str]  # its tokens


def comparable(text: str) -> Comparable:
    norm = normalize_item(text)
    return Comparable(norm, tuple(sorted(_NUMBER_RE.findall(norm))), frozenset(norm.split()))


def is_near_duplicate(a: str, b: str) -> bool:
    """Do two items say the same thing?

    Equal after `normalize_item`; or, when both carry the same numbers, a difflib ratio of
    at least 0.9 or a token-set Jaccard of at least 0.85 with four tokens or more each.
    Items whose numbers differ ("retry 3 times" / "retry 5 times") are distinct facts.
    """
    return near_duplicate(comparable(a), comparable(b))


def near_duplicate(a: Comparable, b: Comparable) -> bool:
    """`is_near_duplicate` of two texts already made `comparable`."""
    if a.norm == b.norm:
        return True
    if not a.norm or not b.norm or a.numbers != b.numbers:
        return False
    return ratio_at_least(a.norm, b.norm, RATIO_MIN) or jaccard_at_least(
        a.words, b.words, JACCARD_MIN
    )


def ratio_at_least(a: str, b: str, cut: float) -> bool:
    """Is difflib's ratio of a and b (autojunk off) at least `cut`?

    difflib's matching blocks are a common subsequence, so its ratio 2M/(|a|+|b|) is never
    above the LCS ratio 2·LCS/(|a|+|b|), which rapidfuzz's Indel similarity computes in
    microseconds (bit-parallel): below the cut there, below it in difflib too, and the
    quadratic matcher never runs for a clearly different pair (about 13 ms for two
    950-character bodies). The small slack keeps a float rounding from refusing an exact
    tie."""
    if not Indel.normalized_similarity(a, b, score_cutoff=cut - 1e-9):
        return False
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    return (
        matcher.real_quick_ratio() >= cut
        and matcher.quick_ratio() >= cut
        and (matcher.ratio() >= cut)
    )


def jaccard_at_least(a: frozenset[str], b: frozenset[str], cut: float) -> bool:
    if len(a) < JACCARD_TOKENS or len(b) < JACCARD_TOKENS:
        return False
    if min(len(a), len(b)) < cut * max(len(a), len(b)):  # J <= min/max
        return False
    common = len(a & b)
    return common / (len(a) + len(b) - common) >= cut


def _as_bullet(item: str) -> str:
    lines = item.split("\n")
    rest = [("  " + line) if line.strip() else "" for line in lines[1:]]
    return "\n".join(["- " + lines[0], *rest])


def _ends_in_list(body: str) -> bool:
    lines = body.rstrip().splitlines()
    if not lines:
        return False
    last_block_start = len(lines) - 1
    while last_block_start > 0 and lines[last_block_start - 1].strip():
        last_block_start -= 1
    return bool(_BULLET_RE.match(lines[last_block_start]))


def aggregate_documents(
    ctype: ContextType | None, old: Document, new: Document
) -> tuple[Document, int]:
    """Mode aggregate: fields merge as in `merge_documents`; body items accumulate.

    The first write's body is kept as written. After that, each item of a new body
    (see `body_items`) is appended as a "- item" bullet unless a near-duplicate is already
    in the node (or earlier in the same write); headings of later writes are structure,
    not facts, and are not appended. Returns the document and the number of items folded
    as duplicates.
    """
    fields = _merge_fields(ctype, old.fields, new.fields)
    if not old.body.strip():
        return Document(fields=fields, body=new.body), 0
    known = [comparable(item) for item in body_items(old.body)]
    added: list[str] = []
    folded = 0
    for item in body_items(new.body):
        if _HEADING_RE.match(item):
            continue
        key = comparable(item)
        if any(near_duplicate(key, other) for other in known):
            folded += 1
            continue
        known.append(key)
        added.append(_as_bullet(item))
    if not added:
        return Document(fields=fields, body=old.body), folded
    sep = "\n" if _ends_in_list(old.body) else "\n\n"
    body = old.body.rstrip() + sep + "\n".join(added) + "\n"
    return Document(fields=fields, body=body), folded
