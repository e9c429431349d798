"""Mutated bodies of every message the codec knows, decoded in a process of its own.

For each request and response class kio knows (``kafka_samples.all_messages``), the fullest
sample body is mutated at every offset — a 5-byte varint of 34 billion, int32 lengths of
2^31-1, 2^23 and -2^31, -1 (null) and 0 (compact null), a truncation — and every mutated body
goes through ``wire.decode`` / ``wire.decode_response``, as the listener reads what a client
or the upstream sends. Each must decode or raise ``WireError``; anything else is reported. The
native decoder aborts the process when it is handed a length it cannot allocate, so the caller
(tests/unit/test_kafka_bounds.py) runs this as a child: a crash is an exit status, not a lost
test run. The line before each class names it, so a crash points at its message.

    python -m chaos.decode_child          (from tests/; prints a JSON summary last)
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Iterator

from coordinator.server.kafka import wire

from . import kafka_samples

MUTATIONS = (
    ("varint-huge", b"\xff\xff\xff\xff\x7f", 1),
    ("int32-max", b"\x7f\xff\xff\xff", 4),
    ("int32-8M", b"\x00\x80\x00\x00", 4),
    ("int32-min", b"\x80\x00\x00\x00", 4),
    ("int32-null", b"\xff\xff\xff\xff", 4),
    ("int16-null", b"\xff\xff", 2),
    ("compact-null", b"\x00", 1),
)


def mutations(body: bytes) -> Iterator[tuple[str, bytes]]:
    for i in range(len(body)):
        for name, patch, width in MUTATIONS:
            yield name, body[:i] + patch + body[i + width :]
        yield "truncated", body[:i]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--stride", type=int, default=1, help="mutate every n-th offset only")
    args = parser.parse_args(argv)
    outcomes: Counter[str] = Counter()
    failures: list[str] = []
    for kind, key, version, cls in kafka_samples.all_messages():
        print(f"{kind} {wire.api_name(key)} v{version}", flush=True)
        body = wire.encode_body(kafka_samples.sample(cls))
        decode = wire.decode if kind == "request" else wire.decode_response
        for n, (name, mutated) in enumerate(mutations(body)):
            if n // (len(MUTATIONS) + 1) % args.stride:
                continue
            try:
                decode(key, version, mutated, 0)
            except wire.WireError:
                outcomes["refused"] += 1
            except Exception as exc:  # noqa: BLE001 - reported, that is the point
                failures.append(f"{kind} {key} v{version} {name}: {type(exc).__name__}: {exc}")
            else:
                outcomes["decoded"] += 1
    print(json.dumps({"outcomes": outcomes, "failures": failures[:50]}), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
