"""Coordinator configuration from the command line: ``--config-file`` (Java properties) and
``--set NAME=VALUE``, checked the way ``kip848 serve`` checks them."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from coordinator.cli.errors import UsageError

DEFAULT_DATA_DIR = "./var"


def read_properties(path: str) -> dict[str, str]:
    """A Java-properties style file: ``name=value`` (or ``name: value``), ``#``/``!`` comments."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    out: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        eq = [i for i in (line.find("="), line.find(":")) if i >= 0]
        if not eq:
            raise UsageError(f"{path}:{number}: expected name=value, got {line!r}")
        i = min(eq)
        name, value = line[:i].strip(), line[i + 1 :].strip()
        if not name:
            raise UsageError(f"{path}:{number}: empty config name")
        out[name] = value
    return out


def parse_sets(items: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"--set expects NAME=VALUE, got {item!r}")
        out[name.strip()] = value.strip()
    return out


def build_config(config_file: str | None, sets: Sequence[str]) -> Any:
    from coordinator.core.config import ConfigError, parse_config

    settings: dict[str, str] = {}
    if config_file:
        settings.update(read_properties(config_file))
    settings.update(parse_sets(sets))
    try:
        config = parse_config(settings)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    from coordinator.runtime.assignors import AssignorLoadError, make_assignors

    try:
        make_assignors(config.consumer_assignors)
    except AssignorLoadError as exc:
        raise UsageError(f"group.consumer.assignors: {exc}") from None
    return config


def add_config_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config-file", metavar="FILE", help="Java-properties file of Kafka config names"
    )
    p.add_argument(
        "--set",
        metavar="NAME=VALUE",
        action="append",
        default=[],
        help="a config (repeatable; wins over the file)",
    )
