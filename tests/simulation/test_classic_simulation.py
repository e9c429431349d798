"""The CI set of the simulation with classic members (issue 7 + the legacy bridge): pure classic
fleets (eager, cooperative), mixed fleets (KIP-848 + classic, every fault including
``switch-protocol``: rolling upgrades and downgrades), determinism, the client-side assignors,
and proof that a broken bridge is caught."""

from __future__ import annotations

import pytest

from coordinator.cli.simulation import main
from coordinator.sim import invariants as inv
from coordinator.sim.classic_client import Meta, assign
from coordinator.sim.simulator import ALL_FAULTS, SimParams, Simulation, parse_faults, simulate
from legacy_bridge.protocol import Subscription

PURE = parse_faults("all") - {"switch-protocol"}  # a pure classic fleet stays classic


def _ok(params: SimParams) -> Simulation:
    sim = Simulation(params)
    summary = sim.run()
    if summary.violation is not None:
        pytest.fail(summary.violation.report, pytrace=False)
    assert summary.checks == summary.steps
    assert summary.final_state == "Stable"
    assert summary.time_to_stable_ms is not None
    assert summary.time_to_stable_ms <= params.liveness_bound_ms()
    return sim


@pytest.mark.parametrize("seed", range(10))
def test_pure_classic_eager(seed: int) -> None:
    _ok(SimParams(seed=seed, steps=300, members=3, classic=3, protocol="eager", faults=PURE))


@pytest.mark.parametrize("seed", range(10))
def test_pure_classic_cooperative(seed: int) -> None:
    _ok(SimParams(seed=seed, steps=300, members=3, classic=3, protocol="cooperative", faults=PURE))


@pytest.mark.parametrize("seed", range(16))
def test_mixed_fleet_with_every_fault(seed: int) -> None:
    _ok(
        SimParams(
            seed=seed,
            steps=400,
            members=4,
            classic=2,
            protocol="mixed",
            faults=frozenset(ALL_FAULTS),
        )
    )


def test_pure_classic_group_stays_classic_and_mixed_fleets_convert() -> None:
    s = Simulation(
        SimParams(
            seed=3, steps=200, members=3, classic=3, protocol="cooperative", faults=frozenset()
        )
    )
    summary = s.run()
    assert summary.violation is None
    assert s.classic_group is not None and s.group is None
    m = Simulation(SimParams(seed=4, steps=400, members=4, classic=2, protocol="mixed"))
    summary = m.run()
    assert summary.violation is None
    assert summary.faults["switch-protocol"] > 0
    upgrades = [t for t in m.trace if "restart as a" in t]
    assert upgrades


def test_same_seed_same_trace_with_classic_members() -> None:
    params = SimParams(seed=11, steps=300, members=4, classic=2, protocol="mixed")
    a, b = Simulation(params), Simulation(params)
    sa, sb = a.run(), b.run()
    assert sa.trace_digest == sb.trace_digest and a.trace == b.trace
    assert a.store == b.store


def test_client_side_assignors() -> None:
    meta = Meta(by_name={"t0": ("A", 4), "t1": ("B", 2)}, name_of={"A": "t0", "B": "t1"})
    subs = [("m1", Subscription(topics=("t0", "t1"))), ("m2", Subscription(topics=("t0",)))]
    assert assign("range", subs, meta) == {
        "m1": (("t0", (0, 1)), ("t1", (0, 1))),
        "m2": (("t0", (2, 3)),),
    }
    # cooperative-sticky: keeps what each owns, withholds what another member still claims
    subs = [
        ("m1", Subscription(topics=("t0",), owned_partitions=(("t0", (0, 1, 2, 3)),))),
        ("m2", Subscription(topics=("t0",))),
    ]
    plan = assign("cooperative-sticky", subs, meta)
    assert plan == {"m1": (("t0", (2, 3)),), "m2": ()}  # 0 and 1 move to m2 once m1 revoked them
    subs = [
        ("m1", Subscription(topics=("t0",), owned_partitions=(("t0", (0, 1)),))),
        ("m2", Subscription(topics=("t0",))),
    ]
    assert assign("cooperative-sticky", subs, meta) == {
        "m1": (("t0", (0, 1)),),
        "m2": (("t0", (2, 3)),),
    }


def test_cli_classic_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "--seed",
                "4",
                "--steps",
                "150",
                "--members",
                "3",
                "--classic",
                "3",
                "--protocol",
                "cooperative",
                "--faults",
                "crash,lose-response",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "final group state: Stable" in out
    for bad in (["--classic", "5", "--members", "3"], ["--protocol", "lazy", "--classic", "1"]):
        with pytest.raises(SystemExit) as exc:
            main(bad)
        assert exc.value.code == 2


# ---------------------------------------------------------------------- the checks can fail


def test_broken_bridge_reload_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bug the simulator found (fixed in legacy_bridge/classic_groups.py): replaying a later
    GroupMetadata record of an existing classic group only updated ``durable``. Put back, a
    coordinator restart reloads a stale generation, caught by I4 (a replayed classic group must
    express its last record)."""
    from coordinator.core import records as r
    from legacy_bridge import classic_groups as bridge

    def replay(self, record):  # type: ignore[no-untyped-def]
        key, value = r.typed(record, r.GroupMetadataKey, r.GroupMetadataValue)
        group = self._by_group.get(key.group_id)
        if value is None:
            self._by_group.discard(key.group_id)
        elif group is None:
            self._by_group[key.group_id] = bridge.ClassicGroup.from_record(
                self._ctx.undo, key.group_id, value
            )
        else:
            group.set("durable", value)

    monkeypatch.setattr(bridge.ClassicGroups, "_replay", replay)
    s = simulate(SimParams(seed=0, steps=300, members=3, classic=3, protocol="eager", faults=PURE))
    assert s.violation is not None
    assert s.violation.name == inv.REPLAY_EQUALS_LIVE
    assert "--classic 3 --protocol eager" in s.violation.report


def test_broken_bridge_that_forgets_owned_partitions_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bridge that ignores the owned partitions of classic members inside a consumer group
    (so a cooperative member's partitions are handed out before it revoked them) is caught by
    the ownership invariants."""
    from legacy_bridge import classic_members, migration
    from legacy_bridge import protocol as proto

    original = proto.decode_subscription

    def forgetful(data: bytes):  # type: ignore[no-untyped-def]
        sub = original(data)
        return proto.Subscription(
            version=sub.version,
            topics=sub.topics,
            generation_id=sub.generation_id,
            rack_id=sub.rack_id,
        )

    monkeypatch.setattr(classic_members, "decode_subscription", forgetful)
    monkeypatch.setattr(migration, "decode_subscription", forgetful)
    caught = None
    for seed in range(10):
        s = simulate(
            SimParams(
                seed=seed,
                steps=300,
                members=4,
                classic=3,
                protocol="cooperative",
                faults=frozenset({"lose-response", "crash"}),
            )
        )
        if s.violation is not None:
            caught = s.violation
            break
    assert caught is not None
    assert caught.name in (
        inv.NO_DOUBLE_OWNERSHIP,
        inv.OWNED_KNOWN_TO_COORDINATOR,
        inv.OFFSETS_FENCED,
    )


def test_claims_from_before_a_member_is_re_created_are_stale_not_live() -> None:
    """Window F2 (docs/simulation.md), in a mixed fleet: c3 (classic, cooperative) sends a
    JoinGroup with generation 8 that is delayed; meanwhile the consumer group fences it (its
    ``classic-member-join`` timer), then the JoinGroup with its old member id reaches the
    coordinator, which creates the member anew at generation 15 (Kafka's
    classicGroupJoinToConsumerGroup) without attributing what c3 still believes it owns. Those
    claims are stale until c3's SyncGroup answer: counted, not failed (I1b failed here before),
    and the commits of them the coordinator accepts (generation only, as in Kafka) are counted,
    not judged (I6). (It was cooperative seed 2 of ``--classic 3``, which no longer reaches the
    window since a failed SyncGroup write resets its group, as Kafka's.)"""
    sim = _ok(
        SimParams(
            seed=2, steps=400, members=4, classic=2, protocol="mixed", faults=frozenset(ALL_FAULTS)
        )
    )
    summary = sim.summary
    assert any("c3 sends JoinGroup(member=member-6" in t and "gen=8" in t for t in sim.trace)
    assert any("classic-member-join timer fires for member-6" in t for t in sim.trace)
    assert any("from c3 -> JoinGroup gen=15 member=member-6" in t for t in sim.trace)
    assert 0 < summary.stale_steps <= summary.zombie_steps
    assert summary.events["commit-of-stale-claim"] > 0
    assert "of them with stale claims of re-created classic members)" in summary.render()
    assert all(not inv.stale_owned(c) for c in sim.clients)  # revoked by the end


def test_coordinator_that_forgets_a_live_classic_members_partitions_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Stale claims are only those of a re-created member: a coordinator that stops
    attributing what a live classic member is still revoking (pending revocation dropped) is
    caught by I1b, on a member with no stale claims."""
    from coordinator.core import reconciliation

    changed = reconciliation._changed

    def forgetful(member, state, epoch, assigned, pending_revocation, epochs):  # type: ignore[no-untyped-def]
        if member.classic_member_metadata is not None:
            pending_revocation = {}
        return changed(member, state, epoch, assigned, pending_revocation, epochs)

    monkeypatch.setattr(reconciliation, "_changed", forgetful)
    sim = Simulation(
        SimParams(
            seed=0,
            steps=300,
            members=3,
            classic=2,
            protocol="cooperative",
            faults=frozenset({"crash"}),
            invariants=frozenset({inv.OWNED_KNOWN_TO_COORDINATOR}),
        )
    )
    summary = sim.run()
    assert summary.violation is not None
    assert summary.violation.name == inv.OWNED_KNOWN_TO_COORDINATOR
    message = summary.violation.report.splitlines()[2]
    (flagged,) = [c for c in sim.clients if f"] {c.member_id} owns " in message]
    assert inv.is_classic(flagged)
    assert flagged.owned and not inv.stale_owned(flagged)


@pytest.mark.parametrize(
    ("seed", "protocol", "why"),
    [
        # Bridge: a downgrade wrote each member's *target* as its classic assignment, so a
        # partition still held elsewhere looked free to an upgrade right after.
        (5094, "cooperative", "downgrade keeps current ownership"),
        # Bridge: an upgrade during a cooperative rebalance dropped partitions a member was still
        # revoking (in nobody's classic assignment), and handed them to a new member.
        (5034, "cooperative", "upgrade keeps partitions being revoked"),
        (5092, "cooperative", "upgrade keeps partitions being revoked"),
    ],
)
def test_regression_seeds_for_bridge_bugs(seed: int, protocol: str, why: str) -> None:
    """Soak seeds that found the bridge bugs above (all faults, 3 classic members)."""
    _ok(
        SimParams(
            seed=seed,
            steps=400,
            members=3,
            classic=3,
            protocol=protocol,
            faults=frozenset(ALL_FAULTS),
        )
    )


@pytest.mark.parametrize("seed", [1010, 1049])
def test_regression_seeds_for_classic_client_model(seed: int) -> None:
    """Mixed fleets: a classic client fenced through a rejected commit must reset (Kafka's
    resetGenerationOnResponseError) instead of rejoining with its old id and old partitions
    (1010); eager clients of a mixed fleet offer cooperative-sticky too (1049)."""
    _ok(
        SimParams(
            seed=seed,
            steps=400,
            members=4,
            classic=2,
            protocol="mixed",
            faults=frozenset(ALL_FAULTS),
        )
    )
