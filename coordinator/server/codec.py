"""What the two codecs share: the gRPC codec (``convert.py``) and the Kafka codec
(``kafka/convert.py``).

The proto messages mirror Kafka's schemas, so both codecs read and write the same field names;
the values, field groups and rules they have in common are written once, here. Each codec still
owns its wire types (proto messages; kio entities, through ``kafka/wire.py``), and nothing here
imports either.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from coordinator.core.model import Assignment

from .api import AlterConfig, AlterResource, AlterResult, ConfigResult, IncrementalAlterConfigs

AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
"""Kafka's "not requested" sentinel for authorized operations (Integer.MIN_VALUE)."""

NameOf = Callable[[str], str]
"""A topic id -> the topic's name ("" for a topic that does not exist)."""


def fields_of(x: Any, *names: str) -> dict[str, Any]:
    """The named fields of a value, for the message fields of the same names."""
    return {name: getattr(x, name) for name in names}


def error_fields(x: Any) -> dict[str, Any]:
    """A value's ``error_code`` and ``error_message`` as message fields."""
    return {"error_code": int(x.error_code), "error_message": x.error_message}


def resource_fields(r: ConfigResult | AlterResult) -> dict[str, Any]:
    """The fields of one resource's answer (DescribeConfigs, IncrementalAlterConfigs)."""
    return {"resource_type": r.resource_type, "resource_name": r.resource_name, **error_fields(r)}


def known_topics(assignment: Assignment, name_of: NameOf) -> list[tuple[str, str, list[int]]]:
    """An assignment as ConsumerGroupDescribe shows it: (topic id, name, partitions) by topic
    id, without the topics that no longer exist (Kafka's ConsumerGroup.asDescribedGroup)."""
    out = []
    for topic_id in sorted(assignment):
        name = name_of(topic_id)
        if name:
            out.append((topic_id, name, sorted(assignment[topic_id])))
    return out


def alter_configs(req: Any, value_of: Callable[[Any], str | None]) -> IncrementalAlterConfigs:
    """An IncrementalAlterConfigs request of either codec; ``value_of(config)`` reads a
    config's value (None: absent), the one field the two read differently."""
    return IncrementalAlterConfigs(
        resources=tuple(
            AlterResource(
                resource_type=r.resource_type,
                resource_name=r.resource_name,
                configs=tuple(
                    AlterConfig(name=c.name, operation=c.config_operation, value=value_of(c))
                    for c in r.configs
                ),
            )
            for r in req.resources
        ),
        validate_only=req.validate_only,
    )
