"""The file an export writes for a node, as far as reading it back is concerned.

`contextfs export` writes each node as its L2 with a `contextfs:` mapping added as the last
key of its front matter (type, hand-written L0/L1, facts) and its links rewritten so they
resolve in a vault (`name_links`, `folder_links`); `read_note` splits such a file back into
that mapping and the L2 exactly as stored. Both an import (`transfer.vault`) and a mount
that is handed such a file by `rsync`, `tar` or `cp` (`fs.roles.tiers`) read it here.

Boundary: text in, text out; no files, no store.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass
from typing import Any

import yaml

from contextfs.ctxtypes import slugify

META_KEY = "contextfs"  # the front-matter key an export adds
# a markdown link or embed, `![alt](img/a.png)`: its target is group 1
FILE_MDLINK_RE = re.compile(r"!?\[[^\]\n]*\]\(<?([^)<>\s]+)>?(?:\s+\"[^\"]*\")?\)")


def closing_fence(lines: list[str]) -> int | None:
    """The index of the line closing front matter opened on line 0 (as parse_document)."""
    if not lines or lines[0].rstrip(" \t\r") != "---":
        return None
    for i in range(1, len(lines)):
        if lines[i].rstrip(" \t\r") in ("---", "..."):
            return i
    return None


# `[[Title]]`, `[[Title#Heading]]` (no alias, not an embed), and `[[name|Title]]`.
_WIKILINK_RE = re.compile(r"(?<!!)\[\[([^\[\]|#^\n]+)([#^][^\[\]|\n]*)?\]\]")
_NAMED_LINK_RE = re.compile(r"(?<!!)\[\[([^\[\]|#^\n]+)([#^][^\[\]|\n]*)?\|([^\[\]\n]+)\]\]")


_DATED_NAME = re.compile(r"\d{4}-\d{2}-\d{2}-(.+)")  # an event's node name: its day first


def _links_to(name: str, title: str) -> bool:
    """Whether `[[name|title]]` is a link `name_links` wrote for `[[title]]`: the title's
    slug is the node's name, or its name after the day (`2024-04-18-roastery-visit` for
    "Roastery visit", an event named by its date and title)."""
    slug = slugify(title)
    dated = _DATED_NAME.fullmatch(name)
    return slug == name or (dated is not None and dated.group(1) == slug)


def name_links(body: str, names: set[str]) -> str | None:
    """body with each `[[Title]]` whose title names a node of the export by its file name
    written `[[name|Title]]`, so the link resolves in Obsidian (`[[Ana Souza]]` →
    `[[ana-souza|Ana Souza]]`; `[[Roastery visit]]` → `[[2024-04-18-roastery-visit|Roastery
    visit]]` when one event of the export is named so by its day, and no node by the
    title alone); None when nothing is to change, or when the body already holds a link
    of that form, which the import could not tell from one written here."""
    if any(_links_to(m.group(1), m.group(3)) for m in _NAMED_LINK_RE.finditer(body)):
        return None
    dated: dict[str, str | None] = {}  # title slug -> the one dated name (None: several)
    for n in names:
        m = _DATED_NAME.fullmatch(n)
        if m is not None:
            dated[m.group(1)] = None if m.group(1) in dated else n

    def named(m: re.Match[str]) -> str:
        slug = slugify(m.group(1))
        name = slug if slug in names else dated.get(slug)
        if name is None or name == m.group(1):
            return m.group(0)
        return f"[[{name}{m.group(2) or ''}|{m.group(1)}]]"

    out = _WIKILINK_RE.sub(named, body)
    return out if out != body else None


def unname_links(body: str) -> str:
    """`name_links` undone: `[[ana-souza|Ana Souza]]` → `[[Ana Souza]]`."""

    def titled(m: re.Match[str]) -> str:
        if not _links_to(m.group(1), m.group(3)):
            return m.group(0)
        return f"[[{m.group(3)}{m.group(2) or ''}]]"

    return _NAMED_LINK_RE.sub(titled, body)


def _link_target(target: str) -> str | None:
    """A markdown link's target as a path in the vault, or None for a URL."""
    if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):
        return None
    return urllib.parse.unquote(target)


def folder_links(body: str, node: str, files: set[str]) -> str | None:
    """body with each markdown link to one of the node's own attachment files
    (`![plan](plan.png)`, the path as the note gave it) pointed into the folder the export
    writes them to beside the node's file (`![plan](harbor-migration/plan.png)`), so it
    resolves there; None when nothing is to change, or when a link already points into
    that folder, which the import could not tell from one written here."""
    links = list(FILE_MDLINK_RE.finditer(body))
    if any((_link_target(m.group(1)) or "").startswith(f"{node}/") for m in links):
        return None

    def inside(m: re.Match[str]) -> str:
        path = _link_target(m.group(1))
        if path is None or path not in files:
            return m.group(0)
        start, end = m.span(1)
        whole = m.group(0)
        at = start - m.start(0)
        return whole[:at] + f"{node}/" + whole[at:]

    out = FILE_MDLINK_RE.sub(inside, body)
    return out if out != body else None


def unfolder_links(body: str, node: str) -> str:
    """`folder_links` undone: `![plan](harbor-migration/plan.png)` → `![plan](plan.png)`."""

    def outside(m: re.Match[str]) -> str:
        if not m.group(1).startswith(f"{node}/"):
            return m.group(0)
        at = m.start(1) - m.start(0)
        whole = m.group(0)
        return whole[:at] + whole[at + len(node) + 1 :]

    return FILE_MDLINK_RE.sub(outside, body)


@dataclass(frozen=True, slots=True)
class Note:
    """A markdown file read for import: `meta` is its `contextfs:` mapping (None for a
    plain note), `l2` the text to store (an exported node's L2 exactly as it was)."""

    meta: dict[str, Any] | None
    l2: str

    @property
    def pins(self) -> dict[str, str]:
        """The tiers a person wrote by hand, as exported (tier -> text: "L0", "L1")."""
        meta = self.meta or {}
        return {t.upper(): v for t in ("l0", "l1") if isinstance(v := meta.get(t), str)}


def read_note(text: str, name: str = "") -> Note:
    """Split a vault file into the ContextFS facts (if it was exported) and its L2;
    `name` is the file's name without `.md` (an exported node's folder)."""
    lines = text.split("\n")
    close = closing_fence(lines)
    if close is None:
        return Note(None, text)
    start = next((i for i in range(1, close) if lines[i].rstrip() == f"{META_KEY}:"), None)
    if start is None:
        return Note(None, text)
    end = start + 1
    while end < close and (not lines[end] or lines[end][0] in " \t"):
        end += 1
    try:
        meta = (yaml.safe_load("\n".join(lines[start:end])) or {}).get(META_KEY)
    except yaml.YAMLError:
        meta = None
    if not isinstance(meta, dict) or not isinstance(meta.get("type"), str):
        return Note(None, text)  # someone else's `contextfs:` key: a plain note
    own = lines[1:start] + lines[end:close]
    rest = lines[close + 1 :]
    if meta.get("links") == "named":
        rest = unname_links("\n".join(rest)).split("\n")
    if meta.get("file_links") == "in_folder" and name:
        rest = unfolder_links("\n".join(rest), name).split("\n")
    if not meta.get("front_matter", True) and not any(s.strip() for s in own):
        return Note(meta, "\n".join(rest))
    return Note(meta, "\n".join([lines[0], *own, lines[close], *rest]))
