"""IncrementalAlterConfigs of several GROUP resources is one command of the cluster log, as
Kafka's controller runs it (one batch of records for the request): the records of every
resource that passes its checks go to the store in one write, in request order, and each
resource's answer is its own (an invalid one answers its error in-band, the others are
altered). A write held in the store answers the request once, at one write bound, every
altered resource REQUEST_TIMED_OUT — not one bound per resource, one after the other."""

from __future__ import annotations

import asyncio
import time

from test_cluster_log_write_timeout import Admin, started_admin
from test_runtime_write_timeout import answered_at
from test_server_authorization import ADMIN

from coordinator.core import codec
from coordinator.core import records as r
from coordinator.core.errors import ErrorCode
from coordinator.routing import CLUSTER_LOG
from coordinator.server.api import AlterConfig, AlterResource, AlterResult, IncrementalAlterConfigs

SESSION = "consumer.session.timeout.ms"
HB = "consumer.heartbeat.interval.ms"
SET, DELETE, APPEND = 0, 1, 2
GROUP = 32
WRITE_TIMEOUT_MS = 400


def resource(name: str, *configs: tuple[str, int, str | None], kind: int = GROUP) -> AlterResource:
    return AlterResource(
        resource_type=kind,
        resource_name=name,
        configs=tuple(AlterConfig(name=n, operation=op, value=v) for n, op, v in configs),
    )


def altered(name: str, kind: int = GROUP) -> AlterResult:
    return AlterResult(resource_type=kind, resource_name=name)


def refused(name: str, code: ErrorCode, message: str, kind: int = GROUP) -> AlterResult:
    return AlterResult(
        resource_type=kind, resource_name=name, error_code=code, error_message=message
    )


def cluster_log(admin: Admin) -> list[r.Record]:
    return [codec.decode(e.key, e.value) for e in admin.store.journal(CLUSTER_LOG)]


def config(group: str, name: str, value: str | None) -> r.Record:
    return r.config_record(r.CONFIG_RESOURCE_GROUP, group, name, value)


async def test_the_valid_resources_are_written_in_one_batch_each_answered_exactly() -> None:
    async with started_admin() as admin:
        service = admin.service
        await service.incremental_alter_configs(
            IncrementalAlterConfigs(resources=(resource("b", (HB, SET, "4000")),)), ADMIN
        )
        batches, logged = len(admin.store.batch_sizes), len(cluster_log(admin))
        reply = await service.incremental_alter_configs(
            IncrementalAlterConfigs(
                resources=(
                    resource("a", (SESSION, SET, "50000"), (HB, SET, "6000")),
                    resource("bad-value", (HB, SET, "1")),
                    resource("b", (HB, DELETE, None)),
                    resource("topic", kind=2),
                    resource("append", (HB, APPEND, "7000")),
                    resource("c", (SESSION, SET, "60000")),
                    resource("short", (SESSION, SET, "1000")),
                )
            ),
            ADMIN,
        )
        assert reply.value == [
            altered("a"),
            refused(
                "bad-value",
                ErrorCode.INVALID_CONFIG,
                f"invalid value 1 for '{HB}': must be between 5000 and 15000",
            ),
            altered("b"),
            refused(
                "topic",
                ErrorCode.INVALID_REQUEST,
                "Only GROUP resources (16, or Kafka's 32) are supported.",
                kind=2,
            ),
            refused(
                "append",
                ErrorCode.INVALID_REQUEST,
                f"Config {HB}: operation 2 is not supported for GROUP configs.",
            ),
            altered("c"),
            refused(
                "short",
                ErrorCode.INVALID_CONFIG,
                f"invalid value 1000 for '{SESSION}': must be between 45000 and 60000",
            ),
        ]
        # One write, holding the records of a, b and c in request order (each group's by name).
        assert len(admin.store.batch_sizes) == batches + 1
        assert cluster_log(admin)[logged:] == [
            config("a", HB, "6000"),
            config("a", SESSION, "50000"),
            config("b", HB, None),
            config("c", SESSION, "60000"),
        ]
        assert await admin.session_timeout("a") == "50000"

        # validate_only: the same answers, nothing written.
        batches, logged = len(admin.store.batch_sizes), len(cluster_log(admin))
        checked = await service.incremental_alter_configs(
            IncrementalAlterConfigs(
                resources=(resource("d", (SESSION, SET, "55000")), resource("e", (HB, SET, "1"))),
                validate_only=True,
            ),
            ADMIN,
        )
        assert [(x.resource_name, x.error_code) for x in checked.value or []] == [
            ("d", ErrorCode.NONE),
            ("e", ErrorCode.INVALID_CONFIG),
        ]
        assert (len(admin.store.batch_sizes), len(cluster_log(admin))) == (batches, logged)
        assert await admin.session_timeout("d") == "45000"


async def test_a_held_write_answers_the_request_at_one_bound() -> None:
    """Six resources behind a held write: answered once, at the write timeout (before: one
    timeout per resource in turn, 6 x 400 ms); the invalid one keeps its own error."""
    async with started_admin(**{"offsets.commit.timeout.ms": str(WRITE_TIMEOUT_MS)}) as admin:
        names = [f"g{n}" for n in range(6)]
        admin.store.hold_appends()
        sent = time.monotonic()
        call = asyncio.ensure_future(
            admin.service.incremental_alter_configs(
                IncrementalAlterConfigs(
                    resources=(
                        *(resource(n, (SESSION, SET, "50000")) for n in names),
                        resource("bad-value", (HB, SET, "1")),
                    )
                ),
                ADMIN,
            )
        )
        at, error = await answered_at(call)
        assert error is None
        assert WRITE_TIMEOUT_MS / 1000 <= at - sent < 2 * WRITE_TIMEOUT_MS / 1000
        answers = [(x.resource_name, x.error_code) for x in call.result().value or []]
        assert answers == [
            *((n, ErrorCode.REQUEST_TIMED_OUT) for n in names),
            ("bad-value", ErrorCode.INVALID_CONFIG),
        ]
        admin.store.release_appends()
        await admin.rt.flush()
        assert [await admin.session_timeout(n) for n in names] == ["50000"] * 6
