"""Record <-> bytes. Pure and deterministic: the same record always gives the same bytes.

Keys and values are compact JSON arrays (positional fields, Kafka field order), so a dump is
readable and loading is fast. Layout: key = ``[type, *key_fields]``; value =
``[value_version, *value_fields]``; a tombstone has no value bytes. Assignments are encoded as
``[[topic_id, [p, ...]], ...]`` sorted by topic id and partition. Unknown record types raise
:class:`~coordinator.core.errors.IllegalStateError` (a newer store must be refused earlier, by
its schema version).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any

import orjson

from assignors.api import TopicMetadata

from . import records as r
from .errors import IllegalStateError
from .model import (
    Assignment,
    ClassicMemberMetadata,
    PartitionRacks,
    make_partition_racks,
    partition_racks_groups,
)

VALUE_VERSION = 0


_new, _set = object.__new__, object.__setattr__


def _current_assignment(
    epoch: int, prev: int, state: int, assigned: Any, pending: Any, epochs: Any
) -> Any:
    """``ConsumerGroupCurrentMemberAssignmentValue(...)`` without keyword parsing (hot at load)."""
    v = _new(r.ConsumerGroupCurrentMemberAssignmentValue)
    _set(v, "member_epoch", epoch)
    _set(v, "previous_member_epoch", prev)
    _set(v, "state", state)
    _set(v, "assigned_partitions", assigned)
    _set(v, "partitions_pending_revocation", pending)
    _set(v, "assignment_epochs", epochs)
    return v


def _member_metadata(
    instance_id: Any,
    rack_id: Any,
    client_id: Any,
    client_host: Any,
    names: Any,
    regex: Any,
    rebalance_timeout_ms: Any,
    assignor: Any,
    classic: Any,
) -> Any:
    """``ConsumerGroupMemberMetadataValue(...)`` without keyword parsing (hot at load)."""
    v = _new(r.ConsumerGroupMemberMetadataValue)
    _set(v, "instance_id", instance_id)
    _set(v, "rack_id", rack_id)
    _set(v, "client_id", client_id)
    _set(v, "client_host", client_host)
    _set(v, "subscribed_topic_names", names)
    _set(v, "subscribed_topic_regex", regex)
    _set(v, "rebalance_timeout_ms", rebalance_timeout_ms)
    _set(v, "server_assignor", assignor)
    _set(v, "classic_member_metadata", classic)
    return v


def _enc_assignment(a: Assignment) -> list[Any]:
    return [[t, sorted(a[t])] for t in sorted(a)]


def _dec_assignment(raw: list[Any]) -> dict[str, frozenset[int]]:
    return {t: frozenset(ps) for t, ps in raw if ps}


def _enc_racks(racks: Mapping[int, frozenset[str]]) -> list[Any]:
    """Partition racks as ``[[[rack, ...], [partition, ...]], ...]``: one entry per distinct
    set of racks (sorted), its partitions ascending; entries in the order of their racks."""
    return [[rs, ps] for rs, ps in partition_racks_groups(racks)]


def _dec_racks(raw: list[Any]) -> PartitionRacks:
    out: dict[int, frozenset[str]] = {}
    for rs, ps in raw:
        value = frozenset(rs)
        out.update(dict.fromkeys(ps, value))
    return make_partition_racks(out.items())


def _enc_classic(c: ClassicMemberMetadata | None) -> Any:
    if c is None:
        return None
    protocols = [
        [name, base64.b64encode(meta).decode("ascii")] for name, meta in c.supported_protocols
    ]
    return [c.session_timeout_ms, protocols]


def _dec_classic(raw: Any) -> ClassicMemberMetadata | None:
    if raw is None:
        return None
    timeout, protocols = raw
    return ClassicMemberMetadata(
        session_timeout_ms=timeout,
        supported_protocols=tuple((name, base64.b64decode(meta)) for name, meta in protocols),
    )


def _dec_rebalance(raw: list[Any]) -> r.GroupMetadataRebalanceValue:
    preparing_ms, completing_ms, cause, client_reason, removed = raw
    return r.GroupMetadataRebalanceValue(
        preparing_ms=preparing_ms,
        completing_ms=completing_ms,
        cause=cause,
        client_reason=client_reason,
        removed=tuple(
            r.GroupMetadataRemovedMember(member_id=mid, cause=why, removed_ms=at)
            for mid, why, at in removed
        ),
    )


_KEY_CLASSES: tuple[type[r.RecordKey], ...] = (
    r.OffsetCommitKey,
    r.TxnOffsetCommitKey,
    r.GroupTransactionKey,
    r.GroupMetadataKey,
    r.ConsumerGroupMetadataKey,
    r.ConsumerGroupPartitionMetadataKey,
    r.ConsumerGroupMemberMetadataKey,
    r.ConsumerGroupTargetAssignmentMetadataKey,
    r.ConsumerGroupTargetAssignmentMemberKey,
    r.ConsumerGroupCurrentMemberAssignmentKey,
    r.ConsumerGroupRegularExpressionKey,
    r.GroupConfigKey,
    r.TopicKey,
    r.ConfigKey,
    r.AccessControlEntryKey,
    r.UserScramCredentialKey,
    r.TransactionalIdGroupKey,
)

_KEY_FIELDS: dict[r.RecordType, tuple[type[r.RecordKey], tuple[str, ...]]] = {
    cls.TYPE: (cls, tuple(f.name for f in fields(cls))) for cls in _KEY_CLASSES
}


_KEY_TYPES: dict[r.RecordType, tuple[type, ...]] = {
    type_id: tuple(int if f.type in ("int", int) else str for f in fields(cls))
    for type_id, (cls, _names) in _KEY_FIELDS.items()
}


def _check_key(raw: list[Any]) -> None:
    """Keys must have exactly the declared field types (bool is not an int, 3.0 is not 3)."""
    type_id = raw[0]
    if type(type_id) is not int:
        raise IllegalStateError(f"record type must be an integer, got {type_id!r}")
    try:
        expected = _KEY_TYPES[r.RecordType(type_id)]
    except ValueError:
        raise IllegalStateError(f"unknown record type {type_id}") from None
    if tuple(map(type, raw))[1:] != expected:
        raise IllegalStateError(f"malformed key for record type {type_id}: {raw!r}")


def _value_encoders() -> dict[
    r.RecordType, tuple[Callable[[Any], list[Any]], Callable[[list[Any]], Any]]
]:
    def oc_enc(v: r.OffsetCommitValue) -> list[Any]:
        return [v.offset, v.leader_epoch, v.metadata, v.commit_timestamp_ms, v.expire_timestamp_ms]

    def oc_dec(f: list[Any]) -> r.OffsetCommitValue:
        return r.OffsetCommitValue(
            offset=f[0],
            leader_epoch=f[1],
            metadata=f[2],
            commit_timestamp_ms=f[3],
            expire_timestamp_ms=f[4],
        )

    def b64(b: bytes) -> str:
        return base64.b64encode(b).decode("ascii")

    def gm_enc(v: r.GroupMetadataValue) -> list[Any]:
        members = [
            [
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout_ms,
                m.session_timeout_ms,
                b64(m.subscription),
                b64(m.assignment),
            ]
            for m in v.members
        ]
        out = [
            v.protocol_type,
            v.generation,
            v.protocol,
            v.leader,
            v.current_state_timestamp_ms,
            members,
        ]
        # The rebalance is a trailing field (older builds read the first six), written only
        # when set: records without it keep the bytes they always had.
        rb = v.rebalance
        if rb is not None:
            out.append(
                [
                    rb.preparing_ms,
                    rb.completing_ms,
                    rb.cause,
                    rb.client_reason,
                    [[x.member_id, x.cause, x.removed_ms] for x in rb.removed],
                ]
            )
        return out

    def gm_dec(f: list[Any]) -> r.GroupMetadataValue:
        return r.GroupMetadataValue(
            protocol_type=f[0],
            generation=f[1],
            protocol=f[2],
            leader=f[3],
            current_state_timestamp_ms=f[4],
            members=tuple(
                r.GroupMetadataMemberValue(
                    member_id=m[0],
                    group_instance_id=m[1],
                    client_id=m[2],
                    client_host=m[3],
                    rebalance_timeout_ms=m[4],
                    session_timeout_ms=m[5],
                    subscription=base64.b64decode(m[6]),
                    assignment=base64.b64decode(m[7]),
                )
                for m in f[5]
            ),
            rebalance=_dec_rebalance(f[6]) if len(f) > 6 else None,
        )

    def md_enc(v: r.ConsumerGroupMetadataValue) -> list[Any]:
        return [v.epoch, v.group_uid]

    def md_dec(f: list[Any]) -> r.ConsumerGroupMetadataValue:
        return r.ConsumerGroupMetadataValue(epoch=f[0], group_uid=f[1])

    # Partition racks are a trailing element of a topic, written only when known: a group
    # without rack information has the bytes it always had.
    def pm_topic(t: TopicMetadata) -> list[Any]:
        if t.partition_racks:
            return [t.topic_id, t.name, t.num_partitions, _enc_racks(t.partition_racks)]
        return [t.topic_id, t.name, t.num_partitions]

    def pm_enc(v: r.ConsumerGroupPartitionMetadataValue) -> list[Any]:
        return [list(map(pm_topic, v.topics))]

    def pm_dec(f: list[Any]) -> r.ConsumerGroupPartitionMetadataValue:
        return r.ConsumerGroupPartitionMetadataValue(
            topics=tuple(
                TopicMetadata(topic_id=t[0], name=t[1], num_partitions=t[2])
                if len(t) < 4
                else TopicMetadata(
                    topic_id=t[0],
                    name=t[1],
                    num_partitions=t[2],
                    partition_racks=_dec_racks(t[3]),
                )
                for t in f[0]
            )
        )

    def mm_enc(v: r.ConsumerGroupMemberMetadataValue) -> list[Any]:
        return [
            v.instance_id,
            v.rack_id,
            v.client_id,
            v.client_host,
            list(v.subscribed_topic_names),
            v.subscribed_topic_regex,
            v.rebalance_timeout_ms,
            v.server_assignor,
            _enc_classic(v.classic_member_metadata),
        ]

    def mm_dec(f: list[Any]) -> r.ConsumerGroupMemberMetadataValue:
        return _member_metadata(  # field order of ConsumerGroupMemberMetadataValue
            f[0],
            f[1],
            f[2],
            f[3],
            tuple(f[4]),
            f[5],
            f[6],
            f[7],
            _dec_classic(f[8] if len(f) > 8 else None),
        )

    def te_enc(v: r.ConsumerGroupTargetAssignmentMetadataValue) -> list[Any]:
        # The timestamp is a trailing field, written only when set: a target computed with
        # batching off has the bytes it always had.
        if v.assignment_timestamp_ms:
            return [v.assignment_epoch, v.assignment_timestamp_ms]
        return [v.assignment_epoch]

    def te_dec(f: list[Any]) -> r.ConsumerGroupTargetAssignmentMetadataValue:
        return r.ConsumerGroupTargetAssignmentMetadataValue(
            assignment_epoch=f[0], assignment_timestamp_ms=f[1] if len(f) > 1 else 0
        )

    def tm_enc(v: r.ConsumerGroupTargetAssignmentMemberValue) -> list[Any]:
        return [_enc_assignment(v.topic_partitions)]

    def tm_dec(f: list[Any]) -> r.ConsumerGroupTargetAssignmentMemberValue:
        return r.ConsumerGroupTargetAssignmentMemberValue(topic_partitions=_dec_assignment(f[0]))

    def ca_enc(v: r.ConsumerGroupCurrentMemberAssignmentValue) -> list[Any]:
        out = [
            v.member_epoch,
            v.previous_member_epoch,
            v.state,
            _enc_assignment(v.assigned_partitions),
            _enc_assignment(v.partitions_pending_revocation),
        ]
        # KIP-1251's assignment epochs: a trailing field (older builds ignore it), absent from
        # records written before it, so their bytes stay as they were.
        if v.assignment_epochs is not None:
            epochs = v.assignment_epochs
            out.append([[e, _enc_assignment(epochs[e])] for e in sorted(epochs)])
        return out

    def ca_dec(f: list[Any]) -> r.ConsumerGroupCurrentMemberAssignmentValue:
        assigned, pending = _dec_assignment(f[3]), _dec_assignment(f[4])
        epochs = None
        if len(f) > 5:
            epochs = {e: a for e, a in ((e, _dec_assignment(a)) for e, a in f[5]) if a}
            if len(epochs) == 1 and not pending:
                # One epoch for every partition (the common case): share the assignment.
                ((e, a),) = epochs.items()
                if a == assigned:
                    epochs = {e: assigned}
        return _current_assignment(f[0], f[1], f[2], assigned, pending, epochs)

    def rx_enc(v: r.ConsumerGroupRegularExpressionValue) -> list[Any]:
        return [list(v.topics), v.version, v.timestamp_ms]

    def rx_dec(f: list[Any]) -> r.ConsumerGroupRegularExpressionValue:
        return r.ConsumerGroupRegularExpressionValue(
            topics=tuple(f[0]), version=f[1], timestamp_ms=f[2]
        )

    def gc_enc(v: r.GroupConfigValue) -> list[Any]:
        return [v.value]

    def gc_dec(f: list[Any]) -> r.GroupConfigValue:
        return r.GroupConfigValue(value=f[0])

    def cf_enc(v: r.ConfigValue) -> list[Any]:
        return [v.value]

    def cf_dec(f: list[Any]) -> r.ConfigValue:
        return r.ConfigValue(value=f[0])

    def tp_enc(v: r.TopicValue) -> list[Any]:
        if v.partition_racks:  # trailing, as in the subscription metadata
            return [v.topic_id, v.num_partitions, _enc_racks(v.partition_racks)]
        return [v.topic_id, v.num_partitions]

    def tp_dec(f: list[Any]) -> r.TopicValue:
        if len(f) > 2:
            return r.TopicValue(
                topic_id=f[0], num_partitions=f[1], partition_racks=_dec_racks(f[2])
            )
        return r.TopicValue(topic_id=f[0], num_partitions=f[1])

    def acl_enc(_v: r.AccessControlEntryValue) -> list[Any]:
        return []

    def acl_dec(_f: list[Any]) -> r.AccessControlEntryValue:
        return r.AccessControlEntryValue()

    def scram_enc(v: r.UserScramCredentialValue) -> list[Any]:
        return [b64(v.salt), b64(v.stored_key), b64(v.server_key), v.iterations]

    def scram_dec(f: list[Any]) -> r.UserScramCredentialValue:
        return r.UserScramCredentialValue(
            salt=base64.b64decode(f[0]),
            stored_key=base64.b64decode(f[1]),
            server_key=base64.b64decode(f[2]),
            iterations=f[3],
        )

    def txo_enc(v: r.TxnOffsetCommitValue) -> list[Any]:
        return [v.offset, v.leader_epoch, v.metadata, v.commit_timestamp_ms, v.producer_epoch]

    def txo_dec(f: list[Any]) -> r.TxnOffsetCommitValue:
        return r.TxnOffsetCommitValue(
            offset=f[0],
            leader_epoch=f[1],
            metadata=f[2],
            commit_timestamp_ms=f[3],
            producer_epoch=f[4],
        )

    def gtx_enc(v: r.GroupTransactionValue) -> list[Any]:
        return [v.transactional_id, v.producer_epoch, int(v.state), v.updated_ms]

    def gtx_dec(f: list[Any]) -> r.GroupTransactionValue:
        return r.GroupTransactionValue(
            transactional_id=f[0],
            producer_epoch=f[1],
            state=r.TransactionState(f[2]),
            updated_ms=f[3],
        )

    def tig_enc(v: r.TransactionalIdGroupValue) -> list[Any]:
        return [v.group_id, v.active_ms]

    def tig_dec(f: list[Any]) -> r.TransactionalIdGroupValue:
        # A record written before ``active_ms`` was has the group only: its activity unknown.
        return r.TransactionalIdGroupValue(group_id=f[0], active_ms=f[1] if len(f) > 1 else -1)

    t = r.RecordType
    return {
        t.OFFSET_COMMIT: (oc_enc, oc_dec),
        t.TXN_OFFSET_COMMIT: (txo_enc, txo_dec),
        t.GROUP_TRANSACTION: (gtx_enc, gtx_dec),
        t.GROUP_METADATA: (gm_enc, gm_dec),
        t.CONSUMER_GROUP_METADATA: (md_enc, md_dec),
        t.CONSUMER_GROUP_PARTITION_METADATA: (pm_enc, pm_dec),
        t.CONSUMER_GROUP_MEMBER_METADATA: (mm_enc, mm_dec),
        t.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA: (te_enc, te_dec),
        t.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER: (tm_enc, tm_dec),
        t.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT: (ca_enc, ca_dec),
        t.CONSUMER_GROUP_REGULAR_EXPRESSION: (rx_enc, rx_dec),
        t.GROUP_CONFIG: (gc_enc, gc_dec),
        t.TOPIC: (tp_enc, tp_dec),
        t.CONFIG: (cf_enc, cf_dec),
        t.ACCESS_CONTROL_ENTRY: (acl_enc, acl_dec),
        t.USER_SCRAM_CREDENTIAL: (scram_enc, scram_dec),
        t.TRANSACTIONAL_ID_GROUP: (tig_enc, tig_dec),
    }


_VALUES = _value_encoders()


def encode_key(key: r.RecordKey) -> bytes:
    cls_fields = _KEY_FIELDS[key.TYPE][1]
    return orjson.dumps([int(key.TYPE), *(getattr(key, f) for f in cls_fields)])


def encode(record: r.Record) -> tuple[bytes, bytes | None]:
    """Record -> (key bytes, value bytes or None for a tombstone)."""
    key = encode_key(record.key)
    if record.value is None:
        return key, None
    enc = _VALUES[record.key.TYPE][0]
    return key, orjson.dumps([VALUE_VERSION, *enc(record.value)])


def _key_builder(cls: type, names: tuple[str, ...]) -> Callable[[list[Any]], Any]:
    """``cls(*raw[1:])`` for a decoded key ``raw``, without the frozen dataclass's keyword
    ``__init__`` (about three times as fast; loading a store decodes millions of keys)."""
    if len(names) == 1:
        (a,) = names

        def build1(raw: list[Any]) -> Any:
            k: Any = _new(cls)
            _set(k, a, raw[1])
            return k

        return build1
    if len(names) == 2:
        a, b = names

        def build2(raw: list[Any]) -> Any:
            k: Any = _new(cls)
            _set(k, a, raw[1])
            _set(k, b, raw[2])
            return k

        return build2

    def build(raw: list[Any]) -> Any:
        k: Any = _new(cls)
        for name, field_value in zip(names, raw[1:], strict=True):
            _set(k, name, field_value)
        return k

    return build


def _signature_table() -> dict[
    tuple[int, tuple[type, ...]], tuple[Callable[[list[Any]], Any], Callable[[list[Any]], Any]]
]:
    """(record type, exact JSON field types of its key) -> (how to build the key, how to
    decode the value) (an offset key is ``(1, (int, str, str, int))``). One dict lookup both
    type-checks a key (bool is not int, 3.0 is not 3) and finds its decoders."""
    return {
        (type_id, (int, *types)): (_key_builder(*_KEY_FIELDS[type_id]), _VALUES[type_id][1])
        for type_id, types in _KEY_TYPES.items()
    }


_SIGNATURES = _signature_table()


def _record(key: Any, value: Any) -> r.Record:
    """``Record(key, value)`` without the keyword ``__init__`` (hot at load)."""
    rec = _new(r.Record)
    _set(rec, "key", key)
    _set(rec, "value", value)
    return rec


def decode(key: bytes, value: bytes | None) -> r.Record:
    """(key bytes, value bytes or None) -> Record."""
    try:
        raw_key = orjson.loads(key)
        spec = _spec(raw_key)
        if value is None:
            return _record(spec[0](raw_key), None)
        return _record(spec[0](raw_key), spec[1](orjson.loads(value)[1:]))
    except IllegalStateError:
        raise
    except Exception as exc:  # corrupt bytes are a bug/corruption, never protocol state
        raise IllegalStateError(f"cannot decode record key={key[:80]!r}: {exc}") from exc


def decode_parsed(raw_key: Any, raw_value: Any) -> r.Record:
    """:func:`decode` of a key and value already parsed from their JSON (a loaded group's
    records come parsed together, ``RecordStore.load_groups``; a null value: a tombstone)."""
    try:
        spec = _spec(raw_key)
        if raw_value is None:
            return _record(spec[0](raw_key), None)
        return _record(spec[0](raw_key), spec[1](raw_value[1:]))
    except IllegalStateError:
        raise
    except Exception as exc:
        raise IllegalStateError(f"cannot decode record key={raw_key!r:.80}: {exc}") from exc


def _spec(raw_key: Any) -> Any:
    """The key's builder and its value's decoder, by the key's record type and field types."""
    spec = _SIGNATURES.get((raw_key[0], tuple(map(type, raw_key))))
    if spec is None:
        _check_key(raw_key)  # raises with a precise message
        raise IllegalStateError(f"malformed key {raw_key!r}")
    return spec


def describe(record: r.Record) -> str:
    """One readable line (for ``kip848 dump``)."""
    key = record.key
    fields = ", ".join(f"{f}={getattr(key, f)!r}" for f in _KEY_FIELDS[key.TYPE][1])
    name = type(key).__name__.removesuffix("Key")
    if record.value is None:
        return f"{name}({fields}) -> <tombstone>"
    return f"{name}({fields}) -> {record.value}"


# ---------------------------------------------------------------- loading a group at once
# (group_load.py reads the commonest records straight from these layouts)

decode_assignment = _dec_assignment
"""``[[topic_id, [p, ...]], ...]`` -> an assignment (topics without partitions dropped)."""
decode_classic = _dec_classic
"""A member's trailing classic metadata (or None) -> :class:`ClassicMemberMetadata` | None."""


def value_decoder(record_type: r.RecordType) -> Callable[[list[Any]], Any]:
    """How a record type's value fields (its JSON array without the version) become its
    value."""
    return _VALUES[record_type][1]
