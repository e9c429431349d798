"""Real Kafka clients' requests, as the listener read them: the fuzz's corpus
(``kafka_corpus.txt``, written by ``tests/e2e/kafka_corpus_capture.py``).

One request per line: the client (``librdkafka``, ``kafka-python-<version pin>``,
``aiokafka``), the API key, the version and the frame in hex (without its size: header and
body, as sent). Lines starting with ``#`` are comments (the coverage summary).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from coordinator.server.kafka import wire

CORPUS = Path(__file__).with_name("kafka_corpus.txt")


@dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    client: str
    key: int
    version: int
    frame: bytes
    """Header and body, without the size."""


def load(path: Path = CORPUS) -> list[Entry]:
    out = []
    for line in path.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        client, key, version, data = line.split()
        out.append(
            Entry(client=client, key=int(key), version=int(version), frame=bytes.fromhex(data))
        )
    return out


def write(entries: list[Entry], path: Path = CORPUS) -> None:
    by_version: dict[tuple[int, int], set[str]] = {}
    for e in entries:
        by_version.setdefault((e.key, e.version), set()).add(e.client)
    head = [
        "# Real Kafka clients' requests to the listener (tests/e2e/kafka_corpus_capture.py):",
        "# client, API key, version, frame in hex (header and body, without the size).",
        "# API versions sent, by whom:",
        *(
            f"#   {wire.api_name(key)} v{version}: {', '.join(sorted(clients))}"
            for (key, version), clients in sorted(by_version.items())
        ),
    ]
    body = [f"{e.client} {e.key} {e.version} {e.frame.hex()}" for e in entries]
    path.write_text("\n".join([*head, *body]) + "\n")
