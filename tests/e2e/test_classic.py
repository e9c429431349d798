"""The legacy bridge end to end: a real ``kip848 serve``, Kafka's classic group APIs over gRPC,
with real embedded consumer-protocol bytes (encoded by kafka-python, as real clients write them).

Parked JoinGroup/SyncGroup calls use the sync stubs' ``.future()``; every wait is bounded."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from conftest import ServerProcess, join_request, owned
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment as KAssignment
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription as KSubscription

from kip848.v1 import classic_group_pb2 as pb
from kip848.v1 import classic_group_pb2_grpc
from legacy_bridge.protocol import decode_assignment

pytestmark = pytest.mark.postgresql_too

WAIT_S = 10.0
MEMBER_ID_REQUIRED = (
    "The group member needs to have a valid member id before actually entering a consumer group."
)
REBALANCE = "The group is rebalancing, so a rejoin is needed."
INT32_MIN = -(2**31)
J = pb.JoinGroupResponse
D = pb.DescribeGroupsResponse


def k_subscription(
    topics: list[str], owned_partitions: dict[str, list[int]] | None = None, version: int = 3
) -> bytes:
    tp = KSubscription.TopicPartition
    return KSubscription(
        version=version,
        topics=topics,
        user_data=None,
        owned_partitions=[
            tp(topic=t, partitions=ps) for t, ps in sorted((owned_partitions or {}).items())
        ],
        generation_id=-1,
        rack_id=None,
    ).encode(version=version)


def k_assignment(assigned: dict[str, list[int]], version: int = 3) -> bytes:
    tp = KAssignment.TopicPartition
    return KAssignment(
        version=version,
        assigned_partitions=[tp(topic=t, partitions=ps) for t, ps in sorted(assigned.items())],
        user_data=None,
    ).encode(version=version)


def assigned(raw: bytes) -> dict[str, list[int]]:
    return {t: sorted(ps) for t, ps in decode_assignment(raw).assigned_partitions}


def wait_until(what: str, check: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    for _ in range(10_000):
        if check():
            return
        if time.monotonic() > deadline:
            break
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


class Classic:
    """A classic client's view of one group (client id ``classic-<name>``)."""

    def __init__(self, s: ServerProcess, group_id: str, topics: list[str]) -> None:
        self.s = s
        self.stub = classic_group_pb2_grpc.ClassicGroupServiceStub(s.channel)
        self.group_id = group_id
        self.topics = topics

    @staticmethod
    def md(name: str) -> tuple[tuple[str, str]]:
        return (("client-id", f"classic-{name}"),)

    def join_request(
        self, member_id: str, owned_partitions: dict[str, list[int]] | None = None
    ) -> pb.JoinGroupRequest:
        return pb.JoinGroupRequest(
            group_id=self.group_id,
            session_timeout_ms=30_000,
            rebalance_timeout_ms=60_000,
            member_id=member_id,
            protocol_type="consumer",
            protocols=[
                pb.JoinGroupRequest.Protocol(
                    name="range", metadata=k_subscription(self.topics, owned_partitions)
                )
            ],
        )

    def join(self, member_id: str = "", name: str = "x", **kw: object) -> pb.JoinGroupResponse:
        return self.stub.JoinGroup(
            self.join_request(member_id, **kw), timeout=WAIT_S, metadata=self.md(name)
        )  # type: ignore[arg-type]

    def join_future(self, member_id: str, name: str = "x", **kw: object) -> grpc.Future:
        return self.stub.JoinGroup.future(
            self.join_request(member_id, **kw), timeout=WAIT_S, metadata=self.md(name)
        )  # type: ignore[arg-type]

    def new_member(self, name: str) -> str:
        first = self.join(name=name)
        assert first == J(
            error_code=79,
            error_message=MEMBER_ID_REQUIRED,
            generation_id=-1,
            member_id=first.member_id,
        )
        return first.member_id

    def sync_request(
        self, member_id: str, generation: int, plan: dict[str, bytes] | None = None
    ) -> pb.SyncGroupRequest:
        return pb.SyncGroupRequest(
            group_id=self.group_id,
            generation_id=generation,
            member_id=member_id,
            protocol_type="consumer",
            protocol_name="range",
            assignments=[
                pb.SyncGroupRequest.Assignment(member_id=k, assignment=v)
                for k, v in sorted((plan or {}).items())
            ],
        )

    def sync(
        self, member_id: str, generation: int, plan: dict[str, bytes] | None = None
    ) -> pb.SyncGroupResponse:
        return self.stub.SyncGroup(self.sync_request(member_id, generation, plan), timeout=WAIT_S)

    def heartbeat(self, member_id: str, generation: int) -> pb.HeartbeatResponse:
        return self.stub.Heartbeat(
            pb.HeartbeatRequest(
                group_id=self.group_id, generation_id=generation, member_id=member_id
            ),
            timeout=WAIT_S,
        )

    def leave(self, *member_ids: str) -> pb.LeaveGroupResponse:
        return self.stub.LeaveGroup(
            pb.LeaveGroupRequest(
                group_id=self.group_id,
                members=[pb.LeaveGroupRequest.MemberIdentity(member_id=x) for x in member_ids],
            ),
            timeout=WAIT_S,
        )

    def describe(self) -> pb.DescribeGroupsResponse.DescribedGroup:
        resp = self.stub.DescribeGroups(
            pb.DescribeGroupsRequest(group_ids=[self.group_id]), timeout=WAIT_S
        )
        assert resp.error_code == 0 and len(resp.groups) == 1, resp
        return resp.groups[0]

    def state(self) -> str:
        return self.describe().group_state

    def form(self, partitions: int) -> tuple[str, str, dict[str, list[int]], dict[str, list[int]]]:
        """Two dynamic members A (leader) and B through MEMBER_ID_REQUIRED, the join barrier (the
        initial delay twice: B arrives during the first one) and the leader's SyncGroup.
        Returns (a, b, a's partitions, b's partitions) of the only topic."""
        topic = self.topics[0]
        a = self.new_member("a")
        fa = self.join_future(a, "a")
        wait_until("A at the barrier", lambda: len(self.describe().members) == 1)
        assert self.state() == "PreparingRebalance"
        b = self.new_member("b")
        fb = self.join_future(b, "b")
        wait_until("B at the barrier", lambda: len(self.describe().members) == 2)
        self.s.advance(3_000)
        time.sleep(0.1)
        assert not fa.done() and not fb.done()  # KIP-134: B joined during the delay -> one more
        self.s.advance(3_000)
        meta = k_subscription(self.topics)
        common = {
            "generation_id": 1,
            "protocol_type": "consumer",
            "protocol_name": "range",
            "leader": a,
        }
        assert fa.result(timeout=WAIT_S) == J(
            **common,
            member_id=a,
            members=[  # type: ignore[arg-type]
                J.Member(member_id=a, metadata=meta),
                J.Member(member_id=b, metadata=meta),
            ],
        )
        assert fb.result(timeout=WAIT_S) == J(**common, member_id=b)  # type: ignore[arg-type]
        half = partitions // 2
        pa, pb_ = {topic: list(range(half))}, {topic: list(range(half, partitions))}
        follower = self.stub.SyncGroup.future(self.sync_request(b, 1), timeout=WAIT_S)
        time.sleep(0.1)  # the follower waits for the leader (parked)
        plan = {a: k_assignment(pa), b: k_assignment(pb_)}
        done = pb.SyncGroupResponse(protocol_type="consumer", protocol_name="range")
        assert self.sync(a, 1, plan) == pb.SyncGroupResponse(
            protocol_type="consumer", protocol_name="range", assignment=plan[a]
        )
        got = follower.result(timeout=WAIT_S)
        done.assignment = plan[b]
        assert got == done
        assert assigned(got.assignment) == pb_
        return a, b, pa, pb_


def not_classic(group_id: str) -> pb.DescribeGroupsResponse.DescribedGroup:
    """Kafka's DescribeGroups answer for a consumer group: it is not a classic group."""
    return D.DescribedGroup(
        group_id=group_id,
        group_state="Dead",
        error_code=69,
        error_message=f"Group {group_id} is not a classic group.",
        authorized_operations=INT32_MIN,
        generation_id=-1,
    )


def test_find_coordinator(manual_server: ServerProcess) -> None:
    stub = classic_group_pb2_grpc.ClassicGroupServiceStub(manual_server.channel)
    host, port = manual_server.address.rsplit(":", 1)
    C = pb.FindCoordinatorResponse.Coordinator
    got = stub.FindCoordinator(
        pb.FindCoordinatorRequest(key_type=0, coordinator_keys=["g1", "g2"]), timeout=WAIT_S
    )
    assert got == pb.FindCoordinatorResponse(
        coordinators=[
            C(key="g1", node_id=0, host=host, port=int(port)),
            C(key="g2", node_id=0, host=host, port=int(port)),
        ]
    )
    tx = stub.FindCoordinator(
        pb.FindCoordinatorRequest(key_type=1, coordinator_keys=["tx"]), timeout=WAIT_S
    )
    assert tx == pb.FindCoordinatorResponse(
        coordinators=[
            C(
                key="tx",
                node_id=-1,
                port=-1,
                error_code=42,
                error_message="Key type 1 is not served: this coordinator serves only groups (key type 0).",
            )
        ]
    )


def test_two_member_classic_group(manual_server: ServerProcess) -> None:
    s = manual_server
    s.create_topic("cl-two", 4)
    c = Classic(s, "g-cl-two", ["cl-two"])
    a, b, pa, pb_ = c.form(4)
    assert c.heartbeat(a, 1) == pb.HeartbeatResponse()
    assert c.heartbeat(b, 1) == pb.HeartbeatResponse()
    assert c.heartbeat(b, 7) == pb.HeartbeatResponse(
        error_code=22,
        error_message="The received generation id 7 does not match the generation 1 of group g-cl-two.",
    )
    assert c.heartbeat("ghost", 1) == pb.HeartbeatResponse(
        error_code=25, error_message="Member ghost is not a member of group g-cl-two."
    )
    M = D.Member
    meta = k_subscription(["cl-two"])
    assert c.describe() == D.DescribedGroup(
        group_id="g-cl-two",
        group_state="Stable",
        protocol_type="consumer",
        protocol_data="range",
        authorized_operations=INT32_MIN,
        generation_id=1,
        members=[
            M(
                member_id=a,
                client_id="classic-a",
                client_host="/127.0.0.1",
                member_metadata=meta,
                member_assignment=k_assignment(pa),
            ),
            M(
                member_id=b,
                client_id="classic-b",
                client_host="/127.0.0.1",
                member_metadata=meta,
                member_assignment=k_assignment(pb_),
            ),
        ],
    )
    # A leaves: B hears REBALANCE_IN_PROGRESS, rejoins alone (it completes the barrier itself).
    assert c.leave(a) == pb.LeaveGroupResponse(
        members=[pb.LeaveGroupResponse.MemberResponse(member_id=a)]
    )
    assert c.heartbeat(b, 1) == pb.HeartbeatResponse(error_code=27, error_message=REBALANCE)
    meta = k_subscription(["cl-two"])
    assert c.join(b, "b") == J(
        generation_id=2,
        protocol_type="consumer",
        protocol_name="range",
        leader=b,
        member_id=b,
        members=[J.Member(member_id=b, metadata=meta)],
    )
    plan = {b: k_assignment({"cl-two": [0, 1, 2, 3]})}
    assert c.sync(b, 2, plan) == pb.SyncGroupResponse(
        protocol_type="consumer", protocol_name="range", assignment=plan[b]
    )
    assert c.leave(b, "ghost") == pb.LeaveGroupResponse(
        members=[
            pb.LeaveGroupResponse.MemberResponse(member_id=b),
            pb.LeaveGroupResponse.MemberResponse(
                member_id="ghost",
                error_code=25,
                error_message="Member ghost is not a member of group g-cl-two.",
            ),
        ]
    )
    # Kafka keeps the protocol type of a group that became empty (only the protocol name goes).
    assert c.describe() == D.DescribedGroup(
        group_id="g-cl-two",
        group_state="Empty",
        protocol_type="consumer",
        authorized_operations=INT32_MIN,
        generation_id=3,  # each leave completed a rebalance, the last one to an empty group
    )


def test_in_band_errors(manual_server: ServerProcess) -> None:
    c = Classic(manual_server, "", ["x"])
    assert c.join(name="e") == J(
        error_code=24, error_message="Group id '' is invalid.", generation_id=-1
    )
    assert c.heartbeat("m", 1) == pb.HeartbeatResponse(
        error_code=24, error_message="Group id '' is invalid."
    )
    c.group_id = "g-cl-unknown"
    assert c.heartbeat("m", 1) == pb.HeartbeatResponse(
        error_code=25, error_message="Group g-cl-unknown not found."
    )
    assert c.sync("m", 1) == pb.SyncGroupResponse(
        error_code=25, error_message="Group g-cl-unknown not found."
    )
    assert c.join("m", "e") == J(
        error_code=25,
        error_message="Group g-cl-unknown has no member m.",
        generation_id=-1,
        member_id="m",
    )
    assert c.describe() == D.DescribedGroup(
        group_id="g-cl-unknown",
        group_state="Dead",
        error_code=69,
        error_message="Group g-cl-unknown not found.",
        authorized_operations=INT32_MIN,
        generation_id=-1,
    )
    bad = pb.JoinGroupRequest(
        group_id="g-cl-bad",
        session_timeout_ms=1,
        member_id="",
        protocol_type="consumer",
        protocols=[pb.JoinGroupRequest.Protocol(name="range", metadata=b"")],
    )
    assert c.stub.JoinGroup(bad, timeout=WAIT_S) == J(
        error_code=26,
        error_message="SessionTimeoutMs 1 is out of range [6000, 1800000].",
        generation_id=-1,
    )


def _consumer_view(s: ServerProcess, group_id: str) -> dict[str, tuple[int, list[int], int]]:
    """member id -> (member epoch, assigned partitions, member type 0 classic / 1 consumer)."""
    (g,) = s.describe(group_id).groups
    assert g.error_code == 0, g
    return {
        x.member_id: (
            x.member_epoch,
            sorted(p for tp in x.assignment.topic_partitions for p in tp.partitions),
            x.member_type,
        )
        for x in g.members
    }


def test_online_upgrade_then_downgrade(manual_server: ServerProcess) -> None:
    s = manual_server
    s.create_topic("cl-up", 4)
    c = Classic(s, "g-cl-up", ["cl-up"])
    a, b, pa, pb_ = c.form(4)
    # A KIP-848 member joins: the classic group is converted; the classic members keep their
    # partitions (generation 1 = member epoch 1); K waits for them.
    k = s.heartbeat(client_id="k", **join_request("g-cl-up", ["cl-up"], member_id="K"))
    assert (k.error_code, k.member_epoch, list(k.assignment.assigned_topic_partitions)) == (
        0,
        2,
        [],
    )
    assert _consumer_view(s, "g-cl-up") == {a: (1, [0, 1], 0), b: (1, [2, 3], 0), "K": (2, [], 1)}
    # Each classic member reconciles alone: REBALANCE_IN_PROGRESS -> JoinGroup -> SyncGroup
    # (a cooperative client: it reports what it owns and keeps it; it rejoins after revoking).
    owns = {a: pa["cl-up"], b: pb_["cl-up"]}
    for mid, name in ((a, "a"), (b, "b")):
        for _ in range(4):
            gen = _consumer_view(s, "g-cl-up")[mid][0]
            hb = c.heartbeat(mid, gen)
            if hb.error_code == 0:
                break
            assert hb == pb.HeartbeatResponse(error_code=27, error_message=REBALANCE)
            joined = c.join(mid, name, owned_partitions={"cl-up": owns[mid]})
            # generation = member epoch: 1 while the member still has to revoke, then 2
            assert joined == J(
                generation_id=joined.generation_id,
                protocol_type="consumer",
                protocol_name="range",
                member_id=mid,
            ) and joined.generation_id in (1, 2)
            synced = c.sync(mid, joined.generation_id)
            kept = assigned(synced.assignment)["cl-up"]
            assert synced == pb.SyncGroupResponse(
                protocol_type="consumer",
                protocol_name="range",
                assignment=k_assignment({"cl-up": kept}),
            )
            assert set(kept) <= set(owns[mid])  # never handed a partition someone else still owns
            owns[mid] = kept
        else:
            raise AssertionError(f"{mid} did not settle")
    k2 = s.heartbeat(
        client_id="k", group_id="g-cl-up", member_id="K", member_epoch=2, topic_partitions=owned()
    )
    gave = [p for x in k2.assignment.assigned_topic_partitions for p in x.partitions]
    assert (k2.error_code, k2.member_epoch, len(gave)) == (0, 2, 1)
    # Sticky: each classic member kept a subset of what it had; exactly one partition moved to K.
    view = _consumer_view(s, "g-cl-up")
    assert view == {a: (2, owns[a], 0), b: (2, owns[b], 0), "K": (2, gave, 1)}
    assert sorted(owns[a] + owns[b] + gave) == [0, 1, 2, 3]
    assert (
        len(owns[a]) + len(owns[b]) == 3
        and set(owns[a]) <= set(pa["cl-up"])
        and set(owns[b]) <= set(pb_["cl-up"])
    )
    # DescribeGroups: a consumer group, even with classic members, is not a classic group.
    assert c.describe() == not_classic("g-cl-up")
    # K leaves: only classic members remain -> the group is downgraded and rebalances classically.
    left = s.heartbeat(client_id="k", group_id="g-cl-up", member_id="K", member_epoch=-1)
    assert (left.error_code, left.member_epoch) == (0, -1)
    assert s.describe("g-cl-up").groups[0].error_code == 69
    assert c.state() == "PreparingRebalance"
    # As Kafka: the classic generation is the epoch the members had (2): asked to rejoin, not
    # fenced with ILLEGAL_GENERATION.
    assert c.heartbeat(a, 2) == pb.HeartbeatResponse(error_code=27, error_message=REBALANCE)
    fa = c.join_future(a, "a")
    time.sleep(0.1)
    jb = c.join(b, "b")  # the last member completes the barrier
    ja = fa.result(timeout=WAIT_S)
    assert (ja.generation_id, jb.generation_id, ja.leader, jb.leader) == (
        3,
        3,
        ja.leader,
        ja.leader,
    )
    leader, follower = (a, b) if ja.leader == a else (b, a)
    plan = {leader: k_assignment({"cl-up": [0, 1]}), follower: k_assignment({"cl-up": [2, 3]})}
    f = c.stub.SyncGroup.future(c.sync_request(follower, 3), timeout=WAIT_S)
    time.sleep(0.1)
    assert c.sync(leader, 3, plan).assignment == plan[leader]
    assert f.result(timeout=WAIT_S) == pb.SyncGroupResponse(
        protocol_type="consumer", protocol_name="range", assignment=plan[follower]
    )
    assert c.state() == "Stable"


def test_parked_join_is_answered_on_shutdown(start_server, tmp_path: Path) -> None:
    s: ServerProcess = start_server()
    s.create_topic("cl-stop", 2)
    c = Classic(s, "g-cl-stop", ["cl-stop"])
    a = c.new_member("a")
    fa = c.join_future(a, "a")
    wait_until("A at the barrier", lambda: len(c.describe().members) == 1)
    started = time.monotonic()
    s.signal(signal.SIGTERM)
    assert fa.result(timeout=WAIT_S) == J(
        error_code=15,
        error_message="The coordinator is shutting down.",
        generation_id=-1,
        member_id=a,
    )
    assert s.wait() == 0, s.stderr_text()
    assert time.monotonic() - started < 5  # not left to the 10 s grace


def test_state_survives_sigkill_mid_migration(start_server, tmp_path: Path) -> None:
    data = tmp_path / "data"
    s: ServerProcess = start_server(data)
    s.create_topic("cl-kill", 4)
    c = Classic(s, "g-cl-kill", ["cl-kill"])
    a, b, pa, pb_ = c.form(4)
    before = c.describe()
    s.kill9()
    # 1. A stable classic group survives a SIGKILL: same members and assignments, generation 1.
    s = start_server(data)
    c = Classic(s, "g-cl-kill", ["cl-kill"])
    assert c.describe() == before
    assert c.heartbeat(a, 1) == pb.HeartbeatResponse()
    # 2. Upgraded by a KIP-848 member, then SIGKILL: the consumer group comes back as it was.
    k = s.heartbeat(client_id="k", **join_request("g-cl-kill", ["cl-kill"], member_id="K"))
    assert k.member_epoch == 2
    view = _consumer_view(s, "g-cl-kill")
    assert view == {a: (1, [0, 1], 0), b: (1, [2, 3], 0), "K": (2, [], 1)}
    s.kill9()
    s = start_server(data)
    c = Classic(s, "g-cl-kill", ["cl-kill"])
    assert _consumer_view(s, "g-cl-kill") == view
    assert c.heartbeat(a, 1) == pb.HeartbeatResponse(error_code=27, error_message=REBALANCE)
    # 3. K leaves (downgrade), SIGKILL: a classic group at generation 2 (the members' epoch).
    assert (
        s.heartbeat(
            client_id="k", group_id="g-cl-kill", member_id="K", member_epoch=-1
        ).member_epoch
        == -1
    )
    downgraded = (
        c.describe()
    )  # the transient rebalance is not durable (as in Kafka): Stable after a load
    assert downgraded.group_state == "PreparingRebalance"
    s.kill9()
    s = start_server(data)
    c = Classic(s, "g-cl-kill", ["cl-kill"])
    got = c.describe()
    meta = k_subscription(["cl-kill"])
    assert got == D.DescribedGroup(
        group_id="g-cl-kill",
        group_state="Stable",
        protocol_type="consumer",
        protocol_data="range",
        authorized_operations=INT32_MIN,
        generation_id=2,
        members=[
            D.Member(
                member_id=x.member_id,
                client_id=x.client_id,
                client_host=x.client_host,
                member_metadata=meta,
                member_assignment=y.member_assignment,
            )
            for x, y in zip(downgraded.members, got.members, strict=True)
        ],
    )
    # The serialized assignments are the consumer group's target: a subset of what each had.
    got_assigned = {
        x.member_id: assigned(x.member_assignment).get("cl-kill", []) for x in got.members
    }
    assert set(got_assigned) == {a, b}
    assert set(got_assigned[a]) <= set(pa["cl-kill"]) and set(got_assigned[b]) <= set(
        pb_["cl-kill"]
    )
    assert c.heartbeat(a, 2) == pb.HeartbeatResponse()
    assert s.stop() == 0, s.stderr_text()


def test_consumer_member_on_classic_apis_is_unknown(manual_server: ServerProcess) -> None:
    s = manual_server
    s.create_topic("cl-mixed", 2)
    s.heartbeat(**join_request("g-cl-mixed", ["cl-mixed"], member_id="K"))
    c = Classic(s, "g-cl-mixed", ["cl-mixed"])
    assert c.heartbeat("K", 1) == pb.HeartbeatResponse(
        error_code=25, error_message="Member K does not use the classic protocol."
    )
    assert c.leave("K") == pb.LeaveGroupResponse(
        members=[
            pb.LeaveGroupResponse.MemberResponse(
                member_id="K",
                error_code=25,
                error_message="Member K does not use the classic protocol.",
            )
        ]
    )
    assert s.describe("g-cl-mixed").groups[0].members[0].member_type == 1
    # DescribeGroups (as Kafka's latest version): not a classic group, whole.
    assert c.describe() == not_classic("g-cl-mixed")


def test_find_coordinator_answers_the_advertised_address(start_server) -> None:
    """Kafka's advertised.listeners: clients are sent where they can reach the coordinator,
    not to the address it binds (here 127.0.0.1:0)."""
    server = start_server(None, "--advertised-address", "coordinator.example:19094")
    stub = classic_group_pb2_grpc.ClassicGroupServiceStub(server.channel)
    got = stub.FindCoordinator(
        pb.FindCoordinatorRequest(key_type=0, coordinator_keys=["g"]), timeout=WAIT_S
    )
    assert got == pb.FindCoordinatorResponse(
        coordinators=[
            pb.FindCoordinatorResponse.Coordinator(
                key="g", node_id=0, host="coordinator.example", port=19094
            )
        ]
    )


def test_concurrent_joins_on_many_shards_reach_their_callers(start_server) -> None:
    """Regression (#12 item 0): parked classic requests are numbered per shard; two shards'
    waiters used to share one table keyed by that number, so callers received another group's
    JoinGroup answer or none. 12 two-step joins on 12 new groups spread over the default 50
    coordinator partitions, all parked at once: every caller gets its own group's answer."""
    from coordinator.routing import partition_for

    s: ServerProcess = start_server(
        None, "--set", "group.initial.rebalance.delay.ms=300", clock="system"
    )
    s.create_topic("cl-many", 4)
    groups = [f"g-many-{n}" for n in range(12)]
    assert len({partition_for(g, 50) for g in groups}) == 12  # each group its own shard
    clients = [Classic(s, g, ["cl-many"]) for g in groups]
    members = [c.new_member("m") for c in clients]
    futures = [c.join_future(mid, "m") for c, mid in zip(clients, members, strict=True)]
    meta = k_subscription(["cl-many"])
    for c, mid, fut in zip(clients, members, futures, strict=True):
        got = fut.result(timeout=WAIT_S)
        assert got == J(
            generation_id=1,
            protocol_type="consumer",
            protocol_name="range",
            leader=mid,
            member_id=mid,
            members=[J.Member(member_id=mid, metadata=meta)],
        ), c.group_id


def test_a_static_consumer_member_replaces_its_classic_incarnation_at_once(
    manual_server: ServerProcess,
) -> None:
    """A rolling upgrade of a static fleet (KAFKA-17228): the restarted instance joins with the
    consumer protocol under its group.instance.id while its classic incarnation (which sends
    no LeaveGroup) is still in the group: it is not told UNRELEASED_INSTANCE_ID until that one
    expires, it takes its place at once (the classic group upgraded on the way), and the old
    incarnation's next Heartbeat and JoinGroup are fenced (FENCED_INSTANCE_ID)."""
    s = manual_server
    s.create_topic("cl-st", 4)
    c = Classic(s, "g-cl-st", ["cl-st"])

    def static_join(instance: str, member_id: str = "") -> pb.JoinGroupRequest:
        req = c.join_request(member_id)
        req.group_instance_id = instance
        return req

    # Two static classic members, Stable at generation 1 (no MEMBER_ID_REQUIRED for them).
    fa = c.stub.JoinGroup.future(static_join("i-a"), timeout=WAIT_S, metadata=c.md("a"))
    wait_until("A at the barrier", lambda: len(c.describe().members) == 1)
    fb = c.stub.JoinGroup.future(static_join("i-b"), timeout=WAIT_S, metadata=c.md("b"))
    wait_until("B at the barrier", lambda: len(c.describe().members) == 2)
    s.advance(3_000)
    time.sleep(0.1)
    s.advance(3_000)
    ja, jb = fa.result(timeout=WAIT_S), fb.result(timeout=WAIT_S)
    a, b = ja.member_id, jb.member_id
    leader, follower = (a, b) if ja.leader == a else (b, a)
    plan = {a: k_assignment({"cl-st": [0, 1]}), b: k_assignment({"cl-st": [2, 3]})}
    f = c.stub.SyncGroup.future(c.sync_request(follower, 1), timeout=WAIT_S)
    time.sleep(0.1)
    assert c.sync(leader, 1, plan).assignment == plan[leader]
    assert f.result(timeout=WAIT_S).assignment == plan[follower]
    assert c.state() == "Stable"
    # A restarts as a KIP-848 client under i-a; its classic incarnation is still there.
    k = s.heartbeat(
        client_id="k", **join_request("g-cl-st", ["cl-st"], member_id="K", instance_id="i-a")
    )
    # Replaced at once: the group (upgraded) bumps to epoch 2 and K has A's partitions.
    assigned_k = sorted(p for x in k.assignment.assigned_topic_partitions for p in x.partitions)
    assert (k.error_code, k.member_id, k.member_epoch, assigned_k) == (0, "K", 2, [0, 1])
    view = _consumer_view(s, "g-cl-st")
    assert sorted(view) == sorted([b, "K"]) and view["K"][2] == 1
    # The old incarnation is fenced on its next requests (Kafka: FENCED_INSTANCE_ID).
    fenced = f"Static member {a} with instance id i-a was fenced by member K."
    hb = c.stub.Heartbeat(
        pb.HeartbeatRequest(
            group_id="g-cl-st", generation_id=1, member_id=a, group_instance_id="i-a"
        ),
        timeout=WAIT_S,
    )
    assert hb == pb.HeartbeatResponse(error_code=82, error_message=fenced)
    rejoin = c.stub.JoinGroup(static_join("i-a", a), timeout=WAIT_S, metadata=c.md("a"))
    assert (rejoin.error_code, rejoin.error_message) == (82, fenced)
    # B, still classic, is told to rejoin for the new target.
    assert c.heartbeat(b, 1) == pb.HeartbeatResponse(error_code=27, error_message=REBALANCE)


def test_a_sync_whose_record_is_too_large_fails_and_the_group_recovers(
    manual_server: ServerProcess,
) -> None:
    """The leader's SyncGroup gives B an assignment of 1.1 MB: the group's GroupMetadata record
    would be larger than ``message.max.bytes`` (1048588 by default), so it fails as Kafka's
    append does (MESSAGE_TOO_LARGE, answered UNKNOWN_SERVER_ERROR to the leader and to the
    follower waiting), nothing of it is kept and the group rebalances; the next generation,
    with assignments that fit, is Stable (docs/legacy_bridge.md, "A GroupMetadata record too
    large")."""
    s = manual_server
    s.create_topic("cl-big", 2)
    c = Classic(s, "g-cl-big", ["cl-big"])
    a, b, pa, pb_ = c.form(2)
    fa, fb = c.join_future(a, "a"), c.join_future(b, "b")
    common = {"protocol_type": "consumer", "protocol_name": "range", "leader": a}
    assert fa.result(timeout=WAIT_S).generation_id == 2
    assert fb.result(timeout=WAIT_S) == J(**common, generation_id=2, member_id=b)  # type: ignore[arg-type]
    follower = c.stub.SyncGroup.future(c.sync_request(b, 2), timeout=WAIT_S)
    time.sleep(0.1)  # the follower waits for the leader (parked)
    huge = KAssignment(
        version=3,
        assigned_partitions=[KAssignment.TopicPartition(topic="cl-big", partitions=[1])],
        user_data=b"u" * 1_100_000,
    ).encode(version=3)
    failed = pb.SyncGroupResponse(
        error_code=-1,
        error_message="The GroupMetadata record of group g-cl-big would be 1100478 bytes,"
        " larger than message.max.bytes (1048588): MESSAGE_TOO_LARGE.",
    )
    assert c.sync(a, 2, {a: k_assignment(pa), b: huge}) == failed
    assert follower.result(timeout=WAIT_S) == failed
    described = c.describe()
    assert (described.group_state, described.generation_id) == ("PreparingRebalance", 2)
    assert [(x.member_id, x.member_assignment) for x in described.members] == [(a, b""), (b, b"")]
    fa, fb = c.join_future(a, "a"), c.join_future(b, "b")
    assert fa.result(timeout=WAIT_S).generation_id == 3
    assert fb.result(timeout=WAIT_S) == J(**common, generation_id=3, member_id=b)  # type: ignore[arg-type]
    follower = c.stub.SyncGroup.future(c.sync_request(b, 3), timeout=WAIT_S)
    time.sleep(0.1)
    plan = {a: k_assignment(pa), b: k_assignment(pb_)}
    assert c.sync(a, 3, plan) == pb.SyncGroupResponse(
        protocol_type="consumer", protocol_name="range", assignment=plan[a]
    )
    assert follower.result(timeout=WAIT_S) == pb.SyncGroupResponse(
        protocol_type="consumer", protocol_name="range", assignment=plan[b]
    )
    described = c.describe()
    assert (described.group_state, described.generation_id) == ("Stable", 3)
    assert [(x.member_id, x.member_assignment) for x in described.members] == [
        (a, plan[a]),
        (b, plan[b]),
    ]
