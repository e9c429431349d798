"""Per-group dynamic configs (KIP-848 "Dynamic Group Configuration"; Kafka's GroupConfigManager).

Three configs may be overridden per group: ``consumer.session.timeout.ms``,
``consumer.heartbeat.interval.ms`` and ``consumer.assignment.interval.ms`` (Kafka 4.3). Overrides are GroupConfig records (one per name; a tombstone
removes one); they may exist before the group does, take effect on the group's next heartbeat,
and are deleted with the group. The component is a read-only mapping group id -> overrides.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from . import records as r
from .commands import Result
from .components import ByGroupId
from .config import GROUP_CONFIGS, ConfigError, check_group_config
from .context import ShardContext
from .errors import InvalidConfigError, InvalidRequestError
from .events import Event, LogEvent

SESSION_TIMEOUT_CONFIG = "consumer.session.timeout.ms"
HEARTBEAT_INTERVAL_CONFIG = "consumer.heartbeat.interval.ms"
ASSIGNMENT_INTERVAL_CONFIG = "consumer.assignment.interval.ms"


class GroupConfigs(ByGroupId[dict[str, str]]):
    def __init__(self, ctx: ShardContext) -> None:
        self._ctx = ctx
        self._by_group = ctx.undo.new_dict()  # group id -> {name: value}

    # ------------------------------------------------------------------ effective values

    def session_timeout_ms(self, group_id: str) -> int:
        value = self._by_group.get(group_id, {}).get(SESSION_TIMEOUT_CONFIG)
        return int(value) if value is not None else self._ctx.config.consumer_session_timeout_ms

    def heartbeat_interval_ms(self, group_id: str) -> int:
        value = self._by_group.get(group_id, {}).get(HEARTBEAT_INTERVAL_CONFIG)
        return int(value) if value is not None else self._ctx.config.consumer_heartbeat_interval_ms

    def assignment_interval_ms(self, group_id: str) -> int:
        """How long after a target assignment the next one may be computed (0: at once)."""
        value = self._by_group.get(group_id, {}).get(ASSIGNMENT_INTERVAL_CONFIG)
        return int(value) if value is not None else self._ctx.config.consumer_assignment_interval_ms

    def effective(self, group_id: str) -> dict[str, str]:
        """Effective per-group configs (overrides, else the broker defaults)."""
        config = self._ctx.config
        overrides = self._by_group.get(group_id, {})
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

    # ------------------------------------------------------------------ commands

    def alter(self, group_id: str, changes: Mapping[str, str | None]) -> Result[None]:
        """Set (value) or delete (None) per-group dynamic configs. Validated as a whole before
        anything is written; takes effect on the group's next heartbeat. The group need not
        exist."""
        config = self._ctx.config
        if not group_id.strip():
            raise InvalidRequestError("Group id can't be empty.")
        current = dict(self._by_group.get(group_id, {}))
        for name, value in changes.items():
            if value is None:
                if name not in GROUP_CONFIGS:
                    raise InvalidConfigError(
                        f"unknown group config '{name}' (supported: {', '.join(GROUP_CONFIGS)})"
                    )
                current.pop(name, None)
            else:
                try:
                    current[name] = str(check_group_config(config, name, value))
                except ConfigError as exc:
                    raise InvalidConfigError(str(exc)) from None
        session = int(current.get(SESSION_TIMEOUT_CONFIG, config.consumer_session_timeout_ms))
        interval = int(
            current.get(HEARTBEAT_INTERVAL_CONFIG, config.consumer_heartbeat_interval_ms)
        )
        if interval >= session:
            raise InvalidConfigError(
                f"{HEARTBEAT_INTERVAL_CONFIG} ({interval}) must be less than {SESSION_TIMEOUT_CONFIG} ({session})."
            )
        return self._ctx.run(self._alter, group_id, changes)

    def _alter(self, group_id: str, changes: Mapping[str, str | None]) -> Result[None]:
        result: Result[None] = Result()
        written: list[str] = []
        for name in sorted(changes):
            value = changes[name]
            text = None if value is None else str(int(value))
            self._ctx.emit(result, r.group_config_record(group_id, name, text))
            written.append(f"{name}={'<default>' if text is None else text}")
        if written:
            result.events.append(
                LogEvent(
                    event=Event.GROUP_CONFIG_ALTERED,
                    group_id=group_id,
                    fields={"changes": tuple(written)},
                )
            )
        return result

    def delete_all(self, result: Result[Any], group_id: str) -> None:
        """The group is deleted: so are its overrides (Kafka), within the caller's command."""
        for name in sorted(self._by_group.get(group_id, {})):
            self._ctx.emit(result, r.group_config_record(group_id, name, None))

    # ------------------------------------------------------------------ records

    def replayers(self) -> dict[r.RecordType, Callable[[r.Record], None]]:
        return {r.RecordType.GROUP_CONFIG: self._replay}

    def _replay(self, record: r.Record) -> None:
        key, value = r.typed(record, r.GroupConfigKey, r.GroupConfigValue)
        configs = dict(self._by_group.get(key.group_id, {}))
        if value is None:
            configs.pop(key.name, None)
        else:
            configs[key.name] = value.value
        if configs:
            self._by_group[key.group_id] = configs
        else:
            self._by_group.discard(key.group_id)

    def snapshot(self) -> dict[str, object]:
        return {
            "group_configs": {
                gid: dict(sorted(c.items())) for gid, c in sorted(self._by_group.items())
            }
        }

    def records_of_state(self) -> list[r.Record]:
        return [
            r.group_config_record(gid, name, value)
            for gid in sorted(self._by_group)
            for name, value in sorted(self._by_group[gid].items())
        ]
