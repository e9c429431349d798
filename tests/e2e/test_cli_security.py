"""``kip848 users`` and ``kip848 acls`` against a real ``kip848 serve``: credentials salted on the
operator's side and kept as Kafka keeps them, ACLs with kafka-acls.sh's flags, both durable
across ``kill -9``, and a locked cluster refusing the anonymous CLI until ``super.users`` lets
it in."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import ServerProcess, run_cli

from coordinator.core import codec
from coordinator.core import records as r
from coordinator.runtime.store import CLUSTER_LOG, SqliteRecordStore
from coordinator.security import scram

REPO = Path(__file__).resolve().parents[2]


def cli_with_stdin(text: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coordinator.cli", *argv],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        check=False,
    )


def stored_credentials(data_dir: Path) -> dict[tuple[str, int], r.UserScramCredentialValue]:
    with SqliteRecordStore.in_data_dir(data_dir, read_only=True) as store:
        out = {}
        for rows in store.load_rows(CLUSTER_LOG):
            for _offset, key, value, _gid in rows:
                rec = codec.decode(key, value)
                if isinstance(rec.key, r.UserScramCredentialKey) and rec.value is not None:
                    assert isinstance(rec.value, r.UserScramCredentialValue)
                    out[(rec.key.name, rec.key.mechanism)] = rec.value
        return out


def test_users_are_salted_here_and_kept_as_kafka_keeps_them(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = ServerProcess(data)
    at = ("--bootstrap-server", server.address)
    try:
        added = cli_with_stdin(
            "s3cret\n",
            "users", "add", "alice", "--mechanism", "SCRAM-SHA-512", "--iterations", "8192",
            "--password-stdin", *at,
        )  # fmt: skip
        assert (added.returncode, added.stdout) == (0, "User alice: SCRAM-SHA-512 set.\n")
        again = cli_with_stdin("x\n", "users", "add", "alice", "--mechanism", "SCRAM-SHA-512",
                               "--password-stdin", *at)  # fmt: skip
        assert again.returncode == 2 and "use `users alter`" in again.stderr
        password_file = tmp_path / "pw"
        password_file.write_text("n3w-pass\nignored second line\n")
        altered = run_cli("users", "alter", "alice", "--mechanism", "SCRAM-SHA-512",
                          "--password-file", str(password_file), *at)  # fmt: skip
        assert altered.returncode == 0, altered.stderr
        also = cli_with_stdin("pw256\n", "users", "add", "alice", "--mechanism", "SCRAM-SHA-256",
                              "--password-stdin", *at)  # fmt: skip
        assert also.returncode == 0, also.stderr
        listed = run_cli("users", "list", "--output", "json", *at)
        assert json.loads(listed.stdout) == [
            {"user": "alice", "mechanism": "SCRAM-SHA-256", "iterations": 4096},
            {"user": "alice", "mechanism": "SCRAM-SHA-512", "iterations": 4096},
        ]
        empty = cli_with_stdin("\n", "users", "add", "bob", "--password-stdin", *at)
        assert empty.returncode == 2 and "must not be empty" in empty.stderr
        unknown = run_cli("users", "list", "nobody", *at)
        assert unknown.returncode == 1 and "RESOURCE_NOT_FOUND" in unknown.stderr
        server.kill9()  # acknowledged: durable
        creds = stored_credentials(data)
        assert sorted(creds) == [("alice", 1), ("alice", 2)]
        for (_user, number), value in creds.items():
            mech = scram.ScramMechanism(number)
            password = "pw256" if number == 1 else "n3w-pass"
            expected = scram.credential_from_password(mech, password, value.salt, value.iterations)
            assert (value.stored_key, value.server_key) == (
                expected.stored_key,
                expected.server_key,
            )
            assert len(value.salt) == 32
        server = ServerProcess(data)
        at = ("--bootstrap-server", server.address)
        deleted = run_cli("users", "delete", "alice", "--mechanism", "SCRAM-SHA-256", *at)
        assert deleted.stdout == "User alice: SCRAM-SHA-256 deleted.\n"
        assert run_cli("users", "list", *at).stdout.splitlines()[1:] == [
            "alice  SCRAM-SHA-512  4096"
        ]
    finally:
        server.stop()


def test_acls_with_kafka_acls_flags_durable_and_enforced(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = ServerProcess(data)
    at = ("--bootstrap-server", server.address)
    try:
        added = run_cli(
            "acls", "add", "--allow-principal", "User:alice", "--operation", "Read",
            "--operation", "Describe", "--group", "payments-", "--resource-pattern-type",
            "prefixed", *at,
        )  # fmt: skip
        assert added.returncode == 0, added.stderr
        assert added.stdout.splitlines() == [
            "Added ALLOW User:alice READ from * on GROUP:PREFIXED:payments-.",
            "Added ALLOW User:alice DESCRIBE from * on GROUP:PREFIXED:payments-.",
        ]
        denied = run_cli("acls", "add", "--deny-principal", "User:bob", "--deny-host", "10.0.0.9",
                         "--topic", "secret", *at)  # fmt: skip
        assert denied.returncode == 0, denied.stderr
        bad = run_cli("acls", "add", "--allow-principal", "alice", "--group", "g", *at)
        assert bad.returncode == 2 and "TYPE:NAME" in bad.stderr
        match = run_cli("acls", "list", "--group", "payments-eu", "--resource-pattern-type",
                        "match", "--output", "json", *at)  # fmt: skip
        assert [(a["resource_name"], a["operation"]) for a in json.loads(match.stdout)] == [
            ("payments-", "READ"),
            ("payments-", "DESCRIBE"),
        ]
        server.kill9()
        server = ServerProcess(data)
        at = ("--bootstrap-server", server.address)
        listed = run_cli("acls", "list", *at)
        assert listed.stdout.splitlines()[1:] == [
            "TOPIC          secret     LITERAL   User:bob    10.0.0.9  ALL        DENY",
            "GROUP          payments-  PREFIXED  User:alice  *         READ       ALLOW",
            "GROUP          payments-  PREFIXED  User:alice  *         DESCRIBE   ALLOW",
        ]
        removed = run_cli("acls", "remove", "--allow-principal", "User:alice", "--operation",
                          "Read", "--group", "payments-", *at)  # fmt: skip
        assert (
            removed.stdout == "Removed ALLOW User:alice READ from * on GROUP:PREFIXED:payments-.\n"
        )
        # Lock the cluster: only alice may administer it. The CLI is anonymous: refused.
        locked = run_cli("acls", "add", "--allow-principal", "User:alice", "--cluster", *at)
        assert locked.returncode == 0, locked.stderr
        refused = run_cli("acls", "list", *at)
        assert refused.returncode == 1
        assert "CLUSTER_AUTHORIZATION_FAILED: Cluster authorization failed." in refused.stderr
        assert "hint: administration needs DESCRIBE or ALTER on the cluster" in refused.stderr
        users = run_cli("users", "list", *at)
        assert users.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in users.stderr
        server.stop()
        # The operator's way back in: super.users (Kafka's), then the ACL is removed.
        server = ServerProcess(data, "--set", "super.users=User:ANONYMOUS")
        at = ("--bootstrap-server", server.address)
        unlocked = run_cli("acls", "remove", "--cluster", *at)
        assert unlocked.returncode == 0, unlocked.stderr
        assert (
            "Removed ALLOW User:alice ALL from * on CLUSTER:LITERAL:kafka-cluster."
            in unlocked.stdout
        )
    finally:
        server.stop()


def test_serve_warns_which_listeners_are_open(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", "--kafka-listen", "127.0.0.1:0", lines=2)
    try:
        kafka = server.lines[1].removeprefix("kafka listening on ")
        (warning,) = [line for line in server.stderr_text().splitlines() if "WARNING" in line]
        assert "Listeners open to anonymous clients" in warning
        assert f"gRPC {server.address}" in warning and f"{kafka}" in warning
        assert "allow.everyone.if.no.acl.found=true: no ACLs restrict them" in warning
    finally:
        server.stop()


def at_a_terminal(argv: list[str], answers: list[bytes]) -> tuple[int, str]:
    """``kip848 ARGV`` on a pseudo-terminal, each of ``answers`` typed once its prompt (a line
    ending in ": ") is shown: its exit code and everything it wrote there. Bounded waits.

    The child is started by ``subprocess`` (no Python code runs between its fork and exec:
    ``pty.fork`` ran the interpreter's after-fork hooks in a copy of this multi-threaded test
    process, which once crashed there) through util-linux ``setsid --ctty``, which makes the
    terminal its controlling one, so ``getpass`` reads ``/dev/tty`` as at a real prompt."""
    import pty
    import select
    import subprocess
    import time

    fd, tty = pty.openpty()
    child = subprocess.Popen(
        ["setsid", "--ctty", sys.executable, "-m", "coordinator.cli", *argv],
        stdin=tty,
        stdout=tty,
        stderr=tty,
        env=dict(os.environ, PYTHONPATH=str(REPO)),  # this checkout first
        close_fds=True,
    )
    os.close(tty)  # the child's now: its exit closes the terminal (EIO on our side)
    seen = b""
    deadline = time.monotonic() + 60
    pending = list(answers)
    answered = 0  # how much had been shown when the last prompt was answered
    while time.monotonic() < deadline:
        if pending and len(seen) > answered and seen.endswith(b": "):
            os.write(fd, pending.pop(0))
            answered = len(seen)
        if not select.select([fd], [], [], 0.2)[0]:
            continue
        try:
            data = os.read(fd, 4096)
        except OSError:  # the child exited and closed the terminal
            break
        if not data:
            break
        seen += data
    code = child.wait(timeout=30)
    os.close(fd)
    return code, seen.decode().replace("\r\n", "\n")


def test_the_password_prompt(tmp_path: Path) -> None:
    """docs/operations.md's ``users add`` at a terminal, and an end of input at its prompt: a
    refusal (exit 2), never a traceback (it was an EOFError's)."""
    server = ServerProcess(tmp_path / "data")
    at = ["--bootstrap-server", server.address]
    try:
        argv = ["users", "add", "alice", "--mechanism", "SCRAM-SHA-512", "--iterations", "8192"]
        assert at_a_terminal([*argv, *at], [b"s3cret\n", b"s3cret\n"]) == (
            0,
            "Password for alice: \nAgain: \nUser alice: SCRAM-SHA-512 set.\n",
        )
        assert at_a_terminal(["users", "add", "bob", *at], [b"\x04"]) == (
            2,
            "Password for bob: \nkip848 users: no password given (end of input at the prompt)\n",
        )
        assert at_a_terminal(["users", "add", "bob", *at], [b"pw\n", b"\x04"]) == (
            2,
            "Password for bob: \nAgain: \n"
            "kip848 users: no password given (end of input at the prompt)\n",
        )
        listed = run_cli("users", "list", *at)
        assert listed.stdout.splitlines()[1:] == ["alice  SCRAM-SHA-512  8192"], listed
    finally:
        assert server.stop() == 0, server.stderr_text()
