"""Robustness and POSIX findings (issue 11) on a real mount: what the shell and libc see."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

from contextfs.testing import errno_of
from tests.integration.test_search import fake_embeddings, openai_mount

_errno = errno_of


def _node(mount) -> Path:
    node = mount.path / "user/default/preferences/editor"
    node.mkdir()
    (node / "L2.md").write_text("vim\n")
    return node


def test_long_names_and_nlink_after_unlink(mount):
    node = _node(mount)
    (node / "f").write_text("x")
    long = node / ("n" * 256)
    calls = [
        (os.stat, long),
        (os.lstat, long),
        (os.open, long, os.O_RDONLY),
        (os.open, long, os.O_WRONLY | os.O_CREAT, 0o644),
        (os.unlink, long),
        (os.rmdir, long),
        (os.mkdir, long),
        (os.chmod, long, 0o600),
        (os.truncate, long, 0),
        (os.rename, long, node / "g"),
        (os.rename, node / "f", long),
        (os.link, node / "f", long),
        (os.symlink, "f", long),
        (os.mkfifo, long),
    ]
    for fn, *args in calls:
        assert _errno(fn, *args) == errno.ENAMETOOLONG, fn.__name__
    fd = os.open(node / "open.txt", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"abc")
        assert os.fstat(fd).st_nlink == 1
        os.unlink(node / "open.txt")
        assert os.fstat(fd).st_nlink == 0
    finally:
        os.close(fd)
    assert "limited to 255 bytes" in mount.status()


def test_a_question_that_is_not_utf8_is_einval(tmp_path, monkeypatch):
    m = openai_mount(tmp_path, monkeypatch, fake_embeddings())
    try:
        _node(m)
        q = os.fsencode(m.path / ".query") + b"/caf\xe9 au lait/_context.md"
        assert _errno(os.stat, q) == errno.EINVAL
        assert _errno(os.stat, os.fsencode(m.path) + b"/user/.query/\xff") == errno.EINVAL
        assert (m.path / ".query/caf%E9 au lait/_context.md").read_text().startswith("#")
        status = m.status()
        assert "EINVAL lookup .query/caf\\udce9 au lait: a question must be UTF-8" in status
    finally:
        m.stop()
    log = m.log.read_text(encoding="utf-8")  # the log is UTF-8 whatever the names were
    assert "internal error" not in log and "Traceback" not in log


def test_df_shows_the_data_dirs_filesystem(mount):
    s, v = os.statvfs(mount.path), os.statvfs(mount.data_dir)
    assert (s.f_frsize * s.f_blocks, s.f_files) == (v.f_frsize * v.f_blocks, v.f_files)
    assert abs(s.f_bavail * s.f_frsize - v.f_bavail * v.f_frsize) < 2**30
    assert s.f_namemax == 255


def _sh(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "LC_ALL": "C"})


def test_refusals_reach_the_shell_with_true_messages(mount, tmp_path):
    node = _node(mount)
    u = mount.path / "user/default"
    (tmp_path / ".env").write_text(
        "OPENAI_API_KEY=sk-proj-0123456789abcdefghijklmnopqrstuvwxyzAB\n"
    )
    (tmp_path / "a.pdf").write_bytes(b"%PDF-1.4\n")
    r = _sh("cp", str(tmp_path / ".env"), str(mount.path / ".inbox/"))
    assert r.returncode == 1 and "Permission denied" in r.stderr, r
    r = _sh("cp", str(tmp_path / "a.pdf"), str(u / ".inbox/"))
    assert r.returncode == 1 and "Operation not supported" in r.stderr, r
    assert "see .env.report.md" in mount.status()
    # mv onto a name or content ContextFS refuses: EPERM, not "into a subdirectory of itself"
    (node / "tmp.txt").write_text("---\nnope: 1\n---\nbody\n")
    os.symlink("L2.md", node / "link.md")
    for src, dst in [
        (node, u / "preferences/Bad Name"),
        (node, u / "events/editor"),
        (node / "tmp.txt", node / "L2.md"),
        (node / "tmp.txt", u / "preferences/tea.md"),
        (node / "link.md", mount.path / ".inbox/link.md"),
        (node / "link.md", u / "profile/about.md"),
    ]:
        r = _sh("mv", str(src), str(dst))
        assert r.returncode == 1, (src, dst, r)
        assert "Operation not permitted" in r.stderr and "itself" not in r.stderr, r.stderr
        assert os.path.lexists(src), src
    assert (node / "L2.md").read_text() == "vim\n"
    assert "cannot become a memory" in mount.status()
    assert not (mount.path / ".inbox/link.md").exists()
