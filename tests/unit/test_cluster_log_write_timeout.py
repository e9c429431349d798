"""A write to the cluster log held up in the store (the memory store's gate, as a COMMIT waiting
for PostgreSQL) answers the request that made it REQUEST_TIMED_OUT, as Kafka's controller
answers a metadata write that did not complete in time (driver.py "Write timeout"): per API, in
the API's shape, with a message saying the outcome is unknown. CreateTopics, CreatePartitions
and DeleteTopics are bounded by the request's ``timeout_ms`` (Kafka's ``timeoutMs``), the
others by ``offsets.commit.timeout.ms``. The write goes on: once it lands, the change stands;
if it fails, nothing of it is applied. Group requests in the same held batch still get the
group coordinator's COORDINATOR_NOT_AVAILABLE."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from builders import commit, make_runtime
from test_runtime_write_timeout import answered_at, fetched
from test_server_authorization import ADMIN, EVERY_ACL

from coordinator.core.errors import ErrorCode
from coordinator.core.topics import NewTopic
from coordinator.runtime import CoordinatorRuntime, RuntimeState
from coordinator.runtime.driver import WriteTimeoutError
from coordinator.runtime.store import MemoryRecordStore
from coordinator.security import scram
from coordinator.security.acls import AclOperation, ResourceType
from coordinator.security.authorizer import AuthorizerConfig
from coordinator.security.metadata import ScramUpsertion
from coordinator.security.scram import ScramMechanism
from coordinator.server.api import (
    AclSpec,
    AlterConfig,
    AlterResource,
    AlterScramCredentials,
    ConfigResource,
    DescribeConfigs,
    IncrementalAlterConfigs,
    TopicChanges,
)
from coordinator.server.service import CoordinatorService

WRITE_TIMEOUT_MS = 300
REQUEST_TIMEOUT_MS = 100
UNKNOWN = "its outcome is unknown"
SESSION_TIMEOUT = "consumer.session.timeout.ms"


def acl(name: str) -> AclSpec:
    return AclSpec(
        resource_type=int(ResourceType.TOPIC),
        resource_name=name,
        pattern_type=3,
        principal="User:alice",
        host="*",
        operation=int(AclOperation.READ),
        permission_type=3,
    )


def upsert(name: str) -> ScramUpsertion:
    mech = ScramMechanism.SCRAM_SHA_256
    salt = b"0123456789abcdef"
    return ScramUpsertion(
        name=name,
        mechanism=int(mech),
        iterations=4096,
        salt=salt,
        salted_password=scram.salted_password(mech, "pw", salt, 4096),
    )


@dataclass
class Admin:
    rt: CoordinatorRuntime
    store: MemoryRecordStore
    service: CoordinatorService

    async def topics(self) -> dict[str, int]:
        listed = (await self.service.list_topics(None, ADMIN)).value or []
        return {t.name: t.num_partitions for t in listed}

    async def acls(self) -> list[str]:
        bindings = (await self.service.describe_acls(EVERY_ACL, ADMIN)).value or []
        return sorted(b.resource_name for b in bindings)

    async def users(self) -> list[str]:
        described = (await self.service.describe_user_scram_credentials(None, ADMIN)).value
        return sorted(u.user for u in described or [])

    async def session_timeout(self, group: str) -> str | None:
        asked = DescribeConfigs(resources=(ConfigResource(resource_type=32, resource_name=group),))
        (result,) = (await self.service.describe_configs(asked, ADMIN)).value or []
        return next((c.value for c in result.configs if c.name == SESSION_TIMEOUT), None)


@asynccontextmanager
async def started_admin(**settings: str) -> AsyncIterator[Admin]:
    """A started runtime (``settings`` by Kafka config name) with topic t (2 partitions) and
    one ACL (on topic "kept") durable, and its service with User:admin a super user."""
    store = MemoryRecordStore(partitions=1)
    rt = make_runtime(store, 1, **settings)
    await rt.start()
    service = CoordinatorService(
        rt, authorizer=AuthorizerConfig(super_users=frozenset({"User:admin"}))
    )
    await rt.create_topics([NewTopic(name="t", num_partitions=2)])
    made = await service.create_acls([acl("kept")], ADMIN)
    assert [c.error_code for c in made.value or []] == [0]
    try:
        yield Admin(rt, store, service)
    finally:
        store.release_appends()
        await rt.close()


@pytest.fixture
async def admin() -> AsyncIterator[Admin]:
    async with started_admin(**{"offsets.commit.timeout.ms": str(WRITE_TIMEOUT_MS)}) as started:
        yield started


@dataclass(frozen=True)
class Case:
    """One API: its call, the per-entry answers' (code, message) pairs, the bound that answers
        it, and what the cluster log shows before and after the held write lands (its answers are
    read by :func:`codes`)."""

    call: Callable[[CoordinatorService], Awaitable[Any]]
    bound: str
    seen: Callable[[Admin], Awaitable[Any]]
    before: Any
    after: Any


def codes(reply: Any) -> list[tuple[int, str | None]]:
    """Each entry's (error code, message); the request-level one when the answer has no
    entries (the gRPC topic RPCs answer an error of the whole request so, docs/proto.md)."""
    if reply.value is None:
        return [(int(reply.error_code), reply.error_message)]
    return [(int(e.error_code), e.error_message) for e in reply.value]


REQUEST_BOUND = f"the request's timeout_ms ({REQUEST_TIMEOUT_MS} ms)"
CONFIG_BOUND = f"offsets.commit.timeout.ms ({WRITE_TIMEOUT_MS} ms)"

CASES = {
    "CreateTopics": Case(
        lambda s: s.create_topics(
            TopicChanges(entries=[NewTopic(name="n", num_partitions=3)], timeout_ms=100), ADMIN
        ),
        REQUEST_BOUND,
        Admin.topics,
        {"t": 2},
        {"t": 2, "n": 3},
    ),
    "CreatePartitions": Case(
        lambda s: s.create_partitions(TopicChanges(entries=[("t", 5)], timeout_ms=100), ADMIN),
        REQUEST_BOUND,
        Admin.topics,
        {"t": 2},
        {"t": 5},
    ),
    "DeleteTopics": Case(
        lambda s: s.delete_topics(TopicChanges(entries=["t"], timeout_ms=100), ADMIN),
        REQUEST_BOUND,
        Admin.topics,
        {"t": 2},
        {},
    ),
    "CreateTopics without timeout_ms": Case(
        lambda s: s.create_topics(
            TopicChanges(entries=[NewTopic(name="n", num_partitions=1)]), ADMIN
        ),
        CONFIG_BOUND,
        Admin.topics,
        {"t": 2},
        {"t": 2, "n": 1},
    ),
    "CreateAcls": Case(
        lambda s: s.create_acls([acl("new")], ADMIN),
        CONFIG_BOUND,
        Admin.acls,
        ["kept"],
        ["kept", "new"],
    ),
    "DeleteAcls": Case(
        lambda s: s.delete_acls([acl("kept")], ADMIN),
        CONFIG_BOUND,
        Admin.acls,
        ["kept"],
        [],
    ),
    "AlterUserScramCredentials": Case(
        lambda s: s.alter_user_scram_credentials(
            AlterScramCredentials(upsertions=(upsert("bob"),)), ADMIN
        ),
        CONFIG_BOUND,
        Admin.users,
        [],
        ["bob"],
    ),
    "IncrementalAlterConfigs": Case(
        lambda s: s.incremental_alter_configs(
            IncrementalAlterConfigs(
                resources=(
                    AlterResource(
                        resource_type=32,
                        resource_name="g",
                        configs=(AlterConfig(name=SESSION_TIMEOUT, operation=0, value="50000"),),
                    ),
                )
            ),
            ADMIN,
        ),
        CONFIG_BOUND,
        lambda a: a.session_timeout("g"),
        "45000",
        "50000",
    ),
}


@pytest.mark.parametrize("api", list(CASES))
async def test_a_held_cluster_log_write_is_answered_request_timed_out(
    admin: Admin, api: str
) -> None:
    """The request is answered at its bound with REQUEST_TIMED_OUT on each entry and a
    message saying the outcome is unknown; nothing is applied meanwhile as far as the store is
    concerned, and once the write lands its change stands."""
    case = CASES[api]
    assert await case.seen(admin) == case.before
    admin.store.hold_appends()
    sent = time.monotonic()
    call = asyncio.ensure_future(case.call(admin.service))
    at, error = await answered_at(call)
    assert error is None, error  # answered in-band
    entries = codes(call.result())
    assert entries and all(code == ErrorCode.REQUEST_TIMED_OUT for code, _m in entries), entries
    for _code, message in entries:
        assert message is not None and case.bound in message and UNKNOWN in message, message
    bound_s = (REQUEST_TIMEOUT_MS if case.bound == REQUEST_BOUND else WRITE_TIMEOUT_MS) / 1000
    assert bound_s - 0.01 <= at - sent <= bound_s + 1.0, at - sent
    admin.store.release_appends()
    await admin.rt.flush()
    # The write went on and landed: the change stands, and the coordinator serves as before.
    assert await case.seen(admin) == case.after
    assert admin.rt.state is RuntimeState.ACTIVE


async def test_group_and_cluster_log_requests_in_one_held_batch_each_get_their_answer(
    admin: Admin,
) -> None:
    """An offset commit (the group coordinator's write timeout), then a CreateTopics with a
    shorter timeout_ms and a DescribeAcls reading behind them, all in one held batch: the
    CreateTopics is answered first, at its own bound, REQUEST_TIMED_OUT; the commit
    COORDINATOR_NOT_AVAILABLE at the write timeout; the read of the cluster log at once, from
    its committed state (test_cluster_log_committed_reads.py). Once the batch lands, both
    writes stand."""
    rt, service = admin.rt, admin.service
    admin.store.hold_appends()
    sent = time.monotonic()
    committing = asyncio.ensure_future(rt.offset_commit(commit("g", {("t", 0): 7})))
    creating = asyncio.ensure_future(
        service.create_topics(
            TopicChanges(entries=[NewTopic(name="n", num_partitions=1)], timeout_ms=100), ADMIN
        )
    )
    created_at, error = await answered_at(creating)
    assert error is None
    ((code, message),) = codes(creating.result())
    assert code == ErrorCode.REQUEST_TIMED_OUT and REQUEST_BOUND in (message or "")
    assert 0.09 <= created_at - sent < WRITE_TIMEOUT_MS / 1000, created_at - sent
    committed_at, error = await answered_at(committing)
    assert isinstance(error, WriteTimeoutError), error
    assert error.code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert WRITE_TIMEOUT_MS / 1000 - 0.01 <= committed_at - sent <= WRITE_TIMEOUT_MS / 1000 + 1.0
    described = await service.describe_acls(EVERY_ACL, ADMIN)  # the batch is still held
    assert described.error_code == ErrorCode.NONE, described
    assert [b.resource_name for b in described.value or []] == ["kept"]
    admin.store.release_appends()
    await rt.flush()
    assert await admin.topics() == {"t": 2, "n": 1}
    assert await fetched(rt, "g") == (0, {("t", 0): 7})


async def test_a_timed_out_cluster_log_write_that_then_fails_applies_nothing(
    admin: Admin,
) -> None:
    """Answered REQUEST_TIMED_OUT, then the append fails: the registry goes back to before the
    write (the failure path, unchanged), and a retry creates the topic."""
    admin.store.hold_appends()
    admin.store.fail_next_appends(1)
    reply = await admin.service.create_topics(
        TopicChanges(entries=[NewTopic(name="n", num_partitions=1)], timeout_ms=50), ADMIN
    )
    assert [code for code, _m in codes(reply)] == [ErrorCode.REQUEST_TIMED_OUT]
    admin.store.release_appends()
    await admin.rt.flush()
    assert admin.rt.stats["failed_batches"] == 1
    assert await admin.topics() == {"t": 2}
    retried = await admin.service.create_topics(
        TopicChanges(entries=[NewTopic(name="n", num_partitions=1)], timeout_ms=50), ADMIN
    )
    assert [code for code, _m in codes(retried)] == [ErrorCode.NONE]
    assert await admin.topics() == {"t": 2, "n": 1}
