"""A Python API for agent frameworks over a mounted ContextFS: plain file calls underneath.

Role: the few calls an agent loop makes, each one a documented path of the mount
(docs/agents.md, "Python API"): `compose` reads `.sessions/<id>/context.md` (starting the
session when needed), `after_turn` appends JSON lines to its `transcript.jsonl`, `compact`
and `dispose` write the session's `control` file and `rmdir` it, `search` reads
`.query/@budget=…,type=…/<question>/`, `remember` writes a file into a type directory (routed
by the type's strategy) or into `.inbox/`, and `status` parses `.status.json`. Whatever a
shell can do here, this does the same way; nothing is decided twice.

Boundary: the standard library and `contextfs.agents.mountcalls` (stdlib only, shared with the
MCP server and the memory-tool adapter): nothing of the daemon or pyfuse3, so an agent
process can use it next to a mount run by someone else. Errors
from the kernel (an errno) become `ContextFSError` subclasses carrying the errno and, when
the mount recorded one, the reason `.status.json` gives for the refusal.
"""

from __future__ import annotations

import errno
import json
import os
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from contextfs.agents.mountcalls import (
    PLAIN_ERRNOS,
    REFUSAL,
    MountCallError,
    inside,
    query_dir,
    status_reason,
)

Role = Literal["user", "assistant", "system", "tool"]

_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_OWNER = re.compile(r"(user|agent)/[^/]+")
# A type's name or directory name (ctxtypes: what a schema may declare).
_TYPE_DIR = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")


# ---- errors ----------------------------------------------------------------------------


class ContextFSError(Exception):
    """A call the mount refused or could not answer. `errno` is the kernel's errno (0 when
    the client refused the call itself), `path` the file involved, `reason` what the
    mount's `.status.json` says about it (empty when it recorded nothing)."""

    def __init__(self, message: str, *, errno: int = 0, path: str = "", reason: str = ""):
        super().__init__(message)
        self.errno = errno
        self.path = path
        self.reason = reason


class NotMounted(ContextFSError):
    """The path is not a live ContextFS mount (never mounted, unmounted, or dead)."""


class NotFound(ContextFSError):
    """No such session, owner, type directory or node (`ENOENT`)."""


class InvalidInput(ContextFSError):
    """The mount refused what was written or asked (`EINVAL`): an unknown type or field,
    a missing key, a bad option, an invalid session id."""


class Refused(ContextFSError):
    """Not allowed (`EACCES`, `EPERM`, `EROFS`: read-only file, no permission, the store
    turned read-only) or over a limit (`EFBIG`, `ENAMETOOLONG`)."""


_BY_ERRNO: dict[int, type[ContextFSError]] = {
    errno.ENOENT: NotFound,
    errno.ENOTDIR: NotFound,
    errno.EINVAL: InvalidInput,
    errno.EACCES: Refused,
    errno.EPERM: Refused,
    errno.EROFS: Refused,
    errno.EFBIG: Refused,
    errno.ENAMETOOLONG: Refused,
    errno.ENOSPC: Refused,
}


# ---- values ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Turn:
    """One line of a session transcript (the inbox's JSONL fields, docs/reference.md)."""

    role: Role | str
    content: str = ""
    name: str | None = None
    timestamp: str | None = None
    id: str | None = None
    input: Any = None  # tool events (role "tool")
    output: Any = None

    def to_json(self) -> str:
        d: dict[str, Any] = {"role": self.role}
        if self.content or self.role != "tool":
            d["content"] = self.content
        for k in ("name", "timestamp", "id", "input", "output"):
            v = getattr(self, k)
            if v is not None:
                d[k] = v
        return json.dumps(d, ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class Hit:
    """One hit of `_results.json`: `path` is relative to the mount root."""

    rank: int
    path: str
    score: float
    type: str
    tiers: tuple[str, ...]
    snippet: str


@dataclass(frozen=True, slots=True)
class SearchResult:
    """A search: `context` is `_context.md` (the bundle within the budget), `hits` the
    ranked nodes of `_results.json`, `searched_by` which sides answered."""

    question: str
    context: str
    hits: tuple[Hit, ...]
    searched_by: str = ""
    note: str = ""
    directory: Path = field(default=Path())


# ---- the client ------------------------------------------------------------------------


class ContextFS:
    """An agent's handle on a mounted ContextFS.

    `owner` ("user/alice", "agent/coder") scopes sessions, searches and memories to that
    owner's directory; by default the root's `.sessions`, `.query` and `.inbox` (the
    configured default owner; `.query` at the root searches everything). An owner that
    does not exist yet is created the way a shell creates one (`mkdir user/alice`), unless
    `create` is False: then it is `NotFound`.
    """

    def __init__(
        self, mount: str | os.PathLike[str], owner: str | None = None, *, create: bool = True
    ) -> None:
        self.mount = Path(mount)
        if owner is not None and not _OWNER.fullmatch(owner):
            raise InvalidInput(f"owner must be 'user/<id>' or 'agent/<id>', not {owner!r}")
        self.owner = owner
        self.base = self.mount / owner if owner else self.mount
        if not (os.path.ismount(self.mount) and (self.mount / ".status").exists()):
            raise NotMounted(f"{self.mount} is not a live ContextFS mount", path=str(self.mount))
        if owner and not self.base.is_dir():
            if not create:
                raise NotFound(f"no owner {owner} in {self.mount}", path=owner)
            try:  # the mount checks the id (EINVAL) and the caller's permission (EACCES)
                self.base.mkdir()
            except FileExistsError:  # made by someone else meanwhile
                pass
            except OSError as exc:
                raise self._error(exc, self.base) from None

    # ---- sessions ----------------------------------------------------------------------

    def _session(self, session: str) -> Path:
        if not _SESSION_ID.fullmatch(session):
            raise InvalidInput(
                f"session ids are [A-Za-z0-9][A-Za-z0-9._-]{{0,127}}, not {session!r}"
            )
        return self.base / ".sessions" / session

    def start(self, session: str) -> bool:
        """Start the session (`mkdir .sessions/<id>`); False when it was already live."""
        d = self._session(session)
        try:
            d.mkdir()
        except FileExistsError:
            return False
        except OSError as exc:
            raise self._error(exc, d) from None
        return True

    def compose(self, session: str) -> str:
        """The context to inject for this session (`context.md`: profile, recent session
        summaries, memories relevant to the latest turns, within the mount's budget).
        Starts the session if it is not live yet."""
        path = self._session(session) / "context.md"
        try:  # a live session is the common case: no mkdir first
            return path.read_text(encoding="utf-8")
        except FileNotFoundError:
            self.start(session)
        except OSError as exc:
            raise self._error(exc, path) from None
        return self._read(path)

    def after_turn(
        self, session: str, turns: Iterable[Turn | Mapping[str, Any]], *, sync: bool = False
    ) -> int:
        """Record turns (`>> transcript.jsonl`, one write); extraction runs in the
        background. With `sync`, fsync: the turns are durable when this returns. Returns
        the number of turns written."""
        lines = [(t.to_json() if isinstance(t, Turn) else _turn_line(t)) + "\n" for t in turns]
        if not lines:
            return 0
        path = self._session(session) / "transcript.jsonl"
        data = "".join(lines).encode("utf-8")
        try:
            try:
                fd = os.open(path, os.O_WRONLY | os.O_APPEND)
            except FileNotFoundError:  # not live yet: start it (no mkdir per turn)
                self.start(session)
                fd = os.open(path, os.O_WRONLY | os.O_APPEND)
            try:
                os.write(fd, data)
                if sync:
                    os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise self._error(exc, path) from None
        return len(lines)

    def compact(self, session: str) -> None:
        """Extract what is pending and replace the live transcript by a summary."""
        self._write(self._session(session) / "control", b"compact\n")

    def dispose(self, session: str) -> None:
        """End the session: the remaining turns are extracted and the session is archived
        as memory (`rmdir .sessions/<id>`). A session that is not live is `NotFound`."""
        d = self._session(session)
        try:
            d.rmdir()
        except OSError as exc:
            raise self._error(exc, d) from None

    # ---- search and memories -------------------------------------------------------------

    def search(
        self,
        question: str,
        budget: int | None = None,
        type: str | None = None,
        *,
        k: int | None = None,
        scope: str = "",
    ) -> SearchResult:
        """Search the owner's subtree (or `scope`, a path under the mount such as
        "user/alice/preferences"): the bundle within `budget` tokens and the ranked hits,
        only nodes of `type` when given."""
        try:
            base = self._inside(scope) if scope else self.base
            qdir = query_dir(base, question, k=k, budget=budget, type=type)
        except ValueError as exc:
            raise InvalidInput(str(exc)) from None
        results = json.loads(self._read(qdir / "_results.json"))
        hits = tuple(
            Hit(
                rank=h["rank"],
                path=h["path"],
                score=h["score"],
                type=h.get("type", ""),
                tiers=tuple(h.get("tiers", ())),
                snippet=h.get("snippet", ""),
            )
            for h in results.get("hits", ())
        )
        return SearchResult(
            question=question,
            context=self._read(qdir / "_context.md"),
            hits=hits,
            searched_by=str(results.get("searched_by", "")),
            note=str(results.get("note", "") or ""),
            directory=qdir,
        )

    def remember(
        self,
        text: str,
        *,
        type: str | None = None,
        name: str | None = None,
        fields: Mapping[str, Any] | None = None,
    ) -> Path:
        """Store a memory. With `type` (its directory name, e.g. "preferences", or the
        type's name, e.g. "preference"): a file written into that type directory, routed
        by the type's strategy (merge, aggregate, append); `name` gives its key (the file
        name) and `fields` its front matter. Without `type`: a file dropped into `.inbox/`,
        extracted in the background (its report is `<returned path>.report.md`).
        Returns the path written."""
        body = text if text.endswith("\n") else text + "\n"
        if fields:
            body = "---\n" + _yaml_mapping(fields) + "---\n" + body
        data = body.encode("utf-8")
        if type is None:
            inbox = self.base / ".inbox"
            stem = _file_stem(name) if name else time.strftime("memory-%Y%m%dT%H%M%S")
            path = inbox / f"{stem}.md"
            i = 2
            while path.exists():
                path = inbox / f"{stem}-{i}.md"
                i += 1
        else:
            path = self._type_dir(type) / f"{_file_stem(name or _first_words(text))}.md"
        self._write(path, data)
        return path

    def read(self, path: str, tier: str = "L2") -> str:
        """A node's tier (`L0`, `L1`, `L2`) or `meta.yaml`, `path` relative to the mount
        (as `Hit.path` gives it)."""
        if tier not in ("L0", "L1", "L2", "meta"):
            raise InvalidInput(f"tier must be L0, L1, L2 or meta, not {tier!r}", path=path)
        name = "meta.yaml" if tier == "meta" else f"{tier}.md"
        try:
            node = self._inside(path)
        except ValueError as exc:
            raise InvalidInput(str(exc), path=path) from None
        return self._read(node / name)

    def status(self) -> dict[str, Any]:
        """`.status.json`: counts, index lag, queue depth, recent refusals (see
        docs/reference.md for the fields)."""
        return json.loads(self._read(self.mount / ".status.json"))

    # ---- plumbing ------------------------------------------------------------------------

    def _inside(self, rel: str) -> Path:
        """`rel` under the mount; one that leaves it (`..`, a link kept in the memory
        that points out of it) is a ValueError saying so."""
        try:
            return inside(self.mount, rel)
        except MountCallError as exc:
            raise ValueError(str(exc).removeprefix("EINVAL: ")) from None

    def _type_dir(self, type: str) -> Path:
        if not _TYPE_DIR.fullmatch(type):  # a folder of the owner, not a path of its own
            raise InvalidInput(
                f"type must be a type name or its directory (such as preference or "
                f"preferences), not {type!r}",
                path=type,
            )
        facts = self.status()
        owner = self.base if self.owner else self.mount / "user" / facts["default_owner"]
        if (owner / type).is_dir():
            try:
                return self._inside(str(owner / type))
            except ValueError as exc:
                raise InvalidInput(str(exc), path=type) from None
        kind = owner.parent.name
        for t in facts["types"]:
            if t["name"] == type and t["scope"] == kind:
                return owner / t["directory"]
        raise InvalidInput(
            f"no type {type!r} under {_relative(owner, self.mount)}", path=type, errno=0
        )

    def _read(self, path: Path) -> str:
        try:
            return path.read_text(encoding="utf-8")
        except OSError as exc:
            raise self._error(exc, path) from None

    def _write(self, path: Path, data: bytes) -> None:
        try:
            with open(path, "wb") as f:
                f.write(data)
        except OSError as exc:
            raise self._error(exc, path) from None

    def _error(self, exc: OSError, path: Path) -> ContextFSError:
        """The errno as one of our exceptions, with the mount's reason when it has one."""
        code = exc.errno or 0
        if code in (errno.ENOTCONN, errno.ECONNABORTED) or not os.path.ismount(self.mount):
            return NotMounted(f"{self.mount} is no longer mounted ({exc.strerror})", errno=code)
        rel = _relative(path, self.mount)
        reason = refusal_reason(self.mount, rel, errno.errorcode.get(code, "EIO"))
        cls = _BY_ERRNO.get(code, ContextFSError)
        text = f"{rel}: {exc.strerror or exc}" + (f": {reason}" if reason else "")
        return cls(text, errno=code, path=rel, reason=reason)


# ---- helpers -----------------------------------------------------------------------------


def refusal_reason(mount: Path, rel: str, errno_name: str) -> str:
    """The reason the mount gave in `.status` for a refusal with this errno of the path
    `rel` (relative to the mount), a folder above it or a file in it, in the last
    seconds; "" when there is none. The line is found by `mountcalls`, which the MCP
    server and the memory-tool adapter use too."""
    if errno_name in PLAIN_ERRNOS:  # plain answers are never in `.status`
        return ""
    line = status_reason(mount, rel, errno_name)
    m = REFUSAL.match(line)
    return line[m.end() :] if m else ""


def _relative(path: Path, mount: Path) -> str:
    try:
        return str(path.relative_to(mount))
    except ValueError:
        return str(path)


def _turn_line(t: Mapping[str, Any]) -> str:
    if "role" not in t:
        raise InvalidInput(f"a turn needs a 'role': {dict(t)!r}")
    return json.dumps(dict(t), ensure_ascii=False)


def _first_words(text: str) -> str:
    words = re.findall(r"[A-Za-z0-9]+", text)[:6]
    if not words:
        raise InvalidInput("a memory needs a name or some words to name it by")
    return "-".join(words).lower()


def _file_stem(name: str) -> str:
    stem = name.replace("/", "-").strip()
    if not stem or stem.startswith("."):
        raise InvalidInput(f"{name!r} cannot name a memory file")
    return stem


def _yaml_mapping(fields: Mapping[str, Any]) -> str:
    """Front matter for plain values: JSON is YAML, so each value is written as JSON (a
    string that YAML would read as something else stays a string)."""
    return "".join(f"{k}: {json.dumps(v, ensure_ascii=False)}\n" for k, v in fields.items())


__all__: Sequence[str] = (
    "ContextFS",
    "ContextFSError",
    "Hit",
    "InvalidInput",
    "NotFound",
    "NotMounted",
    "Refused",
    "SearchResult",
    "Turn",
    "refusal_reason",
)
