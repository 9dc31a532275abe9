"""Filesystem findings through a real mount, with ordinary shell tools: extended attributes
refused with a reason, a file held open across `rm -r` of its node, the key of a renamed or
re-typed node, `.restore` of a document that restores nothing, trash names across remounts."""

from __future__ import annotations

import os
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


def test_sed_i_and_cp_a_leave_no_refusal_for_the_acl_they_copy(mount, tmp_path):
    """`sed -i` and `cp -a` copy a file's ACL and go on when it is not supported: that is
    answered quietly, with no line in `.status` (2,000 files copied left 2,181 lines that
    hid the refusals worth reading); the bytes are what they wrote."""
    node = mount.path / TYPE_DIR / "tea"
    node.mkdir()
    (node / "L2.md").write_text("I like green tea.\n")
    src = tmp_path / "tree"
    src.mkdir()
    for i in range(3):
        (src / f"f{i}.txt").write_text(f"file {i}\n")
    r = _sh(f"sed -i s/green/black/ tea/L2.md && cp -a {src} tea/tree", mount.path / TYPE_DIR)
    assert r.returncode == 0, r.stderr
    assert (node / "L2.md").read_text() == "I like black tea.\n"
    assert (node / "tree/f2.txt").read_text() == "file 2\n"
    status = mount.status()
    assert "posix_acl" not in status and "extended attribute" not in status, status


def test_a_file_held_open_across_rm_r_of_its_node_keeps_its_bytes_in_the_trash(mount):
    """A writer holds an attachment open (written, not closed) while `rm -r` removes the
    node: the trash shows what was written before the rm (it showed an empty file), what
    the writer adds before its close follows, and a remount and the restore keep it all."""
    prefs = mount.path / TYPE_DIR
    node = prefs / "tea"
    node.mkdir()
    (node / "L2.md").write_text("I like green tea.\n")
    trashed = mount.path / "user/default/.trash/preferences/tea"
    with open(node / "log.txt", "ab", buffering=0) as f:
        f.write(b"before the rm\n" * 5000)
        r = subprocess.run(["rm", "-r", str(node)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert not node.exists()
        r = subprocess.run(["wc", "-c", str(trashed / "log.txt")], capture_output=True, text=True)
        assert r.stdout.split()[0] == str(14 * 5000), r.stdout + r.stderr
        f.write(b"after the rm\n")
    want = b"before the rm\n" * 5000 + b"after the rm\n"
    assert (trashed / "log.txt").read_bytes() == want
    mount.remount()
    assert (trashed / "log.txt").read_bytes() == want
    r = _sh("mv .trash/preferences/tea preferences/tea", mount.path / "user/default")
    assert r.returncode == 0, r.stderr
    assert (node / "log.txt").read_bytes() == want


def test_a_file_written_and_closed_after_rm_r_unseen_reaches_the_trash(mount):
    """The same when the trash is not looked at before the writer's close: the bytes
    written before and after `rm -r` are what the trash shows and the restore brings back."""
    node = mount.path / TYPE_DIR / "tea"
    node.mkdir()
    (node / "L2.md").write_text("I like green tea.\n")
    with open(node / "log.txt", "ab", buffering=0) as f:
        f.write(b"one\n")
        assert subprocess.run(["rm", "-r", str(node)]).returncode == 0
        f.write(b"two\n")
    trashed = mount.path / "user/default/.trash/preferences/tea"
    r = _sh("cat .trash/preferences/tea/log.txt", mount.path / "user/default")
    assert r.stdout == "one\ntwo\n", r.stdout + r.stderr
    assert (trashed / "L2.md").read_text() == "I like green tea.\n"


def test_a_name_removed_from_a_live_node_while_open_stores_nothing_more(mount):
    """`rm` of one file of a live node while a writer holds it: the writer keeps writing
    to its open file (POSIX), nothing of it shows under the name, a new file of that name
    is a new file."""
    node = mount.path / TYPE_DIR / "tea"
    node.mkdir()
    (node / "L2.md").write_text("I like green tea.\n")
    with open(node / "log.txt", "ab+", buffering=0) as f:
        f.write(b"one\n")
        (node / "log.txt").unlink()
        f.write(b"two\n")
        f.seek(0)
        assert f.read() == b"one\ntwo\n"
        assert os.fstat(f.fileno()).st_nlink == 0
    assert not (node / "log.txt").exists()
    (node / "log.txt").write_text("new\n")
    mount.remount()
    assert (node / "log.txt").read_text() == "new\n"


def test_mv_of_a_node_makes_the_key_in_its_front_matter_follow_the_new_name(mount):
    """A routed node's L2 holds its key (`topic: espresso`): after `mv` to a new name the
    front matter says the new one (it kept the old), and a re-type to entities (refused:
    "unknown field 'topic'") takes the entity's key instead; each a new version."""
    owner = mount.path / "user/default"
    (owner / "preferences/espresso.md").write_text("I like dark roast.\n")
    assert (owner / "preferences/espresso/L2.md").read_text().startswith("---\ntopic: espresso\n")
    r = _sh("mv preferences/espresso preferences/coffee", owner)
    assert r.returncode == 0, r.stderr
    assert _sh("cat preferences/coffee/L2.md", owner).stdout == (
        "---\ntopic: coffee\n---\nI like dark roast.\n"
    )
    meta = (owner / "preferences/coffee/meta.yaml").read_text()
    assert 'path: "user/default/preferences/coffee"' in meta and "version: 2" in meta
    assert "topic: espresso" in (owner / "preferences/coffee/.history/v1.md").read_text()
    r = _sh("mv preferences/coffee entities/coffee", owner)
    assert r.returncode == 0, r.stderr + mount.status()
    text = _sh("cat entities/coffee/L2.md", owner).stdout
    assert text == "---\nname: coffee\n---\nI like dark roast.\n", text
    meta = (owner / "entities/coffee/meta.yaml").read_text()
    assert "type: entity" in meta and "version: 3" in meta
    # a key that names the node as it is stays as written; one that does not follows,
    # spelled as the key it replaces wrote its words (docs/reference.md)
    (owner / "entities/ana.md").write_text("---\nname: Ana Lima\n---\nA colleague.\n")
    assert _sh("mv entities/ana-lima entities/ana-maria", owner).returncode == 0
    assert (owner / "entities/ana-maria/L2.md").read_text().startswith("---\nname: Ana Maria\n")
    assert _sh("mv entities/ana-maria entities/ana-lima-souza", owner).returncode == 0
    text = (owner / "entities/ana-lima-souza/L2.md").read_text()
    assert text.startswith("---\nname: Ana Lima Souza\n"), text
    (owner / "preferences/green.md").write_text("---\ntopic: Green Tea\n---\nNo sugar.\n")
    assert _sh("mv preferences/green-tea entities/green-tea", owner).returncode == 0
    text = (owner / "entities/green-tea/L2.md").read_text()
    assert text == "---\nname: Green Tea\n---\nNo sugar.\n", text
    ev = owner / "events/2024-05-01-trip-to-lyon"
    ev.mkdir()
    (ev / "L2.md").write_text("---\ndate: 2024-05-01\ntitle: Trip to Lyon\n---\nRain.\n")
    r = _sh("mv events/2024-05-01-trip-to-lyon events/2024-05-02-trip-to-paris", owner)
    assert r.returncode == 0, r.stderr + mount.status()
    text = (owner / "events/2024-05-02-trip-to-paris/L2.md").read_text()
    assert "2024-05-02" in text and "title: Trip to Paris\n" in text, text
    mount.remount()
    assert (owner / "entities/coffee/L2.md").read_text().startswith("---\nname: coffee\n---")
    assert not (owner / "preferences/coffee").exists()


def test_mv_of_a_node_whose_key_names_it_already_makes_no_version(mount):
    """Text without front matter, or whose key names the node as moved, is kept as it is."""
    owner = mount.path / "user/default"
    (owner / "entities/bob.md").write_text("---\nname: Bob Smith\nkind: person\n---\nBob.\n")
    (owner / "preferences/tea").mkdir()
    (owner / "preferences/tea/L2.md").write_text("Green, no sugar.\n")
    assert _sh("mv preferences/tea preferences/green-tea", owner).returncode == 0
    assert (owner / "preferences/green-tea/L2.md").read_text() == "Green, no sugar.\n"
    assert "version: 1" in (owner / "preferences/green-tea/meta.yaml").read_text()
    assert _sh("rm -r entities/bob-smith", owner).returncode == 0
    assert _sh("mv .trash/entities/bob-smith entities/bob-smith", owner).returncode == 0
    text = (owner / "entities/bob-smith/L2.md").read_text()
    assert text == "---\nname: Bob Smith\nkind: person\n---\nBob.\n"
    assert "version: 1" in (owner / "entities/bob-smith/meta.yaml").read_text()


def test_trash_names_stay_the_same_across_a_remount(mount):
    """Three nodes named `dup` deleted in turn show as dup, dup.<id>, dup.<id>; after the
    first is restored and the mount remounted, the other two keep the names `ls .trash`
    showed (one became `dup`), so a script can `mv .trash/...` what it listed. A node
    deleted before another of lower id keeps its place too."""
    owner = mount.path / "user/default"
    trash = owner / ".trash/preferences"
    for i in (1, 2, 3):
        assert (
            _sh(
                f"mkdir preferences/dup && echo 'dup {i}' > preferences/dup/L2.md", owner
            ).returncode
            == 0
        )
        assert _sh("rm -r preferences/dup", owner).returncode == 0
    # deleted later than a node of a higher id, under the same name: x.<id of a>
    assert _sh("mkdir preferences/a && echo A > preferences/a/L2.md", owner).returncode == 0
    assert _sh("mkdir preferences/x && echo X > preferences/x/L2.md", owner).returncode == 0
    assert _sh("rm -r preferences/x && mv preferences/a preferences/x", owner).returncode == 0
    assert _sh("rm -r preferences/x", owner).returncode == 0

    def listing() -> dict[str, str]:
        names = _sh("ls .trash/preferences", owner).stdout.split()
        return {name: (trash / name / "L2.md").read_text() for name in names}

    before = listing()
    assert before["dup"] == "dup 1\n" and before["x"] == "X\n", before
    assert len(before) == 5 and sorted(v for k, v in before.items() if k.startswith("x.")) == [
        "A\n"
    ]
    assert _sh("mv .trash/preferences/dup preferences/dup", owner).returncode == 0
    shown = listing()
    assert shown == {k: v for k, v in before.items() if k != "dup"}
    mount.remount()
    assert listing() == shown
    later = next(k for k, v in shown.items() if v == "dup 3\n")
    assert f'path: "user/default/preferences/{later}"' in (trash / later / "meta.yaml").read_text()
    r = _sh(f"mv .trash/preferences/{later} preferences/dup-three", owner)
    assert r.returncode == 0, r.stderr
    assert (owner / "preferences/dup-three/L2.md").read_text() == "dup 3\n"
    assert (owner / "preferences/dup/L2.md").read_text() == "dup 1\n"
    # the name is free again: the next node deleted as `dup` shows as `dup`
    assert _sh("rm -r preferences/dup", owner).returncode == 0
    assert (trash / "dup/L2.md").read_text() == "dup 1\n"
    mount.remount()
    assert (trash / "dup/L2.md").read_text() == "dup 1\n"


def test_restore_of_a_document_with_nothing_to_restore_is_refused_with_a_reason(mount):
    """`.restore` of a document that names a node and gives no version, pin or fact made an
    empty node (and left the deleted one in the trash). It is refused with EINVAL; the
    reason names the trash entry of that name and the mv that restores it. A document with
    versions still makes the node."""
    owner = mount.path / "user/default"
    (owner / "preferences/tea").mkdir()
    (owner / "preferences/tea/L2.md").write_text("Green, no sugar.\n")
    assert _sh("rm -r preferences/tea", owner).returncode == 0
    r = _sh("""/usr/bin/printf '{"node": "user/default/preferences/tea"}' > .restore""", mount.path)
    assert r.returncode != 0 and "Invalid argument" in r.stderr, r.stderr
    assert not (owner / "preferences/tea").exists()
    status = mount.status()
    assert (
        "nothing to restore; the deleted node is user/default/.trash/preferences/tea: restore "
        "it with mv user/default/.trash/preferences/tea user/default/preferences/tea"
    ) in status, status
    doc = '{"node": "user/default/preferences/milk", "versions": []}'
    r = _sh(f"/usr/bin/printf '{doc}' > .restore", mount.path)
    assert r.returncode != 0 and not (owner / "preferences/milk").exists()
    assert "no version, pin or fact of user/default/preferences/milk" in mount.status()
    # what the line says works; a document with a version makes its node
    r = _sh("mv user/default/.trash/preferences/tea user/default/preferences/tea", mount.path)
    assert r.returncode == 0, r.stderr
    assert (owner / "preferences/tea/L2.md").read_text() == "Green, no sugar.\n"
    doc = '{"node": "user/default/preferences/milk", "versions": ["Oat milk.\\\\n"]}'
    assert _sh(f"/usr/bin/printf '{doc}' > .restore", mount.path).returncode == 0
    assert (owner / "preferences/milk/L2.md").read_text() == "Oat milk.\n"
