"""Loading a group from its stored records at once.

A load replays each group's records (its part of a partition's compacted view, in offset
order; the store gives them together, parsed from their JSON at once:
``[key, value, key, value, ...]``, ``RecordStore.load_groups``). Decoding each into its key and value objects and replaying them one by one builds every
member twice (from its metadata record, then from its current assignment), touches each index
once per record and allocates a few objects per record that are thrown away at once. Most of a
store is the records of consumer groups (KIP-848) and committed offsets, so for those this
module reads the codec's layout (``codec.py``) straight from the parsed JSON into the state that
replaying them builds: the same values, the same derived indexes, in the same order (dict
order included; equal immutable values may be one shared object, as a live group's current and
target assignments are). Records of classic groups and group configs, which depend on nothing
else of the group, are replayed one by one after it.

It takes only what is certain to build that state: a compacted view (no tombstones, each key
once), the codec's exact key layouts, groups new to the shard, and none of the records whose
replay depends on their order with respect to the others (resolved regular expressions,
transactional offsets, a classic group beside a consumer group of the same id), and no two
members owning one partition. For anything else :func:`load_group` changes nothing and answers
False: the caller replays the group's records one by one, which builds the state or says why a
record is corrupt.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from . import codec
from . import records as r
from .group import _NO_EPOCHS, _STATES, ConsumerGroup
from .model import EMPTY_ASSIGNMENT, Assignment, MemberState, build_member, complete_epochs
from .timeline import UndoLog

if TYPE_CHECKING:
    from .shard import GroupCoordinatorShard

_T = r.RecordType
_MEMBER_METADATA = int(_T.CONSUMER_GROUP_MEMBER_METADATA)
_TARGET_MEMBER = int(_T.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER)
_CURRENT_ASSIGNMENT = int(_T.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT)
_GROUP_METADATA = int(_T.CONSUMER_GROUP_METADATA)
_PARTITION_METADATA = int(_T.CONSUMER_GROUP_PARTITION_METADATA)
_TARGET_METADATA = int(_T.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA)
_GROUP_LEVEL = frozenset({_GROUP_METADATA, _PARTITION_METADATA, _TARGET_METADATA})
_OFFSET_COMMIT = int(_T.OFFSET_COMMIT)
# Replayed one by one after the rest: their replay reads nothing else of the group (a classic
# group only that no consumer group has its id, hence never beside one here).
_CLASSIC_GROUP = int(_T.GROUP_METADATA)
_GROUP_CONFIG = int(_T.GROUP_CONFIG)

_decode = codec.decode_parsed
_decode_assignment = codec.decode_assignment
_decode_classic = codec.decode_classic
_decode_current = codec.value_decoder(_T.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT)
_decode_partition_metadata = codec.value_decoder(_T.CONSUMER_GROUP_PARTITION_METADATA)
_new, _set = object.__new__, object.__setattr__
_STABLE = MemberState.STABLE

Records = Sequence[Any]
"""A group's records as parsed from the store: each record's key then its value (the codec's
JSON arrays; None: a tombstone), in offset order: ``[key, value, key, value, ...]``."""
Pair = tuple[Any, Any]


class _NotHere(Exception):
    """The group is not for this path: replay its records one by one."""


def load_group(shard: GroupCoordinatorShard[Any], group_id: str, records: Records) -> bool:
    """Replay the records of the group ``group_id`` (every record of it in a compacted view, in
    offset order) into ``shard``, whose undo log is off (loading): the state decoding and
    replaying each of them builds. False, with nothing changed, when this path cannot be sure
    of building it (see the module's docstring): the caller then replays them one by one."""
    undo = shard.undo
    if undo.enabled:
        return False  # the group's dicts are filled without the undo log
    try:
        group, commits, one_by_one = _load(undo, group_id, records)
        if group is not None and group_id in shard.groups:
            return False
        offsets = None
        if commits:
            if not shard.offsets.can_adopt(group_id):
                return False
            offsets = _offsets(commits)
    except Exception:  # noqa: BLE001 - _NotHere, or a surprise: the replay says what it is
        return False
    if group is not None:
        shard.groups.adopt(group)
    if offsets is not None:
        shard.offsets.adopt(group_id, offsets)
    replay = shard.replay
    for key, value in one_by_one:
        replay(_decode(key, value))
    return True


def _load(
    undo: UndoLog, group_id: str, records: Records
) -> tuple[ConsumerGroup | None, list[tuple[str, int, list[Any]]], list[Pair]]:
    """One pass over the records, checking each key's exact layout: the consumer group they
    build (None: no record of one), the offset commits (topic, partition, value), the records
    to replay one by one. Raises ``_NotHere`` for anything this path does not take.

    Target and current assignments go into the group's indexes as their records come (each
    index in the order of its records, as replay fills it); members are built at the end, once
    each, from their metadata and current assignment records. Record types are compared with
    their numbers, the commonest first."""
    group = ConsumerGroup(undo, group_id)
    target_owners, partition_owners = group.target_owners, group.partition_owners
    targets = group.target
    raw_targets: dict[str, Any] = {}
    metadata: dict[str, list[Any]] = {}
    assignments: dict[str, tuple[Any, ...]] = {}
    members: dict[str, None] = {}  # in the order of their first metadata or current assignment
    first_seen: dict[str, bool] = {}  # in the order of their first member record of any kind
    level: dict[int, list[Any]] = {}
    commits: list[tuple[str, int, list[Any]]] = []
    one_by_one: list[Pair] = []
    classic = False
    update, fromkeys, new_dict, put = dict.update, dict.fromkeys, undo.new_dict, dict.__setitem__
    pairs = iter(records)
    for key, value in zip(pairs, pairs, strict=True):
        if type(value) is not list:  # a tombstone (None) too
            raise _NotHere
        n = len(key)
        if n == 3:  # [type, group id, member id], or a config's [type, group id, name]
            kind, gid, member_id = key  # kind is an int only if key is a list
            if type(kind) is not int or gid != group_id or type(member_id) is not str:
                raise _NotHere
            if kind == _CURRENT_ASSIGNMENT:  # replay_current_assignment: a partition is
                if member_id in assignments:  # owned by one member at most
                    raise _NotHere
                first_seen[member_id] = True
                members[member_id] = None
                a = assignments[member_id] = _current(value, raw_targets, targets, member_id)
                for topic_id, partitions in a[3].items():
                    owners = partition_owners.get(topic_id)
                    if owners is None:
                        put(partition_owners, topic_id, new_dict(fromkeys(partitions, member_id)))
                    elif owners.keys().isdisjoint(partitions):
                        update(owners, fromkeys(partitions, member_id))
                    else:  # owned by another member: replay says which
                        raise _NotHere
                if a[4]:  # partitions pending revocation: owned too, by this member only
                    _own(partition_owners, new_dict, a[4], member_id)
            elif kind == _MEMBER_METADATA:
                if member_id in metadata:
                    raise _NotHere
                first_seen[member_id] = True
                members[member_id] = None
                metadata[member_id] = value
            elif kind == _TARGET_MEMBER:  # replay_target_member: a later member's record
                if member_id in raw_targets:  # takes a partition in the inverted index
                    raise _NotHere
                first_seen[member_id] = True
                raw = raw_targets[member_id] = value[1]
                if len(raw) == 1:  # one topic: decode_assignment without its calls
                    ((topic_id, partitions),) = raw
                    if partitions:
                        partitions = frozenset(partitions)
                        put(targets, member_id, {topic_id: partitions})
                        owners = target_owners.get(topic_id)
                        if owners is None:
                            put(target_owners, topic_id, new_dict(fromkeys(partitions, member_id)))
                        else:
                            update(owners, fromkeys(partitions, member_id))
                    else:
                        put(targets, member_id, {})
                    continue
                target = _decode_assignment(raw)
                for topic_id, partitions in target.items():
                    owners = target_owners.get(topic_id)
                    if owners is None:
                        put(target_owners, topic_id, new_dict(fromkeys(partitions, member_id)))
                    else:
                        update(owners, fromkeys(partitions, member_id))
                put(targets, member_id, target)
            elif kind == _GROUP_CONFIG:
                one_by_one.append((key, value))
            else:
                raise _NotHere
        elif n == 4:  # an offset commit: [type, group id, topic, partition]
            kind, gid, topic, partition = key
            if (
                type(kind) is not int
                or kind != _OFFSET_COMMIT
                or gid != group_id
                or type(topic) is not str
                or type(partition) is not int
            ):
                raise _NotHere
            commits.append((topic, partition, value))
        elif n == 2:  # [type, group id]: the group's own records, a classic group's
            kind, gid = key
            if type(kind) is not int or gid != group_id:
                raise _NotHere
            if kind in _GROUP_LEVEL:
                level[kind] = value
            elif kind == _CLASSIC_GROUP:
                classic = True
                one_by_one.append((key, value))
            else:
                raise _NotHere
        else:
            raise _NotHere
    if not first_seen and not level:
        return None, commits, one_by_one
    if classic:
        raise _NotHere
    _group_level(group, level)
    update(group.spec_dirty, first_seen)
    _members(group, members, metadata, assignments)
    return group, commits, one_by_one


def _group_level(group: ConsumerGroup, level: dict[int, list[Any]]) -> None:
    """The group's own records (each sets fields of its own: their order does not matter),
    their fields set as ConsumerGroup's ``replay_*`` set them (the undo log is off)."""
    value = level.get(_GROUP_METADATA)
    if value is not None:  # [version, epoch, group uid]
        group.group_epoch, group.group_uid = value[1], value[2]
    value = level.get(_PARTITION_METADATA)
    if value is not None:
        group.replay_partition_metadata(_decode_partition_metadata(value[1:]))
    value = level.get(_TARGET_METADATA)
    if value is not None:  # [version, assignment epoch, its time (when set)]
        group.assignment_epoch = value[1]
        group.assignment_timestamp_ms = value[2] if len(value) > 2 else 0


def _current(
    value: list[Any], raw_targets: dict[str, Any], targets: Any, member_id: str
) -> tuple[Any, ...]:
    """A current assignment record's (member epoch, previous member epoch, state, assigned,
    pending revocation, assignment epochs) as replay_current_assignment completes them."""
    epoch, state, raw_assigned = value[1], value[3], value[4]
    default_epoch = max(epoch, 0)  # replay computes it for every record
    member_state = _STATES.get(state) or MemberState.from_value(state)
    if len(value) == 7 and value[5] == [] and len(value[6]) == 1:
        # The common case: nothing pending, every partition assigned at one epoch. The codec
        # then shares the assignment with the epochs; an equal target is shared too.
        ((assigned_at, raw_at),) = value[6]
        if raw_at == raw_assigned:
            if raw_targets.get(member_id) == raw_assigned and member_id in targets:
                assigned = targets[member_id]
            else:
                assigned = _decode_assignment(raw_assigned)
            if assigned:
                return (
                    epoch,
                    value[2],
                    member_state,
                    assigned,
                    EMPTY_ASSIGNMENT,
                    {assigned_at: assigned},
                )
    decoded = _decode_current(value[1:])
    assigned = decoded.assigned_partitions
    pending = decoded.partitions_pending_revocation
    epochs = complete_epochs(
        _NO_EPOCHS if decoded.assignment_epochs is None else decoded.assignment_epochs,
        assigned,
        pending,
        default_epoch,
    )
    return epoch, value[2], member_state, assigned, pending, epochs


def _own(index: Any, new_dict: Any, assignment: Assignment, member_id: str) -> None:
    """ConsumerGroup._own of a member's partitions pending revocation: any partition already
    owned (by another member, or among its own assigned ones) goes to replay, which says
    which."""
    for topic_id, partitions in assignment.items():
        owners = index.get(topic_id)
        if owners is None:
            dict.__setitem__(index, topic_id, new_dict(dict.fromkeys(partitions, member_id)))
        elif owners.keys().isdisjoint(partitions):
            dict.update(owners, dict.fromkeys(partitions, member_id))
        else:
            raise _NotHere


def _members(
    group: ConsumerGroup,
    members: dict[str, None],
    metadata: dict[str, list[Any]],
    assignments: dict[str, tuple[Any, ...]],
) -> None:
    """Each member built once from its metadata and its current assignment (either may be
    missing: replay's defaults), indexed in the order of their metadata records
    (_index_member; a member created by its current assignment alone indexes nothing)."""
    built = {}
    static: dict[Any, str] = {}
    subscriptions: dict[tuple[Any, ...], int] = {}
    regexes: dict[Any, int] = {}
    votes: dict[Any, int] = {}
    classic = 0
    for member_id, v in metadata.items():
        instance_id, names, regex, assignor = v[1], tuple(v[5]), v[6], v[8]
        a = assignments.get(member_id) or _UNASSIGNED
        m = built[member_id] = build_member(
            member_id,
            instance_id,
            v[2],
            v[3],
            v[4],
            names,
            regex,
            assignor,
            v[7],
            None if len(v) < 10 or v[9] is None else _decode_classic(v[9]),
            a[0],
            a[1],
            a[2],
            a[3],
            a[4],
            a[5],
        )
        if instance_id is not None:
            static[instance_id] = member_id
        subscriptions[names] = subscriptions.get(names, 0) + 1
        if regex:
            regexes[regex] = regexes.get(regex, 0) + 1
        if assignor is not None:
            votes[assignor] = votes.get(assignor, 0) + 1
        if m.classic_member_metadata is not None:
            classic += 1
    if len(built) != len(members):
        for member_id, a in assignments.items():
            if member_id not in built:
                built[member_id] = build_member(
                    member_id, None, None, "", "", (), None, None, -1, None, *a
                )
    update = dict.update
    if list(built) == list(members):
        update(group.members, built)
    else:
        update(group.members, {member_id: built[member_id] for member_id in members})
    # Topic names counted by subscription first: each name still comes in the order replay
    # first counts it.
    subscribers: dict[Any, int] = {}
    for names, n in subscriptions.items():
        for name in frozenset(names):
            subscribers[name] = subscribers.get(name, 0) + n
    update(group.topic_subscribers, subscribers)
    if static:
        update(group.static_members, static)
    if regexes:
        update(group.regex_members, regexes)
    if votes:
        update(group.assignor_votes, votes)
    if classic:
        group.set("classic_members", classic)


_UNASSIGNED = (0, 0, _STABLE, EMPTY_ASSIGNMENT, EMPTY_ASSIGNMENT, _NO_EPOCHS)
"""A member without a current assignment record, as replay builds it."""


def _offsets(commits: list[tuple[str, int, list[Any]]]) -> dict[tuple[str, int], Any]:
    """Committed offsets by (topic, partition), as Offsets' replay keeps them (a later record
    of a partition replaces an earlier one in its place)."""
    out: dict[tuple[str, int], Any] = {}
    cls = r.OffsetCommitValue
    for topic, partition, value in commits:
        v = _new(cls)
        _set(v, "offset", value[1])
        _set(v, "leader_epoch", value[2])
        _set(v, "metadata", value[3])
        _set(v, "commit_timestamp_ms", value[4])
        _set(v, "expire_timestamp_ms", value[5])
        out[(topic, partition)] = v
    return out
