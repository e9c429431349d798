"""check_assignment (assignors/validation.py): what the coordinator refuses to install, with the
exact message, and acceptance of valid results of any size."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pytest

from assignors.api import (
    GroupAssignment,
    MemberSubscription,
    PartitionAssignorError,
    TopicMetadata,
)
from assignors.conformance._model import make_group_spec
from assignors.validation import InvalidAssignmentError, check_assignment


def member(subs: Iterable[str]) -> MemberSubscription:
    return MemberSubscription(
        rack_id=None, instance_id=None, subscribed_topic_ids=frozenset(subs), assignment={}
    )


SPEC = make_group_spec({"m1": member(["a", "b"]), "m2": member(["a"]), "m3": member(["b"])})
TOPICS = {
    "a": TopicMetadata(topic_id="a", name="orders", num_partitions=4),
    "b": TopicMetadata(topic_id="b", name="payments", num_partitions=2),
}


def check(members: Mapping[str, object]) -> None:
    check_assignment(SPEC, TOPICS, GroupAssignment(members=members))  # type: ignore[arg-type]


def fs(*p: object) -> frozenset:  # type: ignore[type-arg]
    return frozenset(p)


VALID = {"m1": {"a": fs(0, 1), "b": fs(0)}, "m2": {"a": fs(2, 3)}, "m3": {"b": fs(1)}}


def test_a_valid_result_passes_and_partitions_may_stay_unassigned() -> None:
    check(VALID)
    check({"m1": {}, "m2": {"a": fs(3)}, "m3": {}})


def test_the_error_is_a_partition_assignor_error() -> None:
    assert issubclass(InvalidAssignmentError, PartitionAssignorError)


@pytest.mark.parametrize(
    ("members", "message"),
    [
        (VALID | {"m4": {}}, "member 'm4' is not in the group (1 unknown)"),
        ({"m1": {}, "m2": {}}, "member 'm3' is missing from the result (1 missing)"),
        (
            VALID | {"m2": [("a", fs(1))]},
            "member 'm2': assignment is a list, not a mapping of topic id -> frozenset",
        ),
        (
            VALID | {"m2": {"a": {2, 3}}},
            "member 'm2', topic 'a': partitions are a set, not a frozenset",
        ),
        (
            VALID | {"m2": {"a": fs(2, 3), "b": fs()}},
            "member 'm2', topic 'b': empty partition set (omit topics with no partitions)",
        ),
        (
            VALID | {"m2": {"a": fs(2, 3), "b": fs(1)}},
            "member 'm2' is given topic 'b', to which it is not subscribed",
        ),
        (
            VALID | {"m2": {"a": fs(2, 4)}},
            "member 'm2' is given partition 4 of topic 'a' (orders), which has 4 partitions",
        ),
        (
            VALID | {"m2": {"a": fs(-1, 2)}},
            "member 'm2' is given partition -1 of topic 'a' (orders), which has 4 partitions",
        ),
        (
            VALID | {"m2": {"a": fs(2, "3")}},
            "member 'm2', topic 'a': partition '3' is a str, not an int",
        ),
        (
            VALID | {"m2": {"a": fs(1, 2, 3)}},
            "partition 1 of topic 'a' (orders) is given to both 'm1' and 'm2'",
        ),
    ],
)
def test_invalid_results_are_refused_with_a_precise_message(members: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(InvalidAssignmentError) as info:
        check(members)
    assert str(info.value) == f"invalid assignment: {message}"


def test_result_must_be_a_group_assignment() -> None:
    with pytest.raises(InvalidAssignmentError, match="returned dict, not GroupAssignment"):
        check_assignment(SPEC, TOPICS, {"m1": {}})


def test_topic_missing_from_the_metadata() -> None:
    spec = make_group_spec({"m1": member(["gone"])})
    with pytest.raises(InvalidAssignmentError) as info:
        check_assignment(spec, TOPICS, GroupAssignment(members={"m1": {"gone": fs(0)}}))
    assert str(info.value) == (
        "invalid assignment: member 'm1' is given topic 'gone', which is not in the topic metadata"
    )


def test_large_valid_result_passes() -> None:
    # 2,000 members x 10 topics x 10,000 partitions = 100,000 partitions (timed in bench/).
    topic_ids = [f"t{i}" for i in range(10)]
    meta = {t: TopicMetadata(topic_id=t, name=t, num_partitions=10_000) for t in topic_ids}
    spec = make_group_spec({f"m{i:04d}": member(topic_ids) for i in range(2000)})
    members = {
        f"m{i:04d}": {t: frozenset(range(i * 5, i * 5 + 5)) for t in topic_ids} for i in range(2000)
    }
    check_assignment(spec, meta, GroupAssignment(members=members))
    members["m1999"] = {**members["m1999"], "t9": frozenset({0})}
    with pytest.raises(InvalidAssignmentError, match="partition 0 of topic 't9'"):
        check_assignment(spec, meta, GroupAssignment(members=members))


def test_other_mapping_types_are_accepted() -> None:
    from types import MappingProxyType

    class Target(dict):  # type: ignore[type-arg]
        pass

    check({m: Target(a) for m, a in VALID.items()})  # dict subclasses: the fast path
    check({m: MappingProxyType(a) for m, a in VALID.items()})  # any Mapping: the precise path
    check_assignment(SPEC, TOPICS, GroupAssignment(members=MappingProxyType(VALID)))


def test_booleans_are_not_partitions() -> None:
    with pytest.raises(InvalidAssignmentError, match="partition True is a bool, not an int"):
        check(VALID | {"m1": {"a": fs(0), "b": fs(0)}, "m2": {"a": fs(True, 2, 3)}})
