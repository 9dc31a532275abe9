"""Differential POSIX testing: random operation sequences on a node's attachments in a real
mount and on a native directory must give identical results (issue 3, deliverable 1).

A bounded run for CI; `scripts/campaign_differential.py` runs the same machine for long.
The operations, the comparison and what is left out (and why) are in
contextfs/testing/differential.py; shrunk failures are replayed as plain functions in
test_differential_regressions.py.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from contextfs.testing.differential import machine_for

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
