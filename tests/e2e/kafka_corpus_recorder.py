"""Loaded into a ``kip848 serve`` started by ``kafka_corpus_capture.py`` (through a
``sitecustomize`` of its own): every request frame the Kafka listener reads is appended to the
file named by ``KIP848_CORPUS_RECORD``, one JSON line ``[client id, api key, version, hex]``,
before the listener handles it. Nothing else changes."""

from __future__ import annotations

import json
from typing import Any


def install(path: str) -> None:
    from coordinator.server.kafka import listener, wire

    out = open(path, "a", buffering=1)  # noqa: SIM115 - open for the life of the process
    handle = listener.KafkaConnection.on_frame

    def on_frame(self: Any, frame: bytes) -> None:
        try:
            key, version, _correlation, client_id, _pos = wire.parse_header(frame)
        except wire.WireError:
            pass
        else:
            out.write(json.dumps([client_id, key, version, frame.hex()]) + "\n")
        handle(self, frame)

    listener.KafkaConnection.on_frame = on_frame  # type: ignore[method-assign]
