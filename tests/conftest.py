"""Shared fixtures: a real store in tmp_path, the tree over it, and a real mount.

The mount fixture runs the daemon in a subprocess (`--foreground`), never inside the
test's own trio loop: a kernel request from the loop that serves it would deadlock.
Every fixture ends with `fsck` of the store as an oracle.

The quick tier (`pytest -m quick`, a developer's run on every change, about 2 minutes on
2 cores; CI runs everything) is chosen here, by `is_quick`, from the node id alone:

- a test in `tests/unit`, `tests/fs`, `tests/index` or `tests/store` is quick unless
  `NOT_QUICK` names it, its function or its module (a prefix of its node id ending at `::`
  or `[`), so a new test in these layers is quick by default;
- a test in `tests/integration` (a real mount) is quick only if `QUICK_MOUNTS` names it:
  a few that mount, write a node, search and unmount, one per agent-facing room;
- never a test marked `slow`, nor one that trains the tiny CLIP model (`tiny_clip`);
- a test marked `quick` in its file is quick whatever the lists say.

`NOT_QUICK` holds what took about 0.8 s or more (setup, call and teardown) in a run of its
layer with `--durations=0` on 2 busy cores; add a test there when the quick tier nears 3
minutes. `tests/unit/test_quick_tier.py` checks that every room of `contextfs/` keeps a
quick test and that both lists name tests that exist.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from contextfs.ctxtypes import builtin_schema_dir, load_types
from contextfs.fs.build import build_tree
from contextfs.fs.tree import Tree
from contextfs.memory.service import Memory
from contextfs.store import Store
from contextfs.testing import BENIGN_LOG, Mount, fsck_store, unmount

REPO = Path(__file__).resolve().parent.parent


def run_script(name: str, *args: str, timeout: float) -> subprocess.CompletedProcess:
    """scripts/NAME ARGS as a user runs it (this interpreter, in the checkout), its
    output captured: the test asserts on its exit status, its table and its JSON."""
    return subprocess.run(
        [sys.executable, str(REPO / "scripts" / name), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )


# ---- fail a test that logs a warning it did not expect (S3QL's pytest_checklogs) ---------


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "allow_warnings: the test expects logged warnings")


@pytest.fixture(autouse=True)
def _no_unexpected_warnings(request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO)
    yield
    if request.node.get_closest_marker("allow_warnings"):
        return
    bad = [r for r in caplog.get_records("call") if r.levelno >= logging.WARNING]
    if bad:
        pytest.fail("unexpected log records: " + "; ".join(r.getMessage() for r in bad))


@pytest.fixture(autouse=True)
def _usual_umask() -> Iterator[None]:
    """Each test starts with a usual umask (022) and leaves it as it found it: an
    in-process open of a data dir (`config.make_private`) sets the process's umask to
    077, which every file a later test makes, and every shell it starts, would inherit."""
    old = os.umask(0o022)
    yield
    os.umask(old)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A failed test shows its daemons: one that died, why (exit code, output, log tail);
    one still running, every thread's stack (SIGUSR1: the daemon's faulthandler writes
    them to its output), so a hang says where it waits."""
    rep = yield
    if rep.failed:
        running = [m for m in Mount.started if m.proc is not None and m.proc.poll() is None]
        for m in running:
            with contextlib.suppress(OSError):
                m.proc.send_signal(signal.SIGUSR1)  # type: ignore[union-attr]
        if running:
            time.sleep(0.5)  # the stacks reach the output reader
        for m in list(Mount.started):
            if m.died() or m in running:
                rep.sections.append((f"daemon post-mortem: {m.path}", m.post_mortem()))
    return rep


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Take down every mount still up: a fixture whose set-up failed after it started
    its mount (a `mkdir` before its `yield`) never reaches its teardown, and its daemon
    would keep running, and its mount stay, after the run."""
    for m in list(Mount.started):
        if m.proc is not None and m.proc.poll() is None:
            with contextlib.suppress(AssertionError):  # a daemon that exits badly: still down
                m.stop()


# ---- the quick tier: `pytest -m quick` (the module docstring says how it is chosen) -------

QUICK_LAYERS = ("tests/unit/", "tests/fs/", "tests/index/", "tests/store/")

NOT_QUICK = (
    # unit: threads, subprocesses, fake endpoints, media decoding
    "tests/unit/test_types.py",  # mypy over the package: 30-60 s
    "tests/unit/test_clip.py::test_the_built_in_architectures_are_open_clips",
    "tests/unit/test_context_for_thread.py::test_context_for_in_a_thread_while_nodes_are_created",
    "tests/unit/test_entity_names.py::test_after_many_changes_the_table_answers_as_the_store_does",
    "tests/unit/test_extract.py::test_llm_extractor_keeps_valid_items_and_drops_invalid_ones",
    "tests/unit/test_extract.py::test_llm_transport_failure_raises",
    "tests/unit/test_llm_window.py::test_a_2mb_transcript_goes_in_overlapping_chunks_that_fit_the_window",
    "tests/unit/test_llm_window.py::test_a_failing_chunk_is_extracted_by_rules_and_the_notes_say_so",
    "tests/unit/test_llm_window.py::test_after_three_failures_in_a_row_the_rest_is_left_to_rules",
    "tests/unit/test_llm_window.py::test_condensed_parts_that_still_overflow_are_condensed_again",
    "tests/unit/test_offline.py::test_offline_command_imports_no_fuse",
    "tests/unit/test_services.py::test_an_import_does_not_file_the_next_conversation_while_an_fsync_is_in_flight",
    "tests/unit/test_video_gate.py::test_the_interval_sets_how_many_frames_the_gate_sees",
    # fs: big inputs, randomised comparisons, crash and cache-pressure runs
    "tests/fs/test_attachment_chunks.py::test_a_file_unlinked_while_open_keeps_what_it_held_when_removed",
    "tests/fs/test_attachment_chunks.py::test_a_secret_written_into_the_middle_of_a_big_attachment_is_redacted",
    "tests/fs/test_attachment_chunks.py::test_only_the_changed_bytes_and_a_margin_are_scanned",
    "tests/fs/test_attachment_chunks.py::test_random_operations_match_a_native_file",
    "tests/fs/test_attachment_chunks.py::test_truncating_a_closed_file_commits_at_once",
    "tests/fs/test_big_transcript.py",
    "tests/fs/test_blobs.py::test_garbage_is_reclaimed_in_batches_at_close_and_after_a_crash",
    "tests/fs/test_consolidate.py::test_a_second_run_compares_only_what_changed_since_the_first",
    "tests/fs/test_consolidate.py::test_contextfs_consolidate_command",
    "tests/fs/test_consolidate.py::test_the_plan_finds_exactly_what_comparing_every_pair_finds",
    "tests/fs/test_hard_links.py::test_soft_delete_and_restore_keep_the_links",
    "tests/fs/test_heads.py::test_a_reopened_store_reads_no_node_and_counts_by_sql",
    "tests/fs/test_heads.py::test_many_directories_used_hold_a_bounded_number_of_nodes",
    "tests/fs/test_heads.py::test_search_over_a_store_larger_than_the_cache",
    "tests/fs/test_heads.py::test_writes_to_cold_and_evicted_nodes_are_not_lost",
    "tests/fs/test_inbox_receive.py::test_a_big_item_arrives_in_steps_and_is_processed_whole",
    "tests/fs/test_inbox_receive.py::test_a_receive_cut_short_by_a_crash_is_dropped_by_the_next_mount",
    "tests/fs/test_lazy_texts.py::test_a_write_to_a_node_whose_text_was_let_go_is_kept",
    "tests/fs/test_lazy_texts.py::test_every_text_reads_back_and_only_a_few_stay_loaded",
    "tests/fs/test_lazy_texts.py::test_search_threads_read_while_the_main_thread_writes",
    "tests/fs/test_nodes.py::test_a_long_rm_r_is_restored_whole",
    "tests/fs/test_video.py::test_a_video_of_repeated_frames_drops_most_of_them",
    "tests/fs/test_video.py::test_bad_videos_are_refused_and_nothing_else_is_lost",
    "tests/fs/test_virtual_dirs.py::test_a_model_that_loads_slowly_does_not_race_the_first_rebuild",
    "tests/fs/test_virtual_dirs.py::test_a_question_naming_a_speaker_is_not_answered_by_greetings",
    "tests/fs/test_virtual_dirs.py::test_a_turn_naming_an_entity_brings_the_turns_that_introduced_it",
    # index: the real MiniLM and sentence-transformers, recall over many vectors
    "tests/index/test_compact.py::test_recall_at_10_against_exact_search_on_real_minilm_vectors",
    "tests/index/test_compact.py::test_the_indexer_moves_past_its_threshold_to_the_compact_index_and_still_finds",
    "tests/index/test_embed.py::test_local_embeddings_are_sentence_transformers_own",
    "tests/index/test_embed.py::test_openai_embedder_normalises_and_learns_dim",
    "tests/index/test_image_vectors.py::test_a_checkpoint_that_does_not_load_leaves_the_hash_gate_saying_why",
    "tests/index/test_passage_reads.py",
    # store: mounts and command lines on PostgreSQL, damaged files, buffer limits
    "tests/store/test_backends.py::test_consolidation_reweighs_and_counts_reads_in_bulk_on_either_store",
    "tests/store/test_buffer_memory.py::test_a_limited_store_reads_more_than_its_limit_and_its_buffers_stay_under_it",
    "tests/store/test_buffer_memory.py::test_a_read_past_the_limit_grows_it_and_answers",
    "tests/store/test_cluster_mounts.py",
    "tests/store/test_mount_check.py::test_a_store_without_a_checked_point_gets_the_full_check",
    "tests/store/test_mount_check.py::test_blob_bytes_are_rehashed_by_fsck_and_their_sizes_checked_at_every_mount",
    "tests/store/test_mount_check.py::test_damage_to_what_changed_after_the_point_turns_the_mount_read_only",
    "tests/store/test_mount_check.py::test_fsck_records_its_pass_and_the_mount_starts_from_it",
    "tests/store/test_mount_check.py::test_rot_before_the_checked_point_is_found_by_fsck_not_by_the_mount",
    "tests/store/test_pg_mount.py",
    "tests/store/test_pg_offline.py",
    "tests/store/test_salvage.py::test_a_damaged_newest_backup_gives_way_to_the_one_before",
    "tests/store/test_salvage.py::test_salvage_reads_around_each_damaged_block",
)

QUICK_MOUNTS = (
    # mount, write a node, remount (the tree a new user sees)
    "tests/integration/test_smoke.py::test_tree_and_remount",
    # `contextfs mount` daemonises, returns once ready, `contextfs umount` waits; CI = README
    "tests/integration/test_daemon.py::test_mount_daemonises_returns_ready_and_umount_waits",
    "tests/integration/test_daemon.py::test_readme_documents_the_two_commands",
    # write and search through each agent-facing room: client, memorytool, mcpserver
    "tests/integration/test_client.py::test_an_agent_loop_through_the_client",
    "tests/integration/test_memory_tool.py::test_each_command_is_a_node_operation_and_becomes_searchable_memory",
    "tests/integration/test_mcp_server.py::test_a_session_from_start_to_archive",
    # `contextfs export` and `import` of a data dir (vault, vault_targets)
    "tests/integration/test_vault.py::test_export_import_export_is_the_same_tree",
)


def _names(nodeid: str, prefixes: tuple[str, ...]) -> bool:
    return any(nodeid == p or nodeid.startswith((p + "::", p + "[")) for p in prefixes)


def is_quick(nodeid: str, *, slow: bool = False, fixtures: tuple[str, ...] = ()) -> bool:
    """Whether the test of this node id (relative to the repository) is in the quick tier."""
    if slow or "tiny_clip" in fixtures:
        return False
    if nodeid.startswith(QUICK_LAYERS):
        return not _names(nodeid, NOT_QUICK)
    return _names(nodeid, QUICK_MOUNTS)


# (whole suite collected, every node id, the quick ones): what test_quick_tier checks
QUICK_IDS = pytest.StashKey[tuple[bool, list[str], list[str]]]()


@pytest.hookimpl(tryfirst=True)  # before `-m quick` deselects by the mark added here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    quick = []
    for item in items:
        if item.get_closest_marker("quick") or is_quick(
            item.nodeid,
            slow=item.get_closest_marker("slow") is not None,
            fixtures=tuple(getattr(item, "fixturenames", ())),
        ):
            item.add_marker(pytest.mark.quick)
            quick.append(item.nodeid)
    here = config.invocation_params.dir
    whole = {(here / a).resolve() for a in config.args} <= {REPO, REPO / "tests"}
    whole = whole and not config.getoption("lf", False)
    config.stash[QUICK_IDS] = (whole, [item.nodeid for item in items], quick)


# ---- in-process store, memory and tree ---------------------------------------------------


@pytest.fixture
def types():
    return load_types([builtin_schema_dir()])


@pytest.fixture
def memory(tmp_path: Path, types) -> Iterator[Memory]:
    store = Store(tmp_path / "contextfs.duckdb")
    m = Memory(store, types, data_dir=tmp_path)
    m.create_owner("user", "default")
    yield m
    store.close()
    assert fsck_store(tmp_path / "contextfs.duckdb") == []


@pytest.fixture
def tree(memory: Memory) -> Tree:
    return build_tree(memory, status=lambda: "status\n")


# ---- a real mount (contextfs.testing.Mount: the daemon in a subprocess) -----------------


@pytest.fixture
def mount(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Mount]:
    """A real ContextFS mount on the embedded defaults (data dir in tmp_path)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    m = Mount(mnt, tmp_path / "data")
    m.start()
    try:
        yield m
    finally:
        if m.proc is not None:
            m.stop()
        else:
            unmount(mnt)
    log = m.log.read_text(errors="replace") if m.log.exists() else ""
    bad = [
        line
        for line in log.splitlines()
        if (" ERROR " in line or " WARNING " in line or "Traceback" in line)
        and not any(p in line for p in m.expect_log + BENIGN_LOG)
    ]
    if not request.node.get_closest_marker("allow_warnings"):
        assert not bad, "daemon logged problems:\n" + "\n".join(bad)
    assert m.fsck() == []


@pytest.fixture
def tools() -> None:
    """Skip nothing: the tools are installed by .ci/run; fail loudly if one is missing."""
    for tool in ("vim", "sed", "cp", "mv", "find", "rsync", "fusermount3"):
        assert shutil.which(tool), f"{tool} is not installed (see .ci/run)"


# ---- a CLIP model that means something (docs/media.md) ------------------------------------


@pytest.fixture(scope="session")
def tiny_clip(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(config JSON, weights) of a tiny CLIP model (media.clipnet) trained here on
    generated coloured shapes with their captions (no registry package ships CLIP
    weights); about 30 s of one core, once per run: the workers of a parallel run
    (pytest-xdist) share the first one's, under a lock in the run's temp dir."""
    from contextfs.testing.tiny_clip import train

    run_dir = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # .../pytest-N/popen-gwK: pytest-N is shared
        run_dir = run_dir.parent
    folder = run_dir / "tiny-clip"
    with open(run_dir / "tiny-clip.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second worker waits for the first's model
        made = folder / "made.json"
        if not made.exists():
            folder.mkdir(exist_ok=True)
            config, weights = train(folder)
            made.write_text(json.dumps([str(config), str(weights)]))
        config_path, weights_path = json.loads(made.read_text())
    return Path(config_path), Path(weights_path)
