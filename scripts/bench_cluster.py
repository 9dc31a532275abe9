"""Benchmark three ContextFS mounts sharing one PostgreSQL store (docs/scaling.md).

A real PostgreSQL server (initdb + pg_ctl in a temp dir, fsync on; contextfs/testing/
postgres.py) and real mounts (daemons in subprocesses, each with its own data dir and
derived indexes). Phases, all in one run so the ratios compare like with like:

1. Latency: 3 mounts (a, b, c; search on c only: one embedding model per machine is what
   two cores allow; `--mounts N` for N, search on the last), 3 writer threads per mount
   (`--writers W`). Each write is a new node's `L2.md`
   (open, write, fsync, close = acknowledged) with a unique token; the writer then polls
   the next mount for the file (write -> visible elsewhere) and, for writes made on a or
   b, mount c's `.query/<token>/` until the node is a hit (write -> searchable elsewhere).
2. Contention and lost updates: the same writers again, nothing polled, each write
   followed by an item added to one shared aggregate node (a hot spot: the mounts' writes
   to it collide and are re-applied). Then every acknowledged node is read back on every
   mount, byte for byte, and every item found in the shared node on every mount; the
   misses are the lost updates, which must be 0.
3. Throughput: the same create+fsync load with nothing polled, on 3 mounts x 3 writers on
   PostgreSQL, 1 mount x 3 writers on PostgreSQL and 1 mount x 3 writers on DuckDB
   (search off everywhere); writes/s and ratios.
4. PostgreSQL restart mid-run: 3 mounts x 3 writers write continuously; the server is
   stopped (pg_ctl -m fast) for a few seconds and started again. Writes during the outage
   must fail (EIO); once a mount has written again, none of its writes may fail, and each
   mount's first read of a file stored before the outage (an attachment on another mount,
   read from the server) must succeed; every acknowledged write must be on every mount
   afterwards, and after a remount of one of them.
5. PostgreSQL frozen (SIGSTOP of its processes: a paused VM) for 3 s (--quick) or 30 s
   while each of the three mounts has a write of its own waiting for it (a new entity,
   until the server answers or its deadline refuses it): each reads the files and
   listings it read before, in a loop (p50/p99/max latency, target p99 <= 50 ms; a read
   that waits for the server is a failure), then, thawed, writes once.
6. One mount's daemon frozen (SIGSTOP) as long, while every mount has 3 writers writing
   without pause: the other mounts' reads of files they read before and their writes
   (latency, how many acknowledged during the freeze), then every acknowledged write read
   back on every mount (0 lost).
7. A slow link: create+fsync throughput of 3 mounts x 3 writers and of 1 mount x 3
   writers, each mount reaching the server through a TCP proxy that adds nothing, then
   `--rtt` ms (30) a round trip (contextfs/testing/latency.py), in one run.

Prints a markdown table, writes JSON (default bench-results/bench_cluster.json). Exit
status 1 when an update was lost, an acknowledged write is missing, or a write or read
failed with EIO after recovery; else 0.

    .venv/bin/python scripts/bench_cluster.py --quick     # under 2 minutes
    .venv/bin/python scripts/bench_cluster.py             # the full run
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import secrets
import signal
import sys
import tempfile
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from contextfs.testing import Mount, machine_info, say, stats, write_json, write_synced
from contextfs.testing.latency import LatencyProxy
from contextfs.testing.postgres import PgServer

PREFS = Path("user/default/preferences")
ENTITIES = Path("user/default/entities")
AGG = Path("agent/default/patterns")


@dataclass
class Writes:
    acked: dict[str, tuple[Path, str]] = field(default_factory=dict)  # name -> (mount, text)
    items: list[str] = field(default_factory=list)  # aggregate items acknowledged
    refused: int = 0  # EIO
    other_errors: list[str] = field(default_factory=list)
    # name -> what each mount showed for an acknowledged write that did not read back
    # (the evidence a rare loss leaves in the JSON)
    lost: dict[str, list[str]] = field(default_factory=dict)
    visible_ms: list[float] = field(default_factory=list)
    searchable_ms: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def write_node(mnt: Path, name: str, text: str) -> None:
    d = mnt / PREFS / name
    d.mkdir()
    write_synced(d / "L2.md", text)


def try_write(mnt: Path, name: str, text: str, w: Writes) -> int:
    """Write a node as `write_node` does: 0 when acknowledged, else the errno (an EIO is
    counted in w.refused, another error listed), after a short pause."""
    try:
        write_node(mnt, name, text)
    except OSError as e:
        with w.lock:
            if e.errno == errno.EIO:
                w.refused += 1
            else:
                w.other_errors.append(f"{name}: {e}")
        time.sleep(0.05)
        return e.errno or -1
    return 0


def poll(what, timeout: float) -> float | None:
    """Seconds until what() is true; None after timeout."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        try:
            if what():
                return time.perf_counter() - t0
        except OSError:
            pass
        time.sleep(0.005)
    return None


def hits(mnt: Path, question: str) -> list[str]:
    q = mnt / ".query" / urllib.parse.quote(question, safe=" ")
    return [h["path"] for h in json.loads((q / "_results.json").read_text())["hits"]]


def start_mount(root: Path, name: str, store: str, *, search: bool = False) -> Mount:
    data = root / f"data-{name}"
    data.mkdir()
    lines = [f"search: {str(search).lower()}"] + ([f"store: {store}"] if store else [])
    (data / "config.yaml").write_text("\n".join(lines) + "\n")
    mnt = root / f"mnt-{name}"
    mnt.mkdir()
    m = Mount(mnt, data, search=search)
    m.start()
    return m


def wait_ready(m: Mount, timeout: float = 180) -> None:
    """Until the search index is ready and caught up."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        s = m.status()
        line = next((ln for ln in s.splitlines() if ln.startswith("index_generation")), "")
        if "index: ready" in s and line.endswith("queue 0)"):
            return
        time.sleep(0.2)
    raise RuntimeError("the index did not get ready")


def latency_phase(
    mounts: list[Mount], per_writer: int, w: Writes, *, hot: bool, writers: int = 3
) -> None:
    """hot=False: nodes, each polled for on another mount; hot=True: nodes and items of
    the shared aggregate node as fast as the writers go, nothing polled."""
    search_on = mounts[-1]

    def writer(mi: int, ti: int) -> None:
        m, other = mounts[mi], mounts[(mi + 1) % len(mounts)]
        for i in range(per_writer):
            token = "tok" + secrets.token_hex(5)
            name = f"{'h' if hot else 'n'}{mi}{ti}-{i}"
            text = f"Cluster benchmark note {token} from mount {mi} writer {ti}.\n"
            try:
                write_node(m.path, name, text)
            except OSError as e:
                w.other_errors.append(f"{name}: {e}")
                continue
            with w.lock:
                w.acked[name] = (m.path, text)
            if hot:
                item = f"- evidence {secrets.token_hex(6)} {mi}{ti}\n"
                try:
                    write_synced(
                        m.path / AGG / f"d{mi}{ti}-{i}.md", f"---\ntopic: hot\n---\n{item}"
                    )
                    with w.lock:
                        w.items.append(item.strip())
                except OSError as e:
                    w.other_errors.append(f"aggregate {mi}{ti}-{i}: {e}")
                continue
            l2 = other.path / PREFS / name / "L2.md"
            took = poll(lambda l2=l2, text=text: l2.read_text() == text, 10)
            if took is not None:
                w.visible_ms.append(took * 1000)
            if m is not search_on:
                took = poll(
                    lambda t=token, nm=name: any(nm in p for p in hits(search_on.path, t)), 10
                )
                if took is not None:
                    w.searchable_ms.append(took * 1000)

    threads = [
        threading.Thread(target=writer, args=(mi, ti))
        for mi in range(len(mounts))
        for ti in range(writers)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def lost_updates(mounts: list[Mount], w: Writes) -> int:
    """Acknowledged writes not read back exactly on a mount (counted per mount; each one
    with what the mounts showed in w.lost)."""
    lost = 0
    for m in mounts:
        for name, (src, text) in w.acked.items():
            try:
                shown = (m.path / PREFS / name / "L2.md").read_text()
            except OSError as e:
                shown = f"({e.strerror})"
            if shown != text:
                lost += 1
                w.lost.setdefault(name, [f"written on {src.name}"]).append(
                    f"{m.path.name}: {shown[:80]!r}"
                )
        if w.items:
            try:
                agg = (m.path / AGG / "hot" / "L2.md").read_text()
            except OSError:
                agg = ""
            lost += sum(1 for it in w.items if it not in agg)
    return lost


def server_connections(server: PgServer, dbname: str) -> int:
    """Sessions the server holds for the database (the mounts' connections)."""
    with psycopg.connect(server.dsn(), autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", [dbname]
        ).fetchone()
    return int(row[0]) if row else 0


def throughput(mounts: list[Mount], per_writer: int, prefix: str) -> tuple[float, int]:
    """writes/s of 3 writers per mount creating nodes with fsync; (rate, errors)."""
    errors = []

    def writer(mi: int, ti: int) -> None:
        for i in range(per_writer):
            try:
                write_node(mounts[mi].path, f"{prefix}{mi}{ti}-{i}", f"Throughput {i}.\n")
            except OSError as e:
                errors.append(str(e))

    threads = [
        threading.Thread(target=writer, args=(mi, ti))
        for mi in range(len(mounts))
        for ti in range(3)
    ]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.perf_counter() - t0
    return (len(threads) * per_writer - len(errors)) / took, len(errors)


def slow_link_phase(server: PgServer, root: Path, per_writer: int, rtt_ms: float) -> dict:
    """create+fsync throughput of 3 mounts x 3 writers and of 1 mount x 3 writers, each
    mount reaching the server through a proxy that adds no latency and then `rtt_ms` a
    round trip (contextfs/testing/latency.py), in one run: the ratio is what the link
    costs a cluster whose commits take one lock in turn."""
    out: dict = {"rtt_ms": rtt_ms, "writes_per_writer": per_writer}
    sock = str(server.root / ".s.PGSQL.5432")
    for label, one_way in (("0ms", 0.0), (f"{rtt_ms:g}ms", rtt_ms / 2000)):
        with LatencyProxy(sock, one_way) as proxy:
            for n in (3, 1):
                db = f"link{label}{n}"
                server.create_database(db)
                dsn = proxy.dsn(server.password, db)
                mounts = [start_mount(root, f"{db}-{k}", dsn) for k in range(n)]
                try:
                    rate, errors = throughput(mounts, per_writer, "s")
                finally:
                    for m in mounts:
                        m.stop()
                out[f"{label}_{n}_mounts_writes_per_s"] = round(rate, 1)
                out[f"{label}_{n}_mounts_errors"] = errors
    return out


def restart_phase(server: PgServer, mounts: list[Mount], outage: float, run: float) -> dict:
    w = Writes()
    stop = threading.Event()
    down = threading.Event()
    acked_while_down: list[str] = []
    # per mount: when its first write after the restart was acknowledged, and when each
    # of its writes that was refused started (an EIO after that first ack is spurious:
    # the server was back and this mount had reached it)
    back_at: dict[int, float] = {}
    refused_at: dict[int, list[float]] = {mi: [] for mi in range(len(mounts))}
    # one node with an attachment per mount, written before the outage and never read
    # on the other mounts: after it, each mount's first read of them goes to the server
    for mi, m in enumerate(mounts):
        write_node(m.path, f"cold{mi}", f"Cold note {mi}.\n")
        write_synced(m.path / PREFS / f"cold{mi}" / "notes.txt", f"attachment {mi}\n")

    def writer(mi: int, ti: int) -> None:
        i = 0
        while not stop.is_set():
            name = f"r{mi}{ti}-{i}"
            i += 1
            text = f"Restart note {name}.\n"
            was_down = down.is_set()
            started = time.perf_counter()
            failed = try_write(mounts[mi].path, name, text, w)
            if failed:
                if failed == errno.EIO:
                    with w.lock:
                        refused_at[mi].append(started)
                continue
            with w.lock:
                w.acked[name] = (mounts[mi].path, text)
                if was_down and down.is_set():
                    acked_while_down.append(name)
                if restarted.is_set() and mi not in back_at:
                    back_at[mi] = time.perf_counter()

    restarted = threading.Event()
    threads = [
        threading.Thread(target=writer, args=(mi, ti))
        for mi in range(len(mounts))
        for ti in range(3)
    ]
    for t in threads:
        t.start()
    time.sleep(run / 3)
    say(f"  stopping PostgreSQL for {outage:g} s")
    server.stop()
    down.set()  # from here to the start nothing can be stored: nothing may be acknowledged
    time.sleep(outage)
    down.clear()
    server.start()
    restarted.set()
    t_up = time.perf_counter()
    # the first write acknowledged after the restart: how long the mounts took to reconnect
    before = len(w.acked)
    recovered = poll(lambda: len(w.acked) > before, 30)
    time.sleep(run / 3)
    stop.set()
    for t in threads:
        t.join()
    eio_after_recovery = sum(
        1 for mi, at in refused_at.items() for t in at if mi in back_at and t > back_at[mi]
    )
    # the server was restarted while these mounts held connections it ended: the first
    # read of a stored file each mount has not read yet
    cold, cold_eio = 0, 0
    for mi, m in enumerate(mounts):
        for k in range(len(mounts)):
            if k == mi:
                continue
            cold += 1
            try:
                (m.path / PREFS / f"cold{k}" / "notes.txt").read_text()
            except OSError as e:
                if e.errno != errno.EIO:
                    raise
                cold_eio += 1
    time.sleep(1.0)  # the last commits reach every mount (notices: milliseconds)
    lost = lost_updates(mounts, w)
    mounts[0].remount()
    lost_after_remount = sum(
        1
        for name, (_s, text) in w.acked.items()
        if not _reads(mounts[0].path / PREFS / name / "L2.md", text)
    )
    return {
        "acknowledged": len(w.acked),
        "refused_eio": w.refused,
        "refused_eio_after_recovery": eio_after_recovery,
        "cold_reads_after_recovery": cold,
        "cold_reads_eio": cold_eio,
        "other_errors": w.other_errors[:10],
        "acknowledged_while_down": len(acked_while_down),
        "recovered_after_s": None if recovered is None else round(recovered, 2),
        "mounts_back_after_s": sorted(round(t - t_up, 2) for t in back_at.values()),
        "lost": lost,
        "lost_after_remount": lost_after_remount,
        "lost_writes": dict(list(w.lost.items())[:10]),
        "restart_at": t_up,
    }


def frozen_phase(server: PgServer, mounts: list[Mount], seconds: float) -> dict:
    """The server frozen (SIGSTOP of its processes) for `seconds` while each mount has a
    write on its way (a new entity, waiting for the server until it answers or the write's
    deadline refuses it): every mount reads files and listings it read before, in a loop;
    then the server is thawed and each mount writes once (how long until it is
    acknowledged)."""
    held = []
    for mi, m in enumerate(mounts):
        write_node(m.path, f"held{mi}", f"Held note {mi}.\n")
    time.sleep(1.0)
    for m in mounts:
        for mi in range(len(mounts)):
            held += [m.path / PREFS / f"held{mi}" / name for name in ("L2.md", "L0.md")]
    before = {p: p.read_bytes() for p in held}
    listings = {m.path / PREFS: sorted(os.listdir(m.path / PREFS)) for m in mounts}
    lat: list[float] = []
    wrong = 0
    stuck = threading.Event()

    def reader(until: float) -> None:
        nonlocal wrong
        while time.perf_counter() < until:
            for p in held:
                t0 = time.perf_counter()
                ok = p.read_bytes() == before[p]
                lat.append((time.perf_counter() - t0) * 1000)
                wrong += not ok
            for d, names in listings.items():
                t0 = time.perf_counter()
                wrong += sorted(os.listdir(d)) != names
                lat.append((time.perf_counter() - t0) * 1000)
            time.sleep(0.02)

    outcomes: dict[int, str] = {}

    def waiting_write(mi: int) -> None:  # a write of the same mount, waiting on the server
        d = mounts[mi].path / ENTITIES / f"waiting{mi}"
        try:
            d.mkdir()
            write_synced(d / "L2.md", f"Written while the server was frozen {mi}.\n")
            outcomes[mi] = "stored"
        except OSError as e:
            outcomes[mi] = errno.errorcode.get(e.errno or 0, str(e.errno))

    say(f"  freezing PostgreSQL for {seconds:g} s, a write on its way on each mount")
    server.freeze()
    writers = [
        threading.Thread(target=waiting_write, args=(mi,), daemon=True) for mi in range(len(mounts))
    ]
    try:
        for w in writers:
            w.start()
        lead = min(1.0, seconds / 3)
        time.sleep(lead)  # their statements are sent and wait
        # reads until just before the freeze ends (a write's deadline may end it then)
        until = time.perf_counter() + seconds - lead - 0.5
        t = threading.Thread(target=reader, args=(until,), daemon=True)
        t.start()
        t.join(seconds + 60)
        if t.is_alive():
            stuck.set()
        waiting = sum(w.is_alive() for w in writers)
    finally:
        server.thaw()
    t.join()
    for w in writers:
        w.join(120)
    t_thaw = time.perf_counter()
    back = []
    for mi, m in enumerate(mounts):
        write_node(m.path, f"thawed{mi}", f"After the freeze {mi}.\n")
        back.append(round(time.perf_counter() - t_thaw, 2))
    return {
        "seconds": seconds,
        "reads": len(lat),
        "read_ms": stats(lat),
        "wrong_reads": wrong,
        "reads_blocked": stuck.is_set(),
        "writes_waiting_through_the_reads": waiting,
        "waiting_writes": [outcomes.get(mi, "hung") for mi in range(len(mounts))],
        "first_write_after_thaw_s": back,
    }


def frozen_mount_phase(mounts: list[Mount], seconds: float) -> dict:
    """One mount's daemon frozen (SIGSTOP: a paused VM, a host that stopped) for
    `seconds` while 3 writers a mount write without pause; the other mounts' readers
    read files they read before. Their reads' and writes' latency during the freeze,
    their writes acknowledged meanwhile, and every acknowledged write read back after the
    thaw on every mount."""
    frozen, others = mounts[0], mounts[1:]
    w = Writes()
    for mi, m in enumerate(others):
        write_node(m.path, f"mine{mi}", f"Mine {mi}.\n")
    time.sleep(1.0)
    held = [m.path / PREFS / f"mine{k}" / "L2.md" for m in others for k in range(len(others))]
    before = {p: p.read_bytes() for p in held}
    stop = threading.Event()
    window: list[float] = []  # [start, end] of the freeze
    reads: list[tuple[float, float]] = []  # (when, ms)
    writes: list[tuple[float, float]] = []  # others' acknowledged writes: (when, ms)
    wrong = 0

    def during(when: float) -> bool:
        return len(window) == 2 and window[0] <= when <= window[1]

    def writer(mi: int, ti: int) -> None:
        i = 0
        while not stop.is_set():
            name = f"f{mi}{ti}-{i}"
            i += 1
            text = f"Frozen-host note {name}.\n"
            t0 = time.perf_counter()
            if try_write(mounts[mi].path, name, text, w):
                continue
            with w.lock:
                w.acked[name] = (mounts[mi].path, text)
                if mi:
                    writes.append((t0, (time.perf_counter() - t0) * 1000))

    def reader() -> None:
        nonlocal wrong
        while not stop.is_set():
            for p in held:
                t0 = time.perf_counter()
                wrong += p.read_bytes() != before[p]
                reads.append((t0, (time.perf_counter() - t0) * 1000))
            time.sleep(0.01)

    threads = [
        threading.Thread(target=writer, args=(mi, ti))
        for mi in range(len(mounts))
        for ti in range(3)
    ] + [threading.Thread(target=reader)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    assert frozen.proc is not None
    say(f"  freezing mount {frozen.path.name}'s daemon for {seconds:g} s")
    window.append(time.perf_counter())
    os.kill(frozen.proc.pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        window.append(time.perf_counter())
        os.kill(frozen.proc.pid, signal.SIGCONT)
    time.sleep(2.0)
    stop.set()
    for t in threads:
        t.join()
    time.sleep(1.0)
    lost = lost_updates(mounts, w)
    in_freeze = [ms for when, ms in writes if during(when)]
    return {
        "seconds": seconds,
        "reads_ms": stats([ms for when, ms in reads if during(when)]),
        "wrong_reads": wrong,
        "others_writes_acknowledged": len(in_freeze),
        "others_write_ms": stats(in_freeze),
        "refused_eio": w.refused,
        "other_errors": w.other_errors[:10],
        "acknowledged": len(w.acked),
        "lost": lost,
        "lost_writes": dict(list(w.lost.items())[:10]),
    }


def _reads(path: Path, text: str) -> bool:
    try:
        return path.read_text() == text
    except OSError:
        return False


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sizes: under 2 minutes")
    p.add_argument("--json", default="bench-results/bench_cluster.json")
    p.add_argument(
        "--mounts", type=int, default=3, help="mounts of the latency and contention phases"
    )
    p.add_argument("--writers", type=int, default=3, help="writer threads a mount in those")
    p.add_argument(
        "--rtt", type=float, default=30.0, help="ms a round trip the slow-link phase adds"
    )
    args = p.parse_args()
    if not 2 <= args.mounts <= 26:
        p.error("--mounts: 2 to 26")
    n, nw = args.mounts, args.writers
    per_writer = 4 if args.quick else 30
    tput = 15 if args.quick else 100
    outage, run = (2.0, 6.0) if args.quick else (5.0, 20.0)
    freeze = 3.0 if args.quick else 30.0
    slow_writes = 3 if args.quick else 15
    root = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    doc: dict = {"machine": machine_info(), "quick": args.quick}
    server = PgServer(fsync=True)
    mounts: list[Mount] = []
    t_all = time.perf_counter()
    try:
        server.start()
        say(f"PostgreSQL up; starting {n} mounts (search on the last)")
        dsn = server.create_database("cluster")
        for k in range(n):
            mounts.append(start_mount(root, chr(ord("a") + k), dsn, search=k == n - 1))
            if k == 0:
                (mounts[0].path / "agent" / "default").mkdir()  # the aggregate's owner
        wait_ready(mounts[-1])
        say(f"latency: {n} mounts x {nw} writers x {per_writer} writes")
        w = Writes()
        latency_phase(mounts, per_writer, w, hot=False, writers=nw)
        say(f"contention: {n} mounts x {nw} writers x {per_writer} nodes + items of one node")
        latency_phase(mounts, per_writer, w, hot=True, writers=nw)
        time.sleep(1.0)
        lost = lost_updates(mounts, w)
        conns = server_connections(server, "cluster")
        doc["latency"] = {
            "mounts": n,
            "writers_per_mount": nw,
            "writes": len(w.acked),
            "aggregate_items": len(w.items),
            "errors": w.other_errors[:10],
            "visible_ms": stats(w.visible_ms),
            "searchable_ms": stats(w.searchable_ms),
            "not_visible_within_10s": len(w.acked) - len(w.visible_ms),
            "lost_updates": lost,
            "lost_writes": dict(list(w.lost.items())[:10]),
            "server_connections": conns,
        }
        for m in mounts:
            m.stop()
        mounts = []

        say(f"throughput: 3 writers per mount x {tput} creates+fsync")
        dsn2 = server.create_database("tput3")
        three = [start_mount(root, f"t{k}", dsn2) for k in range(3)]
        mounts = three
        rate3, err3 = throughput(three, tput, "p")
        for m in three:
            m.stop()
        one_pg = [start_mount(root, "t-pg", server.create_database("tput1"))]
        mounts = one_pg
        rate1, err1 = throughput(one_pg, tput, "q")
        one_pg[0].stop()
        one_duck = [start_mount(root, "t-duck", "")]
        mounts = one_duck
        rate_d, err_d = throughput(one_duck, tput, "d")
        one_duck[0].stop()
        mounts = []
        doc["throughput"] = {
            "pg_3_mounts_writes_per_s": rate3,
            "pg_1_mount_writes_per_s": rate1,
            "duckdb_1_mount_writes_per_s": rate_d,
            "errors": err3 + err1 + err_d,
        }

        say("restart: 3 mounts x 3 writers, PostgreSQL stopped mid-run")
        dsn3 = server.create_database("restart")
        mounts = [start_mount(root, f"r{k}", dsn3) for k in range(3)]
        doc["restart"] = restart_phase(server, mounts, outage, run)
        doc["restart"].pop("restart_at")
        say(f"frozen: PostgreSQL stopped (SIGSTOP) for {freeze:g} s, the mounts read and write")
        doc["frozen"] = frozen_phase(server, mounts, freeze)
        say(f"frozen mount: one daemon stopped (SIGSTOP) for {freeze:g} s, 3 writers a mount")
        doc["frozen_mount"] = frozen_mount_phase(mounts, freeze)
        for m in mounts:
            m.stop()
        mounts = []
        say(f"slow link: 3 and 1 mounts through a proxy adding 0 and {args.rtt:g} ms a round trip")
        doc["slow_link"] = slow_link_phase(server, root, slow_writes, args.rtt)
    finally:
        for m in mounts:
            if m.proc is not None:
                try:
                    m.stop()
                except AssertionError as e:
                    say(f"stopping {m.path}: {e}")
        server.close()
    doc["seconds"] = round(time.perf_counter() - t_all, 1)
    lat, tp, rs, fz = doc["latency"], doc["throughput"], doc["restart"], doc["frozen"]
    fm, sl = doc["frozen_mount"], doc["slow_link"]
    slow = f"{sl['rtt_ms']:g}ms"

    def ms(s: dict | None, k: str) -> str:
        return "-" if not s else f"{s[k]:.0f} ms"

    def ms3(s: dict | None) -> str:
        return "-" if not s else f"{s['p50']:.1f} / {s['p99']:.1f} / {s['max']:.1f} ms"

    rows = [
        ("mounts x writers of the latency and contention phases", f"{n} x {nw}", ""),
        ("write -> visible on another mount, p50", ms(lat["visible_ms"], "p50"), "<= 1 s"),
        ("write -> visible on another mount, p99", ms(lat["visible_ms"], "p99"), "<= 1 s"),
        ("write -> searchable on another mount, p50", ms(lat["searchable_ms"], "p50"), "<= 2 s"),
        ("write -> searchable on another mount, p99", ms(lat["searchable_ms"], "p99"), "<= 2 s"),
        ("acknowledged writes / aggregate items",
         f"{lat['writes']} / {lat['aggregate_items']}", ""),
        ("lost updates", str(lat["lost_updates"]), "0"),
        ("server connections of those mounts after them (search on the last)",
         f"{lat['server_connections']} ({lat['server_connections'] / n:.1f} a mount)", ""),
        ("throughput, 3 mounts on PostgreSQL", f"{tp['pg_3_mounts_writes_per_s']:.0f}/s", ""),
        ("throughput, 1 mount on PostgreSQL", f"{tp['pg_1_mount_writes_per_s']:.0f}/s", ""),
        ("throughput, 1 mount on DuckDB", f"{tp['duckdb_1_mount_writes_per_s']:.0f}/s", ""),
        (
            "ratio 3 PG mounts / 1 PG mount",
            f"{tp['pg_3_mounts_writes_per_s'] / tp['pg_1_mount_writes_per_s']:.2f}",
            "",
        ),
        (
            "ratio 1 PG mount / 1 DuckDB mount",
            f"{tp['pg_1_mount_writes_per_s'] / tp['duckdb_1_mount_writes_per_s']:.2f}",
            "",
        ),
        ("restart: writes acknowledged / refused (EIO)",
         f"{rs['acknowledged']} / {rs['refused_eio']}", ""),
        ("restart: acknowledged while the server was down",
         str(rs["acknowledged_while_down"]), "0"),
        ("restart: first write acknowledged after start", f"{rs['recovered_after_s']} s", ""),
        ("restart: each mount's first write acknowledged after start",
         ", ".join(f"{t} s" for t in rs["mounts_back_after_s"]), ""),
        ("restart: writes refused (EIO) after their mount's first acknowledged one",
         str(rs["refused_eio_after_recovery"]), "0"),
        ("restart: first reads of stored files after recovery, EIO",
         f"{rs['cold_reads_eio']} of {rs['cold_reads_after_recovery']}", "0"),
        ("restart: acknowledged writes lost (live / after remount)",
         f"{rs['lost']} / {rs['lost_after_remount']}", "0 / 0"),
        (f"server frozen {fz['seconds']:g} s: reads of what each mount holds, p50 / p99 / max",
         "blocked" if fz["reads_blocked"] else
         f"{fz['read_ms']['p50']:.1f} / {fz['read_ms']['p99']:.1f} / {fz['read_ms']['max']:.1f} ms",
         "p99 <= 50 ms"),
        ("server frozen: reads that returned other bytes or listings", str(fz["wrong_reads"]), "0"),
        ("server frozen: the mounts' own writes waiting through the reads; their outcome",
         f"{fz['writes_waiting_through_the_reads']} of {len(fz['waiting_writes'])}; "
         + ", ".join(fz["waiting_writes"]), ""),
        ("server thawed: each mount's first write acknowledged after",
         ", ".join(f"{t} s" for t in fz["first_write_after_thaw_s"]), ""),
        (f"mount frozen {fm['seconds']:g} s: the others' reads of what they hold, p50 / p99 / max",
         ms3(fm["reads_ms"]), "p99 <= 50 ms"),
        ("mount frozen: the others' writes acknowledged meanwhile, and their p50 / p99 / max",
         f"{fm['others_writes_acknowledged']}, {ms3(fm['others_write_ms'])}", "writes continue"),
        ("mount frozen: writes refused (EIO) / acknowledged writes lost",
         f"{fm['refused_eio']} / {fm['lost']}", "- / 0"),
        (f"link + 0 / + {slow}: throughput, 3 mounts",
         f"{sl['0ms_3_mounts_writes_per_s']:.1f}/s / {sl[slow + '_3_mounts_writes_per_s']:.1f}/s",
         ""),
        (f"link + 0 / + {slow}: throughput, 1 mount",
         f"{sl['0ms_1_mounts_writes_per_s']:.1f}/s / {sl[slow + '_1_mounts_writes_per_s']:.1f}/s",
         ""),
        (f"ratio + {slow} / + 0: 3 mounts; 1 mount",
         f"{sl[slow + '_3_mounts_writes_per_s'] / sl['0ms_3_mounts_writes_per_s']:.3f}; "
         f"{sl[slow + '_1_mounts_writes_per_s'] / sl['0ms_1_mounts_writes_per_s']:.3f}", ""),
    ]  # fmt: skip
    print(f"\n## bench_cluster ({'quick' if args.quick else 'full'}, {doc['seconds']} s)\n")
    print("| measure | value | target |\n|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} |")
    for phase in ("latency", "restart", "frozen_mount"):
        for name, seen in doc[phase].get("lost_writes", {}).items():
            print(f"lost in {phase}: {name}, {'; '.join(seen)}")
    out = write_json(args.json, doc)
    say(f"JSON: {out}")
    bad = lat["lost_updates"] or rs["lost"] or rs["lost_after_remount"]
    bad = bad or rs["acknowledged_while_down"]
    bad = bad or rs["refused_eio_after_recovery"] or rs["cold_reads_eio"]
    bad = bad or fz["reads_blocked"] or fz["wrong_reads"]
    bad = bad or fm["lost"] or fm["wrong_reads"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
