"""``kip848 topics create|add-partitions|delete --timeout-ms MS``: the request's ``timeout_ms``
(Kafka's ``timeoutMs``) bounds how long the coordinator waits for the change to be written to
its store; a write held longer is answered REQUEST_TIMED_OUT, which the command reports with
its hint and exit 1, and the change lands once the store lets it.

The server is the real gRPC server and runtime in this process on a memory store whose appends
the test holds (as a COMMIT waiting for PostgreSQL); its own write bound
(``offsets.commit.timeout.ms``) is far longer than the flag's, so an answer within the flag's
bound can only come from the flag."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from serve_support import InProcessServer

from coordinator.cli import main

SERVER_BOUND_MS = 60_000
FLAG_MS = 300
ANSWERED_WITHIN_S = 5.0
"""The command's answer comes well within this with --timeout-ms 300 (the server's own bound
would be 60 s, past the command's --timeout)."""


@pytest.fixture
def holding() -> Iterator[InProcessServer]:
    """A loaded coordinator whose store's appends the test can hold."""
    server = InProcessServer({"offsets.commit.timeout.ms": str(SERVER_BOUND_MS)})
    try:
        yield server
    finally:
        server.store.release_appends()
        server.close()


def kip848(
    capsys: pytest.CaptureFixture[str], address: str, *argv: str
) -> tuple[int, str, str, float]:
    """(exit code, stdout, stderr, seconds taken) of ``kip848 topics ARGV``."""
    started = time.monotonic()
    code = main(["topics", *argv, "--bootstrap-server", address, "--timeout", "30"])
    taken = time.monotonic() - started
    out = capsys.readouterr()
    return code, out.out, out.err, taken


def test_timeout_ms_bounds_the_wait_for_a_held_write(
    holding: InProcessServer, capsys: pytest.CaptureFixture[str]
) -> None:
    address = holding.address
    for name in ("grown", "gone"):
        code, out, err, _taken = kip848(capsys, address, "create", name, "--partitions", "1")
        assert (code, err, out.startswith(f"Created topic {name} (")) == (0, "", True)
    holding.store.hold_appends()
    for argv, bound_ms in (
        (["create", "new", "--partitions", "3"], FLAG_MS),
        (["add-partitions", "grown", "--count", "4"], FLAG_MS),
        (["delete", "gone"], FLAG_MS),
        (["create", "later", "--partitions", "1"], 0),
    ):
        code, out, err, taken = kip848(capsys, address, *argv, "--timeout-ms", str(bound_ms))
        assert (code, out) == (1, ""), err
        assert err.startswith(
            "kip848: REQUEST_TIMED_OUT: The cluster log write this request waits for did not "
            f"complete within the request's timeout_ms ({bound_ms} ms); its outcome is unknown"
        ), err
        assert err.count("\n") == 1
        assert bound_ms / 1000 <= taken < ANSWERED_WITHIN_S
    holding.store.release_appends()  # the held changes land, in order
    code, out, _err, _taken = kip848(capsys, address, "list", "--output", "json")
    listed = {t["name"]: t["num_partitions"] for t in json.loads(out)}
    assert (code, listed) == (0, {"grown": 4, "new": 3, "later": 1})


@pytest.mark.parametrize(
    "argv",
    [
        ["create", "t", "--partitions", "1"],
        ["add-partitions", "t", "--count", "2"],
        ["delete", "t"],
    ],
)
def test_a_timeout_ms_the_command_would_not_wait_for_is_refused(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """--timeout-ms at or past --timeout (the command's own deadline) and a negative value are
    refused before anything is sent (exit 2; no server is there)."""
    base = [*argv, "--bootstrap-server", "127.0.0.1:9"]
    assert main(["topics", *base, "--timeout", "2", "--timeout-ms", "2000"]) == 2
    err = capsys.readouterr().err
    assert "--timeout-ms 2000 must be below --timeout (2 s)" in err
    with pytest.raises(SystemExit) as exited:
        main(["topics", *base, "--timeout-ms", "-1"])
    assert exited.value.code == 2
    assert "argument --timeout-ms: expected an integer in 0..2147483647, got '-1'" in (
        capsys.readouterr().err
    )
