"""DescribeConfigs and IncrementalAlterConfigs of GROUP resources, the parts that need no
runtime: the resource's validation, a per-resource error answer, the request's changes and
the described entries in Kafka's shape (``ConfigHelper.createGroupConfigEntry``)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TypeVar

from coordinator.core.errors import CoordinatorError, ErrorCode, InvalidRequestError

from .api import (
    CONFIG_SOURCE_DEFAULT,
    CONFIG_SOURCE_GROUP,
    CONFIG_TYPE_INT,
    GROUP_RESOURCE,
    GROUP_RESOURCES,
    KAFKA_GROUP_RESOURCE,
    OP_DELETE,
    OP_SET,
    AlterResource,
    AlterResult,
    ConfigEntry,
    ConfigResource,
    ConfigResult,
    ConfigSynonym,
)

RES = TypeVar("RES", ConfigResult, AlterResult)

GROUP_CONFIG_DOCS = {
    "consumer.session.timeout.ms": "The timeout to detect client failures when using the consumer group protocol.",
    "consumer.heartbeat.interval.ms": "The heartbeat interval given to the members of a consumer group.",
}


def resource_error(
    result: type[RES],
) -> Callable[[ConfigResource | AlterResource, ErrorCode, str | None], RES]:
    """The answer of one resource of DescribeConfigs or IncrementalAlterConfigs: an error."""

    def error(res: ConfigResource | AlterResource, code: ErrorCode, text: str | None) -> RES:
        return result(
            resource_type=res.resource_type,
            resource_name=res.resource_name,
            error_code=code,
            error_message=text,
        )

    return error


config_error = resource_error(ConfigResult)
alter_error = resource_error(AlterResult)

_REFUSED = {
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: "Topic authorization failed.",
    ErrorCode.GROUP_AUTHORIZATION_FAILED: "Group authorization failed.",
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "Cluster authorization failed.",
}
"""A refused config resource's message: Kafka's (its error's own, ``Errors.message()``:
ConfigHelper and ControllerApis answer a refusal with no message of their own)."""


def in_kafka_order(results: list[RES], refused_first: bool) -> list[RES]:
    """Per-resource answers as Kafka gives them: each refusal with Kafka's message, the refused
    resources after the others (DescribeConfigs: ConfigHelper appends them) or before them
    (IncrementalAlterConfigs: ControllerApis answers them before its controller's results),
    each part in the order of the request."""
    refused, served = [], []
    for r in results:
        code = ErrorCode(r.error_code)
        if code in _REFUSED:
            refused.append(dataclasses.replace(r, error_message=_REFUSED[code]))
        else:
            served.append(r)
    return refused + served if refused_first else served + refused


def alter_checks(
    resources: Sequence[AlterResource],
    check_name: Callable[[str], None],
    authorize: Callable[[str], None],
    kafka: bool = False,
    authorize_other: Callable[[int, str], None] | None = None,
) -> Callable[[AlterResource], None]:
    """The checks of one resource of an IncrementalAlterConfigs before it is altered, in
    order: a GROUP resource (another is authorized as Kafka authorizes it, ``authorize_other``,
    then refused: :func:`check_config_resource`) with a name (``check_name``: its length),
    named once in the request, the caller allowed (``authorize``), its changes well-formed."""
    seen = Counter((res.resource_type, res.resource_name) for res in resources)

    def check(res: AlterResource) -> None:
        check_config_resource(res.resource_type, res.resource_name, kafka, authorize_other)
        check_name(res.resource_name)
        if seen[(res.resource_type, res.resource_name)] > 1:
            raise InvalidRequestError("Each resource must appear at most once.")
        authorize(res.resource_name)
        config_changes(res)

    return check


def alter_result(res: AlterResource, error: CoordinatorError | None) -> AlterResult:
    """One resource's answer of IncrementalAlterConfigs: altered (None), or its error."""
    if error is None:
        return AlterResult(resource_type=res.resource_type, resource_name=res.resource_name)
    return alter_error(res, error.code, error.message)


def is_group_resource(resource_type: int, kafka: bool) -> bool:
    """A GROUP config resource: Kafka's type 32, and over gRPC the wire contract's 16 too —
    over the Kafka protocol 16 is CLIENT_METRICS, which Kafka authorizes on the cluster."""
    if kafka:
        return resource_type == KAFKA_GROUP_RESOURCE
    return resource_type in GROUP_RESOURCES


def check_config_resource(
    resource_type: int,
    name: str,
    kafka: bool = False,
    authorize_other: Callable[[int, str], None] | None = None,
) -> None:
    """A GROUP resource with a name, or INVALID_REQUEST: this coordinator keeps no other
    configs. Another resource is first authorized as Kafka authorizes it
    (``authorize_other``: ConfigHelper, ControllerApis.authorizeAlterResource), so a caller
    that may not touch it is refused as Kafka refuses it."""
    if not is_group_resource(resource_type, kafka):
        if authorize_other is not None:
            authorize_other(resource_type, name)
        raise InvalidRequestError(
            f"Only GROUP resources ({KAFKA_GROUP_RESOURCE}) are supported."
            if kafka
            else f"Only GROUP resources ({GROUP_RESOURCE}, or Kafka's {KAFKA_GROUP_RESOURCE}) "
            "are supported."
        )
    if not name.strip():
        raise InvalidRequestError("Group name must not be empty.")


def config_changes(res: AlterResource) -> dict[str, str | None]:
    """The resource's changes: a value to SET, None to DELETE; duplicate keys, a SET without a
    value and the other operations (APPEND, SUBTRACT) are INVALID_REQUEST, as Kafka's."""
    names = [c.name for c in res.configs]
    if len(set(names)) != len(names):
        raise InvalidRequestError("Error due to duplicate config keys.")
    changes: dict[str, str | None] = {}
    for c in res.configs:
        if c.operation == OP_SET:
            if c.value is None:
                raise InvalidRequestError(f"Config {c.name}: SET needs a value.")
            changes[c.name] = c.value
        elif c.operation == OP_DELETE:
            changes[c.name] = None
        else:
            raise InvalidRequestError(
                f"Config {c.name}: operation {c.operation} is not supported for GROUP configs."
            )
    return changes


def config_result(
    res: ConfigResource,
    configs: dict[str, str],
    overrides: dict[str, str],
    include_synonyms: bool,
    include_documentation: bool,
) -> ConfigResult:
    """Kafka's ConfigHelper.createGroupConfigEntry: the source is GROUP_CONFIG for a per-group
    override, DEFAULT_CONFIG otherwise; the only synonym is the override itself."""
    keys = (
        list(configs) if res.keys is None else [k for k in dict.fromkeys(res.keys) if k in configs]
    )
    entries = []
    for key in keys:
        overridden = key in overrides
        entries.append(
            ConfigEntry(
                name=key,
                value=configs[key],
                read_only=False,
                source=CONFIG_SOURCE_GROUP if overridden else CONFIG_SOURCE_DEFAULT,
                is_sensitive=False,
                config_type=CONFIG_TYPE_INT,
                synonyms=(
                    (ConfigSynonym(name=key, value=overrides[key], source=CONFIG_SOURCE_GROUP),)
                    if include_synonyms and overridden
                    else ()
                ),
                documentation=GROUP_CONFIG_DOCS.get(key) if include_documentation else None,
            )
        )
    return ConfigResult(
        resource_type=res.resource_type, resource_name=res.resource_name, configs=tuple(entries)
    )
