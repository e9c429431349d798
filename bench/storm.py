"""Join storm benchmark: many members join one big group at once, through a real server.

    .venv/bin/python bench/storm.py              # all rows, writes docs/benchmarks.md
    .venv/bin/python bench/storm.py --quick      # the two small rows
    .venv/bin/python bench/storm.py --rows 5000/50000 --configs default --no-doc
    .venv/bin/python bench/storm.py --protocol grpc,kafka   # both; default: grpc

For each configuration (``--set`` flags of ``kip848 serve``) and each row (members /
partitions), a fresh ``kip848 serve`` (system clock, SQLite store, default settings otherwise)
gets ten topics ``storm-0..9`` sharing the row's partitions and a 3-partition topic for the
probe. ``bench/loadgen/h2storm.c`` (C, libnghttp2, about 30 µs of CPU per call, so the
server keeps the cores) first joins and settles a 3-member probe group, then has every member
of the row join group ``storm`` at once and behave like Kafka's Java consumer (reconcile and
acknowledge at once, heartbeat every ``heartbeat_interval_ms``, re-join when fenced, back off on
retriable errors, reset a call after request.timeout.ms = 30 s), while the probe members
heartbeat every 50 ms. With ``--protocol kafka`` the members speak the Kafka protocol to the
server's Kafka listener (``--kafka-listen``) instead: ``bench/loadgen/kafkastorm.c`` (C, libc
only) does the same as h2storm with ConsumerGroupHeartbeat v1, each member on its own
connection by default, as Kafka's Java consumers are. The run ends when the group has stayed
converged for ``--settle`` seconds (every member joined, at the same epoch, its owned set
acknowledged, every partition owned once, P/N each) or after the row's time limit. Then the
group is described through the server (state, epochs; over gRPC whatever the protocol) and,
after the server stops, the store's journal gives the number of target assignments computed
(one ``ConsumerGroupTargetAssignmentMetadata`` record each).

Reported per row: targets computed, server CPU seconds (the server's processes, from the
generator's start to its end), the time of the last join's answer and the convergence time
after it (in seconds and in heartbeat intervals), members fenced (and the FENCED_MEMBER_EPOCH
and UNKNOWN_MEMBER_ID answers), the probe's heartbeat latency (p50, p99, max), and the calls
that ended without an answer, by cause.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import select
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._loadgen import build, checkouts, create_topics, tree_cpu_s
from bench._report import machine, table, write_section

GROUP = "storm"
PROBE_GROUP = "storm-probe"
TOPICS = 10
PROBE_PARTITIONS = 3
PROBE_MEMBERS = 3
PROBE_INTERVAL_MS = 50
SERVER_START_S = 60.0
DESCRIBE_S = 600.0
HEARTBEAT_INTERVAL_S = 5.0  # group.consumer.heartbeat.interval.ms default
ROWS = ((100, 1_000), (1_000, 10_000), (5_000, 50_000))
QUICK_ROWS = ((100, 1_000), (1_000, 10_000))
BIG_ROWS = ((10_000, 100_000),)
"""Run with the defaults only (every join computing a target would take hours at this size)."""
# Rows' time limits (seconds after the storm began): room for today's behaviour to show itself.
MAX_SECONDS = {100: 60.0, 1_000: 120.0, 5_000: 300.0, 10_000: 300.0}


@dataclass(frozen=True, slots=True, kw_only=True)
class Config:
    name: str
    flags: tuple[str, ...]
    interval_s: float | None  # the assignment interval, None when the server has no batching


CONFIGS = {
    "before": Config(
        name="interval 0, inline (before)",
        flags=(
            "--set",
            "group.consumer.assignment.interval.ms=0",
            "--set",
            "group.consumer.assignor.offload.enable=false",
        ),
        interval_s=None,
    ),
    "default": Config(name="defaults: interval 1 s, offload", flags=(), interval_s=1.0),
    "grpcio": Config(
        name="defaults with grpc.aio (--grpc-transport grpcio)",
        flags=("--grpc-transport", "grpcio"),
        interval_s=1.0,
    ),
    "frontends": Config(
        name="defaults with grpc.aio + 2 gRPC front-end processes",
        flags=("--grpc-transport", "grpcio", "--grpc-processes", "2"),
        interval_s=1.0,
    ),
}


PROTOCOLS = {"grpc": "gRPC", "kafka": "Kafka protocol"}
GRPC_CONNECTIONS = 50  # h2storm's HTTP/2 connections unless --connections says otherwise


# ---------------------------------------------------------------- server


def _enough_files(connections: int) -> None:
    """Raise this process's open-file limit (soft, up to the hard one) for ``connections``
    sockets; the server started next inherits it and must accept them all."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = connections + 1024
    if soft != resource.RLIM_INFINITY and soft < want:
        top = want if hard == resource.RLIM_INFINITY else min(want, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (top, hard))


def _start_server(
    data_dir: str,
    flags: tuple[str, ...],
    *,
    kafka: bool = False,
    root: Path | None = None,
    loop_profile: str | None = None,
) -> tuple[subprocess.Popen[str], str, str | None]:
    """``kip848 serve`` on 127.0.0.1:0 (and its Kafka listener on another free port with
    ``kafka``); its log goes to ``<data_dir>.log``. ``root``: the checkout whose code it runs
    (default: this one); ``loop_profile``: a file for what held its loop (``_loopprof.py``, on
    asyncio's loop). Returns the process, the gRPC address and the Kafka address (None without
    ``kafka``)."""
    if kafka:
        flags = (*flags, "--kafka-listen", "127.0.0.1:0")
    env = None
    if root is not None:  # that checkout's packages ahead of this one's editable install
        path = [str(root), str(root / "client" / "src"), os.environ.get("PYTHONPATH", "")]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in path if p))
    if loop_profile is None:
        start = [sys.executable, "-m", "coordinator.cli"]
    else:
        start = [sys.executable, str(Path(__file__).with_name("_loopprof.py")), loop_profile]
        flags = (*flags, "--event-loop", "asyncio")
    log = open(data_dir + ".log", "wb")  # noqa: SIM115 - the child holds it; closed below
    proc = subprocess.Popen(
        [
            *start,
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            data_dir,
            "--log-level",
            "warning",
            *flags,
        ],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        cwd=str(root or Path(__file__).resolve().parent.parent),  # sys.path[0] of -m
        env=env,
    )
    log.close()
    assert proc.stdout is not None
    # Its first lines ("listening on ...", then "kafka listening on ..."), read from the pipe
    # itself: a buffered readline could swallow the second line where select cannot see it.
    out, fd = b"", proc.stdout.fileno()
    deadline = time.monotonic() + SERVER_START_S
    while out.count(b"\n") < (2 if kafka else 1):
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        chunk = os.read(fd, 4096) if ready else b""
        if not chunk:
            break
        out += chunk
    line, _, rest = out.decode(errors="replace").partition("\n")
    kafka_line = rest.partition("\n")[0].strip() if kafka else "kafka listening on "
    line = line.strip()
    if not line.startswith("listening on ") or not kafka_line.startswith("kafka listening on "):
        proc.kill()
        proc.wait(timeout=30)
        raise RuntimeError(
            f"kip848 serve did not start within {SERVER_START_S:.0f} s: {line!r} {kafka_line!r}\n"
            + Path(data_dir + ".log").read_text(errors="replace")[-2000:]
        )
    return (
        proc,
        line.removeprefix("listening on "),
        kafka_line.removeprefix("kafka listening on ") or None,
    )


def _create_topics(address: str, partitions: int) -> list[tuple[str, str, str, int]]:
    """(kind, name, hex topic id, partitions) of the storm's topics and the probe's."""
    per_topic = [partitions // TOPICS + (1 if i < partitions % TOPICS else 0) for i in range(10)]
    wanted = [("storm", f"storm-{i}", n) for i, n in enumerate(per_topic)]
    wanted.append(("probe", "storm-probe", PROBE_PARTITIONS))
    ids = create_topics(address, {name: n for _kind, name, n in wanted}, SERVER_START_S)
    return [(kind, name, ids[name].hex(), n) for kind, name, n in wanted]


def _describe(address: str) -> dict[str, Any]:
    """The group as the server describes it. A server still working through a backlog may let
    the call sit unanswered until grpc-core cancels it (30 s, ``grpc.server_max_unrequested_
    time_in_server``): retried for up to ``DESCRIBE_S``."""
    import grpc

    from kip848.v1 import consumer_group_pb2, consumer_group_pb2_grpc

    started = time.monotonic()
    with grpc.insecure_channel(address) as channel:
        stub = consumer_group_pb2_grpc.ConsumerGroupServiceStub(channel)
        for attempt in range(1, 1000):
            try:
                r = stub.ConsumerGroupDescribe(
                    consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=[GROUP]), timeout=60
                )
                break
            except grpc.RpcError as exc:
                if time.monotonic() - started > DESCRIBE_S:
                    return {"state": f"not described ({exc.code().name} x{attempt})"}
    g = r.groups[0]
    epochs = sorted({m.member_epoch for m in g.members})
    return {
        "state": g.group_state,
        "group_epoch": g.group_epoch,
        "assignment_epoch": g.assignment_epoch,
        "members": len(g.members),
        "member_epochs": epochs if len(epochs) <= 3 else [*epochs[:3], "..."],
        "seconds": round(time.monotonic() - started, 1),
    }


def _targets_computed(data_dir: str) -> int:
    """Target assignments the server computed for the storm group (from the journal)."""
    from coordinator.core import codec
    from coordinator.core.records import ConsumerGroupTargetAssignmentMetadataKey
    from coordinator.routing import partition_for
    from coordinator.runtime.store import SqliteRecordStore

    store = SqliteRecordStore(data_dir, read_only=True)
    try:
        n = 0
        for entry in store.journal(partition_for(GROUP, store.partitions)):
            if entry.group_id == GROUP and entry.value is not None:
                rec = codec.decode(entry.key, entry.value)
                n += type(rec.key) is ConsumerGroupTargetAssignmentMetadataKey
        return n
    finally:
        store.close()


# ---------------------------------------------------------------- one row


def run_row(
    config: Config,
    members: int,
    partitions: int,
    *,
    connections: int,
    settle_s: float,
    max_seconds: float,
    protocol: str = "grpc",
    root: Path | None = None,
    loop_profile: bool = False,
) -> dict[str, Any]:
    """One row: a fresh server, the storm through ``protocol`` (``grpc``: h2storm over
    ``connections`` HTTP/2 connections; ``kafka``: kafkastorm on the server's Kafka listener,
    ``connections`` of them for the storm's members and one per probe member). ``root``: the
    checkout whose server runs; ``loop_profile``: what held its loop is measured
    (``_loopprof.py``)."""
    kafka = protocol == "kafka"
    name = "kafkastorm" if kafka else "h2storm"
    generator = build(name, libs=()) if kafka else build(name)
    if kafka:
        _enough_files(connections + PROBE_MEMBERS)
    with tempfile.TemporaryDirectory(prefix="kip848-storm-") as tmp:
        data_dir = os.path.join(tmp, "data")
        profile = os.path.join(tmp, "loop.json") if loop_profile else None
        proc, address, kafka_address = _start_server(
            data_dir, config.flags, kafka=kafka, root=root, loop_profile=profile
        )
        try:
            topics = _create_topics(address, partitions)
            host, _, port = (kafka_address or address).rpartition(":")
            spec = [
                f"host {host}",
                f"port {port}",
                f"group {GROUP}",
                f"members {members}",
                f"connections {connections}",
                "join_rate 0",
                "rebalance_timeout_ms 300000",
                "request_timeout_ms 30000",
                f"settle_ms {int(settle_s * 1000)}",
                f"max_seconds {max_seconds}",
                f"probe_group {PROBE_GROUP}",
                f"probe_members {PROBE_MEMBERS}",
                f"probe_interval_ms {PROBE_INTERVAL_MS}",
                *(f"topic {kind} {name} {tid} {n}" for kind, name, tid, n in topics),
            ]
            spec_file = os.path.join(tmp, "spec")
            Path(spec_file).write_text("\n".join(spec) + "\n")
            cpu0 = tree_cpu_s(proc.pid)
            done = subprocess.run(
                [generator, spec_file],
                capture_output=True,
                text=True,
                timeout=max_seconds + 180,
                check=False,
            )
            server_cpu = tree_cpu_s(proc.pid) - cpu0
            lines = done.stdout.strip().splitlines()
            if not lines:
                raise RuntimeError(f"{name} printed nothing: {done.stderr}")
            result: dict[str, Any] = json.loads(lines[-1])
            result["server_cpu_s"] = server_cpu
            print(f"  {name}: {lines[-1][:600]}", file=sys.stderr, flush=True)
            result["described"] = _describe(address)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
        result["targets_computed"] = _targets_computed(data_dir)
        if profile is not None:
            from bench._loopprof import summary

            result["loop"] = summary(profile)
            if os.environ.get("LOOPPROF_STACKS"):
                Path(os.environ["LOOPPROF_STACKS"] + ".json").write_text(Path(profile).read_text())
                Path(os.environ["LOOPPROF_STACKS"] + ".gen.json").write_text(json.dumps(result))
    result["config"] = f"{config.name}, {PROTOCOLS[protocol]}"
    result["protocol"] = protocol
    result["interval_s"] = config.interval_s
    return result


# ---------------------------------------------------------------- report

FINDINGS = """### Calls that end without an answer: who cancels them (grpc.aio)

Not the clients: h2storm resets a call only when its 30 s request timeout passes (the *client
deadline* cause). The CANCELLED calls are cancelled by grpc-core inside the server process.
grpc.aio takes calls from grpc-core one at a time, from its event loop; calls that arrive while
the loop is busy wait in grpc-core's queue of calls "not yet requested by the application",
and that queue

* refuses new calls with a probability that rises from 0 when 1,000 wait
  (`grpc.server.max_pending_requests`) to 1 at 3,000 (`grpc.server.max_pending_requests_hard_limit`),
* cancels calls that have waited longer than 30 s (`grpc.server_max_unrequested_time_in_server`)
  the next time the loop asks for one.

Both end the call with grpc-status 1 (CANCELLED) in its trailers; Python's gRPC client reports
`StatusCode.CANCELLED` with the details `CANCELLED`. Reproduced on a bare grpc.aio server whose
handler blocks the loop (no coordinator code): 3,000 calls sent during an 8 s block, about 730
CANCELLED (none once the two limits are raised); 5 calls during a 40 s block, 4 CANCELLED at
30 s (none once the unrequested time is raised). In a 5,000-member storm the queue sat at the
hard limit: every member keeps one call in flight and retries what is refused (back-off 0.1 to
1 s), so about 2,000 calls a second were refused while the server's CPU was at 40% — the
coordinator was not busy computing, it was not being given the calls. The server now raises
both limits and bounds concurrent calls itself (docs/operations.md, "Bursts and overload"), so a
burst is queued in arrival order instead.

A second cause, now fixed: a call whose client went away (after the 30 s client deadline, a
reset stream) had its handler cancelled by grpc.aio, which cancelled the durable batch it
shared with every other command of that moment; the other commands failed and the writer died
resolving the batch, after which the coordinator never wrote or answered again (seen as a
server still up but answering nothing for ten minutes after a storm). The runtime now shields
those waits (`coordinator/runtime/runtime.py`, `_durable`).

### Where the probe's time goes in a storm

With batching, offloading and the incremental uniform path, the core's work per join is small
and constant (about 0.15 ms at 5,000 members: the member's records; no target), and the target
is computed in a worker. What the probe waited for, found by timing every command and every
garbage collection of the server in a 5,000-member Kafka-protocol storm:

* **The garbage collector.** While the storm builds the group's state (millions of objects),
  CPython ran a full collection each time the surviving objects grew by a quarter: six in the
  storm's second, 50-100 ms each, every one collecting nothing. The server froze what
  survived a full collection, so the next one scanned only what was new: 5-20 ms (probe p99
  85 -> 30 ms, max 160 -> 110 ms in paired runs); since, the loop runs the collector between
  its callbacks, never inside a command (`coordinator/runtime/collector.py`; "Join storms
  under overload").
* **Long single commands.** A command is not preempted. Kafka's way of starting a new group
  gave the first member all 50,000 partitions (about 60 ms of core work) and then revoked
  49,990 of them from it; with the first target covering the whole burst (below) neither
  happens. What remains: installing the 5,000-member target (about 60 ms of core work) and
  copying the group's inputs for the worker (about 20 ms). Encoding the target's records for
  the store (about 30 ms more) is done by the store's writer thread since this round, not in
  the command, and the GIL switch interval (below) lets the loop run while it encodes.
  Answering the 5,000 parked joins is spread over commands of 64.
* **Turns** (`coordinator/runtime/turns.py`, Kafka's event accumulator): a shard that has used
  its 2 ms share of a loop iteration queues its next commands, so the storm's group (one shard)
  does not run its whole burst ahead of the probe's group (another shard); within a shard, joins
  wait behind members' heartbeats. Tests: `tests/unit/test_runtime_turns.py`.
* **The GIL switch interval** (`coordinator/server/loop.py`): the store's writer thread encodes
  each batch's rows in Python; with CPython's default of 5 ms, every time the loop waited for
  I/O the writer could keep the GIL for up to 5 ms. At 0.5 ms, in paired runs, the probe's p99
  went from 161-167 ms to 73-77 ms (before the two changes above).
* **The transport's cost per call, taken in arrival order** (gRPC with grpc.aio). grpc.aio
  takes calls from grpc-core one at a time, in arrival order, and costs about 0.2-0.3 ms of the
  loop's time per call; 5,000 joins sent at once put about a second of that ahead of a probe
  call that arrives just after them, whatever the coordinator does with the calls once it has
  them. This is what keeps the grpc.aio rows' probe far above the targets; front-end processes
  (`--grpc-processes 2`) split that queue but share the same 2 cores with the coordinator and
  the load generator. The default gRPC server (`coordinator/server/h2grpc.py`: HTTP/2 by
  libnghttp2, about a tenth of grpc.aio's CPU per call) and the Kafka listener both read each
  connection's calls as they arrive, so the probe's call waits for one loop turn's reads, not
  for the whole burst.
* **Starting 5,000 calls at once** (gRPC with the default server). The 5,000 joins arrive on
  50 connections within 30 ms and are read in one or two loop iterations; starting a call runs
  its first step (decoding, the service layer, queueing its command in its shard's turn), tens
  of µs each, so the burst's first steps held the loop for about 150 ms before anything read
  after them. Calls now start fairly between connections, at most 64 per loop iteration
  (`coordinator/server/admission.py`); the probe's call waits for about one iteration. In
  paired runs of this row (4 each, alternating): probe max 107-128 ms with it, 244-325 ms
  without. It does not help the Kafka listener, where each of the 5,000 members has a
  connection of its own: fairness between connections cannot tell the probe from a member
  there, so the listener serves requests as they are read, as before.

### Convergence: one first target for the burst

Kafka 4.3 computes a new group's first target in the first member's heartbeat, so the first
member is given every partition. The others, joining within the next fraction of a second,
get an empty assignment until the next computation one interval later, learn their target at
their next heartbeat (5 s after their join), and find their partitions still owned until the
first member revokes them at its own next heartbeat; a member whose heartbeat of that burst
came before the revocation waits one more interval. Measured that way (before this change)
the rows sat at 2.0-2.3 HB after the last join, the 1,000-member row just above its target.
Now the joins to a group with nobody answered yet are parked and the group's first target is
computed once joins stop arriving (two quiet 10 ms waits in a row, at most
`group.initial.rebalance.delay.ms`); the parked joins are answered with their own shares. The
whole storm gets one target, nobody revokes anything, and the group has converged when its last
join is answered. The interval-0 rows (every join computes, as before Kafka 4.3) converge in
1.0-1.4 HB.

### With keepalive, limits, windows and fairness on

The rows above were measured with the gRPC server's keepalive, ping policy, flow-control
windows, per-connection bounds, the per-group concurrency limit, the read budget and the
durable answers given 128 per loop step (docs/operations.md, "gRPC server options" and "Bursts
and overload"), under the exclusive CPU lock on a machine whose load fell from 2.2 to 0.2: the
defaults' 5,000-member rows met every target over both protocols (probe 1/22/56 ms over gRPC,
1/24/47 ms over the Kafka protocol), where grpc.aio in the same sitting gave 2/579/1,258 ms
(one process) and 2/509/927 ms (two front ends). The previous publication of these rows
(commit c0c2fc9, before the read budget and the answers per step, load 8.8 falling to 3.0) had
them at 2/153/473 ms (gRPC) and 1/40/234 ms (Kafka): on 2 shared cores, the machine's load
weighs as much as the server's own work."""


OVERLOAD_FINDINGS = """### Overload: 10,000 members joining one group at once

The 10,000 joins of one group all wait at once for the group's first target. With a
process-wide limit of 10,000 calls (`--max-concurrent-calls`), the storm's own calls plus the
probe's filled it: some joins were refused RESOURCE_EXHAUSTED and retried, and so could be
another group's heartbeat. The limit is now per group, with a tenth more for the process that
only other groups' calls can use, and our gRPC server starts calls fairly between the groups
they name (`coordinator/server/fairness.py`, `admission.py`; docs/operations.md, "Bursts and
overload"); the rows count what was refused (target 0).

What held the probe back then was the server's own loop, and the machine. Timing every
callback and garbage collection of a server in this storm in the loop thread's CPU time
(`--loop-profile`, section "What holds the server's loop" below; gRPC, asyncio's loop):

* **The garbage collector**, about 3,000 collections in the storm, 0.7 s of the loop's CPU,
  each inside whichever callback allocated the 700th object, full ones 10-50 ms, 245 of them
  inside the one command that installs the 10,000-member target. Now the loop runs it between
  callbacks (`coordinator/runtime/collector.py`): young objects every 10 ms tick when 10,000
  were allocated (at least every 100 ms), every fourth collection a full one whose survivors
  are frozen, a big target frozen as soon as it is installed: about 300 collections, 0.3-0.4 s,
  the longest 15-27 ms, none inside a command.
* **Copying the inputs for the assignor worker**, one command of 50-70 ms of CPU (the spec
  cache brought up to date for 10,000 new members, then copied): now brought up to date 500
  members per turn of the shard (`ConsumerGroups.prepare_assignment_job`), 2-8 ms each, and
  copied in 1 ms.
* **Answering parked joins**, 64 per command: 3-7 ms each (the next 64 no longer found by
  sorting every waiting join).
* **The Kafka listener**: 10,000 connections with one join each, read in one or two loop
  iterations whose first steps took 0.2-0.4 s ahead of any other group's heartbeat read with
  them; now they start fairly between groups, 64 per iteration (docs/kafka.md, "Per-connection
  limits").
* **Reading the burst** (our gRPC server): a call is parsed and started in the read that
  brings it (libnghttp2, the service's first step), about 20 µs each, and the 10,000 joins on
  50 connections were read in one or two loop iterations: about 0.2 s of CPU ahead of anything
  read after them. Now the connections handle 64 KiB per iteration in all (about 400 calls), a
  connection with more keeps the rest for its turn in the next iterations, and a connection
  with nothing waiting is read at once (`admission.ReadTurns`).
* **Answering the storm at once**: while the store wrote the target, the commands that answer
  the parked joins (64 each) answered all 10,000 in memory, and the next batch made every
  answer durable at once: its callers were resumed in one loop step, 10,837 callbacks, 161 ms of
  CPU, 414 ms of wall time at load 6.6 (found with `LOOPPROF_STACKS`, `bench/_loopprof.py`). Now
  the durable answers are given 128 per step (`driver.ANSWERS_PER_STEP`).
* **What remains** on the loop: installing the 10,000-member target, one command of 70-80 ms of
  CPU (its records replayed into the group: the targets and the index of their owners), once
  per storm, and collections of up to 25-45 ms.

And the machine: the probe's latency is wall time. In these runs most loop iterations whose
work took over 20 ms of wall time had used a third to a half of that in CPU: the rest the loop
thread waited, for a core (the load generator, the assignor's process and other work share the
2 cores) or for the GIL, which it gives up at every socket read and write and gets back from
the store's writer thread (encoding the storm's records in Python) only when that thread's
switch interval (0.5 ms) runs out. A shorter switch interval (0.1 ms) did not help (paired
runs: probe p99 63, 75, 77 ms against 49, 86, 53 ms). The figures above are from one sitting,
both revisions in turn (`--paired`): the server before this round (44f2d6d) and after it.

In this sitting (load 2.3 falling to 1.0), after this round: gRPC probe p99 25 and 29 ms, max
83 and 90 ms (both targets met in both rounds); Kafka protocol p99 53 and 35 ms, max 72 and
85 ms (p99 met in one round of two); before it: gRPC 57 and 62 / 260 and 206 ms, Kafka 98 and
65 / 277 and 431 ms. Every row converged within half an interval of its last join, with nothing
fenced, refused or unanswered. At a load of 3-7 (earlier runs, not in the table) the same server
gave gRPC p99 49-86 ms, max 139-245 ms: on 2 shared cores the probe targets hold only while the
machine is otherwise quiet."""

LOOP_FINDINGS = """The server on asyncio's loop (uvloop's callbacks cannot be timed from
Python), every callback that took 5 ms or more of the loop thread's CPU recorded with what it
ran, and every garbage collection (its CPU, from `gc.callbacks`; a collection inside a callback
counts in both). CPU time, not wall time: it is the server's own work, whatever else the machine
runs. Columns: the three longest callbacks (CPU ms and what they ran: a task's coroutine, or the
callback) and how many took over 20 ms; the collections, their CPU in all and the longest.

In the rows of this section (load 0.5-2.2): the longest callback of each row (about 250 ms,
`_read_ready`) is not the storm's: it is the benchmark's ConsumerGroupDescribe of the
10,000-member group, sent after the storm has settled and the probe has stopped (its first
step, encoding 10,000 members, runs in the read that brings it: `eager.py`; found with
`LOOPPROF_STACKS`). During the storm: installing the target (73-75 ms, one command), the batch
that makes the storm's joins durable (49 ms in `Engine._writer_loop`: a log line per join event
and the members' session timers settled in one step), and collections (the longest 18 and
67 ms)."""


def _convergence(r: dict[str, Any]) -> str:
    if not r["converged"]:
        return f"not converged in {r['seconds']:.0f} s"
    after = r["converged_at_s"] - r["last_join_s"]
    return f"{after:.1f} s = {after / HEARTBEAT_INTERVAL_S:.1f} HB"


def _described(d: dict[str, Any]) -> str:
    if "group_epoch" not in d:
        return d["state"]
    late = f" (answered after {d['seconds']:.0f} s)" if d["seconds"] >= 5 else ""
    return f"{d['state']}, epoch {d['group_epoch']}{late}"


def _unanswered(r: dict[str, Any]) -> str:
    if not r["unanswered"]:
        return "0"
    causes = ", ".join(f"{k}: {v:,}" for k, v in sorted(r["unanswered_by"].items()))
    return f"{r['unanswered']:,} ({causes})"


def _targets_ok(r: dict[str, Any]) -> list[str]:
    """Which of the issue's targets a row meets (only rows that have targets)."""
    out = []
    hb = HEARTBEAT_INTERVAL_S
    if not r["converged"]:
        return ["converged: no"]
    after = (r["converged_at_s"] - r["last_join_s"]) / hb
    if r["members"] == 5_000:
        out.append(f"≤ 3 HB: {'yes' if after <= 3 else 'no'}")
        out.append(f"0 fenced: {'yes' if r['members_fenced'] == 0 else 'no'}")
        if r["interval_s"]:
            bound = r["converged_at_s"] / r["interval_s"] + 2
            ok = r["targets_computed"] <= bound
            out.append(f"targets ≤ {bound:.0f}: {'yes' if ok else 'no'}")
        out.append(f"probe p99 ≤ 50 ms: {'yes' if r['probe_p99_ms'] <= 50 else 'no'}")
        out.append(f"probe max ≤ 200 ms: {'yes' if r['probe_max_ms'] <= 200 else 'no'}")
    elif r["members"] == 1_000:
        out.append(f"≤ 2 HB: {'yes' if after <= 2 else 'no'}")
    elif r["members"] == 10_000 and r["interval_s"]:
        intervals = (r["converged_at_s"] - r["last_join_s"]) / r["interval_s"]
        refused = sum(n for cause, n in r["unanswered_by"].items() if "RESOURCE_EXHAUSTED" in cause)
        out.append(f"≤ 3 intervals after the last join: {'yes' if intervals <= 3 else 'no'}")
        out.append(f"0 fenced: {'yes' if r['members_fenced'] == 0 else 'no'}")
        out.append(f"0 refused: {'yes' if refused == 0 else f'no ({refused})'}")
        out.append(f"probe p99 ≤ 50 ms: {'yes' if r['probe_p99_ms'] <= 50 else 'no'}")
        out.append(f"probe max ≤ 200 ms: {'yes' if r['probe_max_ms'] <= 200 else 'no'}")
    return out


def _loop(r: dict[str, Any]) -> tuple[str, str]:
    """The loop-profile columns: the longest callbacks (CPU ms, what) and the collections."""
    loop = r.get("loop")
    if loop is None:
        return "—", "—"
    longest = "; ".join(f"{ms:.0f} ({what})" for ms, what in loop["longest_callbacks"])
    return (
        f"{longest}; {loop['callbacks_over_20ms']} over 20 ms",
        f"{loop['gc_count']:,} / {loop['gc_cpu_ms']:,.0f} / {loop['gc_longest_ms']:.0f}",
    )


def report(results: list[dict[str, Any]]) -> str:
    profiled = any("loop" in r for r in results)
    return table(
        (
            "configuration",
            "members / partitions",
            "targets computed",
            "server CPU s",
            "last join answered (s)",
            "converged after the last join",
            "members fenced",
            "UNKNOWN_MEMBER_ID",
            "probe p50 / p99 / max ms",
            "calls without an answer",
            "state at the end",
            "targets met",
            "load average after",
            *(
                ("server loop: longest callbacks, CPU ms", "GC: collections / CPU ms / longest ms")
                if profiled
                else ()
            ),
        ),
        [
            (
                r["config"],
                f"{r['members']:,} / {r['partitions']:,}",
                f"{r['targets_computed']:,}",
                f"{r['server_cpu_s']:.1f}",
                f"{r['last_join_s']:.1f}",
                _convergence(r),
                f"{r['members_fenced']:,}",
                f"{r['unknown_member_id']:,}",
                f"{r['probe_p50_ms']:.0f} / {r['probe_p99_ms']:.0f} / {r['probe_max_ms']:,.0f}",
                _unanswered(r),
                _described(r["described"]),
                "; ".join(_targets_ok(r)) or "—",
                f"{r['load']:.1f}" if "load" in r else "—",
                *(_loop(r) if profiled else ()),
            )
            for r in results
        ],
    )


def write_doc(
    results: list[dict[str, Any]], args: argparse.Namespace, load0: float, load1: float
) -> None:
    """The run's section of docs/benchmarks.md (``args.section``)."""
    text = report(results)
    protocols = args.protocol.split(",")
    cmd = "python bench/storm.py" + (" --quick" if args.quick else "")
    if args.rows:
        cmd += f" --rows {args.rows} --configs {args.configs}"
    if protocols != ["grpc"]:
        cmd += f" --protocol {args.protocol}"
    if args.section != "storm":
        cmd += f" --section {args.section}"
    if args.loop_profile:
        cmd += " --loop-profile"
    if args.paired:
        cmd += f" --paired {args.paired} --rounds {args.rounds}"
    grpc_connections = args.connections or GRPC_CONNECTIONS
    kafka_connections = (
        f"{args.connections} connections" if args.connections else "one connection per member"
    )
    findings, title = {
        "storm": (FINDINGS, "Join storms"),
        "storm-overload-loop": (LOOP_FINDINGS, "What holds the server's loop in a join storm"),
    }.get(args.section, (OVERLOAD_FINDINGS, "Join storms under overload"))
    write_section(
        args.section,
        f"""## {title} (`{cmd}`)

{machine()}; load average {load0:.1f} at the start, {load1:.1f} at the end (the
machine is shared: rough numbers). A fresh `kip848 serve` per row (SQLite store, system clock,
the configuration's `--set` flags); a C load generator joins every member of group `storm`
(ten topics sharing the row's partitions) at once and then behaves like Kafka's Java consumer
(reconcile and acknowledge at once, heartbeat every `heartbeat_interval_ms` = 5 s, re-join when
fenced, back off on retriable errors, give up on a call unanswered after 30 s); meanwhile a
3-member probe group heartbeats every 50 ms on connections of its own. Each row names its
protocol: *gRPC* is `bench/loadgen/h2storm.c` over {grpc_connections} HTTP/2 connections;
*Kafka protocol* is `bench/loadgen/kafkastorm.c` on the server's Kafka listener
(ConsumerGroupHeartbeat v1, as librdkafka sends it) with {kafka_connections}, as Java
consumers have, their requests answered in order per connection. gRPC rows are served by the
default gRPC server (ours, on libnghttp2) unless they name grpc.aio (`--grpc-transport
grpcio`). What the transport changes is the cost of each call on the server's event loop and
the order calls are taken up in: grpc.aio's own handling of a call is most of a steady
heartbeat's cost, and it takes calls one at a time from a single queue; our gRPC server and the
Kafka listener cost a fraction of that and read each connection's calls as they arrive
(docs/kafka.md, "Performance"). A join costs mostly the coordinator's own
work on either protocol, so a burst of thousands of joins still holds the probe's heartbeats
back for as long as the loop takes to get through it. *Converged*: every member joined, at
one epoch, its owned set acknowledged, every partition owned once (P/N each), for {args.settle:.0f} s in
a row; the time is counted from the answer to the last join, and HB = one heartbeat interval (5 s). *Targets
computed*: `ConsumerGroupTargetAssignmentMetadata` records of the group in the store's journal.
*Server CPU*: all the server's processes, from the generator's start to its end.

{text}

{findings}
""",
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="only the two small rows")
    ap.add_argument("--rows", help="comma-separated MEMBERS/PARTITIONS, e.g. 1000/10000")
    ap.add_argument(
        "--configs", default=",".join(CONFIGS), help=f"comma-separated, of: {', '.join(CONFIGS)}"
    )
    ap.add_argument(
        "--protocol",
        default="grpc",
        help="comma-separated, of: grpc, kafka (the server's Kafka listener); how the members "
        "talk to the server",
    )
    ap.add_argument(
        "--connections",
        type=int,
        help="the storm's connections (default: 50 HTTP/2 connections for grpc, one per "
        "member for kafka, as Kafka's Java consumers have)",
    )
    ap.add_argument(
        "--settle", type=float, default=12.0, help="seconds the group must stay converged"
    )
    ap.add_argument("--max-seconds", type=float, help="time limit per row (default per size)")
    ap.add_argument("--no-doc", action="store_true", help="do not write docs/benchmarks.md")
    ap.add_argument(
        "--section",
        default="storm",
        help="the docs/benchmarks.md section to write (storm-overload: the 10,000-member rows)",
    )
    ap.add_argument(
        "--loop-profile",
        action="store_true",
        help="the server on asyncio's loop with every callback and collection timed in CPU "
        "time (bench/_loopprof.py): what held its loop, in two more columns",
    )
    ap.add_argument(
        "--paired",
        metavar="REV,REV,...",
        help="every row for servers of these revisions of this repository (temporary git "
        "worktrees), in rounds alternating between them in one sitting",
    )
    ap.add_argument("--rounds", type=int, default=1, help="rounds of --paired")
    args = ap.parse_args()
    if args.rows:
        rows = [tuple(int(x) for x in item.split("/")) for item in args.rows.split(",")]
    else:
        rows = list(QUICK_ROWS if args.quick else ROWS)
    configs = [CONFIGS[name] for name in args.configs.split(",")]
    protocols = args.protocol.split(",")
    if not set(protocols) <= set(PROTOCOLS):
        ap.error(f"--protocol: comma-separated, of: {', '.join(PROTOCOLS)}")
    load0 = os.getloadavg()[0]
    results = []
    with contextlib.ExitStack() as stack:
        trees: list[tuple[str, str, Path | None]] = [("", "", None)]
        if args.paired:
            trees = list(stack.enter_context(checkouts(args.paired.split(","))))
        for round_ in range(args.rounds if args.paired else 1):
            for config in configs:
                for protocol in protocols:
                    if protocol == "kafka" and "--grpc-transport" in config.flags:
                        continue  # the gRPC server's choice: the Kafka listener is the same
                    big = (
                        ()
                        if args.rows or args.quick or config is not CONFIGS["default"]
                        else BIG_ROWS
                    )
                    for members, partitions in (*rows, *big):
                        for rev, short, root in trees if round_ % 2 == 0 else trees[::-1]:
                            limit = args.max_seconds or MAX_SECONDS.get(members, 300.0)
                            default = members if protocol == "kafka" else GRPC_CONNECTIONS
                            r = run_row(
                                config,
                                members,
                                partitions,
                                connections=min(args.connections or default, members),
                                settle_s=args.settle,
                                max_seconds=limit,
                                protocol=protocol,
                                root=root,
                                loop_profile=args.loop_profile,
                            )
                            if root is not None:
                                r["config"] = f"{rev} ({short}): {r['config']}"
                            r["load"] = os.getloadavg()[0]
                            results.append(r)
                            print(
                                f"{r['config']}, {members}/{partitions}: "
                                + json.dumps({k: v for k, v in r.items() if k != "timeline"}),
                                flush=True,
                            )
    text = report(results)
    print(text)
    if not args.no_doc:
        write_doc(results, args, load0, os.getloadavg()[0])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
