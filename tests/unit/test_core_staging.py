"""Staging (coordinator/core/staging.py): a component's state read as it was while records are
replayed into a copy, then the copy shown at once; and what the three components that compose
it — the cluster log's group configs, transactional ids' groups, ACLs and SCRAM credentials —
answer while staged (``Partitions._apply_in_parts`` stages them while it applies an append in
parts: every read sees it whole or not at all)."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest
from test_security_authorizer_index import BINDINGS, contents

from coordinator.core import records as r
from coordinator.core.commands import SequentialIds
from coordinator.core.group_configs import SESSION_TIMEOUT_CONFIG, ClusterGroupConfigs
from coordinator.core.staging import Staging
from coordinator.core.timeline import TDict, UndoLog
from coordinator.core.topics import TopicRegistry
from coordinator.core.transactional_ids import ClusterTransactionalIds
from coordinator.factory import group_configs_of, new_cluster, transactional_ids_of
from coordinator.security.acl_index import AclIndex
from coordinator.security.acls import AclBindingFilter
from coordinator.security.metadata import SecurityMetadata
from coordinator.security.scram import ScramMechanism


class State:
    """A component's state in the tests of :class:`Staging` alone: a map, and a count of the
    copies made of it (``Staging`` copies only at a stage)."""

    copies = 0

    def __init__(self, items: dict[str, int] | None = None) -> None:
        self.items = dict(items or {})

    def copy(self) -> State:
        State.copies += 1
        return State(self.items)


@pytest.fixture(autouse=True)
def no_copies_yet() -> None:
    State.copies = 0


def test_unstaged_replays_go_to_the_live_state_and_unstage_changes_nothing() -> None:
    staging: Staging[State] = Staging(State.copy)
    live = State({"a": 1})
    assert not staging.staged
    assert staging.target(live) is live
    staging.target(live).items["b"] = 2
    assert live.items == {"a": 1, "b": 2}
    shown, replaced = staging.unstage(live)
    assert shown is live and replaced == []
    assert State.copies == 0


def test_a_stage_sends_replays_to_a_copy_shown_whole_at_unstage() -> None:
    staging: Staging[State] = Staging(State.copy)
    live = State({"a": 1, "b": 2})
    staging.stage(live)
    assert staging.staged and State.copies == 1
    target = staging.target(live)
    assert target is not live
    target.items["c"] = 3
    del target.items["a"]
    assert live.items == {"a": 1, "b": 2}  # what reads see: as at the stage
    assert staging.target(live) is target  # every replay goes to the same copy
    shown, replaced = staging.unstage(live)
    assert shown is target and shown.items == {"b": 2, "c": 3}
    assert replaced == [live] and replaced[0].items == {"a": 1, "b": 2}
    assert not staging.staged
    assert staging.target(shown) is shown  # unstaged again: replays go to what is shown
    assert staging.unstage(shown) == (shown, [])  # a second unstage: nothing to swap


def test_staging_twice_keeps_the_copy_and_what_was_replayed_into_it() -> None:
    staging: Staging[State] = Staging(State.copy)
    live = State({"a": 1})
    staging.stage(live)
    target = staging.target(live)
    target.items["b"] = 2
    staging.stage(live)
    assert State.copies == 1 and staging.target(live) is target
    shown, replaced = staging.unstage(live)
    assert shown.items == {"a": 1, "b": 2} and replaced == [live]


def test_a_stage_with_nothing_replayed_shows_a_copy_equal_to_the_live_state() -> None:
    staging: Staging[State] = Staging(State.copy)
    live = State({"a": 1})
    staging.stage(live)
    shown, replaced = staging.unstage(live)
    assert shown is not live and shown.items == live.items and replaced == [live]


def test_staging_keeps_no_reference_to_what_it_replaced() -> None:
    """The caller drops what an unstage replaced when it will (``Partitions._drop_replaced``,
    one piece a loop step): nothing else holds it."""
    staging: Staging[State] = Staging(State.copy)
    live = State({"a": 1})
    staging.stage(live)
    staging.target(live).items["b"] = 2
    old = weakref.ref(live)
    live, replaced = staging.unstage(live)
    assert replaced[0] is old()
    del replaced
    gc.collect()
    assert old() is None
    assert live.items == {"a": 1, "b": 2}


def test_tdicts_staged_on_an_undo_log_copy_without_logging() -> None:
    """As the cluster components stage their maps: ``UndoLog.new_dict`` copies (C-level, on
    the same undo log); the copy logs nothing, and replays into it are logged as the live
    map's are."""
    undo = UndoLog()
    live = undo.new_dict({"a": 1})
    mark = undo.mark()
    staging: Staging[TDict] = Staging(undo.new_dict)
    staging.stage(live)
    assert len(undo._entries) == mark
    staged = staging.target(live)
    assert type(staged) is TDict and staged == {"a": 1} and staged is not live
    staged["b"] = 2
    assert live == {"a": 1}
    undo.rollback(mark)
    assert staged == {"a": 1}


# ------------------------------------------------------------------ the three components


def cluster() -> tuple[TopicRegistry, SecurityMetadata]:
    registry, security = new_cluster(SequentialIds())
    registry.undo.enabled = False  # the committed copy: durable records only, never rolled back
    return registry, security


def config(group: str, value: str | None) -> r.Record:
    return r.config_record(r.CONFIG_RESOURCE_GROUP, group, SESSION_TIMEOUT_CONFIG, value)


def config_reads(configs: ClusterGroupConfigs) -> tuple[Any, ...]:
    """Every read of the group configs: a shard's heartbeat (``overrides``), DescribeConfigs
    (``effective``), the component as a mapping, its snapshot and records."""
    return (
        configs.overrides("g1"),
        configs.overrides("g2"),
        configs.effective("g1")[SESSION_TIMEOUT_CONFIG],
        configs.effective("g2")[SESSION_TIMEOUT_CONFIG],
        {gid: dict(configs[gid]) for gid in configs},
        len(configs),
        "g2" in configs,
        configs.snapshot(),
        configs.records_of_state(),
    )


def test_group_configs_are_read_as_of_the_stage_until_unstaged() -> None:
    registry, _ = cluster()
    configs = group_configs_of(registry)
    registry.replay(config("g1", "45000"))
    before = config_reads(configs)
    configs.stage()
    registry.replay(config("g1", None))
    registry.replay(config("g2", "50000"))
    assert config_reads(configs) == before
    configs.stage()  # staged again: the copy keeps what was replayed
    assert configs.overrides("g1") == {SESSION_TIMEOUT_CONFIG: "45000"}
    replaced = configs.unstage()
    assert replaced == [{"g1": {SESSION_TIMEOUT_CONFIG: "45000"}}]
    assert configs.overrides("g1") is None
    assert configs.overrides("g2") == {SESSION_TIMEOUT_CONFIG: "50000"}
    assert {gid: dict(configs[gid]) for gid in configs} == {"g2": {SESSION_TIMEOUT_CONFIG: "50000"}}
    assert configs.records_of_state() == [config("g2", "50000")]
    assert configs.unstage() == []  # not staged: nothing replaced
    registry.replay(config("g3", "46000"))  # unstaged: replayed into what reads see
    assert configs.overrides("g3") == {SESSION_TIMEOUT_CONFIG: "46000"}


def tx(tid: str, group: str | None, active_ms: int = 1_000) -> r.Record:
    if group is None:
        return r.transactional_id_group_record(tid, None)
    return r.transactional_id_group_record(tid, group, active_ms)


def tx_reads(ids: ClusterTransactionalIds) -> tuple[Any, ...]:
    """Every read of the transactional ids' groups: the transactions' routing (``group_of``),
    whether a mapping is due (``needs_write``), the listing, its snapshot and records."""
    return (
        ids.group_of("t1"),
        ids.group_of("t2"),
        ids.needs_write("t1", "g1", 1_500),
        ids.mapped(),
        len(ids),
        ids.snapshot(),
        ids.records_of_state(),
    )


def test_transactional_ids_groups_are_read_as_of_the_stage_until_unstaged() -> None:
    registry, _ = cluster()
    ids = transactional_ids_of(registry)
    registry.replay(tx("t1", "g1"))
    before = tx_reads(ids)
    assert before[:5] == ("g1", None, False, [("t1", "g1")], 1)
    ids.stage()
    registry.replay(tx("t1", None))
    registry.replay(tx("t2", "g2"))
    assert tx_reads(ids) == before
    ids.stage()
    replaced = ids.unstage()
    assert replaced == [{"t1": r.TransactionalIdGroupValue(group_id="g1", active_ms=1_000)}]
    assert tx_reads(ids)[:5] == (None, "g2", True, [("t2", "g2")], 1)
    assert ids.records_of_state() == [tx("t2", "g2")]
    assert ids.unstage() == []


def credential(n: int) -> r.Record:
    value = r.UserScramCredentialValue(
        salt=b"s%d" % n, stored_key=b"k%d" % n, server_key=b"v%d" % n, iterations=4096 + n
    )
    return r.scram_credential_record("alice", int(ScramMechanism.SCRAM_SHA_256), value)


def security_reads(sec: SecurityMetadata) -> tuple[Any, ...]:
    """Every read of the ACLs and credentials: the authorizer's (the generation, the index),
    SASL/SCRAM's, the Describe requests', the snapshot and records."""
    cred = sec.scram_credential("alice", ScramMechanism.SCRAM_SHA_256)
    return (
        sec.acl_generation,
        contents(sec.acl_index()),
        sorted(map(str, sec.acls())),
        sec.acl_count(),
        sorted(map(str, sec.describe_acls(AclBindingFilter()))),
        None if cred is None else cred.iterations,
        sec.users(),
        sec.describe_scram_credentials(None),
        sec.snapshot(),
        sec.records_of_state(),
    )


def test_acls_and_credentials_are_read_as_of_the_stage_until_unstaged() -> None:
    """(With the authorizer's index and readers coming and going while staged:
    test_security_staging.py.)"""
    registry, sec = cluster()
    registry.replay(r.acl_record(BINDINGS[0].key(), True))
    registry.replay(credential(1))
    index = sec.acl_index()
    before = security_reads(sec)
    sec.stage()
    registry.replay(r.acl_record(BINDINGS[0].key(), False))
    registry.replay(r.acl_record(BINDINGS[1].key(), True))
    registry.replay(credential(2))
    assert security_reads(sec) == before
    assert sec.acl_index() is index  # the index shown: not rebuilt, not changed
    sec.stage()
    replaced = sec.unstage()
    # The maps replaced, a piece at a time (each dropped in its own loop step): the ACLs,
    # the credentials, the generation, the index.
    assert [type(o).__name__ for o in replaced] == ["TDict", "TDict", "TDict", "AclIndexer"]
    assert list(replaced[0].values()) == [BINDINGS[0]]  # type: ignore[attr-defined]
    after = security_reads(sec)
    assert after[0] > before[0]
    assert after[2] == [str(BINDINGS[1])] and after[5] == 4098
    assert after[1] == contents(AclIndex([BINDINGS[1]]))
    assert sec.unstage() == []


def test_staging_the_security_metadata_needs_a_copy_never_rolled_back() -> None:
    _, sec = new_cluster(SequentialIds())  # its undo log on: a command's writes roll back
    with pytest.raises(RuntimeError, match="never rolled back"):
        sec.stage()
    assert sec.unstage() == []
