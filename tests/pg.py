"""A real PostgreSQL for the tests: Debian's server (``postgresql`` in scripts/bootstrap),
initialised in a temporary directory and started on 127.0.0.1 with a free port.

PostgreSQL refuses to run as root, and CI runs the suite as root: then the server runs as the
``postgres`` user Debian's package creates (``runuser``), its data directory owned by it. The
postmaster is this process's child (not ``pg_ctl``'s daemon), so a killed server is reaped here
at once and never left as a zombie that the next start would take for a running server. The
server's superuser is ``admin`` (a password of its own); the tests' coordinators connect as
``kip848``, a role the tests create (LOGIN, not a superuser), owner of the databases they make,
so nothing here needs more than a database owner has. Every wait is bounded; ``stop`` ends the
server (fast, then immediate, then SIGKILL) and removes the directory.

``fsync=off``: the tests crash the server (``kill``) and restart it, never the machine, and
PostgreSQL's crash recovery reads its write-ahead log back from the page cache; commits still
wait for their log record to be written (``synchronous_commit`` stays on). Benchmarks use
PostgreSQL's defaults.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

ADMIN_PASSWORD = "admin-secret"
ROLE = "kip848"
ROLE_PASSWORD = "kip848-secret"
_TIMEOUT_S = 60


def postgres_bin() -> Path:
    """The newest installed server's bin directory (Debian keeps it off PATH)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_version)
    if not found:
        which = shutil.which("initdb")
        if which is None:
            raise RuntimeError(
                "PostgreSQL's initdb is not installed (scripts/bootstrap installs Debian's "
                "postgresql)"
            )
        return Path(which).resolve().parent
    return Path(found[-1]).parent


def _version(path: str) -> int:
    try:
        return int(Path(path).parts[-3])
    except ValueError:
        return 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """One PostgreSQL server of the tests: ``start()``, ``dsn(db)``, ``create_database()``,
    ``restart()``, ``kill()``, ``stop()``."""

    def __init__(self, *, fsync: bool = False) -> None:
        """``fsync``: PostgreSQL's durable default (benchmarks); off for the tests (above)."""
        self.fsync = fsync
        self.bin = postgres_bin()
        self.as_root = os.geteuid() == 0
        self.dir = Path(tempfile.mkdtemp(prefix="kip848-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self._databases = 0
        if self.as_root:
            shutil.chown(self.dir, "postgres", "postgres")

    def _run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bin / argv[0]), *argv[1:]]
        if self.as_root:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        result = subprocess.run(
            cmd, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False, cwd=self.dir
        )
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(argv[:2])} failed: {result.stderr}{self._log_tail()}")
        return result

    def _log_tail(self) -> str:
        try:
            return "\n--- server log ---\n" + self.log.read_text()[-3000:]
        except OSError:
            return ""

    def start(self) -> PostgresServer:
        if not self.data.exists():
            pwfile = self.dir / "pw"
            pwfile.write_text(ADMIN_PASSWORD + "\n")
            if self.as_root:
                shutil.chown(pwfile, "postgres", "postgres")
            self._run(
                "initdb",
                "-D",
                str(self.data),
                "-U",
                "admin",
                f"--pwfile={pwfile}",
                "--auth=scram-sha-256",
                "-E",
                "UTF8",
                "--no-instructions",
            )
            pwfile.unlink()
            with open(self.data / "postgresql.conf", "a") as conf:
                conf.write(
                    "\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = ''\n"
                    f"fsync = {'on' if self.fsync else 'off'}\nmax_connections = 200\n"
                    "shared_buffers = 128MB\nlog_min_messages = warning\n"
                )
        for _attempt in range(5):  # a port taken between choosing and binding: another one
            self.port = free_port()
            if self._launch():
                self._bootstrap_role()
                return self
            if "could not bind" not in self._log_tail() and "in use" not in self._log_tail():
                break
        raise RuntimeError(f"PostgreSQL did not start{self._log_tail()}")

    def _launch(self) -> bool:
        """Start the postmaster as a child of this process; True once it accepts connections,
        False if it exited (its log says why)."""
        cmd = [str(self.bin / "postgres"), "-D", str(self.data), "-p", str(self.port)]
        if self.as_root:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, cwd=self.dir, start_new_session=True
            )
        deadline = time.monotonic() + _TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            if self._ready():
                return True
            time.sleep(0.05)
        raise RuntimeError(f"PostgreSQL did not accept connections in {_TIMEOUT_S} s")

    def _ready(self) -> bool:
        """postmaster.pid's status line says "ready" (what pg_ctl -w waits for), written by the
        postmaster just started (a killed one leaves its file behind)."""
        try:
            lines = (self.data / "postmaster.pid").read_text().splitlines()
        except OSError:
            return False
        if len(lines) < 8 or lines[7].strip() != "ready" or self.proc is None:
            return False
        pid = int(lines[0])
        return pid == self.proc.pid or pid in _children(self.proc.pid)

    def _bootstrap_role(self) -> None:
        import psycopg

        with psycopg.connect(self.admin_dsn(), autocommit=True, connect_timeout=10) as conn:
            exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (ROLE,)).fetchone()
            if not exists:
                conn.execute(
                    f"CREATE ROLE {ROLE} LOGIN PASSWORD '{ROLE_PASSWORD}' NOSUPERUSER NOCREATEDB"
                )

    def admin_dsn(self, db: str = "postgres") -> str:
        return f"postgresql://admin:{ADMIN_PASSWORD}@127.0.0.1:{self.port}/{db}"

    def dsn(self, db: str) -> str:
        """What a coordinator is given: ``--store postgresql://kip848:...@127.0.0.1:PORT/db``."""
        return f"postgresql://{ROLE}:{ROLE_PASSWORD}@127.0.0.1:{self.port}/{db}"

    def create_database(self) -> str:
        """A new, empty database owned by the tests' role; its DSN."""
        import psycopg

        self._databases += 1
        name = f"kip848_{os.getpid()}_{self._databases}"
        with psycopg.connect(self.admin_dsn(), autocommit=True, connect_timeout=10) as conn:
            conn.execute(f"CREATE DATABASE {name} OWNER {ROLE}")
        return self.dsn(name)

    def fresh_store_dsn(self) -> str:
        """A DSN whose tables land in a new, empty schema of one shared database (much quicker
        than a database per test): ``options=-csearch_path=...``."""
        import psycopg

        if not hasattr(self, "_shared"):
            self._shared = self.create_database()
        self._databases += 1
        schema = f"t{self._databases}"
        with psycopg.connect(self._shared, autocommit=True, connect_timeout=10) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
        return f"{self._shared}?options=-csearch_path%3D{schema}"

    def _postmaster_pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None

    def kill(self) -> None:
        """SIGKILL the postmaster and every process it started: a crash, as a machine losing
        power would leave it (the next start recovers from the write-ahead log)."""
        pid = self._postmaster_pid()
        if pid is None or self.proc is None:
            return
        family = [pid, *_children(pid)]
        for p in family:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
        self.proc.wait(timeout=_TIMEOUT_S)
        deadline = time.monotonic() + _TIMEOUT_S
        while time.monotonic() < deadline and any(_alive(p) for p in family[1:]):
            time.sleep(0.02)
        self.proc = None

    def restart(self, *, crash: bool = False) -> None:
        """Stop (``crash``: SIGKILL, else a fast shutdown) and start again on the same port."""
        if crash:
            self.kill()
        else:
            self._shutdown()
        self.start_again()

    def start_again(self) -> None:
        """After :meth:`kill`: the same server on the same port again (it recovers from its
        write-ahead log)."""
        if not self._launch():
            raise RuntimeError(f"PostgreSQL did not start again{self._log_tail()}")

    def _shutdown(self) -> None:
        """Fast shutdown (SIGINT), then immediate (SIGQUIT), then SIGKILL: bounded."""
        proc, pid = self.proc, self._postmaster_pid()
        if proc is None or pid is None:
            return
        for sig, wait_s in ((signal.SIGINT, 20), (signal.SIGQUIT, 10)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
            try:
                proc.wait(timeout=wait_s)
                self.proc = None
                return
            except subprocess.TimeoutExpired:
                continue
        self.kill()

    def stop(self) -> None:
        self._shutdown()
        shutil.rmtree(self.dir, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is dead, only not reaped


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(entry.name))
    return out
