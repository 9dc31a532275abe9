"""Differential POSIX testing: random operation sequences on a node's attachments in a real
mount and on a native directory must give identical results (issue 3, deliverable 1).

A bounded run for CI; `scripts/campaign_differential.py` runs the same machine for long.
The operations, the comparison and what is left out (and why) are in
contextfs/testing/differential.py; shrunk failures are replayed as plain functions in
test_differential_regressions.py.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from contextfs.testing import Mount
from contextfs.testing.differential import STATS, machine_for
from contextfs.testing.mount import disk_filler, mount_tmpfs, unmount_tmpfs

CI_SETTINGS = settings(
    max_examples=25,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
    derandomize=True,
)


@pytest.mark.timeout(600)  # a failure is shrunk, which takes longer than a pass
def test_attachments_behave_like_a_native_directory(mount, tmp_path):
    machine = machine_for(mount, tmp_path / "native")
    run_state_machine_as_test(machine, settings=CI_SETTINGS)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs (root)")
@pytest.mark.timeout(600)
def test_a_full_disk_refuses_without_showing_what_it_did_not_store(tmp_path):
    """The same machine with its data dir on a small tmpfs and the disk-full step
    (`Differ.disk_full`): refused operations fail with ENOSPC and change nothing, what
    the mount showed is what a remount shows."""
    disk = mount_tmpfs(tmp_path / "disk", "256m")
    (tmp_path / "mnt").mkdir()
    m = Mount(tmp_path / "mnt", disk / "data")
    try:
        m.start()

        machine = machine_for(m, tmp_path / "native", max_remounts=0, fill=disk_filler(disk))
        before = sum(n for (op, _), n in STATS.outcomes.items() if op.startswith("disk full"))
        run_state_machine_as_test(
            machine, settings=settings(CI_SETTINGS, max_examples=12, stateful_step_count=15)
        )
        refused = STATS.outcomes[("disk full: write_file", "ENOSPC")]
        ran = sum(n for (op, _), n in STATS.outcomes.items() if op.startswith("disk full"))
        assert ran > before and refused > 0, STATS.outcomes
        m.stop()
        assert m.fsck() == []
    finally:
        if m.proc is not None:
            m.stop()
        unmount_tmpfs(disk)
