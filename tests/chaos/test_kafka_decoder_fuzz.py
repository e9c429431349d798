"""CI run of the coverage-guided decoder fuzz (fuzz_kafka_decoder.py), in child processes: a
native abort is an exit status and a crash file, never a lost test run."""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
SECONDS = 30
RSS_LIMIT_MB = 2048  # libFuzzer's default: what the fuzzer itself may use


def fuzz(tmp_path: Path, *flags: str, prelude: str = "") -> tuple[int, str, list[Path]]:
    """Run the fuzzer in a child; (exit status, its output, the crash files it wrote).

    libFuzzer's memory limit (``-rss_limit_mb``, 2,048 MB by default) is checked against the
    process's peak RSS as ``getrusage`` gives it, which on Linux starts at the peak of the
    process that started it (kept across fork and exec): a pytest worker that had grown past
    2 GB made the fuzzer report out-of-memory on its seed corpus. The child gets its 2,048 MB
    on top of this process's peak."""
    if not any(flag.startswith("-rss_limit_mb=") for flag in flags):
        inherited_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
        flags = (*flags, f"-rss_limit_mb={RSS_LIMIT_MB + inherited_mb}")
    code = f"{prelude}\nfrom chaos import fuzz_kafka_decoder as f\nf.main(['fuzz', *{flags!r}])\n"
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=SECONDS * 4 + 60,
        cwd=TESTS,
        env=dict(os.environ, PYTHONPATH=str(TESTS)),
        check=False,
    )
    return done.returncode, done.stdout + done.stderr, sorted(tmp_path.glob("crash-*"))


@pytest.mark.slow
def test_the_listener_decoder_survives_coverage_guided_fuzzing(tmp_path: Path) -> None:
    status, out, crashes = fuzz(
        tmp_path, f"-max_total_time={SECONDS}", "-seed=848", f"-artifact_prefix={tmp_path}/"
    )
    assert status == 0 and crashes == [], out[-4000:]
    runs = re.search(r"Done (\d+) runs", out)
    # 50,000 to 350,000 inputs in 30 s here, depending on the machine's load
    assert runs is not None and int(runs[1]) >= 20_000, out[-2000:]


@pytest.mark.slow
def test_a_large_parent_does_not_count_against_the_fuzzers_memory_limit(tmp_path: Path) -> None:
    """Started by a process whose peak RSS is past libFuzzer's default limit (a pytest worker
    after big tests), the fuzzer still runs: its limit is its own."""
    blob = bytearray((RSS_LIMIT_MB + 256) * 1024 * 1024)
    blob[::4096] = b"\x01" * len(range(0, len(blob), 4096))  # every page resident
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024 > RSS_LIMIT_MB
    del blob
    status, out, crashes = fuzz(
        tmp_path, "-max_total_time=3", "-seed=848", f"-artifact_prefix={tmp_path}/"
    )
    assert status == 0 and crashes == [] and "out-of-memory" not in out, out[-3000:]


@pytest.mark.slow
def test_without_the_bounds_check_the_fuzzer_finds_the_native_abort(tmp_path: Path) -> None:
    """The fuzzer's worth, and the check's: with ``bounds.check`` taken out (and only decoding
    fuzzed) it makes kio abort within seconds; the input it saved is refused with the check."""
    status, out, crashes = fuzz(
        tmp_path,
        "-max_total_time=60",
        "-seed=848",
        f"-artifact_prefix={tmp_path}/",
        prelude=(
            "from coordinator.server.kafka import bounds\n"
            "bounds.check = lambda cls, buf, pos: buf\n"
            "from coordinator.server.kafka import apis\n"
            "apis.SERVED.clear()\n"
        ),
    )
    assert status != 0 and "deadly signal" in out and "memory allocation of" in out, out[-3000:]
    assert len(crashes) == 1
    checked = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys\n"
            "from chaos.fuzz_kafka_decoder import TARGETS\n"
            "from coordinator.server.kafka import wire\n"
            "data = open(sys.argv[1], 'rb').read()\n"
            "kind, key, version = TARGETS[data[0] % len(TARGETS)]\n"
            "decode = wire.decode if kind == 'request' else wire.decode_response\n"
            "try:\n"
            "    decode(key, version, data[1:], 0)\n"
            "except wire.WireError as exc:\n"
            "    print('refused:', exc)\n",
            str(crashes[0]),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=TESTS,
        env=dict(os.environ, PYTHONPATH=str(TESTS)),
        check=False,
    )
    assert checked.returncode == 0, checked.stderr[-2000:]
    assert checked.stdout.startswith("refused: ") and "elements need at least" in checked.stdout
