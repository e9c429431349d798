"""The CI set of the simulation with classic members (issue 7 + the legacy bridge): pure classic
fleets (eager, cooperative), mixed fleets (KIP-848 + classic, every fault including
``switch-protocol``: rolling upgrades and downgrades), determinism, the client-side assignors,
and proof that a broken bridge is caught."""

from __future__ import annotations

from dataclasses import replace

import pytest

from coordinator.cli.simulation import main
from coordinator.sim import invariants as inv
from coordinator.sim.classic_client import Meta, assign
from coordinator.sim.convergence import why_not_converged
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


def _caught(params: SimParams, name: str, text: str) -> None:
    """The run fails invariant ``name`` with ``text`` in its report."""
    s = simulate(params)
    assert s.violation is not None
    assert s.violation.name == name
    assert text in s.violation.report


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


# ------------------------------------------- I2 across restarts: generations never written


SEED_656 = SimParams(
    seed=656, steps=300, members=3, classic=3, protocol="cooperative", faults=frozenset(ALL_FAULTS)
)


def test_seed_656_a_restart_forgets_a_join_phase_generation_and_its_holders_are_fenced() -> None:
    """Seed 656 (``kip848 simulate --seed 656 --steps 300 --classic 3 --protocol cooperative``):
    the coordinator restarts while the classic group is CompletingRebalance at generation 4, which
    no record holds (Kafka writes a non-empty group's generation only with its leader's
    assignment). The reload is Stable at generation 3 while c1 and c2 hold 4: allowed by I2 only
    because the store never held 4, and the next request carrying it is refused
    (ILLEGAL_GENERATION); the group converges. I2 failed here while any answer — c2's superseded
    JoinGroup's REBALANCE_IN_PROGRESS — counted as handing out a generation."""
    sim = _ok(SEED_656)
    trace = sim.trace
    forgot = next(
        i for i, t in enumerate(trace) if "forgotten: c1-member-4 (generation 4 > 3)" in t
    )
    assert "c2-member-5 (generation 4 > 3)" in trace[forgot]
    assert "fault: coordinator restarts; reloaded 151 records" in trace[forgot + 1]
    fenced = next(i for i, t in enumerate(trace) if "at epoch 4 rejected: ILLEGAL_GENERATION" in t)
    assert fenced > forgot and "c1 commit of c1" in trace[fenced]
    assert sim.summary.events["generation-forgotten-by-restart"] >= 2


def test_a_coordinator_that_accepts_a_forgotten_generation_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The refined I2 still fails a coordinator that does not fence a forgotten generation: a
    bridge that takes a Heartbeat, SyncGroup or commit of a newer generation than its group's
    as the current one is caught on seed 656 (c1's commit at generation 4 after the reload)."""
    from legacy_bridge import classic_groups as bridge

    member_at, check_commit = (
        bridge.ClassicGroups._member_at,
        bridge.ClassicGroups.check_offset_commit,
    )

    def lenient_member_at(self, group_id, member_id, instance_id, generation):  # type: ignore[no-untyped-def]
        group = self._by_group.get(group_id)
        if group is not None and generation > group.generation:
            generation = group.generation
        return member_at(self, group_id, member_id, instance_id, generation)

    def lenient_commit(self, req, transactional=False):  # type: ignore[no-untyped-def]
        group = self._by_group[req.group_id]
        if req.generation_id_or_member_epoch > group.generation:
            req = replace(req, generation_id_or_member_epoch=group.generation)
        return check_commit(self, req, transactional)

    monkeypatch.setattr(bridge.ClassicGroups, "_member_at", lenient_member_at)
    monkeypatch.setattr(bridge.ClassicGroups, "check_offset_commit", lenient_commit)
    _caught(
        SEED_656,
        inv.EPOCHS_BOUNDED,
        "c1-member-4's OffsetCommit carried generation 4, forgotten in a coordinator restart "
        "(the group is at 3), and was answered error 0",
    )


def test_a_generation_the_coordinator_never_held_is_still_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only a generation a restart forgot is exempt: a bridge whose JoinGroup answers carry a
    generation one ahead of its group's is caught by I2 without any restart."""
    from legacy_bridge import classic_groups, classic_join

    original = classic_join.join_response

    def ahead(group, member):  # type: ignore[no-untyped-def]
        response = original(group, member)
        return replace(response, generation_id=response.generation_id + 1)

    monkeypatch.setattr(classic_join, "join_response", ahead)
    monkeypatch.setattr(classic_groups, "join_response", ahead)
    s = simulate(
        SimParams(
            seed=0, steps=100, members=3, classic=3, protocol="cooperative", faults=frozenset()
        )
    )
    assert s.violation is not None
    assert s.violation.name == inv.EPOCHS_BOUNDED
    assert "believes generation 2 > generation 1" in s.violation.report


def test_a_fetch_behind_a_write_that_is_lost_is_fetched_again() -> None:
    """Mixed seed 23 (``--classic 3 --protocol mixed``): c0 newly owns t0-1 and resumes from an
    OffsetFetch that saw topic t0's deletion (its offsets gone) while that write was still
    outstanding; the write failed and the deletion was rolled back, and c0 went on from offset
    0 — its next commit moved t0-1 back from 74 to 15 (I6). The runtime answers a fetch only
    once the write behind it is durable (an error otherwise), so the simulated client now
    fetches again when that write is lost (failed, or a restart first)."""
    sim = _ok(
        SimParams(
            seed=23, steps=300, members=3, classic=3, protocol="mixed", faults=frozenset(ALL_FAULTS)
        )
    )
    assert any("the deletion of topic t0 was not written" in t for t in sim.trace)
    assert sim.summary.events["fetch-behind-a-lost-write"] > 0


# ------------------------------------ seeds of the --classic 3 sweeps where Kafka is the model


def _sweep(seed: int, protocol: str) -> SimParams:
    """A seed of the sweeps ``kip848 simulate --seed N --steps 300 --classic 3 --protocol P``."""
    return SimParams(
        seed=seed, steps=300, members=3, classic=3, protocol=protocol, faults=frozenset(ALL_FAULTS)
    )


SEED_414 = _sweep(414, "mixed")


def test_seed_414_a_static_member_that_missed_a_rebalance_is_a_zombie_in_the_upgraded_group() -> (
    None
):
    """Mixed seed 414: c0 (static, eager) is still revoking t0-3 when the classic join phase
    completes without it; Kafka's completeClassicGroupJoin keeps a static member that did not
    rejoin, so the leader c2 assigns with c0's old subscription and takes t0-3 itself. Then c1
    comes back as a KIP-848 client and the group is upgraded: c0's member is carried at the
    group's generation 2 while c0 still holds generation 1. It is fenced by generation (its
    commit of t0-3 is refused ILLEGAL_GENERATION, as Kafka's validateMemberEpoch for classic
    members), so its claim is a zombie's, counted, not live: I1 failed here while a classic
    member of a consumer group counted as live whatever its generation."""
    sim = _ok(SEED_414)
    trace = sim.trace
    slow = next(i for i, t in enumerate(trace) if "fault: c0 revokes {t0#0:3} slowly" in t)
    joined = next(i for i, t in enumerate(trace) if "JoinGroup gen=2 member=c2-member-5" in t)
    upgraded = next(i for i, t in enumerate(trace) if "c1 starts as m1.2" in t)
    fenced = next(
        i
        for i, t in enumerate(trace)
        if "c0 commit of c0 at epoch 1 rejected: ILLEGAL_GENERATION" in t
    )
    assert slow < joined < upgraded < fenced
    assert "leader=c2-member-5 members=2" in trace[joined]  # c0 kept, not rejoined
    assigned = next(i for i, t in enumerate(trace) if "corr=19 from c2 -> SyncGroup" in t)
    assert joined < assigned < upgraded
    assert "assignment={'t0': (0, 1, 2, 3)" in trace[assigned]  # t0-3 to the leader
    assert sim.summary.zombie_steps > 0


def test_a_coordinator_that_takes_a_classic_members_stale_generation_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What makes the zombie of seed 414 a zombie: a consumer group that accepts a classic
    member's offset commit at any generation lets c0 commit t0-3, which c2 owns (I6)."""
    from coordinator.core import offsets

    check = offsets.check_commit_epoch

    def lenient(group, member_id, epoch, partitions):  # type: ignore[no-untyped-def]
        member = group.members.get(member_id)
        if member is not None and member.classic_member_metadata is not None:
            epoch = member.member_epoch
        return check(group, member_id, epoch, partitions)

    monkeypatch.setattr(offsets, "check_commit_epoch", lenient)
    _caught(
        SEED_414,
        inv.OFFSETS_FENCED,
        "by inst-0-member-4 (epoch 1) accepted while the coordinator attributes it to c2-member-5",
    )


def test_a_group_downgraded_by_a_static_replacement_keeps_the_metadata_it_was_made_with() -> None:
    """Mixed seed 801 (before the static upgrade changed the sweeps' trajectories; no seed of
    mixed 1-2000 meets this window since): c0 came back as a classic static member in place of
    its KIP-848 self, the group's last KIP-848 member, so the consumer group became a classic
    group at once (Kafka 4.0+, KAFKA-17317), Stable without a rebalance; then t1 was deleted and
    re-created under a new id. Every client's last JoinGroup came from the consumer group,
    where nobody leads: no client knows it leads the classic group, so nobody watches the
    metadata and nobody rejoins (Java's ConsumerCoordinator, as on Kafka). For the generation a
    downgrade made, I5 expects the consumer group's metadata it was made with
    (``convergence.known_topics``) — until its leader has assigned with metadata of its own."""
    from types import SimpleNamespace

    from coordinator.sim.classic_client import ClassicClient
    from coordinator.sim.convergence import known_topics

    registry = SimpleNamespace(
        topics={
            "t0": SimpleNamespace(topic_id="T0", num_partitions=4),
            "t1": SimpleNamespace(topic_id="T1-new", num_partitions=4),
        }
    )
    leader = ClassicClient(index=0, topics=("t0", "t1"), member_id="L")
    g = SimpleNamespace(
        downgraded={7: (("t0", ("T0", 4)), ("t1", ("T1-old", 4)))}, classic_plans={}
    )
    sim = SimpleNamespace(coord=SimpleNamespace(registry=registry), clients_of=lambda _g: [leader])
    classic = SimpleNamespace(leader_id="L", generation=7)
    made_with = {"t0": ("T0", 4), "t1": ("T1-old", 4)}
    assert known_topics(sim, g, None, classic) == made_with
    # A later generation, or a leader that assigned (and so watches the metadata): the cluster's.
    current = {"t0": ("T0", 4), "t1": ("T1-new", 4)}
    assert known_topics(sim, g, None, SimpleNamespace(leader_id="L", generation=8)) == current
    leader.assigned_snapshot = (("t0", ("T0", 4)),)
    assert known_topics(sim, g, None, classic) == current


def test_a_classic_join_that_does_not_refresh_the_metadata_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The exception for a consumer group of classic members (known_topics) lasts only until a
    request that refreshes the metadata runs:
    a consumer group whose classic JoinGroups never refresh it stays on a topic's old id after
    a classic member joined (mixed seed 48, which passes on the real bridge: I5)."""
    from coordinator.core.consumer_groups import ConsumerGroups

    seed = _sweep(48, "mixed")
    assert simulate(seed).violation is None
    join = ConsumerGroups.join_as_classic

    def unrefreshed(self, req, classic, now_ms):  # type: ignore[no-untyped-def]
        subscriptions = self._subscriptions
        subscriptions.refresh = lambda result, group: False
        try:
            return join(self, req, classic, now_ms)
        finally:
            del subscriptions.refresh

    monkeypatch.setattr(ConsumerGroups, "join_as_classic", unrefreshed)
    _caught(seed, inv.LIVENESS, "unowned partitions")


SEED_111 = _sweep(111, "eager")


def test_seed_111_a_returning_static_leader_keeps_the_assignment_of_older_metadata() -> None:
    """Eager seed 111 (613 before a static member's return stopped rebalancing a Stable group
    for its metadata alone): t0 grows to 6 partitions after the leader assigned generation 5
    with 4, then the static leader c0 crashes and comes back; the group is Stable, so the
    coordinator answers its JoinGroup with the group's assignment and skip_assignment (KIP-814,
    as Kafka). Java's onLeaderElected then assigns nothing and takes the metadata it has now as
    its snapshot, so a change from before its return is seen by nobody: t0-4 and t0-5 stay
    unassigned until the next rebalance, in Kafka too. I5 expects the partitions of the
    metadata the group's assignment was computed with while its leader skipped."""
    sim = _ok(SEED_111)
    trace = sim.trace
    grew = max(i for i, t in enumerate(trace) if "fault: topic t0 grows to 6 partitions" in t)
    back = next(i for i, t in enumerate(trace) if "JoinGroup gen=5 member=inst-0-member-19" in t)
    assert grew < back
    assert "leader=inst-0-member-19 members=3" in trace[back]
    assert any("c0 sends SyncGroup(gen=5 assignments=0)" in t for t in trace[back:])
    classic = sim.classic_group
    assert classic is not None and classic.generation == 5
    assert sim.clients[0].skipped_assignment == 5
    planned = dict(sim.classic_plans[5])
    assert planned["t0"][1] == 4 and sim.coord.registry.topics["t0"].num_partitions == 6


def test_a_static_leader_whose_assignment_is_ignored_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The exception of seed 111 holds only for a leader told to skip the assignment: a bridge
    that answers the returning static leader without skip_assignment (the leader computes an
    assignment for the new metadata that the Stable group ignores: KAFKA-13435, which KIP-814
    fixed) leaves t0-4 and t0-5 unassigned while the leader believes it assigned them (I5)."""
    import dataclasses

    from legacy_bridge import classic_join

    def without_skip(obj, **changes):  # type: ignore[no-untyped-def]
        changes.pop("skip_assignment", None)
        return dataclasses.replace(obj, **changes)

    monkeypatch.setattr(classic_join, "replace", without_skip)
    _caught(
        SEED_111,
        inv.LIVENESS,
        "unowned partitions [('AAAAAAAAAAAAAAAAAAAADQ', 4), ('AAAAAAAAAAAAAAAAAAAADQ', 5)]",
    )


# ------------------------ a static member back with other protocol metadata (no rebalance)


def _names(sim: Simulation, topic: str) -> list[tuple[str, int]]:
    """The partitions of ``topic`` the clients own, by name (as classic consumers own them)."""
    return sorted(
        (topic, p)
        for c in sim.clients
        for t, ps in c.owned.items()
        if sim.id_name[t] == topic
        for p in ps
    )


SEED_1402 = _sweep(1402, "cooperative")


def test_seed_1402_a_skipped_generation_expects_only_partitions_that_still_exist() -> None:
    """Cooperative seed 1402: generation 6 was assigned with t0 at 7 partitions; t0 is then
    deleted and re-created with 4, and the static leader c0 comes back under a new member id
    with other metadata (it owns nothing now). The group's protocol stays, so it is not
    rebalanced (Kafka's updateStaticMemberThenRebalanceOrCompleteJoin) and c0 skips the
    assignment (KIP-814): the group keeps generation 6's assignment, which names t0-4..t0-6,
    partitions that no longer exist. Every partition t0 has now is owned once, by name; I5
    failed here while it expected the 7 partitions of the metadata generation 6 was assigned
    with."""
    sim = _ok(SEED_1402)
    trace = sim.trace
    recreated = max(i for i, t in enumerate(trace) if "topic t0 re-created with 4" in t)
    back = next(i for i, t in enumerate(trace) if "JoinGroup gen=6 member=inst-0-member-20" in t)
    assert recreated < back and "leader=inst-0-member-20 members=3" in trace[back]
    classic = sim.classic_group
    assert classic is not None and classic.generation == 6
    assert sim.clients[0].skipped_assignment == 6
    planned = dict(sim.classic_plans[6])
    t0 = sim.coord.registry.topics["t0"]
    assert planned["t0"][1] == 7 and t0.num_partitions == 4 and planned["t0"][0] != t0.topic_id
    owned = _names(sim, "t0")
    assert [x for x in owned if x[1] < 4] == [("t0", p) for p in range(4)]
    assert [x for x in owned if x[1] >= 4] == [("t0", 4), ("t0", 6)]  # listed, not judged
    # Still caught: an existing partition that nobody owns.
    c1 = sim.clients[1]
    held = {t: ps for t, ps in c1.owned.items() if sim.id_name[t] == "t0"}
    (tid,) = held
    c1.owned = {**c1.owned, tid: held[tid] - {3}}
    assert why_not_converged(sim) == f"unowned partitions [('{planned['t0'][0]}', 3)]"


SEED_1687 = _sweep(1687, "cooperative")


def test_seed_1687_a_partition_held_back_for_a_replaced_static_member_waits() -> None:
    """Cooperative seed 1687: the leader c1 assigns generation 6 while the static member c0's
    old incarnation (inst-0-member-8, process gone) still claims t0-0..3 in its subscription;
    balancing moves t0-0 away and, as KIP-429 has it, holds it back until its owner revokes it
    and rejoins. c0 comes back under a new member id owning nothing; the group's protocol
    stays, so there is no rebalance (Kafka's updateStaticMemberThenRebalanceOrCompleteJoin):
    c0 takes t0-1..3, revokes nothing, so it does not rejoin (Java's onJoinComplete rejoins
    only after revoking), and the leader sees no metadata change. t0-0 waits for the next
    rebalance, in Kafka too; I5 failed here while it expected it owned."""
    sim = _ok(SEED_1687)
    classic = sim.classic_group
    assert classic is not None and classic.generation == 6
    withheld = sim.groups[0].classic_withheld[6]
    assert withheld == {("t0", 0): ("inst-0-member-8",)}
    assert "inst-0-member-8" not in classic.members
    assert sim.clients[0].member_id == "inst-0-member-19"
    assert "inst-0-member-19" in classic.members
    assert _names(sim, "t0") == [("t0", 1), ("t0", 2), ("t0", 3)]
    # Still caught: the same partition while a claimant is still a member (it will revoke and
    # rejoin), and any other partition nobody owns.
    t0 = sim.coord.registry.topics["t0"].topic_id
    sim.groups[0].classic_withheld[6] = {("t0", 0): ("inst-0-member-8", "c1-member-16")}
    assert why_not_converged(sim) == f"unowned partitions [('{t0}', 0)]"
    sim.groups[0].classic_withheld[6] = withheld
    assert why_not_converged(sim) == ""
    c0 = sim.clients[0]
    c0.owned = {t0: c0.owned[t0] - {2}}
    assert why_not_converged(sim) == f"unowned partitions [('{t0}', 2)]"


def test_a_static_member_back_without_its_assignment_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bridge whose static member back under a new member id does not take its old
    incarnation's assignment (Kafka's replaceStaticMember keeps it) leaves what c0 held to
    nobody: caught on seed 1687 (I5), the held-back t0-0 aside."""
    import dataclasses

    from legacy_bridge import classic_join

    def without_assignment(obj, **changes):  # type: ignore[no-untyped-def]
        if "is_new" in changes:
            changes["assignment"] = b""
        return dataclasses.replace(obj, **changes)

    monkeypatch.setattr(classic_join, "replace", without_assignment)
    t0 = "AAAAAAAAAAAAAAAAAAAAEg"
    _caught(SEED_1687, inv.LIVENESS, f"unowned partitions [('{t0}', 1), ('{t0}', 2), ('{t0}', 3)]")


def test_seed_1705_a_deleted_topic_named_by_a_late_assignment() -> None:
    """Cooperative seed 1705, the window of seed 1402 another way: c1's SyncGroup of
    generation 6 is answered after t0 was deleted, so it lists t0-4 as nobody's (Java's client
    would keep it by name; t0 comes back with 4 partitions, 0..4 no longer); the static leader
    returns and skips. Every partition t0 has now is owned."""
    sim = _ok(_sweep(1705, "cooperative"))
    assert sim.clients[0].skipped_assignment == 6
    assert dict(sim.classic_plans[6])["t0"][1] == 5
    assert _names(sim, "t0") == [("t0", p) for p in range(4)]


# ------------------------------------------- a static member upgraded in place (KAFKA-17228)


@pytest.mark.parametrize(
    ("seed", "protocol", "why"),
    [
        # Bridge: an upgrade by a static member replacing its classic incarnation kept the
        # classic leader's stale assignment (Kafka's conversion leaves the metadata to the
        # converting heartbeat, which bumps the epoch).
        (1, "mixed", "the upgrade computes a new target"),
        # Checker: the new member inherits the replaced one's server assignor, as in Kafka.
        (355, "mixed", "an inherited server assignor"),
        # Client model: an answer to a JoinGroup sent before a commit's reset is discarded.
        (1058, "cooperative", "a join answer after a reset is discarded"),
        # Checker: a leader that has yet to notice a metadata change has not converged.
        (622, "eager", "a pending metadata check"),
        # Checker: a JoinGroup from g parked for g+2 does not make the claims at g live.
        (175, "cooperative", "a static member that missed a rebalance"),
    ],
)
def test_sweep_seeds_judged_after_the_static_upgrade(seed: int, protocol: str, why: str) -> None:
    """`--classic 3` sweep seeds that failed once a consumer-protocol static member replaced
    its classic incarnation at once (docs/simulation.md, "A static member upgraded in place")."""
    del why
    _ok(_sweep(seed, protocol))


def test_a_join_answer_after_a_commit_reset_is_discarded() -> None:
    """Java's coordinator is UNJOINED after a commit's ILLEGAL_GENERATION: the answer to the
    JoinGroup in flight is discarded and the client joins again, reporting what it owns now."""
    from coordinator.sim.classic_client import ClassicClient
    from coordinator.sim.client import JOINING, MEMBER
    from legacy_bridge import messages as lm

    meta = Meta(by_name={"t0": ("A", 4)}, name_of={"A": "t0"})
    c = ClassicClient(index=1, topics=("t0",), protocol="cooperative")
    c.member_id, c.generation, c.phase, c.owned = "m", 3, MEMBER, {"A": frozenset({1})}
    assert c.request_rejoin() == ["send"]
    c.inflight, c.inflight_kind = 7, "join"
    assert c.on_commit_error(22) == []  # ILLEGAL_GENERATION: reset, the join still in flight
    assert (c.generation, c.owned, c.member_id) == (-1, {}, "m")
    joined = lm.JoinGroupResponse(generation_id=4, protocol_name="range", member_id="m")
    assert c.on_response(joined, meta) == ["rejoin"]
    assert (c.phase, c.generation, c.join_response) == (JOINING, -1, None)
    # The next answer is taken.
    c.inflight, c.inflight_kind = 8, "join"
    assert c.on_response(joined, meta) == ["send"]
    assert c.generation == 4


def test_a_join_parked_for_the_next_generation_does_not_make_claims_live() -> None:
    """classic_claim_live: a client one generation behind its classic group is live while the
    answer to its JoinGroup from that generation is on its way (its member holds no join token),
    not while that JoinGroup waits at the next barrier (cooperative seed 175)."""
    from types import SimpleNamespace

    sub = Subscription(topics=("t0",), generation_id=6)
    from legacy_bridge.protocol import encode_subscription

    member = SimpleNamespace(protocols=(("cooperative-sticky", encode_subscription(sub)),))
    classic = SimpleNamespace(generation=7, members={"m": member})
    client = SimpleNamespace(member_id="m", generation=6)
    member.join_token = None  # answered with generation 7: on its way
    assert inv.classic_claim_live(classic, client)
    member.join_token = 12  # came in after 7 completed: waits for generation 8
    assert not inv.classic_claim_live(classic, client)
    client.generation = 7
    assert inv.classic_claim_live(classic, client)
