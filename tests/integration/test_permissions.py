"""Two real local users on one mount under `allow_other`: owners, groups and modes are
stored and honoured (a node's mode covers its tiers and its history, across a remount),
and `.query` and `.status` answer each caller only with what they may read."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from contextfs.testing import Mount

ALICE, BOB = "cfs_alice", "cfs_bob"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to add users")


def _user(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "-M", "-s", "/usr/sbin/nologin", name], check=True)
        return pwd.getpwnam(name)


def as_user(user: str, script: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["runuser", "-u", user, "--", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def shared() -> Iterator[Mount]:
    """A mount other users can reach (pytest's tmp dirs are 0700), search on, allow_other."""
    _user(ALICE), _user(BOB)
    top = Path(tempfile.mkdtemp(prefix="cfs-perm-"))
    top.chmod(0o755)
    (top / "mnt").mkdir(mode=0o755)
    (top / "mnt").chmod(0o755)
    m = Mount(top / "mnt", top / "data", search=True)
    m.start("-o", "allow_other")
    try:
        yield m
    finally:
        if m.proc is not None and m.proc.poll() is None:
            m.stop()
        shutil.rmtree(top, ignore_errors=True)


def test_two_users_see_only_what_their_modes_allow(shared: Mount) -> None:
    mnt = shared.path
    alice = mnt / "user" / "alice"
    diary = alice / "preferences" / "diary"
    alice.mkdir()
    shutil.chown(alice, ALICE, ALICE)
    alice.chmod(0o700)

    # alice owns her owner directory: she can do everything there
    done = as_user(
        ALICE,
        f"mkdir {diary} && echo 'Dear diary: I am afraid of the dentist.' > {diary}/L2.md"
        f" && chmod 600 {diary}/L2.md"
        f" && echo 'Alice loves green tea.' > {alice}/.inbox/notes.md"
        f" && mkdir {alice}/.sessions/s1 && rmdir {alice}/.sessions/s1"
        f" && mkdir {alice}/preferences/Bad_Name",
    )
    assert "Bad_Name" in done.stderr and "Invalid argument" in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr  # only the refused name failed
    st = (diary / "L2.md").stat()
    assert (st.st_uid, oct(st.st_mode & 0o777)) == (pwd.getpwnam(ALICE).pw_uid, "0o600")
    # one mode for the node: every tier and the history follow L2
    for f in ("L0.md", "L1.md", "meta.yaml", ".history/v1.md"):
        assert (diary / f).stat().st_mode & 0o077 == 0, f

    # bob: nothing of alice's, through files or through search
    peek = as_user(BOB, f"cat {diary}/L2.md; ls {alice}")
    assert peek.stdout == "" and peek.stderr.count("Permission denied") == 2, peek.stderr
    q = mnt / ".query" / "dentist"
    bob_ls = as_user(BOB, f"ls {q}; cat {q}/_context.md {q}/_results.json")
    assert bob_ls.returncode == 0, bob_ls.stderr
    assert "diary" not in bob_ls.stdout and "dentist." not in bob_ls.stdout, bob_ls.stdout
    assert "afraid" not in bob_ls.stdout
    bob_status = as_user(BOB, f"cat {mnt}/.status").stdout
    assert "Bad_Name" not in bob_status and "1 more in owner directories" in bob_status
    # bob cannot make himself an owner directory either (user/ is root's)
    assert "Permission denied" in as_user(BOB, f"mkdir {mnt}/user/bob").stderr

    # alice and root see it all
    alice_ls = as_user(ALICE, f"ls {q}; cat {q}/_context.md; cat {mnt}/.status")
    assert "01_diary" in alice_ls.stdout and "afraid of the dentist" in alice_ls.stdout
    assert "Bad_Name" in alice_ls.stdout
    assert "01_diary" in os.listdir(q)

    # everything holds after a remount
    shared.remount("-o", "allow_other")
    st = (diary / "L2.md").stat()
    assert (st.st_uid, oct(st.st_mode & 0o777)) == (pwd.getpwnam(ALICE).pw_uid, "0o600")
    assert alice.stat().st_mode & 0o777 == 0o700
    assert "Permission denied" in as_user(BOB, f"cat {diary}/L2.md").stderr
    again = as_user(BOB, f"cat {mnt}/.query/afraid/_context.md").stdout
    assert "dentist" not in again

    # opened up by alice, bob may read it, and so may his search
    opened = as_user(ALICE, f"chmod 755 {alice} && chmod 644 {diary}/L2.md")
    assert opened.returncode == 0, opened.stderr
    read = f"cat {diary}/L2.md; cat {mnt}/.query/dentist%20diary/_context.md"
    got = as_user(BOB, read)
    for _ in range(60):  # after the remount the indexes may still be opening: as a user
        if "ask again shortly" not in got.stdout:  # told so would, bob asks again
            break
        time.sleep(0.5)
        got = as_user(BOB, read)
    assert got.stdout.count("afraid of the dentist") == 2, got.stdout


def test_chown_r_and_chmod_r_of_an_owner_directory_give_it_away(shared: Mount) -> None:
    """`chown -R` changes children before their directory (GNU chown works bottom-up):
    the type folders keep what they are given, and the new owner can do everything."""
    mnt = shared.path
    bob = mnt / "user" / "bob"
    (bob / "preferences" / "tea").mkdir(parents=True)
    (bob / "preferences" / "tea" / "L2.md").write_text("Green tea.\n")
    (bob / "preferences" / "tea" / "notes").mkdir()
    (bob / "preferences" / "tea" / "notes" / "a.txt").write_text("n\n")
    done = subprocess.run(["chown", "-R", f"{BOB}:{BOB}", str(bob)], capture_output=True)
    assert done.returncode == 0, done.stderr
    done = subprocess.run(["chmod", "-R", "go-rwx", str(bob)], capture_output=True)
    assert done.returncode == 0, done.stderr
    uid = pwd.getpwnam(BOB).pw_uid
    for p in (bob, bob / "preferences", bob / ".inbox", bob / "preferences/tea/L2.md"):
        st = p.stat()
        assert st.st_uid == uid and st.st_mode & 0o077 == 0, (p, oct(st.st_mode))
    work = as_user(
        BOB,
        f"mkdir {bob}/entities/kim && echo 'Kim is a friend.' > {bob}/entities/kim/L2.md"
        f" && echo 'Bob likes jazz.' > {bob}/.inbox/notes.md"
        f" && echo 'oolong' >> {bob}/preferences/tea/L2.md && ls {bob}/entities",
    )
    assert work.returncode == 0 and "kim" in work.stdout, work.stderr
    assert "Permission denied" in as_user(ALICE, f"ls {bob}/preferences").stderr
    shared.remount("-o", "allow_other")
    assert (bob / "preferences").stat().st_uid == uid
    assert (bob / "preferences").stat().st_mode & 0o077 == 0


def test_an_owner_who_is_not_root_removes_a_node_and_keeps_sessions_and_modes_private(
    shared: Mount,
) -> None:
    """`rm -r` of her own node by a user who is not root (the kernel checks `.history`'s
    mode before the daemon sees the unlink of a version: it was r-x, and the node was left
    half-removed); a session's context.md, built from her private nodes too, is hers
    only; a chmod of L2.md reaches L0/L1 at once, though the kernel had their modes."""
    mnt = shared.path
    alice = mnt / "user" / "alice"
    alice.mkdir()
    shutil.chown(alice, ALICE, ALICE)
    alice.chmod(0o755)
    prefs = alice / "preferences"
    done = as_user(
        ALICE,
        f"mkdir {prefs}/k && echo 'A note to drop.' > {prefs}/k/L2.md && ls -la {prefs}/k/.history"
        f" && rm -r {prefs}/k && ls {alice}/.trash/preferences",
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("k"), done.stdout + done.stderr
    assert not (prefs / "k").exists()
    secret = as_user(
        ALICE,
        f"mkdir {prefs}/z && echo 'Alice lives at 12 Secret Lane.' > {prefs}/z/L2.md"
        f" && chmod 600 {prefs}/z/L2.md && mkdir {alice}/.sessions/s2"
        f' && echo \'{{"role":"user","content":"where do I live"}}\''
        f" >> {alice}/.sessions/s2/transcript.jsonl",
    )
    assert secret.returncode == 0, secret.stderr
    peek = as_user(BOB, f"cat {alice}/.sessions/s2/context.md")
    assert "Secret Lane" not in peek.stdout and "Permission denied" in peek.stderr, peek
    assert "Secret Lane" in as_user(ALICE, f"cat {alice}/.sessions/s2/context.md").stdout
    # open, read by bob (the kernel keeps L0/L1's modes), then closed by a chmod of L2.md
    os.chmod(prefs / "z" / "L2.md", 0o644)
    assert "Secret Lane" in as_user(BOB, f"cat {prefs}/z/L0.md {prefs}/z/L1.md").stdout
    assert as_user(ALICE, f"chmod 600 {prefs}/z/L2.md").returncode == 0
    peek = as_user(BOB, f"cat {prefs}/z/L0.md {prefs}/z/L1.md {prefs}/z/.history/v1.md")
    assert "Secret Lane" not in peek.stdout and peek.stderr.count("Permission denied") == 3


def test_a_refused_question_is_shown_to_its_asker_only(shared: Mount) -> None:
    """A question is its asker's words: refused (a bad option, bytes that are not text),
    its line in `.status` and `.status.json` is the asker's, not every user's."""
    _user(ALICE), _user(BOB)
    mnt = shared.path
    asked = as_user(ALICE, f"ls '{mnt}/.query/@k=0/my divorce lawyer appointment'")
    assert "Invalid argument" in asked.stderr, asked.stderr
    asked = as_user(ALICE, f"ls '{mnt}/.query/@colour=red/pregnancy test results'")
    assert "Invalid argument" in asked.stderr, asked.stderr
    for f in (".status", ".status.json"):
        alice = as_user(ALICE, f"cat {mnt}/{f}").stdout
        assert "query option k must be between" in alice and "colour" in alice, alice
        bob = as_user(BOB, f"cat {mnt}/{f}").stdout
        assert bob and "colour" not in bob and "@k=0" not in bob, bob
    bob_asks = as_user(BOB, f"ls '{mnt}/.query/@budget=1/anything'")
    assert "Invalid argument" in bob_asks.stderr
    why = "query option budget must be between"
    assert why in as_user(BOB, f"cat {mnt}/.status").stdout
    assert why not in as_user(ALICE, f"cat {mnt}/.status").stdout
    assert "colour" in (mnt / ".status").read_text()  # root sees every refusal


def test_a_fifo_and_a_socket_belong_to_whoever_made_them(shared: Mount) -> None:
    """mkfifo and a socket's bind() in a node another user may write into: the new entry
    is its creator's (uid and gid), as a file or folder made there is, across a remount."""
    _user(ALICE), _user(BOB)
    node = shared.path / "user" / "default" / "entities" / "shared-notes"
    node.mkdir(parents=True)
    (node / "L2.md").write_text("A node everyone may write into.\n")
    node.chmod(0o777)
    alice = pwd.getpwnam(ALICE)
    sock = node / "alice.sock"
    made = as_user(
        ALICE,
        f"mkfifo -m 640 {node}/alice.fifo && touch {node}/alice.txt && "
        f"python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"{sock}\")'",
    )
    assert made.returncode == 0, made.stderr
    for name in ("alice.fifo", "alice.sock", "alice.txt"):
        st = (node / name).lstat()
        assert (st.st_uid, st.st_gid) == (alice.pw_uid, alice.pw_gid), name
    assert oct((node / "alice.fifo").lstat().st_mode & 0o777) == "0o640"
    shared.remount("-o", "allow_other")
    st = (node / "alice.fifo").lstat()
    assert (st.st_uid, st.st_gid) == (alice.pw_uid, alice.pw_gid)
    assert (node / "alice.sock").lstat().st_uid == alice.pw_uid


def test_a_setgid_folder_gives_its_group_to_everything_made_in_it(shared: Mount) -> None:
    """As on a native disk: a file, a folder, a FIFO and a symbolic link made in a folder
    with the set-group-ID bit take the folder's group, whoever makes them."""
    node = shared.path / "user/default/preferences/team"
    node.mkdir()
    (node / "L2.md").write_text("The team's shared files.\n")
    shared_dir = node / "shared"
    shared_dir.mkdir()
    gid = pwd.getpwnam(ALICE).pw_gid
    os.chown(shared_dir, -1, gid)
    shared_dir.chmod(0o2775)
    (shared_dir / "file.txt").write_text("x\n")
    (shared_dir / "sub").mkdir()
    os.mkfifo(shared_dir / "pipe")
    os.symlink("file.txt", shared_dir / "link")
    made = ("file.txt", "sub", "pipe", "link")
    groups = {n: os.lstat(shared_dir / n).st_gid for n in made}
    assert groups == dict.fromkeys(made, gid)
    assert os.lstat(shared_dir / "sub").st_mode & 0o2000  # a folder takes the bit too
    shared.stop()
    shared.start("-o", "allow_other")
    assert {n: os.lstat(shared_dir / n).st_gid for n in made} == groups  # stored


def test_only_the_mounts_user_may_restore_facts(shared: Mount) -> None:
    """`.restore` sets what no file call can (a node's id, times, importance, reads): a
    user who is not the mount's own (nor root) cannot write it, and makes nothing."""
    mnt = shared.path
    alice = mnt / "user" / "alice"
    alice.mkdir()
    shutil.chown(alice, ALICE, ALICE)
    doc = '{"node": "user/alice/preferences/tea", "versions": ["Tea."], "facts": {"importance": 1}}'
    done = as_user(ALICE, f"printf '%s' '{doc}' > {mnt}/.restore")
    assert done.returncode != 0 and "Permission denied" in done.stderr
    assert os.listdir(alice / "preferences") == []
    (mnt / ".restore").write_text(doc)  # the mount's own user (root here) may
    assert os.listdir(alice / "preferences") == ["tea"]


def test_a_question_asked_again_after_a_chmod_answers_with_the_new_modes(shared: Mount) -> None:
    """bob asks a question whose answer holds alice's note, alice closes the note
    (chmod 600), bob asks the same question again: the answer computed before the chmod
    is not served again, on one mount whose indexes the chmod does not change."""
    mnt = shared.path
    alice = mnt / "user" / "alice"
    alice.mkdir()
    shutil.chown(alice, ALICE, ALICE)
    note = alice / "preferences" / "garden"
    made = as_user(ALICE, f"mkdir -p {note} && echo 'Tomatoes on the balcony.' > {note}/L2.md")
    assert made.returncode == 0, made.stderr
    ask = f"cat '{mnt}/.query/tomatoes balcony/_context.md'"
    for _ in range(60):  # BM25 finds it once the close is indexed
        if "Tomatoes on the balcony." in as_user(BOB, ask).stdout:
            break
        time.sleep(0.5)
    assert "Tomatoes on the balcony." in as_user(BOB, ask).stdout
    assert as_user(ALICE, f"chmod 600 {note}/L2.md").returncode == 0
    assert "Permission denied" in as_user(BOB, f"cat {note}/L2.md").stderr
    assert "Tomatoes on the balcony." not in as_user(BOB, ask).stdout
    # and opened again, he finds it again
    assert as_user(ALICE, f"chmod 644 {note}/L2.md").returncode == 0
    assert "Tomatoes on the balcony." in as_user(BOB, ask).stdout


def test_what_a_user_makes_takes_their_umask(shared: Mount) -> None:
    """A node made by `mkdir` or by a file dropped into a type directory is its maker's,
    with the modes their umask gives (docs/reference.md, "Privacy"): under umask 077
    another user reads none of it, across a remount."""
    mnt = shared.path
    bob = mnt / "user" / "bob"
    bob.mkdir()
    shutil.chown(bob, BOB, BOB)
    made = as_user(
        BOB,
        f"umask 077 && mkdir {bob}/entities/kim"
        f" && echo 'Kim hides keys.' > {bob}/entities/kim/L2.md"
        f" && echo 'Bob drinks oolong.' > {bob}/preferences/tea.md"
        f" && echo 'Bob drinks chai.' > {bob}/preferences/.chai.md.tmp"
        f" && mv {bob}/preferences/.chai.md.tmp {bob}/preferences/chai.md",
    )
    assert made.returncode == 0, made.stderr
    uid = pwd.getpwnam(BOB).pw_uid
    for _ in range(2):
        for node in (bob / "entities/kim", bob / "preferences/tea", bob / "preferences/chai"):
            for p, want in ((node, 0o700), (node / "L2.md", 0o600), (node / "L0.md", 0o600)):
                st = p.stat()
                assert (st.st_uid, oct(st.st_mode & 0o777)) == (uid, oct(want)), p
        peek = as_user(ALICE, f"cat {bob}/entities/kim/L0.md {bob}/preferences/tea/L2.md")
        assert "Permission denied" in peek.stderr and "oolong" not in peek.stdout
        shared.remount("-o", "allow_other")
    made = as_user(
        BOB, f"umask 022 && mkdir -m 750 {bob}/entities/ann && touch {bob}/entities/ann/L2.md"
    )
    assert made.returncode == 0, made.stderr
    assert oct((bob / "entities/ann").stat().st_mode & 0o777) == oct(0o750)
