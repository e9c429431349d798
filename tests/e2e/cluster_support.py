"""Several ``kip848 serve`` nodes on one PostgreSQL store (docs/ha.md), and consumers of many
groups committing through them (``cluster_worker.py``), for the fail-over tests.

* :class:`Nodes` starts node processes (``--node-id N --store postgresql://...``, a gRPC and a
  Kafka listener each on port 0), kills them (``kill -9``), pauses them (SIGSTOP/SIGCONT) and
  restarts them, every wait bounded.
* :class:`Workers` runs ``cluster_worker.py`` processes and collects their events with the
  machine's one ``time.monotonic`` clock.
* :func:`journal_epochs` reads, from the store itself, the leader epoch every journal entry of
  each coordinator partition was written under, in offset order: epochs that ever go down mean
  a deposed leader wrote after its successor. :func:`commit_epochs` gives the epochs each
  commit was written under, to check every acknowledged one.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import grpc
from conftest import ServerProcess
from pg import PostgresServer

from coordinator.cli import cluster as cluster_cli
from coordinator.runtime.store.postgres_leases import PostgresLeases
from kip848.v1 import (
    classic_group_pb2,
    classic_group_pb2_grpc,
    consumer_group_pb2,
    consumer_group_pb2_grpc,
    offsets_pb2,
    offsets_pb2_grpc,
)

WORKER = Path(__file__).with_name("cluster_worker.py")
LEASE_MS = 2_000


def settings(partitions: int, **more: object) -> tuple[str, ...]:
    """``--set`` flags of the tests' nodes: a short lease (2 s, renewed every 200 ms),
    ``partitions`` coordinator partitions, and ``more`` (dots as underscores)."""
    values = {
        "coordinator.lease.ms": LEASE_MS,
        "coordinator.heartbeat.interval.ms": LEASE_MS // 10,
        "offsets.topic.num.partitions": partitions,
        **{k.replace("_", "."): v for k, v in more.items()},
    }
    return tuple(a for name, v in values.items() for a in ("--set", f"{name}={v}"))


STOP_TIMEOUT_S = 30.0


def until(cond: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    """Poll ``cond`` every 100 ms until it holds; fail naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


class Nodes:
    """The coordinator nodes of one store."""

    def __init__(self, root: Path, dsn: str, *settings: str, same_ports: bool = False) -> None:
        """``same_ports``: a node started again listens where it did before (as an operator's
        nodes do: clients are given fixed addresses), else on new ports (0)."""
        self.root = root
        self.dsn = dsn
        self.settings = settings
        self.same_ports = same_ports
        self.procs: dict[int, ServerProcess] = {}
        self.logs: dict[int, list[Path]] = {}
        self.addresses: dict[int, tuple[str, str]] = {}  # node -> (gRPC, Kafka) last listened on
        self.dsns: dict[int, str] = {}
        """A node's own ``--store`` (through a :class:`CutProxy`), else ``dsn``."""
        self.prefix: dict[int, tuple[str, ...]] = {}
        """A command a node runs under (``unshare --time ...``: a monotonic clock of its own)."""

    def start(self, node_id: int) -> ServerProcess:
        grpc_at, kafka_at = (
            self.addresses[node_id]
            if self.same_ports and node_id in self.addresses
            else ("127.0.0.1:0", "127.0.0.1:0")
        )
        server = ServerProcess(
            self.root / f"node{node_id}",
            "--store",
            self.dsns.get(node_id, self.dsn),
            "--node-id",
            str(node_id),
            "--kafka-listen",
            kafka_at,
            *self.settings,
            clock="system",
            listen=grpc_at,
            lines=3 if "--metrics-listen" in self.settings else 2,
            prefix=self.prefix.get(node_id, ()),
        )
        assert server.lines[1].startswith("kafka listening on "), server.lines
        self.procs[node_id] = server
        self.addresses[node_id] = (
            server.address,
            server.lines[1].removeprefix("kafka listening on "),
        )
        self.logs.setdefault(node_id, []).append(server.stderr_path)
        return server

    def kafka_address(self, node_id: int) -> str:
        return self.procs[node_id].lines[1].removeprefix("kafka listening on ")

    def kill9(self, node_id: int) -> None:
        self.procs.pop(node_id).kill9()

    def pause(self, node_id: int) -> None:
        self.procs[node_id].signal(signal.SIGSTOP)

    def resume(self, node_id: int) -> None:
        self.procs[node_id].signal(signal.SIGCONT)

    def stop(self, node_id: int) -> int:
        return self.procs.pop(node_id).stop()

    def stop_all(self) -> None:
        for node_id in list(self.procs):
            server = self.procs.pop(node_id)
            if server.proc.poll() is None:
                server.signal(signal.SIGCONT)
            try:
                server.stop()
            except subprocess.TimeoutExpired:
                server.proc.kill()
                server.proc.wait(timeout=10)

    def log_text(self, node_id: int) -> str:
        return "".join(p.read_text(errors="replace") for p in self.logs.get(node_id, []))

    def any(self) -> ServerProcess:
        return next(iter(self.procs.values()))


def describe_cluster(dsn: str) -> dict:
    """What ``kip848 cluster describe`` prints, read in this process (quicker to poll)."""
    leases = PostgresLeases(dsn, where="test")
    try:
        return cluster_cli.describe(leases.state())
    finally:
        leases.close()


def served(dsn: str) -> dict[int, tuple[int, int]] | None:
    """partition -> (leader, leader epoch) once every partition is served by a live leader
    that finished loading it at its epoch (``kip848 cluster describe``), else None."""
    parts = describe_cluster(dsn)["partitions"]
    if any(p["state"] != "serving" for p in parts):
        return None
    return {p["partition"]: (p["leader"], p["leader_epoch"]) for p in parts}


def commit_answer(
    channel: grpc.Channel, group: str, offset: int, timeout: float = 5, topic: str = "events"
) -> offsets_pb2.OffsetCommitResponse:
    """An OffsetCommit of ``group`` (no member: a simple consumer's) of ``topic``'s partition 0
    at ``offset``: the whole answer."""
    return offsets_pb2_grpc.OffsetServiceStub(channel).OffsetCommit(
        offsets_pb2.OffsetCommitRequest(
            group_id=group,
            topics=[
                offsets_pb2.OffsetCommitRequest.Topic(
                    name=topic,
                    partitions=[
                        offsets_pb2.OffsetCommitRequest.Partition(
                            partition_index=0, committed_offset=offset
                        )
                    ],
                )
            ],
        ),
        timeout=timeout,
    )


def simple_commit(
    channel: grpc.Channel, group: str, offset: int, timeout: float = 5, topic: str = "events"
) -> set[int]:
    """:func:`commit_answer`'s partitions' error codes."""
    resp = commit_answer(channel, group, offset, timeout, topic)
    return {p.error_code for t in resp.topics for p in t.partitions}


class PartitionGroups:
    """A group in each of ``partitions`` coordinator partitions, committed (offsets of
    ``topic``'s partition 0, as a simple consumer) and read through whichever node leads it,
    found through a given node; the gRPC channels it opened are closed by :meth:`close`."""

    def __init__(self, partitions: int, topic: str = "events", prefix: str = "o") -> None:
        from coordinator.routing import partition_for

        self.topic = topic
        self.groups: dict[int, str] = {}
        for i in range(100 * partitions):
            self.groups.setdefault(partition_for(f"{prefix}{i}", partitions), f"{prefix}{i}")
        assert sorted(self.groups) == list(range(partitions))
        self.channels: dict[str, grpc.Channel] = {}

    def channel_for(self, address: str) -> grpc.Channel:
        return self.channels.setdefault(address, grpc.insecure_channel(address))

    def commit_all(self, through: ServerProcess, offset: int) -> None:
        """Commit ``offset`` for every group at its coordinator (bounded retries)."""
        for group in self.groups.values():
            at_coordinator(
                through,
                group,
                self.channel_for,
                lambda ch, g=group: (max(simple_commit(ch, g, offset, topic=self.topic)), None),
            )

    def committed_all(self, through: ServerProcess) -> dict[str, dict]:
        return {g: committed(through, g, self.channel_for) for g in self.groups.values()}

    def close(self) -> None:
        for ch in self.channels.values():
            ch.close()


def find_coordinator(server: ServerProcess, group: str) -> tuple[int, str]:
    """(error code, ``HOST:PORT``) of ``group``'s coordinator as ``server`` names it."""
    stub = classic_group_pb2_grpc.ClassicGroupServiceStub(server.channel)
    resp = stub.FindCoordinator(
        classic_group_pb2.FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), timeout=5
    )
    c = resp.coordinators[0]
    return c.error_code, f"{c.host}:{c.port}"


def at_coordinator(
    server: ServerProcess,
    group: str,
    channel_for: Callable[[str], Any],
    ask: Callable[[Any], tuple[int, Any]],
) -> Any:
    """What ``ask`` (a channel -> (error code, answer)) gets from ``group``'s coordinator, found
    through ``server``; bounded retries while the group moves or loads."""
    deadline = time.monotonic() + 30
    while True:
        code, address = find_coordinator(server, group)
        if code == 0:
            code, answer = ask(channel_for(address))
            if code == 0:
                return answer
        assert time.monotonic() < deadline, f"{group}'s coordinator did not answer ({code})"
        time.sleep(0.1)


def committed(server: ServerProcess, group: str, channel_for: Callable[[str], Any]) -> dict:
    """``group``'s committed offsets ({(topic, partition): offset}), asked of its coordinator."""

    def ask(channel: Any) -> tuple[int, dict]:
        resp = offsets_pb2_grpc.OffsetServiceStub(channel).OffsetFetch(
            offsets_pb2.OffsetFetchRequest(
                groups=[offsets_pb2.OffsetFetchRequest.Group(group_id=group)]
            ),
            timeout=5,
        )
        g = resp.groups[0]
        return g.error_code, {
            (t.name, p.partition_index): p.committed_offset for t in g.topics for p in t.partitions
        }

    return at_coordinator(server, group, channel_for, ask)


def described(server: ServerProcess, group: str, channel_for: Callable[[str], Any]) -> tuple:
    """``group`` as its coordinator describes it, whole: the ConsumerGroupDescribe answer and
    the classic DescribeGroups answer (each group is one of the two; the other says so)."""

    def ask(channel: Any) -> tuple[int, tuple]:
        consumer = consumer_group_pb2_grpc.ConsumerGroupServiceStub(channel).ConsumerGroupDescribe(
            consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=[group]), timeout=5
        )
        classic = classic_group_pb2_grpc.ClassicGroupServiceStub(channel).DescribeGroups(
            classic_group_pb2.DescribeGroupsRequest(group_ids=[group]), timeout=5
        )
        codes = {consumer.error_code, classic.error_code}
        codes |= {g.error_code for g in (*consumer.groups, *classic.groups)}
        moving = codes & {
            14,
            15,
            16,
        }  # COORDINATOR_LOAD_IN_PROGRESS, _NOT_AVAILABLE, NOT_COORDINATOR
        return (moving.pop() if moving else 0), (consumer, classic)

    return at_coordinator(server, group, channel_for, ask)


def journal_epochs(dsn: str) -> dict[int, list[int]]:
    """Each coordinator partition's journal: the leader epoch of every entry, in offset order."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            'SELECT log, leader_epoch FROM kip848_journal WHERE log >= 0 ORDER BY log, "offset"'
        ).fetchall()
    out: dict[int, list[int]] = {}
    for log, epoch in rows:
        out.setdefault(int(log), []).append(int(epoch))
    return out


def commit_epochs(dsn: str) -> dict[tuple[str, int], list[int]]:
    """``(group, offset)`` -> the leader epochs every OffsetCommit of ``offset`` by ``group``
    was written under, read from the partitions' journals (the workers' offsets are unique
    per commit: a commit's records, and those of a retry of it, share the offset)."""
    import psycopg

    from coordinator.core import codec
    from coordinator.core.records import OffsetCommitKey

    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            'SELECT leader_epoch, key, value FROM kip848_journal WHERE log >= 0 ORDER BY "offset"'
        ).fetchall()
    out: dict[tuple[str, int], list[int]] = {}
    for epoch, key, value in rows:
        if value is None:
            continue
        record = codec.decode(bytes(key), bytes(value))
        if isinstance(record.key, OffsetCommitKey):
            out.setdefault((record.key.group_id, record.value.offset), []).append(int(epoch))
    return out


class Worker:
    def __init__(self, workers: Workers, name: str, spec: dict[str, Any]) -> None:
        self.name = name
        self.spec = spec
        self.log_path = workers.root / f"{name}.stderr"
        self._stderr = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), json.dumps(spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            event = json.loads(line)
            with self._lock:
                self.events.append(event)

    def of(self, *kinds: str) -> list[dict[str, Any]]:
        with self._lock:
            return [e for e in self.events if e["event"] in kinds]

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.write(b"stop\n")
            self.proc.stdin.flush()
        try:
            rc = self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
            raise AssertionError(f"{self.name} did not stop: {self.stderr()}") from None
        finally:
            self._reader.join(timeout=5)
            self._stderr.close()
        assert rc == 0, f"{self.name} exited {rc}: {self.of('error')} {self.stderr()}"

    def stderr(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]


class Workers:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.all: list[Worker] = []

    def start(self, name: str, **spec: Any) -> Worker:
        w = Worker(self, name, spec)
        self.all.append(w)
        return w

    def events(self, *kinds: str) -> list[dict[str, Any]]:
        return sorted((e for w in self.all for e in w.of(*kinds)), key=lambda e: e["t"])

    def groups(self) -> list[str]:
        return [g for w in self.all for g in w.spec["groups"]]

    def wait_acked_after(
        self, t: float, timeout: float, groups: Iterable[str] | None = None
    ) -> None:
        """Until every group (of ``groups``) has a commit acknowledged after ``t``."""
        wanted = set(self.groups() if groups is None else groups)
        deadline = time.monotonic() + timeout
        while True:
            done = {e["group"] for e in self.events("ack") if e["t"] > t}
            if wanted <= done:
                return
            for w in self.all:
                assert w.proc.poll() is None, f"{w.name} exited: {w.of('error')} {w.stderr()}"
            assert time.monotonic() < deadline, f"no commit acknowledged since {t:.1f} for " + (
                ", ".join(sorted(wanted - done)) + self.history(wanted - done)
            )
            time.sleep(0.1)

    def history(self, groups: Iterable[str], last: int = 25) -> str:
        """The evidence for ``groups`` in a failure's message: each group's last events (and
        its worker's events naming no group: kafka-python's request timeouts), and the stderr
        of the workers running them."""
        out = []
        for w in self.all:
            mine = sorted(set(w.spec["groups"]).intersection(groups))
            if not mine:
                continue
            with w._lock:
                events = [e for e in w.events if e.get("group") in mine or "group" not in e]
            out.append(f"\n--- {w.name} ({', '.join(mine)}): last {last} events")
            out.extend(json.dumps(e, sort_keys=True) for e in events[-last:])
            out.append(f"--- {w.name} stderr: {w.stderr()[-1500:]}")
        return "\n".join(out)

    def kill_all(self) -> None:
        """After a failure: end every worker at once (bounded)."""
        for w in self.all:
            if w.proc.poll() is None:
                w.proc.kill()
                w.proc.wait(timeout=10)

    def stop_all(self) -> None:
        errors = []
        for w in self.all:
            try:
                w.stop()
            except AssertionError as exc:
                errors.append(str(exc))
        assert not errors, errors


@contextlib.contextmanager
def commits_held(pg: PostgresServer) -> Iterator[None]:
    """PostgreSQL stops acknowledging COMMITs while inside (``synchronous_standby_names``
    names a standby that is not there, as when a synchronous standby is lost; once it does,
    a probe write of the admin's own waits), and acknowledges them again after."""
    import psycopg

    admin = psycopg.connect(pg.admin_dsn(), autocommit=True, connect_timeout=10)
    held: list[threading.Thread] = []

    def commits_wait() -> bool:
        """True once a probe's COMMIT waits (the change reached the server's processes),
        else False after it committed."""

        def write() -> None:
            with psycopg.connect(pg.admin_dsn(), autocommit=True) as conn:
                conn.execute("CREATE TABLE IF NOT EXISTS probe (n int)")
                conn.execute("INSERT INTO probe VALUES (1)")

        probe = threading.Thread(target=write, daemon=True)
        probe.start()
        probe.join(0.5)
        held.append(probe)
        return probe.is_alive()

    try:
        admin.execute("ALTER SYSTEM SET synchronous_standby_names = 'absent'")
        admin.execute("SELECT pg_reload_conf()")
        until(commits_wait, "COMMITs to wait for the absent standby")
        yield
    finally:
        admin.execute("ALTER SYSTEM RESET synchronous_standby_names")
        admin.execute("SELECT pg_reload_conf()")
        admin.close()
        for probe in held:
            probe.join(30)


class CutProxy:
    """A TCP proxy to ``target`` (``HOST:PORT``) on 127.0.0.1 (``port``), in a process of its
    own (``cut_proxy.py``): a node given PostgreSQL through it is cut off from PostgreSQL
    alone by :meth:`cut` (every connection reset, new ones closed at once) until
    :meth:`heal`, while the other nodes reach it."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("cut_proxy.py")), *map(str, target)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline())

    def _command(self, what: bytes) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(what + b"\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline() == b"ok\n"

    def cut(self) -> None:
        self._command(b"cut")

    def heal(self) -> None:
        self._command(b"heal")

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
