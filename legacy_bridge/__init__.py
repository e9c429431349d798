"""The legacy bridge: Kafka's classic group protocol (JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, DescribeGroups) on top of the pure KIP-848 core.

Rules: pure like ``coordinator.core`` (no IO, no clock, no randomness; a test enforces the
imports). ``protocol`` is the embedded consumer protocol codec (the opaque metadata/assignment
bytes of ``protocol_type == "consumer"``). The classic group state machine and the handlers for
classic members inside consumer groups plus the online upgrade/downgrade follow in the modules
named in ``docs/legacy_bridge.md``.
"""
