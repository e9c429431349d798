"""Kafka's binary protocol through the ``kio`` library — the only module that imports kio
(with ``schema_ext.py``: the few message versions kio does not have yet, in kio's shape).

kio (PyPI, Apache-2.0) generates one frozen dataclass per message, version and nested struct
from Kafka's own JSON schemas, with a native reader and a Python writer; flexible versions and
tagged fields included. This module wraps it so it can be swapped: framing and the request /
response *headers* are read and written here (a handful of fixed fields), message *bodies*
only by kio.

* :func:`parse_header` reads a request header (v1, or v2 with tagged fields for flexible
  versions; the client id is a legacy nullable int16 string in both).
* :func:`decode` reads a body; any failure raises :class:`WireError`. Every length in it is
  checked against the bytes left first (``bounds.py``): kio's native reader trusts them.
* :func:`build` makes the response entity of *any* version from plain values: fields the
  version lacks are dropped, required ones not given get their zero value, nested lists of
  dicts become the version's nested entities, ints become ``ErrorCode`` / ``timedelta``.
* :func:`frame` writes size + response header + body. ApiVersions answers with header v0 even
  in flexible versions (kio's response classes carry the right header schema).
"""

from __future__ import annotations

import datetime
import io
import struct
import types
import uuid
from collections.abc import Callable, Hashable, Mapping
from dataclasses import MISSING, fields, is_dataclass
from functools import cache
from typing import Any, Union, cast, get_args, get_origin

from kio.index import KioIndexError, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType
from kio.static.primitive import i32Timedelta, i64Timedelta

from . import bounds, schema_ext

KIO_VERSION = "0.6.5"
"""The kio release this module is written and tested against (pinned in pyproject)."""

Entity = Any
_HEADER = struct.Struct(">hhih")
_I32 = I32 = struct.Struct(">i")


WireError = bounds.WireError


def api_name(api_key: int) -> str:
    """kio's snake_case name of an API ("consumer_group_heartbeat"), or ``api_<key>``."""
    return api_key_map.get(api_key, f"api_{api_key}")


@cache
def kio_versions(api_key: int) -> tuple[int, int] | None:
    """(min, max) request versions kio knows for ``api_key``; None if it knows none."""
    name = api_key_map.get(api_key)
    if name is None:
        return None
    versions = [v for v, kinds in schema_name_map[name].items() if EntityType.request in kinds]
    versions += [v for key, v in schema_ext.REQUESTS if key == api_key]
    return (min(versions), max(versions)) if versions else None


@cache
def request_class(api_key: int, version: int) -> Any:
    """kio's request class; WireError for an API or version it does not know."""
    ext = schema_ext.REQUESTS.get((api_key, version))
    if ext is not None:
        return ext
    try:
        return load_request_schema(api_key, version)
    except KioIndexError:
        raise WireError(f"{api_name(api_key)} v{version} is not known to the codec") from None


@cache
def response_class(api_key: int, version: int) -> Any:
    ext = schema_ext.RESPONSES.get((api_key, version))
    if ext is not None:
        return ext
    try:
        return load_response_schema(api_key, version)
    except KioIndexError:
        raise WireError(f"{api_name(api_key)} v{version} is not known to the codec") from None


@cache
def _reader(cls: Any) -> Callable[[Any, int], Any]:
    return entity_reader(cls)


@cache
def _writer(cls: Any) -> Callable[[Any, Any], None]:
    return entity_writer(cls)


@cache
def request_flexible(api_key: int, version: int) -> bool:
    """Whether the request header is v2 (tagged fields): the request class is flexible."""
    return bool(request_class(api_key, version).__flexible__)


@cache
def response_header_flexible(api_key: int, version: int) -> bool:
    return bool(response_class(api_key, version).__header_schema__.__flexible__)


def read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    """(value, next position) of an unsigned varint; WireError if truncated or too long."""
    return bounds.read_uvarint(buf, pos, len(buf))


def skip_tagged_fields(buf: bytes, pos: int) -> int:
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
        if pos > len(buf):
            raise WireError("truncated tagged field")
    return pos


def parse_header(frame: bytes) -> tuple[int, int, int, str | None, int]:
    """(api key, api version, correlation id, client id, position after the header's fixed
    fields). The header's tagged fields (v2) are skipped by :func:`body_offset`."""
    if len(frame) < 10:
        raise WireError(f"a request header needs 10 bytes, got {len(frame)}")
    key, version, correlation_id, length = _HEADER.unpack_from(frame, 0)
    pos = 10
    client_id: str | None = None
    if length >= 0:
        end = pos + length
        if end > len(frame):
            raise WireError("truncated client id")
        # As Java's String(bytes, UTF_8) reads it in Kafka: bytes that are not UTF-8 become
        # U+FFFD, the request is served all the same.
        client_id = frame[pos:end].decode("utf-8", "replace")
        pos = end
    # else: null, whatever the negative length (Kafka's generated reader: ``length < 0``)
    return key, version, correlation_id, client_id, pos


def body_offset(frame: bytes, api_key: int, version: int, pos: int) -> int:
    """Where the body starts: after the header's tagged fields in a flexible request."""
    return skip_tagged_fields(frame, pos) if request_flexible(api_key, version) else pos


GROUP_FIRST = frozenset({8, 9, 11, 12, 13, 14, 47, 68})
"""Requests whose body starts with the group id (OffsetFetch only before v8)."""


def group_of(api_key: int, version: int, frame: bytes, pos: int) -> str | None:
    """The group id a request's body starts with, read without decoding the body (None: the
    API names none first, or it does not read; the request's own decoding says why)."""
    if api_key not in GROUP_FIRST or (api_key == 9 and version >= 8):
        return None
    try:
        at = body_offset(frame, api_key, version, pos)
        if request_flexible(api_key, version):
            size, at = read_uvarint(frame, at)
            size -= 1
        else:
            size, at = int.from_bytes(frame[at : at + 2], "big", signed=True), at + 2
    except (WireError, IndexError, KeyError, ValueError):
        return None
    if size < 0 or at + size > len(frame):
        return None
    return frame[at : at + size].decode("utf-8", "replace")


def decode(
    api_key: int, version: int, frame: bytes, pos: int, max_elements: int | None = None
) -> Entity:
    """A request body; every length is checked against the frame first (``bounds.py``), and
    with ``max_elements`` the elements of its arrays of strings and structures are counted:
    more in all is :class:`bounds.TooManyElements`, before anything is decoded."""
    return _decode(request_class(api_key, version), frame, pos, "", max_elements)


def decode_response(api_key: int, version: int, frame: bytes, pos: int) -> Entity:
    """A response body (forwarded responses that must be rewritten, the coordinator's own
    requests to the upstream), checked as a request is."""
    return _decode(response_class(api_key, version), frame, pos, " response")


def _decode(cls: Any, frame: bytes, pos: int, what: str, max_elements: int | None = None) -> Entity:
    reader = _reader(cast(Hashable, cls))
    try:
        checked = (
            bounds.check(cls, frame, pos)
            if max_elements is None
            else bounds.check(cls, frame, pos, max_elements=max_elements)
        )
        try:
            entity, _size = reader(checked, pos)
        except Exception:  # kio refuses such a string (and anything else it cannot read)
            # Strings that are not UTF-8 (kio refuses them) are read as Kafka reads them:
            # U+FFFD for each bad sequence. Only a body that failed is walked again for them.
            sanitized = bounds.check(cls, frame, pos, sanitize=True)
            if sanitized is frame or sanitized == checked:
                raise
            entity, _size = reader(sanitized, pos)
    except Exception as exc:  # noqa: BLE001 - kio raises DecodeError, ValueError, ...
        name = api_name(int(cls.__api_key__))
        raise WireError(f"{name} v{int(cls.__version__)}{what}: {exc}") from None
    return entity


def encode_body(entity: Entity) -> bytes:
    out = io.BytesIO()
    _writer(cast(Hashable, type(entity)))(out, entity)
    return out.getvalue()


def frame(api_key: int, version: int, correlation_id: int, entity: Entity) -> bytes:
    """Size + response header + body of ``entity`` (a response of ``api_key`` v``version``)."""
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    out.write(_I32.pack(correlation_id))
    if response_header_flexible(api_key, version):
        out.write(b"\0")  # no tagged fields
    _writer(cast(Hashable, type(entity)))(out, entity)
    data = out.getbuffer()
    _I32.pack_into(data, 0, len(data) - 4)
    del data
    return out.getvalue()


def request_frame(entity: Entity, correlation_id: int, client_id: str | None) -> bytes:
    """A request (header v1, or v2 for a flexible request, + body), without its size."""
    cls = type(entity)
    cid = None if client_id is None else client_id.encode()
    out = io.BytesIO()
    out.write(
        _HEADER.pack(
            int(cls.__api_key__),
            int(cls.__version__),
            correlation_id,
            -1 if cid is None else len(cid),
        )
    )
    if cid:
        out.write(cid)
    if cls.__flexible__:
        out.write(b"\0")
    _writer(cast(Hashable, cls))(out, entity)
    return out.getvalue()


def frame_raw(correlation_id: int, flexible_header: bool, body: bytes) -> bytes:
    head = _I32.pack(correlation_id) + (b"\0" if flexible_header else b"")
    return _I32.pack(len(head) + len(body)) + head + body


def error_code(code: int) -> KioErrorCode:
    return KioErrorCode(int(code))


def ms(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=value)


def to_ms(value: datetime.timedelta | None) -> int:
    return -1 if value is None else round(value.total_seconds() * 1000)


def uuid_of(raw: bytes | None) -> uuid.UUID | None:
    """16 raw bytes -> UUID; the all-zero id (no id) -> None, as kio reads it."""
    if raw is None or raw == bytes(16):
        return None
    return uuid.UUID(bytes=raw)


def uuid_bytes(value: uuid.UUID | None) -> bytes:
    return bytes(16) if value is None else value.bytes


def has_tagged_field(cls: Any, buf: Any, pos: int, tag: int) -> bool:
    """Whether a flexible response body at ``pos`` carries the top-level tagged field ``tag``
    with more than an empty value — found by following the body's lengths, without decoding
    it (cheap even for a Fetch response of megabytes)."""
    try:
        pos = bounds.tags_at(cls, buf, pos)
        end = len(buf)
        count, pos = bounds.read_uvarint(buf, pos, end)
        for _ in range(count):
            found, pos = bounds.read_uvarint(buf, pos, end)
            size, pos = bounds.read_uvarint(buf, pos, end)
            if found == tag:
                return size > 1
            pos += size
    except WireError:
        return True  # let the full decoder judge (and report) it
    return False


# ---------------------------------------------------------------- building entities

_ZERO_BY_KAFKA_TYPE: dict[str, Any] = {
    "bool": False,
    "string": "",
    "bytes": b"",
    "records": b"",
    "uuid": None,
    "error_code": KioErrorCode.none,
    "timedelta_i32": i32Timedelta.parse(datetime.timedelta(0)),
    "timedelta_i64": i64Timedelta.parse(datetime.timedelta(0)),
    "float64": 0.0,
    "datetime_i64": datetime.datetime.fromtimestamp(0, datetime.UTC),
}


@cache
def _spec(cls: Any) -> tuple[tuple[str, str, Any, bool, bool, bool, Any], ...]:
    """Per field: (name, kafka type, nested entity class or None, is array, nullable,
    required, zero value)."""
    out = []
    for f in fields(cls):
        kafka_type = f.metadata.get("kafka_type", "")
        t = f.type
        nullable = False
        if get_origin(t) in (types.UnionType, Union):
            args = [a for a in get_args(t) if a is not type(None)]
            nullable = len(args) < len(get_args(t))
            t = args[0]
        array = get_origin(t) is tuple
        inner = get_args(t)[0] if array else t
        nested = inner if is_dataclass(inner) else None
        required = f.default is MISSING and f.default_factory is MISSING
        zero: Any = () if array else _ZERO_BY_KAFKA_TYPE.get(kafka_type, 0)
        out.append((f.name, kafka_type, nested, array, nullable, required, zero))
    return tuple(out)


def _value(kafka_type: str, nested: Any, array: bool, value: Any) -> Any:
    if value is None:
        return None
    if nested is not None:
        if array:
            return tuple(_entity(nested, v) for v in value)
        return _entity(nested, value)
    if array:
        return tuple(value)
    if kafka_type == "error_code":
        return value if isinstance(value, KioErrorCode) else KioErrorCode(int(value))
    if kafka_type == "timedelta_i32" and isinstance(value, int):
        return i32Timedelta.parse(ms(value))
    if kafka_type == "timedelta_i64" and isinstance(value, int):
        return i64Timedelta.parse(ms(value))
    if kafka_type == "uuid" and isinstance(value, bytes):
        return uuid_of(value)
    return value


def _entity(cls: Any, data: Any) -> Any:
    if is_dataclass(data) and not isinstance(data, type):
        if type(data) is cls:
            return data
        data = {f.name: getattr(data, f.name) for f in fields(data)}
    return build(cls, data)


def build(cls: Any, data: Mapping[str, Any] | None = None, /, **values: Any) -> Entity:
    """An entity of ``cls`` from plain values (see the module doc)."""
    given = dict(data or {}, **values)
    kwargs = {}
    for name, kafka_type, nested, array, nullable, required, zero in _spec(cls):
        if name in given:
            value = _value(kafka_type, nested, array, given[name])
            if value is None and not nullable:
                value = zero
            kwargs[name] = value
        elif required:
            kwargs[name] = None if nullable else zero
    return cls(**kwargs)


def as_values(entity: Any) -> dict[str, Any]:
    """An entity as nested plain values (what :func:`build` takes)."""
    out = {}
    for name in entity.__dataclass_fields__:
        value = getattr(entity, name)
        if isinstance(value, tuple) and value and hasattr(value[0], "__dataclass_fields__"):
            value = [as_values(v) for v in value]
        elif hasattr(value, "__dataclass_fields__"):
            value = as_values(value)
        out[name] = value
    return out
