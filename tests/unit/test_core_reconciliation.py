"""Pure transition tests of the member reconciliation state machine
(``coordinator.core.reconciliation.compute_next_member``; Kafka's CurrentAssignmentBuilderTest,
KIP-848 "Member Epoch - Reconciliation of the group", reference notes §1.5).

``owner_of`` is a fake: a dict (topic id, partition) -> member id; anything absent is free.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.core.errors import ErrorCode, FencedMemberEpochError
from coordinator.core.model import ConsumerGroupMember, MemberState, complete_epochs
from coordinator.core.reconciliation import compute_next_member, owns_any

T1 = "AAAAAAAAAAAAAAAAAAAAAQ"
T2 = "AAAAAAAAAAAAAAAAAAAAAg"
T3 = "AAAAAAAAAAAAAAAAAAAAAw"
ME = "member"

STABLE = MemberState.STABLE
UNREVOKED = MemberState.UNREVOKED_PARTITIONS
UNRELEASED = MemberState.UNRELEASED_PARTITIONS
UNKNOWN = MemberState.UNKNOWN


def a(*topics: tuple[str, Iterable[int]]) -> dict[str, frozenset[int]]:
    """An assignment: a((T1, [1, 2]), (T2, [3]))."""
    return {t: frozenset(ps) for t, ps in topics if ps}


def member(
    state: MemberState,
    epoch: int,
    prev: int,
    assigned: dict,
    pending: dict | None = None,
    *,
    epochs: dict[int, dict] | None = None,
) -> ConsumerGroupMember:
    """A member as replay leaves it: ``epochs`` (KIP-1251, epoch -> partitions) name when its
    partitions were assigned; by default all at its member epoch."""
    return ConsumerGroupMember(
        member_id=ME,
        subscribed_topic_names=("foo", "bar"),
        rebalance_timeout_ms=30_000,
        state=state,
        member_epoch=epoch,
        previous_member_epoch=prev,
        assigned_partitions=assigned,
        partitions_pending_revocation=pending or {},
        assignment_epochs=complete_epochs(epochs or {}, assigned, pending or {}, max(epoch, 0)),
    )


def free(_topic_id: str, _partition: int) -> str | None:
    return None


def held_by(owner: str, *topics: str):
    """owner_of: every partition of ``topics`` (all topics if none given) is held by ``owner``."""

    def owner_of(topic_id: str, _partition: int) -> str | None:
        return owner if not topics or topic_id in topics else None

    return owner_of


def owners(table: dict[tuple[str, int], str]):
    return lambda topic_id, partition: table.get((topic_id, partition))


# ------------------------------------------------------------------------ STABLE


def test_stable_at_target_epoch_returns_the_same_object() -> None:
    m = member(STABLE, 10, 9, a((T1, [1, 2, 3]), (T2, [4, 5, 6])))
    target = a((T1, [1, 2, 3]), (T2, [4, 5, 6]))
    assert compute_next_member(m, 10, target, held_by("other"), None) is m
    # Even if the target differs: a member reconciled to the target epoch is left alone.
    assert compute_next_member(m, 10, a((T1, [9])), free, {}) is m


def test_stable_to_stable_with_a_new_epoch() -> None:
    m = member(STABLE, 10, 10, a((T1, [1, 2, 3]), (T2, [4, 5, 6])))
    target = a((T1, [1, 2, 3]), (T2, [4, 5, 6]))
    # The member's own partitions are not "unreleased", whoever the index says holds them.
    # KIP-1251: kept partitions keep the epoch they were assigned at.
    assert compute_next_member(m, 11, target, held_by(ME), None) == member(
        STABLE, 11, 10, a((T1, [1, 2, 3]), (T2, [4, 5, 6])), epochs={10: m.assigned_partitions}
    )


def test_stable_to_stable_with_new_free_partitions() -> None:
    m = member(STABLE, 10, 10, a((T1, [1, 2, 3]), (T2, [4, 5, 6])))
    target = a((T1, [1, 2, 3, 4]), (T2, [4, 5, 6, 7]))
    # KIP-1251: the kept partitions at 10, the new ones at the target epoch.
    assert compute_next_member(m, 11, target, free, None) == member(
        STABLE,
        11,
        10,
        a((T1, [1, 2, 3, 4]), (T2, [4, 5, 6, 7])),
        epochs={10: m.assigned_partitions, 11: a((T1, [4]), (T2, [7]))},
    )


@pytest.mark.parametrize(
    "owned",
    [None, a((T1, [1, 2, 3]), (T2, [4, 5, 6])), a((T1, [1])), a((T2, [4]))],
    ids=["owned_unknown", "owns_all", "owns_revoked_t1", "owns_revoked_t2"],
)
def test_stable_to_unrevoked(owned: dict | None) -> None:
    m = member(STABLE, 10, 10, a((T1, [1, 2, 3]), (T2, [4, 5, 6])))
    target = a((T1, [2, 3, 4]), (T2, [5, 6, 7]))
    # Revoke first: stays at its epoch, keeps only what the target keeps; new partitions wait.
    assert compute_next_member(m, 11, target, free, owned) == member(
        UNREVOKED, 10, 10, a((T1, [2, 3]), (T2, [5, 6])), a((T1, [1]), (T2, [4]))
    )


def test_stable_to_unreleased() -> None:
    m = member(STABLE, 10, 10, a((T1, [1, 2, 3]), (T2, [4, 5, 6])))
    target = a((T1, [1, 2, 3, 4]), (T2, [4, 5, 6, 7]))
    assert compute_next_member(m, 11, target, held_by("other"), None) == member(
        UNRELEASED, 11, 10, a((T1, [1, 2, 3]), (T2, [4, 5, 6])), epochs={10: m.assigned_partitions}
    )


def test_stable_to_unreleased_gets_what_is_free_and_waits_for_the_rest() -> None:
    m = member(STABLE, 10, 10, a((T1, [1])))
    target = a((T1, [1, 2, 3]), (T2, [0, 1]))
    owner_of = owners({(T1, 3): "other", (T2, 1): "third"})
    assert compute_next_member(m, 11, target, owner_of, None) == member(
        UNRELEASED, 11, 10, a((T1, [1, 2]), (T2, [0])), epochs={10: a((T1, [1]))}
    )


def test_revoked_partitions_already_dropped_by_the_client_skip_unrevoked() -> None:
    """The client no longer reports the partitions to revoke: no UNREVOKED step (Kafka:
    testStableToUnreleasedPartitionsWithOwnedPartitionsNotHavingRevokedPartitions)."""
    m = member(STABLE, 10, 10, a((T1, [1, 2, 3]), (T2, [4, 5, 6])))
    target = a((T1, [1, 2, 3]), (T2, [4, 5, 7]))
    assert compute_next_member(m, 11, target, held_by("other", T2), {}) == member(
        UNRELEASED,
        11,
        10,
        a((T1, [1, 2, 3]), (T2, [4, 5])),
        epochs={10: a((T1, [1, 2, 3]), (T2, [4, 5]))},
    )
    # Owned lists other partitions only: the same.
    owned = a((T1, [1, 2, 3]), (T2, [4, 5]))
    assert compute_next_member(m, 11, target, free, owned) == member(
        STABLE, 11, 10, a((T1, [1, 2, 3]), (T2, [4, 5, 7])), epochs={10: owned}
    )


def test_whole_topic_removed_and_another_added() -> None:
    """Multiple topics: T1 disappears from the target (revoke), T3 appears (assign once free)."""
    m = member(STABLE, 4, 3, a((T1, [0, 1]), (T2, [0])))
    target = a((T2, [0, 1]), (T3, [0, 1, 2]))
    step = compute_next_member(m, 5, target, free, a((T1, [0, 1]), (T2, [0])))
    assert step == member(UNREVOKED, 4, 4, a((T2, [0])), a((T1, [0, 1])))
    # Acknowledged (T1 dropped): everything new is free.
    done = compute_next_member(step, 5, target, free, a((T2, [0])))
    assert done == member(STABLE, 5, 4, a((T2, [0, 1]), (T3, [0, 1, 2])), epochs={4: a((T2, [0]))})


# ------------------------------------------------------------------------ UNREVOKED_PARTITIONS


@pytest.mark.parametrize(
    "owned",
    [None, a((T1, [1, 2, 3]), (T2, [5, 6])), a((T1, [2, 3]), (T2, [4, 5, 6])), a((T2, [4]))],
    ids=["owned_unknown", "still_owns_t1_1", "still_owns_t2_4", "only_t2_4"],
)
def test_remains_unrevoked_while_revoked_partitions_are_owned(owned: dict | None) -> None:
    m = member(UNREVOKED, 10, 10, a((T1, [2, 3]), (T2, [5, 6])), a((T1, [1]), (T2, [4])))
    target = a((T1, [3]), (T2, [6]))
    assert compute_next_member(m, 12, target, free, owned) is m


def test_unrevoked_to_stable_after_ack() -> None:
    m = member(UNREVOKED, 10, 10, a((T1, [2, 3]), (T2, [5, 6])), a((T1, [1]), (T2, [4])))
    target = a((T1, [2, 3]), (T2, [5, 6]))
    owned = a((T1, [2, 3]), (T2, [5, 6]))
    assert compute_next_member(m, 11, target, free, owned) == member(
        STABLE, 11, 10, a((T1, [2, 3]), (T2, [5, 6])), epochs={10: owned}
    )


def test_unrevoked_ack_goes_to_the_target_epoch_when_nothing_more_to_revoke() -> None:
    """Acknowledging at epoch 10 with the target at 12: with nothing left to revoke the member
    lands on the target epoch at once (Kafka 4.2+, KAFKA-19974)."""
    m = member(UNREVOKED, 10, 10, a((T1, [2, 3])), a((T1, [1])))
    target = a((T1, [2, 3, 4]))
    assert compute_next_member(m, 12, target, free, a((T1, [2, 3]))) == member(
        STABLE, 12, 10, a((T1, [2, 3, 4])), epochs={10: a((T1, [2, 3]))}
    )


def test_unrevoked_to_unrevoked_when_the_target_moved_on() -> None:
    """Acknowledged epoch 10's revocation, but epoch 12 revokes more: UNREVOKED again, still at
    epoch 10 (Kafka 4.2+, KAFKA-19974: no bump while revoking; before it, 11)."""
    m = member(UNREVOKED, 10, 9, a((T1, [2, 3]), (T2, [5, 6])), a((T1, [1]), (T2, [4])))
    target = a((T1, [3]), (T2, [6]))
    owned = a((T1, [2, 3]), (T2, [5, 6]))
    # The partitions to revoke keep their epoch (KIP-1251): still committable until revoked.
    assert compute_next_member(m, 12, target, free, owned) == member(
        UNREVOKED, 10, 10, a((T1, [3]), (T2, [6])), a((T1, [2]), (T2, [5])), epochs={10: owned}
    )


def test_revocations_of_three_targets_stay_at_one_epoch_then_jump_to_the_last() -> None:
    """KAFKA-19974 end to end: STABLE at 10 owning T1-1..3; target 11 takes T1-1 (UNREVOKED at
    10); target 12 also takes T1-2 while the member still revokes T1-1 (unchanged: it has not
    acknowledged); it acknowledges T1-1 (UNREVOKED at 10, now revoking T1-2); it acknowledges
    T1-2: STABLE at 12 with T1-3, whose assignment epoch stays 10. At no step is the member at
    an epoch where another member could hold what it still holds."""
    m = member(STABLE, 10, 9, a((T1, [1, 2, 3])))
    step1 = compute_next_member(m, 11, a((T1, [2, 3])), free, a((T1, [1, 2, 3])))
    assert step1 == member(
        UNREVOKED, 10, 10, a((T1, [2, 3])), a((T1, [1])), epochs={10: a((T1, [1, 2, 3]))}
    )
    step2 = compute_next_member(step1, 12, a((T1, [3])), free, a((T1, [1, 2, 3])))
    assert step2 is step1
    step3 = compute_next_member(step2, 12, a((T1, [3])), free, a((T1, [2, 3])))
    assert step3 == member(
        UNREVOKED, 10, 10, a((T1, [3])), a((T1, [2])), epochs={10: a((T1, [2, 3]))}
    )
    step4 = compute_next_member(step3, 12, a((T1, [3])), free, a((T1, [3])))
    assert step4 == member(STABLE, 12, 10, a((T1, [3])), epochs={10: a((T1, [3]))})


def test_unrevoked_member_whose_subscription_dropped_a_topic_revokes_it_at_once() -> None:
    """Still revoking T1-1 for the target, it drops T2 from its subscription (the target lags):
    T2's partitions join what it revokes at once, at its epoch (Kafka 4.3's
    updateCurrentAssignment while UNREVOKED_PARTITIONS), not after a second round trip."""
    m = member(UNREVOKED, 10, 9, a((T1, [2]), (T2, [5, 6])), a((T1, [1])))
    owned = a((T1, [1, 2]), (T2, [5, 6]))
    step = compute_next_member(m, 11, a((T1, [2]), (T2, [5, 6])), free, owned, frozenset({T1}))
    assert step == member(
        UNREVOKED, 10, 10, a((T1, [2])), a((T1, [1]), (T2, [5, 6])), epochs={10: owned}
    )
    # Its subscription unchanged, a heartbeat that has not acknowledged yet changes nothing.
    assert compute_next_member(step, 11, a((T1, [2])), free, owned, frozenset({T1})) is step
    # Once it lets everything go: STABLE at the target epoch with what it kept.
    done = compute_next_member(step, 11, a((T1, [2])), free, a((T1, [2])), frozenset({T1}))
    assert done == member(STABLE, 11, 10, a((T1, [2])), epochs={10: a((T1, [2]))})


def test_unrevoked_epoch_never_exceeds_the_target_epoch() -> None:
    """A member that was revoking at the target epoch itself (e.g. after a static rejoin) stays
    at the target epoch."""
    m = member(UNREVOKED, 11, 10, a((T1, [2])), a((T1, [1])))
    target = a((T1, [3]))
    step = compute_next_member(m, 11, target, free, a((T1, [2])))
    assert step == member(UNREVOKED, 11, 11, {}, a((T1, [2])))


def test_unrevoked_to_unreleased() -> None:
    m = member(UNREVOKED, 11, 10, a((T1, [2, 3]), (T2, [5, 6])), a((T1, [1]), (T2, [4])))
    target = a((T1, [2, 3, 4]), (T2, [5, 6, 7]))
    owned = a((T1, [2, 3]), (T2, [5, 6]))
    assert compute_next_member(m, 12, target, held_by("other"), owned) == member(
        UNRELEASED, 12, 11, a((T1, [2, 3]), (T2, [5, 6])), epochs={11: owned}
    )


def test_partition_held_by_the_member_itself_is_free() -> None:
    """The member just acknowledged revoking T1-1 (the ownership index still names it) and the
    new target gives T1-1 back: it is handed straight back, not treated as unreleased."""
    m = member(UNREVOKED, 10, 10, a((T1, [2])), a((T1, [1])))
    target = a((T1, [1, 2]))
    owner_of = owners({(T1, 1): ME, (T1, 2): ME})
    # T1-1 is assigned anew (at 11, as Kafka), T1-2 kept (at 10).
    assert compute_next_member(m, 11, target, owner_of, a((T1, [2]))) == member(
        STABLE, 11, 10, a((T1, [1, 2])), epochs={10: a((T1, [2])), 11: a((T1, [1]))}
    )


# ------------------------------------------------------------------------ UNRELEASED_PARTITIONS


def test_unreleased_to_stable_when_released() -> None:
    m = member(UNRELEASED, 11, 11, a((T1, [2, 3]), (T2, [5, 6])))
    target = a((T1, [2, 3, 4]), (T2, [5, 6, 7]))
    assert compute_next_member(m, 11, target, free, None) == member(
        STABLE, 11, 11, a((T1, [2, 3, 4]), (T2, [5, 6, 7]))
    )


def test_unreleased_to_stable_at_a_new_epoch() -> None:
    m = member(UNRELEASED, 11, 11, a((T1, [2, 3]), (T2, [5, 6])))
    target = a((T1, [2, 3]), (T2, [5, 6]))
    assert compute_next_member(m, 12, target, held_by("other"), None) == member(
        STABLE, 12, 11, a((T1, [2, 3]), (T2, [5, 6])), epochs={11: m.assigned_partitions}
    )


def test_unreleased_stays_while_partitions_are_held_and_returns_the_same_object() -> None:
    m = member(UNRELEASED, 11, 11, a((T1, [2, 3]), (T2, [5, 6])))
    target = a((T1, [2, 3, 4]), (T2, [5, 6, 7]))
    assert compute_next_member(m, 11, target, held_by("other"), None) is m
    assert compute_next_member(m, 11, target, held_by("other"), {}) is m


def test_unreleased_partially_released() -> None:
    m = member(UNRELEASED, 11, 11, a((T1, [2, 3]), (T2, [5, 6])))
    target = a((T1, [2, 3, 4]), (T2, [5, 6, 7]))
    assert compute_next_member(m, 11, target, held_by("other", T2), None) == member(
        UNRELEASED, 11, 11, a((T1, [2, 3, 4]), (T2, [5, 6]))
    )


def test_unreleased_to_unrevoked() -> None:
    m = member(UNRELEASED, 11, 11, a((T1, [2, 3]), (T2, [5, 6])))
    target = a((T1, [3]), (T2, [6]))
    assert compute_next_member(m, 12, target, held_by("other"), None) == member(
        UNREVOKED, 11, 11, a((T1, [3]), (T2, [6])), a((T1, [2]), (T2, [5]))
    )


# ------------------------------------------------------------------------ UNKNOWN


@pytest.mark.parametrize("owned", [None, a((T1, [3]))], ids=["owned_unknown", "owns_something"])
def test_unknown_state_is_fenced(owned: dict | None) -> None:
    m = member(UNKNOWN, 11, 11, a((T1, [3]), (T2, [6])), a((T1, [2]), (T2, [5])))
    with pytest.raises(FencedMemberEpochError) as info:
        compute_next_member(m, 12, a((T1, [3]), (T2, [6])), held_by("other"), owned)
    assert info.value.code == ErrorCode.FENCED_MEMBER_EPOCH
    assert info.value.message == (
        "The consumer group member is in a unknown state. The member must abandon all its "
        "partitions and rejoin."
    )


def test_unknown_state_with_explicitly_empty_owned_jumps_to_the_target() -> None:
    m = member(UNKNOWN, 11, 11, a((T1, [3]), (T2, [6])), a((T1, [2]), (T2, [5])))
    owner_of = owners({(T1, 3): ME, (T2, 6): ME, (T1, 2): ME, (T2, 5): ME})
    assert compute_next_member(m, 12, a((T1, [3]), (T2, [6])), owner_of, {}) == member(
        STABLE, 12, 11, a((T1, [3]), (T2, [6])), epochs={11: a((T1, [3]), (T2, [6]))}
    )


# ------------------------------------------------------------------------ helpers


def test_owns_any() -> None:
    assert owns_any(None, {}) is True  # unknown counts as "still owns"
    assert owns_any({}, a((T1, [1]))) is False
    assert owns_any(a((T1, [2])), a((T1, [1]))) is False
    assert owns_any(a((T2, [1])), a((T1, [1]))) is False
    assert owns_any(a((T1, [1, 2])), a((T1, [1]))) is True


def test_inputs_are_not_mutated() -> None:
    assigned = a((T1, [1, 2, 3]))
    m = member(STABLE, 1, 0, assigned)
    target = a((T1, [3, 4]))
    owned = a((T1, [1, 2, 3]))
    snapshot = (dict(assigned), dict(target), dict(owned))
    compute_next_member(m, 2, target, free, owned)
    assert (m.assigned_partitions, target, owned) == snapshot
    assert m == member(STABLE, 1, 0, a((T1, [1, 2, 3])))


# ------------------------------------------------------------------------ property

PARTS = st.frozensets(st.integers(0, 5), max_size=6)
ASSIGNMENT = st.builds(lambda x, y: a((T1, x), (T2, y)), PARTS, PARTS)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[ConsumerGroupMember, int, dict, dict, dict | None]:
    state = draw(st.sampled_from([STABLE, UNREVOKED, UNRELEASED]))
    epoch = draw(st.integers(1, 5))
    target_epoch = draw(st.integers(epoch, epoch + 2))
    assigned = draw(ASSIGNMENT)
    pending = draw(ASSIGNMENT) if state is UNREVOKED else {}
    pending = {t: ps - assigned.get(t, frozenset()) for t, ps in pending.items()}
    pending = {t: ps for t, ps in pending.items() if ps}
    target = draw(ASSIGNMENT)
    others = draw(
        st.dictionaries(
            st.tuples(st.sampled_from([T1, T2]), st.integers(0, 5)),
            st.sampled_from(["x", "y"]),
            max_size=8,
        )
    )
    for t, ps in list(assigned.items()) + list(
        pending.items()
    ):  # the member's own partitions are its own
        for q in ps:
            others[(t, q)] = ME
    owned = draw(st.one_of(st.none(), ASSIGNMENT))
    # KIP-1251: each owned partition was assigned at some epoch up to the member's.
    epochs: dict[int, dict] = {}
    for t, ps in list(assigned.items()) + list(pending.items()):
        for q in ps:
            e = draw(st.integers(0, epoch))
            epochs.setdefault(e, {}).setdefault(t, set()).add(q)
    frozen = {e: {t: frozenset(ps) for t, ps in x.items()} for e, x in epochs.items()}
    m = member(state, epoch, epoch - 1, assigned, pending, epochs=frozen)
    return m, target_epoch, target, others, owned


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(scenarios())
def test_transition_invariants(
    scenario: tuple[ConsumerGroupMember, int, dict, dict, dict | None],
) -> None:
    m, target_epoch, target, table, owned = scenario
    nxt = compute_next_member(m, target_epoch, target, owners(table), owned)
    assert nxt.member_epoch <= target_epoch
    assert nxt.member_id == m.member_id and nxt.subscribed_topic_names == m.subscribed_topic_names
    if nxt is m:
        return
    assert nxt != m
    assert nxt.previous_member_epoch == m.member_epoch
    tgt = {(t, q) for t, ps in target.items() for q in ps}
    got = {(t, q) for t, ps in nxt.assigned_partitions.items() for q in ps}
    had = {(t, q) for t, ps in m.assigned_partitions.items() for q in ps}
    assert got <= tgt
    for t, q in got - had:  # never given a partition someone else still holds
        assert table.get((t, q)) in (None, ME)
    assert all(ps for ps in nxt.assigned_partitions.values())
    assert all(ps for ps in nxt.partitions_pending_revocation.values())
    # KIP-1251: exactly the owned partitions have an epoch, each one; a partition the member
    # had keeps its epoch, a new one is assigned at the target epoch; none is after the
    # member's epoch.
    pending_now = {(t, q) for t, ps in nxt.partitions_pending_revocation.items() for q in ps}
    at = [(e, (t, q)) for e, x in nxt.assignment_epochs.items() for t, ps in x.items() for q in ps]
    assert sorted(x for _e, x in at) == sorted(got | pending_now)
    before = {(t, q): e for e, x in m.assignment_epochs.items() for t, ps in x.items() for q in ps}
    for e, x in at:
        assert e == (before[x] if x in had else target_epoch), (x, e)
        assert e <= nxt.member_epoch
    if nxt.state is UNREVOKED:
        pend = {(t, q) for t, ps in nxt.partitions_pending_revocation.items() for q in ps}
        assert pend and pend.isdisjoint(tgt) and pend <= had
        assert got == had & tgt
        assert owns_any(owned, nxt.partitions_pending_revocation)
        # KAFKA-19974: revoking never moves the epoch, whatever state the member came from.
        assert nxt.member_epoch == m.member_epoch
    else:
        assert nxt.partitions_pending_revocation == {}
        assert nxt.member_epoch == target_epoch
        missing = tgt - got
        if nxt.state is STABLE:
            assert not missing
        else:
            assert nxt.state is UNRELEASED
            assert missing and all(table.get(x) not in (None, ME) for x in missing)
