"""Routing: a file dropped into a type directory, or a candidate extracted from a
conversation, becomes memory by its type's mode.

`Routing` is the part of `Memory` that routes (`Memory.routing`): it finds the node a
document goes to (its key fields from front matter, the file name, the date or the first
words; a similar topic node where the mode matches them), merges it with the type's
write strategy (`memory.strategies`) and saves it as a new version; and it keeps dropped
files fsync()ed before a crash (pending drops) to route them at the next start. What it
uses of the memory's nodes is the `RoutedMemory` protocol (nodes are saved through
`memory.service`); a write another mount of a shared store won is re-applied through the
`catch_up` and `lock_and_load` it is given (`memory.remote`).
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from contextfs.ctxtypes import ContextType
from contextfs.errors import ContextFSError, InvalidInput, TooBig, VersionConflict
from contextfs.memory.document import (
    Document,
    Retraction,
    body_items,
    decode_text,
    normalize_item,
    parse_document,
    render_document,
    strip_trace,
    superseded,
    without_retracted,
)
from contextfs.memory.remote import ATTEMPTS
from contextfs.memory.strategies import (
    combine_keeping_person_text,
    machine_writer,
    strategy_for,
)
from contextfs.model import Access, Node, Refusal
from contextfs.store import backend

if TYPE_CHECKING:
    from contextfs.memory.transactions import Transactions

log = logging.getLogger("contextfs.memory.service")  # the name these lines always had


# Editor scratch files (SPEC §3): accepted anywhere a file may be created, never memory.
_EDITOR_SCRATCH = re.compile(r"(\.sw[a-p]$|~$|^4913$|^\.#|^#.*#$)")
# In a type directory, also the temporary names of atomic writers (rsync, sed -i,
# Python's tempfile, *.tmp), hidden files and the traces of refused writes
# (`NAME.refused`, memory.document.trace_bytes): they are routed only once renamed.
TYPE_DIR_TEMP = re.compile(
    r"(^\.|^tmp[a-z0-9_]{6,}$|^sed[A-Za-z0-9]{6}$|\.tmp$|^[0-9]+$|\.refused$)"
)


def tag_list(raw: object) -> tuple[str, ...]:
    """Tags as a vault writes them: a list, or one string of words or comma-separated
    words; a leading `#` dropped (`[person, "#harbor"]`, `person, harbor`)."""
    if isinstance(raw, str):
        items: list[object] = [w for part in raw.split(",") for w in part.split()]
    elif isinstance(raw, list):
        items = list(raw)
    elif raw is None:
        return ()
    else:
        raise InvalidInput("front matter: tags must be a list of words")
    out: list[str] = []
    for item in items:
        if not isinstance(item, str | int | float) or isinstance(item, bool):
            raise InvalidInput("front matter: tags must be a list of words")
        tag = str(item).strip().lstrip("#").strip()
        if not tag or len(tag) > 100 or any(c in tag for c in "\n\r\t"):
            raise InvalidInput(f"front matter: tag {str(item)[:40]!r} is not one word or phrase")
        if tag not in out:
            out.append(tag)
    if len(out) > 64:
        raise InvalidInput("front matter: more than 64 tags")
    return tuple(out)


def is_editor_scratch(name: str) -> bool:
    return bool(_EDITOR_SCRATCH.search(name))


def is_temp_name(name: str) -> bool:
    """An editor's or an atomic writer's temporary name: never memory until renamed. In a
    type directory such a file is *parked* (kept as written, not routed) once closed."""
    return is_editor_scratch(name) or bool(TYPE_DIR_TEMP.search(name))


def _slug_stem(filename: str) -> str:
    stem = filename
    for ext in (".markdown", ".md", ".txt", ".yaml", ".yml"):
        if stem.lower().endswith(ext):
            stem = stem[: -len(ext)]
            break
    return stem


def _tokens(text: str) -> set[str]:
    return set(normalize_item(text).split())


@dataclass(frozen=True, slots=True)
class RouteResult:
    """What routing did: the node, whether it was made or changed, and how many items
    were folded as duplicates."""

    node: Node
    created: bool
    changed: bool
    folded: int
    # a machine write changed a node a person wrote, adding below their text (SPEC §5)
    kept_person_text: bool = False
    # (field, old value, new value) of each value the write replaced (`location: Oslo`)
    superseded: tuple[tuple[str, str, str], ...] = ()


class RoutedMemory(Protocol):
    """What routing uses of the memory (`memory.service.Memory` is one): types, the live
    node at a name, the nodes of an owner and type, the redaction of what is written, a
    new node, its provenance and its L2 save, refusals and the access rows of parked
    files."""

    @property
    def access(self) -> dict[tuple[str, str], Access]: ...
    def type_named(self, name: str) -> ContextType: ...
    def live_node(self, owner: tuple[str, str], ctype: ContextType, name: str) -> Node | None: ...
    def walk(
        self,
        *,
        owner: tuple[str, str] | None = None,
        types: tuple[str, ...] | None = None,
        live: bool | None = True,
        texts: bool = False,
    ) -> Iterator[Node]: ...
    def owner_path(self, owner: tuple[str, str], ctype: ContextType | None, name: str) -> str: ...
    def redact(self, text: str, path: str) -> str: ...
    def redact_bytes(self, data: bytes, path: str) -> bytes: ...
    def check_writable(self) -> None: ...
    def refuse(
        self, path: str, exc: ContextFSError, data: bytes | None = None, uid: int | None = None
    ) -> Refusal: ...
    def set_access(self, kind: str, key: str, access: Access | None) -> None: ...
    def new_node(
        self, owner: tuple[str, str], ctype: ContextType, name: str, node_id: int | None = None
    ) -> Node: ...
    def add_source(self, n: Node, source: str) -> None: ...
    def add_tags(self, n: Node, tags: Sequence[str]) -> bool: ...
    def save_l2(self, n: Node, text: str, reason: str = "write") -> bool: ...


class Routing:
    """Dropped files and extracted documents routed into nodes by their type's mode."""

    def __init__(
        self,
        store: backend.InboxRows,
        transactions: Transactions,
        memory: RoutedMemory,
        *,
        catch_up: Callable[[], int],
        lock_and_load: Callable[[int], None],
        max_tier_size: int,
        clock: Callable[[], float],
    ) -> None:
        self.store = store  # the pending drops
        self.transactions = transactions
        self.memory = memory
        self.catch_up = catch_up  # a shared store: load what other mounts committed
        self.lock_and_load = lock_and_load  # and lock a node first (memory.remote)
        self.max_tier_size = max_tier_size
        self.clock = clock

    # ---- routed writes (SPEC §5, first bullet) ------------------------------------------

    def route(
        self, owner: tuple[str, str], ctype: ContextType, filename: str, data: bytes
    ) -> RouteResult:
        """A file written into a type directory becomes memory by the type's mode."""
        data = strip_trace(data)  # a refused write's trace renamed back: its bytes only
        if len(data) > self.max_tier_size:
            raise TooBig(f"a memory file is limited to {self.max_tier_size} bytes")
        raw = decode_text(data, filename)
        lock: int | None = None  # a node another mount changed first: locked on a retry
        for attempt in range(ATTEMPTS):
            try:
                # the redaction is logged only if the write is stored
                with self.transactions.transaction():
                    if lock is not None:
                        self.lock_and_load(lock)
                    text = self.memory.redact(raw, self.memory.owner_path(owner, ctype, filename))
                    doc = parse_document(text)
                    return self.route_document(owner, ctype, doc, filename, source=filename)
            except VersionConflict as exc:
                # another mount changed the node first (a shared store): merge or add to
                # its newest version instead, never over it
                if self.transactions.journal is not None or attempt == ATTEMPTS - 1:
                    raise
                log.info("%s: another mount wrote first; re-applying on its version", filename)
                self.catch_up()
                lock = exc.node_id
        raise AssertionError("unreachable")

    def route_document(
        self,
        owner: tuple[str, str],
        ctype: ContextType,
        doc: Document,
        filename: str = "",
        *,
        source: str = "",
        retracts: Sequence[Retraction] = (),
    ) -> RouteResult:
        """Route fields + body (a dropped file, or an extracted candidate) by the type's
        mode (its entry in `strategies.STRATEGIES`). `filename` may give a key; `source`
        is recorded as provenance; `retracts`, values said no longer to hold, are taken
        out of the node's fields (`without_retracted`; never out of a person's text)."""
        self.memory.check_writable()
        strategy = strategy_for(ctype)
        tags: tuple[str, ...] = ()
        if "tags" in doc.fields and ctype.field("tags") is None:
            # the node's tags (meta.yaml), as a vault note or a person gives them
            rest = dict(doc.fields)
            tags = tag_list(rest.pop("tags"))
            doc = Document(rest, doc.body)
        fields = ctype.coerce_fields(doc.fields, where="front matter") if doc.fields else {}
        incoming = Document(fields, doc.body)
        stem = _slug_stem(filename)
        reason = f"route:{source or filename}"
        if ctype.singleton:
            target = self.memory.live_node(owner, ctype, "")
            return self._route_into(owner, ctype, "", target, incoming, reason, tags, retracts)
        explicit = all(k in fields for k in ctype.key_fields)
        values = dict(fields)
        for k in ctype.key_fields:
            if k in values:
                continue
            f = ctype.field(k)
            if f is not None and f.type == "date":
                values[k] = dt.datetime.fromtimestamp(self.clock(), dt.UTC).date().isoformat()
            elif stem and not stem.startswith("."):
                values[k] = stem
                stem = ""
            else:
                words = " ".join(doc.body.split()[:6])
                if not words:
                    raise InvalidInput(f"missing key field {k!r} for {ctype.name}")
                values[k] = words
        fields = {**fields, **{k: v for k, v in values.items() if k in ctype.key_fields}}
        fields = ctype.coerce_fields(fields, where="front matter")
        incoming = Document(fields, doc.body)
        name = ctype.node_name(values)
        if strategy.new_node_each_write:
            base, i = name, 2
            while self.memory.live_node(owner, ctype, name) is not None:
                name = f"{base}-{i}"
                i += 1
            return self._route_into(owner, ctype, name, None, incoming, reason, tags, retracts)
        target = self.memory.live_node(owner, ctype, name)
        if target is None and strategy.match_similar and not explicit:
            target = self._similar_node(owner, ctype, doc.body)
            if target is not None:
                name = target.name
                incoming = Document(
                    {k: v for k, v in fields.items() if k not in ctype.key_fields}, doc.body
                )
        return self._route_into(owner, ctype, name, target, incoming, reason, tags, retracts)

    def _similar_node(self, owner: tuple[str, str], ctype: ContextType, body: str) -> Node | None:
        """The topic node whose items share most words with body, if close enough."""
        new = _tokens(body)
        if len(new) < 3:
            return None
        best, best_score = None, 0.0
        for n in self.memory.walk(owner=owner, types=(ctype.name,), texts=True):
            for item in body_items(parse_document(n.l2).body):
                old = _tokens(item)
                if not old:
                    continue
                score = len(new & old) / len(new | old)
                if score > best_score:
                    best, best_score = n, score
        return best if best_score >= 0.5 else None

    def _route_into(
        self,
        owner: tuple[str, str],
        ctype: ContextType,
        name: str,
        target: Node | None,
        incoming: Document,
        reason: str,
        tags: Sequence[str] = (),
        retracts: Sequence[Retraction] = (),
    ) -> RouteResult:
        strategy = strategy_for(ctype)
        source = reason.removeprefix("route:")
        # a machine write onto a person's text adds below it, never replaces (SPEC §5)
        protect = target is not None and target.person_wrote and bool(machine_writer(source))
        before = parse_document(target.l2) if target is not None else None
        if before is not None:
            incoming = _without_held_keys(ctype, before, incoming)
        if before is None:
            merged, folded = strategy.start(ctype, incoming)
        elif protect:
            merged, folded = combine_keeping_person_text(ctype, before, incoming, source)
        else:
            merged, folded = strategy.combine(ctype, before, incoming)
        if retracts and not protect:  # "not allergic to penicillin after all": it goes
            merged = Document(without_retracted(merged.fields, retracts), merged.body)
        missing = ctype.missing_required(merged.fields)
        if missing:
            raise InvalidInput(f"{ctype.name} needs field(s): " + ", ".join(missing))
        text = render_document(ctype, merged)
        created = target is None
        n = self.memory.new_node(owner, ctype, name) if target is None else target
        with self.transactions.transaction():
            if source not in n.sources and len(n.sources) < 100:
                self.memory.add_source(n, source)  # provenance, stored with this version
            tagged = self.memory.add_tags(n, tags) if tags else False
            changed = self.memory.save_l2(n, text, reason)  # a new node: inserted with version 1
            if tagged and not changed and not created:
                self.transactions.store_node(n)  # the text is as it was, the tags are new
            if created:
                self.transactions.add_node(n)
                self.transactions.set_live((owner[0], owner[1], ctype.name, name), n.id)
        return RouteResult(
            n,
            created,
            changed,
            folded,
            kept_person_text=protect and changed,
            superseded=tuple(superseded(ctype, before.fields, merged.fields))
            if before is not None and changed
            else (),
        )

    # ---- drops --------------------------------------------------------------------------

    def persist_drop(
        self,
        drop_id: int,
        owner: tuple[str, str],
        ctype: ContextType,
        filename: str,
        data: bytes,
        access: Access | None = None,
    ) -> None:
        """Store a dropped or parked file's bytes; `access`: the owner, group and mode a
        parked file shows again after a remount (kept as the `parked` access row)."""
        with self.transactions.transaction():
            data = self.memory.redact_bytes(data, self.memory.owner_path(owner, ctype, filename))
            self.store.add_pending_drop(drop_id, owner, ctype.name, filename, data)
            key = ("parked", str(drop_id))
            if access is not None and self.memory.access.get(key) != access:
                self.memory.set_access(*key, access)

    def forget_drop(self, drop_id: int) -> None:
        with self.transactions.transaction():
            self.store.remove_pending_drop(drop_id)
            if ("parked", str(drop_id)) in self.memory.access:
                self.memory.set_access("parked", str(drop_id), None)

    def parked_files(self) -> list[tuple[int, tuple[str, str], str, str, bytes]]:
        """(id, owner, type name, file name, bytes) of every parked file: a temporary or
        scratch name closed in a type directory, kept until it is renamed or removed."""
        return [
            (drop_id, (kind, oid), tname, filename, data)
            for drop_id, kind, oid, tname, filename, data in self.store.pending_drops()
            if is_temp_name(filename)
        ]

    def recover_drops(self) -> list[tuple[str, RouteResult | Refusal]]:
        """Route files that were fsync()ed into a type directory before a crash (a parked
        file under a temporary name stays as it is)."""
        done: list[tuple[str, RouteResult | Refusal]] = []
        for drop_id, kind, oid, tname, filename, data in self.store.pending_drops():
            if is_temp_name(filename):
                continue
            path = f"{kind}/{oid}/{tname}/{filename}"
            try:
                ctype = self.memory.type_named(tname)
                res: RouteResult | Refusal = self.route((kind, oid), ctype, filename, data)
            except ContextFSError as exc:
                res = self.memory.refuse(path, exc, data)
            self.forget_drop(drop_id)
            done.append((path, res))
            log.info("recovered pending drop %s", path)
        return done


def _without_held_keys(ctype: ContextType, before: Document, incoming: Document) -> Document:
    """`incoming` without the key fields the node's text already has a value for. The
    node was found by its name, which its key makes: the key a write gives names that
    node and changes nothing. The text may say another (an L2 edited by hand, a copy
    under a new name: `cp -r preferences/vim preferences/ked` keeps `topic: vim`); it is
    kept as written, and writes by the node's name go on merging into it."""
    held = [
        k
        for k in ctype.key_fields
        if k in incoming.fields and str(before.fields.get(k) or "").strip()
    ]
    if not held:
        return incoming
    fields = {k: v for k, v in incoming.fields.items() if k not in held}
    return Document(fields, incoming.body)
