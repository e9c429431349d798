"""The security metadata (coordinator/security/metadata.py): SCRAM credentials and ACLs as
records — Kafka's validation and codes, the records written, replay rebuilding the same state,
rollback through the registry's undo log, and the codec keeping secrets out of text."""

from __future__ import annotations

import pytest

from coordinator.core import codec
from coordinator.core import records as r
from coordinator.core.commands import SequentialIds
from coordinator.core.errors import ErrorCode
from coordinator.factory import new_cluster
from coordinator.security import scram
from coordinator.security.acls import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    new_binding,
)
from coordinator.security.metadata import (
    AclCreation,
    ScramDeletion,
    ScramUpsertion,
    SecurityMetadata,
    UserResult,
)
from coordinator.security.scram import ScramMechanism

SHA256, SHA512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512
SALT = b"0123456789abcdef"


def upsert(name: str, mech: ScramMechanism = SHA256, iterations: int = 4096, pw: str = "pw"):
    salted = scram.salted_password(mech, pw, SALT, iterations)
    return ScramUpsertion(
        name=name, mechanism=int(mech), iterations=iterations, salt=SALT, salted_password=salted
    )


def fresh() -> tuple[object, SecurityMetadata]:
    return new_cluster(SequentialIds())


def replayed(records: list[r.Record]) -> SecurityMetadata:
    """A fresh machine that replayed ``records`` through the codec (as a load does)."""
    registry, security = fresh()
    for rec in records:
        registry.replay(codec.decode(*codec.encode(rec)))  # type: ignore[attr-defined]
    return security


def test_upsert_stores_kafkas_salted_credential_never_the_password() -> None:
    _reg, sec = fresh()
    result = sec.alter_scram_credentials([], [upsert("alice", pw="pencil")])
    assert result.response == [UserResult(user="alice")]
    expected = scram.credential_from_password(SHA256, "pencil", SALT, 4096)
    assert result.records == [
        r.scram_credential_record(
            "alice",
            1,
            r.UserScramCredentialValue(
                salt=SALT,
                stored_key=expected.stored_key,
                server_key=expected.server_key,
                iterations=4096,
            ),
        )
    ]
    assert sec.scram_credential("alice", SHA256) == expected
    assert sec.scram_credential("alice", SHA512) is None
    assert sec.scram_credential("bob", SHA256) is None
    key, value = codec.encode(result.records[0])
    assert b"pencil" not in key + (value or b"")
    assert "keys hidden" in codec.describe(result.records[0])
    assert replayed(result.records).snapshot() == sec.snapshot()


def test_alter_validates_each_user_as_kafka_does() -> None:
    _reg, sec = fresh()
    sec.alter_scram_credentials([], [upsert("carol")])
    result = sec.alter_scram_credentials(
        [
            ScramDeletion(name="nobody", mechanism=1),
            ScramDeletion(name="", mechanism=1),
            ScramDeletion(name="carol", mechanism=1),
        ],
        [
            upsert("few", iterations=4095),
            upsert("many", iterations=16385),
            ScramUpsertion(
                name="mech", mechanism=3, iterations=4096, salt=SALT, salted_password=b"x"
            ),
            upsert("carol", SHA512),  # a second alteration of carol: both refused
            upsert("dave", SHA512, iterations=16384),
        ],
    )
    assert result.response == [
        UserResult(
            user="nobody",
            error_code=ErrorCode.RESOURCE_NOT_FOUND,
            error_message="Attempt to delete a user credential that does not exist",
        ),
        UserResult(
            user="",
            error_code=ErrorCode.UNACCEPTABLE_CREDENTIAL,
            error_message="Username must not be empty",
        ),
        UserResult(
            user="carol",
            error_code=ErrorCode.DUPLICATE_RESOURCE,
            error_message="A user credential cannot be altered twice in the same request",
        ),
        UserResult(
            user="few",
            error_code=ErrorCode.UNACCEPTABLE_CREDENTIAL,
            error_message="Too few iterations",
        ),
        UserResult(
            user="many",
            error_code=ErrorCode.UNACCEPTABLE_CREDENTIAL,
            error_message="Too many iterations",
        ),
        UserResult(
            user="mech",
            error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM,
            error_message="Unknown SCRAM mechanism",
        ),
        UserResult(user="dave"),
    ]
    assert [rec.key for rec in result.records] == [r.UserScramCredentialKey("dave", 2)]
    assert sec.scram_credential("carol", SHA256) is not None  # untouched


def test_delete_and_describe() -> None:
    _reg, sec = fresh()
    sec.alter_scram_credentials([], [upsert("alice")])
    sec.alter_scram_credentials([], [upsert("alice", SHA512, 8192)])
    sec.alter_scram_credentials([], [upsert("bob")])
    assert sec.describe_scram_credentials(None) == [
        UserResult(user="alice", credentials=((SHA256, 4096), (SHA512, 8192))),
        UserResult(user="bob", credentials=((SHA256, 4096),)),
    ]
    assert sec.describe_scram_credentials(["bob", "zed", "bob"]) == [
        UserResult(
            user="bob",
            error_code=ErrorCode.DUPLICATE_RESOURCE,
            error_message="Cannot describe SCRAM credentials for the same user twice in a single request: bob",
        ),
        UserResult(
            user="zed",
            error_code=ErrorCode.RESOURCE_NOT_FOUND,
            error_message="Attempt to describe a user credential that does not exist: zed",
        ),
    ]
    result = sec.alter_scram_credentials([ScramDeletion(name="alice", mechanism=1)], [])
    assert result.records == [r.scram_credential_record("alice", 1, None)]
    assert sec.describe_scram_credentials(["alice"]) == [
        UserResult(user="alice", credentials=((SHA512, 8192),))
    ]


def binding(name: str = "g", op: AclOperation = AclOperation.READ, **kw: object):
    fields: dict[str, object] = {
        "resource_type": ResourceType.GROUP,
        "resource_name": name,
        "pattern_type": PatternType.LITERAL,
        "principal": "User:alice",
        "host": "*",
        "operation": op,
        "permission_type": AclPermissionType.ALLOW,
    }
    fields.update(kw)
    return new_binding(**fields)  # type: ignore[arg-type]


def test_acls_are_records_created_once_deleted_by_filter() -> None:
    registry, sec = fresh()
    g0 = sec.acl_generation
    a, b = binding("g"), binding("g", AclOperation.DELETE)
    created = sec.create_acls([AclCreation(binding=a), AclCreation(binding=b)])
    assert created.records == [r.acl_record(a.key(), True), r.acl_record(b.key(), True)]
    g1 = sec.acl_generation
    assert g1 != g0
    again = sec.create_acls([AclCreation(binding=a)])  # exists: success, no record
    assert again.records == [] and again.response == [AclCreation(binding=a)]
    assert replayed(created.records).snapshot() == sec.snapshot()
    flt = AclBindingFilter(operation=AclOperation.DELETE)
    deleted = sec.delete_acls([flt, AclBindingFilter()])
    assert [d.deleted for d in deleted.response or []] == [(b,), (a,)]
    assert deleted.records == [r.acl_record(b.key(), False), r.acl_record(a.key(), False)]
    assert sec.acl_count() == 0


def test_rollback_restores_acls_and_their_generation() -> None:
    registry, sec = fresh()
    sec.create_acls([AclCreation(binding=binding("g"))])
    before = (sec.snapshot(), sec.acl_generation)
    mark = registry.mark()  # type: ignore[attr-defined]
    sec.create_acls([AclCreation(binding=binding("h"))])
    sec.alter_scram_credentials([], [upsert("alice")])
    assert sec.acl_generation != before[1]
    registry.rollback(mark)  # type: ignore[attr-defined]
    assert (sec.snapshot(), sec.acl_generation) == before
    sec.create_acls([AclCreation(binding=binding("k"))])
    assert sec.acl_generation not in (before[1], 0)  # a new number, never one reused


def test_records_of_state_rebuild_the_state() -> None:
    _reg, sec = fresh()
    sec.create_acls([AclCreation(binding=binding("g")), AclCreation(binding=binding("a"))])
    sec.alter_scram_credentials([], [upsert("bob"), upsert("alice", SHA512)])
    assert replayed(sec.records_of_state()).snapshot() == sec.snapshot()


def test_a_registry_without_the_component_refuses_its_records() -> None:
    from coordinator.core.errors import IllegalStateError
    from coordinator.core.topics import TopicRegistry

    with pytest.raises(IllegalStateError, match="not a cluster-level record"):
        TopicRegistry(SequentialIds()).replay(r.acl_record(binding().key(), True))
