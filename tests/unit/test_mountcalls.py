"""How a refused call on the mount is told to an agent (`contextfs.agents.mountcalls`): the errno
name, the call and the path, and the `.status` line that names it — only a recent one with
the same errno, found by the path, a folder above it or a temporary file in it."""

from __future__ import annotations

import errno
import time
from pathlib import Path

import pytest

from contextfs.agents.mountcalls import MountCallError, inside, query_dir, refusal, status_reason


def stamp(ago: float = 0.0) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - ago))


def write_status(root: Path, *lines: str) -> None:
    body = "contextfs 0.1.0\nstate: read-write\n"
    body += f"refusals: {len(lines)} (newest first)\n" + "".join(f"  {ln}\n" for ln in lines)
    body += "after: the refusals\n"
    (root / ".status").write_text(body)


def test_the_reason_is_the_newest_recent_line_with_that_path_and_errno(tmp_path):
    write_status(
        tmp_path,
        f"{stamp()} EACCES rename a/b/meta.yaml.1f2e.tmp: meta.yaml is read-only",
        f"{stamp()} EINVAL lookup .query/@budget=5: query option budget must be between 50 and 1",
        f"{stamp()} EINVAL user/me/preferences/x.md: front matter: unknown field 'colour'",
        f"{stamp(60)} EINVAL user/me/preferences/old.md: too old to be this call's",
    )
    assert status_reason(tmp_path, "user/me/preferences/x.md", "EINVAL").endswith(
        "unknown field 'colour'"
    )
    # a refusal of a folder above the path (the options segment of a question)
    assert "budget must be" in status_reason(tmp_path, ".query/@budget=5/q/_context.md", "EINVAL")
    # a temporary file in the path's folder (an editor's or a server's rename)
    assert "read-only" in status_reason(tmp_path, "a/b", "EACCES")
    assert status_reason(tmp_path, "user/me/preferences/x.md", "EACCES") == ""
    assert status_reason(tmp_path, "user/me/preferences/old.md", "EINVAL") == ""
    assert status_reason(tmp_path, "user/me/preferences", "EINVAL") != ""
    assert status_reason(tmp_path, "user/you", "EINVAL") == ""


def test_refusal_text_names_errno_call_and_path_and_skips_plain_answers(tmp_path):
    write_status(tmp_path, f"{stamp()} EINVAL user/me/preferences/x.md: bad front matter")
    p = tmp_path / "user/me/preferences/x.md"
    text = str(refusal(tmp_path, OSError(errno.EINVAL, "Invalid argument"), p, "write"))
    assert text.splitlines()[0] == "EINVAL: Invalid argument (write user/me/preferences/x.md)"
    assert text.splitlines()[1].startswith(".status: ") and text.endswith("bad front matter")
    plain = str(refusal(tmp_path, OSError(errno.ENOENT, "No such file"), p, "read"))
    assert plain == "ENOENT: No such file (read user/me/preferences/x.md)"
    (tmp_path / ".status").unlink()  # a mount gone: the errno alone
    assert "\n" not in str(refusal(tmp_path, OSError(errno.EINVAL, "Invalid"), p, "write"))


def test_paths_stay_inside_the_mount(tmp_path):
    assert inside(tmp_path, "user/me") == tmp_path / "user/me"
    assert inside(tmp_path, str(tmp_path / "agent")) == tmp_path / "agent"
    assert inside(tmp_path, "") == tmp_path
    for bad in ("../etc", "user/../../etc", "/etc/passwd"):
        with pytest.raises(MountCallError, match="^EINVAL: .* is outside the mount"):
            inside(tmp_path, bad)
    # a link kept in the memory leads out: refused, whether it is absolute or relative,
    # and for a file not made yet below it; a link inside the mount is followed
    root = tmp_path / "mnt"
    (root / "notes").mkdir(parents=True)
    (root / "notes" / "etc").symlink_to("/etc")
    (root / "notes" / "up").symlink_to("../..")
    (root / "notes" / "here").symlink_to(".")
    for bad in ("notes/etc/hostname", "notes/up", "notes/up/new.txt", "notes/etc"):
        with pytest.raises(MountCallError, match="^EINVAL: .* leads outside the mount"):
            inside(root, bad)
    assert inside(root, "notes/here/x.md") == root / "notes/here/x.md"


def test_a_question_is_one_path_segment(tmp_path):
    assert query_dir(tmp_path, "a/b 50%") == tmp_path / ".query/a%2Fb 50%25"
    assert query_dir(tmp_path, "@home", budget=500, type="entity") == (
        tmp_path / ".query/@budget=500,type=entity/%40home"
    )
    assert query_dir(tmp_path, ".") == tmp_path / ".query/%2E"  # not the directory itself
    assert query_dir(tmp_path, "..") == tmp_path / ".query/%2E%2E"
    for bad in ("", " "):
        with pytest.raises(ValueError):
            query_dir(tmp_path, bad)
