"""The benchmarks' big synthetic store: N nodes built in-process, straight into DuckDB,
and a foreground daemon over it (`scripts/bench_scale.py`, `bench_fsck.py`, `bench_heads.py`
and `bench_consolidate.py` share it).

`build_store(data, n)` writes N nodes `user/uKKKK/{preferences,entities}/topic-NNNNNNN`,
`PER_OWNER` (1,000) an owner, each with an L0 (one line), an L1 (about 300 characters) and
an L2 (about 1,000 characters) of words drawn from `vocabulary` (Zipf's law by default), one
saved version and one outbox row, in one transaction of set-based INSERT ... SELECT
(building through `Memory.create_node` runs at about 1,000 nodes/s). `owner_of(i)` and
`node_rel(i)` say where node i is; `copy_to_postgres` copies the store built into a
PostgreSQL database (`bench_scale.py --store postgresql`); `Daemon` runs `contextfs mount
--foreground` over the store in a subprocess.
"""

from __future__ import annotations

import functools
import os
import random
import subprocess
import time
from pathlib import Path
from typing import Any

import xxhash

from contextfs.testing.mount import contextfs_cmd, daemon_pid, unmount
from contextfs.testing.report import Progress, proc_status

SEED = 20261201
PER_OWNER = 1000  # nodes an owner holds: 500 in each of its two type directories
TYPES = (("preference", "preferences"), ("entity", "entities"))
MOUNT_TIMEOUT = 3600.0
WORDS = tuple(
    [
        "river",
        "tea",
        "morning",
        "garden",
        "cycle",
        "database",
        "index",
        "latency",
        "meeting",
        "release",
        "coffee",
        "theme",
        "editor",
        "schedule",
        "museum",
        "weekend",
        "spanish",
        "backup",
        "server",
        "storage",
        "bread",
        "sourdough",
        "kernel",
        "bicycle",
        "chain",
        "travel",
        "budget",
        "invoice",
        "project",
        "deadline",
        "review",
        "family",
        "recipe",
        "music",
        "piano",
        "hiking",
        "mountain",
        "weather",
        "report",
        "lecture",
        "paper",
        "draft",
        "sketch",
        "camera",
        "lens",
        "battery",
    ]
)


def owner_of(i: int) -> str:
    return f"u{i // PER_OWNER:04d}"


def node_rel(i: int) -> str:
    """Where node i shows in the mount (the SQL in build_store makes the same paths)."""
    return f"user/{owner_of(i)}/{TYPES[i % 2][1]}/topic-{i:07d}"


# --------------------------------------------------------------------------------------
# Building


FILLER = 20_000  # made-up words beside WORDS in the Zipf vocabulary


@functools.cache  # made once: a caller asks for a word at a time
def vocabulary(kind: str) -> tuple[str, ...]:
    """The words texts are drawn from, most frequent first.

    `uniform`: WORDS alone, each equally likely: every question's words are in nearly every
    text, BM25's worst case (a query's cost grows with the store). `zipf` (default): WORDS
    spread among 20,000 made-up words (ranks 100 to about 11,000) and drawn with Zipf's law
    (the word of rank r about 1/r as often as the first), as words are in real text: a
    question's topic words are in a few percent of the texts, not all of them."""
    if kind == "uniform":
        return WORDS
    rng = random.Random(SEED)
    made: set[str] = set()
    while len(made) < FILLER:
        made.add("".join(rng.choice("bdfgklmnprstvz") + rng.choice("aeiou") for _ in range(3)))
    vocab = sorted(made - set(WORDS))
    rng.shuffle(vocab)
    for i, w in enumerate(WORDS):
        vocab.insert(int(100 * 1.065**i), w)
    return tuple(vocab)


def build_store(data: Path, n: int, vocab: str = "zipf") -> dict:
    """N nodes straight into DuckDB: one transaction of set-based INSERT ... SELECT."""
    from contextfs.config import load_config
    from contextfs.store import Store

    data.mkdir(parents=True, exist_ok=True)
    (data / "config.yaml").write_text("search: false\n")
    cfg = load_config(data)
    t0 = time.perf_counter()
    store = Store(cfg.db_path)
    con = store.con
    con.execute("SELECT 1").fetchall()  # finish the store's last result (a fetchone)
    con.create_function(
        "xxh64hex",
        lambda s: xxhash.xxh64_hexdigest(s.encode("utf-8")),
        ["VARCHAR"],
        "VARCHAR",
        side_effects=False,
    )
    vocab_words = vocabulary(vocab)
    words = "[" + ", ".join(f"'{w}'" for w in vocab_words) + "]"
    # the word of node i, position j, salt s: picked by a hash, uniformly or by Zipf's law
    # (u uniform in [0, 1): V ** u is 1/r-distributed over the ranks 1..V)
    if vocab == "uniform":
        pick = f"1 + (hash(i * 7919 + j * 31 + {{s}}) % {len(vocab_words)})::INT"
    else:
        pick = (
            f"least({len(vocab_words)}, floor(exp((hash(i * 7919 + j * 31 + {{s}}) % 1000003)"
            f" / 1000003.0 * ln({len(vocab_words)}))))::INT"
        )
    now = time.time()
    owners = (n + PER_OWNER - 1) // PER_OWNER

    # A sentence of k words of node i, salt s: words picked by a hash, so texts differ.
    def sent(k: int, s: int) -> str:
        return (
            f"array_to_string(list_transform(range({k}), lambda j: "
            f"{words}[{pick.format(s=s)}]), ' ')"
        )

    block = 100_000
    prog = Progress(f"build store N={n}", n)
    try:
        with store.atomic():
            con.execute(
                "INSERT INTO owners SELECT 'user', printf('u%04d', o), ? FROM range(?) t(o)",
                [now, owners],
            )
            for start in range(0, n, block):
                stop = min(n, start + block)
                con.execute(
                    f"""
                    INSERT INTO nodes
                    SELECT nextval('object_ids'), 'user', printf('u%04d', i // {PER_OWNER}),
                           CASE WHEN i % 2 = 0 THEN '{TYPES[0][0]}' ELSE '{TYPES[1][0]}' END,
                           printf('topic-%07d', i), 1, l0, l1, l2, false, false,
                           xxh64hex(l2), '[]', '[]', 0.5, 0, ?, ?, NULL, NULL,
                           strlen(l1), strlen(l2)
                    FROM (
                        SELECT i, 'Note ' || i || ': ' || {sent(8, 1)} AS l0,
                               {sent(45, 2)} || '.' AS l1,
                               {sent(45, 3)} || '. ' || {sent(45, 4)} || '. '
                                   || {sent(45, 5)} || '.' AS l2
                        FROM range({start}, {stop}) t(i)
                    )
                    """,
                    [now, now],
                )
                prog.update(stop)
            con.execute(
                "INSERT INTO versions SELECT id, 1, l2, content_hash, updated, 'write' FROM nodes"
            )
            con.execute(
                "INSERT INTO outbox SELECT row_number() OVER (ORDER BY id), id, 1, 'upsert', ? "
                "FROM nodes",
                [now],
            )
        build_s = prog.done()
        mean_l2 = con.execute("SELECT avg(strlen(l2)) FROM nodes").fetchone()[0]
    finally:
        store.close()
    return {
        "nodes": n,
        "owners": owners,
        "build_s": build_s,
        "mean_l2_chars": mean_l2,
        "db_bytes": cfg.db_path.stat().st_size,
        "wall_s": time.perf_counter() - t0,
    }


COPIED_TABLES = ("owners", "nodes", "versions", "outbox")  # what build_store fills


def copy_to_postgres(db_path: Path, dsn: str, block: int = 20_000) -> dict:
    """The store `build_store` made, copied into the empty PostgreSQL database at `dsn`
    (`COPY ... FROM STDIN`, one transaction), its sequences moved past the ids copied.
    The schema is made by opening a `PgStore` first, so the rows land in the tables a
    mount reads. The DuckDB file is left as it was."""
    import duckdb
    import psycopg

    from contextfs.store.pg import PgStore

    PgStore(dsn).close()  # the schema, as a mount makes it
    src = duckdb.connect(str(db_path), read_only=True)

    def one(sql: str) -> Any:
        row = src.execute(sql).fetchone()
        assert row is not None
        return row[0]

    t0 = time.perf_counter()
    counts: dict[str, int] = {}
    try:
        total = sum(one(f"SELECT count(*) FROM {t}") for t in COPIED_TABLES)
        prog = Progress("copy into PostgreSQL", total)
        done = 0
        with psycopg.connect(dsn) as dst:
            for table in COPIED_TABLES:
                cols = [r[0] for r in src.execute(f"DESCRIBE {table}").fetchall()]
                cur = src.execute(f"SELECT {', '.join(cols)} FROM {table}")
                counts[table] = 0
                with dst.cursor().copy(f"COPY {table} ({', '.join(cols)}) FROM STDIN") as cp:
                    while rows := cur.fetchmany(block):
                        for row in rows:
                            cp.write_row(row)
                        counts[table] += len(rows)
                        done += len(rows)
                        prog.update(done)
            top_id = one("SELECT max(id) FROM nodes") or 1000
            top_seq = one("SELECT max(seq) FROM outbox") or 0
            dst.execute("SELECT setval('object_ids', %s)", [top_id])
            if top_seq:
                dst.execute("SELECT setval('outbox_seq', %s)", [top_seq])
            dst.execute("ANALYZE")
        seconds = prog.done()
    finally:
        src.close()
    return {"copy_s": seconds, "rows": counts, "wall_s": time.perf_counter() - t0}


class Daemon:
    """`contextfs mount --foreground` in a subprocess; its output goes to a file."""

    def __init__(self, mnt: Path, data: Path) -> None:
        self.mnt, self.data = mnt, data
        self.out = (data / "daemon.out").open("ab")
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            contextfs_cmd("mount", str(mnt), "--foreground", "--data-dir", str(data)),
            stdout=self.out,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )

    def wait_ready(self, probe: Path) -> float:
        """Seconds from the start of the process until `ls probe` answers."""
        while True:
            if self.proc.poll() is not None:
                out = (self.data / "daemon.out").read_text()
                raise RuntimeError(f"daemon exited {self.proc.returncode}: {out}")
            if os.path.ismount(self.mnt):
                try:
                    os.listdir(probe)
                    return time.perf_counter() - self.t0
                except OSError:
                    pass
            if time.perf_counter() - self.t0 > MOUNT_TIMEOUT:
                raise RuntimeError("mount not ready")
            time.sleep(0.01)

    def rss(self) -> dict[str, int]:
        return proc_status(daemon_pid(self.mnt) or self.proc.pid)

    def stop(self) -> None:
        unmount(self.mnt)
        try:
            self.proc.wait(timeout=600)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.out.close()
