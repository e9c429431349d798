"""Coordinator configuration from the command line, lowest precedence first: Kafka's defaults,
``--server-properties FILE`` (an existing Kafka ``server.properties``: the coordinator's keys
are taken, the others ignored and listed in the log), ``--config-file FILE`` (Java properties
holding coordinator settings only: an unknown name is refused) and ``--set NAME=VALUE``.
Files are read as Java reads them (``javaproperties``). A bad value is refused naming the
setting, where it came from and the type expected (integers: Kafka's INT or LONG range)."""

from __future__ import annotations

import argparse
import logging
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from coordinator.cli.errors import UsageError
from coordinator.server.grpc_options import ARG_NAMES as GRPC_ARG_NAMES

DEFAULT_DATA_DIR = "./var"


KAFKA_INT = (-(2**31), 2**31 - 1)
KAFKA_LONG = (-(2**63), 2**63 - 1)
# Kafka's type of each integer config we share with it (ConfigDef): INT unless listed here.
LONG_CONFIGS = frozenset(
    {
        "offsets.retention.check.interval.ms",
        "connections.max.idle.ms",
        "kafka.upstream.metadata.max.age.ms",
        "kafka.upstream.transaction.check.interval.ms",
        "queued.max.request.bytes",
    }
)
SERVER_INTEGER_CONFIGS = frozenset(
    {
        "socket.request.max.bytes",
        "connections.max.idle.ms",
        "kafka.upstream.metadata.max.age.ms",
        "kafka.upstream.transaction.check.interval.ms",
        "kafka.upstream.request.timeout.ms",
        "queued.max.requests",
        "queued.max.request.bytes",
        "kafka.connection.max.unsent.bytes",
        "max.connections.per.ip",
        "max.connections",
        # Several nodes on PostgreSQL (docs/ha.md)
        "coordinator.lease.ms",
        "coordinator.heartbeat.interval.ms",
        "coordinator.startup.grace.ms",
    }
)
# Kafka names its built-in assignors by class in server.properties; ours by name.
KAFKA_ASSIGNOR_CLASSES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}

log = logging.getLogger("kip848.config")
LINE_END = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True, slots=True)
class Setting:
    """One configured value and where it came from (``FILE:LINE`` or ``--set``)."""

    value: str
    origin: str


def read_properties_file(path: str) -> dict[str, Setting]:
    """A Java properties file, as ``java.util.Properties.load`` reads it (the whole format:
    ``=``, ``:`` or whitespace separators, ``#``/``!`` comments, ``\\`` line continuations,
    escapes and ``\\uXXXX``; ISO-8859-1 bytes): name -> value and its line. A name given twice
    keeps its last value, as in Java."""
    import javaproperties

    try:
        with open(path, "rb") as fp:
            data = fp.read()
    except OSError as exc:
        raise UsageError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    out: dict[str, Setting] = {}
    line = 1
    try:
        for token in javaproperties.parse(data):
            if isinstance(token, javaproperties.KeyValue):
                out[token.key] = Setting(token.value, f"{path}:{line}")
            line += len(LINE_END.findall(token.source))
    except ValueError as exc:  # javaproperties.InvalidUEscapeError: a malformed \\uXXXX
        raise UsageError(f"{path}:{line}: {exc}") from None
    return out


def read_properties(path: str) -> dict[str, str]:
    """A Java properties file: name -> value (see ``read_properties_file``)."""
    return {name: s.value for name, s in read_properties_file(path).items()}


def parse_sets(items: Sequence[str]) -> dict[str, Setting]:
    out: dict[str, Setting] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"--set expects NAME=VALUE, got {item!r}")
        out[name.strip()] = Setting(value.strip(), "--set")
    return out


def kafka_server_settings(path: str, known: Collection[str]) -> dict[str, Setting]:
    """The ``known`` settings in a Kafka ``server.properties``; its other keys (listeners, log
    dirs, replication, ...) are ignored and listed in the log. Kafka's class names of the
    built-in assignors become our names."""
    every = read_properties_file(path)
    taken = {name: s for name, s in every.items() if name in known}
    ignored = sorted(name for name in every if name not in known)
    assignors = taken.get("group.consumer.assignors")
    if assignors is not None:
        names = [
            KAFKA_ASSIGNOR_CLASSES.get(n.strip(), n.strip()) for n in assignors.value.split(",")
        ]
        taken["group.consumer.assignors"] = Setting(",".join(names), assignors.origin)
    log.info(
        "%s: %d coordinator settings taken (%s); %d keys that are not the coordinator's ignored",
        path,
        len(taken),
        ", ".join(sorted(taken)) or "none",
        len(ignored),
    )
    for name in ignored:
        log.debug("%s: ignored %s (not a coordinator setting)", every[name].origin, name)
    return taken


def check_setting(name: str, setting: Setting) -> None:
    """The value has the setting's Kafka type (integers: INT or LONG range); the message names
    the setting, where it came from and the type expected."""
    from coordinator.core.config import CONFIG_SPECS, GroupCoordinatorConfig

    spec = CONFIG_SPECS.get(name)
    if name in SERVER_INTEGER_CONFIGS:
        pass
    elif spec is None or type(getattr(GroupCoordinatorConfig(), spec[0])) is not int:
        return  # not an integer (a bool is not; parse_config checks it, names unknown settings)
    kind, (lo, hi) = ("LONG", KAFKA_LONG) if name in LONG_CONFIGS else ("INT", KAFKA_INT)
    where = "" if setting.origin == "--set" else f"{setting.origin}: "
    expected = f"expected an integer (Kafka type {kind}, {lo}..{hi})"
    try:
        number = int(setting.value.strip())
    except ValueError:
        raise UsageError(
            f"{where}invalid value {setting.value!r} for '{name}': {expected}"
        ) from None
    if not lo <= number <= hi:
        raise UsageError(f"{where}invalid value {number} for '{name}': out of range, {expected}")


# Settings of the server itself (its Kafka listener; its gRPC server, by grpc-core's channel
# argument names), not of the group coordinator's core: taken from the same files and --set,
# handed to `kip848 serve`, ignored by `replay`.
SERVER_CONFIGS = frozenset(
    {
        "kafka.listen",
        "kafka.upstream",
        "kafka.advertised.address",
        "socket.request.max.bytes",
        "connections.max.idle.ms",
        "kafka.upstream.metadata.max.age.ms",
        "kafka.upstream.transaction.check.interval.ms",
        "kafka.upstream.request.timeout.ms",
        "queued.max.requests",
        "queued.max.request.bytes",
        "kafka.connection.max.unsent.bytes",
        # The Kafka listeners' connection limits (docs/kafka.md, "Connection limits")
        "max.connections.per.ip",
        "max.connections.per.ip.overrides",
        "max.connections",
        # Several nodes on PostgreSQL (docs/ha.md)
        "coordinator.lease.ms",
        "coordinator.heartbeat.interval.ms",
        "coordinator.startup.grace.ms",
        # The authorizer (Kafka's names; docs/security.md)
        "super.users",
        "allow.everyone.if.no.acl.found",
        *GRPC_ARG_NAMES,
    }
)


def is_server_setting(name: str) -> bool:
    """A setting of the server (its listeners, their security), not of the group coordinator's
    core: ``SERVER_CONFIGS`` and the security names (``security_config.is_security_config``)."""
    if name in SERVER_CONFIGS:
        return True
    from coordinator.server.security_config import is_security_config

    return is_security_config(name)


def gather_settings(
    config_file: str | None, sets: Sequence[str], server_properties: str | None = None
) -> dict[str, Setting]:
    """Every setting, lowest precedence first: ``--server-properties`` (a Kafka
    ``server.properties``: only the names we know), ``--config-file`` (strict: every name must
    be ours), ``--set``. Unknown names in ``--set`` are refused later, by ``core_config``."""
    from coordinator.core.config import CONFIG_SPECS

    known = set(CONFIG_SPECS) | SERVER_CONFIGS
    settings: dict[str, Setting] = {}
    if server_properties:
        _merge(settings, kafka_server_settings(server_properties, known))
    if config_file:
        from_file = read_properties_file(config_file)
        for name, setting in from_file.items():
            if name not in known and not is_server_setting(name):
                raise UsageError(
                    f"{setting.origin}: unknown configuration '{name}' (known: "
                    f"{', '.join(sorted(known))}, and the listeners' and their security "
                    "settings of docs/security.md; a Kafka server.properties goes to "
                    "--server-properties, which ignores keys that are not the coordinator's)"
                )
        _merge(settings, from_file)
    _merge(settings, parse_sets(sets))
    for name, setting in settings.items():
        check_setting(name, setting)
    return settings


def _merge(settings: dict[str, Setting], later: dict[str, Setting]) -> None:
    """``later`` overrides ``settings``, also where it names a setting by another of its names
    (``group.coordinator.shards`` overrides an earlier ``offsets.topic.num.partitions``)."""
    from coordinator.core.config import CONFIG_SPECS

    field_of = {name: spec[0] for name, spec in CONFIG_SPECS.items()}
    for name in later:
        field = field_of.get(name)
        for other in [n for n in settings if n != name and field is not None]:
            if field_of.get(other) == field:
                del settings[other]
    settings.update(later)


def core_config(settings: dict[str, Setting]) -> Any:
    """The group coordinator's config from its settings (the server's own are skipped): the
    core's rules, then the assignors must load."""
    from coordinator.core.config import ConfigError, parse_config

    core = {name: s for name, s in settings.items() if not is_server_setting(name)}
    try:
        config = parse_config({name: s.value for name, s in core.items()})
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    from coordinator.runtime.assignors import AssignorLoadError, make_assignors

    try:
        make_assignors(config.consumer_assignors)
    except AssignorLoadError as exc:
        raise UsageError(f"group.consumer.assignors: {exc}") from None
    return config


def build_config(
    config_file: str | None, sets: Sequence[str], server_properties: str | None = None
) -> Any:
    """``core_config(gather_settings(...))``."""
    return core_config(gather_settings(config_file, sets, server_properties))


def add_config_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--server-properties",
        metavar="FILE",
        help="a Kafka server.properties: its coordinator settings are taken, its other keys "
        "ignored (listed in the log)",
    )
    p.add_argument(
        "--config-file",
        metavar="FILE",
        help="Java properties file of coordinator settings (Kafka names; an unknown name is "
        "refused); wins over --server-properties",
    )
    p.add_argument(
        "--set",
        metavar="NAME=VALUE",
        action="append",
        default=[],
        help="a config (repeatable; wins over the files)",
    )
