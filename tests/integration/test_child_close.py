"""A process that forks closes, in the child, its copy of every descriptor it holds: at
the child's exit, or at exec for those opened close-on-exec (as Python opens every file).
Each of those closes reaches the mount as a FLUSH, and a FLUSH is where written bytes are
committed, while the writer may be halfway through its file. On a real mount: a close by
a process that neither opened the file nor wrote through it commits nothing; a child that
writes through an inherited descriptor commits what it wrote at its close, as before."""

from __future__ import annotations

import os
import subprocess

from contextfs.testing.mount import Mount


def test_a_writer_that_runs_a_program_halfway_saves_one_version(mount: Mount):
    node = mount.path / "user/default/preferences/kettle"
    node.mkdir()
    with open(node / "L2.md", "w") as f:
        f.write("Kettle descaled in March.\n")
        f.flush()
        subprocess.run(["true"], check=True)  # the child closes its copy of f: a FLUSH
        f.write("Citric acid, two spoons.\n")
    assert (node / "L2.md").read_text() == "Kettle descaled in March.\nCitric acid, two spoons.\n"
    # one save, one version: not the first half as a version of its own
    assert os.listdir(node / ".history") == ["v1.md"]


def test_a_drop_into_an_append_type_is_routed_once_when_its_writer_forks(mount: Mount):
    events = mount.path / "user/default/events"
    with open(events / "lisbon.md", "w") as f:
        f.write("Flew to Lisbon.\n")
        f.flush()
        subprocess.run(["true"], check=True)
        f.write("Stayed at the Tivoli.\n")
    [event] = os.listdir(events)  # one event, named by the day it was dropped
    l2 = (events / event / "L2.md").read_text()
    # routed once, whole: the first line is not appended a second time
    assert l2.count("Flew to Lisbon.") == 1, l2
    assert l2.endswith("Flew to Lisbon.\nStayed at the Tivoli.\n"), l2
    assert os.listdir(events / event / ".history") == ["v1.md"]


def test_a_child_writing_through_an_inherited_descriptor_saves_at_its_exit(mount: Mount):
    node = mount.path / "user/default/preferences/teapot"
    node.mkdir()
    with open(node / "L2.md", "w") as f:
        # what `subprocess.run(cmd, stdout=f)` does: the child writes, the parent waits
        subprocess.run(["echo", "Teapot warmed first."], stdout=f, check=True)
        # the child's close at its exit committed what it wrote: another reader sees it
        # while the parent still holds the file open
        assert (node / "L2.md").read_text() == "Teapot warmed first.\n"
    assert (node / "L2.md").read_text() == "Teapot warmed first.\n"
    assert os.listdir(node / ".history") == ["v1.md"]
