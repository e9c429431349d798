"""The legacy bridge: Kafka's classic group protocol (JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, DescribeGroups) on top of the pure KIP-848 core.

Rules: pure like ``coordinator.core`` (no IO, no clock, no randomness; a test enforces the
imports). The core never imports the bridge: the bridge plugs into the shard as its classic-group
component (``ClassicGroups``, which implements the core's ``ClassicGroupSupport``), and
``coordinator.factory.new_shard`` is the one place that puts the two together.

Modules: ``classic_groups`` (the component: classic groups, their records, timers and requests,
routing by group type), ``classic_group`` (one group's state; its legal transitions as data),
``classic_members`` (classic members inside consumer groups), ``migration`` (online upgrade and
downgrade), ``protocol`` (the embedded consumer protocol codec: the opaque metadata/assignment
bytes of ``protocol_type == "consumer"``), ``messages`` (requests and responses), ``common``
(shared checks, topic name/id conversion, timer kinds). See ``docs/legacy_bridge.md``.
"""
