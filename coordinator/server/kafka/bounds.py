"""Reading a message body with every length bounded, before the native decoder sees it.

kio's native reader (0.6.5) reserves an array's capacity from the length the bytes announce,
before reading a single element: a compact array length of ``ff ff ff ff 7f`` (34 billion
entries) in a 22-byte ListGroups request made it allocate 256 GiB and abort the process. It
also reads a null array where the schema says the array is not nullable, and refuses any
tagged field it does not know. So every body goes through :func:`check` first: one pass over
the bytes, driven by the same dataclass fields kio reads from (the generated schema of the API
and version), that decodes nothing and allocates nothing per element, and refuses, with
:class:`WireError`:

* an array, string or bytes field whose length is more than the bytes left can hold (an array
  of ``n`` elements needs at least ``n`` times its element's smallest encoding; Kafka's
  generated readers refuse ``length > remaining`` the same way);
* a null where the schema does not allow one (Kafka: "non-nullable field was serialized as
  null"), a negative length other than -1 of a field that is not nullable (of a nullable one
  it is null, as Kafka's readers take any negative length: it is rewritten to -1), a varint
  longer than 5 bytes, a truncated body;
* a compact string longer than 32767 bytes (Kafka: "string field had invalid length"; a legacy
  string's int16 length cannot say more);
* a tagged field that does not end where its size says, or that runs past its entity;
* with ``max_elements`` (requests served here: ``served.KafkaApis.element_budget``), more
  elements in all in its arrays of strings and structures (:class:`TooManyElements`).

Tagged fields the schema does not know are skipped, as Kafka skips them: :func:`check`
returns the body with them cut out (the very same bytes when there are none, the common
case), so kio never meets a tag it would refuse. Strings that are not UTF-8, which kio refuses
too, are read as Kafka reads them (U+FFFD for each bad sequence): a body kio could not read is
walked again with ``sanitize`` (``wire.py``), which rewrites them.

How: each entity class gets a walker, compiled once from its dataclass fields (``kafka_type``
and ``tag`` metadata, ``X | None`` for nullable, ``tuple[X, ...]`` for arrays) with kio's own
rules — flexible entities use compact (uvarint) lengths, others the legacy int16/int32 ones; a
tagged primitive field is read as not nullable — into straight-line Python (fixed-size fields
merged into one skip, arrays of fixed-size elements skipped in one step), so checking costs
less than decoding: about a microsecond for a steady ConsumerGroupHeartbeat.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from dataclasses import fields, is_dataclass
from functools import cache
from typing import Any, Union, get_args, get_origin

FIXED_SIZE = {
    "bool": 1,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "datetime_i32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}
VARIABLE = frozenset({"string", "bytes", "records"})


class Cuts(list[tuple[int, int, bytes]]):
    """What a walk marks to be replaced in the body (start, end, bytes), and the array elements
    it may still read (``left``: :func:`check`'s ``max_elements``)."""

    __slots__ = ("left",)

    def __init__(self, left: int = sys.maxsize) -> None:
        super().__init__()
        self.left = left


Walker = Callable[[Any, int, int, Cuts], int]


class WireError(Exception):
    """A request that cannot be read (truncated, garbage, lengths the frame cannot hold, unknown
    api key or version); ``wire.WireError`` is this class."""


class TooManyElements(WireError):
    """A body whose arrays of strings and structures hold more elements in all than
    :func:`check`'s ``max_elements``."""


def read_uvarint(buf: Any, pos: int, end: int) -> tuple[int, int]:
    """(value, next position) of an unsigned varint of at most 5 bytes ending before ``end``."""
    value = shift = 0
    while shift < 35:
        if pos >= end:
            raise WireError("truncated varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    raise WireError("varint longer than 5 bytes")


def uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _int(buf: Any, pos: int, size: int, end: int) -> int:
    if pos + size > end:
        raise WireError("truncated length")
    return int.from_bytes(buf[pos : pos + size], "big", signed=True)


# ---------------------------------------------------------------- layouts


def _unwrap(t: Any) -> tuple[Any, bool]:
    if get_origin(t) in (types.UnionType, Union):
        args = [a for a in get_args(t) if a is not type(None)]
        return args[0], len(args) < len(get_args(t))
    return t, False


class _Field:
    """One field as read on the wire: ``kind`` is "fixed" (``size`` bytes), "compact" (uvarint
    length + 1, 0 = null), "string" (int16 length), "bytes" (int32 length), "entity" (``entity``;
    nullable: an int8 marker first, -1 = null), "array" (``item``; compact in flexible entities,
    int32 length otherwise)."""

    __slots__ = ("entity", "flexible", "item", "kind", "name", "nullable", "size", "text")

    def __init__(
        self,
        name: str,
        kind: str,
        *,
        size: int = 0,
        nullable: bool = False,
        entity: Any = None,
        item: _Field | None = None,
        flexible: bool = False,
        text: bool = False,
    ) -> None:
        self.name, self.kind, self.size, self.nullable = name, kind, size, nullable
        self.entity, self.item, self.flexible = entity, item, flexible
        self.text = text
        """A string (UTF-8 text), not bytes."""

    def min_size(self) -> int:
        """The fewest bytes a value of this field takes."""
        kind = self.kind
        if kind == "fixed":
            return self.size
        if kind == "entity":
            return 1 if self.nullable else _min_size(self.entity)
        return {"compact": 1, "string": 2, "bytes": 4}.get(kind, 1 if self.flexible else 4)


def _primitive(name: str, kafka_type: str, flexible: bool, nullable: bool) -> _Field:
    size = FIXED_SIZE.get(kafka_type)
    if size is not None:
        return _Field(name, "fixed", size=size)
    if kafka_type not in VARIABLE:
        raise TypeError(f"{name}: no wire layout for kafka type {kafka_type!r}")
    text = kafka_type == "string"
    if flexible:
        return _Field(name, "compact", nullable=nullable, text=text)
    return _Field(name, "string" if text else "bytes", nullable=nullable, text=text)


@cache
def _fields(cls: Any) -> tuple[tuple[_Field, ...], dict[int, _Field]]:
    """The untagged fields of an entity class in wire order, and its tagged fields by tag."""
    flexible = bool(cls.__flexible__)
    untagged: list[_Field] = []
    tagged: dict[int, _Field] = {}
    for f in fields(cls):
        tag = f.metadata.get("tag")
        name = f"{cls.__name__}.{f.name}"
        kafka_type = f.metadata.get("kafka_type", "")
        t, nullable = _unwrap(f.type)
        if get_origin(t) is tuple:
            inner = get_args(t)[0]
            item = (
                _Field(f"{name}[]", "entity", entity=inner)
                if is_dataclass(inner)
                else _primitive(f"{name}[]", kafka_type, flexible, False)
            )
            field = _Field(name, "array", item=item, nullable=nullable, flexible=flexible)
        elif is_dataclass(t):
            field = _Field(name, "entity", entity=t, nullable=nullable)
        else:
            field = _primitive(name, kafka_type, flexible, nullable and tag is None)
        if tag is None:
            untagged.append(field)
        else:
            tagged[int(tag)] = field
    return tuple(untagged), tagged


@cache
def _min_size(cls: Any) -> int:
    untagged, _tagged = _fields(cls)
    return sum(f.min_size() for f in untagged) + (1 if cls.__flexible__ else 0)


# ---------------------------------------------------------------- walkers


class _Source:
    """The Python source of one walker function."""

    def __init__(self, sanitize: bool = False) -> None:
        self.lines: list[str] = []
        self.names: dict[str, Any] = {}
        self.sanitize = sanitize
        """Also replace strings that are not UTF-8 (:func:`check`'s ``sanitize``)."""

    def add(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)

    def name(self, value: Any, prefix: str) -> str:
        key = f"{prefix}{len(self.names)}"
        self.names[key] = value
        return key


def _emit_length(src: _Source, ind: int, f: _Field, compact: bool, width: int) -> None:
    """``n`` = the length at ``pos`` (-1 for null, after refusing a null that is not allowed)."""
    if compact:
        src.add(ind, "n = buf[pos]")
        src.add(ind, "if n < 0x80:")
        src.add(ind + 1, "pos += 1")
        src.add(ind, "else:")
        src.add(ind + 1, "n, pos = read_uvarint(buf, pos, end)")
        src.add(ind, "n -= 1")
    else:
        src.add(ind, f"n = _int(buf, pos, {width}, end)")
        src.add(ind, f"pos += {width}")
        src.add(ind, "if n < -1:")
        if f.nullable:
            # Kafka's generated readers: any negative length of a nullable field is null.
            null = bytes([0xFF] * width)
            src.add(ind + 1, f"cuts.append((pos - {width}, pos, {null!r}))")
            src.add(ind + 1, "n = -1")
        else:
            src.add(ind + 1, f"raise WireError(f'{f.name}: negative length {{n}}')")
    if not f.nullable:
        src.add(ind, "if n == -1:")
        src.add(ind + 1, f"raise WireError('{f.name} is not nullable but was sent as null')")


def _emit(src: _Source, ind: int, f: _Field, skip: int) -> int:
    """Source for one field; returns the fixed bytes still to skip (merged with the next)."""
    kind = f.kind
    if kind == "fixed":
        return skip + f.size
    if skip:
        src.add(ind, f"pos += {skip}")
    if kind in ("compact", "string", "bytes"):
        sanitize = src.sanitize and f.text
        if sanitize:
            src.add(ind, "at = pos")
        _emit_length(src, ind, f, kind == "compact", 2 if kind == "string" else 4)
        if kind == "compact" and f.text:
            # Kafka's generated readers: a string is at most 32767 bytes, compact ones too.
            src.add(ind, "if n > 0x7FFF:")
            src.add(
                ind + 1, f"raise WireError(f'{f.name}: a string of {{n}} bytes (at most 32767)')"
            )
        src.add(ind, "if n > end - pos:")
        src.add(ind + 1, f"raise WireError(f'{f.name}: {{n}} bytes, {{end - pos}} left')")
        src.add(ind, "if n > 0:")
        src.add(ind + 1, "pos += n")
        if sanitize:
            src.add(ind + 1, f"_text(buf, at, pos - n, pos, {kind == 'compact'}, cuts)")
    elif kind == "entity":
        walker = src.name(walker_of(f.entity, src.sanitize), "w")
        if f.nullable:
            src.add(ind, "pos += 1")
            src.add(ind, "if buf[pos - 1] != 0xFF:")
            src.add(ind + 1, f"pos = {walker}(buf, pos, end, cuts)")
        else:
            src.add(ind, f"pos = {walker}(buf, pos, end, cuts)")
    else:  # array
        item = f.item
        assert item is not None
        _emit_length(src, ind, f, f.flexible, 4)
        least = max(item.min_size(), 1)
        src.add(ind, f"if n * {least} > end - pos:")
        src.add(
            ind + 1,
            f"raise WireError(f'{f.name}: {{n}} elements need at least {{n * {least}}} "
            f"bytes, {{end - pos}} left')",
        )
        if item.kind == "fixed":
            src.add(ind, "if n > 0:")
            src.add(ind + 1, f"pos += n * {item.size}")
        else:
            # Strings and structures cost the decoder and the service each: counted.
            src.add(ind, "if n > 0:")
            src.add(ind + 1, "cuts.left -= n")
            src.add(ind + 1, "if cuts.left < 0:")
            src.add(ind + 2, f"_too_many('{f.name}')")
            src.add(ind, "for _ in range(n):")
            body = len(src.lines)
            rest = _emit(src, ind + 1, item, 0)
            if rest:
                src.add(ind + 1, f"pos += {rest}")
            if len(src.lines) == body:
                src.add(ind + 1, "pass")
    return 0


@cache
def walker_of(cls: Any, sanitize: bool = False) -> Walker:
    """The walker of an entity class: ``walk(buf, pos, end, cuts)`` -> the position after the
    entity (unchecked against ``end`` for its trailing fixed fields: the caller checks).
    ``sanitize``: strings that are not UTF-8 are marked to be replaced (:func:`check`)."""
    untagged, tagged = _fields(cls)
    src = _Source(sanitize)
    skip = 0
    for f in untagged:
        skip = _emit(src, 1, f, skip)
    if skip:
        src.add(1, f"pos += {skip}")
    if cls.__flexible__:
        entity = src.name(cls, "cls")
        src.add(1, "if buf[pos] == 0:")
        src.add(2, "pos += 1")
        src.add(1, "else:")
        src.add(2, f"pos = _tags({entity}, buf, pos, end, cuts, {sanitize})")
    return _compile(src, f"{cls.__module__}.{cls.__name__}")


@cache
def _field_walker(field: _Field, sanitize: bool = False) -> Walker:
    """A walker for one field's value (a tagged field's, or a top-level field's)."""
    src = _Source(sanitize)
    rest = _emit(src, 1, field, 0)
    if rest:
        src.add(1, f"pos += {rest}")
    return _compile(src, field.name)


def _compile(src: _Source, name: str) -> Walker:
    src.add(1, "return pos")
    code = "def walk(buf, pos, end, cuts):\n" + "\n".join(src.lines) + "\n"
    scope: dict[str, Any] = {
        "WireError": WireError,
        "read_uvarint": read_uvarint,
        "_int": _int,
        "_tags": _tags,
        "_text": _text,
        "_too_many": _too_many,
        **src.names,
    }
    exec(compile(code, f"<bounds {name}>", "exec"), scope)  # our own source, from the schema
    walk: Walker = scope["walk"]
    return walk


def _too_many(field: str) -> None:
    raise TooManyElements(f"{field}: more array elements than one request may hold")


def _tag_walker(cls: Any, tag: int, sanitize: bool = False) -> Walker | None:
    """The walker of one tagged field's value (None for a tag the schema does not know)."""
    field = _fields(cls)[1].get(tag)
    return None if field is None else _field_walker(field, sanitize)


def _text(buf: Any, at: int, start: int, end: int, compact: bool, cuts: Cuts) -> None:
    """A string's bytes (``start:end``, its length at ``at``) that are not UTF-8 are marked to
    be replaced as Kafka reads them (Java's ``String(bytes, UTF_8)``: U+FFFD for each bad
    sequence), its length with them."""
    raw = bytes(buf[start:end])
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        fixed = raw.decode("utf-8", "replace").encode("utf-8")
        size = uvarint(len(fixed) + 1) if compact else len(fixed).to_bytes(2, "big")
        cuts.append((at, end, size + fixed))


def _tags(cls: Any, buf: Any, pos: int, end: int, cuts: Cuts, sanitize: bool = False) -> int:
    """The position after an entity's tagged fields. Unknown ones are skipped, as Kafka skips
    them: the section is then marked to be replaced by one without them."""
    start = pos
    count, pos = read_uvarint(buf, pos, end)
    if count * 2 > end - pos:
        raise WireError(f"{count} tagged fields in {end - pos} bytes")
    kept: list[tuple[int, int, int, int, Cuts]] = []
    rewrite = False
    for _ in range(count):
        tag_start = pos
        tag, pos = read_uvarint(buf, pos, end)
        size, pos = read_uvarint(buf, pos, end)
        tag_end = pos + size
        if tag_end > end:
            raise WireError(f"tagged field {tag} of {size} bytes, {end - pos} left")
        walk = _tag_walker(cls, tag, sanitize)
        if walk is None:
            rewrite = True
        else:
            inner = Cuts(cuts.left)
            if walk(buf, pos, tag_end, inner) != tag_end:
                raise WireError(f"tagged field {tag} does not fill its {size} bytes")
            cuts.left = inner.left
            rewrite = rewrite or bool(inner)
            kept.append((tag, tag_start, pos, tag_end, inner))
        pos = tag_end
    if rewrite:
        section = bytearray(uvarint(len(kept)))
        for tag, tag_start, value_start, tag_end, inner in kept:
            if inner:
                value = _cut(buf, value_start, tag_end, inner)
                section += uvarint(tag) + uvarint(len(value)) + value
            else:
                section += buf[tag_start:tag_end]
        cuts.append((start, pos, bytes(section)))
    return pos


def _cut(buf: Any, start: int, end: int, cuts: Cuts) -> bytes:
    """``buf[start:end]`` with the (disjoint) ``cuts`` in it replaced."""
    out = bytearray()
    last = start
    for a, b, section in sorted(cuts):
        out += buf[last:a]
        out += section
        last = b
    out += buf[last:end]
    return bytes(out)


# ---------------------------------------------------------------- entry points


def check(
    cls: Any, buf: bytes, pos: int, sanitize: bool = False, max_elements: int | None = None
) -> bytes:
    """Check the body of an entity of ``cls`` at ``pos`` (to the end of ``buf``); returns
    ``buf``, or a copy without the tagged fields the schema does not know (``sanitize``: and
    with each string that is not UTF-8 as Kafka reads it, U+FFFD for each bad sequence). Raises
    :class:`WireError`; :class:`TooManyElements` as soon as its arrays of strings and structures
    (at every depth, tagged fields' too) announce more than ``max_elements`` elements in all
    (None: no such bound), before anything is decoded."""
    cuts = Cuts(sys.maxsize if max_elements is None else max_elements)
    end = len(buf)
    try:
        after = walker_of(cls, sanitize)(buf, pos, end, cuts)
    except IndexError:
        after = end + 1
    if after > end:
        raise WireError(f"{cls.__name__}: truncated")
    return _cut(buf, 0, end, cuts) if cuts else buf


def tags_at(cls: Any, buf: Any, pos: int) -> int:
    """The position of the top-level tagged fields of a flexible entity of ``cls`` whose body
    starts at ``pos`` (lengths followed, nothing decoded; WireError if it does not fit)."""
    end = len(buf)
    cuts = Cuts()
    untagged, _tagged = _fields(cls)
    try:
        for field in untagged:
            pos = _field_walker(field)(buf, pos, end, cuts)
    except IndexError:
        pos = end + 1
    if pos > end:
        raise WireError(f"{cls.__name__}: truncated")
    return pos
