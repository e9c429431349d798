"""Resolve ``group.consumer.assignors`` names to assignor instances."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

_BUILTIN = {
    "uniform": "assignors.uniform:UniformAssignor",
    "range": "assignors.range:RangeAssignor",
}


class AssignorLoadError(ValueError):
    """An assignor named in the configuration cannot be loaded."""


def make_assignors(names: Sequence[str]) -> list[Any]:
    """Through ``assignors.registry.load_assignors`` (entry points) when it exists; until then
    the built-in ones by module path."""
    try:
        registry = importlib.import_module("assignors.registry")
    except ImportError:
        registry = None
    if registry is not None:
        try:
            return list(registry.load_assignors(list(names)))
        except Exception as exc:  # AssignorConfigError and friends
            raise AssignorLoadError(str(exc)) from exc
    out = []
    for name in names:
        target = _BUILTIN.get(name)
        if target is None:
            raise AssignorLoadError(f"unknown assignor '{name}' in group.consumer.assignors")
        module, _, attr = target.partition(":")
        try:
            out.append(getattr(importlib.import_module(module), attr)())
        except ImportError:
            continue  # not written yet; the others still serve
    if not out:
        raise AssignorLoadError(f"none of the assignors {', '.join(names)} could be loaded")
    return out
