"""A quixstreams application with ``processing_guarantee="exactly-once"`` through the Kafka
listener in front of Tansu (docs/kafka.md, "Transactions"): quixstreams' own consumer (the
classic protocol, its default), transactional producer and offsets sent in the transaction
(tests/e2e/quix/app.py, run in .venv-quix: quixstreams needs an older confluent-kafka than
ours). The application is killed (SIGKILL) in the middle of its run (some transactions
committed), then the coordinator in the middle of the next run; runs go on until the input is
consumed. Every input's output is committed
exactly once and the group's committed offsets are at the end of the input.
"""

from __future__ import annotations

import random
import subprocess
import time
from pathlib import Path

import pytest
import test_kafka_transactions
from kafka_support import create_topics
from test_kafka_transactions import Stack, committed_log, committed_offsets, produce

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
QUIX_PYTHON = ROOT / ".venv-quix" / "bin" / "python"
APP = ROOT / "tests" / "e2e" / "quix" / "app.py"
stack = test_kafka_transactions.stack  # the fixture: Tansu with the coordinator in front
INPUTS = 200
IDLE_S = 6


def run_app(stack: Stack, tmp_path: Path, n: int) -> subprocess.Popen[bytes]:
    log = open(tmp_path / f"quix-{n}.log", "wb")  # noqa: SIM115 - the process owns it
    return subprocess.Popen(
        [
            str(QUIX_PYTHON),
            str(APP),
            stack.address,
            "q-group",
            str(tmp_path / "state"),
            str(IDLE_S),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def test_a_quixstreams_exactly_once_application(stack: Stack, tmp_path: Path) -> None:
    assert QUIX_PYTHON.exists(), "scripts/bootstrap makes .venv-quix"
    rng = random.Random("quix")
    client = stack.server.client()
    create_topics(client, **{"q-in": 2, "q-out": 2})
    client.close()
    values = [f"v{i}" for i in range(INPUTS)]
    produce(stack.address, "q-in", values, 2)

    def progress() -> int:
        return sum(max(o, 0) for o in committed_offsets(stack.address, "q-group", "q-in", 2))

    def wait_for_progress(beyond: int, log: int) -> int:
        """Until the group committed more than ``beyond`` offsets, not all (bounded)."""
        deadline = time.monotonic() + 60
        while (done := progress()) <= beyond:
            assert time.monotonic() < deadline, (tmp_path / f"quix-{log}.log").read_text()[-3000:]
            time.sleep(0.2)
        assert done < INPUTS, "the run ended before it could be interrupted"
        return done

    app = run_app(stack, tmp_path, 1)
    wait_for_progress(0, 1)
    time.sleep(rng.uniform(0.0, 0.5))
    app.kill()  # in the middle of the run: some transactions committed, one perhaps open
    app.wait(10)
    app = run_app(stack, tmp_path, 2)
    wait_for_progress(progress(), 2)  # the killed member timed out, the new one working
    time.sleep(rng.uniform(0.0, 0.5))
    stack.kill_coordinator()
    deadline = time.monotonic() + 90
    runs = 2
    while committed_offsets(stack.address, "q-group", "q-in", 2) != [INPUTS // 2] * 2:
        assert time.monotonic() < deadline, (tmp_path / f"quix-{runs}.log").read_text()[-3000:]
        if app.poll() is not None:  # done early, or failed with the coordinator gone: again
            runs += 1
            app = run_app(stack, tmp_path, runs)
        time.sleep(0.5)
    app.kill()
    app.wait(10)

    seen: dict[str, int] = {}
    for p in range(2):
        for v in committed_log(stack.tansu.address, "q-out", p):
            seen[v.decode()] = seen.get(v.decode(), 0) + 1
    expected = {f"out-{v}": 1 for v in values}
    assert seen == expected, {k: n for k, n in seen.items() if n != 1} or set(expected) - set(seen)
