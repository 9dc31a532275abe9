"""An exported node made again with its facts: the one restore both import paths use.

`restore_node` makes a node as `contextfs export` wrote it: its versions in order, its
hand-written L0/L1, then the bookkeeping no file write can set (its id when the store never
handed it out, creation and last-change times, provenance, tags, importance, reads), all in
one transaction. An import into an unmounted data dir calls it through its own `Memory`
(`transfer.vault_targets.StoreTarget`); a live mount calls it for the owner's writes to
its `.restore` file (`fs.roles.restore`). Facts come as YAML parsed them from an export's
front matter, or as JSON carried them (times then are ISO strings).

Boundary: a `Memory` the caller owns, no files; redaction, validation and naming are the
memory's own, as for any write.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from contextfs.errors import InvalidInput
from contextfs.model import Access

# the mount's control file for it, at the root (`fs.roles.restore`)
RESTORE_FILE = ".restore"

if TYPE_CHECKING:
    from contextfs.ctxtypes import ContextType
    from contextfs.memory.service import Memory
    from contextfs.model import Node


# the times a fact may give: from the epoch to the end of year 9999 (a file's time beyond
# what the kernel's time_t takes, or before 1970, would make its directory unlistable)
_LAST_TIME = 253402300799.0
# the ids the kernel takes for an owner or a group (uid_t; -1 means "unchanged")
_LAST_ID = 2**32 - 2


def fact_time(value: Any) -> float | None:
    """A time fact as meta.yaml writes it (YAML may have parsed it already), or seconds
    since the epoch; None when it is none, or no time a file can have."""
    out: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        out = float(value)
    elif isinstance(value, dt.datetime):
        out = value.replace(tzinfo=value.tzinfo or dt.UTC).timestamp()
    elif isinstance(value, str):
        try:
            parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        out = parsed.replace(tzinfo=parsed.tzinfo or dt.UTC).timestamp()
    if out is None or not math.isfinite(out) or not 0 <= out <= _LAST_TIME:
        return None
    return out


def access_fact(a: Access, default: Access) -> dict[str, Any] | None:
    """How an export writes a node's owner, group and modes (`contextfs.facts.access`):
    None when they are the defaults its owner directory gives it."""
    if a == default:
        return None
    return {
        "uid": a.uid,
        "gid": a.gid,
        "dir_mode": f"{a.dir_mode:04o}",
        "file_mode": f"{a.file_mode:04o}",
    }


def fact_access(value: Any) -> Access | None:
    """The `access` fact read back; None when there is none. A bad one is refused."""
    if value is None:
        return None
    try:
        uid, gid = int(value["uid"]), int(value["gid"])
        if not (0 <= uid <= _LAST_ID and 0 <= gid <= _LAST_ID):
            raise ValueError("no such owner or group")
        # a tier is no program: no setuid, setgid or sticky bit on the files
        return Access(
            uid,
            gid,
            int(str(value["dir_mode"]), 8) & 0o7777,
            int(str(value["file_mode"]), 8) & 0o0777,
        )
    except (KeyError, TypeError, ValueError):
        raise InvalidInput(
            "access is {uid, gid, dir_mode, file_mode} with ids from 0 to "
            f"{_LAST_ID} and octal modes, not " + repr(value)
        ) from None


def _strings(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def restore_node(
    memory: Memory,
    owner: tuple[str, str],
    ctype: ContextType,
    name: str,
    versions: Sequence[tuple[str, float | None]],
    pins: Mapping[str, str],
    facts: Mapping[str, Any],
) -> Node:
    """Make the node `owner/ctype/name` ("" for a singleton) as exported: each of
    `versions` (text, when it was saved; None: now) saved in turn (the last is its L2),
    `pins` (tier -> text) written by hand, then its facts (its owner, group and modes
    among them). One transaction: a refusal anywhere leaves no part of it."""
    m = memory
    wanted = facts.get("id")
    access = fact_access(facts.get("access"))
    with m.transaction():
        n = m.create_node(
            owner,
            ctype,
            name,
            persist=False,
            node_id=wanted if isinstance(wanted, int) and wanted > 0 else None,
            created=fact_time(facts.get("created")),
        )
        for text, at in versions:
            m.save_l2(n, text, reason="import", at=at)
        for tier, text in pins.items():
            m.save_pinned(n, tier, text)
        importance = facts.get("importance")
        if not isinstance(importance, int | float) or not 0 <= importance <= 1:
            importance = n.importance  # NaN, 5, "high": the node's own
        reads = facts.get("access_count")
        m.restore_facts(
            n,
            # never before it was made
            updated=max(fact_time(facts.get("updated")) or n.updated, n.created),
            sources=_strings(facts.get("sources")),
            tags=_strings(facts.get("tags")),
            importance=float(importance),
            access_count=reads if isinstance(reads, int) and 0 <= reads < 2**63 else n.access_count,
        )
        if access is not None:
            m.set_access("node", str(n.id), access)
    return n
