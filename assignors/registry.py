"""Finding assignors: built-in names, installed plugins (entry points) and ``module:Class`` paths.

``group.consumer.assignors`` is a list of entries, the first being the group default. Each entry
is resolved in this order:

1. a built-in name (``uniform``, ``range``);
2. ``module:Class`` (a colon means a class path; ``Class`` may be dotted, ``pkg.mod:Outer.Inner``);
3. the name of an entry point in the group ``kip848.assignors`` (an installed plugin). The entry
   point's name must equal the class's ``name``, and must be unique among installed packages.

Each class is instantiated once with no arguments. Anything wrong raises
:class:`AssignorConfigError`, whose message names the entry and the reason, so that the server
refuses to start with a clear message instead of failing at the first rebalance.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata

from assignors.api import PartitionAssignor

__all__ = [
    "BUILTIN_ASSIGNORS",
    "DEFAULT_ASSIGNORS",
    "ENTRY_POINT_GROUP",
    "AssignorConfigError",
    "AssignorInfo",
    "available_assignors",
    "load_assignor",
    "load_assignors",
    "parse_assignor_list",
]

ENTRY_POINT_GROUP = "kip848.assignors"
BUILTIN_ASSIGNORS: dict[str, str] = {
    "uniform": "assignors.uniform:UniformAssignor",
    "range": "assignors.range:RangeAssignor",
}
DEFAULT_ASSIGNORS: tuple[str, ...] = ("uniform", "range")
SETTING = "group.consumer.assignors"


class AssignorConfigError(ValueError):
    """An assignor entry cannot be loaded. The message says which entry and why."""


def parse_assignor_list(value: str) -> list[str]:
    """Split a comma-separated setting (``"uniform, range, pkg.mod:Cls"``) into entries."""
    entries = [part.strip() for part in value.split(",")]
    if any(not e for e in entries):
        raise AssignorConfigError(f"{SETTING}={value!r}: empty entry in the list")
    return entries


def load_assignors(names: Sequence[str]) -> list[PartitionAssignor]:
    """Instantiate every entry of ``group.consumer.assignors``, in order.

    Raises :class:`AssignorConfigError` for an empty list, an entry that cannot be loaded, or
    two entries that yield the same assignor name.
    """
    if isinstance(names, str):
        names = parse_assignor_list(names)
    if not names:
        raise AssignorConfigError(f"{SETTING} is empty: name at least one assignor")
    loaded: list[PartitionAssignor] = []
    seen: dict[str, str] = {}
    for entry in names:
        assignor = load_assignor(entry)
        earlier = seen.get(assignor.name)
        if earlier is not None:
            raise AssignorConfigError(
                f"{SETTING}: {entry!r}: duplicate assignor name {assignor.name!r} "
                f"(already provided by {earlier!r})"
            )
        seen[assignor.name] = entry
        loaded.append(assignor)
    return loaded


def load_assignor(entry: str) -> PartitionAssignor:
    """One entry: a built-in name, ``module:Class``, or an installed entry point name."""
    entry = entry.strip()
    if not entry:
        raise AssignorConfigError(f"{SETTING}: empty assignor entry")
    if entry in BUILTIN_ASSIGNORS:
        return _instantiate(entry, _import_class(entry, BUILTIN_ASSIGNORS[entry]), entry)
    if ":" in entry:
        return _instantiate(entry, _import_class(entry, entry), None)
    matches = _entry_points(entry)
    if not matches:
        installed = sorted({ep.name for ep in _entry_points()} | set(BUILTIN_ASSIGNORS))
        raise AssignorConfigError(
            f"{SETTING}: {entry!r}: unknown assignor: not built in, no installed package "
            f"provides an entry point {entry!r} in group {ENTRY_POINT_GROUP!r}, and it is not a "
            f"module:Class path (known: {', '.join(installed)})"
        )
    if len(matches) > 1:
        owners = ", ".join(sorted(_distribution_label(ep) for ep in matches))
        raise AssignorConfigError(
            f"{SETTING}: {entry!r}: several installed packages provide it ({owners}); "
            "use a module:Class path to choose"
        )
    return _load_entry_point(entry, matches[0])


def _load_entry_point(entry: str, ep: metadata.EntryPoint) -> PartitionAssignor:
    try:
        cls = ep.load()
    except Exception as exc:
        raise AssignorConfigError(
            f"{SETTING}: {entry!r}: loading entry point {ep.value!r} from "
            f"{_distribution_label(ep)} failed: {type(exc).__name__}: {exc}"
        ) from exc
    return _instantiate(entry, cls, ep.name)


# ---------------------------------------------------------------------------- listing


@dataclass(frozen=True, slots=True, kw_only=True)
class AssignorInfo:
    """One row of ``kip848 assignors list``."""

    name: str
    source: str
    """``built-in``, ``entry point <dist> <version>`` or ``<module:Class>``."""
    target: str
    """What to import: ``module:Class``."""
    description: str
    error: str | None = None
    """Why the assignor cannot be loaded, if it cannot."""


def available_assignors() -> list[AssignorInfo]:
    """Built-ins plus every installed entry point, loaded to read their descriptions. Broken
    plugins are listed with their error instead of raising."""
    rows: list[AssignorInfo] = []
    for name, target in BUILTIN_ASSIGNORS.items():
        rows.append(_describe(name, "built-in", target, lambda n=name: load_assignor(n)))
    for ep in sorted(_entry_points(), key=lambda e: (e.name, _distribution_label(e))):
        if BUILTIN_ASSIGNORS.get(ep.name) == ep.value:
            continue  # our own package registers the built-ins as entry points too
        rows.append(
            _describe(
                ep.name,
                f"entry point {_distribution_label(ep)}",
                ep.value,
                lambda e=ep: _load_entry_point(e.name, e),
            )
        )
    return rows


def _describe(name: str, source: str, target: str, load: object) -> AssignorInfo:
    try:
        assignor = load()  # type: ignore[operator]
    except AssignorConfigError as exc:
        return AssignorInfo(name=name, source=source, target=target, description="", error=str(exc))
    except Exception as exc:  # noqa: BLE001
        return AssignorInfo(
            name=name,
            source=source,
            target=target,
            description="",
            error=f"{type(exc).__name__}: {exc}",
        )
    return AssignorInfo(
        name=name, source=source, target=target, description=_summary(type(assignor))
    )


def _summary(cls: type) -> str:
    doc = (cls.__doc__ or "").strip()
    return doc.splitlines()[0].strip() if doc else ""


# ---------------------------------------------------------------------------- helpers


def _entry_points(name: str | None = None) -> list[metadata.EntryPoint]:
    found = metadata.entry_points(group=ENTRY_POINT_GROUP)
    eps = list(found if name is None else found.select(name=name))
    # The same distribution can be visible twice (e.g. an editable install on sys.path twice).
    unique: dict[tuple[str, str, str], metadata.EntryPoint] = {}
    for ep in eps:
        unique.setdefault((ep.name, ep.value, _distribution_label(ep)), ep)
    return list(unique.values())


def _distribution_label(ep: metadata.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return "an unknown package"
    return f"{dist.metadata['Name']} {dist.version}"


def _import_class(entry: str, target: str) -> object:
    module_name, _, attr_path = target.partition(":")
    if not module_name or not attr_path:
        raise AssignorConfigError(
            f"{SETTING}: {entry!r}: a class path must look like 'package.module:Class'"
        )
    try:
        obj: object = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name or module_name.startswith(f"{exc.name}."):
            raise AssignorConfigError(
                f"{SETTING}: {entry!r}: module {module_name!r} not found"
            ) from exc
        raise AssignorConfigError(
            f"{SETTING}: {entry!r}: importing module {module_name!r} failed: {exc}"
        ) from exc
    except Exception as exc:
        raise AssignorConfigError(
            f"{SETTING}: {entry!r}: importing module {module_name!r} failed: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise AssignorConfigError(
                f"{SETTING}: {entry!r}: module {module_name!r} has no attribute {attr_path!r}"
            ) from None
    return obj


def _instantiate(entry: str, cls: object, entry_point_name: str | None) -> PartitionAssignor:
    if not isinstance(cls, type):
        raise AssignorConfigError(
            f"{SETTING}: {entry!r}: it names a {type(cls).__name__}, not a PartitionAssignor class"
        )
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise AssignorConfigError(
            f"{SETTING}: {entry!r}: class {cls.__qualname__} is not a PartitionAssignor: "
            "it needs a class attribute 'name' (a non-empty str)"
        )
    if not callable(getattr(cls, "assign", None)):
        raise AssignorConfigError(
            f"{SETTING}: {entry!r}: class {cls.__qualname__} is not a PartitionAssignor: "
            "it has no assign(group_spec, topics) method"
        )
    if entry_point_name is not None and name != entry_point_name:
        raise AssignorConfigError(
            f"{SETTING}: {entry!r}: class {cls.__qualname__} is named {name!r}; the entry "
            "point name must equal the assignor's name"
        )
    try:
        assignor = cls()
    except Exception as exc:
        raise AssignorConfigError(
            f"{SETTING}: {entry!r}: constructor {cls.__qualname__}() failed: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(assignor, PartitionAssignor):
        raise AssignorConfigError(
            f"{SETTING}: {entry!r}: {cls.__qualname__}() is not a PartitionAssignor"
        )
    return assignor
