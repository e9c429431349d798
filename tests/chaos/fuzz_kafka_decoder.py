"""Coverage-guided fuzzing (Atheris, libFuzzer for Python) of what the Kafka listener does with
a body before the service sees it: ``bounds.check``, kio's native decoder, and the conversion
to the service's request (``apis.SERVED[key].decode``) for every API and version the listener
serves; and the response bodies it decodes from the upstream broker.

An input is one byte choosing the message (``TARGETS``) and the body. Each must decode or be
refused with ``WireError``, and a decoded request must convert; anything else is a finding.
The native decoder aborts the process on a length it cannot allocate, so this always runs as
a child process (tests/chaos/test_kafka_decoder_fuzz.py): an abort is an exit status and
libFuzzer's crash file (``-artifact_prefix``), not a lost test run. Our own code is
instrumented for coverage, the walkers ``bounds.py`` compiles included; kio's native code is
not (it is not built for it), so coverage steers through the schemas and our branches.

    cd tests && ../.venv/bin/python -m chaos.fuzz_kafka_decoder -max_total_time=600 [-seed=N]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import atheris

with atheris.instrument_imports(include=["coordinator.server.kafka"]):
    from coordinator.server.api import Caller
    from coordinator.server.kafka import apis, bounds, wire
    from coordinator.server.kafka.upstream import broker

from . import kafka_samples

CALLER = Caller(client_id="fuzz", client_host="/127.0.0.1", api_version=0, node=None)


def _targets() -> list[tuple[str, int, int]]:
    out = [("request", key, version) for key, version in kafka_samples.served_requests()]
    for key in (*sorted(broker.REWRITTEN), apis.FIND_COORDINATOR, 2, 32, 44, apis.API_VERSIONS):
        known = wire.kio_versions(key)
        assert known is not None
        out += [("response", key, v) for v in range(known[0], known[1] + 1)]
    return out


TARGETS = _targets()


def one_input(data: bytes) -> None:
    if not data:
        return
    kind, key, version = TARGETS[data[0] % len(TARGETS)]
    body = data[1:]
    try:
        if kind == "response":
            wire.decode_response(key, version, body, 0)
            return
        entity = wire.decode(key, version, body, 0)
    except wire.WireError:
        return
    row = apis.SERVED.get(key)
    if row is not None:
        caller = CALLER
        row.decode(entity, caller)


def seed_corpus(directory: Path) -> None:
    """One file per target: its fullest sample body (every length present to be mutated)."""
    for n, (kind, key, version) in enumerate(TARGETS):
        cls = (
            wire.request_class(key, version)
            if kind == "request"
            else wire.response_class(key, version)
        )
        body = wire.encode_body(kafka_samples.sample(cls))
        (directory / f"{n:03d}-{kind}-{key}-v{version}").write_bytes(bytes([n]) + body)


def _instrument_walkers() -> None:
    """Coverage for the walkers ``bounds.py`` compiles from source at run time."""
    compile_walker = bounds._compile

    def instrumented(src: Any, name: str) -> Any:
        return atheris.instrument_func(compile_walker(src, name))

    bounds._compile = instrumented  # type: ignore[assignment]


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv if argv is None else argv)
    _instrument_walkers()
    corpus = [a for a in args[1:] if not a.startswith("-")]
    if not corpus:
        seeds = Path(tempfile.mkdtemp(prefix="kafka-decoder-corpus-"))
        seed_corpus(seeds)
        args.append(str(seeds))
    atheris.Setup(args, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
