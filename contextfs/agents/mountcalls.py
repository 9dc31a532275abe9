"""Calls on a mounted ContextFS from outside: where a question's answer lives, and
refusals as text an agent can act on.

Shared by the adapters that reach the mount as a client (the MCP server, the memory-tool
directory, the Python client): `query_dir` is the one spelling of a `.query` path; a
refused call becomes `ERRNO: strerror (operation path)` plus the line
the mount wrote in `.status` for it, found by path, errno and time. Plain answers
(`ENOENT`, `EEXIST`, …) are never in `.status` and are not looked up. Only paths and
the standard library; nothing of the daemon.
"""

from __future__ import annotations

import errno
import os
import re
import time
from datetime import UTC, datetime
from pathlib import Path

# Answers the mount never lists in `.status` (reference.md, errors and limits).
PLAIN_ERRNOS = frozenset({"ENOENT", "EEXIST", "ENOTEMPTY", "ENOTDIR", "EISDIR"})
# A `.status` refusal line: `<UTC time> <ERRNO> [<operation> ]<path>: <reason>`.
REFUSAL = re.compile(r"(?P<time>\S+) (?P<errno>E[A-Z]+) (?P<where>.+?): ")
# A context type's name (ctxtypes: the names a schema may declare).
TYPE_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")


def query_dir(
    base: Path,
    question: str,
    *,
    k: int | None = None,
    budget: int | None = None,
    type: str | None = None,
) -> Path:
    """`base/.query/[@k=…,budget=…,type=…/]<question>`: in the question `%` is `%25`, `/` is
    `%2F`, a leading `@` is `%40`, and a question that is `.` or `..` is `%2E`, `%2E%2E`
    (docs/reference.md, query directories). Nothing else is escaped, so the name stays
    readable. An empty question or a `type` that is not a type name (it
    would be a path of its own, `preference/../..`, or more options, `preference,k=1`) is
    a ValueError: the path stays the one query directory under `base`."""
    if not question.strip():
        raise ValueError("a search needs a question")
    if "\0" in question:  # no name holds one: the kernel would never see the call
        raise ValueError(f"a question cannot hold a NUL character: {question!r}")
    if type is not None and not TYPE_NAME.fullmatch(type):
        raise ValueError(
            f"type must be a type name (lower-case letters, digits and _, such as "
            f"preference), not {type!r}"
        )
    for name, value in (("k", k), ("budget", budget)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"{name} must be a whole number, not {value!r}")
    segment = question.replace("%", "%25").replace("/", "%2F")
    if segment.startswith("@"):
        segment = "%40" + segment[1:]
    if segment in (".", ".."):
        segment = segment.replace(".", "%2E")
    opts = [f"{n}={v}" for n, v in (("k", k), ("budget", budget), ("type", type)) if v is not None]
    qdir = base / ".query"
    if opts:
        qdir = qdir / ("@" + ",".join(opts))
    return qdir / segment


class MountCallError(Exception):
    """A call on the mount was refused: `str()` is the text the agent reads."""


def inside(root: Path, rel: str) -> Path:
    """`rel` under `root` (an absolute path inside `root` is accepted too). A path that
    leaves the mount is refused before anything is opened: by `..`, or through a symbolic
    link kept in the memory (`notes/etc -> /etc`, `../../../../tmp`), which the tools
    would otherwise follow to read, list and write the host's files. A NUL in `rel` is
    refused too (no name holds one)."""
    base = os.path.normpath(root)
    rel = rel.strip()
    if "\0" in rel:  # no path holds one: the call could not even be made
        raise MountCallError(f"EINVAL: a path cannot hold a NUL character: {rel!r}")
    joined = os.path.normpath(rel if rel.startswith(base + os.sep) else os.path.join(base, rel))
    if joined != base and not joined.startswith(base + os.sep):
        raise MountCallError(f"EINVAL: {rel!r} is outside the mount {base}")
    real_base = os.path.realpath(base)
    real = os.path.realpath(joined)  # the links of the parts that exist, followed
    if real != real_base and not real.startswith(real_base + os.sep):
        raise MountCallError(f"EINVAL: {rel!r} leads outside the mount {base} through a link")
    return Path(joined)


def refusal(root: Path, exc: OSError, p: Path, what: str) -> MountCallError:
    """`ERRNO: strerror (what path)` plus the newest `.status` refusal naming the path."""
    name = errno.errorcode.get(exc.errno or 0, "EIO")
    rel = os.path.relpath(p, root)
    text = f"{name}: {exc.strerror or exc} ({what} {rel})"
    reason = status_reason(root, rel, name) if name not in PLAIN_ERRNOS else ""
    if reason:
        text += f"\n.status: {reason}"
    return MountCallError(text)


def status_reason(root: Path, rel: str, errno_name: str, within: float = 10.0) -> str:
    """The newest refusal in `root/.status` with this errno, at most `within` seconds old,
    whose path is `rel`, a folder above it, or a file in it (an editor's temporary)."""
    try:
        status = (root / ".status").read_text(errors="replace")
    except OSError:
        return ""
    lines = status.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith("refusals:")), None)
    if start is None:
        return ""
    for line in lines[start + 1 :]:
        if not line.startswith("  "):
            break
        m = REFUSAL.match(line.strip())
        if not m or m["errno"] != errno_name:
            continue
        try:
            stamp = datetime.strptime(m["time"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        except ValueError:
            continue
        if stamp.timestamp() < time.time() - within:
            break  # newest first: the rest are older still
        # the path may lead with the operation ("lookup .query/@k=0")
        where = m["where"]
        for cand in (where, where.partition(" ")[2]):
            if cand and (cand == rel or rel.startswith(cand + "/") or cand.startswith(rel + "/")):
                return line.strip()
    return ""
