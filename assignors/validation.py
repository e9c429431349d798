"""Checks an assignor's result before the coordinator installs it.

``check_assignment`` is pure and runs in O(members + total partitions), almost all of it inside
CPython's C code: member ids are compared as key views, subscriptions with ``issuperset`` over
``map``, and per topic the union of the members' partition sets is compared in size with the sum
of their sizes. Only when that fast path sees something unusual does a slower scan, in sorted
order, find and name the culprit precisely (about 10 ms for 10,000 members x 100,000
partitions on the benchmark machine; see docs/benchmarks.md).

Rules (the SPI contract in :mod:`assignors.api`):

* the result is a :class:`GroupAssignment` whose ``members`` maps exactly the group's member
  ids (every member present, no unknown member) to mappings of topic id -> ``frozenset[int]``;
* a member only gets topics it subscribes to, and only topics present in the metadata;
* partition indexes lie in ``range(num_partitions)``; each partition goes to at most one member;
* a topic with no partitions for a member is omitted rather than mapped to an empty set.

Completeness (every partition assigned) is *not* a rule: an assignor may leave partitions
unassigned. The conformance kit measures it separately.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import chain
from operator import attrgetter

from assignors.api import GroupAssignment, GroupSpec, PartitionAssignorError, TopicId, TopicMetadata

__all__ = ["InvalidAssignmentError", "check_assignment"]


class InvalidAssignmentError(PartitionAssignorError):
    """An assignor returned a result that breaks the SPI contract. The coordinator treats it like
    any assignor failure: UNKNOWN_SERVER_ERROR, group unchanged."""


def _fail(message: str) -> InvalidAssignmentError:
    return InvalidAssignmentError(f"invalid assignment: {message}")


def check_assignment(
    group_spec: GroupSpec, topics: Mapping[TopicId, TopicMetadata], result: object
) -> None:
    """Raise :class:`InvalidAssignmentError` if ``result`` may not be installed for this group.

    The message names the first offending member, topic and partition (members and topics are
    examined in sorted order, so the message is the same for the same input).
    """
    if not isinstance(result, GroupAssignment):
        raise _fail(f"assign() returned {type(result).__name__}, not GroupAssignment")
    if not _looks_valid(group_spec, topics, result.members):
        _precise_check(group_spec, topics, result.members)


def _looks_valid(
    group_spec: GroupSpec, topics: Mapping[TopicId, TopicMetadata], given: object
) -> bool:
    """The fast path: True if the result is certainly valid; False means "look closer". Every
    step iterates in C (map, chain, set operations) except one pass that buckets the (member,
    topic) pairs by topic."""
    specs = group_spec.members
    if not isinstance(given, dict) or not isinstance(specs, dict):
        return False
    if len(given) != len(specs) or given.keys() != specs.keys():
        return False
    assignments = list(given.values())
    if not _all_types(assignments, dict):
        return False
    subscriptions = list(map(_subscribed, map(specs.__getitem__, given)))
    if not _all_types(subscriptions, frozenset):
        return False
    if not all(map(frozenset.issuperset, subscriptions, assignments)):
        return False
    sets = list(chain.from_iterable(map(dict.values, assignments)))
    if not _all_types(sets, frozenset) or not all(sets):
        return False
    by_topic: dict[TopicId, list[frozenset[int]]] = {}
    for topic_id, partitions in chain.from_iterable(map(dict.items, assignments)):
        bucket = by_topic.get(topic_id)
        if bucket is None:
            by_topic[topic_id] = [partitions]
        else:
            bucket.append(partitions)
    for topic_id, bucket in by_topic.items():
        metadata = topics.get(topic_id)
        if metadata is None:
            return False
        union: set[int] = set().union(*bucket)
        if len(union) != sum(map(len, bucket)) or not set(map(type, union)) <= {int}:
            return False
        if min(union) < 0 or max(union) >= metadata.num_partitions:
            return False
    return True


_subscribed = attrgetter("subscribed_topic_ids")


def _all_types(values: list[object], base: type) -> bool:
    """True if every value is an instance of ``base`` (the distinct types are few)."""
    return all(issubclass(t, base) for t in set(map(type, values)))


def _precise_check(
    group_spec: GroupSpec, topics: Mapping[TopicId, TopicMetadata], given: object
) -> None:
    """The slow path: examine everything in sorted order and raise on the first problem.
    Returns normally when the result is valid after all (e.g. mappings that are not dicts)."""
    if not isinstance(given, Mapping):
        raise _fail(f"GroupAssignment.members is a {type(given).__name__}, not a mapping")
    specs = group_spec.members
    if len(given) != len(specs) or any(m not in specs for m in given):
        unknown = sorted(repr(m) for m in given if m not in specs)
        if unknown:
            raise _fail(f"member {unknown[0]} is not in the group ({len(unknown)} unknown)")
        missing = sorted(m for m in specs if m not in given)
        raise _fail(f"member {missing[0]!r} is missing from the result ({len(missing)} missing)")

    # Pass 1: per member, structure and subscription; collect the partition sets per topic.
    by_topic: dict[TopicId, list[tuple[str, frozenset[int]]]] = {}
    for member_id in sorted(given):
        member_assignment = given[member_id]
        if not isinstance(member_assignment, Mapping):
            raise _fail(
                f"member {member_id!r}: assignment is a {type(member_assignment).__name__}, "
                "not a mapping of topic id -> frozenset"
            )
        subscribed = specs[member_id].subscribed_topic_ids
        for topic_id in sorted(member_assignment, key=str):
            partitions = member_assignment[topic_id]
            if not isinstance(partitions, frozenset):
                raise _fail(
                    f"member {member_id!r}, topic {topic_id!r}: partitions are a "
                    f"{type(partitions).__name__}, not a frozenset"
                )
            if not partitions:
                raise _fail(
                    f"member {member_id!r}, topic {topic_id!r}: empty partition set "
                    "(omit topics with no partitions)"
                )
            if topic_id not in subscribed:
                raise _fail(
                    f"member {member_id!r} is given topic {topic_id!r}, "
                    "to which it is not subscribed"
                )
            bucket = by_topic.get(topic_id)
            if bucket is None:
                by_topic[topic_id] = [(member_id, partitions)]
            else:
                bucket.append((member_id, partitions))

    # Pass 2: per topic, existence, index range and exclusivity.
    for topic_id in sorted(by_topic):
        entries = by_topic[topic_id]
        metadata = topics.get(topic_id)
        if metadata is None:
            raise _fail(
                f"member {entries[0][0]!r} is given topic {topic_id!r}, "
                "which is not in the topic metadata"
            )
        count = metadata.num_partitions
        sets = [partitions for _, partitions in entries]
        union: set[int] = set().union(*sets)
        if not set(map(type, union)) <= {int}:
            for member_id, partitions in entries:
                for p in sorted(partitions, key=repr):
                    if type(p) is not int:
                        raise _fail(
                            f"member {member_id!r}, topic {topic_id!r}: partition {p!r} is a "
                            f"{type(p).__name__}, not an int"
                        )
        if min(union) < 0 or max(union) >= count:
            for member_id, partitions in entries:
                bad = sorted(p for p in partitions if p < 0 or p >= count)
                if bad:
                    raise _fail(
                        f"member {member_id!r} is given partition {bad[0]} of topic "
                        f"{topic_id!r} ({metadata.name}), which has {count} partitions"
                    )
        if len(union) != sum(map(len, sets)):
            owner: dict[int, str] = {}
            for member_id, partitions in entries:
                for p in sorted(partitions):
                    first = owner.setdefault(p, member_id)
                    if first != member_id:
                        raise _fail(
                            f"partition {p} of topic {topic_id!r} ({metadata.name}) is given "
                            f"to both {first!r} and {member_id!r}"
                        )
