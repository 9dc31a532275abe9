"""A real PostgreSQL server in a temporary directory, for tests and benchmarks.

`PgServer` runs Debian's `initdb` and `pg_ctl` (scripts/setup.sh installs them) on a
fresh cluster listening only on a unix socket in its own directory; `stop()`/`start()`
take it away and bring it back, `freeze()`/`thaw()` stop and resume its processes (the
fault tests). The superuser has a random password and every connection must give it
(scram-sha-256), so a test can look for it where it must never appear. PostgreSQL refuses
to run as root: as root, the cluster belongs to `nobody` and its commands run through
`runuser`. Boundary: no import of ours; no mock of anything.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

PG_BIN_DIRS = (
    "/usr/lib/postgresql/17/bin",
    "/usr/lib/postgresql/16/bin",
    "/usr/lib/postgresql/15/bin",
)
RUN_AS = "nobody"


def pg_bin(name: str) -> str | None:
    """The path of a PostgreSQL server program (initdb, pg_ctl), or None."""
    for d in PG_BIN_DIRS:
        if os.access(os.path.join(d, name), os.X_OK):
            return os.path.join(d, name)
    return shutil.which(name)


def available() -> bool:
    return pg_bin("initdb") is not None and pg_bin("pg_ctl") is not None


class PgServer:
    """One PostgreSQL cluster in a temporary directory, on a unix socket."""

    def __init__(self, *, fsync: bool = False) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="contextfs-pg-"))
        self.data = self.root / "data"
        self.logfile = self.root / "server.log"
        self.password = "pw-" + secrets.token_hex(12)
        self.fsync = fsync
        self._as_root = os.getuid() == 0
        if self._as_root:
            shutil.chown(self.root, RUN_AS)
        os.chmod(self.root, 0o700)
        pwfile = self.root / "pwfile"
        pwfile.write_text(self.password + "\n")
        if self._as_root:
            shutil.chown(pwfile, RUN_AS)
        self._run(
            pg_bin("initdb") or "initdb",
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth=scram-sha-256",
            f"--pwfile={pwfile}",
            "-E",
            "UTF8",
            "--locale=C",
        )
        pwfile.unlink()
        self.running = False
        self.frozen = False

    def _run(self, *cmd: str) -> subprocess.CompletedProcess:
        argv = ["runuser", "-u", RUN_AS, "--", *cmd] if self._as_root else list(cmd)
        r = subprocess.run(argv, capture_output=True, text=True, cwd=self.root)
        if r.returncode != 0:
            log = self.logfile.read_text() if self.logfile.exists() else ""
            raise RuntimeError(f"{' '.join(cmd[:2])} failed: {r.stderr}{r.stdout}\n{log[-2000:]}")
        return r

    def start(self) -> None:
        opts = f"-k {self.root} -c listen_addresses='' -c max_connections=100"
        if not self.fsync:  # tests: a crash of the machine is not what they test
            opts += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        self._run(
            pg_bin("pg_ctl") or "pg_ctl", "-D", str(self.data), "-l", str(self.logfile),
            "-o", opts, "-w", "start",
        )  # fmt: skip
        self.running = True

    def stop(self) -> None:
        """Stop the server (fast: open connections are cut, as when a server goes down)."""
        if self.running:
            self._run(
                pg_bin("pg_ctl") or "pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop"
            )
            self.running = False

    def _pids(self) -> list[int]:
        """The postmaster and every process it started (backends, checkpointer, ...)."""
        main = int((self.data / "postmaster.pid").read_text().split()[0])
        kids = subprocess.run(
            ["pgrep", "-P", str(main)], capture_output=True, text=True
        ).stdout.split()
        return [main, *map(int, kids)]

    def freeze(self) -> None:
        """Stop every process of the server (SIGSTOP), as a paused VM or a host that
        stopped answering: connections stay open, nothing answers. `thaw()` resumes."""
        for pid in self._pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        self.frozen = True

    def while_frozen(self, *steps: Callable[[], object], timeout: float = 20) -> str | None:
        """Freeze the server, run each step in a thread of its own (one after the other,
        each given `timeout` s), thaw it whatever happens; the name of the first step
        still running at its timeout (it waited for the frozen server), else None."""
        self.freeze()
        try:
            for step in steps:
                t = threading.Thread(target=step, daemon=True)
                t.start()
                t.join(timeout)
                if t.is_alive():
                    return getattr(step, "__name__", repr(step))
            return None
        finally:
            self.thaw()

    def thaw(self) -> None:
        if self.frozen:
            for pid in self._pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
            self.frozen = False

    def dsn(self, dbname: str = "postgres") -> str:
        """A postgresql:// URL with the password, on the unix socket."""
        return (
            f"postgresql://postgres:{quote(self.password)}@/{dbname}?host={quote(str(self.root))}"
        )

    def create_database(self, name: str) -> str:
        """A new empty database; returns its DSN."""
        import psycopg

        with psycopg.connect(self.dsn(), autocommit=True) as con:
            con.execute(f'CREATE DATABASE "{name}"')
        return self.dsn(name)

    def close(self) -> None:
        try:
            self.thaw()
            self.stop()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PgServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
