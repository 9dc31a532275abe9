"""Markdown vaults out and in: `contextfs export` and `contextfs import`.

Role: `export_tree` writes a plain markdown tree, one `<name>.md` per node (its L2 with the
node's facts as YAML front matter under one `contextfs:` key), its attachments in a folder
`<name>/` beside it, and with `history` every version in `<name>/.history/vN.md`; a folder
Obsidian or any markdown tool opens. The nodes come from a `Source`: `MountSource` reads a
live mount's files, `StoreSource` a `Memory` opened offline on an unmounted data dir (the
store of a mount belongs to its daemon: DuckDB lets one process open it). Both yield the
same `NodeRecord`s, so one writer decides the format.

`import_tree` brings such a tree, or any folder of markdown (an Obsidian or Basic Memory
vault), into a live mount through its files, as a person's writes, or into an unmounted
data dir through a `Memory` (`vault_targets`): an exported node whose name is free is
made again (`mkdir` + `L2.md`, pinned `L0.md`/`L1.md`, attachments, replayed history;
in a data dir also its id, times, provenance, importance and reads), anything else is a
file written into a type directory and routed by the type's strategy. Secrets are
redacted, names, fields and permissions checked, and a refusal is reported with its
reason and the import goes on. docs/agents.md says what survives a round trip.

Boundary: no pyfuse3, no `contextfs.fs`, no daemon: an import is file calls on a mount
or calls of a `Memory` the caller opened, an export of a data dir reads such a `Memory`.
Progress goes to a callback.
"""

from __future__ import annotations

import datetime as dt
import errno
import json
import logging
import os
import re
import stat
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import yaml

from contextfs.ctxtypes import ContextType, load_types
from contextfs.errors import ContextFSError, InvalidInput, UsageError
from contextfs.memory.document import parse_document
from contextfs.memory.exported import (
    FILE_MDLINK_RE,
    META_KEY,
    Note,
    closing_fence,
    folder_links,
    name_links,
    read_note,
)
from contextfs.memory.restore import access_fact, fact_access, fact_time
from contextfs.memory.routing import tag_list
from contextfs.model import DIR_MODE, FILE_MODE, Access
from contextfs.transfer.vault_targets import (
    MountTarget,
    Place,
    StoreTarget,
    Target,
    singleton_made,
)

if TYPE_CHECKING:
    from contextfs.memory.service import Memory

log = logging.getLogger(__name__)

HISTORY = ".history"
TIERS = ("L0.md", "L1.md", "L2.md", "meta.yaml")
# meta.yaml facts kept under `contextfs.facts`: the store's own bookkeeping. An import into
# a data dir restores them (vault_targets.StoreTarget); one through a mount's files cannot.
FACTS = (
    "id",
    "version",
    "indexed_version",
    "created",
    "updated",
    "content_hash",
    "importance",
    "access_count",
    "sources",
    "tags",
)

Progress = Callable[[int, int], None]

# The type a plain note's folder gives it, when its own `type:` names none: the folders
# of Obsidian, Logseq and Basic Memory vaults as people name them (case and blanks do not
# matter; the nearest folder that has an entry wins). `contextfs import --map F=T` adds
# or overrides entries. A type of another scope than the owner's is passed over.
FOLDER_TYPES: dict[str, str] = {
    **dict.fromkeys(
        ("people", "persons", "contacts", "projects", "companies", "organizations",
         "organisations", "places", "pages", "entities"),
        "entity",
    ),
    **dict.fromkeys(
        ("journal", "journals", "daily", "daily notes", "dailies", "diary", "meetings",
         "calendar", "events"),
        "event",
    ),
    **dict.fromkeys(("preferences", "likes"), "preference"),
    **dict.fromkeys(("skills", "runbooks", "how-to", "howto", "guides"), "skill"),
    **dict.fromkeys(("tools",), "tool"),
    **dict.fromkeys(("cases", "incidents", "postmortems"), "case"),
    **dict.fromkeys(("patterns",), "pattern"),
}  # fmt: skip
# A note's links to the vault's other files: `![[diagram.png]]`, `[[spec.pdf|the spec]]`
# (a name with an extension that is not markdown's), and `![alt](img/a.png)`.
_FILE_WIKILINK_RE = re.compile(
    r"!?\[\[([^\[\]|#^\n]+\.(?!md\b|markdown\b)[A-Za-z0-9]{1,8})(?:[|#^][^\[\]\n]*)?\]\]"
)
# A daily note's name: Obsidian's `2024-03-02`, Logseq's `2024_03_02`.
_DAILY_NAME = re.compile(r"(\d{4})[-_.](\d{2})[-_.](\d{2})")


# ---- records ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AttachmentRecord:
    """A file, folder or symlink inside a node, `rel` relative to the node directory."""

    rel: str
    kind: str  # file | dir | symlink | link (a hard link: `target` is the name it shares)
    mode: int
    mtime: float
    data: bytes = b""
    target: str = ""


def _linked(records: list[AttachmentRecord], keys: dict[str, object]) -> list[AttachmentRecord]:
    """`records` sorted by name, each file that shares its bytes with one before it (the
    same `keys` entry: the inode it shows, the row that holds it) a `link` to that one."""
    first: dict[object, str] = {}
    out = []
    for r in sorted(records, key=lambda r: r.rel):
        key = keys.get(r.rel)
        if r.kind == "file" and key is not None:
            if key in first:
                r = AttachmentRecord(r.rel, "link", r.mode, r.mtime, target=first[key])
            else:
                first[key] = r.rel
        out.append(r)
    return out


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """What an export writes of a node. `path` is `<kind>/<owner>/<type-dir>[/<name>]`."""

    path: str
    type: str
    l2: str
    l0: str | None  # only when a person wrote it (pinned)
    l1: str | None
    facts: dict[str, Any]
    attachments: tuple[AttachmentRecord, ...] = ()
    # (version, text, when it was saved: the mtime its `.history/vN.md` shows and gets)
    history: tuple[tuple[int, str, float], ...] = ()


class Source(Protocol):
    """Where an export reads nodes from (a mount, or a store opened offline); `problems`
    lists nodes it could not read."""

    problems: list[str]

    def owners(self) -> list[str]: ...

    def nodes(self, history: bool) -> Iterator[NodeRecord]: ...

    def count(self) -> int: ...

    def names(self) -> set[str]:
        """The file names (without `.md`) the export gives its nodes, for wikilinks."""
        return set()

    def folders(self) -> list[tuple[str, Access]]:
        """Each owner directory and its type folders (`user/alice`, `user/alice/events`)
        with their owner, group and mode (`dir_mode`)."""
        return []


class MountSource(Source):
    """A live mount, read through its files (reads do not count as accesses)."""

    def __init__(self, mount: Path) -> None:
        self.mount = mount
        self.types = load_types([mount / ".schemas"])
        self.problems: list[str] = []
        self._dirs: list[tuple[Path, ContextType]] | None = None

    def owners(self) -> list[str]:
        return [
            f"{kind}/{p.name}"
            for kind in ("user", "agent")
            for p in sorted((self.mount / kind).iterdir())
            if not p.name.startswith(".")
        ]

    def _node_dirs(self) -> list[tuple[Path, ContextType]]:
        if self._dirs is None:
            found = []
            for owner in self.owners():
                kind = owner.split("/")[0]
                for t in sorted(self.types.values(), key=lambda t: t.type_dir):
                    if t.scope != kind:
                        continue
                    tdir = self.mount / owner / t.type_dir
                    if t.singleton:
                        if singleton_made(tdir):
                            found.append((tdir, t))
                        continue
                    if not tdir.is_dir():
                        continue
                    # every folder of a type directory is a node: one made by mkdir and
                    # never written shows no meta.yaml (so `cp -r` can make one) and may
                    # hold attachments all the same
                    for d in sorted(tdir.iterdir()):
                        if not d.name.startswith(".") and d.is_dir() and not d.is_symlink():
                            found.append((d, t))
            self._dirs = found
        return self._dirs

    def count(self) -> int:
        return len(self._node_dirs())

    def names(self) -> set[str]:
        return {d.name for d, _ in self._node_dirs()}

    def folders(self) -> list[tuple[str, Access]]:
        out = []
        for owner in self.owners():
            for rel in [owner] + sorted(
                f"{owner}/{t.type_dir}"
                for t in self.types.values()
                if t.scope == owner.split("/")[0] and not t.singleton
            ):
                try:
                    st = (self.mount / rel).stat()
                except OSError:
                    continue
                out.append((rel, Access(st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode), 0)))
        return out

    def _access(self, d: Path) -> dict[str, Any] | None:
        """The node's owner, group and modes when they are not what its owner directory
        gives a node (`access_fact`)."""
        rel = d.relative_to(self.mount).parts
        o = (self.mount / rel[0] / rel[1]).stat()
        st = d.stat()
        shown = [d / "L2.md", d / "L0.md", d / "L1.md"]
        tier = next((p for p in shown if p.exists()), None)
        if tier is not None:
            file_mode = stat.S_IMODE(tier.stat().st_mode)
        elif (d / "meta.yaml").exists():  # its files' mode without the write bits
            file_mode = stat.S_IMODE((d / "meta.yaml").stat().st_mode) | 0o200
        else:  # never written and no file of it shown: its folder's (`_unwritten`)
            file_mode = stat.S_IMODE(st.st_mode) & 0o666
        node = Access(st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode), file_mode)
        return access_fact(node, Access(o.st_uid, o.st_gid, DIR_MODE, FILE_MODE))

    def nodes(self, history: bool) -> Iterator[NodeRecord]:
        for d, t in self._node_dirs():
            try:
                yield self._read(d, t, history)
            except OSError as exc:  # e.g. a node another caller may not read: go on
                self.problems.append(f"{d.relative_to(self.mount)}: {exc.strerror or exc}")

    def _read(self, d: Path, t: ContextType, history: bool) -> NodeRecord:
        shown = d / "meta.yaml"  # a node never written shows none: its facts are its access
        meta = (yaml.safe_load(shown.read_text(encoding="utf-8")) or {}) if shown.exists() else {}
        if not meta:
            meta = {"version": 0, "l0_pinned": (d / "L0.md").exists()}
            meta["l1_pinned"] = (d / "L1.md").exists()
        versions: list[tuple[int, str, float]] = []
        if history and (d / HISTORY).is_dir():
            for v in (d / HISTORY).iterdir():
                if v.name.startswith("v") and v.name[1:-3].isdigit() and v.name.endswith(".md"):
                    text = _text(v)
                    versions.append((int(v.name[1:-3]), text, v.stat().st_mtime))
            versions.sort()
        l2 = d / "L2.md"  # a node made by mkdir and never written has no L2.md yet
        inodes: dict[str, object] = {}  # the files with more than one name: their inode
        return NodeRecord(
            path=str(d.relative_to(self.mount)),
            type=t.name,
            l2=_text(l2) if l2.exists() else "",
            l0=_text(d / "L0.md") if meta.get("l0_pinned") else None,
            l1=_text(d / "L1.md") if meta.get("l1_pinned") else None,
            facts=_facts(meta, self._access(d)),
            attachments=tuple(
                _linked(list(_walk_attachments(d, self.problems, self.mount, inodes)), inodes)
            ),
            history=tuple(versions),
        )


def _unwritten(a: Access) -> Access:
    """A node never written shows no file, so no mode of its files: an export gives it
    the one a node's files take from its folder (`mkdir -m 700`: 0600), through a mount
    and from a data dir alike (the store may hold another, which nothing shows)."""
    return Access(a.uid, a.gid, a.dir_mode, a.dir_mode & 0o666)


def _text(path: Path) -> str:
    """A file's text as stored: `\r\n` and a lone `\r` stay (`read_text` would make
    them `\n`, and a node's text would not come back as it was)."""
    return path.read_bytes().decode("utf-8")


def _facts(meta: dict[str, Any], access: dict[str, Any] | None) -> dict[str, Any]:
    """The meta.yaml facts an export shows, times as the ISO strings meta.yaml writes, and
    the node's owner, group and modes when they are its own (`access`)."""
    out = {}
    for k in FACTS:
        if k in meta:
            v = meta[k]
            out[k] = v.strftime("%Y-%m-%dT%H:%M:%SZ") if isinstance(v, dt.datetime) else v
    if access is not None:
        out["access"] = access
    return out


def _walk_attachments(
    node_dir: Path, problems: list[str], top: Path, inodes: dict[str, object]
) -> Iterator[AttachmentRecord]:
    """Everything in a node directory that is not a tier, meta.yaml or .history (the
    inode of each file with more than one name put in `inodes`). One that cannot be read
    (a path longer than the system takes) is a problem reported with its path, not the
    end of its node."""
    stack = [Path()]
    while stack:
        rel_dir = stack.pop()
        try:
            entries = sorted(os.scandir(node_dir / rel_dir), key=lambda e: e.name)
        except OSError as exc:
            problems.append(f"{(node_dir / rel_dir).relative_to(top)}: {exc.strerror or exc}")
            continue
        for entry in entries:
            rel = rel_dir / entry.name
            if rel_dir == Path() and (entry.name in TIERS or entry.name == HISTORY):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
                mode = stat.S_IMODE(st.st_mode)
                if entry.is_symlink():
                    yield AttachmentRecord(
                        str(rel), "symlink", mode, st.st_mtime, target=os.readlink(entry.path)
                    )
                elif entry.is_dir(follow_symlinks=False):
                    yield AttachmentRecord(str(rel), "dir", mode, st.st_mtime)
                    stack.append(rel)
                elif entry.is_file(follow_symlinks=False):
                    if st.st_nlink > 1:
                        inodes[str(rel)] = (st.st_dev, st.st_ino)
                    data = Path(entry.path).read_bytes()
                    yield AttachmentRecord(str(rel), "file", mode, st.st_mtime, data=data)
                # FIFOs and sockets carry no bytes: an export has nothing to write for them
            except OSError as exc:
                problems.append(f"{(node_dir / rel).relative_to(top)}: {exc.strerror or exc}")


class StoreSource(Source):
    """A `Memory` opened offline (an unmounted data dir): the same facts as the mount's
    files, from the same service (its `meta_yaml` is what `meta.yaml` shows)."""

    def __init__(self, memory: Memory) -> None:
        self.memory = memory
        self.problems: list[str] = []

    def owners(self) -> list[str]:
        return sorted(f"{k}/{o}" for k, o in self.memory.owners)

    def _live(self) -> list:
        m = self.memory
        return sorted(m.walk(), key=m.node_path)

    def count(self) -> int:
        return len(self._live())

    def names(self) -> set[str]:
        return {self.memory.node_path(n).rsplit("/", 1)[-1] for n in self._live()}

    def folders(self) -> list[tuple[str, Access]]:
        m, uid, gid = self.memory, os.getuid(), os.getgid()
        out = []
        for owner in self.owners():
            out.append((owner, m.owner_access(owner, uid, gid)))
            for t in sorted(m.types.values(), key=lambda t: t.type_dir):
                if t.scope == owner.split("/")[0] and not t.singleton:
                    rel = f"{owner}/{t.type_dir}"
                    out.append((rel, m.dir_access(rel, uid, gid)))
        return out

    def nodes(self, history: bool) -> Iterator[NodeRecord]:
        m = self.memory
        for n in self._live():
            # a node never written shows no meta.yaml in a mount: the same facts here
            meta = (yaml.safe_load(m.meta_yaml(n)) or {}) if n.version > 0 else {"version": 0}
            atts = []
            keys: dict[str, object] = {}  # each file's row that holds its bytes
            for a in m.attachment_store.node_attachments(n):
                rel = m.attachment_store.attachment_path(a).removeprefix(m.node_path(n) + "/")
                if a.kind == "dir":
                    atts.append(AttachmentRecord(rel, "dir", a.mode & 0o7777, a.mtime))
                elif a.kind == "symlink":
                    target = (a.target or b"").decode("utf-8", "surrogateescape")
                    atts.append(AttachmentRecord(rel, "symlink", 0o777, a.mtime, target=target))
                elif a.kind == "file":
                    holder = m.attachments[a.link_of] if a.link_of is not None else a
                    keys[rel] = holder.id
                    data = bytes(m.attachment_store.attachment_data(holder))
                    atts.append(
                        AttachmentRecord(rel, "file", holder.mode & 0o7777, holder.mtime, data)
                    )
            names = Counter(keys.values())
            atts = _linked(atts, {k: v for k, v in keys.items() if names[v] > 1})
            versions = (
                tuple((v, m.history_text(n, v), c) for v, c, _s in n.history) if history else ()
            )
            own = m.access.get(("node", str(n.id)))
            if own is not None and n.version == 0 and not (n.l0_pinned or n.l1_pinned):
                own = _unwritten(own)
            o = m.owner_access(f"{n.owner_kind}/{n.owner_id}", os.getuid(), os.getgid())
            default = Access(o.uid, o.gid, DIR_MODE, FILE_MODE)
            yield NodeRecord(
                path=m.node_path(n),
                type=n.type,
                l2=n.l2,
                l0=n.l0 if n.l0_pinned else None,
                l1=n.l1 if n.l1_pinned else None,
                facts=_facts(meta, access_fact(own, default) if own is not None else None),
                attachments=tuple(atts),
                history=versions,
            )


# ---- the markdown file of a node -----------------------------------------------------------


class _Dumper(yaml.SafeDumper):
    """Block style, multi-line strings as literal blocks, never anchors."""

    def ignore_aliases(self, data: object) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data and not data.endswith((" ", "\t")) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str)


def node_markdown(rec: NodeRecord, names: set[str] | None = None) -> str:
    """The exported file: L2 as stored, with a `contextfs:` mapping added as the last key
    of its front matter (front matter is added when L2 has none), and its body's
    wikilinks to other nodes of the export named by their files (`name_links`, marked
    `links: named` in the mapping; an import undoes it)."""
    block: dict[str, Any] = {"type": rec.type}
    if rec.l0 is not None:
        block["l0"] = rec.l0
    if rec.l1 is not None:
        block["l1"] = rec.l1
    lines = rec.l2.split("\n")
    close = closing_fence(lines)
    block["front_matter"] = close is not None
    head, body = (
        lines[: close + 1 if close is not None else 0],
        lines[close + 1 if close is not None else 0 :],
    )
    linked = name_links("\n".join(body), names) if names else None
    if linked is not None:
        block["links"] = "named"
        body = linked.split("\n")
        lines = [*head, *body]
    node = rec.path.rsplit("/", 1)[-1]
    files = {a.rel for a in rec.attachments if a.kind == "file"}
    inside = folder_links("\n".join(body), node, files) if files else None
    if inside is not None:
        block["file_links"] = "in_folder"
        lines = [*head, *inside.split("\n")]
    block["facts"] = rec.facts
    dumped = yaml.dump(
        {META_KEY: block}, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=4096
    )
    if close is None:
        return "---\n" + dumped + "---\n" + "\n".join(lines)
    return "\n".join(lines[:close]) + "\n" + dumped + "\n".join(lines[close:])


# ---- export ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ExportReport:
    nodes: int
    attachments: int
    versions: int
    owners: int
    problems: tuple[str, ...] = ()

    def summary(self) -> str:
        return (
            f"exported {self.nodes} node(s) of {self.owners} owner(s), {self.attachments} "
            f"attachment(s), {self.versions} history version(s)"
            + "".join(f"\n  not exported {p}" for p in self.problems)
        )


def export_tree(
    source: Source, out: Path, *, history: bool = False, progress: Progress | None = None
) -> ExportReport:
    """Write the tree under `out` (which must be empty or absent)."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"{out} exists and is not an empty directory")
    out.mkdir(parents=True, exist_ok=True)
    owners = source.owners()
    for o in owners:
        (out / o).mkdir(parents=True, exist_ok=True)
    total = source.count()
    names = source.names()
    nodes = atts = versions = 0
    problems: list[str] = []  # what the target could not take
    for rec in source.nodes(history):
        f = out / (rec.path + ".md")
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(node_markdown(rec, names).encode("utf-8"))
        folder = out / rec.path
        own = fact_access(rec.facts.get("access"))
        if own is not None:  # a private node stays private on the disk it is exported to
            _set_access(f, own, _beside(own.file_mode, own.dir_mode), problems)
        dir_modes: list[tuple[Path, AttachmentRecord]] = []
        # hard links once the files they name are written
        ordered = sorted(rec.attachments, key=lambda a: a.kind == "link")
        for a in ordered:
            p = folder / a.rel
            try:  # one attachment the target cannot take is reported; the node goes on
                p.parent.mkdir(parents=True, exist_ok=True)
                if a.kind == "link":
                    os.link(folder / a.target, p)
                elif a.kind == "dir":
                    p.mkdir(exist_ok=True)
                    dir_modes.append((p, a))
                elif a.kind == "symlink":
                    os.symlink(a.target, p)
                    os.utime(p, (a.mtime, a.mtime), follow_symlinks=False)
                else:
                    p.write_bytes(a.data)
                    # no setuid or setgid: the file is the exporter's now (as cp without -p)
                    os.chmod(p, a.mode & ~0o6000)
                    os.utime(p, (a.mtime, a.mtime))
            except OSError as exc:
                problems.append(f"{rec.path}/{a.rel}: {exc.strerror or exc}")
                continue
            atts += 1
        for v, text, when in rec.history:
            h = folder / HISTORY / f"v{v}.md"
            h.parent.mkdir(parents=True, exist_ok=True)
            h.write_bytes(text.encode("utf-8"))
            os.utime(h, (when, when))  # the time it was saved, which an import restores
            versions += 1
        for p, a in reversed(dir_modes):  # deepest first: a read-only folder is filled
            os.chmod(p, a.mode)
            os.utime(p, (a.mtime, a.mtime))  # after what was written into it
        if own is not None and folder.is_dir():
            _set_access(folder, own, own.dir_mode, problems)
        nodes += 1
        if progress is not None:
            progress(nodes, total)
    # owner directories and their type folders as the mount shows them, deepest first
    # (a type folder is written only when it differs from its owner directory)
    shown = dict(source.folders())
    for rel, shows in sorted(shown.items(), reverse=True):
        p = out / rel
        parent = shown.get(rel.rsplit("/", 1)[0])
        if not p.is_dir():
            if parent is None or (shows.uid, shows.gid, shows.dir_mode) == (
                parent.uid,
                parent.gid,
                parent.dir_mode,
            ):
                continue
            p.mkdir()
        _set_access(p, shows, shows.dir_mode, problems)
    return ExportReport(nodes, atts, versions, len(owners), (*source.problems, *problems))


def _beside(file_mode: int, dir_mode: int) -> int:
    """The mode of a node's exported `<name>.md`, which lies beside its folder, not in it:
    whom the node's folder keeps out (no search bit: `chmod 700 node`) the file keeps
    out too."""
    for shift in (3, 0):  # group, others
        if not dir_mode & (0o1 << shift):
            file_mode &= ~(0o7 << shift)
    return file_mode


def _set_access(path: Path, a: Access, mode: int, problems: list[str]) -> None:
    """`mode` on an exported file or folder, and its owner and group when root exports
    (as `cp -a` keeps them); the exporter keeps read and write on what it wrote. A
    target that keeps no modes or owners (a FAT stick) is reported, not the end of the
    export: the node's own are in its facts."""
    try:
        if os.geteuid() == 0:
            os.chown(path, a.uid, a.gid)
            os.chmod(path, mode)
        else:
            os.chmod(path, mode | (0o700 if path.is_dir() else 0o600))
    except OSError as exc:
        problems.append(f"{path}: mode and owner not kept ({exc.strerror or exc})")


# ---- import ------------------------------------------------------------------------------


@dataclass(slots=True)
class ImportReport:
    """What an import did: counts, and every file refused (with errno and reason) or
    skipped (not markdown, or nowhere to put it)."""

    source: str
    dest: str
    notes: int = 0
    created: int = 0  # exported nodes made again under their own name
    routed: int = 0  # files routed by their type's strategy
    attachments: int = 0
    versions: int = 0
    owners_created: int = 0
    redactions: int = 0
    nodes_before: int = 0
    nodes_after: int = 0
    refused: list[dict[str, str]] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}

    def summary(self) -> str:
        lines = [
            f"imported {self.created + self.routed} of {self.notes} markdown file(s) "
            f"from {self.source} into {self.dest}: {self.created} node(s) made as exported, "
            f"{self.routed} routed by their type's strategy, {self.attachments} "
            f"attachment(s), {self.versions} history version(s), {self.owners_created} "
            f"owner(s) created; nodes {self.nodes_before} -> {self.nodes_after}; "
            f"secrets redacted: {self.redactions}; refused: {len(self.refused)}; "
            f"skipped: {len(self.skipped)}"
        ]
        lines += [f"  refused {r['file']}: {r['errno']}: {r['reason']}" for r in self.refused]
        lines += [f"  skipped {s['file']}: {s['why']}" for s in self.skipped]
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class Destination:
    """Where an import lands: a target, and the owner and type DEST names (if any)."""

    target: Target
    owner: str | None  # "user/alice"
    type: ContextType | None
    types: dict[str, ContextType]
    default_owner: str


def find_destination(dest: Path) -> Destination:
    """DEST must be a live mount, an owner directory or a type directory in one."""
    dest = dest.absolute()
    mount = dest
    while not (os.path.ismount(mount) and (mount / ".status").exists()):
        if mount.parent == mount:
            raise UsageError(
                f"{dest} is not inside a live ContextFS mount (to import into a data dir, "
                "give the data dir itself while it is not mounted)"
            )
        mount = mount.parent
    types = load_types([mount / ".schemas"])
    facts = _status(mount)
    parts = dest.relative_to(mount).parts
    owner = ctype = None
    if parts:
        if len(parts) < 2 or parts[0] not in ("user", "agent") or len(parts) > 3:
            raise UsageError(f"{dest}: give the mount, an owner or a type directory")
        owner = f"{parts[0]}/{parts[1]}"  # made by the import if it does not exist
        if len(parts) == 3:
            ctype = next(
                (t for t in types.values() if t.scope == parts[0] and t.type_dir == parts[2]),
                None,
            )
            if ctype is None:
                raise UsageError(f"{dest}: {parts[2]!r} is not a type directory of {parts[0]}/")
    target = MountTarget(mount, lambda: _status(mount))
    return Destination(target, owner, ctype, types, facts["default_owner"])


def store_destination(memory: Memory) -> Destination:
    """An unmounted data dir, opened by the caller: the whole store, facts restored."""
    return Destination(StoreTarget(memory), None, None, memory.types, memory.default_owner)


class _Importer:
    def __init__(
        self,
        src: Path,
        dest: Destination,
        type_name: str | None,
        report: ImportReport,
        folder_types: dict[str, str] | None = None,
    ) -> None:
        self.src = src
        self.dest = dest
        self.to = dest.target
        self.report = report
        self.forced: ContextType | None = dest.type
        if type_name:
            if type_name not in dest.types:
                raise UsageError(f"unknown context type {type_name!r}")
            self.forced = dest.types[type_name]
        self.files: dict[str, list[Path]] = {}  # the vault's other files, by lowercase name
        self.attached: set[Path] = set()  # those added to a note's node
        # exported nodes' attachment folders, copied once every node is made: an
        # attachment takes a new id, which must not be one a node made later asks back
        self.later: list[tuple[Path, Path, Place]] = []
        self.folder_types = dict(FOLDER_TYPES)
        for folder, name in (folder_types or {}).items():
            if name not in dest.types:
                raise UsageError(f"--map {folder}={name}: unknown context type {name!r}")
            self.folder_types[_folder_key(folder)] = name

    # -- refusals, kept and reported ------------------------------------------------------

    def refuse(self, file: Path, exc: OSError | ContextFSError) -> None:
        if isinstance(exc, OSError):
            code, reason = exc.errno or 0, self.to.reason(exc)
        else:
            code, reason = exc.errno, exc.reason
        self.report.refused.append(
            {
                "file": str(file.relative_to(self.src)),
                "errno": errno.errorcode.get(code, str(code)),
                "reason": reason,
            }
        )

    # -- owners and places ----------------------------------------------------------------

    def owner(self, owner: str) -> str:
        """`owner`, made if it does not exist yet."""
        if not self.to.has_owner(owner):
            self.to.make_owner(owner)
            self.report.owners_created += 1
        return owner

    def owner_for(self, rel: Path) -> str:
        """An exported file's owner: DEST's, else the one its path names, else the
        default user."""
        if self.dest.owner:
            return self.dest.owner
        parts = rel.parts
        if len(parts) >= 3 and parts[0] in ("user", "agent"):
            return f"{parts[0]}/{parts[1]}"
        return f"user/{self.dest.default_owner}"

    # -- one exported node ------------------------------------------------------------------

    def exported(self, file: Path, note: Note) -> None:
        assert note.meta is not None
        rel = file.relative_to(self.src)
        ctype = self.dest.types.get(note.meta["type"])
        if ctype is None:
            raise InvalidInput(f"unknown context type {note.meta['type']!r}")
        owner = self.owner_for(rel)
        if owner.split("/")[0] != ctype.scope:
            raise InvalidInput(f"{ctype.name} nodes belong under {ctype.scope}/, not {owner}")
        place = Place(self.owner(owner), ctype, "" if ctype.singleton else file.stem)
        folder = file.with_suffix("")
        if self.to.has_node(place):
            # a node of that name lives here: the type's strategy decides (a file routed
            # into the type directory); its own tiers and history stay. A node exported
            # never written brings no text, only its attachments; one whose text the node
            # holds already (the same export imported again, an import run again after it
            # stopped) is that node: nothing routed, no new version or appended copy, its
            # attachments that are missing added.
            same = self.to.node_text(place) == note.l2
            if same:
                why = "the node is there with this text: only attachments it lacks are added"
                self.report.skipped.append({"file": str(rel), "why": why})
            elif note.l2:
                self.to.route(
                    owner, ctype, f"{place.name or ctype.type_dir}.md", note.l2.encode(), False
                )
                self.report.routed += 1
            if folder.is_dir() and (ctype.mode != "append" or same):
                self.attachments(folder, place, keep_existing=True)
            elif folder.is_dir():
                self.report.skipped.append(
                    {"file": str(rel.with_suffix("")), "why": "attachments of an appended node"}
                )
            return
        history = sorted(
            (int(v.name[1:-3]), v)
            for v in (folder / HISTORY).glob("v*.md")
            if v.name[1:-3].isdigit()
        )
        facts = note.meta.get("facts")
        facts = facts if isinstance(facts, dict) else {}
        # (text, when it was saved) of each version; the last one is L2 (its time: the
        # last version file's, else the node's last change)
        versions: list[tuple[bytes, float | None]] = [
            (path.read_bytes(), path.stat().st_mtime) for _v, path in history[:-1]
        ]
        if note.l2 or history:  # a node never written has no version to make
            last = history[-1][1].stat().st_mtime if history else fact_time(facts.get("updated"))
            versions.append((note.l2.encode(), last))
        self.to.make_node(place, versions, note.pins, facts)
        self.report.versions += len(history)
        self.report.created += 1
        if folder.is_dir():
            self.later.append((file, folder, place))

    def attachments(self, folder: Path, place: Place, *, keep_existing: bool) -> None:
        """Copy the folder beside an exported file into the node (not its .history), with
        the modes and times of its files, folders and links."""
        dir_modes: list[tuple[Path, Path, os.stat_result]] = []
        names: dict[tuple[int, int], Path] = {}  # a file of several names: its first here
        for root, dirs, files in os.walk(folder):
            here = Path(root)
            if here == folder:
                dirs[:] = [d for d in dirs if d != HISTORY]
            dirs.sort()
            for name in sorted(dirs) + sorted(files):
                src = here / name
                rel = src.relative_to(folder)
                st = src.lstat()
                try:
                    if stat.S_ISLNK(st.st_mode):
                        if keep_existing and self.to.has_attachment(place, rel):
                            continue
                        self.to.add_symlink(place, rel, os.readlink(src))
                        self.to.set_time(place, rel, st.st_mtime)
                    elif stat.S_ISDIR(st.st_mode):
                        dir_modes.append((src, rel, st))
                        if keep_existing and self.to.has_attachment(place, rel):
                            continue  # there: what it holds is looked at, not counted
                        self.to.add_dir(place, rel)
                    else:
                        if keep_existing and self.to.has_attachment(place, rel):
                            self.report.skipped.append(
                                {
                                    "file": str(src.relative_to(self.src)),
                                    "why": "the node already has an attachment of this name",
                                }
                            )
                            continue
                        first = names.get((st.st_dev, st.st_ino)) if st.st_nlink > 1 else None
                        if first is not None:  # a hard link in the export: one again
                            self.to.add_link(place, rel, first)
                        else:
                            data = src.read_bytes()
                            mode = stat.S_IMODE(st.st_mode)
                            self.to.add_file(place, rel, data, mode, st.st_mtime)
                            if st.st_nlink > 1:
                                names[(st.st_dev, st.st_ino)] = rel
                    self.report.attachments += 1
                except OSError as exc:
                    self.refuse(src, exc)
                except ContextFSError as exc:
                    self.refuse(src, exc)
        for src, rel, st in reversed(dir_modes):  # deepest first, once filled
            try:
                self.to.set_dir_mode(place, rel, stat.S_IMODE(st.st_mode))
                self.to.set_time(place, rel, st.st_mtime)
            except (OSError, ContextFSError) as exc:
                self.refuse(src, exc)

    def folder_access(self, owner: str) -> None:
        """An exported owner directory's mode (and owner and group, for root), and those
        of its type folders, given to the owner and folders it was imported into."""
        kind = owner.split("/")[0]
        rels = [owner] + [
            f"{owner}/{t.type_dir}"
            for t in self.dest.types.values()
            if t.scope == kind and not t.singleton and (self.src / owner / t.type_dir).is_dir()
        ]
        for rel in rels:
            st = (self.src / rel).stat()
            try:
                self.to.set_folder_access(
                    rel, Access(st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode), 0)
                )
            except (OSError, ContextFSError) as exc:
                self.refuse(self.src / rel, exc)

    # -- one plain note ---------------------------------------------------------------------

    def folder_type(self, rel: Path, scope: str) -> ContextType | None:
        """The type the note's folders name (the nearest first), else an event for a
        daily note's name (`2024-03-02.md`)."""
        for folder in reversed(rel.parts[:-1]):
            name = self.folder_types.get(_folder_key(folder))
            t = self.dest.types.get(name) if name else None
            if t is not None and t.scope == scope:
                return t
        event = self.dest.types.get("event")
        if _DAILY_NAME.fullmatch(rel.stem) and event is not None and event.scope == scope:
            return event
        return None

    def plain(self, file: Path, note: Note) -> None:
        """A note of any vault: routed into a type directory as a dropped file."""
        if not note.l2.strip():  # an empty drop is not a memory (reference.md)
            self.report.skipped.append({"file": str(file.relative_to(self.src)), "why": "empty"})
            return
        doc = parse_document(note.l2)  # InvalidInput("front matter line N: …") is reported
        fields = dict(doc.fields)
        ctype = self.forced
        rel = file.relative_to(self.src)
        if ctype is None:
            named = fields.get("type")
            scope = (self.dest.owner or "user").split("/")[0]
            ctype = next(
                (t for t in self.dest.types.values() if t.name == named and t.scope == scope),
                None,
            )
            if ctype is not None:
                fields.pop("type")
            else:
                ctype = self.folder_type(rel, scope)
            if ctype is None and scope == "user" and "entity" in self.dest.types:
                ctype = self.dest.types["entity"]
            elif ctype is None:
                raise InvalidInput("no type for a plain note under an agent: give --type")
        day = _note_day(fields, file.stem)
        date_field = ctype.field("date")
        if day is not None and date_field is not None and "date" not in fields:
            fields["date"] = day  # the day it was written, not the day of the import
            if _DAILY_NAME.fullmatch(file.stem) and ctype.field("title") and "title" not in fields:
                fields["title"] = "journal"  # `events/2024-03-02-journal`, not the day twice
        owner = self.dest.owner or f"{ctype.scope}/{self.dest.default_owner}"
        if owner.split("/")[0] != ctype.scope:
            raise InvalidInput(f"{ctype.name} nodes belong under {ctype.scope}/, not {owner}")
        known = {f.name for f in ctype.fields}
        title = fields.get("title")
        if isinstance(title, str) and "title" not in known:
            key = next(
                (
                    k
                    for k in ctype.key_fields
                    if k not in fields and (f := ctype.field(k)) and f.type != "date"
                ),
                None,
            )
            if key is not None:
                fields[key] = fields.pop("title")
        kept = {k: v for k, v in fields.items() if k in known}
        # a date or time the type does not declare is kept as the note wrote it in ISO
        # form (`created: '2024-04-18T10:00:00'`), not as YAML's `!!timestamp` tag
        extra = {
            k: v.isoformat() if isinstance(v, dt.date) else v
            for k, v in fields.items()
            if k not in known
        }
        if "tags" in extra:  # the node's tags (meta.yaml), when they are words
            try:
                kept["tags"] = list(tag_list(extra["tags"]))
                del extra["tags"]
            except InvalidInput:
                pass  # kept as text with the rest
        body = doc.body
        if extra:  # nothing a person wrote is dropped: undeclared properties stay, as text
            dumped = yaml.dump(
                extra, Dumper=_Dumper, sort_keys=False, allow_unicode=True, default_flow_style=None
            )
            body = (
                body.rstrip("\n")
                + f"\n\n```yaml\n# front matter of the imported note ({ctype.name} does not "
                + f"declare these fields)\n{dumped}```\n"
            )
        text = body
        if kept:
            text = "---\n" + yaml.dump(kept, Dumper=_Dumper, sort_keys=False, allow_unicode=True)
            text += "---\n" + body
        embedded = self.embedded(file, doc.body)
        made = self.to.route(
            self.owner(owner), ctype, f"{file.stem}.md", text.encode("utf-8"), bool(embedded)
        )
        self.report.routed += 1
        if embedded:
            self.attach(file, embedded, Place(owner, ctype, made) if made else None)

    # -- the files a plain note embeds or links to ----------------------------------------

    def embedded(self, note: Path, body: str) -> list[Path]:
        """The vault's files (not notes) that `note` embeds or links to, in order:
        `![[diagram.png]]` / `[[spec.pdf]]` by name, found anywhere in the vault as
        Obsidian finds them (the note's own folder first, then the shortest path), and
        `![alt](img/diagram.png)` / `[spec](spec%20v2.pdf)` relative to the note."""
        found: list[Path] = []
        for m in _FILE_WIKILINK_RE.finditer(body):
            p = self.by_name(note, m.group(1).strip())
            if p is not None and p not in found:
                found.append(p)
        for m in FILE_MDLINK_RE.finditer(body):
            target = urllib.parse.unquote(m.group(1))
            if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # a URL, not a file
                continue
            p = (self.src / target.lstrip("/")) if target.startswith("/") else note.parent / target
            p = Path(os.path.normpath(p))
            if p in self.files.get(p.name.lower(), []) and p not in found:
                found.append(p)
        return found

    def by_name(self, note: Path, target: str) -> Path | None:
        if "/" in target:
            p = Path(os.path.normpath(self.src / target))
            return p if p in self.files.get(p.name.lower(), []) else None
        options = self.files.get(target.lower(), [])
        if not options:
            return None
        here = [p for p in options if p.parent == note.parent]
        return (here or sorted(options, key=lambda p: (len(p.parts), str(p))))[0]

    def attach(self, note: Path, files: list[Path], place: Place | None) -> None:
        """Add the files a note embeds to the node it made, each under its own name."""
        for src in files:
            rel = str(src.relative_to(self.src))
            if place is None:
                why = "its note went into a node that was already there: not added to it"
                self.report.skipped.append({"file": rel, "why": why})
                continue
            if self.to.has_attachment(place, Path(src.name)):
                why = "the node already has an attachment of this name"
                self.report.skipped.append({"file": rel, "why": why})
                continue
            try:
                st = src.stat()
                self.to.add_file(
                    place, Path(src.name), src.read_bytes(), stat.S_IMODE(st.st_mode), st.st_mtime
                )
            except (OSError, ContextFSError) as exc:
                self.refuse(src, exc)
                continue
            self.attached.add(src)
            self.report.attachments += 1


def _wanted_id(note: Note) -> int | None:
    """The id an exported node asks back (its `contextfs.facts.id`)."""
    facts = note.meta.get("facts") if note.meta is not None else None
    wanted = facts.get("id") if isinstance(facts, dict) else None
    return wanted if isinstance(wanted, int) and not isinstance(wanted, bool) else None


def _folder_key(folder: str) -> str:
    return " ".join(folder.lower().replace("_", " ").split())


def _note_day(fields: dict[str, Any], stem: str) -> str | None:
    """The day a note is about: its `created` property, else a daily note's name."""
    created = fields.get("created")
    if isinstance(created, dt.datetime):
        return created.date().isoformat()
    if isinstance(created, dt.date):
        return created.isoformat()
    if isinstance(created, str):
        m = re.match(r"(\d{4}-\d{2}-\d{2})", created.strip())
        if m is not None:
            return m.group(1)
    daily = _DAILY_NAME.fullmatch(stem)
    if daily is not None:
        try:
            return dt.date(*map(int, daily.groups())).isoformat()
        except ValueError:
            return None
    return None


def import_tree(
    src: Path,
    dest: Path | Destination,
    *,
    type_name: str | None = None,
    folder_types: dict[str, str] | None = None,
    progress: Progress | None = None,
) -> ImportReport:
    """Import every markdown file under `src` into the mount at (or above) `dest`, or
    into the store of a `store_destination`. `folder_types` maps folder names to types
    for plain notes (beside `FOLDER_TYPES`)."""
    if not src.is_dir():
        raise UsageError(f"{src} is not a directory")
    where = dest if isinstance(dest, Destination) else find_destination(dest)
    report = ImportReport(str(src), str(dest) if isinstance(dest, Path) else "the data dir")
    imp = _Importer(src, where, type_name, report, folder_types)
    report.nodes_before, redactions_before = where.target.counts()
    notes: list[Path] = []
    consumed: set[Path] = set()  # folders beside exported files: attachments, not notes
    owners: list[str] = []
    for kind in ("user", "agent"):
        if (src / kind).is_dir():
            owners += [f"{kind}/{p.name}" for p in sorted((src / kind).iterdir()) if p.is_dir()]
    for root, dirs, files in os.walk(src):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            p = Path(root) / name
            if name.startswith("."):
                continue
            if p.is_symlink():  # what it points at is not the vault's (/etc/shadow)
                why = "a symbolic link (not followed)"
                report.skipped.append({"file": str(p.relative_to(src)), "why": why})
            elif name.lower().endswith((".md", ".markdown")):
                notes.append(p)
            else:
                report.skipped.append({"file": str(p.relative_to(src)), "why": "not markdown"})
                imp.files.setdefault(name.lower(), []).append(p)
    parsed: list[tuple[Path, Note]] = []
    for p in notes:
        try:
            note = read_note(_text(p), p.stem)
        except UnicodeDecodeError:
            imp.refuse(p, InvalidInput("a markdown file must be UTF-8 text"))
            continue
        parsed.append((p, note))
        if note.meta is not None:
            consumed.add(p.with_suffix(""))

    def inside_consumed(p: Path) -> bool:
        return any(parent in consumed for parent in p.parents)

    parsed = [(p, n) for p, n in parsed if not inside_consumed(p)]
    # nodes that ask for their id back are made first: a node made without one (a plain
    # note, a node exported never written) takes the lowest free id, which may be one a
    # node later in the tree asks for
    parsed.sort(key=lambda pn: not isinstance(_wanted_id(pn[1]), int))
    report.skipped = [s for s in report.skipped if not inside_consumed(src / s["file"])]
    report.notes = len(parsed) + len(report.refused)  # + those not UTF-8
    # an export's owner folders are owners (an empty one too); a vault's `user/` folder
    # is just a folder
    if not where.owner and consumed:
        for o in owners:
            try:
                imp.owner(o)
            except (OSError, ContextFSError) as exc:
                imp.refuse(src / o, exc)
    for i, (p, note) in enumerate(parsed, 1):
        try:
            if note.meta is not None:
                imp.exported(p, note)
            else:
                imp.plain(p, note)
        except (OSError, ContextFSError) as exc:
            imp.refuse(p, exc)
        if progress is not None:
            progress(i, len(parsed))
    for p, folder, place in imp.later:
        try:
            imp.attachments(folder, place, keep_existing=False)
        except (OSError, ContextFSError) as exc:
            imp.refuse(p, exc)
    if not where.owner and consumed:
        for o in owners:
            imp.folder_access(o)
    attached = {str(p.relative_to(src)) for p in imp.attached}
    report.skipped = [
        s for s in report.skipped if not (s["why"] == "not markdown" and s["file"] in attached)
    ]
    report.nodes_after, redactions_after = where.target.counts()
    report.redactions = redactions_after - redactions_before
    return report


def _status(mount: Path) -> dict[str, Any]:
    return json.loads((mount / ".status.json").read_text(encoding="utf-8"))
