"""What each constructor and call raises, as docs/client.md ("Errors each call can raise") says.

No coordinator is needed: a member pointed at an address where nothing listens shows the
retrying calls bounded by the caller's own timeout, and bare gRPC servers answering
OffsetFetch or ConsumerGroupHeartbeat with GROUP_AUTHORIZATION_FAILED show the in-band error
of ``committed`` and a failed member.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import grpc
import pytest

from kip848.client import (
    BlockingGroupMember,
    ClientError,
    CommitFailedError,
    ErrorCode,
    GroupMember,
    KafkaError,
    MemberFailedError,
    TopicPartition,
)
from kip848.client.member import Subscription
from kip848.v1 import consumer_group_pb2, consumer_group_pb2_grpc, offsets_pb2, offsets_pb2_grpc

TP = TopicPartition("orders", 0)
FAST = {"retry_backoff_ms": 20, "retry_backoff_max_ms": 50, "request_timeout_ms": 200}


@pytest.fixture
def nowhere() -> str:
    """An address on this machine where nothing listens (a port just freed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"group_id": ""}, "group_id must not be empty"),
        ({"group_id": "  "}, "group_id must not be empty"),
        ({"instance_id": ""}, "instance_id must be None or non-empty"),
        ({"rack_id": ""}, "rack_id must be None or non-empty"),
        ({"topics": None}, "subscribe to topics, a pattern, or both"),
        ({"rebalance_timeout_ms": 0}, "rebalance_timeout_ms must be > 0"),
        ({"request_timeout_ms": -1}, "request_timeout_ms must be > 0"),
        ({"retry_backoff_ms": 0}, "retry_backoff_ms must be > 0"),
        ({"retry_backoff_max_ms": 10}, "retry_backoff_max_ms must be >= retry_backoff_ms"),
    ],
)
@pytest.mark.parametrize("kind", [GroupMember, BlockingGroupMember])
def test_the_constructors_refuse_bad_arguments_with_value_error(
    kind: Any, options: dict[str, Any], message: str
) -> None:
    args = {"group_id": "g", "topics": ["orders"], **options}
    with pytest.raises(ValueError, match=message):
        kind("127.0.0.1:1", args.pop("group_id"), **args)


def test_topics_as_one_string_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="not one string"):
        GroupMember("127.0.0.1:1", "g", topics="orders")


def test_the_exceptions_form_one_family() -> None:
    assert issubclass(KafkaError, ClientError)
    assert issubclass(MemberFailedError, KafkaError)
    assert issubclass(CommitFailedError, KafkaError)


def test_a_member_at_a_wrong_address_retries_until_the_callers_timeout(nowhere: str) -> None:
    async def story() -> None:
        member = GroupMember(nowhere, "g", topics=["orders"], **FAST)
        with pytest.raises(RuntimeError, match="start"):
            await member.wait_joined()  # before start()
        await member.start()
        with pytest.raises(RuntimeError, match="starts once"):
            await member.start()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.5):
                await member.wait_stable()
        assert member.failure is None  # not failed: still retrying
        with pytest.raises(TimeoutError):
            await member.committed([TP], timeout=0.3)
        with pytest.raises(CommitFailedError) as failed:
            await member.commit({TP: 5}, timeout=0.3)
        assert failed.value.errors == {TP: ErrorCode.STALE_MEMBER_EPOCH}  # not its partition
        async with asyncio.timeout(5):
            await member.close(timeout=0.5)  # returns: the leave goes nowhere, bounded

    asyncio.run(story())


def test_the_blocking_member_raises_the_builtin_timeout_error(nowhere: str) -> None:
    member = BlockingGroupMember(nowhere, "g", topics=["orders"], **FAST)
    with member:
        with pytest.raises(TimeoutError):
            member.wait_joined(timeout=0.5)
        with pytest.raises(TimeoutError):
            member.committed([TP], timeout=0.3)
        with pytest.raises(CommitFailedError):
            member.commit({TP: 1}, timeout=0.3)
        with pytest.raises(CommitFailedError):
            member.commit_async({TP: 1}, timeout=0.3).result(timeout=5)
        on_loop = asyncio.run_coroutine_threadsafe(_call_on_loop(member), member._loop)
        assert (
            on_loop.result(timeout=5)
            == "RuntimeError: blocking call from the member's own event loop"
        )
        assert member.failure is None


async def _call_on_loop(member: BlockingGroupMember) -> str:
    try:
        member.wait_joined(timeout=1)
    except RuntimeError as exc:
        return f"RuntimeError: {exc}"
    return "no error"


class RefusingOffsets(offsets_pb2_grpc.OffsetServiceServicer):
    """OffsetFetch answered GROUP_AUTHORIZATION_FAILED, as a coordinator refusing the group."""

    async def OffsetFetch(self, request: Any, context: Any) -> Any:
        return offsets_pb2.OffsetFetchResponse(
            groups=[
                offsets_pb2.OffsetFetchResponse.Group(
                    group_id=request.groups[0].group_id,
                    error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                    error_message="Not authorized.",
                )
            ]
        )


def test_committed_raises_the_coordinators_in_band_error() -> None:
    async def story() -> None:
        server = grpc.aio.server()
        offsets_pb2_grpc.add_OffsetServiceServicer_to_server(RefusingOffsets(), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        member = GroupMember(
            f"127.0.0.1:{port}", "g", topics=["orders"], find_coordinator=False, **FAST
        )
        await member.start()
        try:
            with pytest.raises(KafkaError) as refused:
                await member.committed([TP], timeout=5)
            assert refused.value.code == ErrorCode.GROUP_AUTHORIZATION_FAILED
            assert not isinstance(refused.value, CommitFailedError)
        finally:
            await member.close(timeout=0.5)
            await server.stop(None)

    asyncio.run(story())


class RefusingGroup(consumer_group_pb2_grpc.ConsumerGroupServiceServicer):
    """ConsumerGroupHeartbeat answered GROUP_AUTHORIZATION_FAILED: the member fails."""

    async def ConsumerGroupHeartbeat(self, request: Any, context: Any) -> Any:
        return consumer_group_pb2.ConsumerGroupHeartbeatResponse(
            error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, error_message="Not authorized."
        )


def test_update_subscription_refuses_what_it_cannot_do(nowhere: str) -> None:
    async def story() -> None:
        member = GroupMember(nowhere, "g", topics=["orders"], **FAST)
        with pytest.raises(TypeError, match="not one string"):
            await member.update_subscription("refunds")  # not r, e, f, u, n, d and s
        with pytest.raises(ValueError, match="subscribe to topics, a pattern, or both"):
            await member.update_subscription()
        await member.update_subscription(["orders", "refunds"])  # before start: the join's
        assert member.sans_io.subscription == Subscription(topics=("orders", "refunds"))
        await member.start()
        await member.close(timeout=0.5)
        with pytest.raises(RuntimeError, match="the member is closed"):
            await member.update_subscription(["orders"])

        server = grpc.aio.server()
        consumer_group_pb2_grpc.add_ConsumerGroupServiceServicer_to_server(RefusingGroup(), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        failed = GroupMember(
            f"127.0.0.1:{port}", "g", topics=["orders"], find_coordinator=False, **FAST
        )
        await failed.start()
        try:
            with pytest.raises(MemberFailedError):
                async with asyncio.timeout(5):
                    await failed.wait_joined()
            with pytest.raises(MemberFailedError) as refused:
                await failed.update_subscription(["refunds"])
            assert refused.value.code == ErrorCode.GROUP_AUTHORIZATION_FAILED
            assert failed.sans_io.subscription == Subscription(topics=("orders",))
        finally:
            await failed.close(timeout=0.5)
            await server.stop(None)

    asyncio.run(story())


def test_blocking_update_subscription_refuses_one_string(nowhere: str) -> None:
    member = BlockingGroupMember(nowhere, "g", topics=["orders"], **FAST)
    with member, pytest.raises(TypeError, match="not one string"):
        member.update_subscription("refunds")
    with pytest.raises(RuntimeError, match="the member is closed"):
        member.update_subscription(["refunds"])


def test_tls_credentials_name_the_file_that_is_not_what_it_should_be(tmp_path: Any) -> None:
    from kip848.client import tls_credentials

    notes = tmp_path / "notes.txt"
    notes.write_text("not a certificate\n")
    with pytest.raises(ValueError) as bad:
        tls_credentials(str(notes))
    assert str(bad.value) == (
        f"{notes} holds no PEM certificate to trust (NO_CERTIFICATE_OR_CRL_FOUND)"
    )
    with pytest.raises(ValueError) as bad:
        tls_credentials(None, None, str(notes))
    assert str(bad.value) == f"a private key ({notes}) was given without its certificate"
    with pytest.raises(ValueError) as bad:
        tls_credentials(None, str(notes))
    assert str(bad.value) == (
        f"{notes}: not a PEM certificate chain with its private key (the key may be in the "
        "certificate's file or apart)"
    )
    with pytest.raises(FileNotFoundError):
        tls_credentials(str(tmp_path / "missing.pem"))
    assert isinstance(tls_credentials(), grpc.ChannelCredentials)  # the system's CAs


def test_a_blocking_member_refused_at_construction_leaves_nothing_open(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """BlockingGroupMember makes its event loop and callback thread before the member checks
    its arguments: when that check refuses them (ValueError), both are closed again. Before,
    the loop was left open (a ResourceWarning at collection) and the executor too."""
    made: list[asyncio.AbstractEventLoop] = []
    new_loop = asyncio.new_event_loop

    def recorded() -> asyncio.AbstractEventLoop:
        loop = new_loop()
        made.append(loop)
        return loop

    monkeypatch.setattr(asyncio, "new_event_loop", recorded)
    with pytest.raises(ValueError, match="group_id must not be empty"):
        BlockingGroupMember("127.0.0.1:9", "", topics=["orders"])
    assert [loop.is_closed() for loop in made] == [True]
