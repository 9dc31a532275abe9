"""Filesystem findings through a real mount, with ordinary shell tools: extended attributes
refused with a reason, a file held open across `rm -r` of its node, the key of a renamed or
re-typed node, `.restore` of a document that restores nothing, trash names across remounts."""

from __future__ import annotations

import subprocess

TYPE_DIR = "user/default/preferences"


def _sh(cmd: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", cmd], cwd=cwd, capture_output=True, text=True, timeout=60)


def test_setfattr_is_refused_with_a_reason_in_status_every_time(mount):
    """setfattr and `setfattr -x` answer "Operation not supported", and each one (the
    second too: the kernel does not answer it alone) leaves a line in `.status` saying why."""
    node = mount.path / TYPE_DIR / "tea"
    node.mkdir()
    (node / "L2.md").write_text("I like green tea.\n")
    for cmd in (
        "setfattr -n user.color -v green tea/L2.md",
        "setfattr -n user.size -v big tea/L2.md",
        "setfattr -x user.color tea",
    ):
        r = _sh(cmd, mount.path / TYPE_DIR)
        assert r.returncode != 0 and "Operation not supported" in r.stderr, (cmd, r.stderr)
    status = mount.status()
    lines = [line for line in status.splitlines() if "extended attribute" in line]
    assert len(lines) == 3, status
    assert "ENOTSUP setxattr user/default/preferences/tea/L2.md: " in lines[-1]
    assert "user.color not set: extended attributes are not supported" in lines[-1]
    assert "removexattr user/default/preferences/tea" in lines[0]
    assert "user.color not removed" in lines[0]
    mount.remount("-o", "ctx_xattr")  # the facts shown as user.ctx.*, read-only
    r = _sh("getfattr -n user.ctx.version --only-values tea/L2.md", mount.path / TYPE_DIR)
    assert r.stdout == "1", r.stderr
    r = _sh("setfattr -n user.ctx.version -v 7 tea/L2.md", mount.path / TYPE_DIR)
    assert r.returncode != 0 and "Operation not supported" in r.stderr
    assert "user.ctx.version not set: extended attributes are read-only" in mount.status()
