"""What the kit verifies on one scenario, as plain functions of (assignor, scenario)."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType

from assignors.api import (
    GroupAssignment,
    GroupSpec,
    MemberSubscription,
    PartitionAssignor,
    PartitionAssignorError,
    TopicId,
    TopicMetadata,
)
from assignors.conformance._model import (
    Scenario,
    make_group_spec,
    permuted,
    snapshot,
    with_assignment,
)
from assignors.summary import summarize
from assignors.validation import check_assignment

# Check names, in report order.
INTERFACE = "interface"
EMPTY_GROUP = "empty group"
UNKNOWN_TOPIC = "unknown topic"
NO_ERROR = "valid input accepted"
WELL_FORMED = "well-formed result"
MEMBERS = "every member, no stranger"
EXISTING = "existing partitions only"
EXCLUSIVE = "exclusivity"
SUBSCRIBER_ONLY = "subscriber-only"
COMPLETE = "completeness"
VALIDATION = "coordinator validation"
UNTOUCHED = "inputs untouched"
DETERMINISTIC = "determinism"
INCREMENTAL = "incremental agrees"
HASH_SEED = "hash-seed independence"
BALANCE = "balance"
STICKINESS = "stickiness"
RACK_FALLBACK = "racks: none relevant"
RACK_BALANCE = "racks: balance"
RACK_LOCALITY = "racks: locality"

PROPERTY_CHECKS = (
    NO_ERROR,
    WELL_FORMED,
    MEMBERS,
    EXISTING,
    EXCLUSIVE,
    SUBSCRIBER_ONLY,
    COMPLETE,
    VALIDATION,
    UNTOUCHED,
    DETERMINISTIC,
    INCREMENTAL,
)

RACK_CHECKS = (RACK_FALLBACK, RACK_BALANCE, RACK_LOCALITY)
"""Run for assignors that declare ``rack_aware = True`` (on groups with partition racks)."""

ELSEWHERE = "conformance-elsewhere"
"""A rack that holds no replica (members moved there make every rack irrelevant)."""

Owners = dict[tuple[TopicId, int], str]


@dataclass(slots=True)
class Figures:
    """Balance and stickiness numbers, summed over scenarios."""

    homogeneous: int = 0
    homogeneous_max_spread: int = 0
    homogeneous_unbalanced: int = 0
    heterogeneous: int = 0
    heterogeneous_max_spread: int = 0
    locally_improvable: int = 0
    chain_improvable: int = 0
    leaves: int = 0
    leaves_homogeneous: int = 0
    leave_lost_by_survivors: int = 0
    leave_lost_homogeneous: int = 0
    leave_moved: int = 0
    leave_minimum: int = 0
    joins: int = 0
    joins_homogeneous: int = 0
    join_moved: int = 0
    join_moved_between_old: int = 0
    join_moved_between_old_homogeneous: int = 0
    join_minimum_homogeneous: int = 0
    join_moved_homogeneous: int = 0
    racked: int = 0
    rack_local: int = 0
    rack_local_blind: int = 0

    def add(self, other: Figures) -> None:
        for name in (f.name for f in fields(self)):
            mine, theirs = getattr(self, name), getattr(other, name)
            merged = max(mine, theirs) if name.endswith("max_spread") else mine + theirs
            setattr(self, name, merged)


@dataclass(slots=True)
class Outcome:
    failures: dict[str, str] = field(default_factory=dict)
    figures: Figures = field(default_factory=Figures)
    balance_issue: str | None = None
    stickiness_issue: str | None = None

    def fail(self, check: str, message: str) -> None:
        self.failures.setdefault(check, message)


# ---------------------------------------------------------------------- one scenario


def evaluate(
    assignor: PartitionAssignor, scenario: Scenario, *, rack_aware: bool = False
) -> Outcome:
    """Every check on one scenario. Each call gets freshly built inputs, so an assignor that
    damages its input is reported once (inputs untouched) without spoiling the other checks;
    balance and stickiness are only measured on results that passed every validity check.
    ``rack_aware``: the assignor declares it; the rack checks run, and stickiness is measured
    on the group without partition racks (with racks, locality comes before stickiness)."""
    out = Outcome()
    result = _assign_checked(assignor, scenario.group_spec(), scenario.topic_metadata(), out, "")
    if result is None:
        return out
    valid = not out.failures

    # Determinism: the same input again, then an equal input built differently.
    again = _call(assignor, scenario.group_spec(), scenario.topic_metadata())
    if not isinstance(again, GroupAssignment) or _plain(again) != result:
        out.fail(DETERMINISTIC, "two calls with the same input gave different results")
    else:
        spec2, topics2 = permuted(scenario.group_spec(), scenario.topic_metadata())
        third = _call(assignor, spec2, topics2)
        if not isinstance(third, GroupAssignment) or _plain(third) != result:
            out.fail(
                DETERMINISTIC,
                "an equal input with mappings in another order (and sets, strings rebuilt) "
                "gave a different result",
            )

    if not valid:
        return out
    spec, topics = scenario.group_spec(), scenario.topic_metadata()
    _balance(spec, topics, result, out)
    if rack_aware and any(t.racks for t in scenario.topics):
        blind = scenario.without_racks()
        plain = _assign_checked(assignor, blind.group_spec(), blind.topic_metadata(), out, "")
        if plain is None or out.failures:
            return out
        _racks(assignor, scenario, spec, topics, result, plain, out)
        scenario, spec, result = blind, blind.group_spec(), plain
    if len(spec.members) > 1:
        _leave(assignor, scenario, spec, result, out)
    _join(assignor, scenario, spec, result, out)
    return out


def _racks(
    assignor: PartitionAssignor,
    scenario: Scenario,
    spec: GroupSpec,
    topics: Mapping[TopicId, TopicMetadata],
    result: dict[str, dict[TopicId, frozenset[int]]],
    blind: dict[str, dict[TopicId, frozenset[int]]],
    out: Outcome,
) -> None:
    """The rack checks: against the same group without partition racks (``blind``), balance
    no worse and at least as many rack-local partitions; with every member moved to a rack that
    holds no replica, exactly the result without partition racks."""
    loads, blind_loads = _loads(result), _loads(blind)
    if loads and max(loads.values()) - min(loads.values()) > max(blind_loads.values()) - min(
        blind_loads.values()
    ):
        out.fail(
            RACK_BALANCE,
            f"member sizes {sorted(loads.values())} with racks, "
            f"{sorted(blind_loads.values())} without",
        )
    local = _rack_local(spec, topics, result)
    local_blind = _rack_local(spec, topics, blind)
    f = out.figures
    f.racked += 1
    f.rack_local += local
    f.rack_local_blind += local_blind
    if local < local_blind:
        out.fail(
            RACK_LOCALITY,
            f"{local} partitions in their member's rack, {local_blind} without partition racks",
        )
    moved = Scenario(
        topics=scenario.topics,
        members=tuple(
            m if m.rack_id is None else dataclasses.replace(m, rack_id=ELSEWHERE)
            for m in scenario.members
        ),
    )
    far = _call(assignor, moved.group_spec(), moved.topic_metadata())
    near = _call(assignor, moved.group_spec(), moved.without_racks().topic_metadata())
    if not isinstance(far, GroupAssignment) or not isinstance(near, GroupAssignment):
        out.fail(RACK_FALLBACK, "assign() failed with every member in a rack without replicas")
    elif _plain(far) != _plain(near):
        out.fail(
            RACK_FALLBACK,
            "with no member in a rack holding a replica, the result differs from the one "
            "without partition racks",
        )


def _rack_local(
    spec: GroupSpec,
    topics: Mapping[TopicId, TopicMetadata],
    plain: Mapping[str, Mapping[TopicId, frozenset[int]]],
) -> int:
    """Partitions with a replica in their member's rack."""
    local = 0
    for m, assignment in plain.items():
        rack = spec.members[m].rack_id
        if rack is None:
            continue
        for t, partitions in assignment.items():
            racks = topics[t].partition_racks
            local += sum(1 for p in partitions if rack in racks.get(p, ()))
    return local


def _call(
    assignor: PartitionAssignor, spec: GroupSpec, topics: Mapping[TopicId, TopicMetadata]
) -> object:
    try:
        return assignor.assign(spec, topics)
    except Exception as exc:  # noqa: BLE001
        return exc


def _assign_checked(
    assignor: PartitionAssignor,
    spec: GroupSpec,
    topics: Mapping[TopicId, TopicMetadata],
    out: Outcome,
    context: str,
) -> dict[str, dict[TopicId, frozenset[int]]] | None:
    """Call assign and run every validity check; the plain result, or None if unusable."""
    before = snapshot(spec, topics)
    # Checked against pristine copies, in case the assignor damages what it was given.
    given_spec, given_topics = spec, topics
    spec, topics = copy.deepcopy(spec), copy.deepcopy(topics)
    try:
        result = assignor.assign(given_spec, given_topics)
    except Exception as exc:  # noqa: BLE001
        out.fail(NO_ERROR, f"{context}assign() raised {type(exc).__name__}: {exc}")
        return None
    if snapshot(given_spec, given_topics) != before:
        out.fail(UNTOUCHED, f"{context}assign() modified its input")
    problem = _structure_problem(result)
    if problem:
        out.fail(WELL_FORMED, context + problem)
        return None
    plain = _plain(result)
    members = spec.members
    unknown = sorted(set(plain) - set(members))
    missing = sorted(set(members) - set(plain))
    if unknown:
        out.fail(MEMBERS, f"{context}the result names member {unknown[0]!r}, not in the group")
    if missing:
        out.fail(MEMBERS, f"{context}member {missing[0]!r} is missing from the result")
    owners: Owners = {}
    for member_id in sorted(plain):
        subscribed = (
            members[member_id].subscribed_topic_ids if member_id in members else frozenset()
        )
        for t in sorted(plain[member_id]):
            md = topics.get(t)
            if md is None:
                out.fail(
                    EXISTING,
                    f"{context}member {member_id!r} is given topic {t!r}, which is not in the metadata",
                )
                continue
            if t not in subscribed:
                out.fail(
                    SUBSCRIBER_ONLY,
                    f"{context}member {member_id!r} is given topic {md.name} ({t}), to which it is not subscribed",
                )
            for p in sorted(plain[member_id][t]):
                if not 0 <= p < md.num_partitions:
                    out.fail(
                        EXISTING,
                        f"{context}member {member_id!r} is given partition {p} of {md.name}, which has {md.num_partitions}",
                    )
                    continue
                first = owners.setdefault((t, p), member_id)
                if first != member_id:
                    out.fail(
                        EXCLUSIVE,
                        f"{context}partition {p} of {md.name} is given to both {first!r} and {member_id!r}",
                    )
    wanted = {t for s in members.values() for t in s.subscribed_topic_ids if t in topics}
    for t in sorted(wanted):
        md = topics[t]
        left = [p for p in range(md.num_partitions) if (t, p) not in owners]
        if left:
            out.fail(
                COMPLETE,
                f"{context}{len(left)} partition(s) of {md.name} left unassigned, e.g. {left[0]}",
            )
    try:
        check_assignment(spec, topics, result)
    except PartitionAssignorError as exc:
        out.fail(VALIDATION, f"{context}{exc}")
    _incremental(assignor, spec, topics, plain, out, context)
    return plain


def _incremental(
    assignor: PartitionAssignor,
    spec: GroupSpec,
    topics: Mapping[TopicId, TopicMetadata],
    plain: dict[str, dict[TopicId, frozenset[int]]],
    out: Outcome,
    context: str,
) -> None:
    """For an assignor with the optional ``assign_changes``: given the spec with its target
    summary (as the coordinator gives it: members in another order, read-only), its changes
    laid over the current assignments must be ``assign``'s result. None (declined) is fine."""
    assign_changes = getattr(assignor, "assign_changes", None)
    if assign_changes is None:
        return
    summary = summarize(spec, topics)
    if summary is None:
        return  # stale targets: the coordinator offers no summary then
    members = dict(reversed(list(spec.members.items())))
    given = dataclasses.replace(spec, members=MappingProxyType(members), target_summary=summary)
    try:
        changes = assign_changes(given, topics)
    except Exception as exc:  # noqa: BLE001
        out.fail(INCREMENTAL, f"{context}assign_changes() raised {type(exc).__name__}: {exc}")
        return
    if changes is None:
        return
    if not isinstance(changes, Mapping):
        out.fail(INCREMENTAL, f"{context}assign_changes() returned {type(changes).__name__}")
        return
    for member_id in sorted(set(changes) | set(plain)):
        if member_id not in members:
            out.fail(INCREMENTAL, f"{context}assign_changes() names {member_id!r}, not a member")
            return
        got = changes.get(member_id, members[member_id].assignment)
        mine = {t: frozenset(ps) for t, ps in got.items() if ps}
        if mine != plain.get(member_id):
            out.fail(
                INCREMENTAL,
                f"{context}member {member_id!r}: assign_changes() gives {_show(mine)}, "
                f"assign() {_show(plain.get(member_id, {}))}",
            )
            return


def _show(assignment: Mapping[TopicId, frozenset[int]]) -> str:
    return "{" + ", ".join(f"{t}: {sorted(ps)}" for t, ps in sorted(assignment.items())) + "}"


def _structure_problem(result: object) -> str | None:
    if not isinstance(result, GroupAssignment):
        return f"assign() returned {type(result).__name__}, not GroupAssignment"
    if not isinstance(result.members, Mapping):
        return "GroupAssignment.members is not a mapping"
    for member_id, assignment in result.members.items():
        if not isinstance(assignment, Mapping):
            return (
                f"member {member_id!r}: assignment is a {type(assignment).__name__}, not a mapping"
            )
        for t, partitions in assignment.items():
            if not isinstance(partitions, frozenset):
                return (
                    f"member {member_id!r}, topic {t!r}: {type(partitions).__name__}, not frozenset"
                )
            if not partitions:
                return f"member {member_id!r}, topic {t!r}: empty set (omit the topic instead)"
            if any(type(p) is not int for p in partitions):
                return f"member {member_id!r}, topic {t!r}: partitions must be ints"
    return None


def _plain(result: GroupAssignment) -> dict[str, dict[TopicId, frozenset[int]]]:
    return {m: dict(a) for m, a in result.members.items()}


def _owners(plain: Mapping[str, Mapping[TopicId, frozenset[int]]]) -> Owners:
    return {(t, p): m for m, a in plain.items() for t, ps in a.items() for p in ps}


def _loads(plain: Mapping[str, Mapping[TopicId, frozenset[int]]]) -> dict[str, int]:
    return {m: sum(map(len, a.values())) for m, a in plain.items()}


# ---------------------------------------------------------------------- figures


def _balance(
    spec: GroupSpec,
    topics: Mapping[TopicId, TopicMetadata],
    plain: dict[str, dict[TopicId, frozenset[int]]],
    out: Outcome,
) -> None:
    loads = _loads(plain)
    if not loads:
        return
    spread = max(loads.values()) - min(loads.values())
    f = out.figures
    subscribed = {m: s.subscribed_topic_ids for m, s in spec.members.items()}
    if len(set(subscribed.values())) <= 1:
        f.homogeneous += 1
        f.homogeneous_max_spread = spread
        if spread > 1:
            f.homogeneous_unbalanced += 1
            out.balance_issue = f"homogeneous group with member sizes {sorted(loads.values())}"
        return
    f.heterogeneous += 1
    f.heterogeneous_max_spread = spread
    # Locally improvable: a partition could move to another subscriber of its topic that holds
    # two or more partitions fewer than its owner.
    local = False
    for owner, assignment in plain.items():
        for t in assignment:
            for other, subs in subscribed.items():
                if t in subs and loads[owner] - loads[other] >= 2:
                    local = True
                    if out.balance_issue is None:
                        out.balance_issue = (
                            f"{owner!r} holds {loads[owner]} including {topics[t].name}; "
                            f"{other!r} also subscribes to it and holds {loads[other]}"
                        )
    if local:
        f.locally_improvable += 1
    # Chain-improvable: partitions could travel along owner -> subscriber -> ... to a member two
    # or more partitions lighter (a sequence of moves that narrows the spread).
    for source in plain:
        seen = {source}
        frontier = [source]
        while frontier:
            following = []
            for member in frontier:
                for t in plain.get(member, {}):
                    for other, subs in subscribed.items():
                        if other not in seen and t in subs:
                            seen.add(other)
                            following.append(other)
            frontier = following
        if any(loads[source] - loads[m] >= 2 for m in seen):
            f.chain_improvable += 1
            break


def _leave(
    assignor: PartitionAssignor,
    scenario: Scenario,
    spec: GroupSpec,
    before: dict[str, dict[TopicId, frozenset[int]]],
    out: Outcome,
) -> None:
    order = [m.member_id for m in scenario.members]
    gone = order[scenario.leaver % len(order)]
    survivors = {m: s for m, s in spec.members.items() if m != gone}
    next_spec = with_assignment(make_group_spec(survivors), before)
    failures = len(out.failures)
    context = f"after {gone!r} left: "
    after = _assign_checked(assignor, next_spec, scenario.topic_metadata(), out, context)
    if after is None or len(out.failures) != failures:
        return
    old, new = _owners(before), _owners(after)
    lost = sum(1 for key, m in old.items() if m != gone and new.get(key) != m)
    moved = sum(1 for key, m in old.items() if key in new and new[key] != m)
    f = out.figures
    f.leaves += 1
    f.leave_lost_by_survivors += lost
    f.leave_moved += moved
    # Only the leaver's partitions that someone else subscribes to have to move.
    wanted = {t for s in survivors.values() for t in s.subscribed_topic_ids}
    f.leave_minimum += sum(1 for (t, _), m in old.items() if m == gone and t in wanted)
    if len({s.subscribed_topic_ids for s in survivors.values()}) <= 1:
        f.leaves_homogeneous += 1
        f.leave_lost_homogeneous += lost
        if lost and out.stickiness_issue is None:
            out.stickiness_issue = (
                f"after {gone!r} left a homogeneous group, survivors lost {lost} partition(s)"
            )


def _join(
    assignor: PartitionAssignor,
    scenario: Scenario,
    spec: GroupSpec,
    before: dict[str, dict[TopicId, frozenset[int]]],
    out: Outcome,
) -> None:
    newcomer = "conformance-new-member"
    while newcomer in spec.members:
        newcomer += "-x"
    first = scenario.members[0]
    subscription = scenario.joiner_subscription
    topics_wanted = frozenset(first.subscription if subscription is None else subscription)
    members = dict(spec.members)
    members[newcomer] = MemberSubscription(
        rack_id=None, instance_id=None, subscribed_topic_ids=topics_wanted, assignment={}
    )
    next_spec = with_assignment(make_group_spec(members), before)
    failures = len(out.failures)
    topics = scenario.topic_metadata()
    context = f"after {newcomer!r} joined: "
    after = _assign_checked(assignor, next_spec, topics, out, context)
    if after is None or len(out.failures) != failures:
        return
    old, new = _owners(before), _owners(after)
    moved = sum(1 for key, m in old.items() if key in new and new[key] != m)
    between_old = sum(1 for key, m in old.items() if new.get(key) not in (m, newcomer, None))
    f = out.figures
    f.joins += 1
    f.join_moved += moved
    f.join_moved_between_old += between_old
    if len({s.subscribed_topic_ids for s in members.values()}) <= 1:
        total = sum(topics[t].num_partitions for t in topics_wanted if t in topics)
        fair = total // len(members)
        unassigned_before = sum(
            1
            for t in topics_wanted
            if t in topics
            for p in range(topics[t].num_partitions)
            if (t, p) not in old
        )
        f.joins_homogeneous += 1
        f.join_moved_between_old_homogeneous += between_old
        f.join_moved_homogeneous += moved
        # Balance needs the newcomer to get at least `fair`; only what was unassigned comes free.
        f.join_minimum_homogeneous += max(0, fair - unassigned_before)
        if between_old and out.stickiness_issue is None:
            out.stickiness_issue = (
                f"after {newcomer!r} joined a homogeneous group, {between_old} partition(s) "
                "moved between members that were already there"
            )
