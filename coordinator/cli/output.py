"""Output shared by the sub-commands: tables for people, JSON for scripts.

Tables are plain left-aligned columns separated by two spaces, one line per row, no borders and
no wrapping, whatever the terminal — as Kafka's tools print them, so ``awk``/``cut`` pipelines
keep working (a rendering library such as ``rich`` would draw boxes and wrap to the terminal
width). Scripts should still prefer ``--output json``, whose keys are stable."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[str(c) for c in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=False))


def topic_id_text(raw: bytes) -> str:
    from coordinator.core.model import topic_id_from_bytes

    return topic_id_from_bytes(raw) if len(raw) == 16 else raw.hex()


def dash(value: Any) -> Any:
    return "-" if value is None or value == "" else value


def split_values(values: Sequence[str]) -> list[str]:
    return [v.strip() for item in values for v in item.split(",") if v.strip()]
