"""The push rule (coordinator/core/push.py): what a member is told, and when."""

from __future__ import annotations

from coordinator.core.push import MemberView, push_due

T = "AAAAAAAAAAAAAAAAAAAAAQ"


def view(
    target: list[int],
    released: list[int] | None = None,
    group_epoch: int = 5,
    assignment_epoch: int = 5,
) -> MemberView:
    return MemberView(
        member_epoch=5,
        group_epoch=group_epoch,
        assignment_epoch=assignment_epoch,
        assigned={T: frozenset({0})},
        target={T: frozenset(target)} if target else {},
        released={T: frozenset(released)} if released else {},
    )


def test_the_first_view_of_a_stream_is_always_pushed() -> None:
    assert push_due(view([0]), None)


def test_a_new_target_is_pushed() -> None:
    assert push_due(view([0, 1]), view([0]))
    assert push_due(view([]), view([0]))


def test_a_release_is_pushed_once() -> None:
    before = view([0, 1])
    released = view([0, 1], released=[1])
    assert push_due(released, before)
    assert not push_due(released, released)  # the same release again: nothing new
    assert not push_due(before, released)  # it was taken: nothing to do


def test_a_due_assignment_is_pushed_once_per_group_epoch() -> None:
    due = view([0], group_epoch=6)
    assert due.assignment_due
    assert push_due(due, view([0]))
    assert not push_due(due, due)
    assert push_due(view([0], group_epoch=7), due)
    assert not push_due(view([0]), view([0]))  # steady: silence
