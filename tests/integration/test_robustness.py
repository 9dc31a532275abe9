"""Robustness and POSIX findings (issue 11) on a real mount: what the shell and libc see."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from tests.integration.test_search import fake_embeddings, openai_mount


def _errno(fn, *args) -> int:
    try:
        fn(*args)
    except OSError as exc:
        return exc.errno
    return 0


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
