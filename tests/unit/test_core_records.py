"""Records: the byte codec (coordinator/core/codec.py) and the replay rules
(coordinator/core/group.py, GroupCoordinatorShard.replay; reference notes §1.8)."""

from __future__ import annotations

from typing import Any

import pytest
from builders import RoundRobinAssignor

from assignors.api import TopicMetadata
from coordinator.core import codec
from coordinator.core import records as r
from coordinator.core.commands import SequentialIds
from coordinator.core.config import GroupCoordinatorConfig
from coordinator.core.errors import IllegalStateError
from coordinator.core.model import ClassicMemberMetadata, ConsumerGroupMember, MemberState
from coordinator.factory import Shard, new_shard
from coordinator.harness import Harness

G = "grp"
RT = r.RecordType
T1 = "AAAAAAAAAAAAAAAAAAAAAQ"
T2 = "AAAAAAAAAAAAAAAAAAAAAg"
RACKS_FOO = {0: frozenset({"a", "b"}), 1: frozenset({"c"}), 2: frozenset({"b", "a"})}


def fresh_shard() -> Shard:
    return new_shard(
        config=GroupCoordinatorConfig(), assignors=[RoundRobinAssignor()], ids=SequentialIds()
    )


def full_member(member_id: str = "m1", **over: Any) -> ConsumerGroupMember:
    fields: dict[str, Any] = dict(
        member_id=member_id,
        instance_id="inst-1",
        rack_id="rack-a",
        client_id="client",
        client_host="/10.0.0.1",
        subscribed_topic_names=("bar", "foo"),
        subscribed_topic_regex="ba.*",
        server_assignor_name="range",
        rebalance_timeout_ms=30_000,
        member_epoch=7,
        previous_member_epoch=6,
        state=MemberState.UNREVOKED_PARTITIONS,
        assigned_partitions={T1: frozenset({0, 2}), T2: frozenset({5})},
        partitions_pending_revocation={T1: frozenset({1})},
    )
    fields.update(over)
    return ConsumerGroupMember(**fields)


CLASSIC = ClassicMemberMetadata(
    session_timeout_ms=10_000,
    supported_protocols=(("range", b"\x00\x01\xff binary"), ("roundrobin", b"")),
)

ALL_RECORDS: list[tuple[str, r.Record]] = [
    ("group_epoch", r.group_epoch_record(G, 12, "cgp_0001")),
    (
        "txn_offset_commit",
        r.txn_offset_commit_record(
            G,
            "foo",
            2,
            4001,
            r.TxnOffsetCommitValue(
                offset=42, leader_epoch=3, metadata="m", commit_timestamp_ms=9, producer_epoch=7
            ),
        ),
    ),
    ("txn_offset_commit_tombstone", r.txn_offset_commit_record(G, "foo", 2, 4001, None)),
    (
        "group_transaction",
        r.group_transaction_record(
            G,
            4001,
            r.GroupTransactionValue(
                transactional_id="app-1",
                producer_epoch=7,
                state=r.TransactionState.PREPARE_ABORT,
                updated_ms=11,
            ),
        ),
    ),
    ("group_transaction_tombstone", r.group_transaction_record(G, 4001, None)),
    ("group_epoch_tombstone", r.group_epoch_tombstone(G)),
    (
        "partition_metadata",
        r.partition_metadata_record(
            G,
            {
                "foo": TopicMetadata(topic_id=T1, name="foo", num_partitions=3),
                "bar": TopicMetadata(topic_id=T2, name="bar", num_partitions=1),
            },
        ),
    ),
    (
        "partition_metadata_with_racks",
        r.partition_metadata_record(
            G,
            {
                "foo": TopicMetadata(
                    topic_id=T1,
                    name="foo",
                    num_partitions=3,
                    partition_racks=RACKS_FOO,
                ),
                "bar": TopicMetadata(topic_id=T2, name="bar", num_partitions=1),
            },
        ),
    ),
    ("partition_metadata_empty", r.partition_metadata_record(G, {})),
    ("partition_metadata_tombstone", r.partition_metadata_tombstone(G)),
    ("member_metadata", r.member_metadata_record(G, full_member())),
    ("member_metadata_minimal", r.member_metadata_record(G, ConsumerGroupMember(member_id="m2"))),
    (
        "member_metadata_classic",
        r.member_metadata_record(G, full_member(classic_member_metadata=CLASSIC)),
    ),
    ("member_metadata_tombstone", r.member_metadata_tombstone(G, "m1")),
    (
        "target_member",
        r.target_assignment_record(G, "m1", {T1: frozenset({0, 2}), T2: frozenset({5})}),
    ),
    ("target_member_empty", r.target_assignment_record(G, "m1", {})),
    ("target_member_tombstone", r.target_assignment_tombstone(G, "m1")),
    ("target_epoch", r.target_assignment_epoch_record(G, 12)),
    ("target_epoch_tombstone", r.target_assignment_epoch_tombstone(G)),
    ("current_assignment", r.current_assignment_record(G, full_member())),
    (
        "current_assignment_static_leave",
        r.current_assignment_record(G, full_member(member_epoch=-2, state=MemberState.STABLE)),
    ),
    ("current_assignment_tombstone", r.current_assignment_tombstone(G, "m1")),
    ("regex", r.regex_record(G, "ba.*", frozenset({"bar", "baz"}), 3, 1_700_000_000_000)),
    ("regex_matches_nothing", r.regex_record(G, "x+", frozenset(), 4, 0)),
    ("regex_tombstone", r.regex_tombstone(G, "ba.*")),
    ("group_config", r.group_config_record(G, "consumer.session.timeout.ms", "50000")),
    ("group_config_tombstone", r.group_config_record(G, "consumer.session.timeout.ms", None)),
    ("config", r.config_record(r.CONFIG_RESOURCE_GROUP, G, "consumer.session.timeout.ms", "50000")),
    (
        "config_tombstone",
        r.config_record(r.CONFIG_RESOURCE_GROUP, G, "consumer.session.timeout.ms", None),
    ),
    (
        "offset_commit",
        r.offset_commit_record(
            G,
            "foo",
            3,
            r.OffsetCommitValue(
                offset=42,
                leader_epoch=-1,
                metadata="meta \u00e9",
                commit_timestamp_ms=1_000,
                expire_timestamp_ms=-1,
            ),
        ),
    ),
    ("offset_commit_tombstone", r.offset_commit_tombstone(G, "foo", 3)),
    (
        "classic_group",
        r.classic_group_record(
            G,
            r.GroupMetadataValue(
                protocol_type="consumer",
                generation=4,
                protocol="range",
                leader="m1",
                current_state_timestamp_ms=7,
                members=(
                    r.GroupMetadataMemberValue(
                        member_id="m1",
                        group_instance_id=None,
                        client_id="c",
                        client_host="/h",
                        rebalance_timeout_ms=300_000,
                        session_timeout_ms=45_000,
                        subscription=b"\x00\x01\xff",
                        assignment=b"",
                    ),
                ),
            ),
        ),
    ),
    (
        "classic_group_empty",
        r.classic_group_record(
            G,
            r.GroupMetadataValue(
                protocol_type="",
                generation=0,
                protocol=None,
                leader=None,
                current_state_timestamp_ms=0,
                members=(),
            ),
        ),
    ),
    ("classic_group_tombstone", r.classic_group_tombstone(G)),
    ("topic", r.topic_record("foo", T1, 3)),
    ("topic_with_racks", r.topic_record("foo", T1, 3, RACKS_FOO)),
    ("topic_tombstone", r.topic_record("foo", None)),
    ("acl", r.acl_record(r.AccessControlEntryKey(3, "g", 4, "User:a", "*", 3, 2), True)),
    ("acl_tombstone", r.acl_record(r.AccessControlEntryKey(2, "*", 3, "User:*", "h", 2, 3), False)),
    (
        "scram_credential",
        r.scram_credential_record(
            "al,ice=",
            2,
            r.UserScramCredentialValue(
                salt=b"\x00salt", stored_key=bytes(64), server_key=b"\xff" * 64, iterations=8192
            ),
        ),
    ),
    ("scram_credential_tombstone", r.scram_credential_record("bob", 1, None)),
    ("transactional_id_group", r.transactional_id_group_record("app-1", "copier")),
    ("transactional_id_group_tombstone", r.transactional_id_group_record("app-1", None)),
    (
        "unicode_ids",
        r.member_metadata_record(
            "gr\u00fcppe \U0001f600", full_member("m\u00e9mbre", client_id="\u4e2d")
        ),
    ),
]


# ------------------------------------------------------------------------ codec


@pytest.mark.parametrize("record", [c[1] for c in ALL_RECORDS], ids=[c[0] for c in ALL_RECORDS])
def test_round_trip(record: r.Record) -> None:
    key, value = codec.encode(record)
    assert isinstance(key, bytes)
    assert (value is None) == record.is_tombstone
    decoded = codec.decode(key, value)
    assert decoded == record
    assert type(decoded.key) is type(record.key)
    assert codec.encode(decoded) == (key, value)


def test_every_record_type_is_covered() -> None:
    types = {rec.key.TYPE for _, rec in ALL_RECORDS}
    assert types == set(codec._KEY_FIELDS) == set(r.RecordType)
    assert {rec.key.TYPE for _, rec in ALL_RECORDS if rec.is_tombstone} == types


def test_record_types_are_kafkas() -> None:
    """Named and numbered as Kafka's CoordinatorRecordType (the stored key starts with the
    number), plus this coordinator's own group configs, topics, ACLs and SCRAM credentials."""
    assert {t.name: int(t) for t in r.RecordType} == {
        "OFFSET_COMMIT": 1,
        "GROUP_METADATA": 2,
        "CONSUMER_GROUP_METADATA": 3,
        "CONSUMER_GROUP_PARTITION_METADATA": 4,
        "CONSUMER_GROUP_MEMBER_METADATA": 5,
        "CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA": 6,
        "CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER": 7,
        "CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT": 8,
        "CONSUMER_GROUP_REGULAR_EXPRESSION": 16,
        "TXN_OFFSET_COMMIT": 1001,
        "GROUP_TRANSACTION": 1002,
        "GROUP_CONFIG": 1016,
        "TOPIC": 1100,
        "CONFIG": 1104,
        "ACCESS_CONTROL_ENTRY": 1106,
        "USER_SCRAM_CREDENTIAL": 1111,
        "TRANSACTIONAL_ID_GROUP": 1120,
    }
    for _, record in ALL_RECORDS:
        assert codec.encode_key(record.key).startswith(f"[{int(record.key.TYPE)},".encode())


def test_a_record_whose_value_does_not_match_its_type_is_refused() -> None:
    """Replay checks the key and value types of the record type it dispatches on."""
    shard = fresh_shard()
    bad = r.Record(r.ConsumerGroupMetadataKey(G), r.GroupConfigValue(value="1"))
    with pytest.raises(IllegalStateError, match="ConsumerGroupMetadataKey with a GroupConfigValue"):
        shard.replay(bad)
    assert shard.snapshot() == fresh_shard().snapshot()


def test_classic_member_metadata_round_trips_binary_protocols() -> None:
    record = r.member_metadata_record(G, full_member(classic_member_metadata=CLASSIC))
    decoded = codec.decode(*codec.encode(record))
    assert decoded.value.classic_member_metadata == CLASSIC  # type: ignore[union-attr]
    assert decoded.value.classic_member_metadata.supported_protocols[0][1] == b"\x00\x01\xff binary"  # type: ignore[union-attr]


def test_member_metadata_written_without_the_classic_field_decodes() -> None:
    """Forward/backward compatibility: a value with no trailing classic field decodes to None."""
    key, value = codec.encode(r.member_metadata_record(G, full_member()))
    assert value is not None and value.endswith(b",null]")
    decoded = codec.decode(key, value[: -len(b",null]")] + b"]")
    assert decoded == r.member_metadata_record(G, full_member())


def test_layout_is_compact_positional_json() -> None:
    assert codec.encode(r.group_epoch_record(G, 5, "cgp_x")) == (b'[3,"grp"]', b'[0,5,"cgp_x"]')
    assert codec.encode(r.group_epoch_tombstone(G)) == (b'[3,"grp"]', None)
    assert codec.encode(
        r.target_assignment_record(G, "m", {T2: frozenset({3, 1}), T1: frozenset({2})})
    ) == (b'[7,"grp","m"]', f'[0,[["{T1}",[2]],["{T2}",[1,3]]]]'.encode())


def test_partition_racks_are_a_trailing_field_grouped_by_racks() -> None:
    """Records without racks keep the bytes they always had (golden logs, older builds); racks
    are one entry per distinct set of racks, its partitions ascending."""
    assert codec.encode(r.topic_record("foo", T1, 3)) == (
        b'[1100,"foo"]',
        f'[0,"{T1}",3]'.encode(),
    )
    assert codec.encode(r.topic_record("foo", T1, 3, RACKS_FOO))[1] == (
        f'[0,"{T1}",3,[[["a","b"],[0,2]],[["c"],[1]]]]'.encode()
    )
    plain = TopicMetadata(topic_id=T1, name="foo", num_partitions=3)
    assert codec.encode(r.partition_metadata_record(G, {"foo": plain}))[1] == (
        f'[0,[["{T1}","foo",3]]]'.encode()
    )
    racked = TopicMetadata(topic_id=T1, name="foo", num_partitions=3, partition_racks=RACKS_FOO)
    assert codec.encode(r.partition_metadata_record(G, {"foo": racked}))[1] == (
        f'[0,[["{T1}","foo",3,[[["a","b"],[0,2]],[["c"],[1]]]]]]'.encode()
    )
    # Decoded racks share one frozenset per distinct set.
    decoded = codec.decode(*codec.encode(r.topic_record("foo", T1, 3, RACKS_FOO))).value
    assert isinstance(decoded, r.TopicValue)
    assert decoded.partition_racks[0] is decoded.partition_racks[2]


def test_bytes_are_deterministic_regardless_of_construction_order() -> None:
    ps_a = frozenset([1, 9, 17, 33, 65, 0, 8])
    ps_b = frozenset(reversed([1, 9, 17, 33, 65, 0, 8]))
    ps_c = frozenset(set(range(100)) - set(range(2, 100)) | {9, 17, 33, 65, 8})
    assert ps_a == ps_b == ps_c
    one = {T1: ps_a, T2: frozenset({4, 2})}
    two = {T2: frozenset([2, 4]), T1: ps_b}
    three = dict(reversed(list({T1: ps_c, T2: frozenset({2, 4})}.items())))
    recs = [
        lambda a: r.target_assignment_record(G, "m", a),
        lambda a: r.current_assignment_record(
            G, full_member(assigned_partitions=a, partitions_pending_revocation=a)
        ),
    ]
    for make in recs:
        assert codec.encode(make(one)) == codec.encode(make(two)) == codec.encode(make(three))

    md1 = {
        "foo": TopicMetadata(topic_id=T1, name="foo", num_partitions=3),
        "bar": TopicMetadata(topic_id=T2, name="bar", num_partitions=1),
    }
    md2 = dict(reversed(list(md1.items())))
    assert codec.encode(r.partition_metadata_record(G, md1)) == codec.encode(
        r.partition_metadata_record(G, md2)
    )
    names1 = frozenset(["zeta", "alpha", "mid", "beta"])
    names2 = frozenset(sorted(names1, reverse=True))
    assert codec.encode(r.regex_record(G, "x", names1, 1, 2)) == codec.encode(
        r.regex_record(G, "x", names2, 1, 2)
    )


@pytest.mark.parametrize(
    "key,value,needle",
    [
        (b"not json", None, "cannot decode record"),
        (b"", None, "cannot decode record"),
        (b"[]", None, "cannot decode record"),
        (b"{}", None, "cannot decode record"),
        (b'[999,"grp"]', None, "unknown record type 999"),
        (b'["3","grp"]', None, "record type must be an integer"),
        (b"[3]", None, "malformed key for record type 3"),  # missing key field
        (b'[3,"grp","extra"]', None, "malformed key for record type 3"),  # too many key fields
        (b'[3,"grp"]', b"{", "cannot decode record"),
        (b'[3,"grp"]', b"[0]", "cannot decode record"),  # value fields missing
        (b'[7,"grp","m"]', b'[0,[["t"]]]', "cannot decode record"),
        (
            b'[5,"grp","m"]',
            b'[0,null,null,"c","h",["foo"],null,-1,null,[1]]',
            "cannot decode record",
        ),
        (b"\xff\xfe", None, "cannot decode record"),
    ],
)
def test_garbage_bytes_raise_illegal_state(key: bytes, value: bytes | None, needle: str) -> None:
    with pytest.raises(IllegalStateError, match=needle):
        codec.decode(key, value)


@pytest.mark.parametrize(
    "key,value",
    [
        (b'[true,"grp","foo",0]', None),  # a bool is not a record type (True == 1 in Python)
        (b'[3.0,"grp"]', None),  # nor is a float
        (b"[3,5]", None),  # a group id is a string
    ],
    ids=["bool_type", "float_type", "int_group_id"],
)
def test_well_formed_json_with_wrong_key_types_is_refused(key: bytes, value: bytes | None) -> None:
    """Corrupt keys must fail loudly at decode time, not slip into the state as keys of the
    wrong type (``[true, ...]`` decodes as an offset commit key, ``[3.0, ...]`` re-encodes to
    other bytes, an int group id only blows up later, e.g. when groups are sorted)."""
    with pytest.raises(IllegalStateError):
        codec.decode(key, value)


def test_describe_is_one_readable_line() -> None:
    assert (
        codec.describe(r.group_epoch_tombstone(G))
        == "ConsumerGroupMetadata(group_id='grp') -> <tombstone>"
    )
    line = codec.describe(r.target_assignment_epoch_record(G, 3))
    assert (
        line.startswith("ConsumerGroupTargetAssignmentMetadata(group_id='grp') -> ")
        and "\n" not in line
    )


# ------------------------------------------------------------------------ replay rules


def member_records(member_id: str, assigned: dict, epoch: int = 3) -> list[r.Record]:
    m = ConsumerGroupMember(
        member_id=member_id,
        subscribed_topic_names=("foo",),
        rebalance_timeout_ms=1000,
        member_epoch=epoch,
        previous_member_epoch=epoch - 1,
        assigned_partitions=assigned,
    )
    return [
        r.member_metadata_record(G, m),
        r.target_assignment_record(G, member_id, assigned),
        r.current_assignment_record(G, m),
    ]


def loaded(*records: r.Record) -> Shard:
    shard = fresh_shard()
    for rec in records:
        shard.replay(rec)
    shard.release(shard.mark())
    return shard


def base_group() -> list[r.Record]:
    return [
        r.group_epoch_record(G, 3, "cgp_1"),
        *member_records("A", {T1: frozenset({0, 1})}),
        *member_records("B", {T1: frozenset({2})}),
        r.target_assignment_epoch_record(G, 3),
    ]


def assert_illegal(shard: Shard, record: r.Record, needle: str) -> None:
    with pytest.raises(IllegalStateError, match=needle):
        shard.replay(record)


def test_member_metadata_tombstone_before_current_assignment_tombstone_is_illegal() -> None:
    shard = loaded(*base_group())
    assert_illegal(
        shard,
        r.member_metadata_tombstone(G, "A"),
        "member A metadata deleted before its current and target assignments",
    )


def test_member_metadata_tombstone_before_target_tombstone_is_illegal() -> None:
    shard = loaded(*base_group(), r.current_assignment_tombstone(G, "A"))
    assert shard.groups[G].members["A"].member_epoch == -1
    assert_illegal(
        shard,
        r.member_metadata_tombstone(G, "A"),
        "member A metadata deleted before its current and target assignments",
    )


def test_member_removal_in_the_right_order() -> None:
    shard = loaded(
        *base_group(),
        r.current_assignment_tombstone(G, "A"),
        r.target_assignment_tombstone(G, "A"),
        r.member_metadata_tombstone(G, "A"),
    )
    group = shard.groups[G]
    assert sorted(group.members) == ["B"]
    assert (
        shard.snapshot()
        == loaded(*[x for x in base_group() if getattr(x.key, "member_id", "B") == "B"]).snapshot()
    )


def test_group_tombstone_while_members_exist_is_illegal() -> None:
    shard = loaded(*base_group())
    assert_illegal(
        shard,
        r.group_epoch_tombstone(G),
        "group grp deleted while it still has members or a target assignment",
    )


def test_group_tombstone_while_a_target_assignment_remains_is_illegal() -> None:
    shard = loaded(
        r.group_epoch_record(G, 3, "cgp_1"),
        r.target_assignment_record(G, "ghost", {T1: frozenset({0})}),
    )
    assert_illegal(
        shard,
        r.group_epoch_tombstone(G),
        "group grp deleted while it still has members or a target assignment",
    )


def test_group_deletion_in_the_right_order() -> None:
    recs = base_group()
    for mid in ("A", "B"):
        recs += [
            r.current_assignment_tombstone(G, mid),
            r.target_assignment_tombstone(G, mid),
            r.member_metadata_tombstone(G, mid),
        ]
    recs += [
        r.target_assignment_epoch_tombstone(G),
        r.partition_metadata_tombstone(G),
        r.group_epoch_tombstone(G),
    ]
    shard = loaded(*recs)
    assert shard.groups == {}
    assert shard.snapshot() == fresh_shard().snapshot()


@pytest.mark.parametrize(
    "record",
    [
        r.group_epoch_tombstone("nope"),
        r.partition_metadata_tombstone("nope"),
        r.member_metadata_tombstone("nope", "m"),
        r.target_assignment_tombstone("nope", "m"),
        r.target_assignment_epoch_tombstone("nope"),
        r.current_assignment_tombstone("nope", "m"),
        r.regex_tombstone("nope", "a.*"),
        r.group_config_record("nope", "consumer.session.timeout.ms", None),
    ],
    ids=lambda rec: type(rec.key).__name__,
)
def test_tombstones_for_unknown_groups_are_ignored(record: r.Record) -> None:
    shard = fresh_shard()
    shard.replay(record)
    assert shard.groups == {}
    assert shard.snapshot() == fresh_shard().snapshot()


@pytest.mark.parametrize(
    "record",
    [
        r.member_metadata_tombstone(G, "ghost"),
        r.target_assignment_tombstone(G, "ghost"),
        r.current_assignment_tombstone(G, "ghost"),
        r.regex_tombstone(G, "never.*"),
    ],
    ids=lambda rec: type(rec.key).__name__,
)
def test_tombstones_for_unknown_members_are_ignored(record: r.Record) -> None:
    shard = loaded(*base_group())
    before = shard.snapshot()
    shard.replay(record)
    assert shard.snapshot() == before


@pytest.mark.parametrize(
    "record,check",
    [
        (
            r.group_epoch_record("new", 4, "cgp_9"),
            lambda g: (g.group_epoch, g.group_uid) == (4, "cgp_9"),
        ),
        (
            r.target_assignment_epoch_record("new", 6),
            lambda g: g.assignment_epoch == 6 and g.group_uid == "",
        ),
        (
            r.partition_metadata_record(
                "new", {"foo": TopicMetadata(topic_id=T1, name="foo", num_partitions=1)}
            ),
            lambda g: list(g.subscription_metadata) == ["foo"],
        ),
        (
            r.member_metadata_record("new", ConsumerGroupMember(member_id="m")),
            lambda g: list(g.members) == ["m"],
        ),
        (
            r.target_assignment_record("new", "m", {T1: frozenset({0})}),
            lambda g: g.target == {"m": {T1: frozenset({0})}},
        ),
        (
            r.current_assignment_record("new", ConsumerGroupMember(member_id="m", member_epoch=2)),
            lambda g: g.members["m"].member_epoch == 2,
        ),
        (
            r.regex_record("new", "f.*", frozenset({"foo"}), 1, 0),
            lambda g: g.resolved_regexes["f.*"][0] == {"foo"},
        ),
    ],
    ids=lambda x: type(x.key).__name__ if isinstance(x, r.Record) else "",
)
def test_a_record_for_an_unknown_group_creates_it(record: r.Record, check: Any) -> None:
    shard = fresh_shard()
    shard.replay(record)
    assert list(shard.groups) == ["new"]
    assert check(shard.groups["new"])


def test_unknown_state_byte_maps_to_unknown() -> None:
    shard = loaded(*base_group())
    m = shard.groups[G].members["A"]
    for byte in (3, 42, 126, 128, 255, -1):
        shard.replay(
            r.Record(
                r.ConsumerGroupCurrentMemberAssignmentKey(G, "A"),
                r.ConsumerGroupCurrentMemberAssignmentValue(
                    member_epoch=3,
                    previous_member_epoch=2,
                    state=byte,
                    assigned_partitions=m.assigned_partitions,
                    partitions_pending_revocation={},
                ),
            )
        )
        assert shard.groups[G].members["A"].state is MemberState.UNKNOWN
    assert MemberState.from_value(127) is MemberState.UNKNOWN
    assert [MemberState.from_value(i) for i in (0, 1, 2)] == [
        MemberState.STABLE,
        MemberState.UNREVOKED_PARTITIONS,
        MemberState.UNRELEASED_PARTITIONS,
    ]


def test_two_members_owning_one_partition_is_illegal() -> None:
    shard = loaded(*base_group())
    b = shard.groups[G].members["B"]
    grab = r.current_assignment_record(
        G,
        ConsumerGroupMember(
            member_id="B",
            member_epoch=3,
            previous_member_epoch=2,
            assigned_partitions={T1: frozenset({1, 2})},
        ),
    )
    assert_illegal(shard, grab, f"current partition {T1}-1 given to B while owned by A")
    assert b is not None


def test_pending_revocation_counts_as_owned() -> None:
    shard = loaded(*base_group())
    a = shard.groups[G].members["A"]
    revoking = ConsumerGroupMember(
        member_id="A",
        member_epoch=3,
        previous_member_epoch=3,
        state=MemberState.UNREVOKED_PARTITIONS,
        assigned_partitions={T1: frozenset({0})},
        partitions_pending_revocation={T1: frozenset({1})},
    )
    shard.replay(r.current_assignment_record(G, revoking))
    assert shard.groups[G].owner_of(T1, 1) == "A"
    grab = r.current_assignment_record(
        G,
        ConsumerGroupMember(
            member_id="B", member_epoch=3, assigned_partitions={T1: frozenset({1, 2})}
        ),
    )
    assert_illegal(shard, grab, f"current partition {T1}-1 given to B while owned by A")
    assert a.member_id == "A"


def test_a_partition_moving_between_targets_is_briefly_in_two_targets() -> None:
    """A new target assignment is written one member at a time, so a moved partition may be in
    two targets between two records: the inverted index is lenient (newest writer wins, and a
    member only removes entries that still name it)."""
    shard = loaded(*base_group())  # targets: A=[0,1], B=[2]
    shard.replay(r.target_assignment_record(G, "B", {T1: frozenset({0, 2})}))
    assert shard.groups[G].target_owners == {T1: {0: "B", 1: "A", 2: "B"}}
    shard.replay(r.target_assignment_record(G, "A", {T1: frozenset({1})}))
    assert shard.groups[G].target_owners == {T1: {0: "B", 1: "A", 2: "B"}}
    shard.replay(r.target_assignment_tombstone(G, "A"))
    assert shard.groups[G].target_owners == {T1: {0: "B", 2: "B"}}


def test_topic_records_do_not_belong_to_a_shard() -> None:
    assert_illegal(
        fresh_shard(),
        r.topic_record("foo", T1, 1),
        "topic registry records belong to the topic registry",
    )


def test_replay_is_order_agnostic_within_a_member() -> None:
    """Current assignment before member metadata (a compacted log may interleave) gives the
    same state as the canonical order."""
    canonical = loaded(*base_group()).snapshot()
    recs = base_group()
    shuffled = (
        [recs[0]]
        + [x for x in recs if x.key.TYPE is RT.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT]
        + [
            x
            for x in recs
            if x.key.TYPE
            in (
                RT.CONSUMER_GROUP_MEMBER_METADATA,
                RT.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
                RT.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
            )
        ]
    )
    assert loaded(*shuffled).snapshot() == canonical


# ------------------------------------------------------------------------ records_of_state


def busy_harness() -> Harness:
    """Several groups with most kinds of state: regexes, static members (one temporarily left),
    a member revoking, one waiting for partitions, a server assignor vote, group configs."""
    h = Harness(assignors=[RoundRobinAssignor(), RoundRobinAssignor("other")])
    foo = h.create_topic("foo", 4)
    h.create_topic("bar", 2)
    h.create_topic("baz", 3)
    h.join("A", ["foo"], client_id="ca", client_host="/1.1.1.1", rack_id="r1")
    h.join("B", ["foo"], regex="ba.*", instance_id="iB", server_assignor="other")
    h.heartbeat(
        member_id="A", member_epoch=1, topic_partitions={foo: frozenset(range(4))}
    )  # A revoking
    h.join("S", ["bar"], instance_id="iS")
    h.heartbeat(member_id="S", member_epoch=-2, instance_id="iS")
    h.join("X", ["foo"], group_id="g2")
    h.join("Y", [], regex="f.*", group_id="g2")
    h.heartbeat(member_id="Y", member_epoch=-1, group_id="g2")
    h.join("Z", ["nope"], group_id="g3")
    h.heartbeat(member_id="Z", member_epoch=-1, group_id="g3")  # g3: empty group
    h.alter_configs(G, {"consumer.session.timeout.ms": "50000"})
    h.alter_configs("no-such-group", {"consumer.heartbeat.interval.ms": "6000"})
    h.commit(G, "A", h.shard.groups[G].members["A"].member_epoch, {("foo", 0): 42, ("foo", 1): 7})
    h.commit("offsets-only", "", -1, {("bar", 1): 3})
    return h


def test_records_of_state_rebuild_the_same_snapshot() -> None:
    h = busy_harness()
    g = h.shard.groups[G]
    states = {m.state for m in g.members.values()}
    assert MemberState.UNREVOKED_PARTITIONS in states
    assert g.members["S"].member_epoch == -2
    assert sorted(h.shard.groups) == ["g2", "g3", G]
    assert sorted(h.shard.offsets) == [G, "offsets-only"]

    recs = h.shard.records_of_state()
    fresh = fresh_shard()
    fresh.undo.enabled = False
    for rec in recs:
        fresh.replay(codec.decode(*codec.encode(rec)))
    assert fresh.snapshot() == h.shard.snapshot()
    # ... and the full history gives the same state too.
    assert h.replayed().snapshot() == h.shard.snapshot()
    # records_of_state is a fixed point.
    assert fresh.records_of_state() == recs


def test_records_of_state_of_an_empty_shard_is_empty() -> None:
    assert fresh_shard().records_of_state() == []
