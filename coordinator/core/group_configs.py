"""Per-group dynamic configs (KIP-848 "Dynamic Group Configuration"; Kafka's GroupConfigManager).

Three configs may be overridden per group: ``consumer.session.timeout.ms``,
``consumer.heartbeat.interval.ms`` and ``consumer.assignment.interval.ms`` (Kafka 4.3).

Kafka keeps them as ConfigRecords of resource type GROUP in the controller's metadata log, so
any broker describes and alters them and every broker sees them. So do we: they are records of
the cluster log (:class:`ClusterGroupConfigs`, a component of the cluster-level state machine,
one ``ConfigKey`` record per name; a tombstone reverts one to the default), whichever node
receives the request and whichever leads the group. They may exist before the group does, take
effect on the group's next heartbeat, and outlive the group's deletion (as in Kafka, whose
DeleteGroups leaves the metadata log's ConfigRecords alone).

Each shard's :class:`GroupConfigs` reads its groups' overrides from the cluster component. It
also holds the overrides earlier versions wrote into the group's own partition
(``GroupConfigKey`` records): they count for a group of which the cluster log names no config,
and the runtime moves them to the cluster log when it loads the partition
(:meth:`ClusterGroupConfigs.adopt` and :meth:`GroupConfigs.migrated`, in one batch).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from . import records as r
from .commands import Result
from .components import ByGroupId
from .config import GROUP_CONFIGS, ConfigError, GroupCoordinatorConfig, check_group_config
from .context import ShardContext
from .errors import CoordinatorError, InvalidConfigError, InvalidRequestError
from .events import Event, LogEvent
from .staging import Staging
from .timeline import TDict, UndoLog

SESSION_TIMEOUT_CONFIG = "consumer.session.timeout.ms"
HEARTBEAT_INTERVAL_CONFIG = "consumer.heartbeat.interval.ms"
ASSIGNMENT_INTERVAL_CONFIG = "consumer.assignment.interval.ms"

_NO_OVERRIDES: Mapping[str, str] = {}


def effective_configs(
    config: GroupCoordinatorConfig, overrides: Mapping[str, str]
) -> dict[str, str]:
    """Effective per-group configs: the overrides, else the broker defaults."""
    return {
        SESSION_TIMEOUT_CONFIG: overrides.get(
            SESSION_TIMEOUT_CONFIG, str(config.consumer_session_timeout_ms)
        ),
        HEARTBEAT_INTERVAL_CONFIG: overrides.get(
            HEARTBEAT_INTERVAL_CONFIG, str(config.consumer_heartbeat_interval_ms)
        ),
        ASSIGNMENT_INTERVAL_CONFIG: overrides.get(
            ASSIGNMENT_INTERVAL_CONFIG, str(config.consumer_assignment_interval_ms)
        ),
    }


def check_changes(
    config: GroupCoordinatorConfig,
    group_id: str,
    current: Mapping[str, str],
    changes: Mapping[str, str | None],
) -> None:
    """Validate an alteration as a whole (Kafka's GroupConfig rules): every name known, every
    value in range, and the heartbeat interval below the session timeout once applied."""
    if not group_id.strip():
        raise InvalidRequestError("Group id can't be empty.")
    after = dict(current)
    for name, value in changes.items():
        if value is None:
            if name not in GROUP_CONFIGS:
                raise InvalidConfigError(
                    f"unknown group config '{name}' (supported: {', '.join(GROUP_CONFIGS)})"
                )
            after.pop(name, None)
        else:
            try:
                after[name] = str(check_group_config(config, name, value))
            except ConfigError as exc:
                raise InvalidConfigError(str(exc)) from None
    session = int(after.get(SESSION_TIMEOUT_CONFIG, config.consumer_session_timeout_ms))
    interval = int(after.get(HEARTBEAT_INTERVAL_CONFIG, config.consumer_heartbeat_interval_ms))
    if interval >= session:
        raise InvalidConfigError(
            f"{HEARTBEAT_INTERVAL_CONFIG} ({interval}) must be less than {SESSION_TIMEOUT_CONFIG} ({session})."
        )


def _altered(group_id: str, written: list[str]) -> LogEvent:
    return LogEvent(
        event=Event.GROUP_CONFIG_ALTERED, group_id=group_id, fields={"changes": tuple(written)}
    )


class ClusterGroupConfigs(ByGroupId[dict[str, str]]):
    """The groups' dynamic configs in the cluster log (see the module doc): a component of the
    cluster-level state machine, on its undo log; a read-only mapping group id -> overrides."""

    def __init__(self, undo: UndoLog, config: GroupCoordinatorConfig) -> None:
        self.config = config
        self._by_group = undo.new_dict()  # group id -> {name: value}
        self._staging: Staging[TDict] = Staging(undo.new_dict)

    def stage(self) -> None:
        """Until :meth:`unstage`, replayed records go to a copy of the overrides (copied
        C-level, on the same undo log: ``staging.py``); every read — a shard's heartbeat, a
        DescribeConfigs — sees them as they were. Only while nothing rolls this state back
        across the stage (the committed copy never rolls back; the registry's commands are
        held meanwhile, none of its writes in flight)."""
        self._staging.stage(self._by_group)

    def unstage(self) -> list[TDict]:
        """The overrides replayed since :meth:`stage` are what every read sees, at once;
        returns the map they replace, for the caller to drop."""
        self._by_group, replaced = self._staging.unstage(self._by_group)
        return replaced

    def overrides(self, group_id: str) -> Mapping[str, str] | None:
        """The group's overrides, None when the cluster log names no config of the group."""
        found: Mapping[str, str] | None = self._by_group.get(group_id)
        return found

    def effective(self, group_id: str) -> dict[str, str]:
        return effective_configs(self.config, self._by_group.get(group_id, _NO_OVERRIDES))

    # ------------------------------------------------------------------ commands

    def alter(self, group_id: str, changes: Mapping[str, str | None]) -> Result[None]:
        """Set (value) or delete (None) per-group dynamic configs. Validated as a whole before
        anything is written; takes effect on the group's next heartbeat, on whichever node
        leads it. The group need not exist."""
        check_changes(self.config, group_id, self._by_group.get(group_id, _NO_OVERRIDES), changes)
        result: Result[None] = Result()
        written: list[str] = []
        for name in sorted(changes):
            value = changes[name]
            text = None if value is None else str(int(value))
            self._emit(result, group_id, name, text)
            written.append(f"{name}={'<default>' if text is None else text}")
        if written:
            result.events.append(_altered(group_id, written))
        return result

    def alter_each(
        self, alters: Sequence[tuple[str, Mapping[str, str | None]]]
    ) -> Result[list[CoordinatorError | None]]:
        """Several groups' alterations in one command, as Kafka's controller runs an
        IncrementalAlterConfigs (one batch of records for the request): each validated and
        applied on its own (:meth:`alter`), the records of those that pass together; the
        response is each one's error (None: altered), in order."""
        result: Result[list[CoordinatorError | None]] = Result(response=[])
        errors: list[CoordinatorError | None] = []
        for group_id, changes in alters:
            try:
                one = self.alter(group_id, changes)
            except CoordinatorError as exc:
                errors.append(exc)
                continue
            result.records.extend(one.records)
            result.events.extend(one.events)
            errors.append(None)
        result.response = errors
        return result

    def adopt(self, legacy: Mapping[str, Mapping[str, str]]) -> Result[None]:
        """Take the overrides an earlier version kept in a partition (group id -> overrides)
        for every group of which the cluster log names no config; a group it names keeps the
        cluster log's."""
        result: Result[None] = Result()
        for group_id in sorted(legacy):
            if group_id in self._by_group:
                continue
            for name, value in sorted(legacy[group_id].items()):
                self._emit(result, group_id, name, value)
        return result

    def _emit(self, result: Result[Any], group_id: str, name: str, value: str | None) -> None:
        record = r.config_record(r.CONFIG_RESOURCE_GROUP, group_id, name, value)
        result.records.append(record)
        self._replay(record)

    # ------------------------------------------------------------------ records

    def replayers(self) -> dict[r.RecordType, Callable[[r.Record], None]]:
        return {r.RecordType.CONFIG: self._replay}

    def _replay(self, record: r.Record) -> None:
        key, value = r.typed(record, r.ConfigKey, r.ConfigValue)
        if key.resource_type != r.CONFIG_RESOURCE_GROUP:
            return  # no other resource's configs are kept here
        by_group = self._staging.target(self._by_group)
        _put(by_group, key.resource_name, key.name, None if value is None else value.value)

    def snapshot(self) -> dict[str, object]:
        return _snapshot(self._by_group)

    def records_of_state(self) -> list[r.Record]:
        return [
            r.config_record(r.CONFIG_RESOURCE_GROUP, gid, name, value)
            for gid, name, value in _overrides(self._by_group)
        ]


def _snapshot(by_group: Any) -> dict[str, object]:
    return {"group_configs": {gid: dict(sorted(c.items())) for gid, c in sorted(by_group.items())}}


def _overrides(by_group: Any) -> list[tuple[str, str, str]]:
    """Every (group id, name, value), in order."""
    return [
        (gid, name, value)
        for gid in sorted(by_group)
        for name, value in sorted(by_group[gid].items())
    ]


def _put(by_group: Any, group_id: str, name: str, value: str | None) -> None:
    configs = dict(by_group.get(group_id, _NO_OVERRIDES))
    if value is None:
        configs.pop(name, None)
    else:
        configs[name] = value
    if configs:
        by_group[group_id] = configs
    else:
        by_group.discard(group_id)


class GroupConfigs(ByGroupId[dict[str, str]]):
    """A shard's view of its groups' configs: the cluster log's (:meth:`follow`), else those an
    earlier version kept in the partition (the mapping this component is: group id -> the
    partition's overrides, until :meth:`migrated`)."""

    def __init__(self, ctx: ShardContext) -> None:
        self._ctx = ctx
        self._by_group = ctx.undo.new_dict()  # group id -> {name: value}, the partition's
        self._cluster: ClusterGroupConfigs | None = None

    @property
    def cluster(self) -> ClusterGroupConfigs | None:
        """The cluster log's component this shard follows (None: none, a shard on its own)."""
        return self._cluster

    def follow(self, cluster: ClusterGroupConfigs) -> None:
        """Read the overrides from the cluster log's component (shared by every shard; the
        shard never writes it)."""
        self._cluster = cluster

    def overrides(self, group_id: str) -> Mapping[str, str]:
        """The group's overrides: the cluster log's when it names any config of the group,
        else the partition's."""
        if self._cluster is not None:
            found = self._cluster.overrides(group_id)
            if found is not None:
                return found
        partition: Mapping[str, str] = self._by_group.get(group_id, _NO_OVERRIDES)
        return partition

    # ------------------------------------------------------------------ effective values

    def session_timeout_ms(self, group_id: str) -> int:
        value = self.overrides(group_id).get(SESSION_TIMEOUT_CONFIG)
        return int(value) if value is not None else self._ctx.config.consumer_session_timeout_ms

    def heartbeat_interval_ms(self, group_id: str) -> int:
        value = self.overrides(group_id).get(HEARTBEAT_INTERVAL_CONFIG)
        return int(value) if value is not None else self._ctx.config.consumer_heartbeat_interval_ms

    def assignment_interval_ms(self, group_id: str) -> int:
        """How long after a target assignment the next one may be computed (0: at once)."""
        value = self.overrides(group_id).get(ASSIGNMENT_INTERVAL_CONFIG)
        return int(value) if value is not None else self._ctx.config.consumer_assignment_interval_ms

    def effective(self, group_id: str) -> dict[str, str]:
        """Effective per-group configs (overrides, else the broker defaults)."""
        return effective_configs(self._ctx.config, self.overrides(group_id))

    # ------------------------------------------------------------------ commands

    def migrated(self) -> Result[None]:
        """The partition's overrides went to the cluster log (the same batch's
        :meth:`ClusterGroupConfigs.adopt`): tombstone them here."""
        return self._ctx.run(self._migrated)

    def _migrated(self) -> Result[None]:
        result: Result[None] = Result()
        for group_id in sorted(self._by_group):
            for name in sorted(self._by_group[group_id]):
                self._ctx.emit(result, r.group_config_record(group_id, name, None))
        return result

    # ------------------------------------------------------------------ records

    def replayers(self) -> dict[r.RecordType, Callable[[r.Record], None]]:
        return {r.RecordType.GROUP_CONFIG: self._replay}

    def _replay(self, record: r.Record) -> None:
        key, value = r.typed(record, r.GroupConfigKey, r.GroupConfigValue)
        _put(self._by_group, key.group_id, key.name, None if value is None else value.value)

    def snapshot(self) -> dict[str, object]:
        return _snapshot(self._by_group)

    def records_of_state(self) -> list[r.Record]:
        return [
            r.group_config_record(gid, name, value)
            for gid, name, value in _overrides(self._by_group)
        ]
