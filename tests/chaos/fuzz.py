"""Fuzzing a real server: seeded random requests to every RPC, every answer checked.

Requests are generated from the protobuf descriptors (every field of every request message, so
new fields are fuzzed without changes here), with values from field-aware pools: group ids,
member ids and epochs (also *harvested* from earlier answers, so that members really join,
heartbeat, commit and leave), topic names and ids (some created, some not, some illegal), regular
expressions (valid, invalid, huge), timeouts, offsets, metadata, config names and values, plus
generic borderline values (empty, huge, negative, int32/int64 limits, unicode) for the rest.
About 1% of the calls are undecodable bytes.

An answer passes when: the gRPC status is OK (INVALID_ARGUMENT for undecodable bytes); every
``error_code`` anywhere in the response is documented for that RPC in its ``.proto`` comment,
and is not UNKNOWN_SERVER_ERROR (which means a bug); and it came within the call deadline.
After the run the server must still be serving, must not have logged a bug, must stop cleanly,
and ``kip848 replay`` must accept the store.

Run longer than CI does: ``cd tests && ../.venv/bin/python -m chaos.fuzz --requests 200000``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2, health_pb2_grpc

from kip848.v1 import (
    admin_pb2,
    classic_group_pb2,
    consumer_group_pb2,
    offsets_pb2,
)

from .killloop import wait_loaded
from .server import REPO, ForkServer, start_subprocess

PROTO_DIR = REPO / "proto" / "kip848" / "v1"
CALL_TIMEOUT_S = 30.0
UNKNOWN_SERVER_ERROR = -1
INT32 = (-(2**31), -2, -1, 0, 1, 2, 3, 7, 100, 2**31 - 1)
INT64 = (-(2**63), -1, 0, 1, 42, 10**6, 2**53, 2**63 - 1)

SERVER_FLAGS = (
    "--set",
    "group.consumer.min.session.timeout.ms=200",
    "--set",
    "group.consumer.session.timeout.ms=1000",
    "--set",
    "group.consumer.min.heartbeat.interval.ms=100",
    "--set",
    "group.consumer.heartbeat.interval.ms=200",
    "--set",
    "group.min.session.timeout.ms=100",
    "--set",
    "group.max.session.timeout.ms=3000",
    "--set",
    "group.initial.rebalance.delay.ms=100",
)

SERVICES = {
    "kip848.v1.ConsumerGroupService": consumer_group_pb2,
    "kip848.v1.ClassicGroupService": classic_group_pb2,
    "kip848.v1.OffsetService": offsets_pb2,
    "kip848.v1.AdminService": admin_pb2,
}
WEIGHTS = {
    "ConsumerGroupHeartbeat": 30,
    "ConsumerGroupDescribe": 4,
    "OffsetCommit": 14,
    "OffsetFetch": 8,
    "OffsetDelete": 4,
    "JoinGroup": 5,
    "SyncGroup": 4,
    "Heartbeat": 4,
    "LeaveGroup": 3,
    "DescribeGroups": 3,
    "FindCoordinator": 2,
    "ListGroups": 3,
    "DeleteGroups": 2,
    "DescribeConfigs": 2,
    "IncrementalAlterConfigs": 3,
    "CreateTopics": 3,
    "CreatePartitions": 2,
    "DeleteTopics": 1,
    "ListTopics": 2,
}


def documented_codes() -> dict[str, set[int]]:
    """RPC name -> the error codes its ``.proto`` comment lists under ``Errors``."""
    out: dict[str, set[int]] = {}
    for path in sorted(PROTO_DIR.glob("*.proto")):
        codes: set[int] = set()
        in_errors = False
        for line in path.read_text().splitlines():
            text = line.strip()
            if text.startswith("// Errors"):
                in_errors, codes = True, set()
                continue
            rpc = re.match(r"rpc (\w+)\(", text)
            if rpc:
                out[rpc.group(1)] = codes
                in_errors, codes = False, set()
                continue
            m = re.match(r"//\s+(-?\d+)\s+[A-Z_]+", text)
            if in_errors and m:
                codes.add(int(m.group(1)))
    return out


def error_codes(msg: Message) -> Iterator[int]:
    """Every ``error_code`` field anywhere in a message."""
    for fd, value in msg.ListFields():
        if fd.name == "error_code":
            yield value
        elif fd.type == FieldDescriptor.TYPE_MESSAGE:
            if fd.is_repeated:
                for item in value:
                    yield from error_codes(item)
            else:
                yield from error_codes(value)


@dataclass
class World:
    """What the fuzzer learned from answers: members, epochs, generations, topic ids."""

    members: dict[str, list[tuple[str, int]]] = field(default_factory=dict)  # group -> (id, epoch)
    classic: dict[str, list[tuple[str, int]]] = field(default_factory=dict)  # group -> (id, gen)
    topic_ids: list[bytes] = field(default_factory=list)


GROUPS = [f"g{i}" for i in range(8)] + ["", " ", "x" * 300, "grüße", "g0\x00"]
TOPICS = ["t0", "t1", "t2", "t3", "nope", "", "bad/name", "a" * 300, ".", "t.b_c-d"]
REGEXES = ["t.*", "t[0-2]", ".*", "(", "a{1000}", "", "t(?=x)", "[", "x" * 2000, "t0|t1"]
CONFIG_NAMES = ["consumer.session.timeout.ms", "consumer.heartbeat.interval.ms", "nope", ""]
CONFIG_VALUES = ["500", "1000", "45000", "abc", "", "-1", "99999999999"]
STRINGS = ["", "x", "y" * 300, "\u00e9\u4e2d", " ", "range", "uniform", "consumer", "stable"]


class Fuzzer:
    def __init__(self, rng: random.Random, world: World) -> None:
        self.rng = rng
        self.world = world

    # -- values by field ----------------------------------------------------------------------

    def string(self, msg: str, name: str) -> str:
        r = self.rng
        if name in ("group_id", "group_ids", "coordinator_keys", "resource_name"):
            return r.choice(GROUPS)
        if name == "member_id":
            group_members = [m for ms in self.world.members.values() for m, _ in ms] + [
                m for ms in self.world.classic.values() for m, _ in ms
            ]
            if group_members and r.random() < 0.7:
                return r.choice(group_members)
            return r.choice(["", "m1", "m2", "x" * 100])
        if name in ("instance_id", "group_instance_id"):
            return r.choice(["i0", "i1", "", " "])
        if name == "subscribed_topic_regex":
            return r.choice(REGEXES)
        if name == "server_assignor":
            return r.choice(["uniform", "range", "nope", ""])
        if name in ("protocol_type",):
            return r.choice(["consumer", "", "connect"])
        if name == "name" and "Config" in msg:
            return r.choice(CONFIG_NAMES)
        if name == "value":
            return r.choice(CONFIG_VALUES)
        if name in ("name", "names", "topic", "topics") or "topic" in name:
            return r.choice(TOPICS)
        if name in ("states_filter",):
            return r.choice(["stable", "Empty", "assigning", "bogus", ""])
        if name in ("types_filter",):
            return r.choice(["consumer", "classic", "CONSUMER", "bogus"])
        if name == "committed_metadata":
            return r.choice(["", "m", "x" * 5000])
        return r.choice(STRINGS)

    def integer(self, msg: str, name: str, bits: int) -> int:
        r = self.rng
        if name == "member_epoch":
            epochs = [e for ms in self.world.members.values() for _, e in ms]
            return r.choice([*epochs[-20:], 0, 0, -1, -2, 1, 5, 2**31 - 1])
        if name in ("generation_id", "generation_id_or_member_epoch"):
            gens = [g for ms in self.world.classic.values() for _, g in ms]
            epochs = [e for ms in self.world.members.values() for _, e in ms]
            return r.choice([*gens[-10:], *epochs[-10:], -1, 0, 1, 2**31 - 1])
        if name in ("rebalance_timeout_ms",):
            return r.choice([-1, 0, 1, 100, 1000, 3000])
        if name in ("session_timeout_ms",):
            return r.choice([-1, 0, 100, 1000, 3000, 10_000_000])
        if name in ("partition_index", "partitions", "partition"):
            return r.choice([0, 1, 2, 3, 7, -1, 2**31 - 1])
        if name in ("num_partitions", "count"):
            return r.choice([-1, 0, 1, 3, 8, 100])
        if name == "committed_offset":
            return r.choice([0, 1, 100, -1, 2**63 - 1, -(2**63)])
        if name == "committed_leader_epoch":
            return r.choice([-1, 0, 5])
        if name == "resource_type":
            return r.choice([16, 32, 2, 0, -1])
        if name == "config_operation":
            return r.choice([0, 1, 2, 3, 9, -1])
        if name == "key_type":
            return r.choice([0, 1, 2, -1])
        return r.choice(INT64 if bits == 64 else INT32)

    def raw_bytes(self, name: str) -> bytes:
        r = self.rng
        if name == "topic_id":
            ids = self.world.topic_ids
            if ids and r.random() < 0.7:
                return r.choice(ids)
            return r.choice([b"", b"\x00" * 16, r.randbytes(16), r.randbytes(3)])
        return r.randbytes(r.choice([0, 1, 8, 64, 1000]))

    # -- messages -----------------------------------------------------------------------------

    def fill(self, msg: Message, depth: int = 0) -> Message:
        r = self.rng
        d: Descriptor = msg.DESCRIPTOR
        for fd in d.fields:
            if fd.has_presence and fd.type != FieldDescriptor.TYPE_MESSAGE and r.random() < 0.3:
                continue  # optional scalar left absent
            if fd.is_repeated:
                n = r.choice([0, 1, 1, 2, 3, 5]) if depth < 3 else 0
                if r.random() < 0.005:
                    n = 200  # now and then a big one
                container = getattr(msg, fd.name)
                for _ in range(n):
                    if fd.type == FieldDescriptor.TYPE_MESSAGE:
                        self.fill(container.add(), depth + 1)
                    else:
                        container.append(self.scalar(d.name, fd))
            elif fd.type == FieldDescriptor.TYPE_MESSAGE:
                if depth < 3 and r.random() < 0.75:
                    self.fill(getattr(msg, fd.name), depth + 1)
                    if not getattr(msg, fd.name).ListFields():
                        getattr(msg, fd.name).SetInParent()  # present but empty
            else:
                setattr(msg, fd.name, self.scalar(d.name, fd))
        return msg

    def shape(self, name: str, req: Message) -> None:
        """Half of the calls of the stateful RPCs are made well formed, from what the world
        knows (members with their epochs, generations, real topics), so that members join,
        reconcile, commit and leave, and the random half hits a group with real state."""
        r = self.rng
        if r.random() < 0.5:
            return
        group = r.choice(GROUPS[:8])
        if name == "ConsumerGroupHeartbeat":
            known = self.world.members.get(group)
            req.Clear()
            req.group_id = group
            if known and r.random() < 0.7:
                member, epoch = r.choice(known)
                req.member_id, req.member_epoch = member, epoch
                if r.random() < 0.1:
                    req.member_epoch = -1  # leave
                return
            req.member_id = r.choice(["", f"m-{r.randrange(1000)}"])
            req.member_epoch = 0
            req.rebalance_timeout_ms = r.choice([1000, 5000])
            if r.random() < 0.2:
                req.subscribed_topic_regex = r.choice(["t.*", "t[0-1]"])
            else:
                req.subscribed_topic_names.names.extend(r.sample(TOPICS[:4], r.randint(1, 3)))
            req.topic_partitions.SetInParent()
            if r.random() < 0.2:
                req.instance_id = f"i{r.randrange(3)}"
        elif name == "OffsetCommit":
            known = self.world.members.get(group)
            req.group_id = group
            if known and r.random() < 0.5:
                req.member_id, req.generation_id_or_member_epoch = r.choice(known)
        elif name == "JoinGroup":
            known = self.world.classic.get(group)
            req.Clear()
            req.group_id = f"c{group}"
            req.member_id = r.choice(known)[0] if known and r.random() < 0.6 else ""
            req.session_timeout_ms = r.choice([1000, 3000])
            req.rebalance_timeout_ms = r.choice([500, 1000])
            req.protocol_type = "consumer"
            req.protocols.add(name="range", metadata=b"\x00\x03\x00\x00\x00\x01\x00\x02t0")
        elif name in ("SyncGroup", "Heartbeat"):
            known = self.world.classic.get(group)
            if known:
                req.group_id = f"c{group}"
                req.member_id, req.generation_id = r.choice(known)

    def scalar(self, msg: str, fd: FieldDescriptor) -> Any:
        t = fd.type
        if t == FieldDescriptor.TYPE_STRING:
            return self.string(msg, fd.name)
        if t == FieldDescriptor.TYPE_BYTES:
            return self.raw_bytes(fd.name)
        if t == FieldDescriptor.TYPE_BOOL:
            return self.rng.random() < 0.5
        if t in (
            FieldDescriptor.TYPE_INT64,
            FieldDescriptor.TYPE_SINT64,
            FieldDescriptor.TYPE_UINT64,
        ):
            return self.integer(msg, fd.name, 64)
        return self.integer(msg, fd.name, 32)


@dataclass
class Report:
    requests: int = 0
    garbage: int = 0
    seconds: float = 0.0
    by_method: Counter[str] = field(default_factory=Counter)
    clean: Counter[str] = field(default_factory=Counter)  # answers without any error code
    codes: Counter[int] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)


def methods() -> list[tuple[str, str, type[Message], type[Message]]]:
    """(name, path, request class, response class) of every RPC fuzzed."""
    out = []
    for service, module in SERVICES.items():
        desc = module.DESCRIPTOR.services_by_name[service.rsplit(".", 1)[1]]
        for m in desc.methods:
            req = getattr(module, m.input_type.name)
            resp = getattr(module, m.output_type.name)
            out.append((m.name, f"/{service}/{m.name}", req, resp))
    return out


def streaming_methods() -> set[str]:
    """RPCs answered with a stream (ConsumerGroupWatch): fuzzed through their first message."""
    return {
        m.name
        for service, module in SERVICES.items()
        for m in module.DESCRIPTOR.services_by_name[service.rsplit(".", 1)[1]].methods
        if m.server_streaming
    }


def _first_message(multi: Any) -> Any:
    """A server stream called like a unary RPC: its first message (checked like any answer),
    then the stream is cancelled; a stream that ends without a message fails the call."""

    async def call(body: bytes, timeout: float) -> bytes:  # noqa: ASYNC109 - the unary call's signature
        stream = multi(body, timeout=timeout)
        try:
            async for raw in stream:
                return raw
        finally:
            stream.cancel()
        raise grpc.aio.AioRpcError(
            grpc.StatusCode.INTERNAL,
            grpc.aio.Metadata(),
            grpc.aio.Metadata(),
            details="the stream ended without a message",
        )

    return call


def harvest(world: World, name: str, req: Message, resp: Message) -> None:
    if name == "ConsumerGroupHeartbeat" and resp.error_code == 0 and resp.HasField("member_id"):
        ms = world.members.setdefault(req.group_id, [])
        ms.append((resp.member_id, resp.member_epoch))
        del ms[:-20]
    elif name == "JoinGroup" and resp.error_code in (0, 79) and resp.member_id:
        cs = world.classic.setdefault(req.group_id.removeprefix("c"), [])
        cs.append((resp.member_id, resp.generation_id))
        del cs[:-20]
    elif name == "CreateTopics":
        for t in resp.topics:
            if t.error_code == 0 and len(t.topic_id) == 16:
                world.topic_ids.append(t.topic_id)
                del world.topic_ids[:-50]


async def run(address: str, total: int, *, seed: int, concurrency: int = 32) -> Report:
    allowed = documented_codes()
    table = methods()
    names = [m[0] for m in table]
    weights = [WEIGHTS.get(n, 1) for n in names]
    world = World()
    report = Report()
    began = time.monotonic()
    counter = iter(range(total))

    async with grpc.aio.insecure_channel(address) as channel:
        # The server answers while it loads its store (COORDINATOR_LOAD_IN_PROGRESS, in-band):
        # the fuzz starts once it serves, so that every answer is judged against a loaded one.
        await wait_loaded(channel)
        streaming = streaming_methods()
        calls = {
            name: (
                _first_message(channel.unary_stream(path))
                if name in streaming
                else channel.unary_unary(path, request_serializer=None, response_deserializer=None)
            )
            for name, path, _, _ in table
        }
        # A few real topics first, so that commits and subscriptions can hit something.
        create = admin_pb2.CreateTopicsRequest(
            topics=[
                admin_pb2.CreateTopicsRequest.CreatableTopic(name=f"t{i}", num_partitions=4)
                for i in range(4)
            ]
        )
        created = admin_pb2.CreateTopicsResponse.FromString(
            await calls["CreateTopics"](create.SerializeToString(), timeout=CALL_TIMEOUT_S)
        )
        world.topic_ids += [t.topic_id for t in created.topics if t.error_code == 0]

        async def worker(w: int) -> None:
            rng = random.Random(f"{seed}/{w}")
            fuzzer = Fuzzer(rng, world)
            for _n in counter:
                i = rng.choices(range(len(table)), weights)[0]
                name, _path, req_cls, resp_cls = table[i]
                garbage = rng.random() < 0.01
                req = req_cls()
                if not garbage:
                    fuzzer.fill(req)
                    fuzzer.shape(name, req)
                body = rng.randbytes(rng.randint(1, 64)) if garbage else req.SerializeToString()
                report.requests += 1
                report.by_method[name] += 1
                try:
                    raw = await calls[name](body, timeout=CALL_TIMEOUT_S)
                except grpc.aio.AioRpcError as exc:
                    if garbage and exc.code() == grpc.StatusCode.INVALID_ARGUMENT:
                        report.garbage += 1
                        continue
                    report.failures.append(
                        f"{name}: gRPC {exc.code().name} {exc.details()!r} for {req_summary(req, garbage, body)}"
                    )
                    continue
                resp = resp_cls.FromString(raw)
                codes = list(error_codes(resp))
                if not any(codes):
                    report.clean[name] += 1
                for code in codes:
                    report.codes[code] += 1
                    if code == UNKNOWN_SERVER_ERROR or (code != 0 and code not in allowed[name]):
                        report.failures.append(
                            f"{name}: undocumented or bug code {code} "
                            f"({first_message(resp)!r}) for {req_summary(req, garbage, body)}"
                        )
                        break
                if not garbage:
                    harvest(world, name, req, resp)

        await asyncio.gather(*(worker(w) for w in range(concurrency)))
        report.seconds = time.monotonic() - began
        health = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=""), timeout=10
        )
        if health.status != health_pb2.HealthCheckResponse.SERVING:
            report.failures.append(f"health after the run: {health.status}")
    return report


def first_message(resp: Message) -> str | None:
    for fd, value in resp.ListFields():
        if fd.name == "error_message":
            return str(value)
        if fd.type == FieldDescriptor.TYPE_MESSAGE:
            items = value if fd.is_repeated else [value]
            for item in items:
                found = first_message(item)
                if found:
                    return found
    return None


def req_summary(req: Message, garbage: bool, body: bytes) -> str:
    if garbage:
        return f"bytes {body[:32]!r}"
    text = str(req).replace("\n", " ")
    return text[:400]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--requests", type=int, default=200_000)
    p.add_argument("--seed", type=int, default=int(time.time()))
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--launcher", choices=("fork", "subprocess"), default="subprocess")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kip848-fuzz-") as tmp:
        data = Path(tmp) / "data"
        fork = ForkServer() if args.launcher == "fork" else None
        try:
            server = (
                fork.start(data, *SERVER_FLAGS)
                if fork is not None
                else start_subprocess(data, *SERVER_FLAGS)
            )
            try:
                report = asyncio.run(
                    run(server.address, args.requests, seed=args.seed, concurrency=args.concurrency)
                )
            finally:
                status = server.stop()
        finally:
            if fork is not None:
                fork.close()
        print(
            f"seed {args.seed}: {report.requests} requests ({report.garbage} undecodable) in "
            f"{report.seconds:.1f} s, {len(report.failures)} failures; exit {status}"
        )
        print("codes:", dict(sorted(report.codes.items())))
        print("clean answers:", dict(sorted(report.clean.items())))
        for line in report.failures[:30]:
            print("FAIL", line)
        bugs = [
            line
            for line in server.stderr().splitlines()
            if "Traceback" in line or "Unexpected error" in line
        ]
        for line in bugs[:10]:
            print("LOG", line)
        return 0 if not report.failures and status == 0 and not bugs else 1


if __name__ == "__main__":
    sys.exit(main())
