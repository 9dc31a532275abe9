"""Live sessions (SPEC §6): `<owner>/.sessions/<id>/` with three files.

`mkdir .sessions/<id>` starts a session; `transcript.jsonl` is append-only (each close
records the appended turns, redacted); `context.md` is built at every open, off the event
loop, from the profile, recent sessions and the memories relevant to the latest turns,
within the configured token budget; writing `compact` or `end` to `control` (or rmdir of
the session) first awaits extraction of the pending turns, then compacts the transcript
into a summary or archives the session as a `session` node and removes its directory.
"""

from __future__ import annotations

import stat
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from contextfs.conversations.inbox import Intake, IntakeService, Session
from contextfs.errors import ContextFSError, InvalidInput, NotFound
from contextfs.fs.inode import SESSIONS_DIR, Handle, Inode, Role, SessionDir, ns
from contextfs.fs.roles.base import Refusals, RoleBase
from contextfs.fs.searchport import SearchPort
from contextfs.fs.table import InodeTable
from contextfs.search.retrieval import Hit, QueryOptions

if TYPE_CHECKING:
    from contextfs.memory.service import Memory

# How many memories a session's context.md asks the search for (the token budget then
# decides how many of them fit). A default for `SessionsConfig.k`, not a rule.
SESSION_CONTEXT_K = 8
# context.md's token budget unless configured (`session_context_budget` in config.yaml).
SESSION_CONTEXT_BUDGET = 2000

COMMANDS = ("compact", "end")


@dataclass(frozen=True, slots=True)
class SessionsConfig:
    """What the sessions handler needs beyond the intake: its context budget and k, and the
    service that extracts pending turns before a compact or an end (none in tests that
    drive extraction themselves)."""

    budget: int = SESSION_CONTEXT_BUDGET
    k: int = SESSION_CONTEXT_K
    service: IntakeService | None = None


class Sessions(RoleBase):
    roles = frozenset(
        {
            Role.SESSIONS,
            Role.SESSION,
            Role.SESSION_CONTEXT,
            Role.SESSION_TRANSCRIPT,
            Role.SESSION_CONTROL,
        }
    )

    def __init__(
        self,
        table: InodeTable,
        memory: Memory,
        intake: Intake | None,
        search: SearchPort | None,
        config: SessionsConfig | None,
        *,
        refusals: Refusals,
    ) -> None:
        super().__init__(table)
        self.memory = memory
        self.refusals = refusals
        self.intake = intake
        self.search = search
        self.config = config or SessionsConfig()
        # context.md as last built, per session, with the state it reflects: getattr
        # reports its true size (rsync copies st_size bytes) and the next open serves it
        self._contexts: dict[tuple[str, str, str], tuple[tuple[object, ...], bytes]] = {}
        # owner -> its `.sessions` directories: the root's is also the default owner's, and
        # a session started or ended through one shows in the other at once
        self._views: dict[tuple[str, str], list[Inode]] = {}

    def add_dir(self, d: Inode, owner: tuple[str, str]) -> None:
        view = self.table.new_dir(
            Role.SESSIONS, SESSIONS_DIR, d, 0o755, owner=owner, populated=False
        )
        self._views.setdefault(owner, []).append(view)

    def populate(self, d: Inode) -> None:
        d.populated = True
        assert self.intake is not None
        for (kind, oid, _sid), sess in self.intake.sessions.items():
            if (kind, oid) == d.owner:
                self._show(d, sess)

    def _show(self, d: Inode, sess: Session) -> Inode:
        t = self.table
        payload = SessionDir(sess)
        # 0700: its context.md is built from everything of the owner's a search finds, the
        # private nodes too: only the owner (and root) may enter
        sd = t.new_dir(
            Role.SESSION,
            sess.id,
            d,
            0o700,
            owner=d.owner,
            mtime_ns=ns(sess.created),
            payload=payload,
        )
        for name, role, mode in (
            ("context.md", Role.SESSION_CONTEXT, 0o444),
            ("transcript.jsonl", Role.SESSION_TRANSCRIPT, 0o644),
            ("control", Role.SESSION_CONTROL, 0o644),
        ):
            t.new(role, stat.S_IFREG | mode, name, sd, owner=d.owner, payload=payload)
        return sd

    def mkdir(self, d: Inode, name: str, mode: int, uid: int, gid: int) -> Inode:
        if d.role != Role.SESSIONS:
            raise self.no_files_here(d)
        assert self.intake is not None and d.owner is not None
        sess = self.intake.start_session(d.owner, name)
        for view in self._views.get(d.owner, []):
            if view is not d and view.populated and view.parent is not None:
                self._show(view, sess)
        return self._show(d, sess)

    async def rmdir(self, d: Inode, child: Inode) -> None:
        if child.role == Role.SESSION:
            await self._act(child, "end")
        else:
            await super().rmdir(d, child)

    # ---- files ---------------------------------------------------------------------------

    def content(self, inode: Inode) -> bytes:
        if inode.role == Role.SESSION_TRANSCRIPT:
            return inode.session.data()
        return b""  # context.md is built at open; control reads empty

    def size(self, inode: Inode) -> int:
        if inode.role == Role.SESSION_CONTEXT and self.intake is not None:
            return len(self._context_now(inode.session))
        if inode.role == Role.SESSION_CONTROL:
            return 0
        if inode.role == Role.SESSION_TRANSCRIPT and inode.data is None:
            return inode.session.size  # (not encoded again at each getattr)
        return super().size(inode)

    async def opened(self, h: Handle) -> None:
        if h.inode.role == Role.SESSION_CONTEXT and self.intake is not None:
            sess = h.inode.session
            key, state = self._key(sess), self._state(sess)
            cached = self._contexts.get(key)
            if cached is None or cached[0] != state:
                data = (await trio.to_thread.run_sync(self._build(sess))).encode()
                cached = self._contexts[key] = (state, data)
            h.snapshot = cached[1]

    @staticmethod
    def _key(sess: Session) -> tuple[str, str, str]:
        return (sess.owner[0], sess.owner[1], sess.id)

    def _state(self, sess: Session) -> tuple[object, ...]:
        """What context.md depends on: the store, the index, the session's turns."""
        index = self.search.generation if self.search is not None else 0
        gen = self.memory.generation
        return (gen, index, sess.changes, sess.processed, sess.summary)

    def _context_now(self, sess: Session) -> bytes:
        """context.md as it reads now: built here (getattr is synchronous; it may search)
        when the state it reflects has moved on, else the cached bytes."""
        key, state = self._key(sess), self._state(sess)
        cached = self._contexts.get(key)
        if cached is None or cached[0] != state:
            cached = self._contexts[key] = (state, self._build(sess)().encode())
        return cached[1]

    def _build(self, sess: Session) -> Callable[[], str]:
        """context.md's builder (run in a worker thread when it can be)."""
        intake, search, k = self.intake, self.search, self.config.k
        assert intake is not None

        def find(question: str, scope: str) -> list[Hit]:
            assert search is not None
            # deeper than k: archives of long conversations crowd the first hits, and
            # context.md shows k typed memories besides their turns (Intake.context_for)
            return search.search(question, scope, QueryOptions(k=min(100, 3 * k))).hits

        return lambda: intake.context_for(
            sess, self.config.budget, find if search is not None else None
        )

    async def flush(self, h: Handle) -> None:
        await self._commit(h)

    async def fsync(self, h: Handle) -> None:
        if h.inode.role == Role.SESSION_TRANSCRIPT and (h.appended or h.inode.dirty):
            h.wrote = False
            await self._commit(h)

    def release(self, h: Handle) -> None:
        h.inode.dirty = False  # only a close after a write records or commands

    async def _commit(self, h: Handle) -> None:
        inode = h.inode
        if inode.role == Role.SESSION_TRANSCRIPT:
            if h.appended is not None:
                self._record_appended(h)
            else:
                self._record(inode)
        elif inode.role == Role.SESSION_CONTROL:
            command = bytes(inode.data or b"").decode(errors="replace").strip().lower()
            inode.data, inode.dirty = None, False
            if command and command not in COMMANDS:
                raise InvalidInput(f"unknown session command {command!r}: use compact or end")
            if command and inode.parent is not None:
                await self._act(inode.parent, command)

    def _record_appended(self, h: Handle) -> None:
        """What one `>>` writer appended, recorded at its close (or fsync) after what is
        stored now, other writers' appends included: its own lines, taken or refused
        (with their bytes kept) on their own."""
        assert self.intake is not None and h.appended is not None
        inode, data = h.inode, bytes(h.appended)
        h.appended = None
        try:
            self.intake.record(inode.session, data)
        except ContextFSError as exc:  # nothing of this append was recorded
            self.refusals.refuse(inode, exc, data)
            raise
        finally:
            # the kernel cached each writer's bytes where it wrote them; the stored
            # order is the order of the closes
            self.table.invalidate(inode)

    def _record(self, inode: Inode) -> None:
        """Appended turns are recorded; anything else written is refused."""
        assert self.intake is not None
        sess = inode.session
        if inode.data is None:
            return  # nothing pending: another writer's close recorded what this one added
        data = bytes(inode.data)
        old = sess.data()
        if not data.startswith(old):
            inode.data, inode.dirty = None, False
            self.table.invalidate(inode)
            exc = InvalidInput("transcript.jsonl is append-only: add lines with >>")
            self.refusals.refuse(inode, exc, data[len(old) :] or data)
            raise exc
        try:
            self.intake.record(sess, data[len(old) :])
        except ContextFSError as exc:  # the store took none of it (its buffers, a full disk)
            inode.data, inode.dirty = None, False
            self.table.invalidate(inode)
            self.refusals.refuse(inode, exc, data[len(old) :])
            raise
        inode.data, inode.dirty = None, False
        self.table.invalidate(inode, attr_only=True)

    async def _act(self, sd: Inode, command: str) -> None:
        """compact / end: extract what is pending (off the event loop), then act."""
        assert self.intake is not None
        sess = sd.session
        if self.config.service is not None:
            await self.config.service.extract(sess)
        if sess.ended:  # ended meanwhile (an rmdir through the other view of .sessions)
            raise NotFound(f".sessions/{sess.id} has ended")
        if command == "compact":
            self.intake.compact(sess)
            return
        self.intake.end_session(sess)
        self._contexts.pop(self._key(sess), None)
        # gone from every view of the owner's sessions (the root's is the default owner's)
        shown_in: list[Inode | None] = [sd]
        for view in self._views.get(sess.owner, []):
            shown_in.append((view.children or {}).get(sess.id))
        for shown in shown_in:
            if shown is None or shown.parent is None or shown.role != Role.SESSION:
                continue
            if shown is not sd and shown.session is not sess:
                continue
            for c in list((shown.children or {}).values()):  # the session directory is gone
                self.table.unlink_inode(c)
            self.table.unlink_inode(shown)
