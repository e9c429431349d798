"""Fuzzing the Kafka listener of a real server: mutated frames of every served API and version,
clients that pipeline and never read, and a member of another group that must not notice.

The frames start from real clients' requests (``kafka_corpus.txt``: librdkafka, kafka-python
pinned to many broker versions and aiokafka, recorded by the listener in front of Tansu) and
from requests built with the codec for every API and version the listener serves
(``kafka_samples``): the fullest one (every array with elements, every nullable field present)
and the emptiest (what ``wire.build`` makes of nothing). Every other mutated frame is a real
client's, taken in turn from the whole corpus, so each of its requests is mutated; the others
cover the API versions no client sent. Each connection sends a few frames intact and then one
mutated the way a
broken or hostile client would: a 5-byte varint of 34 billion, int32 lengths of 2^31-1, -2^31
and -1 (null), a compact null, flipped, inserted and deleted bytes, a truncation, a version or
API key nobody serves, a client id longer than the frame. Meanwhile some connections pipeline
thousands of requests and read nothing, and a witness process — a KIP-848 member of a group of
its own — heartbeats and commits every 20 ms, timing each answer.

A run passes when: the server process lives and stops cleanly; nothing it logged is above
WARNING, no traceback, at most one warning per connection; the witness was answered every time
(no error), within ``WITNESS_MAX_S``; the server's RSS grew by less than ``RSS_GROWTH_MIB``.

    cd tests && ../.venv/bin/python -m chaos.kafka_fuzz --frames 200000 [--seed N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import struct
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coordinator.server.kafka import wire

from . import kafka_corpus, kafka_samples
from .server import REPO, Server, start_subprocess

WITNESS_GROUP = "kafka-fuzz-witness"
WITNESS_TOPIC = "kafka-fuzz-witness"
WITNESS_MAX_S = 1.0
RSS_GROWTH_MIB = 96
PIPELINED = 5_000  # requests each non-reading connection sends
SERVER_FLAGS = (
    "--kafka-listen",
    "127.0.0.1:0",
    "--set",
    "group.initial.rebalance.delay.ms=50",
    "--set",
    "group.min.session.timeout.ms=100",
    "--set",
    "group.max.session.timeout.ms=3000",
)
LOG_LINE = re.compile(r"^\S+ \S+ (?P<level>[A-Z]+) (?P<logger>\S+): (?P<message>.*)$")
CLOSING = re.compile(r"Closing Kafka connection from 127\.0\.0\.1:\d+: \S")


# ---------------------------------------------------------------- frames


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def base_frames() -> list[tuple[int, int, bytes]]:
    """(key, version, payload without its size) for every served API and version: the fullest
    request and the emptiest."""
    out = []
    for key, version in kafka_samples.served_requests():
        cls = wire.request_class(key, version)
        for entity in (kafka_samples.sample(cls), wire.build(cls)):
            out.append((key, version, wire.request_frame(entity, 1, "kafka-fuzz")))
    return out


def real_frames() -> list[tuple[int, int, bytes]]:
    """(key, version, payload without its size) of every request in the corpus."""
    return [(e.key, e.version, e.frame) for e in kafka_corpus.load()]


def mutate(rng: random.Random, key: int, version: int, payload: bytes) -> tuple[str, bytes]:
    """One mutation of a request (without its size); (its name, the whole frame)."""
    at = rng.randrange(10, max(11, len(payload)))  # in the body (or the client id)
    kind = rng.choice(MUTATIONS)
    if kind in PATCHES:
        patch, width = PATCHES[kind]
        out = payload[:at] + patch + payload[at + width :]
    elif kind == "flip":
        data = bytearray(payload)
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(10, max(11, len(data))) if len(data) > 10 else 0
            if i < len(data):
                data[i] ^= 1 << rng.randrange(8)
        out = bytes(data)
    elif kind == "insert":
        out = payload[:at] + rng.randbytes(rng.randint(1, 8)) + payload[at:]
    elif kind == "delete":
        out = payload[:at] + payload[at + rng.randint(1, 8) :]
    elif kind == "truncate":
        out = payload[:at]
    elif kind == "version":
        out = struct.pack(">hh", key, rng.choice([-1, 99, 32767, version + 50])) + payload[4:]
    elif kind == "api-key":
        out = struct.pack(">h", rng.choice([-7, 999, 32767, 71, 25])) + payload[2:]
    else:  # client-id: a length past the end of the frame
        out = payload[:8] + struct.pack(">h", 30000) + payload[10:]
    return kind, _frame(out)


PATCHES = {
    "varint-huge": (b"\xff\xff\xff\xff\x7f", 1),
    "int32-max": (b"\x7f\xff\xff\xff", 4),
    "int32-min": (b"\x80\x00\x00\x00", 4),
    "int32-null": (b"\xff\xff\xff\xff", 4),
    "int16-null": (b"\xff\xff", 2),
    "compact-null": (b"\x00", 1),
}
"""Mutation -> (bytes written at the offset, bytes they replace)."""
MUTATIONS = (
    *PATCHES,
    "flip",
    "insert",
    "delete",
    "truncate",
    "version",
    "api-key",
    "client-id",
)


# ---------------------------------------------------------------- the witness


def witness_main(address: str, seconds: float) -> int:
    """A KIP-848 member of ``WITNESS_GROUP``: joins, then heartbeats and commits every 20 ms
    for ``seconds`` or until SIGTERM; prints one JSON line: the latency of each answer (a
    heartbeat and a commit), and any error."""
    import signal
    import socket

    stopped = False

    def stop(*_args: Any) -> None:
        nonlocal stopped
        stopped = True

    signal.signal(signal.SIGTERM, stop)

    host, _, port = address.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    correlation = 0

    def call(key: int, version: int, **values: Any) -> Any:
        nonlocal correlation
        correlation += 1
        payload = wire.request_frame(
            wire.build(wire.request_class(key, version), values), correlation, "witness"
        )
        sock.sendall(_frame(payload))
        size = struct.unpack(">i", _exact(sock, 4))[0]
        frame = _exact(sock, size)
        assert struct.unpack_from(">i", frame)[0] == correlation
        pos = 4 + (1 if wire.response_header_flexible(key, version) else 0)
        return wire.decode_response(key, version, frame, pos)

    member = "a2Fma2EtZnV6ei13aXRuZXNz"
    joined = call(
        68,
        1,
        group_id=WITNESS_GROUP,
        member_id=member,
        member_epoch=0,
        rebalance_timeout=30000,
        subscribed_topic_names=[WITNESS_TOPIC],
        topic_partitions=[],
    )
    errors: list[str] = []
    if joined.error_code:
        errors.append(f"join: {joined.error_code} {joined.error_message}")
    epoch = joined.member_epoch
    latencies = []
    deadline = time.monotonic() + seconds
    offset = 0
    while time.monotonic() < deadline and not errors and not stopped:
        began = time.monotonic()
        beat = call(68, 1, group_id=WITNESS_GROUP, member_id=member, member_epoch=epoch)
        if beat.error_code:
            errors.append(f"heartbeat: {beat.error_code} {beat.error_message}")
        epoch = beat.member_epoch
        offset += 1
        commit = call(
            8,
            9,
            group_id=WITNESS_GROUP,
            generation_id_or_member_epoch=epoch,
            member_id=member,
            topics=[
                {
                    "name": WITNESS_TOPIC,
                    "partitions": [{"partition_index": 0, "committed_offset": offset}],
                }
            ],
        )
        codes = [int(p.error_code) for t in commit.topics for p in t.partitions]
        if codes != [0]:
            errors.append(f"commit: {codes}")
        latencies.append(time.monotonic() - began)
        time.sleep(0.02)
    sock.close()
    print(json.dumps({"latencies": latencies, "errors": errors}), flush=True)
    return 0


def _exact(sock: Any, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed by the server")
        out += chunk
    return out


# ---------------------------------------------------------------- the run


@dataclass
class Report:
    frames: int = 0
    connections: int = 0
    mutations: Counter[str] = field(default_factory=Counter)
    real_mutated: Counter[tuple[int, int]] = field(default_factory=Counter)
    """(api key, version) -> real clients' requests of it mutated."""
    closed: int = 0  # connections the server closed (bad input)
    answered: int = 0  # answers read
    pipelined: int = 0
    seconds: float = 0.0
    rss_start_mib: float = 0.0
    rss_max_mib: float = 0.0
    witness: dict[str, Any] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        line = next(line for line in f if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


async def _one_connection(
    address: tuple[str, int], frames: list[bytes], report: Report, deadline: float
) -> None:
    """Send ``frames`` (intact ones, then a mutated one), read until the server closes or
    every answer came (bounded by ``deadline``)."""
    reader, writer = await asyncio.open_connection(*address)
    report.connections += 1
    try:
        writer.write(b"".join(frames))
        report.frames += len(frames)
        for _ in frames:
            head = await asyncio.wait_for(
                reader.readexactly(4), max(0.1, deadline - time.monotonic())
            )
            (size,) = struct.unpack(">i", head)
            await reader.readexactly(size)
            report.answered += 1
    except (asyncio.IncompleteReadError, ConnectionError):
        report.closed += 1
    except TimeoutError:
        pass  # a request parked at a barrier (a join): not the fuzz's concern
    finally:
        writer.close()


async def _pipeliner(address: tuple[str, int], data: bytes, stop: asyncio.Event) -> None:
    """Sends ``data`` and never reads, until ``stop``."""
    reader, writer = await asyncio.open_connection(*address)
    writer.write(data)
    await stop.wait()
    writer.transport.abort()
    del reader


async def fuzz(kafka_address: str, frames: int, seed: int, concurrency: int = 24) -> Report:
    host, _, port = kafka_address.rpartition(":")
    address = (host, int(port))
    rng = random.Random(seed)
    built, real = base_frames(), real_frames()
    bases = built + real
    rng.shuffle(real)
    report = Report()
    stop = asyncio.Event()
    heartbeat = wire.request_frame(
        wire.build(wire.request_class(68, 1), group_id="kafka-fuzz-pipe", member_id="p"), 0, "pipe"
    )
    listing = wire.request_frame(
        wire.build(wire.request_class(16, 5), states_filter=[], types_filter=[]), 0, "pipe"
    )
    pipelined = b"".join(_frame(p) for _ in range(PIPELINED // 2) for p in (heartbeat, listing))
    pipeliners = [asyncio.ensure_future(_pipeliner(address, pipelined, stop)) for _ in range(4)]
    report.pipelined = 4 * PIPELINED
    deadline = time.monotonic() + 600
    queue: asyncio.Queue[list[bytes] | None] = asyncio.Queue(maxsize=concurrency * 2)

    async def worker() -> None:
        while (batch := await queue.get()) is not None:
            await _one_connection(address, batch, report, time.monotonic() + 5)

    workers = [asyncio.ensure_future(worker()) for _ in range(concurrency)]
    planned = turn = 0
    while planned < frames:
        batch = [_frame(rng.choice(bases)[2]) for _ in range(rng.randint(0, 3))]
        turn += 1
        if turn % 2:  # a real client's request, the whole corpus in turn
            key, version, payload = real[(turn // 2) % len(real)]
            report.real_mutated[key, version] += 1
        else:
            key, version, payload = rng.choice(built)
        kind, bad = mutate(rng, key, version, payload)
        report.mutations[kind] += 1
        batch.append(bad)
        planned += len(batch)
        await queue.put(batch)
        if time.monotonic() > deadline:
            report.failures.append("the run did not finish within 600 s")
            break
    for _ in workers:
        await queue.put(None)
    await asyncio.gather(*workers)
    stop.set()
    await asyncio.gather(*pipeliners, return_exceptions=True)
    return report


def run(frames: int, seed: int, data_dir: Path) -> Report:
    """A server, the witness beside it, the fuzz; the report with its failures."""
    server = start_subprocess(data_dir, *SERVER_FLAGS)
    report = Report()
    try:
        kafka_address = _kafka_address(server)
        _create_topic(server.address)
        report = asyncio.run(_fuzz_with_witness(server, kafka_address, frames, seed))
    finally:
        status = server.stop()
    report.failures += check(report, server, status)
    return report


async def _fuzz_with_witness(server: Server, kafka_address: str, frames: int, seed: int) -> Report:
    witness = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "chaos.kafka_fuzz",
        "--witness",
        kafka_address,
        "--seconds",
        "600",
        stdout=asyncio.subprocess.PIPE,
        cwd=REPO / "tests",
    )
    samples = [rss_mib(server.pid)]

    async def sample_rss() -> None:
        while True:
            await asyncio.sleep(0.2)
            samples.append(rss_mib(server.pid))

    sampler = asyncio.ensure_future(sample_rss())
    began = time.monotonic()
    try:
        await asyncio.sleep(0.5)  # the witness joins first
        report = await fuzz(kafka_address, frames, seed)
    finally:
        sampler.cancel()
        witness.terminate()  # it prints what it measured when asked to stop
    out, _err = await witness.communicate()
    lines = out.decode().splitlines()
    report.witness = json.loads(lines[-1]) if lines else {}
    report.seconds = time.monotonic() - began
    report.rss_start_mib, report.rss_max_mib = samples[0], max(samples)
    return report


def check(report: Report, server: Server, status: int) -> list[str]:
    failures = []
    if status != 0:
        failures.append(f"the server exited {status}")
    warnings = 0
    for line in server.stderr().splitlines():
        m = LOG_LINE.match(line)
        if m is None:
            failures.append(f"a line that is not a log line (a traceback?): {line[:200]}")
        elif m["level"] not in ("DEBUG", "INFO", "WARNING"):
            failures.append(f"logged at {m['level']}: {m['message'][:300]}")
        elif m["level"] == "WARNING" and m["logger"] == "kip848.kafka":
            warnings += 1
            if not CLOSING.match(m["message"]):
                failures.append(f"a warning that is not a closed connection: {m['message'][:300]}")
    # One warning per connection at most (connections are not told apart by their port: the
    # server closes first, so a client port comes back in use during a run).
    if warnings > report.connections:
        failures.append(f"{warnings} warnings for {report.connections} connections")
    witness = report.witness
    if not witness.get("latencies"):
        failures.append(f"the witness did not run: {witness}")
    elif witness.get("errors"):
        failures.append(f"the witness got errors: {witness['errors'][:5]}")
    elif max(witness["latencies"]) > WITNESS_MAX_S:
        failures.append(f"the witness waited {max(witness['latencies']):.3f} s")
    grown = report.rss_max_mib - report.rss_start_mib
    if grown > RSS_GROWTH_MIB:
        failures.append(
            f"RSS grew {grown:.0f} MiB ({report.rss_start_mib:.0f} -> {report.rss_max_mib:.0f})"
        )
    return failures


def _kafka_address(server: Server) -> str:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        lines = server.out.read_text().splitlines()
        if len(lines) >= 2 and lines[1].startswith("kafka listening on "):
            return lines[1].removeprefix("kafka listening on ")
        time.sleep(0.02)
    raise AssertionError(f"no Kafka listener: {server.stderr()[-2000:]}")


def _create_topic(grpc_address: str) -> None:
    import grpc

    from kip848.v1 import admin_pb2, admin_pb2_grpc

    with grpc.insecure_channel(grpc_address) as channel:
        stub = admin_pb2_grpc.AdminServiceStub(channel)
        deadline = time.monotonic() + 30
        while True:
            resp = stub.CreateTopics(
                admin_pb2.CreateTopicsRequest(
                    topics=[
                        admin_pb2.CreateTopicsRequest.CreatableTopic(
                            name=WITNESS_TOPIC, num_partitions=1
                        )
                    ]
                ),
                timeout=10,
            )
            code = resp.topics[0].error_code if resp.topics else resp.error_code
            if code == 0:
                return
            assert code == 14 and time.monotonic() < deadline, resp  # loading: retry
            time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--frames", type=int, default=20_000)
    p.add_argument("--seed", type=int, default=848)
    p.add_argument("--witness", metavar="KAFKA_ADDRESS", help=argparse.SUPPRESS)
    p.add_argument("--seconds", type=float, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.witness:
        return witness_main(args.witness, args.seconds)
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        report = run(args.frames, args.seed, Path(tmp) / "data")
    summary = {k: v for k, v in vars(report).items() if k not in ("witness", "real_mutated")}
    summary["real_mutated"] = {
        f"{wire.api_name(k)} v{v}": n for (k, v), n in sorted(report.real_mutated.items())
    }
    lat = sorted(report.witness.get("latencies", [0.0]))
    summary["witness"] = {
        "answers": len(lat),
        "p50_ms": round(lat[len(lat) // 2] * 1000, 1),
        "p99_ms": round(lat[int(len(lat) * 0.99)] * 1000, 1),
        "max_ms": round(lat[-1] * 1000, 1),
    }
    print(json.dumps(summary, indent=2, default=str))
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
