"""Kafka request and response bodies for every message the codec knows, built with the codec.

``sample(cls)`` fills every field of a kio entity class: arrays with two elements (so nested
arrays and their lengths are on the wire), nullable fields present, tagged fields set — the
fullest encoding of that message, whose every length a mutation can then target. The served
APIs (with the versions the listener offers) and every other API kio knows are listed by
``served_requests`` and ``all_messages``.
"""

from __future__ import annotations

import datetime
import struct
import uuid
from collections.abc import Iterator
from dataclasses import fields, is_dataclass
from typing import Any, get_args, get_origin

from kio.schema.index import api_key_map, schema_name_map
from kio.static.constants import EntityType

from coordinator.server.kafka import apis, wire

_PRIMITIVE: dict[str, Any] = {
    "bool": True,
    "int8": 3,
    "int16": 7,
    "uint16": 9,
    "int32": 11,
    "int64": 13,
    "float64": 1.5,
    "string": "s",
    "bytes": b"\x01\x02\x03",
    "records": b"\x00" * 12,
    "uuid": uuid.UUID(int=0x0123456789ABCDEF0123456789ABCDEF),
    "error_code": 0,
    "timedelta_i32": 1500,
    "timedelta_i64": 2500,
    "datetime_i64": datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.UTC),
}


def _inner(t: Any) -> Any:
    args = [a for a in get_args(t) if a is not type(None)] if get_origin(t) is not tuple else []
    return args[0] if args else t


def sample(cls: Any) -> Any:
    """The fullest entity of ``cls`` (see the module doc)."""
    values: dict[str, Any] = {}
    for f in fields(cls):
        t = _inner(f.type)
        if get_origin(t) is tuple:
            item = get_args(t)[0]
            one = sample(item) if is_dataclass(item) else _PRIMITIVE[f.metadata["kafka_type"]]
            values[f.name] = [one, one]
        elif is_dataclass(t):
            values[f.name] = sample(t)
        else:
            values[f.name] = _PRIMITIVE[f.metadata["kafka_type"]]
    return wire.build(cls, values)


def request_frame(
    key: int, version: int, entity: Any | None = None, correlation_id: int = 1
) -> bytes:
    """A whole request frame (size included) of ``entity`` (default: the fullest sample)."""
    if entity is None:
        entity = sample(wire.request_class(key, version))
    payload = wire.request_frame(entity, correlation_id, "fuzz")
    return struct.pack(">i", len(payload)) + payload


def served_requests() -> Iterator[tuple[int, int]]:
    """Every (api key, version) the listener serves itself, in either mode."""
    table = {key: (row.min_version, row.max_version) for key, row in apis.SERVED.items()}
    table[apis.API_VERSIONS] = apis.API_VERSIONS_RANGE
    table[apis.METADATA] = apis.METADATA_RANGE
    for key, (lo, hi) in sorted(table.items()):
        for version in range(lo, hi + 1):
            yield key, version


def all_messages() -> Iterator[tuple[str, int, int, Any]]:
    """("request" | "response", api key, version, kio class) for everything kio knows."""
    for key, name in sorted(api_key_map.items()):
        for version, kinds in sorted(schema_name_map[name].items()):
            if EntityType.request in kinds:
                yield "request", key, version, wire.request_class(key, version)
            if EntityType.response in kinds:
                yield "response", key, version, wire.response_class(key, version)
