"""Bad input on a real mount: the corpus in tests/corpus/ and hostile names, sizes, paths,
races and unmounts. Each case asserts the errno or behaviour docs/operations.md documents
and that a canary node written first is intact at the end, also after a remount, with a
clean fsck and no traceback or error in the daemon log.

Behaviour these tests pin down (not spelled out elsewhere):
- attachment names are stored verbatim: control characters (`\\n`, `\\t`, `\\x01`) and
  `%`-sequences are ordinary bytes of a name (nothing is percent-decoded outside
  `.query/`); node names with them are refused with EINVAL (the type's slug template).
- `rm -r` of a node while another process writes into it: the node ends in `.trash`
  with the last committed L2, unless the writer created a file after `rm -r` emptied the
  directory, in which case `rmdir` fails with ENOTEMPTY and the node stays live with the
  writer's files. Either way nothing the writer had committed is lost.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from contextfs.testing import Mount, errno_of
from contextfs.testing.mount import log_problems

pytestmark = pytest.mark.slow

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
MAX_FILE = 1 << 20
MAX_TIER = 64 << 10
CANARY_L2 = "# Canary\n\nThis node must survive every bad input. Unicode ✓ 記憶.\n"
CANARY_BIN = bytes(range(256)) * 40
QUIET = {errno.ENOENT, errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR}


_errno = errno_of


def _write(path: Path, data: bytes, flags: int = os.O_TRUNC, fsync: bool = True) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | flags, 0o644)
    try:
        view = memoryview(data)
        while view:  # like cp: a short write is followed by another (which gets EFBIG)
            view = view[os.write(fd, view) :]
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def _drop(path: Path, data: bytes) -> None:
    """Write a file into a type directory the way `cp` does (no fsync)."""
    _write(path, data, fsync=False)


class Box:
    """A mount with small limits, a canary node, and the checks every case ends with."""

    def __init__(self, tmp: Path) -> None:
        self.data = tmp / "data"
        self.data.mkdir()
        (self.data / "config.yaml").write_text(
            f"search: false\nmax_file_size: {MAX_FILE}\nmax_tier_size: {MAX_TIER}\n"
        )
        mnt = tmp / "mnt"
        mnt.mkdir()
        self.m = Mount(mnt, self.data)
        self.m.start()
        self.u = mnt / "user/default"
        self.prefs = self.u / "preferences"
        canary = self.prefs / "canary"
        canary.mkdir()
        (canary / "L2.md").write_text(CANARY_L2)
        (canary / "keep.bin").write_bytes(CANARY_BIN)
        self.node = self.prefs / "target"
        self.node.mkdir()
        (self.node / "L2.md").write_text("# Target\n\nThe stored text before the bad input.\n")

    @property
    def mnt(self) -> Path:
        return self.m.path

    def check_canary(self) -> None:
        canary = self.prefs / "canary"
        assert (canary / "L2.md").read_text() == CANARY_L2
        assert (canary / "keep.bin").read_bytes() == CANARY_BIN
        assert (canary / ".history/v1.md").read_text() == CANARY_L2
        assert "version: 1\n" in (canary / "meta.yaml").read_text()

    def remount(self) -> None:
        self.m.stop()
        assert self.m.fsck() == []
        self.m.start()

    def log_problems(self) -> list[str]:
        """The daemon log's warnings, errors and tracebacks, but the benign ones (a
        RELEASE answered after the unmount took the kernel's side away: `BENIGN_LOG`)."""
        return log_problems(self.m.log) if self.m.log.exists() else []


@pytest.fixture
def box(tmp_path: Path) -> Iterator[Box]:
    b = Box(tmp_path)
    try:
        yield b
        b.check_canary()
        b.remount()
        b.check_canary()
    finally:
        if b.m.proc is not None:
            b.m.stop()
    assert b.m.fsck() == []
    assert b.log_problems() == []


# ---- binary files and invalid UTF-8 --------------------------------------------------------

NOT_UTF8 = [
    "invalid_start_byte.md",
    "latin1.md",
    "overlong_slash.md",
    "surrogate.md",
    "truncated_multibyte.md",
]


def test_binary_and_invalid_utf8(box: Box) -> None:
    stored = (box.node / "L2.md").read_text()
    for name in NOT_UTF8 + ["binary.bin"]:
        data = (CORPUS / "text" / name).read_bytes()
        # any bytes are fine as an attachment, byte for byte
        (box.node / f"att-{name}").write_bytes(data)
        assert (box.node / f"att-{name}").read_bytes() == data
        # a tier must be UTF-8: EINVAL, the stored text stays, the bytes are kept
        assert _errno(_write, box.node / "L2.md", data) == errno.EINVAL, name
        assert (box.node / "L2.md").read_text() == stored, name
        # a file routed from a type directory too
        assert _errno(_drop, box.prefs / f"drop-{name}", data) == errno.EINVAL, name
        assert f"drop-{name}" not in os.listdir(box.prefs)
    status = box.m.status()
    assert "must be UTF-8" in status
    kept = [Path(p) for p in re.findall(r"bytes kept at (\S+?)\)", status)]
    assert {p.read_bytes() for p in kept} >= {(CORPUS / "text" / n).read_bytes() for n in NOT_UTF8}
    valid = (CORPUS / "text/valid_utf8.md").read_bytes()
    _write(box.node / "L2.md", valid)
    assert (box.node / "L2.md").read_bytes() == valid
    box.remount()
    assert (box.node / "L2.md").read_bytes() == valid
    for name in NOT_UTF8 + ["binary.bin"]:
        assert (box.node / f"att-{name}").read_bytes() == (CORPUS / "text" / name).read_bytes()


def test_refused_fsynced_drop_is_gone_after_close(box: Box) -> None:
    """SPEC §5: when a file dropped into a type directory is closed it has been routed (or
    refused); the drop file does not stay, also when it was fsync()ed before close()."""
    drop = box.prefs / "synced-bad.md"
    assert _errno(_write, drop, b"\xff\xfe not utf-8") == errno.EINVAL
    assert not drop.exists(), "the refused drop is still visible right after close()"


def test_nul_bytes_in_l2_round_trip_or_are_refused(box: Box) -> None:
    """NUL is valid UTF-8: either stored exactly (also after remount) or refused."""
    data = (CORPUS / "text/nul_bytes.md").read_bytes()
    e = _errno(_write, box.node / "L2.md", data)
    assert e in (0, errno.EINVAL)
    if e == 0:
        assert (box.node / "L2.md").read_bytes() == data
        box.remount()
        assert (box.node / "L2.md").read_bytes() == data


# ---- sizes --------------------------------------------------------------------------------


def test_size_limits_at_the_boundary(box: Box) -> None:
    att = box.node / "blob.bin"
    _write(att, b"a" * MAX_FILE)  # exactly the limit is fine
    assert att.stat().st_size == MAX_FILE
    assert _errno(_write, att, b"b", os.O_APPEND) == errno.EFBIG
    assert _errno(os.truncate, att, MAX_FILE + 1) == errno.EFBIG
    assert _errno(_write, box.node / "over.bin", b"c" * (MAX_FILE + 1)) == errno.EFBIG
    # `dd of=blob.bin` past the limit (O_TRUNC, then writes): refused, and the file keeps
    # what it held before, neither the cut nor the part written
    assert _errno(_write, att, b"g" * (MAX_FILE + 1)) == errno.EFBIG
    assert att.read_bytes() == b"a" * MAX_FILE
    assert (box.node / "over.bin").stat().st_size == 0  # created; nothing of the refused write
    l2 = box.node / "L2.md"
    before = l2.read_text()
    assert _errno(_write, l2, b"d" * (MAX_TIER + 1)) == errno.EFBIG
    assert l2.read_text() == before
    assert _errno(_drop, box.prefs / "huge.md", b"e" * (MAX_TIER + 1)) == errno.EFBIG
    _write(l2, b"f" * MAX_TIER)
    assert l2.stat().st_size == MAX_TIER
    assert "EFBIG" in box.m.status()
    box.remount()
    assert att.stat().st_size == MAX_FILE
    assert l2.read_bytes() == b"f" * MAX_TIER


# ---- names --------------------------------------------------------------------------------


def test_name_lengths_255_ok_256_enametoolong(box: Box) -> None:
    n255, n256 = "x" * 255, "x" * 256
    e254, e256 = "é" * 127, "é" * 128  # 254 and 256 bytes
    (box.node / n255).write_bytes(b"255")
    (box.node / e254).write_bytes(b"254")
    os.mkdir(box.node / ("d" * 255))
    os.symlink(n255, box.node / ("s" * 255))
    os.mkdir(box.prefs / ("n" * 80))  # a node's key is at most 80 characters
    assert _errno(os.mkdir, box.prefs / ("n" * 81)) == errno.EINVAL
    for fn, args in [
        (_write, (box.node / n256, b"x")),
        (_write, (box.node / e256, b"x")),
        (os.mkdir, (box.node / n256,)),
        (os.mkdir, (box.prefs / n256,)),
        (os.symlink, ("t", box.node / n256)),
        (os.rename, (box.node / n255, box.node / n256)),
        (os.rename, (box.prefs / ("n" * 80), box.prefs / n256)),
    ]:
        assert _errno(fn, *args) == errno.ENAMETOOLONG, (fn.__name__, len(str(args[-1])))
    assert "limited to 255 bytes" in box.m.status()
    box.remount()
    assert (box.node / n255).read_bytes() == b"255"
    assert (box.node / e254).read_bytes() == b"254"
    assert os.readlink(box.node / ("s" * 255)) == n255
    assert (box.prefs / ("n" * 80)).is_dir()


CONTROL = ["a\nb", "a\tb", "a\x01b", "trail\r", "esc\x1b[31m"]


def test_control_characters_in_names(box: Box) -> None:
    for name in CONTROL:
        # attachments: stored verbatim
        (box.node / name).write_bytes(name.encode())
        os.mkdir(box.node / (name + "-dir"))
        # nodes: refused by the slug template
        assert _errno(os.mkdir, box.prefs / name) == errno.EINVAL, repr(name)
    listed = set(os.listdir(box.node))
    assert set(CONTROL) <= listed
    assert "does not fit the preference template" in box.m.status()
    box.remount()
    for name in CONTROL:
        assert (box.node / name).read_bytes() == name.encode()
        assert (box.node / (name + "-dir")).is_dir()
    assert not any(c in name for name in os.listdir(box.prefs) for c in "\n\t\x01")


TRAVERSAL = [
    "%2e%2e",
    "..%2F",
    "a%2Fb",
    "%2e%2e%2f%2e%2e%2fescape",
    "...",
    "..\\..",
    "%252e%252e",
    "%00",
]


def test_traversal_names_are_literal(box: Box) -> None:
    before_prefs = set(os.listdir(box.prefs))
    before_owner = set(os.listdir(box.u))
    for name in TRAVERSAL:
        (box.node / name).write_bytes(name.encode())
        assert _errno(os.mkdir, box.prefs / name) == errno.EINVAL, name
    assert _errno(os.mkdir, box.node / "..") == errno.EEXIST  # the kernel resolves ..
    assert set(TRAVERSAL) <= set(os.listdir(box.node))
    assert set(os.listdir(box.prefs)) == before_prefs
    assert set(os.listdir(box.u)) == before_owner
    assert not (box.u / "escape").exists() and not (box.mnt / "escape").exists()
    box.remount()
    for name in TRAVERSAL:
        assert (box.node / name).read_bytes() == name.encode()


def test_deep_attachment_dirs(box: Box) -> None:
    d = box.node
    for i in range(50):
        d = d / f"level{i:02d}"
    os.makedirs(d)
    (d / "bottom.txt").write_bytes(b"fifty levels down\n")
    found = subprocess.run(
        ["find", str(box.node), "-name", "bottom.txt"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert found == [str(d / "bottom.txt")]
    box.remount()
    assert (d / "bottom.txt").read_bytes() == b"fifty levels down\n"
    os.rename(d / "bottom.txt", box.node / "level00/up.txt")
    shutil.rmtree(box.node / "level00/level01")
    assert os.listdir(box.node / "level00") == ["up.txt"]
    box.remount()
    assert (box.node / "level00/up.txt").read_bytes() == b"fifty levels down\n"
    assert not (box.node / "level00/level01").exists()


def test_symlink_loops_give_eloop(box: Box) -> None:
    os.symlink("b", box.node / "a")
    os.symlink("a", box.node / "b")
    os.symlink("self", box.node / "self")
    for name in ("a", "b", "self"):
        assert _errno(open, box.node / name) == errno.ELOOP
        assert _errno(os.stat, box.node / name) == errno.ELOOP
        assert os.path.islink(box.node / name)
    assert _errno(_write, box.node / "a", b"x") == errno.ELOOP
    box.remount()
    assert os.readlink(box.node / "a") == "b" and os.readlink(box.node / "b") == "a"
    assert _errno(open, box.node / "self") == errno.ELOOP


# ---- malformed YAML -------------------------------------------------------------------------


def test_malformed_front_matter(box: Box) -> None:
    expected = json.loads((CORPUS / "front_matter/EXPECTED.json").read_text())
    stored = (box.node / "L2.md").read_text()
    for name in sorted(expected):
        data = (CORPUS / "front_matter" / name).read_bytes()
        assert _errno(_write, box.node / "L2.md", data) == errno.EINVAL, name
        assert (box.node / "L2.md").read_text() == stored, name
        assert _errno(_drop, box.prefs / name, data) == errno.EINVAL, name
        assert name not in os.listdir(box.prefs)
    status = box.m.status()
    for name, reason in expected.items():
        assert reason in status, (name, reason)
    kept = {Path(p).read_bytes() for p in re.findall(r"bytes kept at (\S+?)\)", status)}
    for name in expected:
        assert (CORPUS / "front_matter" / name).read_bytes() in kept, name
    assert "version: 1\n" in (box.node / "meta.yaml").read_text()


SCHEMA_ERRORS = {
    "duplicate_key.yaml": (3, "duplicate key 'scope'"),
    "fields_is_a_list.yaml": (6, "fields must be a mapping"),
    "list_not_mapping.yaml": (1, "must be a mapping"),
    "missing_directory.yaml": (1, "missing required key 'directory'"),
    "tab_indent.yaml": (6, "YAML syntax error"),
    "unclosed_flow.yaml": (6, "YAML syntax error"),
    "unknown_field_type.yaml": (7, "type must be one of"),
    "unknown_mode.yaml": (5, "mode must be one of"),
}


def test_malformed_schemas_refuse_the_mount(tmp_path: Path) -> None:
    b = Box(tmp_path)
    b.m.stop()
    schemas = b.data / "schemas"
    schemas.mkdir()
    for name, (line, reason) in sorted(SCHEMA_ERRORS.items()):
        for old in schemas.iterdir():
            old.unlink()
        shutil.copy(CORPUS / "schemas" / name, schemas / name)
        proc = b.m.start(expect_fail=True)
        out = proc.stdout.read().decode(errors="replace")
        assert proc.returncode == 3, (name, out)
        assert f"{name}:{line}: " in out and reason in out, (name, out)
        assert not os.path.ismount(b.mnt)
        r = subprocess.run(
            [sys.executable, "-m", "contextfs", "schema", "check", str(schemas)],
            capture_output=True,
            text=True,
        )
        assert r.returncode == 3 and f"{name}:{line}: " in r.stderr, (name, r.stderr)
    shutil.rmtree(schemas)
    b.m.start()
    try:
        b.check_canary()
    finally:
        b.m.stop()
    assert b.m.fsck() == []


# ---- races --------------------------------------------------------------------------------


def _race(seconds: float, *fns) -> list[BaseException]:
    stop = threading.Event()
    errors: list[BaseException] = []

    def loop(fn) -> None:
        i = 0
        while not stop.is_set():
            try:
                fn(i)
            except OSError as exc:
                if exc.errno not in QUIET:
                    errors.append(exc)
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                errors.append(exc)
            i += 1

    threads = [threading.Thread(target=loop, args=(fn,)) for fn in fns]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(timeout=30)
        assert not t.is_alive(), "a racing call hung"
    return errors


def test_truncation_races(box: Box) -> None:
    att, l2 = box.node / "race.bin", box.node / "L2.md"
    att.write_bytes(b"")
    att_values = {b""}
    l2_values = {"", l2.read_text()}

    def write_att(i: int) -> None:
        data = f"attachment write {i} ".encode() * 50
        att_values.add(data)
        fd = os.open(att, os.O_WRONLY)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)

    def write_l2(i: int) -> None:
        text = f"# Race {i}\n\nWriter text {i}.\n"
        l2_values.add(text)
        _write(l2, text.encode())

    errors = _race(
        2.0, write_att, lambda i: os.truncate(att, 0), write_l2, lambda i: os.truncate(l2, 0)
    )
    assert errors == []
    # a write lands at offset 0 over an empty or equal-length file: one of the writes,
    # or empty after the last truncate
    assert att.read_bytes() in att_values
    assert l2.read_text() in l2_values
    final_att, final_l2 = att.read_bytes(), l2.read_text()
    box.remount()
    assert att.read_bytes() == final_att
    assert l2.read_text() == final_l2
    meta = (box.node / "meta.yaml").read_text()
    version = int(re.search(r"^version: (\d+)$", meta, re.M).group(1))
    assert version == len(os.listdir(box.node / ".history"))


def test_rm_r_while_another_process_writes(box: Box) -> None:
    victim = box.prefs / "victim"
    victim.mkdir()
    (victim / "L2.md").write_text("# Victim\n\nfirst text\n")
    committed: list[str] = []
    script = (
        "import os, sys, time\n"
        "d = sys.argv[1]\n"
        "for i in range(100000):\n"
        "    t = f'# Victim\\n\\nwrite {i}\\n'\n"
        "    try:\n"
        "        fd = os.open(os.path.join(d, 'L2.md'), os.O_WRONLY | os.O_TRUNC)\n"
        "        os.write(fd, t.encode()); os.close(fd)\n"
        "        print(t.split()[-1], flush=True)\n"
        "        fd = os.open(os.path.join(d, f'a{i % 3}.txt'), os.O_WRONLY | os.O_CREAT, 0o644)\n"
        "        os.write(fd, b'x'); os.close(fd)\n"
        "    except OSError as e:\n"
        "        print('ERR', e.errno, flush=True)\n"
        "        if e.errno not in (2, 13):\n"
        "            sys.exit(3)\n"
        "        break\n"
    )
    w = subprocess.Popen(
        [sys.executable, "-c", script, str(victim)], stdout=subprocess.PIPE, text=True
    )
    time.sleep(0.3)
    rm = subprocess.run(["rm", "-rf", str(victim)], capture_output=True, text=True)
    out, _ = w.communicate(timeout=60)
    assert w.returncode in (0, None) or w.returncode == 0, out
    committed = [x for x in out.splitlines() if x.isdigit()]
    assert committed, out
    last = f"# Victim\n\nwrite {committed[-1]}\n"
    trash = box.u / ".trash/preferences/victim"
    if rm.returncode == 0:
        # rm -r won: the node is in the trash with the writer's last committed L2
        assert not victim.exists()
        assert (trash / "L2.md").read_text() == last
    else:
        # the writer created a file after rm emptied the dir: rmdir failed, node is live.
        # rm unlinked L2.md before that, which hides the name until the next mount
        # (stored text unchanged); a name rm had not reached yet shows the last write
        assert "Directory not empty" in rm.stderr, rm.stderr
        assert victim.is_dir()
        if "L2.md" in os.listdir(victim):
            assert (victim / "L2.md").read_text() == last
    box.remount()
    where = trash if rm.returncode == 0 else victim
    assert (where / "L2.md").read_text() == last


def test_unmount_while_busy(box: Box) -> None:
    f = box.node / "open.txt"
    fd = os.open(f, os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"written while the unmount was refused\n")
    r = subprocess.run(["fusermount3", "-u", str(box.mnt)], capture_output=True, text=True)
    assert r.returncode != 0 and "busy" in r.stderr.lower(), r.stderr
    r = subprocess.run(
        [sys.executable, "-m", "contextfs", "umount", str(box.mnt)], capture_output=True, text=True
    )
    assert r.returncode == 1 and "busy" in r.stderr.lower(), r.stderr
    assert os.path.exists(box.mnt / ".status"), "the mount is still serving"
    os.close(fd)
    proc = box.m.proc
    threading.Thread(target=proc.stdout.read, daemon=True).start()  # never block its log
    r = subprocess.run(
        [sys.executable, "-m", "contextfs", "umount", str(box.mnt)], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    assert proc.wait(timeout=30) == 0
    box.m.proc = None
    assert not os.path.ismount(box.mnt)
    box.m.start()
    assert f.read_bytes() == b"written while the unmount was refused\n"
